//! Errors as answers: one JSON shape, internal detail only in the log.

use super::*;

/// An API error: status code plus the one documented JSON body, [`ErrorBody`].
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    body: ErrorBody,
}

impl ApiError {
    pub(super) fn new(status: StatusCode, msg: impl Into<String>) -> ApiError {
        ApiError {
            status,
            body: ErrorBody::new(msg),
        }
    }

    /// A failure of the node itself. The whole error, source chain included, goes to the log
    /// under a fresh request id; the client gets only that id, never internal text or paths.
    pub(super) fn internal(e: &(dyn std::error::Error + 'static)) -> ApiError {
        let request_id = request_id();
        tracing::error!(request_id = %request_id, error = %attest::report::report(e), "internal error");
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            body: ErrorBody {
                request_id: Some(request_id),
                ..ErrorBody::new(
                    "internal error; the node's log has the details under this request id",
                )
            },
        }
    }

    /// 403 for what the residency policy refused, with its digest and reasons: the tenant
    /// needs them to see which rule to take up with whom.
    pub(super) fn denied(msg: &str, policy_digest: String, reasons: Vec<String>) -> ApiError {
        ApiError {
            status: StatusCode::FORBIDDEN,
            body: ErrorBody {
                policy_digest: Some(policy_digest),
                reasons: Some(reasons),
                ..ErrorBody::new(msg)
            },
        }
    }

    pub(super) fn forbidden(p: &Principal, what: &str) -> ApiError {
        ApiError::new(
            StatusCode::FORBIDDEN,
            format!("{} may not {what}", p.spiffe_uri()),
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body)).into_response()
    }
}

impl From<NodeError> for ApiError {
    fn from(e: NodeError) -> ApiError {
        match e {
            NodeError::BadRequest(m) => ApiError::new(StatusCode::BAD_REQUEST, m),
            NodeError::NotFound(m) => ApiError::new(StatusCode::NOT_FOUND, m),
            NodeError::Conflict(m) => ApiError::new(StatusCode::CONFLICT, m),
            NodeError::Unavailable(m) => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, m),
            NodeError::Busy(m) => ApiError::new(StatusCode::TOO_MANY_REQUESTS, m),
            NodeError::Denied {
                policy_digest,
                reasons,
            } => ApiError::denied(
                "placement denied by residency policy",
                policy_digest,
                reasons,
            ),
            NodeError::Internal(e) => ApiError::internal(&e),
        }
    }
}

impl From<JsonRejection> for ApiError {
    /// axum already picks the right status: 400 malformed JSON, 413 body too large, 415 not
    /// JSON, 422 well-formed but wrong fields (unknown, missing or mistyped).
    fn from(r: JsonRejection) -> ApiError {
        ApiError::new(r.status(), r.body_text())
    }
}

pub(super) type ApiResult<T> = Result<T, ApiError>;

/// A request id for the log line of an internal error: 16 hex digits, unique in practice.
pub(super) fn request_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    format!(
        "{:016x}",
        t ^ n.rotate_left(48) ^ u64::from(std::process::id())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store failure's text names state paths; the client sees neither the path nor the
    /// error text, only a request id it can quote to the operator.
    #[tokio::test]
    async fn an_internal_error_answers_500_without_paths_or_internal_text() {
        let io = std::io::Error::other("/var/lib/hostd/state/db/blobs/7: No space left on device");
        let e = NodeError::Internal(crate::node::InternalError {
            context: "writing the intent".into(),
            source: Box::new(io),
        });
        let response = ApiError::from(e).into_response();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let bytes = http_body_util::BodyExt::collect(response.into_body())
            .await
            .unwrap()
            .to_bytes();
        let text = String::from_utf8(bytes.to_vec()).unwrap();
        for leak in ["/var", "state/db", "No space", "intent"] {
            assert!(!text.contains(leak), "{leak} leaked: {text}");
        }
        let body: ErrorBody = serde_json::from_str(&text).unwrap();
        assert_eq!(body.request_id.as_deref().map(str::len), Some(16), "{text}");
    }
}
