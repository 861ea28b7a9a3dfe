//! The kernel's side: `<linux/fscrypt.h>` structures and request numbers, and the one
//! `ioctl(2)` call. Everything `unsafe` in the crate is here.
//!
//! The structures are copied field by field from the UAPI header (kernel 6.x); the layout
//! assertions below fail the build if one drifts from the size the request number encodes.

use std::io;
use std::os::fd::{AsFd, AsRawFd};

pub(crate) const KEY_IDENTIFIER_SIZE: usize = 16;
/// The raw key size used here: 64 bytes, what AES-256-XTS needs (`FSCRYPT_MAX_KEY_SIZE`).
pub(crate) const RAW_KEY_SIZE: usize = 64;
pub(crate) const KEY_SPEC_TYPE_IDENTIFIER: u32 = 2;
pub(crate) const POLICY_V2: u8 = 2;
pub(crate) const MODE_AES_256_XTS: u8 = 1;
pub(crate) const MODE_AES_256_CTS: u8 = 4;
pub(crate) const POLICY_FLAGS_PAD_32: u8 = 0x03;
pub(crate) const KEY_REMOVAL_STATUS_FLAG_FILES_BUSY: u32 = 0x1;
pub(crate) const KEY_REMOVAL_STATUS_FLAG_OTHER_USERS: u32 = 0x2;
pub(crate) const KEY_STATUS_ABSENT: u32 = 1;
pub(crate) const KEY_STATUS_PRESENT: u32 = 2;
pub(crate) const KEY_STATUS_INCOMPLETELY_REMOVED: u32 = 3;

/// `_IOC(dir, 'f', nr, size)` as the generic (x86, arm64) encoding has it.
const fn ioc(dir: u32, nr: u32, size: usize) -> u32 {
    (dir << 30) | ((size as u32) << 16) | ((b'f' as u32) << 8) | nr
}
const IOC_READ: u32 = 2;
const IOC_READ_WRITE: u32 = 3;

/// `_IOR('f', 19, struct fscrypt_policy_v1)`: the number names the v1 size; the kernel reads
/// the version byte first and then the whole v2 structure.
pub(crate) const FS_IOC_SET_ENCRYPTION_POLICY: u32 = ioc(IOC_READ, 19, 12);
/// `_IOWR('f', 22, __u8[9])`.
pub(crate) const FS_IOC_GET_ENCRYPTION_POLICY_EX: u32 = ioc(IOC_READ_WRITE, 22, 9);
pub(crate) const FS_IOC_ADD_ENCRYPTION_KEY: u32 =
    ioc(IOC_READ_WRITE, 23, size_of::<fscrypt_add_key_arg>());
pub(crate) const FS_IOC_REMOVE_ENCRYPTION_KEY: u32 =
    ioc(IOC_READ_WRITE, 24, size_of::<fscrypt_remove_key_arg>());
pub(crate) const FS_IOC_GET_ENCRYPTION_KEY_STATUS: u32 =
    ioc(IOC_READ_WRITE, 26, size_of::<fscrypt_get_key_status_arg>());

/// `struct fscrypt_policy_v2`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(non_camel_case_types)]
pub(crate) struct fscrypt_policy_v2 {
    pub(crate) version: u8,
    pub(crate) contents_encryption_mode: u8,
    pub(crate) filenames_encryption_mode: u8,
    pub(crate) flags: u8,
    pub(crate) reserved: [u8; 4],
    pub(crate) master_key_identifier: [u8; KEY_IDENTIFIER_SIZE],
}

/// `struct fscrypt_get_policy_ex_arg`; the union is only ever read as a v2 policy after
/// checking `version` (its first byte in every member).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(non_camel_case_types)]
pub(crate) struct fscrypt_get_policy_ex_arg {
    pub(crate) policy_size: u64,
    pub(crate) policy: fscrypt_policy_v2,
}

/// `struct fscrypt_key_specifier`; the union `u` is 32 bytes, of which an identifier uses 16.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(non_camel_case_types)]
pub(crate) struct fscrypt_key_specifier {
    pub(crate) type_: u32,
    pub(crate) reserved: u32,
    pub(crate) u: [u8; 32],
}

/// `struct fscrypt_add_key_arg` without its flexible `raw[]` tail.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(non_camel_case_types)]
pub(crate) struct fscrypt_add_key_arg {
    pub(crate) key_spec: fscrypt_key_specifier,
    pub(crate) raw_size: u32,
    pub(crate) key_id: u32,
    pub(crate) reserved: [u32; 8],
}

/// `struct fscrypt_add_key_arg` followed by its `raw[]` bytes, as the kernel reads them
/// (`raw` starts right after the 80-byte header: no padding, alignment 4). The raw key is
/// wiped when this is dropped.
#[repr(C)]
pub(crate) struct AddKeyWithRaw {
    pub(crate) arg: fscrypt_add_key_arg,
    pub(crate) raw: [u8; RAW_KEY_SIZE],
}

impl Drop for AddKeyWithRaw {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.raw);
    }
}

/// `struct fscrypt_remove_key_arg`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(non_camel_case_types)]
pub(crate) struct fscrypt_remove_key_arg {
    pub(crate) key_spec: fscrypt_key_specifier,
    pub(crate) removal_status_flags: u32,
    pub(crate) reserved: [u32; 5],
}

/// `struct fscrypt_get_key_status_arg`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(non_camel_case_types)]
pub(crate) struct fscrypt_get_key_status_arg {
    pub(crate) key_spec: fscrypt_key_specifier,
    pub(crate) reserved: [u32; 6],
    pub(crate) status: u32,
    pub(crate) status_flags: u32,
    pub(crate) user_count: u32,
    pub(crate) out_reserved: [u32; 13],
}

// The sizes `<linux/fscrypt.h>` gives these structures (and so the request numbers).
const _: () = assert!(size_of::<fscrypt_policy_v2>() == 24);
const _: () = assert!(size_of::<fscrypt_get_policy_ex_arg>() == 32);
const _: () = assert!(size_of::<fscrypt_key_specifier>() == 40);
const _: () = assert!(size_of::<fscrypt_add_key_arg>() == 80);
const _: () = assert!(size_of::<AddKeyWithRaw>() == 80 + 64);
const _: () = assert!(size_of::<fscrypt_remove_key_arg>() == 64);
const _: () = assert!(size_of::<fscrypt_get_key_status_arg>() == 128);
const _: () = assert!(FS_IOC_SET_ENCRYPTION_POLICY == 0x800c_6613);
const _: () = assert!(FS_IOC_ADD_ENCRYPTION_KEY == 0xc050_6617);
const _: () = assert!(FS_IOC_REMOVE_ENCRYPTION_KEY == 0xc040_6618);
const _: () = assert!(FS_IOC_GET_ENCRYPTION_KEY_STATUS == 0xc080_661a);

/// Marks the argument structures above: plain old data of the exact layout the request
/// number they go with expects.
///
/// # Safety
/// Only for `#[repr(C)]` types made of integers and integer arrays, whose size is the one
/// the kernel reads and writes for the requests they are passed with.
pub(crate) unsafe trait IoctlArg {}

// SAFETY: each is `#[repr(C)]`, integers only, sizes asserted above to match the header.
unsafe impl IoctlArg for fscrypt_policy_v2 {}
// SAFETY: as above.
unsafe impl IoctlArg for fscrypt_get_policy_ex_arg {}
// SAFETY: as above; `raw` follows the header without padding (size asserted).
unsafe impl IoctlArg for AddKeyWithRaw {}
// SAFETY: as above.
unsafe impl IoctlArg for fscrypt_remove_key_arg {}
// SAFETY: as above.
unsafe impl IoctlArg for fscrypt_get_key_status_arg {}

/// `ioctl(fd, request, arg)`; the errno on failure.
pub(crate) fn ioctl<T: IoctlArg>(fd: impl AsFd, request: u32, arg: &mut T) -> io::Result<()> {
    let fd = fd.as_fd();
    // SAFETY: `fd` is a borrowed, open descriptor for the whole call; `arg` is an exclusive
    // reference to a live value whose layout is the one `request` expects (the `IoctlArg`
    // contract), so the kernel reads and writes only memory we own, and only for the call.
    // `as _`: the request parameter is `c_ulong` on glibc and `c_int` on musl.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), request as _, std::ptr::from_mut(arg)) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}
