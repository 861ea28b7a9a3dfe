//! What `hostd` asks: plain structs with public fields and serde, easy to build from code or
//! read from a JSON file (`sovctl policy explain --request REQ.json`).
//!
//! Attributes arrive as strings (jurisdictions, classifications, versions) on purpose: a bad
//! value from a node is a *denial with a reason*, never a parse failure that hides the request.

use crate::model::{Action, AttestationStatus};
use serde::{Deserialize, Serialize};
use std::net::IpAddr;

/// A dataset, an artifact, or the data a workload sends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Data {
    /// Dataset/artifact id (or a workload id for egress).
    pub id: String,
    /// Classification name as the policy defines it.
    pub classification: String,
    /// Owner tenant, if known (recorded, not used for residency).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Origin jurisdiction, if known (recorded, not used for residency).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
}

impl Data {
    /// Data with an id and a classification.
    pub fn new(id: impl Into<String>, classification: impl Into<String>) -> Self {
        Data {
            id: id.into(),
            classification: classification.into(),
            owner: None,
            origin: None,
        }
    }
}

/// A node as attested.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Node {
    /// Node id.
    pub id: String,
    /// Attested jurisdiction (`IN-TS`).
    pub jurisdiction: String,
    /// Attested facility.
    #[serde(default)]
    pub facility: String,
    /// Attestation status.
    pub attestation: AttestationStatus,
    /// Age of the attestation evidence in seconds; `u64::MAX` when there is none (reasons
    /// then say "unknown (no evidence)").
    pub evidence_age_s: u64,
    /// Confidential-computing mode is on.
    #[serde(default)]
    pub cc_mode: bool,
    /// Version of the node image; empty when none is attested (never satisfies
    /// `min_image_version`).
    #[serde(default)]
    pub image_version: String,
}

/// Where an egress goes: a declared endpoint, an address, or a host name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Destination {
    /// A declared endpoint by id.
    Endpoint(String),
    /// An IP address (what the network filter sees).
    Address(IpAddr),
    /// A host name (what a DNS-aware proxy sees).
    Host(String),
}

/// An operator principal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Operator {
    /// Operator id.
    pub id: String,
    /// Nationality (jurisdiction code).
    pub nationality: String,
    /// Clearance (a classification name).
    pub clearance: String,
}

/// A question to the policy. JSON form: `{"action": "place", "tenant": ..., ...}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Request {
    /// Run a workload of `tenant` using `dataset` on `node`.
    Place {
        /// Tenant running the workload.
        tenant: String,
        /// Dataset used.
        dataset: Data,
        /// Node it would run on.
        node: Node,
    },
    /// Persist `artifact` on `node`.
    Store {
        /// Tenant storing.
        tenant: String,
        /// Artifact stored.
        artifact: Data,
        /// Node (storage location).
        node: Node,
    },
    /// A workload of `tenant` sends `data` to `destination`.
    Egress {
        /// Tenant of the workload.
        tenant: String,
        /// Data sent (its classification is what matters).
        data: Data,
        /// Destination.
        destination: Destination,
    },
    /// `operator` reads or manages `resource` of `tenant`.
    OperatorAccess {
        /// Tenant whose resource is accessed.
        tenant: String,
        /// Resource accessed.
        resource: Data,
        /// Operator.
        operator: Operator,
    },
}

impl Request {
    /// The action asked about.
    pub fn action(&self) -> Action {
        match self {
            Request::Place { .. } => Action::Place,
            Request::Store { .. } => Action::Store,
            Request::Egress { .. } => Action::Egress,
            Request::OperatorAccess { .. } => Action::OperatorAccess,
        }
    }

    /// The tenant concerned.
    pub fn tenant(&self) -> &str {
        match self {
            Request::Place { tenant, .. }
            | Request::Store { tenant, .. }
            | Request::Egress { tenant, .. }
            | Request::OperatorAccess { tenant, .. } => tenant,
        }
    }

    /// The data concerned.
    pub fn data(&self) -> &Data {
        match self {
            Request::Place { dataset, .. } => dataset,
            Request::Store { artifact, .. } => artifact,
            Request::Egress { data, .. } => data,
            Request::OperatorAccess { resource, .. } => resource,
        }
    }
}
