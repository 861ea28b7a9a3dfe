//! The log against a naive, literal transcription of RFC 6962 §2.1 (MTH, PATH, PROOF /
//! SUBPROOF), plus property tests that proofs verify and that any single-bit change of the
//! statement is rejected.

use attest::log::{
    empty_root, leaf_hash, node_hash, root_from_inclusion_proof, verify_consistency,
    verify_inclusion, Hash, Log, LogError, LogStore, MemStore, ProofError, RootBuilder,
};
use proptest::prelude::*;

// ---- naive reference (recursive, O(n) per call) ----

fn split_point(n: usize) -> usize {
    // Largest power of two strictly smaller than n (n >= 2).
    let mut k = 1;
    while k * 2 < n {
        k *= 2;
    }
    k
}

/// RFC 6962 §2.1 transcribed literally over leaves `D[start..end)` of `d`, with MTH
/// memoised per range (the definitions are recursive and recompute the same subtrees many
/// times; the memo changes nothing but speed).
struct Reference<'a> {
    d: &'a [Vec<u8>],
    memo: std::cell::RefCell<std::collections::HashMap<(usize, usize), Hash>>,
}

impl<'a> Reference<'a> {
    fn new(d: &'a [Vec<u8>]) -> Self {
        Self {
            d,
            memo: Default::default(),
        }
    }

    fn mth(&self, start: usize, end: usize) -> Hash {
        if let Some(h) = self.memo.borrow().get(&(start, end)) {
            return *h;
        }
        let h = match end - start {
            0 => empty_root(),
            1 => leaf_hash(&self.d[start]),
            n => {
                let k = split_point(n);
                node_hash(&self.mth(start, start + k), &self.mth(start + k, end))
            }
        };
        self.memo.borrow_mut().insert((start, end), h);
        h
    }

    /// PATH(m, D[start..end)).
    fn path(&self, m: usize, start: usize, end: usize) -> Vec<Hash> {
        let n = end - start;
        if n <= 1 {
            return Vec::new();
        }
        let k = split_point(n);
        let (mut p, sibling) = if m < k {
            (self.path(m, start, start + k), self.mth(start + k, end))
        } else {
            (self.path(m - k, start + k, end), self.mth(start, start + k))
        };
        p.push(sibling);
        p
    }

    /// SUBPROOF(m, D[start..end), b).
    fn subproof(&self, m: usize, start: usize, end: usize, b: bool) -> Vec<Hash> {
        let n = end - start;
        if m == n {
            return if b {
                Vec::new()
            } else {
                vec![self.mth(start, end)]
            };
        }
        let k = split_point(n);
        let (mut p, h) = if m <= k {
            (
                self.subproof(m, start, start + k, b),
                self.mth(start + k, end),
            )
        } else {
            (
                self.subproof(m - k, start + k, end, false),
                self.mth(start, start + k),
            )
        };
        p.push(h);
        p
    }

    /// PROOF(m, D[0..n)).
    fn consistency(&self, m: usize, n: usize) -> Vec<Hash> {
        if m == n {
            return Vec::new();
        }
        self.subproof(m, 0, n, true)
    }
}

fn mth(d: &[Vec<u8>]) -> Hash {
    Reference::new(d).mth(0, d.len())
}

/// Shape of an inclusion statement: the decisions of PATH(index, D[size]), which depend on
/// the sizes only (same recursion as `Reference::path`, without hashing, so it scales to
/// any size): 'L' where the leaf is in the left part, 'R' in the right.
fn inclusion_shape(index: u64, size: u64) -> Vec<char> {
    if size <= 1 {
        return Vec::new();
    }
    let k = split_point_u64(size);
    let (mut shape, side) = if index < k {
        (inclusion_shape(index, k), 'L')
    } else {
        (inclusion_shape(index - k, size - k), 'R')
    };
    shape.push(side);
    shape
}

/// Decisions of SUBPROOF(size1, D[size2], true), as in `Reference::subproof` ('L'/'R' per
/// split, then 'E' for an omitted or 'S' for an included final subtree hash).
fn consistency_shape(size1: u64, size2: u64) -> Vec<char> {
    fn sub(m: u64, n: u64, b: bool) -> Vec<char> {
        if m == n {
            return vec![if b { 'E' } else { 'S' }];
        }
        let k = split_point_u64(n);
        let (mut shape, side) = if m <= k {
            (sub(m, k, b), 'L')
        } else {
            (sub(m - k, n - k, false), 'R')
        };
        shape.push(side);
        shape
    }
    if size1 == size2 {
        return Vec::new();
    }
    sub(size1, size2, true)
}

fn split_point_u64(n: u64) -> u64 {
    1 << (63 - (n - 1).leading_zeros())
}

fn leaves(n: usize, seed: u8) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let len = (i * 7 + usize::from(seed)) % 40;
            (0..len).map(|j| (i * 31 + j * 17) as u8 ^ seed).collect()
        })
        .collect()
}

/// A tiny deterministic generator for batch sizes (xorshift), so the test is reproducible.
struct XorShift(u64);
impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

const N: usize = 70;

#[test]
fn log_matches_reference_for_every_size_index_and_pair() {
    for seed in [1u64, 0xdead_beef] {
        let d = leaves(N, seed as u8);
        let mut log = Log::in_memory();
        let mut rng = XorShift(seed);
        let mut appended = 0;
        while appended < N {
            let batch = ((rng.next() % 9) as usize).min(N - appended);
            let range = log.append(&d[appended..appended + batch]).expect("append");
            assert_eq!(range, appended as u64..(appended + batch) as u64);
            appended += batch;
            assert_eq!(log.root(), mth(&d[..appended]));
            // Re-opening the store must give the same log (the cached right edge is
            // rebuilt from stored nodes).
            let reopened = Log::open(log.store().clone()).expect("reopen");
            assert_eq!(reopened.root(), log.root());
            assert_eq!(reopened.size(), appended as u64);
        }
        let reference = Reference::new(&d);
        for size in 0..=N {
            let root = reference.mth(0, size);
            assert_eq!(
                log.root_at(size as u64).expect("root_at"),
                root,
                "size {size}"
            );
            for (index, leaf) in d[..size].iter().enumerate() {
                let want = reference.path(index, 0, size);
                let got = log
                    .inclusion_proof(index as u64, size as u64)
                    .expect("proof");
                assert_eq!(got, want, "inclusion {index}/{size}");
                verify_inclusion(&leaf_hash(leaf), index as u64, size as u64, &got, &root)
                    .expect("inclusion verifies");
                assert_eq!(&log.leaf(index as u64).expect("leaf"), leaf);
            }
            for size1 in 1..=size {
                let want = reference.consistency(size1, size);
                let got = log
                    .consistency_proof(size1 as u64, size as u64)
                    .expect("consistency proof");
                assert_eq!(got, want, "consistency {size1}->{size}");
                let root1 = reference.mth(0, size1);
                verify_consistency(size1 as u64, size as u64, &got, &root1, &root)
                    .expect("consistency verifies");
            }
        }
    }
}

#[test]
fn append_commits_once_with_every_completed_subtree() {
    let d = leaves(13, 9);
    let mut log = Log::in_memory();
    log.append(&d[..5]).expect("append");
    let before = log.store().clone();
    log.append(&d[5..13]).expect("append");
    // Leaves 5..13 complete: level 0 nodes 5..=12, level 1 nodes 2 (4,5), 3, 4, 5,
    // level 2 nodes 1 (4..8), 2 (8..12), level 3 node 0 (0..8).
    let expected = [(0, 5..13), (1, 2..6), (2, 1..3), (3, 0..1)];
    for (level, range) in expected {
        for index in range {
            let id = attest::log::NodeId { level, index };
            assert_eq!(before.node(id).expect("node"), None, "{id:?} written early");
            assert!(
                log.store().node(id).expect("node").is_some(),
                "{id:?} missing"
            );
        }
    }
    assert_eq!(
        log.store()
            .node(attest::log::NodeId { level: 2, index: 3 })
            .ok()
            .flatten(),
        None
    );
    assert_eq!(log.append::<Vec<u8>>(&[]).expect("empty append"), 13..13);
}

#[test]
fn root_builder_matches_reference_at_every_size() {
    let d = leaves(N, 3);
    let mut b = RootBuilder::new();
    assert_eq!(b.root(), empty_root());
    for i in 0..N {
        b.push(&d[i]).expect("push");
        assert_eq!(b.size(), i as u64 + 1);
        assert_eq!(b.root(), mth(&d[..=i]), "size {}", i + 1);
        let resumed = RootBuilder::from_frontier(b.size(), &b.frontier()).expect("frontier");
        assert_eq!(resumed.root(), b.root());
    }
    assert!(RootBuilder::from_frontier(3, &[[0; 32]]).is_none());
}

#[test]
fn log_errors_are_precise() {
    let d = leaves(10, 5);
    let log = Log::from_leaves(&d).expect("log");
    assert!(matches!(
        log.inclusion_proof(10, 10),
        Err(LogError::IndexOutOfRange {
            index: 10,
            size: 10
        })
    ));
    assert!(matches!(
        log.inclusion_proof(0, 11),
        Err(LogError::SizeOutOfRange {
            requested: 11,
            size: 10
        })
    ));
    assert!(matches!(
        log.consistency_proof(0, 5),
        Err(LogError::InvalidSizes { size1: 0, size2: 5 })
    ));
    assert!(matches!(
        log.consistency_proof(6, 5),
        Err(LogError::InvalidSizes { size1: 6, size2: 5 })
    ));
    assert!(log.consistency_proof(5, 5).expect("equal sizes").is_empty());
    assert!(matches!(
        log.leaf(10),
        Err(LogError::IndexOutOfRange { .. })
    ));
    assert!(matches!(
        log.root_at(11),
        Err(LogError::SizeOutOfRange { .. })
    ));
    assert_eq!(Log::in_memory().root(), empty_root());
}

/// A store that lost a node: opening must notice instead of serving wrong roots.
#[test]
fn open_detects_a_corrupt_store() {
    #[derive(Debug)]
    struct Holey(MemStore);
    impl LogStore for Holey {
        type Error = std::convert::Infallible;
        fn size(&self) -> Result<u64, Self::Error> {
            self.0.size()
        }
        fn node(&self, id: attest::log::NodeId) -> Result<Option<Hash>, Self::Error> {
            if id.level == 2 {
                return Ok(None);
            }
            self.0.node(id)
        }
        fn leaf(&self, index: u64) -> Result<Option<Vec<u8>>, Self::Error> {
            self.0.leaf(index)
        }
        fn commit(&mut self, b: &attest::log::AppendBatch) -> Result<(), Self::Error> {
            self.0.commit(b)
        }
    }
    let store = Log::from_leaves(&leaves(6, 1)).expect("log").into_store();
    assert!(matches!(
        Log::open(Holey(store)),
        Err(LogError::MissingNode(attest::log::NodeId {
            level: 2,
            index: 0
        }))
    ));
}

/// A store whose commit fails leaves the log unchanged, and the append can be retried.
#[test]
fn failed_commit_changes_nothing() {
    #[derive(Debug, thiserror::Error)]
    #[error("disk full")]
    struct DiskFull;
    struct Flaky {
        inner: MemStore,
        fail: bool,
    }
    impl LogStore for Flaky {
        type Error = DiskFull;
        fn size(&self) -> Result<u64, DiskFull> {
            Ok(self.inner.size().unwrap_or_default())
        }
        fn node(&self, id: attest::log::NodeId) -> Result<Option<Hash>, DiskFull> {
            Ok(self.inner.node(id).unwrap_or_default())
        }
        fn leaf(&self, index: u64) -> Result<Option<Vec<u8>>, DiskFull> {
            Ok(self.inner.leaf(index).unwrap_or_default())
        }
        fn commit(&mut self, b: &attest::log::AppendBatch) -> Result<(), DiskFull> {
            if self.fail {
                return Err(DiskFull);
            }
            let _ = self.inner.commit(b);
            Ok(())
        }
    }
    let d = leaves(7, 2);
    let mut log = Log::open(Flaky {
        inner: MemStore::new(),
        fail: false,
    })
    .expect("open");
    log.append(&d[..3]).expect("append");
    let root = log.root();
    // Can't reach the store mutably through the log, so rebuild a failing one around it.
    let mut inner = log.into_store();
    inner.fail = true;
    let mut log = Log::open(inner).expect("open");
    let err = log.append(&d[3..]).expect_err("commit fails");
    assert!(matches!(err, LogError::Store(_)));
    assert_eq!(
        attest::report::report(&err).to_string(),
        "log store: disk full"
    );
    assert_eq!(log.size(), 3);
    assert_eq!(log.root(), root);
    let mut inner = log.into_store();
    inner.fail = false;
    let mut log = Log::open(inner).expect("open");
    log.append(&d[3..]).expect("retry");
    assert_eq!(log.root(), mth(&d));
}

#[test]
fn verifier_rejects_malformed_inputs_precisely() {
    let d = leaves(5, 4);
    let log = Log::from_leaves(&d).expect("log");
    let root = log.root();
    let proof = log.inclusion_proof(1, 5).expect("proof");
    let leaf = leaf_hash(&d[1]);
    assert_eq!(
        verify_inclusion(&leaf, 5, 5, &proof, &root),
        Err(ProofError::IndexOutOfRange { index: 5, size: 5 })
    );
    assert_eq!(
        verify_inclusion(&leaf[..31], 1, 5, &proof, &root),
        Err(ProofError::LeafHashLength { len: 31 })
    );
    assert_eq!(
        verify_inclusion(&leaf, 1, 5, &proof[..2], &root),
        Err(ProofError::WrongProofLength {
            expected: 3,
            actual: 2
        })
    );
    let mut bad: Vec<Vec<u8>> = proof.iter().map(|h| h.to_vec()).collect();
    bad[1].push(0);
    assert_eq!(
        verify_inclusion(&leaf, 1, 5, &bad, &root),
        Err(ProofError::ProofHashLength {
            position: 1,
            len: 33
        })
    );
    assert_eq!(
        verify_inclusion(&leaf, 1, 5, &proof, &root[..16]),
        Err(ProofError::RootLength { len: 16 })
    );
    assert_eq!(root_from_inclusion_proof(&leaf, 1, 5, &proof), Ok(root));
    let c = log.consistency_proof(3, 5).expect("proof");
    let root3 = log.root_at(3).expect("root");
    assert_eq!(
        verify_consistency(5, 3, &c, &root3, &root),
        Err(ProofError::SizesReversed { size1: 5, size2: 3 })
    );
    assert_eq!(
        verify_consistency(0, 5, &c, &root3, &root),
        Err(ProofError::EmptyOldTree)
    );
    assert_eq!(
        verify_consistency(3, 3, &c, &root3, &root3),
        Err(ProofError::NonEmptyProofForEqualSizes { len: c.len() })
    );
    assert_eq!(
        verify_consistency(3, 5, &c, &root, &root),
        Err(ProofError::OldRootMismatch)
    );
    assert_eq!(
        verify_consistency(3, 5, &c, &root3, &root3),
        Err(ProofError::NewRootMismatch)
    );
}

// ---- property tests ----

fn flip(bytes: &mut [u8], bit: usize) {
    let bit = bit % (bytes.len() * 8);
    bytes[bit / 8] ^= 1 << (bit % 8);
}

/// Outcome of verifying a mutated inclusion statement: it must be rejected unless it is
/// the same statement shape (then the verifier performs exactly the same hash computation
/// and cannot tell, by construction — the size is bound to the root by the signed tree
/// head, not by the proof).
fn assert_inclusion_mutant(
    leaf: &Hash,
    (index, size): (u64, u64),
    (index2, size2): (u64, u64),
    proof: &[Hash],
    root: &Hash,
) -> Result<(), TestCaseError> {
    let result = verify_inclusion(leaf, index2, size2, proof, root);
    let same_shape = index2 < size2
        && index2 == index
        && inclusion_shape(index2, size2) == inclusion_shape(index, size);
    if !same_shape {
        prop_assert!(
            result.is_err(),
            "({index2},{size2}) accepted for ({index},{size})"
        );
    } else {
        prop_assert!(result.is_ok());
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn inclusion_proofs_verify_and_bit_flips_are_rejected(
        n in 1usize..300,
        pick in any::<u64>(),
        bit in any::<usize>(),
        seed in any::<u8>(),
    ) {
        let d = leaves(n, seed);
        let log = Log::from_leaves(&d).expect("log");
        let size = n as u64;
        let index = pick % size;
        let root = log.root();
        let proof = log.inclusion_proof(index, size).expect("proof");
        let leaf = leaf_hash(&d[index as usize]);
        prop_assert_eq!(verify_inclusion(&leaf, index, size, &proof, &root), Ok(()));

        // Leaf data.
        let mut data = d[index as usize].clone();
        data.push(0);
        flip(&mut data, bit);
        prop_assert!(verify_inclusion(&leaf_hash(&data), index, size, &proof, &root).is_err());
        // Leaf hash.
        let mut l2 = leaf;
        flip(&mut l2, bit);
        prop_assert_eq!(verify_inclusion(&l2, index, size, &proof, &root), Err(ProofError::RootMismatch));
        // Root.
        let mut r2 = root;
        flip(&mut r2, bit);
        prop_assert_eq!(verify_inclusion(&leaf, index, size, &proof, &r2), Err(ProofError::RootMismatch));
        // Each proof hash.
        if !proof.is_empty() {
            let mut p2 = proof.clone();
            let i = bit % p2.len();
            flip(&mut p2[i], bit / 7);
            prop_assert!(verify_inclusion(&leaf, index, size, &p2, &root).is_err());
        }
        // Index and size, every bit.
        for b in 0..64 {
            assert_inclusion_mutant(&leaf, (index, size), (index ^ (1 << b), size), &proof, &root)?;
            assert_inclusion_mutant(&leaf, (index, size), (index, size ^ (1 << b)), &proof, &root)?;
        }
    }

    #[test]
    fn consistency_proofs_verify_and_bit_flips_are_rejected(
        n in 2usize..300,
        pick in any::<u64>(),
        bit in any::<usize>(),
        seed in any::<u8>(),
    ) {
        let d = leaves(n, seed);
        let log = Log::from_leaves(&d).expect("log");
        let size2 = n as u64;
        let size1 = 1 + pick % (size2 - 1); // 0 < size1 < size2
        let root2 = log.root();
        let root1 = log.root_at(size1).expect("root1");
        let proof = log.consistency_proof(size1, size2).expect("proof");
        prop_assert_eq!(verify_consistency(size1, size2, &proof, &root1, &root2), Ok(()));

        let mut r = root1;
        flip(&mut r, bit);
        prop_assert!(verify_consistency(size1, size2, &proof, &r, &root2).is_err());
        let mut r = root2;
        flip(&mut r, bit);
        prop_assert!(verify_consistency(size1, size2, &proof, &root1, &r).is_err());
        let mut p2 = proof.clone();
        let i = bit % p2.len();
        flip(&mut p2[i], bit / 7);
        prop_assert!(verify_consistency(size1, size2, &p2, &root1, &root2).is_err());

        for b in 0..64 {
            for (s1, s2) in [(size1 ^ (1 << b), size2), (size1, size2 ^ (1 << b))] {
                let result = verify_consistency(s1, s2, &proof, &root1, &root2);
                let same_shape = 0 < s1
                    && s1 < s2
                    && consistency_shape(s1, s2) == consistency_shape(size1, size2);
                if same_shape {
                    prop_assert!(result.is_ok());
                } else {
                    prop_assert!(result.is_err(), "({s1},{s2}) accepted for ({size1},{size2})");
                }
            }
        }
    }
}
