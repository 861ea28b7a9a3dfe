//! `hostd run`: wiring the node together and running it until SIGTERM.

use crate::api;
use crate::clock::Clock;
use crate::config::Config;
use crate::failures::{FailureTracker, Verdict};
use crate::gpu::Gpus;
use crate::keys;
use crate::ledger::Ledger;
use crate::node::{Node, NodeError};
use crate::residency::Residency;
use crate::state::Store;
use crate::tls;
use crate::witness::{Witness, WITNESS_FILE};
use crate::workload::egress::{EgressError, FirewallConfig, NftFirewall};
use crate::workload::runner::{Jobs, NodeJobs, Paths, WorkDirHidden};
use crate::workload::scratch::{Fscrypt, ScratchError};
use crate::workload::units::{Systemd, UnitError};
use anyhow::{Context, Result};
use attest::report::report;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tracing::{error, info, warn};

/// Creates the state directory readable by hostd alone: it holds the ledger's signing key.
pub fn ensure_state_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("creating state directory {}", dir.display()))?;
    }
    let mode = std::fs::metadata(dir)
        .with_context(|| format!("reading state directory {}", dir.display()))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("restricting state directory {} to 0700", dir.display()))?;
    }
    Ok(())
}

/// Runs `f`, turning a panic inside it (sled panics on some damaged files instead of
/// answering an error) into an error with the recovery procedure, with no backtrace printed.
pub fn without_panics<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    std::panic::set_hook(previous);
    match result {
        Ok(r) => r,
        Err(payload) => {
            let detail = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "no detail".into());
            anyhow::bail!(
                "{what}: the state database is damaged (its reader failed: {detail}). hostd \
                 refuses to start. Move the state's db/ aside, restore it from a backup (or \
                 start with none), then run `hostd ledger recover --from-export DIR` \
                 (docs/operations.md, \"Backup, restore and recovery\")"
            )
        }
    }
}

/// The clock for this config: real time, or the dev-mode accelerated clock whose epoch is
/// kept in the store so that time never runs backwards across restarts.
pub fn node_clock(cfg: &Config, store: &Store) -> Result<Clock> {
    if cfg.metering.time_scale == 1.0 {
        return Ok(Clock::real());
    }
    let epoch = match store.meta_get("clock_epoch_ms")? {
        Some(v) => i64::from_be_bytes(
            <[u8; 8]>::try_from(v.as_slice()).context("corrupt clock epoch in state")?,
        ),
        None => {
            let now = Clock::real().now_ms();
            store.meta_set("clock_epoch_ms", &now.to_be_bytes())?;
            store.flush()?;
            now
        }
    };
    Ok(Clock::scaled(epoch, cfg.metering.time_scale))
}

/// Opens everything the node needs, in the order that gives the clearest error first.
pub fn open_node(cfg: Config, store: Store, clock: Clock) -> Result<Node> {
    let key_path = cfg.state.dir.join("log.key");
    let signer = keys::load_or_create_log_key(&key_path, &cfg.log_origin())
        .context("loading the node's log key")?;
    let witness = Witness::at(cfg.state.dir.join(WITNESS_FILE));
    let ledger =
        Ledger::open_witnessed(store.db(), signer, witness).context("opening the usage ledger")?;
    // The public key, where an auditor (or `hostd dev`'s banner) expects it.
    let vkey_path = cfg.state.dir.join("log.vkey");
    std::fs::write(&vkey_path, format!("{}\n", ledger.vkey()))
        .with_context(|| format!("writing {}", vkey_path.display()))?;
    let gpus = Gpus::open(cfg.gpu.nvml_library.as_deref()).context("opening NVML")?;
    let residency = match (&cfg.policy.file, &cfg.policy.authority) {
        (Some(p), Some(authority)) => Residency::load(p, authority, &store)
            .with_context(|| format!("residency policy {}", p.display()))?,
        _ => {
            warn!("no residency policy configured: every placement will be denied");
            Residency::none()
        }
    };
    Node::open(cfg, clock, store, ledger, gpus, residency).map_err(anyhow::Error::from)
}

/// Tells systemd we are ready (Type=notify units); a no-op elsewhere.
fn sd_notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let sock = match std::os::unix::net::UnixDatagram::unbound() {
        Ok(s) => s,
        Err(e) => {
            warn!(error = %report(&e), "sd_notify: cannot create socket");
            return;
        }
    };
    let bytes = path.as_encoded_bytes();
    let result = if let Some(name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(name)
            .and_then(|addr| sock.send_to_addr(state.as_bytes(), &addr))
    } else {
        sock.send_to(state.as_bytes(), Path::new(&path))
    };
    if let Err(e) = result {
        warn!(error = %report(&e), "sd_notify failed");
    }
}

/// Real seconds between metering rounds: the configured interval in clock time, but never
/// faster than 20 per second however much dev mode accelerates time.
fn tick_period(cfg: &Config) -> Duration {
    let secs = cfg.metering.interval_secs / cfg.metering.time_scale;
    Duration::from_secs_f64(secs.max(0.05))
}

/// Why this node runs no jobs. Its message, causes included ([`report`]), is what the log,
/// dev mode's banner and clients asking for jobs are told; the rest of the node serves.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JobsOff {
    /// The operator turned jobs off.
    #[error("workloads.enabled is false in the configuration")]
    Disabled,
    /// The work directory is where jobs cannot see it.
    #[error(transparent)]
    WorkDirHidden(#[from] WorkDirHidden),
    /// The work directory (or its scratch folder) could not be made.
    #[error("cannot create the work directory {}", .dir.display())]
    WorkDir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// systemd's bus could not be reached or followed.
    #[error(transparent)]
    Systemd(#[from] UnitError),
    /// The lease networks' nftables table could not be set up.
    #[error("cannot set up the lease network filter")]
    Firewall(#[source] EgressError),
    /// The scratch directory does not support fscrypt.
    #[error(
        "no encrypted scratch at {} (it must be on ext4 with the encrypt feature)",
        .dir.display()
    )]
    Scratch {
        dir: PathBuf,
        #[source]
        source: ScratchError,
    },
    /// The jobs controller could not open its store or re-adopt running jobs.
    #[error(transparent)]
    Controller(#[from] NodeError),
    /// Dev mode: a part of its private systemd could not be had (`what` says which).
    #[error("{what}")]
    Dev {
        what: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Where this node's jobs run: systemd's bus, or why there are no jobs.
#[derive(Debug)]
pub struct WorkloadSetup {
    /// The D-Bus address of the systemd that runs jobs, or why jobs are off.
    pub bus: Result<String, JobsOff>,
    /// The root of the system jobs run in (`/`, or dev mode's container).
    pub system_root: PathBuf,
    /// Dev mode: the simulated GPUs' control file (running jobs show as load).
    pub sim_control: Option<PathBuf>,
}

impl WorkloadSetup {
    /// A node's own systemd, as configured.
    pub fn from_config(cfg: &Config) -> WorkloadSetup {
        WorkloadSetup {
            bus: if cfg.workloads.enabled {
                Ok(cfg.workloads.systemd_bus.clone())
            } else {
                Err(JobsOff::Disabled)
            },
            system_root: PathBuf::from("/"),
            sim_control: None,
        }
    }
}

/// Connects to systemd, re-adopts running jobs and starts following them. Any failure turns
/// jobs off with the reason (the rest of the node still serves), never stops the daemon.
async fn start_workloads(
    node: &Arc<Node>,
    setup: WorkloadSetup,
    stop: tokio::sync::watch::Receiver<bool>,
) -> api::Workloads {
    match try_start_workloads(node, setup, stop).await {
        Ok(jobs) => {
            info!("jobs run under systemd");
            api::Workloads::On(jobs)
        }
        Err(why) => {
            let why = report(&why).to_string();
            warn!(reason = %why, "jobs are off");
            api::Workloads::Off(why)
        }
    }
}

async fn try_start_workloads(
    node: &Arc<Node>,
    setup: WorkloadSetup,
    stop: tokio::sync::watch::Receiver<bool>,
) -> std::result::Result<Arc<NodeJobs>, JobsOff> {
    let bus = setup.bus?;
    let systemd = Systemd::connect(&bus).await?;
    let events = systemd.events().await?;
    let cfg = node.config().workloads.clone();
    let paths = Paths {
        work: cfg.work_dir.clone(),
        system_root: setup.system_root,
        sim_control: setup.sim_control,
    };
    let firewall = NftFirewall::adopt(FirewallConfig {
        uplinks: cfg.uplinks.clone(),
        ..FirewallConfig::default()
    })
    .await
    .map_err(JobsOff::Firewall)?;
    let scratch_dir = cfg.scratch_dir();
    for dir in [&cfg.work_dir, &scratch_dir] {
        make_reachable_dir(dir).map_err(|source| JobsOff::WorkDir {
            dir: dir.clone(),
            source,
        })?;
    }
    let scratch = Fscrypt::new(&scratch_dir).map_err(|source| JobsOff::Scratch {
        dir: scratch_dir.clone(),
        source,
    })?;
    let jobs = Jobs::new(
        systemd,
        firewall,
        Arc::new(scratch),
        node.clone(),
        cfg,
        paths,
    )?;
    jobs.adopt().await?;
    let jobs = Arc::new(jobs);
    tokio::spawn(jobs.clone().run(events, stop));
    Ok(jobs)
}

/// Creates `dir` if it is missing, mode 0711: jobs' uids must pass through it to their
/// lease's scratch (0700 each), and nothing may list it. A node built from the image has no
/// shell to make it with; hostd's own umask (0077 in its unit) would make it unreachable. An
/// existing directory is the operator's and keeps its mode.
fn make_reachable_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if dir.is_dir() {
        return Ok(());
    }
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711))
}

/// Runs the daemon until SIGTERM or SIGINT.
pub async fn run(node: Node, workloads: WorkloadSetup) -> Result<()> {
    let node = Arc::new(node);
    let cfg = node.config().clone();
    let server_cfg = tls::server_config(&cfg.api.ca, &cfg.api.cert, &cfg.api.key)
        .context("loading TLS files")?;
    let listener = tokio::net::TcpListener::bind(cfg.api.listen)
        .await
        .with_context(|| format!("listening on {}", cfg.api.listen))?;
    let addr = listener.local_addr()?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);

    let meter = tokio::spawn(metering_loop(
        node.clone(),
        stop_rx.clone(),
        tick_period(&cfg),
        Duration::from_secs(cfg.metering.stop_after_failing_secs),
    ));

    let workloads = start_workloads(&node, workloads, stop_rx.clone()).await;
    let mut server_stop = stop_rx.clone();
    let shutdown = async move {
        let _ = server_stop.changed().await;
    };
    let options = tls::ServeOptions {
        shutdown_grace: Duration::from_secs(8),
        tenant_rate: cfg.api.tenant_rate(),
        ..Default::default()
    };
    let server = tokio::spawn(tls::serve_with(
        listener,
        server_cfg,
        cfg.api.trust_domain.clone(),
        api::router_with(node.clone(), workloads),
        shutdown,
        options,
    ));
    info!(node = %cfg.node.name, %addr, "hostd ready");
    sd_notify("READY=1");

    let mut meter = meter;
    let failed = until_stopped(&mut meter).await?;
    sd_notify("STOPPING=1");
    let _ = stop_tx.send(true);
    if failed.is_none() {
        let _ = meter.await;
    }
    stop_server(server).await;
    if let Some(why) = failed {
        let _ = node.flush();
        anyhow::bail!("{why}; stopped so that the supervisor restarts hostd");
    }
    node.flush().context("final flush")?;
    info!("hostd stopped cleanly");
    Ok(())
}

/// Waits for SIGTERM, SIGINT or the metering loop's end. Returns why hostd must stop for its
/// supervisor to restart it (the metering loop ended), or `None` for a signal.
async fn until_stopped(
    meter: &mut tokio::task::JoinHandle<Option<String>>,
) -> Result<Option<String>> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => info!("SIGTERM: shutting down"),
        _ = tokio::signal::ctrl_c() => info!("SIGINT: shutting down"),
        r = meter => {
            let why = match r {
                Ok(Some(why)) => why,
                Ok(None) => "the metering loop ended".to_owned(),
                Err(e) => format!("the metering loop failed: {e}", e = report(&e)),
            };
            error!(reason = %why, "stopping so that the supervisor restarts hostd");
            return Ok(Some(why));
        }
    }
    Ok(None)
}

/// Waits up to 10 s for the API server, told to stop, to finish its connections.
async fn stop_server(server: tokio::task::JoinHandle<std::io::Result<()>>) {
    match tokio::time::timeout(Duration::from_secs(10), server).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => warn!(error = %report(&e), "API server stopped with an error"),
        Ok(Err(e)) => warn!(error = %report(&e), "API server task failed"),
        Err(_) => warn!("API connections did not finish within 10 s"),
    }
}

/// Meters every `period` until told to stop. Failed rounds are logged through a
/// [`FailureTracker`] (no flood) and shown in `/v1/health`; after `stop_after` of
/// uninterrupted failure it returns why, and the node stops (see [`crate::failures`]).
async fn metering_loop(
    node: Arc<Node>,
    mut stop: tokio::sync::watch::Receiver<bool>,
    period: Duration,
    stop_after: Duration,
) -> Option<String> {
    let mut every = tokio::time::interval(period);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failures = FailureTracker::new(stop_after);
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = stop.changed() => return None,
        }
        let n = node.clone();
        let result = match tokio::task::spawn_blocking(move || n.meter_tick()).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(report(&e).to_string()),
            Err(e) => Err(format!("metering worker failed: {e}", e = report(&e))),
        };
        match result {
            Ok(()) => {
                if let Some(rounds) = failures.succeeded() {
                    info!(rounds, "metering works again");
                    node.set_metering_failure(None);
                }
            }
            Err(e) => {
                let now = std::time::Instant::now();
                if failures.failing_since().is_none() {
                    node.set_metering_failure(Some(node.clock().now_ms()));
                }
                match failures.failed(now, &e) {
                    Verdict::Log { rounds } => error!(error = %e, rounds, "metering round failed"),
                    Verdict::Quiet => {}
                    Verdict::Stop {
                        rounds,
                        failing_for,
                    } => {
                        return Some(format!(
                            "metering has failed for {} s ({rounds} rounds; last: {e})",
                            failing_for.as_secs()
                        ))
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{make_reachable_dir, JobsOff};
    use crate::workload::runner::WorkDirHidden;
    use attest::report::report;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn why_jobs_are_off_reads_as_one_sentence_and_keeps_its_cause() {
        let hidden = JobsOff::from(WorkDirHidden("/tmp/work".into()));
        assert!(
            report(&hidden)
                .to_string()
                .starts_with("the work directory /tmp/work is under /tmp or /var/tmp"),
            "{}",
            report(&hidden)
        );
        let denied = JobsOff::WorkDir {
            dir: "/srv/work".into(),
            source: std::io::Error::from_raw_os_error(13),
        };
        assert_eq!(
            report(&denied).to_string(),
            "cannot create the work directory /srv/work: Permission denied (os error 13)"
        );
        let cause = std::error::Error::source(&denied).expect("the I/O error is the cause");
        assert!(cause.downcast_ref::<std::io::Error>().is_some());
    }

    fn mode(p: &std::path::Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_missing_work_directory_is_made_passable_and_an_existing_one_is_left_alone() {
        let t = tempfile::tempdir().unwrap();
        let made = t.path().join("work/scratch");
        make_reachable_dir(&made).unwrap();
        assert_eq!(mode(&made), 0o711);

        let own = t.path().join("operator");
        std::fs::create_dir(&own).unwrap();
        std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o750)).unwrap();
        make_reachable_dir(&own).unwrap();
        assert_eq!(mode(&own), 0o750);

        let file = t.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        assert!(make_reachable_dir(&file).is_err());
    }
}
