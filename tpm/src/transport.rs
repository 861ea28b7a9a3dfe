//! How command bytes reach a TPM and responses come back.

use crate::TpmError;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;
use zeroize::Zeroizing;

/// The kernel's TPM device with its in-kernel resource manager: each open file has its own
/// view of transient objects, flushed when it closes, so hostd cannot leak TPM memory.
pub const DEFAULT_DEVICE: &str = "/dev/tpmrm0";

/// Largest response accepted; TPMs answer at most their TPM_PT_MAX_RESPONSE_SIZE (4 KiB on
/// common parts).
const MAX_RESPONSE: usize = 64 << 10;

/// Size of a response header: tag (2), responseSize (4), responseCode (4).
const HEADER: usize = 10;

/// One TPM command in, its response out (whole byte strings, header included).
pub trait Transport {
    /// Send `command` and return the complete response. A response may hold a secret
    /// (TPM2_Unseal's): the caller wipes what is returned, and an implementation wipes any
    /// buffer of its own it does not return.
    fn transact(&mut self, command: &[u8]) -> Result<Vec<u8>, TpmError>;
}

/// A TPM character device (`/dev/tpmrm0`): one write per command, one read per response.
#[derive(Debug)]
pub struct Device {
    file: std::fs::File,
}

impl Device {
    /// Open a TPM device read-write.
    pub fn open(path: &Path) -> Result<Self, TpmError> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|source| TpmError::Open {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(Self { file })
    }
}

impl Transport for Device {
    fn transact(&mut self, command: &[u8]) -> Result<Vec<u8>, TpmError> {
        let io = |op| move |source| TpmError::Io { op, source };
        self.file
            .write_all(command)
            .map_err(io("writing a command to the TPM device"))?;
        // The driver hands over the whole response in one read; wiped unless returned.
        let mut buf = Zeroizing::new(vec![0u8; MAX_RESPONSE]);
        let n = self
            .file
            .read(&mut buf)
            .map_err(io("reading the TPM device's response"))?;
        buf.truncate(n);
        check_length(&buf)?;
        // Moved out, not copied: the one buffer goes to the caller, which wipes it.
        Ok(std::mem::take(&mut *buf))
    }
}

/// swtpm's data channel on a unix socket (`swtpm socket --server type=unixio,path=…`): raw
/// TPM command bytes, as on a device; the response is framed by its own header's size.
#[derive(Debug)]
pub struct SwtpmSocket {
    stream: UnixStream,
    path: PathBuf,
}

impl SwtpmSocket {
    /// Connect; reads and writes time out after `timeout` so a wedged swtpm cannot hang
    /// the caller.
    pub fn connect(path: &Path, timeout: Duration) -> Result<Self, TpmError> {
        let open = |source| TpmError::Open {
            path: path.to_path_buf(),
            source,
        };
        let stream = UnixStream::connect(path).map_err(open)?;
        stream.set_read_timeout(Some(timeout)).map_err(open)?;
        stream.set_write_timeout(Some(timeout)).map_err(open)?;
        Ok(Self {
            stream,
            path: path.to_path_buf(),
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Transport for SwtpmSocket {
    fn transact(&mut self, command: &[u8]) -> Result<Vec<u8>, TpmError> {
        let io = |op| move |source| TpmError::Io { op, source };
        self.stream
            .write_all(command)
            .map_err(io("sending a command to swtpm"))?;
        let mut header = [0u8; HEADER];
        self.stream
            .read_exact(&mut header)
            .map_err(io("reading swtpm's response header"))?;
        let size = declared_size(&header)?;
        // Allocated at its final size (never grown, so never copied) and wiped unless returned.
        let mut response = Zeroizing::new(vec![0u8; size]);
        response[..HEADER].copy_from_slice(&header);
        self.stream
            .read_exact(&mut response[HEADER..])
            .map_err(io("reading swtpm's response"))?;
        Ok(std::mem::take(&mut *response))
    }
}

/// The responseSize field of a header, checked against the limits.
fn declared_size(response: &[u8]) -> Result<usize, TpmError> {
    let malformed = |reason: String| TpmError::Malformed {
        command: "response",
        reason,
    };
    let field = response
        .get(2..6)
        .ok_or_else(|| malformed(format!("{} bytes, shorter than a header", response.len())))?;
    let size = u32::from_be_bytes([field[0], field[1], field[2], field[3]]) as usize;
    if !(HEADER..=MAX_RESPONSE).contains(&size) {
        return Err(malformed(format!("declared size {size} out of range")));
    }
    Ok(size)
}

/// A response read in one piece must be exactly as long as it says.
fn check_length(response: &[u8]) -> Result<(), TpmError> {
    let size = declared_size(response)?;
    if size != response.len() {
        return Err(TpmError::Malformed {
            command: "response",
            reason: format!("declares {size} bytes, {} read", response.len()),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declared_sizes_are_bounded() {
        assert!(declared_size(&[0x80, 0x01, 0, 0, 0, 10, 0, 0, 0, 0]).is_ok());
        assert!(declared_size(&[0x80, 0x01, 0, 0, 0, 9, 0, 0, 0, 0]).is_err());
        assert!(declared_size(&[0x80, 0x01, 0, 1, 0, 1, 0, 0, 0, 0]).is_err());
        assert!(declared_size(&[0x80, 0x01, 0]).is_err());
        assert!(check_length(&[0x80, 0x01, 0, 0, 0, 11, 0, 0, 0, 0]).is_err());
    }

    #[test]
    fn a_missing_device_is_an_open_error_naming_it() {
        let err = Device::open(Path::new("/nonexistent/tpmrm0")).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/tpmrm0"), "{err}");
    }
}
