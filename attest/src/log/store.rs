//! The storage contract between the pure Merkle code and whatever persists it.

use super::Hash;
use std::collections::BTreeMap;
use std::convert::Infallible;

/// Position of a complete subtree: `level` 0 is a leaf hash; the subtree at
/// (`level`, `index`) covers leaves `[index << level, (index + 1) << level)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId {
    pub level: u8,
    pub index: u64,
}

/// Everything one append writes, committed atomically and durably by [`LogStore::commit`].
///
/// `nodes` holds every complete-subtree hash that the new leaves complete (level 0 included),
/// so the store never has to compute anything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AppendBatch {
    /// Index of the first new leaf; equals the size before the append.
    pub start: u64,
    /// The new leaves' bytes, in order.
    pub leaves: Vec<Vec<u8>>,
    /// Newly completed subtree hashes.
    pub nodes: Vec<(NodeId, Hash)>,
    /// Tree size after the append (`start + leaves.len()`).
    pub new_size: u64,
}

/// Persistence for a Merkle log.
///
/// Implementations must make [`commit`](LogStore::commit) all-or-nothing and durable before it
/// returns: after a crash, `size()` is either the old or the new size, and every node and leaf
/// below `size()` is present.
pub trait LogStore {
    /// The store's own error (I/O, corruption); surfaced to callers wrapped in the log's error.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Number of leaves committed.
    fn size(&self) -> Result<u64, Self::Error>;
    /// Hash of a complete subtree, or `None` if it was never written.
    fn node(&self, id: NodeId) -> Result<Option<Hash>, Self::Error>;
    /// A leaf's bytes, or `None` past the end.
    fn leaf(&self, index: u64) -> Result<Option<Vec<u8>>, Self::Error>;
    /// Atomically and durably apply `batch`.
    fn commit(&mut self, batch: &AppendBatch) -> Result<(), Self::Error>;
}

/// An in-memory store for tests, benchmarks and offline verification of exported logs.
#[derive(Debug, Default, Clone)]
pub struct MemStore {
    leaves: Vec<Vec<u8>>,
    nodes: BTreeMap<NodeId, Hash>,
}

impl MemStore {
    pub fn new() -> Self {
        Self::default()
    }
}

impl LogStore for MemStore {
    type Error = Infallible;

    fn size(&self) -> Result<u64, Infallible> {
        Ok(self.leaves.len() as u64)
    }

    fn node(&self, id: NodeId) -> Result<Option<Hash>, Infallible> {
        Ok(self.nodes.get(&id).copied())
    }

    fn leaf(&self, index: u64) -> Result<Option<Vec<u8>>, Infallible> {
        Ok(usize::try_from(index)
            .ok()
            .and_then(|i| self.leaves.get(i))
            .cloned())
    }

    fn commit(&mut self, batch: &AppendBatch) -> Result<(), Infallible> {
        debug_assert_eq!(batch.start, self.leaves.len() as u64);
        self.leaves.extend(batch.leaves.iter().cloned());
        self.nodes.extend(batch.nodes.iter().copied());
        Ok(())
    }
}
