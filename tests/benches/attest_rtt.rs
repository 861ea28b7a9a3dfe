//! Attestation round trip, printed (not asserted): challenge → `POST /v1/attestation` over mTLS
//! keep-alive on loopback → the node collects and signs evidence (GPU reports over derived
//! nonces from the fake NVML library) → in-process appraisal by the `attest` verifier →
//! signed result. p50/p99 of the whole trip, plus the share spent appraising.
//!
//! Run with release binaries:
//! `cargo build --release -p hostd -p fake-nvml && cargo bench -p e2e --bench attest_rtt`

use attest::ear::Status;
use attest::verifier::NonceRegistry;
use e2e::DevNode;
use serde_json::json;
use sovctl::cli::attest::{build_verifier, TrustArgs};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const WARMUP: usize = 20;
const ROUNDS: usize = 300;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// A nonce no earlier round used (the bench needs freshness, not unpredictability).
fn nonce(round: usize) -> [u8; 32] {
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let mut n = [0u8; 32];
    n[..16].copy_from_slice(&t.to_le_bytes());
    n[16..24].copy_from_slice(&(round as u64).to_le_bytes());
    n[24] = 0xA7;
    n
}

fn scenario(gpus: &str) {
    let node = DevNode::start(&["--gpus", gpus, "--cc", "on"]);
    let d = |f: &str| Some(node.dir.join(f));
    let trust = TrustArgs {
        reference: d("reference.json"),
        release_key: None,
        // A node without GPUs has no GPU roots to trust.
        nvidia_root: d("nvidia-roots.pem").filter(|_| gpus != "none"),
        rims: d("rims").filter(|_| gpus != "none").into_iter().collect(),
        rim_root: d("rim-root.pem").filter(|_| gpus != "none"),
        enrollment_authority: d("enrollment-authority.key.pub"),
        min_gpus: 0,
        require_gpu_reports: true,
        require_tpm_ek: false,
        max_age: 300,
        verifier_key: d("verifier.key"),
        nonce_log: None,
        result_out: None,
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let verifier = build_verifier(&trust, now).expect("verifier from the dev node's files");
    let mut registry = NonceRegistry::new(300);
    let rt = node.rt();
    let client = rt.block_on(node.client("operator")).expect("client");
    let mut total = Vec::with_capacity(ROUNDS);
    let mut appraisal = Vec::with_capacity(ROUNDS);
    for round in 0..WARMUP + ROUNDS {
        let n = nonce(round);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let t0 = Instant::now();
        registry.issue(n, now).expect("fresh nonce");
        let (status, body) = rt
            .block_on(client.post(
                "/v1/attestation",
                &json!({ "nonce": n.iter().map(|b| format!("{b:02x}")).collect::<String>() }),
            ))
            .expect("attestation request");
        assert_eq!(status, 200, "{body}");
        let evidence = body["evidence"].as_str().expect("evidence").as_bytes();
        let t1 = Instant::now();
        let result = verifier
            .appraise(evidence, &n, now, &mut registry)
            .expect("appraisal");
        let t2 = Instant::now();
        assert_eq!(
            result.status(),
            Status::Affirming,
            "{:?}",
            result.result.reasons
        );
        if round >= WARMUP {
            total.push(t2 - t0);
            appraisal.push(t2 - t1);
        }
    }
    total.sort();
    appraisal.sort();
    println!(
        "attest_rtt gpus={gpus:<8} rounds={ROUNDS}  round trip p50 {}  p99 {}  | of which appraisal p50 {}  p99 {}",
        ms(percentile(&total, 0.5)),
        ms(percentile(&total, 0.99)),
        ms(percentile(&appraisal, 0.5)),
        ms(percentile(&appraisal, 0.99)),
    );
}

fn main() {
    // `cargo bench` passes --bench; nothing to parse.
    for gpus in ["none", "H100:1", "H100:4", "H100:8"] {
        scenario(gpus);
    }
}
