//! A tenant's jobs inside the booted image, under its real systemd: the limits that the
//! e2e tests' container cannot enforce (memory and tasks need cgroup v2 controllers it lacks)
//! and egress decided by the node's residency policy.

use crate::harness::{ok, Fixture, ABROAD, MIRROR, MIRROR_GREETING};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The image's dynamic loader: the tenant's program is a data file in its scratch (uploads
/// are never executable), run the way an interpreter runs a script.
const LOADER: &str = "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2";

/// One finished job: its record as `sovctl job show` gives it, and its output.
pub(crate) struct Finished {
    pub(crate) job: Value,
    pub(crate) output: String,
}

impl Finished {
    fn field(&self, name: &str) -> String {
        match &self.job[name] {
            Value::String(s) => s.clone(),
            v => v.to_string(),
        }
    }
}

/// Starts a lease (see [`Fixture::lease`]) and uploads the probe; returns the lease id.
pub(crate) fn lease_with_probe(fx: &Fixture) -> String {
    let id = fx.lease();
    let probe = build_probe(&fx.work);
    ok(
        fx.sovctl(
            "hyd-speech",
            &["cp", probe.to_str().expect("utf-8"), &format!("{id}:probe")],
        ),
        "sovctl cp probe",
    );
    id
}

/// Runs `probe ARGS` in the lease with `limits` (sovctl's flags) and waits for it to end.
pub(crate) fn run_probe(fx: &Fixture, lease: &str, limits: &[&str], args: &[&str]) -> Finished {
    let mut argv = vec!["--json", "job", "run", "--detach", "--lease", lease];
    argv.extend_from_slice(limits);
    // ./probe: the loader looks a bare name up as a library, not in the working directory.
    argv.extend_from_slice(&["--", LOADER, "./probe"]);
    argv.extend_from_slice(args);
    let started: Value = serde_json::from_str(ok(fx.sovctl("hyd-speech", &argv), "job run").trim())
        .expect("job JSON");
    let id = started["id"].as_str().expect("job id").to_owned();
    let deadline = Instant::now() + Duration::from_secs(120);
    let job = loop {
        let shown = ok(
            fx.sovctl(
                "hyd-speech",
                &["--json", "job", "show", "--lease", lease, &id],
            ),
            "job show",
        );
        let job: Value = serde_json::from_str(shown.trim()).expect("job JSON");
        if !matches!(job["state"].as_str(), Some("starting" | "running")) {
            break job;
        }
        assert!(
            Instant::now() < deadline,
            "job {id} ({args:?}) still running after 120 s: {job}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let output = ok(
        fx.sovctl("hyd-speech", &["job", "logs", "--lease", lease, &id]),
        "job logs",
    );
    Finished { job, output }
}

/// The checks: a job past its memory limit is killed and its result says so; a job past
/// its task limit is refused the extra processes; a job reaches the in-country mirror and
/// not the model hub abroad (where qemu would leave a file for any connection). The jobs'
/// output reaches the tenant as a download the policy allows (the host is the dev user's
/// workstation, in India).
pub(crate) fn jobs_are_confined(fx: &Fixture) {
    let lease = lease_with_probe(fx);

    let mem = run_probe(fx, &lease, &["--memory", "64M"], &["mem", "512"]);
    assert!(
        mem.field("result").contains("oom") && !mem.output.contains("touched all"),
        "a job past MemoryMax must be killed, and say why: {}\n{}",
        mem.job,
        mem.output
    );

    let tasks = run_probe(fx, &lease, &["--tasks", "8"], &["tasks", "64"]);
    assert!(
        tasks.field("exit_code") == "3" && tasks.output.contains("refused"),
        "a job past TasksMax must be refused more processes: {}\n{}",
        tasks.job,
        tasks.output
    );
    let few = run_probe(fx, &lease, &["--tasks", "8"], &["tasks", "4"]);
    assert!(
        few.output.contains("started all 4"),
        "a job within TasksMax must start its processes: {}\n{}",
        few.job,
        few.output
    );

    let (ip, port) = MIRROR;
    let mirror = run_probe(fx, &lease, &[], &["connect", ip, &port.to_string()]);
    assert!(
        mirror.output.contains(MIRROR_GREETING),
        "a job must reach the in-country mirror its policy allows: {}\n{}",
        mirror.job,
        mirror.output
    );

    let (ip, port) = ABROAD;
    // A file left by an earlier run of the fixture says nothing about this one.
    let _ = std::fs::remove_file(fx.abroad_marker());
    let denied = run_probe(fx, &lease, &[], &["connect", ip, &port.to_string()]);
    assert!(
        denied.field("exit_code") == "4" && !denied.output.contains("connected"),
        "a job must not reach the model hub abroad: {}\n{}",
        denied.job,
        denied.output
    );
    assert!(
        !fx.abroad_marker().exists(),
        "the host abroad saw a connection from a job"
    );
    ok(
        fx.sovctl("hyd-speech", &["lease", "end", &lease]),
        "lease end",
    );
}

/// The probe, built by the host's gcc against the same Debian glibc the image carries.
fn build_probe(work: &Path) -> PathBuf {
    let out = work.join("probe");
    ok(
        Command::new("gcc")
            .args(["-O2", "-o"])
            .arg(&out)
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vm/probe.c"))
            .output()
            .expect("gcc"),
        "gcc probe.c",
    );
    out
}
