//! `sovctl`: the operator's, tenant's and auditor's command-line tool.
//!
//! Exit codes: 0 success (allowed/valid), 1 the node refused or a check failed
//! (denied/invalid), 2 usage or connection error.

use clap::{Parser, Subcommand};
use sovctl::cli::{self, node};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "sovctl", version, about = "Drive a Sovereign Host node")]
struct Cli {
    /// Client profile folder (profile.toml, cert.pem, key.pem, ca.pem), e.g. dev-state/operator.
    #[arg(long, global = true, env = "SOVCTL_PROFILE")]
    profile: Option<PathBuf>,
    /// Print the node's JSON answers as they are.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Is the node up, and who am I to it?
    Health,
    /// Tenants (operators create and suspend; tenants see themselves).
    #[command(subcommand)]
    Tenant(node::TenantCmd),
    /// The node's GPUs and who holds them.
    Gpus,
    /// GPU leases.
    #[command(subcommand)]
    Lease(node::LeaseCmd),
    /// Jobs on a lease: run, list, show, logs, stop
    #[command(subcommand)]
    Job(cli::job::JobCmd),
    /// Copy a file into or out of a lease's scratch: `cp data.tar LEASE:data.tar`,
    /// `cp LEASE:model.pt ./model.pt`.
    Cp(cli::cp::CpArgs),
    /// Usage records and their receipts.
    #[command(subcommand)]
    Usage(node::UsageCmd),
    /// An invoice computed from the verified ledger.
    Bill(node::BillArgs),
    /// Audit the signed usage log.
    #[command(subcommand)]
    Audit(AuditCmd),
    /// Residency policies: check, sign, explain (offline).
    #[command(subcommand)]
    Policy(cli::policy::PolicyCmd),
    /// Attestation: challenge the node and appraise its evidence, verify offline, make keys,
    /// enrollments and reference manifests.
    Attest(Box<cli::attest::AttestCmd>),
}

#[derive(Subcommand)]
enum AuditCmd {
    /// Export checkpoint, vkey and records from a running node (auditor or operator).
    Export {
        #[arg(long)]
        out: PathBuf,
        /// Also fetch the receipt of these record ids (repeatable).
        #[arg(long = "receipt")]
        receipts: Vec<u64>,
    },
    /// Verify an export offline: signature, root, size, consistency, totals.
    Verify(cli::audit::VerifyArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let profile = cli.profile.as_deref();
    let j = cli.json;
    match cli.cmd {
        Cmd::Policy(cmd) => cli::policy::run(cmd),
        Cmd::Attest(cmd) => cli::attest::run(*cmd, profile, j),
        Cmd::Audit(AuditCmd::Verify(args)) => cli::audit::run_verify(args, j),
        Cmd::Audit(AuditCmd::Export { out, receipts }) => cli::finish(node::online(profile, |c| {
            node::audit_export(c, out, receipts)
        })),
        Cmd::Health => cli::finish(node::online(profile, |c| node::health(c, j))),
        Cmd::Tenant(t) => cli::finish(node::online(profile, |c| node::tenant(c, t, j))),
        Cmd::Gpus => cli::finish(node::online(profile, |c| node::gpus(c, j))),
        Cmd::Lease(l) => cli::finish(node::online(profile, |c| node::lease(c, l, j))),
        Cmd::Job(cmd) => cli::finish(node::online(profile, |c| cli::job::job(c, cmd, j))),
        Cmd::Cp(args) => cli::finish(node::online(profile, |c| cli::cp::cp(c, args, j))),
        Cmd::Usage(u) => cli::finish(node::online(profile, |c| node::usage(c, u, j))),
        Cmd::Bill(b) => cli::finish(node::online(profile, |c| node::bill(c, b, j))),
    }
}
