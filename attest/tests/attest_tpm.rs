//! TPM quotes in evidence: the verifier takes PCR values only from a quote signed by the
//! attestation key the enrollment binds, and says precisely why it refuses one.

use attest::ear::{tier, AttestationResult, Status};
use attest::evidence::{Evidence, EvidenceClaims, EVIDENCE_PROFILE};
use attest::identity::{
    EnrollmentAuthority, EnrollmentCertificate, EnrollmentClaims, IdentityError, NodeKey,
};
use attest::manifest::ImageManifest;
use attest::tpm::sim::{QuoteFields, SoftAk};
use attest::tpm::{QuoteClaim, AK_TEMPLATE_ATTRIBUTES};
use attest::verifier::{NonceRegistry, ReferenceValues, Verifier, VerifierConfig};
use ed25519_dalek::SigningKey;
use std::collections::{BTreeMap, BTreeSet};

const NOW: u64 = 1_800_000_000;
const NONCE: [u8; 32] = [0x42; 32];
const PCRS: [[u8; 32]; 4] = [[4; 32], [7; 32], [11; 32], [0; 32]];

fn ak() -> SoftAk {
    SoftAk::from_seed(&[0x17; 32]).unwrap()
}

fn node() -> NodeKey {
    NodeKey::from_seed(&[2; 32])
}

fn enrollment(tpm_ak: Option<Vec<u8>>) -> EnrollmentCertificate {
    enrollment_by(&[1; 32], tpm_ak)
}

/// An enrollment issued by the authority of `seed` (the verifier trusts only `[1; 32]`'s).
fn enrollment_by(seed: &[u8; 32], tpm_ak: Option<Vec<u8>>) -> EnrollmentCertificate {
    EnrollmentAuthority::from_seed(seed)
        .issue(claims(tpm_ak))
        .unwrap()
}

fn claims(tpm_ak: Option<Vec<u8>>) -> EnrollmentClaims {
    EnrollmentClaims {
        node_public_key: node().public_key(),
        node_name: "node-fra-01".into(),
        jurisdiction: "DE-HE".into(),
        facility: "FRA1".into(),
        not_before: NOW - 100,
        not_after: NOW + 100,
        authority_public_key: [0; 32],
        tpm_ak,
        tpm_ek_certificate_sha256: None,
    }
}

/// A verifier whose manifest lists `hostd` and the given PCR references.
fn verifier(pcr_refs: &[(&str, [u8; 32])]) -> Verifier {
    Verifier::new(config(pcr_refs)).unwrap()
}

/// [`verifier`]'s configuration.
fn config(pcr_refs: &[(&str, [u8; 32])]) -> VerifierConfig {
    let release = SigningKey::from_bytes(&[3; 32]);
    let mut measurements = BTreeMap::from([("hostd".to_string(), [0xaa; 32])]);
    for (name, v) in pcr_refs {
        measurements.insert(name.to_string(), *v);
    }
    let manifest = ImageManifest {
        name: "sovereign-host".into(),
        version: "1.0.0".into(),
        measurements,
        components: Default::default(),
    }
    .sign(&release)
    .unwrap();
    let reference =
        ReferenceValues::from_signed_manifest(&manifest, &[release.verifying_key()], vec![])
            .unwrap();
    VerifierConfig {
        enrollment_authorities: vec![EnrollmentAuthority::from_seed(&[1; 32]).verifying_key()],
        revoked_nodes: BTreeSet::new(),
        nvidia_roots: vec![],
        reference,
        min_gpus: 0,
        require_gpu_reports: false,
        require_tpm_ek: false,
        max_age: 300,
        max_clock_skew: 30,
        signing_key: SigningKey::from_bytes(&[4; 32]),
    }
}

/// Evidence with `hostd` measured, extra (self-reported) measurements and an optional quote.
fn evidence(
    enrollment: EnrollmentCertificate,
    extra: &[(&str, [u8; 32])],
    tpm: Option<QuoteClaim>,
) -> Vec<u8> {
    let mut measurements = BTreeMap::from([("hostd".to_string(), [0xaa; 32])]);
    for (name, v) in extra {
        measurements.insert(name.to_string(), *v);
    }
    let node = node();
    let claims = EvidenceClaims {
        eat_profile: EVIDENCE_PROFILE.into(),
        eat_nonce: NONCE,
        ueid: node.ueid().to_vec(),
        enrollment,
        iat: NOW,
        measurements,
        submods: vec![],
        tpm,
    };
    Evidence::sign(claims, &node).unwrap().to_bytes().unwrap()
}

fn appraise(v: &Verifier, evidence: &[u8]) -> AttestationResult {
    let mut nonces = NonceRegistry::new(60);
    nonces.issue(NONCE, NOW).unwrap();
    v.appraise(evidence, &NONCE, NOW, &mut nonces).unwrap()
}

fn with_ak() -> EnrollmentCertificate {
    enrollment(Some(ak().public_area()))
}

/// The one reason with `code`, on `claim`, in a contraindicated result.
fn reason<'a>(ar: &'a AttestationResult, code: &str, claim: &str) -> &'a str {
    assert_eq!(
        ar.status(),
        Status::Contraindicated,
        "{:?}",
        ar.result.reasons
    );
    let r = ar
        .result
        .reasons
        .iter()
        .find(|r| r.code == code)
        .unwrap_or_else(|| panic!("no {code} in {:?}", ar.result.reasons));
    assert_eq!(r.claim, claim);
    &r.detail
}

#[test]
fn a_verified_quote_satisfies_pcr_references() {
    let v = verifier(&[("pcr.4", PCRS[0]), ("pcr.7", PCRS[1]), ("pcr.11", PCRS[2])]);
    let ar = appraise(
        &v,
        &evidence(with_ak(), &[], Some(ak().quote(&NONCE, &PCRS))),
    );
    assert_eq!(ar.status(), Status::Affirming, "{:?}", ar.result.reasons);
    assert_eq!(ar.result.trust_vector.hardware, tier::AFFIRMING);
    assert_eq!(ar.result.trust_vector.executables, tier::AFFIRMING);
}

#[test]
fn a_different_pcr_11_is_a_measurement_mismatch_naming_pcr_11() {
    let v = verifier(&[("pcr.11", [0x99; 32])]);
    let ar = appraise(
        &v,
        &evidence(with_ak(), &[], Some(ak().quote(&NONCE, &PCRS))),
    );
    let detail = reason(&ar, "measurement-mismatch", "executables");
    assert!(detail.starts_with("pcr.11:"), "{detail}");
    assert_eq!(ar.result.trust_vector.hardware, tier::AFFIRMING);
}

#[test]
fn self_reported_pcr_values_never_satisfy_references() {
    let v = verifier(&[("pcr.11", PCRS[2])]);
    // No TPM at all: the node's sysfs value is refused.
    let ar = appraise(
        &v,
        &evidence(enrollment(None), &[("pcr.11", PCRS[2])], None),
    );
    let detail = reason(&ar, "measurement-missing", "executables");
    assert!(
        detail.starts_with("pcr.11: no verified TPM quote"),
        "{detail}"
    );
    // A quote says otherwise: the self-reported matching value does not win.
    let other = [PCRS[0], PCRS[1], [0x12; 32], PCRS[3]];
    let ar = appraise(
        &v,
        &evidence(
            with_ak(),
            &[("pcr.11", PCRS[2])],
            Some(ak().quote(&NONCE, &other)),
        ),
    );
    assert!(reason(&ar, "measurement-mismatch", "executables").starts_with("pcr.11:"));
}

#[test]
fn self_reported_pcr_measurements_are_ignored_not_compared() {
    // Evidence may still carry pcr.* (older nodes): without references they change nothing.
    let v = verifier(&[]);
    let ar = appraise(&v, &evidence(enrollment(None), &[("pcr.7", [1; 32])], None));
    assert_eq!(ar.status(), Status::Affirming, "{:?}", ar.result.reasons);
}

#[test]
fn an_enrolled_ak_requires_a_quote() {
    let ar = appraise(&verifier(&[]), &evidence(with_ak(), &[], None));
    reason(&ar, "tpm-quote-missing", "hardware");
}

#[test]
fn a_quote_without_an_enrolled_ak_is_refused() {
    let v = verifier(&[("pcr.11", PCRS[2])]);
    let ar = appraise(
        &v,
        &evidence(enrollment(None), &[], Some(ak().quote(&NONCE, &PCRS))),
    );
    reason(&ar, "tpm-ak-not-enrolled", "hardware");
    // … and its PCR values are not used.
    assert!(reason(&ar, "measurement-missing", "executables").starts_with("pcr.11:"));
}

#[test]
fn a_quote_by_another_key_is_refused() {
    let other = SoftAk::from_seed(&[0x18; 32]).unwrap();
    let ar = appraise(
        &verifier(&[]),
        &evidence(with_ak(), &[], Some(other.quote(&NONCE, &PCRS))),
    );
    reason(&ar, "tpm-quote-signature-invalid", "hardware");
}

#[test]
fn a_quote_for_another_nonce_is_refused() {
    let ar = appraise(
        &verifier(&[]),
        &evidence(with_ak(), &[], Some(ak().quote(&[0x43; 32], &PCRS))),
    );
    let detail = reason(&ar, "tpm-quote-nonce-mismatch", "hardware");
    assert!(detail.contains(&hex::encode([0x43; 32])), "{detail}");
}

#[test]
fn carried_values_that_do_not_hash_to_the_quoted_digest_are_refused() {
    let mut quote = ak().quote(&NONCE, &PCRS);
    quote.pcrs.insert("11".into(), [0x99; 32]);
    let v = verifier(&[("pcr.11", [0x99; 32])]);
    let ar = appraise(&v, &evidence(with_ak(), &[], Some(quote)));
    reason(&ar, "tpm-pcr-digest-mismatch", "hardware");
    assert!(reason(&ar, "measurement-missing", "executables").starts_with("pcr.11:"));
}

#[test]
fn a_quote_over_other_pcrs_is_refused() {
    let mut fields = QuoteFields::honest(&NONCE, &PCRS);
    fields.selection = hex::decode("00000001000b03910800").unwrap(); // adds PCR 0
    let quote = ak().quote_with(&fields, &PCRS);
    let ar = appraise(&verifier(&[]), &evidence(with_ak(), &[], Some(quote)));
    reason(&ar, "tpm-pcr-selection-invalid", "hardware");
}

#[test]
fn signed_garbage_is_a_malformed_quote() {
    let ak = ak();
    let attest = b"not a TPMS_ATTEST".to_vec();
    let mut quote = ak.quote(&NONCE, &PCRS);
    quote.signature = ak.sign(&attest);
    quote.attest = attest;
    let ar = appraise(&verifier(&[]), &evidence(with_ak(), &[], Some(quote)));
    reason(&ar, "tpm-quote-malformed", "hardware");
}

#[test]
fn pcrs_outside_the_quote_are_missing() {
    let v = verifier(&[("pcr.0", [0; 32])]);
    let ar = appraise(
        &v,
        &evidence(with_ak(), &[], Some(ak().quote(&NONCE, &PCRS))),
    );
    let detail = reason(&ar, "measurement-missing", "executables");
    assert!(
        detail.starts_with("pcr.0: not covered by the TPM quote"),
        "{detail}"
    );
}

#[test]
fn enrollment_refuses_an_ak_outside_the_profile() {
    let unrestricted = ak().public_area_with(AK_TEMPLATE_ATTRIBUTES & !(1 << 16));
    let err = EnrollmentAuthority::from_seed(&[1; 32])
        .issue(EnrollmentClaims {
            tpm_ak: Some(unrestricted),
            tpm_ek_certificate_sha256: None,
            ..enrollment(None).claims
        })
        .unwrap_err();
    assert!(
        matches!(
            err,
            IdentityError::InvalidField {
                field: "tpm_ak",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn the_ak_is_encoded_only_when_present_and_round_trips() {
    let without = enrollment(None).to_bytes().unwrap();
    assert!(!String::from_utf8_lossy(&without).contains("tpm_ak"));
    let cert = with_ak();
    let bytes = cert.to_bytes().unwrap();
    let text = String::from_utf8(bytes.clone()).unwrap();
    assert!(text.contains(&format!(
        "\"tpm_ak\":\"{}\"",
        hex::encode(ak().public_area())
    )));
    assert_eq!(EnrollmentCertificate::from_bytes(&bytes).unwrap(), cert);
    // `null` is not the canonical spelling of an absent AK.
    let text = String::from_utf8(without).unwrap();
    let not_before = format!("\"not_before\":{}", NOW - 100);
    assert!(text.contains(&format!("{not_before}}}")));
    let with_null = text.replace(&not_before, &format!("{not_before},\"tpm_ak\":null"));
    assert!(EnrollmentCertificate::from_bytes(with_null.as_bytes()).is_err());
}

#[test]
fn evidence_with_a_quote_round_trips_and_refuses_oversized_quotes() {
    let bytes = evidence(with_ak(), &[], Some(ak().quote(&NONCE, &PCRS)));
    let e = Evidence::verify_document(&bytes).unwrap();
    assert_eq!(e.claims.tpm, Some(ak().quote(&NONCE, &PCRS)));
    let mut claims = e.claims;
    if let Some(q) = claims.tpm.as_mut() {
        q.attest = vec![0; attest::tpm::MAX_TPM_STRUCT_BYTES + 1];
    }
    assert!(Evidence::sign(claims, &node()).is_err());
}

/// An enrollment no configured authority signed binds an AK that is anyone's: its quote, valid
/// as it is, is not appraised, nothing it vouches for counts, and no image is named.
#[test]
fn an_unverified_enrollments_ak_vouches_for_nothing() {
    let forged = enrollment_by(&[9; 32], Some(ak().public_area()));
    let quote = ak().quote(&NONCE, &PCRS);
    let v = verifier(&[("pcr.11", PCRS[2])]);
    let ar = appraise(&v, &evidence(forged, &[], Some(quote)));
    reason(&ar, "tpm-ak-unverified", "hardware");
    assert!(reason(&ar, "measurement-missing", "executables").starts_with("pcr.11:"));
    assert_ne!(ar.result.trust_vector.hardware, tier::AFFIRMING);
    assert!(ar.result.image.is_none(), "{:?}", ar.result.image);
    assert!(ar.result.node.is_none());
}

/// What the firmware started, read from the node's event log once its replay of PCR 4 equals
/// the quoted PCR 4: the UKI and its kernel pass, another application fails, and a log that
/// does not replay to the quote, or no log, proves nothing.
#[test]
fn the_boot_applications_are_read_from_the_event_log_the_quote_vouches_for() {
    use attest::eventlog::sim::LogBuilder;
    use attest::eventlog::EV_EFI_BOOT_SERVICES_APPLICATION as APP;
    use attest::verifier::{boot_applications_digest, BOOT_APPLICATIONS};
    let (uki, kernel) = ([0x55; 32], [0x56; 32]);
    let booted = |first: [u8; 32]| {
        LogBuilder::new()
            .boot_from_disk(first, b"\\EFI\\BOOT\\BOOTX64.EFI")
            .event(4, APP, kernel, b"the kernel systemd-stub loads")
    };
    let quote_of = |log: &LogBuilder, event_log: Option<Vec<u8>>| {
        let pcrs = [log.expected_pcr(4), PCRS[1], PCRS[2], PCRS[3]];
        let mut quote = ak().quote(&NONCE, &pcrs);
        quote.event_log = event_log;
        quote
    };
    let v = verifier(&[(BOOT_APPLICATIONS, boot_applications_digest(&[uki, kernel]))]);
    let run = |quote: QuoteClaim| appraise(&v, &evidence(with_ak(), &[], Some(quote)));

    let good = booted(uki);
    let ar = run(quote_of(&good, Some(good.build())));
    assert_eq!(ar.status(), Status::Affirming, "{:?}", ar.result.reasons);

    let other = booted([0x66; 32]);
    let ar = run(quote_of(&other, Some(other.build())));
    let detail = reason(&ar, "measurement-mismatch", "executables");
    assert!(detail.starts_with(BOOT_APPLICATIONS), "{detail}");

    // The UKI's log sent beside a quote of another boot: the replay does not reach its PCR 4.
    let ar = run(quote_of(&other, Some(good.build())));
    let detail = reason(&ar, "measurement-missing", "executables");
    assert!(
        detail.contains("replay") || detail.contains("PCR 4"),
        "{detail}"
    );

    let ar = run(quote_of(&good, None));
    let detail = reason(&ar, "measurement-missing", "executables");
    assert!(detail.contains("no event log"), "{detail}");

    // A loader started first, then the same UKI and kernel: not what the image boots as.
    let chain = LogBuilder::new()
        .boot_from_disk([0x77; 32], b"loader")
        .event(4, APP, uki, b"uki")
        .event(4, APP, kernel, b"kernel");
    let ar = run(quote_of(&chain, Some(chain.build())));
    reason(&ar, "measurement-mismatch", "executables");
}

/// A command line given in place of the UKI's leaves PCR 11 as the image's but PCR 12 not
/// zero: the manifest's `pcr.12` of zero catches it.
#[test]
fn a_substituted_command_line_shows_in_pcr_12() {
    let v = verifier(&[("pcr.11", PCRS[2]), ("pcr.12", [0; 32])]);
    let ar = appraise(
        &v,
        &evidence(with_ak(), &[], Some(ak().quote(&NONCE, &PCRS))),
    );
    assert_eq!(ar.status(), Status::Affirming, "{:?}", ar.result.reasons);
    let overridden = [PCRS[0], PCRS[1], PCRS[2], [0x12; 32]];
    let ar = appraise(
        &v,
        &evidence(with_ak(), &[], Some(ak().quote(&NONCE, &overridden))),
    );
    let detail = reason(&ar, "measurement-mismatch", "executables");
    assert!(detail.starts_with("pcr.12:"), "{detail}");
}

/// An enrollment that names the checked EK certificate keeps it through its encoding, and the
/// name is refused without an AK to go with it.
#[test]
fn an_ek_certificate_digest_is_kept_and_needs_an_ak() {
    let claims = |tpm_ak: Option<Vec<u8>>| EnrollmentClaims {
        tpm_ek_certificate_sha256: Some([0x5e; 32]),
        ..claims(tpm_ak)
    };
    let authority = EnrollmentAuthority::from_seed(&[1; 32]);
    let cert = authority.issue(claims(Some(ak().public_area()))).unwrap();
    let bytes = cert.to_bytes().unwrap();
    let text = String::from_utf8(bytes.clone()).unwrap();
    assert!(
        text.contains(&format!(
            "\"tpm_ek_certificate_sha256\":\"{}\"",
            "5e".repeat(32)
        )),
        "{text}"
    );
    let back = EnrollmentCertificate::from_bytes(&bytes).unwrap();
    assert_eq!(back.claims.tpm_ek_certificate_sha256, Some([0x5e; 32]));
    let err = authority.issue(claims(None)).unwrap_err();
    assert!(
        err.to_string().contains("tpm_ek_certificate_sha256"),
        "{err}"
    );
}

/// A verifier that requires EK-anchored AKs refuses an AK on the operator's word alone, and a
/// node without one, and affirms the same quote once the enrollment names the EK certificate.
#[test]
fn a_verifier_may_require_the_ak_to_be_anchored_in_an_ek_certificate() {
    let v = Verifier::new(VerifierConfig {
        require_tpm_ek: true,
        ..config(&[("pcr.11", PCRS[2])])
    })
    .unwrap();
    let quote = || Some(ak().quote(&NONCE, &PCRS));
    let ar = appraise(&v, &evidence(with_ak(), &[], quote()));
    let detail = reason(&ar, "tpm-ak-not-anchored", "hardware");
    assert!(detail.contains("EK certificate"), "{detail}");
    let ar = appraise(&v, &evidence(enrollment(None), &[], None));
    reason(&ar, "tpm-ak-not-anchored", "hardware");
    let anchored = EnrollmentAuthority::from_seed(&[1; 32])
        .issue(EnrollmentClaims {
            tpm_ek_certificate_sha256: Some([0x5e; 32]),
            ..claims(Some(ak().public_area()))
        })
        .unwrap();
    let ar = appraise(&v, &evidence(anchored, &[], quote()));
    assert_eq!(ar.status(), Status::Affirming, "{:?}", ar.result.reasons);
}
