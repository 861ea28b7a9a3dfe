//! The worked examples in docs/attestation.md, checked byte for byte.

use attest::canonical;
use attest::evidence::{evidence_digest, gpu_nonce, Evidence, EvidenceClaims, EVIDENCE_PROFILE};
use attest::identity::{EnrollmentAuthority, EnrollmentClaims, NodeKey, ENROLLMENT_CONTEXT};
use std::collections::BTreeMap;

fn example() -> (NodeKey, attest::identity::EnrollmentCertificate, Vec<u8>) {
    let ea = EnrollmentAuthority::from_seed(&[1; 32]);
    let node = NodeKey::from_seed(&[2; 32]);
    let cert = ea
        .issue(EnrollmentClaims {
            tpm_ak: None,
            tpm_ek_certificate_sha256: None,
            node_public_key: node.public_key(),
            node_name: "node-fra-01".into(),
            jurisdiction: "DE-HE".into(),
            facility: "FRA1".into(),
            not_before: 1_800_000_000,
            not_after: 1_831_536_000,
            authority_public_key: [0; 32],
        })
        .unwrap();
    let mut measurements = BTreeMap::new();
    measurements.insert("kernel".to_string(), [0x11; 32]);
    let claims = EvidenceClaims {
        tpm: None,
        eat_profile: EVIDENCE_PROFILE.into(),
        eat_nonce: [0x42; 32],
        ueid: node.ueid().to_vec(),
        enrollment: cert.clone(),
        iat: 1_800_000_100,
        measurements,
        submods: vec![],
    };
    let doc = Evidence::sign(claims, &node).unwrap().to_bytes().unwrap();
    (node, cert, doc)
}

const CLAIMS: &str = r#"{"authority_public_key":"8a88e3dd7409f195fd52db2d3cba5d72ca6709bf1d94121bf3748801b40f6f5c","facility":"FRA1","jurisdiction":"DE-HE","node_name":"node-fra-01","node_public_key":"8139770ea87d175f56a35466c34c7ecccb8d8a91b4ee37a25df60f5b8fc9b394","not_after":1831536000,"not_before":1800000000}"#;
const SIGNING_INPUT_HEAD: &str =
    "736f7665726569676e2d686f73742f656e726f6c6c6d656e742f7631007b22617574686f72697479";
const CERT_SIG: &str = "902f996df78d40f4622d9b4228c735bfd8c35117a3b336688c486c5cb404d57ea23b664dad9affb1a7d4bc28cd84a627074b970d4267931d648aabcdafffbb0a";
const NODE_PK: &str = "8139770ea87d175f56a35466c34c7ecccb8d8a91b4ee37a25df60f5b8fc9b394";
const UEID: &str = "016a3803d5f059902a1c6dafbc9ba4729212f7caac08634cc3ae76b27529f03827";
const DOC: &str = r#"{"claims":{"eat_nonce":"4242424242424242424242424242424242424242424242424242424242424242","eat_profile":"tag:sovereign-host.dev,2026:evidence/v1","enrollment":{"claims":{"authority_public_key":"8a88e3dd7409f195fd52db2d3cba5d72ca6709bf1d94121bf3748801b40f6f5c","facility":"FRA1","jurisdiction":"DE-HE","node_name":"node-fra-01","node_public_key":"8139770ea87d175f56a35466c34c7ecccb8d8a91b4ee37a25df60f5b8fc9b394","not_after":1831536000,"not_before":1800000000},"signature":"902f996df78d40f4622d9b4228c735bfd8c35117a3b336688c486c5cb404d57ea23b664dad9affb1a7d4bc28cd84a627074b970d4267931d648aabcdafffbb0a"},"iat":1800000100,"measurements":{"kernel":"1111111111111111111111111111111111111111111111111111111111111111"},"submods":[],"ueid":"016a3803d5f059902a1c6dafbc9ba4729212f7caac08634cc3ae76b27529f03827"},"signature":"86fd7f543362f655f533a2f068b5f896f61865f8f5a9e6880eec13a543a11afe83fba42194badb4394a449f34cc5d08b3b1b0acc5dc6df7323c874be14108107"}"#;
const DIGEST: &str = "c25a0f6f4b16a66312e78ff6f7556cdc630811463937a43d6c474312330df1ba";
const GPU_NONCE: &str = "fb5ac33738aa8f6bec476a94576b4e429f51124c62c3d319d944ca38fbe68516";

#[test]
fn worked_example_matches_the_documentation() {
    let (node, cert, doc) = example();
    let claims = canonical::encode(&cert.claims).unwrap();
    assert_eq!(std::str::from_utf8(&claims).unwrap(), CLAIMS);
    assert_eq!(
        hex::encode(&canonical::signing_input(ENROLLMENT_CONTEXT, &claims)[..40]),
        SIGNING_INPUT_HEAD
    );
    assert_eq!(hex::encode(cert.signature), CERT_SIG);
    assert_eq!(hex::encode(node.public_key()), NODE_PK);
    assert_eq!(hex::encode(node.ueid()), UEID);
    assert_eq!(std::str::from_utf8(&doc).unwrap(), DOC);
    assert_eq!(hex::encode(evidence_digest(&doc)), DIGEST);
    let nonce = gpu_nonce(
        &[0x42; 32],
        "GPU-11111111-2222-3333-4444-555555555555",
        &node.public_key(),
    );
    assert_eq!(hex::encode(nonce), GPU_NONCE);
    // The documented document decodes and verifies.
    Evidence::verify_document(DOC.as_bytes()).unwrap();
}
