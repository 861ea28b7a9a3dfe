//! # image — the hardened host image
//!
//! Builds the immutable image that runs `hostd`, computes its reference measurements for the
//! verifier in `attest`, and boots it under qemu. Filled in by the image issue.
#![forbid(unsafe_code)]
