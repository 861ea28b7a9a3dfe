//! Reading the ledger back, checked against its own signed checkpoint.

use super::*;
use crate::ledger::Snapshot;

impl Node {
    /// The latest checkpoint and read access to exactly the records it covers, taken under the
    /// ledger's lock and read without it: records below a checkpoint never change, so a long
    /// read never holds up appends.
    pub fn ledger_snapshot(&self) -> Snapshot {
        self.with_ledger(|l| l.snapshot())
    }

    /// Reads every record of a snapshot once, in order, handing each to `f` while
    /// recomputing the Merkle root, and refuses the answer when the records do not match the
    /// snapshot's signed checkpoint (a tampered state directory). Returns the checkpoint note
    /// the records were verified against. Holds one record at a time: `f` decides what is
    /// kept.
    pub fn fold_verified_ledger(
        &self,
        mut f: impl FnMut(u64, &[u8]) -> Result<(), NodeError>,
    ) -> Result<String, NodeError> {
        use attest::checkpoint::open_checkpoint;
        use attest::log::RootBuilder;
        use attest::note::NoteVerifier;
        let snap = self.ledger_snapshot();
        let note = snap.checkpoint_note().to_owned();
        let verifier = NoteVerifier::parse(snap.vkey()).map_err(|e| internal("ledger vkey", e))?;
        let cp = open_checkpoint(&note, &verifier)
            .map_err(|e| internal("ledger checkpoint does not verify", e))?;
        let mut b = RootBuilder::new();
        let mut count = 0u64;
        for item in snap.records_in(0..snap.size()) {
            let (index, leaf) = item.map_err(|e| internal("reading the ledger", e))?;
            b.push(&leaf).map_err(|e| internal("ledger", e))?;
            f(index, &leaf)?;
            count += 1;
        }
        if cp.size != count {
            return Err(NodeError::internal(format!(
                "ledger holds {count} records but its signed checkpoint says {}",
                cp.size
            )));
        }
        if b.root() != cp.root {
            return Err(NodeError::internal(
                "ledger records do not match the signed checkpoint's root: the state directory was tampered with",
            ));
        }
        Ok(note)
    }
}
