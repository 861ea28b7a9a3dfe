//! Checkpoints and receipts: round trips, verification, and tampering.

use attest::checkpoint::{open_checkpoint, sign_checkpoint, Checkpoint, CheckpointError};
use attest::log::{Log, ProofError};
use attest::note::{NoteError, NoteSigner};
use attest::receipt::{self, Receipt, ReceiptError};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;

const ORIGIN: &str = "node-1.example/usage";

fn signer() -> NoteSigner {
    NoteSigner::from_seed(ORIGIN, &[5; 32]).expect("signer")
}

fn records(n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| format!("{{\"id\":{i}}}").into_bytes())
        .collect()
}

fn setup(n: usize) -> (Log<attest::log::MemStore>, Checkpoint, String) {
    let log = Log::from_leaves(&records(n)).expect("log");
    let cp = Checkpoint {
        origin: ORIGIN.to_owned(),
        size: log.size(),
        root: log.root(),
        extensions: Vec::new(),
    };
    let note = sign_checkpoint(&cp, &signer()).expect("sign");
    (log, cp, note)
}

#[test]
fn checkpoint_round_trip() {
    let (_, cp, note) = setup(11);
    assert_eq!(
        open_checkpoint(&note, &signer().verifier()).expect("open"),
        cp
    );
    let body = cp.to_body().expect("body");
    assert_eq!(body, format!("{ORIGIN}\n11\n{}\n", B64.encode(cp.root)));
    assert_eq!(Checkpoint::parse(&body).expect("parse"), cp);
    let with_ext = Checkpoint {
        extensions: vec!["ext one".into(), "two".into()],
        ..cp.clone()
    };
    let body = with_ext.to_body().expect("body");
    assert!(body.ends_with("\next one\ntwo\n"));
    assert_eq!(Checkpoint::parse(&body).expect("parse"), with_ext);
    let empty = Checkpoint {
        size: 0,
        root: attest::log::empty_root(),
        ..cp
    };
    assert_eq!(
        Checkpoint::parse(&empty.to_body().expect("body")).expect("parse"),
        empty
    );
}

#[test]
fn checkpoint_grammar_is_strict() {
    let root = B64.encode([1u8; 32]);
    let bad = [
        (format!("o\n1\n{root}"), "no final newline"),
        ("o\n1\n".to_owned(), "two lines"),
        (format!("\n1\n{root}\n"), "empty origin"),
        (format!("o\n01\n{root}\n"), "leading zero"),
        (format!("o\n+1\n{root}\n"), "sign"),
        (format!("o\n 1\n{root}\n"), "space"),
        (format!("o\n18446744073709551616\n{root}\n"), "overflow"),
        (format!("o\n1\n{}\n", B64.encode([1u8; 31])), "short root"),
        (format!("o\n1\n{}\n", &root[..43]), "unpadded root"),
        (format!("o\n1\n{root}\n\n"), "empty extension"),
        (format!("o\n1\n{root}\next\n\nmore\n"), "empty line inside"),
        (format!("o\tx\n1\n{root}\n"), "control character"),
    ];
    for (body, why) in bad {
        assert!(
            Checkpoint::parse(&body).is_err(),
            "{why}: {body:?} accepted"
        );
    }
    assert_eq!(
        Checkpoint::parse(&format!("o\n0\n{root}\n"))
            .expect("zero")
            .size,
        0
    );
    let cp = Checkpoint {
        origin: "a\nb".into(),
        size: 1,
        root: [0; 32],
        extensions: vec![],
    };
    assert_eq!(cp.to_body(), Err(CheckpointError::InvalidOrigin));
    let cp = Checkpoint {
        origin: "o".into(),
        extensions: vec!["".into()],
        ..cp
    };
    assert_eq!(cp.to_body(), Err(CheckpointError::InvalidExtension(0)));
}

#[test]
fn checkpoint_key_must_be_the_origin() {
    let (_, cp, note) = setup(3);
    let other = NoteSigner::from_seed("node-2.example/usage", &[5; 32]).expect("signer");
    assert!(matches!(
        sign_checkpoint(&cp, &other),
        Err(CheckpointError::OriginMismatch { .. })
    ));
    // Signed by another log's key: that key does not know this note.
    assert!(matches!(
        open_checkpoint(&note, &other.verifier()),
        Err(CheckpointError::Note(NoteError::NoKnownSignature { .. }))
    ));
    // A note signed by the right key but claiming another origin is refused.
    let foreign = Checkpoint {
        origin: "node-2.example/usage".into(),
        ..cp
    };
    let text = foreign.to_body().expect("body");
    let note = attest::note::sign(&text, &signer()).expect("sign");
    assert!(matches!(
        open_checkpoint(&note, &signer().verifier()),
        Err(CheckpointError::OriginMismatch { .. })
    ));
}

#[test]
fn receipts_round_trip_and_verify_for_every_leaf() {
    let n = 13;
    let (log, cp, note) = setup(n);
    let v = signer().verifier();
    let recs = records(n);
    for index in 0..n as u64 {
        let r = Receipt {
            index,
            extra: (index % 2 == 0).then(|| vec![index as u8; 3]),
            proof: log.inclusion_proof(index, cp.size).expect("proof"),
            checkpoint_note: note.clone(),
        };
        let text = r.format();
        assert!(text.starts_with("c2sp.org/tlog-proof@v1\n"));
        assert!(text.ends_with(&format!("\n\n{note}")));
        let parsed = Receipt::parse(&text).expect("parse");
        assert_eq!(parsed, r);
        assert_eq!(
            receipt::verify(&parsed, &recs[index as usize], &v).expect("verify"),
            cp
        );
        // The record must be the one at that index.
        let other = &recs[(index as usize + 1) % n];
        assert!(matches!(
            receipt::verify(&parsed, other, &v),
            Err(ReceiptError::Proof(ProofError::RootMismatch))
        ));
    }
}

#[test]
fn tampered_receipts_are_rejected() {
    let (log, cp, note) = setup(9);
    let v = signer().verifier();
    let rec = &records(9)[5];
    let good = Receipt {
        index: 5,
        extra: None,
        proof: log.inclusion_proof(5, cp.size).expect("proof"),
        checkpoint_note: note.clone(),
    };
    receipt::verify(&good, rec, &v).expect("good receipt");

    for index in [4, 6, 9, 5 ^ (1 << 40)] {
        let r = Receipt {
            index,
            ..good.clone()
        };
        assert!(receipt::verify(&r, rec, &v).is_err(), "index {index}");
    }
    for i in 0..good.proof.len() {
        let mut r = good.clone();
        r.proof[i][17] ^= 0x10;
        assert!(matches!(
            receipt::verify(&r, rec, &v),
            Err(ReceiptError::Proof(ProofError::RootMismatch))
        ));
    }
    let mut r = good.clone();
    r.proof.pop();
    assert!(matches!(
        receipt::verify(&r, rec, &v),
        Err(ReceiptError::Proof(ProofError::WrongProofLength { .. }))
    ));
    // Checkpoint claiming another size or root: its signature breaks.
    let forged = note.replacen("\n9\n", "\n10\n", 1);
    let r = Receipt {
        checkpoint_note: forged,
        ..good.clone()
    };
    assert!(matches!(
        receipt::verify(&r, rec, &v),
        Err(ReceiptError::Checkpoint(CheckpointError::Note(
            NoteError::BadSignature { .. }
        )))
    ));
    // A genuine checkpoint of a later tree with the old proof: wrong path.
    let mut log2 = Log::from_leaves(&records(9)).expect("log");
    log2.append(&[b"x".to_vec(), b"y".to_vec(), b"z".to_vec()])
        .expect("append");
    let cp2 = Checkpoint {
        size: log2.size(),
        root: log2.root(),
        ..cp
    };
    let r = Receipt {
        checkpoint_note: sign_checkpoint(&cp2, &signer()).expect("sign"),
        ..good.clone()
    };
    assert!(receipt::verify(&r, rec, &v).is_err());
    // Textual tampering caught by the parser.
    let text = good.format();
    for (bad, why) in [
        (
            text.replacen("c2sp.org/tlog-proof@v1", "c2sp.org/tlog-proof@v2", 1),
            "header",
        ),
        (text.replacen("index 5", "index 05", 1), "leading zero"),
        (text.replacen("index 5", "index  5", 1), "double space"),
        (text.replacen("index 5", "index -5", 1), "sign"),
        (text.replacen("index 5\n", "", 1), "no index"),
        (text.replacen("=\n", "\n", 1), "unpadded hash"),
        (text.replacen("\n\n", "\n", 1), "no blank line"),
        (
            text.trim_end().to_owned(),
            "checkpoint without final newline",
        ),
        (
            text.split("\n\n").next().expect("head").to_owned() + "\n\n",
            "no checkpoint",
        ),
    ] {
        assert!(Receipt::parse(&bad).is_err(), "{why}");
    }
    let too_long = text.replacen(
        "index 5\n",
        &format!(
            "index 5\n{}",
            format!("{}\n", B64.encode([0u8; 32])).repeat(65)
        ),
        1,
    );
    assert_eq!(Receipt::parse(&too_long), Err(ReceiptError::ProofTooLong));
}
