//! What a node pays, per metering tick, for the leases it has had: before, every tick read the
//! whole lease table (`Node::leases`, every lease the node ever had) to find the active ones;
//! now it reads the active leases by id (`Node::active_leases`). Printed side by side for
//! growing numbers of ended leases, with a whole `meter_tick` (four active leases, no GPU
//! samples due), on the simulated GPUs. Prints figures; not a criterion run.
//!
//! `cargo bench -p hostd --bench leases` (`-- --test`: one small size, as a smoke test).

#[path = "../tests/common/node.rs"]
mod node;

use hostd::lease::{Lease, LeaseState, LeasedGpu};
use hostd::node::Node;
use hostd::state::keys::LeasesKey;
use node::open_node;
use std::path::Path;
use std::time::{Duration, Instant};

/// A lease as the node stores one, with a policy decision of a typical length.
fn lease(i: usize, state: LeaseState) -> Lease {
    let started_ms = 1_790_000_000_000 + i as i64 * 3_600_000;
    let ended = state == LeaseState::Ended;
    Lease {
        id: format!("lease-{i:012x}"),
        tenant: format!("tenant-{}", i % 50),
        model: "H100".into(),
        gpus: vec![LeasedGpu {
            uuid: format!("GPU-{i:032x}"),
            model: "H100".into(),
            index: (i % 4) as u32,
            fault: None,
        }],
        classification: "internal".into(),
        dataset: Some("telugu-speech-2000h".into()),
        state,
        started_ms,
        ended_ms: ended.then_some(started_ms + 3_600_000),
        started: "2026-09-21T10:00:00.000Z".into(),
        ended: ended.then(|| "2026-09-21T11:00:00.000Z".into()),
        rate_paise_per_hour: 25_000,
        policy_digest: "ab".repeat(32),
        decision: vec![
            "allowed: rule internal-in-india allows placing internal data in IN-TG".into(),
            "passed: the node's attestation is affirming, 3 minutes old".into(),
        ],
    }
}

/// A node whose store holds `ended` ended leases and four active ones, opened afresh.
fn node_with(dir: &Path, ended: usize) -> Node {
    {
        let node = open_node(dir);
        let tree = node.store().tree("leases").unwrap();
        for i in 0..ended + 4 {
            let state = if i < ended {
                LeaseState::Ended
            } else {
                LeaseState::Active
            };
            let l = lease(i, state);
            tree.put(&LeasesKey::Lease(&l.id).key(), &l).unwrap();
        }
        node.flush().unwrap();
    }
    open_node(dir)
}

/// The median of `rounds` timings of `f`.
fn median(rounds: usize, mut f: impl FnMut()) -> Duration {
    let mut t: Vec<Duration> = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    t.sort();
    t[t.len() / 2]
}

fn main() {
    let smoke = std::env::args().any(|a| a == "--test");
    let sizes: &[usize] = if smoke {
        &[100]
    } else {
        &[0, 1_000, 10_000, 50_000]
    };
    println!("ended leases | whole table (before) | active leases (now) | ratio | meter_tick");
    for &n in sizes {
        let dir = tempfile::tempdir().unwrap();
        let node = node_with(dir.path(), n);
        assert_eq!(node.active_leases().unwrap().len(), 4);
        let rounds = if smoke { 3 } else { 21 };
        let before = median(rounds, || assert_eq!(node.leases().unwrap().len(), n + 4));
        let now = median(rounds, || {
            assert_eq!(node.active_leases().unwrap().len(), 4)
        });
        let tick = median(rounds, || {
            node.meter_tick().unwrap();
        });
        println!(
            "{n:>12} | {before:>20.2?} | {now:>19.2?} | {:>5.0} | {tick:>10.2?}",
            before.as_secs_f64() / now.as_secs_f64()
        );
    }
}
