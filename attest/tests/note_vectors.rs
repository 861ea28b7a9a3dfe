//! Signed notes against the C2SP spec example, golang.org/x/mod/sumdb/note's test notes and
//! a real sum.golang.org checkpoint, plus tampering.

use attest::checkpoint::{open_checkpoint, Checkpoint, CheckpointError};
use attest::note::{self, NoteError, NoteSigner, NoteVerifier, MAX_SIGNATURES};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/conformance/");

fn read(name: &str) -> String {
    std::fs::read_to_string(format!("{DIR}{name}")).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn verifiers(name: &str) -> Vec<NoteVerifier> {
    read(name)
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| NoteVerifier::parse(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

/// Every note in the signed-note directory, with the verifier keys that must open it.
const NOTES: [(&str, &str); 3] = [
    (
        "signed-note/c2sp-signed-note-example.note",
        "signed-note/c2sp-signed-note-example.vkey",
    ),
    (
        "signed-note/golang-mod-peterneumann-enochroot.note",
        "signed-note/golang-mod-peterneumann-enochroot.vkeys",
    ),
    (
        "signed-note/sumdb-checkpoint-6476701.note",
        "signed-note/sumdb.vkey",
    ),
];

#[test]
fn every_vector_note_verifies() {
    // Make sure no note in the directory is left out of NOTES.
    let mut on_disk: Vec<String> = std::fs::read_dir(format!("{DIR}signed-note"))
        .expect("signed-note dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".note"))
        .map(|n| format!("signed-note/{n}"))
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = NOTES.iter().map(|(n, _)| (*n).to_owned()).collect();
    listed.sort();
    assert_eq!(on_disk, listed);

    for (note_file, vkey_file) in NOTES {
        let text = read(note_file);
        let vs = verifiers(vkey_file);
        let opened = note::open(&text, &vs).unwrap_or_else(|e| panic!("{note_file}: {e}"));
        assert_eq!(opened.verified.len(), vs.len(), "{note_file}");
        assert!(opened.unverified.is_empty());
        assert!(text.starts_with(&opened.text));
        // Each key alone suffices; the other's signature is then merely unverified.
        for v in &vs {
            let one = note::open(&text, std::slice::from_ref(v)).expect("single key opens");
            assert_eq!(one.verified.len(), 1);
            assert_eq!(one.unverified.len(), vs.len() - 1);
        }
        // Verifier keys print back exactly as given.
        let given: Vec<String> = read(vkey_file).lines().map(str::to_owned).collect();
        let printed: Vec<String> = vs.iter().map(NoteVerifier::to_vkey).collect();
        assert_eq!(printed, given);
    }
}

#[test]
fn spec_example_key_id() {
    let v = &verifiers("signed-note/c2sp-signed-note-example.vkey")[0];
    assert_eq!(v.name(), "example.com/foo");
    assert_eq!(v.key_id(), 0x530d903a);
    assert_eq!(note::key_id(v.name(), v.public_key()), 0x530d903a);
}

#[test]
fn skey_imports_and_reproduces_the_go_signature() {
    let skey = read("signed-note/golang-mod-peterneumann.skey");
    let signer = NoteSigner::from_skey(skey.trim_end()).expect("skey");
    assert_eq!(signer.name(), "PeterNeumann");
    assert_eq!(signer.key_id(), 0xc74f20a3);
    assert_eq!(*signer.to_skey(), skey.trim_end());
    let vkeys = verifiers("signed-note/golang-mod-peterneumann-enochroot.vkeys");
    assert_eq!(signer.verifier(), vkeys[0]);

    // Ed25519 is deterministic: signing the same text must give the very line Go wrote.
    let note_text = read("signed-note/golang-mod-peterneumann-enochroot.note");
    let opened = note::open(&note_text, &vkeys).expect("opens");
    let ours = note::sign(&opened.text, &signer).expect("sign");
    let their_line = note_text
        .lines()
        .find(|l| l.contains("PeterNeumann"))
        .expect("PeterNeumann line");
    assert_eq!(ours, format!("{}\n{their_line}\n", opened.text));
}

#[test]
fn checkpoints_in_the_vectors_parse() {
    // Real sum.golang.org tree head: origin with spaces, key name different from origin.
    let opened = note::open(
        read("signed-note/sumdb-checkpoint-6476701.note"),
        &verifiers("signed-note/sumdb.vkey"),
    )
    .expect("sumdb note");
    let cp = Checkpoint::parse(&opened.text).expect("sumdb checkpoint");
    assert_eq!(cp.origin, "go.sum database tree");
    assert_eq!(cp.size, 6476701);
    assert_eq!(
        B64.encode(cp.root),
        "mb8QLQIs0Z0yP5Cstq6guj87oXWeC9gEM8oVikmm9Wk="
    );
    assert_eq!(cp.to_body().expect("body"), opened.text);
    // Our open_checkpoint insists that the key is the origin's: this one is not.
    let err = open_checkpoint(
        read("signed-note/sumdb-checkpoint-6476701.note"),
        &verifiers("signed-note/sumdb.vkey")[0],
    )
    .expect_err("origin differs from key name");
    assert!(matches!(err, CheckpointError::OriginMismatch { .. }));

    // C2SP example (illustrative signatures, no published keys): syntax only.
    let parsed = note::parse(read("c2sp-examples/tlog-cosignature-example.checkpoint"))
        .expect("example note parses");
    assert_eq!(parsed.signatures.len(), 2);
    assert_eq!(parsed.signatures[0].name, "example.com/behind-the-sofa");
    // The witness cosignature is type 0x04: 8-byte timestamp + 64-byte signature.
    assert_eq!(parsed.signatures[1].signature.len(), 72);
    let cp = Checkpoint::parse(&parsed.text).expect("example checkpoint");
    assert_eq!(cp.origin, "example.com/behind-the-sofa");
    assert_eq!(cp.size, 20852163);
    assert_eq!(
        B64.encode(cp.root),
        "CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I="
    );
    assert!(cp.extensions.is_empty());
    // With an unrelated key, nothing verifies.
    let stranger = NoteSigner::from_seed("example.com/behind-the-sofa", &[7; 32]).expect("key");
    assert!(matches!(
        note::open(
            read("c2sp-examples/tlog-cosignature-example.checkpoint"),
            &[stranger.verifier()]
        ),
        Err(NoteError::NoKnownSignature { .. })
    ));
}

fn signer() -> NoteSigner {
    NoteSigner::from_seed("example.com/test", &[42; 32]).expect("signer")
}

#[test]
fn tampering_is_rejected_with_the_right_error() {
    let s = signer();
    let v = s.verifier();
    let good = note::sign("hello\nworld\n", &s).expect("sign");
    assert_eq!(
        note::open(&good, std::slice::from_ref(&v))
            .expect("opens")
            .text,
        "hello\nworld\n"
    );

    // Bit flip in the text.
    let flipped = good.replacen("hello", "hellp", 1);
    assert!(matches!(
        note::open(&flipped, std::slice::from_ref(&v)),
        Err(NoteError::BadSignature { .. })
    ));

    // Bit flip in the signature bytes (re-encoded, so the base64 stays canonical).
    let (text, line) = good
        .rsplit_once("\n\n")
        .map(|(t, l)| (t, l.trim_end()))
        .expect("split");
    let (prefix, b64) = line.rsplit_once(' ').expect("sig");
    let mut sig = B64.decode(b64).expect("b64");
    for bit in [32usize, 100, 8 * 67 + 7] {
        let mut bad = sig.clone();
        bad[bit / 8] ^= 1 << (bit % 8);
        let tampered = format!("{text}\n\n{prefix} {}\n", B64.encode(&bad));
        assert!(matches!(
            note::open(&tampered, std::slice::from_ref(&v)),
            Err(NoteError::BadSignature { .. })
        ));
    }
    // A flipped key ID makes it another key's signature: unknown, so nothing verifies.
    sig[0] ^= 1;
    let other_id = format!("{text}\n\n{prefix} {}\n", B64.encode(&sig));
    assert!(matches!(
        note::open(&other_id, std::slice::from_ref(&v)),
        Err(NoteError::NoKnownSignature { .. })
    ));

    // Wrong key name: same key under another name is another key.
    let renamed = good.replace("— example.com/test ", "— example.com/tesT ");
    assert!(matches!(
        note::open(&renamed, std::slice::from_ref(&v)),
        Err(NoteError::NoKnownSignature { .. })
    ));
    let other_name = NoteSigner::from_seed("example.com/other", &[42; 32]).expect("signer");
    assert!(matches!(
        note::open(&good, &[other_name.verifier()]),
        Err(NoteError::NoKnownSignature { .. })
    ));

    // Missing trailing newline.
    assert_eq!(
        note::open(good.trim_end_matches('\n'), std::slice::from_ref(&v)),
        Err(NoteError::UnterminatedSignatureBlock)
    );
    assert_eq!(
        note::sign("no newline", &s),
        Err(NoteError::TextMissingNewline)
    );
    assert_eq!(
        note::sign("\nfirst line empty\n", &s),
        Err(NoteError::TextEmptyFirstLine)
    );
    assert_eq!(note::sign("", &s), Err(NoteError::TextEmptyFirstLine));
    assert!(matches!(
        note::sign("tab\there\n", &s),
        Err(NoteError::ControlCharacter { offset: 3, code: 9 })
    ));
    // No blank line at all.
    assert_eq!(
        note::open("hello\n— example.com/test AAAA\n", std::slice::from_ref(&v)),
        Err(NoteError::MissingSignatureBlock)
    );
    // Invalid UTF-8 and control characters anywhere.
    let mut bytes = good.clone().into_bytes();
    bytes[1] = 0xff;
    assert_eq!(
        note::open(&bytes, std::slice::from_ref(&v)),
        Err(NoteError::InvalidUtf8)
    );
    let cr = good.replacen("hello", "hel\rlo", 1);
    assert!(matches!(
        note::open(&cr, std::slice::from_ref(&v)),
        Err(NoteError::ControlCharacter { code: 13, .. })
    ));
    // Malformed signature lines.
    for bad_line in [
        "- example.com/test AAAAAAA=",
        "— example.com/test",
        "— example.com/test !!!!",
        "— example.com/test AAAA",
        "—  AAAAAAA=",
        "— a+b AAAAAAA=",
    ] {
        let n = format!("{good}{bad_line}\n");
        assert!(
            matches!(
                note::open(&n, std::slice::from_ref(&v)),
                Err(NoteError::MalformedSignature { line: 2, .. })
            ),
            "{bad_line}"
        );
    }
}

#[test]
fn unknown_signatures_are_ignored_and_duplicates_collapsed() {
    let s = signer();
    let v = s.verifier();
    let good = note::sign("text\n", &s).expect("sign");
    let witness = NoteSigner::from_seed("witness.example", &[9; 32]).expect("signer");
    let witness_line = note::sign("text\n", &witness).expect("sign");
    let witness_line = witness_line.rsplit_once("\n\n").expect("split").1;
    let both = format!("{good}{witness_line}{witness_line}");
    let opened = note::open(&both, std::slice::from_ref(&v)).expect("opens");
    assert_eq!(opened.verified.len(), 1);
    assert_eq!(opened.unverified.len(), 1);
    assert_eq!(opened.unverified[0].name, "witness.example");
    let opened = note::open(&both, &[v.clone(), witness.verifier()]).expect("opens");
    assert_eq!(opened.verified.len(), 2);

    // A duplicate of a known key's line that is bad still rejects the note.
    let own_line = good.rsplit_once("\n\n").expect("split").1;
    let mut sig = B64
        .decode(own_line.trim_end().rsplit_once(' ').expect("sig").1)
        .expect("b64");
    sig[10] ^= 1;
    let bad_dup = format!("{good}— example.com/test {}\n", B64.encode(&sig));
    assert!(matches!(
        note::open(&bad_dup, std::slice::from_ref(&v)),
        Err(NoteError::BadSignature { .. })
    ));

    // Signature cap.
    let many = format!("{good}{}", witness_line.repeat(MAX_SIGNATURES));
    assert_eq!(
        note::open(&many, std::slice::from_ref(&v)),
        Err(NoteError::TooManySignatures)
    );
    let at_cap = format!("{good}{}", witness_line.repeat(MAX_SIGNATURES - 1));
    assert!(note::open(&at_cap, &[v]).is_ok());
}

/// A signer may write two different signatures that both verify (Ed25519 does not require
/// deterministic nonces): the key is still one verified key, listed once.
#[test]
fn one_key_with_two_valid_signatures_is_listed_once() {
    use ed25519_dalek::hazmat::{raw_sign, ExpandedSecretKey};
    use ed25519_dalek::SigningKey;
    use sha2::{Digest, Sha512};
    let seed = [42u8; 32];
    let s = signer();
    let v = s.verifier();
    let text = "text\n";
    let good = note::sign(text, &s).expect("sign");
    let own_line = good.rsplit_once("\n\n").expect("split").1;
    let own = B64
        .decode(own_line.trim_end().rsplit_once(' ').expect("sig").1)
        .expect("b64");
    // The same key, another nonce: a different, equally valid signature.
    let mut esk = ExpandedSecretKey::from_bytes(&Sha512::digest(seed).into());
    esk.hash_prefix = [1; 32];
    let vk = SigningKey::from_bytes(&seed).verifying_key();
    let other = raw_sign::<Sha512>(&esk, text.as_bytes(), &vk).to_bytes();
    assert_ne!(other[..], own[4..], "a second, different signature");
    let mut bytes = own[..4].to_vec();
    bytes.extend_from_slice(&other);
    let second = format!("— example.com/test {}\n", B64.encode(&bytes));
    let alone = format!("{text}\n{second}");
    assert!(
        note::open(&alone, std::slice::from_ref(&v)).is_ok(),
        "it verifies"
    );
    let opened = note::open(format!("{good}{second}"), std::slice::from_ref(&v)).expect("opens");
    assert_eq!(opened.verified.len(), 1, "{:?}", opened.verified);
    assert_eq!(
        opened.verified[0].signature,
        own[4..],
        "the first line is kept"
    );

    // Unknown keys are listed once per key too.
    let witness = NoteSigner::from_seed("witness.example", &[9; 32]).expect("signer");
    let w_line = note::sign(text, &witness).expect("sign");
    let w_line = w_line.rsplit_once("\n\n").expect("split").1;
    let mut w_other = B64
        .decode(w_line.trim_end().rsplit_once(' ').expect("sig").1)
        .expect("b64");
    w_other[10] ^= 1; // unchecked: only its key counts
    let w_second = format!("— witness.example {}\n", B64.encode(&w_other));
    let opened = note::open(format!("{good}{w_line}{w_second}"), &[v]).expect("opens");
    assert_eq!(opened.unverified.len(), 1, "{:?}", opened.unverified);
}

#[test]
fn keys_round_trip_and_bad_keys_are_rejected() {
    let s = NoteSigner::generate("node-1.example/usage").expect("generate");
    let v = s.verifier();
    assert_eq!(NoteVerifier::parse(&v.to_vkey()).expect("vkey"), v);
    let s2 = NoteSigner::from_skey(&s.to_skey()).expect("skey");
    assert_eq!(s2.verifier(), v);
    assert!(!format!("{s:?}").contains(&*s.to_skey()));

    let vkey = v.to_vkey();
    let (name, rest) = vkey.split_once('+').expect("+");
    let (id, key) = rest.split_once('+').expect("+");
    let wrong_id = format!(
        "{name}+{:08x}+{key}",
        u32::from_str_radix(id, 16).expect("hex") ^ 1
    );
    assert!(matches!(
        NoteVerifier::parse(&wrong_id),
        Err(NoteError::KeyIdMismatch { .. })
    ));
    let wrong_name = format!("node-2.example/usage+{id}+{key}");
    assert!(matches!(
        NoteVerifier::parse(&wrong_name),
        Err(NoteError::KeyIdMismatch { .. })
    ));
    assert!(matches!(
        NoteVerifier::parse(&format!("bad name+{id}+{key}")),
        Err(NoteError::InvalidKeyName(_))
    ));
    assert!(matches!(
        NoteVerifier::parse(&format!("{name}+{id}")),
        Err(NoteError::MalformedVerifierKey(_))
    ));
    assert!(matches!(
        NoteVerifier::parse(&format!("{name}+{}+{key}", &id[..7])),
        Err(NoteError::MalformedVerifierKey(_))
    ));
    let mut raw = B64.decode(key).expect("b64");
    raw[0] = 0x02;
    assert_eq!(
        NoteVerifier::parse(&format!("{name}+{id}+{}", B64.encode(&raw))),
        Err(NoteError::UnsupportedAlgorithm(2))
    );
    assert!(matches!(
        NoteSigner::from_skey(&vkey),
        Err(NoteError::MalformedSignerKey(_))
    ));
    assert!(matches!(
        NoteSigner::from_seed("has space", &[1; 32]),
        Err(NoteError::InvalidKeyName(_))
    ));
    assert!(matches!(
        NoteSigner::from_seed("", &[1; 32]),
        Err(NoteError::InvalidKeyName(_))
    ));
    assert!(matches!(
        NoteSigner::from_seed("a+b", &[1; 32]),
        Err(NoteError::InvalidKeyName(_))
    ));
    assert!(matches!(
        NoteSigner::from_seed("nbsp\u{a0}x", &[1; 32]),
        Err(NoteError::InvalidKeyName(_))
    ));
}
