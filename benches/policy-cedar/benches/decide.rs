//! Decision latency: a generated policy of 200 rules over 50 jurisdictions, 10,000 placement
//! requests, decided by this crate and, side by side, by the same rules written as Cedar
//! policies (cedar-policy, bench only). Both engines must agree on every request.
//!
//! Run: `cargo bench -p policy --bench decide`. Besides criterion's figures it prints the
//! per-decision p50/p99 of both engines over the 10,000 requests and their ratio.
//!
//! Cedar gets every advantage: its requests (with context) are built before timing, and it
//! sees only the `place` rules; this crate decides from the plain `Request` structs `hostd`
//! builds, and returns reasons.

use cedar_policy::{
    Authorizer, Context, Decision as CedarDecision, Entities, EntityUid, PolicySet,
    Request as CedarRequest, RestrictedExpression,
};
use criterion::{black_box, criterion_group, Criterion};
use policy::{
    decide, Action, AttestationStatus, Data, Jurisdiction, Node, Policy, Request, Version,
};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

const RULES: usize = 200;
const REQUESTS: usize = 10_000;
const CLASSES: usize = 8;
const TENANTS_WITH_RULES: usize = 44;
const TENANTS: usize = 50;

/// 45 countries and 5 Indian states: 50 jurisdictions.
const JURISDICTIONS: [&str; 50] = [
    "IN", "DE", "FR", "NL", "BE", "IT", "ES", "PT", "AT", "PL", "SE", "FI", "DK", "IE", "CZ", "US",
    "CA", "MX", "BR", "AR", "GB", "NO", "CH", "JP", "KR", "SG", "MY", "TH", "VN", "ID", "AU", "NZ",
    "ZA", "NG", "KE", "EG", "AE", "SA", "IL", "TR", "BD", "LK", "NP", "PK", "CN", "IN-TS", "IN-KA",
    "IN-MH", "IN-TN", "IN-DL",
];

/// Deterministic xorshift, so the bench set is the same on every run.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, pct: u64) -> bool {
        self.next() % 100 < pct
    }
}

fn allow_list(rng: &mut Rng) -> Vec<String> {
    if rng.chance(5) {
        return vec!["*".into()];
    }
    let mut v: Vec<String> = Vec::new();
    if rng.chance(60) {
        v.push(["eu", "asia", "americas", "india-south"][rng.below(4)].to_string());
    }
    for _ in 0..2 + rng.below(8) {
        v.push(JURISDICTIONS[rng.below(JURISDICTIONS.len())].to_string());
    }
    v.sort();
    v.dedup();
    v
}

fn node_block(rng: &mut Rng) -> String {
    let mut s = String::from("[rules.node]\n");
    if rng.chance(70) {
        s += "attestation = \"affirming\"\n";
    } else if rng.chance(50) {
        s += "attestation = \"warning\"\n";
    }
    if rng.chance(60) {
        s += &format!("max_evidence_age = \"{}h\"\n", 12 + rng.below(48));
    }
    if rng.chance(30) {
        s += "confidential_computing = true\n";
    }
    if rng.chance(50) {
        s += &format!("min_image_version = \"1.{}.0\"\n", rng.below(6));
    }
    s
}

fn quoted(v: &[String]) -> String {
    v.iter()
        .map(|x| format!("\"{x}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The bench policy: 24 general rules (per classification: place+store, egress,
/// operator-access) and 176 tenant rules (44 tenants x 4 classification pairs, place).
fn bench_policy() -> String {
    let mut rng = Rng(0x5eed_1234_abcd_ef01);
    let mut s = String::from(
        "[policy]\nname = \"bench\"\nformat = 1\nversion = 1\n[classifications]\norder = [",
    );
    s += &(0..CLASSES)
        .map(|c| format!("\"c{c}\""))
        .collect::<Vec<_>>()
        .join(", ");
    s += "]\n[groups]\n";
    s += "eu = [\"DE\", \"FR\", \"NL\", \"BE\", \"IT\", \"ES\", \"PT\", \"AT\", \"PL\", \"SE\", \"FI\", \"DK\", \"IE\", \"CZ\"]\n";
    s +=
        "asia = [\"JP\", \"KR\", \"SG\", \"MY\", \"TH\", \"VN\", \"ID\", \"BD\", \"LK\", \"NP\"]\n";
    s += "americas = [\"US\", \"CA\", \"MX\", \"BR\", \"AR\"]\n";
    s += "india-south = [\"IN-TS\", \"IN-KA\", \"IN-TN\"]\n";
    for t in 0..TENANTS {
        let _ = write!(
            s,
            "[[tenants]]\nid = \"t{t}\"\nhome = \"{}\"\n",
            JURISDICTIONS[t % 50]
        );
    }
    let _ = write!(
        s,
        "[[endpoints]]\nid = \"cp\"\njurisdiction = \"IN-TS\"\ncidrs = [\"10.0.0.0/16\"]\n"
    );
    let mut n = 0;
    for c in 0..CLASSES {
        let _ = write!(
            s,
            "[[rules]]\nid = \"g{c}-place\"\nactions = [\"place\", \"store\"]\nclassification = \"c{c}\"\nallow_in = [{}]\n{}",
            quoted(&allow_list(&mut rng)),
            node_block(&mut rng)
        );
        let _ = write!(
            s,
            "[[rules]]\nid = \"g{c}-egress\"\nactions = [\"egress\"]\nclassification = \"c{c}\"\nallow_in = [{}]\nexempt_endpoints = [\"cp\"]\n",
            quoted(&allow_list(&mut rng))
        );
        let _ = write!(
            s,
            "[[rules]]\nid = \"g{c}-ops\"\nactions = [\"operator-access\"]\nclassification = \"c{c}\"\nallow_in = [{}]\n[rules.operator]\nmin_clearance = \"data\"\n",
            quoted(&allow_list(&mut rng))
        );
        n += 3;
    }
    for t in 0..TENANTS_WITH_RULES {
        for pair in 0..CLASSES / 2 {
            let _ = write!(
                s,
                "[[rules]]\nid = \"t{t}-p{pair}\"\ntenants = [\"t{t}\"]\nactions = [\"place\"]\nclassifications = [\"c{}\", \"c{}\"]\nallow_in = [{}]\n{}",
                2 * pair,
                2 * pair + 1,
                quoted(&allow_list(&mut rng)),
                node_block(&mut rng)
            );
            n += 1;
        }
    }
    assert_eq!(n, RULES);
    s
}

fn bench_requests() -> Vec<Request> {
    let mut rng = Rng(0xdec1_5105_0000_0001);
    (0..REQUESTS)
        .map(|i| Request::Place {
            tenant: format!("t{}", rng.below(TENANTS)),
            dataset: Data::new(format!("ds-{i}"), format!("c{}", rng.below(CLASSES))),
            node: Node {
                id: format!("gpu-{}", rng.below(500)),
                jurisdiction: JURISDICTIONS[rng.below(JURISDICTIONS.len())].to_string(),
                facility: "dc-1".into(),
                attestation: if rng.chance(95) {
                    AttestationStatus::Affirming
                } else {
                    AttestationStatus::Warning
                },
                evidence_age_s: rng.next() % (24 * 3600),
                cc_mode: rng.chance(90),
                image_version: format!("1.{}.{}", rng.below(7), rng.below(10)),
            },
        })
        .collect()
}

// ---- Cedar translation of the place rules ----

fn version_number(v: &Version) -> i64 {
    (v.0[0] as i64) * 1_000_000 + (v.0[1] as i64) * 1_000 + v.0[2] as i64
}

fn cedar_set(items: &[String]) -> String {
    format!("[{}]", quoted(items))
}

/// One Cedar `permit` per (rule, classification) cell of `place`, so that "the tenant's own
/// rules replace the general ones" becomes an explicit exclusion list per cell.
fn to_cedar(p: &Policy) -> String {
    let mut out = String::new();
    for c in 0..p.classifications.len() {
        let class = &p.classifications[c];
        let overriding: Vec<String> = p
            .rules
            .iter()
            .filter(|r| r.has_action(Action::Place) && r.has_class(c))
            .filter_map(|r| r.tenants.clone())
            .flatten()
            .collect();
        for r in p
            .rules
            .iter()
            .filter(|r| r.has_action(Action::Place) && r.has_class(c))
        {
            let mut conds = vec![format!("context.class == \"{class}\"")];
            match &r.tenants {
                // Tenant rules scope the principal, which Cedar checks before the condition.
                Some(ts) if ts.len() == 1 => {}
                Some(ts) => conds.push(format!("{}.contains(context.tenant)", cedar_set(ts))),
                None if !overriding.is_empty() => conds.push(format!(
                    "!{}.contains(context.tenant)",
                    cedar_set(&overriding)
                )),
                None => {}
            }
            if !r.allow.is_anywhere() {
                let countries: Vec<String> = r
                    .allow
                    .members()
                    .iter()
                    .filter(|j| j.is_country())
                    .map(|j| j.to_string())
                    .collect();
                let subs: Vec<String> = r
                    .allow
                    .members()
                    .iter()
                    .filter(|j| !j.is_country())
                    .map(|j| j.to_string())
                    .collect();
                conds.push(format!(
                    "({}.contains(context.country) || {}.contains(context.jurisdiction))",
                    cedar_set(&countries),
                    cedar_set(&subs)
                ));
            }
            let n = &r.node;
            if let Some(a) = n.attestation {
                conds.push(format!("context.attestation >= {}", a as i64));
            }
            if let Some((max, _)) = &n.max_evidence_age {
                conds.push(format!("context.evidence_age <= {max}"));
            }
            if n.confidential_computing {
                conds.push("context.cc".into());
            }
            if let Some((v, _)) = &n.min_image_version {
                conds.push(format!("context.image_version >= {}", version_number(v)));
            }
            let principal = match &r.tenants {
                Some(ts) if ts.len() == 1 => format!("principal == Tenant::\"{}\"", ts[0]),
                _ => "principal".to_string(),
            };
            let _ = writeln!(
                out,
                "@id(\"{}:{class}\")\npermit({principal}, action == Action::\"place\", resource)\nwhen {{ {} }};",
                r.id,
                conds.join(" && ")
            );
        }
    }
    out
}

fn to_cedar_request(req: &Request) -> CedarRequest {
    let Request::Place {
        tenant,
        dataset,
        node,
    } = req
    else {
        unreachable!("bench uses place requests only")
    };
    let (country, jurisdiction) = match Jurisdiction::parse(&node.jurisdiction) {
        Ok(j) => (j.country().to_string(), j.to_string()),
        Err(_) => (String::new(), String::new()),
    };
    let version = Version::parse(&node.image_version)
        .map(|v| version_number(&v))
        .unwrap_or(-1);
    let ctx = Context::from_pairs([
        (
            "tenant".to_string(),
            RestrictedExpression::new_string(tenant.clone()),
        ),
        (
            "class".to_string(),
            RestrictedExpression::new_string(dataset.classification.clone()),
        ),
        (
            "country".to_string(),
            RestrictedExpression::new_string(country),
        ),
        (
            "jurisdiction".to_string(),
            RestrictedExpression::new_string(jurisdiction),
        ),
        (
            "attestation".to_string(),
            RestrictedExpression::new_long(node.attestation as i64),
        ),
        (
            "evidence_age".to_string(),
            RestrictedExpression::new_long(node.evidence_age_s as i64),
        ),
        (
            "cc".to_string(),
            RestrictedExpression::new_bool(node.cc_mode),
        ),
        (
            "image_version".to_string(),
            RestrictedExpression::new_long(version),
        ),
    ])
    .expect("cedar context");
    let principal: EntityUid = format!("Tenant::\"{tenant}\"").parse().expect("principal");
    let action: EntityUid = "Action::\"place\"".parse().expect("action");
    let resource: EntityUid = format!("Node::\"{}\"", node.id).parse().expect("resource");
    CedarRequest::new(principal, action, resource, ctx, None).expect("cedar request")
}

struct Setup {
    policy: Policy,
    requests: Vec<Request>,
    cedar: PolicySet,
    cedar_requests: Vec<CedarRequest>,
    entities: Entities,
    authorizer: Authorizer,
}

fn setup() -> Setup {
    let text = bench_policy();
    let policy = Policy::from_toml_str(&text).unwrap_or_else(|e| panic!("bench policy: {e:?}"));
    assert_eq!(policy.rules.len(), RULES);
    let used: std::collections::BTreeSet<Jurisdiction> = JURISDICTIONS
        .iter()
        .map(|j| Jurisdiction::parse(j).expect("bench jurisdiction"))
        .collect();
    assert_eq!(used.len(), 50);
    let requests = bench_requests();
    let cedar_text = to_cedar(&policy);
    let cedar: PolicySet = cedar_text.parse().expect("cedar policy set parses");
    let cedar_requests: Vec<CedarRequest> = requests.iter().map(to_cedar_request).collect();
    Setup {
        policy,
        requests,
        cedar,
        cedar_requests,
        entities: Entities::empty(),
        authorizer: Authorizer::new(),
    }
}

/// Both engines must agree on every request of the bench set.
fn check_agreement(s: &Setup) -> (usize, usize) {
    let mut allowed = 0;
    for (i, (r, cr)) in s.requests.iter().zip(&s.cedar_requests).enumerate() {
        let ours = decide(&s.policy, r).allowed;
        let theirs = s
            .authorizer
            .is_authorized(cr, &s.cedar, &s.entities)
            .decision()
            == CedarDecision::Allow;
        assert_eq!(
            ours,
            theirs,
            "engines disagree on request {i}: {r:?}\n{}",
            decide(&s.policy, r).explain()
        );
        allowed += ours as usize;
    }
    (allowed, s.requests.len() - allowed)
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// Times every decision individually (5 passes over the set), after a warm-up pass.
fn per_decision<F: FnMut(usize)>(n: usize, mut f: F) -> Vec<u64> {
    for i in 0..n {
        f(i);
    }
    let mut samples = Vec::with_capacity(n * 5);
    for _ in 0..5 {
        for i in 0..n {
            let t = Instant::now();
            f(i);
            samples.push(t.elapsed().as_nanos() as u64);
        }
    }
    samples.sort_unstable();
    samples
}

fn report(s: &Setup) {
    let (allowed, denied) = check_agreement(s);
    let ours = per_decision(s.requests.len(), |i| {
        black_box(decide(&s.policy, black_box(&s.requests[i])));
    });
    let cedar = per_decision(s.cedar_requests.len(), |i| {
        black_box(s.authorizer.is_authorized(
            black_box(&s.cedar_requests[i]),
            &s.cedar,
            &s.entities,
        ));
    });
    let timer = per_decision(1000, |_| {});
    let (o50, o99, c50, c99) = (
        percentile(&ours, 0.5),
        percentile(&ours, 0.99),
        percentile(&cedar, 0.5),
        percentile(&cedar, 0.99),
    );
    println!();
    println!(
        "bench set: {RULES} rules, {} jurisdictions, {} requests ({allowed} allowed, {denied} denied); engines agree on all",
        JURISDICTIONS.len(),
        s.requests.len()
    );
    println!("policy::decide       p50 {o50:>6} ns   p99 {o99:>6} ns");
    println!("cedar is_authorized  p50 {c50:>6} ns   p99 {c99:>6} ns");
    println!(
        "ratio cedar/policy   p50 {:.1}x   (timer overhead p50 {} ns, included in both)",
        c50 as f64 / o50.max(1) as f64,
        percentile(&timer, 0.5)
    );
    println!(
        "target p50 < 2000 ns: {}",
        if o50 < 2000 { "met" } else { "NOT MET" }
    );
    println!();
}

fn benches(c: &mut Criterion) {
    let s = setup();
    report(&s);
    let mut g = c.benchmark_group("decide");
    let mut i = 0usize;
    g.bench_function("policy", |b| {
        b.iter(|| {
            i = (i + 1) % s.requests.len();
            black_box(decide(&s.policy, black_box(&s.requests[i])))
        })
    });
    let mut j = 0usize;
    g.bench_function("cedar", |b| {
        b.iter(|| {
            j = (j + 1) % s.cedar_requests.len();
            black_box(s.authorizer.is_authorized(
                black_box(&s.cedar_requests[j]),
                &s.cedar,
                &s.entities,
            ))
        })
    });
    g.finish();
}

criterion_group! {
    name = decide_bench;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = benches
}

fn main() {
    decide_bench();
    Criterion::default().configure_from_args().final_summary();
}
