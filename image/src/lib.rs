//! # image — the hardened host image
//!
//! Builds the immutable image that runs `hostd` and computes its reference measurements for
//! the verifier in `attest` (docs/image.md). The pieces, in build order:
//! - [`lock`] and [`apt`]: the pinned Debian packages, fetched and hash-checked;
//! - [`rootfs`] and [`modules`]: the unpacked tree, configured without running any package
//!   script, with only the kernel modules the node needs;
//! - [`cpio`]: the initrd as a deterministic newc archive;
//! - [`uki`]: systemd-stub plus kernel, os-release, command line and initrd, reproducibly;
//! - [`measure`]: the PCR 11 prediction (systemd-measure's algorithm, checked against it);
//! - [`build`]: the whole build, the root (erofs + dm-verity), the ESP and the manifest;
//! - [`provision`]: a node's provisioning disk; [`tool`]: running the Debian tools.
#![forbid(unsafe_code)]

pub mod apt;
pub mod build;
pub mod cpio;
pub mod initrd;
pub mod lock;
pub mod measure;
pub mod modules;
pub mod provision;
pub mod rootfs;
pub mod tool;
pub mod uki;
