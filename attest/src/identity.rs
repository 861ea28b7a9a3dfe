//! Node identity: the node's Ed25519 attestation key and its enrollment certificate.
//!
//! The node key is deliberately separate from the ledger key: compromising one must not let
//! an attacker forge the other. What a node *is* (name, jurisdiction, facility) is never taken
//! from the node's own say-so: it comes only from an enrollment certificate signed by the
//! operator's enrollment authority, which a verifier checks against its configured authority
//! keys. Signed bytes use the canonical encoding of [`crate::canonical`] with the context
//! [`ENROLLMENT_CONTEXT`].

use crate::canonical::{self, hex_bytes, CanonicalError};
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Domain-separation context of enrollment certificate signatures.
pub const ENROLLMENT_CONTEXT: &str = "sovereign-host/enrollment/v1";

/// EAT UEID type byte for a random identifier (RFC 9711 §4.2.1, "RAND").
pub const UEID_TYPE_RAND: u8 = 0x01;

/// Length of a node UEID: type byte plus a 32-byte SHA-256.
pub const UEID_LEN: usize = 33;

/// Errors about identities and enrollment.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IdentityError {
    /// A field violates the enrollment rules (empty name, malformed jurisdiction, …).
    #[error("invalid enrollment field {field}: {reason}")]
    InvalidField {
        /// Field name.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The certificate names an authority that is not configured.
    #[error("enrollment signed by unknown authority {0}")]
    UnknownAuthority(String),
    /// The authority's signature does not verify.
    #[error("enrollment certificate signature does not verify")]
    BadSignature,
    /// `now` is before `not_before`.
    #[error("enrollment not valid before {not_before} (now {now})")]
    NotYetValid {
        /// Start of validity, Unix seconds.
        not_before: u64,
        /// The time checked.
        now: u64,
    },
    /// `now` is after `not_after`.
    #[error("enrollment expired at {not_after} (now {now})")]
    Expired {
        /// End of validity, Unix seconds.
        not_after: u64,
        /// The time checked.
        now: u64,
    },
    /// The key bytes are not a valid Ed25519 public key.
    #[error("invalid Ed25519 public key")]
    BadKey,
    /// Encoding failed.
    #[error(transparent)]
    Encoding(#[from] CanonicalError),
}

/// The node's attestation key. Zeroized on drop (ed25519-dalek's `zeroize` feature).
pub struct NodeKey {
    key: SigningKey,
}

impl NodeKey {
    /// Rebuild from a 32-byte seed (the caller loads it from a 0600 file or generates it).
    pub fn from_seed(seed: &[u8; 32]) -> Self {
        Self {
            key: SigningKey::from_bytes(seed),
        }
    }

    /// The public key bytes.
    pub fn public_key(&self) -> [u8; 32] {
        self.key.verifying_key().to_bytes()
    }

    /// The node's UEID.
    pub fn ueid(&self) -> [u8; UEID_LEN] {
        ueid(&self.public_key())
    }

    /// Sign an already domain-separated message.
    pub(crate) fn sign_raw(&self, message: &[u8]) -> [u8; 64] {
        self.key.sign(message).to_bytes()
    }
}

impl std::fmt::Debug for NodeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NodeKey({})", hex::encode(self.public_key()))
    }
}

/// UEID of a node: `0x01 || SHA-256(node public key)`.
///
/// Deriving it from the key (rather than a separately stored random value) means a UEID can
/// never be claimed by a different key.
pub fn ueid(node_public_key: &[u8; 32]) -> [u8; UEID_LEN] {
    let mut out = [0u8; UEID_LEN];
    out[0] = UEID_TYPE_RAND;
    out[1..].copy_from_slice(&Sha256::digest(node_public_key));
    out
}

/// What the enrollment authority vouches for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnrollmentClaims {
    /// Ed25519 public key of the node's attestation key.
    #[serde(with = "hex_bytes::array")]
    pub node_public_key: [u8; 32],
    /// Operator-assigned node name.
    pub node_name: String,
    /// Jurisdiction code: ISO 3166-1 alpha-2, optionally with an ISO 3166-2 subdivision
    /// (`DE`, `DE-BY`).
    pub jurisdiction: String,
    /// Facility (data-centre) identifier.
    pub facility: String,
    /// Start of validity, Unix seconds (inclusive).
    pub not_before: u64,
    /// End of validity, Unix seconds (inclusive).
    pub not_after: u64,
    /// The authority's Ed25519 public key, so a verifier with several authorities knows
    /// which one to check.
    #[serde(with = "hex_bytes::array")]
    pub authority_public_key: [u8; 32],
    /// The node's TPM attestation key: its TPMT_PUBLIC bytes (see [`crate::tpm::AkPublic`]),
    /// as `hostd tpm-ak` prints them. Binding the AK here is what makes the node's TPM quotes
    /// evidence: the verifier checks quotes only with the key the authority vouched for.
    /// Omitted from the encoding when absent, so certificates issued before TPM support keep
    /// their bytes and signatures.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "hex_bytes::option"
    )]
    pub tpm_ak: Option<Vec<u8>>,
    /// SHA-256 of the DER EK certificate of the TPM that holds `tpm_ak`, when the authority
    /// checked it (`sovctl attest tpm-challenge`): the certificate verified up to a TPM maker's
    /// root, and the TPM proved with TPM2_ActivateCredential that the AK sits beside that EK
    /// (`attest::tpm::ek`). Absent, the AK is the operator's word alone. It names the TPM in
    /// the record; verifiers do not need it to check quotes. Omitted when absent.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "hex_bytes::option_array"
    )]
    pub tpm_ek_certificate_sha256: Option<[u8; 32]>,
}

impl EnrollmentClaims {
    /// Check field syntax (not signatures or time).
    pub fn validate(&self) -> Result<(), IdentityError> {
        let bad = |field, reason: &str| IdentityError::InvalidField {
            field,
            reason: reason.into(),
        };
        check_label(&self.node_name).map_err(|r| bad("node_name", r))?;
        check_label(&self.facility).map_err(|r| bad("facility", r))?;
        check_jurisdiction(&self.jurisdiction).map_err(|r| bad("jurisdiction", r))?;
        if self.not_after < self.not_before {
            return Err(bad("not_after", "before not_before"));
        }
        if self.tpm_ek_certificate_sha256.is_some() && self.tpm_ak.is_none() {
            return Err(bad(
                "tpm_ek_certificate_sha256",
                "names an EK certificate without an attestation key (tpm_ak)",
            ));
        }
        if let Some(ak) = &self.tpm_ak {
            crate::tpm::AkPublic::parse(ak).map_err(|e| IdentityError::InvalidField {
                field: "tpm_ak",
                reason: e.to_string(),
            })?;
        }
        Ok(())
    }
}

fn check_label(s: &str) -> Result<(), &'static str> {
    if s.is_empty() || s.len() > 128 {
        return Err("must be 1..=128 bytes");
    }
    if s.chars().any(|c| c.is_control()) {
        return Err("must not contain control characters");
    }
    Ok(())
}

fn check_jurisdiction(s: &str) -> Result<(), &'static str> {
    let (country, sub) = match s.split_once('-') {
        Some((c, sub)) => (c, Some(sub)),
        None => (s, None),
    };
    if country.len() != 2 || !country.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err("country must be two upper-case letters (ISO 3166-1 alpha-2)");
    }
    if let Some(sub) = sub {
        if sub.is_empty()
            || sub.len() > 3
            || !sub
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
        {
            return Err("subdivision must be 1-3 upper-case letters or digits (ISO 3166-2)");
        }
    }
    Ok(())
}

/// An enrollment certificate: claims plus the authority's Ed25519 signature over
/// `ENROLLMENT_CONTEXT || 0x00 || canonical(claims)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnrollmentCertificate {
    /// The signed claims.
    pub claims: EnrollmentClaims,
    /// Ed25519 signature.
    #[serde(with = "hex_bytes::array")]
    pub signature: [u8; 64],
}

impl EnrollmentCertificate {
    /// Canonical bytes of the whole certificate.
    pub fn to_bytes(&self) -> Result<Vec<u8>, IdentityError> {
        Ok(canonical::encode(self)?)
    }

    /// Parse canonical bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, IdentityError> {
        Ok(canonical::decode(bytes)?)
    }

    /// Check the signature against the configured authorities and the field syntax.
    pub fn verify_signature(&self, authorities: &[VerifyingKey]) -> Result<(), IdentityError> {
        self.claims.validate()?;
        let authority = authorities
            .iter()
            .find(|k| k.to_bytes() == self.claims.authority_public_key)
            .ok_or_else(|| {
                IdentityError::UnknownAuthority(hex::encode(self.claims.authority_public_key))
            })?;
        let msg = canonical::signing_input(ENROLLMENT_CONTEXT, &canonical::encode(&self.claims)?);
        authority
            .verify_strict(&msg, &Signature::from_bytes(&self.signature))
            .map_err(|_| IdentityError::BadSignature)
    }

    /// Check the validity window at `now` (Unix seconds).
    pub fn check_validity(&self, now: u64) -> Result<(), IdentityError> {
        if now < self.claims.not_before {
            return Err(IdentityError::NotYetValid {
                not_before: self.claims.not_before,
                now,
            });
        }
        if now > self.claims.not_after {
            return Err(IdentityError::Expired {
                not_after: self.claims.not_after,
                now,
            });
        }
        Ok(())
    }
}

/// The operator's enrollment authority (signing side). Zeroized on drop.
pub struct EnrollmentAuthority {
    key: SigningKey,
}

impl EnrollmentAuthority {
    /// Rebuild from a 32-byte seed.
    pub fn from_seed(seed: &[u8; 32]) -> Self {
        Self {
            key: SigningKey::from_bytes(seed),
        }
    }

    /// The verifying key relying parties configure.
    pub fn verifying_key(&self) -> VerifyingKey {
        self.key.verifying_key()
    }

    /// Sign an enrollment for a node; `claims.authority_public_key` is overwritten with this
    /// authority's key.
    pub fn issue(
        &self,
        mut claims: EnrollmentClaims,
    ) -> Result<EnrollmentCertificate, IdentityError> {
        claims.authority_public_key = self.key.verifying_key().to_bytes();
        claims.validate()?;
        let msg = canonical::signing_input(ENROLLMENT_CONTEXT, &canonical::encode(&claims)?);
        let signature = self.key.sign(&msg).to_bytes();
        Ok(EnrollmentCertificate { claims, signature })
    }
}

impl std::fmt::Debug for EnrollmentAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "EnrollmentAuthority({})",
            hex::encode(self.key.verifying_key().to_bytes())
        )
    }
}

/// Parse a 32-byte Ed25519 public key.
pub fn verifying_key(bytes: &[u8; 32]) -> Result<VerifyingKey, IdentityError> {
    VerifyingKey::from_bytes(bytes).map_err(|_| IdentityError::BadKey)
}
