//! The newcomer's story: dev node, tenant, lease, metering, lease end, bill, offline audit.

use crate::{create_tenants, expected_paise, export_and_verify, json, lease, wait_for};
use auditor::money::format_inr;
use e2e::{ok, DevNode};

#[test]
fn tenant_leases_an_h100_is_metered_billed_and_audited_offline() {
    // An hour of clock time every 0.1 s; samples every 10 clock-minutes (clamped to 50 ms real).
    let node = DevNode::start(&["--time-scale", "36000", "--interval", "600"]);
    create_tenants(&node);

    // The tenant leases with its own certificate.
    let lease = lease(&node, "hyd-speech", "hyd-speech", 1, "H100");
    let id = lease["id"].as_str().expect("lease id").to_string();
    assert_eq!(lease["state"], "active");
    assert_eq!(lease["gpus"].as_array().map(|a| a.len()), Some(1));
    assert_eq!(lease["rate_paise_per_hour"], 25_000);

    // Metering writes hourly records while the lease runs.
    let records = wait_for(60, "hourly usage records", || {
        let v = json(&node.sovctl("hyd-speech", &["--json", "usage", "list", "--lease", &id]));
        let n = v["records"].as_array().map(|a| a.len()).unwrap_or(0);
        (n >= 5).then_some(v)
    });
    let first = &records["records"][0];
    assert_eq!(first["tenant"], "hyd-speech");
    assert_eq!(first["gpu_model"], "H100");
    assert!(
        first["energy_joules"].as_f64().unwrap_or(0.0) > 0.0,
        "energy is metered: {first}"
    );

    // The leased GPU shows up in the metrics with its lease labels.
    let metrics = node.rt().block_on(async {
        let c = node.client("operator").await.expect("client");
        c.get_bytes("/metrics").await.expect("metrics")
    });
    assert_eq!(metrics.0, 200);
    let text = String::from_utf8_lossy(&metrics.1).into_owned();
    assert!(text.contains(&format!("lease=\"{id}\"")), "{text}");
    assert!(
        text.contains("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{"),
        "{text}"
    );

    // End it: metering stops the moment it ends.
    let ended = json(&node.sovctl("hyd-speech", &["--json", "lease", "end", &id]));
    let l = &ended["lease"];
    assert_eq!(l["state"], "ended");
    let (start, end) = (
        l["started_ms"].as_i64().unwrap(),
        l["ended_ms"].as_i64().unwrap(),
    );
    let expected = expected_paise(start, end, 25_000);
    let count_after_end =
        json(&node.sovctl("hyd-speech", &["--json", "usage", "list", "--lease", &id]))["records"]
            .as_array()
            .map(|a| a.len())
            .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    let later = json(&node.sovctl("hyd-speech", &["--json", "usage", "list", "--lease", &id]));
    let recs = later["records"].as_array().unwrap();
    assert_eq!(
        recs.len(),
        count_after_end,
        "no record after the lease ended"
    );
    // Records tile the lease exactly: contiguous, from start to end, chained by `prev`.
    let total_ms: u64 = recs.iter().map(|r| r["gpu_ms"].as_u64().unwrap()).sum();
    assert_eq!(total_ms as i64, end - start);
    for w in recs.windows(2) {
        assert_eq!(w[0]["end"], w[1]["start"]);
        assert_eq!(w[1]["prev"], w[0]["id"]);
    }

    // The bill, computed by the node from its verified ledger, matches an independent sum.
    let bill = json(&node.sovctl("hyd-speech", &["--json", "bill", "--tenant", "hyd-speech"]));
    assert_eq!(bill["total_paise"].as_u64(), Some(expected), "{bill}");
    assert_eq!(bill["total"], format_inr(expected));
    let human = ok(&node.sovctl("hyd-speech", &["bill", "--tenant", "hyd-speech"]));
    assert!(human.contains(&format_inr(expected)), "{human}");

    // A tenant checks one record offline with its receipt.
    let rid = recs[0]["id"].as_u64().unwrap().to_string();
    let receipt = json(&node.sovctl("hyd-speech", &["--json", "usage", "receipt", &rid]));
    let vkey = std::fs::read_to_string(node.dir.join("state/log.vkey")).unwrap();
    let verifier = attest::note::NoteVerifier::parse(vkey.trim()).unwrap();
    let parsed = attest::receipt::Receipt::parse(receipt["receipt"].as_str().unwrap()).unwrap();
    attest::receipt::verify(
        &parsed,
        receipt["record"].as_str().unwrap().as_bytes(),
        &verifier,
    )
    .expect("receipt verifies offline");

    // The auditor exports and verifies offline, pinning the node's key.
    let export = node.dir.parent().unwrap().join("export");
    let report = export_and_verify(&node, &export, &["--receipt", &rid]);
    assert!(report.contains("hyd-speech"), "{report}");
    assert!(report.contains(&format_inr(expected)), "{report}");
    // The receipt was fetched before the exported checkpoint, so it is tied to the export.
    assert!(report.contains("receipts verified: 1"), "{report}");
}
