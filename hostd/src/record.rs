//! Ledger records: the JSON lines that the signed usage log holds.
//!
//! Each leaf of the ledger is exactly one record serialized as compact JSON (no trailing
//! newline). The `id` of a record is its leaf index, so an auditor can check that line `i`
//! of `records.jsonl` claims to be record `i`, and a tenant's receipt names the index its
//! inclusion proof is for. Money is integer paise so totals add up exactly.

use serde::{Deserialize, Serialize};

/// Schema version of the records written by this build.
pub const RECORD_VERSION: u32 = 1;

/// One ledger record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Record {
    /// GPU use metered for one lease over one interval (at most one hour, cut at lease end).
    Usage(UsageRecord),
}

/// Usage of one GPU by one lease over `[start, end)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageRecord {
    /// Record schema version ([`RECORD_VERSION`]).
    pub v: u32,
    /// Leaf index of this record in the ledger.
    pub id: u64,
    pub node: String,
    pub tenant: String,
    pub lease: String,
    pub gpu_uuid: String,
    pub gpu_model: String,
    /// Interval start and end, RFC 3339 UTC.
    pub start: String,
    pub end: String,
    /// Leased GPU time in the interval, in milliseconds (exact; `gpu_seconds` is derived).
    pub gpu_ms: u64,
    /// `gpu_ms / 1000`, for people reading the log.
    pub gpu_seconds: f64,
    /// Energy from the GPU's total-energy counter delta, in joules.
    pub energy_joules: f64,
    /// Peak framebuffer memory used, bytes.
    pub peak_memory_bytes: u64,
    /// Mean GPU utilization over the samples, percent.
    pub mean_utilization_pct: f64,
    /// Rate in paise per GPU-hour.
    pub rate_paise_per_hour: u64,
    /// `round_half_up(gpu_ms * rate / 3_600_000)` paise.
    pub amount_paise: u64,
    /// Digest of the residency policy in force when the lease was placed.
    pub policy_digest: String,
    /// Id of the previous usage record of the same lease, if any.
    pub prev: Option<u64>,
}

/// Amount in paise for `gpu_ms` at `rate_paise_per_hour`, rounded half up; exact integer math
/// so that the same inputs bill the same on every machine.
pub fn amount_paise(gpu_ms: u64, rate_paise_per_hour: u64) -> u64 {
    let num = u128::from(gpu_ms) * u128::from(rate_paise_per_hour);
    let amount = (num + 1_800_000) / 3_600_000;
    u64::try_from(amount).unwrap_or(u64::MAX)
}

impl Record {
    /// The leaf index this record claims.
    pub fn id(&self) -> u64 {
        match self {
            Record::Usage(u) => u.id,
        }
    }

    /// Compact JSON bytes: the exact leaf data.
    pub fn to_leaf(&self) -> Vec<u8> {
        // Serializing plain structs of strings and numbers cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forty_hours_of_h100_at_250_rupees() {
        assert_eq!(amount_paise(40 * 3_600_000, 25_000), 1_000_000);
    }

    #[test]
    fn rounds_half_up() {
        // 1 ms at 1800 paise/h = 0.5 paise.
        assert_eq!(amount_paise(1, 1_800_000), 1);
        assert_eq!(amount_paise(1, 1_799_999), 0);
    }
}
