//! # image — the hardened host image
//!
//! Builds the immutable image that runs `hostd`, computes its reference measurements for the
//! verifier in `attest`, and boots it under qemu (issue 12). What exists so far:
//! - [`measure`]: the PCR 11 prediction for a unified kernel image, systemd-measure's
//!   algorithm, checked against systemd-measure itself.
#![forbid(unsafe_code)]

pub mod apt;
pub mod build;
pub mod cpio;
pub mod lock;
pub mod measure;
pub mod modules;
pub mod provision;
pub mod rootfs;
pub mod tool;
pub mod uki;
