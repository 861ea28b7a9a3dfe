//! Signed policy bundles: a policy file plus a detached C2SP signed note by the policy
//! authority, so a node refuses unsigned, wrongly signed and rolled-back policies.
//!
//! The signature file (`FILE.sig`) is a C2SP signed note (<https://c2sp.org/signed-note>)
//! whose text is a small statement naming the policy, its version and the SHA-256 of the
//! exact policy bytes:
//!
//! ```text
//! sovereign-host policy bundle v1
//! name hyd-sovereign-01
//! version 7
//! digest sha256:3f1c...e0
//!
//! — policy-authority.example.in Ab3x...==
//! ```
//!
//! Signing a statement rather than the policy text keeps the policy free of the note's text
//! restrictions (tabs, control characters) and lets auditors verify with any signed-note tool.
//! Keys use the note signer/verifier key encodings (`PRIVATE+KEY+name+id+base64` and
//! `name+id+base64`, Ed25519 algorithm byte 0x01, id = `SHA-256(name || 0x0A || 0x01 || key)[:4]`).

use crate::load::{from_toml_str, LoadError};
use crate::model::{Policy, PolicyDigest};
use attest::note::{self, NoteError, NoteSigner, NoteVerifier, ParsedNote};
use std::fmt;
use zeroize::Zeroizing;

/// First line of the signed statement; changes if the statement format ever changes.
pub const STATEMENT_HEADER: &str = "sovereign-host policy bundle v1";

const MAX_NOTE_BYTES: usize = 64 * 1024;

/// Why a bundle is refused, or a key or note cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// No signature file, or it carries no signature lines.
    #[error("policy is unsigned: a signature by the policy authority is required")]
    Unsigned,
    /// The signature file is not a well-formed signed note.
    #[error("signature file is not a valid signed note: {0}")]
    MalformedNote(String),
    /// The note carries signatures, but none by the authority key.
    #[error("policy is not signed by the policy authority '{0}' (signatures present by: {1})")]
    NotSignedByAuthority(String, String),
    /// The authority's signature does not verify.
    #[error("signature by '{0}' does not verify: the signature file or statement was altered or signed by another key")]
    BadSignature(String),
    /// The signed statement is not a policy bundle statement.
    #[error("signed statement is not a policy bundle statement: {0}")]
    BadStatement(String),
    /// The policy bytes are not the ones that were signed.
    #[error("policy file digest {actual} does not match the signed digest {signed}")]
    DigestMismatch {
        /// Digest in the signed statement.
        signed: String,
        /// Digest of the offered policy bytes.
        actual: String,
    },
    /// The statement's version or name differs from the policy file's.
    #[error("signed statement says {field} {signed}, the policy file says {actual}")]
    StatementMismatch {
        /// Which field.
        field: &'static str,
        /// Signed value.
        signed: String,
        /// Policy file value.
        actual: String,
    },
    /// Older than the active policy.
    #[error("rollback refused: offered policy version {offered} is older than the active version {current}")]
    Rollback {
        /// Version offered.
        offered: u64,
        /// Version active on the node.
        current: u64,
    },
    /// Same version as the active policy but different content.
    #[error("refused: version {version} is already active with digest {current}, but this policy has digest {offered}; a changed policy needs a higher version")]
    VersionReused {
        /// The version.
        version: u64,
        /// Digest offered.
        offered: String,
        /// Digest active.
        current: String,
    },
    /// The policy is not valid UTF-8.
    #[error("policy file is not valid UTF-8")]
    NotUtf8,
    /// The signed policy does not load.
    #[error("policy file is invalid ({} error(s)); first: {}", .0.len(), .0.first().map(|e| e.to_string()).unwrap_or_default())]
    InvalidPolicy(Vec<LoadError>),
    /// A key string is malformed.
    #[error("invalid key: {0}")]
    BadKey(String),
}

/// The policy authority's private key (a C2SP note signer key, as [`attest::note`] implements
/// it for the usage log: one implementation of the format for the whole project). The
/// Ed25519 key zeroizes on drop.
pub struct SignerKey {
    inner: NoteSigner,
}

/// The policy authority's public key (note verifier key), as nodes are configured with it.
#[derive(Clone, PartialEq, Eq)]
pub struct VerifierKey {
    inner: NoteVerifier,
}

fn bad_key(e: NoteError) -> BundleError {
    BundleError::BadKey(e.to_string())
}

impl SignerKey {
    /// A key from a 32-byte seed (generate the seed with an OS RNG; the library does no I/O).
    pub fn from_seed(name: &str, seed: &[u8; 32]) -> Result<Self, BundleError> {
        Ok(SignerKey {
            inner: NoteSigner::from_seed(name, seed).map_err(bad_key)?,
        })
    }

    /// Parses `PRIVATE+KEY+<name>+<id hex>+<base64(0x01 || seed)>`.
    pub fn parse(s: &str) -> Result<Self, BundleError> {
        Ok(SignerKey {
            inner: NoteSigner::from_skey(s.trim_end_matches(['\n', '\r'])).map_err(bad_key)?,
        })
    }

    /// The encoded private key, for writing to a mode-0600 file.
    pub fn encode(&self) -> Zeroizing<String> {
        self.inner.to_skey()
    }

    /// The matching verifier key.
    pub fn verifier(&self) -> VerifierKey {
        VerifierKey {
            inner: self.inner.verifier(),
        }
    }

    /// The key name.
    pub fn name(&self) -> &str {
        self.inner.name()
    }
}

impl fmt::Debug for SignerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "SignerKey({}+{:08x}, <secret>)",
            self.inner.name(),
            self.inner.key_id()
        )
    }
}

impl VerifierKey {
    /// Parses `<name>+<id hex>+<base64(0x01 || public key)>`.
    pub fn parse(s: &str) -> Result<Self, BundleError> {
        Ok(VerifierKey {
            inner: NoteVerifier::parse(s.trim_end_matches(['\n', '\r'])).map_err(bad_key)?,
        })
    }

    /// The encoded verifier key.
    pub fn encode(&self) -> String {
        self.inner.to_vkey()
    }

    /// The key name.
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// The 4-byte key id.
    pub fn id(&self) -> u32 {
        self.inner.key_id()
    }
}

impl fmt::Debug for VerifierKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.encode())
    }
}

/// Splits a signed note into text and signature lines (C2SP signed-note syntax), verifying
/// nothing.
pub fn parse_note(msg: &[u8]) -> Result<ParsedNote, BundleError> {
    if msg.len() > MAX_NOTE_BYTES {
        return Err(BundleError::MalformedNote("note is too large".into()));
    }
    note::parse(msg).map_err(note_error)
}

fn note_error(e: NoteError) -> BundleError {
    match e {
        NoteError::MissingSignatureBlock => BundleError::Unsigned,
        other => BundleError::MalformedNote(other.to_string()),
    }
}

/// Signs note text (which must end in a newline), producing the full signed note.
pub fn sign_note(text: &str, key: &SignerKey) -> Result<String, BundleError> {
    note::sign(text, &key.inner).map_err(|e| BundleError::MalformedNote(e.to_string()))
}

/// Verifies that `note` carries a valid signature by `key` and returns its text.
pub fn verify_note(msg: &[u8], key: &VerifierKey) -> Result<String, BundleError> {
    if msg.len() > MAX_NOTE_BYTES {
        return Err(BundleError::MalformedNote("note is too large".into()));
    }
    match note::open(msg, std::slice::from_ref(&key.inner)) {
        Ok(opened) => Ok(opened.text),
        Err(NoteError::NoKnownSignature { signers }) => {
            // Signers are `name+keyid`; names cannot contain '+'.
            let names: Vec<&str> = signers
                .iter()
                .map(|s| s.split('+').next().unwrap_or(s))
                .collect();
            Err(BundleError::NotSignedByAuthority(
                key.name().to_string(),
                names.join(", "),
            ))
        }
        Err(NoteError::BadSignature { .. }) => {
            Err(BundleError::BadSignature(key.name().to_string()))
        }
        Err(e) => Err(note_error(e)),
    }
}

/// The policy active on a node, for rollback protection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Installed {
    /// Its version.
    pub version: u64,
    /// Its digest.
    pub digest: PolicyDigest,
}

/// A policy file and its detached signature note.
#[derive(Debug, Clone, Copy)]
pub struct Bundle<'a> {
    /// Exact policy file bytes.
    pub policy: &'a [u8],
    /// The `FILE.sig` signed note (empty if missing: refused as unsigned).
    pub signature: &'a [u8],
}

/// The statement the authority signs for a policy.
pub fn statement(policy: &Policy) -> String {
    format!(
        "{STATEMENT_HEADER}\nname {}\nversion {}\ndigest {}\n",
        policy.name, policy.version, policy.digest
    )
}

/// Signs a policy file: validates it, then returns the signature note (`FILE.sig` contents).
/// The version signed is the one in the file's `[policy] version`.
pub fn sign_bundle(policy_bytes: &[u8], key: &SignerKey) -> Result<String, BundleError> {
    let text = std::str::from_utf8(policy_bytes).map_err(|_| BundleError::NotUtf8)?;
    let policy = from_toml_str(text).map_err(BundleError::InvalidPolicy)?;
    sign_note(&statement(&policy), key)
}

/// Node-side check of a bundle: signature by `authority`, statement matching the policy
/// bytes, policy valid, and not a rollback relative to `current` (a lower version, or the
/// same version with different content). Re-installing the active policy is accepted.
pub fn verify_bundle(
    bundle: Bundle<'_>,
    authority: &VerifierKey,
    current: Option<Installed>,
) -> Result<Policy, BundleError> {
    if bundle.signature.iter().all(|b| b.is_ascii_whitespace()) {
        return Err(BundleError::Unsigned);
    }
    let text = verify_note(bundle.signature, authority)?;
    let mut lines = text.lines();
    if lines.next() != Some(STATEMENT_HEADER) {
        return Err(BundleError::BadStatement(format!(
            "first line must be '{STATEMENT_HEADER}'"
        )));
    }
    let mut field = |key: &str| -> Result<String, BundleError> {
        lines
            .next()
            .and_then(|l| l.strip_prefix(key))
            .and_then(|l| l.strip_prefix(' '))
            .map(str::to_string)
            .ok_or_else(|| BundleError::BadStatement(format!("expected a '{key} ...' line")))
    };
    let name = field("name")?;
    let version_s = field("version")?;
    let digest_s = field("digest")?;
    if lines.next().is_some() {
        return Err(BundleError::BadStatement("unexpected extra lines".into()));
    }
    let version: u64 = version_s
        .parse()
        .map_err(|_| BundleError::BadStatement(format!("version '{version_s}' is not a number")))?;
    let signed_digest = PolicyDigest::parse(&digest_s).ok_or_else(|| {
        BundleError::BadStatement(format!("digest '{digest_s}' is not sha256:<hex>"))
    })?;
    let actual = PolicyDigest::of(bundle.policy);
    if actual != signed_digest {
        return Err(BundleError::DigestMismatch {
            signed: signed_digest.to_string(),
            actual: actual.to_string(),
        });
    }
    if let Some(cur) = current {
        if version < cur.version {
            return Err(BundleError::Rollback {
                offered: version,
                current: cur.version,
            });
        }
        if version == cur.version && actual != cur.digest {
            return Err(BundleError::VersionReused {
                version,
                offered: actual.to_string(),
                current: cur.digest.to_string(),
            });
        }
    }
    let text = std::str::from_utf8(bundle.policy).map_err(|_| BundleError::NotUtf8)?;
    let policy = from_toml_str(text).map_err(BundleError::InvalidPolicy)?;
    if policy.version != version {
        return Err(BundleError::StatementMismatch {
            field: "version",
            signed: version.to_string(),
            actual: policy.version.to_string(),
        });
    }
    if policy.name != name {
        return Err(BundleError::StatementMismatch {
            field: "name",
            signed: name,
            actual: policy.name.clone(),
        });
    }
    Ok(policy)
}
