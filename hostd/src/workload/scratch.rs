//! Per-lease encrypted scratch directories, crypto-erased when the lease ends (fscrypt v2).
//!
//! Each lease's scratch is a directory `<root>/<lease>` bound to a fresh random 64-byte key.
//! The key is handed to the kernel (the filesystem's keyring) and hostd's own copy is wiped
//! at once: only the 16-byte key identifier, which reveals nothing about the key, is kept,
//! in memory. [`Scratch::erase`] removes the key from the kernel first and then deletes the
//! tree, so whatever a deletion misses (blocks not yet overwritten, a copy of the image) is
//! ciphertext under a key that no longer exists anywhere: a crypto-erase, not just `rm`.
//! Sizes and times are not encrypted.
//!
//! Job logs: a job's output is the tenant's data as much as its files are, so it is kept
//! under the same key, in `<root>/.logs/<lease>` ([`Scratch::logs`]): beside the scratch
//! rather than in it, because the lease's uid owns its scratch directory and could swap a
//! folder there for a symlink to a file of the node's, which systemd (root) would then append
//! to. `.logs` is no lease id, so it is never taken for a lease's scratch.
//!
//! Restarts: the kernel keeps keys until they are removed or the filesystem is unmounted, not
//! as long as hostd runs, and hostd never writes a key down. So after a hostd restart an old
//! lease directory is still readable until the next reboot/unmount, but hostd can neither
//! vouch for it nor, after a reboot, unlock it again. hostd does not re-adopt scratch: a
//! restart while leases run loses their scratch. [`Scratch::leftovers`] lists what an earlier
//! run left behind (with whether its key is still in the kernel) and
//! [`Scratch::erase_leftover`] crypto-erases one (the key identifier is read back from the
//! directory's policy); the caller erases those of ended leases, and those of running leases
//! before giving them new scratch.
//!
//! Quota: the kernel does not enforce one. ext4 project quota (`-O quota,project`, mounted
//! `prjquota`) would, but the development kernel lacks `CONFIG_QFMT_V2` and refuses to mount
//! such a filesystem at all. The quota given at [`Scratch::create`] is remembered and
//! [`Scratch::check_quota`] compares [`Scratch::bytes_used`] against it, so that callers
//! refuse uploads over quota; a job writing inside the sandbox is limited only by the
//! filesystem's size.
//!
//! [`Fscrypt`] is the real implementation; `MemScratch` (tests, dev) records calls over plain
//! directories, and `volume::DevVolume` makes a loop-mounted ext4 to put [`Fscrypt`] on.

#[cfg(any(test, feature = "dev"))]
mod mem;
mod tree;
#[cfg(any(test, feature = "dev"))]
pub mod volume;

#[cfg(any(test, feature = "dev"))]
pub use mem::{Call, MemScratch};

use attest::report::report;
use fscrypt::{KeyIdentifier, KeyStatus, RawKey, Removal};
use std::collections::HashMap;
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Longest lease id accepted as a directory name (well under NAME_MAX even once encrypted
/// names are padded and encoded).
pub const MAX_LEASE_LEN: usize = 64;

/// The folder under the scratch root that holds each lease's job logs (see the module doc).
pub const LOGS_DIR: &str = ".logs";

/// Why scratch could not be made, measured or erased. Messages are for the operator's log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScratchError {
    #[error("lease id {lease:?} cannot name a scratch directory (1 to 64 of A-Z a-z 0-9 _ -)")]
    BadLease { lease: String },
    #[error("lease {lease} already has scratch")]
    Exists { lease: String },
    #[error("lease {lease} has no scratch made by this hostd")]
    UnknownLease { lease: String },
    #[error("lease {lease}'s scratch is live; erase it with erase, not as a leftover")]
    Live { lease: String },
    #[error("lease {lease} would use {would} bytes of scratch, over its quota of {quota}")]
    OverQuota {
        lease: String,
        would: u64,
        quota: u64,
    },
    #[error("no randomness for lease {lease}'s key")]
    Rng {
        lease: String,
        #[source]
        source: rand_core::Error,
    },
    #[error("fscrypt refused for lease {lease}")]
    Fscrypt {
        lease: String,
        #[source]
        source: fscrypt::Error,
    },
    #[error("cannot {what} {path}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot {what} the tree under {path}")]
    Tree {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: tree::TreeError,
    },
}

/// What an erase did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Erased {
    /// Bytes the scratch used just before (as [`Scratch::bytes_used`] counts).
    pub bytes: u64,
    /// Files were still open when the key was removed, even after the tree was deleted: the
    /// key itself is gone, but those files' per-file keys stay in kernel memory until the
    /// processes holding them (which should have been stopped first) close them.
    pub files_busy: bool,
}

/// A lease directory an earlier hostd left behind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftover {
    pub lease: String,
    pub path: PathBuf,
    /// Its key is still in the kernel (or it is not encrypted at all), so its contents are
    /// readable until erased.
    pub unlocked: bool,
}

/// Per-lease scratch storage: the side-effecting interface the lease logic uses.
pub trait Scratch: Send + Sync {
    /// Makes `lease`'s empty scratch directory, encrypted under a fresh key; its path. The
    /// directory is root's, mode 0700: the caller hands it to the lease's uid.
    fn create(&self, lease: &str, quota_bytes: u64) -> Result<PathBuf, ScratchError>;

    /// Where `lease`'s scratch is.
    fn path(&self, lease: &str) -> Result<PathBuf, ScratchError>;

    /// Where `lease`'s job logs are (see [`Scratch::logs`]): only the id is checked, so that
    /// logs can be read whatever made them.
    fn logs_path(&self, lease: &str) -> Result<PathBuf, ScratchError>;

    /// `lease`'s folder for its jobs' output, made if missing: root's, mode 0700, encrypted
    /// under the key of the lease's scratch, which must exist (made by this hostd, or left by
    /// an earlier one with its key still in the kernel). It is erased with the scratch.
    fn logs(&self, lease: &str) -> Result<PathBuf, ScratchError>;

    /// Bytes `lease`'s scratch and job logs use: per regular file, the larger of its size and
    /// its allocated blocks (sparse files and block rounding both count); symlinks not
    /// followed.
    fn bytes_used(&self, lease: &str) -> Result<u64, ScratchError>;

    /// The quota given at [`Scratch::create`].
    fn quota(&self, lease: &str) -> Result<u64, ScratchError>;

    /// Refuses (`OverQuota`) when adding `more` bytes would take `lease` over its quota: the
    /// check callers make before accepting an upload, since the kernel enforces none.
    fn check_quota(&self, lease: &str, more: u64) -> Result<(), ScratchError> {
        within_quota(lease, self.bytes_used(lease)?, more, self.quota(lease)?)
    }

    /// Crypto-erases `lease`'s scratch and job logs: removes its key from the kernel, then
    /// deletes the trees (never following symlinks). Retrying after a failure is safe.
    fn erase(&self, lease: &str) -> Result<Erased, ScratchError>;

    /// Lease directories under the root that this hostd did not create (see the module doc).
    fn leftovers(&self) -> Result<Vec<Leftover>, ScratchError>;

    /// Crypto-erases a leftover (refused for a live lease: use [`Scratch::erase`]).
    fn erase_leftover(&self, lease: &str) -> Result<Erased, ScratchError>;
}

/// Checks that `lease` is safe as one path component: `[A-Za-z0-9_-]{1,64}`, so no `..`, `/`
/// or NUL can take a path out of the root.
pub fn validate_lease(lease: &str) -> Result<(), ScratchError> {
    if super::is_plain_name(lease, MAX_LEASE_LEN) {
        Ok(())
    } else {
        Err(ScratchError::BadLease {
            lease: lease.to_owned(),
        })
    }
}

fn io_err(what: &'static str, path: &Path) -> impl FnOnce(io::Error) -> ScratchError {
    let path = path.to_owned();
    move |source| ScratchError::Io { what, path, source }
}

/// Bytes under `dir` as [`Scratch::bytes_used`] counts them: each regular file's length or
/// its allocated blocks, whichever is more. Entries deleted during the walk count as nothing.
/// The walk holds one directory at a time (see [`tree`]): a job can nest its scratch deeper
/// than any path can name.
pub(crate) fn tree_bytes(dir: &Path) -> Result<u64, ScratchError> {
    tree::bytes(dir).map_err(tree_err("count", dir))
}

/// Deletes `dir` and everything under it without following symlinks, one directory at a
/// time (see [`tree`]); already gone is fine.
pub(crate) fn delete_tree(dir: &Path) -> Result<(), ScratchError> {
    tree::delete(dir).map_err(tree_err("delete", dir))
}

/// [`tree_bytes`] of each of `dirs` that exists, added.
pub(crate) fn trees_bytes(dirs: &[PathBuf]) -> Result<u64, ScratchError> {
    let mut total = 0u64;
    for dir in dirs {
        match fs::symlink_metadata(dir) {
            Ok(_) => total = total.saturating_add(tree_bytes(dir)?),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("stat", dir)(e)),
        }
    }
    Ok(total)
}

/// Refuses (`OverQuota`) `more` bytes into `lease`'s scratch holding `used` of `quota`.
pub(crate) fn within_quota(
    lease: &str,
    used: u64,
    more: u64,
    quota: u64,
) -> Result<(), ScratchError> {
    let would = used.saturating_add(more);
    if would > quota {
        return Err(ScratchError::OverQuota {
            lease: lease.to_owned(),
            would,
            quota,
        });
    }
    Ok(())
}

/// `path` is a directory itself (a symlink to one is not).
pub(crate) fn is_real_dir(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
}

/// `<root>/.logs/<lease>`, for a valid lease id.
pub(crate) fn logs_dir(root: &Path, lease: &str) -> Result<PathBuf, ScratchError> {
    validate_lease(lease)?;
    Ok(root.join(LOGS_DIR).join(lease))
}

/// Makes `dir` (root's, 0700) unless it exists.
pub(crate) fn private_dir(dir: &Path) -> Result<(), ScratchError> {
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(io_err("create", dir)(e)),
        _ => Ok(()),
    }
}

/// Lease ids with a scratch or a logs folder under `root` that `is_live` does not claim,
/// each once, sorted.
pub(crate) fn unclaimed_leases(
    root: &Path,
    is_live: impl Fn(&str) -> bool,
) -> Result<Vec<String>, ScratchError> {
    let mut names: Vec<String> = unclaimed_dirs(root, &is_live)?
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    let logs = root.join(LOGS_DIR);
    if is_real_dir(&logs) {
        names.extend(unclaimed_dirs(&logs, &is_live)?.into_iter().map(|(n, _)| n));
    }
    names.sort();
    names.dedup();
    Ok(names)
}

fn tree_err(what: &'static str, path: &Path) -> impl FnOnce(tree::TreeError) -> ScratchError {
    let path = path.to_owned();
    move |e| ScratchError::Tree {
        what,
        path,
        source: e,
    }
}

/// Lease-named directories directly under `root` that `is_live` does not claim.
pub(crate) fn unclaimed_dirs(
    root: &Path,
    is_live: impl Fn(&str) -> bool,
) -> Result<Vec<(String, PathBuf)>, ScratchError> {
    let mut found = Vec::new();
    for entry in fs::read_dir(root).map_err(io_err("list", root))? {
        let entry = entry.map_err(io_err("list", root))?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        if is_dir && validate_lease(&name).is_ok() && !is_live(&name) {
            found.push((name, entry.path()));
        }
    }
    found.sort();
    Ok(found)
}

/// What hostd keeps about a live lease's scratch: never the key.
#[derive(Debug, Clone, Copy)]
struct Entry {
    key: KeyIdentifier,
    quota: u64,
}

/// Scratch on a directory whose filesystem supports fscrypt (ext4 made with `-O encrypt`,
/// or f2fs/ubifs/ceph with it).
#[derive(Debug)]
pub struct Fscrypt {
    root: PathBuf,
    leases: Mutex<HashMap<String, Entry>>,
}

impl Fscrypt {
    /// Scratch under `root`, which must exist (made by the operator or `DevVolume`).
    pub fn new(root: impl Into<PathBuf>) -> Result<Fscrypt, ScratchError> {
        let root = root.into();
        let meta = fs::metadata(&root).map_err(io_err("use as scratch root", &root))?;
        if !meta.is_dir() {
            let source = io::Error::new(io::ErrorKind::NotADirectory, "not a directory");
            return Err(io_err("use as scratch root", &root)(source));
        }
        Ok(Fscrypt {
            root,
            leases: Mutex::new(HashMap::new()),
        })
    }

    /// The map holds no invariant a panic elsewhere could break halfway, so poisoning is
    /// ignored.
    fn leases(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        self.leases.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn root_fd(&self) -> Result<File, ScratchError> {
        File::open(&self.root).map_err(io_err("open", &self.root))
    }

    fn entry(&self, lease: &str) -> Result<Entry, ScratchError> {
        validate_lease(lease)?;
        self.leases()
            .get(lease)
            .copied()
            .ok_or_else(|| ScratchError::UnknownLease {
                lease: lease.to_owned(),
            })
    }

    fn fscrypt_err(lease: &str) -> impl FnOnce(fscrypt::Error) -> ScratchError {
        let lease = lease.to_owned();
        move |source| ScratchError::Fscrypt { lease, source }
    }

    /// A fresh key, added to the kernel; hostd's copy is wiped on return.
    fn add_fresh_key(&self, lease: &str) -> Result<KeyIdentifier, ScratchError> {
        use rand_core::RngCore;
        let mut key = RawKey::new([0; fscrypt::KEY_SIZE]);
        rand_core::OsRng
            .try_fill_bytes(&mut key[..])
            .map_err(|source| ScratchError::Rng {
                lease: lease.to_owned(),
                source,
            })?;
        fscrypt::add_key(self.root_fd()?, &key).map_err(Self::fscrypt_err(lease))
    }

    /// Makes `dir` (0700, must not exist) and binds it to `key`.
    fn make_encrypted_dir(
        dir: &Path,
        key: &KeyIdentifier,
        lease: &str,
    ) -> Result<(), ScratchError> {
        fs::DirBuilder::new()
            .mode(0o700)
            .create(dir)
            .map_err(|source| match source.kind() {
                io::ErrorKind::AlreadyExists => ScratchError::Exists {
                    lease: lease.to_owned(),
                },
                _ => io_err("create", dir)(source),
            })?;
        let fd = File::open(dir).map_err(io_err("open", dir))?;
        fscrypt::set_policy(fd, key).map_err(Self::fscrypt_err(lease))
    }

    /// Removes `key`; a key already gone (an earlier, interrupted erase) is not an error.
    fn remove_key(&self, lease: &str, key: &KeyIdentifier) -> Result<Removal, ScratchError> {
        match fscrypt::remove_key(self.root_fd()?, key) {
            Err(e) if e.is_no_key() => Ok(Removal::default()),
            other => other.map_err(Self::fscrypt_err(lease)),
        }
    }

    /// The lease's two folders: its job logs and its scratch.
    fn lease_dirs(&self, lease: &str) -> Result<[PathBuf; 2], ScratchError> {
        Ok([logs_dir(&self.root, lease)?, self.root.join(lease)])
    }

    /// Removes `key` if present, deletes `dirs`, and retries a removal that found files busy
    /// (deleting may have released them).
    fn crypto_erase(
        &self,
        lease: &str,
        dirs: &[PathBuf],
        key: Option<KeyIdentifier>,
    ) -> Result<Erased, ScratchError> {
        // Missing already (a retry after the delete, or removed by hand): nothing to count.
        let bytes = trees_bytes(dirs)?;
        let first = match &key {
            Some(k) => self.remove_key(lease, k)?,
            None => Removal::default(),
        };
        for dir in dirs {
            delete_tree(dir)?;
        }
        let files_busy = match (&key, first.files_busy) {
            (Some(k), true) => self.remove_key(lease, k)?.files_busy,
            _ => false,
        };
        if files_busy {
            tracing::warn!(lease, "scratch erased while files were still open");
        }
        Ok(Erased { bytes, files_busy })
    }
}

impl Scratch for Fscrypt {
    fn create(&self, lease: &str, quota_bytes: u64) -> Result<PathBuf, ScratchError> {
        validate_lease(lease)?;
        let mut leases = self.leases();
        if leases.contains_key(lease) {
            return Err(ScratchError::Exists {
                lease: lease.to_owned(),
            });
        }
        let dir = self.root.join(lease);
        let key = self.add_fresh_key(lease)?;
        if let Err(e) = Self::make_encrypted_dir(&dir, &key, lease) {
            self.undo_create(lease, &dir, &key, &e);
            return Err(e);
        }
        leases.insert(
            lease.to_owned(),
            Entry {
                key,
                quota: quota_bytes,
            },
        );
        tracing::info!(lease, key_id = %key, quota_bytes, "scratch created");
        Ok(dir)
    }

    fn path(&self, lease: &str) -> Result<PathBuf, ScratchError> {
        self.entry(lease).map(|_| self.root.join(lease))
    }

    fn logs_path(&self, lease: &str) -> Result<PathBuf, ScratchError> {
        logs_dir(&self.root, lease)
    }

    fn logs(&self, lease: &str) -> Result<PathBuf, ScratchError> {
        let dir = logs_dir(&self.root, lease)?;
        if is_real_dir(&dir) {
            return Ok(dir);
        }
        let key = match self.entry(lease) {
            Ok(e) => e.key,
            Err(ScratchError::UnknownLease { .. }) => self
                .leftover_key(lease, &self.root.join(lease))?
                .ok_or_else(|| ScratchError::UnknownLease {
                    lease: lease.to_owned(),
                })?,
            Err(e) => return Err(e),
        };
        private_dir(&self.root.join(LOGS_DIR))?;
        match Self::make_encrypted_dir(&dir, &key, lease) {
            Err(ScratchError::Exists { .. }) if dir.is_dir() => Ok(dir),
            other => other.map(|()| dir),
        }
    }

    fn bytes_used(&self, lease: &str) -> Result<u64, ScratchError> {
        self.entry(lease)?;
        trees_bytes(&self.lease_dirs(lease)?)
    }

    fn quota(&self, lease: &str) -> Result<u64, ScratchError> {
        self.entry(lease).map(|e| e.quota)
    }

    fn erase(&self, lease: &str) -> Result<Erased, ScratchError> {
        let entry = self.entry(lease)?;
        let erased = self.crypto_erase(lease, &self.lease_dirs(lease)?, Some(entry.key))?;
        self.leases().remove(lease);
        tracing::info!(
            lease,
            bytes = erased.bytes,
            files_busy = erased.files_busy,
            "scratch erased"
        );
        Ok(erased)
    }

    fn leftovers(&self) -> Result<Vec<Leftover>, ScratchError> {
        let live: Vec<String> = self.leases().keys().cloned().collect();
        let leases = unclaimed_leases(&self.root, |name| live.iter().any(|l| l == name))?;
        let root = self.root_fd()?;
        let mut out = Vec::with_capacity(leases.len());
        for lease in leases {
            let path = self.root.join(&lease);
            let key = self.leftover_key_of(&lease)?;
            let unlocked = match key {
                Some(k) => {
                    fscrypt::key_status(&root, &k).map_err(Self::fscrypt_err(&lease))?
                        != KeyStatus::Absent
                }
                None => true,
            };
            out.push(Leftover {
                lease,
                path,
                unlocked,
            });
        }
        Ok(out)
    }

    fn erase_leftover(&self, lease: &str) -> Result<Erased, ScratchError> {
        validate_lease(lease)?;
        if self.leases().contains_key(lease) {
            return Err(ScratchError::Live {
                lease: lease.to_owned(),
            });
        }
        let dirs = self.lease_dirs(lease)?;
        if !dirs.iter().any(|d| is_real_dir(d)) {
            return Err(ScratchError::UnknownLease {
                lease: lease.to_owned(),
            });
        }
        let key = self.leftover_key_of(lease)?;
        let erased = self.crypto_erase(lease, &dirs, key)?;
        tracing::info!(
            lease,
            bytes = erased.bytes,
            files_busy = erased.files_busy,
            "leftover scratch erased"
        );
        Ok(erased)
    }
}

impl Fscrypt {
    /// Best-effort rollback of a half-made lease directory; the original error is what the
    /// caller sees, a failed rollback is logged.
    fn undo_create(&self, lease: &str, dir: &Path, key: &KeyIdentifier, cause: &ScratchError) {
        let created_here = !matches!(cause, ScratchError::Exists { .. });
        let deleted = if created_here {
            delete_tree(dir)
        } else {
            Ok(())
        };
        let removed = self.remove_key(lease, key);
        if let Err(e) = deleted.and(removed.map(drop)) {
            tracing::warn!(lease, error = %report(&e), "could not undo a failed scratch create");
        }
    }

    /// The key identifier of a leftover lease: its scratch's policy, or its logs folder's
    /// where the scratch is gone (`None`: not encrypted).
    fn leftover_key_of(&self, lease: &str) -> Result<Option<KeyIdentifier>, ScratchError> {
        let [logs, scratch] = self.lease_dirs(lease)?;
        let dir = if is_real_dir(&scratch) { scratch } else { logs };
        self.leftover_key(lease, &dir)
    }

    /// The key identifier a leftover directory's policy names (`None`: not encrypted).
    fn leftover_key(&self, lease: &str, dir: &Path) -> Result<Option<KeyIdentifier>, ScratchError> {
        let fd = File::open(dir).map_err(io_err("open", dir))?;
        fscrypt::policy_identifier(fd).map_err(Self::fscrypt_err(lease))
    }
}

#[cfg(test)]
mod tests {
    //! On a real loop-mounted ext4 (`-O encrypt`) where the test runs as root; skipped with a
    //! printed reason otherwise. Id validation and unknown leases need no mount.

    use std::os::unix::fs::MetadataExt;

    use super::volume::DevVolume;
    use super::*;
    use std::io::Write;

    /// A mounted [`DevVolume`] in a temporary directory, unmounted on drop (also when the
    /// test fails), before the directory goes.
    struct TestVolume {
        vol: Option<DevVolume>,
        dir: tempfile::TempDir,
    }

    fn is_root() -> bool {
        let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
        let uid = status.lines().find_map(|l| l.strip_prefix("Uid:"));
        uid.and_then(|l| l.split_whitespace().nth(1)) == Some("0")
    }

    impl TestVolume {
        fn new() -> Option<TestVolume> {
            if !is_root() {
                eprintln!("SKIPPED: loop-mounting the test ext4 needs root (euid is not 0)");
                return None;
            }
            let dir = tempfile::tempdir().unwrap();
            let vol = DevVolume::mount(dir.path(), 64 << 20).unwrap();
            Some(TestVolume {
                vol: Some(vol),
                dir,
            })
        }

        fn mnt(&self) -> &Path {
            self.vol.as_ref().unwrap().path()
        }

        /// A fresh [`Fscrypt`] on the volume's `scratch` folder (as after a hostd start).
        fn scratch(&self) -> Fscrypt {
            let root = self.mnt().join("scratch");
            fs::create_dir_all(&root).unwrap();
            Fscrypt::new(root).unwrap()
        }
    }

    impl Drop for TestVolume {
        fn drop(&mut self) {
            if let Some(vol) = self.vol.take() {
                if let Err(e) = vol.unmount() {
                    eprintln!("cleanup of {}: {e}", self.dir.path().display());
                }
            }
        }
    }

    fn write(path: &Path, len: usize) {
        let mut f = File::create(path).unwrap();
        f.write_all(&vec![0x5a; len]).unwrap();
        f.sync_all().unwrap();
    }

    fn status(s: &Fscrypt, key: &KeyIdentifier) -> KeyStatus {
        fscrypt::key_status(s.root_fd().unwrap(), key).unwrap()
    }

    fn key_of(s: &Fscrypt, lease: &str) -> KeyIdentifier {
        s.entry(lease).unwrap().key
    }

    #[test]
    fn created_scratch_is_encrypted_and_readable() {
        let Some(vol) = TestVolume::new() else { return };
        let s = vol.scratch();
        let dir = s.create("lease-1", 1 << 20).unwrap();
        assert_eq!(dir, s.path("lease-1").unwrap());
        fs::write(dir.join("notes.txt"), b"hello").unwrap();
        assert_eq!(fs::read(dir.join("notes.txt")).unwrap(), b"hello");
        let key = key_of(&s, "lease-1");
        let policy = fscrypt::policy_identifier(File::open(&dir).unwrap()).unwrap();
        assert_eq!(
            policy,
            Some(key),
            "the directory is bound to the lease's key"
        );
        assert_eq!(status(&s, &key), KeyStatus::Present);
        let mode = fs::metadata(&dir).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700);
    }

    #[test]
    fn erase_removes_key_and_tree_and_spares_other_leases() {
        let Some(vol) = TestVolume::new() else { return };
        let s = vol.scratch();
        let a = s.create("a", 1 << 20).unwrap();
        let b = s.create("b", 1 << 20).unwrap();
        fs::create_dir(a.join("sub")).unwrap();
        write(&a.join("one"), 4096);
        write(&a.join("sub/three"), 3 * 4096);
        fs::write(b.join("keep"), b"b's data").unwrap();
        let (key_a, key_b) = (key_of(&s, "a"), key_of(&s, "b"));
        assert_eq!(s.bytes_used("a").unwrap(), 4 * 4096);

        let erased = s.erase("a").unwrap();

        assert_eq!(
            erased,
            Erased {
                bytes: 4 * 4096,
                files_busy: false
            }
        );
        assert_eq!(status(&s, &key_a), KeyStatus::Absent);
        assert!(!a.exists(), "the tree is gone");
        assert!(matches!(
            s.path("a"),
            Err(ScratchError::UnknownLease { .. })
        ));
        assert_eq!(status(&s, &key_b), KeyStatus::Present);
        assert_eq!(fs::read(b.join("keep")).unwrap(), b"b's data");
    }

    #[test]
    fn erase_and_bytes_used_do_not_follow_symlinks_out() {
        let Some(vol) = TestVolume::new() else { return };
        let s = vol.scratch();
        let outside = vol.mnt().join("outside");
        fs::create_dir(&outside).unwrap();
        write(&outside.join("precious"), 8 * 4096);
        let dir = s.create("links", 1 << 20).unwrap();
        write(&dir.join("own"), 4096);
        std::os::unix::fs::symlink(&outside, dir.join("to-dir")).unwrap();
        std::os::unix::fs::symlink(outside.join("precious"), dir.join("to-file")).unwrap();

        assert_eq!(s.bytes_used("links").unwrap(), 4096);
        assert_eq!(s.erase("links").unwrap().bytes, 4096);

        assert!(!dir.exists());
        assert_eq!(fs::read(outside.join("precious")).unwrap().len(), 8 * 4096);
    }

    #[test]
    fn a_locked_scratch_reads_as_ciphertext_and_refuses_opens() {
        let Some(vol) = TestVolume::new() else { return };
        let s = vol.scratch();
        let dir = s.create("locked", 1 << 20).unwrap();
        fs::write(dir.join("secret.txt"), b"tenant secret").unwrap();

        // The first half of an erase: the key leaves the kernel, the tree stays.
        let removal = s.remove_key("locked", &key_of(&s, "locked")).unwrap();

        assert_eq!(removal, Removal::default());
        let names: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1);
        assert_ne!(names[0], "secret.txt", "names read as ciphertext");
        let err = File::open(dir.join(&names[0])).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOKEY), "{err}");
        // The erase that follows a lock (or an interrupted erase) still completes.
        assert_eq!(s.erase("locked").unwrap().bytes, 4096);
        assert!(!dir.exists());
    }

    #[test]
    fn erase_with_files_still_open_says_so() {
        let Some(vol) = TestVolume::new() else { return };
        let s = vol.scratch();
        let dir = s.create("busy", 1 << 20).unwrap();
        write(&dir.join("held"), 4096);
        let held = File::open(dir.join("held")).unwrap();
        let key = key_of(&s, "busy");

        let erased = s.erase("busy").unwrap();

        assert!(erased.files_busy, "{erased:?}");
        assert!(!dir.exists());
        assert_ne!(status(&s, &key), KeyStatus::Present);
        drop(held);
    }

    #[test]
    fn quota_is_checked_against_bytes_used() {
        let Some(vol) = TestVolume::new() else { return };
        let s = vol.scratch();
        let dir = s.create("q", 8192).unwrap();
        write(&dir.join("f"), 4096);
        s.check_quota("q", 4096).unwrap();
        let err = s.check_quota("q", 4097).unwrap_err();
        assert!(
            matches!(
                err,
                ScratchError::OverQuota {
                    would: 8193,
                    quota: 8192,
                    ..
                }
            ),
            "{err}"
        );
        // A sparse file counts at its size, a tiny one at its block.
        File::create(dir.join("sparse"))
            .unwrap()
            .set_len(1 << 20)
            .unwrap();
        write(&dir.join("tiny"), 1);
        assert_eq!(s.bytes_used("q").unwrap(), 4096 + (1 << 20) + 4096);
    }

    #[test]
    fn after_a_restart_leftovers_are_listed_and_erased() {
        let Some(vol) = TestVolume::new() else { return };
        let before = vol.scratch();
        let dir = before.create("old", 1 << 20).unwrap();
        write(&dir.join("data"), 2 * 4096);
        let key = key_of(&before, "old");
        drop(before);
        let s = vol.scratch();
        s.create("new", 1 << 20).unwrap();

        let left = s.leftovers().unwrap();

        let expected = Leftover {
            lease: "old".into(),
            path: dir.clone(),
            unlocked: true,
        };
        assert_eq!(left, vec![expected]);
        assert!(matches!(
            s.erase("old"),
            Err(ScratchError::UnknownLease { .. })
        ));
        assert!(matches!(
            s.erase_leftover("new"),
            Err(ScratchError::Live { .. })
        ));
        let erased = s.erase_leftover("old").unwrap();
        assert_eq!(
            erased,
            Erased {
                bytes: 2 * 4096,
                files_busy: false
            }
        );
        assert_eq!(status(&s, &key), KeyStatus::Absent);
        assert!(!dir.exists());
        assert_eq!(s.leftovers().unwrap(), vec![]);
    }

    /// A job's output is the tenant's data: its logs folder is under the lease's key, counts
    /// towards the quota, and is crypto-erased with the scratch.
    #[test]
    fn job_logs_are_encrypted_counted_and_erased_with_the_scratch() {
        let Some(vol) = TestVolume::new() else { return };
        let s = vol.scratch();
        assert!(matches!(
            s.logs("none-yet"),
            Err(ScratchError::Io { .. } | ScratchError::UnknownLease { .. })
        ));
        let dir = s.create("out", 1 << 20).unwrap();
        write(&dir.join("data"), 4096);
        let logs = s.logs("out").unwrap();
        assert_eq!(logs, s.logs_path("out").unwrap());
        assert_eq!(s.logs("out").unwrap(), logs, "made once, then found");
        write(&logs.join("job.log"), 2 * 4096);
        let key = key_of(&s, "out");
        let policy = fscrypt::policy_identifier(File::open(&logs).unwrap()).unwrap();
        assert_eq!(policy, Some(key), "the logs are under the lease's key");
        assert_eq!(fs::metadata(&logs).unwrap().mode() & 0o777, 0o700);
        assert_eq!(s.bytes_used("out").unwrap(), 3 * 4096);
        assert!(matches!(
            s.check_quota("out", (1 << 20) - 3 * 4096 + 1),
            Err(ScratchError::OverQuota { .. })
        ));

        assert_eq!(s.erase("out").unwrap().bytes, 3 * 4096);

        assert_eq!(status(&s, &key), KeyStatus::Absent);
        assert!(!logs.exists() && !dir.exists());
        assert!(s.root.join(LOGS_DIR).is_dir(), "the shared folder stays");
    }

    /// After a restart a lease's logs are found with its scratch: made again under the
    /// leftover's key while it is still in the kernel, erased with it, and a logs folder whose
    /// scratch is gone is still a leftover to erase.
    #[test]
    fn leftover_job_logs_are_kept_under_their_key_and_erased() {
        let Some(vol) = TestVolume::new() else { return };
        let before = vol.scratch();
        let dir = before.create("old", 1 << 20).unwrap();
        let orphan = before.create("orphan", 1 << 20).unwrap();
        write(&before.logs("orphan").unwrap().join("job.log"), 4096);
        let key = key_of(&before, "old");
        drop(before);
        let s = vol.scratch();
        delete_tree(&orphan).unwrap();

        let logs = s.logs("old").unwrap();

        let policy = fscrypt::policy_identifier(File::open(&logs).unwrap()).unwrap();
        assert_eq!(policy, Some(key), "the leftover's key, not a new one");
        write(&logs.join("job.log"), 4096);
        let left: Vec<String> = s
            .leftovers()
            .unwrap()
            .into_iter()
            .map(|l| l.lease)
            .collect();
        assert_eq!(left, ["old", "orphan"]);
        assert_eq!(s.erase_leftover("old").unwrap().bytes, 4096);
        assert!(!logs.exists() && !dir.exists());
        assert_eq!(s.erase_leftover("orphan").unwrap().bytes, 4096);
        assert_eq!(s.leftovers().unwrap(), vec![]);
        assert!(matches!(
            s.erase_leftover("orphan"),
            Err(ScratchError::UnknownLease { .. })
        ));
    }

    #[test]
    fn create_over_an_existing_directory_is_refused_and_leaves_it() {
        let Some(vol) = TestVolume::new() else { return };
        let s = vol.scratch();
        s.create("twice", 1).unwrap();
        assert!(matches!(
            s.create("twice", 1),
            Err(ScratchError::Exists { .. })
        ));
        let stray = vol.mnt().join("scratch/stray");
        fs::create_dir(&stray).unwrap();
        fs::write(stray.join("x"), b"x").unwrap();
        assert!(matches!(
            s.create("stray", 1),
            Err(ScratchError::Exists { .. })
        ));
        assert_eq!(fs::read(stray.join("x")).unwrap(), b"x");
    }

    #[test]
    fn the_volume_mount_is_reused() {
        let Some(vol) = TestVolume::new() else { return };
        let again = DevVolume::mount(vol.dir.path(), 64 << 20).unwrap();
        assert_eq!(again.path(), vol.mnt());
        let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
        let mnt = vol.mnt().to_str().unwrap();
        let mounts = info.lines().filter(|l| l.split(' ').nth(4) == Some(mnt));
        assert_eq!(mounts.count(), 1, "mounted once, not twice");
    }

    #[test]
    fn lease_ids_that_could_escape_the_root_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let s = Fscrypt::new(dir.path()).unwrap();
        let long = "a".repeat(MAX_LEASE_LEN + 1);
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "../x",
            "/abs",
            "a\0b",
            "a b",
            "ü",
            long.as_str(),
        ] {
            let err = s.create(bad, 1).unwrap_err();
            assert!(
                matches!(err, ScratchError::BadLease { .. }),
                "{bad:?}: {err}"
            );
            assert!(matches!(
                s.erase_leftover(bad),
                Err(ScratchError::BadLease { .. })
            ));
        }
        validate_lease(&"a".repeat(MAX_LEASE_LEN)).unwrap();
        validate_lease("Lease_01-x").unwrap();
        assert_eq!(
            fs::read_dir(dir.path()).unwrap().count(),
            0,
            "nothing was made"
        );
    }

    #[test]
    fn erase_of_an_unknown_lease_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let s = Fscrypt::new(dir.path()).unwrap();
        let err = s.erase("nobody").unwrap_err();
        assert!(matches!(err, ScratchError::UnknownLease { ref lease } if lease == "nobody"));
        assert_eq!(
            err.to_string(),
            "lease nobody has no scratch made by this hostd"
        );
        assert!(matches!(
            s.erase_leftover("nobody"),
            Err(ScratchError::UnknownLease { .. })
        ));
    }

    #[test]
    fn a_root_that_cannot_encrypt_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("plain");
        fs::create_dir(&plain).unwrap();
        // tmpfs/overlay without fscrypt: the create fails and leaves nothing behind.
        let s = Fscrypt::new(&plain).unwrap();
        match s.create("x", 1) {
            Err(ScratchError::Fscrypt { ref lease, .. }) => assert_eq!(lease, "x"),
            Ok(_) => return eprintln!("SKIPPED: the temporary directory supports fscrypt"),
            Err(e) => panic!("unexpected: {e}"),
        }
        assert_eq!(fs::read_dir(&plain).unwrap().count(), 0);
    }

    #[test]
    fn mem_scratch_records_calls_over_plain_directories() {
        let dir = tempfile::tempdir().unwrap();
        let s = MemScratch::new(dir.path());
        let p = s.create("m", 10).unwrap();
        fs::write(p.join("f"), b"12345").unwrap();
        let files = s.bytes_used("m").unwrap();
        let logs = s.logs("m").unwrap();
        assert_eq!(logs, dir.path().join(".logs/m"));
        fs::write(logs.join("j.log"), b"ab").unwrap();
        assert!(s.bytes_used("m").unwrap() > files, "the logs count");
        fs::create_dir(dir.path().join("gone")).unwrap();
        assert!(s.check_quota("m", 6).is_err());
        assert_eq!(s.leftovers().unwrap().len(), 1);
        assert!(!s.erase("m").unwrap().files_busy);
        s.erase_leftover("gone").unwrap();
        let expected = vec![
            Call::Create {
                lease: "m".into(),
                quota_bytes: 10,
            },
            Call::Erase { lease: "m".into() },
            Call::EraseLeftover {
                lease: "gone".into(),
            },
        ];
        assert_eq!(s.calls(), expected);
        let left: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, [LOGS_DIR], "only the shared logs folder");
        assert_eq!(fs::read_dir(dir.path().join(LOGS_DIR)).unwrap().count(), 0);
    }
}
