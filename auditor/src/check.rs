//! Checks of one line of `records.jsonl`, and the usage totals of the lines that pass.
//!
//! A line must be a [`Record`] whose `id` is its line number, of a schema version this build
//! understands; a usage record's amount must follow from its time and rate, its
//! `gpu_seconds` from its `gpu_ms`, its energy must be a non-negative number, and its `prev`
//! and `attestation` must point to earlier records. Job-usage and scratch-erased records must
//! name a node and carry RFC 3339 UTC times, and a job-usage interval must lie within one UTC
//! hour. A transfer record must name a node, carry a UTC time, say `in` or `out` and `allow`
//! or `deny`, and a refused transfer must have moved 0 bytes. Each failure is a
//! [`RecordProblem`].

use crate::money::amount_paise;
use crate::record::{JobUsageRecord, Record, TransferRecord, RECORD_VERSION};
use crate::time::{parse_utc_ms, HOUR_MS};
use attest::report::report;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// How many record-level problems a report lists before only counting them.
pub const MAX_LISTED_PROBLEMS: usize = 20;

/// What is wrong with one record line (the line's index is kept by the finding that holds
/// this). `Display` is the message without the leading `record <index>: `.
#[derive(Debug, Clone, PartialEq, Serialize, thiserror::Error)]
#[serde(tag = "problem", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum RecordProblem {
    /// The line ends in `\r`: the file went through a CRLF conversion, so its bytes (and
    /// leaf hashes) are no longer the ones the node signed.
    #[error(
        "line ends with a carriage return (was records.jsonl converted to CRLF line endings?); \
         it does not match the signed log"
    )]
    CarriageReturn,
    /// Not JSON, or not a record of any known kind; `error` is the parser's message.
    #[error("not a valid record: {error}")]
    Invalid {
        /// The JSON parser's message (e.g. an unknown field, a missing field, bad syntax).
        error: String,
    },
    /// The record claims another id than its line number.
    #[error(
        "claims id {id} but is line {line} of records.jsonl (records were reordered, inserted \
         or removed)"
    )]
    IdMismatch {
        /// The `id` the record claims.
        id: u64,
        /// Its line number in records.jsonl, counting from 0: the id it should have.
        line: u64,
    },
    /// The record's schema version `v` is newer than this build knows: its fields cannot
    /// be checked until the verifier is upgraded.
    #[error(
        "schema version {version} is newer than this sovctl understands ({supported}); upgrade \
         sovctl"
    )]
    NewerSchema {
        /// The `v` the record claims.
        version: u32,
        /// The newest version this build understands ([`RECORD_VERSION`]).
        supported: u32,
    },
    /// A usage record's `attestation` is not the id of an earlier record, so it cannot name
    /// the attestation result in force when it was metered.
    #[error("attestation {attestation} does not point to an earlier record")]
    BadAttestationRef {
        /// The `attestation` id the record claims (not below its own id).
        attestation: u64,
    },
    /// A usage record bills another amount than its GPU time at its rate: the tenant was
    /// over- or under-charged for this interval.
    #[error(
        "amount_paise {amount} does not equal gpu_ms {gpu_ms} at {rate} paise/hour ({expected})"
    )]
    AmountMismatch {
        /// The record's `amount_paise`.
        amount: u64,
        /// The record's `gpu_ms`: billed GPU time, milliseconds.
        gpu_ms: u64,
        /// The record's `rate_paise_per_hour`.
        rate: u64,
        /// `round_half_up(gpu_ms × rate / 3,600,000)` paise, what the amount should be
        /// ([`crate::money::amount_paise`]).
        expected: u64,
    },
    /// A usage record's human-readable `gpu_seconds` disagrees with its exact `gpu_ms`
    /// (billing uses `gpu_ms`; the two must tell the same story).
    #[error("gpu_seconds {gpu_seconds} does not equal gpu_ms {gpu_ms} / 1000")]
    GpuSecondsMismatch {
        /// The record's `gpu_seconds`.
        gpu_seconds: f64,
        /// The record's `gpu_ms`, milliseconds.
        gpu_ms: u64,
    },
    /// A usage record's energy is negative, infinite or NaN: no energy counter gives that.
    #[error("energy_joules {energy_joules} is not a non-negative number")]
    BadEnergy {
        /// The record's `energy_joules`.
        energy_joules: f64,
    },
    /// A usage record's `prev` is not the id of an earlier record, so the chain of the
    /// lease's records is broken.
    #[error("prev {prev} does not point to an earlier record")]
    BadPrev {
        /// The `prev` id the record claims (not below its own id).
        prev: u64,
    },
    /// A job-usage or scratch-erased record names no valid node: node names are 1 to 64
    /// characters of `A-Z a-z 0-9 . _ -`, so anything else was not written by a node.
    #[error("node {node:?} is not a node name (1-64 characters of A-Z a-z 0-9 . _ -)")]
    BadNode {
        /// The record's `node`.
        node: String,
    },
    /// A job-usage or scratch-erased record's time is not RFC 3339 UTC (`…T…Z`), so the
    /// interval or moment it claims cannot be placed.
    #[error("{field} {value:?} is not an RFC 3339 UTC time")]
    BadTime {
        /// Which field (`start`, `end`, `at`).
        field: String,
        /// Its text.
        value: String,
    },
    /// A job-usage record's interval ends before it starts.
    #[error("interval ends at {end}, before its start {start}")]
    ReversedInterval {
        /// The record's `start`.
        start: String,
        /// The record's `end`, earlier than `start`.
        end: String,
    },
    /// A job-usage record's interval runs past the end of the UTC hour it starts in: the
    /// node cuts job usage at every hour boundary, so per-hour totals never split a record.
    #[error("interval {start}..{end} crosses a UTC hour boundary")]
    CrossesHour {
        /// The record's `start`.
        start: String,
        /// The record's `end`, after the next hour boundary.
        end: String,
    },
    /// A transfer record's `direction` or `decision` is not one of the words a node writes
    /// (`in`/`out`, `allow`/`deny`), so what moved, or whether it was let through, is unknown.
    #[error("{field} {value:?} is not one of {expected}")]
    BadWord {
        /// Which field (`direction`, `decision`).
        field: String,
        /// Its text.
        value: String,
        /// The words it may be, as a list for people (`in, out`).
        expected: String,
    },
    /// A transfer the policy refused claims that bytes moved: a refusal is answered before
    /// any data is read or sent, so the record contradicts itself.
    #[error("a denied transfer moved {bytes} bytes (a refusal moves none)")]
    DeniedWithBytes {
        /// The record's `bytes`.
        bytes: u64,
    },
    /// A job-usage record of a job that had not ended says how it ended.
    #[error("exit {exit:?} on a record whose job did not end (ended is false)")]
    ExitWithoutEnd {
        /// The record's `exit`.
        exit: String,
    },
}

/// Usage per tenant, summed over verified records.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TenantTotals {
    /// Number of the tenant's usage records counted.
    pub records: u64,
    /// Sum of their `gpu_ms`: GPU time in milliseconds, exact.
    pub gpu_ms: u128,
    /// Sum of their `energy_joules`, joules.
    pub energy_joules: f64,
    /// Sum of their `amount_paise`: what the tenant is billed, in paise (1/100 rupee).
    pub amount_paise: u128,
}

/// Totals over an export's records.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Totals {
    /// Number of records counted (those that passed their line checks), of every kind.
    pub records: u64,
    /// Those records by `kind` tag (`usage`, `attestation`, `gpu-event`, `recovery`,
    /// `job-usage`, `scratch-erased`, `transfer`).
    pub by_kind: BTreeMap<String, u64>,
    /// Usage totals by tenant id, from the usage records.
    pub tenants: BTreeMap<String, TenantTotals>,
}

impl Totals {
    pub(crate) fn merge(&mut self, other: Totals) {
        self.records += other.records;
        for (k, n) in other.by_kind {
            *self.by_kind.entry(k).or_default() += n;
        }
        for (t, o) in other.tenants {
            let e = self.tenants.entry(t).or_default();
            e.records += o.records;
            e.gpu_ms += o.gpu_ms;
            e.energy_joules += o.energy_joules;
            e.amount_paise += o.amount_paise;
        }
    }

    fn add_other(&mut self, kind: &str) {
        self.records += 1;
        *self.by_kind.entry(kind.to_owned()).or_default() += 1;
    }

    fn add_usage(&mut self, tenant: &str, gpu_ms: u64, energy_joules: f64, amount: u64) {
        self.records += 1;
        // Looked up by &str first so the common case allocates nothing.
        match self.by_kind.get_mut("usage") {
            Some(n) => *n += 1,
            None => {
                self.by_kind.insert("usage".into(), 1);
            }
        }
        let t = match self.tenants.get_mut(tenant) {
            Some(t) => t,
            None => self.tenants.entry(tenant.to_owned()).or_default(),
        };
        t.records += 1;
        t.gpu_ms += u128::from(gpu_ms);
        t.energy_joules += energy_joules;
        t.amount_paise += u128::from(amount);
    }
}

/// The fields of a usage record, borrowed from the line: the same names, types and
/// `deny_unknown_fields` as [`crate::record::UsageRecord`] plus the `kind` tag, so it accepts
/// exactly the lines that parse as a usage [`Record`] (unit tests hold the two together),
/// without the allocations of the owned, internally tagged enum. Anything it rejects is
/// re-parsed as a [`Record`], so the owned type stays the authority.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // fields exist to be type-checked
struct UsageView<'a> {
    #[serde(borrow)]
    kind: Cow<'a, str>,
    v: u32,
    id: u64,
    #[serde(borrow)]
    node: Cow<'a, str>,
    #[serde(borrow)]
    tenant: Cow<'a, str>,
    #[serde(borrow)]
    lease: Cow<'a, str>,
    #[serde(borrow)]
    gpu_uuid: Cow<'a, str>,
    #[serde(borrow)]
    gpu_model: Cow<'a, str>,
    #[serde(borrow)]
    start: Cow<'a, str>,
    #[serde(borrow)]
    end: Cow<'a, str>,
    gpu_ms: u64,
    gpu_seconds: f64,
    energy_joules: f64,
    peak_memory_bytes: u64,
    mean_utilization_pct: f64,
    rate_paise_per_hour: u64,
    amount_paise: u64,
    #[serde(borrow)]
    policy_digest: Cow<'a, str>,
    prev: Option<u64>,
    #[serde(default)]
    attestation: Option<u64>,
}

/// The parts of a usage record that verification checks and totals.
struct UsageFacts<'a> {
    v: u32,
    id: u64,
    tenant: &'a str,
    gpu_ms: u64,
    gpu_seconds: f64,
    energy_joules: f64,
    rate: u64,
    amount: u64,
    prev: Option<u64>,
    attestation: Option<u64>,
}

/// Checks that `line` (without its newline) is record `index` and adds it to `totals`.
pub fn check_record_line(
    index: u64,
    line: &[u8],
    totals: &mut Totals,
) -> Result<(), RecordProblem> {
    if line.last() == Some(&b'\r') {
        return Err(RecordProblem::CarriageReturn);
    }
    let owned;
    let facts = match serde_json::from_slice::<UsageView>(line) {
        Ok(v) if v.kind == "usage" => UsageFacts {
            v: v.v,
            id: v.id,
            tenant: match v.tenant {
                Cow::Borrowed(s) => s,
                Cow::Owned(s) => {
                    owned = s;
                    &owned
                }
            },
            gpu_ms: v.gpu_ms,
            gpu_seconds: v.gpu_seconds,
            energy_joules: v.energy_joules,
            rate: v.rate_paise_per_hour,
            amount: v.amount_paise,
            prev: v.prev,
            attestation: v.attestation,
        },
        _ => match serde_json::from_slice::<Record>(line) {
            Err(e) => {
                return Err(RecordProblem::Invalid {
                    error: report(&e).to_string(),
                })
            }
            Ok(Record::Usage(u)) => {
                owned = u.tenant;
                UsageFacts {
                    v: u.v,
                    id: u.id,
                    tenant: &owned,
                    gpu_ms: u.gpu_ms,
                    gpu_seconds: u.gpu_seconds,
                    energy_joules: u.energy_joules,
                    rate: u.rate_paise_per_hour,
                    amount: u.amount_paise,
                    prev: u.prev,
                    attestation: u.attestation,
                }
            }
            Ok(other) => {
                // The other kinds carry no money; they are checked for their place in the
                // log (and job usage and erasures for their node and times) and counted by
                // kind.
                check_place(index, other.id(), other.version())?;
                check_other(&other)?;
                totals.add_other(other.kind());
                return Ok(());
            }
        },
    };
    check_usage(index, &facts)?;
    totals.add_usage(
        facts.tenant,
        facts.gpu_ms,
        facts.energy_joules,
        facts.amount,
    );
    Ok(())
}

/// A record claims the id of its line and a schema version this build understands.
fn check_place(index: u64, id: u64, v: u32) -> Result<(), RecordProblem> {
    if id != index {
        return Err(RecordProblem::IdMismatch { id, line: index });
    }
    if v > RECORD_VERSION {
        return Err(RecordProblem::NewerSchema {
            version: v,
            supported: RECORD_VERSION,
        });
    }
    Ok(())
}

/// Node names as a node's configuration accepts them.
fn is_node_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
}

/// `value` as Unix ms, or the problem naming `field`.
fn utc_ms(field: &str, value: &str) -> Result<i64, RecordProblem> {
    parse_utc_ms(value).ok_or_else(|| RecordProblem::BadTime {
        field: field.to_owned(),
        value: value.to_owned(),
    })
}

/// The checks of the kinds written since the first release that carry no money: a node name,
/// times that parse, and for job usage an interval within one UTC hour (its end may be the
/// next boundary exactly) and an exit only on the record of a job that ended.
fn check_other(rec: &Record) -> Result<(), RecordProblem> {
    let node = match rec {
        Record::JobUsage(j) => &j.node,
        Record::ScratchErased(e) => &e.node,
        Record::Transfer(t) => &t.node,
        Record::Usage(_) | Record::Attestation(_) | Record::GpuEvent(_) | Record::Recovery(_) => {
            return Ok(())
        }
    };
    if !is_node_name(node) {
        return Err(RecordProblem::BadNode { node: node.clone() });
    }
    match rec {
        Record::JobUsage(j) => check_job_usage(j),
        Record::ScratchErased(e) => utc_ms("at", &e.at).map(drop),
        Record::Transfer(t) => check_transfer(t),
        _ => Ok(()),
    }
}

/// A transfer's time, its two words, and no bytes on a refusal.
fn check_transfer(t: &TransferRecord) -> Result<(), RecordProblem> {
    utc_ms("at", &t.at)?;
    word("direction", &t.direction, &["in", "out"])?;
    word("decision", &t.decision, &["allow", "deny"])?;
    if t.decision == "deny" && t.bytes != 0 {
        return Err(RecordProblem::DeniedWithBytes { bytes: t.bytes });
    }
    Ok(())
}

/// `value` is one of `allowed`, or the problem naming `field`.
fn word(field: &str, value: &str, allowed: &[&str]) -> Result<(), RecordProblem> {
    if allowed.contains(&value) {
        return Ok(());
    }
    Err(RecordProblem::BadWord {
        field: field.to_owned(),
        value: value.to_owned(),
        expected: allowed.join(", "),
    })
}

fn check_job_usage(j: &JobUsageRecord) -> Result<(), RecordProblem> {
    let start = utc_ms("start", &j.start)?;
    let end = utc_ms("end", &j.end)?;
    if end < start {
        return Err(RecordProblem::ReversedInterval {
            start: j.start.clone(),
            end: j.end.clone(),
        });
    }
    if end > (start.div_euclid(HOUR_MS) + 1) * HOUR_MS {
        return Err(RecordProblem::CrossesHour {
            start: j.start.clone(),
            end: j.end.clone(),
        });
    }
    match (&j.exit, j.ended) {
        (Some(exit), false) => Err(RecordProblem::ExitWithoutEnd { exit: exit.clone() }),
        _ => Ok(()),
    }
}

fn check_usage(index: u64, f: &UsageFacts<'_>) -> Result<(), RecordProblem> {
    check_place(index, f.id, f.v)?;
    if let Some(a) = f.attestation {
        if a >= f.id {
            return Err(RecordProblem::BadAttestationRef { attestation: a });
        }
    }
    let expected = amount_paise(f.gpu_ms, f.rate);
    if f.amount != expected {
        return Err(RecordProblem::AmountMismatch {
            amount: f.amount,
            gpu_ms: f.gpu_ms,
            rate: f.rate,
            expected,
        });
    }
    if f.gpu_seconds != f.gpu_ms as f64 / 1000.0 {
        return Err(RecordProblem::GpuSecondsMismatch {
            gpu_seconds: f.gpu_seconds,
            gpu_ms: f.gpu_ms,
        });
    }
    if !f.energy_joules.is_finite() || f.energy_joules < 0.0 {
        return Err(RecordProblem::BadEnergy {
            energy_joules: f.energy_joules,
        });
    }
    if let Some(p) = f.prev {
        if p >= f.id {
            return Err(RecordProblem::BadPrev { prev: p });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finding::Finding;
    use crate::money::{format_gpu_hours, format_inr, format_kwh};
    use crate::testutil::usage;

    #[test]
    fn totals_forty_hours_of_h100() {
        let mut t = Totals::default();
        for i in 0..40 {
            let line = usage(i, "acme", 3_600_000, 25_000).to_leaf().unwrap();
            check_record_line(i, &line, &mut t).unwrap();
        }
        let acme = &t.tenants["acme"];
        assert_eq!(acme.records, 40);
        assert_eq!(format_gpu_hours(acme.gpu_ms), "40.000");
        assert_eq!(format_inr(acme.amount_paise), "₹10,000.00");
        assert_eq!(format_kwh(acme.energy_joules), "20.000");
        assert_eq!(t.by_kind["usage"], 40);
    }

    #[test]
    fn record_checks_name_the_record() {
        let mut t = Totals::default();
        let msg = |index, problem| Finding::BadRecord { index, problem }.to_string();
        let good = usage(5, "acme", 1000, 25_000).to_leaf().unwrap();
        let e = check_record_line(4, &good, &mut t).unwrap_err();
        assert_eq!(e, RecordProblem::IdMismatch { id: 5, line: 4 });
        assert!(msg(4, e).starts_with("record 4: claims id 5"));
        let e = check_record_line(7, b"{not json", &mut t).unwrap_err();
        assert!(matches!(e, RecordProblem::Invalid { .. }), "{e:?}");
        assert!(msg(7, e).starts_with("record 7: not a valid record"));
        let mut crlf = good.clone();
        crlf.push(b'\r');
        let e = check_record_line(5, &crlf, &mut t).unwrap_err();
        assert_eq!(e, RecordProblem::CarriageReturn);
        assert!(e.to_string().contains("carriage return"), "{e}");
        let text = String::from_utf8(good).unwrap();
        let edit = |from: &str, to: &str| {
            let edited = text.replace(from, to);
            assert_ne!(edited, text, "{from}");
            edited
        };
        let t2 = Totals::default();
        let check = |line: String| check_record_line(5, line.as_bytes(), &mut t2.clone());
        let e = check(edit("\"amount_paise\":7", "\"amount_paise\":1")).unwrap_err();
        assert_eq!(
            e,
            RecordProblem::AmountMismatch {
                amount: 1,
                gpu_ms: 1000,
                rate: 25_000,
                expected: 7
            }
        );
        assert!(
            e.to_string().contains("amount_paise 1 does not equal"),
            "{e}"
        );
        let e = check(edit("\"prev\":4", "\"prev\":9")).unwrap_err();
        assert_eq!(e, RecordProblem::BadPrev { prev: 9 });
        assert!(e.to_string().contains("prev 9"), "{e}");
        let e = check(edit("\"v\":1", "\"v\":2")).unwrap_err();
        assert_eq!(
            e,
            RecordProblem::NewerSchema {
                version: 2,
                supported: 1
            }
        );
        assert!(e
            .to_string()
            .ends_with("newer than this sovctl understands (1); upgrade sovctl"));
        let e = check(edit("\"prev\":4", "\"prev\":4,\"attestation\":5")).unwrap_err();
        assert_eq!(e, RecordProblem::BadAttestationRef { attestation: 5 });
        let e = check(edit("\"gpu_seconds\":1.0", "\"gpu_seconds\":2.0")).unwrap_err();
        assert_eq!(
            e,
            RecordProblem::GpuSecondsMismatch {
                gpu_seconds: 2.0,
                gpu_ms: 1000
            }
        );
        let e = check(edit(
            "\"energy_joules\":1800000.0",
            "\"energy_joules\":-1.0",
        ))
        .unwrap_err();
        assert_eq!(
            e,
            RecordProblem::BadEnergy {
                energy_joules: -1.0
            }
        );
        assert_eq!(
            e.to_string(),
            "energy_joules -1 is not a non-negative number"
        );
        // Other kinds are checked for their place only.
        let ev = crate::record::Record::GpuEvent(crate::record::GpuEventRecord {
            v: 1,
            id: 3,
            node: "n".into(),
            at: "t".into(),
            event: crate::record::GpuEventKind::Lost,
            gpu_index: 0,
            gpu_uuid: "GPU-1".into(),
            from: None,
            to: None,
        })
        .to_leaf()
        .unwrap();
        assert_eq!(
            check_record_line(4, &ev, &mut t).unwrap_err(),
            RecordProblem::IdMismatch { id: 3, line: 4 }
        );
        check_record_line(3, &ev, &mut t).unwrap();
        assert_eq!((t.records, t.by_kind["gpu-event"]), (1, 1));
    }

    /// Job usage and scratch erasures: checked for place, node and times, counted by kind,
    /// never added to a tenant's GPU money.
    #[test]
    fn job_usage_and_scratch_erased_are_checked_and_counted() {
        use crate::testutil::{job_usage, scratch_erased};
        let mut t = Totals::default();
        let ok = |rec: crate::record::Record, t: &mut Totals| {
            let index = rec.id();
            check_record_line(index, &rec.to_leaf().unwrap(), t)
        };
        ok(
            job_usage(0, "2026-01-01T10:00:00.000Z", "2026-01-01T11:00:00.000Z"),
            &mut t,
        )
        .unwrap();
        ok(
            job_usage(1, "2026-01-01T10:59:59.999Z", "2026-01-01T10:59:59.999Z"),
            &mut t,
        )
        .unwrap();
        ok(scratch_erased(2, "2026-01-01T11:00:00.000Z"), &mut t).unwrap();
        assert_eq!(
            (
                t.records,
                t.by_kind["job-usage"],
                t.by_kind["scratch-erased"]
            ),
            (3, 2, 1)
        );
        assert!(t.tenants.is_empty(), "no GPU money: {:?}", t.tenants);

        let bad = |rec, t: &mut Totals| ok(rec, t).unwrap_err();
        let e = bad(
            job_usage(3, "2026-01-01T10:30:00.000Z", "2026-01-01T11:00:00.001Z"),
            &mut t,
        );
        assert_eq!(
            e,
            RecordProblem::CrossesHour {
                start: "2026-01-01T10:30:00.000Z".into(),
                end: "2026-01-01T11:00:00.001Z".into()
            }
        );
        assert!(e.to_string().contains("crosses a UTC hour boundary"), "{e}");
        let e = bad(
            job_usage(3, "2026-01-01T10:30:00.000Z", "2026-01-01T10:29:00.000Z"),
            &mut t,
        );
        assert!(matches!(e, RecordProblem::ReversedInterval { .. }), "{e:?}");
        let e = bad(
            job_usage(
                3,
                "2026-01-01T10:30:00.000+01:00",
                "2026-01-01T10:31:00.000Z",
            ),
            &mut t,
        );
        assert_eq!(
            e,
            RecordProblem::BadTime {
                field: "start".into(),
                value: "2026-01-01T10:30:00.000+01:00".into()
            }
        );
        let e = bad(scratch_erased(3, "yesterday"), &mut t);
        assert_eq!(
            e,
            RecordProblem::BadTime {
                field: "at".into(),
                value: "yesterday".into()
            }
        );
        let mut j = job_usage(3, "2026-01-01T10:00:00.000Z", "2026-01-01T10:01:00.000Z");
        if let crate::record::Record::JobUsage(j) = &mut j {
            j.exit = Some("exited 0".into());
        }
        let e = bad(j.clone(), &mut t);
        assert_eq!(
            e,
            RecordProblem::ExitWithoutEnd {
                exit: "exited 0".into()
            }
        );
        if let crate::record::Record::JobUsage(j) = &mut j {
            j.ended = true;
        }
        ok(j, &mut t).unwrap();
        let mut e = scratch_erased(4, "2026-01-01T11:00:00.000Z");
        if let crate::record::Record::ScratchErased(e) = &mut e {
            e.node = "node 1".into();
        }
        assert_eq!(
            bad(e.clone(), &mut t),
            RecordProblem::BadNode {
                node: "node 1".into()
            }
        );
        assert_eq!(
            check_record_line(5, &e.to_leaf().unwrap(), &mut t).unwrap_err(),
            RecordProblem::IdMismatch { id: 4, line: 5 }
        );
        assert_eq!(t.records, 4, "only passing records are counted");
    }

    /// Transfers: checked for place, node, time and their words, a refusal moves no bytes;
    /// counted by kind, never billed.
    #[test]
    fn transfers_are_checked_and_counted() {
        use crate::record::Record;
        use crate::testutil::transfer;
        let mut t = Totals::default();
        let check =
            |rec: Record, t: &mut Totals| check_record_line(rec.id(), &rec.to_leaf().unwrap(), t);
        check(transfer(0, "in", "allow", 4096), &mut t).unwrap();
        check(transfer(1, "out", "allow", 0), &mut t).unwrap();
        check(transfer(2, "out", "deny", 0), &mut t).unwrap();
        assert_eq!((t.records, t.by_kind["transfer"]), (3, 3));
        assert!(t.tenants.is_empty(), "never billed: {:?}", t.tenants);

        let e = check(transfer(3, "out", "deny", 1), &mut t).unwrap_err();
        assert_eq!(e, RecordProblem::DeniedWithBytes { bytes: 1 });
        assert!(
            e.to_string().contains("denied transfer moved 1 bytes"),
            "{e}"
        );
        let e = check(transfer(3, "sideways", "allow", 1), &mut t).unwrap_err();
        assert_eq!(
            e,
            RecordProblem::BadWord {
                field: "direction".into(),
                value: "sideways".into(),
                expected: "in, out".into()
            }
        );
        let e = check(transfer(3, "out", "audit", 1), &mut t).unwrap_err();
        assert!(
            matches!(&e, RecordProblem::BadWord { field, .. } if field == "decision"),
            "{e:?}"
        );
        let mut bad = transfer(3, "in", "allow", 1);
        if let Record::Transfer(x) = &mut bad {
            x.at = "2026-01-01 11:00".into();
        }
        assert!(matches!(
            check(bad.clone(), &mut t),
            Err(RecordProblem::BadTime { .. })
        ));
        if let Record::Transfer(x) = &mut bad {
            (x.at, x.node) = ("2026-01-01T11:00:00Z".into(), String::new());
        }
        assert!(matches!(
            check(bad, &mut t),
            Err(RecordProblem::BadNode { .. })
        ));
        assert_eq!(t.records, 3, "only passing records are counted");
    }

    /// The borrowed fast path must accept exactly what `Record` accepts.
    #[test]
    fn fast_path_agrees_with_the_record_type() {
        let base = serde_json::to_value(usage(3, "acme", 1000, 25_000)).unwrap();
        let obj = base.as_object().unwrap().clone();
        let mut variants: Vec<serde_json::Value> = vec![base.clone()];
        for key in obj.keys() {
            let mut v = obj.clone();
            v.remove(key);
            variants.push(v.into());
            for bad in [
                serde_json::json!(null),
                serde_json::json!("x"),
                serde_json::json!(-1),
                serde_json::json!(1.5),
                serde_json::json!(u64::MAX),
                serde_json::json!([]),
                serde_json::json!("esc\"aped\\"),
            ] {
                let mut v = obj.clone();
                v.insert(key.clone(), bad);
                variants.push(v.into());
            }
        }
        let mut extra = obj.clone();
        extra.insert("extra".into(), serde_json::json!(1));
        variants.push(extra.into());
        for att in [
            serde_json::json!(2),
            serde_json::json!(null),
            serde_json::json!("2"),
            serde_json::json!(-2),
        ] {
            let mut v = obj.clone();
            v.insert("attestation".into(), att);
            variants.push(v.into());
        }
        let mut kind = obj.clone();
        kind.insert("kind".into(), serde_json::json!("refund"));
        variants.push(kind.into());
        let mut texts: Vec<String> = variants.iter().map(|v| v.to_string()).collect();
        let good = base.to_string();
        texts.push(good.replacen("{", "{\"id\":3,", 1)); // duplicate field
        texts.push(good.replacen("{", "{\"kind\":\"usage\",", 1)); // duplicate tag
        texts.push(format!("{good} "));
        texts.push(format!("{good}x"));
        texts.push("[]".into());
        for text in &texts {
            let full = serde_json::from_slice::<Record>(text.as_bytes()).is_ok();
            let fast = matches!(
                serde_json::from_slice::<UsageView>(text.as_bytes()),
                Ok(v) if v.kind == "usage"
            );
            assert_eq!(full, fast, "{text}");
        }
    }
}
