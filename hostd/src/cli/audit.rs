//! `hostd audit export` (offline, from a stopped node's state directory) and
//! `sovctl audit verify` (offline, no network): the auditor's tools.

use crate::audit;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
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
    match audit::export_state(&args.state, &args.out, &args.receipts) {
        Err(e) => {
            eprintln!("error: {e}");
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

pub fn run_verify(args: VerifyArgs) -> ExitCode {
    let opts = audit::VerifyOptions {
        dir: args.dir.clone(),
        vkey: args.vkey.clone(),
        previous: args.previous.clone(),
        consistency: args.consistency.clone(),
    };
    let bar = if args.quiet || !std::io::stderr().is_terminal() {
        ProgressBar::hidden()
    } else {
        let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template(
            "{spinner} verifying records [{bar:40}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar
    };
    let result = audit::verify_export(&opts, |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    });
    bar.finish_and_clear();
    let report = match result {
        Ok(r) => r,
        Err(e) => {
            for w in &e.warnings {
                eprintln!("warning: {w}");
            }
            eprintln!("VERIFICATION FAILED: {}", e.message);
            return ExitCode::from(1);
        }
    };
    for w in &report.warnings {
        eprintln!("warning: {w}");
    }
    if report.is_valid() {
        print!("{}", audit::format_summary(&report));
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "VERIFICATION FAILED: {} ({} records, checkpoint size {}):",
            args.dir.display(),
            report.records,
            report.checkpoint.size
        );
        for p in &report.problems {
            eprintln!("  - {p}");
        }
        ExitCode::from(1)
    }
}
