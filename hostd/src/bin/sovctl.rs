//! `sovctl`: the operator's, tenant's and auditor's command-line tool.

use clap::{Parser, Subcommand};
use hostd::cli;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "sovctl", version, about = "Drive a Sovereign Host node")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Audit the signed usage log.
    #[command(subcommand)]
    Audit(AuditCmd),
}

#[derive(Subcommand)]
enum AuditCmd {
    /// Verify an export offline: signature, root, size, consistency, totals.
    Verify(cli::audit::VerifyArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Audit(AuditCmd::Verify(args)) => cli::audit::run_verify(args),
    }
}
