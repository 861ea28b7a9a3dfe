//! Files under a lease's scratch, opened by hostd (root) without ever leaving it.
//!
//! A tenant's running job owns its scratch and can swap any directory in it for a symlink
//! at any moment, so checking a path and then opening it is a race a root process loses.
//! Every lookup here is therefore one `openat2` relative to a directory fd, with
//! `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`: the kernel itself refuses
//! `..` out of the root and any symlink on the way, at the moment of the open. Parents are
//! made with `mkdirat` relative to fds opened the same way. An upload is written to a fresh
//! temporary name (`O_CREAT | O_EXCL | O_NOFOLLOW`, so nothing a job planted there is ever
//! written through) and renamed over the final name only when complete; dropping an
//! unfinished [`Upload`] deletes it, so a failed upload leaves no partial file. Files are
//! given to the lease's uid (mode 0600, directories 0700): they are the tenant's, not root's.

use attest::report::report;
use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::{self, AtFlags, FileType, Gid, Mode, OFlags, ResolveFlags, Uid};
use rustix::io::Errno;
use std::path::Path;

/// Longest path accepted (bytes), as the kernel's `PATH_MAX`.
const MAX_PATH: usize = 4096;

/// Why a path in scratch could not be used. The messages are for the tenant: they name the
/// path the tenant gave, never where the scratch is on the node.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("bad path {path:?}: {why}")]
    BadPath { path: String, why: &'static str },
    #[error("{path:?} passes through or is a symbolic link; links are not followed")]
    Symlink { path: String },
    #[error("no such file or directory: {path:?}")]
    NotFound { path: String },
    #[error("{path:?}: a parent is not a directory")]
    NotADirectory { path: String },
    #[error("{path:?} is a directory")]
    IsADirectory { path: String },
    #[error("{path:?} is neither a regular file nor a directory")]
    NotRegular { path: String },
    #[error("{context}")]
    Io {
        context: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// A path checked to be relative and inside the root: components without `/`, `..`, NUL;
/// `.` and empty components (`a//b`) dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelPath {
    parts: Vec<String>,
}

impl RelPath {
    /// Refuses what can never name a file under the root, before touching the disk.
    pub fn parse(path: &str) -> Result<RelPath, FileError> {
        let bad = |why| FileError::BadPath {
            path: path.to_owned(),
            why,
        };
        if path.contains('\0') {
            return Err(bad("NUL in path"));
        }
        if path.starts_with('/') {
            return Err(bad("must be relative to the lease's scratch"));
        }
        if path.len() > MAX_PATH {
            return Err(bad("too long"));
        }
        let mut parts = Vec::new();
        for c in path.split('/') {
            match c {
                "" | "." => {}
                ".." => return Err(bad("'..' is not allowed")),
                c => parts.push(c.to_owned()),
            }
        }
        if parts.is_empty() {
            return Err(bad("empty"));
        }
        Ok(RelPath { parts })
    }

    /// The root itself (a directory listing of the whole scratch).
    pub fn root() -> RelPath {
        RelPath { parts: Vec::new() }
    }

    /// The normalised path, `a/b/c`.
    pub fn as_string(&self) -> String {
        self.parts.join("/")
    }

    fn display(&self) -> String {
        self.as_string()
    }
}

/// What a path names when read: a file to stream, or a directory's entries.
#[derive(Debug)]
pub enum Opened {
    /// A regular file and its size.
    File(std::fs::File, u64),
    /// A directory's entries (name, kind, bytes), sorted by name.
    Dir(Vec<(String, Kind, u64)>),
}

/// The kind of a directory entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Other,
}

/// The resolution rules of every lookup: under the fd, no symlinks at all.
fn beneath() -> ResolveFlags {
    ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS
}

/// A lease's scratch directory, held open so that every lookup is relative to it.
#[derive(Debug)]
pub struct Root {
    fd: OwnedFd,
    uid: u32,
}

impl Root {
    /// Opens the scratch root `dir` (made by hostd; trusted) for files owned by `uid`.
    pub fn open(dir: &Path, uid: u32) -> Result<Root, FileError> {
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = fs::open(dir, flags, Mode::empty()).map_err(io("opening the scratch root"))?;
        Ok(Root { fd, uid })
    }

    fn map(&self, path: &RelPath, e: Errno, context: &'static str) -> FileError {
        let path = path.display();
        match e {
            // ELOOP: a symlink on the way; EXDEV: resolution tried to leave the root.
            Errno::LOOP | Errno::XDEV => FileError::Symlink { path },
            Errno::NOENT => FileError::NotFound { path },
            Errno::NOTDIR => FileError::NotADirectory { path },
            Errno::ISDIR => FileError::IsADirectory { path },
            Errno::NAMETOOLONG => FileError::BadPath {
                path,
                why: "a name is too long",
            },
            e => FileError::Io {
                context,
                source: e.into(),
            },
        }
    }

    /// Opens `path` for reading: a regular file, or a directory to list. `O_NONBLOCK` so a
    /// FIFO a job planted cannot hang the open; it is then refused as not regular.
    pub fn open_read(&self, path: &RelPath) -> Result<Opened, FileError> {
        let name = if path.parts.is_empty() {
            ".".to_owned()
        } else {
            path.as_string()
        };
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let fd = fs::openat2(&self.fd, name.as_str(), flags, Mode::empty(), beneath())
            .map_err(|e| self.map(path, e, "opening a file"))?;
        let st = fs::fstat(&fd).map_err(io("reading a file's status"))?;
        match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => Ok(Opened::File(std::fs::File::from(fd), st.st_size as u64)),
            FileType::Directory => list(fd).map(Opened::Dir),
            _ => Err(FileError::NotRegular {
                path: path.display(),
            }),
        }
    }

    /// Opens (making it, 0700, owned by the uid, if missing) each directory of `parts`.
    fn make_dirs(&self, path: &RelPath, parts: &[String]) -> Result<OwnedFd, FileError> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mut dir = fs::openat2(&self.fd, ".", flags, Mode::empty(), beneath())
            .map_err(|e| self.map(path, e, "opening the scratch root"))?;
        for part in parts {
            let open = |d: &OwnedFd| fs::openat2(d, part.as_str(), flags, Mode::empty(), beneath());
            let next = match open(&dir) {
                Ok(fd) => fd,
                Err(Errno::NOENT) => {
                    match fs::mkdirat(&dir, part.as_str(), Mode::from_raw_mode(0o700)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => return Err(self.map(path, e, "making a directory")),
                    }
                    let fd = open(&dir).map_err(|e| self.map(path, e, "opening a directory"))?;
                    self.give(&fd, 0o700)?;
                    fd
                }
                Err(e) => return Err(self.not_a_dir(&dir, part, path, e)),
            };
            dir = next;
        }
        Ok(dir)
    }

    /// Why `part` of `dir` did not open as a directory: `O_NOFOLLOW | O_DIRECTORY` says
    /// ENOTDIR for a symlink too, so look (without following) to tell the tenant which.
    fn not_a_dir(&self, dir: &OwnedFd, part: &str, path: &RelPath, e: Errno) -> FileError {
        if e == Errno::NOTDIR {
            if let Ok(st) = fs::statat(dir, part, AtFlags::SYMLINK_NOFOLLOW) {
                if FileType::from_raw_mode(st.st_mode) == FileType::Symlink {
                    return FileError::Symlink {
                        path: path.display(),
                    };
                }
            }
        }
        self.map(path, e, "opening a directory")
    }

    /// Gives `fd` to the lease's uid with `mode`.
    fn give(&self, fd: impl AsFd, mode: u32) -> Result<(), FileError> {
        let (uid, gid) = (Uid::from_raw(self.uid), Gid::from_raw(self.uid));
        fs::fchown(&fd, Some(uid), Some(gid)).map_err(io("giving a file to the lease's uid"))?;
        fs::fchmod(&fd, Mode::from_raw_mode(mode)).map_err(io("setting a file's mode"))
    }

    /// Starts writing `path`: parents made, a fresh temporary file beside it (0600, the
    /// lease's uid). Nothing appears under `path` until [`Upload::commit`].
    pub fn create(&self, path: &RelPath) -> Result<Upload, FileError> {
        let (name, parents) = path.parts.split_last().ok_or_else(|| FileError::BadPath {
            path: String::new(),
            why: "empty",
        })?;
        let dir = self.make_dirs(path, parents)?;
        self.refuse_link_or_dir(&dir, path, name)?;
        let temp = temp_name();
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = fs::openat2(
            &dir,
            temp.as_str(),
            flags,
            Mode::from_raw_mode(0o600),
            beneath(),
        )
        .map_err(|e| self.map(path, e, "creating a file"))?;
        let upload = Upload {
            dir,
            temp,
            name: name.clone(),
            file: Some(std::fs::File::from(fd)),
            committed: false,
        };
        upload
            .file
            .as_ref()
            .map(|f| self.give_file(f))
            .transpose()?;
        Ok(upload)
    }

    fn give_file(&self, f: &std::fs::File) -> Result<(), FileError> {
        self.give(f.as_fd(), 0o600)
    }

    /// A symlink or directory at the final name is refused up front, so the tenant hears
    /// why. (Safety does not depend on it: the rename replaces a link, never follows it.)
    fn refuse_link_or_dir(
        &self,
        dir: &OwnedFd,
        path: &RelPath,
        name: &str,
    ) -> Result<(), FileError> {
        match fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(self.map(path, e, "checking a file")),
            Ok(st) => match FileType::from_raw_mode(st.st_mode) {
                FileType::Symlink => Err(FileError::Symlink {
                    path: path.display(),
                }),
                FileType::Directory => Err(FileError::IsADirectory {
                    path: path.display(),
                }),
                _ => Ok(()),
            },
        }
    }
}

/// `.upload-<16 hex digits>`: unguessable enough that a job cannot pre-plant it, and
/// `O_EXCL` refuses it anyway if one did.
fn temp_name() -> String {
    use rand_core::RngCore;
    format!(".upload-{:016x}", rand_core::OsRng.next_u64())
}

fn io(context: &'static str) -> impl Fn(Errno) -> FileError {
    move |e| FileError::Io {
        context,
        source: e.into(),
    }
}

/// A directory's entries, kinds from `lstat` (a symlink is `Other`, never followed).
fn list(fd: OwnedFd) -> Result<Vec<(String, Kind, u64)>, FileError> {
    let mut dir = fs::Dir::read_from(&fd).map_err(io("listing a directory"))?;
    let mut out = Vec::new();
    while let Some(entry) = dir.read() {
        let entry = entry.map_err(io("listing a directory"))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == "." || name == ".." {
            continue;
        }
        let Ok(st) = fs::statat(&fd, entry.file_name(), AtFlags::SYMLINK_NOFOLLOW) else {
            continue; // removed meanwhile
        };
        let (kind, bytes) = match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => (Kind::File, st.st_size as u64),
            FileType::Directory => (Kind::Dir, 0),
            _ => (Kind::Other, 0),
        };
        out.push((name, kind, bytes));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// A file being uploaded under a temporary name; deleted when dropped uncommitted.
#[derive(Debug)]
pub struct Upload {
    dir: OwnedFd,
    temp: String,
    name: String,
    file: Option<std::fs::File>,
    committed: bool,
}

impl Upload {
    /// The file to write the bytes into, taken once (to move it to an async writer).
    pub fn take_file(&mut self) -> Option<std::fs::File> {
        self.file.take()
    }

    /// Renames the complete file over the final name.
    pub fn commit(mut self) -> Result<(), FileError> {
        self.file = None;
        fs::renameat(&self.dir, self.temp.as_str(), &self.dir, self.name.as_str()).map_err(
            |e| match e {
                Errno::ISDIR | Errno::NOTEMPTY | Errno::EXIST => FileError::IsADirectory {
                    path: self.name.clone(),
                },
                e => FileError::Io {
                    context: "renaming an upload into place",
                    source: e.into(),
                },
            },
        )?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        if !self.committed {
            if let Err(e) = fs::unlinkat(&self.dir, self.temp.as_str(), AtFlags::empty()) {
                tracing::warn!(error = %report(&e), "cannot delete an unfinished upload");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    /// The test's own uid (the owner of a fresh tempdir), so fchown is allowed unprivileged.
    fn me() -> u32 {
        let t = tempfile::tempdir().unwrap();
        std::fs::metadata(t.path()).unwrap().uid()
    }

    fn root() -> (tempfile::TempDir, Root) {
        let t = tempfile::tempdir().unwrap();
        let r = Root::open(t.path(), me()).unwrap();
        (t, r)
    }

    fn put(r: &Root, path: &str, bytes: &[u8]) -> Result<(), FileError> {
        let mut up = r.create(&RelPath::parse(path)?)?;
        up.take_file().unwrap().write_all(bytes).unwrap();
        up.commit()
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn bad_paths_are_refused_before_the_disk() {
        for p in [
            "",
            "/etc/passwd",
            "..",
            "a/../../b",
            "a/..",
            "a\0b",
            "./",
            "//",
        ] {
            assert!(
                matches!(RelPath::parse(p), Err(FileError::BadPath { .. })),
                "{p:?}"
            );
        }
        assert_eq!(RelPath::parse("a//./b/").unwrap().as_string(), "a/b");
    }

    #[test]
    fn nested_paths_are_made_and_read_back() {
        let (t, r) = root();
        put(&r, "data/sets/x.bin", b"hello").unwrap();
        let f = t.path().join("data/sets/x.bin");
        assert_eq!(std::fs::read(&f).unwrap(), b"hello");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&f), 0o600);
        assert_eq!(mode(&t.path().join("data/sets")), 0o700);
        assert_eq!(std::fs::metadata(&f).unwrap().uid(), me());
        // Overwrite in place; no temporary left beside it.
        put(&r, "data/sets/x.bin", b"again").unwrap();
        assert_eq!(names(&t.path().join("data/sets")), ["x.bin"]);
        match r
            .open_read(&RelPath::parse("data/sets/x.bin").unwrap())
            .unwrap()
        {
            Opened::File(mut f, 5) => {
                let mut s = String::new();
                f.read_to_string(&mut s).unwrap();
                assert_eq!(s, "again");
            }
            other => panic!("{other:?}"),
        }
        match r.open_read(&RelPath::root()).unwrap() {
            Opened::Dir(e) => assert_eq!(e, [("data".to_owned(), Kind::Dir, 0)]),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_symlinked_directory_pointing_out_is_refused_both_ways() {
        let (t, r) = root();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), t.path().join("x")).unwrap();
        let e = put(&r, "x/passwd", b"pwned").unwrap_err();
        assert!(matches!(e, FileError::Symlink { .. }), "{e:?}");
        let e = put(&r, "x/new/deeper", b"pwned").unwrap_err();
        assert!(matches!(e, FileError::Symlink { .. }), "{e:?}");
        assert!(names(outside.path()).is_empty());
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        let e = r
            .open_read(&RelPath::parse("x/secret").unwrap())
            .unwrap_err();
        assert!(matches!(e, FileError::Symlink { .. }), "{e:?}");
    }

    #[test]
    fn a_symlink_as_the_final_component_is_refused() {
        let (t, r) = root();
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().join("f");
        std::fs::write(&target, "keep").unwrap();
        std::os::unix::fs::symlink(&target, t.path().join("link")).unwrap();
        let e = put(&r, "link", b"pwned").unwrap_err();
        assert!(matches!(e, FileError::Symlink { .. }), "{e:?}");
        let e = r.open_read(&RelPath::parse("link").unwrap()).unwrap_err();
        assert!(matches!(e, FileError::Symlink { .. }), "{e:?}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
    }

    #[test]
    fn an_unfinished_upload_leaves_nothing() {
        let (t, r) = root();
        let mut up = r.create(&RelPath::parse("d/big").unwrap()).unwrap();
        up.take_file().unwrap().write_all(&[7; 4096]).unwrap();
        assert_eq!(names(&t.path().join("d")).len(), 1, "the temporary exists");
        drop(up);
        assert!(names(&t.path().join("d")).is_empty());
    }

    #[test]
    fn missing_files_fifos_and_directories_as_files() {
        let (t, r) = root();
        let e = r.open_read(&RelPath::parse("nope").unwrap()).unwrap_err();
        assert!(matches!(e, FileError::NotFound { .. }), "{e:?}");
        let fifo = t.path().join("fifo");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        let e = r.open_read(&RelPath::parse("fifo").unwrap()).unwrap_err();
        assert!(matches!(e, FileError::NotRegular { .. }), "{e:?}");
        std::fs::create_dir(t.path().join("dir")).unwrap();
        let e = put(&r, "dir", b"x").unwrap_err();
        assert!(matches!(e, FileError::IsADirectory { .. }), "{e:?}");
        std::fs::write(t.path().join("file"), "x").unwrap();
        let e = put(&r, "file/under", b"x").unwrap_err();
        assert!(matches!(e, FileError::NotADirectory { .. }), "{e:?}");
    }
}
