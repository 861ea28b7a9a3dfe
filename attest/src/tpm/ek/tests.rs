//! The EK profile, NV contents and certificate checks, on a chain swtpm_localca made
//! (`attest/tests/data/ek/README.md`). That a TPM derives this EK and answers challenges
//! under it is the `tpm` crate's swtpm tests.

use super::*;

const CERT: &[u8] = include_bytes!("../../../tests/data/ek/ek-rsa2048.der");
const ISSUER: &[u8] = include_bytes!("../../../tests/data/ek/issuer.pem");
const ROOT: &[u8] = include_bytes!("../../../tests/data/ek/root.pem");
/// 2030-03-17: inside every certificate's validity.
const NOW: u64 = 1_900_000_000;

fn modulus_of_cert() -> Vec<u8> {
    match certified_key(CERT).unwrap() {
        EkKey::Rsa { modulus } => modulus,
        other => panic!("{other:?}"),
    }
}

fn ek() -> EkPublic {
    EkPublic::parse(&marshal_rsa_ek(&modulus_of_cert())).unwrap()
}

fn anchors() -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    (
        certificates_from_file(ROOT).unwrap(),
        certificates_from_file(ISSUER).unwrap(),
    )
}

#[test]
fn the_certificate_verifies_for_its_ek() {
    let (roots, intermediates) = anchors();
    verify_ek_certificate(CERT, &ek(), &roots, &intermediates, NOW).unwrap();
}

#[test]
fn another_key_is_a_mismatch_that_names_both() {
    let (roots, intermediates) = anchors();
    let mut other = modulus_of_cert();
    other[100] ^= 1;
    let other = EkPublic::parse(&marshal_rsa_ek(&other)).unwrap();
    let err = verify_ek_certificate(CERT, &other, &roots, &intermediates, NOW).unwrap_err();
    match err {
        EkError::KeyMismatch { certified, tpm } => {
            assert_eq!(
                certified,
                <[u8; 32]>::from(Sha256::digest(modulus_of_cert()))
            );
            assert_eq!(
                tpm,
                <[u8; 32]>::from(Sha256::digest(other.key().comparable()))
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_chain_must_reach_a_given_root_in_time() {
    let (roots, intermediates) = anchors();
    let chain = |roots: &[Vec<u8>], intermediates: &[Vec<u8>], now| {
        verify_ek_certificate(CERT, &ek(), roots, intermediates, now).unwrap_err()
    };
    assert_eq!(chain(&[], &intermediates, NOW), EkError::NoRoots);
    // Without the intermediate the root does not reach the leaf. (An intermediate given as a
    // root is trusted as one: trust anchors are what the enroller says they are.)
    assert!(matches!(chain(&roots, &[], NOW), EkError::Chain(_)));
    // The leaf as its own root: it is no CA.
    assert!(matches!(
        chain(&[CERT.to_vec()], &[], NOW),
        EkError::Chain(_)
    ));
    // Before the certificates were issued (2026-12-07).
    assert!(matches!(
        chain(&roots, &intermediates, 1_700_000_000),
        EkError::Chain(webpki::Error::CertNotValidYet { .. })
    ));
    let garbage = vec![vec![0x30, 0x03, 0x02, 0x01, 0x00]];
    assert!(matches!(
        chain(&garbage, &intermediates, NOW),
        EkError::BadAnchor { position: 0, .. }
    ));
}

#[test]
fn a_changed_certificate_byte_never_verifies() {
    let (roots, intermediates) = anchors();
    // Every 7th byte, flipped: a parse error, a chain error or a key mismatch, never Ok.
    for i in (0..CERT.len()).step_by(7) {
        let mut bad = CERT.to_vec();
        bad[i] ^= 0x01;
        assert!(
            verify_ek_certificate(&bad, &ek(), &roots, &intermediates, NOW).is_err(),
            "byte {i}"
        );
    }
}

#[test]
fn nv_contents_may_pad_with_zeros_only() {
    let mut padded = CERT.to_vec();
    padded.extend_from_slice(&[0; 100]);
    assert_eq!(certificate_in_nv(&padded).unwrap(), CERT);
    padded.push(1);
    assert!(matches!(
        certificate_in_nv(&padded),
        Err(EkError::CertificateEncoding { .. })
    ));
    assert!(certificate_in_nv(&CERT[..CERT.len() - 1]).is_err());
    assert!(certificate_in_nv(&[]).is_err());
}

#[test]
fn ca_files_are_pem_or_one_der_certificate() {
    assert_eq!(certificates_from_file(CERT).unwrap(), vec![CERT.to_vec()]);
    let two = [ROOT, ISSUER].concat();
    assert_eq!(certificates_from_file(&two).unwrap().len(), 2);
    assert!(certificates_from_file(b"-----BEGIN CERTIFICATE-----\n!!\n").is_err());
    assert!(certificates_from_file(
        b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"
    )
    .is_err());
    assert!(certificates_from_file(b"not a certificate").is_err());
}

#[test]
fn only_template_l1_keys_are_endorsement_keys() {
    let good = marshal_rsa_ek(&modulus_of_cert());
    // The templates themselves (zero modulus, zero point) are no keys.
    for kind in EkKind::ALL {
        assert!(EkPublic::parse(&kind.template()).is_err(), "{kind:?}");
    }
    let with = |offset: usize, byte: u8| {
        let mut b = good.clone();
        b[offset] = byte;
        EkPublic::parse(&b)
    };
    assert!(with(1, 0x23).is_err(), "type ECC");
    assert!(with(3, 0x04).is_err(), "nameAlg SHA-1");
    assert!(with(7, 0xf2).is_err(), "attributes with userWithAuth");
    assert!(with(10, 0x00).is_err(), "another policy");
    let mut trailing = good.clone();
    trailing.push(0);
    assert!(EkPublic::parse(&trailing).is_err());
    assert!(EkPublic::parse(&good[..good.len() - 1]).is_err());
    assert_eq!(ek().public_area(), &good[..]);
}

#[test]
fn an_identity_round_trips_and_refuses_unknown_fields() {
    let id = TpmIdentity {
        ak_public: vec![1, 2],
        ek_public: vec![3],
        ek_certificate: vec![4],
    };
    let json = serde_json::to_string(&id).unwrap();
    assert_eq!(
        json,
        r#"{"ak_public":"0102","ek_public":"03","ek_certificate":"04"}"#
    );
    assert_eq!(serde_json::from_str::<TpmIdentity>(&json).unwrap(), id);
    assert!(serde_json::from_str::<TpmIdentity>(
        r#"{"ak_public":"0102","ek_public":"03","ek_certificate":"04","x":1}"#
    )
    .is_err());
}

#[test]
fn template_l2_keys_are_points_on_p256() {
    let point = p256::SecretKey::from_slice(&[7; 32]).unwrap().public_key();
    let sec1 = point.to_sec1_bytes();
    let (x, y) = (sec1[1..33].to_vec(), sec1[33..].to_vec());
    let good = marshal_ecc_ek(&x, &y);
    let ek = EkPublic::parse(&good).unwrap();
    assert_eq!(ek.kind(), EkKind::EccP256);
    assert_eq!(ek.key().comparable(), &sec1[..]);
    let mut off_curve = y.clone();
    off_curve[31] ^= 1;
    assert!(EkPublic::parse(&marshal_ecc_ek(&x, &off_curve)).is_err());
    assert!(
        EkPublic::parse(&marshal_ecc_ek(&x[1..], &y)).is_err(),
        "short x"
    );
    let mut p384 = good.clone();
    p384[2 + 2 + 4 + 2 + 32 + 8 + 1] = 0x04; // curveID: TPM_ECC_NIST_P384
    assert!(EkPublic::parse(&p384).is_err());
    // The RSA certificate does not certify this key.
    let (roots, intermediates) = anchors();
    assert!(matches!(
        verify_ek_certificate(CERT, &ek, &roots, &intermediates, NOW),
        Err(EkError::KeyMismatch { .. })
    ));
}
