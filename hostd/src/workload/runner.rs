//! The jobs controller: starts, watches, stops and re-adopts tenants' jobs as systemd units.
//!
//! Everything it does to the system goes through [`UnitManager`]; its state is the `jobs`
//! tree of the store (one [`StoredJob`] per job) plus, in memory, the keys of jobs that still
//! run. It is driven three ways:
//! - by the API (start, stop);
//! - by systemd's signals (a unit changed, a reload finished), which trigger a refresh;
//! - by a one-second tick, which refreshes anyway (a signal lost while the bus was busy
//!   costs at most a second), meters CPU, memory and bytes, stops jobs whose lease has ended,
//!   and re-applies device rules a `daemon-reload` dropped.
//!
//! Units are started with `AddRef`, so systemd keeps an ended unit and its exit status until
//! hostd has read it and lets go. If hostd dies, the references go with its bus connection:
//! units that are still running stay running, and [`Jobs::adopt`] takes them back on the next
//! start; a unit that ended meanwhile is gone with its exit status and the job is `lost`.

use super::accounts;
use super::devices;
use super::egress::{self, Firewall, LeaseNetwork};
use super::job::{self, StoredJob};
use super::metering::{JobCursor, JobSample};
use super::publish::{PortConfig, ServicePort};
use super::sandbox::{self, JobSandbox, PropertyValue};
use super::scratch::{Scratch, ScratchError};
use super::uids::{UidPool, UidRange};
use super::units::{UnitEvent, UnitManager};
use crate::config::WorkloadConfig;
use crate::lease::Lease;
use crate::node::{InternalError, Node, NodeError};
use crate::state::JsonTree;
use attest::report::report;
use hostd_api::job::{Job, JobLimits, JobState, NewJob};
use hostd_api::lease::LeaseState;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::{info, warn};

/// Where jobs' files live and which device nodes exist.
#[derive(Debug, Clone)]
pub struct Paths {
    /// Each lease's `resolv.conf`, `<work>/net/<lease>/`. Scratch and job logs are wherever
    /// the [`Scratch`] keeps them, under the lease's key.
    pub work: PathBuf,
    /// The root of the system systemd runs jobs in, where device nodes (`/dev/nvidia0`),
    /// programs and user records (`/run/userdb`) are: `/` on a node, the container's root in
    /// dev mode.
    pub system_root: PathBuf,
    /// Dev mode: the simulated GPUs' control file, where running jobs show as load.
    pub sim_control: Option<PathBuf>,
}

/// The jobs controller of a node: systemd over D-Bus, nftables, fscrypt.
pub type NodeJobs = Jobs<super::units::Systemd, egress::NftFirewall>;

/// The jobs of every lease on the node.
pub struct Jobs<U, F> {
    units: U,
    firewall: F,
    scratch: Arc<dyn Scratch>,
    /// Each lease's network, made with its first job and removed after its end.
    nets: Mutex<BTreeMap<String, LeaseNetwork>>,
    node: Arc<Node>,
    tree: JsonTree,
    /// Which uid each lease holds (`<lease>` → uid), kept until the lease has ended and its
    /// jobs are gone: its scratch files belong to that uid.
    uid_tree: JsonTree,
    cfg: WorkloadConfig,
    paths: Paths,
    uids: Mutex<UidPool>,
    uvm: Option<String>,
    live: Mutex<BTreeSet<String>>,
    /// Jobs whose device rules must be re-applied: systemd reloaded (or hostd was away and
    /// may have missed a reload). systemd still *reports* a rule it dropped for a node that
    /// was missing at reload time, so the property cannot tell; re-applying can.
    reapply: Mutex<BTreeSet<String>>,
    #[cfg(feature = "dev")]
    sim: Option<Mutex<super::simload::SimLoad>>,
    /// When each lease's scratch was last measured against its quota.
    quota_checked: Mutex<BTreeMap<String, std::time::Instant>>,
    /// Each lease's scratch as last measured for uploads (see [`Jobs::scratch_used`]).
    scratch_usage: Mutex<BTreeMap<String, Measured>>,
    /// Per running job: the UTC hour it was last metered in, and its memory peak since the
    /// last cut.
    metering: Mutex<BTreeMap<String, (i64, u64)>>,
    /// Published service ports of running jobs, by job key; dropping one closes it.
    ports: Mutex<BTreeMap<String, ServicePort>>,
    /// Asks the run loop for a refresh now (a lease ended).
    poke: tokio::sync::Notify,
    write: tokio::sync::Mutex<()>,
}

fn internal(context: &str, e: impl std::error::Error + Send + Sync + 'static) -> NodeError {
    NodeError::Internal(InternalError {
        context: context.to_owned(),
        source: Box::new(e),
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Job records read at a time when hostd takes back its jobs at start.
const ADOPT_PAGE: usize = 1024;

impl<U: UnitManager, F: Firewall> Jobs<U, F> {
    /// The controller over `units`, `firewall` and `scratch`, with its state in `node`'s
    /// store.
    pub fn new(
        units: U,
        firewall: F,
        scratch: Arc<dyn Scratch>,
        node: Arc<Node>,
        cfg: WorkloadConfig,
        paths: Paths,
    ) -> Result<Jobs<U, F>, NodeError> {
        check_work_dir(&paths.work).map_err(|e| NodeError::Unavailable(e.to_string()))?;
        let tree = node.store().tree("jobs")?;
        let uid_tree = node.store().tree("job_uids")?;
        let range = UidRange {
            first: cfg.uid_first,
            count: cfg.uid_count,
        };
        let mut uids = UidPool::new(range).map_err(|e| internal("job uid range", e))?;
        for lease in uid_tree.keys("")? {
            if let Some(uid) = uid_tree.get::<u32>(&lease)? {
                uids.restore(&lease, uid);
            }
        }
        // Jobs' uids must traverse to their scratch.
        create_dir(&paths.work, 0o711)?;
        create_dir(&paths.work.join("net"), 0o755)?;
        let uvm = devices::uvm_major(Path::new("/proc/devices")).map(|_| "/dev/nvidia-uvm".into());
        #[cfg(feature = "dev")]
        let sim = paths
            .sim_control
            .clone()
            .map(|c| Mutex::new(super::simload::SimLoad::new(c)));
        Ok(Jobs {
            units,
            firewall,
            scratch,
            nets: Mutex::default(),
            node,
            tree,
            uid_tree,
            cfg,
            paths,
            uids: Mutex::new(uids),
            uvm,
            live: Mutex::default(),
            reapply: Mutex::default(),
            poke: tokio::sync::Notify::new(),
            ports: Mutex::default(),
            metering: Mutex::default(),
            quota_checked: Mutex::default(),
            scratch_usage: Mutex::default(),
            #[cfg(feature = "dev")]
            sim,
            write: tokio::sync::Mutex::new(()),
        })
    }

    /// Takes back the jobs that ran when hostd stopped: units still loaded are held again
    /// and watched; jobs whose unit is gone are `lost`; job units hostd has no record of are
    /// stopped (nothing runs on the node that hostd does not account for).
    pub async fn adopt(&self) -> Result<(), NodeError> {
        let _w = self.write.lock().await;
        let nets = self
            .firewall
            .list()
            .await
            .map_err(|e| internal("listing lease networks", e))?;
        lock(&self.nets).extend(
            nets.into_iter()
                .filter_map(|e| e.network)
                .map(|n| (n.lease.clone(), n)),
        );
        self.reapply_policy().await;
        let loaded: BTreeSet<String> = self
            .units
            .list(job::UNIT_PATTERN)
            .await
            .map_err(|e| internal("listing job units", e))?
            .into_iter()
            .collect();
        // Every job the node ever ran is on record, so they are read a page at a time and
        // only the unfinished ones (and which loaded units have a record) are kept.
        let mut known = BTreeSet::new();
        let mut unfinished = Vec::new();
        self.tree.for_each::<StoredJob>("", ADOPT_PAGE, |s| {
            if loaded.contains(&s.unit) {
                known.insert(s.unit.clone());
            }
            if !s.job.state.is_final() {
                unfinished.push(s);
            }
        })?;
        for mut s in unfinished {
            if loaded.contains(&s.unit) {
                self.readopt(&s).await;
            } else {
                job::mark_lost(&mut s.job, self.node.clock().now_ms());
                warn!(lease = %s.job.lease, job = %s.job.id, "job's unit vanished while hostd was down");
                if let Err(e) = self.meter(&s, 0).await {
                    warn!(job = %s.job.id, error = %report(&e), "cannot close the lost job's metering");
                }
                self.tree.put(&s.key(), &s)?;
            }
        }
        for orphan in loaded.difference(&known) {
            warn!(unit = %orphan, "stopping a job unit hostd has no record of");
            if let Err(e) = self.units.stop(orphan).await {
                warn!(unit = %orphan, error = %report(&e), "could not stop orphan unit");
            }
        }
        Ok(())
    }

    /// The lease's scratch and the uid that owns it, made if the lease has none yet (data may
    /// be uploaded before any job runs). For `sovctl cp`: files written there must be given
    /// to `uid`.
    pub async fn scratch_for(&self, lease: &Lease) -> Result<(PathBuf, u32), NodeError> {
        if lease.state != LeaseState::Active {
            return Err(NodeError::Conflict(format!("lease {} has ended", lease.id)));
        }
        let _w = self.write.lock().await;
        let uid = self.lease_uid(&lease.id)?;
        accounts::ensure_job_user(&self.paths.system_root, uid)
            .map_err(|e| internal("publishing the job's user", e))?;
        let dir = self.lease_scratch(&lease.id, uid).await?;
        Ok((dir, uid))
    }

    /// Refreshes now rather than at the next tick: a lease ended, so its jobs must stop and
    /// its scratch be erased without waiting.
    pub fn poke(&self) {
        self.poke.notify_one();
    }

    /// Refuses `more` bytes into the lease's scratch when they would pass its quota, counting
    /// the scratch as [`Jobs::scratch_used`] does.
    pub fn check_scratch_quota(&self, lease: &str, more: u64) -> Result<(), ScratchError> {
        let used = self.scratch_used(lease)?;
        super::scratch::within_quota(lease, used, more, self.scratch.quota(lease)?)
    }

    /// Counts `bytes` an upload stored in `lease`'s scratch until its next measurement.
    pub fn note_scratch_written(&self, lease: &str, bytes: u64) {
        if let Some(m) = lock(&self.scratch_usage).get_mut(lease) {
            m.bytes = m.bytes.saturating_add(bytes);
        }
    }

    /// The bytes in `lease`'s scratch for an upload's quota check. Measuring walks the whole
    /// tree, so it is done at most every [`USAGE_FRESH`] (or ten times as long as the last
    /// walk took, when that is longer); in between, it is the last measurement plus what
    /// uploads stored since. Walking at every upload made copying a dataset of many small
    /// files quadratic in its number of files (4,100 files: 5 ms an upload at the first
    /// thousand, 14 ms at the last thousands). What a job writes is seen at the next
    /// measurement, and the runner stops a job over the quota at its own ([`QUOTA_EVERY`]).
    fn scratch_used(&self, lease: &str) -> Result<u64, ScratchError> {
        let now = std::time::Instant::now();
        if let Some(m) = lock(&self.scratch_usage).get(lease) {
            if now.duration_since(m.at) < USAGE_FRESH.max(m.took * 10) {
                return Ok(m.bytes);
            }
        }
        let bytes = self.scratch.bytes_used(lease)?;
        self.remember_scratch(lease, now, bytes);
        Ok(bytes)
    }

    /// Keeps a walk of `lease`'s scratch begun `at` for uploads' checks: the runner's own
    /// quota walks serve them too, so a lease with running jobs is not walked twice as often.
    fn remember_scratch(&self, lease: &str, at: std::time::Instant, bytes: u64) {
        let m = Measured {
            at,
            bytes,
            took: at.elapsed(),
        };
        lock(&self.scratch_usage).insert(lease.to_owned(), m);
    }

    /// Re-applies every active lease's egress allow-list from the policy in force: the policy
    /// changes when hostd starts with a new one, and lease networks outlive hostd.
    async fn reapply_policy(&self) {
        let leases: Vec<String> = lock(&self.nets).keys().cloned().collect();
        for id in leases {
            let Ok(lease) = self.node.lease(&id) else {
                continue;
            };
            if lease.state != LeaseState::Active {
                continue;
            }
            let allow = self.allow_list(&lease);
            match self.firewall.update(&id, &allow).await {
                Ok(()) => {
                    info!(lease = %id, cidrs = allow.cidrs.len(), policy = %allow.policy_digest, "egress allow-list re-applied")
                }
                Err(e) => {
                    warn!(lease = %id, error = %report(&e), "cannot re-apply the egress allow-list")
                }
            }
        }
    }

    /// A re-adopted service gets its port back (the same node port when it is still free).
    async fn republish(&self, s: &StoredJob) {
        let (Some(node_port), Some(port)) = (s.job.published_port, s.published_target) else {
            return;
        };
        let net = lock(&self.nets).get(&s.job.lease).cloned();
        let Some(net) = net else {
            warn!(job = %s.job.id, "re-adopted service has no lease network; port not published");
            return;
        };
        let mut again = s.clone();
        if self
            .publish(&mut again, net.lease_addr, port, node_port)
            .await
            .is_err()
        {
            warn!(job = %s.job.id, node_port, "re-adopted service's port could not be published again");
        }
    }

    /// Starts (or, for a re-adopted job, keeps) the job's meter cursor.
    async fn start_metering(&self, job: &Job) -> Result<(), NodeError> {
        let cursor = JobCursor {
            lease: job.lease.clone(),
            job: job.id.clone(),
            tenant: job.tenant.clone(),
            from_ms: job.started_ms,
            cpu_ns: 0,
            bytes_in: 0,
            bytes_out: 0,
            memory_peak_bytes: 0,
        };
        let node = self.node.clone();
        tokio::task::spawn_blocking(move || node.start_job_metering(cursor))
            .await
            .map_err(|e| internal("starting job metering", e))?
    }

    /// Cuts the job's use into job-usage records: whole UTC hours as they pass, the rest when
    /// it ends. Inside an hour nothing is written.
    async fn meter(&self, s: &StoredJob, memory_bytes: u64) -> Result<Vec<u64>, NodeError> {
        let j = &s.job;
        let sample = JobSample {
            cpu_ns: j.cpu_ns,
            bytes_in: j.bytes_in,
            bytes_out: j.bytes_out,
            memory_bytes,
        };
        let ended = j.state.is_final().then(|| exit_words(j));
        if self.node.job_cursor(&j.id)?.is_none() {
            self.start_metering(j).await?;
        }
        let node = self.node.clone();
        let id = j.id.clone();
        tokio::task::spawn_blocking(move || node.meter_job(&id, &sample, ended))
            .await
            .map_err(|e| internal("metering a job", e))?
    }

    async fn readopt(&self, s: &StoredJob) {
        if let Err(e) = self.units.hold(&s.unit, true).await {
            warn!(job = %s.job.id, error = %report(&e), "could not hold re-adopted unit");
        }
        self.republish(s).await;
        lock(&self.live).insert(s.key());
        self.node.set_leases_with_jobs(self.live_leases());
        lock(&self.reapply).insert(s.key());
        info!(tenant = %s.job.tenant, lease = %s.job.lease, job = %s.job.id, "job re-adopted");
    }

    /// Starts a job on an active lease. The caller has checked that the principal may act on
    /// the lease.
    pub async fn start(&self, lease: &Lease, req: NewJob) -> Result<Job, NodeError> {
        let limits = self.check_new_job(lease, &req)?;
        let _w = self.write.lock().await;
        // Ended since the caller read it? Its uid, network and scratch may be gone already.
        let lease = &self.node.lease(&lease.id)?;
        if lease.state != LeaseState::Active {
            return Err(NodeError::Conflict(format!("lease {} has ended", lease.id)));
        }
        self.node.check_tenant_active(&lease.tenant)?;
        self.check_capacity(&lease.id)?;
        let uid = self.lease_uid(&lease.id)?;
        accounts::ensure_job_user(&self.paths.system_root, uid)
            .map_err(|e| internal("publishing the job's user", e))?;
        let scratch = self.lease_scratch(&lease.id, uid).await?;
        let (net, resolv) = self.lease_network(lease).await?;
        let started_ms = self.node.clock().now_ms();
        let id = new_job_id(started_ms)?;
        let mut props = job_sandbox(lease, &req, scratch, uid, &limits, self.uvm.clone())
            .properties()
            .map_err(|e| NodeError::BadRequest(report(&e).to_string()))?;
        let devices = device_allow(&props);
        let log = self.log_file(&lease.id, &id)?;
        props.extend(watch_properties(&log));
        props.extend(network_properties(&net, &resolv));
        props.extend(ip_rules(&self.allow_list(lease), &net));
        let job = Job {
            id: id.clone(),
            lease: lease.id.clone(),
            tenant: lease.tenant.clone(),
            argv: req.argv.clone(),
            env_names: req.env.keys().cloned().collect(),
            state: JobState::Starting,
            result: None,
            exit_code: None,
            signal: None,
            started_ms,
            ended_ms: None,
            cpu_ns: 0,
            memory_peak_bytes: 0,
            bytes_in: 0,
            bytes_out: 0,
            limits,
            published_port: None,
        };
        let mut stored = StoredJob {
            job,
            unit: job::unit_name(&id),
            uid,
            devices,
            stop_requested: false,
            published_target: None,
            stop_reason: None,
        };
        let job = self.launch(&mut stored, &props).await?;
        match req.publish {
            Some(port) => self.publish(&mut stored, net.lease_addr, port, 0).await,
            None => Ok(job),
        }
    }

    /// What can be refused before anything is set up: an ended lease, limits outside the
    /// node's, a command the sandbox cannot run, a program that is not there. Returns the
    /// job's limits, resolved against the node's defaults.
    fn check_new_job(&self, lease: &Lease, req: &NewJob) -> Result<JobLimits, NodeError> {
        if lease.state != LeaseState::Active {
            return Err(NodeError::Conflict(format!("lease {} has ended", lease.id)));
        }
        let limits = job::check_request(req, &self.cfg)
            .map_err(|e| NodeError::BadRequest(report(&e).to_string()))?;
        sandbox::check_command(&req.argv, &req.env)
            .map_err(|e| NodeError::BadRequest(report(&e).to_string()))?;
        self.check_program(&req.argv[0])?;
        Ok(limits)
    }

    /// Forwards a node port to the job's `port` in the lease's namespace. A port that cannot
    /// be had stops the job: a service nobody can reach is not what was asked for.
    async fn publish(
        &self,
        stored: &mut StoredJob,
        lease_addr: std::net::Ipv4Addr,
        port: u16,
        node_port: u16,
    ) -> Result<Job, NodeError> {
        let config = PortConfig {
            listen: std::net::SocketAddr::new(self.cfg.publish_address, node_port),
            target: std::net::SocketAddr::from((lease_addr, port)),
            max_connections: self.cfg.publish_max_connections,
            connect_timeout: Duration::from_secs(5),
        };
        match ServicePort::publish(&stored.job.lease, config).await {
            Ok(p) => {
                stored.job.published_port = Some(p.local_addr().port());
                stored.published_target = Some(port);
                self.tree.put(&stored.key(), &*stored)?;
                info!(lease = %stored.job.lease, job = %stored.job.id, node_port = p.local_addr().port(), port, "service port published");
                lock(&self.ports).insert(stored.key(), p);
                Ok(stored.job.clone())
            }
            Err(e) => {
                warn!(job = %stored.job.id, error = %report(&e), "cannot publish the job's port; stopping it");
                let _ = self.stop_unit(stored).await;
                Err(NodeError::Unavailable(
                    "the node could not publish the job's port".into(),
                ))
            }
        }
    }

    /// Records the job, then asks systemd to start it; a refusal is recorded as `failed` and
    /// answered 503 (its detail goes to the log, not to the client).
    async fn launch(
        &self,
        stored: &mut StoredJob,
        props: &[(&'static str, PropertyValue)],
    ) -> Result<Job, NodeError> {
        self.tree.put(&stored.key(), &*stored)?;
        match self.units.start(&stored.unit, props).await {
            Ok(()) => {
                lock(&self.live).insert(stored.key());
                self.node.set_leases_with_jobs(self.live_leases());
                // Metering starts at the first refresh, from the job's start time: a durable
                // cursor costs an fsync, which the tenant's request need not wait for.
                info!(tenant = %stored.job.tenant, lease = %stored.job.lease, job = %stored.job.id, "job started");
                Ok(stored.job.clone())
            }
            Err(e) => {
                warn!(lease = %stored.job.lease, job = %stored.job.id, error = %report(&e), "systemd refused the job");
                stored.job.state = JobState::Failed;
                stored.job.result = Some("start-refused".into());
                stored.job.ended_ms = Some(self.node.clock().now_ms());
                self.tree.put(&stored.key(), &*stored)?;
                Err(NodeError::Unavailable(
                    "the node could not start the job; try again later".into(),
                ))
            }
        }
    }

    fn check_program(&self, program: &str) -> Result<(), NodeError> {
        let on_node = self.paths.system_root.join(program.trim_start_matches('/'));
        if on_node.is_file() {
            Ok(())
        } else {
            Err(NodeError::BadRequest(format!(
                "argv[0] {program} is not a file on the node"
            )))
        }
    }

    fn check_capacity(&self, lease: &str) -> Result<(), NodeError> {
        let running = self.live_jobs_of(lease).len();
        if running >= self.cfg.max_jobs_per_lease {
            return Err(NodeError::Busy(format!(
                "lease {lease} already runs {running} jobs (at most {})",
                self.cfg.max_jobs_per_lease
            )));
        }
        Ok(())
    }

    /// The lease's encrypted scratch, made with its first job and given to its uid. A
    /// scratch an earlier hostd made whose key the kernel still holds keeps its data (a
    /// restart of hostd does not cost the tenant its files); one whose key is gone (the node
    /// rebooted) is erased and made anew.
    async fn lease_scratch(&self, lease: &str, uid: u32) -> Result<PathBuf, NodeError> {
        let s = self.scratch.clone();
        let l = lease.to_owned();
        let quota = self.cfg.scratch_quota_bytes;
        let dir = tokio::task::spawn_blocking(move || -> Result<PathBuf, ScratchError> {
            match s.path(&l) {
                Err(ScratchError::UnknownLease { .. }) => {}
                other => return other,
            }
            if let Some(left) = s.leftovers()?.into_iter().find(|x| x.lease == l) {
                // A leftover of only job logs (its scratch deleted by hand) is made anew.
                if left.unlocked && left.path.is_dir() {
                    return Ok(left.path);
                }
                s.erase_leftover(&l)?;
            }
            s.create(&l, quota)
        })
        .await
        .map_err(|e| internal("preparing the lease's scratch", e))?
        .map_err(|e| internal("preparing the lease's scratch", e))?;
        std::os::unix::fs::chown(&dir, Some(uid), Some(uid))
            .map_err(|e| internal("giving the scratch to the lease's uid", e))?;
        Ok(dir)
    }

    /// The lease's network namespace and its `resolv.conf`, made with its first job from the
    /// egress allow-list the residency policy compiles for its tenant and classification.
    async fn lease_network(&self, lease: &Lease) -> Result<(LeaseNetwork, PathBuf), NodeError> {
        let resolv = self
            .paths
            .work
            .join("net")
            .join(&lease.id)
            .join("resolv.conf");
        if let Some(n) = lock(&self.nets).get(&lease.id).cloned() {
            if resolv.exists() {
                return Ok((n, resolv));
            }
        }
        let allow = self.allow_list(lease);
        let known = lock(&self.nets).get(&lease.id).cloned();
        let net = match known {
            Some(n) => n,
            None => self.firewall.create(&lease.id, &allow).await.map_err(|e| {
                warn!(lease = %lease.id, error = %report(&e), "cannot set up the lease's network");
                NodeError::Unavailable("the node could not set up the lease's network".into())
            })?,
        };
        lock(&self.nets).insert(lease.id.clone(), net.clone());
        let text = egress::lease_resolv_conf(&allow)
            .await
            .map_err(|e| internal("writing the lease's resolv.conf", e))?;
        create_dir(resolv.parent().unwrap_or(&self.paths.work), 0o755)?;
        std::fs::write(&resolv, text)
            .map_err(|e| internal("writing the lease's resolv.conf", e))?;
        info!(tenant = %lease.tenant, lease = %lease.id, addr = %net.lease_addr, cidrs = allow.cidrs.len(), "lease network ready");
        Ok((net, resolv))
    }

    /// What the lease's jobs may reach: the policy's egress rules for its tenant and
    /// classification; nothing without a policy.
    fn allow_list(&self, lease: &Lease) -> policy::EgressAllowList {
        match self.node.residency().policy() {
            Some(p) => policy::compile_egress(p, &lease.tenant, &lease.classification),
            None => policy::EgressAllowList {
                tenant: lease.tenant.clone(),
                classification: lease.classification.clone(),
                rules: Vec::new(),
                mode: policy::Mode::Enforce,
                cidrs: Vec::new(),
                hosts: Vec::new(),
                policy_digest: String::new(),
            },
        }
    }

    /// Where job `job` of `lease` will write its output: in the lease's logs folder, made
    /// (encrypted under the lease's key) if this is its first job.
    fn log_file(&self, lease: &str, job: &str) -> Result<PathBuf, NodeError> {
        let dir = self
            .scratch
            .logs(lease)
            .map_err(|e| internal("preparing the lease's job logs", e))?;
        Ok(dir.join(format!("{job}.log")))
    }

    /// Where job `job` of `lease` writes its output.
    pub fn log_path(&self, lease: &str, job: &str) -> Result<PathBuf, NodeError> {
        let dir = self
            .scratch
            .logs_path(lease)
            .map_err(|e| internal("finding the lease's job logs", e))?;
        Ok(dir.join(format!("{job}.log")))
    }

    /// The jobs of `lease`, oldest first.
    pub fn list(&self, lease: &str) -> Result<Vec<Job>, NodeError> {
        let mut jobs: Vec<Job> = self
            .tree
            .scan::<StoredJob>(&format!("{lease}/"))?
            .into_iter()
            .map(|s| s.job)
            .collect();
        jobs.sort_by_key(|j| j.started_ms);
        Ok(jobs)
    }

    /// A page of `lease`'s jobs, oldest first: at most `limit` after the job `after` (from the
    /// first when `None`), and the `after` of the next page when there are more. Job ids start
    /// with their start time, so the store's key order is start order and a page is read
    /// without the rest.
    pub fn page(
        &self,
        lease: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<Job>, Option<String>), NodeError> {
        let prefix = format!("{lease}/");
        let from = after.map(|a| format!("{prefix}{a}"));
        let mut page: Vec<Job> = self
            .tree
            .scan_page::<StoredJob>(&prefix, from.as_deref(), limit.saturating_add(1))?
            .into_iter()
            .map(|(_, s)| s.job)
            .collect();
        let next = if page.len() > limit {
            page.truncate(limit);
            page.last().map(|j| j.id.clone())
        } else {
            None
        };
        Ok((page, next))
    }

    /// One job of `lease`, or 404.
    pub fn get(&self, lease: &str, id: &str) -> Result<Job, NodeError> {
        Ok(self.stored(lease, id)?.job)
    }

    fn stored(&self, lease: &str, id: &str) -> Result<StoredJob, NodeError> {
        self.tree
            .get(&job::job_key(lease, id))?
            .ok_or_else(|| NodeError::NotFound(format!("no job {id} on lease {lease}")))
    }

    /// Asks systemd to stop the job (all its processes); its state follows from the unit.
    pub async fn stop(&self, lease: &str, id: &str) -> Result<Job, NodeError> {
        let _w = self.write.lock().await;
        let mut s = self.stored(lease, id)?;
        if s.job.state.is_final() {
            return Ok(s.job);
        }
        self.stop_unit(&mut s).await?;
        Ok(s.job)
    }

    /// Asks systemd to stop the job's unit. A request systemd did not take is not left marked
    /// as made: the lease's end and the quota check skip jobs marked, so they would never ask
    /// again.
    async fn stop_unit(&self, s: &mut StoredJob) -> Result<(), NodeError> {
        s.stop_requested = true;
        self.tree.put(&s.key(), s)?;
        let Err(e) = self.units.stop(&s.unit).await else {
            return Ok(());
        };
        warn!(job = %s.job.id, error = %report(&e), "stopping the job failed");
        s.stop_requested = false;
        self.tree.put(&s.key(), s)?;
        Err(NodeError::Unavailable(
            "the node could not stop the job; try again".into(),
        ))
    }

    /// Reads every running job's unit: its end, its counters; stops jobs whose lease ended;
    /// re-applies device rules systemd dropped.
    pub async fn refresh(&self) -> Result<(), NodeError> {
        let _w = self.write.lock().await;
        let keys: Vec<String> = lock(&self.live).iter().cloned().collect();
        for key in keys {
            let Some(mut s) = self.tree.get::<StoredJob>(&key)? else {
                lock(&self.live).remove(&key);
                continue;
            };
            // One job's failure must not hold up the others, the quotas or the lease ends.
            if let Err(e) = self.refresh_one(&mut s).await {
                warn!(job = %s.job.id, lease = %s.job.lease, error = %report(&e), "cannot refresh the job; retrying");
            }
        }
        self.node.set_leases_with_jobs(self.live_leases());
        #[cfg(feature = "dev")]
        self.show_sim_load();
        self.enforce_quotas().await?;
        self.release_ended_leases().await
    }

    /// The kernel does not enforce a per-lease quota here (no ext4 project quota on the dev
    /// kernel), so hostd does: every [`QUOTA_EVERY`], a lease with running jobs whose scratch
    /// holds more than its quota has its jobs stopped, with result `scratch-quota`. One lease
    /// filling the scratch volume would otherwise starve the others.
    async fn enforce_quotas(&self) -> Result<(), NodeError> {
        for lease in self.live_leases() {
            let due = {
                let mut checked = lock(&self.quota_checked);
                let last = checked.get(&lease).copied();
                let due = last.is_none_or(|t| t.elapsed() >= QUOTA_EVERY);
                if due {
                    checked.insert(lease.clone(), std::time::Instant::now());
                }
                due
            };
            // One lease's failure must not leave the others unchecked.
            if due {
                if let Err(e) = self.enforce_quota(&lease).await {
                    warn!(lease = %lease, error = %report(&e), "cannot enforce the lease's scratch quota; retrying");
                }
            }
        }
        Ok(())
    }

    /// The quota covers the scratch and the lease's job logs (as [`Scratch::bytes_used`]
    /// counts): a job printing without end would otherwise fill the scratch volume.
    async fn enforce_quota(&self, lease: &str) -> Result<(), NodeError> {
        let (s, l) = (self.scratch.clone(), lease.to_owned());
        let at = std::time::Instant::now();
        let used = tokio::task::spawn_blocking(move || s.bytes_used(&l))
            .await
            .map_err(|e| internal("checking a scratch quota", e))?;
        // A job re-adopted after a restart runs in scratch this hostd did not make (it does
        // not re-adopt scratch): there is no quota of its to hold it to.
        let unknown = |e: &ScratchError| matches!(e, ScratchError::UnknownLease { .. });
        match used {
            Ok(used) => self.remember_scratch(lease, at, used),
            Err(e) if unknown(&e) => return Ok(()),
            Err(e) => return Err(internal("counting a lease's scratch", e)),
        }
        // Against the walk just remembered: no second walk.
        let (would, quota) = match self.check_scratch_quota(lease, 0) {
            Ok(()) => return Ok(()),
            Err(ScratchError::OverQuota { would, quota, .. }) => (would, quota),
            Err(e) if unknown(&e) => return Ok(()),
            Err(e) => return Err(internal("counting a lease's scratch", e)),
        };
        warn!(lease = %lease, bytes = would, quota, "scratch over its quota: stopping the lease's jobs");
        for key in self.live_jobs_of(lease) {
            let Some(mut s) = self.tree.get::<StoredJob>(&key)? else {
                continue;
            };
            if s.stop_requested {
                continue;
            }
            s.stop_reason = Some("scratch-quota".into());
            // A failed stop is logged and unmarked by `stop_unit`; the next check asks again.
            let _ = self.stop_unit(&mut s).await;
        }
        Ok(())
    }

    /// Dev mode: the GPUs of leases with a running job show load.
    #[cfg(feature = "dev")]
    fn show_sim_load(&self) {
        let Some(sim) = &self.sim else { return };
        let running = self.live_leases();
        let leases: BTreeMap<String, Vec<u32>> = running
            .iter()
            .filter_map(|l| self.node.lease(l).ok())
            .map(|l| (l.id.clone(), l.gpus.iter().map(|g| g.index).collect()))
            .collect();
        let busy = super::simload::busy_gpus(&leases, &running);
        if let Err(e) = lock(sim).set_busy(busy) {
            warn!(error = %report(&e), "cannot show jobs' load on the simulated GPUs");
        }
    }

    async fn refresh_one(&self, s: &mut StoredJob) -> Result<(), NodeError> {
        let before = s.clone();
        let now = self.node.clock().now_ms();
        let status = match self.units.status(&s.unit).await {
            Ok(st) => st,
            Err(e) => {
                warn!(job = %s.job.id, error = %report(&e), "cannot read the job's unit");
                return Ok(());
            }
        };
        match &status {
            Some(st) => job::apply_status(&mut s.job, st, now),
            None => job::mark_lost(&mut s.job, now),
        }
        if s.job.state.is_final() && s.stop_reason.is_some() {
            s.job.result = s.stop_reason.clone();
        }
        if status.as_ref().is_some_and(|st| !st.has_ended()) {
            self.keep_devices(s).await;
            self.stop_if_lease_ended(s).await?;
        }
        let memory = status.as_ref().and_then(|st| st.memory_bytes).unwrap_or(0);
        if let Err(e) = self.meter_if_due(s, memory, now).await {
            // The cursor has not moved: the next refresh cuts the same span again.
            warn!(job = %s.job.id, error = %report(&e), "metering the job failed; retrying");
        } else if s.job.state.is_final() {
            self.finish(s).await;
        }
        // A running job whose counters did not move costs no write.
        if *s != before {
            self.tree.put(&s.key(), s)?;
        }
        Ok(())
    }

    /// Meters the job when a cut may be due: at its end, and the first time it is seen in an
    /// hour (whole hours are cut then). Between, only the memory peak since the last cut is
    /// kept, in memory: systemd 252 keeps none, and sampling it every refresh is the peak.
    async fn meter_if_due(
        &self,
        s: &StoredJob,
        memory_bytes: u64,
        now_ms: i64,
    ) -> Result<(), NodeError> {
        let key = s.key();
        let hour = now_ms.div_euclid(3_600_000);
        let peak = {
            let mut m = lock(&self.metering);
            let e = m.entry(key.clone()).or_insert((i64::MIN, 0));
            e.1 = e.1.max(memory_bytes);
            if e.0 == hour && !s.job.state.is_final() {
                return Ok(());
            }
            e.1
        };
        let ids = self.meter(s, peak).await?;
        let mut m = lock(&self.metering);
        if s.job.state.is_final() {
            m.remove(&key);
        } else if let Some(e) = m.get_mut(&key) {
            e.0 = hour;
            if !ids.is_empty() {
                e.1 = memory_bytes;
            }
        }
        Ok(())
    }

    async fn finish(&self, s: &StoredJob) {
        lock(&self.live).remove(&s.key());
        let port = lock(&self.ports).remove(&s.key());
        if let Some(p) = port {
            let c = p.counters().clone();
            p.stop().await;
            use std::sync::atomic::Ordering::Relaxed;
            info!(job = %s.job.id, to_job = c.to_job.load(Relaxed), from_job = c.from_job.load(Relaxed), "service port closed");
        }
        if let Err(e) = self.units.hold(&s.unit, false).await {
            warn!(job = %s.job.id, error = %report(&e), "could not let go of the ended unit");
        }
        info!(tenant = %s.job.tenant, lease = %s.job.lease, job = %s.job.id,
            state = s.job.state.as_str(), exit_code = ?s.job.exit_code, signal = ?s.job.signal,
            "job ended");
    }

    async fn stop_if_lease_ended(&self, s: &mut StoredJob) -> Result<(), NodeError> {
        if s.stop_requested {
            return Ok(());
        }
        if self.lease_has_ended(&s.job.lease)? {
            info!(lease = %s.job.lease, job = %s.job.id, "lease ended: stopping its job");
            // A failure is retried on the next tick (stop_requested stays unset).
            if self.stop_unit(s).await.is_err() {
                s.stop_requested = false;
            }
        }
        Ok(())
    }

    /// Re-applies the job's `DeviceAllow` after a reload, once every node it names exists
    /// again: re-applying while one is missing would drop its rule once more. Then reads the
    /// property back to check systemd holds every rule granted.
    async fn keep_devices(&self, s: &StoredJob) {
        if !lock(&self.reapply).contains(&s.key()) {
            return;
        }
        let root = &self.paths.system_root;
        let absent: Vec<&str> = s
            .devices
            .iter()
            .map(|(p, _)| p.as_str())
            .filter(|p| !root.join(p.trim_start_matches('/')).exists())
            .collect();
        if !absent.is_empty() {
            warn!(job = %s.job.id, ?absent, "device nodes missing after a reload; will re-apply once they are back");
            return;
        }
        let props = [("DeviceAllow", PropertyValue::Devices(s.devices.clone()))];
        if let Err(e) = self.units.set_properties(&s.unit, &props).await {
            warn!(job = %s.job.id, error = %report(&e), "could not re-apply device rules; retrying");
            return;
        }
        match self.units.status(&s.unit).await {
            Ok(Some(st)) if s.devices.iter().all(|d| st.device_allow.contains(d)) => {
                lock(&self.reapply).remove(&s.key());
                info!(tenant = %s.job.tenant, lease = %s.job.lease, job = %s.job.id, "device rules re-applied after a reload");
            }
            Ok(_) => warn!(job = %s.job.id, "systemd does not hold every device rule; retrying"),
            Err(e) => {
                warn!(job = %s.job.id, error = %report(&e), "cannot check device rules; retrying")
            }
        }
    }

    /// systemd finished a reload: every running job's device rules are re-applied.
    fn reloaded(&self) {
        let live = lock(&self.live).clone();
        info!(
            jobs = live.len(),
            "systemd reloaded: re-applying device rules"
        );
        lock(&self.reapply).extend(live);
    }

    /// Follows systemd's signals and ticks every second until `stop` is set.
    pub async fn run(
        self: Arc<Self>,
        mut events: tokio::sync::mpsc::Receiver<UnitEvent>,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut bus_open = true;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                e = events.recv(), if bus_open => match e {
                    Some(UnitEvent::Reloading { active: true }) => continue,
                    Some(UnitEvent::Reloading { active: false }) => {
                        self.reloaded();
                        drain(&mut events, &self).await;
                    }
                    Some(_) => drain(&mut events, &self).await,
                    None => {
                        warn!("systemd's bus closed: jobs are watched by the tick only");
                        bus_open = false;
                    }
                },
                _ = self.poke.notified() => {}
                _ = stop.changed() => return,
            }
            if let Err(e) = self.refresh().await {
                warn!(error = %report(&e), "refreshing jobs failed");
            }
        }
    }

    /// The lease's uid: the one it holds, or a new one, recorded before it is used.
    fn lease_uid(&self, lease: &str) -> Result<u32, NodeError> {
        let mut pool = lock(&self.uids);
        let known = pool.leases().iter().any(|l| l == lease);
        let uid = pool
            .assign(lease)
            .map_err(|e| NodeError::Unavailable(report(&e).to_string()))?;
        if !known {
            if let Err(e) = self.uid_tree.put(lease, &uid) {
                pool.release(lease);
                return Err(e.into());
            }
        }
        Ok(uid)
    }

    /// Keys of the running jobs of `lease` (live keys are `<lease>/<job>`).
    fn live_jobs_of(&self, lease: &str) -> Vec<String> {
        let prefix = format!("{lease}/");
        lock(&self.live)
            .iter()
            .filter(|k| k.starts_with(&prefix))
            .cloned()
            .collect()
    }

    /// Leases with a running job.
    fn live_leases(&self) -> BTreeSet<String> {
        lock(&self.live)
            .iter()
            .filter_map(|k| k.split_once('/').map(|(l, _)| l.to_owned()))
            .collect()
    }

    /// Whether `lease` has ended; a lease the node does not know has nothing left to run for.
    fn lease_has_ended(&self, lease: &str) -> Result<bool, NodeError> {
        match self.node.lease(lease) {
            Ok(l) => Ok(l.state == LeaseState::Ended),
            Err(NodeError::NotFound(_)) => Ok(true),
            Err(e) => Err(e),
        }
    }

    /// Leases that have ended and run nothing more give their uid back, and their logs and
    /// scratch are deleted: a tenant's data does not outlive its lease.
    /// One lease that cannot be released is retried at the next round; the others go on.
    async fn release_ended_leases(&self) -> Result<(), NodeError> {
        let holders = lock(&self.uids).leases();
        for lease in holders {
            if !self.live_jobs_of(&lease).is_empty() {
                continue;
            }
            if let Err(e) = self.release_if_ended(&lease).await {
                warn!(lease = %lease, error = %report(&e), "cannot release the ended lease; retrying");
            }
        }
        Ok(())
    }

    async fn release_if_ended(&self, lease: &str) -> Result<(), NodeError> {
        if !self.lease_has_ended(lease)? {
            return Ok(());
        }
        self.erase_scratch(lease).await?;
        self.firewall
            .remove(lease)
            .await
            .map_err(|e| internal("removing the lease's network", e))?;
        lock(&self.nets).remove(lease);
        self.erase_lease_files(lease)?;
        self.uid_tree.remove(lease)?;
        lock(&self.uids).release(lease);
        info!(lease = %lease, "lease's scratch crypto-erased, network removed, uid released");
        Ok(())
    }

    /// Crypto-erases the lease's scratch: its key leaves the kernel, then its files go.
    async fn erase_scratch(&self, lease: &str) -> Result<(), NodeError> {
        lock(&self.scratch_usage).remove(lease);
        lock(&self.quota_checked).remove(lease);
        let s = self.scratch.clone();
        let l = lease.to_owned();
        let erased = tokio::task::spawn_blocking(move || match s.erase(&l) {
            Err(ScratchError::UnknownLease { .. }) => {
                let left = s.leftovers()?.into_iter().any(|x| x.lease == l);
                left.then(|| s.erase_leftover(&l)).transpose()
            }
            other => other.map(Some),
        })
        .await
        .map_err(|e| internal("erasing the lease's scratch", e))?
        .map_err(|e| internal("erasing the lease's scratch", e))?;
        if let Some(e) = erased {
            let tenant = match self.node.lease(lease) {
                Ok(l) => l.tenant,
                Err(_) => String::new(),
            };
            let node = self.node.clone();
            let l = lease.to_owned();
            let id = tokio::task::spawn_blocking(move || {
                node.record_scratch_erased(&tenant, &l, e.bytes, e.files_busy)
            })
            .await
            .map_err(|e| internal("recording the scratch erasure", e))??;
            info!(lease = %lease, bytes = e.bytes, files_busy = e.files_busy, record = id, "scratch crypto-erased");
        }
        Ok(())
    }

    fn erase_lease_files(&self, lease: &str) -> Result<(), NodeError> {
        // `logs`: where a node kept job output before it moved under the lease's key; a
        // lease that ran jobs before an update has its old logs there.
        for dir in ["net", "logs"] {
            let path = self.paths.work.join(dir).join(lease);
            match std::fs::remove_dir_all(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(internal("erasing a lease's job files", e)),
            }
        }
        Ok(())
    }
}

/// How often a lease's scratch is measured against its quota while it runs jobs (measuring
/// walks its whole tree).
pub const QUOTA_EVERY: Duration = Duration::from_secs(10);

/// How long a measurement of a lease's scratch serves uploads' quota checks, at least.
pub const USAGE_FRESH: Duration = Duration::from_secs(5);

/// A lease's scratch as measured `at` (the walk took `took`), plus what uploads stored since.
#[derive(Debug, Clone, Copy)]
struct Measured {
    at: std::time::Instant,
    bytes: u64,
    took: Duration,
}

/// The sandbox of a job of `lease`: its command in the lease's scratch (or a folder inside
/// it), as the lease's user, with the lease's GPUs and nothing else writable.
fn job_sandbox(
    lease: &Lease,
    req: &NewJob,
    scratch: PathBuf,
    uid: u32,
    limits: &JobLimits,
    uvm_device: Option<String>,
) -> JobSandbox {
    let workdir = match &req.workdir {
        Some(w) => scratch.join(job::relative_inside(w).unwrap_or_default()),
        None => scratch.clone(),
    };
    JobSandbox {
        tenant: lease.tenant.clone(),
        argv: req.argv.clone(),
        env: req.env.clone(),
        workdir,
        uid,
        gid: uid,
        gpu_devices: lease
            .gpus
            .iter()
            .map(|g| devices::gpu_node(g.index))
            .collect(),
        uvm_device,
        limits: job::sandbox_limits(limits),
        writable: vec![scratch],
    }
}

/// A work directory that every job's private `/tmp` would hide.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the work directory {} is under /tmp or /var/tmp, which every job's private /tmp hides; choose one elsewhere (hostd dev: a --dir outside /tmp)",
    .0.display()
)]
pub struct WorkDirHidden(pub PathBuf);

/// A work directory under `/tmp` or `/var/tmp` is hidden from every job by its `PrivateTmp`
/// (systemd then fails the job with 226/NAMESPACE): refused with a sentence saying so.
pub fn check_work_dir(work: &Path) -> Result<(), WorkDirHidden> {
    if ["/tmp", "/var/tmp"].iter().any(|t| work.starts_with(t)) {
        return Err(WorkDirHidden(work.to_owned()));
    }
    Ok(())
}

/// Waits a moment for a burst of signals to settle, then empties the queue: one refresh
/// answers them all.
async fn drain<U: UnitManager, F: Firewall>(
    events: &mut tokio::sync::mpsc::Receiver<UnitEvent>,
    jobs: &Jobs<U, F>,
) {
    tokio::time::sleep(Duration::from_millis(20)).await;
    while let Ok(e) = events.try_recv() {
        if e == (UnitEvent::Reloading { active: false }) {
            jobs.reloaded();
        }
    }
}

/// Properties that let hostd follow the job: its output to its log, IP accounting, and a
/// reference so that systemd keeps the ended unit until hostd has read its exit status.
fn watch_properties(log: &Path) -> Vec<(&'static str, PropertyValue)> {
    let log = log.display().to_string();
    vec![
        (
            "StandardOutputFileToAppend",
            PropertyValue::Str(log.clone()),
        ),
        ("StandardErrorFileToAppend", PropertyValue::Str(log)),
        ("IPAccounting", PropertyValue::Bool(true)),
        ("AddRef", PropertyValue::Bool(true)),
    ]
}

/// How the job ended, in the words of its job-usage record (`exited 0`, `killed 15`,
/// `failed timeout`); empty when unknown (a lost unit).
fn exit_words(j: &Job) -> String {
    match j.state {
        JobState::Exited => format!("exited {}", j.exit_code.unwrap_or_default()),
        JobState::Killed => format!("killed {}", j.signal.unwrap_or_default()),
        JobState::Failed => format!("failed {}", j.result.as_deref().unwrap_or("")),
        _ => String::new(),
    }
}

/// The job joins its lease's network namespace and sees the lease's `resolv.conf`.
fn network_properties(net: &LeaseNetwork, resolv: &Path) -> Vec<(&'static str, PropertyValue)> {
    vec![
        (
            "NetworkNamespacePath",
            PropertyValue::Str(net.netns_path.display().to_string()),
        ),
        (
            "BindReadOnlyPaths",
            PropertyValue::Binds(vec![(
                resolv.display().to_string(),
                "/etc/resolv.conf".into(),
                false,
                0,
            )]),
        ),
    ]
}

/// systemd's IP rules, the second layer behind the namespace's nftables filter: everything
/// denied but the allow-list, the namespace's own loopback (private to the lease, so allowing
/// it opens nothing of the host's) and the host side of the lease's veth (published ports
/// are forwarded from there; the nftables input chain still keeps the job off the host).
fn ip_rules(
    allow: &policy::EgressAllowList,
    net: &LeaseNetwork,
) -> Vec<(&'static str, PropertyValue)> {
    let prefix = |ip: std::net::IpAddr, len: u8| match ip {
        std::net::IpAddr::V4(a) => (2, a.octets().to_vec(), u32::from(len)),
        std::net::IpAddr::V6(a) => (10, a.octets().to_vec(), u32::from(len)),
    };
    let mut allowed: Vec<(i32, Vec<u8>, u32)> = allow
        .cidrs
        .iter()
        .map(|c| prefix(c.network(), c.prefix_len()))
        .collect();
    allowed.push(prefix(std::net::Ipv4Addr::new(127, 0, 0, 0).into(), 8));
    allowed.push(prefix(std::net::Ipv6Addr::LOCALHOST.into(), 128));
    allowed.push(prefix(net.host_addr.into(), 32));
    vec![
        ("IPAddressAllow", PropertyValue::Prefixes(allowed)),
        (
            "IPAddressDeny",
            PropertyValue::Prefixes(vec![(2, vec![0; 4], 0), (10, vec![0; 16], 0)]),
        ),
    ]
}

fn device_allow(props: &[(&'static str, PropertyValue)]) -> Vec<(String, String)> {
    props
        .iter()
        .find_map(|(k, v)| match (k, v) {
            (&"DeviceAllow", PropertyValue::Devices(d)) => Some(d.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

/// Creates `dir` (and its parents) and sets its mode, also when it existed.
fn create_dir(dir: &Path, mode: u32) -> Result<(), NodeError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode)))
        .map_err(|e| internal("creating a job directory", e))
}

/// `job-` and the start time (ms, 12 hex digits, so ids sort by it until the year 10889)
/// followed by 8 random bytes: ids list in start order, and one cannot be guessed from
/// another (a wrong id is a 404 like another lease's).
fn new_job_id(started_ms: i64) -> Result<String, NodeError> {
    use rand_core::{OsRng, RngCore};
    let mut b = [0u8; 8];
    OsRng
        .try_fill_bytes(&mut b)
        .map_err(|e| internal("drawing a job id", e))?;
    let ms = u64::try_from(started_ms).unwrap_or(0);
    Ok(format!("job-{ms:012x}{}", hex::encode(b)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn systemds_ip_rules_allow_the_list_loopback_and_the_gateway_only() {
        let allow = policy::EgressAllowList {
            tenant: "t".into(),
            classification: "internal".into(),
            rules: vec!["r".into()],
            mode: policy::Mode::Enforce,
            cidrs: vec![policy::Cidr::parse("10.233.1.0/24").unwrap()],
            hosts: Vec::new(),
            policy_digest: String::new(),
        };
        let net = LeaseNetwork {
            lease: "l".into(),
            netns: "sov-l".into(),
            netns_path: "/run/netns/sov-l".into(),
            host_if: "svh0".into(),
            lease_if: "eth0".into(),
            host_addr: std::net::Ipv4Addr::new(10, 231, 0, 1),
            lease_addr: std::net::Ipv4Addr::new(10, 231, 0, 2),
            prefix_len: 30,
        };
        let rules = ip_rules(&allow, &net);
        let PropertyValue::Prefixes(allowed) = &rules[0].1 else {
            panic!("{rules:?}")
        };
        assert_eq!(rules[0].0, "IPAddressAllow");
        assert_eq!(
            allowed,
            &vec![
                (2, vec![10, 233, 1, 0], 24),
                (2, vec![127, 0, 0, 0], 8),
                (10, std::net::Ipv6Addr::LOCALHOST.octets().to_vec(), 128),
                (2, vec![10, 231, 0, 1], 32),
            ]
        );
        assert_eq!(
            rules[1],
            (
                "IPAddressDeny",
                PropertyValue::Prefixes(vec![(2, vec![0; 4], 0), (10, vec![0; 16], 0)])
            )
        );
    }
}
