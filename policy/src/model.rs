//! The loaded, validated policy: classifications, groups, tenants, endpoints and rules.
//!
//! Everything here is immutable once [`Policy::from_toml_str`](crate::Policy::from_toml_str)
//! returns: the loader resolves names (groups, classifications, endpoints) into compact forms
//! and builds a lookup index, so [`decide`](crate::decide) does no parsing of the policy.

use crate::cidr::Cidr;
use crate::jurisdiction::{Jurisdiction, JurisdictionSet};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::fmt;

/// The actions `hostd` asks about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// Run a workload of a tenant using a dataset on a node.
    Place,
    /// Persist an artifact on a node.
    Store,
    /// A workload sends data to a destination.
    Egress,
    /// An operator reads or manages tenant resources.
    OperatorAccess,
}

impl Action {
    /// All actions, in index order.
    pub const ALL: [Action; 4] = [
        Action::Place,
        Action::Store,
        Action::Egress,
        Action::OperatorAccess,
    ];

    /// The name used in policy files and requests.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Place => "place",
            Action::Store => "store",
            Action::Egress => "egress",
            Action::OperatorAccess => "operator-access",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }

    pub(crate) fn from_name(s: &str) -> Option<Action> {
        Action::ALL.into_iter().find(|a| a.as_str() == s)
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a rule does when its conditions are not met.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Deny the action.
    #[default]
    Enforce,
    /// Allow the action but report it as a violation (for rolling out a rule safely).
    Audit,
}

impl Mode {
    /// The name used in policy files.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::Audit => "audit",
        }
    }
}

/// Attestation result of a node, in the trust tiers of the IETF RATS AR4SI / EAR vocabulary,
/// ordered from worst to best so a rule can require "at least".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AttestationStatus {
    /// Evidence shows the node is not trustworthy.
    Contraindicated,
    /// No appraisal is available.
    None,
    /// Appraised with reservations.
    Warning,
    /// Appraised and trustworthy.
    Affirming,
}

impl AttestationStatus {
    /// The name used in policy files and requests.
    pub fn as_str(self) -> &'static str {
        match self {
            AttestationStatus::Contraindicated => "contraindicated",
            AttestationStatus::None => "none",
            AttestationStatus::Warning => "warning",
            AttestationStatus::Affirming => "affirming",
        }
    }

    pub(crate) fn from_name(s: &str) -> Option<Self> {
        [
            AttestationStatus::Contraindicated,
            AttestationStatus::None,
            AttestationStatus::Warning,
            AttestationStatus::Affirming,
        ]
        .into_iter()
        .find(|a| a.as_str() == s)
    }
}

impl fmt::Display for AttestationStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// SHA-256 of the exact policy file bytes; shown as `sha256:<hex>`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PolicyDigest(pub [u8; 32]);

impl PolicyDigest {
    /// Digest of the policy file bytes.
    pub fn of(bytes: &[u8]) -> Self {
        use sha2::{Digest, Sha256};
        PolicyDigest(Sha256::digest(bytes).into())
    }

    /// Parses `sha256:<64 hex>`.
    pub fn parse(s: &str) -> Option<Self> {
        let hex_part = s.strip_prefix("sha256:")?;
        if hex_part.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        hex::decode_to_slice(hex_part, &mut out).ok()?;
        Some(PolicyDigest(out))
    }
}

impl fmt::Display for PolicyDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", hex::encode(self.0))
    }
}

impl fmt::Debug for PolicyDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A numeric dotted version (`1.4`, `v2.0.1`), up to four components, compared numerically
/// with missing components as zero. Pre-release suffixes are not comparable and therefore
/// never satisfy a minimum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version(pub [u64; 4]);

impl Version {
    /// Parses a version; `None` if it is not dotted unsigned integers.
    pub fn parse(s: &str) -> Option<Version> {
        let s = s.strip_prefix('v').unwrap_or(s);
        let mut out = [0u64; 4];
        for (n, part) in s.split('.').enumerate() {
            if n == 4 || part.is_empty() || part.len() > 19 {
                return None;
            }
            if !part.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            out[n] = part.parse().ok()?;
        }
        Some(Version(out))
    }
}

/// Requirements on the node for `place` and `store`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeRequirements {
    /// Minimum attestation status.
    pub attestation: Option<AttestationStatus>,
    /// Maximum evidence age in seconds (and the text the policy wrote, for reasons).
    pub max_evidence_age: Option<(u64, String)>,
    /// Confidential-computing mode must be on.
    pub confidential_computing: bool,
    /// Minimum image version (and its text).
    pub min_image_version: Option<(Version, String)>,
    /// Allowed facilities (any if `None`).
    pub facilities: Option<Vec<String>>,
}

impl NodeRequirements {
    /// True if no requirement is set.
    pub fn is_empty(&self) -> bool {
        *self == NodeRequirements::default()
    }
}

/// The clearance an operator needs for `operator-access`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClearanceRequirement {
    /// At least this classification level (index into the policy's order).
    AtLeast(u8),
    /// At least the classification of the data accessed.
    Data,
}

/// A rule: for some actions, some classifications and optionally some tenants, where the
/// action may happen and what the node or operator must satisfy.
#[derive(Debug, Clone)]
pub struct Rule {
    /// Unique id, quoted in every reason.
    pub id: String,
    /// Free text for auditors.
    pub description: String,
    /// Line of the rule in the policy file.
    pub line: usize,
    /// Actions the rule speaks about (bit `1 << Action::index`).
    pub(crate) actions: u8,
    /// Classifications the rule speaks about (bit per classification index).
    pub(crate) classes: u64,
    /// Tenants the rule is restricted to; `None` for every tenant.
    pub tenants: Option<Vec<String>>,
    /// Allowed jurisdictions, resolved.
    pub allow: JurisdictionSet,
    /// `home` was listed: the tenant's declared home jurisdiction is allowed too.
    pub allow_home: bool,
    /// The allowed jurisdictions as written (e.g. `IN`, `eu`), for reasons.
    pub allow_text: String,
    /// Requirements on the node (place, store).
    pub node: NodeRequirements,
    /// Requirement on the operator (operator-access).
    pub clearance: Option<ClearanceRequirement>,
    /// Endpoint ids always allowed for egress under this rule.
    pub exempt: Vec<String>,
    /// Enforce or audit.
    pub mode: Mode,
}

impl Rule {
    /// Whether the rule covers the action.
    pub fn has_action(&self, a: Action) -> bool {
        self.actions & (1 << a.index()) != 0
    }

    /// Actions the rule covers.
    pub fn actions(&self) -> Vec<Action> {
        Action::ALL
            .into_iter()
            .filter(|a| self.has_action(*a))
            .collect()
    }

    /// Whether the rule covers the classification index.
    pub fn has_class(&self, c: usize) -> bool {
        c < 64 && self.classes & (1u64 << c) != 0
    }
}

/// A tenant and its home jurisdiction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Tenant {
    /// Tenant id as `hostd` knows it.
    pub id: String,
    /// Home jurisdiction (usable in rules as `home`).
    pub home: Jurisdiction,
}

/// An egress destination known to the policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Endpoint {
    /// Endpoint id, referenced by exemptions and reasons.
    pub id: String,
    /// Where the endpoint is.
    pub jurisdiction: Jurisdiction,
    /// Address ranges of the endpoint (never overlapping another endpoint's).
    pub cidrs: Vec<Cidr>,
    /// Host names of the endpoint (lowercase), for DNS-aware filters.
    pub hosts: Vec<String>,
    /// Free text.
    pub description: String,
}

/// A validated policy. Build with [`Policy::from_toml_str`](crate::Policy::from_toml_str).
#[derive(Debug, Clone)]
pub struct Policy {
    /// Policy name.
    pub name: String,
    /// Policy revision (strictly increasing across signed bundles).
    pub version: u64,
    /// Free text.
    pub description: String,
    /// Classification names, least to most sensitive.
    pub classifications: Vec<String>,
    /// Named jurisdiction groups as written.
    pub groups: BTreeMap<String, Vec<Jurisdiction>>,
    /// Declared tenants.
    pub tenants: Vec<Tenant>,
    /// Declared egress endpoints.
    pub endpoints: Vec<Endpoint>,
    /// Rules in file order.
    pub rules: Vec<Rule>,
    pub(crate) digest: PolicyDigest,
    pub(crate) digest_text: String,
    pub(crate) index: Index,
}

/// Which rules speak for each (action, classification) cell, general and per tenant.
#[derive(Debug, Clone, Default)]
pub(crate) struct Index {
    pub(crate) nclasses: usize,
    pub(crate) class_by_name: HashMap<String, u8>,
    pub(crate) tenant_by_id: HashMap<String, usize>,
    pub(crate) general: Vec<Vec<u16>>,
    pub(crate) by_tenant: HashMap<String, Vec<Vec<u16>>>,
    pub(crate) endpoint_by_id: HashMap<String, usize>,
    pub(crate) endpoint_by_host: HashMap<String, usize>,
}

impl Index {
    pub(crate) fn cell(&self, action: Action, class: usize) -> usize {
        action.index() * self.nclasses + class
    }
}

impl Policy {
    /// Digest of the policy file this policy was loaded from.
    pub fn digest(&self) -> PolicyDigest {
        self.digest
    }

    /// Index of a classification name in the order, if the policy defines it.
    pub fn classification_index(&self, name: &str) -> Option<usize> {
        self.index.class_by_name.get(name).map(|i| *i as usize)
    }

    /// A declared tenant.
    pub fn tenant(&self, id: &str) -> Option<&Tenant> {
        self.index.tenant_by_id.get(id).map(|i| &self.tenants[*i])
    }

    /// A declared endpoint.
    pub fn endpoint(&self, id: &str) -> Option<&Endpoint> {
        self.index
            .endpoint_by_id
            .get(id)
            .map(|i| &self.endpoints[*i])
    }

    /// The endpoint whose prefixes contain `ip` (endpoints never overlap, so at most one).
    pub fn endpoint_for_ip(&self, ip: std::net::IpAddr) -> Option<&Endpoint> {
        let ip = crate::cidr::canonical_ip(ip);
        self.endpoints
            .iter()
            .find(|e| e.cidrs.iter().any(|c| c.contains(ip)))
    }

    /// The endpoint that lists `host` (case-insensitive, exact name).
    pub fn endpoint_for_host(&self, host: &str) -> Option<&Endpoint> {
        let h = host.trim_end_matches('.').to_ascii_lowercase();
        self.index
            .endpoint_by_host
            .get(&h)
            .map(|i| &self.endpoints[*i])
    }

    /// The rules that speak for an action on a classification for a tenant: the tenant's own
    /// rules if it has any for this cell, else the general ones. More than one only when they
    /// agree (the loader rejects overlapping rules that disagree).
    pub(crate) fn rules_for(&self, action: Action, class: usize, tenant: &str) -> &[u16] {
        let cell = self.index.cell(action, class);
        if let Some(cells) = self.index.by_tenant.get(tenant) {
            if let Some(r) = cells.get(cell) {
                if !r.is_empty() {
                    return r;
                }
            }
        }
        self.index
            .general
            .get(cell)
            .map(|v| v.as_slice())
            .unwrap_or(&[])
    }
}
