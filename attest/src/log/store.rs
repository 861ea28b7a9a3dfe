//! The storage contract between the pure Merkle code and whatever persists it.

use super::Hash;
use std::collections::BTreeMap;
use std::convert::Infallible;

/// Position of a complete subtree: `level` 0 is a leaf hash; the subtree at
/// (`level`, `index`) covers leaves `[index << level, (index + 1) << level)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId {
    /// Height above the leaves (0 = a leaf hash); at most 63, since sizes are `u64`.
    pub level: u8,
    /// Position among the complete subtrees of this level, left to right.
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
///
/// Complete subtrees are written in index order at every level by [`Log`](super::Log), so
/// each level is a plain vector (a proof's node reads are array lookups); a node committed
/// out of order by some other writer lands in a side map instead of being lost.
#[derive(Debug, Default, Clone)]
pub struct MemStore {
    leaves: Vec<Vec<u8>>,
    levels: Vec<Vec<Hash>>,
    sparse: BTreeMap<NodeId, Hash>,
}

impl MemStore {
    /// An empty log store (size 0).
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
        let dense = self
            .levels
            .get(usize::from(id.level))
            .zip(usize::try_from(id.index).ok())
            .and_then(|(level, i)| level.get(i));
        Ok(dense.or_else(|| self.sparse.get(&id)).copied())
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
        for &(id, hash) in &batch.nodes {
            let level = usize::from(id.level);
            if self.levels.len() <= level {
                self.levels.resize_with(level + 1, Vec::new);
            }
            let nodes = &mut self.levels[level];
            match usize::try_from(id.index) {
                Ok(i) if i == nodes.len() => nodes.push(hash),
                Ok(i) if i < nodes.len() => nodes[i] = hash,
                _ => {
                    self.sparse.insert(id, hash);
                }
            }
        }
        Ok(())
    }
}
