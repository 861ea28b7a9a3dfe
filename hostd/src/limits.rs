//! Request body limits that the client actually gets to hear about.
//!
//! Refusing an oversized body without reading it makes the server close a socket with unread
//! data, which the kernel turns into a TCP reset that can destroy the 413 answer before the
//! client reads it. A request that announces an oversized `Content-Length` is therefore
//! answered only after its body is drained (bounded in size and time); bodies without a
//! length are still cut off by the extractors' limit.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use http_body_util::BodyExt;
use std::time::Duration;

/// Most bytes read and discarded from a refused body before giving up on the connection.
const MAX_DRAIN: u64 = 16 * 1024 * 1024;

async fn drain(mut body: Body) {
    let mut seen = 0u64;
    while let Some(Ok(frame)) = body.frame().await {
        if let Some(data) = frame.data_ref() {
            seen += data.len() as u64;
            if seen > MAX_DRAIN {
                return;
            }
        }
    }
}

/// Middleware: 413 with a JSON message for bodies whose declared length exceeds `limit`.
pub async fn enforce(State(limit): State<usize>, req: Request, next: Next) -> Response {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    match declared {
        Some(len) if len > limit as u64 => {
            let _ = tokio::time::timeout(Duration::from_secs(10), drain(req.into_body())).await;
            let msg =
                format!("request body of {len} bytes exceeds this node's limit of {limit} bytes");
            (
                StatusCode::PAYLOAD_TOO_LARGE,
                Json(serde_json::json!({ "error": msg })),
            )
                .into_response()
        }
        _ => next.run(req).await,
    }
}
