//! The authorization matrix: every endpoint, every role, and another tenant's certificate.

use crate::create_tenants;
use e2e::DevNode;
use serde_json::{json, Value};

#[derive(Clone, Copy)]
enum Req<'a> {
    Get(&'a str),
    Post(&'a str, &'a str),
}

#[test]
fn every_endpoint_with_every_role() {
    let node = DevNode::start(&[]);
    create_tenants(&node);
    let rt = node.rt();
    rt.block_on(async {
        let op = node.client("operator").await.unwrap();
        let au = node.client("auditor").await.unwrap();
        let a = node.client("hyd-speech").await.unwrap();
        let b = node.client("eu-bio").await.unwrap();

        // A's lease, ended at once so that A owns a usage record.
        let (st, l1) = a
            .post(
                "/v1/leases",
                &json!({"tenant": "hyd-speech", "gpus": 1, "model": "L4"}),
            )
            .await
            .unwrap();
        assert_eq!(st, 201, "{l1}");
        let l1 = l1["id"].as_str().unwrap().to_string();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let (st, ended) = a
            .post(&format!("/v1/leases/{l1}/end"), &json!({}))
            .await
            .unwrap();
        assert_eq!(st, 200, "{ended}");
        let rec = ended["records"][0].as_u64().expect("a usage record");
        // A's live lease, for the end checks below.
        let (_, l2) = op
            .post(
                "/v1/leases",
                &json!({"tenant": "hyd-speech", "gpus": 1, "model": "L4"}),
            )
            .await
            .unwrap();
        let l2 = l2["id"].as_str().unwrap().to_string();

        let lease_a = format!("/v1/leases/{l1}");
        let usage_a = format!("/v1/usage/{rec}");
        let receipt_a = format!("/v1/usage/{rec}/receipt");
        let attest_body = format!(r#"{{"nonce":"{}"}}"#, "ab".repeat(32));
        let new_tenant = r#"{"id":"t-new","name":"New","jurisdiction":"IN"}"#;
        let lease_for_a = r#"{"tenant":"hyd-speech","gpus":1,"model":"H100"}"#;
        let lease_for_b = r#"{"tenant":"eu-bio","gpus":1,"model":"H100"}"#;
        // (request, operator, auditor, tenant A, tenant B)
        let matrix: Vec<(Req, [u16; 4])> = vec![
            (Req::Get("/v1/health"), [200, 200, 200, 200]),
            (Req::Get("/metrics"), [200, 200, 403, 403]),
            (Req::Post("/v1/tenants", new_tenant), [201, 403, 403, 403]),
            (Req::Get("/v1/tenants"), [200, 200, 200, 200]),
            (Req::Get("/v1/tenants/hyd-speech"), [200, 200, 200, 404]),
            (
                Req::Post("/v1/tenants/t-new/suspend", "{}"),
                [200, 403, 403, 403],
            ),
            (Req::Get("/v1/gpus"), [200, 200, 403, 403]),
            // Tenant A holds a live lease here, tenant B (at this point) does not.
            (
                Req::Post("/v1/attestation", &attest_body),
                [200, 200, 200, 403],
            ),
            (
                Req::Post("/v1/attestation/results", "{}"),
                [400, 403, 403, 403],
            ),
            (Req::Get("/v1/attestation/latest"), [404, 404, 403, 403]),
            (Req::Post("/v1/leases", lease_for_a), [201, 403, 201, 403]),
            (Req::Post("/v1/leases", lease_for_b), [201, 403, 403, 201]),
            (Req::Get("/v1/leases"), [200, 200, 200, 200]),
            (Req::Get(&lease_a), [200, 200, 200, 404]),
            (Req::Get("/v1/usage"), [200, 200, 200, 200]),
            (
                Req::Get("/v1/usage?tenant=hyd-speech"),
                [200, 200, 200, 403],
            ),
            (Req::Get(&usage_a), [200, 200, 200, 404]),
            (Req::Get(&receipt_a), [200, 200, 200, 404]),
            (Req::Get("/v1/bill?tenant=hyd-speech"), [200, 200, 200, 403]),
            (Req::Get("/v1/audit/checkpoint"), [200, 200, 200, 200]),
            (Req::Get("/v1/audit/vkey"), [200, 200, 200, 200]),
            (
                Req::Get("/v1/audit/consistency?from=1"),
                [200, 200, 200, 200],
            ),
            (Req::Get("/v1/audit/records"), [200, 200, 403, 403]),
        ];
        let clients = [
            ("operator", &op),
            ("auditor", &au),
            ("hyd-speech", &a),
            ("eu-bio", &b),
        ];
        let mut failures = Vec::new();
        for (req, want) in &matrix {
            for (i, (who, c)) in clients.iter().enumerate() {
                let (status, body) = match req {
                    Req::Get(p) => c.get_bytes(p).await.unwrap(),
                    Req::Post(p, body) => {
                        let v: Value = serde_json::from_str(body).unwrap();
                        let (s, v) = c.post(p, &v).await.unwrap();
                        (s, v.to_string().into_bytes())
                    }
                };
                if status != want[i] {
                    failures.push(format!(
                        "{who} {:?}: got {status}, want {}: {}",
                        match req {
                            Req::Get(p) | Req::Post(p, _) => p,
                        },
                        want[i],
                        String::from_utf8_lossy(&body)
                    ));
                }
            }
        }
        assert!(
            failures.is_empty(),
            "authorization matrix:\n{}",
            failures.join("\n")
        );

        // Listings are filtered, not just allowed.
        let (_, v) = b.get("/v1/leases").await.unwrap();
        assert!(
            v["leases"]
                .as_array()
                .unwrap()
                .iter()
                .all(|l| l["tenant"] == "eu-bio"),
            "{v}"
        );
        leases_in_pages(&op, &a, &l2).await;
        let (_, v) = a.get("/v1/tenants").await.unwrap();
        assert_eq!(v["tenants"].as_array().unwrap().len(), 1, "{v}");
        let (_, v) = b.get("/v1/usage").await.unwrap();
        assert_eq!(v["records"].as_array().unwrap().len(), 0, "{v}");

        // Ending a lease: another tenant cannot see it, an auditor may not, its tenant may.
        let end = format!("/v1/leases/{l2}/end");
        assert_eq!(b.post(&end, &json!({})).await.unwrap().0, 404);
        assert_eq!(au.post(&end, &json!({})).await.unwrap().0, 403);
        assert_eq!(a.post(&end, &json!({})).await.unwrap().0, 200);
        assert_eq!(a.post(&end, &json!({})).await.unwrap().0, 409);
    });
}

/// The lease list in pages: one page says where the next starts, following it gives each
/// lease once; `state=active` lists the live one; a page of none, or an `after` that cannot be
/// a lease id, is refused.
async fn leases_in_pages(op: &sovctl::client::Client, a: &sovctl::client::Client, live: &str) {
    let (_, all) = op.get("/v1/leases").await.unwrap();
    let all: Vec<&str> = all["leases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["id"].as_str().unwrap())
        .collect();
    assert!(all.len() >= 3, "{all:?}");
    let mut seen = Vec::new();
    let mut path = "/v1/leases?limit=1".to_owned();
    for _ in 0..all.len() + 1 {
        let (st, page) = op.get(&path).await.unwrap();
        assert_eq!(st, 200, "{page}");
        seen.extend(
            page["leases"]
                .as_array()
                .unwrap()
                .iter()
                .map(|l| l["id"].clone()),
        );
        match page["next_after"].as_str() {
            Some(next) => path = format!("/v1/leases?limit=1&after={next}"),
            None => break,
        }
    }
    assert_eq!(seen, all, "pages of one, in id order, each lease once");
    let (_, active) = a.get("/v1/leases?state=active").await.unwrap();
    let active = active["leases"].as_array().unwrap();
    assert!(active.iter().any(|l| l["id"] == live), "{active:?}");
    assert!(active
        .iter()
        .all(|l| l["state"] == "active" && l["tenant"] == "hyd-speech"));
    for bad in ["limit=0", "limit=1001", "after=a/b", "state=gone"] {
        let (st, body) = op.get(&format!("/v1/leases?{bad}")).await.unwrap();
        assert_eq!(st, 400, "{bad}: {body}");
    }
}
