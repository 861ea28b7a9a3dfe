//! Evidence verification throughput (target: ≥ 10,000/s on one core without a GPU report),
//! and the cost with one Hopper-shaped GPU report plus certificate chain.
//!
//! Run: `cargo bench -p attest --bench verify`. Criterion runs on one thread; the figures are
//! per core. On a shared machine wall-clock figures include time other processes hold the
//! CPU, so the bench also prints `cpu-time` lines computed from this thread's on-CPU time.
//!
//! * `evidence/verify_no_gpu_known_node` — decode (strict canonical JSON), node signature
//!   (one Ed25519 verification), measurement comparison: the per-document work for a node
//!   whose enrollment certificate the verifier has already checked.
//! * `evidence/verify_no_gpu` — decode (strict canonical JSON), node signature, enrollment
//!   signature (checked every time: two Ed25519 verifications) and validity, measurement
//!   comparison.
//! * `evidence/decode_only`, `evidence/node_signature_only` — its parts.
//! * `evidence/appraise_no_gpu` — the full appraisal as a verifier runs it: nonce bookkeeping,
//!   the enrollment signature remembered after its first check (one Ed25519 verification per
//!   document), and signing the attestation result (one Ed25519 signature).
//! * `evidence/appraise_one_gpu_cold` — full appraisal with one simulated Hopper-shaped GPU
//!   report and a three-certificate P-384 chain, first contact (fresh verifier: 4 ECDSA P-384
//!   verifications plus both Ed25519 checks).
//! * `evidence/appraise_one_gpu` — the same for a known node and GPU: the verifier remembers
//!   the checked chain, leaving one P-384 verification (the report signature).
//! * `nvidia/verify_sample_report` — the real NVIDIA sample report with its five-certificate
//!   chain (6 ECDSA P-384 verifications).

use attest::evidence::{
    gpu_nonce, CcMode, Evidence, EvidenceClaims, GpuClaims, GpuReport, HexBytes, EVIDENCE_PROFILE,
};
use attest::identity::{EnrollmentAuthority, EnrollmentClaims, NodeKey};
use attest::manifest::ImageManifest;
use attest::nvidia::chain::CertChain;
use attest::nvidia::sim::{ReportSpec, SimGpu};
use attest::nvidia::verify_report;
use attest::verifier::{NonceRegistry, ReferenceValues, Verifier, VerifierConfig};
use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};

const NOW: u64 = 1_800_000_000;
const UUID: &str = "GPU-11111111-2222-3333-4444-555555555555";

fn measurements() -> BTreeMap<String, [u8; 32]> {
    [
        "kernel",
        "initrd",
        "cmdline",
        "uki.linux",
        "uki.osrel",
        "pcr.0",
        "pcr.4",
        "pcr.7",
        "hostd",
        "hostd.config",
        "policy",
    ]
    .into_iter()
    .map(|n| (n.to_string(), Sha256::digest(n.as_bytes()).into()))
    .collect()
}

struct Setup {
    verifier: Verifier,
    node: NodeKey,
    ea: EnrollmentAuthority,
    gpu: SimGpu,
}

fn setup() -> Setup {
    let ea = EnrollmentAuthority::from_seed(&[1; 32]);
    let node = NodeKey::from_seed(&[2; 32]);
    let gpu = SimGpu::new(b"bench-gpu", NOW - 1000, NOW + 1_000_000).expect("sim chain");
    let verifier = Verifier::new(VerifierConfig {
        enrollment_authorities: vec![ea.verifying_key()],
        revoked_nodes: BTreeSet::new(),
        nvidia_roots: vec![gpu.root_der().to_vec()],
        reference: ReferenceValues {
            image: ImageManifest {
                name: "sovereign-host".into(),
                version: "1".into(),
                measurements: measurements(),
                components: Default::default(),
            },
            gpu_rims: vec![],
        },
        min_gpus: 0,
        require_gpu_reports: true,
        require_tpm_ek: false,
        max_age: 300,
        max_clock_skew: 30,
        signing_key: ed25519_dalek::SigningKey::from_bytes(&[4; 32]),
    })
    .expect("verifier");
    Setup {
        verifier,
        node,
        ea,
        gpu,
    }
}

fn evidence(s: &Setup, nonce: [u8; 32], gpus: usize) -> Vec<u8> {
    let enrollment =
        s.ea.issue(EnrollmentClaims {
            tpm_ak: None,
            tpm_ek_certificate_sha256: None,
            node_public_key: s.node.public_key(),
            node_name: "node-fra-01".into(),
            jurisdiction: "DE".into(),
            facility: "FRA1".into(),
            not_before: NOW - 1000,
            not_after: NOW + 1000,
            authority_public_key: [0; 32],
        })
        .expect("enrollment");
    let mut submods = vec![];
    for i in 0..gpus {
        // The first GPU keeps the historical UUID; further ones get their own.
        let uuid = if i == 0 {
            UUID.to_string()
        } else {
            format!("GPU-00000000-0000-0000-0000-{i:012}")
        };
        let spdm = s
            .gpu
            .report(&ReportSpec {
                nonce: gpu_nonce(&nonce, &uuid, &s.node.public_key()),
                responder_nonce: [5; 32],
                measurements: (1..=64u8)
                    .map(|i| (i, Sha256::digest([i]).repeat(2)[..48].to_vec()))
                    .collect(),
                driver_version: "550.90.07".into(),
                vbios_version: [0x00, 0x9f, 0x00, 0x96, 0x01, 0, 0, 0],
                extra_opaque: vec![],
                fwid_override: None,
            })
            .expect("report");
        submods.push(GpuClaims {
            uuid,
            serial: "1".into(),
            model: "H100".into(),
            vbios_version: "96.00.9F.00.01".into(),
            driver_version: "550.90.07".into(),
            cc_mode: CcMode::On,
            report: Some(GpuReport {
                spdm,
                cert_chain: s.gpu.chain().iter().cloned().map(HexBytes).collect(),
            }),
        });
    }
    let mut m = measurements();
    m.insert("ledger.checkpoint".into(), [9; 32]);
    let claims = EvidenceClaims {
        tpm: None,
        eat_profile: EVIDENCE_PROFILE.into(),
        eat_nonce: nonce,
        ueid: s.node.ueid().to_vec(),
        enrollment,
        iat: NOW,
        measurements: m,
        submods,
    };
    Evidence::sign(claims, &s.node)
        .expect("sign")
        .to_bytes()
        .expect("encode")
}

fn registry(nonce: [u8; 32]) -> NonceRegistry {
    let mut r = NonceRegistry::new(600);
    r.issue(nonce, NOW).expect("issue");
    r
}

/// On-CPU time of this thread in nanoseconds (Linux `/proc/thread-self/schedstat`), so the
/// per-core figure is not inflated by other processes competing for the CPU; `None` elsewhere.
fn thread_cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// Print per-core throughput from on-CPU time, next to criterion's wall-clock figures.
fn cpu_time_report(name: &str, iterations: u32, mut f: impl FnMut()) {
    let (Some(start), wall) = (thread_cpu_ns(), std::time::Instant::now()) else {
        return;
    };
    for _ in 0..iterations {
        f();
    }
    let wall = wall.elapsed();
    if let Some(end) = thread_cpu_ns() {
        let per_op = (end - start) as f64 / f64::from(iterations);
        println!(
            "cpu-time {name}: {:.1} µs on-CPU per op = {:.0}/s per core (wall {:.1} µs per op)",
            per_op / 1e3,
            1e9 / per_op,
            wall.as_secs_f64() * 1e6 / f64::from(iterations)
        );
    }
}

fn bench(c: &mut Criterion) {
    let s = setup();
    let nonce = [7; 32];
    let plain = evidence(&s, nonce, 0);
    let with_gpu = evidence(&s, nonce, 1);
    let four_gpus = evidence(&s, nonce, 4);
    {
        let authorities = [s.ea.verifying_key()];
        let reference = measurements();
        cpu_time_report("verify_no_gpu_known_node", 3000, || {
            let e = Evidence::verify_document(black_box(&plain)).expect("decode and signature");
            assert!(reference
                .iter()
                .all(|(k, v)| e.claims.measurements.get(k) == Some(v)));
        });
        cpu_time_report("verify_no_gpu", 3000, || {
            let e = Evidence::verify_document(black_box(&plain)).expect("decode and signature");
            e.claims
                .enrollment
                .verify_signature(&authorities)
                .expect("enrollment");
            assert!(reference
                .iter()
                .all(|(k, v)| e.claims.measurements.get(k) == Some(v)));
        });
        // The floor: the Ed25519 operations alone (one verification, one signature).
        let sk = ed25519_dalek::SigningKey::from_bytes(&[8; 32]);
        let msg = [0u8; 1024];
        let sig = ed25519_dalek::Signer::sign(&sk, &msg);
        let vk = sk.verifying_key();
        cpu_time_report("ed25519_verify_strict_1KiB", 3000, || {
            vk.verify_strict(black_box(&msg), &sig).expect("verify");
        });
        cpu_time_report("ed25519_sign_1KiB", 3000, || {
            black_box(ed25519_dalek::Signer::sign(&sk, black_box(&msg)));
        });
        cpu_time_report("decode_only", 3000, || {
            black_box(Evidence::from_bytes(black_box(&plain)).expect("decode"));
        });
        cpu_time_report("appraise_no_gpu", 3000, || {
            let mut reg = registry(nonce);
            black_box(
                s.verifier
                    .appraise(&plain, &nonce, NOW, &mut reg)
                    .expect("appraise"),
            );
        });
        cpu_time_report("appraise_one_gpu_cold", 30, || {
            let mut reg = registry(nonce);
            let fresh = s.verifier.clone();
            black_box(
                fresh
                    .appraise(&with_gpu, &nonce, NOW, &mut reg)
                    .expect("appraise"),
            );
        });
        cpu_time_report("appraise_one_gpu", 100, || {
            let mut reg = registry(nonce);
            black_box(
                s.verifier
                    .appraise(&with_gpu, &nonce, NOW, &mut reg)
                    .expect("appraise"),
            );
        });
    }
    let reference = measurements();
    let authorities = [s.ea.verifying_key()];

    let mut g = c.benchmark_group("evidence");
    g.throughput(Throughput::Elements(1));
    g.bench_function("verify_no_gpu_known_node", |b| {
        b.iter(|| {
            let e = Evidence::verify_document(black_box(&plain)).expect("decode and signature");
            let ok = reference
                .iter()
                .all(|(k, v)| e.claims.measurements.get(k) == Some(v));
            assert!(ok);
        })
    });
    g.bench_function("verify_no_gpu", |b| {
        b.iter(|| {
            let e = Evidence::verify_document(black_box(&plain)).expect("decode and signature");
            e.claims
                .enrollment
                .verify_signature(&authorities)
                .expect("enrollment");
            e.claims.enrollment.check_validity(NOW).expect("validity");
            let ok = reference
                .iter()
                .all(|(k, v)| e.claims.measurements.get(k) == Some(v));
            assert!(ok);
        })
    });
    // Components of verify_no_gpu, to see where the time goes.
    g.bench_function("decode_only", |b| {
        b.iter(|| Evidence::from_bytes(black_box(&plain)).expect("decode"))
    });
    let decoded = Evidence::from_bytes(&plain).expect("decode");
    g.bench_function("node_signature_only", |b| {
        b.iter(|| black_box(&decoded).verify_signature().expect("signature"))
    });
    g.bench_function("appraise_no_gpu", |b| {
        b.iter_batched(
            || registry(nonce),
            |mut reg| {
                s.verifier
                    .appraise(black_box(&plain), &nonce, NOW, &mut reg)
                    .expect("appraise")
            },
            BatchSize::SmallInput,
        )
    });
    g.bench_function("appraise_one_gpu_cold", |b| {
        b.iter_batched(
            || (registry(nonce), s.verifier.clone()),
            |(mut reg, fresh)| fresh.appraise(black_box(&with_gpu), &nonce, NOW, &mut reg),
            BatchSize::SmallInput,
        )
    });
    g.bench_function("appraise_one_gpu", |b| {
        b.iter_batched(
            || registry(nonce),
            |mut reg| {
                let ar = s
                    .verifier
                    .appraise(black_box(&with_gpu), &nonce, NOW, &mut reg)
                    .expect("appraise");
                assert_eq!(ar.result.trust_vector.hardware, attest::ear::tier::WARNING); // no RIMs configured
                ar
            },
            BatchSize::SmallInput,
        )
    });
    // Wall-clock: the GPUs of one document are appraised in parallel (this machine: 2 cores).
    g.bench_function("appraise_four_gpus", |b| {
        b.iter_batched(
            || registry(nonce),
            |mut reg| {
                s.verifier
                    .appraise(black_box(&four_gpus), &nonce, NOW, &mut reg)
                    .expect("appraise")
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();

    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/conformance/nvtrust-samples/"
    );
    let report = hex::decode(
        std::fs::read_to_string(format!("{dir}hopperAttestationReport.txt"))
            .expect("sample")
            .trim(),
    )
    .expect("hex");
    let chain = CertChain::from_pem(
        &std::fs::read_to_string(format!("{dir}hopperCertChain.txt")).expect("chain"),
    )
    .expect("pem");
    let ders = chain.ders().to_vec();
    let root = vec![ders[ders.len() - 1].clone()];
    let mut sample_nonce = [0u8; 32];
    sample_nonce.copy_from_slice(&report[4..36]);
    let mut g = c.benchmark_group("nvidia");
    g.throughput(Throughput::Elements(1));
    g.bench_function("verify_sample_report", |b| {
        b.iter(|| {
            verify_report(black_box(&report), &ders, &root, NOW, &sample_nonce).expect("verify")
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
