//! C2SP transparency log checkpoints (<https://c2sp.org/tlog-checkpoint>): the signed
//! statement "the log named *origin* has *size* leaves and this root".
//!
//! ```text
//! <origin>
//! <tree size, decimal, no leading zeros>
//! <root hash, standard base64>
//! [extension lines]
//! ```
//!
//! every line ending in a newline, signed as a [signed note](crate::note) whose key name is
//! the origin. Go verifies the same bytes with `note.Open` (golang.org/x/mod/sumdb/note) or
//! `log.ParseCheckpoint` (github.com/transparency-dev/formats/log).

use crate::log::Hash;
use crate::note::{self, NoteError, NoteSigner, NoteVerifier};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;

/// A log's tree head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The log's identity, e.g. `node-1.example/usage`; the signing key's name.
    pub origin: String,
    /// Number of leaves.
    pub size: u64,
    /// RFC 6962 root of the first `size` leaves.
    pub root: Hash,
    /// Opaque extra lines, without newlines. The spec discourages them since monitors cannot
    /// audit them; we never write any, but keep those of other logs.
    pub extensions: Vec<String>,
}

/// Why a checkpoint was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointError {
    /// The body is not newline-terminated; the note format signs whole lines, so a missing
    /// final newline means the text was truncated or built by hand.
    #[error("checkpoint body must end with a newline")]
    MissingNewline,
    /// Fewer than the three mandatory lines: without origin, size and root there is no tree
    /// head to trust.
    #[error("checkpoint body needs origin, size and root lines")]
    TooFewLines,
    /// A body line is empty, which the tlog-checkpoint spec forbids (an empty line would end
    /// the note text early).
    #[error("checkpoint line {line} is empty")]
    EmptyLine {
        /// 1-based line number in the body.
        line: usize,
    },
    /// The origin (the log's name, which must match the signing key's name) is unusable.
    #[error("checkpoint origin is empty or contains a newline or control character")]
    InvalidOrigin,
    /// An extension line (0-based among extensions) is empty or holds a control character.
    #[error("checkpoint extension line {0} is empty or contains a newline or control character")]
    InvalidExtension(usize),
    /// The size line is not canonical decimal: only one spelling per size is accepted, so two
    /// byte-different checkpoints can never claim the same tree head.
    #[error(
        "checkpoint tree size {0:?} is not a decimal without leading zeros that fits in 64 bits"
    )]
    InvalidSize(String),
    /// The root line is not the canonical base64 of a SHA-256 hash.
    #[error("checkpoint root {0:?} is not the standard base64 of a 32-byte hash")]
    InvalidRoot(String),
    /// The verifying key belongs to a different log than the origin names: a valid
    /// signature from log A must not vouch for a tree head that claims to be log B's.
    #[error("checkpoint is signed by key {key_name:?} but its origin is {origin:?}")]
    OriginMismatch {
        /// Origin line of the checkpoint.
        origin: String,
        /// Name of the key whose signature verified.
        key_name: String,
    },
    /// The signed-note envelope itself was rejected (format or signatures).
    #[error(transparent)]
    Note(#[from] NoteError),
}

fn valid_line(s: &str) -> bool {
    !s.is_empty() && !s.chars().any(|c| c < ' ')
}

impl Checkpoint {
    /// The note text: origin, size and root lines, then extensions, each ending in `\n`.
    pub fn to_body(&self) -> Result<String, CheckpointError> {
        if !valid_line(&self.origin) {
            return Err(CheckpointError::InvalidOrigin);
        }
        let mut body = format!(
            "{}\n{}\n{}\n",
            self.origin,
            self.size,
            B64.encode(self.root)
        );
        for (i, ext) in self.extensions.iter().enumerate() {
            if !valid_line(ext) {
                return Err(CheckpointError::InvalidExtension(i));
            }
            body.push_str(ext);
            body.push('\n');
        }
        Ok(body)
    }

    /// Parses a checkpoint body (a note's text, *not* the signed note).
    pub fn parse(body: &str) -> Result<Self, CheckpointError> {
        let body = body
            .strip_suffix('\n')
            .ok_or(CheckpointError::MissingNewline)?;
        let lines: Vec<&str> = body.split('\n').collect();
        if lines.len() < 3 {
            return Err(CheckpointError::TooFewLines);
        }
        if let Some(i) = lines.iter().position(|l| l.is_empty()) {
            return Err(CheckpointError::EmptyLine { line: i + 1 });
        }
        if !valid_line(lines[0]) {
            return Err(CheckpointError::InvalidOrigin);
        }
        let size = parse_decimal(lines[1])
            .ok_or_else(|| CheckpointError::InvalidSize(lines[1].to_owned()))?;
        let root = B64
            .decode(lines[2])
            .ok()
            .and_then(|r| Hash::try_from(r.as_slice()).ok())
            .ok_or_else(|| CheckpointError::InvalidRoot(lines[2].to_owned()))?;
        let extensions = lines[3..]
            .iter()
            .map(|s| (*s).to_owned())
            .collect::<Vec<_>>();
        if let Some(i) = extensions.iter().position(|e| !valid_line(e)) {
            return Err(CheckpointError::InvalidExtension(i));
        }
        Ok(Self {
            origin: lines[0].to_owned(),
            size,
            root,
            extensions,
        })
    }
}

/// ASCII decimal with no sign and no leading zeros (except "0" itself).
pub(crate) fn parse_decimal(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || (s.len() > 1 && s.starts_with('0'))
    {
        return None;
    }
    s.parse().ok()
}

/// Signs `checkpoint` as a note. The signer's key name must be the origin, so that
/// [`open_checkpoint`] (and any client following the spec's recommendation) accepts it.
pub fn sign_checkpoint(
    checkpoint: &Checkpoint,
    signer: &NoteSigner,
) -> Result<String, CheckpointError> {
    if signer.name() != checkpoint.origin {
        return Err(CheckpointError::OriginMismatch {
            origin: checkpoint.origin.clone(),
            key_name: signer.name().to_owned(),
        });
    }
    Ok(note::sign(&checkpoint.to_body()?, signer)?)
}

/// Verifies a signed checkpoint with the log's key and parses it. The key's name must equal
/// the checkpoint's origin: a valid signature over another log's checkpoint is refused.
/// Other signatures (e.g. witness cosignatures) are ignored.
pub fn open_checkpoint(
    note: impl AsRef<[u8]>,
    verifier: &NoteVerifier,
) -> Result<Checkpoint, CheckpointError> {
    let opened = note::open(note, std::slice::from_ref(verifier))?;
    let checkpoint = Checkpoint::parse(&opened.text)?;
    if checkpoint.origin != verifier.name() {
        return Err(CheckpointError::OriginMismatch {
            origin: checkpoint.origin,
            key_name: verifier.name().to_owned(),
        });
    }
    Ok(checkpoint)
}
