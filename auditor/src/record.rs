//! Ledger records: the JSON lines that the signed usage log holds.
//!
//! Each leaf of the ledger is exactly one record serialized as compact JSON (no trailing
//! newline). The `id` of a record is its leaf index, so an auditor can check that line `i`
//! of `records.jsonl` claims to be record `i`, and a tenant's receipt names the index its
//! inclusion proof is for. Money is integer paise so totals add up exactly (see
//! [`crate::money::amount_paise`]).

use serde::{Deserialize, Serialize};

/// Schema version of the records written by this build.
pub const RECORD_VERSION: u32 = 1;

/// One ledger record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Record {
    /// GPU use metered for one lease over one interval (at most one hour, cut at lease end).
    Usage(UsageRecord),
    /// An attestation result about this node, signed by a verifier the node trusts, as the
    /// control plane delivered it. Usage records name the one in force when they were metered.
    Attestation(AttestationRecord),
    /// A change of a GPU's state seen between two inventories (CC mode, loss, driver).
    GpuEvent(GpuEventRecord),
    /// An operator's recovery of the ledger store (`hostd ledger recover`): records missing
    /// from a restored database were re-appended from an audit export. Nothing was re-signed
    /// differently: the re-appended records are byte for byte the exported ones.
    Recovery(RecoveryRecord),
    /// What one tenant job (a systemd unit on a lease) used over one interval of at most one
    /// UTC hour: CPU time, memory peak and network bytes. Not GPU use: it is billed by nothing
    /// here, but lets a tenant and an auditor see what each job consumed, signed like the rest.
    JobUsage(JobUsageRecord),
    /// A lease's encrypted scratch was crypto-erased at lease end: its key removed from the
    /// kernel, its directory deleted. Recorded so a tenant can prove its data was destroyed.
    ScratchErased(ScratchErasedRecord),
    /// Data copied into or out of a lease's encrypted scratch by a tenant (`sovctl cp`), or a
    /// download the residency policy refused. Recorded so a tenant and an auditor can see
    /// every byte that entered or left a lease, and which policy rules let it leave.
    Transfer(TransferRecord),
}

/// Resources used by one job over `[start, end)`, cut at every UTC hour boundary and at the
/// job's end, so per-hour totals of a job never need a record split across hours.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobUsageRecord {
    /// Record schema version ([`RECORD_VERSION`]).
    pub v: u32,
    /// Leaf index of this record in the ledger.
    pub id: u64,
    /// Name of the node that ran the job (its configured node name).
    pub node: String,
    /// Id of the tenant that ran the job: the lease's tenant.
    pub tenant: String,
    /// Id of the lease the job ran under.
    pub lease: String,
    /// Id of the job, as `sovctl job` names it.
    pub job: String,
    /// Interval start (inclusive), RFC 3339 UTC with milliseconds.
    pub start: String,
    /// Interval end (exclusive), RFC 3339 UTC with milliseconds; in the same UTC hour as
    /// `start`, or exactly the next hour boundary.
    pub end: String,
    /// CPU time used in the interval, nanoseconds (a delta of the unit's `CPUUsageNSec`;
    /// spread over hours in proportion to time when the counter was read less often).
    pub cpu_ns: u64,
    /// The largest memory use seen in the interval, bytes (a peak, not a delta).
    pub memory_peak_bytes: u64,
    /// Bytes received by the job's network namespace in the interval.
    pub bytes_in: u64,
    /// Bytes sent by the job's network namespace in the interval.
    pub bytes_out: u64,
    /// Whether the job ended in this interval: its last record.
    pub ended: bool,
    /// How the job ended (`exited 0`, `killed 15`, `failed timeout`); only on the record
    /// with `ended`, and absent there too when the node could not tell.
    pub exit: Option<String>,
}

/// The crypto-erasure of a lease's encrypted scratch directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScratchErasedRecord {
    /// Record schema version ([`RECORD_VERSION`]).
    pub v: u32,
    /// Leaf index of this record in the ledger.
    pub id: u64,
    /// Name of the node that held the scratch (its configured node name).
    pub node: String,
    /// Id of the tenant whose data was erased: the lease's tenant.
    pub tenant: String,
    /// Id of the lease the scratch belonged to.
    pub lease: String,
    /// When the key was removed, RFC 3339 UTC with milliseconds.
    pub at: String,
    /// Bytes the scratch held when it was erased (what became unreadable).
    pub bytes: u64,
    /// Whether files were still open when the key was removed (even after the directory was
    /// deleted): their per-file keys stay in kernel memory until the processes holding them
    /// close them, so the erasure completed only then.
    pub files_busy: bool,
}

/// One copy of data into (`in`) or out of (`out`) a lease's scratch through the node's API,
/// written when the transfer ends, or at once when the policy refused it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransferRecord {
    /// Record schema version ([`RECORD_VERSION`]).
    pub v: u32,
    /// Leaf index of this record in the ledger.
    pub id: u64,
    /// Name of the node that holds the scratch (its configured node name).
    pub node: String,
    /// Id of the tenant whose data moved: the lease's tenant.
    pub tenant: String,
    /// Id of the lease whose scratch the data entered or left.
    pub lease: String,
    /// When the transfer ended (or was refused), RFC 3339 UTC with milliseconds.
    pub at: String,
    /// `in` for an upload into the scratch, `out` for a download or a directory listing
    /// (names leave the node too).
    pub direction: String,
    /// Bytes moved: written into the scratch, or sent to the client; 0 when refused.
    pub bytes: u64,
    /// Whether the transfer ran to its end: false when the client went away or a write
    /// failed part way (`bytes` then says how much moved before that).
    pub complete: bool,
    /// The client's IP address as the TLS connection saw it: where data went out to.
    pub client: String,
    /// `allow` or `deny`: the residency policy's decision for data leaving the node; an
    /// upload (data entering) is always `allow`.
    pub decision: String,
    /// Digest of the residency policy that decided (`sha256:…`).
    pub policy_digest: String,
    /// Ids of the policy rules that decided; empty for uploads and when no rule matched.
    pub rules: Vec<String>,
    /// The policy's reasons for the decision, as it gave them (audit-mode rules say so here).
    pub reasons: Vec<String>,
}

/// What `hostd ledger recover` did, written as the first record after the recovered ones, so
/// the ledger itself says when its store was restored and from what.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecoveryRecord {
    /// Record schema version ([`RECORD_VERSION`]).
    pub v: u32,
    /// Leaf index of this record in the ledger.
    pub id: u64,
    /// Name of the node whose log holds the record.
    pub node: String,
    /// When the recovery ran, RFC 3339 UTC.
    pub at: String,
    /// Records the store held when recovery started (a restored backup's size, 0 for a
    /// deleted database).
    pub store_size: u64,
    /// Size of the last checkpoint the node had signed (its witness) before recovery.
    pub witnessed_size: u64,
    /// Records re-appended from the export: ids `store_size..store_size + reappended`.
    pub reappended: u64,
    /// Size of the verified export's checkpoint the records came from.
    pub export_size: u64,
    /// Root of that checkpoint, base64, as signed.
    pub export_root: String,
}

/// A verified attestation result (see `docs/attestation.md` §7), kept whole so that an
/// auditor can check the verifier's signature offline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttestationRecord {
    /// Record schema version ([`RECORD_VERSION`]).
    pub v: u32,
    /// Leaf index of this record in the ledger.
    pub id: u64,
    /// Name of the node whose log holds the record (its configured node name, e.g.
    /// `node-1.example`).
    pub node: String,
    /// When the node received and appended it, RFC 3339 UTC.
    pub received: String,
    /// `affirming`, `warning`, `contraindicated` or `none`, copied from the signed result.
    pub status: String,
    /// The result's issue time, Unix seconds (its age is measured from here).
    pub iat: u64,
    /// SHA-256 of the evidence the result appraised, hex.
    pub evidence_digest: String,
    /// The verifier key that signed it, hex.
    pub verifier_key: String,
    /// The signed result document, canonical JSON exactly as received.
    pub result: String,
}

/// What happened to a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GpuEventKind {
    /// The confidential-computing mode changed (`from`/`to`: `on`, `off`, `unknown`).
    CcModeChanged,
    /// The GPU stopped answering (fell off the bus, or NVML errors); `to` is the new state.
    Lost,
    /// A GPU that was lost answers again (after a reset or re-seat).
    Recovered,
    /// A GPU appeared at an index where there was none, or with another UUID.
    Appeared,
    /// A GPU is no longer enumerated.
    Disappeared,
    /// The driver version changed (a driver reload or upgrade).
    DriverChanged,
}

/// A change of one GPU's state between two inventories taken by the metering loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuEventRecord {
    /// Record schema version ([`RECORD_VERSION`]).
    pub v: u32,
    /// Leaf index of this record in the ledger.
    pub id: u64,
    /// Name of the node whose log holds the record (its configured node name).
    pub node: String,
    /// When the change was seen, RFC 3339 UTC.
    pub at: String,
    /// What changed.
    pub event: GpuEventKind,
    /// NVML index of the GPU.
    pub gpu_index: u32,
    /// UUID of the GPU (the last one known, if it no longer answers).
    pub gpu_uuid: String,
    /// The state before the change, where the event has one (CC mode `on`/`off`/`unknown`,
    /// the driver version, or `ok`/`not answering` for `lost` and `recovered`).
    pub from: Option<String>,
    /// The state after the change, where the event has one; `None` for `appeared` and
    /// `disappeared`.
    pub to: Option<String>,
}

/// Usage of one GPU by one lease over `[start, end)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageRecord {
    /// Record schema version ([`RECORD_VERSION`]).
    pub v: u32,
    /// Leaf index of this record in the ledger.
    pub id: u64,
    /// Name of the node that metered the use (its configured node name, e.g.
    /// `node-1.example`).
    pub node: String,
    /// Id of the tenant billed: the lease's tenant.
    pub tenant: String,
    /// Id of the lease the GPU was held under.
    pub lease: String,
    /// UUID of the GPU used, as NVML reports it (`GPU-…`).
    pub gpu_uuid: String,
    /// Model of that GPU as the lease holds it (the short model the rate is configured for,
    /// e.g. `H100`); invoices group by it.
    pub gpu_model: String,
    /// Interval start (inclusive), RFC 3339 UTC with milliseconds.
    pub start: String,
    /// Interval end (exclusive), RFC 3339 UTC with milliseconds, in the UTC hour of `start`
    /// or exactly the next hour boundary; `end - start` is `gpu_ms`, exactly.
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
    /// Id of the previous usage record of the same lease and GPU; `None` on the first.
    pub prev: Option<u64>,
    /// Id of the latest attestation record when this interval was metered, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attestation: Option<u64>,
}

impl Record {
    /// The leaf index this record claims.
    pub fn id(&self) -> u64 {
        match self {
            Record::Usage(u) => u.id,
            Record::Attestation(a) => a.id,
            Record::GpuEvent(g) => g.id,
            Record::Recovery(r) => r.id,
            Record::JobUsage(j) => j.id,
            Record::ScratchErased(e) => e.id,
            Record::Transfer(t) => t.id,
        }
    }

    /// The `kind` tag.
    pub fn kind(&self) -> &'static str {
        match self {
            Record::Usage(_) => "usage",
            Record::Attestation(_) => "attestation",
            Record::GpuEvent(_) => "gpu-event",
            Record::Recovery(_) => "recovery",
            Record::JobUsage(_) => "job-usage",
            Record::ScratchErased(_) => "scratch-erased",
            Record::Transfer(_) => "transfer",
        }
    }

    /// The schema version this record claims.
    pub fn version(&self) -> u32 {
        match self {
            Record::Usage(u) => u.v,
            Record::Attestation(a) => a.v,
            Record::GpuEvent(g) => g.v,
            Record::Recovery(r) => r.v,
            Record::JobUsage(j) => j.v,
            Record::ScratchErased(e) => e.v,
            Record::Transfer(t) => t.v,
        }
    }

    /// Compact JSON bytes: the exact leaf data. A record that cannot be serialised is an
    /// error, never an empty leaf.
    pub fn to_leaf(&self) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_kinds_round_trip_with_their_tags() {
        let g = Record::GpuEvent(GpuEventRecord {
            v: RECORD_VERSION,
            id: 3,
            node: "n".into(),
            at: "2026-01-01T00:00:00.000Z".into(),
            event: GpuEventKind::CcModeChanged,
            gpu_index: 0,
            gpu_uuid: "GPU-1".into(),
            from: Some("on".into()),
            to: Some("off".into()),
        });
        let leaf = String::from_utf8(g.to_leaf().unwrap()).unwrap();
        assert!(
            leaf.starts_with(r#"{"kind":"gpu-event","v":1,"id":3,"#),
            "{leaf}"
        );
        assert!(leaf.contains(r#""event":"cc-mode-changed""#), "{leaf}");
        assert_eq!(serde_json::from_str::<Record>(&leaf).unwrap(), g);
        assert_eq!((g.id(), g.kind()), (3, "gpu-event"));
    }

    #[test]
    fn job_usage_and_scratch_erased_round_trip_with_their_tags() {
        use crate::testutil::{job_usage, scratch_erased};
        let mut j = job_usage(7, "2026-01-01T10:00:00.000Z", "2026-01-01T10:30:00.000Z");
        if let Record::JobUsage(j) = &mut j {
            (j.ended, j.exit) = (true, Some("killed 15".into()));
        }
        let leaf = String::from_utf8(j.to_leaf().unwrap()).unwrap();
        assert!(
            leaf.starts_with(r#"{"kind":"job-usage","v":1,"id":7,"node":"node-1","#),
            "{leaf}"
        );
        assert!(
            leaf.ends_with(r#""ended":true,"exit":"killed 15"}"#),
            "{leaf}"
        );
        assert_eq!(serde_json::from_str::<Record>(&leaf).unwrap(), j);
        assert_eq!((j.id(), j.kind(), j.version()), (7, "job-usage", 1));
        let e = scratch_erased(8, "2026-01-01T11:00:00.000Z");
        let leaf = String::from_utf8(e.to_leaf().unwrap()).unwrap();
        assert_eq!(
            leaf,
            r#"{"kind":"scratch-erased","v":1,"id":8,"node":"node-1","tenant":"a","lease":"lease-1","at":"2026-01-01T11:00:00.000Z","bytes":1048576,"files_busy":false}"#
        );
        assert_eq!(serde_json::from_str::<Record>(&leaf).unwrap(), e);
        assert_eq!((e.id(), e.kind()), (8, "scratch-erased"));
        // Unknown fields are refused, as for every kind.
        let extra = leaf.replace(r#""bytes""#, r#""extra":1,"bytes""#);
        assert!(serde_json::from_str::<Record>(&extra).is_err());
    }

    #[test]
    fn transfer_round_trips_with_its_tag() {
        let t = crate::testutil::transfer(9, "out", "deny", 0);
        let leaf = String::from_utf8(t.to_leaf().unwrap()).unwrap();
        assert_eq!(
            leaf,
            r#"{"kind":"transfer","v":1,"id":9,"node":"node-1","tenant":"a","lease":"lease-1","at":"2026-01-01T11:00:00.000Z","direction":"out","bytes":0,"complete":false,"client":"192.0.2.7","decision":"deny","policy_digest":"sha256:00","rules":["no-egress"],"reasons":["rule no-egress: deny"]}"#
        );
        assert_eq!(serde_json::from_str::<Record>(&leaf).unwrap(), t);
        assert_eq!((t.id(), t.kind(), t.version()), (9, "transfer", 1));
        let extra = leaf.replace(r#""bytes""#, r#""extra":1,"bytes""#);
        assert!(serde_json::from_str::<Record>(&extra).is_err());
    }

    /// Adding kinds must not change a byte of the existing ones.
    #[test]
    fn usage_records_keep_their_bytes() {
        let leaf = String::from_utf8(
            crate::testutil::usage_after(2, "acme", 1000, 25_000, Some(1))
                .to_leaf()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            leaf,
            r#"{"kind":"usage","v":1,"id":2,"node":"node-1","tenant":"acme","lease":"lease-acme","gpu_uuid":"GPU-0b8c1a52-0000-4000-8000-000000000001","gpu_model":"NVIDIA H100 80GB HBM3","start":"2026-01-01T02:00:00.000Z","end":"2026-01-01T02:00:01.000Z","gpu_ms":1000,"gpu_seconds":1.0,"energy_joules":1800000.0,"peak_memory_bytes":1073741824,"mean_utilization_pct":87.5,"rate_paise_per_hour":25000,"amount_paise":7,"policy_digest":"sha256:00","prev":1}"#
        );
    }

    /// docs/audit.md lists every kind, and its examples are records that pass the checks.
    #[test]
    fn docs_list_every_kind_with_valid_examples() {
        let doc = include_str!("../../docs/audit.md");
        let section = doc
            .split("## Record kinds")
            .nth(1)
            .and_then(|s| s.split("\n## ").next())
            .expect("docs/audit.md has a Record kinds section");
        let kinds = [
            "usage",
            "attestation",
            "gpu-event",
            "recovery",
            "job-usage",
            "scratch-erased",
            "transfer",
        ];
        for kind in kinds {
            assert!(
                section.contains(&format!("* `{kind}`:")),
                "{kind} undocumented"
            );
        }
        let mut seen = Vec::new();
        let mut totals = crate::check::Totals::default();
        for line in section.lines().filter(|l| l.starts_with('{')) {
            let rec: Record = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
            crate::check::check_record_line(rec.id(), line.as_bytes(), &mut totals)
                .unwrap_or_else(|e| panic!("{e}: {line}"));
            seen.push(rec.kind());
        }
        assert!(
            seen.contains(&"job-usage")
                && seen.contains(&"scratch-erased")
                && seen.contains(&"transfer"),
            "{seen:?}"
        );
    }
}
