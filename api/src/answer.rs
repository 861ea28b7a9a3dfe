//! Answers of the API that are not a resource of their own, and the one error shape.

use crate::lease::Lease;
use crate::tenant::Tenant;
use auditor::record::UsageRecord;
use serde::{Deserialize, Serialize};

/// Every error answer (4xx and 5xx) is this JSON object.
///
/// `error` is one sentence for people. A 403 from the residency policy adds the policy's
/// digest and its reasons; a 500 adds the request id under which the node logged what went
/// wrong (the answer itself never carries internal detail such as paths).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What went wrong, for people.
    pub error: String,
    /// Digest of the residency policy that denied the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_digest: Option<String>,
    /// The policy decision's reasons, one sentence each.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasons: Option<Vec<String>>,
    /// The id under which the node logged an internal error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

impl ErrorBody {
    /// An error with only a message.
    pub fn new(error: impl Into<String>) -> ErrorBody {
        ErrorBody {
            error: error.into(),
            policy_digest: None,
            reasons: None,
            request_id: None,
        }
    }
}

/// `GET /v1/health`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    /// `ok`, or `degraded` when [`Health::problems`] lists something the operator must fix
    /// (the node still serves what it safely can).
    pub status: String,
    /// What is wrong, one sentence each; absent when nothing is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
    /// The node's name.
    pub node: String,
    /// The node's jurisdiction (ISO 3166).
    pub jurisdiction: String,
    /// hostd's version.
    pub version: String,
    /// Number of GPUs in the inventory; `null` when it cannot be read (the driver does not
    /// answer, and [`Health::problems`] says so), which is not a node without GPUs.
    pub gpus: Option<usize>,
    /// Number of records in the signed ledger.
    pub ledger_size: u64,
    /// The caller's SPIFFE identity, as the node authenticated it.
    pub you: String,
}

/// `GET /v1/tenants`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantList {
    /// The tenants the caller may see.
    pub tenants: Vec<Tenant>,
}

/// `GET /v1/leases`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaseList {
    /// The leases the caller may see, in id order (one page: see `LeasesQuery`).
    pub leases: Vec<Lease>,
    /// The `after` of the next page (this page's last lease); absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_after: Option<String>,
}

/// `POST /v1/leases/{id}/end`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaseEnded {
    /// The lease, now ended.
    pub lease: Lease,
    /// Ids of the final usage records written for it.
    pub records: Vec<u64>,
}

/// `GET /v1/usage`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageList {
    /// The usage records the caller may see, in ledger order.
    pub records: Vec<UsageRecord>,
    /// The `after` of the next page (the last record id this page scanned); absent when the
    /// page reached the end of the ledger.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_after: Option<u64>,
}

/// `GET /v1/usage/{id}/receipt`: a record and its C2SP tlog-proof, checkable offline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageReceipt {
    /// The record's leaf index.
    pub id: u64,
    /// The record's exact leaf bytes (JSON, hence UTF-8).
    pub record: String,
    /// The tlog-proof receipt.
    pub receipt: String,
}

/// `POST /v1/attestation` body: the verifier's challenge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttestationRequest {
    /// 32 bytes as 64 hex digits.
    pub nonce: String,
}

/// `POST /v1/attestation`: fresh signed evidence over the caller's nonce.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvidenceAnswer {
    /// The signed evidence document (canonical JSON).
    pub evidence: String,
    /// What the node could not measure, and why.
    pub measurement_notes: Vec<String>,
}
