//! Writing an export directory (see [`crate::layout`]) with `std::fs`.
//!
//! [`write_export`] writes one from parts fetched elsewhere (e.g. over the node's API);
//! [`write_export_with`] takes a fallible record source (e.g. a database snapshot) and the
//! caller's error type. Both refuse a non-empty output directory and, on failure, remove what
//! they created so the export can be retried. [`ExportWriter`] is the building block for
//! writers that need more (e.g. the daemon's export of a damaged state, which writes what it
//! finds and reports the damage).

use crate::layout::{receipt_path, CHECKPOINT_FILE, RECEIPTS_DIR, RECORDS_FILE, VKEY_FILE};
use attest::checkpoint::Checkpoint;
use attest::report::report;
use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

/// Why an export could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// Creating, writing or syncing a file or directory of the export failed.
    #[error("{path}")]
    Io {
        /// The file or directory being written.
        path: PathBuf,
        /// The operating system's error.
        source: io::Error,
    },
    /// The output directory already holds something; an export never overwrites or mixes
    /// with other files.
    #[error("output directory {0} is not empty; refusing to overwrite (choose a new directory)")]
    OutNotEmpty(PathBuf),
    /// The output path exists and is a file (or other non-directory).
    #[error("{0} exists and is not a directory")]
    OutNotDir(PathBuf),
    /// A record's bytes contain `\n`, so it cannot be one line of records.jsonl (the node
    /// never appends such a leaf).
    #[error("record {index} contains a newline and cannot be written as one JSON line")]
    NewlineInRecord {
        /// Leaf index of the offending record.
        index: u64,
    },
    /// The record source supplied another number of records than the checkpoint covers; the
    /// export would not verify, so it is removed.
    #[error(
        "the export is incomplete: the checkpoint covers {expected} records but {written} were supplied"
    )]
    CountMismatch {
        /// Tree size of the checkpoint being exported.
        expected: u64,
        /// Records the source supplied.
        written: u64,
    },
    /// The checkpoint note to write does not parse as a signed note holding a checkpoint
    /// (its signature is not checked here); the message says why.
    #[error("the checkpoint to export is malformed: {0}")]
    BadCheckpoint(String),
    /// The verifier key to write is not one line; the message says why.
    #[error("the verifier key to export is malformed: {0}")]
    BadVkey(String),
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> ExportError + '_ {
    move |source| ExportError::Io {
        path: path.to_owned(),
        source,
    }
}

/// What an export wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportSummary {
    /// Records written to `records.jsonl`.
    pub records: u64,
    /// Size the checkpoint covers (equals `records` unless the state was damaged).
    pub checkpoint_size: u64,
    /// Receipt files written under `receipts/`.
    pub receipts: usize,
}

/// Writes an export from parts fetched elsewhere (e.g. by `sovctl audit export` over the
/// API). `records` must be exactly the records `checkpoint_note` covers, in order.
pub fn write_export(
    out: &Path,
    checkpoint_note: &str,
    vkey: &str,
    records: impl Iterator<Item = Vec<u8>>,
    receipts: &[(u64, String)],
) -> Result<ExportSummary, ExportError> {
    write_export_with(out, checkpoint_note, vkey, records.map(Ok), receipts)
}

/// [`write_export`] from a fallible record source: the first error stops the export, which
/// is then removed, and is returned as it is.
pub fn write_export_with<E: From<ExportError>>(
    out: &Path,
    checkpoint_note: &str,
    vkey: &str,
    records: impl Iterator<Item = Result<Vec<u8>, E>>,
    receipts: &[(u64, String)],
) -> Result<ExportSummary, E> {
    let expected = checkpoint_size_of(checkpoint_note)?;
    let vkey = vkey.trim_end_matches('\n');
    if vkey.contains('\n') {
        return Err(ExportError::BadVkey("it spans several lines".into()).into());
    }
    let mut w = ExportWriter::create(out)?;
    let result = (|| {
        let mut records_out = w.file(RECORDS_FILE)?;
        let mut written = 0u64;
        for rec in records {
            let rec = rec?;
            write_record(&mut records_out, written, &rec)?;
            written += 1;
        }
        if written != expected {
            return Err(ExportError::CountMismatch { expected, written }.into());
        }
        w.finish(RECORDS_FILE, records_out)?;
        w.write_all_files(checkpoint_note, vkey, receipts)?;
        Ok(written)
    })();
    match result {
        Ok(written) => Ok(ExportSummary {
            records: written,
            checkpoint_size: expected,
            receipts: receipts.len(),
        }),
        Err(e) => {
            w.remove_created();
            Err(e)
        }
    }
}

/// The tree size a checkpoint note claims (its signature is not checked here).
fn checkpoint_size_of(note: &str) -> Result<u64, ExportError> {
    let parsed = attest::note::parse(note)
        .map_err(|e| ExportError::BadCheckpoint(report(&e).to_string()))?;
    Checkpoint::parse(&parsed.text)
        .map(|c| c.size)
        .map_err(|e| ExportError::BadCheckpoint(report(&e).to_string()))
}

/// Writes record `index` as one line of `records.jsonl`.
pub fn write_record(out: &mut impl Write, index: u64, rec: &[u8]) -> Result<(), ExportError> {
    if rec.contains(&b'\n') {
        return Err(ExportError::NewlineInRecord { index });
    }
    out.write_all(rec)
        .and_then(|()| out.write_all(b"\n"))
        .map_err(|source| ExportError::Io {
            path: PathBuf::from(RECORDS_FILE),
            source,
        })
}

/// Creates files in an export directory and, on failure (see
/// [`ExportWriter::remove_created`]), removes what it created so the directory is empty
/// again and the export can be retried.
#[derive(Debug)]
pub struct ExportWriter {
    out: PathBuf,
    created: Vec<PathBuf>,
    created_dir: Option<PathBuf>,
}

impl ExportWriter {
    /// Starts an export into `out`, which must be missing (it is created) or empty.
    pub fn create(out: &Path) -> Result<Self, ExportError> {
        let mut created_dir = None;
        match fs::metadata(out) {
            Ok(m) if !m.is_dir() => return Err(ExportError::OutNotDir(out.to_owned())),
            Ok(_) => {
                if fs::read_dir(out).map_err(io_at(out))?.next().is_some() {
                    return Err(ExportError::OutNotEmpty(out.to_owned()));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::create_dir_all(out).map_err(io_at(out))?;
                created_dir = Some(out.to_owned());
            }
            Err(e) => return Err(io_at(out)(e)),
        }
        Ok(Self {
            out: out.to_owned(),
            created: Vec::new(),
            created_dir,
        })
    }

    /// Creates the new file `name` (a path relative to the export directory) for writing;
    /// complete it with [`ExportWriter::finish`].
    pub fn file(&mut self, name: &str) -> Result<BufWriter<File>, ExportError> {
        let path = self.out.join(name);
        let f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(io_at(&path))?;
        self.created.push(path);
        Ok(BufWriter::with_capacity(1 << 20, f))
    }

    /// Flushes and syncs a file created by [`ExportWriter::file`].
    pub fn finish(&self, name: &str, w: BufWriter<File>) -> Result<(), ExportError> {
        let path = self.out.join(name);
        let f = w.into_inner().map_err(|e| io_at(&path)(e.into_error()))?;
        f.sync_all().map_err(io_at(&path))
    }

    fn write_file(&mut self, name: &str, contents: &[u8]) -> Result<(), ExportError> {
        let mut w = self.file(name)?;
        let path = self.out.join(name);
        w.write_all(contents).map_err(io_at(&path))?;
        self.finish(name, w)
    }

    /// Writes the checkpoint, the verifier key and the receipts (one per record id).
    pub fn write_all_files(
        &mut self,
        checkpoint_note: &str,
        vkey: &str,
        receipts: &[(u64, String)],
    ) -> Result<(), ExportError> {
        self.write_file(CHECKPOINT_FILE, checkpoint_note.as_bytes())?;
        self.write_file(VKEY_FILE, format!("{vkey}\n").as_bytes())?;
        if !receipts.is_empty() {
            let dir = self.out.join(RECEIPTS_DIR);
            fs::create_dir(&dir).map_err(io_at(&dir))?;
            self.created.push(dir);
            let mut done = std::collections::BTreeSet::new();
            for (id, text) in receipts {
                if done.insert(*id) {
                    self.write_file(&receipt_path(*id), text.as_bytes())?;
                }
            }
        }
        Ok(())
    }

    /// Removes everything this writer created (best effort), the directory too if it made it.
    pub fn remove_created(&mut self) {
        for p in self.created.iter().rev() {
            let _ = fs::remove_file(p).or_else(|_| fs::remove_dir(p));
        }
        self.created.clear();
        if let Some(d) = self.created_dir.take() {
            let _ = fs::remove_dir(d);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use attest::checkpoint::sign_checkpoint;
    use attest::note::NoteSigner;

    fn note(size: u64) -> (String, String) {
        let signer = NoteSigner::from_seed("n/usage", &[3; 32]).unwrap();
        let cp = Checkpoint {
            origin: "n/usage".into(),
            size,
            root: [0; 32],
            extensions: vec![],
        };
        (
            sign_checkpoint(&cp, &signer).unwrap(),
            signer.verifier().to_vkey(),
        )
    }

    #[test]
    fn a_failed_export_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("exp");
        let (cp, vkey) = note(2);
        let recs = vec![b"a".to_vec()];
        let e = write_export(&out, &cp, &vkey, recs.into_iter(), &[]).unwrap_err();
        assert!(matches!(
            e,
            ExportError::CountMismatch {
                expected: 2,
                written: 1
            }
        ));
        assert!(!out.exists());
        let e = write_export(&out, &cp, &vkey, [b"a\nb".to_vec()].into_iter(), &[]).unwrap_err();
        assert!(
            matches!(e, ExportError::NewlineInRecord { index: 0 }),
            "{e}"
        );
        assert!(!out.exists());
        let e = write_export(&out, "junk", &vkey, std::iter::empty(), &[]).unwrap_err();
        assert!(matches!(e, ExportError::BadCheckpoint(_)), "{e}");
        let e = write_export(&out, &cp, "a\nb", std::iter::empty(), &[]).unwrap_err();
        assert!(matches!(e, ExportError::BadVkey(_)), "{e}");

        let s = write_export(
            &out,
            &cp,
            &vkey,
            [b"a".to_vec(), b"b".to_vec()].into_iter(),
            &[(1, "r1".into()), (1, "again".into())],
        )
        .unwrap();
        assert_eq!((s.records, s.checkpoint_size, s.receipts), (2, 2, 2));
        assert_eq!(
            fs::read_to_string(out.join(RECORDS_FILE)).unwrap(),
            "a\nb\n"
        );
        assert_eq!(fs::read_to_string(out.join(receipt_path(1))).unwrap(), "r1");
        let e = write_export(&out, &cp, &vkey, std::iter::empty(), &[]).unwrap_err();
        assert!(matches!(e, ExportError::OutNotEmpty(_)), "{e}");
        let e =
            write_export(&out.join(VKEY_FILE), &cp, &vkey, std::iter::empty(), &[]).unwrap_err();
        assert!(matches!(e, ExportError::OutNotDir(_)), "{e}");
    }

    #[test]
    fn a_record_source_error_is_returned_as_it_is() {
        #[derive(Debug)]
        enum Mine {
            Source,
            Export(ExportError),
        }
        impl From<ExportError> for Mine {
            fn from(e: ExportError) -> Self {
                Mine::Export(e)
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("exp");
        fs::create_dir(&out).unwrap();
        let (cp, vkey) = note(2);
        let recs = [Ok(b"a".to_vec()), Err(Mine::Source)];
        let e = write_export_with(&out, &cp, &vkey, recs.into_iter(), &[]).unwrap_err();
        assert!(matches!(e, Mine::Source), "{e:?}");
        // The directory existed: it is kept, and empty again.
        assert_eq!(fs::read_dir(&out).unwrap().count(), 0);
        let e = write_export_with(&out, "x", &vkey, std::iter::empty::<Result<_, Mine>>(), &[])
            .unwrap_err();
        assert!(
            matches!(e, Mine::Export(ExportError::BadCheckpoint(_))),
            "{e:?}"
        );
    }
}
