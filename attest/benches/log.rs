//! Merkle log benchmarks: proof generation and verification at 1,000,000 leaves (target
//! < 50 µs p50 for generation), and the auditor's root recomputation over 1,000,000
//! 256-byte leaves compared with plain SHA-256 over the same bytes.
//!
//! Run: `cargo bench -p attest --bench log`.

use attest::log::{verify_consistency, verify_inclusion, Log, MemStore, RootBuilder};
use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use sha2::{Digest, Sha256};
use std::time::Duration;

const SIZE: u64 = 1_000_000;
const LEAF_LEN: usize = 256;

fn leaves() -> Vec<[u8; LEAF_LEN]> {
    (0..SIZE)
        .map(|i| {
            let mut leaf = [0u8; LEAF_LEN];
            for (j, chunk) in leaf.chunks_mut(8).enumerate() {
                chunk.copy_from_slice(&(i * 31 + j as u64).to_le_bytes());
            }
            leaf
        })
        .collect()
}

/// Deterministic spread of indices / sizes so every iteration hits a different path.
fn spread(n: u64, k: u64) -> u64 {
    (k.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 11) % n
}

fn proofs(c: &mut Criterion, log: &Log<MemStore>) {
    let mut g = c.benchmark_group("log_1M");
    g.measurement_time(Duration::from_secs(3));
    g.warm_up_time(Duration::from_millis(500));

    let mut k = 0u64;
    g.bench_function("inclusion_proof", |b| {
        b.iter(|| {
            k += 1;
            black_box(log.inclusion_proof(spread(SIZE, k), SIZE).ok())
        })
    });
    let mut k = 0u64;
    g.bench_function("consistency_proof", |b| {
        b.iter(|| {
            k += 1;
            black_box(log.consistency_proof(spread(SIZE - 1, k) + 1, SIZE).ok())
        })
    });

    let root = log.root();
    let mut k = 0u64;
    g.bench_function("verify_inclusion", |b| {
        b.iter_batched(
            || {
                k += 1;
                let index = spread(SIZE, k);
                let leaf = log.leaf(index).unwrap_or_default();
                let proof = log.inclusion_proof(index, SIZE).unwrap_or_default();
                (attest::log::leaf_hash(&leaf), index, proof)
            },
            |(leaf, index, proof)| black_box(verify_inclusion(&leaf, index, SIZE, &proof, &root)),
            BatchSize::SmallInput,
        )
    });
    let mut k = 0u64;
    g.bench_function("verify_consistency", |b| {
        b.iter_batched(
            || {
                k += 1;
                let size1 = spread(SIZE - 1, k) + 1;
                let root1 = log.root_at(size1).unwrap_or_default();
                let proof = log.consistency_proof(size1, SIZE).unwrap_or_default();
                (size1, root1, proof)
            },
            |(size1, root1, proof)| {
                black_box(verify_consistency(size1, SIZE, &proof, &root1, &root))
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

fn throughput(c: &mut Criterion, leaves: &[[u8; LEAF_LEN]]) {
    let mut g = c.benchmark_group("root_1M_x_256B");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(8));
    g.warm_up_time(Duration::from_millis(500));
    g.throughput(Throughput::Bytes(SIZE * LEAF_LEN as u64));
    g.bench_function("RootBuilder", |b| {
        b.iter(|| {
            let mut rb = RootBuilder::new();
            for leaf in leaves {
                let _ = rb.push(leaf);
            }
            black_box(rb.root())
        })
    });
    g.bench_function("sha256_same_bytes", |b| {
        b.iter(|| {
            let mut h = Sha256::new();
            for leaf in leaves {
                h.update(leaf);
            }
            black_box(h.finalize())
        })
    });
    g.finish();
}

fn benches(c: &mut Criterion) {
    let leaves = leaves();
    // Appended in batches, as the daemon does, which also bounds the batch copies' memory.
    let mut log = Log::in_memory();
    for chunk in leaves.chunks(10_000) {
        log.append(chunk).expect("in-memory append cannot fail");
    }
    proofs(c, &log);
    throughput(c, &leaves);
}

criterion_group!(log_benches, benches);
criterion_main!(log_benches);
