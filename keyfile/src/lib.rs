//! # keyfile — one convention for every private key file
//!
//! Every private key of Sovereign Host (the node's log key and identity key, the TLS server
//! key, release, policy, enrollment-authority and verifier keys) is a small text file that
//! follows the same three rules, whichever program writes or reads it:
//!
//! 1. **Written 0600 from the first byte** ([`write_new_private`]): the file is created with
//!    `O_CREAT|O_EXCL` and mode 0600, so there is never a window in which it is readable by
//!    others, it never overwrites an existing key, and it is fsynced before the call returns.
//! 2. **Refused when group or others may read or write it** ([`read_private`]): a key that
//!    someone else could have copied is not a secret any more; the error says how to fix the
//!    mode after checking that nobody did.
//! 3. **Held in zeroized memory**: what [`read_private`] returns is wiped when dropped.
//!
//! Every `sovctl ... keygen` (`attest keygen` for release, enrollment-authority and verifier
//! keys; `policy keygen` for policy authorities) takes `--out KEY` and writes the private key
//! to `KEY` and its public half beside it as `KEY.pub` ([`public_key_path`]), never
//! overwriting either. Ed25519 keys (and the node identity key) are 64 hex digits of the seed;
//! the log and policy keys use the `golang.org/x/mod/sumdb/note` signer format instead (their
//! `.pub` holds the note verifier key line), which their callers parse. The file rules are the
//! same for all.

#![warn(missing_docs)]

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use zeroize::Zeroizing;

pub mod pem;

/// A key file is a line of text; anything much larger is not a key file.
pub const MAX_KEY_FILE_LEN: u64 = 16 * 1024;

/// Why a key file could not be written or read. Messages never contain key material.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyFileError {
    /// The file could not be created, opened, read or written.
    #[error("key file {path}")]
    Io {
        /// The key file.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: io::Error,
    },
    /// The key file already exists: keys are never overwritten.
    #[error("{path} already exists; refusing to overwrite a key")]
    Exists {
        /// The key file.
        path: PathBuf,
    },
    /// Group or others may read or write the private key.
    #[error(
        "private key {path} is readable or writable by group or others (mode {mode:04o}); \
         fix with `chmod 600 {path}` after checking nobody copied it"
    )]
    Permissions {
        /// The key file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The path is a directory, device, FIFO or socket.
    #[error("key file {path} is not a regular file")]
    NotAFile {
        /// The key file.
        path: PathBuf,
    },
    /// The file is larger than [`MAX_KEY_FILE_LEN`].
    #[error("key file {path} is larger than {MAX_KEY_FILE_LEN} bytes: not a key file")]
    TooLarge {
        /// The key file.
        path: PathBuf,
    },
    /// The file's contents are not the key format expected.
    #[error("{path}: not {expected}")]
    Malformed {
        /// The key file.
        path: PathBuf,
        /// What it should have held, e.g. "an Ed25519 private key (64 hex digits)".
        expected: &'static str,
    },
    /// The operating system's random number generator failed.
    #[error("random generator")]
    Random(#[source] rand_core::Error),
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> KeyFileError + '_ {
    move |source| {
        if source.kind() == io::ErrorKind::AlreadyExists {
            KeyFileError::Exists {
                path: path.to_owned(),
            }
        } else {
            KeyFileError::Io {
                path: path.to_owned(),
                source,
            }
        }
    }
}

/// Creates `path` with mode 0600 from the first byte on (never a world-readable window) and
/// writes `contents` plus a newline, durably. Fails with [`KeyFileError::Exists`] if the
/// file exists.
pub fn write_new_private(path: &Path, contents: &[u8]) -> Result<(), KeyFileError> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io_at(path))?;
    // The umask can only narrow 0600; make it exactly 0600 so the owner can read it back.
    f.set_permissions(fs::Permissions::from_mode(0o600))
        .map_err(io_at(path))?;
    f.write_all(contents).map_err(io_at(path))?;
    f.write_all(b"\n").map_err(io_at(path))?;
    f.sync_all().map_err(io_at(path))
}

/// Writes a public file (a `.pub` or `.vkey` beside a private key): created new, mode 0644,
/// durably. Fails with [`KeyFileError::Exists`] if the file exists.
pub fn write_new_public(path: &Path, contents: &[u8]) -> Result<(), KeyFileError> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(path)
        .map_err(io_at(path))?;
    f.write_all(contents).map_err(io_at(path))?;
    f.sync_all().map_err(io_at(path))
}

/// Checks the permission bits of an open private key: no access for group or others.
pub fn check_private_mode(path: &Path, meta: &fs::Metadata) -> Result<(), KeyFileError> {
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(KeyFileError::Permissions {
            path: path.to_owned(),
            mode,
        });
    }
    Ok(())
}

/// Reads a private key file: a regular file of at most [`MAX_KEY_FILE_LEN`] bytes that
/// neither group nor others may access. The text is returned in zeroized memory.
pub fn read_private(path: &Path) -> Result<Zeroizing<String>, KeyFileError> {
    let mut file = File::open(path).map_err(io_at(path))?;
    let meta = file.metadata().map_err(io_at(path))?;
    if !meta.is_file() {
        return Err(KeyFileError::NotAFile {
            path: path.to_owned(),
        });
    }
    check_private_mode(path, &meta)?;
    if meta.len() > MAX_KEY_FILE_LEN {
        return Err(KeyFileError::TooLarge {
            path: path.to_owned(),
        });
    }
    // Sized up front so the buffer never reallocates, which would leave an unwiped copy.
    let mut bytes = Zeroizing::new(Vec::with_capacity(MAX_KEY_FILE_LEN as usize + 1));
    Read::by_ref(&mut file)
        .take(MAX_KEY_FILE_LEN + 1)
        .read_to_end(&mut bytes)
        .map_err(io_at(path))?;
    if bytes.len() as u64 > MAX_KEY_FILE_LEN {
        return Err(KeyFileError::TooLarge {
            path: path.to_owned(),
        });
    }
    // Moved, not copied, into the zeroized String; a non-UTF-8 buffer is wiped on the way out.
    match String::from_utf8(std::mem::take(&mut *bytes)) {
        Ok(s) => Ok(Zeroizing::new(s)),
        Err(e) => {
            drop(Zeroizing::new(e.into_bytes()));
            Err(KeyFileError::Malformed {
                path: path.to_owned(),
                expected: "a text key file",
            })
        }
    }
}

/// `KEY.pub` beside a private key file `KEY`.
pub fn public_key_path(private: &Path) -> PathBuf {
    let mut s = private.as_os_str().to_owned();
    s.push(".pub");
    s.into()
}

/// 32 bytes from the operating system's random number generator, in zeroized memory.
pub fn random_seed() -> Result<Zeroizing<[u8; 32]>, KeyFileError> {
    use rand_core::{OsRng, RngCore};
    let mut seed = Zeroizing::new([0u8; 32]);
    OsRng
        .try_fill_bytes(seed.as_mut())
        .map_err(KeyFileError::Random)?;
    Ok(seed)
}

/// Creates an Ed25519 key: `path` holds the seed as 64 hex digits (mode 0600) and
/// `path.pub` the public key as 64 hex digits. Refuses to overwrite either.
pub fn create_ed25519(path: &Path) -> Result<ed25519_dalek::SigningKey, KeyFileError> {
    let pub_path = public_key_path(path);
    for p in [path, pub_path.as_path()] {
        if p.exists() {
            return Err(KeyFileError::Exists { path: p.to_owned() });
        }
    }
    let seed = random_seed()?;
    let text = Zeroizing::new(hex::encode(seed.as_ref()));
    write_new_private(path, text.as_bytes())?;
    let key = ed25519_dalek::SigningKey::from_bytes(&seed);
    let public = format!("{}\n", hex::encode(key.verifying_key().to_bytes()));
    write_new_public(&pub_path, public.as_bytes())?;
    Ok(key)
}

/// The 32-byte seed of an Ed25519 private key file written by [`create_ed25519`], read with
/// the rules of [`read_private`].
pub fn read_ed25519_seed(path: &Path) -> Result<Zeroizing<[u8; 32]>, KeyFileError> {
    let text = read_private(path)?;
    let mut seed = Zeroizing::new([0u8; 32]);
    hex::decode_to_slice(text.trim(), seed.as_mut()).map_err(|_| KeyFileError::Malformed {
        path: path.to_owned(),
        expected: "an Ed25519 private key (64 hex digits)",
    })?;
    Ok(seed)
}

/// Reads an Ed25519 private key file written by [`create_ed25519`].
pub fn read_ed25519(path: &Path) -> Result<ed25519_dalek::SigningKey, KeyFileError> {
    let seed = read_ed25519_seed(path)?;
    Ok(ed25519_dalek::SigningKey::from_bytes(&seed))
}

/// Reads the 32 bytes of an Ed25519 public key file (64 hex digits, e.g. `KEY.pub`).
pub fn read_ed25519_public(path: &Path) -> Result<[u8; 32], KeyFileError> {
    let mut file = File::open(path).map_err(io_at(path))?;
    let mut text = String::new();
    Read::by_ref(&mut file)
        .take(MAX_KEY_FILE_LEN)
        .read_to_string(&mut text)
        .map_err(io_at(path))?;
    let mut b = [0u8; 32];
    hex::decode_to_slice(text.trim(), &mut b).map_err(|_| KeyFileError::Malformed {
        path: path.to_owned(),
        expected: "an Ed25519 public key (64 hex digits)",
    })?;
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn creates_0600_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("release");
        let key = create_ed25519(&path).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().mode() & 0o7777, 0o600);
        assert_eq!(read_ed25519(&path).unwrap().to_bytes(), key.to_bytes());
        assert_eq!(
            read_ed25519_public(&public_key_path(&path)).unwrap(),
            key.verifying_key().to_bytes()
        );
        let again = create_ed25519(&path).unwrap_err();
        assert!(matches!(again, KeyFileError::Exists { .. }), "{again}");
    }

    #[test]
    fn refuses_group_or_world_access() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        create_ed25519(&path).unwrap();
        for mode in [0o644, 0o666, 0o640, 0o604, 0o620, 0o602] {
            fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
            let err = read_ed25519(&path).unwrap_err();
            assert!(
                matches!(err, KeyFileError::Permissions { mode: m, .. } if m == mode),
                "{err}"
            );
            assert!(err.to_string().contains("chmod 600"), "{err}");
        }
        fs::set_permissions(&path, fs::Permissions::from_mode(0o400)).unwrap();
        read_ed25519(&path).unwrap();
    }

    #[test]
    fn refuses_devices_directories_and_garbage() {
        let err = read_private(Path::new("/dev/zero")).unwrap_err();
        assert!(matches!(err, KeyFileError::NotAFile { .. }), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let err = read_private(dir.path()).unwrap_err();
        assert!(matches!(err, KeyFileError::NotAFile { .. }), "{err}");
        let path = dir.path().join("k");
        write_new_private(&path, b"zz-secret-zz").unwrap();
        let err = read_ed25519(&path).unwrap_err();
        assert!(matches!(err, KeyFileError::Malformed { .. }), "{err}");
        assert!(!err.to_string().contains("secret"), "{err}");
        let big = dir.path().join("big");
        write_new_private(&big, &vec![b'a'; MAX_KEY_FILE_LEN as usize + 1]).unwrap();
        let err = read_private(&big).unwrap_err();
        assert!(matches!(err, KeyFileError::TooLarge { .. }), "{err}");
    }
}
