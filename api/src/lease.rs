//! Leases: a tenant's exclusive hold on whole GPUs of one model, as the API shows them and
//! the body that asks for one.

use serde::{Deserialize, Serialize};

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
    pub uuid: String,
    pub model: String,
    pub index: u32,
    /// Set when the GPU failed during the lease (lost, erroring, nonsense counters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lease {
    pub id: String,
    pub tenant: String,
    pub model: String,
    pub gpus: Vec<LeasedGpu>,
    pub classification: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset: Option<String>,
    pub state: LeaseState,
    /// Clock time (ms) the lease started and ended.
    pub started_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_ms: Option<i64>,
    pub started: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<String>,
    pub rate_paise_per_hour: u64,
    pub policy_digest: String,
    /// The policy decision's reasons, as sentences.
    #[serde(default)]
    pub decision: Vec<String>,
}

/// `POST /v1/leases` body.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NewLease {
    pub tenant: String,
    pub gpus: u32,
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
