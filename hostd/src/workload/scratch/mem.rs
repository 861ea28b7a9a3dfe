//! A fake [`Scratch`] for tests of its callers: plain, unencrypted directories under a root,
//! and a record of every call.

use super::{
    delete_tree, tree_bytes, unclaimed_dirs, validate_lease, Erased, Leftover, Scratch,
    ScratchError,
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

    fn bytes_used(&self, lease: &str) -> Result<u64, ScratchError> {
        tree_bytes(&self.path(lease)?)
    }

    fn quota(&self, lease: &str) -> Result<u64, ScratchError> {
        self.live_quota(lease)
    }

    fn erase(&self, lease: &str) -> Result<Erased, ScratchError> {
        self.state().calls.push(Call::Erase {
            lease: lease.to_owned(),
        });
        let dir = self.path(lease)?;
        let bytes = tree_bytes(&dir)?;
        delete_tree(&dir)?;
        self.state().quotas.remove(lease);
        Ok(Erased {
            bytes,
            files_busy: false,
        })
    }

    fn leftovers(&self) -> Result<Vec<Leftover>, ScratchError> {
        let state = self.state();
        let dirs = unclaimed_dirs(&self.root, |name| state.quotas.contains_key(name))?;
        Ok(dirs
            .into_iter()
            .map(|(lease, path)| Leftover {
                lease,
                path,
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
        let dir = self.root.join(lease);
        if !fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) {
            return Err(ScratchError::UnknownLease {
                lease: lease.to_owned(),
            });
        }
        let bytes = tree_bytes(&dir)?;
        delete_tree(&dir)?;
        Ok(Erased {
            bytes,
            files_busy: false,
        })
    }
}
