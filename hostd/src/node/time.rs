//! Time never goes backwards in the node's state.
//!
//! The latest time the state holds (a lease's start or end, a meter cursor's last sample, the
//! last ledger record's time) becomes the clock's floor at start. A node restarted on a
//! machine whose clock is behind its state (a bad RTC, NTP not yet synced, a state directory
//! moved from a machine whose clock ran ahead) then holds node time at that floor until the
//! system clock catches up: metering closes no interval meanwhile (they would have length 0),
//! no lease ends before it started, and no interval is billed twice. `/v1/health` says
//! `degraded` with the delay while it lasts, and the start is logged as a warning.

use super::*;

/// The time a record was written for: the end of a usage or job-usage interval, the moment
/// of the others.
fn record_time(rec: &Record) -> Option<i64> {
    let t = match rec {
        Record::Usage(u) => &u.end,
        Record::Attestation(a) => &a.received,
        Record::GpuEvent(g) => &g.at,
        Record::Recovery(r) => &r.at,
        Record::JobUsage(j) => &j.end,
        Record::ScratchErased(e) => &e.at,
        Record::Transfer(t) => &t.at,
    };
    crate::clock::parse_time_ms(t).ok()
}

impl Node {
    /// The latest time the node's state holds, given its leases and meter cursors (read
    /// once at start, by the state check).
    fn time_floor(&self, leases: &[Lease], cursors: &[Cursor]) -> Result<Option<i64>, NodeError> {
        let mut times = Vec::new();
        for l in leases {
            times.push(l.started_ms);
            times.extend(l.ended_ms);
        }
        times.extend(
            cursors
                .iter()
                .map(|c| c.last_sample_ms.max(c.period_start_ms)),
        );
        let ledger = lock(&self.ledger);
        if let Some(i) = ledger.size().checked_sub(1) {
            let leaf = ledger.record(i).map_err(NodeError::internal)?;
            let rec = leaf.and_then(|l| serde_json::from_slice::<Record>(&l).ok());
            times.extend(rec.as_ref().and_then(record_time));
        }
        Ok(times.into_iter().max())
    }

    /// Floors the clock at the state's latest time, warning when the system clock is behind.
    pub(super) fn hold_clock_at_state(
        &self,
        leases: &[Lease],
        cursors: &[Cursor],
    ) -> Result<(), NodeError> {
        let Some(floor) = self.time_floor(leases, cursors)? else {
            return Ok(());
        };
        let behind = self.clock.raise_floor(floor);
        if behind > 0 {
            warn!(
                behind_ms = behind,
                state_time = %rfc3339_ms(floor),
                "the system clock is behind times already written in the state; node time \
                 holds there until it catches up (nothing is metered meanwhile)"
            );
        }
        Ok(())
    }

    /// Since when (node time, ms) metering rounds have been failing; `None` when they work.
    pub fn set_metering_failure(&self, since_ms: Option<i64>) {
        *lock(&self.metering_failing_since) = since_ms;
    }
}
