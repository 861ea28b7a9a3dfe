//! Placement checks against the residency policy, as the daemon sees them.
//!
//! The node only runs a policy signed by the policy authority whose key the operator
//! configured, never an older one than it ran before (rollback), and asks it before every
//! placement. The node's attestation status and evidence age come from the latest verified
//! attestation result in the ledger (none yet: status `none`), and its CC mode from the GPUs,
//! so rules that require an affirming, recent attestation on a CC node deny — with that
//! reason — until the control plane has delivered one.

use crate::state::Store;
use hostd_api::tenant::Tenant;
use policy::{Bundle, Installed, Policy, PolicyDigest, VerifierKey};
use std::path::Path;

/// What the node tells the policy about itself and the request.
pub struct PlaceRequest<'a> {
    pub tenant: &'a Tenant,
    pub classification: &'a str,
    pub dataset: Option<&'a str>,
    pub node_name: &'a str,
    pub node_jurisdiction: &'a str,
    pub node_facility: &'a str,
    /// Status of the latest verified attestation result (`None` when there is none).
    pub attestation: policy::AttestationStatus,
    /// Seconds since that result was issued (`None` when there is none).
    pub evidence_age_s: Option<u64>,
    /// Whether the GPUs the request would use run in confidential-computing mode.
    pub cc_mode: bool,
    /// Image version vouched for by that result (`None` when there is none).
    pub image_version: Option<&'a str>,
}

/// The outcome, in the form the lease keeps and the API returns.
#[derive(Debug, Clone)]
pub struct PlaceDecision {
    pub allowed: bool,
    pub policy_digest: String,
    pub reasons: Vec<String>,
}

/// The node's active residency policy, or none (deny everything).
pub struct Residency {
    policy: Option<Policy>,
}

#[derive(Debug, thiserror::Error)]
pub enum ResidencyError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("policy authority key {path}: {source}")]
    Key {
        path: String,
        source: policy::BundleError,
    },
    #[error("policy bundle refused: {0}")]
    Bundle(#[from] policy::BundleError),
    #[error("state: {0}")]
    Store(#[from] crate::state::StoreError),
}

fn read(path: &Path) -> Result<Vec<u8>, ResidencyError> {
    std::fs::read(path).map_err(|source| ResidencyError::Read {
        path: path.display().to_string(),
        source,
    })
}

/// The `FILE.sig` beside a policy file.
pub fn signature_path(policy: &Path) -> std::path::PathBuf {
    let mut s = policy.as_os_str().to_owned();
    s.push(".sig");
    s.into()
}

impl Residency {
    pub fn none() -> Residency {
        Residency { policy: None }
    }

    /// Loads `file` with its signature `file.sig`, verified with the authority key in
    /// `authority` (a note verifier key), refusing a rollback below the version this node
    /// installed before (remembered in the store).
    pub fn load(file: &Path, authority: &Path, store: &Store) -> Result<Residency, ResidencyError> {
        let policy_bytes = read(file)?;
        let signature = match std::fs::read(signature_path(file)) {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(source) => {
                return Err(ResidencyError::Read {
                    path: signature_path(file).display().to_string(),
                    source,
                })
            }
        };
        let key_text = read(authority)?;
        let key =
            VerifierKey::parse(String::from_utf8_lossy(&key_text).trim()).map_err(|source| {
                ResidencyError::Key {
                    path: authority.display().to_string(),
                    source,
                }
            })?;
        let current = installed(store)?;
        let policy = policy::verify_bundle(
            Bundle {
                policy: &policy_bytes,
                signature: &signature,
            },
            &key,
            current,
        )?;
        let mut value = policy.version.to_be_bytes().to_vec();
        value.extend_from_slice(&policy.digest().0);
        store.meta_set("policy_installed", &value)?;
        store.flush()?;
        tracing::info!(policy = %policy.name, version = policy.version, digest = %policy.digest(), "residency policy installed");
        Ok(Residency {
            policy: Some(policy),
        })
    }

    pub fn policy(&self) -> Option<&Policy> {
        self.policy.as_ref()
    }

    pub fn check_place(&self, req: &PlaceRequest<'_>) -> Result<PlaceDecision, String> {
        let Some(policy) = &self.policy else {
            return Ok(PlaceDecision {
                allowed: false,
                policy_digest: "none".into(),
                reasons: vec![
                    "denied: no residency policy is installed on this node, and nothing is allowed by default".into(),
                ],
            });
        };
        let request = policy::Request::Place {
            tenant: req.tenant.id.clone(),
            dataset: policy::Data {
                id: req.dataset.unwrap_or("unnamed-dataset").to_string(),
                classification: req.classification.to_string(),
                owner: Some(req.tenant.id.clone()),
                origin: None,
            },
            node: policy::Node {
                id: req.node_name.to_string(),
                jurisdiction: req.node_jurisdiction.to_string(),
                facility: req.node_facility.to_string(),
                attestation: req.attestation,
                evidence_age_s: req.evidence_age_s,
                cc_mode: req.cc_mode,
                image_version: req.image_version.map(str::to_owned),
            },
        };
        let d = policy::decide(policy, &request);
        Ok(PlaceDecision {
            allowed: d.allowed,
            policy_digest: d.policy_digest.clone(),
            reasons: d.reasons.iter().map(|r| r.to_string()).collect(),
        })
    }
}

/// The (version, digest) of the policy this node last installed.
fn installed(store: &Store) -> Result<Option<Installed>, ResidencyError> {
    let Some(v) = store.meta_get("policy_installed")? else {
        return Ok(None);
    };
    if v.len() != 40 {
        // Never fall back to "nothing installed": that would disable rollback protection.
        return Err(ResidencyError::Store(crate::state::StoreError::Corrupt {
            tree: "meta",
            key: "policy_installed".into(),
            message: format!("expected 40 bytes, found {}", v.len()),
        }));
    }
    let mut version = [0u8; 8];
    version.copy_from_slice(&v[..8]);
    let mut digest = [0u8; 32];
    digest.copy_from_slice(&v[8..]);
    Ok(Some(Installed {
        version: u64::from_be_bytes(version),
        digest: PolicyDigest(digest),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hostd_api::tenant::{Tenant, TenantStatus};

    fn dev_residency() -> Residency {
        let policy = Policy::from_toml_str(include_str!("dev-policy.toml")).expect("dev policy");
        Residency {
            policy: Some(policy),
        }
    }

    fn restricted(image_version: &str) -> PlaceDecision {
        let tenant = Tenant {
            id: "hyd-speech".into(),
            name: "Hyderabad Speech Labs".into(),
            jurisdiction: "IN-TG".into(),
            contact: String::new(),
            status: TenantStatus::Active,
            created: "2026-12-03T00:00:00Z".into(),
        };
        dev_residency()
            .check_place(&PlaceRequest {
                tenant: &tenant,
                classification: "restricted",
                dataset: Some("telugu-asr-raw"),
                node_name: "hyd-dev-01",
                node_jurisdiction: "IN-TG",
                node_facility: "HYD1",
                attestation: policy::AttestationStatus::Affirming,
                evidence_age_s: Some(60),
                cc_mode: true,
                // The empty string stands for "no attested image" in this test's table.
                image_version: Some(image_version).filter(|v| !v.is_empty()),
            })
            .expect("decision")
    }

    /// The image version reaches the policy: the dev rule for restricted data needs an
    /// attested image of at least 0.1, and an unattested (empty) version is refused with a
    /// reason naming it.
    #[test]
    fn restricted_placement_needs_an_attested_image_version() {
        assert!(restricted("0.1.0").allowed);
        assert!(restricted("1.4.2").allowed);
        for refused in ["", "0.0.9"] {
            let d = restricted(refused);
            assert!(!d.allowed, "{refused:?} allowed");
            assert!(
                d.reasons.iter().any(|r| r.contains("image")),
                "{refused:?}: {:?}",
                d.reasons
            );
        }
    }
}
