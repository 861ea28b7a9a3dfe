//! Pure verification of inclusion and consistency proofs (RFC 9162 §2.1.3.2 and §2.1.4.2).
//!
//! These functions take byte slices rather than fixed-size arrays for the leaf hash and the
//! roots so that whatever an auditor parsed from JSON or a receipt can be passed as is: a
//! hash of the wrong length is a precise error here rather than a conversion failure
//! somewhere else. Proof hashes must be exactly 32 bytes.
//!
//! Semantics follow github.com/transparency-dev/merkle's `proof` package, whose test vectors
//! the crate's tests run in full: a consistency proof from the empty tree is rejected as
//! meaningless, equal sizes need an empty proof and byte-identical roots, and a proof of the
//! wrong length is rejected before any hashing.

use super::{node_hash, Hash};

/// Why a proof was rejected. Every variant means "do not trust this statement".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProofError {
    /// The claimed leaf lies outside the tree, so no proof can place it there.
    #[error("leaf index {index} is not below tree size {size}")]
    IndexOutOfRange {
        /// Claimed leaf index.
        index: u64,
        /// Tree size the proof is against.
        size: u64,
    },
    /// The proof length is fixed by index and sizes; checking it first means a padded or
    /// truncated proof is refused before any hashing.
    #[error("proof has {actual} hashes but a proof for this position needs exactly {expected}")]
    WrongProofLength {
        /// Length the position requires.
        expected: usize,
        /// Length supplied.
        actual: usize,
    },
    /// The leaf hash is not a SHA-256 output.
    #[error("leaf hash is {len} bytes, expected 32")]
    LeafHashLength {
        /// Length supplied.
        len: usize,
    },
    /// A proof element is not a SHA-256 output.
    #[error("proof hash #{position} is {len} bytes, expected 32")]
    ProofHashLength {
        /// 0-based position in the proof.
        position: usize,
        /// Length supplied.
        len: usize,
    },
    /// A root to check against is not a SHA-256 output.
    #[error("root hash is {len} bytes, expected 32")]
    RootLength {
        /// Length supplied.
        len: usize,
    },
    /// The inclusion proof is well-formed but computes a different root: the leaf is not in
    /// the tree the root commits to (or the proof was altered).
    #[error("proof does not lead to the claimed root")]
    RootMismatch,
    /// The proof does not rebuild the earlier tree head: the log cannot show it only appended.
    #[error("consistency proof does not reproduce the old root")]
    OldRootMismatch,
    /// The proof does not rebuild the later tree head: the log cannot show it only appended.
    #[error("consistency proof does not reproduce the new root")]
    NewRootMismatch,
    /// An append-only log never shrinks, so "consistency" from a larger to a smaller tree is
    /// meaningless.
    #[error("old tree size {size1} is larger than new tree size {size2}")]
    SizesReversed {
        /// The supposedly older size.
        size1: u64,
        /// The supposedly newer size.
        size2: u64,
    },
    /// Every tree extends the empty tree, so such a proof would vouch for nothing; refusing
    /// it keeps callers from mistaking it for a check.
    #[error("a consistency proof from the empty tree proves nothing")]
    EmptyOldTree,
    /// Equal sizes are consistent only with byte-identical roots and an empty proof; extra
    /// hashes are refused rather than ignored.
    #[error("sizes are equal, so the proof must be empty, but it has {len} hashes")]
    NonEmptyProofForEqualSizes {
        /// Number of hashes supplied.
        len: usize,
    },
}

/// Number of hashes in an inclusion proof for leaf `index` in a tree of `size` leaves
/// (0 when `index >= size`, which no proof can cover).
pub fn inclusion_proof_len(index: u64, size: u64) -> usize {
    if index >= size {
        return 0;
    }
    // Levels where the leaf's path and the last leaf's path differ each contribute a
    // sibling ("inner"); above them the path runs along the right edge, where only the
    // levels at which our ancestor is a right child have a sibling ("border").
    let inner = 64 - (index ^ (size - 1)).leading_zeros();
    let border = index.checked_shr(inner).unwrap_or(0).count_ones();
    (inner + border) as usize
}

/// Number of hashes in a consistency proof from `size1` to `size2` (0 unless
/// `0 < size1 < size2`).
pub fn consistency_proof_len(size1: u64, size2: u64) -> usize {
    if size1 == 0 || size1 >= size2 {
        return 0;
    }
    // The proof is the hash of the largest complete subtree ending at size1 (omitted when
    // that subtree is the whole old tree) followed by that node's inclusion path in the
    // new tree, viewed at the subtree's level.
    let level = size1.trailing_zeros();
    let node = (size1 - 1) >> level;
    let width = ((size2 - 1) >> level) + 1;
    let seed = usize::from(size1 != 1 << level);
    seed + inclusion_proof_len(node, width)
}

fn to_hash(bytes: &[u8]) -> Option<Hash> {
    bytes.try_into().ok()
}

fn proof_hashes<H: AsRef<[u8]>>(proof: &[H]) -> Result<Vec<Hash>, ProofError> {
    proof
        .iter()
        .enumerate()
        .map(|(position, p)| {
            let p = p.as_ref();
            to_hash(p).ok_or(ProofError::ProofHashLength {
                position,
                len: p.len(),
            })
        })
        .collect()
}

/// Recomputes the root that an inclusion proof leads to, following RFC 9162 §2.1.3.2.
///
/// Useful when the root is not known yet, e.g. to compare one proof against several
/// checkpoints. Use [`verify_inclusion`] when a root is at hand.
pub fn root_from_inclusion_proof<H: AsRef<[u8]>>(
    leaf_hash: &[u8],
    index: u64,
    size: u64,
    proof: &[H],
) -> Result<Hash, ProofError> {
    if index >= size {
        return Err(ProofError::IndexOutOfRange { index, size });
    }
    let leaf = to_hash(leaf_hash).ok_or(ProofError::LeafHashLength {
        len: leaf_hash.len(),
    })?;
    let expected = inclusion_proof_len(index, size);
    if proof.len() != expected {
        return Err(ProofError::WrongProofLength {
            expected,
            actual: proof.len(),
        });
    }
    let proof = proof_hashes(proof)?;
    let wrong_length = ProofError::WrongProofLength {
        expected,
        actual: proof.len(),
    };

    // RFC 9162 §2.1.3.2, steps 2-5, with the RFC's names (`fn` is a keyword, hence `f`).
    let mut f = index;
    let mut sn = size - 1;
    let mut r = leaf;
    for p in &proof {
        if sn == 0 {
            return Err(wrong_length);
        }
        if f & 1 == 1 || f == sn {
            r = node_hash(p, &r);
            while f & 1 == 0 && f != 0 {
                f >>= 1;
                sn >>= 1;
            }
        } else {
            r = node_hash(&r, p);
        }
        f >>= 1;
        sn >>= 1;
    }
    if sn != 0 {
        return Err(wrong_length);
    }
    Ok(r)
}

/// Checks that `proof` shows the leaf with hash `leaf_hash` at `index` in the tree of
/// `size` leaves whose root is `root` (RFC 9162 §2.1.3.2).
pub fn verify_inclusion<H: AsRef<[u8]>>(
    leaf_hash: &[u8],
    index: u64,
    size: u64,
    proof: &[H],
    root: &[u8],
) -> Result<(), ProofError> {
    let computed = root_from_inclusion_proof(leaf_hash, index, size, proof)?;
    if root.len() != computed.len() {
        return Err(ProofError::RootLength { len: root.len() });
    }
    if computed[..] != *root {
        return Err(ProofError::RootMismatch);
    }
    Ok(())
}

/// Checks that the tree of `size2` leaves with root `root2` extends the tree of `size1`
/// leaves with root `root1` (RFC 9162 §2.1.4.2), i.e. the log only appended.
///
/// Equal sizes need an empty proof and roots that are equal byte for byte; their length is
/// not checked, as in transparency-dev/merkle (two identical claims are consistent whatever
/// they are). A proof from the empty tree is rejected: it would prove nothing.
pub fn verify_consistency<H: AsRef<[u8]>>(
    size1: u64,
    size2: u64,
    proof: &[H],
    root1: &[u8],
    root2: &[u8],
) -> Result<(), ProofError> {
    if size2 < size1 {
        return Err(ProofError::SizesReversed { size1, size2 });
    }
    if size1 == 0 {
        return Err(ProofError::EmptyOldTree);
    }
    if size1 == size2 {
        if !proof.is_empty() {
            return Err(ProofError::NonEmptyProofForEqualSizes { len: proof.len() });
        }
        if root1 != root2 {
            return Err(ProofError::RootMismatch);
        }
        return Ok(());
    }
    let first_hash = to_hash(root1).ok_or(ProofError::RootLength { len: root1.len() })?;
    let second_hash = to_hash(root2).ok_or(ProofError::RootLength { len: root2.len() })?;
    let expected = consistency_proof_len(size1, size2);
    if proof.len() != expected {
        return Err(ProofError::WrongProofLength {
            expected,
            actual: proof.len(),
        });
    }
    let mut path = proof_hashes(proof)?;
    let wrong_length = ProofError::WrongProofLength {
        expected,
        actual: proof.len(),
    };

    // RFC 9162 §2.1.4.2. Step 1 (empty path) is covered by the exact length check: every
    // proof for 0 < size1 < size2 has at least one hash.
    // Step 2: a power-of-two old tree is itself a complete subtree, so its root seeds both
    // computations and the proof omits it.
    if size1.is_power_of_two() {
        path.insert(0, first_hash);
    }
    let Some((&seed, rest)) = path.split_first() else {
        return Err(wrong_length);
    };
    // Steps 3-4.
    let mut f = size1 - 1;
    let mut sn = size2 - 1;
    while f & 1 == 1 {
        f >>= 1;
        sn >>= 1;
    }
    // Steps 5-6.
    let mut fr = seed;
    let mut sr = seed;
    for c in rest {
        if sn == 0 {
            return Err(wrong_length);
        }
        if f & 1 == 1 || f == sn {
            fr = node_hash(c, &fr);
            sr = node_hash(c, &sr);
            while f & 1 == 0 && f != 0 {
                f >>= 1;
                sn >>= 1;
            }
        } else {
            sr = node_hash(&sr, c);
        }
        f >>= 1;
        sn >>= 1;
    }
    // Step 7.
    if sn != 0 {
        return Err(wrong_length);
    }
    if fr != first_hash {
        return Err(ProofError::OldRootMismatch);
    }
    if sr != second_hash {
        return Err(ProofError::NewRootMismatch);
    }
    Ok(())
}
