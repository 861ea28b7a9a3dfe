//! Property tests: the loader never panics on arbitrary input, `decide` never panics on
//! arbitrary requests, and the compiled egress allow-list matches `decide` exactly.

mod common;
use common::*;
use policy::{compile_egress, decide, AttestationStatus, Data, Destination, Node, Policy, Request};
use proptest::prelude::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

const PLACES: [&str; 8] = ["IN", "IN-TS", "IN-KA", "DE", "FR", "US", "SG", "eu"];
const CLASSES: [&str; 3] = ["public", "internal", "restricted"];

fn toml_fragment() -> impl Strategy<Value = String> {
    // Pieces of real policy syntax, shuffled and cut, reach deeper than random bytes.
    let piece = prop::sample::select(vec![
        "[policy]\n",
        "name = \"p\"\n",
        "format = 1\n",
        "version = 2\n",
        "[classifications]\n",
        "order = [\"a\", \"b\"]\n",
        "[groups]\n",
        "eu = [\"DE\", \"FR\"]\n",
        "[[tenants]]\n",
        "id = \"t\"\n",
        "home = \"IN-TS\"\n",
        "[[endpoints]]\n",
        "jurisdiction = \"SG\"\n",
        "cidrs = [\"10.0.0.0/8\"]\n",
        "hosts = [\"x.example\"]\n",
        "[[rules]]\n",
        "id = \"r\"\n",
        "actions = [\"place\", \"egress\"]\n",
        "classification = \"a\"\n",
        "classifications = [\"a\", \"b\"]\n",
        "classification_at_least = \"b\"\n",
        "allow_in = [\"eu\", \"home\", \"*\"]\n",
        "tenants = [\"t\"]\n",
        "mode = \"audit\"\n",
        "exempt_endpoints = [\"e\"]\n",
        "[rules.node]\n",
        "attestation = \"affirming\"\n",
        "max_evidence_age = \"24h\"\n",
        "min_image_version = \"1.2\"\n",
        "[rules.operator]\n",
        "min_clearance = \"data\"\n",
        "= \n",
        "\"\n",
        "[[",
        "]]",
        "x = { a = [1, {b = 2}] }\n",
        "é\u{0}\t\r\n",
    ]);
    prop::collection::vec(piece, 0..40).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn loader_never_panics_on_arbitrary_strings(s in "\\PC{0,400}") {
        let _ = Policy::from_toml_str(&s);
    }

    #[test]
    fn loader_never_panics_on_policy_like_text(s in toml_fragment()) {
        if let Err(errs) = Policy::from_toml_str(&s) {
            prop_assert!(!errs.is_empty());
            for e in errs {
                prop_assert!(!e.message.is_empty());
            }
        }
    }

    #[test]
    fn decide_never_panics_on_arbitrary_requests(
        tenant in "\\PC{0,12}", class in "\\PC{0,12}", jur in "\\PC{0,8}", ver in "\\PC{0,10}",
        age in any::<u64>(), ip in any::<u128>(), host in "\\PC{0,20}", pick in 0u8..4,
    ) {
        let p = load(INDIA);
        let node = Node {
            id: "n".into(), jurisdiction: jur.clone(), facility: String::new(),
            attestation: AttestationStatus::Warning, evidence_age_s: Some(age), cc_mode: age % 2 == 0,
            image_version: Some(ver),
        };
        let data = Data::new("d", class);
        let reqs = [
            Request::Place { tenant: tenant.clone(), dataset: data.clone(), node: node.clone() },
            Request::Store { tenant: tenant.clone(), artifact: data.clone(), node },
            Request::Egress { tenant: tenant.clone(), data: data.clone(), destination: match pick {
                0 => Destination::Address(IpAddr::V6(Ipv6Addr::from(ip))),
                1 => Destination::Address(IpAddr::V4(Ipv4Addr::from(ip as u32))),
                2 => Destination::Host(host.clone()),
                _ => Destination::Endpoint(host.clone()),
            }},
            policy::Request::OperatorAccess { tenant, resource: data, operator: policy::Operator {
                id: "o".into(), nationality: jur, clearance: host } },
        ];
        for r in &reqs {
            let d = decide(&p, r);
            prop_assert!(!d.reasons.is_empty());
            for reason in &d.reasons {
                prop_assert!(!reason.to_string().is_empty());
            }
        }
    }
}

#[derive(Debug, Clone)]
struct GenEndpoint {
    place: usize,
    v4: bool,
    v6: bool,
}

#[derive(Debug, Clone)]
struct GenRule {
    allow: Vec<usize>,
    anywhere: bool,
    home: bool,
    exempt: Vec<usize>,
    audit: bool,
    tenant_only: bool,
}

/// A random policy: endpoints `e{i}` own 10.i.0.0/16 and 2001:db8:i::/48, one egress rule per
/// classification (some tenant-specific), random allowed places, exemptions and modes.
fn policy_text(endpoints: &[GenEndpoint], rules: &[GenRule]) -> String {
    let mut s = String::from(
        "[policy]\nname = \"gen\"\nformat = 1\nversion = 1\n[classifications]\norder = [\"public\", \"internal\", \"restricted\"]\n[groups]\neu = [\"DE\", \"FR\"]\n[[tenants]]\nid = \"t\"\nhome = \"IN-KA\"\n",
    );
    for (i, e) in endpoints.iter().enumerate() {
        let mut cidrs = Vec::new();
        if e.v4 {
            cidrs.push(format!("\"10.{i}.0.0/16\""));
        }
        if e.v6 || !e.v4 {
            cidrs.push(format!("\"2001:db8:{i:x}::/48\""));
        }
        s += &format!(
            "[[endpoints]]\nid = \"e{i}\"\njurisdiction = \"{}\"\ncidrs = [{}]\n",
            if PLACES[e.place] == "eu" {
                "DE"
            } else {
                PLACES[e.place]
            },
            cidrs.join(", ")
        );
    }
    for (ci, r) in rules.iter().enumerate() {
        let mut allow: Vec<String> = if r.anywhere {
            vec!["\"*\"".into()]
        } else {
            let mut a: Vec<String> = r
                .allow
                .iter()
                .map(|p| format!("\"{}\"", PLACES[*p]))
                .collect();
            a.sort();
            a.dedup();
            a
        };
        if r.home && !r.anywhere {
            allow.push("\"home\"".into());
        }
        let exempt: Vec<String> = r
            .exempt
            .iter()
            .filter(|e| **e < endpoints.len())
            .map(|e| format!("\"e{e}\""))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        s += &format!(
            "[[rules]]\nid = \"r{ci}\"\nactions = [\"egress\"]\nclassification = \"{}\"\nallow_in = [{}]\nmode = \"{}\"\n",
            CLASSES[ci],
            allow.join(", "),
            if r.audit { "audit" } else { "enforce" }
        );
        if r.tenant_only {
            s += "tenants = [\"t\"]\n";
        }
        if !exempt.is_empty() {
            s += &format!("exempt_endpoints = [{}]\n", exempt.join(", "));
        }
    }
    s
}

fn gen_endpoint() -> impl Strategy<Value = GenEndpoint> {
    (0..PLACES.len(), any::<bool>(), any::<bool>()).prop_map(|(place, v4, v6)| GenEndpoint {
        place,
        v4,
        v6,
    })
}

fn gen_rule() -> impl Strategy<Value = GenRule> {
    (
        prop::collection::vec(0..PLACES.len(), 0..4),
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.2),
        prop::collection::vec(0usize..8, 0..3),
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.3),
    )
        .prop_map(
            |(allow, anywhere, home, exempt, audit, tenant_only)| GenRule {
                allow,
                anywhere,
                home,
                exempt,
                audit,
                tenant_only,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// An address is in the compiled allow-list iff `decide(egress)` allows it.
    #[test]
    fn egress_allow_list_matches_decide(
        endpoints in prop::collection::vec(gen_endpoint(), 0..8),
        rules in prop::collection::vec(gen_rule(), 0..=3),
        probes in prop::collection::vec((0usize..10, any::<u32>(), any::<u128>(), 0u8..4), 1..40),
    ) {
        let text = policy_text(&endpoints, &rules);
        let p = match Policy::from_toml_str(&text) {
            Ok(p) => p,
            Err(e) => return Err(TestCaseError::fail(format!("generated policy invalid: {e:?}\n{text}"))),
        };
        for tenant in ["t", "other"] {
            for class in CLASSES.iter().chain(["unknown"].iter()) {
                let list = compile_egress(&p, tenant, class);
                for (ep, r32, r128, kind) in &probes {
                    // Inside endpoint `ep` when it exists (v4 or v6), or anywhere at random.
                    let ip: IpAddr = match kind {
                        0 => IpAddr::V4(Ipv4Addr::new(10, *ep as u8, (r32 >> 8) as u8, *r32 as u8)),
                        1 => IpAddr::V6(Ipv6Addr::from((0x2001_0db8u128 << 96) | ((*ep as u128) << 80) | (r128 & ((1u128 << 80) - 1)))),
                        2 => IpAddr::V6(Ipv4Addr::new(10, *ep as u8, 0, *r32 as u8).to_ipv6_mapped()),
                        _ => if r32 % 2 == 0 { IpAddr::V4(Ipv4Addr::from(*r32)) } else { IpAddr::V6(Ipv6Addr::from(*r128)) },
                    };
                    let d = decide(&p, &egress(tenant, class, Destination::Address(ip)));
                    prop_assert_eq!(
                        list.permits(ip), d.allowed,
                        "tenant {} class {} ip {}: list {:?} decision {}\n{}", tenant, class, ip, list.cidrs, d.explain(), text
                    );
                }
            }
        }
    }
}

#[test]
fn egress_list_of_the_india_example() {
    let p = load(INDIA);
    let l = compile_egress(&p, "vaani-speech", "restricted");
    assert_eq!(l.rules, vec!["restricted-stays-in-india"]);
    let cidrs: Vec<String> = l.cidrs.iter().map(|c| c.to_string()).collect();
    assert_eq!(
        cidrs,
        [
            "10.40.0.0/16",
            "10.41.0.0/16",
            "10.42.0.0/16",
            "fd40::/48",
            "fd41::/48",
            "fd42::/48"
        ]
    );
    assert_eq!(l.ipv4().count(), 3);
    assert_eq!(l.ipv6().count(), 3);
    assert!(l.hosts.contains(&"cp.hyd.sovereign.example.in".to_string()));
    // EU tenant: Frankfurt store plus the exempt Indian control plane.
    let l = compile_egress(&p, "berlin-radiology", "confidential");
    let cidrs: Vec<String> = l.cidrs.iter().map(|c| c.to_string()).collect();
    assert_eq!(
        cidrs,
        [
            "10.40.0.0/16",
            "192.0.2.0/24",
            "2001:db8:fa::/48",
            "fd40::/48"
        ]
    );
    // Public: everything. Unknown classification: nothing.
    let l = compile_egress(&p, "vaani-speech", "public");
    assert_eq!(l.cidrs.len(), 2);
    assert!(l.permits("8.8.8.8".parse().unwrap()));
    assert!(compile_egress(&p, "vaani-speech", "secret")
        .cidrs
        .is_empty());
}
