//! Leases: placement under the residency policy, exclusive GPU allocation, and ending.

use super::*;
use attest::report::report;

impl Node {
    pub fn leases(&self) -> Result<Vec<Lease>, NodeError> {
        Ok(self.leases.scan(LEASE_PREFIX)?)
    }

    /// The leases, or `None` when the store cannot list them, for readers that go on without
    /// them (`/metrics`) and must not read that as "no leases". The failure is logged at once
    /// and then once a minute with a count.
    pub fn leases_if_readable(&self) -> Option<Vec<Lease>> {
        match self.leases() {
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
        let all = self.leases()?;
        let with_jobs = lock(&self.leases_with_jobs).clone();
        let live: Vec<&Lease> = all
            .iter()
            .filter(|l| l.state == LeaseState::Active || with_jobs.contains(&l.id))
            .collect();
        // A GPU that failed in an earlier lease is not handed out again until it is back
        // in the inventory under a reset; exclude faulted ones seen in any lease.
        let faulted: Vec<&str> = all
            .iter()
            .flat_map(|l| l.gpus.iter())
            .filter(|g| g.fault.is_some())
            .map(|g| g.uuid.as_str())
            .collect();
        let healthy: Vec<Candidate> = inventory
            .iter()
            .filter(|g| g.is_healthy() && !faulted.contains(&g.uuid.as_str()))
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
