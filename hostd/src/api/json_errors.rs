//! Every error answer is JSON, including the ones axum writes itself.
//!
//! Handlers answer [`ApiError`]s, but some refusals happen before a handler runs: a method the
//! route does not serve (405, empty body), a path parameter that does not parse (400,
//! `text/plain`). This layer rewrites any 4xx/5xx answer that is not already JSON into the
//! documented `{"error": ...}` shape, keeping its status and headers such as `Allow`.

use super::*;
use axum::body::Body;
use http_body_util::BodyExt;

/// Plain-text error bodies longer than this are cut: they come from extractors and are short.
const MAX_TEXT: usize = 4096;

fn is_json(r: &Response) -> bool {
    r.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"))
}

/// Middleware body: JSON errors in, JSON errors out; everything else untouched.
pub(super) async fn json_errors(response: Response) -> Response {
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) || is_json(&response) {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = match http_body_util::Limited::new(body, MAX_TEXT).collect().await {
        Ok(b) => String::from_utf8_lossy(&b.to_bytes()).trim().to_owned(),
        Err(_) => String::new(),
    };
    let error = if text.is_empty() {
        status
            .canonical_reason()
            .unwrap_or("request refused")
            .to_lowercase()
    } else {
        text
    };
    let json = serde_json::to_vec(&ErrorBody::new(error)).unwrap_or_default();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, Body::from(json))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    async fn call(router: Router, method: &str, uri: &str) -> (StatusCode, Option<String>, String) {
        let req = axum::http::Request::builder()
            .method(method)
            .uri(uri)
            .body(Body::empty())
            .unwrap();
        let r = router.oneshot(req).await.unwrap();
        let status = r.status();
        let ct = r
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap().to_owned());
        let body = r.into_body().collect().await.unwrap().to_bytes();
        (status, ct, String::from_utf8(body.to_vec()).unwrap())
    }

    /// A 405 (empty body from axum) and a bad path parameter (text/plain from axum) both
    /// answer the documented JSON shape; answers that are already JSON, and successes, pass.
    #[tokio::test]
    async fn axum_refusals_become_json_errors() {
        async fn by_id(Path(id): Path<u64>) -> String {
            id.to_string()
        }
        async fn refused() -> ApiError {
            ApiError::new(StatusCode::CONFLICT, "already there")
        }
        let router = Router::new()
            .route("/x/{id}", get(by_id))
            .route("/y", get(refused))
            .layer(axum::middleware::map_response(json_errors));

        let (status, ct, body) = call(router.clone(), "DELETE", "/x/1").await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(ct.as_deref(), Some("application/json"));
        let e: ErrorBody = serde_json::from_str(&body).unwrap();
        assert_eq!(e.error, "method not allowed");

        let (status, ct, body) = call(router.clone(), "GET", "/x/not-a-number").await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(ct.as_deref(), Some("application/json"));
        let e: ErrorBody = serde_json::from_str(&body).unwrap();
        assert!(e.error.contains("parse"), "{body}");

        let (status, _, body) = call(router.clone(), "GET", "/y").await;
        assert_eq!(status, StatusCode::CONFLICT);
        assert_eq!(
            serde_json::from_str::<ErrorBody>(&body).unwrap().error,
            "already there"
        );

        let (status, _, body) = call(router, "GET", "/x/7").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "7"));
    }
}
