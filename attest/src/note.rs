//! C2SP signed notes (<https://c2sp.org/signed-note>) with Ed25519 keys, byte-compatible
//! with `golang.org/x/mod/sumdb/note`.
//!
//! A note is UTF-8 text ending in a newline, a blank line, then signature lines
//! `— <key name> <base64(key ID || signature)>` (U+2014 em dash, space). Checkpoints are
//! notes, so anyone holding the node's verifier key can check them with stock tooling.
//!
//! Text formats of keys (those of the Go package, so keys move between the two freely):
//!
//! * verifier key: `<name>+<8 hex digits key ID>+<base64(0x01 || 32-byte public key)>`;
//! * signer key: `PRIVATE+KEY+<name>+<8 hex digits key ID>+<base64(0x01 || 32-byte seed)>`;
//! * key ID: the first four bytes, big-endian, of `SHA-256(name || 0x0A || 0x01 || public key)`.
//!
//! Opening applies the spec's rules: signatures from unknown keys (name *and* ID) are
//! ignored, a known key's bad signature rejects the whole note, and at least one known key
//! must have signed.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};
use rand_core::RngCore as _;
use sha2::{Digest, Sha256};
use std::fmt;
use zeroize::Zeroizing;

/// Signature type byte of Ed25519 in signed notes.
const ALG_ED25519: u8 = 0x01;
/// Starts every signature line: U+2014 EM DASH then a space.
const SIG_PREFIX: &str = "\u{2014} ";
const SKEY_PREFIX: &str = "PRIVATE+KEY+";

/// Most signature lines [`open`] looks at before refusing the note: the spec demands at
/// least 16; the Go implementation stops at 100, and so do we, so that a note stuffed with
/// signatures cannot make a verifier spin.
pub const MAX_SIGNATURES: usize = 100;

/// Why a note, key or signature was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoteError {
    /// Signed-note text is a sequence of whole lines; an unterminated last line is refused so
    /// that "text" and "text\n" are never both signable.
    #[error("note text must end with a newline")]
    TextMissingNewline,
    /// An empty first line would be read as the separator before the signatures.
    #[error("note text must not be empty or begin with an empty line")]
    TextEmptyFirstLine,
    /// Notes are UTF-8 by definition; anything else cannot be compared byte-for-byte with
    /// what the signer saw.
    #[error("note is not valid UTF-8")]
    InvalidUtf8,
    /// Control characters (other than newline) could hide text from a human reading the
    /// note, so the spec forbids them.
    #[error(
        "note contains control character U+{code:04X} at byte {offset} (only newline is allowed)"
    )]
    ControlCharacter {
        /// Byte offset of the character.
        offset: usize,
        /// Its code point.
        code: u32,
    },
    /// Without the blank line there is no signature block, hence nothing to trust.
    #[error("note has no blank line separating text from signatures")]
    MissingSignatureBlock,
    /// The last signature line is unterminated (truncated note).
    #[error("note signature block must end with a newline")]
    UnterminatedSignatureBlock,
    /// A signature line is not `— name base64(key ID ‖ signature)`.
    #[error("malformed signature line {line}: {reason}")]
    MalformedSignature {
        /// 1-based line number within the signature block.
        line: usize,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// More than [`MAX_SIGNATURES`] signature lines: refused so a stuffed note cannot make a
    /// verifier spin.
    #[error("note has more than {MAX_SIGNATURES} signatures")]
    TooManySignatures,
    /// A key we trust claims to have signed, but the signature is wrong: the text was
    /// altered or the signature forged. This is fatal even if another known key verified.
    #[error("signature by known key {name}+{key_id:08x} does not verify")]
    BadSignature {
        /// Key name.
        name: String,
        /// Key ID.
        key_id: u32,
    },
    /// Nobody we trust signed; the text must be ignored. Lists who did sign, for diagnosis.
    #[error("no signature by a known key (signed by: {})", .signers.join(", "))]
    NoKnownSignature {
        /// `name+keyid` of every signature present.
        signers: Vec<String>,
    },
    /// The name could not appear unambiguously in a signature line or key text.
    #[error("invalid key name {0:?}: must be non-empty, without spaces or '+'")]
    InvalidKeyName(String),
    /// The `name+keyid+base64` verifier key text does not parse.
    #[error("malformed verifier key: {0}")]
    MalformedVerifierKey(&'static str),
    /// The `PRIVATE+KEY+name+keyid+base64` signer key text does not parse.
    #[error("malformed signer key: {0}")]
    MalformedSignerKey(&'static str),
    /// The key ID written in a key text is not the one derived from its name and key bytes:
    /// a key text edited by hand, or a name swapped onto someone else's key.
    #[error("key ID {claimed:08x} does not match the key (expected {actual:08x})")]
    KeyIdMismatch {
        /// Key ID written in the key text.
        claimed: u32,
        /// Key ID derived from name and key.
        actual: u32,
    },
    /// The key's algorithm byte is not Ed25519, the only one implemented.
    #[error("unsupported signature type 0x{0:02x} (only Ed25519, 0x01)")]
    UnsupportedAlgorithm(u8),
    /// Two trusted keys could claim the same signature line, so which one vouched would be
    /// ambiguous; the verifier set is refused instead of guessing.
    #[error("two different verifier keys share name {name} and key ID {key_id:08x}")]
    AmbiguousVerifiers {
        /// Shared key name.
        name: String,
        /// Shared key ID.
        key_id: u32,
    },
    /// The OS random number generator failed while generating a key.
    #[error("random number generator failed: {0}")]
    Rng(String),
}

/// Whether `name` may name a key: non-empty, no Unicode white space, no `+`.
pub fn is_valid_key_name(name: &str) -> bool {
    !name.is_empty() && !name.contains(|c: char| c.is_whitespace() || c == '+')
}

fn check_name(name: &str) -> Result<(), NoteError> {
    if is_valid_key_name(name) {
        Ok(())
    } else {
        Err(NoteError::InvalidKeyName(name.to_owned()))
    }
}

/// `SHA-256(name || 0x0A || 0x01 || public key)[:4]` as a big-endian integer.
pub fn key_id(name: &str, public_key: &VerifyingKey) -> u32 {
    let mut h = Sha256::new();
    h.update(name.as_bytes());
    h.update([b'\n', ALG_ED25519]);
    h.update(public_key.as_bytes());
    let d = h.finalize();
    u32::from_be_bytes([d[0], d[1], d[2], d[3]])
}

/// Splits `<name>+<hex id>+<base64 key>` (after any prefix) and checks the parts' shape.
fn split_key(s: &str) -> Option<(&str, u32, &str)> {
    let mut parts = s.splitn(3, '+');
    let name = parts.next()?;
    let id = parts.next()?;
    let key = parts.next()?;
    if id.len() != 8 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some((name, u32::from_str_radix(id, 16).ok()?, key))
}

/// A public key that checks note signatures, with its name and key ID.
#[derive(Clone, PartialEq, Eq)]
pub struct NoteVerifier {
    name: String,
    key_id: u32,
    key: VerifyingKey,
}

impl fmt::Debug for NoteVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_vkey())
    }
}

impl fmt::Display for NoteVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_vkey())
    }
}

impl NoteVerifier {
    /// A verifier for `key` under `name`.
    pub fn new(name: &str, key: VerifyingKey) -> Result<Self, NoteError> {
        check_name(name)?;
        Ok(Self {
            name: name.to_owned(),
            key_id: key_id(name, &key),
            key,
        })
    }

    /// Parses a verifier key `<name>+<hex key ID>+<base64(0x01 || public key)>`, checking
    /// that the key ID matches the name and key.
    pub fn parse(vkey: &str) -> Result<Self, NoteError> {
        let vkey = vkey.trim_end_matches(['\n', '\r']);
        let (name, claimed, key) = split_key(vkey).ok_or(NoteError::MalformedVerifierKey(
            "expected <name>+<8 hex digits>+<base64 key>",
        ))?;
        check_name(name)?;
        let bytes = B64
            .decode(key)
            .map_err(|_| NoteError::MalformedVerifierKey("key is not standard base64"))?;
        let (&alg, key) = bytes
            .split_first()
            .ok_or(NoteError::MalformedVerifierKey("key is empty"))?;
        if alg != ALG_ED25519 {
            return Err(NoteError::UnsupportedAlgorithm(alg));
        }
        let key: [u8; 32] = key
            .try_into()
            .map_err(|_| NoteError::MalformedVerifierKey("Ed25519 public key must be 32 bytes"))?;
        let key = VerifyingKey::from_bytes(&key)
            .map_err(|_| NoteError::MalformedVerifierKey("not an Ed25519 public key"))?;
        let v = Self::new(name, key)?;
        if v.key_id != claimed {
            return Err(NoteError::KeyIdMismatch {
                claimed,
                actual: v.key_id,
            });
        }
        Ok(v)
    }

    /// The verifier key text, as [`parse`](Self::parse) reads it.
    pub fn to_vkey(&self) -> String {
        let mut key = Vec::with_capacity(33);
        key.push(ALG_ED25519);
        key.extend_from_slice(self.key.as_bytes());
        format!("{}+{:08x}+{}", self.name, self.key_id, B64.encode(key))
    }

    /// The key name signatures must carry (for a log: its checkpoint origin).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The 32-bit key ID derived from name and key ([`key_id`]), which signature lines
    /// carry so a verifier can pick the key without trying them all.
    pub fn key_id(&self) -> u32 {
        self.key_id
    }

    /// The Ed25519 public key.
    pub fn public_key(&self) -> &VerifyingKey {
        &self.key
    }

    /// Strict Ed25519 verification (RFC 8032 with canonical encodings and no small-order
    /// keys), so that a signature cannot be malleated into a second valid one.
    fn verify(&self, text: &[u8], sig: &[u8]) -> bool {
        let Ok(sig) = Signature::from_slice(sig) else {
            return false;
        };
        self.key.verify_strict(text, &sig).is_ok()
    }
}

/// An Ed25519 private key that signs notes under a name.
///
/// The key is wiped from memory when dropped (ed25519-dalek's `zeroize` feature) and never
/// printed by `Debug`.
pub struct NoteSigner {
    name: String,
    key_id: u32,
    key: SigningKey,
}

impl fmt::Debug for NoteSigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NoteSigner")
            .field("name", &self.name)
            .field("key_id", &format_args!("{:08x}", self.key_id))
            .finish_non_exhaustive()
    }
}

impl NoteSigner {
    /// A fresh key from the operating system's random number generator.
    pub fn generate(name: &str) -> Result<Self, NoteError> {
        let mut seed = Zeroizing::new([0u8; 32]);
        rand_core::OsRng
            .try_fill_bytes(seed.as_mut())
            .map_err(|e| NoteError::Rng(e.to_string()))?;
        Self::from_seed(name, &seed)
    }

    /// The key whose RFC 8032 seed ("private key") is `seed`.
    pub fn from_seed(name: &str, seed: &[u8; 32]) -> Result<Self, NoteError> {
        Self::from_signing_key(name, SigningKey::from_bytes(seed))
    }

    /// A signer for an existing Ed25519 key (e.g. one loaded from the daemon's key store);
    /// fails if `name` is not a valid key name.
    pub fn from_signing_key(name: &str, key: SigningKey) -> Result<Self, NoteError> {
        check_name(name)?;
        Ok(Self {
            name: name.to_owned(),
            key_id: key_id(name, &key.verifying_key()),
            key,
        })
    }

    /// Parses `PRIVATE+KEY+<name>+<hex key ID>+<base64(0x01 || seed)>`, the format of
    /// `note.GenerateKey` in golang.org/x/mod/sumdb/note.
    pub fn from_skey(skey: &str) -> Result<Self, NoteError> {
        let skey = skey.trim_end_matches(['\n', '\r']);
        let rest = skey
            .strip_prefix(SKEY_PREFIX)
            .ok_or(NoteError::MalformedSignerKey("missing PRIVATE+KEY+ prefix"))?;
        let (name, claimed, key) = split_key(rest).ok_or(NoteError::MalformedSignerKey(
            "expected <name>+<8 hex digits>+<base64 key>",
        ))?;
        let bytes = Zeroizing::new(
            B64.decode(key)
                .map_err(|_| NoteError::MalformedSignerKey("key is not standard base64"))?,
        );
        let (&alg, seed) = bytes
            .split_first()
            .ok_or(NoteError::MalformedSignerKey("key is empty"))?;
        if alg != ALG_ED25519 {
            return Err(NoteError::UnsupportedAlgorithm(alg));
        }
        let mut seed_arr = Zeroizing::new([0u8; 32]);
        if seed.len() != 32 {
            return Err(NoteError::MalformedSignerKey(
                "Ed25519 seed must be 32 bytes",
            ));
        }
        seed_arr.copy_from_slice(seed);
        let signer = Self::from_seed(name, &seed_arr)?;
        if signer.key_id != claimed {
            return Err(NoteError::KeyIdMismatch {
                claimed,
                actual: signer.key_id,
            });
        }
        Ok(signer)
    }

    /// The signer key text, as [`from_skey`](Self::from_skey) reads it. It is the secret:
    /// keep it in a 0600 file; the returned buffer is wiped when dropped.
    pub fn to_skey(&self) -> Zeroizing<String> {
        let mut key = Zeroizing::new(Vec::with_capacity(33));
        key.push(ALG_ED25519);
        key.extend_from_slice(self.key.as_bytes());
        let b64 = Zeroizing::new(B64.encode(&*key));
        Zeroizing::new(format!(
            "{SKEY_PREFIX}{}+{:08x}+{}",
            self.name, self.key_id, *b64
        ))
    }

    /// The matching public verifier.
    pub fn verifier(&self) -> NoteVerifier {
        NoteVerifier {
            name: self.name.clone(),
            key_id: self.key_id,
            key: self.key.verifying_key(),
        }
    }

    /// The key name written on every signature line.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key ID written on every signature line ([`key_id`]).
    pub fn key_id(&self) -> u32 {
        self.key_id
    }

    fn signature_line(&self, text: &str) -> String {
        let sig = self.key.sign(text.as_bytes());
        let mut bytes = Vec::with_capacity(68);
        bytes.extend_from_slice(&self.key_id.to_be_bytes());
        bytes.extend_from_slice(&sig.to_bytes());
        format!("{SIG_PREFIX}{} {}\n", self.name, B64.encode(bytes))
    }
}

/// One signature line of a note.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoteSignature {
    /// Key name.
    pub name: String,
    /// Key ID (first four bytes of the decoded signature).
    pub key_id: u32,
    /// The signature bytes after the key ID.
    pub signature: Vec<u8>,
}

/// A note split into text and signatures, none of them checked yet. The spec says the text
/// MUST be ignored until a trusted signature verified; use [`open`] for that.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedNote {
    /// The text, including its final newline.
    pub text: String,
    /// Every signature line, in order, unverified.
    pub signatures: Vec<NoteSignature>,
}

/// A note whose text was verified by at least one known key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenedNote {
    /// The signed text, including its final newline.
    pub text: String,
    /// Signatures by known keys, all verified; each key (name and key ID) is listed once,
    /// with its first signature, however many signature lines it has.
    pub verified: Vec<NoteSignature>,
    /// Signatures by keys not among the verifiers, not checked; each key (name and key ID)
    /// is listed once, with its first signature line.
    pub unverified: Vec<NoteSignature>,
}

fn check_chars(bytes: &[u8]) -> Result<&str, NoteError> {
    let s = std::str::from_utf8(bytes).map_err(|_| NoteError::InvalidUtf8)?;
    if let Some((offset, c)) = s.char_indices().find(|&(_, c)| c < ' ' && c != '\n') {
        return Err(NoteError::ControlCharacter {
            offset,
            code: u32::from(c),
        });
    }
    Ok(s)
}

/// Splits a note into text and signature lines and checks their syntax, without verifying
/// anything. For instance to read the origin of a checkpoint before choosing its key.
pub fn parse(note: impl AsRef<[u8]>) -> Result<ParsedNote, NoteError> {
    let note = check_chars(note.as_ref())?;
    // The text may contain blank lines; the signatures start after the last one.
    let split = note.rfind("\n\n").ok_or(NoteError::MissingSignatureBlock)?;
    let (text, sigs) = (&note[..split + 1], &note[split + 2..]);
    if sigs.is_empty() {
        return Err(NoteError::MissingSignatureBlock);
    }
    if !sigs.ends_with('\n') {
        return Err(NoteError::UnterminatedSignatureBlock);
    }
    let mut signatures = Vec::new();
    for (i, line) in sigs[..sigs.len() - 1].split('\n').enumerate() {
        if i >= MAX_SIGNATURES {
            return Err(NoteError::TooManySignatures);
        }
        let malformed = |reason| NoteError::MalformedSignature {
            line: i + 1,
            reason,
        };
        let rest = line
            .strip_prefix(SIG_PREFIX)
            .ok_or(malformed("does not start with an em dash and a space"))?;
        let (name, b64) = rest
            .split_once(' ')
            .ok_or(malformed("no space between key name and signature"))?;
        if !is_valid_key_name(name) {
            return Err(malformed("invalid key name"));
        }
        let bytes = B64
            .decode(b64)
            .map_err(|_| malformed("signature is not standard base64"))?;
        if bytes.len() < 5 {
            return Err(malformed("signature shorter than a key ID and one byte"));
        }
        signatures.push(NoteSignature {
            name: name.to_owned(),
            key_id: u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]),
            signature: bytes[4..].to_vec(),
        });
    }
    Ok(ParsedNote {
        text: text.to_owned(),
        signatures,
    })
}

/// Verifies a note against trusted `verifiers` and returns its text.
///
/// Signatures from keys not in `verifiers` (matched on name *and* key ID) are ignored;
/// every signature from a known key must verify; at least one must be present.
pub fn open(note: impl AsRef<[u8]>, verifiers: &[NoteVerifier]) -> Result<OpenedNote, NoteError> {
    for (i, a) in verifiers.iter().enumerate() {
        if let Some(b) = verifiers[i + 1..]
            .iter()
            .find(|b| b.name == a.name && b.key_id == a.key_id && b.key != a.key)
        {
            return Err(NoteError::AmbiguousVerifiers {
                name: b.name.clone(),
                key_id: b.key_id,
            });
        }
    }
    let parsed = parse(note)?;
    let mut verified: Vec<NoteSignature> = Vec::new();
    let mut unverified: Vec<NoteSignature> = Vec::new();
    for sig in parsed.signatures {
        match verifiers
            .iter()
            .find(|v| v.name == sig.name && v.key_id == sig.key_id)
        {
            Some(v) => {
                // Every signature by a known key is checked, duplicates included: a bad
                // one means someone tampered with the note.
                if !v.verify(parsed.text.as_bytes(), &sig.signature) {
                    return Err(NoteError::BadSignature {
                        name: sig.name,
                        key_id: sig.key_id,
                    });
                }
                // Listed once per key, not per line: a signer may write two different
                // valid signatures (Ed25519 nonces need not be deterministic), and a count of
                // verified keys must not count one key twice.
                if !verified.iter().any(|s| same_key(s, &sig)) {
                    verified.push(sig);
                }
            }
            None => {
                if !unverified.iter().any(|s| same_key(s, &sig)) {
                    unverified.push(sig);
                }
            }
        }
    }
    if verified.is_empty() {
        return Err(NoteError::NoKnownSignature {
            signers: unverified
                .iter()
                .map(|s| format!("{}+{:08x}", s.name, s.key_id))
                .collect(),
        });
    }
    Ok(OpenedNote {
        text: parsed.text,
        verified,
        unverified,
    })
}

/// Whether two signature lines are by the same key: the same name and key ID (the key ID is
/// a hash of the name and the public key), whatever their signature bytes.
fn same_key(a: &NoteSignature, b: &NoteSignature) -> bool {
    a.name == b.name && a.key_id == b.key_id
}

/// Signs `text` (which must end with a newline) and returns the note.
///
/// We refuse to sign text that is empty or starts with an empty line, on top of the spec's
/// character rules: such text parses back ambiguously for humans, and no format of ours
/// needs it.
pub fn sign(text: &str, signer: &NoteSigner) -> Result<String, NoteError> {
    check_text(text)?;
    let mut note = String::with_capacity(text.len() + 1 + 100);
    note.push_str(text);
    note.push('\n');
    note.push_str(&signer.signature_line(text));
    Ok(note)
}

fn check_text(text: &str) -> Result<(), NoteError> {
    if text.is_empty() || text.starts_with('\n') {
        return Err(NoteError::TextEmptyFirstLine);
    }
    if !text.ends_with('\n') {
        return Err(NoteError::TextMissingNewline);
    }
    check_chars(text.as_bytes())?;
    Ok(())
}
