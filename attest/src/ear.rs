//! Attestation results in the spirit of EAR (IETF draft-fv-rats-ear, as used by Veraison and
//! Trustee): an overall status, an AR4SI trust vector with a reason for every non-affirming
//! claim, the nonce and evidence digest it answers, and the verifier's Ed25519 signature over
//! `EAR_CONTEXT || 0x00 || canonical(result)`.
//!
//! Unlike EAR proper this is canonical JSON rather than a JWT/CWT, so the same encoding rules
//! as evidence apply ([`crate::canonical`]).

use crate::canonical::{self, hex_bytes, CanonicalError};
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};

/// Domain-separation context of attestation result signatures.
pub const EAR_CONTEXT: &str = "sovereign-host/attestation-result/v1";

/// `eat_profile` of attestation results.
pub const EAR_PROFILE: &str = "tag:sovereign-host.dev,2026:ear/v1";

/// AR4SI trustworthiness claim values used here (an honest subset of the draft's codes).
pub mod tier {
    /// No claim made.
    pub const NONE: i8 = 0;
    /// Affirming (e.g. recognised identity, approved executables, genuine hardware).
    pub const AFFIRMING: i8 = 2;
    /// Warning (e.g. no reference values to compare with, hardware not attestable).
    pub const WARNING: i8 = 32;
    /// Contraindicated (mismatch, bad signature, revoked, stale, …).
    pub const CONTRAINDICATED: i8 = 96;
    /// Instance identity or hardware not recognised (unknown key / untrusted root).
    pub const UNRECOGNIZED: i8 = 97;
}

/// Overall appraisal status, derived from the worst trust-vector claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// No claims at all.
    None,
    /// Every claim affirming.
    Affirming,
    /// Some claim in the warning tier, none contraindicated.
    Warning,
    /// Some claim contraindicated.
    Contraindicated,
}

impl Status {
    /// The AR4SI tier of one claim value.
    pub fn of_claim(v: i8) -> Status {
        match v {
            0..=1 => Status::None,
            2..=31 => Status::Affirming,
            32..=95 => Status::Warning,
            // 96..=127 contraindicated; negative values are verifier errors, never trusted.
            _ => Status::Contraindicated,
        }
    }
}

/// The AR4SI trust vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct TrustVector {
    /// Node key known, enrolled, not revoked, signature valid.
    pub instance_identity: i8,
    /// Configuration measurements (cmdline, configs, policy) as expected.
    pub configuration: i8,
    /// Executable measurements (kernel, initrd, UKI, hostd) as expected.
    pub executables: i8,
    /// Not appraised.
    pub file_system: i8,
    /// GPUs present, genuine, reports verified and matching RIMs.
    pub hardware: i8,
    /// Not appraised.
    pub runtime_opaque: i8,
    /// Not appraised.
    pub storage_opaque: i8,
    /// Not appraised: freshness (this challenge, recent enough) is reported under
    /// `instance-identity`, because stale evidence cannot be attributed to the live instance.
    pub sourced_data: i8,
}

impl TrustVector {
    /// Overall status: the worst tier among the claims.
    pub fn status(&self) -> Status {
        [
            self.instance_identity,
            self.configuration,
            self.executables,
            self.file_system,
            self.hardware,
            self.runtime_opaque,
            self.storage_opaque,
            self.sourced_data,
        ]
        .into_iter()
        .map(Status::of_claim)
        .max()
        .unwrap_or(Status::None)
    }
}

/// Why a claim got its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reason {
    /// Trust-vector claim (`instance-identity`, `hardware`, …).
    pub claim: String,
    /// Stable machine-readable code (`nonce-reused`, `measurement-mismatch`, …).
    pub code: String,
    /// Human-readable detail.
    pub detail: String,
}

/// Identity facts taken from a verified enrollment certificate (never from the node itself).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeIdentity {
    /// UEID.
    #[serde(with = "hex_bytes")]
    pub ueid: Vec<u8>,
    /// Node public key.
    #[serde(with = "hex_bytes::array")]
    pub node_public_key: [u8; 32],
    /// Node name.
    pub node_name: String,
    /// Jurisdiction (ISO 3166).
    pub jurisdiction: String,
    /// Facility.
    pub facility: String,
}

/// The release the node was found to run: the reference manifest whose executable
/// measurements all matched the evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageReference {
    /// Manifest name.
    pub name: String,
    /// Manifest version: what residency rules with `min_image_version` compare against.
    pub version: String,
}

/// The signed part of a result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttestationClaims {
    /// Always [`EAR_PROFILE`].
    pub eat_profile: String,
    /// Overall status (= `trust_vector.status()`).
    pub status: Status,
    /// Per-claim values.
    pub trust_vector: TrustVector,
    /// Reasons, in appraisal order.
    pub reasons: Vec<Reason>,
    /// The nonce the verifier expected.
    #[serde(with = "hex_bytes::array")]
    pub eat_nonce: [u8; 32],
    /// SHA-256 of the evidence bytes appraised.
    #[serde(with = "hex_bytes::array")]
    pub evidence_digest: [u8; 32],
    /// When the verifier appraised, Unix seconds.
    pub iat: u64,
    /// Node identity when its enrollment verified, else `null`.
    pub node: Option<NodeIdentity>,
    /// The verifier's public key.
    #[serde(with = "hex_bytes::array")]
    pub verifier_key: [u8; 32],
    /// The image release vouched for, present only when every executable measurement of the
    /// reference manifest matched (absent from the encoding otherwise, so results made before
    /// this field existed keep their bytes and signatures).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageReference>,
}

/// A signed attestation result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttestationResult {
    /// The result.
    pub result: AttestationClaims,
    /// Ed25519 signature by the verifier.
    #[serde(with = "hex_bytes::array")]
    pub signature: [u8; 64],
}

/// Errors about results.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EarError {
    /// Encoding problem.
    #[error("attestation result encoding")]
    Encoding(#[from] CanonicalError),
    /// Signed by an unknown verifier.
    #[error("attestation result signed by unknown verifier {0}")]
    UnknownVerifier(String),
    /// Bad signature.
    #[error("attestation result signature does not verify")]
    BadSignature,
    /// `status` does not follow from the trust vector.
    #[error("attestation result status is inconsistent with its trust vector")]
    Inconsistent,
}

/// Why a result does not meet a node requirement.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RequirementError {
    /// Status is not affirming.
    #[error("attestation status is {0:?}, not affirming")]
    NotAffirming(Status),
    /// Too old.
    #[error("attestation result is {age}s old, more than the allowed {max_age}s")]
    TooOld {
        /// Age in seconds.
        age: u64,
        /// Allowed age.
        max_age: u64,
    },
    /// Issued in the future (clock problem or forgery).
    #[error("attestation result issued in the future ({iat} > {now})")]
    FromFuture {
        /// Result time.
        iat: u64,
        /// Current time.
        now: u64,
    },
}

impl AttestationClaims {
    /// Sign with the verifier key.
    pub fn sign(self, key: &SigningKey) -> Result<AttestationResult, EarError> {
        let msg = canonical::signing_input(EAR_CONTEXT, &canonical::encode(&self)?);
        Ok(AttestationResult {
            signature: key.sign(&msg).to_bytes(),
            result: self,
        })
    }
}

impl AttestationResult {
    /// Canonical bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>, EarError> {
        Ok(canonical::encode(self)?)
    }

    /// Parse canonical bytes (signature not checked).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, EarError> {
        Ok(canonical::decode(bytes)?)
    }

    /// Overall status.
    pub fn status(&self) -> Status {
        self.result.status
    }

    /// Verify the verifier's signature (against keys the relying party trusts) and that the
    /// status is consistent with the trust vector.
    pub fn verify_result_signature(&self, verifier_keys: &[VerifyingKey]) -> Result<(), EarError> {
        let key = verifier_keys
            .iter()
            .find(|k| k.to_bytes() == self.result.verifier_key)
            .ok_or_else(|| EarError::UnknownVerifier(hex::encode(self.result.verifier_key)))?;
        let msg = canonical::signing_input(EAR_CONTEXT, &canonical::encode(&self.result)?);
        key.verify_strict(&msg, &Signature::from_bytes(&self.signature))
            .map_err(|_| EarError::BadSignature)?;
        if self.result.trust_vector.status() != self.result.status {
            return Err(EarError::Inconsistent);
        }
        Ok(())
    }

    /// The policy node requirement "attestation affirming, younger than `max_age` seconds",
    /// evaluated at `now`. The caller must have verified the signature (or produced the
    /// result in-process).
    pub fn check_affirming_within(&self, now: u64, max_age: u64) -> Result<(), RequirementError> {
        if self.result.status != Status::Affirming {
            return Err(RequirementError::NotAffirming(self.result.status));
        }
        let iat = self.result.iat;
        if iat > now {
            return Err(RequirementError::FromFuture { iat, now });
        }
        let age = now - iat;
        if age > max_age {
            return Err(RequirementError::TooOld { age, max_age });
        }
        Ok(())
    }
}
