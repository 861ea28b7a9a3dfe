//! The node's log key: the Ed25519 key that signs the usage ledger's checkpoints.
//!
//! Whoever holds this key can sign a rewritten history, so it lives in one file readable by
//! hostd's user only (mode 0600) and in zeroized buffers in memory. The file holds a single
//! line in the signer key format of `golang.org/x/mod/sumdb/note`
//! (`PRIVATE+KEY+<name>+<key ID>+<base64(0x01 || seed)>`), so the key can be inspected, backed
//! up and used with stock tooling. It is created on first start; after that the name inside
//! must match the node's log name, because the name is the log's origin and changing it
//! would silently start a different log.

use attest::note::{NoteError, NoteSigner};
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// A signer key line is about 100 bytes; anything much larger is not a key file.
use keyfile::MAX_KEY_FILE_LEN;

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("log key {path}")]
    Io { path: PathBuf, source: io::Error },
    #[error(
        "log key {path} is readable or writable by group or others (mode {mode:04o}); \
         the key signs the usage ledger — fix with `chmod 600 {path}` after checking nobody copied it"
    )]
    Permissions { path: PathBuf, mode: u32 },
    #[error("log key {path} is not a regular file")]
    NotAFile { path: PathBuf },
    #[error("log key {path} is larger than {MAX_KEY_FILE_LEN} bytes: not a key file")]
    TooLarge { path: PathBuf },
    #[error("log key {path} is not a valid signer key")]
    Malformed { path: PathBuf, source: NoteError },
    #[error(
        "log key {path} is for log {found:?} but this node's log is {expected:?}; \
         the name is the log's origin, so a renamed node needs a new state directory"
    )]
    NameMismatch {
        path: PathBuf,
        found: String,
        expected: String,
    },
    #[error("cannot create a log key named {name:?}")]
    Generate { name: String, source: NoteError },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> KeyError + '_ {
    move |source| KeyError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Loads the log key at `path`, or creates it (from the OS random number generator) if the
/// file does not exist. `name` is the log's origin, e.g. `node-1/usage`.
///
/// Refuses a key file that group or others may read or write, one that is not a regular file,
/// and one whose key is for another name.
pub fn load_or_create_log_key(path: &Path, name: &str) -> Result<NoteSigner, KeyError> {
    match fs::metadata(path) {
        Ok(_) => load_log_key(path, name),
        Err(e) if e.kind() == io::ErrorKind::NotFound => match create_log_key(path, name) {
            Ok(signer) => Ok(signer),
            // Another process created it between our check and our link: use theirs.
            Err(KeyError::Io { source, .. }) if source.kind() == io::ErrorKind::AlreadyExists => {
                load_log_key(path, name)
            }
            Err(e) => Err(e),
        },
        Err(e) => Err(io_err(path)(e)),
    }
}

/// Loads an existing log key, with the same checks as [`load_or_create_log_key`].
pub fn load_log_key(path: &Path, name: &str) -> Result<NoteSigner, KeyError> {
    // The one key-file rule (keyfile): a regular file, small, no access for group or others.
    let text = keyfile::read_private(path).map_err(|e| match e {
        keyfile::KeyFileError::Permissions { path, mode } => KeyError::Permissions { path, mode },
        keyfile::KeyFileError::NotAFile { path } => KeyError::NotAFile { path },
        keyfile::KeyFileError::TooLarge { path } => KeyError::TooLarge { path },
        keyfile::KeyFileError::Malformed { path, .. } => KeyError::Malformed {
            path,
            source: NoteError::MalformedSignerKey("not UTF-8"),
        },
        keyfile::KeyFileError::Io { path, source } => KeyError::Io { path, source },
        other => KeyError::Io {
            path: path.to_owned(),
            source: io::Error::other(other.to_string()),
        },
    })?;
    let signer = NoteSigner::from_skey(text.trim_end()).map_err(|source| KeyError::Malformed {
        path: path.to_owned(),
        source,
    })?;
    if signer.name() != name {
        return Err(KeyError::NameMismatch {
            path: path.to_owned(),
            found: signer.name().to_owned(),
            expected: name.to_owned(),
        });
    }
    Ok(signer)
}

/// Generates a key and publishes it at `path` atomically: written and synced under a
/// temporary name created with mode 0600 (never a moment with wider permissions), then
/// hard-linked into place, which fails rather than overwrites if `path` appeared meanwhile.
fn create_log_key(path: &Path, name: &str) -> Result<NoteSigner, KeyError> {
    let signer = NoteSigner::generate(name).map_err(|source| KeyError::Generate {
        name: name.to_owned(),
        source,
    })?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    };
    if !dir.exists() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(io_err(&dir))?;
    }
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "log.key".to_owned());
    let tmp = dir.join(format!(".{file_name}.tmp-{}", std::process::id()));
    let written = write_new_private(&tmp, signer.to_skey().as_bytes());
    let linked = written.and_then(|()| fs::hard_link(&tmp, path).map_err(io_err(path)));
    // The temporary name goes whether or not the link worked; the key now lives at `path`
    // (or nowhere), never at two names.
    let _ = fs::remove_file(&tmp);
    linked?;
    if let Ok(d) = File::open(&dir) {
        d.sync_all().map_err(io_err(&dir))?;
    }
    tracing::info!(path = %path.display(), key_id = format_args!("{:08x}", signer.key_id()), "created log key");
    Ok(signer)
}

/// Creates `path` with mode 0600 from the first byte on (never a world-readable window) and
/// writes `contents` plus a newline, durably: the one key-file writer (`keyfile`).
pub fn write_new_private(path: &Path, contents: &[u8]) -> Result<(), KeyError> {
    keyfile::write_new_private(path, contents).map_err(|e| match e {
        keyfile::KeyFileError::Io { path, source } => KeyError::Io { path, source },
        keyfile::KeyFileError::Exists { path } => KeyError::Io {
            path,
            source: io::Error::from(io::ErrorKind::AlreadyExists),
        },
        other => KeyError::Io {
            path: path.to_owned(),
            source: io::Error::other(other.to_string()),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    #[test]
    fn creates_a_0600_key_and_loads_it_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/log.key");
        let a = load_or_create_log_key(&path, "node-1/usage").unwrap();
        let mode = fs::metadata(&path).unwrap().mode() & 0o7777;
        assert_eq!(mode, 0o600);
        let text = fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("PRIVATE+KEY+node-1/usage+"), "{text}");
        assert!(text.ends_with('\n'));
        let b = load_or_create_log_key(&path, "node-1/usage").unwrap();
        assert_eq!(a.verifier(), b.verifier());
        // No temporary file is left behind.
        let names: Vec<_> = fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("log.key")]);
    }

    #[test]
    fn refuses_group_or_world_accessible_keys() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.key");
        load_or_create_log_key(&path, "n/usage").unwrap();
        for mode in [0o644, 0o604, 0o640, 0o620, 0o602] {
            fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
            let err = load_or_create_log_key(&path, "n/usage").unwrap_err();
            assert!(
                matches!(err, KeyError::Permissions { mode: m, .. } if m == mode),
                "{err}"
            );
            assert!(err.to_string().contains("chmod 600"), "{err}");
        }
        fs::set_permissions(&path, fs::Permissions::from_mode(0o400)).unwrap();
        load_or_create_log_key(&path, "n/usage").unwrap();
    }

    #[test]
    fn refuses_a_key_for_another_log() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.key");
        load_or_create_log_key(&path, "a/usage").unwrap();
        let err = load_or_create_log_key(&path, "b/usage").unwrap_err();
        assert!(matches!(err, KeyError::NameMismatch { .. }), "{err}");
    }

    #[test]
    fn refuses_garbage_and_directories() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.key");
        write_new_private(&path, b"PRIVATE+KEY+n/usage+00000000+AAAA").unwrap();
        let err = load_or_create_log_key(&path, "n/usage").unwrap_err();
        assert!(matches!(err, KeyError::Malformed { .. }), "{err}");
        // The error never echoes key material.
        assert!(!err.to_string().contains("AAAA"), "{err}");

        let sub = dir.path().join("sub");
        fs::DirBuilder::new().mode(0o700).create(&sub).unwrap();
        let err = load_or_create_log_key(&sub, "n/usage").unwrap_err();
        assert!(matches!(err, KeyError::NotAFile { .. }), "{err}");
    }

    #[test]
    fn reads_the_go_signer_key_format() {
        // golang.org/x/mod/sumdb/note's test key, in a 0600 file.
        let skey = fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/conformance/signed-note/golang-mod-peterneumann.skey"
        ))
        .unwrap();
        let name = skey.trim().split('+').nth(2).unwrap().to_owned();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.key");
        write_new_private(&path, skey.trim().as_bytes()).unwrap();
        let signer = load_or_create_log_key(&path, &name).unwrap();
        assert_eq!(signer.name(), name);
    }
}
