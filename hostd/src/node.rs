//! The node service: tenants, leases and metering over the store, the GPUs and the ledger.
//!
//! Every mutation runs under one lock (`write`) and is durable before it returns. Usage
//! records reach the ledger through a write-ahead *intent* kept in the same sled tree as the
//! leases and meter cursors: the intent holds the records (whose ids are their future leaf
//! indices) and the state changes they imply. After a crash, [`Node::open`] finds the intent
//! and, by comparing its ids with the ledger's size, knows exactly whether the records were
//! appended — so a record is never lost and never written twice, and a GPU-hour is never
//! billed twice.

use crate::clock::{rfc3339_ms, Clock};
use crate::config::Config;
use crate::gpu::{GpuError, GpuInfo, Gpus};
use crate::lease::{self, Candidate, Lease, LeaseState, LeasedGpu, NewLease};
use crate::ledger::Ledger;
use crate::meter::{Anomaly, Cursor, Reading, Usage};
use crate::record::{amount_paise, Record, UsageRecord, RECORD_VERSION};
use crate::residency::{PlaceRequest, Residency};
use crate::store::{JsonTree, Store, StoreError};
use crate::tenant::{validate_id, NewTenant, Tenant, TenantStatus};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use tracing::{error, info, warn};

/// After this many consecutive failed samples a GPU is declared faulty and its metering
/// stops at the last good sample.
const MAX_CONSECUTIVE_ERRORS: u32 = 3;

/// Errors the API turns into status codes.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("placement denied by residency policy")]
    Denied {
        policy_digest: String,
        reasons: Vec<String>,
    },
    #[error("{0}")]
    Unavailable(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<StoreError> for NodeError {
    fn from(e: StoreError) -> Self {
        NodeError::Internal(e.to_string())
    }
}

/// Counters exported on `/metrics`.
#[derive(Debug, Default)]
pub struct Stats {
    pub ticks: AtomicU64,
    pub samples: AtomicU64,
    pub sample_errors: AtomicU64,
    pub energy_anomalies: AtomicU64,
    pub records: AtomicU64,
}

/// A pending ledger append and the state it commits, written before the append.
#[derive(Debug, Serialize, Deserialize)]
struct Intent {
    start: u64,
    leaves: Vec<String>,
    puts: Vec<(String, serde_json::Value)>,
    removes: Vec<String>,
}

pub struct Node {
    cfg: Config,
    clock: Clock,
    store: Store,
    tenants: JsonTree,
    /// Leases (`lease/<id>`), meter cursors (`cursor/<lease>/<gpu>`) and the `intent`.
    leases: JsonTree,
    ledger: Mutex<Ledger>,
    gpus: Gpus,
    residency: Residency,
    write: Mutex<()>,
    pub stats: Stats,
}

fn lease_key(id: &str) -> String {
    format!("lease/{id}")
}

fn cursor_key(lease: &str, gpu: &str) -> String {
    format!("cursor/{lease}/{gpu}")
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock cannot leave sled or the ledger half-written (their
    // writes are atomic), so continuing with the inner value is sound.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn internal(context: &str, e: impl std::fmt::Display) -> NodeError {
    NodeError::Internal(format!("{context}: {e}"))
}

impl Node {
    /// Opens the node's state and finishes any append a crash interrupted.
    pub fn open(
        cfg: Config,
        clock: Clock,
        store: Store,
        ledger: Ledger,
        gpus: Gpus,
        residency: Residency,
    ) -> Result<Node, NodeError> {
        let node = Node {
            tenants: store.tree("tenants")?,
            leases: store.tree("leases")?,
            cfg,
            clock,
            store,
            ledger: Mutex::new(ledger),
            gpus,
            residency,
            write: Mutex::new(()),
            stats: Stats::default(),
        };
        node.recover()?;
        Ok(node)
    }

    /// Makes every write durable (shutdown).
    pub fn flush(&self) -> Result<(), NodeError> {
        self.store.flush()?;
        Ok(())
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    pub fn gpus(&self) -> &Gpus {
        &self.gpus
    }

    pub fn residency(&self) -> &Residency {
        &self.residency
    }

    /// Runs `f` with the ledger locked (reads: checkpoint, receipts, records).
    pub fn with_ledger<R>(&self, f: impl FnOnce(&Ledger) -> R) -> R {
        f(&lock(&self.ledger))
    }

    fn recover(&self) -> Result<(), NodeError> {
        let _w = lock(&self.write);
        let Some(intent) = self.leases.get::<Intent>("intent")? else {
            return Ok(());
        };
        let n = intent.leaves.len() as u64;
        let size = lock(&self.ledger).size();
        if size == intent.start {
            info!(
                start = intent.start,
                records = n,
                "completing an interrupted ledger append"
            );
            let leaves: Vec<Vec<u8>> = intent
                .leaves
                .iter()
                .map(|l| l.clone().into_bytes())
                .collect();
            lock(&self.ledger)
                .append(&leaves)
                .map_err(|e| internal("ledger append", e))?;
        } else if size != intent.start + n {
            return Err(NodeError::Internal(format!(
                "state and ledger disagree: a pending append of records {}..{} but the ledger holds {size} records; refusing to guess — restore the state directory from backup",
                intent.start,
                intent.start + n
            )));
        }
        self.apply_intent(&intent)?;
        Ok(())
    }

    fn apply_intent(&self, intent: &Intent) -> Result<(), NodeError> {
        self.apply_intent_with(intent, true)
    }

    fn apply_intent_with(&self, intent: &Intent, durable: bool) -> Result<(), NodeError> {
        let mut ops: Vec<(String, Option<&serde_json::Value>)> = Vec::new();
        for (k, v) in &intent.puts {
            ops.push((k.clone(), Some(v)));
        }
        for k in &intent.removes {
            ops.push((k.clone(), None));
        }
        ops.push(("intent".into(), None));
        self.leases.apply(&ops)?;
        if durable {
            self.store.flush()?;
        }
        Ok(())
    }

    /// Appends `usages` as records (ids = leaf indices) together with the state changes,
    /// crash-safely. Returns the record ids.
    fn commit(
        &self,
        usages: &[(Usage, &Lease)],
        cursors: &mut BTreeMap<String, Cursor>,
        mut puts: Vec<(String, serde_json::Value)>,
        removes: Vec<String>,
    ) -> Result<Vec<u64>, NodeError> {
        let start = lock(&self.ledger).next_index();
        let mut leaves = Vec::with_capacity(usages.len());
        let mut ids = Vec::with_capacity(usages.len());
        for (i, (u, lease)) in usages.iter().enumerate() {
            let id = start + i as u64;
            let key = cursor_key(&u.lease, &u.gpu_uuid);
            let prev = cursors.get(&key).and_then(|c| c.prev_record);
            let gpu_ms = u64::try_from(u.end_ms - u.start_ms).unwrap_or(0);
            let rec = Record::Usage(UsageRecord {
                v: RECORD_VERSION,
                id,
                node: self.cfg.node.name.clone(),
                tenant: lease.tenant.clone(),
                lease: lease.id.clone(),
                gpu_uuid: u.gpu_uuid.clone(),
                gpu_model: u.gpu_model.clone(),
                start: rfc3339_ms(u.start_ms),
                end: rfc3339_ms(u.end_ms),
                gpu_ms,
                gpu_seconds: gpu_ms as f64 / 1000.0,
                energy_joules: u.energy_joules,
                peak_memory_bytes: u.peak_memory_bytes,
                mean_utilization_pct: u.mean_utilization_pct,
                rate_paise_per_hour: lease.rate_paise_per_hour,
                amount_paise: amount_paise(gpu_ms, lease.rate_paise_per_hour),
                policy_digest: lease.policy_digest.clone(),
                prev,
            });
            if let Some(c) = cursors.get_mut(&key) {
                c.prev_record = Some(id);
            }
            leaves.push(String::from_utf8_lossy(&rec.to_leaf()).into_owned());
            ids.push(id);
        }
        for (k, c) in cursors.iter().filter(|(k, _)| !removes.contains(k)) {
            puts.push((
                k.clone(),
                serde_json::to_value(c).map_err(|e| internal("cursor", e))?,
            ));
        }
        let intent = Intent {
            start,
            leaves,
            puts,
            removes,
        };
        if !intent.leaves.is_empty() {
            self.leases.put("intent", &intent)?;
            self.store.flush()?;
            let bytes: Vec<Vec<u8>> = intent
                .leaves
                .iter()
                .map(|l| l.clone().into_bytes())
                .collect();
            lock(&self.ledger)
                .append(&bytes)
                .map_err(|e| internal("ledger append", e))?;
            self.stats
                .records
                .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        }
        // Cursor-only updates (plain accumulation) need no fsync: a cursor lost in a crash
        // only loses utilization statistics, never GPU time or energy (the energy baseline
        // is saved with the accumulated energy). Records, lease changes and removals do.
        let durable = !intent.leaves.is_empty()
            || !intent.removes.is_empty()
            || intent.puts.iter().any(|(k, _)| k.starts_with("lease/"));
        self.apply_intent_with(&intent, durable)?;
        Ok(ids)
    }

    // ---- tenants ----

    pub fn create_tenant(&self, req: NewTenant) -> Result<Tenant, NodeError> {
        req.validate().map_err(NodeError::BadRequest)?;
        let _w = lock(&self.write);
        if self.tenants.get::<Tenant>(&req.id)?.is_some() {
            return Err(NodeError::Conflict(format!(
                "tenant {} already exists",
                req.id
            )));
        }
        let t = Tenant {
            id: req.id,
            name: req.name,
            jurisdiction: req.jurisdiction,
            contact: req.contact,
            status: TenantStatus::Active,
            created: rfc3339_ms(self.clock.now_ms()),
        };
        self.tenants.put(&t.id, &t)?;
        self.store.flush()?;
        info!(tenant = %t.id, "tenant created");
        Ok(t)
    }

    pub fn tenants(&self) -> Result<Vec<Tenant>, NodeError> {
        Ok(self.tenants.all()?)
    }

    pub fn tenant(&self, id: &str) -> Result<Tenant, NodeError> {
        self.tenants
            .get(id)?
            .ok_or_else(|| NodeError::NotFound(format!("no tenant {id}")))
    }

    pub fn suspend_tenant(&self, id: &str) -> Result<Tenant, NodeError> {
        let _w = lock(&self.write);
        let mut t = self.tenant(id)?;
        t.status = TenantStatus::Suspended;
        self.tenants.put(id, &t)?;
        self.store.flush()?;
        warn!(tenant = %id, "tenant suspended");
        Ok(t)
    }

    // ---- GPUs ----

    pub fn inventory(&self) -> Result<Vec<GpuInfo>, NodeError> {
        self.gpus
            .inventory()
            .map_err(|e| NodeError::Unavailable(format!("GPU inventory: {e}")))
    }

    // ---- leases ----

    pub fn leases(&self) -> Result<Vec<Lease>, NodeError> {
        Ok(self.leases.scan("lease/")?)
    }

    pub fn lease(&self, id: &str) -> Result<Lease, NodeError> {
        self.leases
            .get(&lease_key(id))?
            .ok_or_else(|| NodeError::NotFound(format!("no lease {id}")))
    }

    pub fn create_lease(&self, req: NewLease) -> Result<Lease, NodeError> {
        let tenant = self.tenant(&req.tenant)?;
        if tenant.status != TenantStatus::Active {
            return Err(NodeError::Conflict(format!(
                "tenant {} is suspended",
                tenant.id
            )));
        }
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
        let decision = self
            .residency
            .check_place(&PlaceRequest {
                tenant: &tenant,
                classification: &req.classification,
                dataset: req.dataset.as_deref(),
                node_name: &self.cfg.node.name,
                node_jurisdiction: &self.cfg.node.jurisdiction,
                node_facility: &self.cfg.node.facility,
            })
            .map_err(NodeError::BadRequest)?;
        if !decision.allowed {
            warn!(tenant = %tenant.id, reasons = ?decision.reasons, "placement denied by policy");
            return Err(NodeError::Denied {
                policy_digest: decision.policy_digest,
                reasons: decision.reasons,
            });
        }
        let inventory = self.inventory()?;
        let candidates: Vec<Candidate> = inventory
            .iter()
            .filter(|g| g.is_healthy())
            .map(|g| Candidate {
                uuid: g.uuid.clone(),
                model: g.model.clone(),
                index: g.index,
            })
            .collect();

        let _w = lock(&self.write);
        let all = self.leases()?;
        let live: Vec<&Lease> = all
            .iter()
            .filter(|l| l.state == LeaseState::Active)
            .collect();
        // A GPU that failed in an earlier lease is not handed out again until it is back
        // in the inventory under a reset; exclude faulted ones seen in any lease.
        let faulted: Vec<&str> = all
            .iter()
            .flat_map(|l| l.gpus.iter())
            .filter(|g| g.fault.is_some())
            .map(|g| g.uuid.as_str())
            .collect();
        let healthy: Vec<Candidate> = candidates
            .into_iter()
            .filter(|c| !faulted.contains(&c.uuid.as_str()))
            .collect();
        let gpus = lease::allocate(&healthy, &live, &req.model, req.gpus).map_err(|e| match e {
            lease::AllocError::NotEnough { .. } => NodeError::Conflict(e.to_string()),
            _ => NodeError::BadRequest(e.to_string()),
        })?;
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
        let lease_json = serde_json::to_value(&lease).map_err(|e| internal("lease", e))?;
        let mut values = vec![(lease_key(&id), lease_json)];
        for g in &lease.gpus {
            let energy = self
                .gpus
                .sample(&g.uuid)
                .ok()
                .and_then(|s| s.total_energy_mj);
            let c = Cursor::start(&id, &g.uuid, &g.model, now, energy);
            values.push((
                cursor_key(&id, &g.uuid),
                serde_json::to_value(&c).map_err(|e| internal("cursor", e))?,
            ));
        }
        let ops: Vec<(String, Option<&serde_json::Value>)> =
            values.iter().map(|(k, v)| (k.clone(), Some(v))).collect();
        self.leases.apply(&ops)?;
        self.store.flush()?;
        info!(tenant = %lease.tenant, lease = %id, gpus = ?lease.gpus.iter().map(|g| &g.uuid).collect::<Vec<_>>(), "lease started");
        Ok(lease)
    }

    fn cursors_of(&self, lease: &Lease) -> Result<BTreeMap<String, Cursor>, NodeError> {
        let mut out = BTreeMap::new();
        for c in self
            .leases
            .scan::<Cursor>(&format!("cursor/{}/", lease.id))?
        {
            out.insert(cursor_key(&c.lease, &c.gpu_uuid), c);
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
            vec![(lease_key(id), lease_json)],
            removes,
        )?;
        info!(tenant = %lease.tenant, lease = %id, records = ids.len(), "lease ended");
        Ok((lease, ids))
    }

    /// One metering round: sample every GPU of every active lease and write the usage
    /// intervals that closed (hour boundaries, lost GPUs).
    pub fn meter_tick(&self) -> Result<usize, NodeError> {
        let _w = lock(&self.write);
        self.stats.ticks.fetch_add(1, Ordering::Relaxed);
        let leases: Vec<Lease> = self
            .leases()?
            .into_iter()
            .filter(|l| l.state == LeaseState::Active)
            .collect();
        let mut all_cursors = BTreeMap::new();
        let mut usages: Vec<(Usage, String)> = Vec::new();
        let mut changed_leases: BTreeMap<String, Lease> = BTreeMap::new();
        let mut removes = Vec::new();
        for lease in &leases {
            for (key, mut c) in self.cursors_of(lease)? {
                let now = self.clock.now_ms();
                match self.gpus.sample(&c.gpu_uuid) {
                    Ok(s) => {
                        self.stats.samples.fetch_add(1, Ordering::Relaxed);
                        let (closed, anomaly) = c.observe(Reading {
                            at_ms: now,
                            energy_mj: s.total_energy_mj,
                            utilization_pct: s.utilization_pct,
                            memory_used_bytes: s.memory_used_bytes,
                        });
                        if let Some(Anomaly::EnergyBackwards {
                            previous_mj,
                            now_mj,
                        }) = anomaly
                        {
                            self.stats.energy_anomalies.fetch_add(1, Ordering::Relaxed);
                            warn!(tenant = %lease.tenant, lease = %lease.id, gpu = %c.gpu_uuid, previous_mj, now_mj,
                                "GPU energy counter went backwards; interval energy not charged, counter re-based");
                        }
                        usages.extend(closed.into_iter().map(|u| (u, lease.id.clone())));
                        all_cursors.insert(key, c);
                    }
                    Err(e) => {
                        self.stats.sample_errors.fetch_add(1, Ordering::Relaxed);
                        c.consecutive_errors += 1;
                        let lost = matches!(e, GpuError::Lost { .. });
                        if lost || c.consecutive_errors >= MAX_CONSECUTIVE_ERRORS {
                            error!(tenant = %lease.tenant, lease = %lease.id, gpu = %c.gpu_uuid, error = %e,
                                "GPU failed; metering stopped at its last good sample");
                            let end = c.last_sample_ms;
                            usages.extend(c.close(end).into_iter().map(|u| (u, lease.id.clone())));
                            let l = changed_leases
                                .entry(lease.id.clone())
                                .or_insert_with(|| lease.clone());
                            for g in l.gpus.iter_mut().filter(|g| g.uuid == c.gpu_uuid) {
                                g.fault = Some(format!("{e} (at {})", rfc3339_ms(now)));
                            }
                            removes.push(key.clone());
                            all_cursors.insert(key, c);
                        } else {
                            warn!(tenant = %lease.tenant, lease = %lease.id, gpu = %c.gpu_uuid, error = %e,
                                attempt = c.consecutive_errors, "GPU sample failed");
                            all_cursors.insert(key, c);
                        }
                    }
                }
            }
        }
        let by_id: BTreeMap<&str, &Lease> = leases.iter().map(|l| (l.id.as_str(), l)).collect();
        let pairs: Vec<(Usage, &Lease)> = usages
            .into_iter()
            .filter_map(|(u, lid)| {
                let l = changed_leases
                    .get(&lid)
                    .or_else(|| by_id.get(lid.as_str()).copied())?;
                Some((u, l))
            })
            .collect();
        let n = pairs.len();
        let mut puts = Vec::new();
        for (id, l) in &changed_leases {
            puts.push((
                lease_key(id),
                serde_json::to_value(l).map_err(|e| internal("lease", e))?,
            ));
        }
        self.commit(&pairs, &mut all_cursors, puts, removes)?;
        Ok(n)
    }
}

/// The ledger's records, checked against its signed checkpoint.
pub struct VerifiedLedger {
    pub leaves: Vec<Vec<u8>>,
    /// The signed checkpoint note the leaves were verified against.
    pub checkpoint: String,
}

impl Node {
    /// Reads every record and recomputes the Merkle root, refusing to answer from a ledger
    /// that does not match its own signed checkpoint (a tampered state directory).
    pub fn verified_ledger(&self) -> Result<VerifiedLedger, NodeError> {
        use attest::checkpoint::open_checkpoint;
        use attest::log::RootBuilder;
        use attest::note::NoteVerifier;
        let (note, vkey, leaves) = self
            .with_ledger(|l| -> Result<_, String> {
                let note = l.checkpoint_note().to_string();
                let leaves = l
                    .records(0..l.size())
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| e.to_string())?;
                Ok((note, l.vkey(), leaves))
            })
            .map_err(|e| internal("reading the ledger", e))?;
        let verifier = NoteVerifier::parse(&vkey).map_err(|e| internal("ledger vkey", e))?;
        let cp = open_checkpoint(&note, &verifier)
            .map_err(|e| internal("ledger checkpoint does not verify", e))?;
        if cp.size != leaves.len() as u64 {
            return Err(NodeError::Internal(format!(
                "ledger holds {} records but its signed checkpoint says {}",
                leaves.len(),
                cp.size
            )));
        }
        let mut b = RootBuilder::new();
        for leaf in &leaves {
            b.push(leaf).map_err(|e| internal("ledger", e))?;
        }
        if b.root() != cp.root {
            return Err(NodeError::Internal(
                "ledger records do not match the signed checkpoint's root: the state directory was tampered with".into(),
            ));
        }
        Ok(VerifiedLedger {
            leaves,
            checkpoint: note,
        })
    }
}

fn new_lease_id() -> Result<String, NodeError> {
    use rand_core::{OsRng, RngCore};
    let mut b = [0u8; 6];
    OsRng
        .try_fill_bytes(&mut b)
        .map_err(|e| internal("random lease id", e))?;
    let id = format!("lease-{}", hex::encode(b));
    validate_id("lease", &id).map_err(NodeError::Internal)?;
    Ok(id)
}

/// Whether a lease's GPU is held by it: used by the API to mark GPUs in the inventory.
pub fn holder<'a>(leases: &'a [Lease], uuid: &str) -> Option<&'a Lease> {
    leases.iter().find(|l| {
        l.state == LeaseState::Active && l.gpus.iter().any(|g: &LeasedGpu| g.uuid == uuid)
    })
}
