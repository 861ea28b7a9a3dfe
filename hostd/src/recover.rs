//! `hostd ledger recover --from-export DIR`: bring a restored (or deleted) ledger store back
//! to the log this node already published, from an audit export, and say so in the ledger.
//!
//! When the store is behind the node's witness (see [`crate::witness`]) hostd refuses to
//! start, because signing would fork the published log. Recovery, run on the stopped node:
//!
//! 1. verifies the export with this node's own log key, requiring it to extend the witnessed
//!    checkpoint (so it holds every record the node ever published);
//! 2. checks that the store's records are a prefix of the export's, byte for byte;
//! 3. re-appends the missing records exactly as exported (the log's roots are then those
//!    already published: nothing is re-signed differently);
//! 4. ends every lease the restored store still lists as active, at the end of its last
//!    recorded interval, and drops their meter cursors and any pending write-ahead intent:
//!    the restored lease state is older than the records, and metering on from it would
//!    bill intervals twice. Tenants are never billed for time the ledger does not show;
//! 5. appends a `recovery` record saying what was done, and witnesses the new checkpoint.

use crate::clock::{parse_time_ms, rfc3339_ms};
use crate::keys::{self, KeyError};
use crate::lease::{Lease, LeaseState};
use crate::ledger::{Ledger, LedgerError};
use crate::state::keys::{cursor_prefix, LeasesKey, LEASE_PREFIX};
use crate::state::{Store, StoreError};
use crate::witness::{Witness, WitnessError, WITNESS_FILE};
use auditor::finding::Finding;
use auditor::record::{Record, RecoveryRecord, RECORD_VERSION};
use auditor::source::{DirSource, ExportSource, SourceError};
use auditor::verify::{verify_export, Supplied, VerifyFailure, VerifyOptions};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;

/// Records re-appended per ledger append (one signed checkpoint each).
const BATCH: usize = 1024;

/// Why recovery did not run, or stopped. Nothing is changed unless the export verified and
/// the store is a prefix of it.
#[derive(Debug, thiserror::Error)]
pub enum RecoverError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error(transparent)]
    Witness(#[from] WitnessError),
    #[error("export")]
    Source(#[from] SourceError),
    #[error("there is no witness ({0}): nothing says which log this node published")]
    NoWitness(String),
    #[error(
        "nothing to recover: the store holds {stored} records and extends the witnessed \
         checkpoint of {witnessed}"
    )]
    NotBehind { stored: u64, witnessed: u64 },
    #[error("the export does not verify with this node's key")]
    ExportFailed(#[source] VerifyFailure),
    #[error("the export does not verify with this node's key: {}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    ExportInvalid(Vec<Finding>),
    #[error(
        "record {index} in the store differs from the export's: the store holds another log, \
         which an export cannot repair (move the state directory aside and restore a matching \
         backup)"
    )]
    NotAPrefix { index: u64 },
    #[error("the export has {lines} records but its checkpoint covers {size}")]
    ShortExport { lines: u64, size: u64 },
    #[error("writing the recovery record")]
    Record(#[source] serde_json::Error),
}

/// What recovery did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// Records in the store before.
    pub store_size: u64,
    /// The witnessed checkpoint's size.
    pub witnessed_size: u64,
    /// Records re-appended from the export.
    pub reappended: u64,
    /// Leases ended because the restored store listed them as active.
    pub leases_ended: Vec<String>,
    /// Id of the `recovery` record.
    pub record: u64,
}

/// Recovers the ledger in `state_dir` (of a stopped node named `node`, log origin `origin`)
/// from the audit export in `export_dir`. `now_ms` is the time written in the record.
pub fn recover_from_export(
    state_dir: &Path,
    node: &str,
    origin: &str,
    export_dir: &Path,
    now_ms: i64,
) -> Result<Recovered, RecoverError> {
    let store = Store::open_stopped(state_dir)?;
    let signer = keys::load_log_key(&state_dir.join("log.key"), origin)?;
    let mut ledger = Ledger::open(store.db(), signer)?;
    let witness = Witness::at(state_dir.join(WITNESS_FILE));
    let note = std::fs::read_to_string(witness.path())
        .map_err(|_| RecoverError::NoWitness(witness.path().display().to_string()))?;
    let witnessed = witness
        .load(ledger.verifier())?
        .ok_or_else(|| RecoverError::NoWitness(witness.path().display().to_string()))?;
    let stored = ledger.size();
    if stored >= witnessed.size && ledger.root_at(witnessed.size)? == witnessed.root {
        return Err(RecoverError::NotBehind {
            stored,
            witnessed: witnessed.size,
        });
    }
    let source = DirSource::open(export_dir)?;
    let export = verified_export(&source, &ledger, witness.path(), note)?;
    let (reappended, last_ends) = reappend(&mut ledger, &source, stored, export.size)?;
    let leases_ended = end_restored_leases(&store, &last_ends)?;
    let record = ledger.next_index();
    let rec = Record::Recovery(RecoveryRecord {
        v: RECORD_VERSION,
        id: record,
        node: node.to_owned(),
        at: rfc3339_ms(now_ms),
        store_size: stored,
        witnessed_size: witnessed.size,
        reappended,
        export_size: export.size,
        export_root: B64.encode(export.root),
    });
    ledger.append(&[rec.to_leaf().map_err(RecoverError::Record)?])?;
    witness.store(ledger.checkpoint_note())?;
    store.flush()?;
    tracing::warn!(
        store_size = stored,
        witnessed = witnessed.size,
        reappended,
        record,
        "ledger recovered from an audit export"
    );
    Ok(Recovered {
        store_size: stored,
        witnessed_size: witnessed.size,
        reappended,
        leases_ended,
        record,
    })
}

/// The export's checkpoint, once the export verified with this node's key and extends the
/// witnessed checkpoint.
fn verified_export(
    source: &DirSource,
    ledger: &Ledger,
    witness_path: &Path,
    witness_note: String,
) -> Result<attest::checkpoint::Checkpoint, RecoverError> {
    let opts = VerifyOptions {
        vkey: Some(Supplied {
            name: "this node's log key".into(),
            text: ledger.vkey(),
        }),
        previous: Some(Supplied {
            name: witness_path.display().to_string(),
            text: witness_note,
        }),
        consistency: None,
    };
    let report = verify_export(source, &opts, |_, _| {}).map_err(RecoverError::ExportFailed)?;
    if !report.is_valid() {
        return Err(RecoverError::ExportInvalid(report.problems));
    }
    Ok(report.checkpoint)
}

/// Checks the store's records against the export's first lines and appends the rest. Returns
/// the number appended and, per lease, the end of its last usage interval among them.
fn reappend(
    ledger: &mut Ledger,
    source: &DirSource,
    stored: u64,
    size: u64,
) -> Result<(u64, BTreeMap<String, String>), RecoverError> {
    let (reader, _) = source.open_records()?;
    let mut lines = BufReader::new(reader).split(b'\n');
    let mut index = 0u64;
    let mut batch = Vec::new();
    let mut last_ends = BTreeMap::new();
    while index < size {
        let Some(line) = lines.next() else {
            return Err(RecoverError::ShortExport { lines: index, size });
        };
        let line =
            line.map_err(|e| RecoverError::Source(SourceError::Io(std::sync::Arc::new(e))))?;
        if index < stored {
            if ledger.record(index)?.as_deref() != Some(line.as_slice()) {
                return Err(RecoverError::NotAPrefix { index });
            }
        } else {
            if let Ok(Record::Usage(u)) = serde_json::from_slice::<Record>(&line) {
                last_ends.insert(u.lease, u.end);
            }
            batch.push(line);
            if batch.len() == BATCH {
                ledger.append(&std::mem::take(&mut batch))?;
            }
        }
        index += 1;
    }
    if !batch.is_empty() {
        ledger.append(&batch)?;
    }
    Ok((size.saturating_sub(stored), last_ends))
}

/// Ends the leases the restored store lists as active (see the module doc), dropping their
/// cursors and any pending intent, in one batch.
fn end_restored_leases(
    store: &Store,
    last_ends: &BTreeMap<String, String>,
) -> Result<Vec<String>, RecoverError> {
    let tree = store.tree("leases")?;
    let mut ops: Vec<(String, Option<serde_json::Value>)> = Vec::new();
    let mut ended = Vec::new();
    for mut lease in tree.scan::<Lease>(LEASE_PREFIX)? {
        if lease.state != LeaseState::Active {
            continue;
        }
        let end = last_ends
            .get(&lease.id)
            .and_then(|e| parse_time_ms(e).ok())
            .unwrap_or(lease.started_ms)
            .max(lease.started_ms);
        lease.state = LeaseState::Ended;
        lease.ended_ms = Some(end);
        lease.ended = Some(rfc3339_ms(end));
        for key in tree.keys(&cursor_prefix(&lease.id))? {
            ops.push((key, None));
        }
        let value = serde_json::to_value(&lease).map_err(RecoverError::Record)?;
        ops.push((LeasesKey::Lease(&lease.id).key(), Some(value)));
        ended.push(lease.id);
    }
    ops.push((LeasesKey::Intent.key(), None));
    let refs: Vec<(String, Option<&serde_json::Value>)> =
        ops.iter().map(|(k, v)| (k.clone(), v.as_ref())).collect();
    tree.apply(&refs)?;
    Ok(ended)
}
