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
    BadRecord { index: u64, problem: RecordProblem },
    /// More records failed than are listed.
    #[error("… and {count} more invalid records")]
    MoreInvalidRecords { count: u64 },
    /// The file does not end with a newline: its last record is cut.
    #[error(
        "records.jsonl does not end with a newline: record {record} is incomplete (the export \
         was truncated)"
    )]
    Unterminated { record: u64 },
    /// Fewer records than the checkpoint covers.
    #[error("export truncated: the checkpoint covers {signed_size} records but records.jsonl has {lines}")]
    Truncated { signed_size: u64, lines: u64 },
    /// More records than the checkpoint covers.
    #[error(
        "records.jsonl has {lines} records but the checkpoint covers only {signed_size}: records \
         {signed_size}..{} are not signed", .lines - 1
    )]
    UnsignedRecords { lines: u64, signed_size: u64 },
    /// The records' root at the checkpoint's size is not the signed one.
    #[error(
        "records.jsonl does not match the signed log: root mismatch at size {size} (records give \
         {}, the checkpoint signs {}): a record was altered, inserted, removed or reordered",
        b64(.computed), b64(.signed)
    )]
    RootMismatch {
        size: u64,
        #[serde(serialize_with = "ser::hash")]
        computed: Hash,
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
        file: String,
        vkey: String,
        #[serde(serialize_with = "ser::display")]
        error: CheckpointError,
    },
    /// The previous checkpoint is larger than the export's: the log was truncated.
    #[error("log truncated: previous checkpoint size {previous_size} > {size}")]
    PreviousLarger { previous_size: u64, size: u64 },
    /// The consistency proof file is for other sizes than the two checkpoints.
    #[error(
        "consistency proof {file} is from size {proof_old} to {proof_new}, but the checkpoints \
         are for sizes {previous_size} and {size}"
    )]
    ProofSizeMismatch {
        file: String,
        proof_old: u64,
        proof_new: u64,
        previous_size: u64,
        size: u64,
    },
    /// The consistency proof does not verify: the log does not extend the previous checkpoint.
    #[error(
        "log rewritten: the log at size {size} does not extend the previous checkpoint at size \
         {previous_size} ({reason}): it was rewritten or forked"
    )]
    ProofRejected {
        size: u64,
        previous_size: u64,
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
        previous_size: u64,
        #[serde(serialize_with = "ser::hash")]
        computed: Hash,
        #[serde(serialize_with = "ser::hash")]
        signed: Hash,
    },
    /// Without a proof: the export has fewer records than the previous checkpoint covers.
    #[error(
        "log truncated: previous checkpoint size {previous_size} > {lines} records in the export"
    )]
    PreviousBeyondRecords { previous_size: u64, lines: u64 },

    // --- receipts
    #[error("cannot read receipt {file}: {error}")]
    ReceiptUnreadable {
        file: String,
        #[serde(serialize_with = "ser::display")]
        error: SourceError,
    },
    #[error("receipt {file}: {error}")]
    ReceiptMalformed {
        file: String,
        #[serde(serialize_with = "ser::display")]
        error: ReceiptError,
    },
    /// The receipt's index is not the id in its file name.
    #[error("receipt {file} is for record {index}, not {named}")]
    ReceiptIndexMismatch {
        file: String,
        index: u64,
        named: u64,
    },
    #[error(
        "record {record}: receipt {file} carries a checkpoint that does not verify with key \
         {vkey}: {error}"
    )]
    ReceiptCheckpointDoesNotVerify {
        record: u64,
        file: String,
        vkey: String,
        #[serde(serialize_with = "ser::display")]
        error: CheckpointError,
    },
    #[error("record {record}: has a receipt ({file}) but is not in records.jsonl")]
    ReceiptRecordMissing { record: u64, file: String },
    /// The record's line is not the leaf the receipt proves.
    #[error("record {record}: line does not match its receipt {file} ({error})")]
    ReceiptMismatch {
        record: u64,
        file: String,
        #[serde(serialize_with = "ser::display")]
        error: ProofError,
    },
    /// The receipt's tree (of `size` records) is not the one the records give at that size.
    #[error(
        "record {record}: receipt {file} is for a tree of size {size} that records.jsonl does \
         not reproduce"
    )]
    ReceiptTreeNotReproduced {
        record: u64,
        file: String,
        size: u64,
    },
}

/// Why a consistency proof from the previous checkpoint was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Inconsistency {
    #[error("{0}")]
    Proof(#[from] ProofError),
    #[error("the previous checkpoint claims size 0 with a non-empty root")]
    NonEmptyRootAtZero,
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
    SelfAssertedKey { file: String },
    /// The export ships another key than the pinned one.
    #[error(
        "the export's own {VKEY_FILE} ({export_key}) differs from the pinned key; it is ignored"
    )]
    ExportKeyDiffers { export_key: String },
    /// A valid receipt against a checkpoint newer than the export's.
    #[error(
        "record {record}: receipt {file} is against a later checkpoint (size {receipt_size} > \
         {size}); its inclusion proof verifies, but its consistency with this export is not \
         checked"
    )]
    ReceiptAgainstLaterCheckpoint {
        record: u64,
        file: String,
        receipt_size: u64,
        size: u64,
    },
    /// A file in the receipts directory that is not named like a receipt.
    #[error("ignoring {file}: not <id>.{RECEIPT_EXT}")]
    IgnoredFile { file: String },
}
