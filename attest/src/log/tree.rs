//! The append-only log: appends and proof generation over a [`LogStore`].

use super::builder::TreeFull;
use super::store::{AppendBatch, LogStore, MemStore, NodeId};
use super::{empty_root, fold_right, leaf_hash, node_hash, Hash};
use std::ops::Range;

/// Why a log operation failed.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The store failed (I/O, corruption detected by the store itself).
    #[error("log store")]
    Store(#[source] Box<dyn std::error::Error + Send + Sync + 'static>),
    /// The store claims a size but lacks a node below it: it is corrupt or was written by
    /// something other than [`Log`].
    #[error("log store is corrupt: subtree hash at level {} index {} is missing", .0.level, .0.index)]
    MissingNode(NodeId),
    /// The store claims a size but lacks a leaf below it.
    #[error("log store is corrupt: leaf {0} is missing")]
    MissingLeaf(u64),
    /// A proof or leaf was asked for past the end of the log.
    #[error("leaf index {index} is not below tree size {size}")]
    IndexOutOfRange {
        /// Requested leaf index.
        index: u64,
        /// Current log size.
        size: u64,
    },
    /// A proof against a tree size the log has not reached yet was asked for; the log never
    /// vouches for a future head.
    #[error("tree size {requested} is larger than the log ({size} leaves)")]
    SizeOutOfRange {
        /// Requested tree size.
        requested: u64,
        /// Current log size.
        size: u64,
    },
    /// Consistency proofs need `0 < size1 <= size2`: from the empty tree they prove nothing.
    #[error("a consistency proof needs 0 < size1 <= size2, got size1 {size1}, size2 {size2}")]
    InvalidSizes {
        /// Older tree size.
        size1: u64,
        /// Newer tree size.
        size2: u64,
    },
    /// An append would overflow the 64-bit leaf count.
    #[error(transparent)]
    TreeFull(#[from] TreeFull),
}

fn store_err<E: std::error::Error + Send + Sync + 'static>(e: E) -> LogError {
    LogError::Store(Box::new(e))
}

/// An RFC 6962 Merkle log over a [`LogStore`].
///
/// The log owns its store and caches the right edge of the tree (one hash per set bit of
/// the size), so appends read nothing and the current root costs no I/O. Proofs read
/// O(log n) stored complete-subtree hashes; nothing is ever recomputed from leaves.
#[derive(Debug)]
pub struct Log<S: LogStore> {
    store: S,
    size: u64,
    /// Same layout as in `RootBuilder`: `frontier[level]` valid iff bit `level` of `size` set.
    frontier: Box<[Hash; 64]>,
}

impl<S: LogStore> Log<S> {
    /// Opens the log kept in `store`, reading the right edge (O(log n) node reads), which
    /// also checks that the store is not missing any of them.
    pub fn open(store: S) -> Result<Self, LogError> {
        let size = store.size().map_err(store_err)?;
        let mut frontier = Box::new([[0u8; 32]; 64]);
        for level in (0..64u8).filter(|&l| size >> l & 1 == 1) {
            let id = NodeId {
                level,
                index: (size >> level) - 1,
            };
            frontier[usize::from(level)] = read_node(&store, id)?;
        }
        Ok(Self {
            store,
            size,
            frontier,
        })
    }

    /// Number of leaves.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The underlying store, e.g. for reads the log does not offer.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// Gives the store back.
    pub fn into_store(self) -> S {
        self.store
    }

    /// Appends `leaves` in one atomic [`LogStore::commit`] and returns their index range.
    ///
    /// The batch carries every subtree hash the new leaves complete (level 0 included), so
    /// the store only persists. If the commit fails the log is unchanged and the append may
    /// be retried. An empty slice commits nothing.
    pub fn append<L: AsRef<[u8]>>(&mut self, leaves: &[L]) -> Result<Range<u64>, LogError> {
        let start = self.size;
        let count = u64::try_from(leaves.len()).map_err(|_| TreeFull)?;
        let new_size = start.checked_add(count).ok_or(TreeFull)?;
        if count == 0 {
            return Ok(start..start);
        }
        let mut frontier = self.frontier.clone();
        // Each leaf completes its own level-0 node plus, on average, one more.
        let mut nodes = Vec::with_capacity(leaves.len() * 2 + 64);
        let mut batch_leaves = Vec::with_capacity(leaves.len());
        for (index, leaf) in (start..new_size).zip(leaves) {
            let leaf = leaf.as_ref();
            let mut h = leaf_hash(leaf);
            nodes.push((NodeId { level: 0, index }, h));
            let merges = index.trailing_ones() as u8;
            for level in 0..merges {
                h = node_hash(&frontier[usize::from(level)], &h);
                let id = NodeId {
                    level: level + 1,
                    index: index >> (level + 1),
                };
                nodes.push((id, h));
            }
            frontier[usize::from(merges)] = h;
            batch_leaves.push(leaf.to_vec());
        }
        let batch = AppendBatch {
            start,
            leaves: batch_leaves,
            nodes,
            new_size,
        };
        self.store.commit(&batch).map_err(store_err)?;
        self.size = new_size;
        self.frontier = frontier;
        Ok(start..new_size)
    }

    /// The root of the whole log, from the cached right edge (no store reads).
    pub fn root(&self) -> Hash {
        let set = (0..64).filter(|&level| self.size >> level & 1 == 1);
        fold_right(set.map(|level| self.frontier[level])).unwrap_or_else(empty_root)
    }

    /// The root of the first `size` leaves: one stored node per set bit of `size`.
    pub fn root_at(&self, size: u64) -> Result<Hash, LogError> {
        self.check_size(size)?;
        if size == self.size {
            return Ok(self.root());
        }
        Ok(self.range_hash(0, size)?.unwrap_or_else(empty_root))
    }

    /// The bytes of leaf `index`.
    pub fn leaf(&self, index: u64) -> Result<Vec<u8>, LogError> {
        if index >= self.size {
            return Err(LogError::IndexOutOfRange {
                index,
                size: self.size,
            });
        }
        self.store
            .leaf(index)
            .map_err(store_err)?
            .ok_or(LogError::MissingLeaf(index))
    }

    /// The RFC 6962 audit path of leaf `index` in the tree of the first `size` leaves,
    /// from the leaf's sibling up to the root's child.
    pub fn inclusion_proof(&self, index: u64, size: u64) -> Result<Vec<Hash>, LogError> {
        self.check_size(size)?;
        if index >= size {
            return Err(LogError::IndexOutOfRange { index, size });
        }
        let mut proof = Vec::with_capacity(64);
        self.path(0, index, size, &mut proof)?;
        Ok(proof)
    }

    /// The RFC 6962 consistency proof from the tree of `size1` leaves to that of `size2`.
    /// Equal sizes give an empty proof; `size1 == 0` is refused (it would prove nothing).
    pub fn consistency_proof(&self, size1: u64, size2: u64) -> Result<Vec<Hash>, LogError> {
        self.check_size(size2)?;
        if size1 == 0 || size1 > size2 {
            return Err(LogError::InvalidSizes { size1, size2 });
        }
        let mut proof = Vec::with_capacity(64);
        if size1 == size2 {
            return Ok(proof);
        }
        // The old tree's last complete subtree (the largest one ending at size1) is the
        // starting node; its inclusion path in the new tree proves both roots.
        let level = size1.trailing_zeros() as u8;
        let index = (size1 - 1) >> level;
        if !size1.is_power_of_two() {
            proof.push(read_node(&self.store, NodeId { level, index })?);
        }
        self.path(level, index, size2, &mut proof)?;
        Ok(proof)
    }

    fn check_size(&self, requested: u64) -> Result<(), LogError> {
        if requested > self.size {
            return Err(LogError::SizeOutOfRange {
                requested,
                size: self.size,
            });
        }
        Ok(())
    }

    /// Pushes the siblings of node (`level`, `index`) and of its ancestors in the tree of
    /// `size` leaves. Siblings are complete subtrees except at most one, the one holding
    /// the last leaf, which is hashed from its own ≤ log n complete parts.
    fn path(
        &self,
        mut level: u8,
        mut index: u64,
        size: u64,
        proof: &mut Vec<Hash>,
    ) -> Result<(), LogError> {
        let last = size - 1;
        while level < 64 && last >> level != 0 {
            let sibling = index ^ 1;
            // A sibling past the last node of this level does not exist: the node is
            // promoted unchanged (RFC 6962's unbalanced right edge).
            if sibling <= last >> level {
                let start = sibling << level;
                let end = start.saturating_add(1 << level).min(size);
                if let Some(h) = self.range_hash(start, end)? {
                    proof.push(h);
                }
            }
            index >>= 1;
            level += 1;
        }
        Ok(())
    }

    /// The RFC 6962 hash of leaves `[start, end)`, where `start` is aligned to the largest
    /// power of two not above the range's length: the range is then a run of complete
    /// stored subtrees, one per set bit of its length, largest first. `None` if empty.
    fn range_hash(&self, start: u64, end: u64) -> Result<Option<Hash>, LogError> {
        let len = end - start;
        let mut cursor = end;
        let mut parts = Vec::with_capacity(len.count_ones() as usize);
        // From the right: the smallest part is the right-most.
        for level in (0..64u8).filter(|&l| len >> l & 1 == 1) {
            cursor -= 1 << level;
            let id = NodeId {
                level,
                index: cursor >> level,
            };
            parts.push(self.node(id)?);
        }
        Ok(fold_right(parts))
    }

    /// A complete subtree's hash, from the cached right edge when it is there.
    fn node(&self, id: NodeId) -> Result<Hash, LogError> {
        let level = u32::from(id.level);
        if level < 64 && self.size >> level & 1 == 1 && (self.size >> level) - 1 == id.index {
            return Ok(self.frontier[usize::from(id.level)]);
        }
        read_node(&self.store, id)
    }
}

fn read_node<S: LogStore>(store: &S, id: NodeId) -> Result<Hash, LogError> {
    store
        .node(id)
        .map_err(store_err)?
        .ok_or(LogError::MissingNode(id))
}

impl Log<MemStore> {
    /// An empty in-memory log.
    pub fn in_memory() -> Self {
        Self {
            store: MemStore::new(),
            size: 0,
            frontier: Box::new([[0u8; 32]; 64]),
        }
    }

    /// An in-memory log holding `leaves`, e.g. to serve proofs over an exported log.
    /// To only recompute a root, [`RootBuilder`](super::RootBuilder) is faster and needs
    /// no memory.
    pub fn from_leaves<L: AsRef<[u8]>>(leaves: &[L]) -> Result<Self, LogError> {
        let mut log = Self::in_memory();
        log.append(leaves)?;
        Ok(log)
    }
}
