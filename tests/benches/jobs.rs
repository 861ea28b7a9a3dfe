//! Job figures under the real systemd of `hostd dev`, printed (not asserted), each beside a
//! baseline measured in the same run:
//! - API call to the job's process running (p50, p90), beside a bare `StartTransientUnit`
//!   sent with `busctl` to the same systemd;
//! - lease end to scratch crypto-erased and its `scratch-erased` record signed;
//! - hostd's CPU while metering 16 running jobs every second, beside the same node idle.
//!
//! Needs root and systemd-nspawn. Run with release binaries:
//! `cargo build --release -p hostd -p sovctl -p fake-nvml && cargo bench -p e2e --bench jobs`

use e2e::DevNode;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Waits (bounded) until `path` holds a nanosecond timestamp, and returns it.
fn stamp(path: &Path) -> u128 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(t) = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return t;
        }
        assert!(Instant::now() < deadline, "no stamp at {}", path.display());
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn summary(name: &str, mut ms: Vec<f64>) -> f64 {
    ms.sort_by(|a, b| a.total_cmp(b));
    let p50 = percentile(&ms, 0.5);
    println!(
        "{name}: p50 {p50:.1} ms, p90 {:.1} ms, n={}",
        percentile(&ms, 0.9),
        ms.len()
    );
    p50
}

fn main() {
    let parent = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(&parent).expect("target tmp");
    let node = DevNode::start_in(&parent, &[]);
    assert!(
        node.log_text().contains("jobs run under systemd"),
        "jobs are off: {}",
        node.log_text()
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let op = node.client("operator").await.expect("client");
        op.post(
            "/v1/tenants",
            &json!({"id": "hyd-speech", "name": "H", "jurisdiction": "IN-TG"}),
        )
        .await
        .expect("tenant");
        let t = node.client("hyd-speech").await.expect("client");
        let lease = new_lease(&t).await;
        let scratch = node.dir.join("work/scratch-volume/mnt").join(&lease);

        let api = start_latency(&t, &lease, &scratch).await;
        let bare = bare_latency(&node, &scratch);
        println!(
            "  ratio hostd API / bare StartTransientUnit: {:.2}",
            api / bare
        );

        metering_cpu(&node, &t, &lease).await;
        erase_latency(&node, &t, &lease).await;
    });
}

async fn new_lease(t: &sovctl::client::Client) -> String {
    let (st, l) = t
        .post(
            "/v1/leases",
            &json!({"tenant": "hyd-speech", "gpus": 1, "model": "H100", "classification": "internal"}),
        )
        .await
        .expect("lease");
    assert_eq!(st, 201, "{l}");
    l["id"].as_str().expect("id").to_owned()
}

/// POST of a job whose first act is to write the time, minus the time the POST was sent.
async fn start_latency(t: &sovctl::client::Client, lease: &str, scratch: &Path) -> f64 {
    let path = format!("/v1/leases/{lease}/jobs");
    // Warm up (the lease's scratch and network are made by its first job).
    let (st, _) = t
        .post(&path, &json!({"argv": ["/bin/true"]}))
        .await
        .expect("job");
    assert_eq!(st, 201);
    let mut ms = Vec::new();
    for i in 0..30 {
        let f = format!("stamp-{i}");
        let sent = now_ns();
        let (st, j) = t
            .post(
                &path,
                &json!({"argv": ["/bin/sh", "-c", format!("date +%s%N > {f}")]}),
            )
            .await
            .expect("job");
        assert_eq!(st, 201, "{j}");
        let ran = stamp(&scratch.join(&f));
        ms.push((ran.saturating_sub(sent)) as f64 / 1e6);
    }
    summary("API call to job process running", ms)
}

/// The same trivial process started with a bare `StartTransientUnit` (busctl) on the same
/// systemd: what systemd itself costs, without hostd.
fn bare_latency(node: &DevNode, scratch: &Path) -> f64 {
    let (bus, _) = e2e::private_systemd(&node.dir);
    let mut ms = Vec::new();
    for i in 0..30 {
        let f = scratch.join(format!("bare-{i}"));
        let sent = now_ns();
        e2e::start_shell_unit(
            &bus,
            &format!("bench-bare-{i}.service"),
            &format!("date +%s%N > {}", f.display()),
            &[],
        );
        let ran = stamp(&f);
        ms.push((ran.saturating_sub(sent)) as f64 / 1e6);
    }
    summary("bare StartTransientUnit (busctl) to process running", ms)
}

/// hostd's CPU over 20 s with 16 jobs running (each metered every second), beside 20 s with
/// none.
async fn metering_cpu(node: &DevNode, t: &sovctl::client::Client, lease: &str) {
    let tps = 100.0;
    let pid = node.pid();
    let window = Duration::from_secs(20);
    let idle0 = e2e::cpu_ticks(pid);
    tokio::time::sleep(window).await;
    let idle = (e2e::cpu_ticks(pid) - idle0) as f64 / tps / window.as_secs_f64() * 100.0;
    let path = format!("/v1/leases/{lease}/jobs");
    let mut ids = Vec::new();
    for _ in 0..16 {
        let (st, j) = t
            .post(&path, &json!({"argv": ["/bin/sleep", "600"]}))
            .await
            .expect("job");
        assert_eq!(st, 201, "{j}");
        ids.push(j["id"].as_str().expect("id").to_owned());
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let busy0 = e2e::cpu_ticks(pid);
    tokio::time::sleep(window).await;
    let busy = (e2e::cpu_ticks(pid) - busy0) as f64 / tps / window.as_secs_f64() * 100.0;
    println!(
        "hostd CPU: {busy:.2} % of one core with 16 jobs metered every second, {idle:.2} % idle; the jobs' share {:.2} %",
        busy - idle
    );
    for id in ids {
        let _ = t.post(&format!("{path}/{id}/stop"), &json!({})).await;
    }
}

/// Lease end (the API answered) to its `scratch-erased` record in the signed log.
async fn erase_latency(node: &DevNode, t: &sovctl::client::Client, lease: &str) {
    let au = node.client("auditor").await.expect("client");
    let t0 = Instant::now();
    let (st, _) = t
        .post(&format!("/v1/leases/{lease}/end"), &json!({}))
        .await
        .expect("end");
    assert_eq!(st, 200);
    let answered = t0.elapsed();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = au.text("/v1/audit/records").await.expect("records");
        let found = text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .any(|r| r["kind"] == "scratch-erased" && r["lease"] == lease);
        if found {
            break;
        }
        assert!(Instant::now() < deadline, "no scratch-erased record");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    println!(
        "lease end to scratch crypto-erased and recorded: {:.0} ms (the end call itself {:.0} ms; 16 jobs stopped first)",
        t0.elapsed().as_secs_f64() * 1e3,
        answered.as_secs_f64() * 1e3
    );
}
