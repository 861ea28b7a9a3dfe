//! # policy — data-residency decisions with reasons
//!
//! A pure library (no I/O, no async, no clock) that `hostd` consults before every placement,
//! storage and egress action, and that `sovctl policy` uses to check, sign and explain
//! policies. Government data-centre operators write the rules, auditors read them, so the
//! file format is plain TOML (see `docs/policy.md`) and every decision carries one readable
//! sentence per check, the rules that applied, and the digest of the policy that decided.
//!
//! ```
//! use policy::{decide, Policy, Request, Data, Node, AttestationStatus};
//! let text = include_str!("../examples/seed-hyderabad.toml");
//! let policy = Policy::from_toml_str(text).expect("example policy loads");
//! let req = Request::Place {
//!     tenant: "vaani-speech".into(),
//!     dataset: Data::new("telugu-asr-raw", "restricted"),
//!     node: Node {
//!         id: "gpu-07".into(), jurisdiction: "SG".into(), facility: "sg-jurong-1".into(),
//!         attestation: AttestationStatus::Affirming, evidence_age_s: Some(60),
//!         cc_mode: true, image_version: Some("1.4.2".into()),
//!     },
//! };
//! let d = decide(&policy, &req);
//! assert!(!d.allowed);
//! assert_eq!(d.reasons[0].to_string(),
//!     "denied: dataset telugu-asr-raw is restricted; node gpu-07 is in SG, \
//!      rule restricted-stays-in-india allows only IN");
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod bundle;
pub mod cidr;
pub mod decision;
pub mod egress;
pub mod jurisdiction;
pub mod load;
pub mod model;
pub mod request;

pub use bundle::{
    sign_bundle, verify_bundle, Bundle, BundleError, Installed, SignerKey, VerifierKey,
};
pub use cidr::Cidr;
pub use decision::{decide, Attribute, DataKind, Decision, Reason, Verdict};
pub use egress::{compile_egress, EgressAllowList};
pub use jurisdiction::{Jurisdiction, JurisdictionError, JurisdictionSet};
pub use load::{LoadError, FORMAT_VERSION};
pub use model::{
    Action, AttestationStatus, Endpoint, Mode, NodeRequirements, Policy, PolicyDigest, Rule,
    Tenant, Version,
};
pub use request::{Data, Destination, Node, Operator, Request};

impl Policy {
    /// Loads and validates a policy from the exact file text; on failure returns every
    /// error found, each with line, column and field path. Never panics.
    pub fn from_toml_str(text: &str) -> Result<Policy, Vec<LoadError>> {
        load::from_toml_str(text)
    }
}
