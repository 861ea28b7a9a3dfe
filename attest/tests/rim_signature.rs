//! XML-DSig signatures of the real NVIDIA RIMs (nvtrust samples): they verify up to NVIDIA's
//! RIM root, and every way of changing what was signed, or who signed it, fails.

use attest::nvidia::chain::{CertChain, ChainError};
use attest::rim::{Rim, RimError, RimSignature, RimSignatureError};
use base64::Engine as _;

const DIR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/conformance/nvtrust-samples/"
);

/// 2024-06-01T00:00:00Z: inside the sample RIM signers' validity (mid-2023 to mid-2025).
const RIM_TIME: u64 = 1_717_200_000;

const FILES: [&str; 3] = [
    "1010_0200_882_96005E0001_PROD.swidtag",
    "1010_0200_882_96005E0001_test_no_gpu.swidtag",
    "Driver_RIM_test_no_gpu.swidtag",
];

fn read(name: &str) -> String {
    std::fs::read_to_string(format!("{DIR}{name}")).expect("conformance sample present")
}

/// The certificates in a RIM's KeyInfo, leaf first.
fn embedded_certs(xml: &str) -> Vec<Vec<u8>> {
    xml.split("<ds:X509Certificate>")
        .skip(1)
        .map(|s| {
            let b64: String = s
                .split("</ds:X509Certificate>")
                .next()
                .unwrap()
                .split_whitespace()
                .collect();
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .unwrap()
        })
        .collect()
}

/// NVIDIA's RIM root ("NVIDIA CoRIM signing Root CA"), taken from the PROD RIM: the one
/// trusted certificate every sample RIM must chain to.
fn nvidia_rim_root() -> Vec<u8> {
    let certs = embedded_certs(&read(FILES[0]));
    let root = certs.last().unwrap().clone();
    let chain = CertChain::from_der_list(std::slice::from_ref(&root)).unwrap();
    assert!(chain
        .leaf_subject()
        .contains("NVIDIA CoRIM signing Root CA"));
    root
}

fn verify(xml: &str) -> Result<Rim, RimError> {
    Rim::parse_verified(xml, &[nvidia_rim_root()], RIM_TIME)
}

fn sig_err(xml: &str) -> RimSignatureError {
    match verify(xml) {
        Err(RimError::Signature(e)) => e,
        other => panic!("expected a signature error, got {other:?}"),
    }
}

#[test]
fn every_sample_rim_verifies_up_to_the_nvidia_rim_root() {
    for f in FILES {
        let rim = verify(&read(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        let signer = rim.signer().expect("verified");
        assert!(
            signer.subject.contains("HCC RIM L4 Signer"),
            "{f}: {signer:?}"
        );
        assert!(signer.valid_from <= RIM_TIME && RIM_TIME <= signer.valid_until);
        // The verified parse reads the same content as the plain one.
        let plain = Rim::parse(&read(f)).unwrap();
        assert_eq!(plain.signature(), &RimSignature::NotVerified);
        assert_eq!(plain.measurements, rim.measurements);
        assert_eq!(plain.colloquial_version, rim.colloquial_version);
    }
}

#[test]
fn canonicalisation_ignores_what_c14n_ignores() {
    // Attribute order and quote style are not part of the canonical form: still verifies.
    let xml = read(FILES[1]);
    let reordered = xml.replacen(
        "<ns0:Resource type=\"Measurement\" index=\"1\" active=\"True\"",
        "<ns0:Resource active='True' index=\"1\" type=\"Measurement\"",
        1,
    );
    assert_ne!(reordered, xml);
    verify(&reordered).expect("attribute order and quoting are canonicalised away");
    // An XML declaration is outside the canonical form too.
    let declared = format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n{xml}");
    verify(&declared).expect("XML declaration is not signed content");
}

#[test]
fn changed_content_fails_the_digest() {
    let xml = read(FILES[1]);
    // A different golden value (still valid hex, still parses as a RIM).
    let changed = xml.replacen("ns2:Hash0=\"0b42836f", "ns2:Hash0=\"1b42836f", 1);
    assert_ne!(changed, xml);
    Rim::parse(&changed).expect("still a well-formed RIM");
    assert_eq!(sig_err(&changed), RimSignatureError::DigestMismatch);
    // Whitespace in content is significant.
    let spaced = xml.replacen("<ns0:Payload", " <ns0:Payload", 1);
    assert_eq!(sig_err(&spaced), RimSignatureError::DigestMismatch);
    // A measurement switched off.
    let inactive = xml.replacen("active=\"True\"", "active=\"False\"", 1);
    assert_eq!(sig_err(&inactive), RimSignatureError::DigestMismatch);
}

#[test]
fn changed_signature_or_signed_info_fails() {
    let xml = read(FILES[0]);
    let value_start = xml.find("<ds:SignatureValue>").unwrap() + "<ds:SignatureValue>".len();
    let mut bytes = xml.clone().into_bytes();
    // Swap one base64 character for another.
    bytes[value_start + 5] = if bytes[value_start + 5] == b'A' {
        b'B'
    } else {
        b'A'
    };
    let flipped = String::from_utf8(bytes).unwrap();
    assert_eq!(sig_err(&flipped), RimSignatureError::BadSignature);
    // A DigestValue recomputed by an attacker for changed content changes SignedInfo, which
    // the signature covers.
    let digest_start = xml.find("<ds:DigestValue>").unwrap() + "<ds:DigestValue>".len();
    let mut bytes = xml.clone().into_bytes();
    bytes[digest_start] = if bytes[digest_start] == b'A' {
        b'B'
    } else {
        b'A'
    };
    let redigested = String::from_utf8(bytes).unwrap();
    assert!(matches!(
        sig_err(&redigested),
        RimSignatureError::DigestMismatch | RimSignatureError::BadSignature
    ));
}

#[test]
fn signer_must_chain_to_a_configured_root_and_be_valid_now() {
    let xml = read(FILES[0]);
    // The GPU device root is a real NVIDIA root, but not the RIM root.
    let device_chain =
        CertChain::from_pem(&read("hopperCertChain.txt")).expect("sample chain parses");
    let device_root = device_chain.ders().last().unwrap().clone();
    assert_eq!(
        Rim::parse_verified(&xml, &[device_root], RIM_TIME),
        Err(RimError::Signature(RimSignatureError::Chain(
            ChainError::UntrustedRoot
        )))
    );
    assert!(matches!(
        Rim::parse_verified(&xml, &[], RIM_TIME),
        Err(RimError::Signature(RimSignatureError::Chain(
            ChainError::UntrustedRoot
        )))
    ));
    // The sample signer certificates expired in June 2025: today they are refused.
    let today = 1_796_256_000; // 2026-12-03
    assert!(matches!(
        Rim::parse_verified(&xml, &[nvidia_rim_root()], today),
        Err(RimError::Signature(RimSignatureError::Chain(
            ChainError::Validity { .. }
        )))
    ));
    // Certificates swapped for a chain without the signer: the leaf key no longer verifies.
    let certs = embedded_certs(&xml);
    let b64 = |d: &[u8]| base64::engine::general_purpose::STANDARD.encode(d);
    let first = xml.find("<ds:X509Certificate>").unwrap();
    let end = xml.find("</ds:X509Certificate>").unwrap() + "</ds:X509Certificate>".len();
    let without_leaf = format!("{}{}", &xml[..first], &xml[end..]);
    assert!(!without_leaf.contains(&b64(&certs[0])));
    assert!(matches!(
        sig_err(&without_leaf),
        RimSignatureError::BadSignature | RimSignatureError::Chain(_)
    ));
}

#[test]
fn the_accepted_profile_is_narrow() {
    let xml = read(FILES[2]);
    let sig_start = xml.find("<ds:Signature").unwrap();
    let sig_end = xml.find("</ds:Signature>").unwrap() + "</ds:Signature>".len();
    let signature = &xml[sig_start..sig_end];
    // Unsigned.
    let unsigned = format!("{}{}", &xml[..sig_start], &xml[sig_end..]);
    assert_eq!(sig_err(&unsigned), RimSignatureError::Unsigned);
    assert_eq!(
        Rim::parse(&unsigned).unwrap().signature(),
        &RimSignature::Absent
    );
    // Two signatures (the classic wrapping set-up).
    let twice = format!("{}{signature}{}", &xml[..sig_end], &xml[sig_end..]);
    assert!(matches!(sig_err(&twice), RimSignatureError::Structure(_)));
    // A signature that is not a child of the root element.
    let nested = unsigned.replacen("</ns0:Payload>", &format!("{signature}</ns0:Payload>"), 1);
    assert_ne!(nested, unsigned);
    assert!(matches!(sig_err(&nested), RimSignatureError::Structure(_)));
    // A reference to something other than the whole document.
    let partial = xml.replacen(
        "<ds:Reference URI=\"\">",
        "<ds:Reference URI=\"#payload\">",
        1,
    );
    assert!(matches!(sig_err(&partial), RimSignatureError::Structure(_)));
    // Algorithms outside the profile.
    let sha1 = xml.replacen(
        "http://www.w3.org/2001/04/xmldsig-more#ecdsa-sha384",
        "http://www.w3.org/2001/04/xmldsig-more#ecdsa-sha1",
        1,
    );
    assert!(matches!(
        sig_err(&sha1),
        RimSignatureError::Unsupported {
            what: "signature",
            ..
        }
    ));
    let exclusive = xml.replacen(
        "<ds:CanonicalizationMethod Algorithm=\"http://www.w3.org/2006/12/xml-c14n11\"",
        "<ds:CanonicalizationMethod Algorithm=\"http://www.w3.org/2006/12/xml-c14n11#WithComments\"",
        1,
    );
    assert!(matches!(
        sig_err(&exclusive),
        RimSignatureError::Unsupported { .. }
    ));
    let no_enveloped = xml.replacen(
        "<ds:Transform Algorithm=\"http://www.w3.org/2000/09/xmldsig#enveloped-signature\"/>",
        "",
        1,
    );
    assert!(matches!(
        sig_err(&no_enveloped),
        RimSignatureError::Structure(_)
    ));
}
