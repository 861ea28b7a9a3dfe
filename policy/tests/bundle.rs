//! Signed bundles: key formats and note syntax against the C2SP / Go sumdb vectors, and the
//! node-side refusals (unsigned, wrongly signed, tampered, rollback).

use policy::bundle::{parse_note, sign_note, statement, verify_note};
use policy::{
    sign_bundle, verify_bundle, Bundle, BundleError, Installed, Policy, SignerKey, VerifierKey,
};

const V: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/conformance/signed-note/"
);
const SEED: &str = include_str!("../examples/seed-hyderabad.toml");

fn vector(name: &str) -> Vec<u8> {
    std::fs::read(format!("{V}{name}")).unwrap_or_else(|e| panic!("conformance vector {name}: {e}"))
}

fn authority() -> SignerKey {
    SignerKey::from_seed("policy-authority.example.in", &[7u8; 32]).unwrap()
}

fn with_version(v: u64) -> String {
    SEED.replace("version = 1\n", &format!("version = {v}\n"))
}

#[test]
fn verifies_the_c2sp_example_note() {
    let vkey = String::from_utf8(vector("c2sp-signed-note-example.vkey")).unwrap();
    let key = VerifierKey::parse(vkey.trim()).unwrap();
    assert_eq!(key.id(), 0x530d903a);
    assert_eq!(key.encode(), vkey.trim());
    let text = verify_note(&vector("c2sp-signed-note-example.note"), &key).unwrap();
    assert_eq!(text, "This is an example message.\n");
}

#[test]
fn go_signer_key_reproduces_the_go_signature() {
    let skey = String::from_utf8(vector("golang-mod-peterneumann.skey")).unwrap();
    let signer = SignerKey::parse(skey.trim()).unwrap();
    assert_eq!(signer.encode().as_str(), skey.trim());
    let vkeys = String::from_utf8(vector("golang-mod-peterneumann-enochroot.vkeys")).unwrap();
    let peter = VerifierKey::parse(vkeys.lines().next().unwrap()).unwrap();
    assert_eq!(signer.verifier(), peter);
    let enoch = VerifierKey::parse(vkeys.lines().nth(1).unwrap()).unwrap();

    let note = vector("golang-mod-peterneumann-enochroot.note");
    let parsed = parse_note(&note).unwrap();
    assert_eq!(parsed.signatures.len(), 2);
    // Ed25519 is deterministic: signing the same text reproduces Peter Neumann's line.
    let ours = sign_note(&parsed.text, &signer).unwrap();
    let note_s = String::from_utf8(note.clone()).unwrap();
    let our_line = ours.lines().last().unwrap();
    assert!(note_s.lines().any(|l| l == our_line), "{our_line}");
    // Both signatures verify with their keys.
    verify_note(&note, &peter).unwrap();
    verify_note(&note, &enoch).unwrap();
}

#[test]
fn sumdb_checkpoint_verifies_and_other_keys_are_refused() {
    let sumdb =
        VerifierKey::parse(String::from_utf8(vector("sumdb.vkey")).unwrap().trim()).unwrap();
    verify_note(&vector("sumdb-checkpoint-6476701.note"), &sumdb).unwrap();
    let err = verify_note(
        &vector("sumdb-checkpoint-6476701.note"),
        &authority().verifier(),
    )
    .unwrap_err();
    assert!(matches!(err, BundleError::NotSignedByAuthority(_, ref by) if by == "sum.golang.org"));
}

#[test]
fn malformed_keys_are_rejected() {
    let good = authority().verifier().encode();
    for bad in [
        "",
        "name+deadbeef",
        "name+00000000+AQ==",
        &good.replacen('+', "+0", 1),
        &good.replace("policy-authority", "other-authority"),
        "na me+00000000+AAAA",
    ] {
        assert!(VerifierKey::parse(bad).is_err(), "{bad}");
    }
    assert!(SignerKey::parse(&good).is_err());
    assert!(SignerKey::from_seed("has space", &[0; 32]).is_err());
    assert!(SignerKey::from_seed("a+b", &[0; 32]).is_err());
}

#[test]
fn signed_bundle_round_trip() {
    let key = authority();
    let policy = with_version(5);
    let sig = sign_bundle(policy.as_bytes(), &key).unwrap();
    let p = Policy::from_toml_str(&policy).unwrap();
    assert!(sig.starts_with(&statement(&p)));
    assert!(sig.contains(&format!("digest {}\n", p.digest())));
    let got = verify_bundle(
        Bundle {
            policy: policy.as_bytes(),
            signature: sig.as_bytes(),
        },
        &key.verifier(),
        None,
    )
    .unwrap();
    assert_eq!(got.version, 5);
    assert_eq!(got.digest(), p.digest());
}

#[test]
fn unsigned_and_wrongly_signed_bundles_are_refused() {
    let key = authority();
    let policy = with_version(5);
    fn bundle<'a>(policy: &'a str, sig: &'a [u8]) -> Bundle<'a> {
        Bundle {
            policy: policy.as_bytes(),
            signature: sig,
        }
    }
    let b = |sig| bundle(&policy, sig);
    let v = key.verifier();

    assert!(matches!(
        verify_bundle(b(b""), &v, None),
        Err(BundleError::Unsigned)
    ));
    assert!(matches!(
        verify_bundle(b(b"\n"), &v, None),
        Err(BundleError::Unsigned)
    ));
    let text_only = statement(&Policy::from_toml_str(&policy).unwrap());
    assert!(matches!(
        verify_bundle(b(text_only.as_bytes()), &v, None),
        Err(BundleError::Unsigned)
    ));

    // Signed by another key with the same name: key id differs, so it is not the authority's.
    let impostor = SignerKey::from_seed("policy-authority.example.in", &[8u8; 32]).unwrap();
    let sig = sign_bundle(policy.as_bytes(), &impostor).unwrap();
    assert!(matches!(
        verify_bundle(b(sig.as_bytes()), &v, None),
        Err(BundleError::NotSignedByAuthority(..))
    ));

    // Flipped signature bytes.
    let sig = sign_bundle(policy.as_bytes(), &key).unwrap();
    let last = sig.trim_end().rsplit(' ').next().unwrap().to_string();
    let mut blob = base64_decode(&last);
    blob[10] ^= 1;
    let tampered = sig.replace(&last, &base64_encode(&blob));
    assert!(matches!(
        verify_bundle(b(tampered.as_bytes()), &v, None),
        Err(BundleError::BadSignature(_))
    ));

    // Statement edited after signing (version bumped by hand).
    let edited = sig.replace("version 5\n", "version 6\n");
    assert!(matches!(
        verify_bundle(b(edited.as_bytes()), &v, None),
        Err(BundleError::BadSignature(_))
    ));

    // Policy edited after signing.
    let other = policy.replace("\"IN\"]", "\"IN\", \"SG\"]");
    assert_ne!(other, policy);
    assert!(matches!(
        verify_bundle(
            Bundle {
                policy: other.as_bytes(),
                signature: sig.as_bytes()
            },
            &v,
            None
        ),
        Err(BundleError::DigestMismatch { .. })
    ));

    // Garbage note.
    assert!(matches!(
        verify_bundle(b(b"hello\n\nnot a signature\n"), &v, None),
        Err(BundleError::MalformedNote(_))
    ));
}

#[test]
fn rollback_is_refused() {
    let key = authority();
    let v = key.verifier();
    let p7 = with_version(7);
    let s7 = sign_bundle(p7.as_bytes(), &key).unwrap();
    let installed7 = Installed {
        version: 7,
        digest: Policy::from_toml_str(&p7).unwrap().digest(),
    };
    let p6 = with_version(6);
    let s6 = sign_bundle(p6.as_bytes(), &key).unwrap();
    let p8 = with_version(8);
    let s8 = sign_bundle(p8.as_bytes(), &key).unwrap();

    let offer = |p: &str, s: &str, cur| {
        verify_bundle(
            Bundle {
                policy: p.as_bytes(),
                signature: s.as_bytes(),
            },
            &v,
            cur,
        )
    };
    assert!(matches!(
        offer(&p6, &s6, Some(installed7)),
        Err(BundleError::Rollback {
            offered: 6,
            current: 7
        })
    ));
    assert!(offer(&p8, &s8, Some(installed7)).is_ok());
    // Re-installing the active policy (e.g. at restart) is fine.
    assert!(offer(&p7, &s7, Some(installed7)).is_ok());
    // Same version, different content: refused.
    let p7b = p7.replace("Seed scenario", "Seed  scenario");
    let s7b = sign_bundle(p7b.as_bytes(), &key).unwrap();
    assert!(matches!(
        offer(&p7b, &s7b, Some(installed7)),
        Err(BundleError::VersionReused { version: 7, .. })
    ));
}

#[test]
fn invalid_policies_are_not_signed() {
    let err = sign_bundle(b"[policy]\nname = 1\n", &authority()).unwrap_err();
    assert!(matches!(err, BundleError::InvalidPolicy(ref e) if !e.is_empty()));
    assert!(matches!(
        sign_bundle(&[0xff, 0xfe], &authority()),
        Err(BundleError::NotUtf8)
    ));
}

fn base64_decode(s: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.decode(s).unwrap()
}

fn base64_encode(b: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(b)
}

/// docs/policy.md shows a worked example: the seed policy signed by a test authority key
/// whose seed is 32 bytes of 0x07. The signature and keys printed there must be current.
#[test]
fn docs_worked_example_is_current() {
    let key = authority();
    let sig = sign_bundle(SEED.as_bytes(), &key).unwrap();
    let doc = include_str!("../../docs/policy.md");
    println!(
        "{}\n{}\n{sig}",
        key.encode().as_str(),
        key.verifier().encode()
    );
    assert!(
        doc.contains(&sig),
        "docs/policy.md must show the current signature note:\n{sig}"
    );
    assert!(doc.contains(key.verifier().encode().as_str()));
    assert!(doc.contains(key.encode().as_str()));
}
