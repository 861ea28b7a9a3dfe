//! `sovctl audit verify` (offline, no network): the auditor's tool.

use super::{finish, print_json, CmdResult, Exit, Fail};
use ::attest::report::report;
use auditor::source::DirSource;
use auditor::summary::format_summary;
use auditor::verify::{verify_export, FileRole, Supplied, VerifyError, VerifyOptions};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

/// `sovctl audit verify DIR`.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// Export directory (checkpoint, log.vkey, records.jsonl).
    pub dir: PathBuf,
    /// The node's log verifier key, obtained out of band (from the operator, or saved from
    /// an earlier, trusted export): the export is checked against this key only.
    #[arg(long, required_unless_present = "trust_export_key")]
    pub vkey: Option<PathBuf>,
    /// INSECURE: trust the export's own log.vkey. Anyone can sign a forged export with a key
    /// that claims the node's name; this proves only that the export is self-consistent.
    #[arg(long, conflicts_with = "vkey")]
    pub trust_export_key: bool,
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

/// Runs `sovctl audit verify`: exit 0 valid, 1 the export is bad (or does not verify), 2 a
/// file could not be read (nothing was checked). With `--json` the report (or failure), typed findings included,
/// goes to standard output as JSON.
pub fn run_verify(args: VerifyArgs, json_out: bool) -> ExitCode {
    finish(verify(args, json_out))
}

fn supplied(path: &Option<PathBuf>, role: FileRole) -> Result<Option<Supplied>, Fail> {
    path.as_deref()
        .map(|p| Supplied::read(p, role))
        .transpose()
        .map_err(|e| Fail::usage(report(&e)))
}

fn progress_bar(quiet: bool) -> ProgressBar {
    if quiet || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(
        "{spinner} verifying records [{bar:40}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

fn verify(args: VerifyArgs, json_out: bool) -> CmdResult {
    let source = DirSource::open(&args.dir).map_err(|e| Fail::usage(report(&e)))?;
    let opts = VerifyOptions {
        vkey: supplied(&args.vkey, FileRole::VerifierKey)?,
        previous: supplied(&args.previous, FileRole::PreviousCheckpoint)?,
        consistency: supplied(&args.consistency, FileRole::ConsistencyProof)?,
    };
    let bar = progress_bar(args.quiet);
    let result = verify_export(&source, &opts, |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    });
    bar.finish_and_clear();
    let report = match result {
        Ok(r) => r,
        Err(e) => {
            if json_out {
                print_json(&e)?;
            }
            for w in &e.warnings {
                eprintln!("warning: {w}");
            }
            eprintln!("VERIFICATION FAILED: {}", e.error);
            // A file that cannot be read was never checked (exit 2); anything else is an
            // export that does not verify (exit 1).
            return Ok(match e.error {
                VerifyError::CannotRead { .. } | VerifyError::Unreadable { .. } => Exit::Usage,
                _ => Exit::Bad,
            });
        }
    };
    for w in &report.warnings {
        eprintln!("warning: {w}");
    }
    if json_out {
        print_json(&report)?;
    }
    if report.is_valid() {
        if !json_out {
            print!("{}", format_summary(&report));
        }
        return Ok(Exit::Ok);
    }
    eprintln!(
        "VERIFICATION FAILED: {} ({} records, checkpoint size {}):",
        args.dir.display(),
        report.records,
        report.checkpoint.size
    );
    for p in &report.problems {
        eprintln!("  - {p}");
    }
    Ok(Exit::Bad)
}
