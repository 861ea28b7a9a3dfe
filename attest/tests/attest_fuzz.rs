//! Property tests: the evidence decoder, SPDM report parser, RIM parser, certificate-chain
//! parser and the verifier never panic on arbitrary or mutated input, and mutated signed data
//! never verifies.

use attest::canonical;
use attest::ear::Status;
use attest::evidence::Evidence;
use attest::nvidia::chain::CertChain;
use attest::nvidia::spdm::SpdmReport;
use attest::rim::Rim;
use attest::verifier::{NonceRegistry, ReferenceValues, Verifier, VerifierConfig};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

const DIR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/conformance/nvtrust-samples/"
);

fn sample_report() -> Vec<u8> {
    let text = std::fs::read_to_string(format!("{DIR}hopperAttestationReport.txt")).unwrap();
    hex::decode(text.trim()).unwrap()
}

fn sample_rim() -> String {
    std::fs::read_to_string(format!("{DIR}1010_0200_882_96005E0001_test_no_gpu.swidtag")).unwrap()
}

fn verifier() -> Verifier {
    let ea = attest::identity::EnrollmentAuthority::from_seed(&[1; 32]);
    let mut measurements = BTreeMap::new();
    measurements.insert("kernel".to_string(), [7u8; 32]);
    Verifier::new(VerifierConfig {
        enrollment_authorities: vec![ea.verifying_key()],
        revoked_nodes: BTreeSet::new(),
        nvidia_roots: vec![],
        reference: ReferenceValues {
            image: attest::manifest::ImageManifest {
                name: "x".into(),
                version: "1".into(),
                measurements,
                components: Default::default(),
            },
            gpu_rims: vec![],
        },
        min_gpus: 0,
        require_gpu_reports: false,
        require_tpm_ek: false,
        max_age: 60,
        max_clock_skew: 5,
        signing_key: ed25519_dalek::SigningKey::from_bytes(&[2; 32]),
    })
    .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn evidence_decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let _ = Evidence::from_bytes(&bytes);
        let _ = canonical::decode_value(&bytes);
    }

    #[test]
    fn evidence_decoder_on_json_like_text(s in "[{}\\[\\]\",:a-z0-9 ]{0,300}") {
        let _ = Evidence::from_bytes(s.as_bytes());
    }

    #[test]
    fn appraise_never_panics_and_never_affirms_garbage(
        bytes in proptest::collection::vec(any::<u8>(), 0..1024)
    ) {
        let v = verifier();
        let mut reg = NonceRegistry::new(60);
        reg.issue([3; 32], 100).unwrap();
        let ar = v.appraise(&bytes, &[3; 32], 100, &mut reg).unwrap();
        prop_assert_eq!(ar.status(), Status::Contraindicated);
    }

    #[test]
    fn spdm_parser_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..4200)) {
        let _ = SpdmReport::parse(&bytes);
    }

    #[test]
    fn spdm_parser_on_mutated_sample(
        edits in proptest::collection::vec((0usize..4117, any::<u8>()), 1..8),
        cut in 0usize..4200,
    ) {
        let mut bytes = sample_report();
        for (pos, val) in &edits {
            bytes[*pos] = *val;
        }
        let _ = SpdmReport::parse(&bytes);
        bytes.truncate(cut);
        let _ = SpdmReport::parse(&bytes);
    }

    #[test]
    fn rim_parser_never_panics(s in ".{0,400}") {
        let _ = Rim::parse(&s);
    }

    #[test]
    fn rim_parser_on_mutated_sample(pos in 0usize..20000, len in 0usize..64, filler in "[<>\"=a-zA-Z0-9 /]{0,16}") {
        let text = sample_rim();
        let start = pos.min(text.len());
        let end = (start + len).min(text.len());
        if text.is_char_boundary(start) && text.is_char_boundary(end) {
            let mutated = format!("{}{}{}", &text[..start], filler, &text[end..]);
            let _ = Rim::parse(&mutated);
            // Whatever the edit, a RIM that still verifies says exactly what was signed.
            if let Ok(rim) = Rim::parse_verified(&mutated, &sample_rim_root(), 1_717_200_000) {
                let original = Rim::parse(&text).unwrap();
                prop_assert_eq!(rim.measurements, original.measurements);
                prop_assert_eq!(rim.colloquial_version, original.colloquial_version);
            }
        }
    }

    #[test]
    fn cert_parser_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..1200)) {
        let _ = CertChain::from_der_list(std::slice::from_ref(&bytes)).map(|c| c.verify(&[bytes], 0));
    }
}

/// NVIDIA's RIM root, the last certificate in the sample RIM's KeyInfo.
fn sample_rim_root() -> Vec<Vec<u8>> {
    use base64::Engine as _;
    let text = sample_rim();
    let last = text.rsplit("<ds:X509Certificate>").next().unwrap();
    let b64: String = last
        .split("</ds:X509Certificate>")
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    vec![base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap()]
}

/// A valid document for the mutation property below.
fn valid_evidence() -> (Verifier, Vec<u8>) {
    use attest::evidence::{EvidenceClaims, EVIDENCE_PROFILE};
    use attest::identity::{EnrollmentAuthority, EnrollmentClaims, NodeKey};
    let ea = EnrollmentAuthority::from_seed(&[1; 32]);
    let node = NodeKey::from_seed(&[9; 32]);
    let enrollment = ea
        .issue(EnrollmentClaims {
            tpm_ak: None,
            tpm_ek_certificate_sha256: None,
            node_public_key: node.public_key(),
            node_name: "n1".into(),
            jurisdiction: "FR".into(),
            facility: "PAR2".into(),
            not_before: 0,
            not_after: 1000,
            authority_public_key: [0; 32],
        })
        .unwrap();
    let mut measurements = BTreeMap::new();
    measurements.insert("kernel".to_string(), [7u8; 32]);
    let claims = EvidenceClaims {
        tpm: None,
        eat_profile: EVIDENCE_PROFILE.into(),
        eat_nonce: [3; 32],
        ueid: node.ueid().to_vec(),
        enrollment,
        iat: 100,
        measurements,
        submods: vec![],
    };
    (
        verifier(),
        Evidence::sign(claims, &node).unwrap().to_bytes().unwrap(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn any_change_to_valid_evidence_is_never_affirming(pos in any::<prop::sample::Index>(), val in any::<u8>()) {
        let (v, bytes) = valid_evidence();
        let mut reg = NonceRegistry::new(60);
        reg.issue([3; 32], 100).unwrap();
        let ok = v.appraise(&bytes, &[3; 32], 100, &mut reg).unwrap();
        prop_assert_eq!(ok.status(), Status::Affirming);
        let i = pos.index(bytes.len());
        prop_assume!(bytes[i] != val);
        let mut m = bytes.clone();
        m[i] = val;
        let mut reg = NonceRegistry::new(60);
        reg.issue([3; 32], 100).unwrap();
        let ar = v.appraise(&m, &[3; 32], 100, &mut reg).unwrap();
        prop_assert_eq!(ar.status(), Status::Contraindicated);
    }
}
