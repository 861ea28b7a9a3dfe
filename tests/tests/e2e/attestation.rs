//! Attestation end to end: a dev node whose simulated H100s run in CC mode and sign SPDM
//! reports over fresh derived nonces; `sovctl attest` appraises in its own process against the
//! dev reference manifest, enrollment authority, GPU roots and RIMs; results delivered back to
//! the node land in the ledger, gate placements and are named by usage records.

use crate::{create_tenants, json, wait_for};
use e2e::{ok, DevNode};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Output;

/// The trust arguments for the dev node's material.
fn trust(node: &DevNode) -> Vec<String> {
    let d = |f: &str| node.dir.join(f).to_string_lossy().into_owned();
    [
        ("--reference", d("reference.json")),
        ("--nvidia-root", d("nvidia-roots.pem")),
        ("--rim", d("rims")),
        ("--rim-root", d("rim-root.pem")),
        ("--enrollment-authority", d("enrollment-authority.key.pub")),
    ]
    .into_iter()
    .flat_map(|(a, b)| [a.to_string(), b])
    .collect()
}

fn sovctl(node: &DevNode, profile: &str, args: &[&str], extra: &[String]) -> Output {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(extra.iter().map(String::as_str));
    node.sovctl(profile, &all)
}

fn status_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn reasons(v: &Value) -> Vec<String> {
    v["reasons"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["code"].as_str().map(String::from))
        .collect()
}

fn tmp(node: &DevNode, name: &str) -> PathBuf {
    node.dir.parent().unwrap_or(Path::new("/tmp")).join(name)
}

#[test]
fn cc_node_attests_affirming_with_derived_gpu_nonces_and_refuses_replay_and_tampering() {
    let node = DevNode::start(&["--gpus", "H100:2", "--cc", "on"]);
    let t = trust(&node);
    let evidence_path = tmp(&node, "evidence.json");
    let ev = evidence_path.to_str().unwrap();

    let out = sovctl(
        &node,
        "operator",
        &["--json", "attest", "--nonce-random", "--out", ev],
        &t,
    );
    let v = status_of(&out);
    assert!(out.status.success(), "{v:#}");
    assert_eq!(v["status"], "affirming", "{v:#}");
    assert_eq!(v["node"]["jurisdiction"], "IN-TG");

    // Independently of sovctl: every GPU signed SHA-256(nonce || UUID || node key).
    let bytes = std::fs::read(&evidence_path).unwrap();
    let evidence = attest::evidence::Evidence::verify_document(&bytes).expect("signed evidence");
    let c = &evidence.claims;
    assert_eq!(hex_of(&c.eat_nonce), v["nonce"].as_str().unwrap());
    assert_eq!(c.submods.len(), 2);
    for g in &c.submods {
        let report = g.report.as_ref().expect("a CC GPU sends a report");
        let spdm = attest::nvidia::spdm::SpdmReport::parse(&report.spdm).expect("SPDM");
        let derived = attest::evidence::gpu_nonce(&c.eat_nonce, &g.uuid, c.node_public_key());
        assert_eq!(spdm.request_nonce, derived, "GPU {}", g.uuid);
        assert_ne!(spdm.request_nonce, c.eat_nonce);
    }
    for m in ["hostd", "hostd.config", "policy", "ledger.checkpoint"] {
        assert!(c.measurements.contains_key(m), "measurement {m} missing");
    }

    // Offline: the same evidence verifies once; the same nonce again is a replay.
    let nonce = v["nonce"].as_str().unwrap().to_string();
    let log = tmp(&node, "nonces.txt");
    let offline = |file: &str| {
        sovctl(
            &node,
            "",
            &[
                "--json",
                "attest",
                "verify",
                file,
                "--nonce",
                &nonce,
                "--nonce-log",
                log.to_str().unwrap(),
            ],
            &t,
        )
    };
    let first = offline(ev);
    assert!(first.status.success());
    assert_eq!(status_of(&first)["status"], "affirming");
    let replay = offline(ev);
    assert_eq!(replay.status.code(), Some(1));
    let r = status_of(&replay);
    assert_eq!(r["status"], "contraindicated");
    assert!(reasons(&r).contains(&"nonce-reused".into()), "{r:#}");

    // A tampered evidence file (one measurement digit changed) fails.
    let text = String::from_utf8(bytes).unwrap();
    let at = text.find("\"hostd\":\"").expect("hostd measurement") + 9;
    let mut tampered = text.clone().into_bytes();
    tampered[at] = if tampered[at] == b'0' { b'1' } else { b'0' };
    let bad = tmp(&node, "tampered.json");
    std::fs::write(&bad, tampered).unwrap();
    let out = sovctl(
        &node,
        "",
        &[
            "--json",
            "attest",
            "verify",
            bad.to_str().unwrap(),
            "--nonce",
            &nonce,
        ],
        &t,
    );
    assert_eq!(out.status.code(), Some(1));
    let r = status_of(&out);
    assert!(
        reasons(&r).contains(&"evidence-signature-invalid".into()),
        "{r:#}"
    );

    // The wrong GPU root: GPUs no longer affirm.
    let other_roots = tmp(&node, "other-roots.pem");
    std::fs::write(
        &other_roots,
        std::fs::read(node.dir.join("ca.pem")).unwrap(),
    )
    .unwrap();
    let mut wrong = t.clone();
    let i = wrong.iter().position(|a| a == "--nvidia-root").unwrap();
    wrong[i + 1] = other_roots.to_string_lossy().into_owned();
    let out = sovctl(
        &node,
        "operator",
        &["--json", "attest", "--nonce-random"],
        &wrong,
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(reasons(&status_of(&out)).contains(&"gpu-root-untrusted".into()));

    // A relying party that trusts only AKs anchored in a TPM maker's EK certificate refuses
    // the dev node, whose enrollment binds no TPM at all.
    let out = sovctl(
        &node,
        "operator",
        &["--json", "attest", "--nonce-random", "--require-tpm-ek"],
        &t,
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(reasons(&status_of(&out)).contains(&"tpm-ak-not-anchored".into()));

    // RIMs are reference values only with a valid signature up to the RIM root.
    let without_root: Vec<String> = {
        let i = t.iter().position(|a| a == "--rim-root").unwrap();
        [&t[..i], &t[i + 2..]].concat()
    };
    let out = sovctl(
        &node,
        "",
        &["attest", "verify", ev, "--nonce", &nonce],
        &without_root,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--rim-root"));
    let rims = tmp(&node, "tampered-rims");
    std::fs::create_dir_all(&rims).unwrap();
    let original = std::fs::read_dir(node.dir.join("rims"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().contains("driver-"))
        .expect("a driver RIM");
    let xml = std::fs::read_to_string(&original).unwrap();
    // Accept any value at every index: the tamperer's dream, refused for its broken digest.
    let loosened = xml.replacen("active=\"True\"", "active=\"False\"", 1);
    assert_ne!(loosened, xml);
    let tampered_rim = rims.join("driver.swidtag");
    std::fs::write(&tampered_rim, loosened).unwrap();
    let mut with_tampered = t.clone();
    let i = with_tampered.iter().position(|a| a == "--rim").unwrap();
    with_tampered[i + 1] = tampered_rim.to_string_lossy().into_owned();
    let out = sovctl(
        &node,
        "",
        &["attest", "verify", ev, "--nonce", &nonce],
        &with_tampered,
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("driver.swidtag") && err.contains("digest mismatch"),
        "{err}"
    );

    // Tenants may attest only a node they lease.
    create_tenants(&node);
    let rt = node.rt();
    let body = serde_json::json!({ "nonce": "11".repeat(32) });
    rt.block_on(async {
        let c = node.client("hyd-speech").await.unwrap();
        let (status, v) = c.post("/v1/attestation", &body).await.unwrap();
        assert_eq!(status, 403, "{v}");
        let (status, _) = c
            .post("/v1/attestation", &serde_json::json!({ "nonce": "zz" }))
            .await
            .unwrap();
        assert_eq!(status, 400);
    });
    json(&node.sovctl(
        "hyd-speech",
        &[
            "--json",
            "lease",
            "create",
            "--tenant",
            "hyd-speech",
            "--model",
            "H100",
        ],
    ));
    rt.block_on(async {
        let c = node.client("hyd-speech").await.unwrap();
        let (status, v) = c.post("/v1/attestation", &body).await.unwrap();
        assert_eq!(status, 200, "{v}");
        let auditor = node.client("auditor").await.unwrap();
        assert_eq!(auditor.post("/v1/attestation", &body).await.unwrap().0, 200);
        // Only operators deliver results.
        let (status, _) = auditor
            .raw(
                "POST",
                "/v1/attestation/results",
                Some("application/json"),
                b"{}".to_vec(),
            )
            .await
            .unwrap();
        assert_eq!(status, 403);
    });
}

fn hex_of(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn records(node: &DevNode) -> Vec<Value> {
    let rt = node.rt();
    let text = rt.block_on(async {
        let c = node.client("auditor").await.unwrap();
        let (status, body) = c.get_bytes("/v1/audit/records").await.unwrap();
        assert_eq!(status, 200);
        String::from_utf8(body).unwrap()
    });
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn results_gate_placement_are_named_by_usage_and_gpu_events_are_recorded() {
    let node = DevNode::start(&["--gpus", "H100:2", "--cc", "on", "--interval", "0.1"]);
    create_tenants(&node);
    let restricted = [
        "--json",
        "lease",
        "create",
        "--tenant",
        "hyd-speech",
        "--model",
        "H100",
        "--classification",
        "restricted",
        "--dataset",
        "telugu-asr-raw",
    ];
    // No attestation result yet: the dev policy's "affirming, < 24h, CC on" denies.
    let denied = node.sovctl("hyd-speech", &restricted);
    assert_eq!(denied.status.code(), Some(1));
    let msg = String::from_utf8_lossy(&denied.stderr);
    assert!(msg.contains("attestation"), "{msg}");

    // The operator's verifier appraises and delivers its signed result.
    let result = tmp(&node, "result.json");
    let evidence = tmp(&node, "evidence.json");
    let verifier_key = node.dir.join("verifier.key");
    let out = sovctl(
        &node,
        "operator",
        &[
            "--json",
            "attest",
            "--nonce-random",
            "--out",
            evidence.to_str().unwrap(),
            "--verifier-key",
            verifier_key.to_str().unwrap(),
            "--result-out",
            result.to_str().unwrap(),
        ],
        &trust(&node),
    );
    let v = status_of(&out);
    assert_eq!(v["status"], "affirming");
    // The verifier vouches for the release whose manifest matched: the dev reference manifest.
    assert_eq!(v["image"]["name"], "hostd-dev", "{v:#}");
    assert_eq!(v["image"]["version"], env!("CARGO_PKG_VERSION"), "{v:#}");

    // A result dated an hour ahead (a verifier with a wrong clock) is refused: it would block
    // every genuine result after it.
    let future = tmp(&node, "future.json");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let out = sovctl(
        &node,
        "",
        &[
            "--json",
            "attest",
            "verify",
            evidence.to_str().unwrap(),
            "--nonce",
            v["nonce"].as_str().unwrap(),
            "--at",
            &(now + 3600).to_string(),
            "--verifier-key",
            verifier_key.to_str().unwrap(),
            "--result-out",
            future.to_str().unwrap(),
        ],
        &trust(&node),
    );
    assert!(reasons(&status_of(&out)).contains(&"evidence-stale".into()));
    let refused = node.sovctl("operator", &["attest", "submit", future.to_str().unwrap()]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("in the future"));
    let rec = json(&node.sovctl(
        "operator",
        &["--json", "attest", "submit", result.to_str().unwrap()],
    ));
    assert_eq!(rec["status"], "affirming");
    let att_id = rec["id"].as_u64().unwrap();
    // The same result again is not newer than the one in force.
    let again = node.sovctl("operator", &["attest", "submit", result.to_str().unwrap()]);
    assert_eq!(again.status.code(), Some(1));
    // A result signed by a key the node does not trust is refused.
    let stranger = tmp(&node, "stranger.key");
    ok(&node.sovctl(
        "",
        &["attest", "keygen", "--out", stranger.to_str().unwrap()],
    ));
    let forged = tmp(&node, "forged.json");
    let out = sovctl(
        &node,
        "operator",
        &[
            "--json",
            "attest",
            "--nonce-random",
            "--verifier-key",
            stranger.to_str().unwrap(),
            "--result-out",
            forged.to_str().unwrap(),
        ],
        &trust(&node),
    );
    assert!(out.status.success());
    let refused = node.sovctl("operator", &["attest", "submit", forged.to_str().unwrap()]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("refused"));

    // Now the restricted placement is allowed (the dev policy's rule also needs an attested
    // image of at least 0.1, which only the result's `image` can satisfy), and its usage
    // names the attestation.
    let lease = json(&node.sovctl("hyd-speech", &restricted));
    let id = lease["id"].as_str().unwrap().to_string();
    let ended = json(&node.sovctl("hyd-speech", &["--json", "lease", "end", &id]));
    let rids = ended["records"].as_array().unwrap();
    assert!(!rids.is_empty());
    let usage = json(&node.sovctl("hyd-speech", &["--json", "usage", "list", "--lease", &id]));
    for u in usage["records"].as_array().unwrap() {
        assert_eq!(u["attestation"].as_u64(), Some(att_id), "{u}");
    }

    // GPU state changes become records: GPU 1 lost, then CC toggled off.
    let control = node.dir.join("gpu-control.json");
    std::fs::write(&control, r#"{"faults": {"1": "lost"}}"#).unwrap();
    wait_for(5, "a gpu-event lost record", || {
        records(&node)
            .into_iter()
            .find(|r| r["kind"] == "gpu-event" && r["event"] == "lost")
    });
    std::fs::write(&control, r#"{"cc": "off"}"#).unwrap();
    let cc = wait_for(5, "a cc-mode-changed record", || {
        records(&node)
            .into_iter()
            .find(|r| r["kind"] == "gpu-event" && r["event"] == "cc-mode-changed")
    });
    assert_eq!(
        (cc["from"].as_str(), cc["to"].as_str()),
        (Some("on"), Some("off"))
    );

    // The auditor's offline verification accepts and counts every kind.
    let export = tmp(&node, "export");
    let report = crate::export_and_verify(&node, &export, &[]);
    assert!(report.contains("attestation 1"), "{report}");
    assert!(report.contains("gpu-event"), "{report}");
    assert!(report.contains("usage"), "{report}");
}
