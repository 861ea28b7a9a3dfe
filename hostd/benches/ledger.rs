//! Ledger benchmarks on sled (run with `cargo bench -p hostd --bench ledger`):
//!
//! * durable appends of 256-byte records in batches of 1,000 (target ≥ 50,000 records/s);
//! * single-record durable append latency (median = p50);
//! * inclusion and consistency proof generation in a 1,000,000-record ledger (target
//!   < 50 µs p50), raw and as the formatted receipt / proof file the API serves;
//! * `sovctl audit verify` of a 1,000,000-record export against `sha256sum` over the same
//!   records.jsonl, printed as a ratio (not a criterion measurement: one run is seconds).
//!
//! `LEDGER_BENCH_SIZE` overrides the million; `--test` (as `cargo bench -- --test` passes)
//! shrinks everything to a smoke run.

#[path = "../tests/common/mod.rs"]
mod common;

use attest::log::{Log, LogStore};
use attest::note::NoteSigner;
use auditor::money::amount_paise;
use auditor::record::{Record, UsageRecord, RECORD_VERSION};
use criterion::{BatchSize, BenchmarkId, Criterion, Throughput};
use hostd::audit;
use hostd::ledger::{Ledger, SledLogStore};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn signer() -> NoteSigner {
    NoteSigner::from_seed("bench-node/usage", &[3; 32]).unwrap()
}

fn open_db(dir: &Path) -> sled::Db {
    sled::Config::new().path(dir.join("db")).open().unwrap()
}

/// Leases metered in turn: record `id` is of lease `id % LEASES`, in its hour `id / LEASES`.
const LEASES: u64 = 101;

/// A realistic usage record (about 480 bytes of JSON) that passes the audit's checks: each
/// lease's records are a chain (`prev`) of intervals in successive hours, on its own GPU (a
/// leased GPU is exclusive).
fn record(id: u64) -> Vec<u8> {
    let lease = id % LEASES;
    let tenant = format!("tenant-{:02}", lease % 17);
    let gpu_ms = 3_600_000 - (id % 1000);
    let rate = 25_000 + (lease % 5) * 1_000;
    let start = 1_772_323_200_000 + i64::try_from(id / LEASES).unwrap() * 3_600_000; // 2026-03-01
    let end = start + i64::try_from(gpu_ms).unwrap();
    Record::Usage(UsageRecord {
        v: RECORD_VERSION,
        id,
        node: "bench-node".into(),
        tenant: tenant.clone(),
        lease: format!("{tenant}-lease-{lease}"),
        gpu_uuid: format!("GPU-5a3e2f10-8c41-4b7e-9d2a-{lease:012x}"),
        gpu_model: "NVIDIA H100 80GB HBM3".into(),
        start: hostd::clock::rfc3339_ms(start),
        end: hostd::clock::rfc3339_ms(end),
        gpu_ms,
        gpu_seconds: gpu_ms as f64 / 1000.0,
        energy_joules: 2_519_876.5 + (id % 13) as f64,
        peak_memory_bytes: 68_719_476_736 - id % 4096,
        mean_utilization_pct: 87.25,
        rate_paise_per_hour: rate,
        amount_paise: amount_paise(gpu_ms, rate),
        policy_digest: "sha256:4f1c0e8f2b7a9d3c5e6f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d"
            .into(),
        prev: id.checked_sub(LEASES),
        attestation: None,
    })
    .to_leaf()
    .unwrap()
}

fn fixed_leaf(i: u64) -> Vec<u8> {
    let mut v = format!("{{\"i\":{i},\"pad\":\"").into_bytes();
    v.resize(254, b'x');
    v.extend_from_slice(b"\"}");
    v
}

fn bench_appends(c: &mut Criterion, smoke: bool) {
    let dir = tempfile::tempdir().unwrap();
    let db = open_db(dir.path());
    let mut ledger = Ledger::open(&db, signer()).unwrap();
    // Leaf contents only need to differ; the setup closures cannot borrow the ledger.
    let next = std::cell::Cell::new(0u64);
    let mut g = c.benchmark_group("ledger_append_durable");
    g.sample_size(if smoke { 10 } else { 20 });
    g.measurement_time(Duration::from_secs(if smoke { 1 } else { 8 }));
    g.throughput(Throughput::Elements(1000));
    g.bench_function("batch_1000_x_256B", |b| {
        b.iter_batched(
            || {
                let start = next.get();
                next.set(start + 1000);
                (start..start + 1000).map(fixed_leaf).collect::<Vec<_>>()
            },
            |batch| ledger.append(&batch).unwrap(),
            BatchSize::LargeInput,
        )
    });
    g.throughput(Throughput::Elements(1));
    g.bench_function("single_256B", |b| {
        b.iter_batched(
            || {
                let i = next.get();
                next.set(i + 1);
                vec![fixed_leaf(i)]
            },
            |one| ledger.append(&one).unwrap(),
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

/// Builds (once) a ledger of `n` realistic records in batches of 10,000.
fn build_big(dir: &Path, n: u64) -> Duration {
    let db = open_db(dir);
    let mut ledger = Ledger::open(&db, signer()).unwrap();
    let t = Instant::now();
    while ledger.size() < n {
        let start = ledger.size();
        let end = (start + 10_000).min(n);
        let batch: Vec<Vec<u8>> = (start..end).map(record).collect();
        ledger.append(&batch).unwrap();
    }
    t.elapsed()
}

fn bench_proofs(c: &mut Criterion, dir: &Path, n: u64) {
    let db = open_db(dir);
    let ledger = Ledger::open(&db, signer()).unwrap();
    let log = Log::open(SledLogStore::open(&db).unwrap()).unwrap();
    assert_eq!(log.store().size().unwrap(), n);
    let mut g = c.benchmark_group(format!("ledger_proofs_at_{n}"));
    g.measurement_time(Duration::from_secs(3));
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut rand_below = move |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    g.bench_function(BenchmarkId::new("inclusion_proof", "random_index"), |b| {
        b.iter(|| log.inclusion_proof(rand_below(n), n).unwrap())
    });
    g.bench_function(
        BenchmarkId::new("consistency_proof", "random_old_size"),
        |b| b.iter(|| log.consistency_proof(1 + rand_below(n - 1), n).unwrap()),
    );
    g.bench_function(BenchmarkId::new("receipt_text", "random_index"), |b| {
        b.iter(|| ledger.receipt(rand_below(n)).unwrap())
    });
    g.bench_function(
        BenchmarkId::new("consistency_proof_text", "random_old_size"),
        |b| b.iter(|| ledger.consistency_proof(1 + rand_below(n - 1)).unwrap()),
    );
    g.finish();
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Exports the big ledger and times `sovctl audit verify` against `sha256sum`.
fn verify_vs_sha256sum(dir: &Path, n: u64, runs: usize) {
    let export = dir.join("export");
    let db = open_db(dir);
    let ledger = Ledger::open(&db, signer()).unwrap();
    let t = Instant::now();
    let summary = audit::export(&ledger, &export, &[]).unwrap();
    let export_time = t.elapsed();
    let vkey = dir.join("pinned.vkey");
    std::fs::write(&vkey, ledger.vkey() + "\n").unwrap();
    drop(ledger);
    drop(db);
    let records = export.join("records.jsonl");
    let bytes = std::fs::metadata(&records).unwrap().len();
    println!(
        "\nexport of {} records ({:.1} MB): {:.2?}",
        summary.records,
        bytes as f64 / 1e6,
        export_time
    );
    let mut verify = Vec::new();
    let mut sha = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        let out = Command::new(common::sovctl_bin())
            .args(["audit", "verify", "--quiet", "--vkey"])
            .arg(&vkey)
            .arg(&export)
            .output()
            .unwrap();
        verify.push(t.elapsed());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let t = Instant::now();
        let out = Command::new("sha256sum").arg(&records).output();
        match out {
            Ok(o) if o.status.success() => sha.push(t.elapsed()),
            _ => {
                println!(
                    "sha256sum not available; verify median {:.2?}",
                    median(verify)
                );
                return;
            }
        }
    }
    let (v, s) = (median(verify), median(sha));
    println!(
        "sovctl audit verify, {n} records: median {v:.2?} ({:.0} MB/s); sha256sum: median \
         {s:.2?} ({:.0} MB/s); ratio verify/sha256sum = {:.2}",
        bytes as f64 / 1e6 / v.as_secs_f64(),
        bytes as f64 / 1e6 / s.as_secs_f64(),
        v.as_secs_f64() / s.as_secs_f64()
    );
}

fn main() {
    let smoke = std::env::args().any(|a| a == "--test");
    let n: u64 = std::env::var("LEDGER_BENCH_SIZE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if smoke { 20_000 } else { 1_000_000 });
    let mut c = Criterion::default().configure_from_args();
    bench_appends(&mut c, smoke);

    let dir = tempfile::tempdir().unwrap();
    let built = build_big(dir.path(), n);
    println!(
        "\nbuilt a {n}-record ledger (≈480 B records, batches of 10,000) in {built:.2?}: {:.0} records/s",
        n as f64 / built.as_secs_f64()
    );
    bench_proofs(&mut c, dir.path(), n);
    verify_vs_sha256sum(dir.path(), n, if smoke { 1 } else { 5 });
    c.final_summary();
}
