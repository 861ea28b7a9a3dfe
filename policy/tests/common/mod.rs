//! Builders shared by the integration tests.
#![allow(dead_code)]

use policy::{AttestationStatus, Data, Destination, Node, Operator, Policy, Request};

pub(crate) const SEED: &str = include_str!("../../examples/seed-hyderabad.toml");
pub(crate) const INDIA: &str = include_str!("../../examples/india-deployment.toml");

pub(crate) fn load(text: &str) -> Policy {
    match Policy::from_toml_str(text) {
        Ok(p) => p,
        Err(errs) => panic!(
            "policy does not load:\n{}",
            errs.iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("\n")
        ),
    }
}

/// A node that satisfies every requirement of the example policies, in `jur`.
pub(crate) fn good_node(id: &str, jur: &str) -> Node {
    Node {
        id: id.into(),
        jurisdiction: jur.into(),
        facility: "hyd-gachibowli-1".into(),
        attestation: AttestationStatus::Affirming,
        evidence_age_s: Some(600),
        cc_mode: true,
        image_version: Some("1.5.2".into()),
    }
}

pub(crate) fn place(tenant: &str, dataset: &str, class: &str, node: Node) -> Request {
    Request::Place {
        tenant: tenant.into(),
        dataset: Data::new(dataset, class),
        node,
    }
}

pub(crate) fn store(tenant: &str, artifact: &str, class: &str, node: Node) -> Request {
    Request::Store {
        tenant: tenant.into(),
        artifact: Data::new(artifact, class),
        node,
    }
}

pub(crate) fn egress(tenant: &str, class: &str, dest: Destination) -> Request {
    Request::Egress {
        tenant: tenant.into(),
        data: Data::new("wl-1", class),
        destination: dest,
    }
}

pub(crate) fn operator(tenant: &str, class: &str, nationality: &str, clearance: &str) -> Request {
    Request::OperatorAccess {
        tenant: tenant.into(),
        resource: Data::new("res-1", class),
        operator: Operator {
            id: "op-asha".into(),
            nationality: nationality.into(),
            clearance: clearance.into(),
        },
    }
}

pub(crate) fn addr(s: &str) -> Destination {
    Destination::Address(s.parse().expect("test address"))
}

pub(crate) fn sentences(d: &policy::Decision) -> Vec<String> {
    d.reasons.iter().map(|r| r.to_string()).collect()
}
