//! The sandbox of one job, as systemd unit properties.
//!
//! Every property is systemd's own (set with `StartTransientUnit`, re-applied with
//! `SetUnitProperties`), never a rule written behind systemd's back: a `daemon-reload`
//! rebuilds what systemd knows, and drops what it does not (NVIDIA container toolkit
//! issue 48). Each property, and why:
//!
//! | property | value | why |
//! | --- | --- | --- |
//! | `DevicePolicy` | `closed` | only the devices allowed below (and the pseudo devices) |
//! | `DeviceAllow` | `/dev/nvidiactl`, the lease's `/dev/nvidiaN`, `/dev/nvidia-uvm`, `rw` | the lease's GPUs and nothing of other leases |
//! | `User`, `Group` | the lease's uid/gid | never root; no supplementary groups |
//! | `NoNewPrivileges` | true | no setuid escalation |
//! | `CapabilityBoundingSet` | empty | no capabilities at all |
//! | `SystemCallFilter` | `@system-service` | the syscalls services need, no more |
//! | `SystemCallErrorNumber` | `EPERM` | a denied syscall fails instead of killing the job |
//! | `RestrictAddressFamilies` | `AF_UNIX AF_INET AF_INET6` | no raw, netlink or packet sockets |
//! | `RestrictNamespaces` | all | no nested containers to hide in |
//! | `ProtectSystem` | `strict` | the whole file system read-only but the scratch |
//! | `ReadWritePaths` | the lease's scratch | the one place a job writes |
//! | `ProtectHome` | true | no home directories |
//! | `PrivateTmp` | true | a /tmp of its own |
//! | `MemoryMax`, `CPUQuotaPerSecUSec`, `TasksMax` | the job's limits | one job cannot starve the node |
//! | `RuntimeMaxUSec` | until the lease ends at the latest | a job never outlives its lease |
//! | `KillMode` | `control-group` | stopping kills every process of the job |
//! | `TimeoutStopUSec` | 10 s | a job ignoring SIGTERM is killed; its GPUs wait for it |
//! | `Slice` | the tenant's slice (escaped) | per-tenant accounting |

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

/// How long a stopped job has between SIGTERM and SIGKILL (µs).
const STOP_TIMEOUT_USEC: u64 = 10_000_000;

/// A value of a systemd unit property, in the D-Bus type systemd expects for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PropertyValue {
    /// `s`
    Str(String),
    /// `b`
    Bool(bool),
    /// `t`
    U64(u64),
    /// `u`
    U32(u32),
    /// `i`
    I32(i32),
    /// `as`
    Strings(Vec<String>),
    /// `a(ss)`: device path and access (`DeviceAllow`).
    Devices(Vec<(String, String)>),
    /// `(bas)`: allow-list flag and names (`SystemCallFilter`, `RestrictAddressFamilies`).
    FlaggedList(bool, Vec<String>),
    /// `a(sasb)`: path, argv, ignore-failure (`ExecStart`).
    Exec(Vec<(String, Vec<String>, bool)>),
    /// `a(ssbt)`: source, destination, ignore a missing source, mount flags
    /// (`BindReadOnlyPaths`).
    Binds(Vec<(String, String, bool, u64)>),
    /// `a(iayu)`: address family (2 or 10), address bytes, prefix length
    /// (`IPAddressAllow`, `IPAddressDeny`).
    Prefixes(Vec<(i32, Vec<u8>, u32)>),
}

/// The limits a tenant asks for a job (checked against the node's bounds elsewhere).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// `MemoryMax`, bytes.
    pub memory_bytes: u64,
    /// CPU time per second of wall time, µs (1,000,000 = one core).
    pub cpu_quota_usec_per_sec: u64,
    /// `TasksMax`.
    pub tasks: u64,
    /// `RuntimeMaxUSec`, µs.
    pub runtime_usec: u64,
}

/// Everything the sandbox of one job depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSandbox {
    /// The tenant (for the slice).
    pub tenant: String,
    /// The program and its arguments (`argv[0]` is the program, absolute or looked up).
    pub argv: Vec<String>,
    /// Environment, `KEY=VALUE`.
    pub env: BTreeMap<String, String>,
    /// Working directory inside the lease's scratch.
    pub workdir: PathBuf,
    /// The lease's uid and gid.
    pub uid: u32,
    /// The lease's gid.
    pub gid: u32,
    /// The lease's GPU device nodes (`/dev/nvidiaN`).
    pub gpu_devices: Vec<String>,
    /// `/dev/nvidia-uvm`, when the node has one (its major is read from /proc/devices).
    pub uvm_device: Option<String>,
    /// The job's limits, its runtime already cut at the lease's end.
    pub limits: Limits,
    /// The only paths it may write (`ReadWritePaths`): its lease's scratch.
    pub writable: Vec<PathBuf>,
}

/// Why a job's sandbox cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    #[error("a job needs a program to run (argv is empty)")]
    EmptyArgv,
    #[error("argument {index} contains a NUL byte")]
    NulInArgv { index: usize },
    #[error(
        "environment variable {name:?} is not a valid name (letters, digits, _; not first a digit)"
    )]
    BadEnvName { name: String },
    #[error("environment variable {name} contains a NUL byte")]
    NulInEnv { name: String },
    #[error("uid and gid 0 (root) are never given to a job")]
    Root,
}

/// Checks a command before anything is allocated for it: a program, no NUL bytes, valid
/// variable names.
pub fn check_command(argv: &[String], env: &BTreeMap<String, String>) -> Result<(), SandboxError> {
    if argv.is_empty() {
        return Err(SandboxError::EmptyArgv);
    }
    if let Some(index) = argv.iter().position(|a| a.contains('\0')) {
        return Err(SandboxError::NulInArgv { index });
    }
    for (k, v) in env {
        if !valid_env_name(k) {
            return Err(SandboxError::BadEnvName { name: k.clone() });
        }
        if v.contains('\0') {
            return Err(SandboxError::NulInEnv { name: k.clone() });
        }
    }
    Ok(())
}

fn valid_env_name(n: &str) -> bool {
    !n.is_empty()
        && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !n.as_bytes()[0].is_ascii_digit()
}

/// A slice name for a tenant: `-` nests slices in systemd, so it is escaped (`\x2d`).
pub fn tenant_slice(tenant: &str) -> String {
    let mut s = String::from("sovereign-tenant-");
    for c in tenant.chars() {
        match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '_' => s.push(c),
            other => {
                let mut buf = [0u8; 4];
                for b in other.encode_utf8(&mut buf).bytes() {
                    s.push_str(&format!("\\x{b:02x}"));
                }
            }
        }
    }
    s.push_str(".slice");
    s
}

impl fmt::Display for PropertyValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?}")
    }
}

impl JobSandbox {
    /// The unit properties of this job, in a stable order.
    pub fn properties(&self) -> Result<Vec<(&'static str, PropertyValue)>, SandboxError> {
        use PropertyValue as V;
        check_command(&self.argv, &self.env)?;
        if self.uid == 0 || self.gid == 0 {
            return Err(SandboxError::Root);
        }
        let mut devices = vec![("/dev/nvidiactl".to_owned(), "rw".to_owned())];
        devices.extend(
            self.gpu_devices
                .iter()
                .map(|d| (d.clone(), "rw".to_owned())),
        );
        if let Some(uvm) = &self.uvm_device {
            devices.push((uvm.clone(), "rw".to_owned()));
        }
        let env: Vec<String> = self.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        Ok(vec![
            (
                "Description",
                V::Str(format!("sovereign-host job of {}", self.tenant)),
            ),
            ("Slice", V::Str(tenant_slice(&self.tenant))),
            (
                "ExecStart",
                V::Exec(vec![(self.argv[0].clone(), self.argv.clone(), false)]),
            ),
            ("Environment", V::Strings(env)),
            (
                "WorkingDirectory",
                V::Str(self.workdir.display().to_string()),
            ),
            ("User", V::Str(self.uid.to_string())),
            ("Group", V::Str(self.gid.to_string())),
            ("SupplementaryGroups", V::Strings(Vec::new())),
            ("DevicePolicy", V::Str("closed".into())),
            ("DeviceAllow", V::Devices(devices)),
            ("NoNewPrivileges", V::Bool(true)),
            ("CapabilityBoundingSet", V::U64(0)),
            (
                "SystemCallFilter",
                V::FlaggedList(true, vec!["@system-service".into()]),
            ),
            ("SystemCallErrorNumber", V::I32(1)), // EPERM
            (
                "RestrictAddressFamilies",
                V::FlaggedList(
                    true,
                    vec!["AF_UNIX".into(), "AF_INET".into(), "AF_INET6".into()],
                ),
            ),
            ("RestrictNamespaces", V::U64(0)),
            ("ProtectSystem", V::Str("strict".into())),
            (
                "ReadWritePaths",
                V::Strings(
                    self.writable
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect(),
                ),
            ),
            ("ProtectHome", V::Str("yes".into())),
            ("PrivateTmp", V::Bool(true)),
            ("MemoryMax", V::U64(self.limits.memory_bytes)),
            (
                "CPUQuotaPerSecUSec",
                V::U64(self.limits.cpu_quota_usec_per_sec),
            ),
            ("TasksMax", V::U64(self.limits.tasks)),
            ("RuntimeMaxUSec", V::U64(self.limits.runtime_usec)),
            ("KillMode", V::Str("control-group".into())),
            // A job that ignores SIGTERM is killed this long after a stop; until it is gone
            // its lease's GPUs are not handed out again.
            ("TimeoutStopUSec", V::U64(STOP_TIMEOUT_USEC)),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> JobSandbox {
        JobSandbox {
            tenant: "hyd-speech".into(),
            argv: vec!["/usr/bin/python3".into(), "train.py".into()],
            env: BTreeMap::from([("EPOCHS".into(), "40".into())]),
            workdir: "/var/lib/hostd/scratch/lease-1".into(),
            uid: 61001,
            gid: 61001,
            gpu_devices: vec!["/dev/nvidia3".into()],
            uvm_device: Some("/dev/nvidia-uvm".into()),
            limits: Limits {
                memory_bytes: 8 << 30,
                cpu_quota_usec_per_sec: 4_000_000,
                tasks: 512,
                runtime_usec: 7_200_000_000,
            },
            writable: vec!["/tmp".into()],
        }
    }

    /// Every property of the documented sandbox is set, with systemd's types.
    #[test]
    fn the_sandbox_sets_every_documented_property() {
        let props = job().properties().unwrap();
        let get = |n: &str| {
            props
                .iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| panic!("{n} not set"))
        };
        assert_eq!(get("DevicePolicy"), PropertyValue::Str("closed".into()));
        assert_eq!(
            get("DeviceAllow"),
            PropertyValue::Devices(vec![
                ("/dev/nvidiactl".into(), "rw".into()),
                ("/dev/nvidia3".into(), "rw".into()),
                ("/dev/nvidia-uvm".into(), "rw".into()),
            ])
        );
        assert_eq!(get("NoNewPrivileges"), PropertyValue::Bool(true));
        assert_eq!(get("CapabilityBoundingSet"), PropertyValue::U64(0));
        assert_eq!(get("SystemCallErrorNumber"), PropertyValue::I32(1));
        assert_eq!(get("RestrictNamespaces"), PropertyValue::U64(0));
        assert_eq!(get("ProtectSystem"), PropertyValue::Str("strict".into()));
        assert_eq!(get("PrivateTmp"), PropertyValue::Bool(true));
        assert_eq!(get("MemoryMax"), PropertyValue::U64(8 << 30));
        assert_eq!(get("TasksMax"), PropertyValue::U64(512));
        assert_eq!(get("RuntimeMaxUSec"), PropertyValue::U64(7_200_000_000));
        assert_eq!(get("KillMode"), PropertyValue::Str("control-group".into()));
        assert_eq!(get("TimeoutStopUSec"), PropertyValue::U64(10_000_000));
        assert_eq!(get("User"), PropertyValue::Str("61001".into()));
        assert_eq!(get("SupplementaryGroups"), PropertyValue::Strings(vec![]));
        assert_eq!(
            get("Slice"),
            PropertyValue::Str("sovereign-tenant-hyd\\x2dspeech.slice".into())
        );
    }

    #[test]
    fn bad_jobs_are_refused_clearly() {
        let mut j = job();
        j.argv.clear();
        assert_eq!(j.properties().unwrap_err(), SandboxError::EmptyArgv);
        let mut j = job();
        j.argv.push("a\0b".into());
        assert_eq!(
            j.properties().unwrap_err(),
            SandboxError::NulInArgv { index: 2 }
        );
        let mut j = job();
        j.env.insert("1BAD".into(), "x".into());
        assert!(matches!(
            j.properties().unwrap_err(),
            SandboxError::BadEnvName { .. }
        ));
        let mut j = job();
        j.env.insert("OK".into(), "a\0".into());
        assert!(matches!(
            j.properties().unwrap_err(),
            SandboxError::NulInEnv { .. }
        ));
        let mut j = job();
        j.uid = 0;
        assert_eq!(j.properties().unwrap_err(), SandboxError::Root);
    }

    #[test]
    fn tenant_slices_never_nest() {
        assert_eq!(tenant_slice("acme"), "sovereign-tenant-acme.slice");
        assert!(!tenant_slice("a-b").contains("a-b"));
    }

    /// docs/isolation.md's property table names exactly the sandbox's properties (the
    /// command, environment, working directory and description are the job's, not the
    /// sandbox's).
    #[test]
    fn the_isolation_page_documents_every_property() {
        let doc = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/isolation.md"),
        )
        .unwrap();
        let table = doc
            .split("## The unit properties, and why")
            .nth(1)
            .unwrap()
            .split("\n\n")
            .find(|block| block.trim_start().starts_with("| property"))
            .unwrap();
        let documented: std::collections::BTreeSet<String> = table
            .lines()
            .skip(2)
            .filter_map(|row| row.split('|').nth(1))
            .flat_map(|cell| cell.split('`').skip(1).step_by(2).map(str::to_owned))
            .collect();
        let job_own = [
            "Description",
            "ExecStart",
            "Environment",
            "WorkingDirectory",
        ];
        let set: std::collections::BTreeSet<String> = job()
            .properties()
            .unwrap()
            .into_iter()
            .map(|(k, _)| k.to_owned())
            .filter(|k| !job_own.contains(&k.as_str()))
            .collect();
        assert_eq!(documented, set);
    }
}
