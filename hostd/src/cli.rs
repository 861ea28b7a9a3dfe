//! hostd's own offline subcommands, which work on a stopped node's state directory.

use crate::audit;
use attest::report::report;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// `hostd audit export --state DIR --out DIR2`.
#[derive(Debug, clap::Args)]
pub struct ExportStateArgs {
    /// State directory of a stopped node (the one in its config).
    #[arg(long)]
    pub state: PathBuf,
    /// Output directory; created if missing, must be empty.
    #[arg(long)]
    pub out: PathBuf,
    /// Also write the tlog-proof receipt of these record ids (repeatable).
    #[arg(long = "receipt")]
    pub receipts: Vec<u64>,
}

pub fn run_export_state(args: ExportStateArgs) -> ExitCode {
    match audit::export_state(&args.state, &args.out, &args.receipts) {
        Err(e) => {
            eprintln!("error: {e}", e = report(&e));
            ExitCode::from(1)
        }
        Ok(summary) if summary.problems.is_empty() => {
            println!(
                "exported {} records (checkpoint size {}){} to {}",
                summary.records,
                summary.checkpoint_size,
                receipts_note(summary.receipts),
                args.out.display()
            );
            ExitCode::SUCCESS
        }
        Ok(summary) => {
            eprintln!(
                "error: the state directory {} is damaged; the export in {} was written as \
                 stored ({} records, checkpoint size {}) and will not verify:",
                args.state.display(),
                args.out.display(),
                summary.records,
                summary.checkpoint_size
            );
            for p in &summary.problems {
                eprintln!("  - {p}");
            }
            ExitCode::from(1)
        }
    }
}

fn receipts_note(n: usize) -> String {
    match n {
        0 => String::new(),
        1 => " and 1 receipt".to_owned(),
        n => format!(" and {n} receipts"),
    }
}

/// `hostd ledger recover --config FILE --from-export DIR`.
#[derive(Debug, clap::Args)]
pub struct RecoverArgs {
    /// The stopped node's configuration (its state directory, name and log key).
    #[arg(long, default_value = "/etc/hostd/hostd.toml")]
    pub config: PathBuf,
    /// An audit export of this node that covers every record it ever signed.
    #[arg(long)]
    pub from_export: PathBuf,
}

/// Runs the recovery (see [`crate::recover`]): exit 0 recovered, 1 refused.
pub fn run_recover(args: RecoverArgs) -> ExitCode {
    let cfg = match crate::config::Config::load(&args.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}", e = report(&e));
            return ExitCode::from(2);
        }
    };
    let now = crate::clock::Clock::real().now_ms();
    match crate::recover::recover_from_export(
        &cfg.state.dir,
        &cfg.node.name,
        &cfg.log_origin(),
        &args.from_export,
        now,
    ) {
        Ok(r) => {
            println!(
                "recovered: the store held {} records, this node had signed {}; re-appended {} \
                 from {}; recorded as record {}",
                r.store_size,
                r.witnessed_size,
                r.reappended,
                args.from_export.display(),
                r.record
            );
            if !r.leases_ended.is_empty() {
                println!(
                    "ended leases the restored store still listed as active (at their last \
                     recorded interval): {}",
                    r.leases_ended.join(", ")
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}", e = report(&e));
            ExitCode::from(1)
        }
    }
}

/// `hostd tpm-ak [--device PATH | --swtpm-socket PATH]`.
#[derive(Debug, clap::Args)]
pub struct TpmAkArgs {
    /// The TPM device (default /dev/tpmrm0).
    #[arg(long)]
    pub device: Option<PathBuf>,
    /// A swtpm data socket instead of a device (tests, VMs with a software TPM).
    #[arg(long, conflicts_with = "device")]
    pub swtpm_socket: Option<PathBuf>,
}

/// Prints the TPM's attestation key (TPMT_PUBLIC, hex, one line) for the operator's
/// enrollment (`sovctl attest enroll --tpm-ak`): exit 0, or 1 with the TPM's error.
pub fn run_tpm_ak(args: TpmAkArgs) -> ExitCode {
    let result = match &args.swtpm_socket {
        Some(socket) => tpm::SwtpmSocket::connect(socket, Duration::from_secs(30))
            .and_then(|mut t| tpm::ak_public(&mut t)),
        None => {
            let device = args
                .device
                .clone()
                .unwrap_or_else(|| PathBuf::from(tpm::DEFAULT_DEVICE));
            tpm::Device::open(&device).and_then(|mut t| tpm::ak_public(&mut t))
        }
    };
    match result {
        Ok(public) => {
            println!("{}", hex::encode(public));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}", e = report(&e));
            ExitCode::from(1)
        }
    }
}
