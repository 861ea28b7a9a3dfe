//! Against swtpm manufactured as a TPM maker would (`swtpm_setup --create-ek-cert`, with a
//! local CA standing in for the maker's): the identity a node hands out checks against that
//! CA, and its TPM answers a credential challenge only when it was made for its own EK and its
//! own AK.

use super::*;
use crate::swtpm::{manufacture, LocalCa, Swtpm};
use attest::tpm::credential::{challenge, make_credential, object_name};
use attest::tpm::ek::{certificates_from_file, CheckedIdentity, EkError};

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
    assert_eq!(ek_certificate(&mut t).unwrap(), None);
    let err = identity(&mut t).unwrap_err();
    assert!(
        matches!(err, TpmError::NoEkCertificate { index: 0x01c0_0002 }),
        "{err}"
    );
    assert!(err.to_string().contains("--create-ek-cert"), "{err}");
}
