//! Every rule feature: containment and groups, node and operator requirements, tenant rules,
//! `home`, audit vs enforce, exemptions, deny by default, unknown inputs.

mod common;
use common::*;
use policy::{decide, AttestationStatus, Attribute, Destination, Mode, Policy, Verdict};

const HEAD: &str = r#"
[policy]
name = "t"
format = 1
version = 1

[classifications]
order = ["public", "internal", "confidential", "restricted"]

[groups]
eu = ["DE", "FR"]
south = ["IN-TS", "IN-KA"]

[[tenants]]
id = "acme"
home = "IN-KA"

[[tenants]]
id = "eurocorp"
home = "FR"

[[endpoints]]
id = "cp"
jurisdiction = "SG"
cidrs = ["10.0.0.0/24", "fd00::/64"]
hosts = ["cp.example.sg"]

[[endpoints]]
id = "in-store"
jurisdiction = "IN-TS"
cidrs = ["10.1.0.0/24"]

[[endpoints]]
id = "de-store"
jurisdiction = "DE"
cidrs = ["10.2.0.0/24", "2001:db8:2::/48"]
"#;

fn with_rules(rules: &str) -> Policy {
    load(&format!("{HEAD}\n{rules}"))
}

#[test]
fn containment_country_contains_subdivision_not_the_reverse() {
    let p = with_rules(
        r#"
[[rules]]
id = "country"
actions = ["place"]
classification = "internal"
allow_in = ["IN"]

[[rules]]
id = "state"
actions = ["place"]
classification = "confidential"
allow_in = ["IN-TS"]
"#,
    );
    let ok =
        |class: &str, jur: &str| decide(&p, &place("x", "d", class, good_node("n", jur))).allowed;
    assert!(ok("internal", "IN"));
    assert!(ok("internal", "IN-TS"));
    assert!(ok("internal", "IN-TG"), "retired code is an alias of IN-TS");
    assert!(!ok("internal", "SG"));
    assert!(ok("confidential", "IN-TS"));
    assert!(
        !ok("confidential", "IN"),
        "a node only known to be in IN is not known to be in IN-TS"
    );
    assert!(!ok("confidential", "IN-KA"));
}

#[test]
fn groups_expand_to_their_members() {
    let p = with_rules(
        r#"
[[rules]]
id = "eu-and-south"
actions = ["place"]
classification = "internal"
allow_in = ["eu", "south"]
"#,
    );
    let ok = |jur: &str| decide(&p, &place("x", "d", "internal", good_node("n", jur))).allowed;
    assert!(ok("DE") && ok("FR-75C") && ok("IN-KA") && ok("IN-TS"));
    assert!(!ok("IN") && !ok("IN-MH") && !ok("IT"));
    let d = decide(&p, &place("x", "d", "internal", good_node("n", "IT")));
    assert_eq!(d.reasons[0].expected, "eu, south");
}

#[test]
fn node_requirements_each_fail_with_their_own_reason() {
    let p = with_rules(
        r#"
[[rules]]
id = "strict"
actions = ["place", "store"]
classification = "restricted"
allow_in = ["IN"]

[rules.node]
attestation = "affirming"
max_evidence_age = "1h"
confidential_computing = true
min_image_version = "2.1"
facilities = ["hyd-1"]
"#,
    );
    let mut n = good_node("gpu-9", "IN-TS");
    n.facility = "hyd-1".into();
    n.image_version = Some("2.1.0".into());
    n.evidence_age_s = Some(3600);
    assert!(decide(&p, &place("x", "d", "restricted", n.clone())).allowed);
    assert!(decide(&p, &store("x", "a", "restricted", n.clone())).allowed);

    let mut bad = n.clone();
    bad.jurisdiction = "US".into();
    bad.attestation = AttestationStatus::Warning;
    bad.evidence_age_s = Some(3601);
    bad.cc_mode = false;
    bad.image_version = Some("2.0.9".into());
    bad.facility = "nyc-1".into();
    let d = decide(&p, &place("x", "d", "restricted", bad));
    assert!(!d.allowed);
    let attrs: Vec<Attribute> = d.reasons.iter().map(|r| r.attribute).collect();
    assert_eq!(
        attrs,
        vec![
            Attribute::Jurisdiction,
            Attribute::Attestation,
            Attribute::EvidenceAge,
            Attribute::ConfidentialComputing,
            Attribute::ImageVersion,
            Attribute::Facility
        ]
    );
    assert!(d.reasons.iter().all(|r| r.verdict == Verdict::Denied));
    assert_eq!(
        sentences(&d)[1..],
        [
            "denied: dataset d is restricted; node gpu-9 attestation is warning, rule strict requires affirming",
            "denied: dataset d is restricted; node gpu-9 evidence age is 3601s, rule strict requires at most 1h",
            "denied: dataset d is restricted; node gpu-9 confidential-computing mode is off, rule strict requires on",
            "denied: dataset d is restricted; node gpu-9 image version is 2.0.9, rule strict requires at least 2.1",
            "denied: dataset d is restricted; node gpu-9 facility is nyc-1, rule strict requires one of hyd-1",
        ]
    );

    // A node with no attestation at all: the reasons say so instead of printing sentinels.
    let mut unattested = n.clone();
    unattested.evidence_age_s = None;
    unattested.image_version = None;
    let d = decide(&p, &place("x", "d", "restricted", unattested));
    assert_eq!(
        sentences(&d),
        [
            "denied: dataset d is restricted; node gpu-9 evidence age is unknown (no evidence), rule strict requires at most 1h",
            "denied: dataset d is restricted; node gpu-9 image version is unknown (none attested), rule strict requires at least 2.1",
        ]
    );

    // Each requirement alone is enough to deny.
    type Mutation = Box<dyn Fn(&mut policy::Node)>;
    let variants: Vec<Mutation> = vec![
        Box::new(|n| n.attestation = AttestationStatus::None),
        Box::new(|n| n.evidence_age_s = Some(7200)),
        Box::new(|n| n.cc_mode = false),
        Box::new(|n| n.image_version = Some("2.0".into())),
        Box::new(|n| n.image_version = Some("2.1.0-rc1".into())),
        Box::new(|n| n.facility = String::new()),
        Box::new(|n| n.jurisdiction = "in".into()),
    ];
    for (i, v) in variants.iter().enumerate() {
        let mut m = n.clone();
        v(&mut m);
        let d = decide(&p, &place("x", "d", "restricted", m));
        assert!(!d.allowed, "variant {i}");
        assert_eq!(d.reasons.len(), 1, "variant {i}: {}", d.explain());
    }
}

#[test]
fn tenant_rules_override_general_rules_and_home_resolves_per_tenant() {
    let p = with_rules(
        r#"
[[rules]]
id = "general"
actions = ["place"]
classification = "confidential"
allow_in = ["IN"]

[[rules]]
id = "eurocorp-in-eu"
tenants = ["eurocorp"]
actions = ["place"]
classification = "confidential"
allow_in = ["eu"]

[[rules]]
id = "restricted-at-home"
actions = ["place"]
classification = "restricted"
allow_in = ["home"]
"#,
    );
    let d = decide(
        &p,
        &place("eurocorp", "d", "confidential", good_node("n", "DE")),
    );
    assert!(d.allowed);
    assert_eq!(d.matched_rules, vec!["eurocorp-in-eu"]);
    assert!(
        !decide(
            &p,
            &place("eurocorp", "d", "confidential", good_node("n", "IN"))
        )
        .allowed
    );
    let d = decide(
        &p,
        &place("acme", "d", "confidential", good_node("n", "IN")),
    );
    assert!(d.allowed);
    assert_eq!(d.matched_rules, vec!["general"]);

    // home: acme is at home in IN-KA, eurocorp in FR; undeclared tenants have no home.
    assert!(
        decide(
            &p,
            &place("acme", "d", "restricted", good_node("n", "IN-KA"))
        )
        .allowed
    );
    assert!(
        !decide(
            &p,
            &place("acme", "d", "restricted", good_node("n", "IN-TS"))
        )
        .allowed
    );
    assert!(
        decide(
            &p,
            &place("eurocorp", "d", "restricted", good_node("n", "FR-75C"))
        )
        .allowed
    );
    let d = decide(
        &p,
        &place("stranger", "d", "restricted", good_node("n", "IN-KA")),
    );
    assert!(!d.allowed);
    assert_eq!(d.reasons[0].expected, "home (tenant not declared)");
}

#[test]
fn classification_forms_and_ranges() {
    let p = with_rules(
        r#"
[[rules]]
id = "low"
actions = ["place"]
classification_at_most = "internal"
allow_in = ["*"]

[[rules]]
id = "mid-high"
actions = ["place"]
classifications = ["confidential", "restricted"]
allow_in = ["IN"]
"#,
    );
    let rule_of = |c: &str| decide(&p, &place("x", "d", c, good_node("n", "IN"))).matched_rules;
    assert_eq!(rule_of("public"), vec!["low"]);
    assert_eq!(rule_of("internal"), vec!["low"]);
    assert_eq!(rule_of("confidential"), vec!["mid-high"]);
    assert_eq!(rule_of("restricted"), vec!["mid-high"]);
}

#[test]
fn audit_mode_allows_and_reports_enforce_denies() {
    let rules = |mode: &str| {
        format!(
            r#"
[[rules]]
id = "r"
actions = ["place", "egress"]
classification = "internal"
allow_in = ["IN"]
mode = "{mode}"
"#
        )
    };
    let enforce = with_rules(&rules("enforce"));
    let audit = with_rules(&rules("audit"));
    let req = place("x", "d", "internal", good_node("n", "SG"));

    let d = decide(&enforce, &req);
    assert!(!d.allowed && !d.violation && d.mode == Mode::Enforce);
    assert_eq!(d.reasons[0].verdict, Verdict::Denied);

    let d = decide(&audit, &req);
    assert!(d.allowed && d.violation && d.mode == Mode::Audit);
    assert_eq!(d.reasons[0].verdict, Verdict::AuditViolation);
    assert!(sentences(&d)[0].starts_with("audit violation (allowed in audit mode): "));

    // Compliant requests are plain allows in audit mode.
    let d = decide(&audit, &place("x", "d", "internal", good_node("n", "IN")));
    assert!(d.allowed && !d.violation);
    assert_eq!(d.reasons[0].verdict, Verdict::Allowed);
}

#[test]
fn exemptions_allow_named_endpoints_only() {
    let p = with_rules(
        r#"
[[rules]]
id = "restricted-egress"
actions = ["egress"]
classification = "restricted"
allow_in = ["IN"]
exempt_endpoints = ["cp"]
"#,
    );
    let e = |d: Destination| decide(&p, &egress("x", "restricted", d));
    // cp is in SG but exempt, by id, address (v4 and v6) and host name.
    for dest in [
        Destination::Endpoint("cp".into()),
        addr("10.0.0.7"),
        addr("fd00::1"),
        Destination::Host("CP.example.sg.".into()),
    ] {
        let d = e(dest.clone());
        assert!(d.allowed, "{dest:?}");
        assert_eq!(d.reasons[0].attribute, Attribute::Exemption);
    }
    assert_eq!(
        sentences(&e(addr("10.0.0.7")))[0],
        "allowed: data wl-1 is restricted; endpoint cp (10.0.0.7) is exempt under rule restricted-egress"
    );
    assert!(e(addr("10.1.0.9")).allowed, "in-store is in IN-TS");
    assert!(!e(addr("10.2.0.9")).allowed, "de-store is in DE");
    assert!(
        e(addr("::ffff:10.1.0.9")).allowed,
        "IPv4-mapped IPv6 is the IPv4 address"
    );
    let d = e(addr("192.0.2.1"));
    assert!(
        !d.allowed,
        "undeclared addresses are in no known jurisdiction"
    );
    assert_eq!(
        sentences(&d)[0],
        "denied: data wl-1 is restricted; destination 192.0.2.1 is in an unknown jurisdiction, rule restricted-egress allows only IN"
    );
    assert!(!e(Destination::Endpoint("nope".into())).allowed);
    assert!(!e(Destination::Host("evil.example".into())).allowed);
}

#[test]
fn anywhere_admits_unknown_destinations() {
    let p = with_rules(
        r#"
[[rules]]
id = "public"
actions = ["egress"]
classification = "public"
allow_in = ["*"]
"#,
    );
    assert!(decide(&p, &egress("x", "public", addr("192.0.2.1"))).allowed);
    assert!(
        decide(
            &p,
            &egress("x", "public", Destination::Host("anything.example".into()))
        )
        .allowed
    );
}

#[test]
fn operator_access_nationality_and_clearance() {
    let p = with_rules(
        r#"
[[rules]]
id = "ops"
actions = ["operator-access"]
classification_at_least = "internal"
allow_in = ["IN"]

[rules.operator]
min_clearance = "data"

[[rules]]
id = "ops-public"
actions = ["operator-access"]
classification = "public"
allow_in = ["*"]

[rules.operator]
min_clearance = "internal"
"#,
    );
    let ok =
        |class: &str, nat: &str, clr: &str| decide(&p, &operator("x", class, nat, clr)).allowed;
    assert!(ok("confidential", "IN", "confidential"));
    assert!(ok("confidential", "IN", "restricted"));
    assert!(!ok("confidential", "IN", "internal"));
    assert!(!ok("confidential", "SG", "restricted"));
    assert!(!ok("confidential", "IN", "top-secret"));
    assert!(ok("public", "SG", "internal"));
    assert!(!ok("public", "SG", "public"));
    let d = decide(&p, &operator("x", "restricted", "SG", "restricted"));
    assert_eq!(
        sentences(&d)[0],
        "denied: resource res-1 is restricted; operator op-asha is a national of SG, rule ops allows only IN"
    );
}

#[test]
fn deny_by_default_says_so() {
    let p = with_rules(
        r#"
[[rules]]
id = "only-place"
actions = ["place"]
classification = "public"
allow_in = ["*"]
"#,
    );
    let d = decide(&p, &store("acme", "model", "public", good_node("n", "IN")));
    assert!(!d.allowed);
    assert!(d.matched_rules.is_empty());
    assert_eq!(d.reasons[0].attribute, Attribute::NoRule);
    assert_eq!(
        sentences(&d),
        vec!["denied: artifact model is public; no rule covers store of public data for tenant acme (deny by default)"]
    );
    // An unknown classification is denied, not an error.
    let d = decide(&p, &place("acme", "d", "secret", good_node("n", "IN")));
    assert!(!d.allowed);
    assert_eq!(
        sentences(&d),
        vec!["denied: dataset d is secret; classification 'secret' is not defined by the policy (defined: public, internal, confidential, restricted)"]
    );
    // A policy without rules denies everything.
    let empty = with_rules("");
    assert!(!decide(&empty, &place("acme", "d", "public", good_node("n", "IN"))).allowed);
}

#[test]
fn agreeing_overlaps_are_accepted_and_both_reported() {
    let p = with_rules(
        r#"
[[rules]]
id = "a"
actions = ["place", "store"]
classification = "internal"
allow_in = ["IN"]

[[rules]]
id = "b"
actions = ["store"]
classification_at_least = "internal"
allow_in = ["IN-TS", "IN"]
"#,
    );
    let d = decide(&p, &store("x", "a", "internal", good_node("n", "IN-KA")));
    assert!(d.allowed);
    assert_eq!(d.matched_rules, vec!["a", "b"]);
}

#[test]
fn decisions_are_deterministic_and_round_trip_through_json() {
    let p = load(INDIA);
    let req = place("kyc-bank", "ekyc", "restricted", good_node("n", "US"));
    let a = decide(&p, &req);
    let b = decide(&p, &req);
    assert_eq!(a, b);
    let json = serde_json::to_string(&a).unwrap();
    assert_eq!(serde_json::to_string(&b).unwrap(), json);
    let back: policy::Decision = serde_json::from_str(&json).unwrap();
    assert_eq!(back, a);
    assert!(json.contains("\"policy_digest\":\"sha256:"));
    // Requests round-trip too (the `explain --request` file format).
    let rj = serde_json::to_string(&req).unwrap();
    assert!(rj.starts_with("{\"action\":\"place\""));
    assert_eq!(serde_json::from_str::<policy::Request>(&rj).unwrap(), req);
}
