//! Jobs: a tenant's processes running on its lease, as the API shows them and the body that
//! starts one.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `POST /v1/leases/{id}/jobs` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct NewJob {
    /// The program and its arguments; `argv[0]` is an absolute path inside the node's image
    /// or the lease's scratch.
    pub argv: Vec<String>,
    /// Environment variables (names `[A-Za-z_][A-Za-z0-9_]*`). Values are passed to the job
    /// and never stored or shown again, so they may carry tokens.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Working directory, relative to the lease's scratch (default: the scratch itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    /// Limits; the node's defaults fill what is left out and its maxima bound what is asked.
    #[serde(default)]
    pub limits: JobLimits,
    /// A TCP port the job listens on, to be published on the node (a service).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publish: Option<u16>,
}

/// What a job may use. Every field is optional in a request; answers carry all of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct JobLimits {
    /// Memory, bytes (`MemoryMax`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    /// CPU, in thousandths of a core (1000 = one core; `CPUQuota`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_millis: Option<u64>,
    /// Tasks (processes and threads; `TasksMax`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<u64>,
    /// Wall-clock runtime, seconds (`RuntimeMaxSec`); the job is stopped after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_runtime_secs: Option<u64>,
}

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Accepted by systemd, not yet seen running.
    Starting,
    /// Its main process runs.
    Running,
    /// Its main process exited by itself (see `exit_code`).
    Exited,
    /// Killed by a signal (see `signal`), by a limit, or stopped.
    Killed,
    /// systemd could not run it (e.g. `argv[0]` missing) or a limit ended it (see `result`).
    Failed,
    /// Its unit vanished while hostd was not watching; how it ended is unknown.
    Lost,
}

impl JobState {
    /// The word the API uses.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Starting => "starting",
            JobState::Running => "running",
            JobState::Exited => "exited",
            JobState::Killed => "killed",
            JobState::Failed => "failed",
            JobState::Lost => "lost",
        }
    }

    /// Whether the job has ended (nothing of it runs any more).
    pub fn is_final(self) -> bool {
        !matches!(self, JobState::Starting | JobState::Running)
    }
}

/// A job as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    /// The job's id (unique on the node).
    pub id: String,
    /// The lease it runs on.
    pub lease: String,
    /// The tenant holding that lease.
    pub tenant: String,
    /// The command as asked (environment values are never shown).
    pub argv: Vec<String>,
    /// Names of the environment variables it was given.
    pub env_names: Vec<String>,
    /// Its state.
    pub state: JobState,
    /// systemd's result word when it ended (`success`, `exit-code`, `signal`, `timeout`,
    /// `oom-kill`, `resources`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// Exit status when it exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Signal number when it was killed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// Clock time it was started, milliseconds since the Unix epoch.
    pub started_ms: i64,
    /// Clock time it was seen to end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_ms: Option<i64>,
    /// CPU time used, nanoseconds.
    pub cpu_ns: u64,
    /// Highest memory use seen, bytes (sampled: systemd 252 has no peak counter).
    pub memory_peak_bytes: u64,
    /// Bytes the job received over the network.
    pub bytes_in: u64,
    /// Bytes the job sent over the network.
    pub bytes_out: u64,
    /// The limits it runs under (all filled in).
    pub limits: JobLimits,
    /// The node's port that forwards to the job's `publish` port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub published_port: Option<u16>,
}

/// `GET /v1/leases/{id}/jobs`: one page (see [`crate::query::JobsQuery`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobList {
    /// Jobs of the lease, oldest first.
    pub jobs: Vec<Job>,
    /// The `after` of the next page (this page's last job); absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_after: Option<String>,
}
