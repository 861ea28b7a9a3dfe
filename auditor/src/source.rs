//! How the verifier reads an export: the [`ExportSource`] trait, the only place where
//! verification touches the outside world, and [`DirSource`], an export directory.
//!
//! Reads are defensive: only regular files are read (a `checkpoint` that is a symlink to
//! `/dev/zero` or a FIFO is refused instead of read forever), and the small text files are
//! read up to [`MAX_TEXT_LEN`] bytes.

use crate::layout::{RECEIPTS_DIR, RECORDS_FILE};
use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The largest checkpoint, key, receipt or consistency proof file read (1 MiB; real ones are
/// a few hundred bytes).
pub const MAX_TEXT_LEN: u64 = 1 << 20;

/// Why a file of an export could not be read.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SourceError {
    /// The operating system's error, e.g. `No such file or directory (os error 2)`.
    #[error("{0}")]
    Io(Arc<io::Error>),
    /// The path (after following symlinks) is a directory, device, FIFO or socket rather
    /// than a regular file; it is refused so that reading it cannot block or run forever.
    #[error("not a regular file")]
    NotRegularFile,
    /// A small text file (checkpoint, key, receipt, proof) is larger than any real one.
    #[error("larger than {limit} bytes")]
    TooLarge {
        /// The most bytes read, [`MAX_TEXT_LEN`].
        limit: u64,
    },
    /// A text file is not valid UTF-8, so it cannot be a note, key or proof.
    #[error("stream did not contain valid UTF-8")]
    NotUtf8,
    /// The path given as an export is not a directory.
    #[error("{0} is not an export directory")]
    NotExportDir(PathBuf),
}

impl From<io::Error> for SourceError {
    fn from(e: io::Error) -> Self {
        SourceError::Io(Arc::new(e))
    }
}

impl SourceError {
    /// The file does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, SourceError::Io(e) if e.kind() == io::ErrorKind::NotFound)
    }
}

/// The records file, opened: a reader and, when known, its length in bytes (for progress).
pub type Records<'a> = (Box<dyn Read + 'a>, Option<u64>);

/// Read access to an export. Names are relative to the export, `/`-separated, as in
/// [`crate::layout`] (e.g. `checkpoint`, `receipts/12.tlog-proof`).
pub trait ExportSource {
    /// The whole text of a small file (checkpoint, key, receipt).
    fn read_text(&self, name: &str) -> Result<String, SourceError>;
    /// `records.jsonl`, to be read once, as a stream.
    fn open_records(&self) -> Result<Records<'_>, SourceError>;
    /// The names of the entries of the receipts directory (without the directory), sorted;
    /// empty when there is none.
    fn receipt_names(&self) -> Result<Vec<String>, SourceError>;
    /// How to name a file in messages (for a directory: its full path).
    fn describe(&self, name: &str) -> String;
}

/// An export directory on disk.
#[derive(Debug, Clone)]
pub struct DirSource {
    dir: PathBuf,
}

impl DirSource {
    /// The export in `dir`, which must be a directory.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Self, SourceError> {
        let dir = dir.into();
        if !dir.is_dir() {
            return Err(SourceError::NotExportDir(dir));
        }
        Ok(Self { dir })
    }

    /// The export directory this source reads.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl ExportSource for DirSource {
    fn read_text(&self, name: &str) -> Result<String, SourceError> {
        read_text_file(&self.dir.join(name))
    }

    fn open_records(&self) -> Result<Records<'_>, SourceError> {
        let (file, len) = open_regular(&self.dir.join(RECORDS_FILE))?;
        Ok((Box::new(file), Some(len)))
    }

    fn receipt_names(&self) -> Result<Vec<String>, SourceError> {
        let rdir = self.dir.join(RECEIPTS_DIR);
        if !rdir.is_dir() {
            return Ok(Vec::new());
        }
        let mut names: Vec<String> = fs::read_dir(&rdir)?
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        Ok(names)
    }

    fn describe(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }
}

/// Opens `path` if it is a regular file (after following symlinks), with its length.
fn open_regular(path: &Path) -> Result<(File, u64), SourceError> {
    // Checked before opening, so that a FIFO is not opened (which would block)...
    if !fs::metadata(path)?.is_file() {
        return Err(SourceError::NotRegularFile);
    }
    let file = File::open(path)?;
    // ... and after, in case it was replaced in between.
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(SourceError::NotRegularFile);
    }
    Ok((file, meta.len()))
}

/// Reads a small text file (at most [`MAX_TEXT_LEN`] bytes of UTF-8) that must be a regular
/// file: an export's, or one the auditor supplies (a pinned key, a previous checkpoint).
pub fn read_text_file(path: &Path) -> Result<String, SourceError> {
    let (file, _) = open_regular(path)?;
    let mut buf = Vec::new();
    file.take(MAX_TEXT_LEN + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > MAX_TEXT_LEN {
        return Err(SourceError::TooLarge {
            limit: MAX_TEXT_LEN,
        });
    }
    String::from_utf8(buf).map_err(|_| SourceError::NotUtf8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn a_checkpoint_linked_to_dev_zero_is_refused_not_read() {
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/dev/zero", dir.path().join("checkpoint")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", dir.path().join(RECORDS_FILE)).unwrap();
        let src = DirSource::open(dir.path()).unwrap();
        let e = src.read_text("checkpoint").unwrap_err();
        assert!(matches!(e, SourceError::NotRegularFile), "{e:?}");
        assert!(matches!(
            src.open_records().err(),
            Some(SourceError::NotRegularFile)
        ));
    }

    #[test]
    fn text_reads_are_bounded_and_utf8() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("checkpoint");
        fs::write(&big, vec![b'a'; MAX_TEXT_LEN as usize + 1]).unwrap();
        fs::write(dir.path().join("log.vkey"), [0xff, 0xfe]).unwrap();
        fs::create_dir(dir.path().join("receipts")).unwrap();
        fs::write(dir.path().join("receipts/2.tlog-proof"), "x").unwrap();
        fs::write(dir.path().join("receipts/1.tlog-proof"), "x").unwrap();
        let src = DirSource::open(dir.path()).unwrap();
        assert!(matches!(
            src.read_text("checkpoint"),
            Err(SourceError::TooLarge {
                limit: MAX_TEXT_LEN
            })
        ));
        assert!(matches!(
            src.read_text("log.vkey"),
            Err(SourceError::NotUtf8)
        ));
        assert!(src.read_text("missing").unwrap_err().is_not_found());
        assert!(matches!(
            src.read_text("receipts"),
            Err(SourceError::NotRegularFile)
        ));
        assert_eq!(src.read_text("receipts/1.tlog-proof").unwrap(), "x");
        assert_eq!(
            src.receipt_names().unwrap(),
            ["1.tlog-proof", "2.tlog-proof"]
        );
        assert_eq!(
            src.describe("receipts/1.tlog-proof"),
            dir.path()
                .join("receipts/1.tlog-proof")
                .display()
                .to_string()
        );
        assert!(matches!(
            DirSource::open(&big),
            Err(SourceError::NotExportDir(_))
        ));
    }
}
