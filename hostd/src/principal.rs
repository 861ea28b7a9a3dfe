//! Who is calling: the identity carried by an mTLS client certificate.
//!
//! hostd has no passwords and no bearer tokens. Every API caller presents an X.509 client
//! certificate issued by the node's CA, and the caller's identity is the single SPIFFE ID in that
//! certificate's URI SAN (an "X509-SVID", <https://github.com/spiffe/spiffe/blob/main/standards/X509-SVID.md>):
//!
//! ```text
//! spiffe://<trust-domain>/operator/<name>   runs the node
//! spiffe://<trust-domain>/tenant/<id>       leases GPUs; sees only its own leases and receipts
//! spiffe://<trust-domain>/auditor/<name>    reads the ledger and exports
//! ```
//!
//! Parsing is deliberately stricter than the SPIFFE ID grammar: the path must be exactly
//! `/<role>/<name>` with a known role, so that authorization never has to guess what an
//! unexpected shape means. Anything else is refused, which a hostile certificate (say, one with
//! a percent-encoded `..` or a second URI SAN) cannot talk its way around.

use attest::report::report;
use std::fmt;
use std::str::FromStr;

use serde::Serialize;
use x509_parser::extensions::GeneralName;

/// The three kinds of caller hostd knows; authorization is decided per role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Runs the node: GPUs, policy, tenants, leases.
    Operator,
    /// A customer: sees and acts on its own leases and receipts only.
    Tenant,
    /// Reads the ledger and audit exports; changes nothing.
    Auditor,
}

impl Role {
    /// All roles, in a stable order (for listings and tests).
    pub const ALL: [Role; 3] = [Role::Operator, Role::Tenant, Role::Auditor];

    /// The path segment used in SPIFFE IDs and profile names.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Operator => "operator",
            Role::Tenant => "tenant",
            Role::Auditor => "auditor",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = PrincipalError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "operator" => Ok(Role::Operator),
            "tenant" => Ok(Role::Tenant),
            "auditor" => Ok(Role::Auditor),
            other => Err(PrincipalError::UnknownRole(truncate(other))),
        }
    }
}

/// An authenticated caller. Constructed only by the parsers below, so a `Principal` held by a
/// handler always satisfies the syntax rules.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Principal {
    /// The SPIFFE trust domain, e.g. `node1.sovereign.example`.
    pub trust_domain: String,
    /// What the caller may do.
    pub role: Role,
    /// Operator/auditor name or tenant id, unique within the role.
    pub name: String,
}

/// Longest SPIFFE ID the SPIFFE spec allows (bytes).
pub const MAX_URI_LEN: usize = 2048;
/// Longest trust domain name the SPIFFE spec allows (bytes).
pub const MAX_TRUST_DOMAIN_LEN: usize = 255;
/// Longest principal name hostd accepts (bytes). Names end up in file names, ledger records and
/// log lines, so they are kept short and plain.
pub const MAX_NAME_LEN: usize = 128;

/// Why an identity was refused. Values taken from the input are truncated so a hostile
/// certificate cannot flood the logs through an error message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrincipalError {
    #[error("SPIFFE ID is longer than {MAX_URI_LEN} bytes")]
    TooLong,
    #[error("not a SPIFFE ID (must start with \"spiffe://\"): {0:?}")]
    NotSpiffe(String),
    #[error("invalid trust domain {0:?}: 1..=255 characters of a-z 0-9 . - _")]
    BadTrustDomain(String),
    #[error("trust domain {found:?} is not this node's trust domain {expected:?}")]
    WrongTrustDomain { expected: String, found: String },
    #[error("SPIFFE ID path must be exactly /<operator|tenant|auditor>/<name>, got {0:?}")]
    BadPath(String),
    #[error("unknown role {0:?} (expected operator, tenant or auditor)")]
    UnknownRole(String),
    #[error("invalid name {0:?}: 1..=128 characters of A-Z a-z 0-9 . _ -, not \".\" or \"..\"")]
    BadName(String),
    #[error("certificate is not valid DER X.509: {0}")]
    BadCertificate(String),
    #[error("certificate has no URI SAN with a SPIFFE ID")]
    NoSpiffeId,
    #[error("certificate has {0} URI SANs; an X509-SVID must have exactly one")]
    MultipleUris(usize),
    #[error("certificate is a CA certificate, not a client (leaf) certificate")]
    CaCertificate,
}

impl Principal {
    /// Builds a principal from parts, applying the same rules as [`Principal::from_spiffe_uri`]
    /// (used when issuing certificates, so we never issue one we would later refuse).
    pub fn new(trust_domain: &str, role: Role, name: &str) -> Result<Principal, PrincipalError> {
        check_trust_domain(trust_domain)?;
        check_name(name)?;
        Ok(Principal {
            trust_domain: trust_domain.to_owned(),
            role,
            name: name.to_owned(),
        })
    }

    /// Parses `spiffe://<trust-domain>/<role>/<name>`.
    ///
    /// No normalisation of any kind: no case folding, no percent-decoding, no port, userinfo,
    /// query, fragment, empty or dot segments, trailing slash. The SPIFFE spec forbids all of
    /// these, and accepting one would give two spellings for the same identity.
    pub fn from_spiffe_uri(uri: &str) -> Result<Principal, PrincipalError> {
        if uri.len() > MAX_URI_LEN {
            return Err(PrincipalError::TooLong);
        }
        let rest = uri
            .strip_prefix("spiffe://")
            .ok_or_else(|| PrincipalError::NotSpiffe(truncate(uri)))?;
        let (trust_domain, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        check_trust_domain(trust_domain)?;
        // path starts with '/' (or is empty); split into exactly two segments.
        let mut segments = path.strip_prefix('/').unwrap_or(path).split('/');
        let (role, name) = match (segments.next(), segments.next(), segments.next()) {
            (Some(role), Some(name), None) if !path.is_empty() => (role, name),
            _ => return Err(PrincipalError::BadPath(truncate(path))),
        };
        let role = Role::from_str(role)?;
        check_name(name)?;
        Ok(Principal {
            trust_domain: trust_domain.to_owned(),
            role,
            name: name.to_owned(),
        })
    }

    /// Extracts the caller from a DER client certificate (the TLS peer's leaf).
    ///
    /// The certificate chain has already been verified by the TLS layer; this decides only *who*
    /// the verified certificate names. Following X509-SVID, it must carry exactly one URI SAN,
    /// that URI must be a SPIFFE ID of our trust domain, and the certificate must not be a CA.
    pub fn from_cert_der(
        der: &[u8],
        expected_trust_domain: &str,
    ) -> Result<Principal, PrincipalError> {
        let (rest, cert) = x509_parser::parse_x509_certificate(der)
            .map_err(|e| PrincipalError::BadCertificate(truncate(&report(&e).to_string())))?;
        if !rest.is_empty() {
            return Err(PrincipalError::BadCertificate(
                "trailing data after the certificate".into(),
            ));
        }
        let bc = cert
            .basic_constraints()
            .map_err(|e| PrincipalError::BadCertificate(truncate(&report(&e).to_string())))?;
        if bc.is_some_and(|bc| bc.value.ca) {
            return Err(PrincipalError::CaCertificate);
        }
        let san = cert
            .subject_alternative_name()
            .map_err(|e| PrincipalError::BadCertificate(truncate(&report(&e).to_string())))?
            .ok_or(PrincipalError::NoSpiffeId)?;
        let uris: Vec<&str> = san
            .value
            .general_names
            .iter()
            .filter_map(|n| match n {
                GeneralName::URI(u) => Some(*u),
                _ => None,
            })
            .collect();
        let uri = match uris.as_slice() {
            [] => return Err(PrincipalError::NoSpiffeId),
            [one] => *one,
            many => return Err(PrincipalError::MultipleUris(many.len())),
        };
        let principal = Principal::from_spiffe_uri(uri)?;
        if principal.trust_domain != expected_trust_domain {
            return Err(PrincipalError::WrongTrustDomain {
                expected: expected_trust_domain.to_owned(),
                found: principal.trust_domain,
            });
        }
        Ok(principal)
    }

    /// The SPIFFE ID, e.g. `spiffe://node1.example/tenant/acme`.
    pub fn spiffe_uri(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "spiffe://{}/{}/{}",
            self.trust_domain, self.role, self.name
        )
    }
}

impl FromStr for Principal {
    type Err = PrincipalError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Principal::from_spiffe_uri(s)
    }
}

/// Checks a trust domain name: the SPIFFE character set, lower case only.
pub fn check_trust_domain(td: &str) -> Result<(), PrincipalError> {
    let ok = !td.is_empty()
        && td.len() <= MAX_TRUST_DOMAIN_LEN
        && td
            .bytes()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'.' | b'-' | b'_'));
    if ok {
        Ok(())
    } else {
        Err(PrincipalError::BadTrustDomain(truncate(td)))
    }
}

/// Checks a principal name: a single SPIFFE path segment, no dot segments (which would also be
/// path traversal where names become directory names).
pub fn check_name(name: &str) -> Result<(), PrincipalError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(PrincipalError::BadName(truncate(name)))
    }
}

/// Keeps error messages bounded: at most 80 characters of attacker-supplied text.
fn truncate(s: &str) -> String {
    const MAX: usize = 80;
    if s.chars().count() <= MAX {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(MAX).collect();
        t.push('…');
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, IsCa, KeyPair, SanType};

    const TD: &str = "node1.sovereign.example";

    #[test]
    fn parses_each_role_and_round_trips() {
        for role in Role::ALL {
            let uri = format!("spiffe://{TD}/{role}/alice-01_x.y");
            let p = Principal::from_spiffe_uri(&uri).unwrap();
            assert_eq!(p.trust_domain, TD);
            assert_eq!(p.role, role);
            assert_eq!(p.name, "alice-01_x.y");
            assert_eq!(p.to_string(), uri);
            assert_eq!(p.spiffe_uri().parse::<Principal>().unwrap(), p);
        }
    }

    #[test]
    fn serializes_role_lowercase() {
        let p = Principal::new(TD, Role::Tenant, "acme").unwrap();
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"trust_domain": TD, "role": "tenant", "name": "acme"})
        );
    }

    #[test]
    fn rejects_malformed_and_hostile_uris() {
        let long_name = "a".repeat(129);
        let long_td = "a".repeat(256);
        let huge = format!("spiffe://{TD}/tenant/{}", "a".repeat(3000));
        let cases: Vec<(String, &str)> = vec![
            (String::new(), "empty"),
            (format!("https://{TD}/tenant/acme"), "wrong scheme"),
            (format!("SPIFFE://{TD}/tenant/acme"), "upper-case scheme"),
            (format!("spiffe:/{TD}/tenant/acme"), "one slash"),
            ("spiffe:///tenant/acme".into(), "empty trust domain"),
            ("spiffe://Node1.example/tenant/acme".into(), "upper-case td"),
            ("spiffe://node1.example:443/tenant/acme".into(), "port"),
            ("spiffe://user@node1.example/tenant/acme".into(), "userinfo"),
            (format!("spiffe://{long_td}/tenant/acme"), "td too long"),
            (format!("spiffe://{TD}"), "no path"),
            (format!("spiffe://{TD}/"), "root path"),
            (format!("spiffe://{TD}/tenant"), "role only"),
            (format!("spiffe://{TD}/tenant/"), "empty name"),
            (format!("spiffe://{TD}/tenant/acme/"), "trailing slash"),
            (format!("spiffe://{TD}/tenant/acme/x"), "extra segment"),
            (format!("spiffe://{TD}//tenant/acme"), "empty segment"),
            (format!("spiffe://{TD}/admin/root"), "unknown role"),
            (format!("spiffe://{TD}/Tenant/acme"), "role case"),
            (format!("spiffe://{TD}/tenant/.."), "dot-dot name"),
            (format!("spiffe://{TD}/tenant/."), "dot name"),
            (format!("spiffe://{TD}/tenant/%2e%2e"), "percent-encoded"),
            (format!("spiffe://{TD}/tenant/ac me"), "space"),
            (format!("spiffe://{TD}/tenant/acme?x=1"), "query"),
            (format!("spiffe://{TD}/tenant/acme#f"), "fragment"),
            (format!("spiffe://{TD}/tenant/acmé"), "non-ascii"),
            (format!("spiffe://{TD}/tenant/ac\0me"), "NUL"),
            (format!("spiffe://{TD}/tenant/acme\n"), "newline"),
            (format!("spiffe://{TD}/tenant/{long_name}"), "name too long"),
            (huge, "uri too long"),
        ];
        for (uri, why) in cases {
            assert!(
                Principal::from_spiffe_uri(&uri).is_err(),
                "{why}: {uri:?} was accepted"
            );
        }
        // Boundaries that must be accepted.
        let max_name = "a".repeat(128);
        let max_td = "a".repeat(255);
        Principal::from_spiffe_uri(&format!("spiffe://{TD}/tenant/{max_name}")).unwrap();
        Principal::from_spiffe_uri(&format!("spiffe://{max_td}/tenant/x")).unwrap();
        Principal::from_spiffe_uri("spiffe://a_b-c.9/auditor/..x").unwrap();
    }

    #[test]
    fn error_messages_are_bounded() {
        let uri = format!("http://{}", "x".repeat(1000));
        let msg = Principal::from_spiffe_uri(&uri).unwrap_err().to_string();
        assert!(msg.len() < 200, "{msg}");
    }

    #[test]
    fn new_applies_the_same_rules() {
        assert!(Principal::new(TD, Role::Operator, "..").is_err());
        assert!(Principal::new("BAD", Role::Operator, "x").is_err());
        assert!(Principal::new(TD, Role::Operator, "a/b").is_err());
        assert_eq!(
            Principal::new(TD, Role::Operator, "ops")
                .unwrap()
                .to_string(),
            format!("spiffe://{TD}/operator/ops")
        );
    }

    fn cert_with(sans: Vec<SanType>, ca: bool) -> Vec<u8> {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::default();
        params.subject_alt_names = sans;
        if ca {
            params.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        }
        params.self_signed(&key).unwrap().der().to_vec()
    }

    fn uri(s: &str) -> SanType {
        SanType::URI(s.try_into().unwrap())
    }

    #[test]
    fn from_cert_der_accepts_one_spiffe_uri() {
        let der = cert_with(
            vec![
                SanType::DnsName("client.example".try_into().unwrap()),
                uri(&format!("spiffe://{TD}/auditor/eve")),
            ],
            false,
        );
        let p = Principal::from_cert_der(&der, TD).unwrap();
        assert_eq!((p.role, p.name.as_str()), (Role::Auditor, "eve"));
    }

    #[test]
    fn from_cert_der_refuses_bad_certificates() {
        let ours = format!("spiffe://{TD}/operator/ops");
        let no_san = cert_with(vec![], false);
        assert_eq!(
            Principal::from_cert_der(&no_san, TD),
            Err(PrincipalError::NoSpiffeId)
        );
        let dns_only = cert_with(
            vec![SanType::DnsName("x.example".try_into().unwrap())],
            false,
        );
        assert_eq!(
            Principal::from_cert_der(&dns_only, TD),
            Err(PrincipalError::NoSpiffeId)
        );
        let two = cert_with(
            vec![uri(&ours), uri(&format!("spiffe://{TD}/tenant/t"))],
            false,
        );
        assert_eq!(
            Principal::from_cert_der(&two, TD),
            Err(PrincipalError::MultipleUris(2))
        );
        let other_td = cert_with(vec![uri("spiffe://evil.example/operator/ops")], false);
        assert!(matches!(
            Principal::from_cert_der(&other_td, TD),
            Err(PrincipalError::WrongTrustDomain { .. })
        ));
        let https = cert_with(vec![uri("https://node1.example/operator/ops")], false);
        assert!(matches!(
            Principal::from_cert_der(&https, TD),
            Err(PrincipalError::NotSpiffe(_))
        ));
        let ca = cert_with(vec![uri(&ours)], true);
        assert_eq!(
            Principal::from_cert_der(&ca, TD),
            Err(PrincipalError::CaCertificate)
        );
        let good = cert_with(vec![uri(&ours)], false);
        let mut trailing = good.clone();
        trailing.push(0);
        assert!(matches!(
            Principal::from_cert_der(&trailing, TD),
            Err(PrincipalError::BadCertificate(_))
        ));
        assert!(matches!(
            Principal::from_cert_der(&good[..good.len() / 2], TD),
            Err(PrincipalError::BadCertificate(_))
        ));
        assert!(matches!(
            Principal::from_cert_der(b"not a certificate", TD),
            Err(PrincipalError::BadCertificate(_))
        ));
        assert!(Principal::from_cert_der(&good, TD).is_ok());
    }
}
