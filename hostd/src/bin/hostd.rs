//! `hostd`: the Sovereign Host node daemon.

use anyhow::Context;
use clap::{Parser, Subcommand};
use hostd::config::Config;
#[cfg(feature = "dev")]
use hostd::dev;
use hostd::state::Store;
use hostd::{cli, daemon};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "hostd", version, about = "Sovereign Host node daemon")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the node from a config file.
    Run {
        #[arg(long, default_value = "/etc/hostd/hostd.toml")]
        config: PathBuf,
    },
    /// Run a complete dev node: dev PKI, simulated GPUs, embedded store.
    #[cfg(feature = "dev")]
    Dev(dev::DevArgs),
    /// Offline audit tools that work on a stopped node's state directory.
    #[command(subcommand)]
    Audit(AuditCmd),
    /// Offline ledger maintenance on a stopped node.
    #[command(subcommand)]
    Ledger(LedgerCmd),
    /// Print the TPM's attestation key (hex TPMT_PUBLIC) for the node's enrollment.
    TpmAk(cli::TpmArgs),
    /// Print the TPM's identity (AK, EK and the maker's EK certificate, JSON) for an
    /// enrollment anchored in the EK certificate (`sovctl attest tpm-challenge`).
    TpmIdentity(cli::TpmIdentityArgs),
    /// Answer an enroller's credential challenge with the TPM (TPM2_ActivateCredential):
    /// prints the secret it releases, hex.
    TpmActivate(cli::TpmActivateArgs),
}

#[derive(Subcommand)]
enum LedgerCmd {
    /// Re-append records missing from a restored or deleted store from an audit export
    /// (docs/operations.md, "Backup, restore and recovery").
    Recover(cli::RecoverArgs),
}

#[derive(Subcommand)]
enum AuditCmd {
    /// Export the signed usage log from a stopped node's state directory.
    Export(cli::ExportStateArgs),
}

fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("HOSTD_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let json = std::env::var("HOSTD_LOG_FORMAT").is_ok_and(|v| v == "json");
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// Runs the node; `dev` is `hostd dev`'s folder and simulated GPUs.
fn serve(cfg: Config, dev_dir: Option<(PathBuf, String)>) -> anyhow::Result<()> {
    daemon::ensure_state_dir(&cfg.state.dir)?;
    let store = daemon::without_panics("opening the state database", || {
        Store::open(&cfg.state.dir).map_err(anyhow::Error::from)
    })?;
    let clock = daemon::node_clock(&cfg, &store)?;
    #[cfg(feature = "dev")]
    if dev_dir.is_some() {
        // Still single-threaded: the runtime starts below.
        dev::set_sim_clock(&clock);
    }
    let node = daemon::without_panics("opening the node's state", || {
        daemon::open_node(cfg.clone(), store, clock)
    })?;
    #[allow(unused_mut)]
    let mut setup = daemon::WorkloadSetup::from_config(&cfg);
    #[cfg(feature = "dev")]
    let mut container = None;
    #[cfg(feature = "dev")]
    if let Some((dir, gpus)) = &dev_dir {
        (setup, container) = dev::workloads(dir, &cfg, gpus);
        println!("{}", dev::banner(dir, &cfg, &setup));
    }
    #[cfg(not(feature = "dev"))]
    let _ = dev_dir;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let result = rt.block_on(daemon::run(node, setup));
    // A clean stop of `hostd dev` takes its private systemd (and the jobs in it) down; a
    // failure leaves it for the next start to adopt, as a node's systemd outlives hostd.
    #[cfg(feature = "dev")]
    if let (Some(c), Ok(())) = (container, &result) {
        dev::stop_workloads(c, &cfg);
    }
    result
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::Run { config } => {
            init_logging();
            Config::load(&config)
                .map_err(anyhow::Error::from)
                .and_then(|cfg| serve(cfg, None))
        }
        #[cfg(feature = "dev")]
        Cmd::Dev(args) => {
            init_logging();
            match dev::prepare(&args) {
                Ok(_) if args.prepare_only => {
                    println!("prepared {}", args.dir.display());
                    Ok(())
                }
                Ok(cfg) => serve(cfg, Some((args.dir.clone(), args.gpus.clone()))),
                Err(e) => Err(e),
            }
        }
        Cmd::Audit(AuditCmd::Export(args)) => return cli::run_export_state(args),
        Cmd::Ledger(LedgerCmd::Recover(args)) => return cli::run_recover(args),
        Cmd::TpmAk(args) => return cli::run_tpm_ak(args),
        Cmd::TpmIdentity(args) => return cli::run_tpm_identity(args),
        Cmd::TpmActivate(args) => return cli::run_tpm_activate(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hostd: {e:#}");
            ExitCode::FAILURE
        }
    }
}
