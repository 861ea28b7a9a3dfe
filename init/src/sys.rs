//! The `ioctl(2)` calls: device-mapper's, and the block layer's re-read of a partition table.
//! Everything `unsafe` in the crate is here.

#![allow(unsafe_code)]

use crate::dm::HEADER_LEN;
use std::io;
use std::os::fd::{AsFd, AsRawFd};

/// `ioctl(fd, request, buf)` for a device-mapper request built by [`crate::dm::request`]:
/// `buf` starts with a `struct dm_ioctl` whose `data_size` is `buf.len()`.
pub(crate) fn dm_ioctl(fd: impl AsFd, request: u32, buf: &mut [u8]) -> io::Result<()> {
    let data_size = buf
        .get(12..16)
        .and_then(|b| b.try_into().ok())
        .map(u32::from_ne_bytes);
    if buf.len() < HEADER_LEN || data_size != u32::try_from(buf.len()).ok() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "device-mapper buffer whose header does not give its size",
        ));
    }
    let fd = fd.as_fd();
    // SAFETY: `fd` is open for the whole call. The kernel copies the header in, checks it,
    // and reads or writes at most `data_size` bytes from the buffer's start; `data_size` is
    // the length of `buf` (checked above), an exclusively borrowed live slice, so it touches
    // only memory we own, and only during the call. `as _`: `c_ulong` on glibc, `c_int` on
    // musl.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), request as _, buf.as_mut_ptr()) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `BLKRRPART`: `_IO(0x12, 95)`.
const BLKRRPART: u32 = 0x125f;

/// Has the kernel re-read the partition table of the whole disk open as `fd`.
pub(crate) fn reread_partitions(fd: impl AsFd) -> io::Result<()> {
    let fd = fd.as_fd();
    // SAFETY: BLKRRPART takes no argument and touches no user memory; `fd` is open for the
    // whole call. `as _`: `c_ulong` on glibc, `c_int` on musl.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), BLKRRPART as _, 0) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}
