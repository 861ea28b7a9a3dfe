//! Streaming root computation for auditors.

use super::{empty_root, fold_right, leaf_hash, node_hash, Hash};

/// The tree already holds `u64::MAX` leaves, the most a size can count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the tree already holds 2^64 - 1 leaves, the most a tree size can count")]
pub struct TreeFull;

/// Computes RFC 6962 roots from leaves fed one at a time, keeping only O(log n) hashes.
///
/// This is the "compact range" of a tree prefix: the roots of the complete subtrees that
/// the binary decomposition of the current size names. An auditor recomputing the root of
/// a million-record export therefore needs no memory beyond 2 KiB and hashes each leaf
/// once plus, on average, one interior node per leaf — close to `sha256sum` over the same
/// bytes. [`root`](Self::root) may be called at any point, which lets one pass over an
/// export check every checkpoint size along the way.
#[derive(Clone)]
pub struct RootBuilder {
    size: u64,
    /// `frontier[level]` is the root of the complete subtree of `2^level` leaves on the right
    /// edge, valid exactly when bit `level` of `size` is set.
    frontier: [Hash; 64],
}

impl Default for RootBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for RootBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RootBuilder")
            .field("size", &self.size)
            .field("root", &hex::encode(self.root()))
            .finish()
    }
}

impl RootBuilder {
    /// An empty tree.
    pub fn new() -> Self {
        Self {
            size: 0,
            frontier: [[0; 32]; 64],
        }
    }

    /// Number of leaves pushed so far.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Appends one leaf given its data (hashed as `SHA-256(0x00 || data)`).
    pub fn push(&mut self, data: &[u8]) -> Result<(), TreeFull> {
        self.push_leaf_hash(leaf_hash(data))
    }

    /// Appends one leaf given its already computed leaf hash.
    pub fn push_leaf_hash(&mut self, hash: Hash) -> Result<(), TreeFull> {
        let index = self.size;
        let new_size = index.checked_add(1).ok_or(TreeFull)?;
        // Each trailing one bit of the old size is a complete subtree that the new leaf
        // completes into a twice larger one; with new_size < 2^64 there are at most 63.
        let merges = index.trailing_ones() as usize;
        let mut h = hash;
        for left in &self.frontier[..merges] {
            h = node_hash(left, &h);
        }
        self.frontier[merges] = h;
        self.size = new_size;
        Ok(())
    }

    /// The root of the tree of the leaves pushed so far.
    pub fn root(&self) -> Hash {
        let set = (0..64).filter(|&level| self.size >> level & 1 == 1);
        fold_right(set.map(|level| self.frontier[level])).unwrap_or_else(empty_root)
    }

    /// The complete-subtree hashes of the right edge, largest first: the RFC 9162 "compact
    /// range" `[0, size)`. Together with [`size`](Self::size) it is everything needed to
    /// continue the tree, e.g. to resume a long audit.
    pub fn frontier(&self) -> Vec<Hash> {
        (0..64)
            .rev()
            .filter(|&level| self.size >> level & 1 == 1)
            .map(|level| self.frontier[level])
            .collect()
    }

    /// Resumes from a [`frontier`](Self::frontier) previously taken at `size`; `None` if the
    /// number of hashes does not match the size's binary decomposition.
    pub fn from_frontier(size: u64, frontier: &[Hash]) -> Option<Self> {
        if frontier.len() != size.count_ones() as usize {
            return None;
        }
        let mut b = Self::new();
        b.size = size;
        let levels = (0..64usize).rev().filter(|&level| size >> level & 1 == 1);
        for (level, h) in levels.zip(frontier) {
            b.frontier[level] = *h;
        }
        Some(b)
    }
}
