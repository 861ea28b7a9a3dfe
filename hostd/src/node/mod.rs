//! The node service: tenants, leases and metering over the store, the GPUs and the ledger.
//!
//! Every mutation runs under one lock (`write`) and is durable before it returns. Usage
//! records reach the ledger through a write-ahead *intent* kept in the same sled tree as the
//! leases and meter cursors: the intent holds the records (whose ids are their future leaf
//! indices) and the state changes they imply. After a crash, [`Node::open`] finds the intent
//! and, by comparing its ids with the ledger's size, knows exactly whether the records were
//! appended — so a record is never lost and never written twice, and a GPU-hour is never
//! billed twice.
//!
//! One file per concept: [`commit`] (the write-ahead intent and the crash-safe append),
//! `tenants`, `leases`, `metering`, `verified` (reading the ledger against its checkpoint),
//! `gpu_events` (inventory and GPU change records), `attestation` (evidence, results and
//! the facts the residency policy sees) and `workloads` (job-usage records cut from job
//! cursors, scratch erasures). Every part is an `impl Node` over the same state.

use crate::attestation::{unix_now, Attester, Collected};
use crate::clock::{rfc3339_ms, Clock};
use crate::config::Config;
use crate::gpu::{GpuError, GpuInfo, Gpus};
use crate::lease::{self, Candidate, Lease, LeaseState, LeasedGpu, NewLease};
use crate::ledger::Ledger;
use crate::meter::{Anomaly, Cursor, Reading, Usage};
use crate::residency::{PlaceRequest, Residency};
use crate::state::keys::{
    cursor_prefix, LeasesKey, CURSOR_PREFIX, JOB_CURSOR_PREFIX, LEASE_PREFIX,
};
use crate::state::{JsonTree, Store, StoreError};
use attest::ear::{AttestationResult, Status};
use attest::report::report;
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

mod attestation;
mod commit;
mod error;
mod gpu_events;
mod health;
mod leases;
mod metering;
mod tenants;
#[cfg(all(test, feature = "dev"))]
mod testutil;
mod time;
mod verified;
mod workloads;

pub use error::{InternalError, NodeError};
pub use health::HealthProblem;
pub use leases::holder;
pub use workloads::TransferFacts;

/// Counters exported on `/metrics`.
#[derive(Debug, Default)]
pub struct Stats {
    pub ticks: AtomicU64,
    pub samples: AtomicU64,
    pub sample_errors: AtomicU64,
    pub energy_anomalies: AtomicU64,
    pub records: AtomicU64,
}

pub struct Node {
    cfg: Config,
    clock: Clock,
    store: Store,
    tenants: JsonTree,
    /// Leases (`lease/<id>`), meter cursors (`cursor/<lease>/<gpu>`), job meter cursors
    /// (`jobmeter/<job>`) and the `intent`.
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
    /// Since when metering rounds have been failing (node time, ms), for `/v1/health`.
    metering_failing_since: Mutex<Option<i64>>,
    /// One log line a minute per kind of repeated failure (a GPU inventory that cannot be
    /// read fails every metering round and every health check).
    repeated: crate::admission::LogLimiter,
    /// Leases with a job still running, as the job runner last said: an ended lease's GPUs
    /// are not handed out again while its jobs (which keep their device access until they
    /// are gone) still run.
    leases_with_jobs: Mutex<std::collections::BTreeSet<String>>,
    /// Which leases metering, placement, `/metrics` and `/v1/gpus` look at, so that they read
    /// the active leases and not every lease the node ever had (see `leases::LeaseIndex`).
    lease_index: Mutex<leases::LeaseIndex>,
}

/// Evidence collections allowed at once. Each one asks every CC GPU for a signed report, which
/// on real hardware is slow and serialised in the driver; any principal allowed to attest
/// (a tenant with one lease included) must not be able to queue unbounded work on the GPUs.
pub const MAX_CONCURRENT_ATTESTATIONS: usize = 4;

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
            metering_failing_since: Mutex::new(None),
            repeated: crate::admission::LogLimiter::new(std::time::Duration::from_secs(60)),
            leases_with_jobs: Mutex::new(std::collections::BTreeSet::new()),
            lease_index: Mutex::default(),
        };
        node.recover()?;
        let (leases, cursors) = node.check_state()?;
        *lock(&node.lease_index) = leases::LeaseIndex::of(&leases);
        node.hold_clock_at_state(&leases, &cursors)?;
        node.load_latest_attestation()?;
        Ok(node)
    }

    /// Reads the whole state once, so damage is found at start, with one clear sentence,
    /// instead of failing every metering round and every read later: every ledger record
    /// against its leaf hash, and every tenant, lease and cursor as its type.
    /// Returns the leases and cursors it read, for the clock's floor.
    fn check_state(&self) -> Result<(Vec<Lease>, Vec<Cursor>), NodeError> {
        lock(&self.ledger)
            .check_leaves()
            .map_err(|e| internal("checking the ledger", e))?;
        self.tenants
            .all::<Tenant>()
            .map_err(|e| internal("checking the tenants", e))?;
        let leases = self.leases().map_err(|e| {
            NodeError::internal(format!("checking the leases: {e}", e = report(&e)))
        })?;
        let cursors = self
            .leases
            .scan::<Cursor>(CURSOR_PREFIX)
            .map_err(|e| internal("checking the meter cursors", e))?;
        self.leases
            .scan::<crate::workload::metering::JobCursor>(JOB_CURSOR_PREFIX)
            .map_err(|e| internal("checking the job meter cursors", e))?;
        Ok((leases, cursors))
    }

    /// Makes every write durable (shutdown).
    pub fn flush(&self) -> Result<(), NodeError> {
        self.store.flush()?;
        Ok(())
    }

    /// The store, for adapters that keep their own trees (jobs).
    pub fn store(&self) -> &Store {
        &self.store
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
}
