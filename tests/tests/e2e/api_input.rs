//! Bad input gets a 4xx with a clear message, never a 5xx, a hang or a crash.

use e2e::DevNode;

/// (path, content type, body, expected status, text the message must contain)
type Case<'a> = (&'a str, Option<&'a str>, Vec<u8>, u16, &'a str);

#[test]
fn malformed_oversized_and_unknown_input_is_refused_clearly() {
    let node = DevNode::start(&[]);
    node.rt().block_on(async {
        let op = node.client("operator").await.unwrap();
        let cases: Vec<Case> = vec![
            (
                "/v1/tenants",
                Some("application/json"),
                b"{\"id\": ".to_vec(),
                400,
                "EOF",
            ),
            (
                "/v1/tenants",
                Some("application/json"),
                b"[1,2,3]".to_vec(),
                422,
                "invalid type",
            ),
            (
                "/v1/tenants",
                Some("application/json"),
                br#"{"id":"x","name":"X","jurisdiction":"IN","admin":true}"#.to_vec(),
                422,
                "unknown field `admin`",
            ),
            (
                "/v1/tenants",
                Some("application/json"),
                br#"{"id":"x"}"#.to_vec(),
                422,
                "missing field",
            ),
            (
                "/v1/tenants",
                Some("text/plain"),
                br#"{}"#.to_vec(),
                415,
                "Content-Type",
            ),
            (
                "/v1/tenants",
                Some("application/json"),
                format!(
                    r#"{{"id":"x","name":"{}","jurisdiction":"IN"}}"#,
                    "a".repeat(200_000)
                )
                .into_bytes(),
                413,
                "exceeds this node's limit of 65536 bytes",
            ),
            (
                "/v1/tenants",
                Some("application/json"),
                br#"{"id":"../etc","name":"X","jurisdiction":"IN"}"#.to_vec(),
                400,
                "tenant id",
            ),
            (
                "/v1/tenants",
                Some("application/json"),
                br#"{"id":"ok","name":"X","jurisdiction":"India"}"#.to_vec(),
                400,
                "ISO 3166",
            ),
            (
                "/v1/leases",
                Some("application/json"),
                br#"{"tenant":"nobody","gpus":1,"model":"H100"}"#.to_vec(),
                404,
                "no tenant nobody",
            ),
        ];
        for (path, ctype, body, want, needle) in cases {
            let (status, answer) = op.raw("POST", path, ctype, body).await.unwrap();
            let text = String::from_utf8_lossy(&answer).into_owned();
            assert_eq!(status, want, "{path}: {text}");
            assert!(
                text.contains(needle),
                "{path}: message {text:?} should mention {needle:?}"
            );
        }
        let (status, body) = op.get_bytes("/v1/nope").await.unwrap();
        assert_eq!(status, 404, "{}", String::from_utf8_lossy(&body));
        let (status, _) = op.get_bytes("/v1/usage/notanumber").await.unwrap();
        assert_eq!(status, 400);
        let (status, _) = op
            .get_bytes("/v1/bill?tenant=hyd-speech&from=yesterday")
            .await
            .unwrap();
        assert_eq!(status, 400);
        // The node is still healthy after all that.
        assert_eq!(op.get("/v1/health").await.unwrap().0, 200);
    });
}
