//! Harness for the end-to-end tests in `tests/e2e/`: starts the real `hostd` binary in dev mode
//! on a free loopback port and drives it with the real `sovctl` binary and the `hostd` client
//! library over real mutual TLS.
//!
//! The binaries are the ones Cargo built for this workspace (`cargo test --workspace` builds
//! them before any test runs); they are looked up next to the test executable.

use hostd_api::profile::Profile;
use sovctl::client::Client;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Path of a workspace binary built alongside this test (`target/<profile>/<name>`).
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/e2e-<hash> → target/<profile>/<name>
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test executable lives in target/<profile>/deps");
    let p = dir.join(name);
    assert!(
        p.exists(),
        "{} not found: run the tests with `cargo test --workspace` so Cargo builds the binaries",
        p.display()
    );
    p
}

/// A free loopback port (bound and released; good enough on a test machine).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// A running `hostd dev` in a temporary folder.
pub struct DevNode {
    pub dir: PathBuf,
    pub port: u16,
    pub args: Vec<String>,
    child: Option<Child>,
    _tmp: Option<tempfile::TempDir>,
    /// The log and notify socket live apart from the node's folder, so a test that fills
    /// the node's file system still reads the whole log.
    _aside: Option<tempfile::TempDir>,
    log: PathBuf,
    notify: PathBuf,
}

impl DevNode {
    /// Starts `hostd dev` with extra arguments (e.g. `--time-scale 3600`).
    pub fn start(extra: &[&str]) -> DevNode {
        Self::start_in(&std::env::temp_dir(), extra)
    }

    /// [`DevNode::start`] with its folder inside `parent` (e.g. a small file system).
    pub fn start_in(parent: &Path, extra: &[&str]) -> DevNode {
        let tmp = tempfile::tempdir_in(parent).expect("temp dir");
        let aside = tempfile::tempdir().expect("temp dir");
        let dir = tmp.path().join("dev-state");
        let mut n = DevNode {
            dir,
            port: free_port(),
            args: extra.iter().map(|s| s.to_string()).collect(),
            child: None,
            log: aside.path().join("hostd.log"),
            notify: aside.path().join("notify.sock"),
            _tmp: Some(tmp),
            _aside: Some(aside),
        };
        n.spawn();
        n
    }

    /// (Re)starts the daemon on the same folder and port, and waits until it answers.
    pub fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log file");
        // Stand in for systemd: hostd must report READY=1 on NOTIFY_SOCKET once it serves.
        let _ = std::fs::remove_file(&self.notify);
        let notify = std::os::unix::net::UnixDatagram::bind(&self.notify).expect("notify socket");
        notify
            .set_read_timeout(Some(Duration::from_secs(60)))
            .expect("socket timeout");
        let child = Command::new(bin("hostd"))
            .arg("dev")
            .arg("--dir")
            .arg(&self.dir)
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", self.port))
            .args(&self.args)
            .env("HOSTD_LOG", "info")
            .env("NOTIFY_SOCKET", &self.notify)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn hostd");
        self.child = Some(child);
        self.wait_ready();
        let mut buf = [0u8; 256];
        let n = notify
            .recv(&mut buf)
            .expect("hostd sent no sd_notify message");
        let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
        assert!(msg.contains("READY=1"), "sd_notify said {msg:?}");
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(c) = self.child.as_mut() {
                if let Ok(Some(status)) = c.try_wait() {
                    panic!("hostd exited early ({status}); log:\n{}", self.log_text());
                }
            }
            if self.dir.join("operator/profile.toml").exists() {
                let ok = self.rt().block_on(async {
                    match self.client("operator").await {
                        Ok(c) => matches!(c.get("/v1/health").await, Ok((200, _))),
                        Err(_) => false,
                    }
                });
                if ok {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "hostd not ready in 60 s; log:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Process id of the running daemon.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn rt(&self) -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    }

    pub fn profile(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// A client with the named dev profile's certificate.
    pub async fn client(&self, name: &str) -> Result<Client, String> {
        let p = Profile::load(&self.profile(name)).map_err(|e| e.to_string())?;
        Client::new(&p).map_err(|e| e.to_string())
    }

    /// Runs `sovctl --profile <dir>/<profile> args...`.
    pub fn sovctl(&self, profile: &str, args: &[&str]) -> Output {
        let mut c = Command::new(bin("sovctl"));
        if !profile.is_empty() {
            c.arg("--profile").arg(self.profile(profile));
        }
        c.args(args).output().expect("run sovctl")
    }

    /// Runs `hostd dev` on this node's folder and port to completion (for a start that must
    /// be refused), with `RUST_BACKTRACE=1` so a panic would show.
    pub fn run_once(&self, extra: &[&str]) -> Output {
        Command::new(bin("hostd"))
            .arg("dev")
            .arg("--dir")
            .arg(&self.dir)
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", self.port))
            .args(extra)
            .env("RUST_BACKTRACE", "1")
            .output()
            .expect("run hostd")
    }

    /// Waits up to `secs` for the daemon to exit by itself; its exit code, or `None` if it
    /// is still running.
    pub fn wait_exit(&mut self, secs: u64) -> Option<Option<i32>> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(c) = self.child.as_mut() {
                if let Ok(Some(status)) = c.try_wait() {
                    self.child = None;
                    return Some(status.code());
                }
            } else {
                return None;
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL: no chance to flush anything.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait for a clean exit; returns whether it exited successfully.
    pub fn stop(&mut self) -> bool {
        let Some(mut c) = self.child.take() else {
            return true;
        };
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(c.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = c.try_wait() {
                return status.success();
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for DevNode {
    fn drop(&mut self) {
        self.kill9();
        stop_private_systemd(&self.dir);
    }
}

/// utime + stime of a process, in clock ticks (100 a second on every Linux this runs on).
pub fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let utime: u64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0);
    let stime: u64 = f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
    utime + stime
}

/// The private systemd of the `hostd dev` in `dir`, from the host: the D-Bus address of its
/// system bus and its root (for its `/dev` and `/run`).
pub fn private_systemd(dir: &Path) -> (String, PathBuf) {
    let pid = std::fs::read_to_string(dir.join("systemd-nspawn.pid")).expect("nspawn pid file");
    let children = std::fs::read_dir(format!("/proc/{}/task", pid.trim()))
        .expect("nspawn tasks")
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .collect::<String>();
    let leader = children
        .split_whitespace()
        .next()
        .expect("the container's init")
        .to_owned();
    let root = PathBuf::from(format!("/proc/{leader}/root"));
    (
        format!(
            "unix:path={}",
            root.join("run/dbus/system_bus_socket").display()
        ),
        root,
    )
}

/// Calls `method` of systemd's manager on the bus at `bus` with `busctl`'s typed arguments,
/// e.g. `("Reload", &[])`; panics with busctl's answer when systemd refuses.
pub fn systemd_call(bus: &str, method: &str, args: &[&str]) {
    let out = Command::new("busctl")
        .arg(format!("--address={bus}"))
        .args([
            "--",
            "call",
            "org.freedesktop.systemd1",
            "/org/freedesktop/systemd1",
            "org.freedesktop.systemd1.Manager",
            method,
        ])
        .args(args)
        .output()
        .expect("busctl (package systemd)");
    assert!(out.status.success(), "{method}: {out:?}");
}

/// Starts transient service `name` running `sh -c script` with extra `(sv)` properties given
/// as busctl arguments (`["DevicePolicy", "s", "closed"]`, one property per slice).
pub fn start_shell_unit(bus: &str, name: &str, script: &str, extra: &[&[&str]]) {
    let count = (1 + extra.len()).to_string();
    let mut args: Vec<&str> = vec![
        "ssa(sv)a(sa(sv))",
        name,
        "fail",
        &count,
        "ExecStart",
        "a(sasb)",
        "1",
        "/bin/sh",
        "3",
        "/bin/sh",
        "-c",
        script,
        "false",
    ];
    for p in extra {
        args.extend_from_slice(p);
    }
    args.push("0");
    systemd_call(bus, "StartTransientUnit", &args);
}

/// Kills the private systemd `hostd dev` booted for jobs in `dir` (it outlives hostd on
/// purpose, so that a restarted hostd re-adopts running jobs) and removes its cgroups.
pub fn stop_private_systemd(dir: &Path) {
    let Ok(pid) = std::fs::read_to_string(dir.join("systemd-nspawn.pid")) else {
        return;
    };
    let pid = pid.trim();
    let cgroups: Vec<PathBuf> = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (head, path) = l.rsplit_once(':')?;
            let h = if head.ends_with("name=systemd") {
                "systemd"
            } else if head == "0:" {
                "unified"
            } else {
                return None;
            };
            // nspawn sits in <machine>/supervisor: remove the whole <machine> tree.
            let top = path.trim_start_matches('/').split('/').next()?;
            (!top.is_empty()).then(|| Path::new("/sys/fs/cgroup").join(h).join(top))
        })
        .collect();
    // The container's init first: killing a PID namespace's init kills everything in it,
    // while killing nspawn alone would leave the container running.
    let leaders: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| c.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .collect();
    for p in leaders.iter().map(String::as_str).chain([pid]) {
        let _ = Command::new("kill").args(["-KILL", p]).status();
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while cgroups.iter().any(|c| populated(c)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    for c in cgroups {
        remove_dirs(&c, 16);
    }
    // The encrypted scratch volume (a loop device) goes with it.
    let mnt = dir.join("work/scratch-volume/mnt");
    let _ = Command::new("umount").arg("-d").arg(&mnt).status();
    remove_idle_lease_table();
}

/// hostd's nftables table, once no lease network is left in it (the jobs tests run one node at
/// a time, so no other node is using it).
fn remove_idle_lease_table() {
    let Ok(out) = Command::new("nft")
        .args(["list", "table", "inet", "sovereign_host"])
        .output()
    else {
        return;
    };
    if out.status.success() && !String::from_utf8_lossy(&out.stdout).contains("lease_out_") {
        let _ = Command::new("nft")
            .args(["delete", "table", "inet", "sovereign_host"])
            .output();
    }
}

/// Whether any process is left in the cgroup tree at `dir`.
fn populated(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("cgroup.events"))
        .map(|e| e.contains("populated 1"))
        .unwrap_or(false)
}

fn remove_dirs(dir: &Path, depth: u32) {
    if depth == 0 || !dir.starts_with("/sys/fs/cgroup") {
        return;
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                remove_dirs(&e.path(), depth - 1);
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// Stdout of a command that must succeed.
pub fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "command failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
