//! # sovereign-init — the image's initrd
//!
//! The UKI's initrd is this one program, the boot modules and the C library it links. It
//! runs as the kernel's `/init` and does what the root needs before systemd can start it:
//!
//! 1. mounts `/proc`, `/sys` and a devtmpfs `/dev`;
//! 2. loads the modules listed in [`boot::MODULE_LIST`] (storage, erofs, dm-verity, the
//!    TPM, efivarfs) in `modules.dep` order ([`kmod`]); the kernel checks their signatures;
//! 3. extends PCR 11 with `enter-initrd` when systemd-stub measured the boot ([`phase`]);
//! 4. finds the root's data and hash devices by the UUIDs the measured command line gives
//!    ([`cmdline`], [`probe`]);
//! 5. creates the read-only dm-verity device `root` from the hash device's superblock and the
//!    command line's root hash ([`verity`], [`dm`]), and mounts it read-only;
//! 6. extends PCR 11 with `leave-initrd`;
//! 7. mounts the root's `/var` (memory) and the node's state disk at `/var/lib/hostd`: opened
//!    with the key the TPM unseals under PCRs 4, 11 and 12 or, on the first boot, partitioned ([`gpt`]),
//!    sealed and formatted ([`state`], [`luks`]), and then copies the node's provisioning
//!    disk onto it when the state disk has no config yet ([`provision`]);
//! 8. moves the kernel filesystems into the root, frees the initramfs and executes the root's
//!    `/sbin/init` (systemd) as PID 1.
//!
//! Why not systemd in the initrd too, as before: under emulation (the VM test's TCG, one
//! vCPU) a systemd initrd took about 16 s, udev's coldplug and a second systemd start among
//! it, and made the UKI 10 MB larger, which the firmware loads and hashes twice. The phases
//! measured and the device names are systemd's, so PCR 11 and the root's units are as they
//! were. A failed step is an [`boot::InitError`]; the program prints it and powers off.

#![deny(unsafe_code)]

pub mod boot;
pub mod cmdline;
pub mod dm;
pub mod gpt;
pub mod kmod;
pub mod luks;
pub mod phase;
mod poll;
pub mod probe;
pub mod provision;
pub mod state;
mod sys;
pub mod verity;
