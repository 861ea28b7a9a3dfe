//! Jobs under a real systemd 252: `hostd dev` boots it in a `systemd-nspawn` container and
//! drives it over D-Bus exactly as a node's hostd drives the host's systemd. GPU device rules
//! are checked with `mknod` nodes: an allowed node opens with ENXIO (no driver behind it), a
//! denied one with EPERM.
//!
//! Needs root and `systemd-nspawn` (Debian package `systemd-container`; `.ci/run` installs
//! it). The node's folder is under Cargo's target directory, not /tmp: every job has a private
//! /tmp, which would hide a work directory there.

use crate::{create_tenants, json};
use e2e::DevNode;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// One node with jobs at a time: a node's hostd owns the host's lease address pool and its
/// nftables table, and two dev nodes on one machine would hand out the same addresses.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub(crate) fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn jobs_node() -> DevNode {
    assert!(
        Path::new("/usr/bin/systemd-nspawn").exists(),
        "systemd-nspawn is needed (apt-get install systemd-container)"
    );
    let parent = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(&parent).unwrap();
    let node = DevNode::start_in(&parent, &[]);
    assert!(
        node.log_text().contains("jobs run under systemd"),
        "jobs are off; log:\n{}",
        node.log_text()
    );
    node
}

pub(crate) fn lease(node: &DevNode, tenant: &str) -> (String, u64) {
    let l = json(&node.sovctl(
        tenant,
        &[
            "--json",
            "lease",
            "create",
            "--tenant",
            tenant,
            "--gpus",
            "1",
            "--model",
            "H100",
            "--classification",
            "internal",
        ],
    ));
    (
        l["id"].as_str().unwrap().to_owned(),
        l["gpus"][0]["index"].as_u64().unwrap(),
    )
}

/// `sovctl job run` to completion: (exit code, stdout).
pub(crate) fn run(node: &DevNode, tenant: &str, lease: &str, script: &str) -> (i32, String) {
    let out = node.sovctl(
        tenant,
        &[
            "job", "run", "--lease", lease, "--", "/bin/sh", "-c", script,
        ],
    );
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .filter(|l| !l.starts_with("sovctl: job "))
                .map(|l| format!("[stderr] {l}\n"))
                .collect::<String>()
        ),
    )
}

fn detached(node: &DevNode, tenant: &str, lease: &str, script: &str) -> String {
    let j = json(&node.sovctl(
        tenant,
        &[
            "--json", "job", "run", "--detach", "--lease", lease, "--", "/bin/sh", "-c", script,
        ],
    ));
    j["id"].as_str().unwrap().to_owned()
}

fn show(node: &DevNode, tenant: &str, lease: &str, job: &str) -> Value {
    json(&node.sovctl(tenant, &["--json", "job", "show", "--lease", lease, job]))
}

/// Polls the job until `pred` holds (bounded).
fn wait_job(node: &DevNode, lease: &str, job: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let j = show(node, "operator", lease, job);
        if pred(&j) {
            return j;
        }
        assert!(Instant::now() < deadline, "job never got there: {j}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn jobs_run_confined_to_their_lease_under_real_systemd() {
    let _one = one_at_a_time();
    let node = jobs_node();
    create_tenants(&node);
    let (la, ga) = lease(&node, "hyd-speech");
    let (lb, gb) = lease(&node, "eu-bio");

    // Runs as the lease's uid, not root; exit status comes back as sovctl's.
    let (code, out) = run(&node, "hyd-speech", &la, "id -u; exit 3");
    assert_eq!(code, 3, "{out}");
    let uid: u32 = out.trim().parse().unwrap();
    assert!((60_000..61_000).contains(&uid), "{out}");

    // Its own GPU opens with ENXIO (allowed, no driver); the other lease's with EPERM.
    let script = format!(
        "head -c1 /dev/nvidia{ga} 2>&1; head -c1 /dev/nvidia{gb} 2>&1; head -c1 /dev/nvidiactl 2>&1; true"
    );
    let (_, out) = run(&node, "hyd-speech", &la, &script);
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].contains("No such device or address"), "{out}");
    assert!(lines[1].contains("Operation not permitted"), "{out}");
    assert!(lines[2].contains("No such device or address"), "{out}");

    // B's scratch holds a secret A's job cannot read; the system is read-only to both.
    let (code, bdir) = run(&node, "eu-bio", &lb, "echo secret > s && pwd");
    assert_eq!(code, 0, "{bdir}");
    let (_, out) = run(
        &node,
        "hyd-speech",
        &la,
        &format!("cat {}/s 2>&1; touch /etc/x 2>&1; true", bdir.trim()),
    );
    assert!(out.contains("Permission denied"), "{out}");
    assert!(out.contains("Read-only file system"), "{out}");
    assert!(!out.contains("secret"), "{out}");

    sandbox_is_enforced(&node, &la);
    refusals(&node, &la, &lb);
    stop_and_lease_end(&node, &la, ga);
    end_and_wait(&node, "eu-bio", &lb);
    wait_network_gone(&node, &la);
}

/// An ended lease's GPU is not leased again while a job of it still runs: a job that ignores
/// SIGTERM keeps its device access until systemd kills it (`TimeoutStopUSec`, 10 s), and only
/// then is the GPU free. Placement takes the lowest free index, so without the wait the GPU
/// would go straight to the next lease, another tenant's.
#[test]
fn an_ended_leases_gpu_waits_for_its_last_job() {
    let _one = one_at_a_time();
    let node = jobs_node();
    create_tenants(&node);
    let (la, ga) = lease(&node, "hyd-speech");
    let j = detached(
        &node,
        "hyd-speech",
        &la,
        "trap '' TERM; echo trapped; while true; do sleep 0.2; done",
    );
    // "running" comes as soon as systemd started the unit, before the shell set its trap: a
    // SIGTERM then would end it, so wait for the job to say the trap is set.
    wait_logs(&node, "hyd-speech", &la, &j, "trapped");
    e2e::ok(&node.sovctl("hyd-speech", &["lease", "end", &la]));
    let (lb, gb) = lease(&node, "eu-bio");
    assert_ne!(gb, ga, "the ended lease's GPU was leased while its job ran");
    let v = wait_job(&node, &la, &j, |v| v["state"] == "killed");
    assert_eq!(v["signal"], 9, "SIGTERM was ignored, so SIGKILL: {v}");
    // Gone: the GPU is free again (at the runner's next look, within a second or so).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (lc, gc) = lease(&node, "eu-bio");
        end_and_wait(&node, "eu-bio", &lc);
        if gc == ga {
            break;
        }
        assert!(Instant::now() < deadline, "GPU {ga} never came back");
        std::thread::sleep(Duration::from_millis(300));
    }
    end_and_wait(&node, "eu-bio", &lb);
}

/// A suspended tenant starts nothing new (a lease, a job, an upload: 409 saying so), while
/// what it runs goes on and it can still read its output and end its lease.
#[test]
fn a_suspended_tenant_starts_nothing_new() {
    let _one = one_at_a_time();
    let node = jobs_node();
    create_tenants(&node);
    let (la, _) = lease(&node, "hyd-speech");
    let j = detached(&node, "hyd-speech", &la, "echo before; exec sleep 300");
    wait_logs(&node, "hyd-speech", &la, &j, "before");
    e2e::ok(&node.sovctl("operator", &["tenant", "suspend", "hyd-speech"]));

    let refused = |out: Output| {
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success(), "{err}");
        assert!(err.contains("tenant hyd-speech is suspended"), "{err}");
    };
    refused(node.sovctl(
        "hyd-speech",
        &["job", "run", "--detach", "--lease", &la, "--", "/bin/true"],
    ));
    let local = tempfile::tempdir().unwrap();
    let src = local.path().join("f");
    std::fs::write(&src, b"x").unwrap();
    refused(node.sovctl(
        "hyd-speech",
        &["cp", src.to_str().unwrap(), &format!("{la}:f")],
    ));
    refused(node.sovctl(
        "hyd-speech",
        &[
            "lease",
            "create",
            "--tenant",
            "hyd-speech",
            "--gpus",
            "1",
            "--model",
            "H100",
        ],
    ));

    assert_eq!(show(&node, "hyd-speech", &la, &j)["state"], "running");
    let logs = e2e::ok(&node.sovctl("hyd-speech", &["job", "logs", "--lease", &la, &j]));
    assert!(logs.contains("before"), "{logs}");
    end_and_wait(&node, "hyd-speech", &la);
    wait_job(&node, &la, &j, |v| v["state"] == "killed");
}

/// Polls the job's output until it holds `marker` (bounded).
fn wait_logs(node: &DevNode, tenant: &str, lease: &str, job: &str, marker: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = node.sovctl(tenant, &["job", "logs", "--lease", lease, job]);
        let logs = String::from_utf8_lossy(&out.stdout);
        if out.status.success() && logs.contains(marker) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the job never printed {marker}: {logs}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub(crate) fn end_and_wait(node: &DevNode, tenant: &str, lease: &str) {
    e2e::ok(&node.sovctl(tenant, &["lease", "end", lease]));
    wait_network_gone(node, lease);
}

/// Waits until hostd has removed the ended lease's network namespace.
fn wait_network_gone(node: &DevNode, lease: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
        if !String::from_utf8_lossy(&out.stdout).contains(&format!("sov-{lease}")) {
            return;
        }
        assert!(Instant::now() < deadline, "{}", node.log_text());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The sandbox's properties hold inside a job, as far as this test bed enforces them (memory,
/// CPU and task limits need cgroup v2 controllers the container lacks: the image's VM test).
fn sandbox_is_enforced(node: &DevNode, la: &str) {
    let script = "grep -E '^(NoNewPrivs|Seccomp|CapBnd|CapEff):' /proc/self/status; \
        ip -o link 2>&1 | head -n1; \
        unshare -n true 2>&1 | head -n1; \
        ls /root 2>&1 | head -n1; \
        ls -A /tmp | wc -l; \
        touch /usr/x 2>&1 | head -n1; true";
    let (_, out) = run(node, "hyd-speech", la, script);
    for want in [
        "NoNewPrivs:\t1",
        "Seccomp:\t2",
        "CapBnd:\t0000000000000000",
        "CapEff:\t0000000000000000",
        "Address family not supported",
        "Operation not permitted",
        "Permission denied",
        "Read-only file system",
    ] {
        assert!(out.contains(want), "{want:?} not in:\n{out}");
    }
    // PrivateTmp: the job's /tmp is its own, empty.
    assert!(out.lines().any(|l| l.trim() == "0"), "{out}");
    // RuntimeMaxSec: a job past its runtime is stopped, and says why.
    let j = json(&node.sovctl(
        "hyd-speech",
        &[
            "--json",
            "job",
            "run",
            "--detach",
            "--max-runtime",
            "1s",
            "--lease",
            la,
            "--",
            "/bin/sleep",
            "60",
        ],
    ));
    let id = j["id"].as_str().unwrap();
    let v = wait_job(node, la, id, |v| {
        v["state"] != "running" && v["state"] != "starting"
    });
    assert_eq!(v["result"], "timeout", "{v}");
}

/// Bad input and other tenants: clear 4xx, nothing started.
fn refusals(node: &DevNode, la: &str, lb: &str) {
    let rt = node.rt();
    rt.block_on(async {
        let a = node.client("hyd-speech").await.unwrap();
        let b = node.client("eu-bio").await.unwrap();
        let au = node.client("auditor").await.unwrap();
        let path = format!("/v1/leases/{la}/jobs");
        for (body, want) in [
            (json!({"argv": []}), "argv must not be empty"),
            (json!({"argv": ["sh"]}), "absolute path"),
            (json!({"argv": ["/bin/sh\u{0}x"]}), "NUL"),
            (json!({"argv": ["/bin/true", "a\u{0}b"]}), "NUL"),
            (json!({"argv": ["/no/such/program"]}), "not a file"),
            (
                json!({"argv": ["/bin/true"], "env": {"A B": "x"}}),
                "environment",
            ),
            (
                json!({"argv": ["/bin/true"], "env": {"BIG": "x".repeat(200_000)}}),
                "",
            ),
            (
                json!({"argv": ["/bin/true"], "workdir": "../.."}),
                "workdir",
            ),
            (
                json!({"argv": ["/bin/true"], "limits": {"memory_bytes": u64::MAX}}),
                "more than this node allows",
            ),
            (json!({"argv": ["/bin/true"], "surprise": 1}), "surprise"),
        ] {
            let (st, e) = a.post(&path, &body).await.unwrap();
            assert!((400..500).contains(&st), "{body}: {st} {e}");
            assert!(e.to_string().contains(want), "{body}: {e}");
        }
        let (st, _) = b
            .post(&path, &json!({"argv": ["/bin/true"]}))
            .await
            .unwrap();
        assert_eq!(st, 404, "another tenant's lease is not there");
        let (st, _) = b.get(&path).await.unwrap();
        assert_eq!(st, 404);
        let (st, _) = au
            .post(&path, &json!({"argv": ["/bin/true"]}))
            .await
            .unwrap();
        assert_eq!(st, 403, "auditors read");
        let (st, list) = au.get(&path).await.unwrap();
        assert_eq!(st, 200, "{list}");
        let (st, _) = a.get(&format!("/v1/leases/{lb}/jobs/nope")).await.unwrap();
        assert_eq!(st, 404);
    });
}

/// A stopped job is killed by SIGTERM; ending the lease stops its jobs; an ended lease
/// runs nothing more.
fn stop_and_lease_end(node: &DevNode, la: &str, ga: u64) {
    let j = detached(node, "hyd-speech", la, "exec sleep 300");
    wait_job(node, la, &j, |v| v["state"] == "running");
    // Dev mode: the running job makes its lease's simulated GPU busy, and idle again after.
    let gpu = ga.to_string();
    let load = |busy: bool| {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let c: Value = serde_json::from_str(
                &std::fs::read_to_string(node.dir.join("gpu-control.json")).unwrap(),
            )
            .unwrap();
            if c["load"].get(&gpu).is_some() == busy {
                return;
            }
            assert!(Instant::now() < deadline, "{c}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    load(true);
    e2e::ok(&node.sovctl("hyd-speech", &["job", "stop", "--lease", la, &j]));
    let v = wait_job(node, la, &j, |v| v["state"] == "killed");
    assert_eq!(v["signal"], 15, "{v}");
    load(false);

    let k = detached(node, "hyd-speech", la, "exec sleep 300");
    wait_job(node, la, &k, |v| v["state"] == "running");
    e2e::ok(&node.sovctl("hyd-speech", &["lease", "end", la]));
    wait_job(node, la, &k, |v| v["state"] == "killed");
    let out = node.sovctl(
        "hyd-speech",
        &["job", "run", "--lease", la, "--", "/bin/true"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("has ended"),
        "{out:?}"
    );
}

fn daemon_reload(bus: &str) {
    e2e::systemd_call(bus, "Reload", &[]);
}

#[test]
fn reloads_and_hostd_restarts_leave_running_jobs_their_gpu() {
    let _one = one_at_a_time();
    let mut node = jobs_node();
    create_tenants(&node);
    let (la, ga) = lease(&node, "hyd-speech");
    // Probes its GPU every 100 ms and records how the open failed.
    let probe = format!(
        "while true; do head -c1 /dev/nvidia{ga} 2>&1 | tail -n1 > probe.new; mv probe.new probe; sleep 0.1; done"
    );
    let j = detached(&node, "hyd-speech", &la, &probe);
    wait_job(&node, &la, &j, |v| v["state"] == "running");
    let scratch = node_scratch(&node, &la);
    let probe_says = |want: &str| {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let seen = std::fs::read_to_string(scratch.join("probe")).unwrap_or_default();
            if seen.contains(want) {
                return;
            }
            assert!(Instant::now() < deadline, "probe says {seen:?}, not {want}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    probe_says("No such device or address");

    // The NVIDIA toolkit trap: a reload while the node is missing drops the rule silently.
    // A bystander unit with the same rule, which no hostd watches, shows that it happens.
    let (bus, root) = e2e::private_systemd(&node.dir);
    start_bystander(&bus, ga);
    let bystander_says = |want: &str| {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let seen = std::fs::read_to_string(root.join("run/bystander")).unwrap_or_default();
            if seen.contains(want) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "bystander says {seen:?}, not {want}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    bystander_says("No such device or address");
    let gpu = root.join(format!("dev/nvidia{ga}"));
    std::fs::remove_file(&gpu).unwrap();
    daemon_reload(&bus);
    let made = Command::new("mknod")
        .args(["-m", "0666"])
        .arg(&gpu)
        .args(["c", "195", &ga.to_string()])
        .status()
        .unwrap();
    assert!(made.success());
    // hostd re-applies the rule: the job has its GPU back (ENXIO, not EPERM).
    let deadline = Instant::now() + Duration::from_secs(15);
    while !node.log_text().contains("device rules re-applied") {
        assert!(Instant::now() < deadline, "{}", node.log_text());
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(300));
    probe_says("No such device or address");
    bystander_says("Operation not permitted");

    // kill -9 of hostd: the job keeps running; the restarted hostd re-adopts it.
    node.kill9();
    std::thread::sleep(Duration::from_millis(300));
    node.spawn();
    let v = wait_job(&node, &la, &j, |v| v["state"] == "running");
    assert!(node.log_text().contains("job re-adopted"), "{v}");
    // The lease network outlived hostd; its allow-list is re-applied from the policy in force.
    assert!(node.log_text().contains("egress allow-list re-applied"));
    e2e::ok(&node.sovctl("hyd-speech", &["job", "stop", "--lease", &la, &j]));
    wait_job(&node, &la, &j, |v| v["state"] == "killed");
    end_and_wait(&node, "hyd-speech", &la);

    // Nothing metered twice across the kill -9: the job's records tile its run exactly once,
    // and the last says how it ended.
    let recs = job_records(&node, &j);
    assert!(!recs.is_empty());
    for pair in recs.windows(2) {
        assert_eq!(pair[0]["end"], pair[1]["start"], "gap or overlap: {recs:?}");
    }
    let ended: Vec<&Value> = recs.iter().filter(|r| r["ended"] == true).collect();
    assert_eq!(ended.len(), 1, "{recs:?}");
    assert_eq!(ended[0]["exit"], "killed 15");
    assert!(
        recs.iter()
            .map(|r| r["cpu_ns"].as_u64().unwrap())
            .sum::<u64>()
            > 0
    );
}

/// The ledger's job-usage records of `job`, in ledger order.
fn job_records(node: &DevNode, job: &str) -> Vec<Value> {
    ledger(node)
        .into_iter()
        .filter(|r| r["kind"] == "job-usage" && r["job"] == job)
        .collect()
}

/// Every record of the node's signed log, as an auditor exports it.
pub(crate) fn ledger(node: &DevNode) -> Vec<Value> {
    let rt = node.rt();
    let text = rt.block_on(async {
        let au = node.client("auditor").await.unwrap();
        au.text("/v1/audit/records").await.unwrap()
    });
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A unit with hostd's device rule for GPU `gpu`, started behind hostd's back; it probes the
/// GPU into the container's `/run/bystander`.
fn start_bystander(bus: &str, gpu: u64) {
    let script = format!(
        "while true; do head -c1 /dev/nvidia{gpu} 2>&1 | tail -n1 > /run/b.new; mv /run/b.new /run/bystander; sleep 0.1; done"
    );
    let node = format!("/dev/nvidia{gpu}");
    e2e::start_shell_unit(
        bus,
        "bystander.service",
        &script,
        &[
            &["DevicePolicy", "s", "closed"],
            &["DeviceAllow", "a(ss)", "1", &node, "rw"],
        ],
    );
}

fn node_scratch(node: &DevNode, lease: &str) -> PathBuf {
    node.dir.join("work/scratch-volume/mnt").join(lease)
}

/// A host outside the node, in a network namespace of its own behind a veth: `prefix.2`,
/// with the node's side at `prefix.1`. A listener in it counts the bytes of each connection
/// into `bytes`. Removed when dropped.
struct Foreign {
    ns: String,
    host_if: String,
    listener: std::process::Child,
    bytes: PathBuf,
    _dir: tempfile::TempDir,
}

fn sh(cmd: &str) {
    let out = Command::new("sh").arg("-c").arg(cmd).output().unwrap();
    assert!(out.status.success(), "{cmd}: {out:?}");
}

impl Foreign {
    fn new(tag: &str, prefix: &str) -> Foreign {
        let id = std::process::id();
        let ns = format!("sovt-{tag}-{id}");
        let host_if = format!("svt{tag}{}", id % 100_000);
        sh(&format!(
            "ip netns add {ns} && ip link add {host_if} type veth peer name eth0 netns {ns} && \
             ip addr add {prefix}.1/24 dev {host_if} && ip link set {host_if} up && \
             sysctl -qw net.ipv4.conf.{host_if}.forwarding=1 && \
             ip netns exec {ns} ip addr add {prefix}.2/24 dev eth0 && \
             ip netns exec {ns} ip link set eth0 up && ip netns exec {ns} ip link set lo up && \
             ip netns exec {ns} ip route add default via {prefix}.1"
        ));
        let dir = tempfile::tempdir().unwrap();
        let bytes = dir.path().join("bytes");
        let listener = Command::new("ip")
            .args(["netns", "exec", &ns])
            .arg(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "jobs::netns_listener",
                "--ignored",
                "--nocapture",
            ])
            .env("SOV_LISTEN", format!("{prefix}.2:7000"))
            .env("SOV_LISTEN_OUT", &bytes)
            .stdout(std::fs::File::create(dir.path().join("log")).unwrap())
            .stderr(std::fs::File::create(dir.path().join("err")).unwrap())
            .spawn()
            .unwrap();
        Foreign {
            ns,
            host_if,
            listener,
            bytes,
            _dir: dir,
        }
    }

    fn received(&self) -> u64 {
        std::fs::read_to_string(&self.bytes)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.parse::<u64>().ok())
            .sum()
    }
}

impl Drop for Foreign {
    fn drop(&mut self) {
        let _ = self.listener.kill();
        let _ = self.listener.wait();
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .status();
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
    }
}

/// The listener a [`Foreign`] host runs (this test binary, re-run inside the namespace):
/// serves a few connections, appending each one's byte count to `SOV_LISTEN_OUT`.
#[test]
#[ignore = "run inside a foreign host's namespace by the egress test"]
fn netns_listener() {
    use std::io::{Read, Write};
    let (Ok(addr), Ok(out)) = (std::env::var("SOV_LISTEN"), std::env::var("SOV_LISTEN_OUT")) else {
        return;
    };
    let l = std::net::TcpListener::bind(addr).unwrap();
    for stream in l.incoming().take(8) {
        let Ok(mut s) = stream else { continue };
        let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
        let mut n = 0u64;
        let mut buf = [0u8; 65536];
        while let Ok(k) = s.read(&mut buf) {
            if k == 0 {
                break;
            }
            n += k as u64;
        }
        let _ = s.write_all(b"ok\n");
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&out)
            .unwrap();
        writeln!(f, "{n}").unwrap();
    }
}

/// The lease's egress counter as nftables holds it.
fn nft_counter(name: &str) -> u64 {
    let out = Command::new("nft")
        .args(["-j", "list", "counter", "inet", "sovereign_host", name])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    v["nftables"]
        .as_array()
        .into_iter()
        .flatten()
        .find_map(|o| o["counter"]["bytes"].as_u64())
        .unwrap_or(0)
}

#[test]
fn egress_follows_the_policy_and_scratch_is_crypto_erased_at_lease_end() {
    let _one = one_at_a_time();
    let node = jobs_node();
    create_tenants(&node);
    // internal data of hyd-speech: the dev policy allows egress to India (10.233.1.0/24) only.
    let (la, _) = lease(&node, "hyd-speech");
    let india = Foreign::new("in", "10.233.1");
    let abroad = Foreign::new("us", "10.233.2");
    std::thread::sleep(Duration::from_millis(300));
    // A host service the lease must not reach, on the node's side of the lease's veth.
    let host_service = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let host_port = host_service.local_addr().unwrap().port();
    let probe = |addr: &str, port: u16| {
        format!(
            "if timeout 3 bash -c 'exec 3<>/dev/tcp/{addr}/{port}' 2>/dev/null; then echo reached {addr}; else echo blocked {addr}; fi"
        )
    };
    let sent = 300_000;
    let script = format!(
        "timeout 10 bash -c 'exec 3<>/dev/tcp/10.233.1.2/7000 && head -c {sent} /dev/zero >&3' && echo sent; {}; {}",
        probe("10.233.2.2", 7000),
        "while read -r i d g r; do [ \"$d\" = 00000000 ] && echo gateway $g; done < /proc/net/route",
    );
    let out = node.sovctl(
        "hyd-speech",
        &[
            "job",
            "run",
            "--lease",
            &la,
            "--",
            "/bin/bash",
            "-c",
            &script,
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.contains("sent"),
        "{out:?}\nlistener: {:?} {:?}",
        std::fs::read_to_string(india._dir.path().join("log")),
        std::fs::read_to_string(india._dir.path().join("err"))
    );
    assert!(text.contains("blocked 10.233.2.2"), "{text}");
    // The node itself, at the lease's gateway address, answers nothing.
    let gw_hex = text
        .lines()
        .find_map(|l| l.strip_prefix("gateway "))
        .unwrap()
        .trim()
        .to_owned();
    let gw = u32::from_str_radix(&gw_hex, 16).unwrap().to_le_bytes();
    let gw = format!("{}.{}.{}.{}", gw[0], gw[1], gw[2], gw[3]);
    let (_, host) = run(
        &node,
        "hyd-speech",
        &la,
        &format!("bash -c \"{}\"", probe(&gw, host_port).replace('"', "\\\"")),
    );
    assert!(host.contains(&format!("blocked {gw}")), "{host}");

    // Bytes: what the foreign host received, the lease's counter and the job's own.
    let deadline = Instant::now() + Duration::from_secs(10);
    while india.received() < sent {
        assert!(Instant::now() < deadline, "received {}", india.received());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(abroad.received(), 0);
    assert!(nft_counter(&format!("out_{la}")) >= sent, "nft counter");
    let jobs = json(&node.sovctl("hyd-speech", &["--json", "job", "list", "--lease", &la]));
    let out_bytes = jobs["jobs"][0]["bytes_out"].as_u64().unwrap();
    assert!(out_bytes >= sent, "job bytes_out {out_bytes}");
    jobs_list_in_pages(&node, &la, &jobs);

    // Loopback inside the lease's namespace works (multi-process training needs it).
    let server = "use IO::Socket::INET; my $s = IO::Socket::INET->new(LocalAddr => q(127.0.0.1), LocalPort => 9000, Listen => 1, ReuseAddr => 1) or die; my $c = $s->accept; print $c qq(local ok\\n); close $c";
    let script = format!(
        "/usr/bin/perl -e '{server}' & sleep 0.5; timeout 5 bash -c \"exec 3<>/dev/tcp/127.0.0.1/9000 && cat <&3\"; wait"
    );
    let (_, out) = run(&node, "hyd-speech", &la, &script);
    assert!(out.contains("local ok"), "{out}");
    service_port(&node, &la);
    scratch_is_crypto_erased(&node, &la);
}

/// `sovctl job list --limit 1`, followed by `--after`, gives the whole list's jobs in the same
/// order, oldest first.
fn jobs_list_in_pages(node: &DevNode, la: &str, whole: &Value) {
    let ids = |v: &Value| -> Vec<String> {
        let jobs = v["jobs"].as_array().unwrap();
        jobs.iter()
            .map(|j| j["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let all = ids(whole);
    assert!(all.len() > 1, "{whole}");
    let started: Vec<i64> = whole["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["started_ms"].as_i64().unwrap())
        .collect();
    assert!(started.windows(2).all(|w| w[0] <= w[1]), "{started:?}");
    let mut paged = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..=all.len() {
        let mut args = vec!["--json", "job", "list", "--lease", la, "--limit", "1"];
        if let Some(a) = &after {
            args.extend(["--after", a.as_str()]);
        }
        let page = json(&node.sovctl("hyd-speech", &args));
        paged.extend(ids(&page));
        match page["next_after"].as_str() {
            Some(next) => after = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(paged, all);
}

/// A job's output is kept in the lease's logs folder in the encrypted scratch volume: the node's
/// work folder holds it in plaintext nowhere but through the mounted volume. Its folder.
fn job_output_is_encrypted(node: &DevNode, la: &str) -> PathBuf {
    // The marker is only in the output: the job's command (which hostd stores) has it in two.
    let marker = "sovereign-log-marker-0123456789";
    let (code, out) = run(
        node,
        "hyd-speech",
        la,
        "for i in $(seq 2000); do printf 'sovereign-log-%s\\n' marker-0123456789; done; sync",
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(marker), "{out}");
    let mnt = node.dir.join("work/scratch-volume/mnt");
    let logs = mnt.join(".logs").join(la);
    let through_mount = Command::new("grep")
        .args(["-r", "-l", "-a", marker])
        .arg(&logs)
        .output()
        .unwrap();
    assert!(!through_mount.stdout.is_empty(), "no job log in {logs:?}");
    let on_disk = Command::new("grep")
        .args(["-r", "-l", "-a", "--exclude-dir=mnt", marker])
        .arg(node.dir.join("work"))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&on_disk.stdout),
        "",
        "job output in plaintext on disk"
    );
    logs
}

/// A job serving on a port is reached through the node port hostd publishes (on loopback in
/// dev mode); the forward closes with the job.
fn service_port(node: &DevNode, la: &str) {
    use std::io::{Read, Write};
    // perl is in every Debian (perl-base): a one-line echo server on port 8000.
    let server = "use IO::Socket::INET; my $s = IO::Socket::INET->new(LocalPort => 8000, Listen => 5, ReuseAddr => 1) or die; while (my $c = $s->accept) { my $l = <$c>; print $c \"echo: $l\"; close $c }";
    let j = json(&node.sovctl(
        "hyd-speech",
        &[
            "--json",
            "job",
            "run",
            "--detach",
            "--publish",
            "8000",
            "--lease",
            la,
            "--",
            "/usr/bin/perl",
            "-e",
            server,
        ],
    ));
    let id = j["id"].as_str().unwrap().to_owned();
    let port = j["published_port"].as_u64().expect("a published port") as u16;
    wait_job(node, la, &id, |v| v["state"] == "running");
    let deadline = Instant::now() + Duration::from_secs(10);
    let answer = loop {
        let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = c.write_all(b"hello\n");
        let mut got = String::new();
        let _ = c.read_to_string(&mut got);
        if !got.is_empty() {
            break got;
        }
        // The server may not listen yet: the forward then closes the connection at once.
        assert!(Instant::now() < deadline, "the service never answered");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(answer, "echo: hello\n");
    e2e::ok(&node.sovctl("hyd-speech", &["job", "stop", "--lease", la, &id]));
    wait_job(node, la, &id, |v| v["state"] == "killed");
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
        assert!(
            Instant::now() < deadline,
            "the published port is still open"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Files in scratch and the jobs' output are ciphertext on disk; after the lease ends both are
/// gone and the network with them.
fn scratch_is_crypto_erased(node: &DevNode, la: &str) {
    let logs = job_output_is_encrypted(node, la);
    let marker = "sovereign-scratch-marker-0123456789";
    let (code, dir) = run(
        node,
        "hyd-speech",
        la,
        &format!("for i in $(seq 2000); do echo {marker}; done > data && sync && pwd"),
    );
    assert_eq!(code, 0, "{dir}");
    let dir = PathBuf::from(dir.trim());
    assert!(dir.join("data").exists());
    let image = node.dir.join("work/scratch-volume/scratch.img");
    let found = Command::new("grep")
        .args(["-c", "-a", marker])
        .arg(&image)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&found.stdout).trim(),
        "0",
        "plaintext on disk"
    );
    e2e::ok(&node.sovctl("hyd-speech", &["lease", "end", la]));
    let deadline = Instant::now() + Duration::from_secs(15);
    while !node.log_text().contains("network removed, uid released") {
        assert!(Instant::now() < deadline, "{}", node.log_text());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!dir.exists(), "scratch still there");
    assert!(!logs.exists(), "job logs still there");
    let erased: Vec<Value> = ledger(node)
        .into_iter()
        .filter(|r| r["kind"] == "scratch-erased" && r["lease"] == la)
        .collect();
    assert_eq!(erased.len(), 1, "{erased:?}");
    assert!(
        erased[0]["bytes"].as_u64().unwrap() >= 2000 * 36,
        "{erased:?}"
    );
    // The auditor's offline verification accepts the new kinds.
    let out_dir = tempfile::tempdir().unwrap();
    let export = out_dir.path().join("export");
    e2e::ok(&node.sovctl(
        "auditor",
        &["audit", "export", "--out", export.to_str().unwrap()],
    ));
    let vkey = node.dir.join("state/log.vkey");
    e2e::ok(&node.sovctl(
        "",
        &[
            "audit",
            "verify",
            export.to_str().unwrap(),
            "--vkey",
            vkey.to_str().unwrap(),
        ],
    ));
    let netns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&netns.stdout).contains(&format!("sov-{la}")));
}
