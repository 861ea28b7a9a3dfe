//! The node under a hostile tenant (run with `cargo bench -p hostd --bench load`), against
//! the real `hostd dev` over real mTLS on loopback. Prints figures; asserts nothing.
//!
//! 1. The operator's `GET /v1/health` latency (p50, p99; on a kept-alive connection and on
//!    fresh connections) alone, then while a tenant holds `LOAD_HOSTILE` (default 2,000)
//!    connections: half plain TCP sockets that never start TLS, half authenticated TLS
//!    connections each sending a `POST` with a large `Content-Length` one byte every 2 s.
//!    Target: p99 under 100 ms.
//! 2. hostd's memory with `LOAD_RECORDS` (default 1,000,000) usage records in its ledger,
//!    idle and at peak while 400 usage requests (`GET /v1/usage`, 1,000 records a page) run
//!    at once from 25 principals. Target: under 100 MB.
//!
//! `--test` (as `cargo bench -- --test` passes) shrinks everything to a smoke run.

use attest::note::NoteSigner;
use auditor::money::amount_paise;
use auditor::record::{Record, UsageRecord, RECORD_VERSION};
use hostd::ledger::Ledger;
use hostd::pki::{issue_client, CertificateAuthority, Validity};
use hostd::principal::{Principal, Role};
use hostd::state::Store;
use hostd::witness::{Witness, WITNESS_FILE};
use hostd_api::profile::Profile;
use sovctl::client::Client;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;

struct Node {
    dir: PathBuf,
    port: u16,
    child: Option<Child>,
}

impl Node {
    fn spawn(&mut self) -> Duration {
        let started = Instant::now();
        let child = Command::new(env!("CARGO_BIN_EXE_hostd"))
            .args(["dev", "--dir"])
            .arg(&self.dir)
            .args(["--listen", &format!("127.0.0.1:{}", self.port)])
            .env("HOSTD_LOG", "warn")
            // As the documented unit runs it (docs/operations.md): two malloc arenas, not
            // one per blocking thread.
            .env("MALLOC_ARENA_MAX", "2")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn hostd");
        self.child = Some(child);
        let rt = runtime();
        loop {
            if self.dir.join("operator/profile.toml").exists() {
                let up = rt.block_on(async {
                    let c = self.client("operator");
                    matches!(c.get("/v1/health").await, Ok((200, _)))
                });
                if up {
                    return started.elapsed();
                }
            }
            assert!(started.elapsed() < Duration::from_secs(600), "hostd not up");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn client(&self, profile: &str) -> Client {
        Client::new(&Profile::load(&self.dir.join(profile)).unwrap()).unwrap()
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(c.id().to_string())
                .status();
            let _ = c.wait();
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Resident memory of `pid`, MiB.
fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let i = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[i]
}

/// (p50, p99) of `n` health requests on one kept-alive connection, and of `m` on fresh ones.
async fn health_latency(node: &Node, n: usize, m: usize) -> [(Duration, Duration); 2] {
    let c = node
        .client("operator")
        .with_timeout(Duration::from_secs(10));
    let mut kept = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let (s, _) = c.get("/v1/health").await.expect("health");
        assert_eq!(s, 200);
        kept.push(t.elapsed());
    }
    let mut fresh = Vec::with_capacity(m);
    for _ in 0..m {
        let c = node
            .client("operator")
            .with_timeout(Duration::from_secs(10));
        let t = Instant::now();
        let (s, _) = c
            .get("/v1/health")
            .await
            .expect("health on a fresh connection");
        assert_eq!(s, 200);
        fresh.push(t.elapsed());
    }
    [
        (percentile(&mut kept, 0.5), percentile(&mut kept, 0.99)),
        (percentile(&mut fresh, 0.5), percentile(&mut fresh, 0.99)),
    ]
}

/// The tenant's attack: `n / 2` idle sockets and `n / 2` authenticated slow bodies, held
/// until `stop`. Returns how many slow-body connections completed their handshake.
async fn attack(node: &Node, n: usize, stop: Arc<AtomicBool>) -> Arc<AtomicU64> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], node.port));
    let profile = Profile::load(&node.dir.join("hyd-speech")).unwrap();
    let config = sovctl::tls::client_config(&profile.ca, &profile.cert, &profile.key).unwrap();
    let connector = tokio_rustls::TlsConnector::from(config);
    let established = Arc::new(AtomicU64::new(0));
    for i in 0..n {
        let stop = stop.clone();
        let connector = connector.clone();
        let established = established.clone();
        tokio::spawn(async move {
            let Ok(tcp) = tokio::net::TcpStream::connect(addr).await else {
                return;
            };
            if i % 2 == 0 {
                // Idle: never say a word.
                while !stop.load(Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                drop(tcp);
                return;
            }
            let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
            let Ok(mut tls) = connector.connect(name, tcp).await else {
                return;
            };
            established.fetch_add(1, Ordering::Relaxed);
            let head = "POST /v1/tenants HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 60000\r\n\r\n";
            if tls.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            while !stop.load(Ordering::Relaxed) {
                if tls.write_all(b" ").await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        });
        if i % 100 == 99 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    established
}

fn usage(id: u64) -> Vec<u8> {
    Record::Usage(UsageRecord {
        v: RECORD_VERSION,
        id,
        node: "dev-node".into(),
        tenant: "hyd-speech".into(),
        lease: format!("lease-{:06}", id / 40),
        gpu_uuid: "GPU-5a3e2f10-8c41-4b7e-9d2a-1f0c3b4d5e6f".into(),
        gpu_model: "H100".into(),
        start: "2026-03-01T00:00:00.000Z".into(),
        end: "2026-03-01T01:00:00.000Z".into(),
        gpu_ms: 3_600_000,
        gpu_seconds: 3600.0,
        energy_joules: 2_520_000.0,
        peak_memory_bytes: 64 << 30,
        mean_utilization_pct: 91.25,
        rate_paise_per_hour: 25_000,
        amount_paise: amount_paise(3_600_000, 25_000),
        policy_digest: "sha256:9f2b4c".into(),
        prev: id.checked_sub(1),
        attestation: None,
    })
    .to_leaf()
    .unwrap()
}

/// Appends `n` usage records to the stopped node's ledger, as the node would have.
fn fill_ledger(state: &Path, n: u64) -> Duration {
    let started = Instant::now();
    let store = Store::open_stopped(state).unwrap();
    let key = hostd::keys::load_log_key(&state.join("log.key"), "dev-node/usage").unwrap();
    let signer: NoteSigner = key;
    let mut ledger =
        Ledger::open_witnessed(store.db(), signer, Witness::at(state.join(WITNESS_FILE))).unwrap();
    let mut next = ledger.size();
    let end = next + n;
    while next < end {
        let batch: Vec<Vec<u8>> = (next..(next + 10_000).min(end)).map(usage).collect();
        next += batch.len() as u64;
        ledger.append(&batch).unwrap();
    }
    store.flush().unwrap();
    started.elapsed()
}

/// Profiles of `n` extra operator principals (each may read any usage), issued by the dev CA.
fn extra_principals(dir: &Path, n: usize) -> Vec<PathBuf> {
    let ca = CertificateAuthority::load(&dir.join("ca.pem"), &dir.join("ca.key")).unwrap();
    let url = Profile::load(&dir.join("operator")).unwrap().server;
    (0..n)
        .map(|i| {
            let name = format!("bench-{i:02}");
            let p = Principal::new("sovereign.local", Role::Operator, &name).unwrap();
            let d = dir.join(&name);
            std::fs::create_dir_all(&d).unwrap();
            issue_client(&ca, &p, Validity::days_from_now(1))
                .unwrap()
                .write(&d.join("cert.pem"), &d.join("key.pem"))
                .unwrap();
            let profile = Profile::new(
                &url,
                dir.join("ca.pem"),
                d.join("cert.pem"),
                d.join("key.pem"),
            );
            std::fs::write(d.join("profile.toml"), profile.to_toml(None)).unwrap();
            d
        })
        .collect()
}

fn main() {
    let smoke = std::env::args().any(|a| a == "--test");
    let env = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let hostile = if smoke { 40 } else { env("LOAD_HOSTILE", 2000) };
    let records = if smoke {
        2_000
    } else {
        env("LOAD_RECORDS", 1_000_000)
    } as u64;
    let concurrent = if smoke { 20 } else { 400 };
    let tmp = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut node = Node {
        dir: tmp.path().join("dev-state"),
        port,
        child: None,
    };
    node.spawn();
    let rt = runtime();
    rt.block_on(async {
        let op = node.client("operator");
        let body = serde_json::json!({"id": "hyd-speech", "name": "H", "jurisdiction": "IN-TG"});
        let (s, _) = op.post("/v1/tenants", &body).await.unwrap();
        assert!(s == 201 || s == 409);
        let [k, f] = health_latency(&node, 200, 50).await;
        println!("health alone:            kept-alive p50 {:?} p99 {:?}; fresh connection p50 {:?} p99 {:?}", k.0, k.1, f.0, f.1);
        println!("hostd RSS alone:         {:.1} MiB", rss_mib(node.pid()));
        let stop = Arc::new(AtomicBool::new(false));
        let established = attack(&node, hostile, stop.clone()).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let [k, f] = health_latency(&node, 200, 50).await;
        println!(
            "health under attack:     kept-alive p50 {:?} p99 {:?}; fresh connection p50 {:?} p99 {:?}  ({hostile} hostile connections, {} slow bodies got past the handshake)",
            k.0, k.1, f.0, f.1, established.load(Ordering::Relaxed)
        );
        println!("hostd RSS under attack:  {:.1} MiB", rss_mib(node.pid()));
        stop.store(true, Ordering::Relaxed);
    });
    drop(rt);
    node.stop();

    let filled = fill_ledger(&node.dir.join("state"), records);
    println!("ledger filled:           {records} records in {filled:.1?}");
    let startup = node.spawn();
    println!("hostd start-up:          {startup:.1?} (every record checked against its leaf hash)");
    println!(
        "hostd RSS idle:          {:.1} MiB with {records} records",
        rss_mib(node.pid())
    );
    let profiles = extra_principals(&node.dir, 25);
    let pid = node.pid();
    let peak = Arc::new(AtomicU64::new(0));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (peak, sampling) = (peak.clone(), sampling.clone());
        std::thread::spawn(move || {
            while sampling.load(Ordering::Relaxed) {
                let kib = (rss_mib(pid) * 1024.0) as u64;
                peak.fetch_max(kib, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    let rt = runtime();
    let (ok, other, elapsed) = rt.block_on(async {
        let started = Instant::now();
        let mut tasks = Vec::new();
        for i in 0..concurrent {
            let p = Profile::load(&profiles[i % profiles.len()]).unwrap();
            tasks.push(tokio::spawn(async move {
                let c = Client::new(&p)
                    .unwrap()
                    .with_timeout(Duration::from_secs(120));
                c.get("/v1/usage?tenant=hyd-speech&limit=1000")
                    .await
                    .map(|(s, _)| s)
            }));
        }
        let (mut ok, mut other) = (0, std::collections::BTreeMap::<String, u32>::new());
        for t in tasks {
            match t.await {
                Ok(Ok(200)) => ok += 1,
                Ok(Ok(s)) => *other.entry(format!("HTTP {s}")).or_default() += 1,
                Ok(Err(e)) => *other.entry(e.to_string()).or_default() += 1,
                Err(e) => *other.entry(e.to_string()).or_default() += 1,
            }
        }
        (ok, other, started.elapsed())
    });
    sampling.store(false, Ordering::Relaxed);
    let _ = sampler.join();
    println!(
        "{concurrent} concurrent usage requests: {ok} answered 200, other: {other:?}, in {elapsed:.1?}; hostd peak RSS {:.1} MiB",
        peak.load(Ordering::Relaxed) as f64 / 1024.0
    );
    node.stop();
}
