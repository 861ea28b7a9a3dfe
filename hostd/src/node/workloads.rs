//! Records of tenants' workloads: what each job used (job-usage records, cut by
//! [`crate::workload::metering::cut`]), the crypto-erasure of a lease's scratch, and each
//! copy of data into or out of it.
//!
//! A job's cursor (`jobmeter/<job>`) and the records cut from it are written in one
//! write-ahead intent, so the cursor moves exactly when its records land: after a crash the
//! next cut starts where the last recorded one stopped, and no span is recorded twice or
//! lost. Inside an hour nothing is due and nothing is written, so metering every job every
//! second costs no disk writes.

use super::*;
use crate::residency::TransferDecision;
use crate::workload::metering::{cut, JobCursor, JobSample, JobUsage};
use auditor::record::{JobUsageRecord, ScratchErasedRecord, TransferRecord};

/// One copy of data into or out of a lease's scratch as the API saw it when it ended (or was
/// refused), for [`Node::record_transfer`].
#[derive(Debug, Clone, PartialEq)]
pub struct TransferFacts {
    /// The lease's tenant.
    pub tenant: String,
    /// The lease.
    pub lease: String,
    /// `in` (an upload) or `out` (a download or a listing).
    pub direction: &'static str,
    /// Bytes moved (0 when refused).
    pub bytes: u64,
    /// Whether it ran to its end.
    pub complete: bool,
    /// The client's IP address, as text.
    pub client: String,
    /// What the residency policy decided.
    pub decision: TransferDecision,
}

impl Node {
    /// The meter cursor of `job`, if it is being metered.
    pub fn job_cursor(&self, job: &str) -> Result<Option<JobCursor>, NodeError> {
        Ok(self.leases.get(&LeasesKey::JobCursor { job }.key())?)
    }

    /// Starts metering a job from `cursor` (its start time and counters then). Starting a job
    /// already metered under the same lease and tenant keeps the stored cursor, so a
    /// controller that re-adopts its jobs after a restart loses no span; another lease or
    /// tenant under the same job id is a conflict.
    pub fn start_job_metering(&self, cursor: JobCursor) -> Result<(), NodeError> {
        for (kind, id) in [
            ("job", &cursor.job),
            ("lease", &cursor.lease),
            ("tenant", &cursor.tenant),
        ] {
            validate_id(kind, id).map_err(|e| NodeError::BadRequest(e.to_string()))?;
        }
        let _w = lock(&self.write);
        let key = LeasesKey::JobCursor { job: &cursor.job }.key();
        if let Some(old) = self.leases.get::<JobCursor>(&key)? {
            if (&old.lease, &old.tenant) == (&cursor.lease, &cursor.tenant) {
                return Ok(());
            }
            return Err(NodeError::Conflict(format!(
                "job {} is already metered under lease {}",
                cursor.job, old.lease
            )));
        }
        self.leases.put(&key, &cursor)?;
        self.store.flush()?;
        info!(job = %cursor.job, lease = %cursor.lease, tenant = %cursor.tenant, from_ms = cursor.from_ms, "job metering started");
        Ok(())
    }

    /// Meters `job` with a reading taken now: appends the job-usage records now due (every
    /// UTC hour completed since its cursor, and the rest when `ended` says how it ended) and
    /// moves its cursor, or removes it when the job ended, in the same intent. Returns the
    /// ids of the records written: none inside an hour, when nothing at all is written.
    pub fn meter_job(
        &self,
        job: &str,
        sample: &JobSample,
        ended: Option<String>,
    ) -> Result<Vec<u64>, NodeError> {
        self.meter_job_at(job, sample, ended, self.clock.now_ms())
    }

    /// [`Node::meter_job`] at a given node time (tests cross hour boundaries with it).
    pub(super) fn meter_job_at(
        &self,
        job: &str,
        sample: &JobSample,
        ended: Option<String>,
        now_ms: i64,
    ) -> Result<Vec<u64>, NodeError> {
        let _w = lock(&self.write);
        let key = LeasesKey::JobCursor { job }.key();
        let cursor: JobCursor = self
            .leases
            .get(&key)?
            .ok_or_else(|| NodeError::NotFound(format!("job {job} is not metered")))?;
        let (usages, next) = cut(&cursor, sample, now_ms, ended);
        if usages.is_empty() {
            return Ok(Vec::new());
        }
        let (puts, removes) = match &next {
            Some(c) => (
                vec![(
                    key,
                    serde_json::to_value(c).map_err(|e| internal("job cursor", e))?,
                )],
                Vec::new(),
            ),
            None => (Vec::new(), vec![key]),
        };
        let node = self.cfg.node.name.clone();
        let ids = self.append_records(
            |start| job_usage_records(&node, start, usages),
            puts,
            removes,
        )?;
        info!(job, lease = %cursor.lease, tenant = %cursor.tenant, records = ?ids, ended = next.is_none(), "job usage recorded");
        Ok(ids)
    }

    /// Records that the scratch of `lease` (of `tenant`) was crypto-erased now, holding
    /// `bytes`, with files still open if `files_busy`. Returns the record's id.
    pub fn record_scratch_erased(
        &self,
        tenant: &str,
        lease: &str,
        bytes: u64,
        files_busy: bool,
    ) -> Result<u64, NodeError> {
        let _w = lock(&self.write);
        let rec = |id| {
            Record::ScratchErased(ScratchErasedRecord {
                v: RECORD_VERSION,
                id,
                node: self.cfg.node.name.clone(),
                tenant: tenant.to_owned(),
                lease: lease.to_owned(),
                at: rfc3339_ms(self.clock.now_ms()),
                bytes,
                files_busy,
            })
        };
        let ids = self.append_records(|id| vec![rec(id)], Vec::new(), Vec::new())?;
        let id = ids
            .first()
            .copied()
            .ok_or_else(|| NodeError::internal("no record id"))?;
        info!(
            record = id,
            tenant, lease, bytes, files_busy, "scratch erasure recorded"
        );
        Ok(id)
    }

    /// Records a transfer into or out of a lease's scratch, or its refusal, at node time
    /// now, in one intent like every record. Returns the record's id.
    pub fn record_transfer(&self, t: &TransferFacts) -> Result<u64, NodeError> {
        for (kind, id) in [("lease", &t.lease), ("tenant", &t.tenant)] {
            validate_id(kind, id).map_err(|e| NodeError::BadRequest(e.to_string()))?;
        }
        let _w = lock(&self.write);
        let rec = |id| {
            Record::Transfer(TransferRecord {
                v: RECORD_VERSION,
                id,
                node: self.cfg.node.name.clone(),
                tenant: t.tenant.clone(),
                lease: t.lease.clone(),
                at: rfc3339_ms(self.clock.now_ms()),
                direction: t.direction.to_owned(),
                bytes: t.bytes,
                complete: t.complete,
                client: t.client.clone(),
                decision: if t.decision.allowed { "allow" } else { "deny" }.to_owned(),
                policy_digest: t.decision.policy_digest.clone(),
                rules: t.decision.rules.clone(),
                reasons: t.decision.reasons.clone(),
            })
        };
        let ids = self.append_records(|id| vec![rec(id)], Vec::new(), Vec::new())?;
        let id = ids
            .first()
            .copied()
            .ok_or_else(|| NodeError::internal("no record id"))?;
        info!(
            record = id,
            tenant = %t.tenant,
            lease = %t.lease,
            direction = t.direction,
            bytes = t.bytes,
            complete = t.complete,
            client = %t.client,
            allowed = t.decision.allowed,
            "transfer recorded"
        );
        Ok(id)
    }
}

/// The records of `usages`, with ids from `start` on.
fn job_usage_records(node: &str, start: u64, usages: Vec<JobUsage>) -> Vec<Record> {
    (start..)
        .zip(usages)
        .map(|(id, u)| {
            Record::JobUsage(JobUsageRecord {
                v: RECORD_VERSION,
                id,
                node: node.to_owned(),
                tenant: u.tenant,
                lease: u.lease,
                job: u.job,
                start: rfc3339_ms(u.start_ms),
                end: rfc3339_ms(u.end_ms),
                cpu_ns: u.cpu_ns,
                memory_peak_bytes: u.memory_peak_bytes,
                bytes_in: u.bytes_in,
                bytes_out: u.bytes_out,
                ended: u.ended,
                exit: u.exit,
            })
        })
        .collect()
}

#[cfg(all(test, feature = "dev"))]
mod tests {
    use super::super::testutil::open_node;
    use super::*;

    const H: i64 = 3_600_000;

    fn cursor(job: &str, from_ms: i64) -> JobCursor {
        JobCursor {
            lease: "lease-1".into(),
            job: job.into(),
            tenant: "acme".into(),
            from_ms,
            cpu_ns: 0,
            bytes_in: 0,
            bytes_out: 0,
            memory_peak_bytes: 0,
        }
    }

    fn sample(cpu_ns: u64) -> JobSample {
        JobSample {
            cpu_ns,
            bytes_in: 10,
            bytes_out: 20,
            memory_bytes: 1 << 20,
        }
    }

    fn record(node: &Node, id: u64) -> Record {
        let leaf = node.with_ledger(|l| l.record(id)).unwrap().unwrap();
        serde_json::from_slice(&leaf).unwrap()
    }

    fn job_usage(node: &Node, id: u64) -> JobUsageRecord {
        match record(node, id) {
            Record::JobUsage(j) => j,
            other => panic!("record {id} is {other:?}"),
        }
    }

    #[test]
    fn jobs_are_recorded_per_hour_and_at_their_end() {
        let dir = tempfile::tempdir().unwrap();
        let node = open_node(dir.path());
        let t0 = 1000 * H + H / 2;
        node.start_job_metering(cursor("job-1", t0)).unwrap();
        // Again, as after a restart: the stored cursor stays.
        node.start_job_metering(cursor("job-1", t0 + 5)).unwrap();
        assert_eq!(node.job_cursor("job-1").unwrap().unwrap().from_ms, t0);
        let mut other = cursor("job-1", t0);
        other.lease = "lease-2".into();
        assert!(matches!(
            node.start_job_metering(other),
            Err(NodeError::Conflict(_))
        ));
        // Inside the hour: nothing written, however often.
        let size = node.with_ledger(|l| l.size());
        for _ in 0..3 {
            assert!(node
                .meter_job_at("job-1", &sample(500), None, t0 + 1000)
                .unwrap()
                .is_empty());
        }
        assert_eq!(node.with_ledger(|l| l.size()), size);
        assert_eq!(node.job_cursor("job-1").unwrap().unwrap().from_ms, t0);
        // Across two boundaries: one record per completed hour, ids = leaf indices.
        let ids = node
            .meter_job_at("job-1", &sample(5_000), None, t0 + 2 * H)
            .unwrap();
        assert_eq!(ids, vec![size, size + 1]);
        let (a, b) = (job_usage(&node, size), job_usage(&node, size + 1));
        assert_eq!(
            (a.id, a.node.as_str(), a.job.as_str()),
            (size, "node-1", "job-1")
        );
        assert_eq!(
            (a.start.as_str(), a.end.as_str()),
            (rfc3339_ms(t0).as_str(), rfc3339_ms(1001 * H).as_str())
        );
        assert_eq!((a.cpu_ns, b.cpu_ns), (1_250, 2_500));
        let c = node.job_cursor("job-1").unwrap().unwrap();
        assert_eq!((c.from_ms, c.cpu_ns), (1002 * H, 3_750));
        // The same reading again: nothing new.
        assert!(node
            .meter_job_at("job-1", &sample(5_000), None, t0 + 2 * H)
            .unwrap()
            .is_empty());
        // The end: the rest, and the cursor is gone.
        let ids = node
            .meter_job_at(
                "job-1",
                &sample(6_000),
                Some("exited 0".into()),
                t0 + 2 * H + 1,
            )
            .unwrap();
        assert_eq!(ids, vec![size + 2]);
        let end = job_usage(&node, size + 2);
        assert!(end.ended);
        assert_eq!((end.cpu_ns, end.exit.as_deref()), (2_250, Some("exited 0")));
        assert_eq!(a.cpu_ns + b.cpu_ns + end.cpu_ns, 6_000);
        assert_eq!(node.job_cursor("job-1").unwrap(), None);
        assert!(matches!(
            node.meter_job("job-1", &sample(7_000), None),
            Err(NodeError::NotFound(_))
        ));
    }

    #[test]
    fn scratch_erasures_are_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let node = open_node(dir.path());
        let size = node.with_ledger(|l| l.size());
        let id = node
            .record_scratch_erased("acme", "lease-1", 4096, true)
            .unwrap();
        assert_eq!(id, size);
        let Record::ScratchErased(e) = record(&node, id) else {
            panic!("not a scratch erasure");
        };
        assert_eq!(
            (e.tenant.as_str(), e.lease.as_str(), e.bytes, e.files_busy),
            ("acme", "lease-1", 4096, true)
        );
        assert!(crate::clock::parse_time_ms(&e.at).is_ok(), "{}", e.at);
    }

    #[test]
    fn transfers_are_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let node = open_node(dir.path());
        let size = node.with_ledger(|l| l.size());
        let mut facts = TransferFacts {
            tenant: "acme".into(),
            lease: "lease-1".into(),
            direction: "out",
            bytes: 0,
            complete: false,
            client: "192.0.2.7".into(),
            decision: TransferDecision {
                allowed: false,
                policy_digest: "sha256:00".into(),
                rules: vec!["r1".into()],
                reasons: vec!["denied: because".into()],
            },
        };
        assert_eq!(node.record_transfer(&facts).unwrap(), size);
        (facts.direction, facts.bytes, facts.complete) = ("in", 4096, true);
        facts.decision = TransferDecision::upload("sha256:00");
        assert_eq!(node.record_transfer(&facts).unwrap(), size + 1);
        let Record::Transfer(deny) = record(&node, size) else {
            panic!("not a transfer");
        };
        assert_eq!(
            (
                deny.direction.as_str(),
                deny.bytes,
                deny.complete,
                deny.decision.as_str()
            ),
            ("out", 0, false, "deny")
        );
        assert_eq!(
            (deny.rules, deny.client.as_str()),
            (vec!["r1".to_owned()], "192.0.2.7")
        );
        assert!(crate::clock::parse_time_ms(&deny.at).is_ok(), "{}", deny.at);
        let Record::Transfer(up) = record(&node, size + 1) else {
            panic!("not a transfer");
        };
        assert_eq!(
            (
                up.direction.as_str(),
                up.bytes,
                up.complete,
                up.decision.as_str()
            ),
            ("in", 4096, true, "allow")
        );
        assert!(up.rules.is_empty());
        // Every record the node writes passes the auditor's checks.
        for id in [size, size + 1] {
            let leaf = node.with_ledger(|l| l.record(id)).unwrap().unwrap();
            let mut totals = auditor::check::Totals::default();
            auditor::check::check_record_line(id, &leaf, &mut totals).unwrap();
        }
        facts.lease = "../x".into();
        assert!(matches!(
            node.record_transfer(&facts),
            Err(NodeError::BadRequest(_))
        ));
    }

    /// Writes ahead and appends the hour of `job-1` from `t0` (its cursor started there), and
    /// stops before the intent is applied, as a crash or a failed state write would. Returns
    /// the records' first id.
    fn append_without_applying(node: &Node, t0: i64) -> u64 {
        node.start_job_metering(cursor("job-1", t0)).unwrap();
        let key = LeasesKey::JobCursor { job: "job-1" }.key();
        let c = node.job_cursor("job-1").unwrap().unwrap();
        let (usages, next) = cut(&c, &sample(1_000), t0 + H + 10, None);
        let start = node.ledger_next_hint();
        let leaves = job_usage_records("node-1", start, usages)
            .iter()
            .map(super::super::commit::leaf_text)
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let intent: super::super::commit::Intent = serde_json::from_value(serde_json::json!({
            "start": start,
            "leaves": leaves,
            "puts": [[key, serde_json::to_value(next.unwrap()).unwrap()]],
            "removes": [],
        }))
        .unwrap();
        node.write_ahead_and_append(&intent).unwrap();
        start
    }

    /// Records appended whose cursor move did not land, with the node still running (signing
    /// the checkpoint or storing the state failed after the append): the next commit
    /// completes that intent and is refused, so the next round starts from the moved cursor
    /// and the span is not metered twice.
    #[test]
    fn an_append_whose_state_change_failed_is_completed_not_repeated() {
        let dir = tempfile::tempdir().unwrap();
        let t0 = 1000 * H;
        let node = open_node(dir.path());
        let start = append_without_applying(&node, t0);
        // The cursor has not moved: a round now would cut the same hour again.
        assert_eq!(node.job_cursor("job-1").unwrap().unwrap().from_ms, t0);
        assert!(matches!(
            node.meter_job_at("job-1", &sample(1_000), None, t0 + H + 10),
            Err(NodeError::Unavailable(_))
        ));
        assert_eq!(node.job_cursor("job-1").unwrap().unwrap().from_ms, t0 + H);
        assert!(node
            .meter_job_at("job-1", &sample(1_000), None, t0 + H + 10)
            .unwrap()
            .is_empty());
        assert_eq!(node.with_ledger(|l| l.size()), start + 1);
    }

    /// A crash after the records were appended but before the cursor moved: reopening
    /// completes the intent, so the cursor moves and the next cut does not repeat the span.
    #[test]
    fn a_crash_between_append_and_cursor_neither_repeats_nor_loses() {
        let dir = tempfile::tempdir().unwrap();
        let t0 = 1000 * H;
        let size = {
            let node = open_node(dir.path());
            let start = append_without_applying(&node, t0);
            node.flush().unwrap();
            start
        };
        let node = open_node(dir.path());
        assert_eq!(node.with_ledger(|l| l.size()), size + 1);
        assert_eq!(node.job_cursor("job-1").unwrap().unwrap().from_ms, t0 + H);
        assert!(node
            .meter_job_at("job-1", &sample(1_000), None, t0 + H + 10)
            .unwrap()
            .is_empty());
    }
}
