//! Reading the ledger back, checked against its own signed checkpoint.

use super::*;

/// The ledger's records, checked against its signed checkpoint.
pub struct VerifiedLedger {
    pub leaves: Vec<Vec<u8>>,
    /// The signed checkpoint note the leaves were verified against.
    pub checkpoint: String,
}

impl Node {
    /// Reads every record and recomputes the Merkle root, refusing to answer from a ledger
    /// that does not match its own signed checkpoint (a tampered state directory).
    pub fn verified_ledger(&self) -> Result<VerifiedLedger, NodeError> {
        use attest::checkpoint::open_checkpoint;
        use attest::log::RootBuilder;
        use attest::note::NoteVerifier;
        let (note, vkey, leaves) = self
            .with_ledger(|l| -> Result<_, String> {
                let note = l.checkpoint_note().to_string();
                let leaves = l
                    .records(0..l.size())
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| e.to_string())?;
                Ok((note, l.vkey(), leaves))
            })
            .map_err(|e| internal("reading the ledger", e))?;
        let verifier = NoteVerifier::parse(&vkey).map_err(|e| internal("ledger vkey", e))?;
        let cp = open_checkpoint(&note, &verifier)
            .map_err(|e| internal("ledger checkpoint does not verify", e))?;
        if cp.size != leaves.len() as u64 {
            return Err(NodeError::internal(format!(
                "ledger holds {} records but its signed checkpoint says {}",
                leaves.len(),
                cp.size
            )));
        }
        let mut b = RootBuilder::new();
        for leaf in &leaves {
            b.push(leaf).map_err(|e| internal("ledger", e))?;
        }
        if b.root() != cp.root {
            return Err(NodeError::internal(
                "ledger records do not match the signed checkpoint's root: the state directory was tampered with",
            ));
        }
        Ok(VerifiedLedger {
            leaves,
            checkpoint: note,
        })
    }
}
