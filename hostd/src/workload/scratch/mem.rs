//! A fake [`Scratch`] for tests of its callers: plain, unencrypted directories under a root,
//! and a record of every call.

use super::{
    delete_tree, is_real_dir, logs_dir, private_dir, trees_bytes, unclaimed_leases, validate_lease,
    Erased, Leftover, Scratch, ScratchError, LOGS_DIR,
};
use std::collections::HashMap;
use std::fs;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// A call [`MemScratch`] received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    Create { lease: String, quota_bytes: u64 },
    Erase { lease: String },
    EraseLeftover { lease: String },
}

#[derive(Debug, Default)]
struct State {
    quotas: HashMap<String, u64>,
    calls: Vec<Call>,
}

/// Scratch as plain directories under `root` (no encryption, no kernel keys).
#[derive(Debug)]
pub struct MemScratch {
    root: PathBuf,
    state: Mutex<State>,
}

impl MemScratch {
    /// Scratch under the existing directory `root`.
    pub fn new(root: impl Into<PathBuf>) -> MemScratch {
        MemScratch {
            root: root.into(),
            state: Mutex::default(),
        }
    }

    /// Every create and erase so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.state().calls.clone()
    }

    /// The lease's job logs and scratch folders.
    fn lease_dirs(&self, lease: &str) -> Result<[PathBuf; 2], ScratchError> {
        Ok([logs_dir(&self.root, lease)?, self.root.join(lease)])
    }

    /// Deletes the lease's folders; the bytes they held.
    fn delete(&self, lease: &str) -> Result<Erased, ScratchError> {
        let dirs = self.lease_dirs(lease)?;
        let bytes = trees_bytes(&dirs)?;
        for dir in &dirs {
            delete_tree(dir)?;
        }
        Ok(Erased {
            bytes,
            files_busy: false,
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn live_quota(&self, lease: &str) -> Result<u64, ScratchError> {
        validate_lease(lease)?;
        self.state()
            .quotas
            .get(lease)
            .copied()
            .ok_or_else(|| ScratchError::UnknownLease {
                lease: lease.to_owned(),
            })
    }
}

impl Scratch for MemScratch {
    fn create(&self, lease: &str, quota_bytes: u64) -> Result<PathBuf, ScratchError> {
        validate_lease(lease)?;
        let mut state = self.state();
        state.calls.push(Call::Create {
            lease: lease.to_owned(),
            quota_bytes,
        });
        let dir = self.root.join(lease);
        if state.quotas.contains_key(lease) || dir.exists() {
            return Err(ScratchError::Exists {
                lease: lease.to_owned(),
            });
        }
        fs::create_dir(&dir).map_err(|source| ScratchError::Io {
            what: "create",
            path: dir.clone(),
            source,
        })?;
        state.quotas.insert(lease.to_owned(), quota_bytes);
        Ok(dir)
    }

    fn path(&self, lease: &str) -> Result<PathBuf, ScratchError> {
        self.live_quota(lease).map(|_| self.root.join(lease))
    }

    fn logs_path(&self, lease: &str) -> Result<PathBuf, ScratchError> {
        logs_dir(&self.root, lease)
    }

    fn logs(&self, lease: &str) -> Result<PathBuf, ScratchError> {
        let dir = logs_dir(&self.root, lease)?;
        let scratch = self.root.join(lease);
        if !is_real_dir(&scratch) {
            return Err(ScratchError::UnknownLease {
                lease: lease.to_owned(),
            });
        }
        private_dir(&self.root.join(LOGS_DIR))?;
        private_dir(&dir)?;
        Ok(dir)
    }

    fn bytes_used(&self, lease: &str) -> Result<u64, ScratchError> {
        self.live_quota(lease)?;
        trees_bytes(&self.lease_dirs(lease)?)
    }

    fn quota(&self, lease: &str) -> Result<u64, ScratchError> {
        self.live_quota(lease)
    }

    fn erase(&self, lease: &str) -> Result<Erased, ScratchError> {
        self.state().calls.push(Call::Erase {
            lease: lease.to_owned(),
        });
        self.live_quota(lease)?;
        let erased = self.delete(lease)?;
        self.state().quotas.remove(lease);
        Ok(erased)
    }

    fn leftovers(&self) -> Result<Vec<Leftover>, ScratchError> {
        let state = self.state();
        let leases = unclaimed_leases(&self.root, |name| state.quotas.contains_key(name))?;
        Ok(leases
            .into_iter()
            .map(|lease| Leftover {
                path: self.root.join(&lease),
                lease,
                unlocked: true,
            })
            .collect())
    }

    fn erase_leftover(&self, lease: &str) -> Result<Erased, ScratchError> {
        validate_lease(lease)?;
        self.state().calls.push(Call::EraseLeftover {
            lease: lease.to_owned(),
        });
        if self.state().quotas.contains_key(lease) {
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
        self.delete(lease)
    }
}
