//! Concurrent lease requests never hand the same GPU to two live leases.

use crate::create_tenants;
use e2e::DevNode;
use serde_json::json;
use std::collections::BTreeSet;

#[test]
fn concurrent_lease_requests_never_double_allocate() {
    let node = DevNode::start(&[]);
    create_tenants(&node);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let results = rt.block_on(async {
        let mut tasks = Vec::new();
        for i in 0..16 {
            let tenant = if i % 2 == 0 { "hyd-speech" } else { "eu-bio" };
            let client = node.client(tenant).await.unwrap();
            tasks.push(tokio::spawn(async move {
                client
                    .post(
                        "/v1/leases",
                        &json!({"tenant": tenant, "gpus": 1, "model": "H100"}),
                    )
                    .await
            }));
        }
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap().unwrap());
        }
        out
    });
    let granted: Vec<_> = results.iter().filter(|(s, _)| *s == 201).collect();
    let refused = results.iter().filter(|(s, _)| *s == 409).count();
    assert_eq!(granted.len(), 4, "4 H100s, 4 leases: {results:?}");
    assert_eq!(refused, 12, "{results:?}");
    let gpus: BTreeSet<String> = granted
        .iter()
        .map(|(_, l)| l["gpus"][0]["uuid"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(gpus.len(), 4, "every granted lease holds a different GPU");
    let msg = results.iter().find(|(s, _)| *s == 409).unwrap().1["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(msg.contains("free"), "{msg}");
}
