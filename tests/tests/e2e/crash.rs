//! kill -9 during metering: after a restart nothing acknowledged is lost, no hour is billed
//! twice, and the log still verifies offline.

use crate::{create_tenants, export_and_verify, json, lease, wait_for};
use e2e::DevNode;
use serde_json::Value;

fn records(node: &DevNode) -> Vec<Value> {
    json(&node.sovctl("operator", &["--json", "usage", "list"]))["records"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn kill_dash_nine_during_metering_loses_nothing() {
    let mut node = DevNode::start(&["--time-scale", "36000", "--interval", "600"]);
    create_tenants(&node);
    let lease = lease(&node, "operator", "hyd-speech", 2, "H100");
    let id = lease["id"].as_str().unwrap().to_string();
    let mut seen: Vec<Value> = Vec::new();
    for round in 0..3 {
        let want = seen.len() + 4;
        let now = wait_for(60, "more usage records", || {
            let r = records(&node);
            (r.len() >= want).then_some(r)
        });
        // Everything acknowledged before is still there, byte for byte.
        assert_eq!(
            &now[..seen.len()],
            &seen[..],
            "round {round}: acknowledged records changed"
        );
        seen = now;
        node.kill9();
        node.spawn();
    }
    let after = wait_for(60, "metering to resume", || {
        let r = records(&node);
        (r.len() > seen.len()).then_some(r)
    });
    assert_eq!(&after[..seen.len()], &seen[..]);
    let ended = json(&node.sovctl("operator", &["--json", "lease", "end", &id]));
    let (start, end) = (
        ended["lease"]["started_ms"].as_i64().unwrap(),
        ended["lease"]["ended_ms"].as_i64().unwrap(),
    );
    // Per GPU, the records tile the lease exactly: no gap, no overlap, no double billing.
    let all = records(&node);
    for gpu in lease["gpus"].as_array().unwrap() {
        let uuid = gpu["uuid"].as_str().unwrap();
        let mine: Vec<&Value> = all.iter().filter(|r| r["gpu_uuid"] == uuid).collect();
        let total: u64 = mine.iter().map(|r| r["gpu_ms"].as_u64().unwrap()).sum();
        assert_eq!(total as i64, end - start, "GPU {uuid}");
        for w in mine.windows(2) {
            assert_eq!(w[0]["end"], w[1]["start"], "GPU {uuid}: gap or overlap");
        }
    }
    // Ids are leaf indices, dense from 0.
    for (i, r) in all.iter().enumerate() {
        assert_eq!(r["id"].as_u64(), Some(i as u64));
    }
    let export = node.dir.parent().unwrap().join("export");
    export_and_verify(&node, &export, &[]);
    assert!(
        node.stop(),
        "clean shutdown on SIGTERM; log:\n{}",
        node.log_text()
    );
}
