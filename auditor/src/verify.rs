//! Offline verification of an export: [`verify_export`].
//!
//! The steps, each a function below: `key` (which key to trust), `checkpoint` (its
//! signature), `previous` (a checkpoint seen earlier, and a consistency proof to it),
//! `receipts` (each file names its record and carries a signed checkpoint), then one
//! streaming pass over the records ([`crate::stream`]) whose results are checked against the
//! checkpoint (`check_records`), the previous checkpoint (`check_previous_recomputed`)
//! and the receipts (`check_receipts`).
//!
//! A step that cannot proceed (an unreadable file, a checkpoint that does not verify) ends
//! verification with a [`VerifyFailure`]; everything else is collected in the
//! [`VerifyReport`] as [`Finding`]s and [`Warning`]s.

use crate::check::Totals;
use crate::finding::{Finding, Inconsistency, Warning};
use crate::layout::{
    receipt_id, ConsistencyProof, ProofParseError, CHECKPOINT_FILE, RECEIPTS_DIR, RECORDS_FILE,
    VKEY_FILE,
};
use crate::ser;
use crate::source::{read_text_file, ExportSource, SourceError};
use crate::stream::{stream_records, StreamError, StreamOutcome};
use attest::checkpoint::{open_checkpoint, Checkpoint, CheckpointError};
use attest::log::verify_consistency;
use attest::note::{NoteError, NoteVerifier};
use attest::receipt::Receipt;
use serde::Serialize;
use std::fmt;
use std::path::Path;

/// A file the auditor supplies besides the export (a pinned key, a previous checkpoint, a
/// consistency proof): its name for messages, and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Supplied {
    /// How messages and findings name the file (for a file read from disk, its path as
    /// given).
    pub name: String,
    /// The file's whole content, UTF-8.
    pub text: String,
}

impl Supplied {
    /// Reads `path` (a regular file of at most [`crate::source::MAX_TEXT_LEN`] bytes).
    pub fn read(path: &Path, what: FileRole) -> Result<Self, VerifyError> {
        let name = path.display().to_string();
        match read_text_file(path) {
            Ok(text) => Ok(Self { name, text }),
            Err(error) => Err(VerifyError::CannotRead {
                what,
                file: name,
                error,
            }),
        }
    }
}

/// Inputs of verification besides the export itself.
#[derive(Debug, Clone, Default)]
pub struct VerifyOptions {
    /// The verifier key to trust; `None` takes the export's own `log.vkey` (self-asserted).
    pub vkey: Option<Supplied>,
    /// A checkpoint seen earlier that the export's log must extend.
    pub previous: Option<Supplied>,
    /// Consistency proof from the previous checkpoint to the export's; without it the root
    /// at the previous size is recomputed from the records.
    pub consistency: Option<Supplied>,
}

/// What a file is, in messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FileRole {
    /// The key verification trusts: the pinned `--vkey` file or the export's `log.vkey`.
    VerifierKey,
    /// The export's own signed checkpoint (`checkpoint`).
    Checkpoint,
    /// A checkpoint the auditor kept from an earlier visit (`--previous`).
    PreviousCheckpoint,
    /// A consistency proof file from the previous checkpoint to the export's
    /// (`--consistency`).
    ConsistencyProof,
    /// A `receipts/<id>.tlog-proof` file.
    Receipt,
}

impl fmt::Display for FileRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FileRole::VerifierKey => "verifier key",
            FileRole::Checkpoint => "checkpoint",
            FileRole::PreviousCheckpoint => "previous checkpoint",
            FileRole::ConsistencyProof => "consistency proof",
            FileRole::Receipt => "receipt",
        })
    }
}

/// Why verification could not proceed.
#[derive(Debug, Clone, Serialize, thiserror::Error)]
#[serde(tag = "failure", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum VerifyError {
    /// A key or checkpoint needed to go on could not be read.
    #[error("cannot read {what} {file}: {error}")]
    CannotRead {
        /// What the file is for.
        what: FileRole,
        /// The file, as the source or the auditor names it.
        file: String,
        /// Why it could not be read.
        #[source]
        #[serde(serialize_with = "ser::display")]
        error: SourceError,
    },
    /// The records file or the receipts directory cannot be read.
    #[error("cannot read {file}: {error}")]
    Unreadable {
        /// `records.jsonl` or the `receipts` directory, as the source names it.
        file: String,
        /// Why it could not be read.
        #[source]
        #[serde(serialize_with = "ser::display")]
        error: SourceError,
    },
    /// The verifier key is not a `name+keyid+base64` Ed25519 key, so nothing can be checked.
    #[error("verifier key {file} is malformed: {error}")]
    MalformedKey {
        /// The key file (pinned `--vkey`, or the export's `log.vkey`).
        file: String,
        /// What the key parser refused.
        #[source]
        #[serde(serialize_with = "ser::display")]
        error: NoteError,
    },
    /// The export's checkpoint is not signed by the trusted key (or is malformed, or its
    /// origin is not the key name): nothing in the export can be tied to the node, so
    /// verification stops here.
    #[error("checkpoint signature does not verify with key {vkey}: {error} ({file})")]
    CheckpointDoesNotVerify {
        /// The trusted verifier key, in `name+keyid+base64` form.
        vkey: String,
        /// The export's checkpoint file.
        file: String,
        /// Why the checkpoint was refused.
        #[source]
        #[serde(serialize_with = "ser::display")]
        error: CheckpointError,
    },
    /// The consistency proof file is not in the `sovereign-host/consistency-proof@v1`
    /// format ([`crate::layout::ConsistencyProof`]).
    #[error("{file}: {error}")]
    MalformedProof {
        /// The consistency proof file the auditor supplied.
        file: String,
        /// What the parser refused.
        #[source]
        #[serde(serialize_with = "ser::display")]
        error: ProofParseError,
    },
    /// The pass over the records failed (a read error, a line too long to be a record).
    #[error("{error}")]
    Records {
        /// What stopped the pass.
        #[from]
        #[serde(serialize_with = "ser::display")]
        error: StreamError,
    },
}

/// Verification could not proceed: an unreadable file, or a checkpoint that does not verify.
#[derive(Debug, Clone, Serialize, thiserror::Error)]
#[error("{error}")]
pub struct VerifyFailure {
    /// The step that could not proceed, and why.
    pub error: VerifyError,
    /// Warnings gathered before the failure (e.g. that the export's key differs from the
    /// pinned one), which often explain it.
    pub warnings: Vec<Warning>,
}

/// How the previous checkpoint was related to the export's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "how", rename_all = "kebab-case")]
pub enum PreviousCheck {
    /// The consistency proof file verified.
    ProofVerified {
        /// Tree size of the previous checkpoint.
        old_size: u64,
    },
    /// The root at the old size was recomputed from the records and matched.
    Recomputed {
        /// Tree size of the previous checkpoint: the number of leading records rehashed.
        old_size: u64,
    },
}

/// The outcome of verifying an export. Valid when `problems` is empty.
#[derive(Debug, Clone, Serialize)]
pub struct VerifyReport {
    /// The verifier key everything was checked against, in `name+keyid+base64` form.
    pub vkey: String,
    /// Whether the key was pinned rather than taken from the export itself.
    pub key_pinned: bool,
    /// The export's checkpoint (origin, tree size, root), whose signature verified.
    #[serde(serialize_with = "ser::checkpoint")]
    pub checkpoint: Checkpoint,
    /// Number of lines in records.jsonl, counting an unterminated last one.
    pub records: u64,
    /// Counts by kind and per-tenant usage, summed over the records that passed their
    /// checks (on their own and against the records before them).
    pub totals: Totals,
    /// How the previous checkpoint was shown to be extended by the export's; `None` when
    /// none was given or the check failed (a finding then says why).
    pub previous: Option<PreviousCheck>,
    /// Number of receipts whose proof and tree both checked out against the records.
    pub receipts_verified: usize,
    /// Things the auditor should know that do not make the export invalid.
    pub warnings: Vec<Warning>,
    /// Everything that makes the export invalid; empty for a valid export.
    pub problems: Vec<Finding>,
}

impl VerifyReport {
    /// Whether the export verified: no [`Finding`] was recorded (warnings do not count).
    pub fn is_valid(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Verifies an export offline. `Err` means verification could not proceed; otherwise the
/// report lists every problem found. `progress` receives (bytes of records.jsonl done, total
/// bytes, 0 when unknown).
pub fn verify_export(
    source: &dyn ExportSource,
    opts: &VerifyOptions,
    progress: impl FnMut(u64, u64),
) -> Result<VerifyReport, VerifyFailure> {
    let mut found = Found::default();
    match verify_inner(source, opts, progress, &mut found) {
        Ok(mut r) => {
            r.warnings = found.warnings;
            r.problems = found.problems;
            Ok(r)
        }
        Err(error) => Err(VerifyFailure {
            error,
            warnings: found.warnings,
        }),
    }
}

/// Findings and warnings collected so far.
#[derive(Default)]
struct Found {
    problems: Vec<Finding>,
    warnings: Vec<Warning>,
}

/// The key to trust and how it was obtained.
struct Key {
    verifier: NoteVerifier,
    vkey: String,
    pinned: bool,
}

fn verify_inner(
    source: &dyn ExportSource,
    opts: &VerifyOptions,
    mut progress: impl FnMut(u64, u64),
    found: &mut Found,
) -> Result<VerifyReport, VerifyError> {
    let key = key(source, opts, found)?;
    let checkpoint = checkpoint(source, &key)?;
    let prev = previous(opts, &key, &checkpoint, found)?;
    let receipt_checks = receipts(source, &key, found)?;

    let (reader, total_bytes) = source
        .open_records()
        .map_err(|error| VerifyError::Unreadable {
            file: source.describe(RECORDS_FILE),
            error,
        })?;
    let total_bytes = total_bytes.unwrap_or(0);
    let mut sizes = vec![checkpoint.size];
    if let Previous::Recompute(old) = &prev {
        sizes.push(old.size);
    }
    sizes.extend(receipt_checks.iter().map(|r| r.checkpoint.size));
    let wanted: Vec<u64> = receipt_checks.iter().map(|r| r.receipt.index).collect();
    let s = stream_records(reader, &sizes, &wanted, |done| progress(done, total_bytes))?;

    check_records(&s, &checkpoint, found);
    let previous = match prev {
        Previous::Verified(p) => Some(p),
        Previous::Recompute(old) => check_previous_recomputed(&s, &old, found),
        Previous::None => None,
    };
    let receipts_verified = check_receipts(&s, &receipt_checks, &checkpoint, found);
    Ok(VerifyReport {
        vkey: key.vkey,
        key_pinned: key.pinned,
        checkpoint,
        records: s.lines,
        totals: s.totals,
        previous,
        receipts_verified,
        warnings: Vec::new(),
        problems: Vec::new(),
    })
}

/// The key: the pinned one, or the export's own (a warning says it is then self-asserted).
fn key(
    source: &dyn ExportSource,
    opts: &VerifyOptions,
    found: &mut Found,
) -> Result<Key, VerifyError> {
    let (file, text, pinned) = match &opts.vkey {
        Some(s) => (s.name.clone(), s.text.clone(), true),
        None => {
            let file = source.describe(VKEY_FILE);
            let text = source
                .read_text(VKEY_FILE)
                .map_err(|error| VerifyError::CannotRead {
                    what: FileRole::VerifierKey,
                    file: file.clone(),
                    error,
                })?;
            (file, text, false)
        }
    };
    let verifier = NoteVerifier::parse(text.trim())
        .map_err(|error| VerifyError::MalformedKey { file, error })?;
    let vkey = verifier.to_vkey();
    if pinned {
        if let Ok(theirs) = source.read_text(VKEY_FILE) {
            if theirs.trim() != vkey {
                found.warnings.push(Warning::ExportKeyDiffers {
                    export_key: theirs.trim().to_owned(),
                });
            }
        }
    } else {
        found.warnings.push(Warning::SelfAssertedKey {
            file: source.describe(VKEY_FILE),
        });
    }
    Ok(Key {
        verifier,
        vkey,
        pinned,
    })
}

/// The export's checkpoint, whose signature must verify with the key.
fn checkpoint(source: &dyn ExportSource, key: &Key) -> Result<Checkpoint, VerifyError> {
    let file = source.describe(CHECKPOINT_FILE);
    let note = source
        .read_text(CHECKPOINT_FILE)
        .map_err(|error| VerifyError::CannotRead {
            what: FileRole::Checkpoint,
            file: file.clone(),
            error,
        })?;
    open_checkpoint(&note, &key.verifier).map_err(|error| VerifyError::CheckpointDoesNotVerify {
        vkey: key.vkey.clone(),
        file,
        error,
    })
}

/// What remains to check about the previous checkpoint after [`previous`].
enum Previous {
    /// None was given, or it was refused (a finding says why).
    None,
    /// A consistency proof verified.
    Verified(PreviousCheck),
    /// No proof: the root at its size is to be recomputed from the records.
    Recompute(Checkpoint),
}

/// The previous checkpoint: signed by the key, not larger than the export's, and, with a
/// consistency proof, extended by the export's.
fn previous(
    opts: &VerifyOptions,
    key: &Key,
    checkpoint: &Checkpoint,
    found: &mut Found,
) -> Result<Previous, VerifyError> {
    let Some(prev) = &opts.previous else {
        return Ok(Previous::None);
    };
    let old = match open_checkpoint(&prev.text, &key.verifier) {
        Err(error) => {
            found.problems.push(Finding::PreviousDoesNotVerify {
                file: prev.name.clone(),
                vkey: key.vkey.clone(),
                error,
            });
            return Ok(Previous::None);
        }
        Ok(old) if old.size > checkpoint.size => {
            found.problems.push(Finding::PreviousLarger {
                previous_size: old.size,
                size: checkpoint.size,
            });
            return Ok(Previous::None);
        }
        Ok(old) => old,
    };
    match &opts.consistency {
        Some(proof_file) => check_consistency(proof_file, &old, checkpoint, found),
        None => Ok(Previous::Recompute(old)),
    }
}

/// The consistency proof in `proof_file`, from the previous checkpoint `old` to the export's.
/// A proof for other sizes, or one that does not verify, is a finding; one that does not
/// parse is an error (it is not a proof).
fn check_consistency(
    proof_file: &Supplied,
    old: &Checkpoint,
    checkpoint: &Checkpoint,
    found: &mut Found,
) -> Result<Previous, VerifyError> {
    let proof =
        ConsistencyProof::parse(&proof_file.text).map_err(|error| VerifyError::MalformedProof {
            file: proof_file.name.clone(),
            error,
        })?;
    if (proof.old_size, proof.new_size) != (old.size, checkpoint.size) {
        found.problems.push(Finding::ProofSizeMismatch {
            file: proof_file.name.clone(),
            proof_old: proof.old_size,
            proof_new: proof.new_size,
            previous_size: old.size,
            size: checkpoint.size,
        });
        return Ok(Previous::None);
    }
    let verified = if old.size == 0 {
        if old.root != attest::log::empty_root() {
            Err(Inconsistency::NonEmptyRootAtZero)
        } else if !proof.hashes.is_empty() {
            Err(Inconsistency::NonEmptyProofFromZero {
                hashes: proof.hashes.len(),
            })
        } else {
            Ok(())
        }
    } else {
        verify_consistency(
            old.size,
            checkpoint.size,
            &proof.hashes,
            &old.root,
            &checkpoint.root,
        )
        .map_err(Inconsistency::from)
    };
    match verified {
        Ok(()) => Ok(Previous::Verified(PreviousCheck::ProofVerified {
            old_size: old.size,
        })),
        Err(reason) => {
            found.problems.push(Finding::ProofRejected {
                size: checkpoint.size,
                previous_size: old.size,
                reason,
            });
            Ok(Previous::None)
        }
    }
}

/// A receipt whose file and checkpoint passed; its proof is checked against the records.
struct ReceiptCheck {
    file: String,
    receipt: Receipt,
    checkpoint: Checkpoint,
}

/// The receipts: each `<id>.tlog-proof` must be a receipt for record `id` carrying a
/// checkpoint signed by the key.
fn receipts(
    source: &dyn ExportSource,
    key: &Key,
    found: &mut Found,
) -> Result<Vec<ReceiptCheck>, VerifyError> {
    let names = source
        .receipt_names()
        .map_err(|error| VerifyError::Unreadable {
            file: source.describe(RECEIPTS_DIR),
            error,
        })?;
    let mut checks = Vec::new();
    for name in names {
        let path = format!("{RECEIPTS_DIR}/{name}");
        let file = source.describe(&path);
        let Some(id) = receipt_id(&name) else {
            found.warnings.push(Warning::IgnoredFile { file });
            continue;
        };
        let text = match source.read_text(&path) {
            Ok(t) => t,
            Err(error) => {
                found
                    .problems
                    .push(Finding::ReceiptUnreadable { file, error });
                continue;
            }
        };
        let receipt = match Receipt::parse(&text) {
            Ok(r) => r,
            Err(error) => {
                found
                    .problems
                    .push(Finding::ReceiptMalformed { file, error });
                continue;
            }
        };
        if receipt.index != id {
            found.problems.push(Finding::ReceiptIndexMismatch {
                file,
                index: receipt.index,
                named: id,
            });
            continue;
        }
        match open_checkpoint(&receipt.checkpoint_note, &key.verifier) {
            Ok(checkpoint) => checks.push(ReceiptCheck {
                file,
                receipt,
                checkpoint,
            }),
            Err(error) => found
                .problems
                .push(Finding::ReceiptCheckpointDoesNotVerify {
                    record: id,
                    file,
                    vkey: key.vkey.clone(),
                    error,
                }),
        }
    }
    Ok(checks)
}

/// The records against the checkpoint: every line valid, complete, as many as it covers, and
/// the root it signs.
fn check_records(s: &StreamOutcome, checkpoint: &Checkpoint, found: &mut Found) {
    let problems = &mut found.problems;
    problems.extend(s.problems.iter().cloned());
    if s.bad_records > s.problems.len() as u64 {
        problems.push(Finding::MoreInvalidRecords {
            count: s.bad_records - s.problems.len() as u64,
        });
    }
    if s.unterminated {
        problems.push(Finding::Unterminated {
            record: s.lines - 1,
        });
    }
    if s.lines < checkpoint.size {
        problems.push(Finding::Truncated {
            signed_size: checkpoint.size,
            lines: s.lines,
        });
        return;
    }
    if s.lines > checkpoint.size {
        problems.push(Finding::UnsignedRecords {
            lines: s.lines,
            signed_size: checkpoint.size,
        });
    }
    if let Some(root) = s.roots.get(&checkpoint.size) {
        if *root != checkpoint.root {
            problems.push(Finding::RootMismatch {
                size: checkpoint.size,
                computed: *root,
                signed: checkpoint.root,
            });
        }
    }
}

/// Without a consistency proof: the records' root at the previous checkpoint's size must be
/// the one it signs.
fn check_previous_recomputed(
    s: &StreamOutcome,
    old: &Checkpoint,
    found: &mut Found,
) -> Option<PreviousCheck> {
    match s.roots.get(&old.size) {
        Some(root) if *root == old.root => Some(PreviousCheck::Recomputed { old_size: old.size }),
        Some(root) => {
            found.problems.push(Finding::LogRewritten {
                previous_size: old.size,
                computed: *root,
                signed: old.root,
            });
            None
        }
        None => {
            found.problems.push(Finding::PreviousBeyondRecords {
                previous_size: old.size,
                lines: s.lines,
            });
            None
        }
    }
}

/// Each receipt's inclusion proof against its record's line, and its tree against the
/// records. Returns how many receipts verified completely.
fn check_receipts(
    s: &StreamOutcome,
    checks: &[ReceiptCheck],
    checkpoint: &Checkpoint,
    found: &mut Found,
) -> usize {
    let mut verified = 0;
    for rc in checks {
        let id = rc.receipt.index;
        let file = rc.file.clone();
        let Some(leaf) = s.leaf_hashes.get(&id) else {
            found
                .problems
                .push(Finding::ReceiptRecordMissing { record: id, file });
            continue;
        };
        if let Err(error) = attest::log::verify_inclusion(
            leaf,
            id,
            rc.checkpoint.size,
            &rc.receipt.proof,
            &rc.checkpoint.root,
        ) {
            found.problems.push(Finding::ReceiptMismatch {
                record: id,
                file,
                error,
            });
            continue;
        }
        match s.roots.get(&rc.checkpoint.size) {
            Some(root) if *root == rc.checkpoint.root => verified += 1,
            // A receipt fetched after the export's checkpoint, against a later one: the node
            // did sign the record at this index, but this export cannot tie that later tree
            // to its own without a consistency proof.
            None if rc.checkpoint.size > checkpoint.size => {
                found.warnings.push(Warning::ReceiptAgainstLaterCheckpoint {
                    record: id,
                    file,
                    receipt_size: rc.checkpoint.size,
                    size: checkpoint.size,
                })
            }
            _ => found.problems.push(Finding::ReceiptTreeNotReproduced {
                record: id,
                file,
                size: rc.checkpoint.size,
            }),
        }
    }
    verified
}

#[cfg(test)]
mod tests;
