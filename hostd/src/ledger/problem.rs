//! Damage found in a stopped node's stored ledger, by `hostd audit export` and
//! [`super::Snapshot::check`]: each kind with its evidence, so that callers can tell them apart
//! and the operator's message names the records and sizes involved.

use super::{LedgerError, StoreError};
use attest::checkpoint::CheckpointError;
use attest::log::LogError;
use attest::note::NoteError;

/// One inconsistency in the stored state. The export is written anyway, as stored, so an
/// auditor can see it; its verification will fail.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateProblem {
    /// The stored verifier key does not parse.
    #[error("the stored verifier key is malformed")]
    MalformedVerifierKey(#[source] NoteError),
    /// The stored checkpoint is not signed by the stored key.
    #[error("the stored checkpoint does not verify with the stored log key {vkey}")]
    CheckpointUnverified {
        vkey: String,
        #[source]
        source: CheckpointError,
    },
    /// The store holds fewer records than the checkpoint covers.
    #[error(
        "the stored checkpoint covers {signed} records but the store's size is {stored}: \
         records were removed"
    )]
    RecordsRemoved { signed: u64, stored: u64 },
    /// The store's own size could not be read.
    #[error("the store's size cannot be read")]
    SizeUnreadable(#[source] StoreError),
    /// The stored tree's root differs from the one the checkpoint signs (base64 both).
    #[error("the stored tree's root at size {size} is {stored} but the checkpoint says {signed}")]
    RootMismatch {
        size: u64,
        stored: String,
        signed: String,
    },
    /// The stored tree cannot be read back (a node or leaf hash is missing).
    #[error("the stored tree is damaged")]
    TreeDamaged(#[source] LogError),
    /// Records `first..=last` are missing from the store.
    #[error("{}", missing(*first, *last))]
    RecordsMissing { first: u64, last: u64 },
    /// The record's stored bytes do not hash to the leaf hash the tree was built from.
    #[error(
        "record {index}: the stored bytes do not match the hash the log was built from \
         (the record was altered in the store)"
    )]
    RecordAltered { index: u64 },
    /// The record is stored but its leaf hash is not.
    #[error("record {index}: its stored leaf hash is missing")]
    LeafHashMissing { index: u64 },
    /// A receipt that was asked for could not be made.
    #[error("no receipt for record {id}")]
    NoReceipt {
        id: u64,
        #[source]
        source: LedgerError,
    },
}

fn missing(first: u64, last: u64) -> String {
    if first == last {
        format!("record {first} is missing from the store")
    } else {
        format!("records {first}..{last} are missing from the store")
    }
}
