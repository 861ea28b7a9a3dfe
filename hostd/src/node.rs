//! The node service: tenants, leases and metering over the store, the GPUs and the ledger.
//!
//! Every mutation runs under one lock (`write`) and is durable before it returns. Usage
//! records reach the ledger through a write-ahead *intent* kept in the same sled tree as the
//! leases and meter cursors: the intent holds the records (whose ids are their future leaf
//! indices) and the state changes they imply. After a crash, [`Node::open`] finds the intent
//! and, by comparing its ids with the ledger's size, knows exactly whether the records were
//! appended — so a record is never lost and never written twice, and a GPU-hour is never
//! billed twice.

use crate::attestation::{unix_now, Attester, Collected};
use crate::clock::{rfc3339_ms, Clock};
use crate::config::Config;
use crate::gpu::{GpuError, GpuInfo, Gpus};
use crate::lease::{self, Candidate, Lease, LeaseState, LeasedGpu, NewLease};
use crate::ledger::Ledger;
use crate::meter::{Anomaly, Cursor, Reading, Usage};
use crate::residency::{PlaceRequest, Residency};
use crate::store::{JsonTree, Store, StoreError};
use attest::ear::{AttestationResult, Status};
use auditor::money::amount_paise;
use auditor::record::{
    AttestationRecord, GpuEventKind, GpuEventRecord, Record, UsageRecord, RECORD_VERSION,
};
use hostd_api::tenant::{validate_id, NewTenant, Tenant, TenantStatus};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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
    /// Too much of a bounded kind of work is in flight; the client should retry shortly.
    #[error("{0}")]
    Busy(String),
    /// A failure of the node itself (store, ledger, serialisation): logged with its whole
    /// source chain under a request id, answered to clients as a bare 500.
    #[error("internal error: {0}")]
    Internal(#[source] InternalError),
}

/// What the node was doing when it failed, and the error that stopped it. Its text may hold
/// state paths and internals, which is why the API never sends it to a client.
#[derive(Debug, thiserror::Error)]
#[error("{context}: {source}")]
pub struct InternalError {
    /// What the node was doing.
    pub context: String,
    /// Why it failed.
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

impl NodeError {
    /// An internal failure without more context than its own message.
    pub fn internal(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> NodeError {
        NodeError::Internal(InternalError {
            context: "internal".into(),
            source: e.into(),
        })
    }
}

impl From<StoreError> for NodeError {
    fn from(e: StoreError) -> Self {
        internal("store", e)
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

/// The attestation facts residency rules are evaluated against.
struct PolicyAttestation {
    status: policy::AttestationStatus,
    /// Seconds since the result was issued; `None` without a result.
    age_s: Option<u64>,
    /// The image version the verifier vouched for; `None` without one.
    image_version: Option<String>,
}

/// A record's leaf bytes as the intent holds them. serde_json writes UTF-8, so this never
/// converts lossily; a record that cannot be serialised is an error, never an empty leaf.
fn leaf_text(rec: &Record) -> Result<String, NodeError> {
    let leaf = rec.to_leaf().map_err(|e| internal("record", e))?;
    String::from_utf8(leaf).map_err(|e| internal("record", e))
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
    attester: Attester,
    /// The latest attestation record (id, verified result); the one usage records point at
    /// and placements are checked against.
    latest_attestation: Mutex<Option<(u64, AttestationResult)>>,
    /// Evidence collections in flight (bounded by [`MAX_CONCURRENT_ATTESTATIONS`]).
    attestations_in_flight: AtomicUsize,
}

/// Evidence collections allowed at once. Each one asks every CC GPU for a signed report, which
/// on real hardware is slow and serialised in the driver; any principal allowed to attest
/// (a tenant with one lease included) must not be able to queue unbounded work on the GPUs.
pub const MAX_CONCURRENT_ATTESTATIONS: usize = 4;

/// A slot among [`MAX_CONCURRENT_ATTESTATIONS`], released on drop.
struct InFlight<'a>(&'a AtomicUsize);

impl<'a> InFlight<'a> {
    fn try_enter(counter: &'a AtomicUsize, max: usize) -> Option<InFlight<'a>> {
        counter
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| InFlight(counter))
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How far in the future an attestation result's `iat` may be (clock skew), seconds.
const MAX_RESULT_SKEW_S: u64 = 300;

/// Key (in the leases tree) of the id of the latest attestation record.
const LATEST_ATTESTATION_KEY: &str = "attestation-latest";
/// Key (in the leases tree) of the last GPU inventory snapshot the metering loop compared.
const GPU_SNAPSHOT_KEY: &str = "gpu-snapshot";

/// What the metering loop remembers of one GPU, to notice changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct GpuState {
    index: u32,
    /// The last UUID the GPU answered with (kept while it does not answer).
    uuid: String,
    healthy: bool,
    cc_mode: Option<bool>,
    driver: String,
}

fn cc_text(c: Option<bool>) -> String {
    match c {
        Some(true) => "on",
        Some(false) => "off",
        None => "unknown",
    }
    .into()
}

/// A change seen in one GPU: what happened, to which GPU, state before and after.
type GpuChange = (GpuEventKind, GpuState, Option<String>, Option<String>);

/// GPU events between two snapshots (by NVML index), and the snapshot to remember next.
fn gpu_changes(prev: &[GpuState], inventory: &[GpuInfo]) -> (Vec<GpuState>, Vec<GpuChange>) {
    let mut next = Vec::new();
    let mut events = Vec::new();
    for g in inventory {
        let old = prev.iter().find(|p| p.index == g.index);
        let mut cur = GpuState {
            index: g.index,
            uuid: g.uuid.clone(),
            healthy: g.is_healthy(),
            cc_mode: g.cc_mode,
            driver: g.driver_version.clone(),
        };
        if cur.uuid.is_empty() {
            cur.uuid = old.map(|o| o.uuid.clone()).unwrap_or_default();
        }
        match old {
            None => events.push((GpuEventKind::Appeared, cur.clone(), None, None)),
            Some(o) if !g.uuid.is_empty() && !o.uuid.is_empty() && o.uuid != g.uuid => {
                events.push((GpuEventKind::Disappeared, o.clone(), None, None));
                events.push((GpuEventKind::Appeared, cur.clone(), None, None));
            }
            Some(o) => {
                let state = |h: bool| Some(if h { "ok" } else { "not answering" }.to_string());
                if o.healthy && !cur.healthy {
                    events.push((GpuEventKind::Lost, cur.clone(), state(true), state(false)));
                } else if !o.healthy && cur.healthy {
                    events.push((
                        GpuEventKind::Recovered,
                        cur.clone(),
                        state(false),
                        state(true),
                    ));
                }
                // An unhealthy snapshot keeps the last good facts, so a GPU that comes back
                // in another CC mode or under another driver is reported too.
                if cur.healthy {
                    if o.cc_mode != cur.cc_mode {
                        events.push((
                            GpuEventKind::CcModeChanged,
                            cur.clone(),
                            Some(cc_text(o.cc_mode)),
                            Some(cc_text(cur.cc_mode)),
                        ));
                    }
                    if o.driver != cur.driver && !cur.driver.is_empty() && !o.driver.is_empty() {
                        events.push((
                            GpuEventKind::DriverChanged,
                            cur.clone(),
                            Some(o.driver.clone()),
                            Some(cur.driver.clone()),
                        ));
                    }
                }
                if !cur.healthy {
                    // Keep the last known good facts, so recovery compares against them.
                    cur.cc_mode = o.cc_mode;
                    cur.driver = o.driver.clone();
                }
            }
        }
        next.push(cur);
    }
    for o in prev {
        if !inventory.iter().any(|g| g.index == o.index) {
            events.push((GpuEventKind::Disappeared, o.clone(), None, None));
        }
    }
    (next, events)
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

fn internal(context: &str, e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> NodeError {
    NodeError::Internal(InternalError {
        context: context.to_owned(),
        source: e.into(),
    })
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
        let attester = Attester::open(&cfg).map_err(|e| internal("attestation", e))?;
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
            attester,
            latest_attestation: Mutex::new(None),
            attestations_in_flight: AtomicUsize::new(0),
        };
        node.recover()?;
        node.load_latest_attestation()?;
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
            return Err(NodeError::internal(format!(
                "state and ledger disagree: a pending append of records {}..{} but the ledger holds {size} records; refusing to guess — restore the state directory from backup",
                intent.start,
                intent.start + n
            )));
        }
        self.apply_intent(&intent)?;
        Ok(())
    }

    /// Makes the intent durable, then appends its records: the order that lets
    /// [`Node::recover`] tell, after a crash, whether the append happened.
    fn write_ahead_and_append(&self, intent: &Intent) -> Result<(), NodeError> {
        if intent.leaves.is_empty() {
            return Ok(());
        }
        self.leases.put("intent", intent)?;
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
                attestation: lock(&self.latest_attestation).as_ref().map(|(id, _)| *id),
            });
            if let Some(c) = cursors.get_mut(&key) {
                c.prev_record = Some(id);
            }
            leaves.push(leaf_text(&rec)?);
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
        self.write_ahead_and_append(&intent)?;
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
        let attested = self.attestation_for_policy();
        let inventory = self.inventory()?;
        // CC mode of the GPUs this request could get: all of the model's healthy ones.
        let mut of_model = inventory
            .iter()
            .filter(|g| g.is_healthy() && g.model.eq_ignore_ascii_case(&req.model))
            .peekable();
        let cc_mode = of_model.peek().is_some() && of_model.all(|g| g.cc_mode == Some(true));
        let decision = self
            .residency
            .check_place(&PlaceRequest {
                tenant: &tenant,
                classification: &req.classification,
                dataset: req.dataset.as_deref(),
                node_name: &self.cfg.node.name,
                node_jurisdiction: &self.cfg.node.jurisdiction,
                node_facility: &self.cfg.node.facility,
                attestation: attested.status,
                evidence_age_s: attested.age_s,
                image_version: attested.image_version.as_deref(),
                cc_mode,
            })
            .map_err(NodeError::BadRequest)?;
        if !decision.allowed {
            warn!(tenant = %tenant.id, reasons = ?decision.reasons, "placement denied by policy");
            return Err(NodeError::Denied {
                policy_digest: decision.policy_digest,
                reasons: decision.reasons,
            });
        }
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
        if let Err(e) = self.watch_gpus() {
            error!(error = %e, "recording GPU state changes failed");
        }
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
            return Err(NodeError::internal(format!(
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
            return Err(NodeError::internal(
                "ledger records do not match the signed checkpoint's root: the state directory was tampered with",
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
    validate_id("lease", &id).map_err(NodeError::internal)?;
    Ok(id)
}

/// Whether a lease's GPU is held by it: used by the API to mark GPUs in the inventory.
pub fn holder<'a>(leases: &'a [Lease], uuid: &str) -> Option<&'a Lease> {
    leases.iter().find(|l| {
        l.state == LeaseState::Active && l.gpus.iter().any(|g: &LeasedGpu| g.uuid == uuid)
    })
}

// ---- attestation ----

impl Node {
    pub fn attester(&self) -> &Attester {
        &self.attester
    }

    /// Fresh evidence answering `nonce`: GPU reports over derived nonces, the active policy
    /// digest and the ledger's latest checkpoint among the measurements.
    pub fn attest(&self, nonce: [u8; 32]) -> Result<Collected, NodeError> {
        use sha2::{Digest, Sha256};
        if self.attester.enrollment().is_none() {
            return Err(NodeError::Unavailable(format!(
                "this node has no enrollment certificate, so it cannot attest; issue one for the node key in {} and set [attestation] enrollment_certificate",
                self.cfg.state.dir.join(crate::attestation::NODE_PUB_FILE).display()
            )));
        }
        let _slot = InFlight::try_enter(&self.attestations_in_flight, MAX_CONCURRENT_ATTESTATIONS)
            .ok_or_else(|| {
                NodeError::Busy(format!(
                    "{MAX_CONCURRENT_ATTESTATIONS} attestations are already being collected on \
                     this node; retry shortly"
                ))
            })?;
        let inventory = self.inventory()?;
        let mut dynamic: Vec<(&str, [u8; 32])> = Vec::new();
        if let Some(p) = self.residency.policy() {
            dynamic.push(("policy", p.digest().0));
        }
        let checkpoint = self.with_ledger(|l| l.checkpoint_note().to_string());
        dynamic.push((
            "ledger.checkpoint",
            Sha256::digest(checkpoint.as_bytes()).into(),
        ));
        self.attester
            .collect(nonce, unix_now(), &self.gpus, &inventory, &dynamic)
            .map_err(|e| internal("collecting evidence", e))
    }

    /// The latest attestation record in force: its id and the verified result.
    pub fn latest_attestation(&self) -> Option<(u64, AttestationResult)> {
        lock(&self.latest_attestation).clone()
    }

    /// What the policy learns from the latest verified attestation result: its status, its
    /// age, and the image version the verifier vouched for. The version comes only from the
    /// result (the reference manifest that matched), never from the node's own say-so; with
    /// no result it is `None`, and rules with `min_image_version` deny.
    fn attestation_for_policy(&self) -> PolicyAttestation {
        use policy::AttestationStatus as P;
        let none = PolicyAttestation {
            status: P::None,
            age_s: None,
            image_version: None,
        };
        let Some((_, r)) = self.latest_attestation() else {
            return none;
        };
        let now = unix_now();
        if r.result.iat > now {
            return none;
        }
        let status = match r.status() {
            Status::Affirming => P::Affirming,
            Status::Warning => P::Warning,
            Status::Contraindicated => P::Contraindicated,
            Status::None => P::None,
        };
        PolicyAttestation {
            status,
            age_s: Some(now - r.result.iat),
            image_version: r.result.image.as_ref().map(|i| i.version.clone()),
        }
    }

    fn load_latest_attestation(&self) -> Result<(), NodeError> {
        let Some(id) = self.leases.get::<u64>(LATEST_ATTESTATION_KEY)? else {
            return Ok(());
        };
        let leaf = self
            .with_ledger(|l| l.record(id))
            .map_err(|e| internal("reading the latest attestation record", e))?
            .ok_or_else(|| {
                NodeError::internal(format!(
                    "state names attestation record {id}, which the ledger does not hold"
                ))
            })?;
        let Ok(Record::Attestation(a)) = serde_json::from_slice::<Record>(&leaf) else {
            return Err(NodeError::internal(format!(
                "state names record {id} as the latest attestation, but it is not one"
            )));
        };
        let r = AttestationResult::from_bytes(a.result.as_bytes())
            .map_err(|e| internal("attestation record", e))?;
        *lock(&self.latest_attestation) = Some((id, r));
        Ok(())
    }

    /// Appends records built from their first id, with `puts` to the leases tree, through
    /// the same crash-safe intent as usage records. The caller holds the write lock.
    fn append_records(
        &self,
        build: impl FnOnce(u64) -> Vec<Record>,
        puts: Vec<(String, serde_json::Value)>,
    ) -> Result<Vec<u64>, NodeError> {
        let start = lock(&self.ledger).next_index();
        let records = build(start);
        let ids: Vec<u64> = records.iter().map(Record::id).collect();
        let intent = Intent {
            start,
            leaves: records.iter().map(leaf_text).collect::<Result<_, _>>()?,
            puts,
            removes: Vec::new(),
        };
        self.write_ahead_and_append(&intent)?;
        self.apply_intent_with(&intent, true)?;
        Ok(ids)
    }

    /// Verifies an attestation result from the control plane (signature by a configured
    /// verifier key, about this node, not older than the one in force) and appends it to the
    /// ledger. Returns the record id.
    pub fn receive_attestation_result(&self, bytes: &[u8]) -> Result<AttestationRecord, NodeError> {
        let keys = self
            .cfg
            .attestation
            .verifier_keys()
            .map_err(NodeError::internal)?;
        if keys.is_empty() {
            return Err(NodeError::Conflict(
                "no verifier keys are configured ([attestation] verifier_keys), so no attestation result can be accepted".into(),
            ));
        }
        let trimmed = bytes.strip_suffix(b"\n").unwrap_or(bytes);
        let result = AttestationResult::from_bytes(trimmed)
            .map_err(|e| NodeError::BadRequest(format!("not an attestation result: {e}")))?;
        result
            .verify_result_signature(&keys)
            .map_err(|e| NodeError::BadRequest(format!("attestation result refused: {e}")))?;
        let ours = self.attester.node_public_key();
        match &result.result.node {
            Some(n) if n.node_public_key == ours => {}
            Some(n) => {
                return Err(NodeError::BadRequest(format!(
                    "attestation result is about node key {}, not this node ({})",
                    hex::encode(n.node_public_key),
                    hex::encode(ours)
                )))
            }
            None => {
                return Err(NodeError::BadRequest(
                    "attestation result names no node (its evidence's enrollment did not verify)"
                        .into(),
                ))
            }
        }
        // A result from the future would never be in force for the policy, yet would block
        // every genuine later result (they must be newer): refuse it.
        let now = unix_now();
        if result.result.iat > now + MAX_RESULT_SKEW_S {
            return Err(NodeError::BadRequest(format!(
                "attestation result issued at {} is more than {MAX_RESULT_SKEW_S} s in the future (now {now}); check the verifier's clock",
                result.result.iat
            )));
        }
        let _w = lock(&self.write);
        if let Some((id, latest)) = self.latest_attestation() {
            if result.result.iat < latest.result.iat
                || (result.result.iat == latest.result.iat
                    && result.result.evidence_digest == latest.result.evidence_digest)
            {
                return Err(NodeError::Conflict(format!(
                    "attestation result issued at {} is not newer than record {id} (issued at {}) already in force",
                    result.result.iat, latest.result.iat
                )));
            }
        }
        let received = rfc3339_ms(self.clock.now_ms());
        let text = String::from_utf8_lossy(trimmed).into_owned();
        let mut made = None;
        let node_name = self.cfg.node.name.clone();
        let ids = self.append_records(
            |id| {
                let rec = AttestationRecord {
                    v: RECORD_VERSION,
                    id,
                    node: node_name,
                    received,
                    status: format!("{:?}", result.status()).to_lowercase(),
                    iat: result.result.iat,
                    evidence_digest: hex::encode(result.result.evidence_digest),
                    verifier_key: hex::encode(result.result.verifier_key),
                    result: text,
                };
                made = Some(rec.clone());
                vec![Record::Attestation(rec)]
            },
            vec![(
                LATEST_ATTESTATION_KEY.into(),
                serde_json::json!(self.ledger_next_hint()),
            )],
        )?;
        let id = ids
            .first()
            .copied()
            .ok_or_else(|| NodeError::internal("no record id"))?;
        let rec = made.ok_or_else(|| NodeError::internal("no record"))?;
        info!(record = id, status = %rec.status, "attestation result appended to the ledger");
        *lock(&self.latest_attestation) = Some((id, result));
        Ok(rec)
    }

    /// The id the next appended record gets.
    fn ledger_next_hint(&self) -> u64 {
        lock(&self.ledger).next_index()
    }

    /// Compares the GPU inventory with the last snapshot and appends a GPU event record per
    /// change (CC mode toggled, GPU lost/recovered/appeared/disappeared, driver changed).
    /// The first snapshot of a node is only remembered. The caller holds the write lock.
    fn watch_gpus(&self) -> Result<(), NodeError> {
        let inventory = match self.gpus.inventory() {
            Ok(i) => i,
            Err(e) => {
                warn!(error = %e, "GPU inventory failed; GPU state changes not checked this round");
                return Ok(());
            }
        };
        let prev: Option<Vec<GpuState>> = self.leases.get(GPU_SNAPSHOT_KEY)?;
        let (next, events) = gpu_changes(prev.as_deref().unwrap_or(&[]), &inventory);
        if prev.as_ref() == Some(&next) {
            return Ok(());
        }
        let snapshot = serde_json::to_value(&next).map_err(|e| internal("GPU snapshot", e))?;
        let Some(_) = prev else {
            self.leases.put(GPU_SNAPSHOT_KEY, &snapshot)?;
            self.store.flush()?;
            return Ok(());
        };
        let at = rfc3339_ms(self.clock.now_ms());
        let node = self.cfg.node.name.clone();
        for (kind, g, from, to) in &events {
            warn!(gpu = %g.uuid, index = g.index, event = ?kind, from = ?from, to = ?to, "GPU state changed");
        }
        self.append_records(
            |start| {
                events
                    .into_iter()
                    .enumerate()
                    .map(|(i, (event, g, from, to))| {
                        Record::GpuEvent(GpuEventRecord {
                            v: RECORD_VERSION,
                            id: start + i as u64,
                            node: node.clone(),
                            at: at.clone(),
                            event,
                            gpu_index: g.index,
                            gpu_uuid: g.uuid,
                            from,
                            to,
                        })
                    })
                    .collect()
            },
            vec![(GPU_SNAPSHOT_KEY.into(), snapshot)],
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::GpuStatus;

    /// At most `max` slots at once, from many threads; every slot is given back.
    #[test]
    fn attestation_slots_are_bounded_and_released() {
        let counter = AtomicUsize::new(0);
        let a = InFlight::try_enter(&counter, 2).expect("first");
        let b = InFlight::try_enter(&counter, 2).expect("second");
        assert!(InFlight::try_enter(&counter, 2).is_none(), "third refused");
        drop(a);
        let c = InFlight::try_enter(&counter, 2).expect("a released slot is reusable");
        drop((b, c));
        assert_eq!(counter.load(Ordering::Acquire), 0);
        let peak = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..1_000 {
                        if let Some(_slot) = InFlight::try_enter(&counter, 3) {
                            peak.fetch_max(counter.load(Ordering::Acquire), Ordering::AcqRel);
                        }
                    }
                });
            }
        });
        assert!(peak.load(Ordering::Acquire) <= 3);
        assert_eq!(counter.load(Ordering::Acquire), 0);
    }

    fn gpu(index: u32, uuid: &str, status: GpuStatus, cc: Option<bool>, driver: &str) -> GpuInfo {
        GpuInfo {
            index,
            uuid: uuid.into(),
            serial: None,
            name: "NVIDIA H100 80GB HBM3".into(),
            model: "H100".into(),
            pci_bus_id: String::new(),
            minor_number: None,
            device_path: None,
            memory_total_bytes: 0,
            vbios_version: None,
            driver_version: driver.into(),
            mig_mode: None,
            cc_mode: cc,
            status,
        }
    }

    fn kinds(changes: &[GpuChange]) -> Vec<(GpuEventKind, u32, String)> {
        changes
            .iter()
            .map(|(k, g, _, _)| (*k, g.index, g.uuid.clone()))
            .collect()
    }

    #[test]
    fn gpu_changes_between_snapshots() {
        use GpuEventKind::*;
        let ok = GpuStatus::Ok;
        let first = [
            gpu(0, "GPU-a", ok.clone(), Some(true), "550"),
            gpu(1, "GPU-b", ok.clone(), Some(true), "550"),
        ];
        let (s0, e) = gpu_changes(&[], &first);
        assert_eq!(
            kinds(&e),
            [(Appeared, 0, "GPU-a".into()), (Appeared, 1, "GPU-b".into())]
        );
        // Nothing changed: nothing to record, same snapshot.
        let (s1, e) = gpu_changes(&s0, &first);
        assert!(e.is_empty());
        assert_eq!(s0, s1);
        // GPU 1 lost (it no longer tells its UUID); CC toggled off on GPU 0.
        let second = [
            gpu(0, "GPU-a", ok.clone(), Some(false), "550"),
            gpu(1, "", GpuStatus::Lost, None, "550"),
        ];
        let (s2, e) = gpu_changes(&s1, &second);
        assert_eq!(
            kinds(&e),
            [
                (CcModeChanged, 0, "GPU-a".into()),
                (Lost, 1, "GPU-b".into())
            ]
        );
        assert_eq!(
            (e[0].2.as_deref(), e[0].3.as_deref()),
            (Some("on"), Some("off"))
        );
        // Still lost: no new event; then recovered under a new driver, and GPU 0 is gone.
        let (s3, e) = gpu_changes(&s2, &second);
        assert!(e.is_empty(), "{:?}", kinds(&e));
        let third = [gpu(1, "GPU-b", ok.clone(), Some(true), "560")];
        let (_, e) = gpu_changes(&s3, &third);
        assert_eq!(
            kinds(&e),
            [
                (Recovered, 1, "GPU-b".into()),
                (DriverChanged, 1, "GPU-b".into()),
                (Disappeared, 0, "GPU-a".into())
            ]
        );
        // Another board at the same index.
        let swapped = [gpu(1, "GPU-c", ok, Some(true), "560")];
        let (_, e) = gpu_changes(&gpu_changes(&s3, &third).0, &swapped);
        assert_eq!(
            kinds(&e),
            [
                (Disappeared, 1, "GPU-b".into()),
                (Appeared, 1, "GPU-c".into())
            ]
        );
    }
}
