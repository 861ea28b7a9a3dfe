//! The node's state in sled: one database under `<state>/db`, one tree per concept.
//!
//! Values are JSON so that an operator can inspect a state directory with ordinary tools and
//! so that adding a field is a compatible change; the schema version in the `meta` tree
//! guards against a state directory written by a newer, incompatible build.
//!
//! The node reads and writes through [`JsonTree`], which sits on the small [`RawTree`]
//! trait: sled on disk ([`raw::SledTree`]) in the daemon, a `BTreeMap`
//! ([`raw::MemTree`]) in unit tests. Keys are built in one place, [`keys`], never with
//! `format!` at the call site.

pub mod keys;
pub mod raw;

use attest::report::report;
pub use raw::RawTree;
use serde::{de::DeserializeOwned, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// sled's page cache. Its default (1 GiB) lets a node's memory grow with its ledger as
/// records are read (the start-up check reads them all); 16 MiB keeps hostd's resident
/// memory under 100 MB at a million records, at the cost of re-reading cold pages.
pub const CACHE_BYTES: u64 = 16 * 1024 * 1024;

/// Schema version this build writes and understands.
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open state database {path}")]
    Open { path: PathBuf, source: sled::Error },
    #[error(
        "the state database {path} is damaged (its files do not read back as written). hostd \
         refuses to start. Move {path} aside, restore it from a backup (or start with none), \
         then run `hostd ledger recover --from-export DIR` (docs/operations.md, \"Backup, \
         restore and recovery\")"
    )]
    Damaged { path: PathBuf },
    #[error(
        "state directory {path} was written by a newer hostd (schema {found}, this build understands up to {SCHEMA_VERSION}); refusing to start — run the newer hostd or restore a backup"
    )]
    NewerSchema { path: PathBuf, found: u32 },
    #[error("state database")]
    Sled(#[from] sled::Error),
    #[error("corrupt {tree} entry {key}: {message}")]
    Corrupt {
        tree: &'static str,
        key: String,
        message: String,
    },
}

/// Whether sled refused to open a database because another process holds its lock.
pub fn is_lock_error(e: &sled::Error) -> bool {
    matches!(e, sled::Error::Io(io) if io.to_string().contains("could not acquire lock"))
}

/// Runs `open` until it succeeds or fails with an error `locked` does not recognise, for at
/// most 5 s. A hostd that just stopped holds its database lock for a moment while sled's
/// background threads finish; a running one holds it for good, and the last (locked) error
/// is returned. For offline tools on a stopped node's state.
pub fn while_locked<T, E>(
    mut open: impl FnMut() -> Result<T, E>,
    locked: impl Fn(&E) -> bool,
) -> Result<T, E> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match open() {
            Err(e) if locked(&e) && std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            other => return other,
        }
    }
}

/// Handle to the node's sled database and its typed trees.
#[derive(Clone)]
pub struct Store {
    db: sled::Db,
    meta: sled::Tree,
}

/// A tree of JSON values keyed by string ids, over any [`RawTree`].
#[derive(Clone)]
pub struct JsonTree {
    name: &'static str,
    tree: Arc<dyn RawTree>,
}

impl Store {
    /// Opens (creating if needed) the database under `state_dir/db` and checks its schema.
    pub fn open(state_dir: &Path) -> Result<Store, StoreError> {
        let path = state_dir.join("db");
        let db = sled::Config::new()
            .path(&path)
            .cache_capacity(CACHE_BYTES)
            .open()
            .map_err(|source| match source {
                sled::Error::Corruption { .. } | sled::Error::ReportableBug(_) => {
                    StoreError::Damaged { path: path.clone() }
                }
                source => StoreError::Open {
                    path: path.clone(),
                    source,
                },
            })?;
        let meta = db.open_tree("meta")?;
        match meta.get("schema")? {
            Some(v) => {
                let found = <[u8; 4]>::try_from(v.as_ref())
                    .map(u32::from_be_bytes)
                    .map_err(|_| StoreError::Corrupt {
                        tree: "meta",
                        key: "schema".into(),
                        message: format!("expected 4 bytes, found {}", v.len()),
                    })?;
                if found > SCHEMA_VERSION {
                    return Err(StoreError::NewerSchema { path, found });
                }
            }
            None => {
                meta.insert("schema", &SCHEMA_VERSION.to_be_bytes())?;
                db.flush()?;
            }
        }
        Ok(Store { db, meta })
    }

    /// [`Store::open`] for offline tools on a stopped node, waiting out sled's lock as
    /// [`while_locked`] does.
    pub fn open_stopped(state_dir: &Path) -> Result<Store, StoreError> {
        while_locked(
            || Store::open(state_dir),
            |e| matches!(e, StoreError::Open { source, .. } if is_lock_error(source)),
        )
    }

    pub fn db(&self) -> &sled::Db {
        &self.db
    }

    pub fn tree(&self, name: &'static str) -> Result<JsonTree, StoreError> {
        Ok(JsonTree {
            name,
            tree: Arc::new(raw::SledTree(self.db.open_tree(name)?)),
        })
    }

    /// Writes everything to disk; returns once durable.
    pub fn flush(&self) -> Result<(), StoreError> {
        self.db.flush()?;
        Ok(())
    }

    /// A raw value in the `meta` tree (small node-wide facts).
    pub fn meta_get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.meta.get(key)?.map(|v| v.to_vec()))
    }

    pub fn meta_set(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        self.meta.insert(key, value)?;
        Ok(())
    }
}

impl JsonTree {
    /// A tree named `name` (for error messages) over `tree`.
    pub fn new(name: &'static str, tree: Arc<dyn RawTree>) -> JsonTree {
        JsonTree { name, tree }
    }

    /// A tree kept in memory, for tests of code that runs over the store.
    pub fn in_memory(name: &'static str) -> JsonTree {
        JsonTree::new(name, Arc::new(raw::MemTree::default()))
    }

    pub fn get<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, StoreError> {
        match self.tree.get(key)? {
            None => Ok(None),
            Some(v) => serde_json::from_slice(&v)
                .map(Some)
                .map_err(|e| self.corrupt(key, e)),
        }
    }

    pub fn put<T: Serialize>(&self, key: &str, value: &T) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(value).map_err(|e| self.corrupt(key, e))?;
        self.tree.insert(key, bytes)
    }

    pub fn remove(&self, key: &str) -> Result<(), StoreError> {
        self.tree.remove(key)
    }

    /// Applies puts (`Some`) and removes (`None`) atomically.
    pub fn apply<T: Serialize>(&self, ops: &[(String, Option<&T>)]) -> Result<(), StoreError> {
        let mut batch = Vec::with_capacity(ops.len());
        for (key, value) in ops {
            let bytes = match value {
                Some(v) => Some(serde_json::to_vec(v).map_err(|e| self.corrupt(key, e))?),
                None => None,
            };
            batch.push((key.clone(), bytes));
        }
        self.tree.apply(batch)
    }

    /// Values whose key starts with `prefix`, in key order.
    pub fn scan<T: DeserializeOwned>(&self, prefix: &str) -> Result<Vec<T>, StoreError> {
        let mut out = Vec::new();
        for (key, v) in self.tree.scan_prefix(prefix)? {
            out.push(serde_json::from_slice(&v).map_err(|e| self.corrupt(&key, e))?);
        }
        Ok(out)
    }

    /// At most `limit` values whose key starts with `prefix` and comes after `after`, with
    /// their keys, in key order (see [`RawTree::scan_page`]).
    pub fn scan_page<T: DeserializeOwned>(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, T)>, StoreError> {
        let mut out = Vec::new();
        for (key, v) in self.tree.scan_page(prefix, after, limit)? {
            let value = serde_json::from_slice(&v).map_err(|e| self.corrupt(&key, e))?;
            out.push((key, value));
        }
        Ok(out)
    }

    /// Every value whose key starts with `prefix`, in key order, given to `f` one at a time
    /// and read `page` at a time: for trees that grow without bound (every job a node ever
    /// ran), where reading them whole into memory would grow with them.
    pub fn for_each<T: DeserializeOwned>(
        &self,
        prefix: &str,
        page: usize,
        mut f: impl FnMut(T),
    ) -> Result<(), StoreError> {
        let page = page.max(1);
        let mut after: Option<String> = None;
        loop {
            let values = self.scan_page::<T>(prefix, after.as_deref(), page)?;
            let full = values.len() == page;
            for (key, value) in values {
                f(value);
                after = Some(key);
            }
            if !full {
                return Ok(());
            }
        }
    }

    /// The keys that start with `prefix`, in order.
    pub fn keys(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        Ok(self
            .tree
            .scan_prefix(prefix)?
            .into_iter()
            .map(|(k, _)| k)
            .collect())
    }

    /// All values in key order.
    pub fn all<T: DeserializeOwned>(&self) -> Result<Vec<T>, StoreError> {
        self.scan("")
    }

    fn corrupt(&self, key: &str, e: serde_json::Error) -> StoreError {
        StoreError::Corrupt {
            tree: self.name,
            key: key.to_owned(),
            message: report(&e).to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_state_from_a_newer_schema() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = Store::open(dir.path()).unwrap();
            s.meta_set("schema", &(SCHEMA_VERSION + 1).to_be_bytes())
                .unwrap();
            s.flush().unwrap();
        }
        // Reopened at once: sled's threads may still hold the lock for a moment.
        let err = Store::open_stopped(dir.path()).err().expect("must refuse");
        assert!(err.to_string().contains("newer hostd"), "{err}");
    }

    #[test]
    fn json_trees_round_trip_and_report_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path()).unwrap();
        let t = s.tree("things").unwrap();
        t.put("a", &vec![1, 2, 3]).unwrap();
        assert_eq!(t.get::<Vec<i32>>("a").unwrap(), Some(vec![1, 2, 3]));
        s.db()
            .open_tree("things")
            .unwrap()
            .insert("b", &b"{not json"[..])
            .unwrap();
        let err = t.get::<Vec<i32>>("b").unwrap_err();
        assert!(err.to_string().contains("corrupt things entry b"), "{err}");
    }

    /// The in-memory tree behaves as the sled one: batches, prefixes, key order.
    #[test]
    fn memory_and_sled_trees_agree() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path()).unwrap();
        for t in [s.tree("t").unwrap(), JsonTree::in_memory("t")] {
            t.put("lease/b", &2).unwrap();
            t.put("cursor/b/g", &9).unwrap();
            t.apply(&[
                ("lease/a".to_owned(), Some(&1)),
                ("cursor/b/g".to_owned(), None),
            ])
            .unwrap();
            assert_eq!(t.scan::<i32>("lease/").unwrap(), vec![1, 2]);
            assert_eq!(t.all::<i32>().unwrap(), vec![1, 2]);
            assert_eq!(t.get::<i32>("cursor/b/g").unwrap(), None);
            t.remove("lease/a").unwrap();
            assert_eq!(t.scan::<i32>("lease/").unwrap(), vec![2]);
        }
    }

    /// `for_each` sees every value of a prefix once, in key order, whether the values fill
    /// their last page or not, in both trees.
    #[test]
    fn for_each_reads_every_value_once_a_page_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path()).unwrap();
        for t in [s.tree("t").unwrap(), JsonTree::in_memory("t")] {
            t.put("a/0", &-1).unwrap();
            t.put("c/0", &-2).unwrap();
            for n in [0, 1, 3, 7, 9] {
                for i in 0..n {
                    t.put(&format!("b/{n}/{i}"), &i).unwrap();
                }
                for page in [1, 3, 9, 100] {
                    let mut seen = Vec::new();
                    t.for_each::<i32>(&format!("b/{n}/"), page, |v| seen.push(v))
                        .unwrap();
                    assert_eq!(
                        seen,
                        (0..n).collect::<Vec<_>>(),
                        "{n} values, pages of {page}"
                    );
                }
            }
        }
    }

    /// Pages of a prefix, in both trees: after a key (present or not), bounded, never past
    /// the prefix, and from the first key when `after` sorts before the prefix.
    #[test]
    fn pages_follow_after_and_stay_within_the_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path()).unwrap();
        for t in [s.tree("t").unwrap(), JsonTree::in_memory("t")] {
            for (k, v) in [
                ("a/1", 1),
                ("b/1", 11),
                ("b/2", 12),
                ("b/4", 14),
                ("c/1", 21),
            ] {
                t.put(k, &v).unwrap();
            }
            let page = |after: Option<&str>, limit| -> Vec<i32> {
                t.scan_page::<i32>("b/", after, limit)
                    .unwrap()
                    .into_iter()
                    .map(|(_, v)| v)
                    .collect()
            };
            assert_eq!(page(None, 2), [11, 12]);
            assert_eq!(page(Some("b/2"), 2), [14]);
            assert_eq!(page(Some("b/3"), 10), [14], "after a key that is not there");
            assert_eq!(page(Some("b/4"), 10), Vec::<i32>::new());
            assert_eq!(page(Some("a/9"), 1), [11], "after sorts before the prefix");
            assert_eq!(page(None, 0), Vec::<i32>::new());
            let keys: Vec<String> = t
                .scan_page::<i32>("b/", None, 9)
                .unwrap()
                .into_iter()
                .map(|(k, _)| k)
                .collect();
            assert_eq!(keys, ["b/1", "b/2", "b/4"]);
        }
    }
}
