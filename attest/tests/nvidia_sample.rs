//! The real NVIDIA Hopper sample (nvtrust local_gpu_verifier samples): report, chain, RIMs.

use attest::nvidia::chain::{CertChain, ChainError};
use attest::nvidia::spdm::{opaque_type, SpdmError, SpdmReport, SIGNATURE_LEN};
use attest::nvidia::{verify_report, GpuReportError};
use attest::rim::Rim;

const DIR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/conformance/nvtrust-samples/"
);

/// 2025-11-24T00:00:00Z: inside every sample certificate's validity.
const NOW: u64 = 1_763_942_400;

fn read(name: &str) -> String {
    std::fs::read_to_string(format!("{DIR}{name}")).expect("conformance sample present")
}

fn report_bytes() -> Vec<u8> {
    let text = read("hopperAttestationReport.txt");
    hex::decode(text.trim()).expect("sample is hex")
}

fn chain() -> CertChain {
    CertChain::from_pem(&read("hopperCertChain.txt")).expect("sample chain parses")
}

fn root(chain: &CertChain) -> Vec<u8> {
    chain.ders().last().cloned().expect("non-empty")
}

const SAMPLE_NONCE: &str = "931d8dd0add203ac3d8b4fbde75e115278eefcdceac5b87671a748f32364dfcb";

fn sample_nonce() -> [u8; 32] {
    hex::decode(SAMPLE_NONCE).unwrap().try_into().unwrap()
}

#[test]
fn sample_report_parses_with_expected_fields() {
    let bytes = report_bytes();
    assert_eq!(bytes.len(), 4117);
    let r = SpdmReport::parse(&bytes).unwrap();
    assert_eq!(r.request_version, 0x11);
    assert_eq!(r.response_version, 0x11);
    assert_eq!(r.requested_index, 0xFF);
    assert_eq!(r.slot_id, 0);
    assert_eq!(hex::encode(r.request_nonce), SAMPLE_NONCE);
    assert_eq!(r.blocks.len(), 64);
    for (i, b) in r.blocks.iter().enumerate() {
        assert_eq!(usize::from(b.index), i + 1);
        assert_eq!(b.value.len(), 48, "SHA-384 digest in block {}", b.index);
        assert_eq!(b.value_type & 0x80, 0, "digest, not raw bit stream");
    }
    assert_eq!(
        hex::encode(&r.block(2).unwrap().value[..8]),
        "8048dfd18fe229bf",
        "block 2 value read from the right offset"
    );
    assert_eq!(r.opaque.driver_version().as_deref(), Some("550.90.07"));
    assert_eq!(r.opaque.vbios_version().as_deref(), Some("96.00.9F.00.01"));
    assert_eq!(
        r.opaque.ascii(opaque_type::CHIP_SKU).as_deref(),
        Some("882")
    );
    assert_eq!(
        r.opaque.ascii(opaque_type::PROJECT).as_deref(),
        Some("1010")
    );
    assert_eq!(
        r.opaque.ascii(opaque_type::PROJECT_SKU).as_deref(),
        Some("0200")
    );
    assert_eq!(
        hex::encode(r.opaque.fwid().unwrap()),
        "f5c384aebb579217a2c66b17ed0f28e6a9b8d639041acd7b4721cec004f7275494ba94bb5cdfdb3055ee051762b1f75d"
    );
    let types: Vec<u16> = r.opaque.fields.iter().map(|(t, _)| *t).collect();
    assert_eq!(
        types,
        vec![6, 14, 15, 16, 17, 18, 19, 3, 4, 12, 13, 11, 20, 21]
    );
    assert_eq!(r.opaque.get(opaque_type::MSRSCNT).unwrap().len(), 256);
    assert_eq!(r.signed_bytes().len(), bytes.len() - SIGNATURE_LEN);
    // The hex-text entry point gives the same result.
    assert_eq!(
        SpdmReport::parse_hex(&read("hopperAttestationReport.txt")).unwrap(),
        r
    );
}

#[test]
fn sample_chain_verifies_to_its_root_with_fwid() {
    let c = chain();
    assert_eq!(c.len(), 5);
    let v = c.verify(&[root(&c)], NOW).unwrap();
    // Validity window of the whole path: from the Provisioner ICA's notBefore (2022-03-01) to
    // 9999-12-31T23:59:59Z.
    assert_eq!(
        (v.valid_from, v.valid_until),
        (1_646_092_800, 253_402_300_799)
    );
    let r = SpdmReport::parse(&report_bytes()).unwrap();
    assert_eq!(v.leaf_fwid.as_deref(), r.opaque.fwid());
    r.verify_signature(&v.leaf_key).unwrap();
}

/// The chip is named by its "GSP BROM" device certificate (cert 1, serialNumber
/// 41431D480FE5E87274), then by the "GSP FMC LF" attestation key that signs its reports.
#[test]
fn sample_chain_names_the_device_by_its_brom_certificate_key() {
    use attest::nvidia::DeviceIdentity;
    use der::Decode;
    let c = chain();
    let v = c.verify(&[root(&c)], NOW).unwrap();
    let key_of = |der: &[u8]| {
        let cert = x509_cert::Certificate::from_der(der).unwrap();
        let spki = cert.tbs_certificate.subject_public_key_info;
        let bits = spki.subject_public_key.raw_bytes();
        let key = p384::ecdsa::VerifyingKey::from_sec1_bytes(bits).unwrap();
        key.to_sec1_point(true).as_bytes().to_vec()
    };
    assert_eq!(
        DeviceIdentity::of(&v),
        vec![
            DeviceIdentity::DeviceKey(key_of(&c.ders()[1])),
            DeviceIdentity::AttestationKey(key_of(&c.ders()[0])),
        ]
    );
}

#[test]
fn sample_full_report_verification() {
    let c = chain();
    let r = verify_report(&report_bytes(), c.ders(), &[root(&c)], NOW, &sample_nonce()).unwrap();
    assert_eq!(r.blocks.len(), 64);
    // Wrong expected nonce.
    let err = verify_report(&report_bytes(), c.ders(), &[root(&c)], NOW, &[7; 32]).unwrap_err();
    assert!(
        matches!(err, GpuReportError::NonceMismatch { .. }),
        "{err:?}"
    );
}

#[test]
fn chain_without_root_verifies_against_configured_root() {
    let c = chain();
    let without_root = CertChain::from_der_list(&c.ders()[..4]).unwrap();
    without_root.verify(&[root(&c)], NOW).unwrap();
    // Without any configured root it is untrusted.
    assert_eq!(
        without_root.verify(&[], NOW).unwrap_err(),
        ChainError::UntrustedRoot
    );
}

#[test]
fn sample_chain_rejects_other_root_and_bad_times() {
    let c = chain();
    let other = attest::nvidia::sim::SimGpu::new(b"other", 0, 4_000_000_000).unwrap();
    assert_eq!(
        c.verify(&[other.root_der().to_vec()], NOW).unwrap_err(),
        ChainError::UntrustedRoot
    );
    // 2021-01-01: before the Provisioner ICA (2022-03-01) and the GH100 Identity cert exist.
    let err = c.verify(&[root(&c)], 1_609_459_200).unwrap_err();
    assert!(
        matches!(
            err,
            ChainError::Validity {
                position: 2 | 3,
                ..
            }
        ),
        "{err:?}"
    );
    // 2019: before everything.
    let err = c.verify(&[root(&c)], 1_546_300_800).unwrap_err();
    assert!(
        matches!(err, ChainError::Validity { position: 0, .. }),
        "{err:?}"
    );
}

/// Flip one bit at sampled offsets of the signed bytes: parsing fails or the signature does
/// not verify; the report never verifies.
#[test]
fn bit_flips_in_signed_bytes_fail() {
    let c = chain();
    let key = c.verify(&[root(&c)], NOW).unwrap().leaf_key;
    let bytes = report_bytes();
    let signed_len = bytes.len() - SIGNATURE_LEN;
    let mut offsets: Vec<usize> = (0..signed_len).step_by(97).collect();
    // Request nonce, a measurement digest byte, driver version, FWID, last signed byte.
    offsets.extend([5, 37 + 8 + 4 + 3 + 10, signed_len - 60, signed_len - 1]);
    let mut signature_failures = 0;
    for off in offsets {
        let mut m = bytes.clone();
        m[off] ^= 0x01;
        match SpdmReport::parse(&m) {
            Err(_) => {}
            Ok(r) => {
                assert_eq!(
                    r.verify_signature(&key),
                    Err(SpdmError::SignatureMismatch),
                    "offset {off}"
                );
                signature_failures += 1;
            }
        }
    }
    assert!(
        signature_failures > 30,
        "most flips land in signed values: {signature_failures}"
    );
}

#[test]
fn bit_flips_in_signature_fail() {
    let c = chain();
    let key = c.verify(&[root(&c)], NOW).unwrap().leaf_key;
    let bytes = report_bytes();
    for off in [bytes.len() - 96, bytes.len() - 50, bytes.len() - 1] {
        let mut m = bytes.clone();
        m[off] ^= 0x80;
        let r = SpdmReport::parse(&m).unwrap();
        let err = r.verify_signature(&key).unwrap_err();
        assert!(
            matches!(
                err,
                SpdmError::SignatureMismatch | SpdmError::BadSignatureEncoding
            ),
            "{err:?}"
        );
    }
}

#[test]
fn bit_flips_in_certificates_fail() {
    let c = chain();
    let ders = c.ders().to_vec();
    let root_der = root(&c);
    for i in 0..ders.len() {
        let len = ders[i].len();
        // A byte inside the issuer/subject area of the TBS, and one in the signature value.
        for off in [len / 4, len - 3] {
            let mut m = ders.clone();
            m[i][off] ^= 0x01;
            let res = CertChain::from_der_list(&m)
                .and_then(|ch| ch.verify(std::slice::from_ref(&root_der), NOW));
            let err = res.expect_err("tampered chain must fail");
            assert!(
                matches!(
                    err,
                    ChainError::BadSignature(_)
                        | ChainError::Parse { .. }
                        | ChainError::NameMismatch(_)
                        | ChainError::UntrustedRoot
                ),
                "cert {i} offset {off}: {err:?}"
            );
            if off == len - 3 && i + 1 < ders.len() {
                assert_eq!(
                    err,
                    ChainError::BadSignature(i),
                    "signature flip in cert {i}"
                );
            }
        }
    }
    // A flipped leaf public key bit: the cert no longer verifies under its issuer.
    let mut m = ders.clone();
    let leaf_len = m[0].len();
    m[0][leaf_len / 3] ^= 0x02;
    let res =
        CertChain::from_der_list(&m).and_then(|ch| ch.verify(std::slice::from_ref(&root_der), NOW));
    assert!(res.is_err());
}

#[test]
fn truncated_and_extended_reports_are_rejected() {
    let bytes = report_bytes();
    assert!(matches!(
        SpdmReport::parse(&bytes[..bytes.len() - 1]),
        Err(SpdmError::Truncated(_))
    ));
    assert!(matches!(
        SpdmReport::parse(&bytes[..36]),
        Err(SpdmError::Truncated(_))
    ));
    let mut longer = bytes.clone();
    longer.push(0);
    assert_eq!(SpdmReport::parse(&longer), Err(SpdmError::TrailingBytes(1)));
    assert_eq!(SpdmReport::parse_hex("11e0zz"), Err(SpdmError::NotHex));
    let mut wrong_code = bytes.clone();
    wrong_code[1] = 0x81;
    assert!(matches!(
        SpdmReport::parse(&wrong_code),
        Err(SpdmError::Unexpected { .. })
    ));
}

#[test]
fn rims_parse_with_metadata() {
    let vbios = Rim::parse(&read("1010_0200_882_96005E0001_test_no_gpu.swidtag")).unwrap();
    assert_eq!(vbios.name, "GH100");
    assert_eq!(vbios.product, "GH100");
    assert_eq!(vbios.colloquial_version, "96.00.5E.00.01");
    assert_eq!(vbios.measurements.len(), 64);
    assert!(vbios.has_signature());
    let m12 = vbios.measurements.iter().find(|m| m.index == 12).unwrap();
    assert_eq!(m12.alternatives.len(), 4);
    assert!(m12.active);
    let driver = Rim::parse(&read("Driver_RIM_test_no_gpu.swidtag")).unwrap();
    assert_eq!(driver.colloquial_version, "545.00");
    let prod = Rim::parse(&read("1010_0200_882_96005E0001_PROD.swidtag")).unwrap();
    assert_eq!(prod.colloquial_version, "96.00.5E.00.01");
}

/// Real behaviour, documented in docs/attestation.md: the sample report (VBIOS 96.00.9F.00.01,
/// driver 550.90.07) only partly matches the `*_test_no_gpu` RIMs (VBIOS 96.00.5E.00.01,
/// driver 545.00).
#[test]
fn sample_report_against_rims() {
    let r = SpdmReport::parse(&report_bytes()).unwrap();
    let vbios = Rim::parse(&read("1010_0200_882_96005E0001_test_no_gpu.swidtag")).unwrap();
    let cmp = vbios.compare(&r);
    assert_eq!(cmp.matched, vec![0, 4, 5, 6, 8, 10, 12]);
    assert_eq!(cmp.mismatched, vec![1, 2, 3, 9, 11]);
    assert!(cmp.missing.is_empty());
    assert!(!cmp.is_match());
    let driver = Rim::parse(&read("Driver_RIM_test_no_gpu.swidtag")).unwrap();
    let cmp = driver.compare(&r);
    assert_eq!(cmp.matched, vec![23, 24, 28, 33, 35, 38]);
    assert_eq!(
        cmp.mismatched,
        vec![7, 21, 22, 25, 26, 27, 29, 30, 31, 32, 34, 36, 37, 39, 40]
    );
    let prod = Rim::parse(&read("1010_0200_882_96005E0001_PROD.swidtag")).unwrap();
    let cmp = prod.compare(&r);
    assert_eq!(cmp.matched, vec![0, 3, 4, 5, 6, 8, 10, 12]);
    assert_eq!(cmp.mismatched, vec![1, 2, 9, 11]);
}

#[test]
fn rim_rejects_malformed_documents() {
    assert!(Rim::parse("not xml").is_err());
    assert!(Rim::parse("<a/>").is_err());
    let doctype = "<!DOCTYPE x [<!ENTITY a \"b\">]><SoftwareIdentity xmlns=\"http://standards.iso.org/iso/19770/-2/2015/schema.xsd\"/>";
    assert!(Rim::parse(doctype).is_err(), "DTDs are refused");
    let good = read("1010_0200_882_96005E0001_test_no_gpu.swidtag");
    let bad_hash = good.replacen("ns2:Hash0=\"0b42836f", "ns2:Hash0=\"zz42836f", 1);
    assert!(Rim::parse(&bad_hash).is_err());
}
