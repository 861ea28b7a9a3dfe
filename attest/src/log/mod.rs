//! RFC 6962 / RFC 9162 Merkle log.
//!
//! Storage is abstracted by [`LogStore`] so that the pure tree logic can be tested in memory
//! and run on sled in the daemon. The store keeps leaves and the hashes of *complete*
//! subtrees only; those never change once written, which is what makes appends O(log n)
//! and lets a crash leave at worst an unacknowledged tail.
//!
//! The hashing is RFC 6962 §2.1 (kept unchanged by RFC 9162 §2.1.1) so that any CT or
//! sumdb tooling can recompute our roots:
//!
//! * leaf hash `SHA-256(0x00 || data)`,
//! * interior node `SHA-256(0x01 || left || right)`,
//! * the empty tree's root `SHA-256("")`.
//!
//! Pieces:
//!
//! * [`Log`] — appends and proof *generation* over any [`LogStore`];
//! * [`verify_inclusion`], [`verify_consistency`], [`root_from_inclusion_proof`] — pure
//!   proof *verification*, exactly the RFC 9162 §2.1.3.2 / §2.1.4.2 algorithms;
//! * [`RootBuilder`] — a streaming root computer keeping O(log n) hashes, for auditors who
//!   recompute a root from an exported log.

mod builder;
mod proof;
mod store;
mod tree;

pub use builder::{RootBuilder, TreeFull};
pub use proof::{
    consistency_proof_len, inclusion_proof_len, root_from_inclusion_proof, verify_consistency,
    verify_inclusion, ProofError,
};
pub use store::{AppendBatch, LogStore, MemStore, NodeId};
pub use tree::{Log, LogError};

use sha2::{Digest, Sha256};

/// A SHA-256 digest: leaf hashes, interior node hashes and roots.
pub type Hash = [u8; 32];

/// Domain-separation prefix of leaf hashes (RFC 6962 §2.1); it is what stops a leaf from
/// being passed off as an interior node (second-preimage attack).
const LEAF_PREFIX: u8 = 0x00;
/// Domain-separation prefix of interior node hashes.
const NODE_PREFIX: u8 = 0x01;

/// `SHA-256(0x00 || data)`: the hash of one leaf.
pub fn leaf_hash(data: &[u8]) -> Hash {
    let mut h = Sha256::new();
    h.update([LEAF_PREFIX]);
    h.update(data);
    h.finalize().into()
}

/// `SHA-256(0x01 || left || right)`: the hash of an interior node.
pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    // One contiguous 65-byte message lets SHA-256 run over two blocks without
    // intermediate buffering; this is the hot path of appends and root recomputation.
    let mut buf = [0u8; 65];
    buf[0] = NODE_PREFIX;
    buf[1..33].copy_from_slice(left);
    buf[33..].copy_from_slice(right);
    Sha256::digest(buf).into()
}

/// `SHA-256("")`: the root of the empty tree (RFC 6962 §2.1).
pub fn empty_root() -> Hash {
    Sha256::digest([]).into()
}

/// Folds the hashes of consecutive complete subtrees, given from the *right-most* (smallest)
/// to the left-most, into the hash of the range they cover.
///
/// RFC 6962 splits a range at the largest power of two below its length, so a range that is
/// not a power of two hashes as `node(left complete subtree, hash(rest))`: folding from the
/// right reproduces exactly that nesting.
fn fold_right<I: IntoIterator<Item = Hash>>(right_to_left: I) -> Option<Hash> {
    let mut acc: Option<Hash> = None;
    for h in right_to_left {
        acc = Some(match acc {
            None => h,
            Some(right) => node_hash(&h, &right),
        });
    }
    acc
}
