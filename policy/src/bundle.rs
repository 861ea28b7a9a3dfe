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
//! `name+id+base64`, Ed25519 algorithm byte 0x01, id = SHA-256(name || 0x0A || 0x01 || key)[:4]).

use crate::load::{from_toml_str, LoadError};
use crate::model::{Policy, PolicyDigest};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use ed25519_dalek::{Signature, Signer as _, SigningKey, Verifier as _, VerifyingKey};
use sha2::{Digest as _, Sha256};
use std::fmt;
use zeroize::Zeroizing;

/// First line of the signed statement; changes if the statement format ever changes.
pub const STATEMENT_HEADER: &str = "sovereign-host policy bundle v1";

const ALG_ED25519: u8 = 0x01;
const SIG_PREFIX: &str = "\u{2014} ";
const MAX_NOTE_BYTES: usize = 64 * 1024;
const MAX_SIGNATURES: usize = 100;

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

/// The policy authority's private key (note signer key). The Ed25519 key zeroizes on drop.
pub struct SignerKey {
    name: String,
    id: u32,
    key: SigningKey,
}

/// The policy authority's public key (note verifier key), as nodes are configured with it.
#[derive(Clone, PartialEq, Eq)]
pub struct VerifierKey {
    name: String,
    id: u32,
    key: VerifyingKey,
}

fn valid_key_name(name: &str) -> bool {
    !name.is_empty()
        && !name.contains('+')
        && !name.chars().any(|c| c.is_whitespace() || c.is_control())
}

fn key_id(name: &str, public: &[u8; 32]) -> u32 {
    let mut h = Sha256::new();
    h.update(name.as_bytes());
    h.update([b'\n', ALG_ED25519]);
    h.update(public);
    let d = h.finalize();
    u32::from_be_bytes([d[0], d[1], d[2], d[3]])
}

impl SignerKey {
    /// A key from a 32-byte seed (generate the seed with an OS RNG; the library does no I/O).
    pub fn from_seed(name: &str, seed: &[u8; 32]) -> Result<Self, BundleError> {
        if !valid_key_name(name) {
            return Err(BundleError::BadKey(format!(
                "key name '{name}' must be non-empty, without '+' or whitespace"
            )));
        }
        let key = SigningKey::from_bytes(seed);
        let id = key_id(name, key.verifying_key().as_bytes());
        Ok(SignerKey {
            name: name.to_string(),
            id,
            key,
        })
    }

    /// Parses `PRIVATE+KEY+<name>+<id hex>+<base64(0x01 || seed)>`.
    pub fn parse(s: &str) -> Result<Self, BundleError> {
        let s = s.trim_end_matches(['\n', '\r']);
        let bad = |m: &str| BundleError::BadKey(m.to_string());
        let rest = s
            .strip_prefix("PRIVATE+KEY+")
            .ok_or_else(|| bad("a signer key starts with PRIVATE+KEY+"))?;
        let mut parts = rest.splitn(3, '+');
        let (Some(name), Some(id_hex), Some(b64)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(bad("expected PRIVATE+KEY+name+id+key"));
        };
        let raw = Zeroizing::new(
            B64.decode(b64)
                .map_err(|_| bad("key material is not base64"))?,
        );
        if raw.len() != 33 || raw[0] != ALG_ED25519 {
            return Err(bad(
                "key material must be 0x01 followed by a 32-byte Ed25519 seed",
            ));
        }
        let mut seed = Zeroizing::new([0u8; 32]);
        seed.copy_from_slice(&raw[1..]);
        let key = SignerKey::from_seed(name, &seed)?;
        if format!("{:08x}", key.id) != id_hex {
            return Err(bad("key id does not match the key name and key material"));
        }
        Ok(key)
    }

    /// The encoded private key, for writing to a mode-0600 file.
    pub fn encode(&self) -> Zeroizing<String> {
        let mut raw = Zeroizing::new(Vec::with_capacity(33));
        raw.push(ALG_ED25519);
        raw.extend_from_slice(self.key.as_bytes());
        Zeroizing::new(format!(
            "PRIVATE+KEY+{}+{:08x}+{}",
            self.name,
            self.id,
            B64.encode(raw.as_slice())
        ))
    }

    /// The matching verifier key.
    pub fn verifier(&self) -> VerifierKey {
        VerifierKey {
            name: self.name.clone(),
            id: self.id,
            key: self.key.verifying_key(),
        }
    }

    /// The key name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Debug for SignerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SignerKey({}+{:08x}, <secret>)", self.name, self.id)
    }
}

impl VerifierKey {
    /// Parses `<name>+<id hex>+<base64(0x01 || public key)>`.
    pub fn parse(s: &str) -> Result<Self, BundleError> {
        let s = s.trim_end_matches(['\n', '\r']);
        let bad = |m: &str| BundleError::BadKey(m.to_string());
        let mut parts = s.splitn(3, '+');
        let (Some(name), Some(id_hex), Some(b64)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(bad("expected name+id+key"));
        };
        if !valid_key_name(name) {
            return Err(bad("key name must be non-empty, without '+' or whitespace"));
        }
        let raw = B64
            .decode(b64)
            .map_err(|_| bad("key material is not base64"))?;
        if raw.len() != 33 || raw[0] != ALG_ED25519 {
            return Err(bad(
                "key material must be 0x01 followed by a 32-byte Ed25519 public key",
            ));
        }
        let mut pk = [0u8; 32];
        pk.copy_from_slice(&raw[1..]);
        let key =
            VerifyingKey::from_bytes(&pk).map_err(|_| bad("not a valid Ed25519 public key"))?;
        let id = key_id(name, &pk);
        if format!("{id:08x}") != id_hex {
            return Err(bad("key id does not match the key name and key material"));
        }
        Ok(VerifierKey {
            name: name.to_string(),
            id,
            key,
        })
    }

    /// The encoded verifier key.
    pub fn encode(&self) -> String {
        let mut raw = vec![ALG_ED25519];
        raw.extend_from_slice(self.key.as_bytes());
        format!("{}+{:08x}+{}", self.name, self.id, B64.encode(raw))
    }

    /// The key name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The 4-byte key id.
    pub fn id(&self) -> u32 {
        self.id
    }
}

impl fmt::Debug for VerifierKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.encode())
    }
}

/// A signature line of a note.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoteSignature {
    /// Key name.
    pub name: String,
    /// Key id (first 4 bytes of the signature blob).
    pub id: u32,
    /// The rest of the blob (64 bytes for Ed25519).
    pub sig: Vec<u8>,
}

/// A parsed (not yet verified) signed note.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// The signed text, ending in a newline.
    pub text: String,
    /// Signature lines in order.
    pub signatures: Vec<NoteSignature>,
}

/// Splits a signed note into text and signature lines (C2SP signed-note syntax).
pub fn parse_note(msg: &[u8]) -> Result<Note, BundleError> {
    let bad = |m: &str| BundleError::MalformedNote(m.to_string());
    if msg.len() > MAX_NOTE_BYTES {
        return Err(bad("note is too large"));
    }
    let msg = std::str::from_utf8(msg).map_err(|_| bad("not UTF-8"))?;
    if msg.chars().any(|c| c < ' ' && c != '\n') {
        return Err(bad("contains control characters"));
    }
    let split = msg.rfind("\n\n").ok_or(BundleError::Unsigned)?;
    let text = &msg[..split + 1];
    let sigs = &msg[split + 2..];
    if sigs.is_empty() {
        return Err(BundleError::Unsigned);
    }
    if !sigs.ends_with('\n') {
        return Err(bad("signature block must end with a newline"));
    }
    let mut signatures = Vec::new();
    for line in sigs[..sigs.len() - 1].split('\n') {
        let rest = line
            .strip_prefix(SIG_PREFIX)
            .ok_or_else(|| bad("signature lines start with an em dash and a space"))?;
        let (name, b64) = rest
            .split_once(' ')
            .ok_or_else(|| bad("signature line is '— name base64'"))?;
        if !valid_key_name(name) || b64.contains(' ') {
            return Err(bad("signature line has an invalid key name"));
        }
        let blob = B64
            .decode(b64)
            .map_err(|_| bad("signature is not base64"))?;
        if blob.len() < 5 {
            return Err(bad("signature is too short"));
        }
        signatures.push(NoteSignature {
            name: name.to_string(),
            id: u32::from_be_bytes([blob[0], blob[1], blob[2], blob[3]]),
            sig: blob[4..].to_vec(),
        });
        if signatures.len() > MAX_SIGNATURES {
            return Err(bad("too many signatures"));
        }
    }
    Ok(Note {
        text: text.to_string(),
        signatures,
    })
}

/// Signs note text (which must end in a newline), producing the full signed note.
pub fn sign_note(text: &str, key: &SignerKey) -> Result<String, BundleError> {
    if text.is_empty() || !text.ends_with('\n') || text.chars().any(|c| c < ' ' && c != '\n') {
        return Err(BundleError::MalformedNote(
            "note text must be non-empty, end in a newline and contain no control characters"
                .into(),
        ));
    }
    let sig = key.key.sign(text.as_bytes());
    let mut blob = key.id.to_be_bytes().to_vec();
    blob.extend_from_slice(&sig.to_bytes());
    Ok(format!(
        "{text}\n{SIG_PREFIX}{} {}\n",
        key.name,
        B64.encode(blob)
    ))
}

/// Verifies that `note` carries a valid signature by `key` and returns its text.
pub fn verify_note(note: &[u8], key: &VerifierKey) -> Result<String, BundleError> {
    let n = parse_note(note)?;
    let mine = n
        .signatures
        .iter()
        .find(|s| s.name == key.name && s.id == key.id);
    let Some(s) = mine else {
        let names: Vec<&str> = n.signatures.iter().map(|s| s.name.as_str()).collect();
        return Err(BundleError::NotSignedByAuthority(
            key.name.clone(),
            names.join(", "),
        ));
    };
    let sig =
        Signature::from_slice(&s.sig).map_err(|_| BundleError::BadSignature(key.name.clone()))?;
    key.key
        .verify(n.text.as_bytes(), &sig)
        .map_err(|_| BundleError::BadSignature(key.name.clone()))?;
    Ok(n.text)
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
