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

/// The policy's answer about data crossing a lease's boundary (a download to a client), in
/// the form a `transfer` record keeps.
#[derive(Debug, Clone, PartialEq)]
pub struct TransferDecision {
    pub allowed: bool,
    pub policy_digest: String,
    /// Ids of the rules that decided (none for deny-by-default and uploads).
    pub rules: Vec<String>,
    pub reasons: Vec<String>,
}

impl TransferDecision {
    /// Data entering a lease takes nothing out of the node, so no rule is asked: always
    /// allowed, with the digest of the policy in force for the record.
    pub fn upload(policy_digest: &str) -> TransferDecision {
        TransferDecision {
            allowed: true,
            policy_digest: policy_digest.to_owned(),
            rules: Vec::new(),
            reasons: vec!["data entering a lease is always allowed".into()],
        }
    }
}

/// The node's active residency policy, or none (deny everything).
pub struct Residency {
    policy: Option<Policy>,
}

#[derive(Debug, thiserror::Error)]
pub enum ResidencyError {
    #[error("cannot read {path}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("policy authority key {path}")]
    Key {
        path: String,
        source: policy::BundleError,
    },
    #[error("policy bundle refused")]
    Bundle(#[from] policy::BundleError),
    #[error("state")]
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

    /// Digest of the policy in force (`none` without one).
    pub fn digest(&self) -> String {
        self.policy
            .as_ref()
            .map_or_else(|| "none".to_owned(), |p| p.digest().to_string())
    }

    /// Whether `tenant`'s `classification` data of `lease` may leave the node for `client`: an
    /// egress of that data to the client's address, decided as a job's egress is (the same
    /// endpoints, rules and audit mode), so a download cannot take data where a job of the
    /// lease could not send it.
    pub fn check_download(
        &self,
        tenant: &str,
        classification: &str,
        lease: &str,
        client: std::net::IpAddr,
    ) -> TransferDecision {
        let Some(policy) = &self.policy else {
            return TransferDecision {
                allowed: false,
                policy_digest: "none".into(),
                rules: Vec::new(),
                reasons: vec![
                    "denied: no residency policy is installed on this node, and nothing is allowed by default".into(),
                ],
            };
        };
        let request = policy::Request::Egress {
            tenant: tenant.to_owned(),
            data: policy::Data {
                id: lease.to_owned(),
                classification: classification.to_owned(),
                owner: Some(tenant.to_owned()),
                origin: None,
            },
            destination: policy::Destination::Address(policy::cidr::canonical_ip(client)),
        };
        let d = policy::decide(policy, &request);
        TransferDecision {
            allowed: d.allowed,
            policy_digest: d.policy_digest,
            rules: d.matched_rules,
            reasons: d.reasons.iter().map(|r| r.to_string()).collect(),
        }
    }

    pub fn check_place(&self, req: &PlaceRequest<'_>) -> PlaceDecision {
        let Some(policy) = &self.policy else {
            return PlaceDecision {
                allowed: false,
                policy_digest: "none".into(),
                reasons: vec![
                    "denied: no residency policy is installed on this node, and nothing is allowed by default".into(),
                ],
            };
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
        PlaceDecision {
            allowed: d.allowed,
            policy_digest: d.policy_digest.clone(),
            reasons: d.reasons.iter().map(|r| r.to_string()).collect(),
        }
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
        dev_residency().check_place(&PlaceRequest {
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

    /// A policy written for the download tests: a workstation in India and a host abroad,
    /// internal data reaches only India (enforced), confidential data is only audited.
    fn download_policy() -> Residency {
        let toml = r#"
[policy]
name = "download-test"
format = 1
version = 1

[classifications]
order = ["public", "internal", "confidential"]

[[tenants]]
id = "acme"
home = "IN-TG"

[[endpoints]]
id = "workstation"
jurisdiction = "IN-TG"
cidrs = ["127.0.0.0/8"]

[[endpoints]]
id = "abroad"
jurisdiction = "US"
cidrs = ["198.51.100.0/24"]

[[rules]]
id = "internal-out-to-india"
actions = ["egress"]
classification = "internal"
allow_in = ["IN"]

[[rules]]
id = "confidential-out-audited"
actions = ["egress"]
classification = "confidential"
allow_in = ["IN"]
mode = "audit"
"#;
        let policy = Policy::from_toml_str(toml).expect("test policy");
        Residency {
            policy: Some(policy),
        }
    }

    fn download(class: &str, client: &str) -> TransferDecision {
        download_policy().check_download("acme", class, "lease-1", client.parse().unwrap())
    }

    #[test]
    fn a_download_to_an_allowed_client_names_its_rule() {
        let d = download("internal", "127.0.0.1");
        assert!(d.allowed, "{d:?}");
        assert_eq!(d.rules, vec!["internal-out-to-india".to_owned()]);
        assert!(d.policy_digest.starts_with("sha256:"), "{d:?}");
        assert_eq!(d.policy_digest, download_policy().digest());
        // IPv4-mapped IPv6 (a dual-stack listener's view) is the same client.
        assert!(download("internal", "::ffff:127.0.0.1").allowed);
    }

    /// Abroad, undeclared addresses and classifications no egress rule covers are refused,
    /// with reasons a tenant can read.
    #[test]
    fn a_download_to_a_client_abroad_is_denied_with_reasons() {
        let d = download("internal", "198.51.100.4");
        assert!(!d.allowed, "{d:?}");
        assert_eq!(d.rules, vec!["internal-out-to-india".to_owned()]);
        assert!(
            d.reasons.iter().any(|r| r.contains("US")),
            "{:?}",
            d.reasons
        );
        assert!(!download("internal", "192.0.2.1").allowed, "undeclared");
        let d = download("public", "127.0.0.1");
        assert!(
            !d.allowed && d.rules.is_empty(),
            "no egress rule for public: {d:?}"
        );
        assert!(d.reasons[0].contains("deny by default"), "{:?}", d.reasons);
        let none =
            Residency::none().check_download("acme", "internal", "l", "127.0.0.1".parse().unwrap());
        assert!(!none.allowed && none.policy_digest == "none", "{none:?}");
    }

    /// Under an audit-mode rule the policy allows and its reasons say what it would deny.
    #[test]
    fn audit_mode_allows_and_says_so() {
        let d = download("confidential", "198.51.100.4");
        assert!(d.allowed, "{d:?}");
        assert_eq!(d.rules, vec!["confidential-out-audited".to_owned()]);
        assert!(
            d.reasons.iter().any(|r| r.contains("audit violation")),
            "{:?}",
            d.reasons
        );
    }

    /// The dev policy lets the dev user's own machine (loopback, in India) download internal
    /// data, as its e2e tests and the README's story do, and still keeps public data's
    /// downloads to the rules (none covers its egress).
    #[test]
    fn the_dev_policy_admits_the_dev_workstation() {
        let dev = dev_residency();
        let ip = "127.0.0.1".parse().unwrap();
        for class in ["internal", "confidential", "restricted"] {
            assert!(
                dev.check_download("hyd-speech", class, "l", ip).allowed,
                "{class}"
            );
        }
        assert!(
            !dev.check_download("hyd-speech", "internal", "l", "10.233.2.9".parse().unwrap())
                .allowed
        );
    }
}
