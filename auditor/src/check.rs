//! Checks of the lines of `records.jsonl`, and the usage totals of the lines that pass.
//!
//! A line must be a [`Record`] whose `id` is its line number, of a schema version this build
//! understands; a usage record's amount must follow from its time and rate, its
//! `gpu_seconds` from its `gpu_ms`, its energy must be a non-negative number, and its `prev`
//! and `attestation` must point to earlier records; its `start` and `end` must be RFC 3339
//! UTC times within one UTC hour, and its `gpu_ms` the length of that interval. Job-usage and
//! scratch-erased records must name a node and carry RFC 3339 UTC times, and a job-usage
//! interval must lie within one UTC hour. A transfer record must name a node, carry a UTC
//! time, say `in` or `out` and `allow` or `deny`, and a refused transfer must have moved 0
//! bytes.
//!
//! Across records ([`RecordChecker`], in record order): a usage record must bill its lease's
//! tenant (as the lease's first usage record names it), must not start before the end of an
//! earlier interval of the same lease and GPU (that time would be billed twice), must not put
//! its lease on its GPU over time another lease held that GPU (a GPU billed to two leases), its
//! `prev` must be that lease and GPU's previous usage record, and its `attestation` an
//! attestation record. Each failure is a [`RecordProblem`].

use crate::money::amount_paise;
use crate::record::{JobUsageRecord, Record, TransferRecord, RECORD_VERSION};
use crate::time::{format_utc_ms, parse_utc_ms, HOUR_MS};
use attest::report::report;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

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
    /// A usage or job-usage record's interval ends before it starts.
    #[error("interval ends at {end}, before its start {start}")]
    ReversedInterval {
        /// The record's `start`.
        start: String,
        /// The record's `end`, earlier than `start`.
        end: String,
    },
    /// A usage or job-usage record's interval runs past the end of the UTC hour it starts in:
    /// the node cuts usage at every hour boundary, so per-hour totals never split a record.
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
    /// A usage record's `gpu_ms` is not the length of its interval: the node bills a lease's
    /// GPU time as `end - start`, exactly, so another figure bills time the interval does not
    /// hold (or leaves some out).
    #[error("gpu_ms {gpu_ms} is not the length of its interval {start}..{end} ({interval_ms} ms)")]
    GpuMsNotInterval {
        /// The record's `gpu_ms`.
        gpu_ms: u64,
        /// The record's `start`.
        start: String,
        /// The record's `end`.
        end: String,
        /// `end - start`, milliseconds: what `gpu_ms` should be.
        interval_ms: i64,
    },
    /// A usage record bills another tenant than its lease's: a lease has one tenant, named by
    /// the lease's first usage record.
    #[error(
        "bills tenant {tenant:?}, but lease {lease} is tenant {lease_tenant:?}'s (record {first})"
    )]
    TenantNotLeases {
        /// The record's `tenant`.
        tenant: String,
        /// The record's `lease`.
        lease: String,
        /// The tenant the lease's first usage record bills.
        lease_tenant: String,
        /// That first usage record of the lease.
        first: u64,
    },
    /// A usage record's interval starts before an earlier record of the same lease and GPU
    /// ended: the node meters each GPU of a lease as one run of adjacent intervals, written in
    /// order, so the overlap is GPU time billed twice (a duplicated record, or one moved back).
    #[error(
        "starts at {start}, before {earlier_end}, the end of record {earlier} of lease {lease} \
         on GPU {gpu_uuid}: that time is billed twice"
    )]
    OverlapsEarlier {
        /// The record's `lease`.
        lease: String,
        /// The record's `gpu_uuid`.
        gpu_uuid: String,
        /// The record's `start`.
        start: String,
        /// The earlier record of the lease and GPU whose interval ends latest.
        earlier: u64,
        /// Its `end`.
        earlier_end: String,
    },
    /// A usage record would put its lease on its GPU over time that another lease held that
    /// GPU: a leased GPU is exclusive, and a lease that released one never gets it back, so the
    /// time from a lease's first interval on a GPU to its last is the lease's alone. The overlap
    /// bills one GPU to two leases (two tenants, perhaps) for the same time, at least one of
    /// them for time it did not hold it. (Boxed: the largest problem, and every check's
    /// `Result` carries one.)
    #[error("{0}")]
    OverlapsOtherLease(Box<LeasesOverlap>),
    /// A usage record's `prev` is not the previous usage record of the same lease and GPU
    /// (`null` for the first): the node chains each GPU of a lease, so the record was copied
    /// from elsewhere, or records of the chain were removed or inserted.
    #[error(
        "prev {} is not the previous usage record of lease {lease} on GPU {gpu_uuid} ({})",
        id_text(.prev), id_text(.expected)
    )]
    PrevNotPrevious {
        /// The record's `prev`.
        prev: Option<u64>,
        /// The previous usage record of the same lease and GPU, `None` when there is none.
        expected: Option<u64>,
        /// The record's `lease`.
        lease: String,
        /// The record's `gpu_uuid`.
        gpu_uuid: String,
    },
    /// A usage record's `attestation` names a record that is not a (valid) attestation
    /// record, so it names no attestation result.
    #[error("attestation {attestation} is not an attestation record")]
    NotAnAttestation {
        /// The `attestation` id the record claims.
        attestation: u64,
    },
}

/// The evidence of [`RecordProblem::OverlapsOtherLease`]: two leases' times on one GPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LeasesOverlap {
    /// The record's `gpu_uuid`.
    pub gpu_uuid: String,
    /// The record's `lease`.
    pub lease: String,
    /// The start of the lease's time on the GPU with this record: the earliest `start` of its
    /// records there that passed, and this one.
    pub span_start: String,
    /// The end of that time: the latest `end` among them.
    pub span_end: String,
    /// The other lease, whose time on the GPU that overlaps.
    pub other_lease: String,
    /// The earliest `start` of the other lease's records on the GPU that passed.
    pub other_start: String,
    /// The latest `end` among them.
    pub other_end: String,
    /// The other lease's first record on the GPU that passed.
    pub other_first: u64,
}

impl std::fmt::Display for LeasesOverlap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "puts lease {} on GPU {} over {}..{}, across lease {}'s time on it, {}..{} (from \
             record {}): a GPU is held by one lease at a time, so one of them is billed for time \
             it did not hold it",
            self.lease,
            self.gpu_uuid,
            self.span_start,
            self.span_end,
            self.other_lease,
            self.other_start,
            self.other_end,
            self.other_first
        )
    }
}

/// A record id as a finding shows it, `null` for none (as in the record's JSON).
fn id_text(id: &Option<u64>) -> String {
    id.map_or_else(|| "null".to_owned(), |i| i.to_string())
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
    /// Number of records counted (those that passed their checks), of every kind.
    pub records: u64,
    /// Those records by `kind` tag (`usage`, `attestation`, `gpu-event`, `recovery`,
    /// `job-usage`, `scratch-erased`, `transfer`).
    pub by_kind: BTreeMap<String, u64>,
    /// Usage totals by tenant id, from the usage records.
    pub tenants: BTreeMap<String, TenantTotals>,
}

impl Totals {
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
    tenant: Cow<'a, str>,
    lease: Cow<'a, str>,
    gpu_uuid: Cow<'a, str>,
    start: Cow<'a, str>,
    end: Cow<'a, str>,
    gpu_ms: u64,
    gpu_seconds: f64,
    energy_joules: f64,
    rate: u64,
    amount: u64,
    prev: Option<u64>,
    attestation: Option<u64>,
}

/// What the checks across records, and the totals, need of a usage record.
#[derive(Debug)]
pub(crate) struct UsageLine {
    id: u64,
    tenant: String,
    lease: String,
    gpu_uuid: String,
    /// `start` and `end` as Unix ms, when both parse and `end` is not before `start`.
    interval: Option<(i64, i64)>,
    prev: Option<u64>,
    attestation: Option<u64>,
    gpu_ms: u64,
    energy_joules: f64,
    amount: u64,
}

/// What a line is, as far as the checks across records and the totals need to know.
#[derive(Debug)]
pub(crate) enum Seen {
    /// Not a record.
    Nothing,
    /// A usage record whose fields parse, whether or not they pass the line's checks.
    Usage(UsageLine),
    /// An attestation record.
    Attestation,
    /// A record of another kind, by its `kind` tag.
    Other(&'static str),
}

/// The outcome of the checks of one line on its own: what it is, and its problem if any.
#[derive(Debug)]
pub(crate) struct LineCheck {
    pub(crate) seen: Seen,
    pub(crate) problem: Option<RecordProblem>,
}

/// Checks that `line` (without its newline) is record `index` and adds it to `totals`.
///
/// These are the checks of the line on its own; those against the records before it (a
/// lease's tenant, overlapping intervals, `prev` and `attestation` references) need them,
/// and are made by a [`RecordChecker`] (as [`crate::stream::stream_records`] does).
pub fn check_record_line(
    index: u64,
    line: &[u8],
    totals: &mut Totals,
) -> Result<(), RecordProblem> {
    let c = check_line(index, line);
    if let Some(problem) = c.problem {
        return Err(problem);
    }
    match c.seen {
        Seen::Nothing => {}
        Seen::Usage(u) => totals.add_usage(&u.tenant, u.gpu_ms, u.energy_joules, u.amount),
        Seen::Attestation => totals.add_other("attestation"),
        Seen::Other(kind) => totals.add_other(kind),
    }
    Ok(())
}

/// The checks of `line` on its own, as record `index`.
pub(crate) fn check_line(index: u64, line: &[u8]) -> LineCheck {
    let nothing = |problem| LineCheck {
        seen: Seen::Nothing,
        problem: Some(problem),
    };
    if line.last() == Some(&b'\r') {
        return nothing(RecordProblem::CarriageReturn);
    }
    let facts = match serde_json::from_slice::<UsageView>(line) {
        Ok(v) if v.kind == "usage" => UsageFacts {
            v: v.v,
            id: v.id,
            tenant: v.tenant,
            lease: v.lease,
            gpu_uuid: v.gpu_uuid,
            start: v.start,
            end: v.end,
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
                return nothing(RecordProblem::Invalid {
                    error: report(&e).to_string(),
                })
            }
            Ok(Record::Usage(u)) => UsageFacts {
                v: u.v,
                id: u.id,
                tenant: Cow::Owned(u.tenant),
                lease: Cow::Owned(u.lease),
                gpu_uuid: Cow::Owned(u.gpu_uuid),
                start: Cow::Owned(u.start),
                end: Cow::Owned(u.end),
                gpu_ms: u.gpu_ms,
                gpu_seconds: u.gpu_seconds,
                energy_joules: u.energy_joules,
                rate: u.rate_paise_per_hour,
                amount: u.amount_paise,
                prev: u.prev,
                attestation: u.attestation,
            },
            Ok(other) => {
                // The other kinds carry no money; they are checked for their place in the
                // log (and job usage and erasures for their node and times) and counted by
                // kind.
                let problem = check_place(index, other.id(), other.version())
                    .and_then(|()| check_other(&other))
                    .err();
                let seen = match other {
                    Record::Attestation(_) => Seen::Attestation,
                    other => Seen::Other(other.kind()),
                };
                return LineCheck { seen, problem };
            }
        },
    };
    let (start, end) = (parse_utc_ms(&facts.start), parse_utc_ms(&facts.end));
    let problem = check_usage(index, &facts, start, end).err();
    let interval = match (start, end) {
        (Some(s), Some(e)) if s <= e => Some((s, e)),
        _ => None,
    };
    LineCheck {
        seen: Seen::Usage(UsageLine {
            id: facts.id,
            tenant: facts.tenant.into_owned(),
            lease: facts.lease.into_owned(),
            gpu_uuid: facts.gpu_uuid.into_owned(),
            interval,
            prev: facts.prev,
            attestation: facts.attestation,
            gpu_ms: facts.gpu_ms,
            energy_joules: facts.energy_joules,
            amount: facts.amount,
        }),
        problem,
    }
}

/// Checks records in order, each on its own ([`check_record_line`]) and against the records
/// before it, and totals those that pass.
///
/// A lease has one tenant: the one its first usage record bills. The node meters each GPU of
/// a lease as one run of adjacent intervals, written in order and chained by `prev`, so a
/// usage record must not start before the latest end of the earlier intervals of its lease
/// and GPU (that time would be billed twice), and its `prev` must be the previous record of
/// the chain (`null` for the first). Its `attestation` must name an attestation record.
///
/// A leased GPU is exclusive, and a lease that released a GPU never gets it back, so a
/// lease's time on a GPU, from the earliest start of its records there to the latest end,
/// must not overlap another lease's time on it (touching at an instant is fine: one lease ends
/// when the next starts). A gap in a lease's records is still its time: another lease's
/// record there is a finding too. The finding is on the record that makes two times overlap;
/// times are compared, not places in the log, since a lease's last record may be written after
/// the next lease's first.
///
/// It remembers, per lease, its tenant and first record and, per GPU of the lease, the last
/// record, the latest end and the lease's time there; per GPU, those times of its leases,
/// ordered by start (being disjoint, they are also ordered by end, so the one lease whose time
/// could overlap a record's is found in `O(log n)`); and the ids of the attestation records.
/// Its memory grows with the number of leases times their GPUs and with the attestation
/// records, never with the number of usage records.
///
/// Only records that pass every check name a lease's tenant, move the latest end on and
/// stretch the lease's time on the GPU (a forged interval must not make the lease's later
/// records, or another lease's, overlaps). A usage record that fails its own checks is still
/// a link of its chain, by the id it claims, so that a forged amount is one finding, not also
/// one on the next record's `prev`; one that fails a check against the records before it (a
/// copy under a new id, say) is not.
#[derive(Debug, Default)]
pub struct RecordChecker {
    leases: HashMap<String, LeaseSeen>,
    /// Per GPU, each lease's time on it, by that lease: disjoint spans, so in the key's order
    /// their ends never decrease.
    gpus: HashMap<String, BTreeMap<Span, String>>,
    /// Sorted: ids are seen in increasing order.
    attestations: Vec<u64>,
}

/// What a [`RecordChecker`] remembers of a lease.
#[derive(Debug, Default)]
struct LeaseSeen {
    /// The tenant of its first usage record that passed, and that record.
    tenant: Option<(String, u64)>,
    gpus: HashMap<String, ChainEnd>,
}

/// The end of the chain of a lease's usage records on one GPU.
#[derive(Debug)]
struct ChainEnd {
    /// The chain's last record.
    last: u64,
    /// The latest `end` among its records (Unix ms), and the record that has it.
    latest_end: Option<(i64, u64)>,
    /// The lease's time on the GPU.
    span: Option<Span>,
}

/// A lease's time on a GPU: from the earliest `start` of its records there that passed to
/// the latest `end` (Unix ms), and the first of those records. Ordered by start, then end,
/// then record (the record keeps two empty spans at one instant apart).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Span {
    start: i64,
    end: i64,
    first: u64,
}

impl Span {
    /// `span` (`None`: the lease has no time on the GPU yet) stretched over `start..end`, the
    /// interval of record `id`.
    fn stretched(span: Option<Span>, id: u64, start: i64, end: i64) -> Span {
        match span {
            Some(s) => Span {
                start: s.start.min(start),
                end: s.end.max(end),
                first: s.first,
            },
            None => Span {
                start,
                end,
                first: id,
            },
        }
    }
}

impl RecordChecker {
    /// A checker that has seen no record.
    pub fn new() -> Self {
        Self::default()
    }

    /// Checks that `line` (without its newline) is record `index`, on its own and against the
    /// records given before it, and adds it to `totals` if it passes. Lines must be given in
    /// order, from 0.
    pub fn check(
        &mut self,
        index: u64,
        line: &[u8],
        totals: &mut Totals,
    ) -> Result<(), RecordProblem> {
        self.admit(index, check_line(index, line), totals)
    }

    /// The checks against the records before `index`, of a line already checked on its own.
    pub(crate) fn admit(
        &mut self,
        index: u64,
        c: LineCheck,
        totals: &mut Totals,
    ) -> Result<(), RecordProblem> {
        if let Some(problem) = c.problem {
            if let Seen::Usage(u) = c.seen {
                self.note_usage(u, false);
            }
            return Err(problem);
        }
        match c.seen {
            Seen::Nothing => {}
            Seen::Usage(u) => {
                self.check_usage(&u)?;
                totals.add_usage(&u.tenant, u.gpu_ms, u.energy_joules, u.amount);
                self.note_usage(u, true);
            }
            Seen::Attestation => {
                self.attestations.push(index);
                totals.add_other("attestation");
            }
            Seen::Other(kind) => totals.add_other(kind),
        }
        Ok(())
    }

    /// A usage record (that passed its own checks) against the records before it.
    fn check_usage(&self, u: &UsageLine) -> Result<(), RecordProblem> {
        let lease = self.leases.get(&u.lease);
        if let Some((lease_tenant, first)) = lease.and_then(|l| l.tenant.as_ref()) {
            if *lease_tenant != u.tenant {
                return Err(RecordProblem::TenantNotLeases {
                    tenant: u.tenant.clone(),
                    lease: u.lease.clone(),
                    lease_tenant: lease_tenant.clone(),
                    first: *first,
                });
            }
        }
        let chain = lease.and_then(|l| l.gpus.get(&u.gpu_uuid));
        let latest_end = chain.and_then(|c| c.latest_end);
        if let (Some((start, _)), Some((earlier_end, earlier))) = (u.interval, latest_end) {
            if start < earlier_end {
                return Err(RecordProblem::OverlapsEarlier {
                    lease: u.lease.clone(),
                    gpu_uuid: u.gpu_uuid.clone(),
                    start: format_utc_ms(start),
                    earlier,
                    earlier_end: format_utc_ms(earlier_end),
                });
            }
        }
        if let Some((start, end)) = u.interval {
            let own = chain.and_then(|c| c.span);
            let span = Span::stretched(own, u.id, start, end);
            if let Some((other, other_lease)) = self.other_lease_across(&u.gpu_uuid, span, own) {
                return Err(RecordProblem::OverlapsOtherLease(Box::new(LeasesOverlap {
                    gpu_uuid: u.gpu_uuid.clone(),
                    lease: u.lease.clone(),
                    span_start: format_utc_ms(span.start),
                    span_end: format_utc_ms(span.end),
                    other_lease: other_lease.clone(),
                    other_start: format_utc_ms(other.start),
                    other_end: format_utc_ms(other.end),
                    other_first: other.first,
                })));
            }
        }
        let expected = chain.map(|c| c.last);
        if u.prev != expected {
            return Err(RecordProblem::PrevNotPrevious {
                prev: u.prev,
                expected,
                lease: u.lease.clone(),
                gpu_uuid: u.gpu_uuid.clone(),
            });
        }
        if let Some(a) = u.attestation {
            if self.attestations.binary_search(&a).is_err() {
                return Err(RecordProblem::NotAnAttestation { attestation: a });
            }
        }
        Ok(())
    }

    /// The time of another lease than the one whose time on `gpu` is `own` that overlaps
    /// `span` there, and that lease, if any.
    fn other_lease_across(
        &self,
        gpu: &str,
        span: Span,
        own: Option<Span>,
    ) -> Option<(&Span, &String)> {
        let spans = self.gpus.get(gpu)?;
        // Of the times that start before `span` ends, the last ends latest (their ends never
        // decrease), so it overlaps `span` if any does; the lease's own is skipped (at most one
        // step more).
        let before_end = Span {
            start: span.end,
            end: i64::MIN,
            first: 0,
        };
        let (other, lease) = spans
            .range(..before_end)
            .rev()
            .find(|(s, _)| Some(**s) != own)?;
        (other.end > span.start).then_some((other, lease))
    }

    /// `u` is the last link of its lease and GPU's chain; one that `passed` every check names
    /// its lease's tenant if it is the lease's first, moves the chain's latest end on and
    /// stretches the lease's time on the GPU over its interval.
    fn note_usage(&mut self, u: UsageLine, passed: bool) {
        let lease = match self.leases.get_mut(&u.lease) {
            Some(l) => l,
            None => self.leases.entry(u.lease.clone()).or_default(),
        };
        if passed && lease.tenant.is_none() {
            lease.tenant = Some((u.tenant, u.id));
        }
        let chain = match lease.gpus.get_mut(&u.gpu_uuid) {
            Some(c) => c,
            None => lease.gpus.entry(u.gpu_uuid.clone()).or_insert(ChainEnd {
                last: u.id,
                latest_end: None,
                span: None,
            }),
        };
        chain.last = chain.last.max(u.id);
        let (true, Some((start, end))) = (passed, u.interval) else {
            return;
        };
        if chain.latest_end.is_none_or(|(latest, _)| end > latest) {
            chain.latest_end = Some((end, u.id));
        }
        let old = chain.span;
        let span = Span::stretched(old, u.id, start, end);
        chain.span = Some(span);
        let spans = match self.gpus.get_mut(&u.gpu_uuid) {
            Some(s) => s,
            None => self.gpus.entry(u.gpu_uuid).or_default(),
        };
        let name = old.and_then(|o| spans.remove(&o)).unwrap_or(u.lease);
        spans.insert(span, name);
    }
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
    check_interval(&j.start, &j.end, start, end)?;
    match (&j.exit, j.ended) {
        (Some(exit), false) => Err(RecordProblem::ExitWithoutEnd { exit: exit.clone() }),
        _ => Ok(()),
    }
}

/// An interval, `start_text..end_text` read as `start..end` (Unix ms), does not end before it
/// starts and lies within the UTC hour it starts in (its end may be the next hour exactly).
fn check_interval(
    start_text: &str,
    end_text: &str,
    start: i64,
    end: i64,
) -> Result<(), RecordProblem> {
    if end < start {
        return Err(RecordProblem::ReversedInterval {
            start: start_text.to_owned(),
            end: end_text.to_owned(),
        });
    }
    if end > (start.div_euclid(HOUR_MS) + 1) * HOUR_MS {
        return Err(RecordProblem::CrossesHour {
            start: start_text.to_owned(),
            end: end_text.to_owned(),
        });
    }
    Ok(())
}

/// A usage record's own checks; `start` and `end` are its times as parsed (`None`: not
/// RFC 3339 UTC).
fn check_usage(
    index: u64,
    f: &UsageFacts<'_>,
    start: Option<i64>,
    end: Option<i64>,
) -> Result<(), RecordProblem> {
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
    // The interval: the node writes both times as RFC 3339 UTC (its bill leaves out a record
    // whose start does not parse, so the audit must not count it either), cuts at every UTC
    // hour, and bills exactly `end - start` as `gpu_ms`.
    let bad_time = |field: &str, value: &str| RecordProblem::BadTime {
        field: field.to_owned(),
        value: value.to_owned(),
    };
    let start = start.ok_or_else(|| bad_time("start", &f.start))?;
    let end = end.ok_or_else(|| bad_time("end", &f.end))?;
    check_interval(&f.start, &f.end, start, end)?;
    let interval_ms = end - start;
    if i64::try_from(f.gpu_ms) != Ok(interval_ms) {
        return Err(RecordProblem::GpuMsNotInterval {
            gpu_ms: f.gpu_ms,
            start: f.start.clone().into_owned(),
            end: f.end.clone().into_owned(),
            interval_ms,
        });
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
        let e = check(edit("\"prev\":null", "\"prev\":9")).unwrap_err();
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
        let e = check(edit("\"prev\":null", "\"prev\":4,\"attestation\":5")).unwrap_err();
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

    /// A usage record's interval: RFC 3339 UTC times (what the node's bill can place), in
    /// order, within one UTC hour, and `gpu_ms` exactly its length.
    #[test]
    fn usage_times_are_checked() {
        use crate::record::UsageRecord;
        use crate::testutil::usage_on;
        let check = |u: &UsageRecord| {
            let leaf = Record::Usage(u.clone()).to_leaf().unwrap();
            check_record_line(u.id, &leaf, &mut Totals::default())
        };
        let hour = ("2026-01-01T10:00:00.000Z", "2026-01-01T11:00:00.000Z");
        let good = usage_on(0, "a", "lease-a", "GPU-1", hour, None);
        check(&good).unwrap();
        // Ten hours billed for a one-hour interval, amount and gpu_seconds consistent with it.
        let mut long = good.clone();
        long.gpu_ms = 36_000_000;
        long.gpu_seconds = 36_000.0;
        long.amount_paise = amount_paise(long.gpu_ms, long.rate_paise_per_hour);
        let e = check(&long).unwrap_err();
        assert_eq!(
            e,
            RecordProblem::GpuMsNotInterval {
                gpu_ms: 36_000_000,
                start: hour.0.into(),
                end: hour.1.into(),
                interval_ms: 3_600_000
            }
        );
        assert_eq!(
            e.to_string(),
            "gpu_ms 36000000 is not the length of its interval \
             2026-01-01T10:00:00.000Z..2026-01-01T11:00:00.000Z (3600000 ms)"
        );
        // Less than the interval is not what the node writes either.
        let mut short = good.clone();
        (short.gpu_ms, short.gpu_seconds, short.amount_paise) = (1000, 1.0, 7);
        assert!(matches!(
            check(&short),
            Err(RecordProblem::GpuMsNotInterval { gpu_ms: 1000, .. })
        ));
        // A start the node's bill cannot place is not counted here either.
        for (field, bad) in [
            ("start", "2026-01-01 10:00:00.000Z"),
            ("start", "2026-01-01T15:30:00.000+05:30"),
            ("end", "later"),
        ] {
            let mut u = good.clone();
            if field == "start" {
                u.start = bad.into();
            } else {
                u.end = bad.into();
            }
            let mut t = Totals::default();
            let leaf = Record::Usage(u).to_leaf().unwrap();
            assert_eq!(
                check_record_line(0, &leaf, &mut t),
                Err(RecordProblem::BadTime {
                    field: field.into(),
                    value: bad.into()
                })
            );
            assert!(t.tenants.is_empty(), "not counted");
        }
        let reversed = usage_on(0, "a", "lease-a", "GPU-1", (hour.1, hour.1), None);
        check(&reversed).unwrap(); // empty, in order
        let mut reversed = good.clone();
        (reversed.start, reversed.end) = (hour.1.into(), hour.0.into());
        assert!(matches!(
            check(&reversed),
            Err(RecordProblem::ReversedInterval { .. })
        ));
        let across = usage_on(
            0,
            "a",
            "lease-a",
            "GPU-1",
            ("2026-01-01T10:30:00.000Z", "2026-01-01T11:30:00.000Z"),
            None,
        );
        assert!(matches!(
            check(&across),
            Err(RecordProblem::CrossesHour { .. })
        ));
    }

    /// Each record against the ones before it: one tenant per lease, no GPU time of a lease
    /// billed twice, `prev` the lease and GPU's previous record, `attestation` an attestation.
    /// A record that fails is not totalled, and does not move its lease's chain on.
    #[test]
    fn records_are_checked_against_the_ones_before_them() {
        use crate::record::UsageRecord;
        use crate::testutil::{attestation, usage_on};
        let h = |from: u32| {
            let t =
                |h: u32| -> &'static str { String::leak(format!("2026-01-01T{h:02}:00:00.000Z")) };
            (t(from), t(from + 1))
        };
        let mut c = RecordChecker::new();
        let mut t = Totals::default();
        let mut check = |rec: &Record, line: u64| c.check(line, &rec.to_leaf().unwrap(), &mut t);
        let usage = |u: &UsageRecord| Record::Usage(u.clone());
        check(&attestation(0), 0).unwrap();
        let mut first = usage_on(1, "a", "lease-a", "GPU-1", h(0), None);
        first.attestation = Some(0);
        check(&usage(&first), 1).unwrap();
        let second = usage_on(2, "a", "lease-a", "GPU-1", h(1), Some(1));
        check(&usage(&second), 2).unwrap();
        // (b) The same record again: byte for byte, then under the next id.
        let e = check(&usage(&second), 3).unwrap_err();
        assert_eq!(e, RecordProblem::IdMismatch { id: 2, line: 3 });
        let mut copy = second.clone();
        copy.id = 3;
        let e = check(&usage(&copy), 3).unwrap_err();
        assert_eq!(
            e,
            RecordProblem::OverlapsEarlier {
                lease: "lease-a".into(),
                gpu_uuid: "GPU-1".into(),
                start: h(1).0.into(),
                earlier: 2,
                earlier_end: h(1).1.into(),
            }
        );
        assert_eq!(
            e.to_string(),
            "starts at 2026-01-01T01:00:00.000Z, before 2026-01-01T02:00:00.000Z, the end of \
             record 2 of lease lease-a on GPU GPU-1: that time is billed twice"
        );
        // Partly overlapping, and moved back in time: the same.
        let mut part = usage_on(
            3,
            "a",
            "lease-a",
            "GPU-1",
            ("2026-01-01T01:30:00.000Z", "2026-01-01T02:00:00.000Z"),
            Some(2),
        );
        assert!(matches!(
            check(&usage(&part), 3),
            Err(RecordProblem::OverlapsEarlier { earlier: 2, .. })
        ));
        (part.start, part.end, part.gpu_ms) = (h(0).0.into(), h(0).1.into(), 3_600_000);
        part.amount_paise = 25_000;
        part.gpu_seconds = 3600.0;
        assert!(matches!(
            check(&usage(&part), 3),
            Err(RecordProblem::OverlapsEarlier { earlier: 2, .. })
        ));
        // The rejected records did not move the chain on: the next one follows record 2,
        // after a gap (a lease's GPU may be metered again later), and is counted.
        let third = usage_on(3, "a", "lease-a", "GPU-1", h(3), Some(2));
        check(&usage(&third), 3).unwrap();
        // Another GPU of the lease has its own chain: the same hour is no overlap.
        let other_gpu = usage_on(4, "a", "lease-a", "GPU-2", h(0), None);
        check(&usage(&other_gpu), 4).unwrap();
        // (c) Another tenant on lease-a.
        let e = check(
            &usage(&usage_on(5, "b", "lease-a", "GPU-1", h(4), Some(3))),
            5,
        );
        assert_eq!(
            e,
            Err(RecordProblem::TenantNotLeases {
                tenant: "b".into(),
                lease: "lease-a".into(),
                lease_tenant: "a".into(),
                first: 1
            })
        );
        assert_eq!(
            e.unwrap_err().to_string(),
            "bills tenant \"b\", but lease lease-a is tenant \"a\"'s (record 1)"
        );
        // A first record of lease-b whose prev is lease-a's record, then one of lease-a
        // whose prev skips its chain's last record.
        let e = check(
            &usage(&usage_on(5, "b", "lease-b", "GPU-1", h(4), Some(3))),
            5,
        );
        assert_eq!(
            e,
            Err(RecordProblem::PrevNotPrevious {
                prev: Some(3),
                expected: None,
                lease: "lease-b".into(),
                gpu_uuid: "GPU-1".into()
            })
        );
        assert_eq!(
            e.unwrap_err().to_string(),
            "prev 3 is not the previous usage record of lease lease-b on GPU GPU-1 (null)"
        );
        let e = check(
            &usage(&usage_on(5, "a", "lease-a", "GPU-1", h(4), Some(2))),
            5,
        );
        assert!(
            matches!(
                e,
                Err(RecordProblem::PrevNotPrevious {
                    prev: Some(2),
                    expected: Some(3),
                    ..
                })
            ),
            "{e:?}"
        );
        // An attestation reference to a usage record.
        let mut fourth = usage_on(5, "a", "lease-a", "GPU-1", h(4), Some(3));
        fourth.attestation = Some(2);
        let e = check(&usage(&fourth), 5).unwrap_err();
        assert_eq!(e, RecordProblem::NotAnAttestation { attestation: 2 });
        assert_eq!(e.to_string(), "attestation 2 is not an attestation record");
        fourth.attestation = Some(0);
        check(&usage(&fourth), 5).unwrap();
        // Only what passed is counted: records 1, 2, 3, 4 and 5 of tenant a, four hours.
        assert_eq!(t.tenants.len(), 1, "{:?}", t.tenants);
        let a = &t.tenants["a"];
        assert_eq!((a.records, a.gpu_ms), (5, 5 * 3_600_000));
        assert_eq!((t.records, t.by_kind["attestation"]), (6, 1));
    }

    /// Usage record `u`, as line `u.id`, against the records given to `c` before it.
    fn check_usage_record(
        c: &mut RecordChecker,
        t: &mut Totals,
        u: &crate::record::UsageRecord,
    ) -> Result<(), RecordProblem> {
        c.check(u.id, &Record::Usage(u.clone()).to_leaf().unwrap(), t)
    }

    /// `HH:MM` of 2026-01-01, as RFC 3339 UTC.
    fn at(hh_mm: &str) -> &'static str {
        String::leak(format!("2026-01-01T{hh_mm}:00.000Z"))
    }

    /// Usage record `id` of tenant `t` on its lease `lease-<t>` and `gpu` over `from..to`
    /// (`HH:MM` of 2026-01-01).
    fn rec(
        id: u64,
        t: &str,
        gpu: &str,
        (from, to): (&str, &str),
        prev: Option<u64>,
    ) -> crate::record::UsageRecord {
        let lease = format!("lease-{t}");
        crate::testutil::usage_on(id, t, &lease, gpu, (at(from), at(to)), prev)
    }

    /// (1) Two leases billing one GPU for overlapping time: the second record is a finding
    /// naming the other lease and its time on the GPU, and is not totalled.
    #[test]
    fn one_gpu_billed_to_two_leases_at_once_is_found() {
        let (mut c, mut t) = (RecordChecker::new(), Totals::default());
        let a = rec(0, "a", "GPU-1", ("08:00", "09:00"), None);
        check_usage_record(&mut c, &mut t, &a).unwrap();
        let b = rec(1, "b", "GPU-1", ("08:30", "09:00"), None);
        let e = check_usage_record(&mut c, &mut t, &b).unwrap_err();
        assert_eq!(
            e,
            RecordProblem::OverlapsOtherLease(Box::new(LeasesOverlap {
                gpu_uuid: "GPU-1".into(),
                lease: "lease-b".into(),
                span_start: at("08:30").into(),
                span_end: at("09:00").into(),
                other_lease: "lease-a".into(),
                other_start: at("08:00").into(),
                other_end: at("09:00").into(),
                other_first: 0,
            }))
        );
        assert_eq!(
            e.to_string(),
            "puts lease lease-b on GPU GPU-1 over 2026-01-01T08:30:00.000Z..\
             2026-01-01T09:00:00.000Z, across lease lease-a's time on it, \
             2026-01-01T08:00:00.000Z..2026-01-01T09:00:00.000Z (from record 0): a GPU is held \
             by one lease at a time, so one of them is billed for time it did not hold it"
        );
        // The whole of the other lease's time, the same; and an empty interval inside it.
        for (id, (from, to)) in [(2, ("08:00", "09:00")), (3, ("08:10", "08:10"))] {
            let b = rec(id, "b", "GPU-1", (from, to), None);
            assert!(
                matches!(
                    check_usage_record(&mut c, &mut t, &b),
                    Err(RecordProblem::OverlapsOtherLease(o)) if o.other_first == 0
                ),
                "{from}..{to}"
            );
        }
        // Rejected, they gave lease-b no time on the GPU: its record from 09:00, when
        // lease-a's ends, is counted.
        let b = rec(4, "b", "GPU-1", ("09:00", "10:00"), None);
        check_usage_record(&mut c, &mut t, &b).unwrap();
        assert_eq!((t.tenants["a"].records, t.tenants["b"].records), (1, 1));
        assert_eq!(t.tenants["b"].gpu_ms, 3_600_000);
    }

    /// (2) Two leases one after the other on a GPU are no finding, whatever the order of their
    /// records in the log: lease-b's 10:00 record is written before lease-a's last, and
    /// lease-c's times touch both.
    #[test]
    fn leases_one_after_another_on_a_gpu_are_no_finding() {
        let (mut c, mut t) = (RecordChecker::new(), Totals::default());
        for u in [
            rec(0, "a", "GPU-1", ("07:00", "08:00"), None),
            rec(1, "b", "GPU-1", ("10:00", "11:00"), None),
            rec(2, "a", "GPU-1", ("08:00", "09:00"), Some(0)),
            rec(3, "c", "GPU-1", ("09:00", "09:30"), None),
            rec(4, "c", "GPU-1", ("09:30", "10:00"), Some(3)),
            rec(5, "b", "GPU-1", ("11:00", "12:00"), Some(1)),
            // An empty interval at the instant one lease hands over to the next.
            rec(6, "d", "GPU-1", ("12:00", "12:00"), None),
            rec(7, "e", "GPU-1", ("12:00", "12:00"), None),
        ] {
            check_usage_record(&mut c, &mut t, &u).unwrap_or_else(|e| panic!("{}: {e}", u.id));
        }
        assert_eq!(t.by_kind["usage"], 8);
    }

    /// (3) A lease's time on a GPU runs from its first record there to its last: a later record
    /// that would stretch it over another lease's time is a finding (the lease got the GPU back
    /// after another held it), and stretches nothing.
    #[test]
    fn a_lease_does_not_get_a_gpu_back() {
        let (mut c, mut t) = (RecordChecker::new(), Totals::default());
        let a = rec(0, "a", "GPU-1", ("08:00", "09:00"), None);
        check_usage_record(&mut c, &mut t, &a).unwrap();
        let b = rec(1, "b", "GPU-1", ("09:00", "10:00"), None);
        check_usage_record(&mut c, &mut t, &b).unwrap();
        let back = rec(2, "a", "GPU-1", ("10:00", "11:00"), Some(0));
        let e = check_usage_record(&mut c, &mut t, &back).unwrap_err();
        assert_eq!(
            e,
            RecordProblem::OverlapsOtherLease(Box::new(LeasesOverlap {
                gpu_uuid: "GPU-1".into(),
                lease: "lease-a".into(),
                span_start: at("08:00").into(),
                span_end: at("11:00").into(),
                other_lease: "lease-b".into(),
                other_start: at("09:00").into(),
                other_end: at("10:00").into(),
                other_first: 1,
            }))
        );
        // Not counted, and lease-a's time still ends at 09:00: lease-c may have 10:00.
        assert_eq!(t.tenants["a"].records, 1);
        let c10 = rec(3, "c", "GPU-1", ("10:00", "11:00"), None);
        check_usage_record(&mut c, &mut t, &c10).unwrap();
        // The same with the log in another order: lease-b's record comes last, inside
        // lease-a's time (a gap between two of its records).
        let (mut c, mut t) = (RecordChecker::new(), Totals::default());
        for u in [
            rec(0, "a", "GPU-1", ("08:00", "09:00"), None),
            rec(1, "a", "GPU-1", ("10:00", "11:00"), Some(0)),
        ] {
            check_usage_record(&mut c, &mut t, &u).unwrap();
        }
        let b = rec(2, "b", "GPU-1", ("09:00", "10:00"), None);
        assert!(matches!(
            check_usage_record(&mut c, &mut t, &b),
            Err(RecordProblem::OverlapsOtherLease(o))
                if o.other_first == 0 && o.other_end == at("11:00")
        ));
        assert!(!t.tenants.contains_key("b"));
    }

    /// (4) Leases on different GPUs at the same time are no finding.
    #[test]
    fn leases_on_other_gpus_at_the_same_time_are_no_finding() {
        let (mut c, mut t) = (RecordChecker::new(), Totals::default());
        for u in [
            rec(0, "a", "GPU-1", ("08:00", "09:00"), None),
            rec(1, "b", "GPU-2", ("08:00", "09:00"), None),
            rec(2, "b", "GPU-3", ("08:30", "09:00"), None),
            rec(3, "a", "GPU-1", ("09:00", "10:00"), Some(0)),
        ] {
            check_usage_record(&mut c, &mut t, &u).unwrap_or_else(|e| panic!("{}: {e}", u.id));
        }
        assert_eq!((t.tenants["a"].records, t.tenants["b"].records), (2, 2));
    }

    /// A record that fails its own checks still moves its chain on: one forged amount is one
    /// finding, not also one on the lease's next record.
    #[test]
    fn a_bad_record_is_one_finding() {
        use crate::testutil::usage_on;
        let mut c = RecordChecker::new();
        let mut t = Totals::default();
        let mut first = usage_on(
            0,
            "a",
            "lease-a",
            "GPU-1",
            ("2026-01-01T00:00:00Z", "2026-01-01T01:00:00Z"),
            None,
        );
        first.amount_paise += 1;
        let leaf = Record::Usage(first).to_leaf().unwrap();
        assert!(matches!(
            c.check(0, &leaf, &mut t),
            Err(RecordProblem::AmountMismatch { .. })
        ));
        let next = usage_on(
            1,
            "a",
            "lease-a",
            "GPU-1",
            ("2026-01-01T01:00:00Z", "2026-01-01T02:00:00Z"),
            Some(0),
        );
        c.check(1, &Record::Usage(next).to_leaf().unwrap(), &mut t)
            .unwrap();
        // A forged long interval does not make the lease's later records overlaps.
        let mut long = usage_on(
            2,
            "a",
            "lease-a",
            "GPU-1",
            ("2026-01-01T02:00:00Z", "2026-01-01T02:30:00Z"),
            Some(1),
        );
        long.end = "2026-01-01T09:00:00Z".into();
        long.gpu_ms = 7 * 3_600_000;
        long.gpu_seconds = 7.0 * 3600.0;
        long.amount_paise = 7 * 25_000;
        assert!(matches!(
            c.check(2, &Record::Usage(long).to_leaf().unwrap(), &mut t),
            Err(RecordProblem::CrossesHour { .. })
        ));
        let after = usage_on(
            3,
            "a",
            "lease-a",
            "GPU-1",
            ("2026-01-01T02:00:00Z", "2026-01-01T03:00:00Z"),
            Some(2),
        );
        c.check(3, &Record::Usage(after).to_leaf().unwrap(), &mut t)
            .unwrap();
        assert_eq!(t.tenants["a"].records, 2);
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
