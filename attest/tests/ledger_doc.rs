//! docs/ledger.md's worked example must be exactly what the code produces today, and must
//! verify. If the formats change, regenerate it with
//! `cargo run -p attest --example ledger_example` and update the document.

#[allow(dead_code)]
#[path = "../examples/ledger_example.rs"]
mod ledger_example;

use attest::checkpoint::open_checkpoint;
use attest::log::{leaf_hash, RootBuilder};
use attest::note::{NoteSigner, NoteVerifier};
use attest::receipt::{self, Receipt};

const DOC: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/ledger.md"));

/// The body of the fenced block whose info string is exactly `name` (must be unique).
fn block(name: &str) -> String {
    let fence = format!("\n```{name}\n");
    let mut found = DOC.match_indices(&fence);
    let (start, _) = found.next().unwrap_or_else(|| panic!("no ```{name} block"));
    assert!(found.next().is_none(), "two ```{name} blocks");
    let body = &DOC[start + fence.len()..];
    let end = body
        .find("```")
        .unwrap_or_else(|| panic!("unterminated ```{name}"));
    body[..end].to_owned()
}

#[test]
fn doc_example_is_what_the_code_produces() {
    let blocks = ledger_example::blocks();
    assert_eq!(blocks.len(), 6, "{blocks:?}");
    for (name, text) in blocks {
        assert_eq!(block(name), text, "docs/ledger.md ```{name} block is stale");
    }
}

#[test]
fn doc_example_verifies() {
    let records = block("records");
    let records: Vec<&str> = records.lines().collect();
    assert_eq!(records.len(), 3);

    let vkey = block("vkey");
    let verifier = NoteVerifier::parse(vkey.trim_end()).expect("vkey parses");
    assert_eq!(verifier.name(), ledger_example::ORIGIN);
    let signer = NoteSigner::from_skey(block("skey").trim_end()).expect("skey parses");
    assert_eq!(signer.verifier(), verifier);

    let checkpoint = open_checkpoint(block("checkpoint"), &verifier).expect("checkpoint verifies");
    assert_eq!(checkpoint.size, 3);
    let mut rb = RootBuilder::new();
    for r in &records {
        rb.push(r.as_bytes()).expect("push");
    }
    assert_eq!(rb.root(), checkpoint.root);
    let hashes = block("hashes");
    assert!(hashes.contains(&hex::encode(leaf_hash(records[1].as_bytes()))));
    assert!(hashes.contains(&format!("root    {}", hex::encode(checkpoint.root))));

    let r = Receipt::parse(&block("receipt")).expect("receipt parses");
    assert_eq!(r.index, 1);
    assert_eq!(r.checkpoint_note, block("checkpoint"));
    assert_eq!(
        receipt::verify(&r, records[1].as_bytes(), &verifier).expect("receipt verifies"),
        checkpoint
    );
    assert!(receipt::verify(&r, records[0].as_bytes(), &verifier).is_err());
}
