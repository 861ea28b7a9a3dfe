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
    /// Age of the attestation evidence in seconds; `None` when there is none, which never
    /// satisfies `max_evidence_age` (reasons then say "unknown (no evidence)").
    ///
    /// JSON: a number, or absent/`null` for none. The sentinel `18446744073709551615`
    /// (`u64::MAX`) that earlier request files used for "no evidence" still reads as `None`.
    #[serde(
        default,
        deserialize_with = "legacy::evidence_age",
        skip_serializing_if = "Option::is_none"
    )]
    pub evidence_age_s: Option<u64>,
    /// Confidential-computing mode is on.
    #[serde(default)]
    pub cc_mode: bool,
    /// Version of the node image as attested; `None` when no attestation vouches for one,
    /// which never satisfies `min_image_version` (reasons then say "unknown (none
    /// attested)"). A version that does not parse (`Some("")` included) never satisfies it
    /// either, and is quoted in the reason.
    ///
    /// JSON: a string, or absent/`null` for none. The empty string that earlier request
    /// files used for "none attested" still reads as `None`.
    #[serde(
        default,
        deserialize_with = "legacy::image_version",
        skip_serializing_if = "Option::is_none"
    )]
    pub image_version: Option<String>,
}

/// The wire form of [`Node`]'s optional facts: before they were `Option`s, "none" was spelled
/// with a sentinel (`u64::MAX` seconds, an empty version). Request files written then must keep
/// their meaning, so the sentinels still deserialize to `None`; nothing writes them any more.
mod legacy {
    use serde::{Deserialize, Deserializer};

    pub(super) fn evidence_age<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.filter(|&age| age != u64::MAX))
    }

    pub(super) fn image_version<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<String>, D::Error> {
        Ok(Option::<String>::deserialize(d)?.filter(|v| !v.is_empty()))
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn node(facts: &str) -> Node {
        let json =
            format!(r#"{{"id": "n", "jurisdiction": "IN-TS", "attestation": "affirming"{facts}}}"#);
        serde_json::from_str(&json).expect("node parses")
    }

    /// Absent, `null` and the old sentinels all mean "none"; real values are kept.
    #[test]
    fn missing_facts_read_as_none_in_every_spelling() {
        for facts in [
            "",
            r#", "evidence_age_s": null, "image_version": null"#,
            r#", "evidence_age_s": 18446744073709551615, "image_version": """#,
        ] {
            let n = node(facts);
            assert_eq!((n.evidence_age_s, n.image_version), (None, None), "{facts}");
        }
        let n = node(r#", "evidence_age_s": 0, "image_version": "1.4.2""#);
        assert_eq!(n.evidence_age_s, Some(0));
        assert_eq!(n.image_version.as_deref(), Some("1.4.2"));
    }

    /// What is written reads back the same, and "none" is written by leaving the field out.
    #[test]
    fn nodes_round_trip_through_json() {
        for n in [
            node(""),
            node(r#", "evidence_age_s": 60, "image_version": "2.0""#),
        ] {
            let json = serde_json::to_string(&n).expect("serializes");
            assert_eq!(
                json.contains("evidence_age_s"),
                n.evidence_age_s.is_some(),
                "{json}"
            );
            assert_eq!(serde_json::from_str::<Node>(&json).expect("parses"), n);
        }
    }
}
