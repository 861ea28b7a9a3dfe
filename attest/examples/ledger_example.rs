//! Prints the worked example of docs/ledger.md: a three-record log, its signed checkpoint,
//! the verifier key and a receipt, all made with a fixed, public TEST key so that the
//! output is reproducible byte for byte. `tests/ledger_doc.rs` checks that the document
//! still holds exactly this output and that it verifies.
//!
//! Run: `cargo run -p attest --example ledger_example`.

use attest::checkpoint::{sign_checkpoint, Checkpoint};
use attest::log::{leaf_hash, Log};
use attest::note::NoteSigner;
use attest::receipt::Receipt;
use sha2::{Digest, Sha256};

/// The log's origin and key name in the example.
pub(crate) const ORIGIN: &str = "node-1.example/usage";

/// The example's leaves: compact JSON records, abbreviated (the real schema is hostd's
/// `record.rs`; the log treats leaves as opaque bytes).
pub(crate) const RECORDS: [&str; 3] = [
    r#"{"kind":"usage","id":0,"tenant":"acme","gpu_ms":3600000,"amount_paise":25000}"#,
    r#"{"kind":"usage","id":1,"tenant":"acme","gpu_ms":1800000,"amount_paise":12500}"#,
    r#"{"kind":"usage","id":2,"tenant":"zenith","gpu_ms":600000,"amount_paise":4167}"#,
];

/// Each code block of the example, keyed by the info string it has in docs/ledger.md.
pub(crate) fn blocks() -> Vec<(&'static str, String)> {
    // A PUBLIC test key: its seed is derived from a published string. Never use it for
    // anything but this example.
    let seed: [u8; 32] = Sha256::digest(b"sovereign-host docs/ledger.md example key").into();
    let signer = match NoteSigner::from_seed(ORIGIN, &seed) {
        Ok(s) => s,
        Err(e) => return vec![("error", e.to_string())],
    };
    let log = match Log::from_leaves(&RECORDS) {
        Ok(l) => l,
        Err(e) => return vec![("error", e.to_string())],
    };
    let checkpoint = Checkpoint {
        origin: ORIGIN.to_owned(),
        size: log.size(),
        root: log.root(),
        extensions: Vec::new(),
    };
    let note = match sign_checkpoint(&checkpoint, &signer) {
        Ok(n) => n,
        Err(e) => return vec![("error", e.to_string())],
    };
    let proof = match log.inclusion_proof(1, log.size()) {
        Ok(p) => p,
        Err(e) => return vec![("error", e.to_string())],
    };
    let receipt = Receipt {
        index: 1,
        extra: None,
        proof,
        checkpoint_note: note.clone(),
    };

    let mut records = String::new();
    for r in RECORDS {
        records.push_str(r);
        records.push('\n');
    }
    let mut hashes = String::new();
    for (i, r) in RECORDS.iter().enumerate() {
        hashes.push_str(&format!(
            "leaf {i}  {}\n",
            hex::encode(leaf_hash(r.as_bytes()))
        ));
    }
    hashes.push_str(&format!("root    {}\n", hex::encode(log.root())));
    vec![
        ("records", records),
        ("hashes", hashes),
        ("skey", format!("{}\n", *signer.to_skey())),
        ("vkey", format!("{}\n", signer.verifier())),
        ("checkpoint", note),
        ("receipt", receipt.format()),
    ]
}

#[allow(dead_code)] // the test includes this file for `blocks` only
fn main() {
    for (name, text) in blocks() {
        println!("```{name}\n{text}```\n");
    }
}
