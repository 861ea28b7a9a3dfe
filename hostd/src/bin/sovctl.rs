//! `sovctl`: the operator's, tenant's and auditor's command-line tool.
//!
//! Exit codes: 0 success (allowed/valid), 1 the node refused or a check failed
//! (denied/invalid), 2 usage or connection error.

use clap::{Args, Parser, Subcommand};
use hostd::billing::format_inr;
use hostd::cli;
use hostd::client::{Client, Profile};
use serde_json::{json, Value};
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
    Tenant(TenantCmd),
    /// The node's GPUs and who holds them.
    Gpus,
    /// GPU leases.
    #[command(subcommand)]
    Lease(LeaseCmd),
    /// Usage records and their receipts.
    #[command(subcommand)]
    Usage(UsageCmd),
    /// An invoice computed from the verified ledger.
    Bill(BillArgs),
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
enum TenantCmd {
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

#[derive(Subcommand)]
enum LeaseCmd {
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
    List,
    Show {
        id: String,
    },
    /// End a lease now: metering stops and its last records are written.
    End {
        id: String,
    },
}

#[derive(Subcommand)]
enum UsageCmd {
    List {
        #[arg(long)]
        tenant: Option<String>,
        #[arg(long)]
        lease: Option<String>,
    },
    /// A record and its tlog-proof receipt, checkable offline.
    Receipt {
        id: u64,
        /// Write the record and receipt as FILE.json and FILE.tlog-proof.
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

#[derive(Args)]
struct BillArgs {
    #[arg(long)]
    tenant: String,
    /// Start (RFC 3339 or YYYY-MM-DD), inclusive.
    #[arg(long)]
    from: Option<String>,
    /// End (RFC 3339 or YYYY-MM-DD), exclusive.
    #[arg(long)]
    to: Option<String>,
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

/// A failure with the exit code it deserves.
struct Fail(u8, String);

type Out = Result<(), Fail>;

fn usage_err(e: impl std::fmt::Display) -> Fail {
    Fail(2, e.to_string())
}

fn connect(profile: &Option<PathBuf>) -> Result<Client, Fail> {
    let dir = profile.as_ref().ok_or_else(|| {
        usage_err("no profile: pass --profile DIR (e.g. dev-state/operator) or set SOVCTL_PROFILE")
    })?;
    let p = Profile::load(dir).map_err(usage_err)?;
    Client::new(&p).map_err(usage_err)
}

/// Turns an HTTP answer into the body or a failure carrying the node's message.
fn check(status: u16, body: Value) -> Result<Value, Fail> {
    if (200..300).contains(&status) {
        return Ok(body);
    }
    let mut msg = format!(
        "{} ({status})",
        body.get("error")
            .and_then(Value::as_str)
            .unwrap_or("request failed")
    );
    if let Some(reasons) = body.get("reasons").and_then(Value::as_array) {
        for r in reasons {
            msg.push_str(&format!("\n  - {}", r.as_str().unwrap_or_default()));
        }
    }
    Err(Fail(1, msg))
}

fn show(json_out: bool, v: &Value, human: impl FnOnce(&Value)) {
    if json_out {
        println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
    } else {
        human(v);
    }
}

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("-")
}

fn print_lease(l: &Value) {
    let gpus: Vec<String> = l["gpus"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|g| {
                    let fault = g.get("fault").and_then(Value::as_str);
                    match fault {
                        Some(f) => format!("{} [FAULT: {f}]", s(g, "uuid")),
                        None => s(g, "uuid").to_string(),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    println!(
        "{}  tenant={}  {}×{}  {}  started={}{}  rate={}/h",
        s(l, "id"),
        s(l, "tenant"),
        gpus.len(),
        s(l, "model"),
        s(l, "state"),
        s(l, "started"),
        l.get("ended")
            .and_then(Value::as_str)
            .map(|e| format!("  ended={e}"))
            .unwrap_or_default(),
        format_inr(l["rate_paise_per_hour"].as_u64().unwrap_or(0)),
    );
    for g in gpus {
        println!("    {g}");
    }
}

async fn run(cli: Cli) -> Out {
    let j = cli.json;
    match cli.cmd {
        Cmd::Policy(_) | Cmd::Audit(AuditCmd::Verify(_)) | Cmd::Attest(_) => {
            return Err(Fail(
                2,
                "offline command reached the online dispatcher".into(),
            ))
        }
        Cmd::Health => {
            let c = connect(&cli.profile)?;
            let v = check_call(c.get("/v1/health").await)?;
            show(j, &v, |v| {
                println!(
                    "{} ({}) is up: {} GPUs, {} ledger records; you are {}",
                    s(v, "node"),
                    s(v, "jurisdiction"),
                    v["gpus"],
                    v["ledger_size"],
                    s(v, "you")
                )
            });
        }
        Cmd::Tenant(t) => {
            let c = connect(&cli.profile)?;
            match t {
                TenantCmd::Create {
                    id,
                    name,
                    jurisdiction,
                    contact,
                } => {
                    let body = json!({"id": id, "name": name, "jurisdiction": jurisdiction, "contact": contact});
                    let v = check_call(c.post("/v1/tenants", &body).await)?;
                    show(j, &v, |v| {
                        println!("created tenant {} ({})", s(v, "id"), s(v, "name"))
                    });
                }
                TenantCmd::List => {
                    let v = check_call(c.get("/v1/tenants").await)?;
                    show(j, &v, |v| {
                        for t in v["tenants"].as_array().into_iter().flatten() {
                            println!(
                                "{}  {}  {}  {}",
                                s(t, "id"),
                                s(t, "jurisdiction"),
                                s(t, "status"),
                                s(t, "name")
                            );
                        }
                    });
                }
                TenantCmd::Show { id } => {
                    let v = check_call(c.get(&format!("/v1/tenants/{id}")).await)?;
                    println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
                }
                TenantCmd::Suspend { id } => {
                    let v = check_call(
                        c.post(&format!("/v1/tenants/{id}/suspend"), &json!({}))
                            .await,
                    )?;
                    show(j, &v, |v| {
                        println!("tenant {} is {}", s(v, "id"), s(v, "status"))
                    });
                }
            }
        }
        Cmd::Gpus => {
            let c = connect(&cli.profile)?;
            let v = check_call(c.get("/v1/gpus").await)?;
            show(j, &v, |v| {
                for g in v["gpus"].as_array().into_iter().flatten() {
                    println!(
                        "{}  {}  {}  {} MiB  {}",
                        g["index"],
                        s(g, "uuid"),
                        s(g, "name"),
                        g["memory_total_bytes"].as_u64().unwrap_or(0) / (1024 * 1024),
                        g.get("lease")
                            .and_then(Value::as_str)
                            .map(|l| format!("leased by {l}"))
                            .unwrap_or_else(|| "free".into())
                    );
                }
            });
        }
        Cmd::Lease(l) => {
            let c = connect(&cli.profile)?;
            match l {
                LeaseCmd::Create {
                    tenant,
                    gpus,
                    model,
                    classification,
                    dataset,
                } => {
                    let body = json!({"tenant": tenant, "gpus": gpus, "model": model, "classification": classification, "dataset": dataset});
                    let v = check_call(c.post("/v1/leases", &body).await)?;
                    show(j, &v, |v| {
                        print_lease(v);
                        for r in v["decision"].as_array().into_iter().flatten() {
                            println!("    policy: {}", r.as_str().unwrap_or_default());
                        }
                    });
                }
                LeaseCmd::List => {
                    let v = check_call(c.get("/v1/leases").await)?;
                    show(j, &v, |v| {
                        for l in v["leases"].as_array().into_iter().flatten() {
                            print_lease(l);
                        }
                    });
                }
                LeaseCmd::Show { id } => {
                    let v = check_call(c.get(&format!("/v1/leases/{id}")).await)?;
                    show(j, &v, print_lease);
                }
                LeaseCmd::End { id } => {
                    let v = check_call(c.post(&format!("/v1/leases/{id}/end"), &json!({})).await)?;
                    show(j, &v, |v| {
                        print_lease(&v["lease"]);
                        println!("    final usage records: {}", v["records"]);
                    });
                }
            }
        }
        Cmd::Usage(u) => {
            let c = connect(&cli.profile)?;
            match u {
                UsageCmd::List { tenant, lease } => {
                    let mut q = Vec::new();
                    if let Some(t) = tenant {
                        q.push(format!("tenant={t}"));
                    }
                    if let Some(l) = lease {
                        q.push(format!("lease={l}"));
                    }
                    let path = if q.is_empty() {
                        "/v1/usage".to_string()
                    } else {
                        format!("/v1/usage?{}", q.join("&"))
                    };
                    let v = check_call(c.get(&path).await)?;
                    show(j, &v, |v| {
                        for r in v["records"].as_array().into_iter().flatten() {
                            println!(
                                "#{}  {}  {}  {} {}  {} → {}  {:.3} GPU-h  {:.1} J  {}",
                                r["id"],
                                s(r, "tenant"),
                                s(r, "lease"),
                                s(r, "gpu_model"),
                                s(r, "gpu_uuid"),
                                s(r, "start"),
                                s(r, "end"),
                                r["gpu_ms"].as_u64().unwrap_or(0) as f64 / 3_600_000.0,
                                r["energy_joules"].as_f64().unwrap_or(0.0),
                                format_inr(r["amount_paise"].as_u64().unwrap_or(0)),
                            );
                        }
                    });
                }
                UsageCmd::Receipt { id, out } => {
                    let v = check_call(c.get(&format!("/v1/usage/{id}/receipt")).await)?;
                    let record = s(&v, "record").to_string();
                    let receipt = s(&v, "receipt").to_string();
                    if let Some(out) = out {
                        let rec_path = out.with_extension("json");
                        let proof_path = out.with_extension("tlog-proof");
                        std::fs::write(&rec_path, format!("{record}\n")).map_err(usage_err)?;
                        std::fs::write(&proof_path, &receipt).map_err(usage_err)?;
                        println!("wrote {} and {}", rec_path.display(), proof_path.display());
                    } else if j {
                        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
                    } else {
                        println!("{record}\n\n{receipt}");
                    }
                }
            }
        }
        Cmd::Bill(b) => {
            let c = connect(&cli.profile)?;
            let mut q = vec![format!("tenant={}", b.tenant)];
            if let Some(f) = &b.from {
                q.push(format!("from={}", urlencode(f)));
            }
            if let Some(t) = &b.to {
                q.push(format!("to={}", urlencode(t)));
            }
            let v = check_call(c.get(&format!("/v1/bill?{}", q.join("&"))).await)?;
            show(j, &v, print_invoice);
        }
        Cmd::Audit(AuditCmd::Export { out, receipts }) => {
            let c = connect(&cli.profile)?;
            let checkpoint = text_call(c.get_bytes("/v1/audit/checkpoint").await)?;
            let size = checkpoint_size(&checkpoint)
                .ok_or_else(|| Fail(1, "the node's checkpoint is malformed".into()))?;
            let vkey = text_call(c.get_bytes("/v1/audit/vkey").await)?;
            let records = bytes_call(c.get_bytes(&format!("/v1/audit/records?size={size}")).await)?;
            let mut got = Vec::new();
            for id in receipts {
                let v = check_call(c.get(&format!("/v1/usage/{id}/receipt")).await)?;
                got.push((id, s(&v, "receipt").to_string()));
            }
            let lines = records
                .split(|b| *b == b'\n')
                .filter(|l| !l.is_empty())
                .map(|l| l.to_vec());
            let summary = hostd::audit::write_export(&out, &checkpoint, vkey.trim(), lines, &got)
                .map_err(|e| Fail(1, e.to_string()))?;
            println!(
                "exported {} records (checkpoint size {}) and {} receipts to {}",
                summary.records,
                summary.checkpoint_size,
                summary.receipts,
                out.display()
            );
            for p in &summary.problems {
                eprintln!("warning: {p}");
            }
        }
    }
    Ok(())
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b':' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The tree size line of a checkpoint note (its second line).
fn checkpoint_size(note: &str) -> Option<u64> {
    note.lines().nth(1)?.parse().ok()
}

fn print_invoice(v: &Value) {
    println!("Invoice for tenant {}", s(v, "tenant"));
    if v["from"].is_string() || v["to"].is_string() {
        println!("Period: {} to {}", s(v, "from"), s(v, "to"));
    }
    println!(
        "{:<22} {:<6} {:>4} {:>12} {:>12} {:>16}",
        "lease", "model", "gpus", "GPU-hours", "rate/h", "amount"
    );
    for l in v["lines"].as_array().into_iter().flatten() {
        println!(
            "{:<22} {:<6} {:>4} {:>12.3} {:>12} {:>16}",
            s(l, "lease"),
            s(l, "gpu_model"),
            l["gpus"],
            l["gpu_hours"].as_f64().unwrap_or(0.0),
            format_inr(l["rate_paise_per_hour"].as_u64().unwrap_or(0)),
            format_inr(l["amount_paise"].as_u64().unwrap_or(0)),
        );
    }
    println!("Total: {}", s(v, "total"));
    println!(
        "Computed from {} records verified against the signed checkpoint:\n{}",
        v["record_ids"].as_array().map(|a| a.len()).unwrap_or(0),
        s(v, "checkpoint")
    );
}

fn check_call(r: Result<(u16, Value), hostd::client::ClientError>) -> Result<Value, Fail> {
    let (status, body) = r.map_err(usage_err)?;
    check(status, body)
}

fn bytes_call(r: Result<(u16, Vec<u8>), hostd::client::ClientError>) -> Result<Vec<u8>, Fail> {
    let (status, body) = r.map_err(usage_err)?;
    if (200..300).contains(&status) {
        Ok(body)
    } else {
        let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        check(status, v).map(|_| Vec::new())
    }
}

fn text_call(r: Result<(u16, Vec<u8>), hostd::client::ClientError>) -> Result<String, Fail> {
    String::from_utf8(bytes_call(r)?).map_err(|_| Fail(1, "the node sent non-UTF-8 text".into()))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Policy(cmd) => return cli::policy::run(cmd),
        Cmd::Attest(cmd) => return cli::attest::run(*cmd, cli.profile.as_deref(), cli.json),
        Cmd::Audit(AuditCmd::Verify(args)) => return cli::audit::run_verify(args),
        _ => {}
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sovctl: cannot start runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match rt.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Fail(code, msg)) => {
            eprintln!("sovctl: {msg}");
            ExitCode::from(code)
        }
    }
}
