//! Invoices computed from usage records.
//!
//! The bill is a pure function of the ledger's records, so anyone holding a verified export
//! computes the same invoice as the node: the daemon only ever bills from the ledger, never
//! from a separate table.

use crate::record::{Record, UsageRecord};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// One line of an invoice: the usage records of one lease on one GPU model at one rate,
/// summed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InvoiceLine {
    /// Id of the lease billed.
    pub lease: String,
    /// The records' `gpu_model`.
    pub gpu_model: String,
    /// Number of distinct GPUs (by UUID) among the records.
    pub gpus: usize,
    /// The rate billed, paise per GPU-hour.
    pub rate_paise_per_hour: u64,
    /// Total GPU time, milliseconds (exact; what the amount is computed from).
    pub gpu_ms: u64,
    /// `gpu_ms / 3,600,000`: GPU-hours, for reading.
    pub gpu_hours: f64,
    /// Total energy of the records, kilowatt-hours (joules / 3,600,000).
    pub energy_kwh: f64,
    /// Sum of the records' `amount_paise`, in paise (1/100 rupee).
    pub amount_paise: u64,
    /// Number of usage records summed into this line.
    pub records: usize,
}

/// A tenant's bill for a period, computed from the ledger's usage records by [`invoice`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Invoice {
    /// Id of the tenant billed.
    pub tenant: String,
    /// Inclusive start of the period (records whose interval starts at or after it),
    /// RFC 3339; `None` for no lower bound.
    pub from: Option<String>,
    /// Exclusive end of the period (records whose interval starts before it), RFC 3339;
    /// `None` for no upper bound.
    pub to: Option<String>,
    /// The invoice lines, one per lease, GPU model and rate.
    pub lines: Vec<InvoiceLine>,
    /// Sum of the lines' amounts, paise.
    pub total_paise: u64,
    /// `total_paise` in rupees with Indian digit grouping, e.g. `₹1,00,000.00`
    /// ([`crate::money::format_inr`]).
    pub total: String,
    /// Ids of the records billed: each can be checked with its receipt.
    pub record_ids: Vec<u64>,
    /// The signed checkpoint the records were verified against.
    pub checkpoint: String,
}

/// Bills `tenant` for the usage records whose interval starts in `[from_ms, to_ms)`.
///
/// The same as feeding every record to an [`InvoiceBuilder`]: callers reading a large ledger
/// use the builder directly and never hold all of its records. A sum that does not fit a
/// `u64` is an error, never a wrapped or saturated amount.
pub fn invoice(
    records: &[UsageRecord],
    tenant: &str,
    from_ms: Option<i64>,
    to_ms: Option<i64>,
    start_ms: impl Fn(&UsageRecord) -> Option<i64>,
) -> Result<(Vec<InvoiceLine>, Vec<u64>), BillOverflow> {
    let mut b = InvoiceBuilder::new(tenant, from_ms, to_ms);
    for r in records {
        b.add(r, start_ms(r))?;
    }
    Ok(b.finish())
}

/// Which sum of an invoice overflowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BillSum {
    /// A line's `gpu_ms`.
    GpuMs,
    /// A line's `amount_paise`.
    AmountPaise,
}

impl std::fmt::Display for BillSum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BillSum::GpuMs => "gpu_ms",
            BillSum::AmountPaise => "amount_paise",
        })
    }
}

/// A bill whose sums do not fit the `u64` fields of an [`Invoice`]. No real use comes near
/// (`u64::MAX` paise is about ₹1.8 × 10¹⁷): the records are corrupt or forged, and the bill
/// is refused rather than wrapped (which would bill almost nothing) or saturated (which would
/// bill an amount nobody used).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(tag = "overflow", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum BillOverflow {
    /// Adding record `record` to the line of `lease` takes its `sum` past `u64::MAX`.
    #[error(
        "the {sum} of lease {lease} ({gpu_model}) does not fit 64 bits once record {record} \
         ({value}) is added to {so_far}"
    )]
    Line {
        /// The line's lease.
        lease: String,
        /// The line's GPU model.
        gpu_model: String,
        /// Which of its sums overflowed.
        sum: BillSum,
        /// The record whose value overflowed it.
        record: u64,
        /// That record's value of the sum (`gpu_ms` or `amount_paise`).
        value: u64,
        /// The line's sum before it.
        so_far: u64,
    },
    /// The lines' amounts, each within 64 bits, do not sum to a total that is.
    #[error("the invoice total of {lines} lines does not fit 64 bits of paise")]
    Total {
        /// Number of invoice lines summed.
        lines: usize,
    },
}

/// The sum of the lines' `amount_paise`: an invoice's `total_paise`, checked.
pub fn total_paise(lines: &[InvoiceLine]) -> Result<u64, BillOverflow> {
    lines
        .iter()
        .try_fold(0u64, |t, l| t.checked_add(l.amount_paise))
        .ok_or(BillOverflow::Total { lines: lines.len() })
}

/// One invoice line being summed.
#[derive(Debug)]
struct LineAcc {
    gpus: BTreeSet<String>,
    rate: u64,
    gpu_ms: u64,
    energy_j: f64,
    amount: u64,
    records: usize,
}

/// [`invoice`] one record at a time: what a bill over a ledger too large to hold in memory
/// uses. It keeps one accumulator per invoice line and the ids of the records billed, nothing
/// else, so its memory does not grow with the records it is shown.
#[derive(Debug)]
pub struct InvoiceBuilder {
    tenant: String,
    from_ms: Option<i64>,
    to_ms: Option<i64>,
    by_key: BTreeMap<(String, String, u64), LineAcc>,
    ids: Vec<u64>,
}

impl InvoiceBuilder {
    /// A bill of `tenant` for the records whose interval starts in `[from_ms, to_ms)`
    /// (`None`: unbounded on that side).
    pub fn new(tenant: &str, from_ms: Option<i64>, to_ms: Option<i64>) -> InvoiceBuilder {
        InvoiceBuilder {
            tenant: tenant.to_owned(),
            from_ms,
            to_ms,
            by_key: BTreeMap::new(),
            ids: Vec::new(),
        }
    }

    /// Adds `r` if it is the tenant's and its interval, starting at `start_ms` (`None`: its
    /// start is unreadable, and it is not billed), starts within the period. Records are
    /// expected in ledger order: that is the order of the bill's record ids. A record that
    /// would take its line's GPU time or amount past `u64::MAX` is an error, and the builder
    /// is left as it was before it.
    pub fn add(&mut self, r: &UsageRecord, start_ms: Option<i64>) -> Result<(), BillOverflow> {
        if r.tenant != self.tenant {
            return Ok(());
        }
        let Some(start) = start_ms else {
            return Ok(());
        };
        if self.from_ms.is_some_and(|f| start < f) || self.to_ms.is_some_and(|t| start >= t) {
            return Ok(());
        }
        let acc = self
            .by_key
            .entry((r.lease.clone(), r.gpu_model.clone(), r.rate_paise_per_hour))
            .or_insert_with(|| LineAcc {
                gpus: BTreeSet::new(),
                rate: r.rate_paise_per_hour,
                gpu_ms: 0,
                energy_j: 0.0,
                amount: 0,
                records: 0,
            });
        let overflow = |sum, value, so_far| BillOverflow::Line {
            lease: r.lease.clone(),
            gpu_model: r.gpu_model.clone(),
            sum,
            record: r.id,
            value,
            so_far,
        };
        let gpu_ms = acc
            .gpu_ms
            .checked_add(r.gpu_ms)
            .ok_or_else(|| overflow(BillSum::GpuMs, r.gpu_ms, acc.gpu_ms))?;
        let amount = acc
            .amount
            .checked_add(r.amount_paise)
            .ok_or_else(|| overflow(BillSum::AmountPaise, r.amount_paise, acc.amount))?;
        if !acc.gpus.contains(&r.gpu_uuid) {
            acc.gpus.insert(r.gpu_uuid.clone());
        }
        (acc.gpu_ms, acc.amount) = (gpu_ms, amount);
        acc.energy_j += r.energy_joules;
        acc.records += 1;
        self.ids.push(r.id);
        Ok(())
    }

    /// The invoice lines (one per lease, GPU model and rate, in that order) and the ids of
    /// the records billed.
    pub fn finish(self) -> (Vec<InvoiceLine>, Vec<u64>) {
        let lines = self
            .by_key
            .into_iter()
            .map(|((lease, model, _), a)| InvoiceLine {
                lease,
                gpu_model: model,
                gpus: a.gpus.len(),
                rate_paise_per_hour: a.rate,
                gpu_ms: a.gpu_ms,
                gpu_hours: a.gpu_ms as f64 / 3_600_000.0,
                energy_kwh: a.energy_j / 3_600_000.0,
                amount_paise: a.amount,
                records: a.records,
            })
            .collect();
        (lines, self.ids)
    }
}

/// A ledger leaf that is not a record.
#[derive(Debug, thiserror::Error)]
#[error("record {index} is not a valid record")]
pub struct BillingError {
    /// Leaf index of the undecodable record.
    pub index: u64,
    /// Why its bytes do not decode as a [`Record`].
    pub source: serde_json::Error,
}

/// Usage records among ledger leaves; other record kinds are skipped, undecodable leaves are
/// an error naming the record.
pub fn usage_records(leaves: &[Vec<u8>]) -> Result<Vec<UsageRecord>, BillingError> {
    let mut out = Vec::new();
    for (index, leaf) in (0u64..).zip(leaves) {
        out.extend(usage_record(index, leaf)?);
    }
    Ok(out)
}

/// The usage record in one ledger leaf (`None` for other record kinds); an undecodable leaf
/// is an error naming it. What a pass over the ledger one leaf at a time uses.
pub fn usage_record(index: u64, leaf: &[u8]) -> Result<Option<UsageRecord>, BillingError> {
    match serde_json::from_slice::<Record>(leaf) {
        Ok(Record::Usage(u)) => Ok(Some(u)),
        // Job usage, scratch erasures and transfers carry no GPU time: nothing of them is billed here.
        Ok(
            Record::Attestation(_)
            | Record::GpuEvent(_)
            | Record::Recovery(_)
            | Record::JobUsage(_)
            | Record::ScratchErased(_)
            | Record::Transfer(_),
        ) => Ok(None),
        Err(source) => Err(BillingError { index, source }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::money::format_inr;

    fn rec(id: u64, tenant: &str, start_h: i64) -> UsageRecord {
        UsageRecord {
            v: 1,
            id,
            node: "n".into(),
            tenant: tenant.into(),
            lease: "lease-1".into(),
            gpu_uuid: "GPU-0".into(),
            gpu_model: "H100".into(),
            start: start_h.to_string(),
            end: (start_h + 1).to_string(),
            gpu_ms: 3_600_000,
            gpu_seconds: 3600.0,
            energy_joules: 1_800_000.0,
            peak_memory_bytes: 0,
            mean_utilization_pct: 0.0,
            rate_paise_per_hour: 25_000,
            amount_paise: 25_000,
            policy_digest: String::new(),
            prev: None,
            attestation: None,
        }
    }

    #[test]
    fn forty_h100_hours_at_250_is_ten_thousand_rupees() {
        let mut records: Vec<UsageRecord> =
            (0..40).map(|h| rec(h as u64, "hyd-speech", h)).collect();
        records.push(rec(40, "other", 0));
        let start = |r: &UsageRecord| r.start.parse::<i64>().ok().map(|h| h * 3_600_000);
        let (lines, ids) = invoice(&records, "hyd-speech", None, None, start).unwrap();
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].amount_paise, 1_000_000);
        assert_eq!(lines[0].gpu_hours, 40.0);
        assert_eq!(format_inr(lines[0].amount_paise), "₹10,000.00");
        assert_eq!(ids.len(), 40);
        let (lines, _) = invoice(
            &records,
            "hyd-speech",
            Some(10 * 3_600_000),
            Some(20 * 3_600_000),
            start,
        )
        .unwrap();
        assert_eq!(lines[0].records, 10);
    }

    #[test]
    fn the_builder_bills_exactly_as_invoice() {
        let mut records = Vec::new();
        for h in 0..60u64 {
            let mut r = rec(h, if h % 5 == 0 { "other" } else { "hyd-speech" }, h as i64);
            r.lease = format!("lease-{}", h % 3);
            r.gpu_uuid = format!("GPU-{}", h % 4);
            r.gpu_model = if h % 7 == 0 { "A100" } else { "H100" }.into();
            r.rate_paise_per_hour = 20_000 + 5_000 * (h % 2);
            r.amount_paise = r.rate_paise_per_hour + h;
            r.energy_joules = 1_000.5 * h as f64;
            if h == 13 {
                r.start = "unreadable".into();
            }
            records.push(r);
        }
        let start = |r: &UsageRecord| r.start.parse::<i64>().ok().map(|h| h * 3_600_000);
        for (from, to) in [
            (None, None),
            (Some(10 * 3_600_000), Some(40 * 3_600_000)),
            (Some(59 * 3_600_000), None),
            (None, Some(0)),
        ] {
            let expected = invoice(&records, "hyd-speech", from, to, start).unwrap();
            let mut b = InvoiceBuilder::new("hyd-speech", from, to);
            for r in &records {
                b.add(r, start(r)).unwrap();
            }
            assert_eq!(b.finish(), expected, "period {from:?}..{to:?}");
        }
        let (lines, ids) = invoice(&records, "hyd-speech", None, None, start).unwrap();
        assert!(lines.len() > 3, "{lines:?}");
        assert!(!ids.contains(&13) && !ids.contains(&5) && ids.contains(&14));
    }

    /// Sums that do not fit 64 bits are errors naming the line and the record, never a
    /// wrapped amount (which would bill almost nothing) or a saturated one.
    #[test]
    fn sums_past_u64_are_refused_not_wrapped() {
        let start = |r: &UsageRecord| r.start.parse::<i64>().ok().map(|h| h * 3_600_000);
        let mut big = rec(0, "a", 0);
        big.amount_paise = u64::MAX - 1;
        let mut two = rec(1, "a", 1);
        two.amount_paise = 2;
        let e = invoice(&[big.clone(), two.clone()], "a", None, None, start).unwrap_err();
        assert_eq!(
            e,
            BillOverflow::Line {
                lease: "lease-1".into(),
                gpu_model: "H100".into(),
                sum: BillSum::AmountPaise,
                record: 1,
                value: 2,
                so_far: u64::MAX - 1,
            }
        );
        assert_eq!(
            e.to_string(),
            format!(
                "the amount_paise of lease lease-1 (H100) does not fit 64 bits once record 1 (2) \
                 is added to {}",
                u64::MAX - 1
            )
        );
        // The builder is left as it was: the record that overflowed is not billed.
        let mut b = InvoiceBuilder::new("a", None, None);
        b.add(&big, start(&big)).unwrap();
        assert!(b.add(&two, start(&two)).is_err());
        let (lines, ids) = b.finish();
        assert_eq!(
            (lines[0].amount_paise, lines[0].records, ids),
            (u64::MAX - 1, 1, vec![0])
        );
        // GPU time too.
        let mut long = rec(2, "a", 2);
        long.gpu_ms = u64::MAX;
        let e = invoice(&[two.clone(), long], "a", None, None, start).unwrap_err();
        assert!(
            matches!(
                e,
                BillOverflow::Line {
                    sum: BillSum::GpuMs,
                    record: 2,
                    ..
                }
            ),
            "{e:?}"
        );
        // Each line fits, their total does not.
        two.lease = "lease-2".into();
        let (lines, _) = invoice(&[big, two], "a", None, None, start).unwrap();
        assert_eq!(lines.len(), 2);
        assert_eq!(total_paise(&lines), Err(BillOverflow::Total { lines: 2 }));
        assert_eq!(
            total_paise(&lines).unwrap_err().to_string(),
            "the invoice total of 2 lines does not fit 64 bits of paise"
        );
        assert_eq!(total_paise(&lines[1..]), Ok(2));
        assert_eq!(total_paise(&[]), Ok(0));
    }

    #[test]
    fn an_undecodable_leaf_is_named() {
        let good = crate::record::Record::Usage(rec(0, "a", 0))
            .to_leaf()
            .unwrap();
        let e = usage_records(&[good, b"{}".to_vec()]).unwrap_err();
        assert_eq!(e.index, 1);
        assert_eq!(e.to_string(), "record 1 is not a valid record");
        assert!(std::error::Error::source(&e).is_some(), "the cause is kept");
    }
}
