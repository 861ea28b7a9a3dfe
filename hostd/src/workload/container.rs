//! A private systemd for `hostd dev` and the tests, on machines whose PID 1 is not systemd.
//!
//! Jobs are systemd units, and the production code path talks to systemd over D-Bus. A dev
//! machine or a CI runner often has no systemd as init (a container's PID 1 is a shell or a
//! supervisor), so dev mode boots systemd 252 as the init of a `systemd-nspawn` container that
//! shares the host's file system read-only (`--volatile=yes -D /`), network and devices, and
//! drives it over the container's own system bus, reachable from the host at
//! `/proc/<init>/root/run/dbus/system_bus_socket`. Nothing in hostd's job logic knows the
//! difference.
//!
//! Why each flag (see `shared/notes/isolation.md`): `--capability=all` and the `bpf` syscall,
//! or systemd in the container loads no BPF programs and device and IP rules silently do
//! nothing; a cgroup of its own in every hierarchy, or nspawn refuses to start;
//! `--register=no --keep-unit`, as there is no host systemd to register with; `--bind` for the
//! folders jobs write to (logs, scratch), at the same path inside, so paths need no
//! translation.
//!
//! The container is started detached (its own session) so that it, and the jobs in it,
//! outlive a `kill -9` of hostd: the next `hostd dev` adopts it from its pid file, as a node's
//! hostd finds its system's systemd still running. A clean stop of `hostd dev` shuts it down.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Why the private systemd could not be had. Each says what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ContainerError {
    #[error("systemd-nspawn is not installed (Debian package systemd-container)")]
    NoNspawn,
    #[error("no cgroup hierarchy to place the container in under /sys/fs/cgroup: {0}")]
    NoCgroup(String),
    #[error("cannot {what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("systemd in the container did not become ready within {secs} s (its log: {log})")]
    NotReady { secs: u64, log: PathBuf },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ContainerError {
    let what = what.into();
    move |source| ContainerError::Io { what, source }
}

/// A running container with systemd as its init.
#[derive(Debug)]
pub struct PrivateSystemd {
    nspawn_pid: u32,
    leader: u32,
    dir: PathBuf,
    /// Its cgroups' name, when this process made them (removed at shutdown).
    machine: Option<String>,
}

/// How long systemd in the container may take to come up (it takes under a second here).
const READY_TIMEOUT: Duration = Duration::from_secs(30);

impl PrivateSystemd {
    /// Adopts the container recorded in `dir` if it still runs, else boots a new one named
    /// `machine`, with `binds` (existing directories) visible inside at the same paths.
    pub fn start_or_adopt(
        dir: &Path,
        machine: &str,
        binds: &[PathBuf],
    ) -> Result<PrivateSystemd, ContainerError> {
        if let Some(c) = Self::adopt(dir) {
            tracing::info!(pid = c.leader, "adopted the running private systemd");
            return Ok(c);
        }
        Self::boot(dir, machine, binds)
    }

    fn pid_file(dir: &Path) -> PathBuf {
        dir.join("systemd-nspawn.pid")
    }

    /// The container recorded in `dir`, when its nspawn still runs and its bus answers.
    fn adopt(dir: &Path) -> Option<PrivateSystemd> {
        let pid: u32 = std::fs::read_to_string(Self::pid_file(dir))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        if !cmdline.windows(14).any(|w| w == b"systemd-nspawn") {
            return None;
        }
        let leader = child_of(pid)?;
        let c = PrivateSystemd {
            nspawn_pid: pid,
            leader,
            dir: dir.to_owned(),
            machine: None,
        };
        c.bus_socket().exists().then_some(c)
    }

    fn boot(
        dir: &Path,
        machine: &str,
        binds: &[PathBuf],
    ) -> Result<PrivateSystemd, ContainerError> {
        which("systemd-nspawn").ok_or(ContainerError::NoNspawn)?;
        let cgroups = cgroup_dirs(machine)?;
        let log = dir.join("systemd-nspawn.log");
        let out = std::fs::File::create(&log).map_err(io(format!("create {}", log.display())))?;
        let err = out.try_clone().map_err(io("duplicate the log handle"))?;
        let pid_file = Self::pid_file(dir);
        let _ = std::fs::remove_file(&pid_file);
        // `setsid --fork`: nspawn is not hostd's child, so hostd's exit (or kill -9) neither
        // takes it down nor leaves it a zombie.
        let status = Command::new("setsid")
            .arg("--fork")
            .arg("sh")
            .arg("-c")
            .arg(boot_script(&cgroups))
            .arg("sh")
            .args(nspawn_args(machine, binds))
            .env("SYSTEMD_NSPAWN_UNIFIED_HIERARCHY", "1")
            .env("SOV_PIDFILE", &pid_file)
            // nspawn would report to hostd's supervisor as if it were hostd.
            .env_remove("NOTIFY_SOCKET")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .status()
            .map_err(io("run setsid sh -c systemd-nspawn"))?;
        if !status.success() {
            return Err(ContainerError::Io {
                what: format!("start systemd-nspawn ({status}); see {}", log.display()),
                source: std::io::Error::other("setsid failed"),
            });
        }
        let mut c = Self::wait_ready(dir, &log)?;
        c.machine = Some(machine.to_owned());
        Ok(c)
    }

    fn wait_ready(dir: &Path, log: &Path) -> Result<PrivateSystemd, ContainerError> {
        let deadline = Instant::now() + READY_TIMEOUT;
        while Instant::now() < deadline {
            let pid = std::fs::read_to_string(Self::pid_file(dir))
                .ok()
                .and_then(|p| p.trim().parse::<u32>().ok());
            if let Some((pid, leader)) = pid.and_then(|p| Some((p, child_of(p)?))) {
                let c = PrivateSystemd {
                    nspawn_pid: pid,
                    leader,
                    dir: dir.to_owned(),
                    machine: None,
                };
                if c.bus_socket().exists() {
                    tracing::info!(pid = leader, "private systemd is up");
                    return Ok(c);
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(ContainerError::NotReady {
            secs: READY_TIMEOUT.as_secs(),
            log: log.to_owned(),
        })
    }

    /// The container's system bus, as a D-Bus address.
    pub fn bus_address(&self) -> String {
        format!("unix:path={}", self.bus_socket().display())
    }

    fn bus_socket(&self) -> PathBuf {
        self.root().join("run/dbus/system_bus_socket")
    }

    /// The container's root as the host sees it (for its `/dev`).
    pub fn root(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root", self.leader))
    }

    /// The pid of systemd in the container.
    pub fn leader(&self) -> u32 {
        self.leader
    }

    /// Shuts the container down (SIGTERM to nspawn is an orderly shutdown), killing it after
    /// `grace`, and forgets it.
    pub fn shutdown(self, grace: Duration) {
        let pid = self.nspawn_pid.to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + grace;
        while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if Path::new(&format!("/proc/{pid}")).exists() {
            // Killing nspawn alone would leave the container; killing its init ends it.
            let _ = Command::new("kill")
                .args(["-KILL", &self.leader.to_string(), &pid])
                .status();
        }
        let _ = std::fs::remove_file(Self::pid_file(&self.dir));
        if let Some(machine) = &self.machine {
            remove_cgroups(machine);
        }
    }
}

/// Moves the shell into the container's own cgroups, records its pid (nspawn's, after the
/// exec), then becomes systemd-nspawn.
fn boot_script(cgroups: &[PathBuf]) -> String {
    let mut s = String::from("set -e; ");
    for dir in cgroups {
        s.push_str(&format!("echo $$ > '{}/cgroup.procs'; ", dir.display()));
    }
    // The pid file comes as $SOV_PIDFILE: a folder name may hold any character.
    s.push_str("echo $$ > \"$SOV_PIDFILE\"; ");
    s.push_str("exec systemd-nspawn \"$@\"");
    s
}

fn nspawn_args(machine: &str, binds: &[PathBuf]) -> Vec<String> {
    let mut args: Vec<String> = [
        "--quiet",
        "--volatile=yes",
        "--directory=/",
        "--register=no",
        "--keep-unit",
        "--boot",
        "--capability=all",
        "--system-call-filter=bpf",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.push(format!("--machine={machine}"));
    args.extend(binds.iter().map(|b| format!("--bind={}", b.display())));
    args.extend([
        "--".into(),
        "systemd.firstboot=off".into(),
        "systemd.unit=basic.target".into(),
    ]);
    args
}

/// A fresh cgroup named `machine` in each hierarchy nspawn needs: the unified one and, on a
/// hybrid host, the named `systemd` one.
fn cgroup_dirs(machine: &str) -> Result<Vec<PathBuf>, ContainerError> {
    let root = Path::new("/sys/fs/cgroup");
    let hierarchies: Vec<PathBuf> = if root.join("cgroup.controllers").exists() {
        vec![root.to_owned()]
    } else {
        ["unified", "systemd"]
            .iter()
            .map(|h| root.join(h))
            .filter(|p| p.join("cgroup.procs").exists())
            .collect()
    };
    if hierarchies.is_empty() {
        return Err(ContainerError::NoCgroup(
            "neither cgroup2 at /sys/fs/cgroup nor /sys/fs/cgroup/{unified,systemd}".into(),
        ));
    }
    hierarchies
        .into_iter()
        .map(|h| {
            let dir = h.join(machine);
            std::fs::create_dir_all(&dir)
                .map_err(io(format!("create cgroup {}", dir.display())))?;
            Ok(dir)
        })
        .collect()
}

/// Removes the cgroups named `machine`, deepest first (the container's systemd leaves its
/// own inside when it is killed). A cgroup that still holds processes is kept.
fn remove_cgroups(machine: &str) {
    for h in ["", "unified", "systemd"] {
        let dir = Path::new("/sys/fs/cgroup").join(h).join(machine);
        if dir.join("cgroup.procs").exists() {
            remove_tree_of_dirs(&dir, 16);
        }
    }
}

fn remove_tree_of_dirs(dir: &Path, depth: u32) {
    if depth == 0 {
        return;
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                remove_tree_of_dirs(&e.path(), depth - 1);
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// The first child of `pid` (systemd, the container's init, is nspawn's only child).
fn child_of(pid: u32) -> Option<u32> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    for t in tasks.flatten() {
        let children = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
        if let Some(c) = children
            .split_whitespace()
            .next()
            .and_then(|c| c.parse().ok())
        {
            return Some(c);
        }
    }
    None
}

/// The path of `program` on `PATH`, if it is there.
pub fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_boot_script_joins_every_cgroup_then_becomes_nspawn() {
        let s = boot_script(&[
            PathBuf::from("/sys/fs/cgroup/unified/m"),
            PathBuf::from("/sys/fs/cgroup/systemd/m"),
        ]);
        assert!(s.contains("echo $$ > \"$SOV_PIDFILE\""));
        assert!(s.contains("echo $$ > '/sys/fs/cgroup/unified/m/cgroup.procs'"));
        assert!(s.contains("echo $$ > '/sys/fs/cgroup/systemd/m/cgroup.procs'"));
        assert!(s.ends_with("exec systemd-nspawn \"$@\""));
    }

    #[test]
    fn nspawn_gets_bpf_all_capabilities_and_the_binds() {
        let a = nspawn_args("sov-dev", &[PathBuf::from("/var/lib/x/work")]);
        for want in [
            "--capability=all",
            "--system-call-filter=bpf",
            "--machine=sov-dev",
            "--bind=/var/lib/x/work",
            "--volatile=yes",
        ] {
            assert!(a.iter().any(|x| x == want), "{want} missing from {a:?}");
        }
        let dashdash = a.iter().position(|x| x == "--").unwrap();
        assert!(a[dashdash + 1..].iter().all(|x| x.starts_with("systemd.")));
    }
}
