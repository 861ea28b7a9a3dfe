//! Signed image manifest: the release's expected measurements, the reference values a verifier
//! compares evidence against.
//!
//! Produced by the image build (or `sovctl attest reference` from given files) and signed with
//! a release key (Ed25519) over `MANIFEST_CONTEXT || 0x00 || canonical(manifest)`.

use crate::canonical::{self, hex_bytes, CanonicalError};
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Domain-separation context of image manifest signatures.
pub const MANIFEST_CONTEXT: &str = "sovereign-host/image-manifest/v1";

/// Errors about manifests.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ManifestError {
    /// Not canonical JSON of the expected shape.
    #[error("manifest encoding")]
    Encoding(#[from] CanonicalError),
    /// Signed by a key that is not a configured release key.
    #[error("manifest signed by unknown release key {0}")]
    UnknownKey(String),
    /// Signature does not verify.
    #[error("manifest signature does not verify")]
    BadSignature,
    /// Empty name/version or no measurements.
    #[error("invalid manifest: {0}")]
    Invalid(String),
}

/// What a release is expected to measure as.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageManifest {
    /// Image name.
    pub name: String,
    /// Image version.
    pub version: String,
    /// Expected SHA-256 per measurement name (same names as in evidence).
    #[serde(with = "hex_bytes::digest_map")]
    pub measurements: BTreeMap<String, [u8; 32]>,
    /// What the measurements are made of, for people rather than for appraisal: the image
    /// build lists the SHA-256 of each UKI section, the dm-verity root hash and the like, so
    /// that when a node's PCR 11 differs an auditor can tell which part changed. Omitted
    /// when empty, so manifests without it keep their bytes and signatures.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        with = "hex_bytes::digest_map"
    )]
    pub components: BTreeMap<String, [u8; 32]>,
}

/// A manifest with the release key's signature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignedImageManifest {
    /// The manifest.
    pub manifest: ImageManifest,
    /// The release key that signed it.
    #[serde(with = "hex_bytes::array")]
    pub release_key: [u8; 32],
    /// Ed25519 signature.
    #[serde(with = "hex_bytes::array")]
    pub signature: [u8; 64],
}

impl ImageManifest {
    fn validate(&self) -> Result<(), ManifestError> {
        if self.name.is_empty() || self.version.is_empty() {
            return Err(ManifestError::Invalid("empty name or version".into()));
        }
        if self.measurements.is_empty() {
            return Err(ManifestError::Invalid("no measurements".into()));
        }
        Ok(())
    }

    /// Sign with a release key.
    pub fn sign(self, key: &SigningKey) -> Result<SignedImageManifest, ManifestError> {
        self.validate()?;
        let msg = canonical::signing_input(MANIFEST_CONTEXT, &canonical::encode(&self)?);
        Ok(SignedImageManifest {
            release_key: key.verifying_key().to_bytes(),
            signature: key.sign(&msg).to_bytes(),
            manifest: self,
        })
    }
}

impl SignedImageManifest {
    /// Canonical bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>, ManifestError> {
        Ok(canonical::encode(self)?)
    }

    /// Parse canonical bytes (signature not yet checked).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, ManifestError> {
        Ok(canonical::decode(bytes)?)
    }

    /// Check the signature against trusted release keys; returns the manifest.
    pub fn verify(&self, release_keys: &[VerifyingKey]) -> Result<&ImageManifest, ManifestError> {
        self.manifest.validate()?;
        let key = release_keys
            .iter()
            .find(|k| k.to_bytes() == self.release_key)
            .ok_or_else(|| ManifestError::UnknownKey(hex::encode(self.release_key)))?;
        let msg = canonical::signing_input(MANIFEST_CONTEXT, &canonical::encode(&self.manifest)?);
        key.verify_strict(&msg, &Signature::from_bytes(&self.signature))
            .map_err(|_| ManifestError::BadSignature)?;
        Ok(&self.manifest)
    }
}
