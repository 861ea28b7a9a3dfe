//! Evidence: what a node says about itself, signed with its node key, shaped after IETF RATS
//! (RFC 9334) and EAT (RFC 9711) claim names.
//!
//! The document is `{"claims": {...}, "signature": hex}` in canonical JSON
//! ([`crate::canonical`]); the signature is Ed25519 by the node key over
//! `EVIDENCE_CONTEXT || 0x00 || canonical(claims)`. The evidence digest a verifier reports is
//! SHA-256 of the whole canonical document as received.
//!
//! GPU reports are bound to this node and this challenge: the SPDM nonce of each GPU is
//! [`gpu_nonce`] = SHA-256(verifier nonce || GPU UUID (UTF-8) || node public key).

use crate::canonical::{self, hex_bytes, CanonicalError};
use crate::identity::{self, EnrollmentCertificate, NodeKey, UEID_LEN};
use crate::tpm::QuoteClaim;
use ed25519_dalek::Signature;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// Domain-separation context of evidence signatures.
pub const EVIDENCE_CONTEXT: &str = "sovereign-host/evidence/v1";

/// `eat_profile` value identifying this evidence format.
pub const EVIDENCE_PROFILE: &str = "tag:sovereign-host.dev,2026:evidence/v1";

/// Upper bound on GPU submodules, so hostile documents stay cheap to appraise.
pub const MAX_GPUS: usize = 64;

/// Upper bound on measurements.
pub const MAX_MEASUREMENTS: usize = 1024;

/// Upper bound on an evidence document, checked before parsing.
pub const MAX_EVIDENCE_BYTES: usize = 8 << 20;

/// Upper bound on certificates in one GPU chain.
pub const MAX_CHAIN_LEN: usize = 8;

/// Upper bound on one SPDM report.
pub const MAX_SPDM_BYTES: usize = 64 << 10;

/// Why evidence could not be built, decoded or its signature checked.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EvidenceError {
    /// Not canonical JSON of the expected shape.
    #[error("evidence encoding")]
    Encoding(#[from] CanonicalError),
    /// A claim violates the format rules.
    #[error("invalid evidence claim {field}: {reason}")]
    Invalid {
        /// Claim name.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The signature does not verify with the enrolled node key.
    #[error("evidence signature does not verify with the enrolled node key")]
    BadSignature,
    /// The signing key is not the key named in the enrollment certificate.
    #[error("signing key is not the enrolled node key")]
    KeyMismatch,
}

/// GPU confidential-computing mode as reported by the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CcMode {
    /// Confidential computing on.
    On,
    /// Off.
    Off,
    /// Developer mode (CC features on, protections relaxed).
    Devtools,
}

/// The NVIDIA attestation report and certificate chain of a GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuReport {
    /// SPDM `GET_MEASUREMENTS` request || `MEASUREMENTS` response.
    #[serde(with = "hex_bytes")]
    pub spdm: Vec<u8>,
    /// DER certificates, leaf first, hex.
    pub cert_chain: Vec<HexBytes>,
}

/// A hex-encoded byte string (lowercase).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct HexBytes(#[serde(with = "hex_bytes")] pub Vec<u8>);

/// One GPU submodule (EAT `submods`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuClaims {
    /// NVML UUID (`GPU-xxxxxxxx-…`); part of the GPU nonce derivation.
    pub uuid: String,
    /// Board serial number.
    pub serial: String,
    /// Model name.
    pub model: String,
    /// VBIOS version as NVML reports it.
    pub vbios_version: String,
    /// Driver version.
    pub driver_version: String,
    /// Confidential-computing mode.
    pub cc_mode: CcMode,
    /// Attestation report and chain, when the GPU supports attestation (`null` otherwise).
    pub report: Option<GpuReport>,
}

/// The claims a node signs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvidenceClaims {
    /// Always [`EVIDENCE_PROFILE`].
    pub eat_profile: String,
    /// The verifier's challenge.
    #[serde(with = "hex_bytes::array")]
    pub eat_nonce: [u8; 32],
    /// The node's UEID, `0x01 || SHA-256(node public key)`.
    #[serde(with = "hex_bytes")]
    pub ueid: Vec<u8>,
    /// The enrollment certificate naming the node key, name and jurisdiction.
    pub enrollment: EnrollmentCertificate,
    /// Issued-at, Unix seconds.
    pub iat: u64,
    /// Named SHA-256 measurements (`kernel`, `initrd`, `cmdline`, `uki.linux`, `hostd`,
    /// `hostd.config`, `policy`, `ledger.checkpoint`, …). Names `pcr.*` here are ignored by
    /// the verifier: PCR values count only from a verified quote ([`EvidenceClaims::tpm`]).
    #[serde(with = "hex_bytes::digest_map")]
    pub measurements: BTreeMap<String, [u8; 32]>,
    /// One entry per GPU.
    pub submods: Vec<GpuClaims>,
    /// The TPM's quote over PCRs 4, 7, 11 and 12 answering `eat_nonce`, on nodes with a TPM.
    /// Omitted when absent (documents from nodes without a TPM keep their exact bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpm: Option<QuoteClaim>,
}

impl EvidenceClaims {
    /// Check format rules that do not need keys or time.
    pub fn validate(&self) -> Result<(), EvidenceError> {
        let bad = |field, reason: String| EvidenceError::Invalid { field, reason };
        if self.eat_profile != EVIDENCE_PROFILE {
            return Err(bad(
                "eat_profile",
                format!("unknown profile {:?}", self.eat_profile),
            ));
        }
        if self.ueid.len() != UEID_LEN {
            return Err(bad(
                "ueid",
                format!("{} bytes, expected {UEID_LEN}", self.ueid.len()),
            ));
        }
        if self.measurements.len() > MAX_MEASUREMENTS {
            return Err(bad("measurements", "too many".into()));
        }
        for name in self.measurements.keys() {
            if name.is_empty()
                || name.len() > 128
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-:/".contains(&b))
            {
                return Err(bad(
                    "measurements",
                    format!("bad measurement name {name:?}"),
                ));
            }
        }
        if let Some(quote) = &self.tpm {
            quote.validate().map_err(|e| bad("tpm", e.to_string()))?;
        }
        if self.submods.len() > MAX_GPUS {
            return Err(bad("submods", "too many GPUs".into()));
        }
        let mut uuids = std::collections::BTreeSet::new();
        for g in &self.submods {
            if g.uuid.is_empty() || g.uuid.len() > 128 {
                return Err(bad("submods.uuid", format!("bad GPU UUID {:?}", g.uuid)));
            }
            if !uuids.insert(g.uuid.as_str()) {
                return Err(bad("submods.uuid", format!("duplicate GPU {}", g.uuid)));
            }
            if let Some(r) = &g.report {
                if r.cert_chain.len() > MAX_CHAIN_LEN || r.spdm.len() > MAX_SPDM_BYTES {
                    return Err(bad(
                        "submods.report",
                        format!("GPU {}: report too large", g.uuid),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The node public key, taken from the enrollment certificate.
    pub fn node_public_key(&self) -> &[u8; 32] {
        &self.enrollment.claims.node_public_key
    }
}

/// A signed evidence document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Evidence {
    /// The claims.
    pub claims: EvidenceClaims,
    /// Ed25519 signature by the node key.
    #[serde(with = "hex_bytes::array")]
    pub signature: [u8; 64],
}

impl Evidence {
    /// Sign claims with the node key. The key must be the one the enrollment names, and the
    /// UEID must be derived from it.
    pub fn sign(claims: EvidenceClaims, key: &NodeKey) -> Result<Self, EvidenceError> {
        claims.validate()?;
        if key.public_key() != *claims.node_public_key() {
            return Err(EvidenceError::KeyMismatch);
        }
        if claims.ueid != key.ueid() {
            return Err(EvidenceError::Invalid {
                field: "ueid",
                reason: "not derived from the node key".into(),
            });
        }
        let msg = canonical::signing_input(EVIDENCE_CONTEXT, &canonical::encode(&claims)?);
        let signature = key.sign_raw(&msg);
        Ok(Self { claims, signature })
    }

    /// Canonical bytes of the document.
    pub fn to_bytes(&self) -> Result<Vec<u8>, EvidenceError> {
        Ok(canonical::encode(self)?)
    }

    /// Decode canonical bytes and check format rules (not the signature).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, EvidenceError> {
        if bytes.len() > MAX_EVIDENCE_BYTES {
            return Err(EvidenceError::Invalid {
                field: "document",
                reason: format!("{} bytes, limit {MAX_EVIDENCE_BYTES}", bytes.len()),
            });
        }
        let e: Self = canonical::decode(bytes)?;
        e.claims.validate()?;
        Ok(e)
    }

    /// Verify the node signature with the key named in the enrollment certificate and check
    /// the UEID is derived from it. (Whether that enrollment is trustworthy is the verifier's
    /// job.)
    pub fn verify_signature(&self) -> Result<(), EvidenceError> {
        self.verify_signature_over(&canonical::encode(&self.claims)?)
    }

    /// Decode a document and verify its node signature in one pass, reusing the received
    /// canonical bytes of `claims` instead of encoding them again (the verifier's fast path).
    /// Errors: `Encoding`/`Invalid` for malformed documents, `BadSignature` otherwise.
    pub fn verify_document(bytes: &[u8]) -> Result<Self, EvidenceError> {
        let e = Self::from_bytes(bytes)?;
        match claims_slice(bytes) {
            Some(claims) => e.verify_signature_over(claims)?,
            None => e.verify_signature()?,
        }
        Ok(e)
    }

    fn verify_signature_over(&self, canonical_claims: &[u8]) -> Result<(), EvidenceError> {
        let pk = self.claims.node_public_key();
        if self.claims.ueid != identity::ueid(pk) {
            return Err(EvidenceError::Invalid {
                field: "ueid",
                reason: "not derived from the enrolled node key".into(),
            });
        }
        let key = identity::verifying_key(pk).map_err(|_| EvidenceError::BadSignature)?;
        let msg = canonical::signing_input(EVIDENCE_CONTEXT, canonical_claims);
        key.verify_strict(&msg, &Signature::from_bytes(&self.signature))
            .map_err(|_| EvidenceError::BadSignature)
    }
}

/// In a canonical document the members are sorted, so the bytes are exactly
/// `{"claims":` canonical(claims) `,"signature":"` 128 hex digits `"}`.
fn claims_slice(bytes: &[u8]) -> Option<&[u8]> {
    const PREFIX: &[u8] = b"{\"claims\":";
    const SUFFIX_START: &[u8] = b",\"signature\":\"";
    let suffix_len = SUFFIX_START.len() + 128 + 2;
    if bytes.len() < PREFIX.len() + suffix_len || !bytes.starts_with(PREFIX) {
        return None;
    }
    let end = bytes.len() - suffix_len;
    if !bytes[end..].starts_with(SUFFIX_START) || !bytes.ends_with(b"\"}") {
        return None;
    }
    Some(&bytes[PREFIX.len()..end])
}

/// SHA-256 of the evidence bytes as received.
pub fn evidence_digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// The SPDM nonce a GPU must sign: SHA-256(verifier nonce || UUID (UTF-8) || node public key).
pub fn gpu_nonce(
    verifier_nonce: &[u8; 32],
    gpu_uuid: &str,
    node_public_key: &[u8; 32],
) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(verifier_nonce);
    h.update(gpu_uuid.as_bytes());
    h.update(node_public_key);
    h.finalize().into()
}
