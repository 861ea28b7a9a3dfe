//! Counting and deleting a lease's scratch tree, however deep a tenant's job made it.
//!
//! A job owns its scratch and can nest directories as deep as it likes (`mkdir d; cd d` in a
//! loop: the kernel sets no depth limit, only `PATH_MAX` on one path string). So neither walk
//! here builds paths (a path 4096 bytes long fails with `ENAMETOOLONG`) nor recurses (std's
//! `remove_dir_all` recurses, and a tree 50,000 levels deep overflows a 2 MiB thread stack,
//! which aborts the daemon). Both hold one directory fd at a time: they go down with
//! `openat(O_NOFOLLOW)` and back up with `..`, so a tree's depth costs no file descriptors
//! and no stack. Counting keeps one `u64` per level (where to resume reading the parent);
//! deleting keeps nothing, since what it has done is gone from the directory when it reads
//! it again.
//!
//! Going up through `..` follows the tree as it is then. The tenant's jobs cannot move
//! anything outside their lease's directory (they cannot write to its parent), so `..` never
//! leaves it; and each walk checks that it comes back up to the very directory it started in
//! (device and inode), reporting [`TreeError::Moved`] otherwise. Both are bounded in steps.

use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::{self, AtFlags, Dir, FileType, Mode, OFlags};
use rustix::io::Errno;
use std::ffi::{CStr, CString};
use std::path::Path;

/// Most directory entries one walk visits: far more than any scratch volume's inodes, so
/// reaching it means the tree kept changing under the walk.
const MAX_STEPS: u64 = 100_000_000;

/// Why a walk stopped.
#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    #[error("cannot {what}")]
    Io {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// The walk came back up to another directory than it started in: the tree was moved
    /// while it was walked.
    #[error("the tree changed while it was walked")]
    Moved,
    /// More than [`MAX_STEPS`] entries: the tree kept changing while it was walked.
    #[error("more than {MAX_STEPS} entries visited")]
    TooManySteps,
}

/// A walk's step count, bounded by [`MAX_STEPS`].
#[derive(Default)]
struct Steps(u64);

impl Steps {
    fn take(&mut self) -> Result<(), TreeError> {
        self.0 += 1;
        if self.0 > MAX_STEPS {
            return Err(TreeError::TooManySteps);
        }
        Ok(())
    }
}

fn io(what: &'static str) -> impl FnOnce(Errno) -> TreeError {
    move |e| TreeError::Io {
        what,
        source: e.into(),
    }
}

/// Opens a directory without following a symlink in its place.
fn open_dir(at: impl AsFd, name: &CStr) -> Result<OwnedFd, Errno> {
    fs::openat(
        at,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// The directory a walk starts in, and its identity to check the walk's way back against.
struct Start {
    fd: OwnedFd,
    id: (u64, u64),
}

impl Start {
    fn open(dir: &Path) -> Result<Start, TreeError> {
        let fd = open_dir(fs::CWD, &c_path(dir)?).map_err(io("open the tree"))?;
        let id = identity(&fd)?;
        Ok(Start { fd, id })
    }

    /// A fresh reader of the start directory.
    fn read(&self) -> Result<Dir, TreeError> {
        let fd = open_dir(&self.fd, c".").map_err(io("open the tree"))?;
        Dir::new(fd).map_err(io("read the tree"))
    }

    /// Checks that the walk is back in the directory it started in.
    fn check_back(&self, dir: &Dir) -> Result<(), TreeError> {
        let fd = dir.fd().map_err(io("read the tree"))?;
        if identity(fd)? == self.id {
            Ok(())
        } else {
            Err(TreeError::Moved)
        }
    }
}

fn identity(fd: impl AsFd) -> Result<(u64, u64), TreeError> {
    let st = fs::fstat(fd).map_err(io("stat a directory"))?;
    Ok((st.st_dev, st.st_ino))
}

fn c_path(p: &Path) -> Result<CString, TreeError> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(p.as_os_str().as_bytes()).map_err(|_| TreeError::Io {
        what: "name the tree",
        source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
    })
}

/// The parent of the directory `dir` reads, to go back up to.
fn parent(dir: &Dir) -> Result<Dir, TreeError> {
    let fd = dir.fd().map_err(io("read a directory"))?;
    let up = open_dir(fd, c"..").map_err(io("go back up the tree"))?;
    Dir::new(up).map_err(io("read a directory"))
}

fn is_dot(name: &CStr) -> bool {
    matches!(name.to_bytes(), b"." | b"..")
}

/// Bytes of the regular files under `dir`: each file's length or its allocated blocks,
/// whichever is more; entries deleted during the walk count as nothing.
pub(super) fn bytes(dir: &Path) -> Result<u64, TreeError> {
    let start = Start::open(dir)?;
    let mut cur = start.read()?;
    // Where to resume reading each directory above the current one.
    let mut resume: Vec<i64> = Vec::new();
    let (mut total, mut steps) = (0u64, Steps::default());
    loop {
        steps.take()?;
        match next_entry(&mut cur)? {
            Some((name, next)) => match count_entry(&cur, &name)? {
                Counted::File(n) => total = total.saturating_add(n),
                Counted::Other => {}
                Counted::Dir(child) => {
                    resume.push(next);
                    cur = Dir::new(child).map_err(io("read a directory"))?;
                }
            },
            None => match resume.pop() {
                Some(at) => {
                    cur = parent(&cur)?;
                    cur.seek(at).map_err(io("read a directory"))?;
                }
                None => break,
            },
        }
    }
    start.check_back(&cur)?;
    Ok(total)
}

/// The next entry other than `.` and `..`, with where the one after it starts.
fn next_entry(dir: &mut Dir) -> Result<Option<(CString, i64)>, TreeError> {
    while let Some(entry) = dir.read() {
        let entry = entry.map_err(io("read a directory"))?;
        if !is_dot(entry.file_name()) {
            return Ok(Some((entry.file_name().to_owned(), entry.offset())));
        }
    }
    Ok(None)
}

enum Counted {
    File(u64),
    Dir(OwnedFd),
    Other,
}

/// One entry of the count: a file's bytes, a directory to go into, or nothing (a symlink, a
/// device, or an entry gone since it was listed).
fn count_entry(dir: &Dir, name: &CStr) -> Result<Counted, TreeError> {
    let fd = dir.fd().map_err(io("read a directory"))?;
    let st = match fs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(Errno::NOENT) => return Ok(Counted::Other),
        Err(e) => return Err(io("stat a file")(e)),
    };
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => {
            let len = u64::try_from(st.st_size).unwrap_or(0);
            let blocks = u64::try_from(st.st_blocks).unwrap_or(0);
            Ok(Counted::File(len.max(blocks.saturating_mul(512))))
        }
        FileType::Directory => match open_dir(fd, name) {
            Ok(child) => Ok(Counted::Dir(child)),
            // Replaced or removed since the stat.
            Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP) => Ok(Counted::Other),
            Err(e) => Err(io("open a directory")(e)),
        },
        _ => Ok(Counted::Other),
    }
}

/// Deletes everything under `dir` and `dir` itself; already gone is fine.
pub(super) fn delete(dir: &Path) -> Result<(), TreeError> {
    let start = match Start::open(dir) {
        Err(TreeError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Ok(());
        }
        other => other?,
    };
    empty(&start)?;
    match fs::rmdir(c_path(dir)?) {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(e) => Err(io("delete the tree's top directory")(e)),
    }
}

/// Deletes everything under the start directory. Each directory is read from its beginning
/// whenever the walk comes to it: what was deleted is gone, so nothing is read twice beyond
/// the directory the walk last went into, which is empty by then and removed.
fn empty(start: &Start) -> Result<(), TreeError> {
    let mut cur = start.read()?;
    let (mut depth, mut steps) = (0u64, Steps::default());
    loop {
        steps.take()?;
        match delete_entries(&mut cur)? {
            Some(child) => {
                cur = Dir::new(child).map_err(io("read a directory"))?;
                depth += 1;
            }
            None if depth == 0 => break,
            None => {
                cur = parent(&cur)?;
                depth -= 1;
            }
        }
    }
    start.check_back(&cur)
}

/// Deletes the entries of `dir` it can; returns the first subdirectory that is not empty, to
/// be emptied first, or `None` once `dir` is empty.
fn delete_entries(dir: &mut Dir) -> Result<Option<OwnedFd>, TreeError> {
    dir.rewind();
    while let Some((name, _)) = next_entry(dir)? {
        let fd = dir.fd().map_err(io("read a directory"))?;
        match fs::unlinkat(fd, &name, AtFlags::REMOVEDIR) {
            Ok(()) | Err(Errno::NOENT) => continue,
            Err(Errno::NOTDIR) => match fs::unlinkat(fd, &name, AtFlags::empty()) {
                Ok(()) | Err(Errno::NOENT) => continue,
                Err(e) => return Err(io("delete a file")(e)),
            },
            Err(Errno::NOTEMPTY | Errno::EXIST) => match open_dir(fd, &name) {
                Ok(child) => return Ok(Some(child)),
                Err(Errno::NOENT) => continue,
                Err(e) => return Err(io("open a directory")(e)),
            },
            Err(e) => return Err(io("delete a directory")(e)),
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests;
