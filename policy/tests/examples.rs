//! The example policies shipped in `policy/examples/` (and included in docs/policy.md) load,
//! and the example decisions quoted in the docs are the ones the engine makes.

mod common;
use common::*;
use policy::{decide, Destination, Mode};

#[test]
fn example_policies_load() {
    let seed = load(SEED);
    assert_eq!(seed.name, "hyd-seed");
    assert_eq!(seed.version, 1);
    let india = load(INDIA);
    assert_eq!(india.version, 12);
    assert_eq!(india.groups["eu"].len(), 27);
    assert!(india.digest().to_string().starts_with("sha256:"));
}

#[test]
fn docs_embed_the_example_files_verbatim() {
    let doc = include_str!("../../docs/policy.md");
    for (name, text) in [
        ("seed-hyderabad.toml", SEED),
        ("india-deployment.toml", INDIA),
    ] {
        assert!(
            doc.contains(text.trim_end()),
            "docs/policy.md must contain policy/examples/{name} verbatim"
        );
    }
}

#[test]
fn seed_telugu_recordings_stay_in_india() {
    let p = load(SEED);
    let d = decide(
        &p,
        &place(
            "vaani-speech",
            "telugu-asr-raw",
            "restricted",
            good_node("gpu-07", "SG"),
        ),
    );
    assert!(!d.allowed);
    assert_eq!(d.mode, Mode::Enforce);
    assert_eq!(d.matched_rules, vec!["restricted-stays-in-india"]);
    assert_eq!(
        sentences(&d),
        vec!["denied: dataset telugu-asr-raw is restricted; node gpu-07 is in SG, rule restricted-stays-in-india allows only IN"]
    );
    assert_eq!(d.policy_digest, p.digest().to_string());

    let d = decide(
        &p,
        &place(
            "vaani-speech",
            "telugu-asr-raw",
            "restricted",
            good_node("gpu-01", "IN-TS"),
        ),
    );
    assert!(d.allowed, "{}", d.explain());
    assert_eq!(
        sentences(&d)[0],
        "allowed: dataset telugu-asr-raw is restricted; node gpu-01 is in IN-TS, which rule restricted-stays-in-india allows (IN)"
    );
    assert_eq!(d.reasons.len(), 5, "jurisdiction + four node requirements");
}

#[test]
fn seed_public_base_model_is_fetched_from_abroad() {
    let p = load(SEED);
    // The fetcher handles only public data: it may reach the hub in the US, by address or name.
    let d = decide(&p, &egress("vaani-speech", "public", addr("198.51.100.20")));
    assert!(d.allowed, "{}", d.explain());
    let d = decide(
        &p,
        &egress(
            "vaani-speech",
            "public",
            Destination::Host("Models.Example.com".into()),
        ),
    );
    assert!(d.allowed);
    // The training workload holds restricted recordings: it may not.
    let d = decide(
        &p,
        &egress("vaani-speech", "restricted", addr("2001:db8:100::7")),
    );
    assert!(!d.allowed);
    assert_eq!(
        sentences(&d),
        vec!["denied: data wl-1 is restricted; endpoint model-hub (2001:db8:100::7) is in US, rule restricted-stays-in-india allows only IN"]
    );
    // ... but it may reach its object store in Karnataka and the exempt control plane.
    assert!(
        decide(
            &p,
            &egress("vaani-speech", "restricted", addr("203.0.113.9"))
        )
        .allowed
    );
    let d = decide(&p, &egress("vaani-speech", "restricted", addr("10.40.1.1")));
    assert!(d.allowed);
    // Public model stored and placed anywhere.
    assert!(
        decide(
            &p,
            &store("vaani-speech", "base-model", "public", good_node("n", "US"))
        )
        .allowed
    );
}

#[test]
fn india_example_decisions() {
    let p = load(INDIA);
    // EU tenant: confidential data only in the EU, on CC nodes.
    let de = good_node("fra-gpu-3", "DE-HE");
    assert!(
        decide(
            &p,
            &place("berlin-radiology", "ct-scans", "confidential", de.clone())
        )
        .allowed
    );
    let d = decide(
        &p,
        &place(
            "berlin-radiology",
            "ct-scans",
            "confidential",
            good_node("gpu-01", "IN-TS"),
        ),
    );
    assert!(!d.allowed);
    assert_eq!(
        sentences(&d),
        vec!["denied: dataset ct-scans is confidential; node gpu-01 is in IN-TS, rule eu-tenant-confidential-in-eu allows only eu"]
    );
    // Other tenants' confidential data: India only.
    let d = decide(&p, &place("vaani-speech", "contracts", "confidential", de));
    assert!(!d.allowed);
    assert_eq!(d.matched_rules, vec!["confidential-in-india"]);

    // Audit mode: an old image on an internal workload is allowed but reported.
    let mut old = good_node("gpu-02", "IN-TS");
    old.image_version = Some("1.4.9".into());
    let d = decide(&p, &place("vaani-speech", "logs", "internal", old));
    assert!(d.allowed);
    assert!(d.violation);
    assert_eq!(d.mode, Mode::Audit);
    assert_eq!(
        sentences(&d),
        vec!["audit violation (allowed in audit mode): dataset logs is internal; node gpu-02 image version is 1.4.9, rule internal-in-india requires at least 1.5.0"]
    );

    // kyc-bank: home (Maharashtra) or Telangana, not Karnataka.
    let mut mh = good_node("mum-1", "IN-MH");
    mh.facility = "blr-whitefield-2".into();
    assert!(decide(&p, &place("kyc-bank", "ekyc", "restricted", mh)).allowed);
    let d = decide(
        &p,
        &place(
            "kyc-bank",
            "ekyc",
            "restricted",
            good_node("blr-1", "IN-KA"),
        ),
    );
    assert!(!d.allowed);
    assert_eq!(
        sentences(&d),
        vec!["denied: dataset ekyc is restricted; node blr-1 is in IN-KA, rule kyc-restricted-home-or-hyderabad allows only IN-TS, home (IN-MH)"]
    );

    // Operators.
    let d = decide(
        &p,
        &operator("arogya-health", "restricted", "IN", "confidential"),
    );
    assert!(!d.allowed);
    assert_eq!(
        sentences(&d),
        vec!["denied: resource res-1 is restricted; operator op-asha clearance is confidential, rule restricted-operators requires at least restricted"]
    );
    assert!(
        decide(
            &p,
            &operator("arogya-health", "restricted", "IN", "restricted")
        )
        .allowed
    );
}

/// The request and decision JSON shown in docs/policy.md are what the engine reads and writes.
#[test]
fn docs_request_and_decision_json_are_current() {
    let p = load(SEED);
    let doc = include_str!("../../docs/policy.md");
    let req = place(
        "vaani-speech",
        "telugu-asr-raw",
        "restricted",
        good_node("gpu-07", "SG"),
    );
    let req_json = serde_json::to_string_pretty(&req).unwrap();
    let d = decide(&p, &req);
    let d_json = serde_json::to_string_pretty(&d).unwrap();
    println!("{req_json}\n{d_json}");
    assert!(
        doc.contains(&req_json),
        "docs/policy.md must show this request:\n{req_json}"
    );
    assert!(
        doc.contains(&d_json),
        "docs/policy.md must show this decision:\n{d_json}"
    );
}
