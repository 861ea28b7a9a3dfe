//! What verification finds: every problem is a [`Finding`] and every warning a [`Warning`],
//! each carrying its evidence (sizes, computed and signed roots, record index, file, the
//! underlying error). `Display` is the message `sovctl audit verify` prints; `Serialize`
//! gives JSON tagged by `finding` / `warning` (kebab-case names), hashes in base64 and
//! errors as their message.

use crate::check::RecordProblem;
use crate::layout::{RECEIPT_EXT, VKEY_FILE};
use crate::ser::{self, b64};
use crate::source::SourceError;
use attest::checkpoint::CheckpointError;
use attest::log::{Hash, ProofError};
use attest::receipt::ReceiptError;
use serde::Serialize;

/// A problem: the export does not verify. File names are as the source describes them
/// (for a directory, full paths).
#[derive(Debug, Clone, Serialize, thiserror::Error)]
#[serde(tag = "finding", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Finding {
    // --- records.jsonl against the checkpoint
    /// Line `index` of records.jsonl fails its checks.
    #[error("record {index}: {problem}")]
    BadRecord {
        /// Line number in records.jsonl, counting from 0: the id the record should have.
        index: u64,
        /// Which check the line failed.
        problem: RecordProblem,
    },
    /// More records failed than are listed.
    #[error("… and {count} more invalid records")]
    MoreInvalidRecords {
        /// Invalid records beyond the first [`crate::check::MAX_LISTED_PROBLEMS`] that are
        /// listed as [`Finding::BadRecord`]s.
        count: u64,
    },
    /// The file does not end with a newline: its last record is cut.
    #[error(
        "records.jsonl does not end with a newline: record {record} is incomplete (the export \
         was truncated)"
    )]
    Unterminated {
        /// Index of the last, incomplete record (the number of lines minus one).
        record: u64,
    },
    /// Fewer records than the checkpoint covers.
    #[error("export truncated: the checkpoint covers {signed_size} records but records.jsonl has {lines}")]
    Truncated {
        /// Number of records the export's checkpoint signs (its tree size).
        signed_size: u64,
        /// Number of records found in records.jsonl, fewer than `signed_size`.
        lines: u64,
    },
    /// More records than the checkpoint covers.
    #[error(
        "records.jsonl has {lines} records but the checkpoint covers only {signed_size}: records \
         {signed_size}..{} are not signed", .lines - 1
    )]
    UnsignedRecords {
        /// Number of records found in records.jsonl, more than `signed_size`.
        lines: u64,
        /// Number of records the export's checkpoint signs; records from this index on are
        /// not covered by any signature.
        signed_size: u64,
    },
    /// The records' root at the checkpoint's size is not the signed one.
    #[error(
        "records.jsonl does not match the signed log: root mismatch at size {size} (records give \
         {}, the checkpoint signs {}): a record was altered, inserted, removed or reordered",
        b64(.computed), b64(.signed)
    )]
    RootMismatch {
        /// The checkpoint's tree size, at which the two roots were compared.
        size: u64,
        /// RFC 6962 root recomputed from the first `size` lines of records.jsonl.
        #[serde(serialize_with = "ser::hash")]
        computed: Hash,
        /// Root the checkpoint signs for that size.
        #[serde(serialize_with = "ser::hash")]
        signed: Hash,
    },

    // --- the previous checkpoint
    /// The previous checkpoint is not signed by the key (e.g. another log's).
    #[error(
        "previous checkpoint {file} does not verify with key {vkey}: {error} (a checkpoint of \
         another log?)"
    )]
    PreviousDoesNotVerify {
        /// The previous checkpoint file the auditor supplied (`--previous`).
        file: String,
        /// The verifier key it was checked with, in `name+keyid+base64` form.
        vkey: String,
        /// Why it was refused (bad signature, unknown key, origin not the key name, malformed).
        #[serde(serialize_with = "ser::display")]
        error: CheckpointError,
    },
    /// The previous checkpoint is larger than the export's: the log was truncated.
    #[error("log truncated: previous checkpoint size {previous_size} > {size}")]
    PreviousLarger {
        /// Tree size the previous checkpoint signs.
        previous_size: u64,
        /// Tree size the export's checkpoint signs, smaller than `previous_size`.
        size: u64,
    },
    /// The consistency proof file is for other sizes than the two checkpoints.
    #[error(
        "consistency proof {file} is from size {proof_old} to {proof_new}, but the checkpoints \
         are for sizes {previous_size} and {size}"
    )]
    ProofSizeMismatch {
        /// The consistency proof file the auditor supplied (`--consistency`).
        file: String,
        /// The `old` size written in the proof file.
        proof_old: u64,
        /// The `new` size written in the proof file.
        proof_new: u64,
        /// Tree size of the previous checkpoint, which `proof_old` should equal.
        previous_size: u64,
        /// Tree size of the export's checkpoint, which `proof_new` should equal.
        size: u64,
    },
    /// The consistency proof does not verify: the log does not extend the previous checkpoint.
    #[error(
        "log rewritten: the log at size {size} does not extend the previous checkpoint at size \
         {previous_size} ({reason}): it was rewritten or forked"
    )]
    ProofRejected {
        /// Tree size of the export's checkpoint (the proof's new size).
        size: u64,
        /// Tree size of the previous checkpoint (the proof's old size).
        previous_size: u64,
        /// Why the proof failed to link the two signed roots.
        #[serde(serialize_with = "ser::display")]
        reason: Inconsistency,
    },
    /// Without a proof: the root of the first `previous_size` records is not the one the
    /// previous checkpoint signs.
    #[error(
        "log rewritten: the first {previous_size} records give root {} but the previous \
         checkpoint signs {}: the log was rewritten or forked since",
        b64(.computed), b64(.signed)
    )]
    LogRewritten {
        /// Tree size of the previous checkpoint, at which the roots were compared.
        previous_size: u64,
        /// RFC 6962 root recomputed from the first `previous_size` lines of records.jsonl.
        #[serde(serialize_with = "ser::hash")]
        computed: Hash,
        /// Root the previous checkpoint signs for that size.
        #[serde(serialize_with = "ser::hash")]
        signed: Hash,
    },
    /// Without a proof: the export has fewer records than the previous checkpoint covers.
    #[error(
        "log truncated: previous checkpoint size {previous_size} > {lines} records in the export"
    )]
    PreviousBeyondRecords {
        /// Tree size the previous checkpoint signs.
        previous_size: u64,
        /// Number of records in records.jsonl, fewer than `previous_size`.
        lines: u64,
    },

    // --- receipts
    /// A receipt file could not be read (not a regular file, too large, not UTF-8, I/O
    /// error): the record it names is not proven by it.
    #[error("cannot read receipt {file}: {error}")]
    ReceiptUnreadable {
        /// The receipt file, `receipts/<id>.tlog-proof` in the export.
        file: String,
        /// Why it could not be read.
        #[serde(serialize_with = "ser::display")]
        error: SourceError,
    },
    /// A receipt file is not a valid c2sp.org/tlog-proof: it proves nothing.
    #[error("receipt {file}: {error}")]
    ReceiptMalformed {
        /// The receipt file, `receipts/<id>.tlog-proof` in the export.
        file: String,
        /// What the receipt parser refused.
        #[serde(serialize_with = "ser::display")]
        error: ReceiptError,
    },
    /// The receipt's index is not the id in its file name.
    #[error("receipt {file} is for record {index}, not {named}")]
    ReceiptIndexMismatch {
        /// The receipt file.
        file: String,
        /// The leaf index the receipt's `index` line proves.
        index: u64,
        /// The record id its file name (`<id>.tlog-proof`) claims.
        named: u64,
    },
    /// The checkpoint inside a receipt is not signed by the trusted key: the receipt was
    /// not issued by this log (or was altered), so it proves nothing about it.
    #[error(
        "record {record}: receipt {file} carries a checkpoint that does not verify with key \
         {vkey}: {error}"
    )]
    ReceiptCheckpointDoesNotVerify {
        /// The record id the receipt is for.
        record: u64,
        /// The receipt file.
        file: String,
        /// The verifier key it was checked with, in `name+keyid+base64` form.
        vkey: String,
        /// Why the receipt's checkpoint was refused.
        #[serde(serialize_with = "ser::display")]
        error: CheckpointError,
    },
    /// A receipt names a record beyond the end of records.jsonl: the node issued a receipt
    /// for a record the export does not contain (the export is truncated or the record was
    /// removed).
    #[error("record {record}: has a receipt ({file}) but is not in records.jsonl")]
    ReceiptRecordMissing {
        /// The record id the receipt is for, at or beyond the number of lines.
        record: u64,
        /// The receipt file.
        file: String,
    },
    /// The record's line is not the leaf the receipt proves.
    #[error("record {record}: line does not match its receipt {file} ({error})")]
    ReceiptMismatch {
        /// The record id the receipt is for (its line in records.jsonl).
        record: u64,
        /// The receipt file.
        file: String,
        /// How the inclusion proof failed for the line's leaf hash.
        #[serde(serialize_with = "ser::display")]
        error: ProofError,
    },
    /// The receipt's tree (of `size` records) is not the one the records give at that size.
    #[error(
        "record {record}: receipt {file} is for a tree of size {size} that records.jsonl does \
         not reproduce"
    )]
    ReceiptTreeNotReproduced {
        /// The record id the receipt is for.
        record: u64,
        /// The receipt file.
        file: String,
        /// Tree size of the checkpoint the receipt carries.
        size: u64,
    },
}

/// Why a consistency proof from the previous checkpoint was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Inconsistency {
    /// The RFC 9162 consistency proof does not lead from the previous root to the export's.
    #[error(transparent)]
    Proof(#[from] ProofError),
    /// The previous checkpoint signs size 0 with a root other than SHA-256 of nothing, so
    /// no log extends it.
    #[error("the previous checkpoint claims size 0 with a non-empty root")]
    NonEmptyRootAtZero,
    /// A proof from size 0 carries hashes: every log extends the empty one, so the proof
    /// from it is empty, and hashes there prove nothing (the file was not made by a node).
    #[error("a consistency proof from size 0 must be empty, but it has {hashes} hashes")]
    NonEmptyProofFromZero {
        /// Number of hashes the proof file carries.
        hashes: usize,
    },
}

/// Something the auditor should know that does not make the export invalid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(tag = "warning", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Warning {
    /// No key was pinned: the export's own key was used.
    #[error(
        "the verifier key was taken from the export itself ({file}), so it is self-asserted: \
         this proves the export is internally consistent, not that this node signed it — pin \
         the node's key with --vkey"
    )]
    SelfAssertedKey {
        /// The export's own key file whose key was used (`log.vkey` in the export).
        file: String,
    },
    /// The export ships another key than the pinned one.
    #[error(
        "the export's own {VKEY_FILE} ({export_key}) differs from the pinned key; it is ignored"
    )]
    ExportKeyDiffers {
        /// The key the export's `log.vkey` holds, trimmed; the pinned key was used instead.
        export_key: String,
    },
    /// A valid receipt against a checkpoint newer than the export's.
    #[error(
        "record {record}: receipt {file} is against a later checkpoint (size {receipt_size} > \
         {size}); its inclusion proof verifies, but its consistency with this export is not \
         checked"
    )]
    ReceiptAgainstLaterCheckpoint {
        /// The record id the receipt is for.
        record: u64,
        /// The receipt file.
        file: String,
        /// Tree size of the checkpoint inside the receipt.
        receipt_size: u64,
        /// Tree size of the export's checkpoint, smaller than `receipt_size`.
        size: u64,
    },
    /// A file in the receipts directory that is not named like a receipt.
    #[error("ignoring {file}: not <id>.{RECEIPT_EXT}")]
    IgnoredFile {
        /// The ignored entry of the receipts directory.
        file: String,
    },
}
