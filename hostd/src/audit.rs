//! The daemon's side of audit exports: writing the ledger of this node into the export
//! layout an auditor verifies offline (`auditor::layout`, `docs/audit.md`).
//!
//! Everything an auditor runs (the layout, the writer, the verifier) lives in the pure
//! `auditor` crate; this module only reads the node's sled state and hands the records to
//! `auditor::export`.

use crate::ledger::{Ledger, LedgerError, Snapshot};
use attest::log::leaf_hash;
use attest::report::report;
use auditor::export::{write_export_with, write_record, ExportError, ExportSummary, ExportWriter};
use auditor::layout::RECORDS_FILE;
use std::path::{Path, PathBuf};

/// How many damaged records an export of a damaged state lists before only counting them.
const MAX_LISTED_PROBLEMS: usize = 20;

/// Why the node's ledger could not be exported.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error(transparent)]
    Export(#[from] ExportError),
    #[error("state directory is in use by a running hostd; use `sovctl audit export`")]
    StateInUse,
    #[error("{0} holds no hostd state (no {0}/db database)")]
    NoState(PathBuf),
    #[error("cannot open the state database {path}")]
    OpenState {
        path: PathBuf,
        #[source]
        source: sled::Error,
    },
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

/// Exports `ledger`'s latest checkpoint and exactly the records it covers to `out` (which
/// must be missing or empty), with the receipts of the record ids in `receipts`.
pub fn export(ledger: &Ledger, out: &Path, receipts: &[u64]) -> Result<ExportSummary, AuditError> {
    let snap = ledger.snapshot();
    let mut rs = Vec::with_capacity(receipts.len());
    for &id in receipts {
        rs.push((id, snap.receipt(id)?));
    }
    export_snapshot(&snap, out, &rs)
}

/// Exports a [`Snapshot`] (the records are read after the ledger's lock is released, which
/// is safe because records below a checkpoint never change).
pub fn export_snapshot(
    snap: &Snapshot,
    out: &Path,
    receipts: &[(u64, String)],
) -> Result<ExportSummary, AuditError> {
    let records = snap.records().map(|r| r.map_err(AuditError::from));
    write_export_with(out, snap.checkpoint_note(), snap.vkey(), records, receipts)
}

/// `hostd audit export`: exports the ledger of a *stopped* node from its state directory.
///
/// The state is exported as it is stored, even when damaged (a missing record, a record
/// whose bytes no longer match the hash the log was built from, a checkpoint that does not
/// match the tree): the summary's `problems` name the damage and the auditor's verification
/// of the export will fail. Only an unreadable state is an error.
pub fn export_state(
    state: &Path,
    out: &Path,
    receipts: &[u64],
) -> Result<ExportSummary, AuditError> {
    let db_path = state.join("db");
    if !db_path.is_dir() {
        return Err(AuditError::NoState(state.to_owned()));
    }
    let db = crate::state::while_locked(
        || sled::Config::new().path(&db_path).open(),
        crate::state::is_lock_error,
    )
    .map_err(|source| {
        if crate::state::is_lock_error(&source) {
            AuditError::StateInUse
        } else {
            AuditError::OpenState {
                path: db_path.clone(),
                source,
            }
        }
    })?;
    let snap = Snapshot::from_db(&db)?;
    let mut problems = snap.check();
    let mut rs = Vec::with_capacity(receipts.len());
    for &id in receipts {
        match snap.receipt(id) {
            Ok(r) => rs.push((id, r)),
            Err(e) => problems.push(format!("no receipt for record {id}: {e}", e = report(&e))),
        }
    }
    let size = snap.size();
    let mut w = ExportWriter::create(out)?;
    let mut records_out = w.file(RECORDS_FILE)?;
    let mut written = 0u64;
    let mut damaged = Vec::new();
    let mut damaged_count = 0u64;
    let mut note = |msg: String| {
        damaged_count += 1;
        if damaged.len() < MAX_LISTED_PROBLEMS {
            damaged.push(msg);
        }
    };
    let mut next = 0u64;
    for item in snap.stored_records() {
        let (index, bytes) = item?;
        if index != next {
            note(if index == next + 1 {
                format!("record {next} is missing from the store")
            } else {
                format!("records {next}..{} are missing from the store", index - 1)
            });
        }
        match snap.stored_leaf_hash(index)? {
            Some(h) if h == leaf_hash(&bytes) => {}
            Some(_) => note(format!(
                "record {index}: the stored bytes do not match the hash the log was built from \
                 (the record was altered in the store)"
            )),
            None => note(format!("record {index}: its stored leaf hash is missing")),
        }
        write_record(&mut records_out, index, &bytes)?;
        written += 1;
        next = index + 1;
    }
    if next < size {
        note(if next + 1 == size {
            format!("record {next} is missing from the store")
        } else {
            format!("records {next}..{} are missing from the store", size - 1)
        });
    }
    w.finish(RECORDS_FILE, records_out)?;
    w.write_all_files(snap.checkpoint_note(), snap.vkey(), &rs)?;
    problems.extend(damaged);
    if damaged_count > MAX_LISTED_PROBLEMS as u64 {
        problems.push(format!(
            "… and {} more damaged records",
            damaged_count - MAX_LISTED_PROBLEMS as u64
        ));
    }
    Ok(ExportSummary {
        records: written,
        checkpoint_size: size,
        receipts: rs.len(),
        problems,
    })
}
