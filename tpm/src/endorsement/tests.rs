//! Against swtpm manufactured as a TPM maker would (`swtpm_setup --create-ek-cert`, with a
//! local CA standing in for the maker's): the identity a node hands out checks against that
//! CA, and its TPM answers a credential challenge only when it was made for its own EK and its
//! own AK.

use super::*;
use crate::swtpm::{manufacture, LocalCa, Swtpm};
use attest::tpm::credential::{challenge, make_credential, object_name};
use attest::tpm::ek::{certificates_from_file, CheckedIdentity, EkError, EkKind};

/// Today, for the certificates swtpm_localca makes (valid from their making).
fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

struct Made {
    _dir: tempfile::TempDir,
    tpm: Swtpm,
    ca: LocalCa,
}

/// A TPM manufactured with an EK certificate from `ca` (a new CA in a new folder if `None`).
fn manufactured(ca: Option<&LocalCa>) -> Made {
    let dir = tempfile::tempdir().unwrap();
    let ca = ca.cloned().unwrap_or_else(|| LocalCa {
        dir: dir.path().join("ca"),
    });
    let state = dir.path().join("t");
    manufacture(&state, &ca).unwrap();
    let tpm = Swtpm::start(&state).unwrap();
    Made { _dir: dir, tpm, ca }
}

fn anchors(ca: &LocalCa) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let read = |p: std::path::PathBuf| certificates_from_file(&std::fs::read(p).unwrap()).unwrap();
    (read(ca.root_pem()), read(ca.issuer_pem()))
}

fn checked(made: &Made) -> CheckedIdentity {
    let mut t = made.tpm.connect().unwrap();
    let id = identity(&mut t).unwrap();
    let (roots, intermediates) = anchors(&made.ca);
    id.check(&roots, &intermediates, now()).unwrap()
}

#[test]
fn the_tpm_releases_the_secret_of_a_challenge_for_its_own_ek_and_ak() {
    let made = manufactured(None);
    let id = checked(&made);
    let mut t = made.tpm.connect().unwrap();
    assert_eq!(id.ak_public, crate::ak_public(&mut t).unwrap(), "the AK");
    let (challenge, secret) = challenge(&id, &mut getrandom_04::SysRng).unwrap();
    let answer = activate_credential(&mut t, &challenge).unwrap();
    assert_eq!(&answer[..], &secret[..]);
    // Nothing is left loaded: a second challenge goes the same way.
    let (again, secret) = challenge_for(&id);
    assert_eq!(
        &activate_credential(&mut t, &again).unwrap()[..],
        &secret[..]
    );
}

fn challenge_for(id: &CheckedIdentity) -> (Challenge, Zeroizing<[u8; 32]>) {
    challenge(id, &mut getrandom_04::SysRng).unwrap()
}

#[test]
fn a_challenge_for_another_name_is_refused_by_the_tpm() {
    let made = manufactured(None);
    let id = checked(&made);
    // A key the node could hold in software instead of its AK.
    let other =
        attest::tpm::marshal_ecc_public(attest::tpm::AK_TEMPLATE_ATTRIBUTES, &[1; 32], &[2; 32]);
    let c = make_credential(
        &id.ek,
        &object_name(&other),
        &[3; 32],
        &mut getrandom_04::SysRng,
    )
    .unwrap();
    let mut t = made.tpm.connect().unwrap();
    let err = activate_credential(&mut t, &c).unwrap_err();
    assert!(
        matches!(
            err,
            TpmError::Response {
                command: "TPM2_ActivateCredential",
                ..
            }
        ),
        "{err}"
    );
    // The TPM is left as it was: its own challenge still goes through.
    let (c, secret) = challenge_for(&id);
    assert_eq!(&activate_credential(&mut t, &c).unwrap()[..], &secret[..]);
}

#[test]
fn another_tpm_cannot_answer_and_its_certificate_is_not_this_ek() {
    let a = manufactured(None);
    let b = manufactured(Some(&a.ca));
    let id_a = checked(&a);
    let (c, _) = challenge_for(&id_a);
    let mut tb = b.tpm.connect().unwrap();
    let err = activate_credential(&mut tb, &c).unwrap_err();
    assert!(matches!(err, TpmError::Response { .. }), "{err}");
    // B's genuine certificate presented with A's EK: the keys differ.
    let mut id_b = identity(&mut tb).unwrap();
    let mut ta = a.tpm.connect().unwrap();
    id_b.ek_public = identity(&mut ta).unwrap().ek_public;
    let (roots, intermediates) = anchors(&a.ca);
    let err = id_b.check(&roots, &intermediates, now()).unwrap_err();
    assert!(matches!(err, EkError::KeyMismatch { .. }), "{err}");
}

#[test]
fn a_certificate_from_another_maker_does_not_verify() {
    let a = manufactured(None);
    let other = manufactured(None);
    let mut t = a.tpm.connect().unwrap();
    let id = identity(&mut t).unwrap();
    let (roots, intermediates) = anchors(&other.ca);
    let err = id.check(&roots, &intermediates, now()).unwrap_err();
    assert!(matches!(err, EkError::Chain(_)), "{err}");
    // Without the intermediate, the path is incomplete.
    let (roots, _) = anchors(&a.ca);
    let err = id.check(&roots, &[], now()).unwrap_err();
    assert!(matches!(err, EkError::Chain(_)), "{err}");
    // Before the certificates were made.
    let (roots, intermediates) = anchors(&a.ca);
    let err = id.check(&roots, &intermediates, 1_000_000_000).unwrap_err();
    assert!(matches!(err, EkError::Chain(_)), "{err}");
}

#[test]
fn a_tpm_without_an_ek_certificate_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let tpm = Swtpm::start(&dir.path().join("t")).unwrap();
    let mut t = tpm.connect().unwrap();
    for kind in EkKind::ALL {
        assert_eq!(ek_certificate(&mut t, kind).unwrap(), None);
    }
    let err = identity(&mut t).unwrap_err();
    assert!(matches!(err, TpmError::NoEkCertificate), "{err}");
    assert!(err.to_string().contains("--create-ek-cert"), "{err}");
}

/// An ECC P-256 EK (template L-2), as many makers provision beside the RSA one. swtpm 0.7.1
/// certifies only its RSA 2048 and P-384 EKs, so the certificate here is made by a CA of the
/// test's own (rcgen) for the point the TPM derives; the TPM's ECDH with the challenge's
/// ephemeral point is what releases the secret.
#[test]
fn an_ecc_ek_answers_a_challenge_made_with_ecdh() {
    let dir = tempfile::tempdir().unwrap();
    let sw = Swtpm::start(&dir.path().join("t")).unwrap();
    let mut t = sw.connect().unwrap();
    let (handle, ek) = create_ek(&mut t, EkKind::EccP256).unwrap();
    flush_context(&mut t, handle).unwrap();
    let (root, certificate) = certificate_for(&ek);
    let roots = [root];
    let id = identity_with(&mut t, Some(certificate)).unwrap();
    assert_eq!(id.ek_public, ek.public_area());
    let checked = id.check(&roots, &[], now()).unwrap();
    let (c, secret) = challenge_for(&checked);
    assert_eq!(c.ek, EkKind::EccP256);
    assert_eq!(c.encrypted_secret.len(), 2 + 32 + 2 + 32);
    assert_eq!(&activate_credential(&mut t, &c).unwrap()[..], &secret[..]);
    // Under the RSA EK instead, the same challenge does not open.
    let wrong = Challenge {
        ek: EkKind::Rsa2048,
        ..c
    };
    assert!(activate_credential(&mut t, &wrong).is_err());
    // Another TPM's ECC EK with this certificate: a key mismatch.
    let other = Swtpm::start(&dir.path().join("other")).unwrap();
    let mut to = other.connect().unwrap();
    let mut id_other = identity_with(&mut to, Some(id.ek_certificate.clone())).unwrap();
    let err = id_other.check(&roots, &[], now()).unwrap_err();
    assert!(matches!(err, EkError::KeyMismatch { .. }), "{err}");
    // With this TPM's EK the identity checks out though its AK is the other TPM's: only the
    // challenge ties an AK to the EK, and the other TPM cannot answer it.
    id_other.ek_public = id.ek_public;
    let checked_other = id_other.check(&roots, &[], now()).unwrap();
    let (c, _) = challenge_for(&checked_other);
    assert!(activate_credential(&mut to, &c).is_err());
}

/// A self-signed P-256 CA's root (DER) and a certificate it issues for `ek`'s point.
fn certificate_for(ek: &EkPublic) -> (Vec<u8>, Vec<u8>) {
    struct Point(Vec<u8>);
    impl rcgen::PublicKeyData for Point {
        fn der_bytes(&self) -> &[u8] {
            &self.0
        }
        fn algorithm(&self) -> &rcgen::SignatureAlgorithm {
            &rcgen::PKCS_ECDSA_P256_SHA256
        }
    }
    let ca_key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut ca = rcgen::CertificateParams::new(vec![]).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "test TPM maker root");
    let ca = ca.self_signed(&ca_key).unwrap();
    let leaf = rcgen::CertificateParams::new(vec![]).unwrap();
    let point = Point(ek.key().comparable());
    let leaf = leaf.signed_by(&point, &ca, &ca_key).unwrap();
    (ca.der().to_vec(), leaf.der().to_vec())
}
