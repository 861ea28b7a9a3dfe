//! `decide`: one request, one decision, and a reason an auditor can read for every check.
//!
//! Selection is deliberately simple so that a human can predict it: for (action,
//! classification) the tenant's own rules speak if it has any, otherwise the general rules;
//! no rule means deny. The loader guarantees that all rules that speak agree, so there is no
//! ordering or priority to reason about.

use crate::cidr::canonical_ip;
use crate::jurisdiction::Jurisdiction;
use crate::model::{Action, ClearanceRequirement, Endpoint, Mode, Policy, Rule, Version};
use crate::request::{Destination, Node, Operator, Request};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// The check passed.
    Allowed,
    /// The check failed under an enforcing rule (or no rule applies).
    Denied,
    /// The check failed under an audit-mode rule: allowed, reported as a violation.
    AuditViolation,
}

/// Which attribute a reason is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Attribute {
    /// No rule covers the request (deny by default).
    NoRule,
    /// The data's classification is not defined by the policy.
    Classification,
    /// Where the node or destination is.
    Jurisdiction,
    /// The destination is an exempt endpoint.
    Exemption,
    /// Node attestation status.
    Attestation,
    /// Node evidence age.
    EvidenceAge,
    /// Confidential-computing mode.
    ConfidentialComputing,
    /// Node image version.
    ImageVersion,
    /// Node facility.
    Facility,
    /// Operator nationality.
    Nationality,
    /// Operator clearance.
    Clearance,
}

/// What kind of data a reason talks about (for the sentence).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DataKind {
    /// Dataset used by a placement.
    Dataset,
    /// Artifact being stored.
    Artifact,
    /// Data sent by egress.
    Data,
    /// Tenant resource accessed by an operator.
    Resource,
}

/// One structured reason; [`fmt::Display`] renders it as one sentence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reason {
    /// Outcome of this check.
    pub verdict: Verdict,
    /// Rule that made the check (none for deny-by-default and unknown classification).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// Attribute checked.
    pub attribute: Attribute,
    /// Kind of data.
    pub data_kind: DataKind,
    /// Data id.
    pub data: String,
    /// Classification of the data, as requested.
    pub classification: String,
    /// What was checked, e.g. `node gpu-07` or `endpoint hf (203.0.113.7)`.
    pub subject: String,
    /// What the rule expects, e.g. `IN` or `at least 1.4.0`.
    pub expected: String,
    /// What the request has, e.g. `SG`.
    pub actual: String,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = match self.verdict {
            Verdict::Allowed => "allowed",
            Verdict::Denied => "denied",
            Verdict::AuditViolation => "audit violation (allowed in audit mode)",
        };
        let kind = match self.data_kind {
            DataKind::Dataset => "dataset",
            DataKind::Artifact => "artifact",
            DataKind::Data => "data",
            DataKind::Resource => "resource",
        };
        write!(
            f,
            "{verdict}: {kind} {} is {}; ",
            self.data, self.classification
        )?;
        let rule = self.rule.as_deref().unwrap_or("-");
        let pass = self.verdict == Verdict::Allowed;
        match self.attribute {
            Attribute::NoRule => write!(f, "no rule covers {} (deny by default)", self.actual),
            Attribute::Classification => write!(
                f,
                "classification '{}' is not defined by the policy (defined: {})",
                self.actual, self.expected
            ),
            Attribute::Jurisdiction if pass => write!(
                f,
                "{} is in {}, which rule {rule} allows ({})",
                self.subject, self.actual, self.expected
            ),
            Attribute::Jurisdiction => write!(
                f,
                "{} is in {}, rule {rule} allows only {}",
                self.subject, self.actual, self.expected
            ),
            Attribute::Nationality if pass => write!(
                f,
                "{} is a national of {}, which rule {rule} allows ({})",
                self.subject, self.actual, self.expected
            ),
            Attribute::Nationality => write!(
                f,
                "{} is a national of {}, rule {rule} allows only {}",
                self.subject, self.actual, self.expected
            ),
            Attribute::Exemption => write!(f, "{} is exempt under rule {rule}", self.subject),
            other => {
                let what = match other {
                    Attribute::Attestation => "attestation",
                    Attribute::EvidenceAge => "evidence age",
                    Attribute::ConfidentialComputing => "confidential-computing mode",
                    Attribute::ImageVersion => "image version",
                    Attribute::Facility => "facility",
                    _ => "clearance",
                };
                write!(
                    f,
                    "{} {what} is {}, rule {rule} requires {}",
                    self.subject, self.actual, self.expected
                )
            }
        }
    }
}

/// The answer to a request: deterministic and serializable, for the signed ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// May the action proceed.
    pub allowed: bool,
    /// Mode of the rule that decided (`enforce` for deny-by-default).
    pub mode: Mode,
    /// A check failed under an audit-mode rule (allowed, but to be reported).
    pub violation: bool,
    /// The action asked about.
    pub action: Action,
    /// Why, one entry per check: the failing checks when any failed, otherwise all passing ones.
    pub reasons: Vec<Reason>,
    /// Ids of the rules that applied.
    pub matched_rules: Vec<String>,
    /// `sha256:<hex>` of the policy file that decided.
    pub policy_digest: String,
}

impl Decision {
    /// All reasons as sentences, one per line.
    pub fn explain(&self) -> String {
        let mut out = String::new();
        for r in &self.reasons {
            out.push_str(&r.to_string());
            out.push('\n');
        }
        out
    }
}

struct Ctx<'a> {
    rule: &'a Rule,
    kind: DataKind,
    data: &'a str,
    class: &'a str,
    verdict_fail: Verdict,
    passed: Vec<Reason>,
    failed: Vec<Reason>,
}

impl Ctx<'_> {
    fn check(
        &mut self,
        ok: bool,
        attribute: Attribute,
        subject: &str,
        expected: String,
        actual: String,
    ) {
        let reason = Reason {
            verdict: if ok {
                Verdict::Allowed
            } else {
                self.verdict_fail
            },
            rule: Some(self.rule.id.clone()),
            attribute,
            data_kind: self.kind,
            data: self.data.to_string(),
            classification: self.class.to_string(),
            subject: subject.to_string(),
            expected,
            actual,
        };
        if ok {
            self.passed.push(reason);
        } else {
            self.failed.push(reason);
        }
    }
}

/// Decides a request against a policy. Never panics; an unknown classification, an invalid
/// jurisdiction code or an undeclared destination is a denial with a reason.
pub fn decide(policy: &Policy, req: &Request) -> Decision {
    let action = req.action();
    let data = req.data();
    let tenant = req.tenant();
    let Some(class) = policy.classification_index(&data.classification) else {
        return denial(
            policy,
            req,
            Attribute::Classification,
            policy.classifications.join(", "),
            data.classification.clone(),
        );
    };
    let rules = policy.rules_for(action, class, tenant);
    let Some(first) = rules.first() else {
        return denial(
            policy,
            req,
            Attribute::NoRule,
            "a rule".to_string(),
            format!(
                "{action} of {} data for tenant {tenant}",
                data.classification
            ),
        );
    };
    let rule = &policy.rules[*first as usize];
    let home = policy.tenant(tenant).map(|t| t.home);
    let mut cx = Ctx {
        rule,
        kind: data_kind(action),
        data: &data.id,
        class: &data.classification,
        verdict_fail: match rule.mode {
            Mode::Enforce => Verdict::Denied,
            Mode::Audit => Verdict::AuditViolation,
        },
        passed: Vec::new(),
        failed: Vec::new(),
    };
    match req {
        Request::Place { node, .. } | Request::Store { node, .. } => {
            check_node(&mut cx, node, home);
        }
        Request::Egress { destination, .. } => check_egress(&mut cx, policy, destination, home),
        Request::OperatorAccess { operator, .. } => {
            check_operator(&mut cx, policy, operator, home, class);
        }
    }
    let violated = !cx.failed.is_empty();
    Decision {
        allowed: !violated || rule.mode == Mode::Audit,
        mode: rule.mode,
        violation: violated && rule.mode == Mode::Audit,
        action,
        reasons: if violated { cx.failed } else { cx.passed },
        matched_rules: rules
            .iter()
            .map(|r| policy.rules[*r as usize].id.clone())
            .collect(),
        policy_digest: policy.digest_text.clone(),
    }
}

/// What kind of data an action concerns, as the reasons name it.
fn data_kind(action: Action) -> DataKind {
    match action {
        Action::Place => DataKind::Dataset,
        Action::Store => DataKind::Artifact,
        Action::Egress => DataKind::Data,
        Action::OperatorAccess => DataKind::Resource,
    }
}

/// A denial before any rule applies (the classification is unknown, or no rule covers the
/// request), with its one reason. Deny by default: such a request is never allowed.
fn denial(
    policy: &Policy,
    req: &Request,
    attribute: Attribute,
    expected: String,
    actual: String,
) -> Decision {
    let action = req.action();
    let data = req.data();
    Decision {
        allowed: false,
        mode: Mode::Enforce,
        violation: false,
        action,
        reasons: vec![Reason {
            verdict: Verdict::Denied,
            rule: None,
            attribute,
            data_kind: data_kind(action),
            data: data.id.clone(),
            classification: data.classification.clone(),
            subject: format!("tenant {}", req.tenant()),
            expected,
            actual,
        }],
        matched_rules: Vec::new(),
        policy_digest: policy.digest_text.clone(),
    }
}

/// Egress: an endpoint the rule exempts passes by name; anything else by the jurisdiction
/// its address or name resolves to.
fn check_egress(
    cx: &mut Ctx<'_>,
    policy: &Policy,
    destination: &Destination,
    home: Option<Jurisdiction>,
) {
    let rule = cx.rule;
    let (endpoint, subject, jur) = resolve(policy, destination);
    if let Some(e) = endpoint.filter(|e| rule.exempt.contains(&e.id)) {
        cx.check(
            true,
            Attribute::Exemption,
            &subject,
            rule.exempt.join(", "),
            e.id.clone(),
        );
        return;
    }
    let actual = match jur {
        Some(j) => j.to_string(),
        None => "an unknown jurisdiction".to_string(),
    };
    cx.check(
        admits(rule, home, jur),
        Attribute::Jurisdiction,
        &subject,
        expected_places(rule, home),
        actual,
    );
}

/// Operator access: the operator's nationality, and their clearance where the rule asks
/// for one (a fixed level, or at least the data's own classification).
fn check_operator(
    cx: &mut Ctx<'_>,
    policy: &Policy,
    operator: &Operator,
    home: Option<Jurisdiction>,
    class: usize,
) {
    let rule = cx.rule;
    let subject = format!("operator {}", operator.id);
    check_place(
        cx,
        Attribute::Nationality,
        &subject,
        &operator.nationality,
        home,
    );
    let Some(requirement) = rule.clearance else {
        return;
    };
    let need = match requirement {
        ClearanceRequirement::AtLeast(ix) => ix as usize,
        ClearanceRequirement::Data => class,
    };
    let have = policy.classification_index(&operator.clearance);
    cx.check(
        have.is_some_and(|h| h >= need),
        Attribute::Clearance,
        &subject,
        format!("at least {}", policy.classifications[need]),
        if have.is_some() {
            operator.clearance.clone()
        } else {
            format!(
                "'{}' (not a classification of this policy)",
                operator.clearance
            )
        },
    );
}

fn check_node(cx: &mut Ctx<'_>, node: &Node, home: Option<Jurisdiction>) {
    let rule = cx.rule;
    let subject = format!("node {}", node.id);
    check_place(
        cx,
        Attribute::Jurisdiction,
        &subject,
        &node.jurisdiction,
        home,
    );
    let req = &rule.node;
    if let Some(min) = req.attestation {
        cx.check(
            node.attestation >= min,
            Attribute::Attestation,
            &subject,
            if min == crate::model::AttestationStatus::Affirming {
                min.to_string()
            } else {
                format!("at least {min}")
            },
            node.attestation.to_string(),
        );
    }
    if let Some((max, text)) = &req.max_evidence_age {
        cx.check(
            node.evidence_age_s.is_some_and(|age| age <= *max),
            Attribute::EvidenceAge,
            &subject,
            format!("at most {text}"),
            match node.evidence_age_s {
                Some(age) => format!("{age}s"),
                None => "unknown (no evidence)".to_string(),
            },
        );
    }
    if req.confidential_computing {
        cx.check(
            node.cc_mode,
            Attribute::ConfidentialComputing,
            &subject,
            "on".to_string(),
            if node.cc_mode { "on" } else { "off" }.to_string(),
        );
    }
    if let Some((min, text)) = &req.min_image_version {
        let have = node
            .image_version
            .as_deref()
            .map(|v| (v, Version::parse(v)));
        cx.check(
            have.is_some_and(|(_, parsed)| parsed.is_some_and(|v| v >= *min)),
            Attribute::ImageVersion,
            &subject,
            format!("at least {text}"),
            match have {
                Some((v, Some(_))) => v.to_string(),
                Some((v, None)) => format!("'{v}' (not a comparable version)"),
                None => "unknown (none attested)".to_string(),
            },
        );
    }
    if let Some(facilities) = &req.facilities {
        cx.check(
            facilities.contains(&node.facility),
            Attribute::Facility,
            &subject,
            format!("one of {}", facilities.join(", ")),
            if node.facility.is_empty() {
                "not reported".to_string()
            } else {
                node.facility.clone()
            },
        );
    }
}

/// The place of a subject (a node's jurisdiction, an operator's nationality) must be a valid
/// code, and one the rule admits for the tenant's `home`.
fn check_place(
    cx: &mut Ctx<'_>,
    attribute: Attribute,
    subject: &str,
    place: &str,
    home: Option<Jurisdiction>,
) {
    let (jur, actual) = parse_place(place);
    cx.check(
        jur.is_some() && admits(cx.rule, home, jur),
        attribute,
        subject,
        expected_places(cx.rule, home),
        actual,
    );
}

fn parse_place(s: &str) -> (Option<Jurisdiction>, String) {
    match Jurisdiction::parse(s) {
        Ok(j) => (Some(j), j.to_string()),
        Err(_) => (None, format!("'{s}' (not a valid jurisdiction code)")),
    }
}

/// Whether the rule allows a place (unknown = `None`), `home` resolved for the tenant.
pub(crate) fn admits(rule: &Rule, home: Option<Jurisdiction>, j: Option<Jurisdiction>) -> bool {
    rule.allow.admits(j)
        || (rule.allow_home
            && match (home, j) {
                (Some(h), Some(j)) => h.contains(j),
                _ => false,
            })
}

fn expected_places(rule: &Rule, home: Option<Jurisdiction>) -> String {
    if !rule.allow_home {
        return rule.allow_text.clone();
    }
    let home = match home {
        Some(h) => format!("home ({h})"),
        None => "home (tenant not declared)".to_string(),
    };
    if rule.allow_text.is_empty() {
        home
    } else {
        format!("{}, {home}", rule.allow_text)
    }
}

/// The endpoint a destination names, a subject for sentences, and its jurisdiction.
pub(crate) fn resolve<'p>(
    policy: &'p Policy,
    dest: &Destination,
) -> (Option<&'p Endpoint>, String, Option<Jurisdiction>) {
    match dest {
        Destination::Endpoint(id) => match policy.endpoint(id) {
            Some(e) => (Some(e), format!("endpoint {id}"), Some(e.jurisdiction)),
            None => (None, format!("endpoint {id} (not declared)"), None),
        },
        Destination::Address(ip) => {
            let ip = canonical_ip(*ip);
            match policy.endpoint_for_ip(ip) {
                Some(e) => (
                    Some(e),
                    format!("endpoint {} ({ip})", e.id),
                    Some(e.jurisdiction),
                ),
                None => (None, format!("destination {ip}"), None),
            }
        }
        Destination::Host(h) => match policy.endpoint_for_host(h) {
            Some(e) => (
                Some(e),
                format!("endpoint {} ({h})", e.id),
                Some(e.jurisdiction),
            ),
            None => (None, format!("destination {h}"), None),
        },
    }
}
