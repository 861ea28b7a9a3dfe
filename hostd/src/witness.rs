//! The node's own witness: the largest checkpoint it ever signed, kept outside the database.
//!
//! A node must never sign a tree that does not extend a checkpoint it already published: an
//! auditor holding the older note would see two different logs under one key (a fork), and
//! records acknowledged to tenants would be gone. The database alone cannot guarantee this:
//! restoring a backup of `state/db`, or deleting it, silently takes the log back in time, and
//! the next append would sign new records at indices already published.
//!
//! So every checkpoint is first written here (`<state>/log.witness`, beside the log key, one
//! signed note, replaced atomically and fsynced) and only then stored and published. At start
//! [`crate::ledger::Ledger::open_witnessed`] requires the stored log to extend this note: same
//! root at its size, and at least as many records. A store that is behind or different is
//! refused with the recovery procedure (docs/operations.md, "Backup, restore and recovery"):
//! `hostd ledger recover --from-export DIR` re-appends the missing records from an audit
//! export and records that it did so in the ledger itself.
//!
//! A restore that rolls back this file *together* with the database is not detectable here;
//! an auditor's or witness's newer checkpoint still exposes it (the export's consistency
//! check). The image keeps this file on the measured state disk.

use attest::checkpoint::{open_checkpoint, Checkpoint, CheckpointError};
use attest::note::NoteVerifier;
use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// File name of the witness in the state directory.
pub const WITNESS_FILE: &str = "log.witness";

/// A signed note is a few hundred bytes; anything much larger is not a witness file.
const MAX_LEN: u64 = 64 * 1024;

/// Why the witness could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum WitnessError {
    #[error("witness {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("witness {path} is not a regular file of at most {MAX_LEN} bytes")]
    NotAFile { path: PathBuf },
    #[error("witness {path} does not verify with this node's log key")]
    DoesNotVerify {
        path: PathBuf,
        #[source]
        source: CheckpointError,
    },
}

/// The witness file of one node.
#[derive(Debug, Clone)]
pub struct Witness {
    path: PathBuf,
}

impl Witness {
    /// The witness at `path` (it need not exist yet).
    pub fn at(path: impl Into<PathBuf>) -> Witness {
        Witness { path: path.into() }
    }

    /// The witness file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn io(&self) -> impl FnOnce(io::Error) -> WitnessError + '_ {
        |source| WitnessError::Io {
            path: self.path.clone(),
            source,
        }
    }

    /// The witnessed checkpoint, verified with `verifier`; `None` when there is none yet (a
    /// node that never signed, or one that ran before witnesses existed).
    pub fn load(&self, verifier: &NoteVerifier) -> Result<Option<Checkpoint>, WitnessError> {
        let mut file = match fs::File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(self.io()(e)),
        };
        let meta = file.metadata().map_err(self.io())?;
        if !meta.is_file() || meta.len() > MAX_LEN {
            return Err(WitnessError::NotAFile {
                path: self.path.clone(),
            });
        }
        let mut text = String::new();
        Read::by_ref(&mut file)
            .take(MAX_LEN)
            .read_to_string(&mut text)
            .map_err(self.io())?;
        open_checkpoint(&text, verifier)
            .map(Some)
            .map_err(|source| WitnessError::DoesNotVerify {
                path: self.path.clone(),
                source,
            })
    }

    /// Replaces the witness with `note`, durably: a temporary file, fsync, rename, fsync of
    /// the directory. After a crash the file holds the old note or the new one, never a mix.
    pub fn store(&self, note: &str) -> Result<(), WitnessError> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let tmp = dir.join(format!(".{WITNESS_FILE}.tmp-{}", std::process::id()));
        let write = || -> io::Result<()> {
            let mut f = fs::File::create(&tmp)?;
            f.write_all(note.as_bytes())?;
            f.sync_all()?;
            fs::rename(&tmp, &self.path)?;
            fs::File::open(dir)?.sync_all()
        };
        write().map_err(|e| {
            let _ = fs::remove_file(&tmp);
            self.io()(e)
        })
    }
}
