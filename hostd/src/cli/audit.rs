//! `hostd audit export` (offline, from a stopped node's state directory) and
//! `sovctl audit verify` (offline, no network): the auditor's tools.

use std::path::PathBuf;
use std::process::ExitCode;

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

/// `sovctl audit verify DIR`.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// Export directory (checkpoint, log.vkey, records.jsonl).
    pub dir: PathBuf,
    /// Verifier key to trust; defaults to DIR/log.vkey (trust on first use — pin it!).
    #[arg(long)]
    pub vkey: Option<PathBuf>,
    /// A checkpoint the auditor saw before; the new log must extend it.
    #[arg(long)]
    pub previous: Option<PathBuf>,
    /// Consistency proof from the previous checkpoint's size to the export's size.
    #[arg(long, requires = "previous")]
    pub consistency: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

pub fn run_export_state(args: ExportStateArgs) -> ExitCode {
    let _ = args;
    eprintln!("audit export: being written");
    ExitCode::from(2)
}

pub fn run_verify(args: VerifyArgs) -> ExitCode {
    let _ = args;
    eprintln!("audit verify: being written");
    ExitCode::from(2)
}
