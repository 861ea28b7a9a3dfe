//! How the metering loop lives with failing rounds: loudly once, quietly after, never a flood;
//! and past a bound, it stops the node so the supervisor restarts it.
//!
//! Some failures do not heal in-process: after an I/O error such as a full disk, the store
//! refuses every later write until it is reopened. Every acknowledged record is already
//! durable, so the safe answer to a failure that lasts is to stop (SIGTERM's graceful path,
//! exit status 1) and let systemd's `Restart=on-failure` start a fresh process, which opens
//! the store again once space is back. Until then `/v1/health` says `degraded`.

use std::time::{Duration, Instant};

/// What to do with one failed round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Log it at ERROR (the first failure, a new kind of failure, or a minute's summary).
    Log { rounds: u64 },
    /// Count it, log nothing.
    Quiet,
    /// The rounds have failed for longer than the bound: stop the node.
    Stop { rounds: u64, failing_for: Duration },
}

/// Consecutive failed rounds.
#[derive(Debug)]
pub struct FailureTracker {
    stop_after: Duration,
    summary_every: Duration,
    since: Option<Instant>,
    last_error: String,
    last_log: Option<Instant>,
    rounds: u64,
}

impl FailureTracker {
    /// Stops after `stop_after` of uninterrupted failure; summarises every minute.
    pub fn new(stop_after: Duration) -> FailureTracker {
        FailureTracker {
            stop_after,
            summary_every: Duration::from_secs(60),
            since: None,
            last_error: String::new(),
            last_log: None,
            rounds: 0,
        }
    }

    /// When the current run of failures began, if one is under way.
    pub fn failing_since(&self) -> Option<Instant> {
        self.since
    }

    /// A round failed with `error` at `now`.
    pub fn failed(&mut self, now: Instant, error: &str) -> Verdict {
        let since = *self.since.get_or_insert(now);
        self.rounds += 1;
        if now.duration_since(since) >= self.stop_after {
            return Verdict::Stop {
                rounds: self.rounds,
                failing_for: now.duration_since(since),
            };
        }
        let new_kind = error != self.last_error;
        let due = self
            .last_log
            .is_none_or(|t| now.duration_since(t) >= self.summary_every);
        if new_kind || due {
            self.last_error = error.to_owned();
            self.last_log = Some(now);
            return Verdict::Log {
                rounds: self.rounds,
            };
        }
        Verdict::Quiet
    }

    /// A round succeeded: returns how many rounds had failed in a row, if any.
    pub fn succeeded(&mut self) -> Option<u64> {
        self.since.take()?;
        self.last_error.clear();
        self.last_log = None;
        Some(std::mem::take(&mut self.rounds))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 50 ms rounds failing for a minute log twice (the first, then a summary), not 1,200
    /// times; a new kind of error is logged at once; a success resets; past the bound, stop.
    #[test]
    fn failures_are_logged_once_summarised_and_bounded() {
        let t0 = Instant::now();
        let mut f = FailureTracker::new(Duration::from_secs(120));
        let mut logged = 0;
        for i in 0..1200u64 {
            let now = t0 + Duration::from_millis(50 * i);
            match f.failed(now, "No space left on device") {
                Verdict::Log { .. } => logged += 1,
                Verdict::Quiet => {}
                Verdict::Stop { .. } => panic!("stopped too early at round {i}"),
            }
        }
        assert_eq!(logged, 1, "one line for a minute of identical failures");
        let now = t0 + Duration::from_secs(61);
        assert_eq!(
            f.failed(now, "No space left on device"),
            Verdict::Log { rounds: 1201 }
        );
        let now = t0 + Duration::from_secs(62);
        assert!(matches!(
            f.failed(now, "another error"),
            Verdict::Log { .. }
        ));
        let now = t0 + Duration::from_secs(121);
        assert!(matches!(
            f.failed(now, "another error"),
            Verdict::Stop { rounds: 1203, .. }
        ));
        assert_eq!(f.succeeded(), Some(1203));
        assert_eq!(f.succeeded(), None);
        assert_eq!(f.failing_since(), None);
        assert!(matches!(f.failed(now, "x"), Verdict::Log { rounds: 1 }));
    }
}
