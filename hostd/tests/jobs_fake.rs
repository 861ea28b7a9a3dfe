//! The jobs controller against a fake `org.freedesktop.systemd1` on a private `dbus-daemon`
//! (the real zbus adapter and wire types), with the in-memory network and scratch fakes: every
//! failure path (start refused, unit failed, bus gone, reload storm) gives a clear error and
//! leaves no unit, network or scratch behind once the lease is over.

#[path = "common/bus.rs"]
mod bus;
#[path = "common/node.rs"]
mod node;
use bus::Bus;
use hostd::config::WorkloadConfig;
use hostd::lease::Lease;
use hostd::node::{Node, NodeError};
use hostd::workload::egress::{FirewallCall, Ipv4Pool, MemFirewall};
use hostd::workload::runner::{Jobs, Paths};
use hostd::workload::scratch::{Call, MemScratch};
use hostd::workload::units::Systemd;
use hostd_api::job::{JobState, NewJob};
use hostd_api::lease::LeaseState;
use node::open_node;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use zbus::object_server::SignalEmitter;
use zbus::zvariant::{OwnedObjectPath, OwnedValue};

/// How the fake's next unit behaves.
#[derive(Debug, Clone, Copy)]
enum Outcome {
    /// Runs until stopped.
    Runs,
    /// Has already failed with exit status 3 when first read.
    Exits3,
}

#[derive(Debug, Clone)]
struct UnitState {
    active: String,
    result: String,
    code: i32,
    status: i32,
}

type Units = Arc<Mutex<BTreeMap<String, (OwnedObjectPath, Arc<Mutex<UnitState>>)>>>;

#[derive(Default)]
struct Seen {
    refs: Vec<String>,
    unrefs: Vec<String>,
    set_properties: Vec<String>,
}

struct FakeManager {
    units: Units,
    seen: Arc<Mutex<Seen>>,
    refuse: Arc<AtomicBool>,
    outcome: Arc<Mutex<Outcome>>,
}

#[derive(Debug, zbus::DBusError)]
#[zbus(prefix = "org.freedesktop.systemd1")]
enum SystemdError {
    #[zbus(error)]
    ZBus(zbus::Error),
    NoSuchUnit(String),
    UnitExists(String),
}

#[zbus::interface(name = "org.freedesktop.systemd1.Manager")]
impl FakeManager {
    async fn start_transient_unit(
        &self,
        name: String,
        _mode: String,
        _properties: Vec<(String, OwnedValue)>,
        _aux: Vec<(String, Vec<(String, OwnedValue)>)>,
        #[zbus(object_server)] server: &zbus::ObjectServer,
    ) -> Result<OwnedObjectPath, SystemdError> {
        if self.refuse.load(Ordering::SeqCst) {
            return Err(SystemdError::UnitExists(format!(
                "Unit {name} was already loaded or has a fragment file."
            )));
        }
        let n = self.units.lock().unwrap().len();
        let path =
            OwnedObjectPath::try_from(format!("/org/freedesktop/systemd1/unit/u{n}")).unwrap();
        let state = match *self.outcome.lock().unwrap() {
            Outcome::Runs => UnitState {
                active: "active".into(),
                result: "success".into(),
                code: 0,
                status: 0,
            },
            Outcome::Exits3 => UnitState {
                active: "failed".into(),
                result: "exit-code".into(),
                code: 1,
                status: 3,
            },
        };
        let state = Arc::new(Mutex::new(state));
        server
            .at(&path, FakeUnit(state.clone()))
            .await
            .map_err(SystemdError::ZBus)?;
        server
            .at(&path, FakeService(state.clone()))
            .await
            .map_err(SystemdError::ZBus)?;
        self.units.lock().unwrap().insert(name, (path, state));
        Ok(OwnedObjectPath::try_from("/org/freedesktop/systemd1/job/1").unwrap())
    }

    async fn stop_unit(
        &self,
        name: String,
        _mode: String,
    ) -> Result<OwnedObjectPath, SystemdError> {
        if self.refuse.load(Ordering::SeqCst) {
            return Err(SystemdError::NoSuchUnit(format!("Unit {name} refused")));
        }
        let units = self.units.lock().unwrap();
        let (_, state) = units
            .get(&name)
            .ok_or(SystemdError::NoSuchUnit(name.clone()))?;
        *state.lock().unwrap() = UnitState {
            active: "inactive".into(),
            result: "success".into(),
            code: 2,
            status: 15,
        };
        Ok(OwnedObjectPath::try_from("/org/freedesktop/systemd1/job/2").unwrap())
    }

    async fn get_unit(&self, name: String) -> Result<OwnedObjectPath, SystemdError> {
        self.units
            .lock()
            .unwrap()
            .get(&name)
            .map(|(p, _)| p.clone())
            .ok_or(SystemdError::NoSuchUnit(format!("Unit {name} not loaded.")))
    }

    async fn set_unit_properties(
        &self,
        name: String,
        _runtime: bool,
        _properties: Vec<(String, OwnedValue)>,
    ) {
        self.seen.lock().unwrap().set_properties.push(name);
    }

    async fn ref_unit(&self, name: String) {
        self.seen.lock().unwrap().refs.push(name);
    }

    async fn unref_unit(&self, name: String) {
        self.seen.lock().unwrap().unrefs.push(name);
    }

    #[allow(clippy::type_complexity)]
    async fn list_units_by_patterns(
        &self,
        _states: Vec<String>,
        _patterns: Vec<String>,
    ) -> Vec<(
        String,
        String,
        String,
        String,
        String,
        String,
        OwnedObjectPath,
        u32,
        String,
        OwnedObjectPath,
    )> {
        let root = OwnedObjectPath::try_from("/").unwrap();
        self.units
            .lock()
            .unwrap()
            .iter()
            .map(|(n, (p, s))| {
                let s = s.lock().unwrap();
                (
                    n.clone(),
                    String::new(),
                    "loaded".into(),
                    s.active.clone(),
                    String::new(),
                    String::new(),
                    p.clone(),
                    0,
                    String::new(),
                    root.clone(),
                )
            })
            .collect()
    }

    async fn subscribe(&self) {}

    #[zbus(signal)]
    async fn reloading(emitter: &SignalEmitter<'_>, active: bool) -> zbus::Result<()>;
}

struct FakeUnit(Arc<Mutex<UnitState>>);

#[zbus::interface(name = "org.freedesktop.systemd1.Unit")]
impl FakeUnit {
    #[zbus(property)]
    fn active_state(&self) -> String {
        self.0.lock().unwrap().active.clone()
    }
}

struct FakeService(Arc<Mutex<UnitState>>);

#[zbus::interface(name = "org.freedesktop.systemd1.Service")]
impl FakeService {
    #[zbus(property)]
    fn result(&self) -> String {
        self.0.lock().unwrap().result.clone()
    }
    #[zbus(property)]
    fn exec_main_code(&self) -> i32 {
        self.0.lock().unwrap().code
    }
    #[zbus(property)]
    fn exec_main_status(&self) -> i32 {
        self.0.lock().unwrap().status
    }
    #[zbus(property, name = "CPUUsageNSec")]
    fn cpu_usage_nsec(&self) -> u64 {
        1_000_000
    }
    #[zbus(property)]
    fn device_allow(&self) -> Vec<(String, String)> {
        vec![("/dev/nvidiactl".into(), "rw".into())]
    }
}

struct Fixture {
    bus: Option<Bus>,
    _server: zbus::Connection,
    units: Units,
    seen: Arc<Mutex<Seen>>,
    refuse: Arc<AtomicBool>,
    outcome: Arc<Mutex<Outcome>>,
    node: Arc<Node>,
    scratch: Arc<MemScratch>,
    _dirs: Vec<tempfile::TempDir>,
    work: PathBuf,
    root: PathBuf,
}

async fn fixture() -> Fixture {
    let bus = Bus::start();
    let units: Units = Arc::default();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let refuse = Arc::new(AtomicBool::new(false));
    let outcome = Arc::new(Mutex::new(Outcome::Runs));
    let fake = FakeManager {
        units: units.clone(),
        seen: seen.clone(),
        refuse: refuse.clone(),
        outcome: outcome.clone(),
    };
    let server = zbus::connection::Builder::address(bus.address.as_str())
        .unwrap()
        .name("org.freedesktop.systemd1")
        .unwrap()
        .serve_at("/org/freedesktop/systemd1", fake)
        .unwrap()
        .build()
        .await
        .unwrap();
    // Not under /tmp: the controller refuses a work directory every job's PrivateTmp hides.
    let parent = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(&parent).unwrap();
    let state = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir_in(&parent).unwrap();
    let root = tempfile::tempdir_in(&parent).unwrap();
    for f in ["bin/true", "dev/nvidiactl"] {
        let p = root.path().join(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, "").unwrap();
    }
    let scratch_root = work.path().join("scratch");
    std::fs::create_dir_all(&scratch_root).unwrap();
    let node = open_node(state.path());
    // The tenant of every lease here (`lease`): jobs start only for an active tenant.
    node.create_tenant(hostd_api::tenant::NewTenant {
        id: "acme".into(),
        name: "Acme".into(),
        jurisdiction: "IN".into(),
        contact: String::new(),
    })
    .unwrap();
    Fixture {
        node: Arc::new(node),
        scratch: Arc::new(MemScratch::new(scratch_root)),
        work: work.path().to_owned(),
        root: root.path().to_owned(),
        _dirs: vec![state, work, root],
        bus: Some(bus),
        _server: server,
        units,
        seen,
        refuse,
        outcome,
    }
}

type TestJobs = Jobs<Systemd, Arc<MemFirewall>>;

async fn controller(f: &Fixture, firewall: Arc<MemFirewall>) -> Arc<TestJobs> {
    controller_with(f, firewall, WorkloadConfig::default().scratch_quota_bytes).await
}

async fn controller_with(f: &Fixture, firewall: Arc<MemFirewall>, quota: u64) -> Arc<TestJobs> {
    let address = f.bus.as_ref().unwrap().address.clone();
    let systemd = Systemd::connect(&address).await.unwrap();
    let cfg = WorkloadConfig {
        work_dir: f.work.clone(),
        scratch_quota_bytes: quota,
        ..WorkloadConfig::default()
    };
    let paths = Paths {
        work: f.work.clone(),
        system_root: f.root.clone(),
        sim_control: None,
    };
    let jobs = Jobs::new(
        systemd,
        firewall,
        f.scratch.clone(),
        f.node.clone(),
        cfg,
        paths,
    )
    .unwrap();
    Arc::new(jobs)
}

/// A lease the node does not know: to the controller it has ended as soon as it refreshes,
/// which is what the leak checks need.
fn lease(id: &str) -> Lease {
    Lease {
        id: id.into(),
        tenant: "acme".into(),
        model: "H100".into(),
        gpus: Vec::new(),
        classification: "internal".into(),
        dataset: None,
        state: LeaseState::Active,
        started_ms: 0,
        ended_ms: None,
        started: String::new(),
        ended: None,
        rate_paise_per_hour: 0,
        policy_digest: String::new(),
        decision: Vec::new(),
    }
}

/// A lease the node knows as active, so the controller keeps its jobs running.
fn known_lease(f: &Fixture, id: &str) -> Lease {
    let l = lease(id);
    store_lease(f, &l);
    l
}

/// Writes `l` as the node's copy of the lease.
fn store_lease(f: &Fixture, l: &Lease) {
    let key = hostd::state::keys::LeasesKey::Lease(&l.id).key();
    f.node.store().tree("leases").unwrap().put(&key, l).unwrap();
}

/// The node's copy of the lease `id`, now ended.
fn ended_lease(f: &Fixture, id: &str) {
    let mut l = lease(id);
    l.state = LeaseState::Ended;
    store_lease(f, &l);
}

fn job() -> NewJob {
    NewJob {
        argv: vec!["/bin/true".into()],
        ..NewJob::default()
    }
}

fn firewall() -> Arc<MemFirewall> {
    Arc::new(MemFirewall::new(
        Ipv4Pool::new(std::net::Ipv4Addr::new(10, 231, 0, 0), 16).unwrap(),
    ))
}

/// Once the lease is over, its network and scratch are gone.
fn nothing_left(fw: &MemFirewall, scratch: &MemScratch, lease: &str) {
    let calls = fw.calls();
    assert!(
        calls
            .iter()
            .any(|c| matches!(c, FirewallCall::Remove { lease: l } if l == lease)),
        "{calls:?}"
    );
    let s = scratch.calls();
    assert!(
        s.iter()
            .any(|c| matches!(c, Call::Erase { lease: l } if l == lease)),
        "{s:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_unit_and_a_refused_start_leave_nothing_behind() {
    let f = fixture().await;
    let fw = firewall();
    let jobs = controller(&f, fw.clone()).await;

    // A unit that failed: the job says how, and systemd's hold on it is let go; once its
    // lease has ended, nothing of it is left.
    *f.outcome.lock().unwrap() = Outcome::Exits3;
    let j = jobs
        .start(&known_lease(&f, "lease-a"), job())
        .await
        .unwrap();
    ended_lease(&f, "lease-a");
    jobs.refresh().await.unwrap();
    let done = jobs.get("lease-a", &j.id).unwrap();
    assert_eq!((done.state, done.exit_code), (JobState::Exited, Some(3)));
    let unit = format!("sovereign-job-{}.service", j.id);
    assert!(f.seen.lock().unwrap().unrefs.contains(&unit));
    nothing_left(&fw, &f.scratch, "lease-a");

    // systemd refuses: a clear 503 for the client, the job failed, nothing started.
    f.refuse.store(true, Ordering::SeqCst);
    let before = f.units.lock().unwrap().len();
    let err = jobs
        .start(&known_lease(&f, "lease-b"), job())
        .await
        .unwrap_err();
    assert!(matches!(err, NodeError::Unavailable(_)), "{err}");
    assert!(
        !err.to_string().contains("fragment"),
        "no internal text: {err}"
    );
    let failed = jobs.list("lease-b").unwrap();
    assert_eq!(failed[0].state, JobState::Failed);
    assert_eq!(failed[0].result.as_deref(), Some("start-refused"));
    assert_eq!(f.units.lock().unwrap().len(), before);
    ended_lease(&f, "lease-b");
    jobs.refresh().await.unwrap();
    nothing_left(&fw, &f.scratch, "lease-b");

    // A lease that ended after the caller read it (a stop racing a start): refused under the
    // controller's lock, before anything is allocated for it.
    f.refuse.store(false, Ordering::SeqCst);
    let stale = known_lease(&f, "lease-c");
    ended_lease(&f, "lease-c");
    let err = jobs.start(&stale, job()).await.unwrap_err();
    assert!(matches!(err, NodeError::Conflict(_)), "{err}");
    assert!(jobs.list("lease-c").unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_storm_reapplies_device_rules_and_a_vanished_bus_is_a_clear_error() {
    let mut f = fixture().await;
    let fw = firewall();
    let jobs = controller(&f, fw.clone()).await;
    let address = f.bus.as_ref().unwrap().address.clone();
    let events = Systemd::connect(&address)
        .await
        .unwrap()
        .events()
        .await
        .unwrap();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let runner = tokio::spawn(jobs.clone().run(events, stop_rx));

    let l = known_lease(&f, "lease-c");
    let j = jobs.start(&l, job()).await.unwrap();
    let unit = format!("sovereign-job-{}.service", j.id);
    // 200 reloads in a burst: the controller keeps up and re-applies the job's device rules.
    let emitter = SignalEmitter::new(&f._server, "/org/freedesktop/systemd1").unwrap();
    for i in 0..200 {
        FakeManager::reloading(&emitter, i % 2 == 0).await.unwrap();
    }
    FakeManager::reloading(&emitter, false).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f.seen.lock().unwrap().set_properties.contains(&unit) {
        assert!(Instant::now() < deadline, "device rules never re-applied");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(jobs.get("lease-c", &j.id).unwrap().state, JobState::Running);

    // The bus gone: starting is a clear 503, refreshing does not fail, nothing hangs.
    drop(f.bus.take());
    let err = tokio::time::timeout(Duration::from_secs(10), jobs.start(&l, job()))
        .await
        .expect("a vanished bus must not hang a start")
        .unwrap_err();
    assert!(matches!(err, NodeError::Unavailable(_)), "{err}");
    tokio::time::timeout(Duration::from_secs(10), jobs.refresh())
        .await
        .expect("a vanished bus must not hang a refresh")
        .unwrap();
    stop_tx.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(10), runner)
        .await
        .expect("the run loop stops")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_of_a_lease_over_its_scratch_quota_are_stopped_and_say_why() {
    let f = fixture().await;
    let jobs = controller_with(&f, firewall(), 1 << 20).await;
    let l = known_lease(&f, "lease-q");
    let j = jobs.start(&l, job()).await.unwrap();
    jobs.refresh().await.unwrap();
    assert_eq!(jobs.get("lease-q", &j.id).unwrap().state, JobState::Running);
    // The job writes past the lease's 1 MiB: hostd stops it at its next measurement.
    let dir = f.work.join("scratch").join("lease-q");
    std::fs::write(dir.join("big"), vec![7u8; 2 << 20]).unwrap();
    stopped_for_quota(&jobs, "lease-q", &j.id).await;
}

/// The quota counts the job's output too, which systemd writes outside the scratch: a job
/// printing past the lease's quota is stopped like one writing files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_output_passes_the_quota_is_stopped() {
    let f = fixture().await;
    let jobs = controller_with(&f, firewall(), 1 << 20).await;
    let l = known_lease(&f, "lease-o");
    let j = jobs.start(&l, job()).await.unwrap();
    jobs.refresh().await.unwrap();
    assert_eq!(jobs.get("lease-o", &j.id).unwrap().state, JobState::Running);
    std::fs::write(
        jobs.log_path("lease-o", &j.id).unwrap(),
        vec![b'y'; 2 << 20],
    )
    .unwrap();
    stopped_for_quota(&jobs, "lease-o", &j.id).await;
}

/// Refreshes until the job is stopped (bounded), and checks it was for the quota.
async fn stopped_for_quota(jobs: &TestJobs, lease: &str, job: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        jobs.refresh().await.unwrap();
        let now = jobs.get(lease, job).unwrap();
        if now.state.is_final() {
            assert_eq!(now.state, JobState::Killed);
            assert_eq!(now.result.as_deref(), Some("scratch-quota"));
            return;
        }
        assert!(Instant::now() < deadline, "the job was never stopped");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A lease's jobs list in pages, oldest first: ids start with the start time, so the store's
/// key order is start order, and following `next_after` gives every job once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_list_in_pages_oldest_first() {
    let f = fixture().await;
    let jobs = controller_with(&f, firewall(), 1 << 30).await;
    let l = known_lease(&f, "lease-p");
    let mut started = Vec::new();
    for _ in 0..5 {
        started.push(jobs.start(&l, job()).await.unwrap().id);
        // Distinct start times: within one millisecond the random part orders them.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let (first, next) = jobs.page("lease-p", None, 2).unwrap();
    let ids = |page: &[hostd_api::job::Job]| page.iter().map(|j| j.id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&first), started[..2]);
    assert_eq!(next.as_deref(), Some(started[1].as_str()));
    let mut all = ids(&first);
    let mut after = next;
    while let Some(a) = after {
        let (page, next) = jobs.page("lease-p", Some(&a), 2).unwrap();
        assert!(!page.is_empty() && page.len() <= 2);
        all.extend(ids(&page));
        after = next;
    }
    assert_eq!(all, started);
    let (whole, none) = jobs.page("lease-p", None, 5).unwrap();
    assert_eq!((ids(&whole), none), (started.clone(), None));
    let (rest, _) = jobs.page("lease-p", Some("job-not-there"), 5).unwrap();
    assert!(rest.is_empty(), "an id after every job's: {rest:?}");
    let (none_yet, _) = jobs.page("lease-other", None, 5).unwrap();
    assert!(none_yet.is_empty());
}

/// One ended lease that cannot be released (its network will not go) holds up no other: the
/// next lease is released in the same round, and the first once its network can go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_that_cannot_be_released_holds_up_no_other() {
    let f = fixture().await;
    let fw = firewall();
    let jobs = controller(&f, fw.clone()).await;
    for id in ["lease-x", "lease-y"] {
        jobs.start(&known_lease(&f, id), job()).await.unwrap();
    }
    fw.fail_removes_of(Some("lease-x"));
    ended_lease(&f, "lease-x");
    ended_lease(&f, "lease-y");

    // The ended leases' jobs are stopped first; their leases are released in id order, so
    // lease-x fails before lease-y each round.
    refresh_until(&jobs, || fw.allowed("lease-y").is_none()).await;
    nothing_left(&fw, &f.scratch, "lease-y");
    assert!(fw.allowed("lease-x").is_some(), "its network stayed");
    fw.fail_removes_of(None);
    refresh_until(&jobs, || fw.allowed("lease-x").is_none()).await;
}

/// Refreshes until `done`, for at most 10 s.
async fn refresh_until(jobs: &TestJobs, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "never happened");
        jobs.refresh().await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A stop systemd does not take is not left marked as made: once systemd answers again, the
/// lease's end stops the job (a job left marked would run on after its lease).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_systemd_refused_is_asked_again() {
    let f = fixture().await;
    let jobs = controller(&f, firewall()).await;
    let j = jobs
        .start(&known_lease(&f, "lease-s"), job())
        .await
        .unwrap();
    jobs.refresh().await.unwrap();
    f.refuse.store(true, Ordering::SeqCst);

    let err = jobs.stop("lease-s", &j.id).await.unwrap_err();

    assert!(matches!(err, NodeError::Unavailable(_)), "{err}");
    assert_eq!(jobs.get("lease-s", &j.id).unwrap().state, JobState::Running);
    ended_lease(&f, "lease-s");
    jobs.refresh().await.unwrap();
    assert_eq!(jobs.get("lease-s", &j.id).unwrap().state, JobState::Running);
    f.refuse.store(false, Ordering::SeqCst);
    refresh_until(&jobs, || {
        jobs.get("lease-s", &j.id)
            .is_ok_and(|now| now.state.is_final())
    })
    .await;
}

/// A restarted hostd takes back its jobs from a store holding more records than one read
/// (every job a node ever ran stays on record): a job whose unit still runs is re-adopted,
/// one whose unit vanished is `lost`, a job unit with no record is stopped, and the
/// finished records are left as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_takes_back_jobs_past_a_page_of_finished_records() {
    let f = fixture().await;
    let jobs = controller(&f, firewall()).await;
    let l = known_lease(&f, "lease-r");
    let keep = jobs.start(&l, job()).await.unwrap().id;
    let gone = jobs.start(&l, job()).await.unwrap().id;
    let orphan = jobs.start(&l, job()).await.unwrap().id;
    jobs.refresh().await.unwrap();
    drop(jobs);
    // While hostd is down: one job's unit vanishes, one job's record is lost.
    f.units
        .lock()
        .unwrap()
        .remove(&format!("sovereign-job-{gone}.service"));
    let tree = f.node.store().tree("jobs").unwrap();
    tree.remove(&format!("lease-r/{orphan}")).unwrap();
    // 1,100 finished jobs of the past, sorting before the three (their ids start earlier).
    let template: serde_json::Value = tree.get(&format!("lease-r/{keep}")).unwrap().unwrap();
    for i in 0..1100u32 {
        let id = format!("job-000000000000{i:016x}");
        let mut old = template.clone();
        old["job"]["id"] = id.clone().into();
        old["job"]["state"] = "exited".into();
        old["unit"] = format!("sovereign-job-{id}.service").into();
        tree.put(&format!("lease-r/{id}"), &old).unwrap();
    }

    let jobs = controller(&f, firewall()).await;
    jobs.adopt().await.unwrap();
    assert_eq!(jobs.get("lease-r", &keep).unwrap().state, JobState::Running);
    assert_eq!(jobs.get("lease-r", &gone).unwrap().state, JobState::Lost);
    let units = f.units.lock().unwrap();
    let (_, state) = &units[&format!("sovereign-job-{orphan}.service")];
    assert_eq!(
        state.lock().unwrap().active,
        "inactive",
        "the orphan was stopped"
    );
    let (_, state) = &units[&format!("sovereign-job-{keep}.service")];
    assert_eq!(state.lock().unwrap().active, "active");
    drop(units);
    let (page, _) = jobs.page("lease-r", None, 1000).unwrap();
    assert!(page.iter().all(|j| j.state == JobState::Exited));
    let (all, _) = jobs.page("lease-r", None, 2000).unwrap();
    assert_eq!(all.len(), 1102);
}

/// An upload's quota check measures the lease's scratch at most every few seconds: what an
/// upload stored counts at once, what a job wrote at the next measurement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_count_at_once_and_a_jobs_files_at_the_next_measurement() {
    let f = fixture().await;
    let jobs = controller_with(&f, firewall(), 1 << 20).await;
    let l = known_lease(&f, "lease-u");
    let (dir, _) = jobs.scratch_for(&l).await.unwrap();
    jobs.check_scratch_quota("lease-u", 1 << 20).unwrap();
    // An upload of 600 KiB lands and is noted, as the files API does.
    std::fs::write(dir.join("upload"), vec![1u8; 600 << 10]).unwrap();
    jobs.note_scratch_written("lease-u", 600 << 10);
    let over = |more: u64| match jobs.check_scratch_quota("lease-u", more) {
        Ok(()) => None,
        Err(hostd::workload::scratch::ScratchError::OverQuota { would, .. }) => Some(would),
        Err(e) => panic!("{e}"),
    };
    assert_eq!(over(500 << 10), Some(1100 << 10));
    assert_eq!(over(400 << 10), None);
    // A job writes 300 KiB: not walked for until the measurement is stale.
    std::fs::write(dir.join("by-a-job"), vec![2u8; 300 << 10]).unwrap();
    assert_eq!(over(400 << 10), None);
    tokio::time::sleep(hostd::workload::runner::USAGE_FRESH + Duration::from_millis(100)).await;
    assert_eq!(over(400 << 10), Some(1300 << 10));
}
