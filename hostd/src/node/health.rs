//! What is wrong with the node right now, as `GET /v1/health` says it: each problem with its
//! figures, worded for the operator. No internal detail: the node's log has it.

use super::*;

/// One reason the node is `degraded`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HealthProblem {
    /// Metering rounds have failed since `since_ms` (node time).
    #[error(
        "metering rounds have been failing since {} (usage since then is not yet recorded; \
         acknowledged records are safe); the node's log says why",
        rfc3339_ms(*since_ms)
    )]
    MeteringFailing { since_ms: i64 },
    /// The system clock is behind times the state holds; node time holds at `holds_at_ms`.
    #[error(
        "the system clock is {} s behind times already recorded; node time holds at {} until \
         it catches up, and nothing is metered meanwhile",
        behind_ms / 1000,
        rfc3339_ms(*holds_at_ms)
    )]
    ClockBehind { behind_ms: i64, holds_at_ms: i64 },
    /// NVML cannot enumerate the GPUs (the driver does not answer): the node cannot see its
    /// GPUs, so it can neither lease nor meter them.
    #[error(
        "the GPU inventory cannot be read (the NVIDIA driver does not answer); the node's \
         log says why"
    )]
    GpuInventoryUnreadable,
}

impl Node {
    /// What is wrong with the node right now (empty when healthy), and how many GPUs it sees
    /// (`None` when the inventory cannot be read: a problem, not zero GPUs).
    pub fn health(&self) -> (Vec<HealthProblem>, Option<usize>) {
        let mut out = Vec::new();
        if let Some(since_ms) = *lock(&self.metering_failing_since) {
            out.push(HealthProblem::MeteringFailing { since_ms });
        }
        let behind_ms = self.clock.behind_ms();
        if behind_ms > 1000 {
            out.push(HealthProblem::ClockBehind {
                behind_ms,
                holds_at_ms: self.clock.now_ms(),
            });
        }
        // NVML's own error, as the metering round logs it: one failure, one wording.
        let gpus = match self.gpus.inventory() {
            Ok(gpus) => Some(gpus.len()),
            Err(e) => {
                self.inventory_failed(&e);
                out.push(HealthProblem::GpuInventoryUnreadable);
                None
            }
        };
        (out, gpus)
    }
}
