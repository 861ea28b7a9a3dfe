//! hostd's evidence with a real software TPM (swtpm): the quote it carries makes the attest
//! verifier affirm against a manifest holding the TPM's PCR 11, a changed PCR 11 is named in
//! the refusal, and a quote from a TPM the enrollment does not bind is refused.

use attest::ear::{AttestationResult, Status};
use attest::identity::{EnrollmentAuthority, EnrollmentCertificate, EnrollmentClaims, NodeKey};
use attest::manifest::ImageManifest;
use attest::verifier::{NonceRegistry, ReferenceValues, Verifier, VerifierConfig};
use ed25519_dalek::SigningKey;
use hostd::attestation::{check_tpm_enrollment, AttestationError, Attester, SharedTpm};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use tpm::swtpm::Swtpm;

const NOW: u64 = 1_800_000_000;

/// The node's attester (node key `[2; 32]`, its key file in `dir`), enrolled with `ak`, quoting
/// with `sw`.
fn enrolled_attester(dir: &std::path::Path, sw: &Swtpm, ak: Option<Vec<u8>>) -> Attester {
    let node = NodeKey::from_seed(&[2; 32]);
    let enrollment = enrollment(&node, ak);
    Attester::from_parts(
        node,
        dir.join("node.key"),
        Some(enrollment),
        Some(shared(sw)),
    )
}

fn enrollment(node: &NodeKey, tpm_ak: Option<Vec<u8>>) -> EnrollmentCertificate {
    EnrollmentAuthority::from_seed(&[1; 32])
        .issue(EnrollmentClaims {
            node_public_key: node.public_key(),
            node_name: "node-hyd-01".into(),
            jurisdiction: "IN-TG".into(),
            facility: "HYD1".into(),
            not_before: NOW - 60,
            not_after: NOW + 60,
            authority_public_key: [0; 32],
            tpm_ak,
            tpm_ek_certificate_sha256: None,
        })
        .unwrap()
}

fn verifier(pcr11: [u8; 32]) -> Verifier {
    let release = SigningKey::from_bytes(&[3; 32]);
    let manifest = ImageManifest {
        name: "sovereign-host".into(),
        version: "0.1.0".into(),
        measurements: BTreeMap::from([("pcr.11".to_string(), pcr11)]),
        components: Default::default(),
    }
    .sign(&release)
    .unwrap();
    Verifier::new(VerifierConfig {
        enrollment_authorities: vec![EnrollmentAuthority::from_seed(&[1; 32]).verifying_key()],
        revoked_nodes: BTreeSet::new(),
        nvidia_roots: vec![],
        reference: ReferenceValues::from_signed_manifest(
            &manifest,
            &[release.verifying_key()],
            vec![],
        )
        .unwrap(),
        min_gpus: 0,
        require_gpu_reports: false,
        require_tpm_ek: false,
        max_age: 300,
        max_clock_skew: 30,
        signing_key: SigningKey::from_bytes(&[4; 32]),
    })
    .unwrap()
}

fn shared(sw: &Swtpm) -> SharedTpm {
    Mutex::new(Box::new(sw.connect().unwrap()))
}

/// hostd's evidence for a fresh nonce, appraised.
fn attest(attester: &Attester, v: &Verifier, nonce: [u8; 32]) -> AttestationResult {
    let collected = attester
        .build_evidence(nonce, NOW, BTreeMap::new(), vec![], vec![])
        .unwrap();
    assert!(collected.notes.is_empty(), "{:?}", collected.notes);
    let mut nonces = NonceRegistry::new(60);
    nonces.issue(nonce, NOW).unwrap();
    v.appraise(&collected.evidence, &nonce, NOW, &mut nonces)
        .unwrap()
}

#[test]
fn evidence_with_a_swtpm_quote_is_appraised_by_pcr_11() {
    let dir = tempfile::tempdir().unwrap();
    let sw = Swtpm::start(dir.path()).unwrap();
    let (ak, pcr11) = {
        let mut t = sw.connect().unwrap();
        (
            tpm::ak_public(&mut t).unwrap(),
            tpm::pcr_read(&mut t).unwrap()[&11],
        )
    };
    let attester = enrolled_attester(dir.path(), &sw, Some(ak.clone()));
    let v = verifier(pcr11);
    let ar = attest(&attester, &v, [0x51; 32]);
    assert_eq!(ar.status(), Status::Affirming, "{:?}", ar.result.reasons);

    // The UKI changes: PCR 11 is extended (by another connection; swtpm serves one at a time).
    drop(attester);
    tpm::pcr_extend(&mut sw.connect().unwrap(), 11, &[0x99; 32]).unwrap();
    let attester = enrolled_attester(dir.path(), &sw, Some(ak));
    let ar = attest(&attester, &v, [0x52; 32]);
    assert_eq!(ar.status(), Status::Contraindicated);
    let r = ar
        .result
        .reasons
        .iter()
        .find(|r| r.code == "measurement-mismatch")
        .unwrap_or_else(|| panic!("{:?}", ar.result.reasons));
    assert!(r.detail.starts_with("pcr.11:"), "{}", r.detail);
    assert_eq!(r.claim, "executables");
}

/// The enrollment binds TPM A's AK; the node quotes with TPM B (a node key moved to other
/// hardware, or another TPM put in): B's quote does not verify with A's AK.
/// The firmware's event log goes with each quote, as it is on the node; without one the
/// evidence says why.
#[test]
fn the_event_log_goes_with_the_quote() {
    let dir = tempfile::tempdir().unwrap();
    let sw = Swtpm::start(dir.path()).unwrap();
    let ak = tpm::ak_public(&mut sw.connect().unwrap()).unwrap();
    let log = dir.path().join("binary_bios_measurements");
    std::fs::write(&log, b"a firmware's event log").unwrap();
    let attester = enrolled_attester(dir.path(), &sw, Some(ak)).with_event_log(log.clone());
    let evidence = |attester: &Attester| {
        attester
            .build_evidence([0x55; 32], NOW, BTreeMap::new(), vec![], vec![])
            .unwrap()
    };
    let collected = evidence(&attester);
    let claims = attest::evidence::Evidence::verify_document(&collected.evidence)
        .unwrap()
        .claims;
    let quote = claims.tpm.expect("a quote");
    assert_eq!(
        quote.event_log.as_deref(),
        Some(&b"a firmware's event log"[..])
    );
    std::fs::remove_file(&log).unwrap();
    let collected = evidence(&attester);
    assert!(
        collected
            .notes
            .iter()
            .any(|n| n.starts_with("tpm: no event log")),
        "{:?}",
        collected.notes
    );
}

#[test]
fn a_quote_by_another_tpm_than_the_enrolled_one_is_refused() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (sw_a, sw_b) = (
        Swtpm::start(dir_a.path()).unwrap(),
        Swtpm::start(dir_b.path()).unwrap(),
    );
    let ak_a = tpm::ak_public(&mut sw_a.connect().unwrap()).unwrap();
    let pcr11 = tpm::pcr_read(&mut sw_b.connect().unwrap()).unwrap()[&11];
    let attester = enrolled_attester(dir_b.path(), &sw_b, Some(ak_a));
    let ar = attest(&attester, &verifier(pcr11), [0x54; 32]);
    assert_eq!(ar.status(), Status::Contraindicated);
    let codes: Vec<&str> = ar.result.reasons.iter().map(|r| r.code.as_str()).collect();
    assert!(codes.contains(&"tpm-quote-signature-invalid"), "{codes:?}");
    assert!(codes.contains(&"measurement-missing"), "{codes:?}");
}

#[test]
fn a_quote_from_a_tpm_the_enrollment_does_not_bind_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let sw = Swtpm::start(dir.path()).unwrap();
    let pcr11 = tpm::pcr_read(&mut sw.connect().unwrap()).unwrap()[&11];
    let attester = enrolled_attester(dir.path(), &sw, None);
    let ar = attest(&attester, &verifier(pcr11), [0x53; 32]);
    assert_eq!(ar.status(), Status::Contraindicated);
    let codes: Vec<&str> = ar.result.reasons.iter().map(|r| r.code.as_str()).collect();
    assert!(codes.contains(&"tpm-ak-not-enrolled"), "{codes:?}");
}

#[test]
fn hostd_tpm_ak_prints_the_ak_for_enrollment() {
    let dir = tempfile::tempdir().unwrap();
    let sw = Swtpm::start(dir.path()).unwrap();
    let expected = tpm::ak_public(&mut sw.connect().unwrap()).unwrap();
    let run = |socket: &std::path::Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_hostd"))
            .args(["tpm-ak", "--swtpm-socket"])
            .arg(socket)
            .output()
            .unwrap()
    };
    let out = run(sw.socket());
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!("{}\n", hex::encode(&expected))
    );
    let out = run(&dir.path().join("nowhere.sock"));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nowhere.sock"), "{err}");
}

#[test]
fn a_tpm_that_stops_answering_leaves_a_note_and_the_verifier_misses_the_quote() {
    let dir = tempfile::tempdir().unwrap();
    let sw = Swtpm::start(dir.path()).unwrap();
    let ak = tpm::ak_public(&mut sw.connect().unwrap()).unwrap();
    let attester = enrolled_attester(dir.path(), &sw, Some(ak));
    drop(sw); // swtpm is killed: the connection breaks
    let nonce = [0x54; 32];
    let collected = attester
        .build_evidence(nonce, NOW, BTreeMap::new(), vec![], vec![])
        .unwrap();
    assert!(
        collected
            .notes
            .iter()
            .any(|n| n.starts_with("tpm: no quote")),
        "{:?}",
        collected.notes
    );
    let mut nonces = NonceRegistry::new(60);
    nonces.issue(nonce, NOW).unwrap();
    let ar = verifier([0; 32])
        .appraise(&collected.evidence, &nonce, NOW, &mut nonces)
        .unwrap();
    let codes: Vec<&str> = ar.result.reasons.iter().map(|r| r.code.as_str()).collect();
    assert!(codes.contains(&"tpm-quote-missing"), "{codes:?}");
}

#[test]
fn the_start_check_compares_the_enrolled_ak_with_the_tpm() {
    let dir = tempfile::tempdir().unwrap();
    let sw = Swtpm::start(dir.path()).unwrap();
    let node = NodeKey::from_seed(&[2; 32]);
    let ak = tpm::ak_public(&mut sw.connect().unwrap()).unwrap();
    let tpm = shared(&sw);
    assert_eq!(
        check_tpm_enrollment(&tpm, &enrollment(&node, Some(ak))).unwrap(),
        None
    );
    let warning = check_tpm_enrollment(&tpm, &enrollment(&node, None)).unwrap();
    assert!(warning.unwrap().contains("tpm-ak-not-enrolled"));
    // Another TPM's AK (a fresh swtpm state is another TPM).
    let other_dir = tempfile::tempdir().unwrap();
    let other = Swtpm::start(other_dir.path()).unwrap();
    let other_ak = tpm::ak_public(&mut other.connect().unwrap()).unwrap();
    match check_tpm_enrollment(&tpm, &enrollment(&node, Some(other_ak))) {
        Err(e @ AttestationError::TpmAkMismatch { .. }) => {
            assert!(e.to_string().contains("hostd tpm-ak"), "{e}");
        }
        other => panic!("{other:?}"),
    }
}
