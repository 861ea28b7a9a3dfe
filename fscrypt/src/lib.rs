//! Safe wrappers over the Linux fscrypt v2 ioctls, for hostd's per-lease encrypted scratch.
//!
//! A v2 key is added to a filesystem's keyring ([`add_key`]; the kernel derives and returns
//! its 16-byte [`KeyIdentifier`]), an empty directory is bound to it ([`set_policy`], always
//! AES-256-XTS contents, AES-256-CTS names, 32-byte name padding), and removing the key
//! ([`remove_key`]) wipes the kernel's copy, after which names read as ciphertext and opening
//! a file fails with `ENOKEY`: a crypto-erase. [`key_status`] and [`policy_identifier`] let a
//! caller check both ends.
//!
//! This crate is the only place hostd needs `unsafe` (the `ioctl(2)` calls, all in `sys`);
//! everything it exports is safe. Each call takes any open descriptor on the filesystem (its
//! mount point, say): keys belong to the filesystem, not to a file.

mod sys;

use std::fmt;
use std::io;
use std::os::fd::AsFd;
use zeroize::Zeroizing;

/// Bytes in a raw key (64: AES-256-XTS takes two 256-bit keys).
pub const KEY_SIZE: usize = sys::RAW_KEY_SIZE;

/// A raw key, wiped from memory when dropped.
pub type RawKey = Zeroizing<[u8; KEY_SIZE]>;

/// Names a v2 key: the kernel derives it from the key (HKDF-SHA512), so it reveals nothing
/// about the key and can be kept, logged and compared freely.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyIdentifier(pub [u8; sys::KEY_IDENTIFIER_SIZE]);

impl fmt::Display for KeyIdentifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for KeyIdentifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyIdentifier({self})")
    }
}

/// Which ioctl failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    AddKey,
    SetPolicy,
    GetPolicy,
    RemoveKey,
    KeyStatus,
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Operation::AddKey => "FS_IOC_ADD_ENCRYPTION_KEY",
            Operation::SetPolicy => "FS_IOC_SET_ENCRYPTION_POLICY",
            Operation::GetPolicy => "FS_IOC_GET_ENCRYPTION_POLICY_EX",
            Operation::RemoveKey => "FS_IOC_REMOVE_ENCRYPTION_KEY",
            Operation::KeyStatus => "FS_IOC_GET_ENCRYPTION_KEY_STATUS",
        })
    }
}

/// Why an fscrypt call failed: the operation and the kernel's errno (e.g. `EOPNOTSUPP` for a
/// filesystem without the `encrypt` feature, `ENOTEMPTY` for a policy on a non-empty
/// directory, `ENOKEY` for a key that is not there).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("{op} failed")]
    Ioctl {
        op: Operation,
        #[source]
        source: io::Error,
    },
    #[error("{op} answered something this crate does not know: {what}")]
    Unexpected { op: Operation, what: String },
}

impl Error {
    /// The kernel's errno, when the ioctl itself failed.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Error::Ioctl { source, .. } => source.raw_os_error(),
            Error::Unexpected { .. } => None,
        }
    }

    /// The kernel answered `ENOKEY`: the key is not in the keyring (removing it, setting a
    /// policy with it) or a file's key is unavailable.
    pub fn is_no_key(&self) -> bool {
        self.raw_os_error() == Some(libc::ENOKEY)
    }
}

fn ioctl_err(op: Operation) -> impl FnOnce(io::Error) -> Error {
    move |source| Error::Ioctl { op, source }
}

fn identifier_spec(id: &KeyIdentifier) -> sys::fscrypt_key_specifier {
    let mut spec = sys::fscrypt_key_specifier {
        type_: sys::KEY_SPEC_TYPE_IDENTIFIER,
        ..Default::default()
    };
    spec.u[..id.0.len()].copy_from_slice(&id.0);
    spec
}

/// Adds `key` to the keyring of the filesystem `fs` is on; returns the identifier the kernel
/// derived. The kernel keeps the key until [`remove_key`] or unmount; the caller's copy can
/// (and should) be dropped right away. Needs no privilege for v2 keys beyond the user's key
/// quota.
pub fn add_key(fs: impl AsFd, key: &RawKey) -> Result<KeyIdentifier, Error> {
    let mut arg = sys::AddKeyWithRaw {
        arg: sys::fscrypt_add_key_arg {
            key_spec: sys::fscrypt_key_specifier {
                type_: sys::KEY_SPEC_TYPE_IDENTIFIER,
                ..Default::default()
            },
            raw_size: KEY_SIZE as u32,
            ..Default::default()
        },
        raw: **key,
    };
    sys::ioctl(fs, sys::FS_IOC_ADD_ENCRYPTION_KEY, &mut arg)
        .map_err(ioctl_err(Operation::AddKey))?;
    let mut id = [0u8; sys::KEY_IDENTIFIER_SIZE];
    id.copy_from_slice(&arg.arg.key_spec.u[..sys::KEY_IDENTIFIER_SIZE]);
    Ok(KeyIdentifier(id))
}

/// Binds the empty directory `dir` (an open descriptor of it) to key `id` with a v2 policy:
/// AES-256-XTS contents, AES-256-CTS names, names padded to 32 bytes (hides their length
/// best). Everything created under it afterwards inherits the policy. The key must have been
/// added first (`ENOKEY` otherwise).
pub fn set_policy(dir: impl AsFd, id: &KeyIdentifier) -> Result<(), Error> {
    let mut policy = sys::fscrypt_policy_v2 {
        version: sys::POLICY_V2,
        contents_encryption_mode: sys::MODE_AES_256_XTS,
        filenames_encryption_mode: sys::MODE_AES_256_CTS,
        flags: sys::POLICY_FLAGS_PAD_32,
        reserved: [0; 4],
        master_key_identifier: id.0,
    };
    sys::ioctl(dir, sys::FS_IOC_SET_ENCRYPTION_POLICY, &mut policy)
        .map_err(ioctl_err(Operation::SetPolicy))
}

/// The key identifier of the v2 policy on `file` (a directory or file); `None` when it is not
/// encrypted. Lets a restarted caller find which key a directory it left behind was bound to.
pub fn policy_identifier(file: impl AsFd) -> Result<Option<KeyIdentifier>, Error> {
    let mut arg = sys::fscrypt_get_policy_ex_arg {
        policy_size: size_of::<sys::fscrypt_policy_v2>() as u64,
        ..Default::default()
    };
    match sys::ioctl(file, sys::FS_IOC_GET_ENCRYPTION_POLICY_EX, &mut arg) {
        Err(e) if e.raw_os_error() == Some(libc::ENODATA) => return Ok(None),
        other => other.map_err(ioctl_err(Operation::GetPolicy))?,
    }
    if arg.policy.version != sys::POLICY_V2 {
        return Err(Error::Unexpected {
            op: Operation::GetPolicy,
            what: format!("policy version {}", arg.policy.version),
        });
    }
    Ok(Some(KeyIdentifier(arg.policy.master_key_identifier)))
}

/// What [`remove_key`] reports besides success.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Removal {
    /// Files using the key were still open (or cached dirty): the key's secret is wiped and no
    /// new file can be opened, but those files' per-file keys live on until they are closed;
    /// calling [`remove_key`] again after that completes the removal.
    pub files_busy: bool,
    /// Other users had also added this key: only this user's claim was dropped and the key
    /// remains usable.
    pub other_users: bool,
}

/// Removes key `id` from the keyring of the filesystem `fs` is on and, unless files are busy
/// or other users still hold it, wipes it from kernel memory. `ENOKEY` when it is not there.
pub fn remove_key(fs: impl AsFd, id: &KeyIdentifier) -> Result<Removal, Error> {
    let mut arg = sys::fscrypt_remove_key_arg {
        key_spec: identifier_spec(id),
        ..Default::default()
    };
    sys::ioctl(fs, sys::FS_IOC_REMOVE_ENCRYPTION_KEY, &mut arg)
        .map_err(ioctl_err(Operation::RemoveKey))?;
    let flags = arg.removal_status_flags;
    Ok(Removal {
        files_busy: flags & sys::KEY_REMOVAL_STATUS_FLAG_FILES_BUSY != 0,
        other_users: flags & sys::KEY_REMOVAL_STATUS_FLAG_OTHER_USERS != 0,
    })
}

/// Whether a key is in a filesystem's keyring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyStatus {
    /// Not there (never added, or removed): its files are locked.
    Absent,
    /// There: its files can be read.
    Present,
    /// Removed while files were busy: no new file can be opened, open ones still work.
    IncompletelyRemoved,
}

/// Key `id`'s status in the keyring of the filesystem `fs` is on.
pub fn key_status(fs: impl AsFd, id: &KeyIdentifier) -> Result<KeyStatus, Error> {
    let mut arg = sys::fscrypt_get_key_status_arg {
        key_spec: identifier_spec(id),
        ..Default::default()
    };
    sys::ioctl(fs, sys::FS_IOC_GET_ENCRYPTION_KEY_STATUS, &mut arg)
        .map_err(ioctl_err(Operation::KeyStatus))?;
    match arg.status {
        sys::KEY_STATUS_ABSENT => Ok(KeyStatus::Absent),
        sys::KEY_STATUS_PRESENT => Ok(KeyStatus::Present),
        sys::KEY_STATUS_INCOMPLETELY_REMOVED => Ok(KeyStatus::IncompletelyRemoved),
        other => Err(Error::Unexpected {
            op: Operation::KeyStatus,
            what: format!("key status {other}"),
        }),
    }
}

#[cfg(test)]
mod tests;
