//! Compiling egress rules into the allow-list a workload's network filter enforces.
//!
//! The list is derived from the same rule selection and the same `admits` test as
//! [`decide`](crate::decide), so "the filter lets the packet through" and "the policy allows
//! this egress" cannot drift apart (a property test checks every address it draws).

use crate::cidr::{canonical_ip, Cidr};
use crate::decision::admits;
use crate::model::{Action, Mode, Policy};
use serde::{Deserialize, Serialize};
use std::net::IpAddr;

/// Destinations a workload of one tenant handling one classification may reach.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EgressAllowList {
    /// Tenant the list is for.
    pub tenant: String,
    /// Classification of the data the workload handles.
    pub classification: String,
    /// Rules the list was compiled from (empty: deny by default).
    pub rules: Vec<String>,
    /// Mode of those rules; under `audit` the list allows everything (as `decide` does) and
    /// violations are reported by the decision path instead.
    pub mode: Mode,
    /// Allowed prefixes, IPv4 then IPv6, sorted. `0.0.0.0/0` and `::/0` when anywhere.
    pub cidrs: Vec<Cidr>,
    /// Allowed host names, for DNS-aware proxies (sorted, lowercase).
    pub hosts: Vec<String>,
    /// `sha256:<hex>` of the policy.
    pub policy_digest: String,
}

impl EgressAllowList {
    /// Whether the filter lets `ip` through. IPv4-mapped IPv6 addresses are checked as IPv4,
    /// as `decide` does.
    pub fn permits(&self, ip: IpAddr) -> bool {
        let ip = canonical_ip(ip);
        self.cidrs.iter().any(|c| c.contains(ip))
    }

    /// IPv4 prefixes only.
    pub fn ipv4(&self) -> impl Iterator<Item = &Cidr> {
        self.cidrs.iter().filter(|c| !c.is_ipv6())
    }

    /// IPv6 prefixes only.
    pub fn ipv6(&self) -> impl Iterator<Item = &Cidr> {
        self.cidrs.iter().filter(|c| c.is_ipv6())
    }
}

/// Compiles the egress allow-list for `tenant` handling `classification` data. An unknown
/// classification or an action no rule covers compiles to an empty list (deny by default).
pub fn compile_egress(policy: &Policy, tenant: &str, classification: &str) -> EgressAllowList {
    let mut out = EgressAllowList {
        tenant: tenant.to_string(),
        classification: classification.to_string(),
        rules: Vec::new(),
        mode: Mode::Enforce,
        cidrs: Vec::new(),
        hosts: Vec::new(),
        policy_digest: policy.digest_text.clone(),
    };
    let Some(class) = policy.classification_index(classification) else {
        return out;
    };
    let rules = policy.rules_for(Action::Egress, class, tenant);
    let Some(first) = rules.first() else {
        return out;
    };
    let rule = &policy.rules[*first as usize];
    out.rules = rules
        .iter()
        .map(|r| policy.rules[*r as usize].id.clone())
        .collect();
    out.mode = rule.mode;
    let home = policy.tenant(tenant).map(|t| t.home);
    if rule.mode == Mode::Audit || admits(rule, home, None) {
        out.cidrs = vec![Cidr::all_v4(), Cidr::all_v6()];
        // Every declared host is allowed too; say so for proxies that only match names.
        out.hosts = policy
            .endpoints
            .iter()
            .flat_map(|e| e.hosts.iter().cloned())
            .collect();
    } else {
        for e in &policy.endpoints {
            if rule.exempt.contains(&e.id) || admits(rule, home, Some(e.jurisdiction)) {
                out.cidrs.extend(e.cidrs.iter().copied());
                out.hosts.extend(e.hosts.iter().cloned());
            }
        }
    }
    out.cidrs.sort();
    out.cidrs.dedup();
    out.hosts.sort();
    out.hosts.dedup();
    out
}
