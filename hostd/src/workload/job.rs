//! One job: what is stored of it, how its request becomes a sandbox, and how systemd's view of
//! its unit becomes the state the API shows. Pure logic; the runner does the I/O.

use super::sandbox::Limits;
use super::units::UnitStatus;
use crate::config::WorkloadConfig;
use hostd_api::job::{Job, JobLimits, JobState, NewJob};
use serde::{Deserialize, Serialize};

/// What hostd keeps of a job (the `jobs` tree, key `<lease>/<job>`). Environment values are
/// not kept: they may be secrets, and nothing needs them after the start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredJob {
    /// The job as the API shows it.
    pub job: Job,
    /// Its systemd unit.
    pub unit: String,
    /// The uid it runs as (its lease's).
    pub uid: u32,
    /// The device nodes it may open, as they were granted (re-applied after a reload).
    pub devices: Vec<(String, String)>,
    /// hostd asked systemd to stop it (lease ended, tenant asked, or shutdown).
    #[serde(default)]
    pub stop_requested: bool,
    /// The job's own port behind its published node port (`job.published_port`).
    #[serde(default)]
    pub published_target: Option<u16>,
    /// Why hostd stopped it, when hostd did on its own (e.g. `scratch-quota`): shown as its
    /// `result` once it has ended.
    #[serde(default)]
    pub stop_reason: Option<String>,
}

impl StoredJob {
    /// The store key.
    pub fn key(&self) -> String {
        job_key(&self.job.lease, &self.job.id)
    }
}

/// `<lease>/<job>`: a lease's jobs are one prefix scan.
pub fn job_key(lease: &str, job: &str) -> String {
    format!("{lease}/{job}")
}

/// The unit name of a job; unique per job, since systemd keeps a failed unit's name loaded.
pub fn unit_name(job: &str) -> String {
    format!("sovereign-job-{job}.service")
}

/// The glob matching every job unit (re-adoption).
pub const UNIT_PATTERN: &str = "sovereign-job-*.service";

/// Why a job request is refused (answered 400 with this text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    #[error("argv must not be empty")]
    EmptyArgv,
    #[error("argv[0] must be an absolute path, not '{0}'")]
    RelativeProgram(String),
    #[error("{what} is {asked}, more than this node allows ({max})")]
    OverMax {
        what: &'static str,
        asked: u64,
        max: u64,
    },
    #[error("{what} must be at least {min}")]
    UnderMin { what: &'static str, min: u64 },
    #[error("the request is too large: {what} ({size} bytes, at most {max})")]
    TooLarge {
        what: &'static str,
        size: usize,
        max: usize,
    },
    #[error("workdir must be a relative path inside the lease's scratch, without '..'")]
    BadWorkdir,
    #[error("publish must be the job's TCP port, 1-65535")]
    BadPort,
}

/// Most bytes of argv plus environment a job may carry (Linux's own limit is larger, but a
/// job's command line is not a way to upload data).
pub const MAX_COMMAND_BYTES: usize = 128 * 1024;

/// Checks the parts of a request the sandbox does not (it checks NULs and variable names),
/// and fills in the limits.
pub fn check_request(req: &NewJob, cfg: &WorkloadConfig) -> Result<JobLimits, RequestError> {
    let first = req.argv.first().ok_or(RequestError::EmptyArgv)?;
    if !first.starts_with('/') {
        return Err(RequestError::RelativeProgram(first.clone()));
    }
    let size: usize = req.argv.iter().map(|a| a.len() + 1).sum::<usize>()
        + req
            .env
            .iter()
            .map(|(k, v)| k.len() + v.len() + 2)
            .sum::<usize>();
    if size > MAX_COMMAND_BYTES {
        return Err(RequestError::TooLarge {
            what: "argv and env",
            size,
            max: MAX_COMMAND_BYTES,
        });
    }
    if let Some(w) = &req.workdir {
        relative_inside(w).ok_or(RequestError::BadWorkdir)?;
    }
    if req.publish == Some(0) {
        return Err(RequestError::BadPort);
    }
    resolve_limits(&req.limits, cfg)
}

/// `w` as a relative path of plain components, or `None` (absolute, `..`, empty).
pub fn relative_inside(w: &str) -> Option<std::path::PathBuf> {
    use std::path::Component;
    let p = std::path::Path::new(w);
    let plain = p.components().all(|c| matches!(c, Component::Normal(_)));
    (plain && !w.is_empty() && !w.contains('\0')).then(|| p.to_owned())
}

fn bounded(
    what: &'static str,
    asked: Option<u64>,
    default: u64,
    min: u64,
    max: u64,
) -> Result<u64, RequestError> {
    let v = asked.unwrap_or(default);
    if v > max {
        return Err(RequestError::OverMax {
            what,
            asked: v,
            max,
        });
    }
    if v < min {
        return Err(RequestError::UnderMin { what, min });
    }
    Ok(v)
}

fn resolve_limits(l: &JobLimits, cfg: &WorkloadConfig) -> Result<JobLimits, RequestError> {
    Ok(JobLimits {
        memory_bytes: Some(bounded(
            "memory_bytes",
            l.memory_bytes,
            cfg.default_memory_bytes,
            16 << 20,
            cfg.max_memory_bytes,
        )?),
        cpu_millis: Some(bounded(
            "cpu_millis",
            l.cpu_millis,
            cfg.default_cpu_millis,
            10,
            cfg.max_cpu_millis,
        )?),
        tasks: Some(bounded(
            "tasks",
            l.tasks,
            cfg.default_tasks,
            1,
            cfg.max_tasks,
        )?),
        max_runtime_secs: Some(bounded(
            "max_runtime_secs",
            l.max_runtime_secs,
            cfg.default_max_runtime_secs,
            1,
            cfg.max_runtime_secs,
        )?),
    })
}

/// The sandbox's limits from resolved API limits.
pub fn sandbox_limits(l: &JobLimits) -> Limits {
    Limits {
        memory_bytes: l.memory_bytes.unwrap_or(0),
        cpu_quota_usec_per_sec: l.cpu_millis.unwrap_or(0).saturating_mul(1000),
        tasks: l.tasks.unwrap_or(0),
        runtime_usec: l.max_runtime_secs.unwrap_or(0).saturating_mul(1_000_000),
    }
}

/// `ExecMainCode` values (`CLD_*` from `<signal.h>`).
const CLD_EXITED: i32 = 1;
const CLD_KILLED: i32 = 2;
const CLD_DUMPED: i32 = 3;

/// Folds what systemd says of the unit into the job: counters, and the end when it ended.
/// Counters only grow (a missing reading keeps the last one); the memory peak is the highest
/// sample, as systemd 252 keeps no peak.
pub fn apply_status(job: &mut Job, s: &UnitStatus, now_ms: i64) {
    job.cpu_ns = job.cpu_ns.max(s.cpu_ns.unwrap_or(0));
    job.memory_peak_bytes = job.memory_peak_bytes.max(s.memory_bytes.unwrap_or(0));
    job.bytes_in = job.bytes_in.max(s.ip_in_bytes.unwrap_or(0));
    job.bytes_out = job.bytes_out.max(s.ip_out_bytes.unwrap_or(0));
    if job.state.is_final() {
        return;
    }
    // A unit read before systemd ran its start job is `inactive` too, and must not end a job
    // that has not begun (a job of a few milliseconds was recorded `failed` so).
    let not_begun = job.state == JobState::Starting && s.not_started();
    if !s.has_ended() || not_begun {
        if s.active_state == "active" || s.active_state == "deactivating" {
            job.state = JobState::Running;
        }
        return;
    }
    job.ended_ms = Some(now_ms);
    job.result = Some(s.result.clone());
    match s.exec_main_code {
        CLD_EXITED => {
            job.exit_code = Some(s.exec_main_status);
            job.state = if s.result == "success" || s.result == "exit-code" {
                JobState::Exited
            } else {
                JobState::Failed
            };
        }
        CLD_KILLED | CLD_DUMPED => {
            job.signal = Some(s.exec_main_status);
            job.state = JobState::Killed;
        }
        _ => job.state = JobState::Failed,
    }
}

/// The job's unit vanished while nobody held it: how it ended is unknown.
pub fn mark_lost(job: &mut Job, now_ms: i64) {
    if !job.state.is_final() {
        job.state = JobState::Lost;
        job.ended_ms = Some(now_ms);
        job.result = Some("unit-gone".into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> WorkloadConfig {
        WorkloadConfig::default()
    }

    fn req(argv: &[&str]) -> NewJob {
        NewJob {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn requests_are_checked_and_limits_filled() {
        let l = check_request(&req(&["/bin/true"]), &cfg()).unwrap();
        assert_eq!(l.memory_bytes, Some(cfg().default_memory_bytes));
        assert_eq!(l.max_runtime_secs, Some(cfg().default_max_runtime_secs));
        assert_eq!(
            check_request(&req(&[]), &cfg()),
            Err(RequestError::EmptyArgv)
        );
        assert!(matches!(
            check_request(&req(&["true"]), &cfg()),
            Err(RequestError::RelativeProgram(_))
        ));
        let mut big = req(&["/bin/true"]);
        big.env.insert("X".into(), "y".repeat(MAX_COMMAND_BYTES));
        assert!(matches!(
            check_request(&big, &cfg()),
            Err(RequestError::TooLarge { .. })
        ));
        let mut over = req(&["/bin/true"]);
        over.limits.memory_bytes = Some(u64::MAX);
        assert!(matches!(
            check_request(&over, &cfg()),
            Err(RequestError::OverMax {
                what: "memory_bytes",
                ..
            })
        ));
        for w in ["../x", "/etc", "a/../../b", ""] {
            let mut r = req(&["/bin/true"]);
            r.workdir = Some(w.into());
            assert_eq!(
                check_request(&r, &cfg()),
                Err(RequestError::BadWorkdir),
                "{w}"
            );
        }
    }

    fn job() -> Job {
        Job {
            id: "j1".into(),
            lease: "l1".into(),
            tenant: "t".into(),
            argv: vec!["/bin/true".into()],
            env_names: vec![],
            state: JobState::Starting,
            result: None,
            exit_code: None,
            signal: None,
            started_ms: 0,
            ended_ms: None,
            cpu_ns: 0,
            memory_peak_bytes: 0,
            bytes_in: 0,
            bytes_out: 0,
            limits: JobLimits::default(),
            published_port: None,
        }
    }

    fn status(state: &str, result: &str, code: i32, st: i32) -> UnitStatus {
        UnitStatus {
            active_state: state.into(),
            result: result.into(),
            exec_main_code: code,
            exec_main_status: st,
            cpu_ns: Some(5),
            memory_bytes: Some(100),
            ..Default::default()
        }
    }

    #[test]
    fn systemds_view_becomes_the_jobs_state() {
        let mut j = job();
        apply_status(&mut j, &status("active", "success", 0, 0), 1);
        assert_eq!(j.state, JobState::Running);
        apply_status(&mut j, &status("failed", "exit-code", 1, 3), 2);
        assert_eq!(
            (j.state, j.exit_code, j.ended_ms),
            (JobState::Exited, Some(3), Some(2))
        );
        // Final is final: a later reading does not move it.
        apply_status(&mut j, &status("active", "success", 0, 0), 3);
        assert_eq!(j.state, JobState::Exited);

        let mut k = job();
        apply_status(&mut k, &status("inactive", "success", 2, 15), 4);
        assert_eq!((k.state, k.signal), (JobState::Killed, Some(15)));

        let mut t = job();
        apply_status(&mut t, &status("failed", "timeout", 2, 15), 4);
        assert_eq!(
            (t.state, t.result.as_deref()),
            (JobState::Killed, Some("timeout"))
        );

        let mut o = job();
        apply_status(&mut o, &status("failed", "oom-kill", 1, 0), 4);
        assert_eq!(o.state, JobState::Failed);
    }

    /// A unit read before systemd ran its start job (inactive, nothing exited) leaves the job
    /// starting; read so after the job ran, the job is not ended by it either.
    #[test]
    fn a_unit_not_yet_started_ends_nothing() {
        let mut j = job();
        assert_eq!(j.state, JobState::Starting);
        apply_status(&mut j, &status("inactive", "success", 0, 0), 1);
        assert_eq!((j.state, j.ended_ms), (JobState::Starting, None));
        apply_status(&mut j, &status("inactive", "success", 1, 0), 2);
        assert_eq!((j.state, j.exit_code), (JobState::Exited, Some(0)));
        // Once seen running, an inactive unit that reports no exit has ended all the same.
        let mut r = job();
        apply_status(&mut r, &status("active", "success", 0, 0), 1);
        apply_status(&mut r, &status("inactive", "success", 0, 0), 2);
        assert_eq!(r.state, JobState::Failed);
    }

    #[test]
    fn counters_only_grow_and_peak_is_the_highest_sample() {
        let mut j = job();
        let mut s = status("active", "success", 0, 0);
        s.memory_bytes = Some(500);
        apply_status(&mut j, &s, 1);
        s.memory_bytes = Some(200);
        s.cpu_ns = None;
        apply_status(&mut j, &s, 2);
        assert_eq!((j.memory_peak_bytes, j.cpu_ns), (500, 5));
    }

    #[test]
    fn a_vanished_unit_is_lost_unless_already_ended() {
        let mut j = job();
        mark_lost(&mut j, 9);
        assert_eq!(j.state, JobState::Lost);
        let mut e = job();
        e.state = JobState::Exited;
        mark_lost(&mut e, 9);
        assert_eq!(e.state, JobState::Exited);
    }
}
