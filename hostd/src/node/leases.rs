//! Leases: placement under the residency policy, exclusive GPU allocation, and ending.

use super::*;
use attest::report::report;
use std::collections::BTreeSet;

/// Leases read from the table at a time when a page of them is listed.
const LEASE_SCAN: usize = 512;

/// What the node keeps in memory about its leases so that the frequent readers (metering every
/// tick, placement, `/metrics`, `/v1/gpus`) read the active leases rather than every lease it
/// ever had, which grows for as long as the node runs.
///
/// Built from the whole lease table when the node opens (which reads it anyway), then kept as
/// a superset: an id is added before its lease is written, and removed only once it is read
/// as ended; a GPU is added when metering marks it faulty, before that is written. So a
/// failed write can make it name a lease that is not active (skipped when read) or hold back
/// a GPU that did not fail (until the next start), never miss an active lease or a failed GPU.
#[derive(Debug, Default)]
pub(super) struct LeaseIndex {
    /// Every active lease, and perhaps some that have ended since.
    maybe_active: BTreeSet<String>,
    /// Every GPU that failed in a lease: not leased again.
    faulted: BTreeSet<String>,
}

impl LeaseIndex {
    pub(super) fn of(leases: &[Lease]) -> LeaseIndex {
        LeaseIndex {
            maybe_active: leases
                .iter()
                .filter(|l| l.state == LeaseState::Active)
                .map(|l| l.id.clone())
                .collect(),
            faulted: faulted_gpus(leases.iter()),
        }
    }

    pub(super) fn mark_faulted(&mut self, uuid: &str) {
        self.faulted.insert(uuid.to_owned());
    }
}

fn faulted_gpus<'a>(leases: impl Iterator<Item = &'a Lease>) -> BTreeSet<String> {
    leases
        .flat_map(|l| l.gpus.iter())
        .filter(|g| g.fault.is_some())
        .map(|g| g.uuid.clone())
        .collect()
}

impl Node {
    /// Every lease the node ever had, in id order (the API's list, the start's checks).
    pub fn leases(&self) -> Result<Vec<Lease>, NodeError> {
        Ok(self.leases.scan(LEASE_PREFIX)?)
    }

    /// At most `limit` of the leases in `state` (any when `None`) that `keep` keeps whose id
    /// comes after `after`, in id order, and the `after` of the next page when there may be
    /// more. The active ones alone
    /// (`state`) are read from the [`LeaseIndex`]; otherwise the table is read [`LEASE_SCAN`]
    /// at a time until the page is full, and at most `max_scanned` leases per page: a page
    /// that stops there may be short (even empty) and still have a next one.
    pub fn lease_page(
        &self,
        after: Option<&str>,
        limit: usize,
        state: Option<LeaseState>,
        max_scanned: usize,
        keep: impl Fn(&Lease) -> bool,
    ) -> Result<(Vec<Lease>, Option<String>), NodeError> {
        let want = limit.saturating_add(1);
        let (mut page, stopped_at) = if state == Some(LeaseState::Active) {
            let after = after.unwrap_or_default();
            let active = self.active_leases()?.into_iter();
            let page = active.filter(|l| l.id.as_str() > after && keep(l));
            (page.take(want).collect(), None)
        } else {
            let kept = |l: &Lease| state.is_none_or(|s| l.state == s) && keep(l);
            self.scan_leases(after, want, max_scanned.max(1), &kept)?
        };
        let next = if page.len() > limit {
            page.truncate(limit);
            page.last().map(|l| l.id.clone())
        } else {
            stopped_at
        };
        Ok((page, next))
    }

    /// Up to `want` leases that `keep` keeps after `after`, reading the table a part at a
    /// time, and the id of the last lease read when `max_scanned` stopped it short.
    fn scan_leases(
        &self,
        after: Option<&str>,
        want: usize,
        max_scanned: usize,
        keep: &impl Fn(&Lease) -> bool,
    ) -> Result<(Vec<Lease>, Option<String>), NodeError> {
        let (mut out, mut scanned) = (Vec::new(), 0);
        let mut last = after.map(str::to_owned);
        loop {
            let from = last.as_deref().map(|a| LeasesKey::Lease(a).key());
            let n = LEASE_SCAN.min(max_scanned - scanned);
            let part = self
                .leases
                .scan_page::<Lease>(LEASE_PREFIX, from.as_deref(), n)?;
            let more = part.len() == n;
            for (_, lease) in part {
                scanned += 1;
                last = Some(lease.id.clone());
                if keep(&lease) {
                    out.push(lease);
                    if out.len() == want {
                        return Ok((out, None));
                    }
                }
            }
            if !more {
                return Ok((out, None));
            }
            if scanned == max_scanned {
                return Ok((out, last));
            }
        }
    }

    /// The active leases, in id order, read by id from the [`LeaseIndex`].
    pub fn active_leases(&self) -> Result<Vec<Lease>, NodeError> {
        let ids: Vec<String> = lock(&self.lease_index)
            .maybe_active
            .iter()
            .cloned()
            .collect();
        let mut active = Vec::with_capacity(ids.len());
        let mut ended = Vec::new();
        for id in ids {
            match self.leases.get::<Lease>(&LeasesKey::Lease(&id).key())? {
                Some(l) if l.state == LeaseState::Active => active.push(l),
                Some(_) => ended.push(id),
                // Not written yet (a lease being created is indexed first) or never written
                // (its write failed): kept, since a reader without the write lock may be
                // looking between the two.
                None => {}
            }
        }
        let mut index = lock(&self.lease_index);
        for id in ended {
            index.maybe_active.remove(&id);
        }
        Ok(active)
    }

    /// The active leases, or `None` when the store cannot read them, for readers that go on
    /// without them (`/metrics`) and must not read that as "no leases". The failure is logged
    /// at once and then once a minute with a count.
    pub fn active_leases_if_readable(&self) -> Option<Vec<Lease>> {
        match self.active_leases() {
            Ok(leases) => Some(leases),
            Err(e) => {
                if let Some(n) = self.repeated.hit("lease-table", std::time::Instant::now()) {
                    warn!(
                        error = %report(&e),
                        events = n,
                        "the lease table cannot be read; /metrics omits lease labels and \
                         hostd_leases_active until it can"
                    );
                }
                None
            }
        }
    }

    pub fn lease(&self, id: &str) -> Result<Lease, NodeError> {
        self.leases
            .get(&LeasesKey::Lease(id).key())?
            .ok_or_else(|| NodeError::NotFound(format!("no lease {id}")))
    }

    /// Places a lease: the request is checked, the residency policy decides, free healthy
    /// GPUs are allocated exclusively under the write lock, and the lease with its meter
    /// cursors is durable before it is returned.
    pub fn create_lease(&self, req: NewLease) -> Result<Lease, NodeError> {
        let (tenant, rate) = self.check_lease_request(&req)?;
        let inventory = self.inventory()?;
        let decision = self.place(&tenant, &req, &inventory)?;
        let _w = lock(&self.write);
        let gpus = self.allocate_gpus(&inventory, &req)?;
        let now = self.clock.now_ms();
        let id = new_lease_id()?;
        let lease = Lease {
            id: id.clone(),
            tenant: tenant.id.clone(),
            model: gpus.first().map(|g| g.model.clone()).unwrap_or(req.model),
            gpus,
            classification: req.classification,
            dataset: req.dataset,
            state: LeaseState::Active,
            started_ms: now,
            ended_ms: None,
            started: rfc3339_ms(now),
            ended: None,
            rate_paise_per_hour: rate,
            policy_digest: decision.policy_digest,
            decision: decision.reasons,
        };
        // In the index first: a write that fails after it landed must not leave an active
        // lease unmetered (see `LeaseIndex`).
        lock(&self.lease_index).maybe_active.insert(id.clone());
        self.persist_new_lease(&lease, now)?;
        info!(tenant = %lease.tenant, lease = %id, gpus = ?lease.gpus.iter().map(|g| &g.uuid).collect::<Vec<_>>(), "lease started");
        Ok(lease)
    }

    /// The tenant (active) and the configured rate for the requested model.
    fn check_lease_request(&self, req: &NewLease) -> Result<(Tenant, u64), NodeError> {
        let tenant = self.check_tenant_active(&req.tenant)?;
        if req
            .dataset
            .as_deref()
            .is_some_and(|d| d.is_empty() || d.len() > 128)
        {
            return Err(NodeError::BadRequest(
                "dataset name must be 1-128 characters".into(),
            ));
        }
        let rate = self.cfg.rate_for(&req.model).ok_or_else(|| {
            NodeError::BadRequest(format!(
                "no rate is configured for GPU model {}; ask the operator to add it under [rates]",
                req.model
            ))
        })?;
        Ok((tenant, rate))
    }

    /// The residency policy's decision on placing `req` here; a denial is an error carrying
    /// the policy's digest and reasons.
    fn place(
        &self,
        tenant: &Tenant,
        req: &NewLease,
        inventory: &[GpuInfo],
    ) -> Result<crate::residency::PlaceDecision, NodeError> {
        let attested = self.attestation_for_policy();
        // CC mode of the GPUs this request could get: all of the model's healthy ones.
        let mut of_model = inventory
            .iter()
            .filter(|g| g.is_healthy() && g.model.eq_ignore_ascii_case(&req.model))
            .peekable();
        let cc_mode = of_model.peek().is_some() && of_model.all(|g| g.cc_mode == Some(true));
        let decision = self.residency.check_place(&PlaceRequest {
            tenant,
            classification: &req.classification,
            dataset: req.dataset.as_deref(),
            node_name: &self.cfg.node.name,
            node_jurisdiction: &self.cfg.node.jurisdiction,
            node_facility: &self.cfg.node.facility,
            attestation: attested.status,
            evidence_age_s: attested.age_s,
            image_version: attested.image_version.as_deref(),
            cc_mode,
        });
        if !decision.allowed {
            warn!(tenant = %tenant.id, reasons = ?decision.reasons, "placement denied by policy");
            return Err(NodeError::Denied {
                policy_digest: decision.policy_digest,
                reasons: decision.reasons,
            });
        }
        Ok(decision)
    }

    /// Says which leases have a job still running (the job runner, whenever that changes).
    pub fn set_leases_with_jobs(&self, leases: std::collections::BTreeSet<String>) {
        *lock(&self.leases_with_jobs) = leases;
    }

    /// Free, healthy GPUs of the requested model, never one held by a live lease (active, or
    /// ended with a job still running: stopping takes up to the jobs' stop timeout) or one
    /// that failed in an earlier lease. The caller holds the write lock.
    fn allocate_gpus(
        &self,
        inventory: &[GpuInfo],
        req: &NewLease,
    ) -> Result<Vec<LeasedGpu>, NodeError> {
        let live = self.live_leases()?;
        let live: Vec<&Lease> = live.iter().collect();
        // A GPU that failed in an earlier lease is not handed out again until it is back
        // in the inventory under a reset; exclude faulted ones seen in any lease.
        let faulted = lock(&self.lease_index).faulted.clone();
        let healthy: Vec<Candidate> = inventory
            .iter()
            .filter(|g| g.is_healthy() && !faulted.contains(&g.uuid))
            .map(|g| Candidate {
                uuid: g.uuid.clone(),
                model: g.model.clone(),
                index: g.index,
            })
            .collect();
        lease::allocate(&healthy, &live, &req.model, req.gpus).map_err(|e| match e {
            lease::AllocError::NotEnough { .. } => NodeError::Conflict(report(&e).to_string()),
            _ => NodeError::BadRequest(report(&e).to_string()),
        })
    }

    /// The leases whose GPUs are held: the active ones, and the ended ones whose jobs still
    /// run (as the job runner last said).
    fn live_leases(&self) -> Result<Vec<Lease>, NodeError> {
        let mut live = self.active_leases()?;
        let with_jobs = lock(&self.leases_with_jobs).clone();
        for id in with_jobs {
            if live.iter().any(|l| l.id == id) {
                continue;
            }
            if let Some(l) = self.leases.get::<Lease>(&LeasesKey::Lease(&id).key())? {
                live.push(l);
            }
        }
        Ok(live)
    }

    /// Writes the lease and one meter cursor per GPU (energy baseline from a fresh sample)
    /// in one batch, durably. The caller holds the write lock.
    fn persist_new_lease(&self, lease: &Lease, now: i64) -> Result<(), NodeError> {
        let lease_json = serde_json::to_value(lease).map_err(|e| internal("lease", e))?;
        let mut values = vec![(LeasesKey::Lease(&lease.id).key(), lease_json)];
        for g in &lease.gpus {
            let energy = self
                .gpus
                .sample(&g.uuid)
                .ok()
                .and_then(|s| s.total_energy_mj);
            let c = Cursor::start(&lease.id, &g.uuid, &g.model, now, energy);
            values.push((
                LeasesKey::Cursor {
                    lease: &lease.id,
                    gpu: &g.uuid,
                }
                .key(),
                serde_json::to_value(&c).map_err(|e| internal("cursor", e))?,
            ));
        }
        let ops: Vec<(String, Option<&serde_json::Value>)> =
            values.iter().map(|(k, v)| (k.clone(), Some(v))).collect();
        self.leases.apply(&ops)?;
        self.store.flush()?;
        Ok(())
    }

    pub(super) fn cursors_of(&self, lease: &Lease) -> Result<BTreeMap<String, Cursor>, NodeError> {
        let mut out = BTreeMap::new();
        for c in self.leases.scan::<Cursor>(&cursor_prefix(&lease.id))? {
            out.insert(
                LeasesKey::Cursor {
                    lease: &c.lease,
                    gpu: &c.gpu_uuid,
                }
                .key(),
                c,
            );
        }
        Ok(out)
    }

    /// Ends a lease: takes a final sample, closes every open interval at this instant and
    /// appends the usage records before answering ("switch it off and the bill stops").
    pub fn end_lease(&self, id: &str) -> Result<(Lease, Vec<u64>), NodeError> {
        let _w = lock(&self.write);
        let mut lease = self.lease(id)?;
        if lease.state == LeaseState::Ended {
            return Err(NodeError::Conflict(format!("lease {id} has already ended")));
        }
        let now = self.clock.now_ms();
        let mut cursors = self.cursors_of(&lease)?;
        let mut usages = Vec::new();
        for c in cursors.values_mut() {
            if let Ok(s) = self.gpus.sample(&c.gpu_uuid) {
                let (closed, _) = c.observe(Reading {
                    at_ms: now,
                    energy_mj: s.total_energy_mj,
                    utilization_pct: s.utilization_pct,
                    memory_used_bytes: s.memory_used_bytes,
                });
                usages.extend(closed);
            }
            usages.extend(c.close(now));
        }
        lease.state = LeaseState::Ended;
        lease.ended_ms = Some(now);
        lease.ended = Some(rfc3339_ms(now));
        let pairs: Vec<(Usage, &Lease)> = usages.into_iter().map(|u| (u, &lease)).collect();
        let removes: Vec<String> = cursors.keys().cloned().collect();
        let lease_json = serde_json::to_value(&lease).map_err(|e| internal("lease", e))?;
        let ids = self.commit(
            &pairs,
            &mut cursors,
            vec![(LeasesKey::Lease(id).key(), lease_json)],
            removes,
        )?;
        info!(tenant = %lease.tenant, lease = %id, records = ids.len(), "lease ended");
        Ok((lease, ids))
    }
}

pub(super) fn new_lease_id() -> Result<String, NodeError> {
    use rand_core::{OsRng, RngCore};
    let mut b = [0u8; 6];
    OsRng
        .try_fill_bytes(&mut b)
        .map_err(|e| internal("random lease id", e))?;
    let id = format!("lease-{}", hex::encode(b));
    validate_id("lease", &id).map_err(NodeError::internal)?;
    Ok(id)
}

/// Whether a lease's GPU is held by it: used by the API to mark GPUs in the inventory.
pub fn holder<'a>(leases: &'a [Lease], uuid: &str) -> Option<&'a Lease> {
    leases.iter().find(|l| {
        l.state == LeaseState::Active && l.gpus.iter().any(|g: &LeasedGpu| g.uuid == uuid)
    })
}

#[cfg(all(test, feature = "dev"))]
mod tests {
    use super::super::testutil::open_with_dev_policy as open_node;
    use super::*;

    fn h100(node: &Node) -> Result<Lease, NodeError> {
        node.create_lease(NewLease {
            tenant: "hyd-speech".into(),
            gpus: 1,
            model: "H100".into(),
            classification: "public".into(),
            dataset: None,
        })
    }

    fn ids(leases: &[Lease]) -> Vec<&str> {
        leases.iter().map(|l| l.id.as_str()).collect()
    }

    /// Pages of the table: each kept lease once, in id order, across the table's reads (more
    /// leases than [`LEASE_SCAN`]), for a tenant, and for the active ones from the index.
    #[test]
    fn lease_pages_keep_what_is_asked_once_in_id_order() {
        let dir = tempfile::tempdir().unwrap();
        {
            let node = open_node(dir.path());
            for i in 0..1200 {
                let mut l = lease_like(i);
                l.tenant = ["a", "b"][i % 2].into();
                if i % 3 == 0 {
                    l.state = LeaseState::Active;
                }
                node.leases.put(&LeasesKey::Lease(&l.id).key(), &l).unwrap();
            }
        }
        let node = open_node(dir.path());
        let want = |keep: &dyn Fn(usize) -> bool| -> Vec<String> {
            (0..1200)
                .filter(|&i| keep(i))
                .map(|i| lease_like(i).id)
                .collect()
        };
        let pages = |limit, state, keep: &dyn Fn(&Lease) -> bool| {
            let (mut all, mut after) = (Vec::new(), None::<String>);
            loop {
                let (page, next) = node
                    .lease_page(after.as_deref(), limit, state, usize::MAX, keep)
                    .unwrap();
                assert!(page.len() <= limit);
                all.extend(page.into_iter().map(|l| l.id));
                match next {
                    Some(n) => after = Some(n),
                    None => return all,
                }
            }
        };
        assert_eq!(
            pages(250, None, &|l| l.tenant == "a"),
            want(&|i| i % 2 == 0)
        );
        assert_eq!(pages(1000, None, &|_| true), want(&|_| true));
        let b = |l: &Lease| l.tenant == "b";
        let active_b = want(&|i| i % 2 == 1 && i % 3 == 0);
        assert_eq!(pages(7, Some(LeaseState::Active), &b), active_b);
        let ended_b = want(&|i| i % 2 == 1 && i % 3 != 0);
        assert_eq!(pages(300, Some(LeaseState::Ended), &b), ended_b);
        // After an id that is no lease's: from the next one.
        let after = Some("lease-0000000003ff-");
        let (page, _) = node
            .lease_page(after, 2, None, usize::MAX, |_| true)
            .unwrap();
        assert_eq!(page[0].id, lease_like(0x400).id);
        // Reading at most 100 leases a page: short pages, each lease still once.
        let a = |l: &Lease| l.tenant == "a";
        let (page, next) = node.lease_page(None, 1000, None, 100, a).unwrap();
        assert_eq!((page.len(), next), (50, Some(lease_like(99).id)));
        let (page, next) = node.lease_page(None, 10, None, 100, a).unwrap();
        assert_eq!((page.len(), next), (10, Some(lease_like(18).id)));
        let nobody = |l: &Lease| l.tenant == "c";
        let (page, next) = node.lease_page(None, 10, None, 100, nobody).unwrap();
        assert_eq!((page.len(), next), (0, Some(lease_like(99).id)));
    }

    /// Lease `i` as the table would hold it (ids in the order of `i`).
    fn lease_like(i: usize) -> Lease {
        Lease {
            id: format!("lease-{i:012x}"),
            tenant: "a".into(),
            model: "H100".into(),
            gpus: Vec::new(),
            classification: "public".into(),
            dataset: None,
            state: LeaseState::Ended,
            started_ms: 0,
            ended_ms: None,
            started: String::new(),
            ended: None,
            rate_paise_per_hour: 0,
            policy_digest: String::new(),
            decision: Vec::new(),
        }
    }

    /// The active leases are those not ended, through ends and a restart; a GPU that failed
    /// in a lease, even one long ended, is not leased again after a restart.
    #[test]
    fn the_active_leases_and_failed_gpus_outlive_ends_and_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let node = open_node(dir.path());
        node.create_tenant(NewTenant {
            id: "hyd-speech".into(),
            name: "Hyderabad speech".into(),
            jurisdiction: "IN".into(),
            contact: String::new(),
        })
        .unwrap();
        let (a, b) = (h100(&node).unwrap(), h100(&node).unwrap());
        let mut both = vec![a.id.as_str(), b.id.as_str()];
        both.sort();
        assert_eq!(ids(&node.active_leases().unwrap()), both);
        node.end_lease(&a.id).unwrap();
        assert_eq!(ids(&node.active_leases().unwrap()), [b.id.as_str()]);
        assert!(!lock(&node.lease_index).maybe_active.contains(&a.id));
        // The ended lease's GPU failed while it ran (as metering records it).
        let mut failed = node.lease(&a.id).unwrap();
        failed.gpus[0].fault = Some("GPU is lost".into());
        node.leases
            .put(&LeasesKey::Lease(&a.id).key(), &failed)
            .unwrap();
        drop(node);

        let node = open_node(dir.path());
        assert_eq!(ids(&node.active_leases().unwrap()), [b.id.as_str()]);
        // Four H100s: one held by b, one failed; two more leases, then none.
        let more = [h100(&node).unwrap(), h100(&node).unwrap()];
        assert!(more.iter().all(|l| l.gpus[0].uuid != failed.gpus[0].uuid));
        assert!(matches!(h100(&node), Err(NodeError::Conflict(_))));
        assert_eq!(node.active_leases().unwrap().len(), 3);
    }
}
