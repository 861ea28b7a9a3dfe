//! The verifier: appraises evidence against reference values and produces a signed
//! [`AttestationResult`].
//!
//! Appraisal never fails on bad evidence — every problem becomes a trust-vector value and a
//! [`Reason`] — so relying parties always get a signed answer they can log. The library is
//! pure: the caller passes `now` and drives the [`NonceRegistry`], which remembers issued
//! nonces until they expire so a nonce answers exactly one appraisal.
//!
//! Trust-vector mapping (AR4SI values from [`crate::ear::tier`]):
//!
//! | claim | affirming (2) | warning (32) | contraindicated (96) / unrecognized (97) |
//! |---|---|---|---|
//! | instance-identity | signature, enrollment, nonce, age all fine | — | malformed (97), bad signature, unknown authority (97), revoked, enrollment expired / not yet valid, nonce wrong / unknown / expired / reused, evidence stale or from the future |
//! | executables | every non-configuration reference measurement equal (`pcr.N` against the values of a verified TPM quote) | — | missing or different |
//! | configuration | `cmdline`, `config`, `*.config`, `policy*` measurements equal | — | missing or different |
//! | hardware | every GPU report verified and matching its RIMs; the TPM quote (when an AK is enrolled) verified | GPU not attestable (no report), no RIM for its VBIOS/driver version, RIM signer not valid now | fewer distinct GPUs with a verified report than required, one device in two submodules, report missing when required, chain/signature/FWID/nonce failure, untrusted root (97), RIM mismatch, claims disagree with the signed report; TPM quote missing though an AK is enrolled, quote without an enrolled AK, quote signature/nonce/selection/digest failure |
//!
//! **PCRs.** Evidence measurements named `pcr.*` are ignored: a node that reads its PCRs from
//! sysfs and reports them is only saying what it likes. A reference value `pcr.N` is satisfied
//! only by the value of PCR N in a TPM quote verified with the attestation key the enrollment
//! certificate binds ([`crate::tpm::verify_quote`]). TPM failures go to the `hardware` claim:
//! the TPM is the node's hardware root of trust for its boot measurements, as the GPUs' SPDM
//! reports are for theirs; the boot measurements themselves stay `executables`.

use crate::canonical::CanonicalError;
use crate::ear::{
    tier, AttestationClaims, AttestationResult, ImageReference, NodeIdentity, Reason, Status,
    TrustVector, EAR_PROFILE,
};
use crate::eventlog::{EventLog, EventLogError};
use crate::evidence::{
    evidence_digest, gpu_nonce, Evidence, EvidenceClaims, EvidenceError, GpuClaims, GpuReport,
    HexBytes,
};
use crate::identity::{self, IdentityError};
use crate::manifest::{ImageManifest, ManifestError, SignedImageManifest};
use crate::nvidia::chain::{CertChain, ChainError, VerifiedChain};
use crate::nvidia::spdm::SpdmReport;
use crate::nvidia::{verify_report_with_chain, DeviceIdentity, GpuReportError};
use crate::rim::Rim;
use crate::tpm::{self, TpmError, VerifiedPcrs};
use ed25519_dalek::{SigningKey, VerifyingKey};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Mutex;

/// Why a nonce is not acceptable.
#[derive(Debug, thiserror::Error, PartialEq, Eq, Clone, Copy)]
pub enum NonceError {
    /// `issue` was called twice with the same nonce.
    #[error("nonce already issued")]
    Duplicate,
    /// Never issued (or expired and forgotten).
    #[error("nonce was not issued by this verifier (or expired long ago)")]
    Unknown,
    /// Issued but expired.
    #[error("nonce expired")]
    Expired,
    /// Already used for an appraisal.
    #[error("nonce already used")]
    Reused,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct NonceEntry {
    expires_at: u64,
    used: bool,
}

/// Issued challenge nonces with their expiry, as plain data the caller drives with `now`.
/// The caller generates the random nonces; this only remembers them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NonceRegistry {
    ttl: u64,
    entries: BTreeMap<[u8; 32], NonceEntry>,
}

impl NonceRegistry {
    /// Nonces live `ttl_secs` after issue.
    pub fn new(ttl_secs: u64) -> Self {
        Self {
            ttl: ttl_secs,
            entries: BTreeMap::new(),
        }
    }

    /// Record a freshly generated nonce at `now`.
    pub fn issue(&mut self, nonce: [u8; 32], now: u64) -> Result<(), NonceError> {
        self.prune(now);
        if self.entries.contains_key(&nonce) {
            return Err(NonceError::Duplicate);
        }
        self.entries.insert(
            nonce,
            NonceEntry {
                expires_at: now.saturating_add(self.ttl),
                used: false,
            },
        );
        Ok(())
    }

    /// Mark a nonce used; fails if unknown, expired or already used.
    pub fn consume(&mut self, nonce: &[u8; 32], now: u64) -> Result<(), NonceError> {
        let entry = self.entries.get_mut(nonce).ok_or(NonceError::Unknown)?;
        if entry.used {
            return Err(NonceError::Reused);
        }
        entry.used = true;
        if now > entry.expires_at {
            return Err(NonceError::Expired);
        }
        Ok(())
    }

    /// Forget nonces that expired before `now` (used or not).
    pub fn prune(&mut self, now: u64) {
        self.entries.retain(|_, e| e.expires_at >= now);
    }

    /// Number of remembered nonces.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no nonce is remembered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// What evidence is compared against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReferenceValues {
    /// The (verified) image manifest.
    pub image: ImageManifest,
    /// NVIDIA RIMs (VBIOS and driver); selected per GPU by `colloquialVersion`.
    pub gpu_rims: Vec<Rim>,
}

impl ReferenceValues {
    /// Build from a signed manifest, checking it against trusted release keys.
    pub fn from_signed_manifest(
        manifest: &SignedImageManifest,
        release_keys: &[VerifyingKey],
        gpu_rims: Vec<Rim>,
    ) -> Result<Self, ManifestError> {
        let image = manifest.verify(release_keys)?.clone();
        Ok(Self { image, gpu_rims })
    }
}

/// The reference measurement for what the firmware started: [`boot_applications_digest`] of
/// the EFI applications in the node's event log, in order (for a UKI: the UKI, then the kernel
/// systemd-stub loads from it), read only after the log's replay of PCR 4 equals the quoted
/// PCR 4 ([`crate::eventlog`]). Unlike PCR 11, which anything running on the node can extend
/// from public values, PCR 4 keeps what the firmware measured into it: another kernel or
/// loader is in it for good.
pub const BOOT_APPLICATIONS: &str = "efi.boot_applications";

/// SHA-256 of the applications' Authenticode digests, concatenated in the order they were
/// started: one value for a reference manifest to carry and a verifier to compare.
pub fn boot_applications_digest(apps: &[[u8; 32]]) -> [u8; 32] {
    let mut h = Sha256::new();
    for app in apps {
        h.update(app);
    }
    h.finalize().into()
}

/// Whether a measurement name belongs to the `configuration` claim (else `executables`).
pub fn is_configuration_measurement(name: &str) -> bool {
    name == "cmdline" || name == "config" || name.ends_with(".config") || name.starts_with("policy")
}

/// Verifier configuration.
#[derive(Debug, Clone)]
pub struct VerifierConfig {
    /// Enrollment authority keys whose certificates are trusted.
    pub enrollment_authorities: Vec<VerifyingKey>,
    /// Revoked node public keys.
    pub revoked_nodes: BTreeSet<[u8; 32]>,
    /// NVIDIA device root certificates (DER).
    pub nvidia_roots: Vec<Vec<u8>>,
    /// Reference values.
    pub reference: ReferenceValues,
    /// Fewer distinct GPUs whose report verified than this is contraindicated: a submodule
    /// without a report, with a failed one, or with another's device does not count.
    pub min_gpus: usize,
    /// Whether a GPU without an attestation report is contraindicated (else a warning).
    pub require_gpu_reports: bool,
    /// Whether the node's attestation key must be anchored in its TPM maker's EK certificate
    /// (the enrollment names one, `tpm_ek_certificate_sha256`): a node whose AK is the
    /// operator's word alone, or that has none, is contraindicated (`tpm-ak-not-anchored`).
    pub require_tpm_ek: bool,
    /// Evidence older than this (seconds, by its `iat`) is stale.
    pub max_age: u64,
    /// Evidence `iat` may be this far in the future (clock skew).
    pub max_clock_skew: u64,
    /// Key that signs attestation results.
    pub signing_key: SigningKey,
}

/// Misuse of the verifier (never bad evidence).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum VerifierError {
    /// Configuration is unusable.
    #[error("verifier configuration: {0}")]
    Config(String),
    /// The result could not be encoded.
    #[error("encoding the attestation result")]
    Encoding(#[from] CanonicalError),
}

/// What the GPUs of one piece of evidence show taken together (each GPU's own problems are
/// reported beside it). Shown as a reason's detail, with [`GpuSetFinding::code`] as its code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GpuSetFinding {
    /// Fewer distinct devices with a verified report than `min_gpus`: a GPU without a report,
    /// or whose report failed, or that is another submodule's device again, is not counted.
    #[error(
        "{verified} distinct GPU(s) with a verified report ({submods} in evidence), \
         {required} required"
    )]
    TooFew {
        /// Submodules whose report verified, each from a device no earlier one named.
        verified: usize,
        /// Submodules in the evidence.
        submods: usize,
        /// The verifier's `min_gpus`.
        required: usize,
    },
    /// Two submodules' reports come from one device: one GPU posing as two, each report
    /// answering the nonce derived from a UUID it was given.
    #[error("{uuid} is the device of {first_uuid} again: both reports are under its {identity}")]
    DuplicateDevice {
        /// The later submodule's UUID.
        uuid: String,
        /// The UUID of the earlier submodule with the same device.
        first_uuid: String,
        /// What the two share.
        identity: DeviceIdentity,
    },
}

impl GpuSetFinding {
    /// The reason code (documented in docs/attestation.md).
    pub fn code(&self) -> &'static str {
        match self {
            GpuSetFinding::TooFew { .. } => "gpu-missing",
            GpuSetFinding::DuplicateDevice { .. } => "gpu-device-duplicate",
        }
    }
}

/// Bound on remembered enrollment signatures (cleared wholesale when reached).
const ENROLLMENT_CACHE_MAX: usize = 65_536;

/// Bound on remembered GPU certificate chains.
const CHAIN_CACHE_MAX: usize = 16_384;

/// The verifier. Shareable across threads (`&self` appraisal).
#[derive(Debug)]
pub struct Verifier {
    config: VerifierConfig,
    enrollment_cache: Mutex<HashSet<[u8; 32]>>,
    chain_cache: Mutex<HashMap<[u8; 32], VerifiedChain>>,
}

impl Clone for Verifier {
    fn clone(&self) -> Self {
        Self {
            config: self.config.clone(),
            enrollment_cache: Mutex::new(HashSet::new()),
            chain_cache: Mutex::new(HashMap::new()),
        }
    }
}

#[derive(Clone, Copy)]
enum Claim {
    InstanceIdentity,
    Configuration,
    Executables,
    Hardware,
}

impl Claim {
    fn name(self) -> &'static str {
        match self {
            Claim::InstanceIdentity => "instance-identity",
            Claim::Configuration => "configuration",
            Claim::Executables => "executables",
            Claim::Hardware => "hardware",
        }
    }
}

#[derive(Default)]
struct Acc {
    tv: TrustVector,
    reasons: Vec<Reason>,
}

impl Acc {
    fn slot(&mut self, c: Claim) -> &mut i8 {
        match c {
            Claim::InstanceIdentity => &mut self.tv.instance_identity,
            Claim::Configuration => &mut self.tv.configuration,
            Claim::Executables => &mut self.tv.executables,
            Claim::Hardware => &mut self.tv.hardware,
        }
    }

    /// Raise a claim to `value` if that is worse than what it has.
    fn raise(&mut self, c: Claim, value: i8) {
        let slot = self.slot(c);
        let rank = |v: i8| (Status::of_claim(v), v);
        if rank(value) > rank(*slot) {
            *slot = value;
        }
    }

    /// Fold in a sub-appraisal (one GPU's): each claim takes the worse value.
    fn merge(&mut self, other: Acc) {
        let tv = other.tv;
        for (c, v) in [
            (Claim::InstanceIdentity, tv.instance_identity),
            (Claim::Configuration, tv.configuration),
            (Claim::Executables, tv.executables),
            (Claim::Hardware, tv.hardware),
        ] {
            self.raise(c, v);
        }
        self.reasons.extend(other.reasons);
    }

    /// Every finding about the GPUs taken together contraindicates the hardware.
    fn gpu_set(&mut self, f: &GpuSetFinding) {
        let detail = crate::report::report(f).to_string();
        self.fail(Claim::Hardware, tier::CONTRAINDICATED, f.code(), detail);
    }

    fn fail(&mut self, c: Claim, value: i8, code: &str, detail: impl Into<String>) {
        self.raise(c, value);
        self.reasons.push(Reason {
            claim: c.name().into(),
            code: code.into(),
            detail: detail.into(),
        });
    }
}

impl Verifier {
    /// Check the configuration and build a verifier.
    pub fn new(config: VerifierConfig) -> Result<Self, VerifierError> {
        if config.enrollment_authorities.is_empty() {
            return Err(VerifierError::Config(
                "no enrollment authority configured".into(),
            ));
        }
        if config.reference.image.measurements.is_empty() {
            return Err(VerifierError::Config(
                "reference manifest has no measurements".into(),
            ));
        }
        for rim in &config.reference.gpu_rims {
            if rim.signer().is_none() {
                return Err(VerifierError::Config(format!(
                    "RIM {} ({}) has no verified signature: reference values must come from \
                     Rim::parse_verified",
                    rim.tag_id, rim.colloquial_version
                )));
            }
        }
        for (i, root) in config.nvidia_roots.iter().enumerate() {
            crate::nvidia::chain::CertChain::from_der_list(std::slice::from_ref(root))
                .map_err(|e| VerifierError::Config(format!("NVIDIA root {i}: {e}")))?;
        }
        Ok(Self {
            config,
            enrollment_cache: Mutex::new(HashSet::new()),
            chain_cache: Mutex::new(HashMap::new()),
        })
    }

    /// Enrollment certificates are long-lived and repeat in every document a node sends, so
    /// successful signature checks are remembered, keyed by SHA-256 of an encoding of the
    /// whole certificate (claims *and* signature, so no other certificate can hit the entry).
    /// Validity and revocation are still checked on every appraisal.
    fn verify_enrollment_signature(
        &self,
        cert: &crate::identity::EnrollmentCertificate,
    ) -> Result<(), IdentityError> {
        // Any injective encoding works as a cache key; serde_json's plain struct encoding is
        // cheaper than the canonical one.
        let encoded = serde_json::to_vec(cert)
            .map_err(|e| IdentityError::Encoding(CanonicalError::Shape(e.to_string())))?;
        let key: [u8; 32] = Sha256::digest(encoded).into();
        if let Ok(cache) = self.enrollment_cache.lock() {
            if cache.contains(&key) {
                return Ok(());
            }
        }
        cert.verify_signature(&self.config.enrollment_authorities)?;
        if let Ok(mut cache) = self.enrollment_cache.lock() {
            if cache.len() >= ENROLLMENT_CACHE_MAX {
                cache.clear();
            }
            cache.insert(key);
        }
        Ok(())
    }

    /// GPU certificate chains do not change between attestations: a successful path check is
    /// remembered (keyed by SHA-256 over the length-prefixed DER certificates) with its
    /// validity window, and reused while `now` is inside that window. Failures are never
    /// cached, so errors always come from a full check.
    fn verify_gpu_chain(&self, chain: &[HexBytes], now: u64) -> Result<VerifiedChain, ChainError> {
        let mut h = Sha256::new();
        for c in chain {
            h.update((c.0.len() as u64).to_be_bytes());
            h.update(&c.0);
        }
        let key: [u8; 32] = h.finalize().into();
        if let Ok(cache) = self.chain_cache.lock() {
            if let Some(v) = cache.get(&key) {
                if v.valid_from <= now && now <= v.valid_until {
                    return Ok(v.clone());
                }
            }
        }
        let ders: Vec<Vec<u8>> = chain.iter().map(|c| c.0.clone()).collect();
        let verified = CertChain::from_der_list(&ders)?.verify(&self.config.nvidia_roots, now)?;
        if let Ok(mut cache) = self.chain_cache.lock() {
            if cache.len() >= CHAIN_CACHE_MAX {
                cache.clear();
            }
            cache.insert(key, verified.clone());
        }
        Ok(verified)
    }

    /// The key relying parties use to check results.
    pub fn verifying_key(&self) -> VerifyingKey {
        self.config.signing_key.verifying_key()
    }

    /// Appraise evidence bytes answering `expected_nonce` at `now`. The nonce is consumed
    /// whatever the outcome: each issued nonce answers exactly one appraisal.
    pub fn appraise(
        &self,
        evidence: &[u8],
        expected_nonce: &[u8; 32],
        now: u64,
        nonces: &mut NonceRegistry,
    ) -> Result<AttestationResult, VerifierError> {
        let mut acc = Acc::default();
        let nonce_state = nonces.consume(expected_nonce, now);
        let node = self.appraise_inner(evidence, expected_nonce, now, nonce_state, &mut acc);
        let node_named = node.is_some();
        let claims = AttestationClaims {
            eat_profile: EAR_PROFILE.into(),
            status: acc.tv.status(),
            trust_vector: acc.tv,
            reasons: acc.reasons,
            eat_nonce: *expected_nonce,
            evidence_digest: evidence_digest(evidence),
            iat: now,
            node,
            verifier_key: self.config.signing_key.verifying_key().to_bytes(),
            // Named only for a node whose enrollment verified: measurements vouched for by an
            // AK that an unverified enrollment binds say nothing about any node.
            image: (node_named && acc.tv.executables == tier::AFFIRMING).then(|| ImageReference {
                name: self.config.reference.image.name.clone(),
                version: self.config.reference.image.version.clone(),
            }),
        };
        claims.sign(&self.config.signing_key).map_err(|e| match e {
            crate::ear::EarError::Encoding(c) => VerifierError::Encoding(c),
            other => VerifierError::Config(other.to_string()),
        })
    }

    fn appraise_inner(
        &self,
        bytes: &[u8],
        expected_nonce: &[u8; 32],
        now: u64,
        nonce_state: Result<(), NonceError>,
        acc: &mut Acc,
    ) -> Option<NodeIdentity> {
        use Claim::*;
        let evidence = match Evidence::verify_document(bytes) {
            Ok(e) => e,
            Err(e @ EvidenceError::BadSignature) => {
                acc.fail(
                    InstanceIdentity,
                    tier::CONTRAINDICATED,
                    "evidence-signature-invalid",
                    e.to_string(),
                );
                return None;
            }
            Err(e) => {
                acc.fail(
                    InstanceIdentity,
                    tier::UNRECOGNIZED,
                    "evidence-malformed",
                    e.to_string(),
                );
                return None;
            }
        };
        let claims = &evidence.claims;
        let enrollment = &claims.enrollment;
        let node_pk = *claims.node_public_key();
        let node_ok = self.appraise_enrollment(claims, now, acc);
        self.appraise_freshness(claims, expected_nonce, now, nonce_state, acc);
        acc.raise(InstanceIdentity, tier::AFFIRMING);
        let quoted = if node_ok {
            if self.config.require_tpm_ek {
                require_anchored_ak(claims, acc);
            }
            appraise_tpm(claims, expected_nonce, acc)
        } else {
            refuse_unverified_ak(claims, acc)
        };
        self.appraise_measurements(claims, quoted.as_ref(), acc);
        self.appraise_hardware(claims, expected_nonce, &node_pk, now, acc);

        node_ok.then(|| NodeIdentity {
            ueid: identity::ueid(&node_pk).to_vec(),
            node_public_key: node_pk,
            node_name: enrollment.claims.node_name.clone(),
            jurisdiction: enrollment.claims.jurisdiction.clone(),
            facility: enrollment.claims.facility.clone(),
        })
    }

    /// The node's identity: its enrollment certificate is signed by a configured authority,
    /// valid now, and not for a revoked key. Returns whether the node can be named in the
    /// result (an unknown or revoked node's claims about itself are not repeated).
    fn appraise_enrollment(&self, claims: &EvidenceClaims, now: u64, acc: &mut Acc) -> bool {
        use Claim::*;
        let enrollment = &claims.enrollment;
        let node_pk = *claims.node_public_key();
        let mut node_ok = true;
        if let Err(e) = self.verify_enrollment_signature(enrollment) {
            node_ok = false;
            let (v, code) = match e {
                IdentityError::UnknownAuthority(_) => {
                    (tier::UNRECOGNIZED, "enrollment-unknown-authority")
                }
                IdentityError::BadSignature => {
                    (tier::CONTRAINDICATED, "enrollment-signature-invalid")
                }
                _ => (tier::CONTRAINDICATED, "enrollment-invalid"),
            };
            acc.fail(InstanceIdentity, v, code, e.to_string());
        }
        if self.config.revoked_nodes.contains(&node_pk) {
            node_ok = false;
            acc.fail(
                InstanceIdentity,
                tier::CONTRAINDICATED,
                "node-revoked",
                format!("node key {} is revoked", hex::encode(node_pk)),
            );
        }
        if let Err(e) = enrollment.check_validity(now) {
            node_ok = false;
            let code = match e {
                IdentityError::Expired { .. } => "enrollment-expired",
                _ => "enrollment-not-yet-valid",
            };
            acc.fail(InstanceIdentity, tier::CONTRAINDICATED, code, e.to_string());
        }
        node_ok
    }

    /// Freshness: this evidence must answer this challenge (nonce, once, not expired), and be
    /// recent by its own clock within the allowed skew, so recorded evidence cannot be replayed.
    fn appraise_freshness(
        &self,
        claims: &EvidenceClaims,
        expected_nonce: &[u8; 32],
        now: u64,
        nonce_state: Result<(), NonceError>,
        acc: &mut Acc,
    ) {
        use Claim::*;
        if &claims.eat_nonce != expected_nonce {
            acc.fail(
                InstanceIdentity,
                tier::CONTRAINDICATED,
                "nonce-mismatch",
                format!(
                    "evidence answers nonce {}, expected {}",
                    hex::encode(claims.eat_nonce),
                    hex::encode(expected_nonce)
                ),
            );
        }
        if let Err(e) = nonce_state {
            let code = match e {
                NonceError::Reused => "nonce-reused",
                NonceError::Expired => "nonce-expired",
                _ => "nonce-unknown",
            };
            acc.fail(InstanceIdentity, tier::CONTRAINDICATED, code, e.to_string());
        }
        if claims.iat > now.saturating_add(self.config.max_clock_skew) {
            acc.fail(
                InstanceIdentity,
                tier::CONTRAINDICATED,
                "evidence-from-future",
                format!("issued at {}, now {}", claims.iat, now),
            );
        } else if now.saturating_sub(claims.iat) > self.config.max_age {
            acc.fail(
                InstanceIdentity,
                tier::CONTRAINDICATED,
                "evidence-stale",
                format!(
                    "issued {}s ago, older than the allowed {}s",
                    now - claims.iat,
                    self.config.max_age
                ),
            );
        }
    }

    /// The host image: every reference measurement must be in the evidence with the same
    /// value; configuration measurements and executables are separate claims. `pcr.N`
    /// references compare with the verified quote's values only (`quoted`).
    fn appraise_measurements(
        &self,
        claims: &EvidenceClaims,
        quoted: Option<&VerifiedPcrs>,
        acc: &mut Acc,
    ) {
        use Claim::*;
        for (name, expected) in &self.config.reference.image.measurements {
            let claim = if is_configuration_measurement(name) {
                Configuration
            } else {
                Executables
            };
            match reported_measurement(name, claims, quoted) {
                Err(why) => acc.fail(
                    claim,
                    tier::CONTRAINDICATED,
                    "measurement-missing",
                    format!("{name}: {}", crate::report::report(&why)),
                ),
                Ok(got) if got != *expected => acc.fail(
                    claim,
                    tier::CONTRAINDICATED,
                    "measurement-mismatch",
                    format!(
                        "{name}: {} != reference {}",
                        hex::encode(got),
                        hex::encode(expected)
                    ),
                ),
                Ok(_) => acc.raise(claim, tier::AFFIRMING),
            }
        }
    }

    /// The GPUs: each appraised on its own (report, chain, nonce bound to this node and
    /// challenge, RIM), then together: no device twice, and at least the configured number
    /// of distinct devices whose report verified. A submodule is only the node's word; a
    /// verified report is the device's.
    fn appraise_hardware(
        &self,
        claims: &EvidenceClaims,
        expected_nonce: &[u8; 32],
        node_pk: &[u8; 32],
        now: u64,
        acc: &mut Acc,
    ) {
        let outcomes = self.appraise_gpus(&claims.submods, expected_nonce, node_pk, now);
        let mut devices = Vec::with_capacity(outcomes.len());
        for outcome in outcomes {
            acc.merge(outcome.acc);
            devices.push(outcome.device);
        }
        let (verified, duplicates) = distinct_devices(&claims.submods, &devices);
        for f in &duplicates {
            acc.gpu_set(f);
        }
        if verified < self.config.min_gpus {
            acc.gpu_set(&GpuSetFinding::TooFew {
                verified,
                submods: claims.submods.len(),
                required: self.config.min_gpus,
            });
        }
    }

    /// Each GPU report costs a P-384 signature check (about 1 ms on one core), so a node
    /// with several GPUs is appraised on up to `available_parallelism` threads. Results come
    /// back in submodule order, so the signed result does not depend on scheduling.
    fn appraise_gpus(
        &self,
        gpus: &[GpuClaims],
        expected_nonce: &[u8; 32],
        node_pk: &[u8; 32],
        now: u64,
    ) -> Vec<GpuOutcome> {
        let one = |gpu: &GpuClaims| {
            let mut acc = Acc::default();
            let device = self.appraise_gpu(gpu, expected_nonce, node_pk, now, &mut acc);
            GpuOutcome { acc, device }
        };
        let with_reports = gpus.iter().filter(|g| g.report.is_some()).count();
        let workers = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(with_reports);
        if workers <= 1 {
            return gpus.iter().map(one).collect();
        }
        let per_worker = gpus.len().div_ceil(workers);
        // Never expected; if an appraisal thread panicked, its GPUs are not vouched for, and
        // the result says so instead of losing the appraisal.
        let failed = |gpu: &GpuClaims| {
            let mut acc = Acc::default();
            acc.fail(
                Claim::Hardware,
                tier::CONTRAINDICATED,
                "gpu-appraisal-failed",
                format!("{}: appraisal failed internally", gpu.uuid),
            );
            GpuOutcome { acc, device: None }
        };
        let mut chunks = gpus.chunks(per_worker);
        let own = chunks.next().unwrap_or_default();
        std::thread::scope(|scope| {
            // The calling thread takes the first share itself rather than idling.
            let handles: Vec<_> = chunks
                .map(|chunk| {
                    let handle = scope.spawn(move || chunk.iter().map(one).collect::<Vec<_>>());
                    (chunk, handle)
                })
                .collect();
            let mut out: Vec<GpuOutcome> = own.iter().map(one).collect();
            for (chunk, handle) in handles {
                match handle.join() {
                    Ok(accs) => out.extend(accs),
                    Err(_) => out.extend(chunk.iter().map(failed)),
                }
            }
            out
        })
    }

    /// One GPU's appraisal: its signed report (chain, signature, nonce), the claims beside it
    /// against what it signed, then its measurements against the reference RIMs. Returns the
    /// identities of the device whose report verified, for the checks across GPUs.
    fn appraise_gpu(
        &self,
        gpu: &GpuClaims,
        expected_nonce: &[u8; 32],
        node_pk: &[u8; 32],
        now: u64,
        acc: &mut Acc,
    ) -> Option<Vec<DeviceIdentity>> {
        let Some(report) = &gpu.report else {
            self.missing_gpu_report(&gpu.uuid, acc);
            return None;
        };
        let nonce = gpu_nonce(expected_nonce, &gpu.uuid, node_pk);
        let (parsed, device) = match self.verify_gpu_report(report, &nonce, now) {
            Ok(verified) => verified,
            Err(e) => {
                let (tier, code) = gpu_report_failure(&e);
                acc.fail(Claim::Hardware, tier, code, format!("{}: {e}", gpu.uuid));
                return None;
            }
        };
        let driver = parsed.opaque.driver_version();
        let vbios = parsed.opaque.vbios_version();
        check_gpu_claims(gpu, driver.as_deref(), vbios.as_deref(), acc);
        let mut rim_problem = false;
        for (kind, version) in [("VBIOS", vbios), ("driver", driver)] {
            let Some(version) = version else { continue };
            rim_problem |= self.compare_gpu_rims(&gpu.uuid, kind, &version, &parsed, now, acc);
        }
        if !rim_problem {
            acc.raise(Claim::Hardware, tier::AFFIRMING);
        }
        Some(device)
    }

    /// A GPU without a report: contraindicated where the relying party requires reports,
    /// else a warning (it may be a GPU that cannot attest).
    fn missing_gpu_report(&self, uuid: &str, acc: &mut Acc) {
        let (tier, code) = if self.config.require_gpu_reports {
            (tier::CONTRAINDICATED, "gpu-report-missing")
        } else {
            (tier::WARNING, "gpu-not-attestable")
        };
        acc.fail(
            Claim::Hardware,
            tier,
            code,
            format!("{uuid}: no attestation report"),
        );
    }

    /// The report parsed, its certificate chain verified up to a trusted root at `now`, and
    /// its signature, FWID and nonce checked; with the identities of the device that signed.
    fn verify_gpu_report(
        &self,
        report: &GpuReport,
        nonce: &[u8; 32],
        now: u64,
    ) -> Result<(SpdmReport, Vec<DeviceIdentity>), GpuReportError> {
        let parsed = SpdmReport::parse(&report.spdm).map_err(GpuReportError::Malformed)?;
        let chain = self.verify_gpu_chain(&report.cert_chain, now)?;
        let parsed = verify_report_with_chain(parsed, &chain, nonce)?;
        Ok((parsed, DeviceIdentity::of(&chain)))
    }

    /// Compares the report with the reference RIMs for one of its versions (`kind` is
    /// "VBIOS" or "driver"). Returns whether anything kept the GPU from affirming: no current
    /// RIM, or a measurement that differs.
    fn compare_gpu_rims(
        &self,
        uuid: &str,
        kind: &str,
        version: &str,
        report: &SpdmReport,
        now: u64,
        acc: &mut Acc,
    ) -> bool {
        use Claim::Hardware;
        let (rims, expired): (Vec<&Rim>, Vec<&Rim>) = self
            .config
            .reference
            .gpu_rims
            .iter()
            .filter(|r| r.colloquial_version.eq_ignore_ascii_case(version))
            .partition(|r| {
                r.signer()
                    .is_some_and(|s| s.valid_from <= now && now <= s.valid_until)
            });
        if rims.is_empty() {
            if expired.is_empty() {
                acc.fail(
                    Hardware,
                    tier::WARNING,
                    "gpu-rim-unavailable",
                    format!("{uuid}: no {kind} RIM for version {version}"),
                );
            } else {
                // A reference whose signer is no longer valid is not a reference: the
                // GPU may be fine, but nothing current vouches for its measurements.
                acc.fail(
                    Hardware,
                    tier::WARNING,
                    "gpu-rim-expired",
                    format!(
                        "{uuid}: the {kind} RIM for version {version} is signed by a \
                         certificate that is not valid now; fetch a current RIM"
                    ),
                );
            }
            return true;
        }
        let mut mismatch = false;
        for rim in rims {
            let cmp = rim.compare(report);
            if !cmp.is_match() {
                mismatch = true;
                acc.fail(
                    Hardware,
                    tier::CONTRAINDICATED,
                    "gpu-measurement-mismatch",
                    format!(
                        "{uuid}: {kind} RIM {} ({version}): indices {:?} differ, {:?} missing",
                        rim.tag_id, cmp.mismatched, cmp.missing
                    ),
                );
            }
        }
        mismatch
    }
}

/// One GPU's appraisal, and the identities of its device when its report verified.
struct GpuOutcome {
    acc: Acc,
    device: Option<Vec<DeviceIdentity>>,
}

/// How many submodules (`gpus`, beside their `devices`) are distinct devices with a verified
/// report, and a finding for each that is an earlier one's device again, in submodule order.
fn distinct_devices(
    gpus: &[GpuClaims],
    devices: &[Option<Vec<DeviceIdentity>>],
) -> (usize, Vec<GpuSetFinding>) {
    let mut first_seen: HashMap<&DeviceIdentity, &str> = HashMap::new();
    let mut distinct = 0;
    let mut duplicates = Vec::new();
    for (gpu, ids) in gpus.iter().zip(devices) {
        let Some(ids) = ids else { continue };
        let earlier = ids
            .iter()
            .find_map(|id| first_seen.get(id).map(|first| (id, *first)));
        match earlier {
            Some((identity, first_uuid)) => duplicates.push(GpuSetFinding::DuplicateDevice {
                uuid: gpu.uuid.clone(),
                first_uuid: first_uuid.to_owned(),
                identity: identity.clone(),
            }),
            None => distinct += 1,
        }
        for id in ids {
            first_seen.entry(id).or_insert(&gpu.uuid);
        }
    }
    (distinct, duplicates)
}

/// The tier and reason code for a GPU report that failed verification. An unknown root is
/// `unrecognized` (the relying party may trust another); everything else is contraindicated.
fn gpu_report_failure(e: &GpuReportError) -> (i8, &'static str) {
    match e {
        GpuReportError::Malformed(_) => (tier::CONTRAINDICATED, "gpu-report-malformed"),
        GpuReportError::Chain(ChainError::UntrustedRoot) => {
            (tier::UNRECOGNIZED, "gpu-root-untrusted")
        }
        GpuReportError::Chain(_) => (tier::CONTRAINDICATED, "gpu-chain-invalid"),
        GpuReportError::Signature(_) => (tier::CONTRAINDICATED, "gpu-report-signature-invalid"),
        GpuReportError::FwidMismatch => (tier::CONTRAINDICATED, "gpu-fwid-mismatch"),
        GpuReportError::NonceMismatch { .. } => (tier::CONTRAINDICATED, "gpu-nonce-mismatch"),
    }
}

/// The driver and VBIOS versions the node claims must be the ones the GPU signed.
fn check_gpu_claims(gpu: &GpuClaims, driver: Option<&str>, vbios: Option<&str>, acc: &mut Acc) {
    let uuid = &gpu.uuid;
    if driver != Some(gpu.driver_version.as_str()) {
        acc.fail(
            Claim::Hardware,
            tier::CONTRAINDICATED,
            "gpu-claims-inconsistent",
            format!(
                "{uuid}: claimed driver {:?}, signed report says {:?}",
                gpu.driver_version, driver
            ),
        );
    }
    if !vbios.is_some_and(|v| v.eq_ignore_ascii_case(&gpu.vbios_version)) {
        acc.fail(
            Claim::Hardware,
            tier::CONTRAINDICATED,
            "gpu-claims-inconsistent",
            format!(
                "{uuid}: claimed VBIOS {:?}, signed report says {:?}",
                gpu.vbios_version, vbios
            ),
        );
    }
}

/// Why evidence offers no value for a reference measurement.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum Unavailable {
    #[error("not in evidence")]
    NotInEvidence,
    #[error(
        "no verified TPM quote in the evidence (PCR values the node reports itself are not \
         evidence)"
    )]
    NoVerifiedQuote,
    #[error(
        "not covered by the TPM quote (PCRs {:?} are quoted)",
        tpm::QUOTED_PCRS
    )]
    NotQuoted,
    #[error("the TPM quote carries no event log of the firmware")]
    NoEventLog,
    #[error("the firmware's event log")]
    EventLog(#[source] EventLogError),
    #[error("the firmware's event log names no EFI application in PCR 4")]
    NoBootApplication,
}

/// The value evidence offers for reference measurement `name`, or why there is none. `pcr.N`
/// comes only from a verified quote, never from the node's own `measurements`.
fn reported_measurement(
    name: &str,
    claims: &EvidenceClaims,
    quoted: Option<&VerifiedPcrs>,
) -> Result<[u8; 32], Unavailable> {
    if name == BOOT_APPLICATIONS {
        return boot_applications(claims, quoted);
    }
    let Some(index) = name.strip_prefix("pcr.") else {
        return claims
            .measurements
            .get(name)
            .copied()
            .ok_or(Unavailable::NotInEvidence);
    };
    let quoted = quoted.ok_or(Unavailable::NoVerifiedQuote)?;
    index
        .parse::<u8>()
        .ok()
        .and_then(|i| quoted.get(&i))
        .copied()
        .ok_or(Unavailable::NotQuoted)
}

/// [`boot_applications_digest`] of the EFI applications the firmware started, from the event
/// log the quote carries, once its replay of PCR 4 equals the quoted PCR 4.
fn boot_applications(
    claims: &EvidenceClaims,
    quoted: Option<&VerifiedPcrs>,
) -> Result<[u8; 32], Unavailable> {
    let pcr4 = quoted
        .ok_or(Unavailable::NoVerifiedQuote)?
        .get(&4)
        .ok_or(Unavailable::NotQuoted)?;
    let log = claims
        .tpm
        .as_ref()
        .and_then(|q| q.event_log.as_deref())
        .ok_or(Unavailable::NoEventLog)?;
    let apps = EventLog::parse(log)
        .and_then(|log| log.boot_applications(pcr4))
        .map_err(Unavailable::EventLog)?;
    if apps.is_empty() {
        return Err(Unavailable::NoBootApplication);
    }
    Ok(boot_applications_digest(&apps))
}

/// The TPM quote: required when the enrollment binds an AK, refused without one, and verified
/// with the enrolled AK against this challenge. Returns the PCR values it vouches for.
fn appraise_tpm(
    claims: &EvidenceClaims,
    expected_nonce: &[u8; 32],
    acc: &mut Acc,
) -> Option<VerifiedPcrs> {
    use Claim::Hardware;
    let enrolled = claims.enrollment.claims.tpm_ak.as_deref();
    let (ak_bytes, quote) = match (enrolled, &claims.tpm) {
        (None, None) => return None,
        (Some(_), None) => {
            acc.fail(
                Hardware,
                tier::CONTRAINDICATED,
                "tpm-quote-missing",
                "the enrollment binds a TPM attestation key but the evidence has no quote",
            );
            return None;
        }
        (None, Some(_)) => {
            acc.fail(
                Hardware,
                tier::CONTRAINDICATED,
                "tpm-ak-not-enrolled",
                "the evidence carries a TPM quote but the enrollment binds no attestation key \
                 to check it with",
            );
            return None;
        }
        (Some(ak), Some(quote)) => (ak, quote),
    };
    let ak = match tpm::AkPublic::parse(ak_bytes) {
        Ok(ak) => ak,
        Err(e) => {
            acc.fail(
                Hardware,
                tier::CONTRAINDICATED,
                "tpm-ak-invalid",
                format!("enrolled AK: {e}"),
            );
            return None;
        }
    };
    match tpm::verify_quote(&ak, quote, expected_nonce) {
        Ok(pcrs) => {
            acc.raise(Hardware, tier::AFFIRMING);
            Some(pcrs)
        }
        Err(e) => {
            acc.fail(
                Hardware,
                tier::CONTRAINDICATED,
                tpm_reason_code(&e),
                e.to_string(),
            );
            None
        }
    }
}

/// For a relying party that trusts only AKs proven to sit beside a certified EK: the
/// enrollment must name the EK certificate its authority checked.
fn require_anchored_ak(claims: &EvidenceClaims, acc: &mut Acc) {
    let enrollment = &claims.enrollment.claims;
    if enrollment.tpm_ak.is_none() || enrollment.tpm_ek_certificate_sha256.is_none() {
        acc.fail(
            Claim::Hardware,
            tier::CONTRAINDICATED,
            "tpm-ak-not-anchored",
            "the enrollment binds no TPM attestation key anchored in its maker's EK \
             certificate (sovctl attest tpm-challenge), and this verifier requires one",
        );
    }
}

/// Without a verified enrollment the AK it binds is anyone's key: its quote is not appraised,
/// and nothing it vouches for counts (the `pcr.N` references are then `measurement-missing`).
fn refuse_unverified_ak(claims: &EvidenceClaims, acc: &mut Acc) -> Option<VerifiedPcrs> {
    if claims.enrollment.claims.tpm_ak.is_some() || claims.tpm.is_some() {
        acc.fail(
            Claim::Hardware,
            tier::CONTRAINDICATED,
            "tpm-ak-unverified",
            "the enrollment that would bind the TPM attestation key did not verify, so the \
             quote is not appraised",
        );
    }
    None
}

/// Reason codes of quote failures (documented in docs/attestation.md).
fn tpm_reason_code(e: &TpmError) -> &'static str {
    match e {
        TpmError::BadSignature | TpmError::BadSignatureEncoding => "tpm-quote-signature-invalid",
        TpmError::NonceMismatch { .. } => "tpm-quote-nonce-mismatch",
        TpmError::PcrDigestMismatch { .. } => "tpm-pcr-digest-mismatch",
        TpmError::PcrSelection { .. } => "tpm-pcr-selection-invalid",
        _ => "tpm-quote-malformed",
    }
}
