//! `hostd`: the Sovereign Host node daemon.

use clap::{Parser, Subcommand};
use hostd::cli;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "hostd", version, about = "Sovereign Host node daemon")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Offline audit tools that work on a stopped node's state directory.
    #[command(subcommand)]
    Audit(AuditCmd),
}

#[derive(Subcommand)]
enum AuditCmd {
    /// Export the signed usage log from a stopped node's state directory.
    Export(cli::audit::ExportStateArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Audit(AuditCmd::Export(args)) => cli::audit::run_export_state(args),
    }
}
