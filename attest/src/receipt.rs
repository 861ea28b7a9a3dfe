//! Receipts: offline-verifiable proofs that a record is in the log, in the C2SP
//! transparency log proof format (<https://c2sp.org/tlog-proof>).
//!
//! ```text
//! c2sp.org/tlog-proof@v1
//! [extra <base64 opaque data>]
//! index <decimal leaf index, no leading zeros>
//! <base64 inclusion proof hash, leaf's sibling first, one per line>
//! ...
//!
//! <signed checkpoint note, verbatim>
//! ```
//!
//! A tenant holding a receipt, the record's bytes and the node's verifier key can check,
//! without contacting the node, that the node committed to the record in a signed tree head.

use crate::checkpoint::{open_checkpoint, parse_decimal, Checkpoint, CheckpointError};
use crate::log::{leaf_hash, verify_inclusion, Hash, ProofError};
use crate::note::NoteVerifier;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;

/// First line of every receipt.
pub const HEADER: &str = "c2sp.org/tlog-proof@v1";

/// A tree of at most 2^64 - 1 leaves never needs more proof hashes than this.
const MAX_PROOF_LEN: usize = 64;

/// An inclusion proof bundled with the signed checkpoint it leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    /// Leaf index of the record.
    pub index: u64,
    /// Opaque, unauthenticated application data (the spec's `extra` line); never trust it.
    pub extra: Option<Vec<u8>>,
    /// RFC 6962 audit path, leaf's sibling first.
    pub proof: Vec<Hash>,
    /// The signed checkpoint note, verbatim (ends with a newline).
    pub checkpoint_note: String,
}

/// Why a receipt was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReceiptError {
    /// Not a tlog-proof at all (or a version this code does not speak).
    #[error("receipt does not start with the line {HEADER:?}")]
    MissingHeader,
    /// The optional `extra` line is not canonical base64.
    #[error("receipt extra data is not standard base64")]
    InvalidExtra,
    /// The leaf index is missing or not canonical decimal, so there is no position to prove.
    #[error("receipt has no valid `index <decimal>` line")]
    InvalidIndex,
    /// A proof line is not the canonical base64 of a SHA-256 hash.
    #[error("receipt proof line {line} is not the standard base64 of a 32-byte hash")]
    InvalidProofHash {
        /// 1-based line number in the receipt.
        line: usize,
    },
    /// No tree of `u64` size needs a longer inclusion proof; refusing early bounds the work
    /// a hostile receipt can cause.
    #[error("receipt has more than {MAX_PROOF_LEN} proof hashes")]
    ProofTooLong,
    /// The receipt ends without the signed checkpoint that anchors the proof.
    #[error("receipt has no blank line before its checkpoint")]
    MissingCheckpoint,
    /// The embedded checkpoint note is truncated.
    #[error("receipt checkpoint note must end with a newline")]
    CheckpointMissingNewline,
    /// The embedded checkpoint is malformed or not signed by a trusted log key.
    #[error("receipt checkpoint")]
    Checkpoint(#[from] CheckpointError),
    /// The proof does not place the record in the tree the checkpoint signs.
    #[error("receipt inclusion proof")]
    Proof(#[from] ProofError),
}

impl Receipt {
    /// The receipt text.
    pub fn format(&self) -> String {
        let mut s = String::with_capacity(64 + self.proof.len() * 45 + self.checkpoint_note.len());
        s.push_str(HEADER);
        s.push('\n');
        if let Some(extra) = &self.extra {
            s.push_str("extra ");
            s.push_str(&B64.encode(extra));
            s.push('\n');
        }
        s.push_str(&format!("index {}\n", self.index));
        for h in &self.proof {
            s.push_str(&B64.encode(h));
            s.push('\n');
        }
        s.push('\n');
        s.push_str(&self.checkpoint_note);
        s
    }

    /// Parses receipt text. Nothing is verified; see [`verify`].
    pub fn parse(text: &str) -> Result<Self, ReceiptError> {
        let mut rest = text
            .strip_prefix(HEADER)
            .and_then(|r| r.strip_prefix('\n'))
            .ok_or(ReceiptError::MissingHeader)?;
        let next_line = |rest: &mut &str| -> Option<String> {
            let (line, tail) = rest.split_once('\n')?;
            *rest = tail;
            Some(line.to_owned())
        };
        let mut line = next_line(&mut rest).ok_or(ReceiptError::InvalidIndex)?;
        let mut extra = None;
        if let Some(b64) = line.strip_prefix("extra ") {
            extra = Some(B64.decode(b64).map_err(|_| ReceiptError::InvalidExtra)?);
            line = next_line(&mut rest).ok_or(ReceiptError::InvalidIndex)?;
        }
        let index = line
            .strip_prefix("index ")
            .and_then(parse_decimal)
            .ok_or(ReceiptError::InvalidIndex)?;
        let mut proof = Vec::new();
        loop {
            let line = next_line(&mut rest).ok_or(ReceiptError::MissingCheckpoint)?;
            if line.is_empty() {
                break;
            }
            if proof.len() == MAX_PROOF_LEN {
                return Err(ReceiptError::ProofTooLong);
            }
            let h = B64
                .decode(&line)
                .ok()
                .and_then(|h| Hash::try_from(h.as_slice()).ok())
                .ok_or(ReceiptError::InvalidProofHash {
                    line: proof.len() + 1,
                })?;
            proof.push(h);
        }
        if rest.is_empty() {
            return Err(ReceiptError::MissingCheckpoint);
        }
        if !rest.ends_with('\n') {
            return Err(ReceiptError::CheckpointMissingNewline);
        }
        Ok(Self {
            index,
            extra,
            proof,
            checkpoint_note: rest.to_owned(),
        })
    }
}

/// Checks that `leaf_data` is leaf `index` of the log whose checkpoint the receipt carries,
/// signed by `verifier` (whose name must be the checkpoint's origin), and returns that
/// checkpoint. Callers still decide whether the checkpoint is recent enough or consistent
/// with others they hold.
pub fn verify(
    receipt: &Receipt,
    leaf_data: &[u8],
    verifier: &NoteVerifier,
) -> Result<Checkpoint, ReceiptError> {
    let checkpoint = open_checkpoint(&receipt.checkpoint_note, verifier)?;
    verify_inclusion(
        &leaf_hash(leaf_data),
        receipt.index,
        checkpoint.size,
        &receipt.proof,
        &checkpoint.root,
    )?;
    Ok(checkpoint)
}
