//! The online commands: tenants, GPUs, leases, usage, bills and audit exports, typed end to
//! end over the client's `hostd-api` types.

use super::{block_on, connect, next_page, print_json, CmdResult, Exit, Fail, PagedList};
use crate::client::Client;
use attest::report::report;
use auditor::billing::Invoice;
use auditor::export::write_export;
use auditor::money::format_inr;
use clap::{Args, Subcommand};
use hostd_api::lease::{Lease, LeaseState, NewLease};
use hostd_api::query::{BillQuery, LeasesQuery, RecordsQuery, UsageQuery};
use hostd_api::tenant::NewTenant;
use std::path::{Path, PathBuf};

#[derive(Debug, Subcommand)]
pub enum TenantCmd {
    Create {
        #[arg(long)]
        id: String,
        #[arg(long)]
        name: String,
        /// Home jurisdiction, ISO 3166 (e.g. IN-TG).
        #[arg(long)]
        jurisdiction: String,
        #[arg(long, default_value = "")]
        contact: String,
    },
    List,
    Show {
        id: String,
    },
    Suspend {
        id: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum LeaseCmd {
    Create {
        #[arg(long)]
        tenant: String,
        #[arg(long, default_value_t = 1)]
        gpus: u32,
        #[arg(long)]
        model: String,
        /// Classification of the data the workload processes (residency policy input).
        #[arg(long, default_value = "public")]
        classification: String,
        #[arg(long)]
        dataset: Option<String>,
    },
    /// The leases you may see, in id order: every page, printed as each arrives, unless
    /// `--after` or `--limit` asks for one page (whose `next_after`, if any, `--json` shows).
    List {
        /// One page: the leases whose id comes after ID.
        #[arg(long, value_name = "ID")]
        after: Option<String>,
        /// One page of at most N leases (the node allows 1 to 1,000; default 1,000).
        #[arg(long, value_name = "N")]
        limit: Option<u64>,
        /// Only the active leases.
        #[arg(long)]
        active: bool,
    },
    Show {
        id: String,
    },
    /// End a lease now: metering stops and its last records are written.
    End {
        id: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum UsageCmd {
    /// Usage records in ledger order: every page, printed as each arrives, unless `--after`
    /// or `--limit` asks for one page (whose `next_after`, if any, `--json` shows).
    List {
        #[arg(long)]
        tenant: Option<String>,
        #[arg(long)]
        lease: Option<String>,
        /// One page: records with an id greater than ID.
        #[arg(long, value_name = "ID")]
        after: Option<u64>,
        /// One page of at most N records (the node allows 1 to 10,000; default 1,000).
        #[arg(long, value_name = "N")]
        limit: Option<u64>,
    },
    /// A record and its tlog-proof receipt, checkable offline.
    Receipt {
        id: u64,
        /// Write the record and receipt as FILE.json and FILE.tlog-proof.
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

#[derive(Debug, Args)]
pub struct BillArgs {
    #[arg(long)]
    pub tenant: String,
    /// Start (RFC 3339 or YYYY-MM-DD), inclusive.
    #[arg(long)]
    pub from: Option<String>,
    /// End (RFC 3339 or YYYY-MM-DD), exclusive.
    #[arg(long)]
    pub to: Option<String>,
}

/// Connects with `--profile` and runs `f` on a single-threaded runtime.
pub fn online<F, Fut>(profile: Option<&Path>, f: F) -> CmdResult
where
    F: FnOnce(Client) -> Fut,
    Fut: std::future::Future<Output = CmdResult>,
{
    let c = connect(profile)?;
    block_on(f(c))
}

/// Prints `v` as JSON with `--json`, else with `human`.
fn show<T: serde::Serialize>(json_out: bool, v: &T, human: impl FnOnce(&T)) -> CmdResult {
    if json_out {
        print_json(v)?;
    } else {
        human(v);
    }
    Ok(Exit::Ok)
}

/// `sovctl health`.
pub async fn health(c: Client, j: bool) -> CmdResult {
    let h = c.health().await?;
    show(j, &h, |h| {
        let gpus = match h.gpus {
            Some(n) => format!("{n} GPUs"),
            None => "GPUs unknown".to_string(),
        };
        println!(
            "{} ({}) is up: {gpus}, {} ledger records; you are {}",
            h.node, h.jurisdiction, h.ledger_size, h.you
        );
        for p in &h.problems {
            println!("  DEGRADED: {p}");
        }
    })
}

/// `sovctl tenant ...`.
pub async fn tenant(c: Client, cmd: TenantCmd, j: bool) -> CmdResult {
    match cmd {
        TenantCmd::Create {
            id,
            name,
            jurisdiction,
            contact,
        } => {
            let req = NewTenant {
                id,
                name,
                jurisdiction,
                contact,
            };
            let t = c.create_tenant(&req).await?;
            show(j, &t, |t| println!("created tenant {} ({})", t.id, t.name))
        }
        TenantCmd::List => {
            let list = c.tenants().await?;
            show(j, &list, |list| {
                for t in &list.tenants {
                    println!(
                        "{}  {}  {}  {}",
                        t.id,
                        t.jurisdiction,
                        t.status.as_str(),
                        t.name
                    );
                }
            })
        }
        TenantCmd::Show { id } => {
            let t = c.tenant(&id).await?;
            print_json(&t)?;
            Ok(Exit::Ok)
        }
        TenantCmd::Suspend { id } => {
            let t = c.suspend_tenant(&id).await?;
            show(j, &t, |t| {
                println!("tenant {} is {}", t.id, t.status.as_str())
            })
        }
    }
}

/// `sovctl gpus`.
pub async fn gpus(c: Client, j: bool) -> CmdResult {
    let list = c.gpus().await?;
    show(j, &list, |list| {
        for e in &list.gpus {
            let g = &e.gpu;
            println!(
                "{}  {}  {}  {} MiB  {}",
                g.index,
                g.uuid,
                g.name,
                g.memory_total_bytes / (1024 * 1024),
                e.lease
                    .as_deref()
                    .map(|l| format!("leased by {l}"))
                    .unwrap_or_else(|| "free".into())
            );
        }
    })
}

fn print_lease(l: &Lease) {
    let gpus: Vec<String> = l
        .gpus
        .iter()
        .map(|g| match &g.fault {
            Some(f) => format!("{} [FAULT: {f}]", g.uuid),
            None => g.uuid.clone(),
        })
        .collect();
    println!(
        "{}  tenant={}  {}×{}  {}  started={}{}  rate={}/h",
        l.id,
        l.tenant,
        gpus.len(),
        l.model,
        l.state.as_str(),
        l.started,
        l.ended
            .as_deref()
            .map(|e| format!("  ended={e}"))
            .unwrap_or_default(),
        format_inr(l.rate_paise_per_hour)
    );
    for g in gpus {
        println!("    {g}");
    }
}

/// `sovctl lease ...`.
pub async fn lease(c: Client, cmd: LeaseCmd, j: bool) -> CmdResult {
    match cmd {
        LeaseCmd::Create {
            tenant,
            gpus,
            model,
            classification,
            dataset,
        } => {
            let req = NewLease {
                tenant,
                gpus,
                model,
                classification,
                dataset,
            };
            let l = c.create_lease(&req).await?;
            show(j, &l, |l| {
                print_lease(l);
                for r in &l.decision {
                    println!("    policy: {r}");
                }
            })
        }
        LeaseCmd::List {
            after,
            limit,
            active,
        } => {
            let state = active.then_some(LeaseState::Active);
            list_leases(
                &c,
                LeasesQuery {
                    after,
                    limit,
                    state,
                },
                j,
            )
            .await
        }
        LeaseCmd::Show { id } => {
            let l = c.lease(&id).await?;
            show(j, &l, print_lease)
        }
        LeaseCmd::End { id } => {
            let ended = c.end_lease(&id).await?;
            show(j, &ended, |e| {
                print_lease(&e.lease);
                println!(
                    "    final usage records: {}",
                    serde_json::to_string(&e.records).unwrap_or_default()
                );
            })
        }
    }
}

/// `sovctl usage ...`.
pub async fn usage(c: Client, cmd: UsageCmd, j: bool) -> CmdResult {
    match cmd {
        UsageCmd::List {
            tenant,
            lease,
            after,
            limit,
        } => {
            let q = UsageQuery {
                tenant,
                lease,
                after,
                limit,
            };
            if after.is_some() || limit.is_some() {
                let page = c.usage(&q).await?;
                return show(j, &page, |page| {
                    page.records.iter().for_each(print_usage);
                    if let Some(next) = page.next_after {
                        println!("(more: --after {next})");
                    }
                });
            }
            all_usage_pages(&c, q, j).await
        }
        UsageCmd::Receipt { id, out } => {
            let r = c.receipt(id).await?;
            if let Some(out) = out {
                let rec_path = out.with_extension("json");
                let proof_path = out.with_extension("tlog-proof");
                write_file(&rec_path, format!("{}\n", r.record).as_bytes())?;
                write_file(&proof_path, r.receipt.as_bytes())?;
                println!("wrote {} and {}", rec_path.display(), proof_path.display());
            } else if j {
                print_json(&r)?;
            } else {
                println!("{}\n\n{}", r.record, r.receipt);
            }
            Ok(Exit::Ok)
        }
    }
}

/// One page when `--after` or `--limit` asks for one, else every page.
async fn list_leases(c: &Client, q: LeasesQuery, j: bool) -> CmdResult {
    if q.after.is_none() && q.limit.is_none() {
        return all_lease_pages(c, q, j).await;
    }
    let page = c.leases(&q).await?;
    show(j, &page, |page| {
        page.leases.iter().for_each(print_lease);
        if let Some(next) = &page.next_after {
            println!("(more: --after {next})");
        }
    })
}

/// Every page, printed as it arrives (see [`PagedList`]).
async fn all_lease_pages(c: &Client, mut q: LeasesQuery, j: bool) -> CmdResult {
    let mut list = PagedList::start("leases", j);
    loop {
        let page = c.leases(&q).await?;
        for l in &page.leases {
            list.item(l, print_lease)?;
        }
        if !next_page(&mut q.after, page.next_after)? {
            return list.finish();
        }
    }
}

/// Every page, printed as it arrives (see [`PagedList`]).
async fn all_usage_pages(c: &Client, mut q: UsageQuery, j: bool) -> CmdResult {
    let mut list = PagedList::start("records", j);
    loop {
        let page = c.usage(&q).await?;
        for r in &page.records {
            list.item(r, print_usage)?;
        }
        if !next_page(&mut q.after, page.next_after)? {
            return list.finish();
        }
    }
}

/// One usage record, one line.
fn print_usage(r: &auditor::record::UsageRecord) {
    println!(
        "#{}  {}  {}  {} {}  {} → {}  {:.3} GPU-h  {:.1} J  {}",
        r.id,
        r.tenant,
        r.lease,
        r.gpu_model,
        r.gpu_uuid,
        r.start,
        r.end,
        r.gpu_ms as f64 / 3_600_000.0,
        r.energy_joules,
        format_inr(r.amount_paise),
    );
}

fn write_file(path: &Path, data: &[u8]) -> Result<(), Fail> {
    std::fs::write(path, data)
        .map_err(|e| Fail::usage(format!("{}: {e}", path.display(), e = report(&e))))
}

/// `sovctl bill`.
pub async fn bill(c: Client, b: BillArgs, j: bool) -> CmdResult {
    let q = BillQuery {
        tenant: b.tenant,
        from: b.from,
        to: b.to,
    };
    let invoice = c.bill(&q).await?;
    show(j, &invoice, print_invoice)
}

fn print_invoice(v: &Invoice) {
    println!("Invoice for tenant {}", v.tenant);
    if v.from.is_some() || v.to.is_some() {
        println!(
            "Period: {} to {}",
            v.from.as_deref().unwrap_or("-"),
            v.to.as_deref().unwrap_or("-")
        );
    }
    println!(
        "{:<22} {:<6} {:>4} {:>12} {:>12} {:>16}",
        "lease", "model", "gpus", "GPU-hours", "rate/h", "amount"
    );
    for l in &v.lines {
        println!(
            "{:<22} {:<6} {:>4} {:>12.3} {:>12} {:>16}",
            l.lease,
            l.gpu_model,
            l.gpus,
            l.gpu_hours,
            format_inr(l.rate_paise_per_hour),
            format_inr(l.amount_paise),
        );
    }
    println!("Total: {}", v.total);
    println!(
        "Computed from {} records verified against the signed checkpoint:\n{}",
        v.record_ids.len(),
        v.checkpoint
    );
}

/// `sovctl audit export`: checkpoint, key, the records it covers and receipts, written in
/// the export layout an auditor verifies offline.
pub async fn audit_export(c: Client, out: PathBuf, receipts: Vec<u64>) -> CmdResult {
    // Receipts first, then the checkpoint: the log only grows, so every receipt is against a
    // tree no larger than the exported one, and the verifier ties each receipt to the export
    // by recomputing the root at its size from the exported records.
    let mut got = Vec::new();
    for id in receipts {
        got.push((id, c.receipt(id).await?.receipt));
    }
    let checkpoint = c.checkpoint().await?;
    let size = checkpoint_size(&checkpoint)
        .ok_or_else(|| Fail::bad("the node's checkpoint is malformed"))?;
    let vkey = c.vkey().await?;
    let records = c.records(&RecordsQuery { size: Some(size) }).await?;
    let lines = records
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| l.to_vec());
    let summary = write_export(&out, &checkpoint, vkey.trim(), lines, &got)
        .map_err(|e| Fail::bad(report(&e)))?;
    println!(
        "exported {} records (checkpoint size {}) and {} receipts to {}",
        summary.records,
        summary.checkpoint_size,
        summary.receipts,
        out.display()
    );
    Ok(Exit::Ok)
}

/// The tree size line of a checkpoint note (its second line).
fn checkpoint_size(note: &str) -> Option<u64> {
    note.lines().nth(1)?.parse().ok()
}
