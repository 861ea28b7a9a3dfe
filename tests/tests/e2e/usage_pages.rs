//! `GET /v1/usage` in pages and `GET /v1/audit/records` streamed, against the real binaries.

use crate::{create_tenants, json, lease, wait_for};
use e2e::{bin, ok, DevNode};
use hostd_api::query::RecordsQuery;
use serde_json::Value;
use std::process::Command;

fn ids(v: &Value) -> Vec<u64> {
    v["records"]
        .as_array()
        .expect("records")
        .iter()
        .map(|r| r["id"].as_u64().expect("id"))
        .collect()
}

#[test]
fn usage_pages_chain_and_the_streamed_export_is_the_stored_ledger() {
    let mut node = DevNode::start(&["--time-scale", "36000", "--interval", "600"]);
    create_tenants(&node);
    let l = lease(&node, "hyd-speech", "hyd-speech", 1, "H100");
    let id = l["id"].as_str().expect("lease id").to_string();
    wait_for(60, "usage records", || {
        let v = json(&node.sovctl("operator", &["--json", "usage", "list"]));
        (ids(&v).len() >= 12).then_some(())
    });
    ok(&node.sovctl("hyd-speech", &["lease", "end", &id]));

    // `usage list` follows every page; pages of 5 chained by next_after give the same ids.
    let all = ids(&json(
        &node.sovctl("operator", &["--json", "usage", "list"]),
    ));
    assert!(all.windows(2).all(|w| w[0] < w[1]), "{all:?}");
    let mut paged = Vec::new();
    let mut after: Option<u64> = None;
    loop {
        let mut args = vec!["--json", "usage", "list", "--limit", "5"];
        let a = after.map(|a| a.to_string());
        if let Some(a) = &a {
            args.extend(["--after", a]);
        }
        let page = json(&node.sovctl("hyd-speech", &args));
        let got = ids(&page);
        assert!(got.len() <= 5, "{page}");
        assert!(got.iter().all(|&i| after.is_none_or(|a| i > a)), "{page}");
        paged.extend(got);
        match page.get("next_after").and_then(Value::as_u64) {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    assert_eq!(paged, all);

    node.rt().block_on(async {
        let c = node.client("operator").await.expect("client");
        for bad in [
            "/v1/usage?limit=10001",
            "/v1/usage?limit=0",
            "/v1/usage?after=x",
        ] {
            let (status, body) = c.get_bytes(bad).await.expect("answer");
            assert_eq!(status, 400, "{bad}: {}", String::from_utf8_lossy(&body));
            let v: Value = serde_json::from_slice(&body).expect("JSON error");
            assert!(v["error"].is_string(), "{v}");
        }
        let (status, _) = c.get_bytes("/v1/usage?limit=10000").await.expect("answer");
        assert_eq!(status, 200);
    });

    // The streamed export, fetched from the running node, is byte for byte the records the
    // offline export reads from the stopped node's store.
    let streamed = node.rt().block_on(async {
        let c = node.client("auditor").await.expect("client");
        c.records(&RecordsQuery::default()).await.expect("records")
    });
    assert!(node.stop(), "clean stop; log:\n{}", node.log_text());
    let out = node.dir.parent().unwrap().join("offline-export");
    let run = Command::new(bin("hostd"))
        .args(["audit", "export", "--state"])
        .arg(node.dir.join("state"))
        .arg("--out")
        .arg(&out)
        .output()
        .expect("run hostd audit export");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let stored = std::fs::read(out.join("records.jsonl")).expect("records.jsonl");
    assert!(!streamed.is_empty() && streamed.ends_with(b"\n"));
    assert!(stored.len() >= streamed.len());
    assert_eq!(&stored[..streamed.len()], &streamed[..]);
}
