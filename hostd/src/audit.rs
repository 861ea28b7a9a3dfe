//! The daemon's side of audit exports: writing the ledger of this node into the export
//! layout an auditor verifies offline (`auditor::layout`, `docs/audit.md`).
//!
//! Everything an auditor runs (the layout, the writer, the verifier) lives in the pure
//! `auditor` crate; this module only reads the node's sled state and hands the records to
//! `auditor::export`.

use crate::ledger::{Ledger, LedgerError, Snapshot, StateProblem};
use attest::log::leaf_hash;
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

/// What `hostd audit export` wrote from a stopped node's state, and the damage it found.
#[derive(Debug)]
pub struct StateExport {
    /// The files written.
    pub summary: ExportSummary,
    /// Damage found in the state, the first [`MAX_LISTED_PROBLEMS`] damaged records
    /// included; empty for a healthy node. The export was written anyway, as stored.
    pub problems: Vec<StateProblem>,
    /// Damaged records found beyond those listed in `problems`.
    pub unlisted_damage: u64,
}

/// `hostd audit export`: exports the ledger of a *stopped* node from its state directory.
///
/// The state is exported as it is stored, even when damaged (a missing record, a record
/// whose bytes no longer match the hash the log was built from, a checkpoint that does not
/// match the tree): the result's `problems` name the damage and the auditor's verification
/// of the export will fail. Only an unreadable state is an error.
pub fn export_state(state: &Path, out: &Path, receipts: &[u64]) -> Result<StateExport, AuditError> {
    let db = open_stopped_state(state)?;
    let snap = Snapshot::from_db(&db)?;
    let mut problems = snap.check();
    let mut rs = Vec::with_capacity(receipts.len());
    for &id in receipts {
        match snap.receipt(id) {
            Ok(r) => rs.push((id, r)),
            Err(source) => problems.push(StateProblem::NoReceipt { id, source }),
        }
    }
    let mut w = ExportWriter::create(out)?;
    let mut records_out = w.file(RECORDS_FILE)?;
    let mut damage = Damage::default();
    let mut written = 0u64;
    for item in snap.stored_records() {
        let (index, bytes) = item?;
        damage.missing_before(index);
        match snap.stored_leaf_hash(index)? {
            Some(h) if h == leaf_hash(&bytes) => {}
            Some(_) => damage.note(StateProblem::RecordAltered { index }),
            None => damage.note(StateProblem::LeafHashMissing { index }),
        }
        write_record(&mut records_out, index, &bytes)?;
        written += 1;
    }
    damage.missing_before(snap.size());
    w.finish(RECORDS_FILE, records_out)?;
    w.write_all_files(snap.checkpoint_note(), snap.vkey(), &rs)?;
    problems.extend(damage.listed);
    Ok(StateExport {
        summary: ExportSummary {
            records: written,
            checkpoint_size: snap.size(),
            receipts: rs.len(),
        },
        problems,
        unlisted_damage: damage.unlisted,
    })
}

/// Opens the state database of a stopped node: a running hostd holds its lock.
fn open_stopped_state(state: &Path) -> Result<sled::Db, AuditError> {
    let db_path = state.join("db");
    if !db_path.is_dir() {
        return Err(AuditError::NoState(state.to_owned()));
    }
    crate::state::while_locked(
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
    })
}

/// Damaged records, found in record order: the first [`MAX_LISTED_PROBLEMS`] listed, the
/// rest counted.
#[derive(Default)]
struct Damage {
    listed: Vec<StateProblem>,
    unlisted: u64,
    /// The index the next stored record should have.
    next: u64,
}

impl Damage {
    fn note(&mut self, problem: StateProblem) {
        if self.listed.len() < MAX_LISTED_PROBLEMS {
            self.listed.push(problem);
        } else {
            self.unlisted += 1;
        }
    }

    /// Records between the last one seen and `index` (a stored record, or the checkpoint's
    /// size at the end) are missing.
    fn missing_before(&mut self, index: u64) {
        if index > self.next {
            self.note(StateProblem::RecordsMissing {
                first: self.next,
                last: index - 1,
            });
        }
        self.next = index + 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_are_named_as_ranges_and_damage_past_the_list_is_counted() {
        let mut d = Damage::default();
        for index in [0, 1, 3, 7] {
            d.missing_before(index);
        }
        d.missing_before(8); // the checkpoint's size: nothing missing at the end
        let text: Vec<String> = d.listed.iter().map(|p| p.to_string()).collect();
        assert_eq!(
            text,
            [
                "record 2 is missing from the store",
                "records 4..6 are missing from the store"
            ]
        );
        for index in 0..MAX_LISTED_PROBLEMS as u64 + 5 {
            d.note(StateProblem::RecordAltered { index });
        }
        assert_eq!(d.listed.len(), MAX_LISTED_PROBLEMS);
        assert_eq!(d.unlisted, 7);
        d.missing_before(100);
        assert_eq!(d.unlisted, 8, "a gap after the list is full is counted too");
    }
}
