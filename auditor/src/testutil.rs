//! Test fixtures: records, and export directories built with `attest`'s log and signing.

use crate::export::write_export;
use crate::layout::{receipt_path, ConsistencyProof, RECORDS_FILE};
use crate::money::amount_paise;
use crate::record::{
    JobUsageRecord, Record, ScratchErasedRecord, TransferRecord, UsageRecord, RECORD_VERSION,
};
use crate::source::DirSource;
use crate::time::format_utc_ms;
use crate::verify::{verify_export, Supplied, VerifyFailure, VerifyOptions, VerifyReport};
use attest::checkpoint::{sign_checkpoint, Checkpoint};
use attest::log::{Log, MemStore};
use attest::note::NoteSigner;
use attest::receipt::Receipt;
use std::fs;
use std::path::PathBuf;

pub(crate) const ORIGIN: &str = "node-1/usage";

pub(crate) fn signer() -> NoteSigner {
    NoteSigner::from_seed(ORIGIN, &[7; 32]).unwrap()
}

/// A usage record of `tenant` on its lease `lease-<tenant>` and one GPU: `gpu_ms` (at most an
/// hour) from hour `id` of 2026-01-01, at `rate`; the first of its lease (`prev` null).
pub(crate) fn usage(id: u64, tenant: &str, gpu_ms: u64, rate: u64) -> Record {
    usage_after(id, tenant, gpu_ms, rate, None)
}

/// [`usage`] with `prev`.
pub(crate) fn usage_after(
    id: u64,
    tenant: &str,
    gpu_ms: u64,
    rate: u64,
    prev: Option<u64>,
) -> Record {
    let start = crate::time::parse_utc_ms("2026-01-01T00:00:00.000Z").unwrap()
        + i64::try_from(id).unwrap() * 3_600_000;
    let end = start + i64::try_from(gpu_ms).unwrap();
    Record::Usage(UsageRecord {
        v: RECORD_VERSION,
        id,
        node: "node-1".into(),
        tenant: tenant.into(),
        lease: format!("lease-{tenant}"),
        gpu_uuid: "GPU-0b8c1a52-0000-4000-8000-000000000001".into(),
        gpu_model: "NVIDIA H100 80GB HBM3".into(),
        start: format_utc_ms(start),
        end: format_utc_ms(end),
        gpu_ms,
        gpu_seconds: gpu_ms as f64 / 1000.0,
        energy_joules: 1.8e6,
        peak_memory_bytes: 1 << 30,
        mean_utilization_pct: 87.5,
        rate_paise_per_hour: rate,
        amount_paise: amount_paise(gpu_ms, rate),
        policy_digest: "sha256:00".into(),
        prev,
        attestation: None,
    })
}

/// An attestation record (checked for its place only).
pub(crate) fn attestation(id: u64) -> Record {
    Record::Attestation(crate::record::AttestationRecord {
        v: RECORD_VERSION,
        id,
        node: "node-1".into(),
        received: "2026-01-01T00:00:00.000Z".into(),
        status: "affirming".into(),
        iat: 1_767_225_600,
        evidence_digest: "00".into(),
        verifier_key: "00".into(),
        result: "{}".into(),
    })
}

/// A usage record of `tenant` on `lease` and `gpu` over `[start, end)` (RFC 3339 UTC), its
/// `gpu_ms` the interval and its amount at ₹250/h.
pub(crate) fn usage_on(
    id: u64,
    tenant: &str,
    lease: &str,
    gpu: &str,
    (start, end): (&str, &str),
    prev: Option<u64>,
) -> crate::record::UsageRecord {
    let ms = |t| crate::time::parse_utc_ms(t).unwrap();
    let gpu_ms = u64::try_from(ms(end) - ms(start)).unwrap();
    let Record::Usage(mut u) = usage_after(id, tenant, gpu_ms, 25_000, prev) else {
        unreachable!()
    };
    (u.lease, u.gpu_uuid) = (lease.into(), gpu.into());
    (u.start, u.end) = (start.into(), end.into());
    u
}

/// A job-usage record of job `job-1` over `[start, end)`, not ended.
pub(crate) fn job_usage(id: u64, start: &str, end: &str) -> Record {
    Record::JobUsage(JobUsageRecord {
        v: RECORD_VERSION,
        id,
        node: "node-1".into(),
        tenant: "a".into(),
        lease: "lease-1".into(),
        job: "job-1".into(),
        start: start.into(),
        end: end.into(),
        cpu_ns: 1_500_000_000,
        memory_peak_bytes: 1 << 28,
        bytes_in: 4096,
        bytes_out: 512,
        ended: false,
        exit: None,
    })
}

/// A scratch-erased record of `lease-1` at `at`.
pub(crate) fn scratch_erased(id: u64, at: &str) -> Record {
    Record::ScratchErased(ScratchErasedRecord {
        v: RECORD_VERSION,
        id,
        node: "node-1".into(),
        tenant: "a".into(),
        lease: "lease-1".into(),
        at: at.into(),
        bytes: 1 << 20,
        files_busy: false,
    })
}

/// A transfer record of `lease-1` at 11:00: `direction` and `decision` as given, moving
/// `bytes` (complete when any moved), decided by rule `no-egress`.
pub(crate) fn transfer(id: u64, direction: &str, decision: &str, bytes: u64) -> Record {
    Record::Transfer(TransferRecord {
        v: RECORD_VERSION,
        id,
        node: "node-1".into(),
        tenant: "a".into(),
        lease: "lease-1".into(),
        at: "2026-01-01T11:00:00.000Z".into(),
        direction: direction.into(),
        bytes,
        complete: bytes > 0,
        client: "192.0.2.7".into(),
        decision: decision.into(),
        policy_digest: "sha256:00".into(),
        rules: vec!["no-egress".into()],
        reasons: vec![format!("rule no-egress: {decision}")],
    })
}

/// `n` usage records, tenants `a`, `b`, `c` in turn (each on its lease and its own GPU, a
/// leased GPU being exclusive, chained by `prev`), one minute at ₹250/h each.
pub(crate) fn leaves(n: u64) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let mut r = usage_after(
                i,
                ["a", "b", "c"][i as usize % 3],
                60_000,
                25_000,
                i.checked_sub(3),
            );
            if let Record::Usage(u) = &mut r {
                u.gpu_uuid = format!("GPU-0b8c1a52-0000-4000-8000-00000000000{}", i % 3 + 1);
            }
            r.to_leaf().unwrap()
        })
        .collect()
}

/// The checkpoint of the tree of `leaves`, signed by `signer`.
pub(crate) fn signed_checkpoint(leaves: &[Vec<u8>], signer: &NoteSigner) -> String {
    let log = Log::from_leaves(leaves).unwrap();
    sign_checkpoint(
        &Checkpoint {
            origin: signer.name().to_owned(),
            size: leaves.len() as u64,
            root: log.root(),
            extensions: vec![],
        },
        signer,
    )
    .unwrap()
}

/// The receipt of record `index` in the tree of `leaves`.
pub(crate) fn receipt(leaves: &[Vec<u8>], index: u64) -> String {
    let log: Log<MemStore> = Log::from_leaves(leaves).unwrap();
    Receipt {
        index,
        extra: None,
        proof: log.inclusion_proof(index, log.size()).unwrap(),
        checkpoint_note: signed_checkpoint(leaves, &signer()),
    }
    .format()
}

/// The consistency proof file from `old` leaves to all of `leaves`.
pub(crate) fn consistency(leaves: &[Vec<u8>], old: u64) -> String {
    let log: Log<MemStore> = Log::from_leaves(leaves).unwrap();
    let size = log.size();
    ConsistencyProof {
        old_size: old,
        new_size: size,
        hashes: if old == 0 || old == size {
            vec![]
        } else {
            log.consistency_proof(old, size).unwrap()
        },
    }
    .format()
}

/// An export of `leaves` with receipts for `receipts`, and the auditor's options.
pub(crate) struct Fx {
    pub tmp: tempfile::TempDir,
    pub leaves: Vec<Vec<u8>>,
    pub opts: VerifyOptions,
}

impl Fx {
    pub(crate) fn new(n: u64, receipts: &[u64]) -> Self {
        Fx::of_leaves(leaves(n), receipts)
    }

    /// An export of exactly these leaves, signed, with receipts for `receipts`.
    pub(crate) fn of_leaves(leaves: Vec<Vec<u8>>, receipts: &[u64]) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let rs: Vec<(u64, String)> = receipts.iter().map(|&i| (i, receipt(&leaves, i))).collect();
        let s = signer();
        write_export(
            &tmp.path().join("exp"),
            &signed_checkpoint(&leaves, &s),
            &s.verifier().to_vkey(),
            leaves.clone().into_iter(),
            &rs,
        )
        .unwrap();
        let opts = VerifyOptions {
            vkey: Some(Supplied {
                name: "pinned.vkey".into(),
                text: format!("{}\n", s.verifier().to_vkey()),
            }),
            ..Default::default()
        };
        Fx { tmp, leaves, opts }
    }

    pub(crate) fn dir(&self) -> PathBuf {
        self.tmp.path().join("exp")
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir().join(name)
    }

    pub(crate) fn write(&self, name: &str, text: impl AsRef<[u8]>) {
        fs::write(self.path(name), text).unwrap();
    }

    /// Replaces the records file by these lines, each followed by `\n`.
    pub(crate) fn write_records(&self, lines: &[Vec<u8>]) {
        let mut text = Vec::new();
        for l in lines {
            text.extend_from_slice(l);
            text.push(b'\n');
        }
        self.write(RECORDS_FILE, text);
    }

    pub(crate) fn write_receipt(&self, id: u64, text: &str) {
        let _ = fs::create_dir(self.path(crate::layout::RECEIPTS_DIR));
        self.write(&receipt_path(id), text);
    }

    pub(crate) fn previous(&mut self, text: String) {
        self.opts.previous = Some(Supplied {
            name: "prev.checkpoint".into(),
            text,
        });
    }

    pub(crate) fn proof(&mut self, text: String) {
        self.opts.consistency = Some(Supplied {
            name: "the.proof".into(),
            text,
        });
    }

    pub(crate) fn run(&self) -> Result<VerifyReport, VerifyFailure> {
        verify_export(&DirSource::open(self.dir()).unwrap(), &self.opts, |_, _| {})
    }

    /// The report, which must have exactly one problem.
    pub(crate) fn one_problem(&self) -> crate::finding::Finding {
        let r = self.run().unwrap();
        assert_eq!(r.problems.len(), 1, "{:#?}", r.problems);
        r.problems.into_iter().next().unwrap()
    }

    pub(crate) fn fails(&self) -> crate::verify::VerifyError {
        self.run().unwrap_err().error
    }

    pub(crate) fn describe(&self, name: &str) -> String {
        self.dir().join(name).display().to_string()
    }
}
