//! Keeps the worked example in docs/audit.md honest: the blocks under each
//! `<!-- example: NAME -->` marker must be exactly what the code produces for the example
//! ledger, and the example export must verify with the real `sovctl`.

mod common;

use attest::note::NoteSigner;
use auditor::money::amount_paise;
use auditor::record::{Record, UsageRecord, RECORD_VERSION};
use hostd::audit;
use hostd::ledger::Ledger;
use std::fs;
use std::process::Command;

const DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/audit.md");

/// The example's key: a fixed seed so the document can show real signatures. Never use a
/// key like this for anything else.
fn example_signer() -> NoteSigner {
    NoteSigner::from_seed("node-1.example/usage", &[0x11; 32]).unwrap()
}

/// Record `id` of `lease`, the hour from 10:00 + `id`; each lease on its own GPU (a leased
/// GPU is exclusive: the audit refuses one billed to two leases at once).
fn example_record(id: u64, tenant: &str, lease: &str, prev: Option<u64>) -> Vec<u8> {
    let gpu_ms = 3_600_000;
    let rate = 25_000;
    Record::Usage(UsageRecord {
        v: RECORD_VERSION,
        id,
        node: "node-1.example".into(),
        tenant: tenant.into(),
        lease: lease.into(),
        gpu_uuid: match lease {
            "lease-7" => "GPU-5a3e2f10-8c41-4b7e-9d2a-1f0c3b4d5e6f".into(),
            _ => "GPU-5a3e2f10-8c41-4b7e-9d2a-1f0c3b4d5e70".into(),
        },
        gpu_model: "NVIDIA H100 80GB HBM3".into(),
        start: format!("2026-03-01T{:02}:00:00.000Z", 10 + id),
        end: format!("2026-03-01T{:02}:00:00.000Z", 11 + id),
        gpu_ms,
        gpu_seconds: 3600.0,
        energy_joules: 2_520_000.0,
        peak_memory_bytes: 68_719_476_736,
        mean_utilization_pct: 91.25,
        rate_paise_per_hour: rate,
        amount_paise: amount_paise(gpu_ms, rate),
        policy_digest: "sha256:3b1f0c".into(),
        prev,
        attestation: None,
    })
    .to_leaf()
    .unwrap()
}

/// The text of the fenced block that follows `<!-- example: name -->` in the document.
fn doc_block<'a>(doc: &'a str, name: &str) -> &'a str {
    let marker = format!("<!-- example: {name} -->");
    let at = doc
        .find(&marker)
        .unwrap_or_else(|| panic!("docs/audit.md has no {marker}"));
    let rest = &doc[at + marker.len()..];
    let open = rest
        .find("```text\n")
        .expect("a ```text block after the marker")
        + 8;
    let len = rest[open..].find("```").expect("a closing ```");
    &rest[open..open + len]
}

#[test]
fn worked_example_matches_the_code_and_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let db = sled::Config::new()
        .path(dir.path().join("db"))
        .open()
        .unwrap();
    let mut ledger = Ledger::open(&db, example_signer()).unwrap();
    ledger
        .append(&[
            example_record(0, "acme", "lease-7", None),
            example_record(1, "beta", "lease-9", None),
        ])
        .unwrap();
    let checkpoint2 = ledger.checkpoint_note().to_owned();
    ledger
        .append(&[example_record(2, "acme", "lease-7", Some(0))])
        .unwrap();
    let export = dir.path().join("export");
    audit::export(&ledger, &export, &[1]).unwrap();
    let proof = ledger.consistency_proof(2).unwrap();
    let prev = dir.path().join("checkpoint.2");
    fs::write(&prev, &checkpoint2).unwrap();
    let proof_file = dir.path().join("2-3.proof");
    fs::write(&proof_file, &proof).unwrap();

    let verify = Command::new(common::sovctl_bin())
        .args(["audit", "verify", "--quiet", "--vkey"])
        .arg(export.join("log.vkey"))
        .arg(&export)
        .arg("--previous")
        .arg(&prev)
        .arg("--consistency")
        .arg(&proof_file)
        .output()
        .unwrap();
    assert!(verify.status.success(), "{verify:?}");
    let summary = String::from_utf8(verify.stdout).unwrap();

    let read = |name: &str| fs::read_to_string(export.join(name)).unwrap();
    let b64 = |h: &[u8]| {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(h)
    };
    let lines = read("records.jsonl");
    let leaves: Vec<[u8; 32]> = lines
        .lines()
        .map(|l| attest::log::leaf_hash(l.as_bytes()))
        .collect();
    let n01 = attest::log::node_hash(&leaves[0], &leaves[1]);
    let root = attest::log::node_hash(&n01, &leaves[2]);
    let hashes = format!(
        "leaf 0 = SHA-256(0x00 || line 0)               = {}\n\
         leaf 1 = SHA-256(0x00 || line 1)               = {}\n\
         leaf 2 = SHA-256(0x00 || line 2)               = {}\n\
         root 2 = SHA-256(0x01 || leaf 0 || leaf 1)     = {}\n\
         root 3 = SHA-256(0x01 || root 2 || leaf 2)     = {}\n",
        b64(&leaves[0]),
        b64(&leaves[1]),
        b64(&leaves[2]),
        b64(&n01),
        b64(&root),
    );
    let produced = [
        ("records.jsonl", lines.clone()),
        ("hashes", hashes),
        ("checkpoint", read("checkpoint")),
        ("log.vkey", read("log.vkey")),
        ("receipts/1.tlog-proof", read("receipts/1.tlog-proof")),
        ("previous checkpoint", checkpoint2),
        ("consistency proof", proof),
        ("verify output", summary),
    ];
    let doc = fs::read_to_string(DOC).unwrap();
    let mut stale = Vec::new();
    for (name, text) in &produced {
        if doc_block(&doc, name) != text {
            stale.push(format!("<!-- example: {name} -->\n```text\n{text}```\n"));
        }
    }
    assert!(
        stale.is_empty(),
        "docs/audit.md is out of date; the code produces:\n\n{}",
        stale.join("\n")
    );
}
