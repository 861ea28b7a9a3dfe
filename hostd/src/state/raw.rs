//! The byte-level tree the node's state sits on: sled on disk, a map in memory for tests.

use super::StoreError;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Mutex;

/// A sorted map of string keys to bytes with atomic batches: all [`super::JsonTree`] needs.
pub trait RawTree: Send + Sync {
    /// The value under `key`.
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError>;
    /// Sets `key` to `value`.
    fn insert(&self, key: &str, value: Vec<u8>) -> Result<(), StoreError>;
    /// Removes `key` (absent is fine).
    fn remove(&self, key: &str) -> Result<(), StoreError>;
    /// Puts (`Some`) and removes (`None`), all or nothing.
    fn apply(&self, ops: Vec<(String, Option<Vec<u8>>)>) -> Result<(), StoreError>;
    /// Entries whose key starts with `prefix`, in key order.
    fn scan_prefix(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, StoreError>;
    /// At most `limit` entries whose key starts with `prefix` and comes after the key `after`
    /// (from the first when `None`), in key order: one page, read without the rest.
    fn scan_page(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Vec<u8>)>, StoreError>;
}

/// A sled tree.
pub struct SledTree(pub sled::Tree);

impl RawTree for SledTree {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.0.get(key)?.map(|v| v.to_vec()))
    }

    fn insert(&self, key: &str, value: Vec<u8>) -> Result<(), StoreError> {
        self.0.insert(key, value)?;
        Ok(())
    }

    fn remove(&self, key: &str) -> Result<(), StoreError> {
        self.0.remove(key)?;
        Ok(())
    }

    fn apply(&self, ops: Vec<(String, Option<Vec<u8>>)>) -> Result<(), StoreError> {
        let mut batch = sled::Batch::default();
        for (key, value) in ops {
            match value {
                Some(v) => batch.insert(key.as_bytes(), v),
                None => batch.remove(key.as_bytes()),
            }
        }
        self.0.apply_batch(batch)?;
        Ok(())
    }

    fn scan_prefix(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let mut out = Vec::new();
        for item in self.0.scan_prefix(prefix) {
            let (k, v) = item?;
            out.push((utf8_key(&k)?, v.to_vec()));
        }
        Ok(out)
    }

    fn scan_page(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let start = page_start(prefix, after).map(str::as_bytes);
        let mut out = Vec::new();
        for item in self.0.range::<&[u8], _>((start, Bound::Unbounded)) {
            let (k, v) = item?;
            if !k.starts_with(prefix.as_bytes()) || out.len() >= limit {
                break;
            }
            out.push((utf8_key(&k)?, v.to_vec()));
        }
        Ok(out)
    }
}

/// Where a page of `prefix`'s keys after `after` starts: just after `after`, or at the first
/// of them when there is none or it sorts before them all.
fn page_start<'a>(prefix: &'a str, after: Option<&'a str>) -> Bound<&'a str> {
    match after {
        Some(a) if a >= prefix => Bound::Excluded(a),
        _ => Bound::Included(prefix),
    }
}

/// Keys are written from `&str` only, so they are UTF-8; a key that is not was written by
/// something else and is reported, never lossily renamed.
fn utf8_key(k: &[u8]) -> Result<String, StoreError> {
    String::from_utf8(k.to_vec()).map_err(|e| StoreError::Corrupt {
        tree: "?",
        key: String::from_utf8_lossy(e.as_bytes()).into_owned(),
        message: "key is not UTF-8".into(),
    })
}

/// A tree in memory, for unit tests of code that runs over the store.
#[derive(Default)]
pub struct MemTree(Mutex<BTreeMap<String, Vec<u8>>>);

impl MemTree {
    fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Vec<u8>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl RawTree for MemTree {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.map().get(key).cloned())
    }

    fn insert(&self, key: &str, value: Vec<u8>) -> Result<(), StoreError> {
        self.map().insert(key.to_owned(), value);
        Ok(())
    }

    fn remove(&self, key: &str) -> Result<(), StoreError> {
        self.map().remove(key);
        Ok(())
    }

    fn apply(&self, ops: Vec<(String, Option<Vec<u8>>)>) -> Result<(), StoreError> {
        let mut map = self.map();
        for (key, value) in ops {
            match value {
                Some(v) => map.insert(key, v),
                None => map.remove(&key),
            };
        }
        Ok(())
    }

    fn scan_prefix(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        Ok(self
            .map()
            .range(prefix.to_owned()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }

    fn scan_page(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let start = page_start(prefix, after).map(str::to_owned);
        Ok(self
            .map()
            .range((start, Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(prefix))
            .take(limit)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }
}
