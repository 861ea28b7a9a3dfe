//! Evidence → verifier → attestation result, with generated keys and a simulated GPU.

use attest::canonical;
use attest::ear::{tier, AttestationResult, EarError, RequirementError, Status};
use attest::evidence::{
    gpu_nonce, CcMode, Evidence, EvidenceClaims, EvidenceError, GpuClaims, GpuReport, HexBytes,
    EVIDENCE_CONTEXT, EVIDENCE_PROFILE,
};
use attest::identity::{EnrollmentAuthority, EnrollmentCertificate, EnrollmentClaims, NodeKey};
use attest::manifest::{ImageManifest, ManifestError, SignedImageManifest};
use attest::nvidia::chain::CertChain;
use attest::nvidia::sim::{ReportSpec, SimGpu, SimRimSigner};
use attest::nvidia::DeviceIdentity;
use attest::rim::Rim;
use attest::verifier::{
    GpuSetFinding, NonceError, NonceRegistry, ReferenceValues, Verifier, VerifierConfig,
};
use ed25519_dalek::{Signer, SigningKey};
use sha2::{Digest, Sha256, Sha384};
use std::collections::{BTreeMap, BTreeSet};

const NOW: u64 = 1_800_000_000;
const DAY: u64 = 86_400;
const UUID: &str = "GPU-11111111-2222-3333-4444-555555555555";
const DRIVER: &str = "550.90.07";
const VBIOS_RAW: [u8; 8] = [0x00, 0x9f, 0x00, 0x96, 0x01, 0x00, 0x00, 0x00];
const VBIOS: &str = "96.00.9F.00.01";

fn sha(s: &str) -> [u8; 32] {
    Sha256::digest(s.as_bytes()).into()
}

fn gpu_value(i: u8) -> Vec<u8> {
    Sha384::digest([i]).to_vec()
}

fn image_measurements() -> BTreeMap<String, [u8; 32]> {
    [
        "kernel",
        "initrd",
        "cmdline",
        "hostd",
        "hostd.config",
        "policy",
    ]
    .into_iter()
    .map(|n| (n.to_string(), sha(n)))
    .collect()
}

/// A RIM document in NVIDIA's SWID shape with the given active `(rim index, value)` pairs.
fn rim_xml(version: &str, entries: &[(u32, Vec<Vec<u8>>)]) -> String {
    let mut res = String::new();
    for (idx, alts) in entries {
        let hashes: String = alts
            .iter()
            .enumerate()
            .map(|(i, h)| format!(" ns2:Hash{i}=\"{}\"", hex::encode(h)))
            .collect();
        res.push_str(&format!(
            "<ns0:Resource type=\"Measurement\" index=\"{idx}\" active=\"True\" alternatives=\"{}\"{hashes} name=\"m{idx}\" size=\"48\"/>\n",
            alts.len()
        ));
    }
    format!(
        r#"<SoftwareIdentity xmlns="http://standards.iso.org/iso/19770/-2/2015/schema.xsd" xmlns:ns0="http://standards.iso.org/iso/19770/-2/2015/schema.xsd" xmlns:ns2="http://www.w3.org/2001/04/xmlenc#sha384" name="GH100" version="1.0" tagId="test-{version}">
<ns0:Meta colloquialVersion="{version}" product="GH100" edition="GPU"/>
<ns0:Payload>
{res}</ns0:Payload>
</SoftwareIdentity>"#
    )
}

struct Fx {
    ea: EnrollmentAuthority,
    node: NodeKey,
    enrollment: EnrollmentCertificate,
    release: SigningKey,
    gpu: &'static SimGpu,
    verifier_key: SigningKey,
}

/// Building the simulated chain costs three P-384 signatures (slow in debug builds): share it.
fn sim_gpu() -> &'static SimGpu {
    static GPU: std::sync::OnceLock<SimGpu> = std::sync::OnceLock::new();
    GPU.get_or_init(|| SimGpu::new(b"gpu-0", NOW - 400 * DAY, NOW + 3650 * DAY).unwrap())
}

/// Six simulated GPUs, each a device of its own (own chain, own keys); the first is
/// [`sim_gpu`].
fn sim_fleet() -> Vec<&'static SimGpu> {
    static MORE: std::sync::OnceLock<Vec<SimGpu>> = std::sync::OnceLock::new();
    let more = MORE.get_or_init(|| {
        (1..6)
            .map(|i| {
                let seed = format!("gpu-{i}");
                SimGpu::new(seed.as_bytes(), NOW - 400 * DAY, NOW + 3650 * DAY).unwrap()
            })
            .collect()
    });
    std::iter::once(sim_gpu()).chain(more).collect()
}

/// The simulated RIM publisher (valid around NOW) and one whose certificates expired.
fn rim_signer(expired: bool) -> &'static SimRimSigner {
    static VALID: std::sync::OnceLock<SimRimSigner> = std::sync::OnceLock::new();
    static EXPIRED: std::sync::OnceLock<SimRimSigner> = std::sync::OnceLock::new();
    if expired {
        EXPIRED.get_or_init(|| {
            SimRimSigner::new(b"rim-old", NOW - 800 * DAY, NOW - 400 * DAY).unwrap()
        })
    } else {
        VALID.get_or_init(|| SimRimSigner::new(b"rim", NOW - 400 * DAY, NOW + 3650 * DAY).unwrap())
    }
}

/// A RIM signed by `signer` and loaded, at `at`, the only way reference values may be:
/// verified.
fn signed_rim(signer: &SimRimSigner, at: u64, xml: &str) -> Rim {
    let signed = signer.sign(xml).unwrap();
    Rim::parse_verified(&signed, &[signer.root_der().to_vec()], at).unwrap()
}

fn enrollment_claims(node: &NodeKey, not_before: u64, not_after: u64) -> EnrollmentClaims {
    EnrollmentClaims {
        tpm_ak: None,
        tpm_ek_certificate_sha256: None,
        node_public_key: node.public_key(),
        node_name: "node-fra-01".into(),
        jurisdiction: "DE-HE".into(),
        facility: "FRA1".into(),
        not_before,
        not_after,
        authority_public_key: [0; 32],
    }
}

fn fx() -> Fx {
    let ea = EnrollmentAuthority::from_seed(&[1; 32]);
    let node = NodeKey::from_seed(&[2; 32]);
    let enrollment = ea
        .issue(enrollment_claims(&node, NOW - 30 * DAY, NOW + 365 * DAY))
        .unwrap();
    Fx {
        ea,
        node,
        enrollment,
        release: SigningKey::from_bytes(&[3; 32]),
        gpu: sim_gpu(),
        verifier_key: SigningKey::from_bytes(&[4; 32]),
    }
}

impl Fx {
    fn rims(&self) -> Vec<Rim> {
        let signer = rim_signer(false);
        vec![
            signed_rim(
                signer,
                NOW,
                &rim_xml(
                    VBIOS,
                    &[
                        (0, vec![gpu_value(1)]),
                        (1, vec![vec![0; 48], gpu_value(2)]),
                    ],
                ),
            ),
            signed_rim(signer, NOW, &rim_xml(DRIVER, &[(2, vec![gpu_value(3)])])),
        ]
    }

    fn config(&self, min_gpus: usize) -> VerifierConfig {
        let manifest = ImageManifest {
            name: "sovereign-host".into(),
            version: "1.0.0".into(),
            measurements: image_measurements(),
            components: Default::default(),
        }
        .sign(&self.release)
        .unwrap();
        let reference = ReferenceValues::from_signed_manifest(
            &manifest,
            &[self.release.verifying_key()],
            self.rims(),
        )
        .unwrap();
        VerifierConfig {
            enrollment_authorities: vec![self.ea.verifying_key()],
            revoked_nodes: BTreeSet::new(),
            nvidia_roots: vec![self.gpu.root_der().to_vec()],
            reference,
            min_gpus,
            require_gpu_reports: true,
            require_tpm_ek: false,
            max_age: 300,
            max_clock_skew: 30,
            signing_key: self.verifier_key.clone(),
        }
    }

    fn verifier(&self, min_gpus: usize) -> Verifier {
        Verifier::new(self.config(min_gpus)).unwrap()
    }

    /// A verifier that trusts the roots of every GPU of [`sim_fleet`].
    fn fleet_verifier(&self, min_gpus: usize) -> Verifier {
        let mut cfg = self.config(min_gpus);
        cfg.nvidia_roots = sim_fleet().iter().map(|g| g.root_der().to_vec()).collect();
        Verifier::new(cfg).unwrap()
    }

    fn report_spec(&self, nonce: [u8; 32]) -> ReportSpec {
        ReportSpec {
            nonce,
            responder_nonce: [9; 32],
            measurements: (1..=4).map(|i| (i, gpu_value(i))).collect(),
            driver_version: DRIVER.into(),
            vbios_version: VBIOS_RAW,
            extra_opaque: vec![],
            fwid_override: None,
        }
    }

    fn gpu_claims_with(&self, spec: &ReportSpec) -> GpuClaims {
        self.gpu_claims_on(self.gpu, UUID, spec)
    }

    /// The submodule `uuid` with a report `gpu` signed over `spec`.
    fn gpu_claims_on(&self, gpu: &SimGpu, uuid: &str, spec: &ReportSpec) -> GpuClaims {
        let spdm = gpu.report(spec).unwrap();
        GpuClaims {
            uuid: uuid.into(),
            serial: "1650123456789".into(),
            model: "NVIDIA H100 80GB HBM3".into(),
            vbios_version: VBIOS.into(),
            driver_version: DRIVER.into(),
            cc_mode: CcMode::On,
            report: Some(GpuReport {
                spdm,
                cert_chain: gpu.chain().iter().cloned().map(HexBytes).collect(),
            }),
        }
    }

    fn gpu_claims(&self, verifier_nonce: &[u8; 32]) -> GpuClaims {
        let n = gpu_nonce(verifier_nonce, UUID, &self.node.public_key());
        self.gpu_claims_with(&self.report_spec(n))
    }

    fn claims(&self, nonce: [u8; 32], iat: u64, submods: Vec<GpuClaims>) -> EvidenceClaims {
        EvidenceClaims {
            tpm: None,
            eat_profile: EVIDENCE_PROFILE.into(),
            eat_nonce: nonce,
            ueid: self.node.ueid().to_vec(),
            enrollment: self.enrollment.clone(),
            iat,
            measurements: {
                let mut m = image_measurements();
                m.insert("ledger.checkpoint".into(), sha("checkpoint 42"));
                m
            },
            submods,
        }
    }

    fn evidence(&self, nonce: [u8; 32], iat: u64, gpus: bool) -> Vec<u8> {
        let submods = if gpus {
            vec![self.gpu_claims(&nonce)]
        } else {
            vec![]
        };
        Evidence::sign(self.claims(nonce, iat, submods), &self.node)
            .unwrap()
            .to_bytes()
            .unwrap()
    }

    /// Evidence answering `nonce` at NOW with these GPUs, signed by the node.
    fn signed(&self, nonce: [u8; 32], gpus: Vec<GpuClaims>) -> Vec<u8> {
        Evidence::sign(self.claims(nonce, NOW, gpus), &self.node)
            .unwrap()
            .to_bytes()
            .unwrap()
    }
}

impl Fx {
    /// Appraise, with `v`, fresh evidence (with or without the GPU) answering an issued
    /// `nonce`, at NOW.
    fn appraise_fresh(&self, v: &Verifier, nonce: [u8; 32], gpus: bool) -> AttestationResult {
        v.appraise(
            &self.evidence(nonce, NOW, gpus),
            &nonce,
            NOW,
            &mut issued(nonce),
        )
        .unwrap()
    }
}

fn issued(nonce: [u8; 32]) -> NonceRegistry {
    let mut reg = NonceRegistry::new(120);
    reg.issue(nonce, NOW - 5).unwrap();
    reg
}

/// Appraise fresh one-GPU evidence answering `nonce` with a verifier built from `cfg`.
fn appraise_gpu_evidence(f: &Fx, cfg: VerifierConfig, nonce: [u8; 32]) -> AttestationResult {
    f.appraise_fresh(&Verifier::new(cfg).unwrap(), nonce, true)
}

fn codes(ar: &AttestationResult) -> Vec<&str> {
    ar.result.reasons.iter().map(|r| r.code.as_str()).collect()
}

fn assert_contra(ar: &AttestationResult, code: &str) {
    assert_eq!(
        ar.status(),
        Status::Contraindicated,
        "reasons: {:?}",
        ar.result.reasons
    );
    assert!(
        codes(ar).contains(&code),
        "expected {code}, got {:?}",
        ar.result.reasons
    );
}

#[test]
fn happy_path_without_gpu_is_affirming_and_signed() {
    let f = fx();
    let v = f.verifier(0);
    let nonce = [0x42; 32];
    let bytes = f.evidence(nonce, NOW - 2, false);
    let ar = v.appraise(&bytes, &nonce, NOW, &mut issued(nonce)).unwrap();
    assert_eq!(ar.status(), Status::Affirming, "{:?}", ar.result.reasons);
    assert!(ar.result.reasons.is_empty());
    assert_eq!(ar.result.trust_vector.instance_identity, tier::AFFIRMING);
    assert_eq!(ar.result.trust_vector.executables, tier::AFFIRMING);
    assert_eq!(ar.result.trust_vector.configuration, tier::AFFIRMING);
    assert_eq!(ar.result.trust_vector.hardware, tier::NONE);
    assert_eq!(ar.result.eat_nonce, nonce);
    assert_eq!(
        ar.result.evidence_digest,
        <[u8; 32]>::from(Sha256::digest(&bytes))
    );
    let node = ar.result.node.as_ref().unwrap();
    assert_eq!(node.jurisdiction, "DE-HE");
    assert_eq!(node.node_name, "node-fra-01");
    ar.verify_result_signature(&[v.verifying_key()]).unwrap();
    // Round trip through canonical bytes keeps the signature valid.
    let again = AttestationResult::from_bytes(&ar.to_bytes().unwrap()).unwrap();
    again.verify_result_signature(&[v.verifying_key()]).unwrap();
    // Policy requirement "affirming, younger than 60 s".
    ar.check_affirming_within(NOW + 10, 60).unwrap();
    assert_eq!(
        ar.check_affirming_within(NOW + 100, 60),
        Err(RequirementError::TooOld {
            age: 100,
            max_age: 60
        })
    );
}

#[test]
fn happy_path_with_gpu_report_is_affirming() {
    let f = fx();
    let v = f.verifier(1);
    let nonce = [0x43; 32];
    let bytes = f.evidence(nonce, NOW, true);
    let ar = v.appraise(&bytes, &nonce, NOW, &mut issued(nonce)).unwrap();
    assert_eq!(ar.status(), Status::Affirming, "{:?}", ar.result.reasons);
    assert_eq!(ar.result.trust_vector.hardware, tier::AFFIRMING);
    // The release found running is named in the signed result, and survives encoding.
    let image = ar.result.image.as_ref().expect("executables matched");
    assert_eq!(
        (image.name.as_str(), image.version.as_str()),
        ("sovereign-host", "1.0.0")
    );
    let back = AttestationResult::from_bytes(&ar.to_bytes().unwrap()).unwrap();
    assert_eq!(back, ar);
    back.verify_result_signature(&[f.verifier_key.verifying_key()])
        .unwrap();
}

#[test]
fn result_signature_tampering_and_unknown_verifier_fail() {
    let f = fx();
    let v = f.verifier(0);
    let nonce = [0x44; 32];
    let ar = f.appraise_fresh(&v, nonce, false);
    let mut forged = ar.clone();
    forged.result.status = Status::Contraindicated;
    forged.result.trust_vector.hardware = tier::CONTRAINDICATED;
    assert_eq!(
        forged.verify_result_signature(&[v.verifying_key()]),
        Err(EarError::BadSignature)
    );
    let other = SigningKey::from_bytes(&[99; 32]).verifying_key();
    assert!(matches!(
        ar.verify_result_signature(&[other]),
        Err(EarError::UnknownVerifier(_))
    ));
    // A status not following from the vector is caught even if re-signed by the verifier.
    let mut claims = ar.result.clone();
    claims.status = Status::Warning;
    let inconsistent = claims.sign(&f.verifier_key).unwrap();
    assert_eq!(
        inconsistent.verify_result_signature(&[v.verifying_key()]),
        Err(EarError::Inconsistent)
    );
}

#[test]
fn wrong_nonce_is_contraindicated() {
    let f = fx();
    let v = f.verifier(0);
    let expected = [0x45; 32];
    let bytes = f.evidence([0x46; 32], NOW, false);
    let ar = v
        .appraise(&bytes, &expected, NOW, &mut issued(expected))
        .unwrap();
    assert_contra(&ar, "nonce-mismatch");
    assert_eq!(
        ar.result.trust_vector.instance_identity,
        tier::CONTRAINDICATED
    );
}

#[test]
fn reused_unknown_and_expired_nonces_are_rejected() {
    let f = fx();
    let v = f.verifier(0);
    let nonce = [0x47; 32];
    let bytes = f.evidence(nonce, NOW, false);
    let mut reg = issued(nonce);
    assert_eq!(
        v.appraise(&bytes, &nonce, NOW, &mut reg).unwrap().status(),
        Status::Affirming
    );
    let second = v.appraise(&bytes, &nonce, NOW + 1, &mut reg).unwrap();
    assert_contra(&second, "nonce-reused");
    // Never issued.
    let never = v
        .appraise(&bytes, &nonce, NOW, &mut NonceRegistry::new(120))
        .unwrap();
    assert_contra(&never, "nonce-unknown");
    // Issued but answered after its lifetime.
    let mut reg = NonceRegistry::new(10);
    reg.issue(nonce, NOW - 100).unwrap();
    let late = v
        .appraise(&f.evidence(nonce, NOW, false), &nonce, NOW, &mut reg)
        .unwrap();
    assert_contra(&late, "nonce-expired");
}

#[test]
fn replay_of_old_evidence_fails() {
    let f = fx();
    let v = f.verifier(0);
    let old_nonce = [0x48; 32];
    let old = f.evidence(old_nonce, NOW, false);
    let mut reg = NonceRegistry::new(120);
    reg.issue(old_nonce, NOW).unwrap();
    assert_eq!(
        v.appraise(&old, &old_nonce, NOW, &mut reg)
            .unwrap()
            .status(),
        Status::Affirming
    );
    // An hour later the verifier challenges with a new nonce; the attacker replays the old
    // document.
    let later = NOW + 3600;
    let new_nonce = [0x49; 32];
    reg.issue(new_nonce, later).unwrap();
    let ar = v.appraise(&old, &new_nonce, later, &mut reg).unwrap();
    assert_contra(&ar, "nonce-mismatch");
    assert!(codes(&ar).contains(&"evidence-stale"));
}

#[test]
fn stale_and_future_evidence_are_contraindicated() {
    let f = fx();
    let v = f.verifier(0);
    let nonce = [0x4a; 32];
    let ar = v
        .appraise(
            &f.evidence(nonce, NOW - 301, false),
            &nonce,
            NOW,
            &mut issued(nonce),
        )
        .unwrap();
    assert_contra(&ar, "evidence-stale");
    let ar = v
        .appraise(
            &f.evidence(nonce, NOW + 31, false),
            &nonce,
            NOW,
            &mut issued(nonce),
        )
        .unwrap();
    assert_contra(&ar, "evidence-from-future");
    // Within the skew it is fine.
    let ar = v
        .appraise(
            &f.evidence(nonce, NOW + 30, false),
            &nonce,
            NOW,
            &mut issued(nonce),
        )
        .unwrap();
    assert_eq!(ar.status(), Status::Affirming);
}

#[test]
fn unknown_enrollment_authority_is_unrecognized() {
    let f = fx();
    let v = f.verifier(0);
    let rogue = EnrollmentAuthority::from_seed(&[66; 32]);
    let mut claims = f.claims([0x4b; 32], NOW, vec![]);
    claims.enrollment = rogue
        .issue(enrollment_claims(&f.node, NOW - DAY, NOW + DAY))
        .unwrap();
    let bytes = Evidence::sign(claims, &f.node).unwrap().to_bytes().unwrap();
    let ar = v
        .appraise(&bytes, &[0x4b; 32], NOW, &mut issued([0x4b; 32]))
        .unwrap();
    assert_contra(&ar, "enrollment-unknown-authority");
    assert_eq!(ar.result.trust_vector.instance_identity, tier::UNRECOGNIZED);
    assert!(
        ar.result.node.is_none(),
        "no identity facts from an unverified enrollment"
    );
}

#[test]
fn forged_jurisdiction_breaks_the_enrollment_signature() {
    let f = fx();
    let v = f.verifier(0);
    let mut claims = f.claims([0x4c; 32], NOW, vec![]);
    claims.enrollment.claims.jurisdiction = "US".into();
    let bytes = Evidence::sign(claims, &f.node).unwrap().to_bytes().unwrap();
    let ar = v
        .appraise(&bytes, &[0x4c; 32], NOW, &mut issued([0x4c; 32]))
        .unwrap();
    assert_contra(&ar, "enrollment-signature-invalid");
    assert!(ar.result.node.is_none());
}

#[test]
fn remembered_enrollment_does_not_let_forged_claims_through() {
    let f = fx();
    let v = f.verifier(0);
    let nonce = [0x5a; 32];
    let ar = f.appraise_fresh(&v, nonce, false);
    assert_eq!(ar.status(), Status::Affirming);
    // Same verifier (enrollment now remembered); same signature, different jurisdiction.
    let mut claims = f.claims(nonce, NOW, vec![]);
    claims.enrollment.claims.jurisdiction = "US".into();
    let bytes = Evidence::sign(claims, &f.node).unwrap().to_bytes().unwrap();
    let ar = v.appraise(&bytes, &nonce, NOW, &mut issued(nonce)).unwrap();
    assert_contra(&ar, "enrollment-signature-invalid");
    // A clone starts with an empty cache and still affirms the honest document.
    let ar = v
        .clone()
        .appraise(
            &f.evidence(nonce, NOW, false),
            &nonce,
            NOW,
            &mut issued(nonce),
        )
        .unwrap();
    assert_eq!(ar.status(), Status::Affirming);
}

#[test]
fn revoked_node_is_contraindicated() {
    let f = fx();
    let mut cfg = f.config(0);
    cfg.revoked_nodes.insert(f.node.public_key());
    let v = Verifier::new(cfg).unwrap();
    let nonce = [0x4d; 32];
    let ar = f.appraise_fresh(&v, nonce, false);
    assert_contra(&ar, "node-revoked");
}

#[test]
fn expired_enrollment_is_contraindicated() {
    let f = fx();
    let v = f.verifier(0);
    let mut claims = f.claims([0x4e; 32], NOW, vec![]);
    claims.enrollment =
        f.ea.issue(enrollment_claims(&f.node, NOW - 10 * DAY, NOW - DAY))
            .unwrap();
    let bytes = Evidence::sign(claims, &f.node).unwrap().to_bytes().unwrap();
    let ar = v
        .appraise(&bytes, &[0x4e; 32], NOW, &mut issued([0x4e; 32]))
        .unwrap();
    assert_contra(&ar, "enrollment-expired");
}

#[test]
fn evidence_signed_by_another_nodes_key_fails() {
    let f = fx();
    let v = f.verifier(0);
    let nonce = [0x4f; 32];
    // Node B holds A's enrollment certificate and signs with its own key, following the
    // documented signing input exactly.
    let claims = f.claims(nonce, NOW, vec![]);
    assert_eq!(
        Evidence::sign(claims.clone(), &NodeKey::from_seed(&[77; 32])).unwrap_err(),
        EvidenceError::KeyMismatch
    );
    let other = SigningKey::from_bytes(&[77; 32]);
    let msg = canonical::signing_input(EVIDENCE_CONTEXT, &canonical::encode(&claims).unwrap());
    let forged = Evidence {
        claims,
        signature: other.sign(&msg).to_bytes(),
    };
    let ar = v
        .appraise(&forged.to_bytes().unwrap(), &nonce, NOW, &mut issued(nonce))
        .unwrap();
    assert_contra(&ar, "evidence-signature-invalid");
    // The same construction with A's key verifies: the documented encoding is what is signed.
    let a = SigningKey::from_bytes(&[2; 32]);
    let honest = Evidence {
        claims: forged.claims.clone(),
        signature: a.sign(&msg).to_bytes(),
    };
    assert_eq!(honest.to_bytes().unwrap(), f.evidence(nonce, NOW, false));
}

#[test]
fn tampered_measurement_in_signed_evidence_fails() {
    let f = fx();
    let v = f.verifier(0);
    let nonce = [0x50; 32];
    let bytes = f.evidence(nonce, NOW, false);
    let kernel_hex = hex::encode(sha("kernel"));
    let text = String::from_utf8(bytes).unwrap();
    let mut tampered_hex = kernel_hex.clone();
    tampered_hex.replace_range(
        0..1,
        if kernel_hex.starts_with('0') {
            "1"
        } else {
            "0"
        },
    );
    let tampered = text.replacen(&kernel_hex, &tampered_hex, 1);
    assert_ne!(tampered, text);
    let ar = v
        .appraise(tampered.as_bytes(), &nonce, NOW, &mut issued(nonce))
        .unwrap();
    assert_contra(&ar, "evidence-signature-invalid");
}

#[test]
fn measurement_mismatch_and_missing_are_contraindicated() {
    let f = fx();
    let v = f.verifier(0);
    let nonce = [0x51; 32];
    let mut claims = f.claims(nonce, NOW, vec![]);
    claims
        .measurements
        .insert("kernel".into(), sha("evil kernel"));
    claims.measurements.remove("hostd.config");
    let bytes = Evidence::sign(claims, &f.node).unwrap().to_bytes().unwrap();
    let ar = v.appraise(&bytes, &nonce, NOW, &mut issued(nonce)).unwrap();
    assert_contra(&ar, "measurement-mismatch");
    assert!(codes(&ar).contains(&"measurement-missing"));
    assert_eq!(ar.result.trust_vector.executables, tier::CONTRAINDICATED);
    assert_eq!(ar.result.trust_vector.configuration, tier::CONTRAINDICATED);
    assert_eq!(ar.result.trust_vector.instance_identity, tier::AFFIRMING);
    // No release is vouched for when executables differ; the field is then absent from the
    // signed encoding, not null.
    assert_eq!(ar.result.image, None);
    let text = String::from_utf8(ar.to_bytes().unwrap()).unwrap();
    assert!(!text.contains("\"image\""), "{text}");
    // Only a configuration measurement differing still names the release.
    let mut claims = f.claims(nonce, NOW, vec![]);
    claims.measurements.insert("cmdline".into(), sha("debug"));
    let bytes = Evidence::sign(claims, &f.node).unwrap().to_bytes().unwrap();
    let ar = v.appraise(&bytes, &nonce, NOW, &mut issued(nonce)).unwrap();
    assert_eq!(ar.result.trust_vector.configuration, tier::CONTRAINDICATED);
    assert!(ar.result.image.is_some());
}

#[test]
fn gpu_report_signature_failure_is_contraindicated() {
    let f = fx();
    let v = f.verifier(1);
    let nonce = [0x52; 32];
    let mut gpu = f.gpu_claims(&nonce);
    if let Some(r) = gpu.report.as_mut() {
        r.spdm[60] ^= 0x01; // inside measurement block 1's digest
    }
    let bytes = f.signed(nonce, vec![gpu]);
    let ar = v.appraise(&bytes, &nonce, NOW, &mut issued(nonce)).unwrap();
    assert_contra(&ar, "gpu-report-signature-invalid");
    assert_eq!(ar.result.trust_vector.hardware, tier::CONTRAINDICATED);
}

#[test]
fn gpu_report_with_reused_or_underived_nonce_fails() {
    let f = fx();
    let v = f.verifier(1);
    let nonce = [0x53; 32];
    // The GPU signed the verifier nonce itself instead of the derived one.
    let gpu = f.gpu_claims_with(&f.report_spec(nonce));
    let bytes = f.signed(nonce, vec![gpu]);
    let ar = v.appraise(&bytes, &nonce, NOW, &mut issued(nonce)).unwrap();
    assert_contra(&ar, "gpu-nonce-mismatch");
    // A GPU report from an earlier challenge, pasted into fresh evidence.
    let old = f.gpu_claims(&[0x01; 32]);
    let bytes = f.signed(nonce, vec![old]);
    let ar = v.appraise(&bytes, &nonce, NOW, &mut issued(nonce)).unwrap();
    assert_contra(&ar, "gpu-nonce-mismatch");
}

#[test]
fn gpu_fwid_mismatch_and_untrusted_root_fail() {
    let f = fx();
    let v = f.verifier(1);
    let nonce = [0x54; 32];
    let mut spec = f.report_spec(gpu_nonce(&nonce, UUID, &f.node.public_key()));
    spec.fwid_override = Some([0xAB; 48]);
    let gpu = f.gpu_claims_with(&spec);
    let bytes = f.signed(nonce, vec![gpu]);
    let ar = v.appraise(&bytes, &nonce, NOW, &mut issued(nonce)).unwrap();
    assert_contra(&ar, "gpu-fwid-mismatch");

    let mut cfg = f.config(1);
    cfg.nvidia_roots = vec![SimGpu::new(b"someone else", 0, NOW * 2)
        .unwrap()
        .root_der()
        .to_vec()];
    let v = Verifier::new(cfg).unwrap();
    let ar = f.appraise_fresh(&v, nonce, true);
    assert_contra(&ar, "gpu-root-untrusted");
    assert_eq!(ar.result.trust_vector.hardware, tier::UNRECOGNIZED);
}

#[test]
fn missing_gpu_is_contraindicated() {
    let f = fx();
    let v = f.verifier(2);
    let nonce = [0x55; 32];
    let ar = f.appraise_fresh(&v, nonce, true);
    assert_contra(&ar, "gpu-missing");
}

#[test]
fn gpu_without_report_warns_or_fails_by_config() {
    let f = fx();
    let nonce = [0x56; 32];
    let mut gpu = f.gpu_claims(&nonce);
    gpu.report = None;
    let bytes = f.signed(nonce, vec![gpu]);
    let ar = f
        .verifier(1)
        .appraise(&bytes, &nonce, NOW, &mut issued(nonce))
        .unwrap();
    assert_contra(&ar, "gpu-report-missing");
    let mut cfg = f.config(0);
    cfg.require_gpu_reports = false;
    let ar = Verifier::new(cfg)
        .unwrap()
        .appraise(&bytes, &nonce, NOW, &mut issued(nonce))
        .unwrap();
    assert_eq!(ar.status(), Status::Warning);
    assert_eq!(codes(&ar), vec!["gpu-not-attestable"]);
    assert!(ar.check_affirming_within(NOW, 60).is_err());
}

#[test]
fn gpu_without_report_does_not_count_toward_min_gpus() {
    let f = fx();
    let nonce = [0x5e; 32];
    let mut gpu = f.gpu_claims(&nonce);
    gpu.report = None;
    let bytes = f.signed(nonce, vec![gpu]);
    let mut cfg = f.config(1);
    cfg.require_gpu_reports = false;
    let ar = Verifier::new(cfg)
        .unwrap()
        .appraise(&bytes, &nonce, NOW, &mut issued(nonce))
        .unwrap();
    assert_contra(&ar, "gpu-missing");
    assert_eq!(codes(&ar), vec!["gpu-not-attestable", "gpu-missing"]);
    let expected = GpuSetFinding::TooFew {
        verified: 0,
        submods: 1,
        required: 1,
    };
    assert_eq!(ar.result.reasons[1].detail, expected.to_string());
    assert_eq!(
        expected.to_string(),
        "0 distinct GPU(s) with a verified report (1 in evidence), 1 required"
    );
}

#[test]
fn gpu_whose_report_fails_does_not_count_toward_min_gpus() {
    let f = fx();
    let nonce = [0x5f; 32];
    let gpu = f.gpu_claims(&[0x01; 32]);
    let bytes = f.signed(nonce, vec![gpu]);
    let ar = f
        .verifier(1)
        .appraise(&bytes, &nonce, NOW, &mut issued(nonce))
        .unwrap();
    assert_eq!(codes(&ar), vec!["gpu-nonce-mismatch", "gpu-missing"]);
}

#[test]
fn gpu_rim_mismatch_and_missing_rim() {
    let f = fx();
    let nonce = [0x57; 32];
    let mut spec = f.report_spec(gpu_nonce(&nonce, UUID, &f.node.public_key()));
    spec.measurements[1].1 = vec![0x77; 48]; // block 2 = RIM index 1
    let gpu = f.gpu_claims_with(&spec);
    let bytes = f.signed(nonce, vec![gpu]);
    let ar = f
        .verifier(1)
        .appraise(&bytes, &nonce, NOW, &mut issued(nonce))
        .unwrap();
    assert_contra(&ar, "gpu-measurement-mismatch");

    let mut cfg = f.config(1);
    cfg.reference
        .gpu_rims
        .retain(|r| r.colloquial_version != DRIVER);
    let ar = appraise_gpu_evidence(&f, cfg, nonce);
    assert_eq!(ar.status(), Status::Warning);
    assert_eq!(codes(&ar), vec!["gpu-rim-unavailable"]);
}

#[test]
fn gpu_claims_disagreeing_with_signed_report_fail() {
    let f = fx();
    let nonce = [0x58; 32];
    let mut gpu = f.gpu_claims(&nonce);
    gpu.driver_version = "999.99".into();
    let bytes = f.signed(nonce, vec![gpu]);
    let ar = f
        .verifier(1)
        .appraise(&bytes, &nonce, NOW, &mut issued(nonce))
        .unwrap();
    assert_contra(&ar, "gpu-claims-inconsistent");
}

#[test]
fn malformed_and_non_canonical_evidence_yield_signed_contraindicated_results() {
    let f = fx();
    let v = f.verifier(0);
    let nonce = [0x59; 32];
    for bad in [b"".to_vec(), b"{}".to_vec(), b"\xff\xfe".to_vec()] {
        let ar = v.appraise(&bad, &nonce, NOW, &mut issued(nonce)).unwrap();
        assert_contra(&ar, "evidence-malformed");
        assert_eq!(ar.result.trust_vector.instance_identity, tier::UNRECOGNIZED);
        ar.verify_result_signature(&[v.verifying_key()]).unwrap();
    }
    // Same content, pretty-printed: not canonical, rejected.
    let good = f.evidence(nonce, NOW, false);
    let value: serde_json::Value = serde_json::from_slice(&good).unwrap();
    let pretty = serde_json::to_vec_pretty(&value).unwrap();
    let ar = v
        .appraise(&pretty, &nonce, NOW, &mut issued(nonce))
        .unwrap();
    assert_contra(&ar, "evidence-malformed");
}

#[test]
fn manifest_signature_is_checked() {
    let f = fx();
    let m = ImageManifest {
        name: "img".into(),
        version: "1".into(),
        measurements: image_measurements(),
        components: Default::default(),
    }
    .sign(&f.release)
    .unwrap();
    let bytes = m.to_bytes().unwrap();
    let parsed = SignedImageManifest::from_bytes(&bytes).unwrap();
    parsed.verify(&[f.release.verifying_key()]).unwrap();
    let mut forged = parsed.clone();
    forged
        .manifest
        .measurements
        .insert("kernel".into(), [0; 32]);
    assert_eq!(
        forged.verify(&[f.release.verifying_key()]),
        Err(ManifestError::BadSignature)
    );
    assert!(matches!(
        parsed.verify(&[SigningKey::from_bytes(&[5; 32]).verifying_key()]),
        Err(ManifestError::UnknownKey(_))
    ));
}

#[test]
fn nonce_registry_lifecycle() {
    let mut reg = NonceRegistry::new(60);
    reg.issue([1; 32], 100).unwrap();
    assert_eq!(reg.issue([1; 32], 101), Err(NonceError::Duplicate));
    reg.consume(&[1; 32], 150).unwrap();
    assert_eq!(reg.consume(&[1; 32], 151), Err(NonceError::Reused));
    assert_eq!(reg.consume(&[2; 32], 151), Err(NonceError::Unknown));
    reg.issue([3; 32], 100).unwrap();
    assert_eq!(reg.consume(&[3; 32], 161), Err(NonceError::Expired));
    reg.prune(161);
    assert!(reg.is_empty());
}

#[test]
fn enrollment_rules_are_enforced() {
    let f = fx();
    let mut c = enrollment_claims(&f.node, NOW, NOW + 1);
    c.jurisdiction = "Germany".into();
    assert!(f.ea.issue(c.clone()).is_err());
    c.jurisdiction = "DE".into();
    c.not_after = NOW - 1;
    assert!(f.ea.issue(c).is_err());
    let cert = EnrollmentCertificate::from_bytes(&f.enrollment.to_bytes().unwrap()).unwrap();
    cert.verify_signature(&[f.ea.verifying_key()]).unwrap();
}

#[test]
fn enrollment_not_yet_valid_is_contraindicated() {
    let f = fx();
    let v = f.verifier(0);
    let nonce = [0x5b; 32];
    let mut claims = f.claims(nonce, NOW, vec![]);
    claims.enrollment =
        f.ea.issue(enrollment_claims(&f.node, NOW + DAY, NOW + 2 * DAY))
            .unwrap();
    let bytes = Evidence::sign(claims, &f.node).unwrap().to_bytes().unwrap();
    let ar = v.appraise(&bytes, &nonce, NOW, &mut issued(nonce)).unwrap();
    assert_contra(&ar, "enrollment-not-yet-valid");
}

#[test]
fn gpu_chain_outside_validity_is_contraindicated() {
    let f = fx();
    let v = f.verifier(1);
    let nonce = [0x5c; 32];
    let bytes = f.evidence(nonce, NOW, true);
    // Verified once (the verifier now remembers the chain), twice (from memory)...
    for _ in 0..2 {
        let ar = v.appraise(&bytes, &nonce, NOW, &mut issued(nonce)).unwrap();
        assert_eq!(ar.status(), Status::Affirming, "{:?}", ar.result.reasons);
    }
    // ...but eleven years later the remembered chain is outside its validity window and the
    // full check reports the expiry.
    let later = NOW + 4000 * DAY;
    let mut claims = f.claims(nonce, later, vec![f.gpu_claims(&nonce)]);
    claims.enrollment =
        f.ea.issue(enrollment_claims(&f.node, NOW, later + DAY))
            .unwrap();
    let late = Evidence::sign(claims, &f.node).unwrap().to_bytes().unwrap();
    let mut reg = NonceRegistry::new(120);
    reg.issue(nonce, later).unwrap();
    let ar = v.appraise(&late, &nonce, later, &mut reg).unwrap();
    assert_contra(&ar, "gpu-chain-invalid");
    assert_ne!(bytes, late);
}

#[test]
fn duplicate_gpu_uuids_are_malformed() {
    let f = fx();
    let nonce = [0x5d; 32];
    let gpu = f.gpu_claims(&nonce);
    let claims = f.claims(nonce, NOW, vec![gpu.clone(), gpu]);
    assert!(matches!(
        Evidence::sign(claims.clone(), &f.node),
        Err(EvidenceError::Invalid { .. })
    ));
    // Signed by hand following the documented input: the verifier still refuses it.
    let key = SigningKey::from_bytes(&[2; 32]);
    let msg = canonical::signing_input(EVIDENCE_CONTEXT, &canonical::encode(&claims).unwrap());
    let doc = Evidence {
        claims,
        signature: key.sign(&msg).to_bytes(),
    };
    let bytes = canonical::encode(&doc).unwrap();
    let ar = f
        .verifier(1)
        .appraise(&bytes, &nonce, NOW, &mut issued(nonce))
        .unwrap();
    assert_contra(&ar, "evidence-malformed");
}

#[test]
fn reference_rims_must_be_signature_verified() {
    let f = fx();
    let mut cfg = f.config(1);
    let unsigned = Rim::parse(&rim_xml(DRIVER, &[(2, vec![gpu_value(3)])])).unwrap();
    cfg.reference.gpu_rims.push(unsigned);
    let err = Verifier::new(cfg).unwrap_err().to_string();
    assert!(err.contains("no verified signature"), "{err}");
    // Signed but only parsed, not verified: refused as well.
    let mut cfg = f.config(1);
    let signed = rim_signer(false)
        .sign(&rim_xml(DRIVER, &[(2, vec![gpu_value(3)])]))
        .unwrap();
    cfg.reference.gpu_rims.push(Rim::parse(&signed).unwrap());
    assert!(Verifier::new(cfg).is_err());
}

#[test]
fn rim_signed_by_an_expired_certificate_is_no_reference() {
    let f = fx();
    let nonce = [0x5a; 32];
    let mut cfg = f.config(1);
    cfg.reference
        .gpu_rims
        .retain(|r| r.colloquial_version != DRIVER);
    // Verified when its signer was valid (a year and a half ago), used today.
    let old = rim_signer(true);
    cfg.reference.gpu_rims.push(signed_rim(
        old,
        NOW - 500 * DAY,
        &rim_xml(DRIVER, &[(2, vec![gpu_value(3)])]),
    ));
    let ar = appraise_gpu_evidence(&f, cfg, nonce);
    assert_eq!(ar.status(), Status::Warning, "{:?}", ar.result.reasons);
    assert_eq!(codes(&ar), vec!["gpu-rim-expired"]);
}

/// Signed evidence answering `nonce` with one submodule per UUID, its report signed by the
/// device beside it in `devices`; the GPUs at `wrong` answer a nonce that is not the derived
/// one.
fn multi_gpu_evidence(
    f: &Fx,
    nonce: [u8; 32],
    uuids: &[String],
    devices: &[&SimGpu],
    wrong: &[usize],
) -> Vec<u8> {
    let gpus: Vec<GpuClaims> = uuids
        .iter()
        .zip(devices)
        .enumerate()
        .map(|(i, (uuid, device))| {
            let mut n = gpu_nonce(&nonce, uuid, &f.node.public_key());
            if wrong.contains(&i) {
                n[0] ^= 1;
            }
            f.gpu_claims_on(device, uuid, &f.report_spec(n))
        })
        .collect();
    f.signed(nonce, gpus)
}

#[test]
fn several_gpus_are_appraised_in_submodule_order_and_deterministically() {
    let f = fx();
    let nonce = [0x5b; 32];
    let uuids: Vec<String> = (0..6)
        .map(|i| format!("GPU-00000000-0000-0000-0000-00000000000{i}"))
        .collect();
    let fleet = sim_fleet();
    let bytes = multi_gpu_evidence(&f, nonce, &uuids, &fleet, &[1, 4]);
    let v = f.fleet_verifier(4);
    let a = v.appraise(&bytes, &nonce, NOW, &mut issued(nonce)).unwrap();
    let b = v.appraise(&bytes, &nonce, NOW, &mut issued(nonce)).unwrap();
    assert_eq!(a, b, "same evidence, same signed result");
    assert_contra(&a, "gpu-nonce-mismatch");
    let details: Vec<&str> = a.result.reasons.iter().map(|r| r.detail.as_str()).collect();
    assert_eq!(details.len(), 2, "{details:?}");
    assert!(details[0].starts_with(&uuids[1]), "{details:?}");
    assert!(details[1].starts_with(&uuids[4]), "{details:?}");
    // The two whose reports failed do not count toward six.
    let a = f
        .fleet_verifier(6)
        .appraise(&bytes, &nonce, NOW, &mut issued(nonce))
        .unwrap();
    assert_eq!(
        codes(&a),
        vec!["gpu-nonce-mismatch", "gpu-nonce-mismatch", "gpu-missing"]
    );
    // All six good, six devices: affirming.
    let nonce = [0x5c; 32];
    let bytes = multi_gpu_evidence(&f, nonce, &uuids, &fleet, &[]);
    let v = f.fleet_verifier(6);
    let ar = v.appraise(&bytes, &nonce, NOW, &mut issued(nonce)).unwrap();
    assert_eq!(ar.status(), Status::Affirming, "{:?}", ar.result.reasons);
}

/// One GPU posing as two: two invented UUIDs, the same GPU asked to sign over the nonce derived
/// from each, the same chain. Each report verifies on its own; together they are refused.
#[test]
fn one_device_in_two_submodules_is_refused() {
    let f = fx();
    let nonce = [0x60; 32];
    let uuids: Vec<String> = (0..2)
        .map(|i| format!("GPU-aaaaaaaa-0000-0000-0000-00000000000{i}"))
        .collect();
    let bytes = multi_gpu_evidence(&f, nonce, &uuids, &[f.gpu, f.gpu], &[]);
    for min_gpus in [1, 2] {
        let ar = f
            .verifier(min_gpus)
            .appraise(&bytes, &nonce, NOW, &mut issued(nonce))
            .unwrap();
        assert_contra(&ar, "gpu-device-duplicate");
        let chain = CertChain::from_der_list(f.gpu.chain()).unwrap();
        let verified = chain.verify(&[f.gpu.root_der().to_vec()], NOW).unwrap();
        let expected = GpuSetFinding::DuplicateDevice {
            uuid: uuids[1].clone(),
            first_uuid: uuids[0].clone(),
            identity: DeviceIdentity::of(&verified)[0].clone(),
        };
        assert_eq!(ar.result.reasons[0].detail, expected.to_string());
        // Nothing else is wrong with either report; one device is one GPU toward min_gpus.
        let want = match min_gpus {
            1 => vec!["gpu-device-duplicate"],
            _ => vec!["gpu-device-duplicate", "gpu-missing"],
        };
        assert_eq!(codes(&ar), want, "{:?}", ar.result.reasons);
    }
}

#[test]
fn duplicate_device_finding_names_both_gpus_and_the_shared_key() {
    let f = DeviceIdentity::DeviceKey(vec![0x02, 0xab]);
    let finding = GpuSetFinding::DuplicateDevice {
        uuid: "GPU-b".into(),
        first_uuid: "GPU-a".into(),
        identity: f,
    };
    assert_eq!(finding.code(), "gpu-device-duplicate");
    assert_eq!(
        finding.to_string(),
        "GPU-b is the device of GPU-a again: both reports are under its device certificate \
         key 02ab"
    );
}
