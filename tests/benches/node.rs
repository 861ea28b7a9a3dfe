//! Node-level performance figures, printed (not asserted): idle RSS, the CPU cost of metering
//! 8 GPUs every second, and `GET /v1/leases` throughput over mTLS keep-alive on loopback.
//!
//! Run with release binaries:
//! `cargo build --release -p hostd && cargo bench -p e2e --bench node`

use e2e::DevNode;
use serde_json::json;
use std::time::{Duration, Instant};

fn proc_status_kb(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn ticks_per_second() -> f64 {
    // CLK_TCK is 100 on every Linux this runs on; read it from getconf when available.
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

fn main() {
    // Criterion-style filters are passed by `cargo bench`; this bench runs as a whole.
    let node = DevNode::start(&["--interval", "1"]);
    let pid = node.pid();
    std::thread::sleep(Duration::from_secs(3));
    let idle_rss = proc_status_kb(pid, "VmRSS:");
    println!("idle RSS: {:.1} MB", idle_rss as f64 / 1024.0);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let op = node.client("operator").await.expect("client");
        for (tenant, jurisdiction) in [("hyd-speech", "IN-TG"), ("eu-bio", "DE")] {
            op.post(
                "/v1/tenants",
                &json!({"id": tenant, "name": tenant, "jurisdiction": jurisdiction}),
            )
            .await
            .expect("tenant");
        }
        for model in ["H100", "L4"] {
            let (s, v) = op
                .post(
                    "/v1/leases",
                    &json!({"tenant": "hyd-speech", "gpus": 4, "model": model}),
                )
                .await
                .expect("lease");
            assert_eq!(s, 201, "{v}");
        }
    });

    // Metering 8 leased GPUs at 1 s: CPU time over a 30 s window.
    let secs = 30.0;
    let t0 = e2e::cpu_ticks(pid);
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(secs));
    let used = (e2e::cpu_ticks(pid) - t0) as f64 / ticks_per_second();
    let wall = start.elapsed().as_secs_f64();
    println!(
        "metering 8 GPUs at 1 s: {:.3} s CPU in {:.1} s = {:.2}% of one core",
        used,
        wall,
        100.0 * used / wall
    );
    println!(
        "RSS with 2 leases metering: {:.1} MB",
        proc_status_kb(pid, "VmRSS:") as f64 / 1024.0
    );

    // GET /v1/leases over mTLS keep-alive: C connections, each issuing requests back to back.
    for conns in [1usize, 4, 16] {
        let (n, elapsed) = rt.block_on(async {
            let mut clients = Vec::new();
            for _ in 0..conns {
                clients.push(node.client("operator").await.expect("client"));
            }
            let deadline = Instant::now() + Duration::from_secs(5);
            let start = Instant::now();
            let mut tasks = Vec::new();
            for c in clients {
                tasks.push(tokio::spawn(async move {
                    let mut n = 0u64;
                    while Instant::now() < deadline {
                        let (s, _) = c.get_bytes("/v1/leases").await.expect("request");
                        assert_eq!(s, 200);
                        n += 1;
                    }
                    n
                }));
            }
            let mut total = 0;
            for t in tasks {
                total += t.await.expect("task");
            }
            (total, start.elapsed().as_secs_f64())
        });
        println!(
            "GET /v1/leases, {conns} keep-alive connection(s): {:.0} requests/s ({n} in {elapsed:.1} s; client and server share the 2 cores)",
            n as f64 / elapsed
        );
    }
}
