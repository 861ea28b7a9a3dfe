//! device-mapper, through its control device's ioctls (`<linux/dm-ioctl.h>`, interface
//! version 4): create a device, load a read-only table into it, resume it; remove it again
//! when that fails part way. What
//! libdevmapper does for `veritysetup open`, without its udev handshake (there is no udev
//! here) or its libraries.
//!
//! Requests are byte buffers laid out as the header specifies (native endianness); the
//! ioctl itself is in [`crate::sys`].

use crate::verity::{DevNum, Table};
use std::fs::File;
use std::io;
use std::path::Path;
use zeroize::{Zeroize, Zeroizing};

/// `sizeof(struct dm_ioctl)`.
pub const HEADER_LEN: usize = 312;
/// `sizeof(struct dm_target_spec)`.
const SPEC_LEN: usize = 40;
/// Room for the kernel's answers (it writes status back into the same buffer).
const BUFFER_LEN: usize = 16 << 10;

/// `DM_READONLY_FLAG`: the table's devices are opened read-only.
pub const READONLY: u32 = 1 << 0;
/// `DM_BUFFER_FULL_FLAG`: the kernel's answer did not fit.
const BUFFER_FULL: u32 = 1 << 8;

/// `DM_DEV_CREATE_CMD`, `DM_DEV_REMOVE_CMD`, `DM_DEV_SUSPEND_CMD` (without the suspend
/// flag: resume) and `DM_TABLE_LOAD_CMD`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// Create an empty device.
    Create = 3,
    /// Remove a device (and its tables).
    Remove = 4,
    /// Resume: make the loaded table live.
    Resume = 6,
    /// Load a table (inactive until resumed).
    LoadTable = 9,
}

impl Command {
    /// `_IOWR(0xfd, nr, struct dm_ioctl)`.
    pub fn request(self) -> u32 {
        (3 << 30) | ((HEADER_LEN as u32) << 16) | (0xfd << 8) | self as u32
    }
}

/// Why a device-mapper request failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DmError {
    /// A name or UUID longer than the header holds, or with a NUL.
    #[error("device-mapper {what} {value:?} does not fit the request header")]
    Field {
        /// `name` or `uuid`.
        what: &'static str,
        /// The value.
        value: String,
    },
    /// A target's parameters too long for a request.
    #[error("a device-mapper table of {0} bytes is too long")]
    TableTooLong(usize),
    /// The control device could not be opened.
    #[error("opening {path}")]
    Open {
        /// `/dev/mapper/control`.
        path: String,
        #[source]
        source: io::Error,
    },
    /// The kernel refused a request.
    #[error("device-mapper {command:?} of {name}")]
    Ioctl {
        /// The request.
        command: Command,
        /// The device's name.
        name: String,
        #[source]
        source: io::Error,
    },
    /// The kernel's answer is not one the header describes.
    #[error("device-mapper answered {command:?} with a malformed header")]
    Answer {
        /// The request.
        command: Command,
    },
}

fn put_str(
    buf: &mut [u8],
    at: usize,
    room: usize,
    what: &'static str,
    value: &str,
) -> Result<(), DmError> {
    if value.len() >= room || value.contains('\0') {
        // A target's parameters may hold a volume key: never into an error's text.
        let value = match what {
            "table" => format!("<{} bytes, not shown>", value.len()),
            _ => value.to_owned(),
        };
        return Err(DmError::Field { what, value });
    }
    buf[at..at + value.len()].copy_from_slice(value.as_bytes());
    Ok(())
}

/// A request: the header for device `name` (and `uuid`, for [`Command::Create`]) with
/// `flags`, followed by `targets` as `dm_target_spec`s, each with its NUL-terminated
/// parameters padded to 8 bytes.
///
/// A dm-crypt table's parameters hold the volume key: the copies made on the way are wiped
/// when dropped and allocated at their final size (a grown buffer would leave a copy in the
/// old one). The caller wipes the request returned.
pub fn request(
    name: &str,
    uuid: Option<&str>,
    flags: u32,
    targets: &[(&str, &Table)],
) -> Result<Vec<u8>, DmError> {
    let spec_len = |t: &Table| SPEC_LEN + (t.params.len() + 1).next_multiple_of(8);
    let total = targets.iter().map(|(_, t)| spec_len(t)).sum();
    let mut specs = Zeroizing::new(Vec::with_capacity(total));
    for (kind, table) in targets {
        let params_len = spec_len(table) - SPEC_LEN;
        let mut spec = Zeroizing::new(vec![0u8; SPEC_LEN + params_len]);
        spec[8..16].copy_from_slice(&table.sectors.to_ne_bytes());
        let next = u32::try_from(SPEC_LEN + params_len)
            .map_err(|_| DmError::TableTooLong(table.params.len()))?;
        spec[20..24].copy_from_slice(&next.to_ne_bytes());
        put_str(&mut spec, 24, 16, "target type", kind)?;
        put_str(&mut spec, SPEC_LEN, params_len, "table", &table.params)?;
        specs.extend_from_slice(&spec);
    }
    if HEADER_LEN + specs.len() > BUFFER_LEN {
        return Err(DmError::TableTooLong(specs.len()));
    }
    let mut buf = vec![0u8; BUFFER_LEN];
    for (i, v) in [4u32, 0, 0].iter().enumerate() {
        buf[i * 4..i * 4 + 4].copy_from_slice(&v.to_ne_bytes());
    }
    buf[12..16].copy_from_slice(&(BUFFER_LEN as u32).to_ne_bytes());
    buf[16..20].copy_from_slice(&(HEADER_LEN as u32).to_ne_bytes());
    buf[20..24].copy_from_slice(&(targets.len() as u32).to_ne_bytes());
    buf[28..32].copy_from_slice(&flags.to_ne_bytes());
    put_str(&mut buf, 48, 128, "name", name)?;
    if let Some(uuid) = uuid {
        put_str(&mut buf, 176, 129, "uuid", uuid)?;
    }
    buf[HEADER_LEN..HEADER_LEN + specs.len()].copy_from_slice(&specs);
    Ok(buf)
}

/// The device number in an answer's header (`huge_encode_dev`'s encoding).
pub fn answered_dev(buf: &[u8], command: Command) -> Result<DevNum, DmError> {
    let bad = || DmError::Answer { command };
    let flags = u32::from_ne_bytes(
        buf.get(28..32)
            .ok_or_else(bad)?
            .try_into()
            .map_err(|_| bad())?,
    );
    if flags & BUFFER_FULL != 0 {
        return Err(bad());
    }
    let dev = u64::from_ne_bytes(
        buf.get(40..48)
            .ok_or_else(bad)?
            .try_into()
            .map_err(|_| bad())?,
    );
    let major = ((dev & 0xfff00) >> 8) as u32;
    let minor = ((dev & 0xff) | ((dev >> 12) & 0xfff00)) as u32;
    Ok(DevNum { major, minor })
}

/// The control device, `/dev/mapper/control`.
#[derive(Debug)]
pub struct Control {
    file: File,
}

impl Control {
    /// Opens the control device (devtmpfs makes it when `dm_mod` loads).
    pub fn open(path: &Path) -> Result<Control, DmError> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|source| DmError::Open {
                path: path.display().to_string(),
                source,
            })?;
        Ok(Control { file })
    }

    fn call_in_place(&self, command: Command, name: &str, buf: &mut [u8]) -> Result<(), DmError> {
        crate::sys::dm_ioctl(&self.file, command.request(), buf).map_err(|source| DmError::Ioctl {
            command,
            name: name.to_owned(),
            source,
        })
    }

    /// Removes the device `name`: a dm-crypt device holds its key in the kernel until then,
    /// and its name is taken (a later create fails with EEXIST).
    pub fn remove(&self, name: &str) -> Result<(), DmError> {
        remove_with(&mut |c, n, b| self.call_in_place(c, n, b), name)
    }

    /// Creates a read-only device `name` with `table` live (create, load, resume); returns
    /// its device number.
    pub fn create_readonly(
        &self,
        name: &str,
        uuid: &str,
        target: &str,
        table: &Table,
    ) -> Result<DevNum, DmError> {
        self.create(name, uuid, target, table, READONLY)
    }

    /// Creates a device `name` with `table` live (create, load with `flags`, resume); returns
    /// its device number. The table load's buffer is wiped after the call: a dm-crypt table
    /// carries the volume key.
    ///
    /// A device created but not made live (the load or the resume refused) is removed again,
    /// so a retry finds the name free; the error returned is the one that stopped it.
    pub fn create(
        &self,
        name: &str,
        uuid: &str,
        target: &str,
        table: &Table,
        flags: u32,
    ) -> Result<DevNum, DmError> {
        let mut call = |c, n: &str, b: &mut [u8]| self.call_in_place(c, n, b);
        create_with(&mut call, name, uuid, (target, table), flags)
    }
}

/// How a request reaches the kernel: [`Control`]'s ioctl, or a test's stand-in.
type Call<'a> = dyn FnMut(Command, &str, &mut [u8]) -> Result<(), DmError> + 'a;

/// [`Control::create`] over `call`.
fn create_with(
    call: &mut Call,
    name: &str,
    uuid: &str,
    (target, table): (&str, &Table),
    flags: u32,
) -> Result<DevNum, DmError> {
    let mut created = request(name, Some(uuid), 0, &[])?;
    call(Command::Create, name, &mut created)?;
    let live = answered_dev(&created, Command::Create).and_then(|dev| {
        let mut load = request(name, None, flags, &[(target, table)])?;
        let loaded = call(Command::LoadTable, name, &mut load);
        load.zeroize();
        loaded?;
        call(Command::Resume, name, &mut request(name, None, 0, &[])?)?;
        Ok(dev)
    });
    if live.is_err() {
        // Best effort: the error worth reporting is the one that stopped the create.
        let _ = remove_with(call, name);
    }
    live
}

/// [`Control::remove`] over `call`.
fn remove_with(call: &mut Call, name: &str) -> Result<(), DmError> {
    call(Command::Remove, name, &mut request(name, None, 0, &[])?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_numbers_are_the_headers() {
        // DM_DEV_CREATE, DM_DEV_SUSPEND and DM_TABLE_LOAD as strace prints them.
        assert_eq!(Command::Create.request(), 0xc138_fd03);
        assert_eq!(Command::Remove.request(), 0xc138_fd04);
        assert_eq!(Command::Resume.request(), 0xc138_fd06);
        assert_eq!(Command::LoadTable.request(), 0xc138_fd09);
    }

    #[test]
    fn a_table_load_lays_out_header_and_target() {
        let table = Table {
            sectors: 800,
            params: "1 254:16 254:32 4096 4096 100 1 sha256 ab -".into(),
        };
        let buf = request("root", None, READONLY, &[("verity", &table)]).unwrap();
        let u32_at = |at: usize| u32::from_ne_bytes(buf[at..at + 4].try_into().unwrap());
        assert_eq!((u32_at(0), u32_at(4), u32_at(8)), (4, 0, 0));
        assert_eq!(u32_at(12) as usize, buf.len());
        assert_eq!(u32_at(16) as usize, HEADER_LEN);
        assert_eq!(u32_at(20), 1, "one target");
        assert_eq!(u32_at(28), READONLY);
        assert_eq!(&buf[48..53], b"root\0");
        let spec = &buf[HEADER_LEN..];
        assert_eq!(u64::from_ne_bytes(spec[0..8].try_into().unwrap()), 0);
        assert_eq!(u64::from_ne_bytes(spec[8..16].try_into().unwrap()), 800);
        let next = u32::from_ne_bytes(spec[20..24].try_into().unwrap()) as usize;
        assert_eq!(next % 8, 0);
        assert_eq!(
            next,
            SPEC_LEN + (table.params.len() + 1).next_multiple_of(8)
        );
        assert_eq!(&spec[24..31], b"verity\0");
        assert_eq!(&spec[40..40 + table.params.len()], table.params.as_bytes());
        assert_eq!(spec[40 + table.params.len()], 0);
    }

    /// Runs [`create_with`] against a kernel stand-in that refuses `failing`; returns the
    /// error and the commands sent, with the name each named.
    fn create_refusing(failing: Command) -> (Result<DevNum, DmError>, Vec<(Command, String)>) {
        let mut sent = Vec::new();
        let mut call = |command: Command, name: &str, buf: &mut [u8]| {
            sent.push((command, name.to_owned()));
            if command == failing {
                return Err(DmError::Ioctl {
                    command,
                    name: name.to_owned(),
                    source: io::Error::from_raw_os_error(libc::EINVAL),
                });
            }
            // The kernel answers with the device number of a created device.
            buf[40..48].copy_from_slice(&((254u64 << 8) | 3).to_ne_bytes());
            Ok(())
        };
        let table = Table {
            sectors: 8,
            params: "aes-xts-plain64 00 0 254:1 0".into(),
        };
        let result = create_with(&mut call, "sovstate", "CRYPT-x", ("crypt", &table), 0);
        (result, sent)
    }

    #[test]
    fn a_device_not_made_live_is_removed_and_the_first_error_returned() {
        use Command::*;
        for (failing, expected) in [
            (LoadTable, vec![Create, LoadTable, Remove]),
            (Resume, vec![Create, LoadTable, Resume, Remove]),
            // Nothing was created: nothing to remove.
            (Create, vec![Create]),
        ] {
            let (result, sent) = create_refusing(failing);
            assert!(
                matches!(&result, Err(DmError::Ioctl { command, .. }) if *command == failing),
                "{result:?}"
            );
            let commands: Vec<_> = sent.iter().map(|(c, _)| *c).collect();
            assert_eq!(commands, expected);
            assert!(sent.iter().all(|(_, name)| name == "sovstate"));
        }
        let (result, sent) = create_refusing(Remove);
        assert_eq!(
            result.unwrap(),
            DevNum {
                major: 254,
                minor: 3
            }
        );
        assert_eq!(sent.len(), 3, "a live device is not removed");
    }

    #[test]
    fn names_that_do_not_fit_are_refused() {
        let long = "x".repeat(128);
        assert!(matches!(
            request(&long, None, 0, &[]),
            Err(DmError::Field { what: "name", .. })
        ));
        assert!(matches!(
            request("root", Some("a\0b"), 0, &[]),
            Err(DmError::Field { what: "uuid", .. })
        ));
    }

    /// A table that cannot be sent is refused without its text, which may hold a key.
    #[test]
    fn a_refused_table_is_not_echoed() {
        let table = Table {
            sectors: 8,
            params: "aes-xts-plain64 00112233deadbeef\0 0 254:1 32768".to_owned(),
        };
        let err = request("sovstate", None, 0, &[("crypt", &table)]).unwrap_err();
        assert!(matches!(err, DmError::Field { what: "table", .. }));
        let text = format!("{err} {err:?}");
        assert!(!text.contains("deadbeef"), "{text}");
    }

    #[test]
    fn device_numbers_decode_as_the_kernel_encodes_them() {
        let mut buf = vec![0u8; HEADER_LEN];
        // new_encode_dev(MKDEV(254, 0x1234)): minor's low byte, major << 8, minor's rest << 12
        let dev: u64 = 0x34 | (254 << 8) | (0x1200 << 12);
        buf[40..48].copy_from_slice(&dev.to_ne_bytes());
        assert_eq!(
            answered_dev(&buf, Command::Create).unwrap(),
            DevNum {
                major: 254,
                minor: 0x1234
            }
        );
        buf[28..32].copy_from_slice(&BUFFER_FULL.to_ne_bytes());
        assert!(answered_dev(&buf, Command::Create).is_err());
    }
}
