//! RFC 6962 / RFC 9162 Merkle log.
//!
//! Storage is abstracted by [`LogStore`] so that the pure tree logic can be tested in memory
//! and run on sled in the daemon. The store keeps leaves and the hashes of *complete*
//! subtrees only; those never change once written, which is what makes appends O(log n)
//! and lets a crash leave at worst an unacknowledged tail.

mod store;

pub use store::{AppendBatch, LogStore, MemStore, NodeId};

/// A SHA-256 digest: leaf hashes, interior node hashes and roots.
pub type Hash = [u8; 32];
