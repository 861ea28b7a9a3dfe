//! Leases: a tenant's exclusive hold on whole GPUs of one model, as the API shows them and
//! the body that asks for one.

use serde::{Deserialize, Serialize};

/// Where a lease is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LeaseState {
    /// Metering and holding its GPUs.
    Active,
    /// Ended: its GPUs are free and its last records written.
    Ended,
}

impl LeaseState {
    /// The word the API uses.
    pub fn as_str(self) -> &'static str {
        match self {
            LeaseState::Active => "active",
            LeaseState::Ended => "ended",
        }
    }
}

/// A GPU held by a lease, and the facts metering needs about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeasedGpu {
    /// The GPU's UUID (`GPU-…`), as in its usage records.
    pub uuid: String,
    /// Its short model (e.g. `H100`), as the inventory derives it.
    pub model: String,
    /// Its NVML index on the node when the lease was placed.
    pub index: u32,
    /// Set when the GPU failed during the lease (lost, erroring, nonsense counters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<String>,
}

/// A lease as the API shows it (`GET /v1/leases`, and the answer to `POST /v1/leases`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lease {
    /// The lease's id, chosen by the node; usage records name it in `lease`.
    pub id: String,
    /// Id of the tenant holding it.
    pub tenant: String,
    /// Short model of its GPUs (e.g. `H100`); all are of this model.
    pub model: String,
    /// The GPUs it holds exclusively, by NVML index.
    pub gpus: Vec<LeasedGpu>,
    /// Classification of the data the workload processes, as requested; the residency
    /// policy decided on it.
    pub classification: String,
    /// Name of the dataset, when the request gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset: Option<String>,
    /// Whether it is still metering.
    pub state: LeaseState,
    /// Clock time (ms) the lease started and ended.
    pub started_ms: i64,
    /// Clock time the lease ended, milliseconds since the Unix epoch; `None` while active.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_ms: Option<i64>,
    /// `started_ms` as RFC 3339 UTC with milliseconds.
    pub started: String,
    /// `ended_ms` as RFC 3339 UTC with milliseconds; `None` while active.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<String>,
    /// The rate billed, paise per GPU-hour, fixed when the lease was placed from the node's
    /// configured rate for the model.
    pub rate_paise_per_hour: u64,
    /// Digest (`sha256:<hex>`) of the residency policy file that allowed the lease; copied
    /// into every usage record.
    pub policy_digest: String,
    /// The policy decision's reasons, as sentences.
    #[serde(default)]
    pub decision: Vec<String>,
}

/// `POST /v1/leases` body.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NewLease {
    /// Id of the tenant to lease for; it must exist and be active.
    pub tenant: String,
    /// Number of whole GPUs wanted (1 to 64), all of `model`.
    pub gpus: u32,
    /// Short GPU model wanted (e.g. `H100`, compared case-insensitively); the node must have
    /// a rate configured for it.
    pub model: String,
    /// Classification of the data the workload will process (policy input).
    #[serde(default = "default_classification")]
    pub classification: String,
    /// Name of the dataset, for the policy's reasons and the audit trail.
    #[serde(default)]
    pub dataset: Option<String>,
}

fn default_classification() -> String {
    "public".into()
}
