//! Metering: turning GPU samples into usage intervals.
//!
//! A [`Cursor`] follows one GPU of one lease. It accumulates energy (from the GPU's total
//! energy counter), utilization and peak memory between samples, and is cut into closed
//! [`Usage`] intervals at every UTC hour boundary and at lease end. GPU time is billed from the
//! lease's clock, not from samples, so a missed sample never loses or invents GPU-seconds;
//! energy is attributed to an interval in proportion to time when a sample spans a cut.

use crate::clock::next_hour_ms;
use serde::{Deserialize, Serialize};

/// Accumulated use of one GPU by one lease since `period_start_ms`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cursor {
    pub lease: String,
    pub gpu_uuid: String,
    pub gpu_model: String,
    pub period_start_ms: i64,
    /// Time and energy counter (mJ) of the last good sample.
    pub last_sample_ms: i64,
    pub last_energy_mj: Option<u64>,
    /// Energy attributed to the open period, mJ.
    pub energy_mj: f64,
    pub util_sum: f64,
    pub samples: u64,
    pub peak_memory_bytes: u64,
    /// Id of the last usage record written for this lease and GPU.
    pub prev_record: Option<u64>,
    /// Consecutive failed samples; the GPU is declared faulty past a threshold.
    pub consecutive_errors: u32,
}

/// A closed interval, ready to become a usage record.
#[derive(Debug, Clone, PartialEq)]
pub struct Usage {
    pub lease: String,
    pub gpu_uuid: String,
    pub gpu_model: String,
    pub start_ms: i64,
    pub end_ms: i64,
    pub energy_joules: f64,
    pub peak_memory_bytes: u64,
    pub mean_utilization_pct: f64,
}

/// What a sample told us about the GPU beyond plain accounting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Anomaly {
    /// The energy counter went backwards (driver reload, reset, or a lying GPU): the delta
    /// is not charged and the counter is re-based.
    EnergyBackwards { previous_mj: u64, now_mj: u64 },
}

/// One observation of a GPU, reduced to what metering uses.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    pub at_ms: i64,
    pub energy_mj: Option<u64>,
    pub utilization_pct: u32,
    pub memory_used_bytes: u64,
}

impl Cursor {
    pub fn start(
        lease: &str,
        gpu_uuid: &str,
        gpu_model: &str,
        at_ms: i64,
        energy_mj: Option<u64>,
    ) -> Cursor {
        Cursor {
            lease: lease.into(),
            gpu_uuid: gpu_uuid.into(),
            gpu_model: gpu_model.into(),
            period_start_ms: at_ms,
            last_sample_ms: at_ms,
            last_energy_mj: energy_mj,
            energy_mj: 0.0,
            util_sum: 0.0,
            samples: 0,
            peak_memory_bytes: 0,
            prev_record: None,
            consecutive_errors: 0,
        }
    }

    /// Folds in a sample and returns the intervals it closes (one per hour boundary crossed).
    pub fn observe(&mut self, r: Reading) -> (Vec<Usage>, Option<Anomaly>) {
        let mut anomaly = None;
        let delta_mj = match (self.last_energy_mj, r.energy_mj) {
            (Some(prev), Some(now)) if now >= prev => (now - prev) as f64,
            (Some(prev), Some(now)) => {
                anomaly = Some(Anomaly::EnergyBackwards {
                    previous_mj: prev,
                    now_mj: now,
                });
                0.0
            }
            _ => 0.0,
        };
        if r.energy_mj.is_some() {
            self.last_energy_mj = r.energy_mj;
        }
        self.consecutive_errors = 0;
        let closed = self.advance(r.at_ms, delta_mj);
        self.util_sum += f64::from(r.utilization_pct.min(100));
        self.samples += 1;
        self.peak_memory_bytes = self.peak_memory_bytes.max(r.memory_used_bytes);
        (closed, anomaly)
    }

    /// Closes the open period at `end_ms` (lease end, or last good sample of a lost GPU),
    /// first cutting at any hour boundaries before it.
    pub fn close(&mut self, end_ms: i64) -> Vec<Usage> {
        let mut closed = self.advance(end_ms, 0.0);
        if end_ms > self.period_start_ms {
            closed.push(self.cut(end_ms));
        }
        closed
    }

    /// Moves time forward to `at_ms`, attributing `delta_mj` (energy since the last sample)
    /// across the hour boundaries in between in proportion to time.
    fn advance(&mut self, at_ms: i64, delta_mj: f64) -> Vec<Usage> {
        let mut closed = Vec::new();
        let span = (at_ms - self.last_sample_ms).max(0) as f64;
        let mut remaining = delta_mj;
        let mut from = self.last_sample_ms;
        loop {
            let boundary = next_hour_ms(self.period_start_ms);
            if boundary > at_ms {
                break;
            }
            if span > 0.0 && boundary > from {
                let part = delta_mj * ((boundary - from) as f64 / span);
                self.energy_mj += part;
                remaining -= part;
                from = boundary;
            }
            closed.push(self.cut(boundary));
        }
        self.energy_mj += remaining.max(0.0);
        self.last_sample_ms = self.last_sample_ms.max(at_ms);
        closed
    }

    fn cut(&mut self, end_ms: i64) -> Usage {
        let mean = if self.samples == 0 {
            0.0
        } else {
            self.util_sum / self.samples as f64
        };
        let u = Usage {
            lease: self.lease.clone(),
            gpu_uuid: self.gpu_uuid.clone(),
            gpu_model: self.gpu_model.clone(),
            start_ms: self.period_start_ms,
            end_ms,
            energy_joules: self.energy_mj.round() / 1000.0,
            peak_memory_bytes: self.peak_memory_bytes,
            mean_utilization_pct: (mean * 100.0).round() / 100.0,
        };
        self.period_start_ms = end_ms;
        self.energy_mj = 0.0;
        self.util_sum = 0.0;
        self.samples = 0;
        self.peak_memory_bytes = 0;
        u
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: i64 = 3_600_000;

    fn reading(at_ms: i64, energy_mj: u64) -> Reading {
        Reading {
            at_ms,
            energy_mj: Some(energy_mj),
            utilization_pct: 50,
            memory_used_bytes: 1 << 30,
        }
    }

    #[test]
    fn cuts_at_hour_boundaries_and_splits_energy_by_time() {
        let mut c = Cursor::start("l1", "GPU-0", "H100", H / 2, Some(0));
        // One sample spanning the boundary at 1h: 1000 J over 1h, half before the cut.
        let (closed, anomaly) = c.observe(reading(H + H / 2, 1_000_000));
        assert!(anomaly.is_none());
        assert_eq!(closed.len(), 1);
        assert_eq!((closed[0].start_ms, closed[0].end_ms), (H / 2, H));
        assert!((closed[0].energy_joules - 500.0).abs() < 1e-6);
        let rest = c.close(2 * H);
        assert_eq!(rest.len(), 1);
        assert_eq!((rest[0].start_ms, rest[0].end_ms), (H, 2 * H));
        assert!((rest[0].energy_joules - 500.0).abs() < 1e-6);
        assert_eq!(rest[0].mean_utilization_pct, 50.0);
    }

    #[test]
    fn forty_hours_is_forty_one_hour_records() {
        let mut c = Cursor::start("l1", "GPU-0", "H100", 0, Some(0));
        let mut all = Vec::new();
        for s in 1..=400 {
            all.extend(c.observe(reading(s * H / 10, (s as u64) * 1000)).0);
        }
        all.extend(c.close(40 * H));
        assert_eq!(all.len(), 40);
        let total_ms: i64 = all.iter().map(|u| u.end_ms - u.start_ms).sum();
        assert_eq!(total_ms, 40 * H);
        assert!(all.windows(2).all(|w| w[0].end_ms == w[1].start_ms));
    }

    #[test]
    fn energy_counter_going_backwards_is_not_charged() {
        let mut c = Cursor::start("l1", "GPU-0", "H100", 0, Some(5_000));
        c.observe(reading(1_000, 6_000));
        let (_, anomaly) = c.observe(reading(2_000, 10));
        assert_eq!(
            anomaly,
            Some(Anomaly::EnergyBackwards {
                previous_mj: 6_000,
                now_mj: 10
            })
        );
        c.observe(reading(3_000, 1_010));
        let u = c.close(3_000);
        assert!((u[0].energy_joules - 2.0).abs() < 1e-9, "{u:?}");
    }

    #[test]
    fn close_at_start_produces_nothing() {
        let mut c = Cursor::start("l1", "GPU-0", "H100", 10, None);
        assert!(c.close(10).is_empty());
    }
}
