//! Request body limits that the client actually gets to hear about.
//!
//! Refusing an oversized body without reading it makes the server close a socket with unread
//! data, which the kernel turns into a TCP reset that can destroy the 413 answer before the
//! client reads it. A request that announces an oversized `Content-Length` is therefore
//! answered only after its body is drained (bounded in size and time); bodies without a
//! length are still cut off by the extractors' limit.
//!
//! Bodies must also arrive in time: a client that announces a body and then sends a byte
//! every few seconds would otherwise hold its connection (and a request slot) for as long as
//! it likes. Every body is read here, whole, within [`BODY_DEADLINE`]; a late one is answered
//! 408 and its connection closed. Bodies are small (`[api] max_body_bytes`, 64 KiB by
//! default), so reading them before the handler costs nothing the handler would not spend.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use hostd_api::answer::ErrorBody;
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

/// Time a client has to send a whole request body, from the end of its headers (default
/// of `[api] body_deadline_secs`).
pub const BODY_DEADLINE: Duration = Duration::from_secs(10);

/// What [`enforce`] allows a request body.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimits {
    /// Most bytes.
    pub max_bytes: usize,
    /// Time to send them all.
    pub deadline: Duration,
}

fn error(status: StatusCode, msg: String) -> Response {
    (status, Json(ErrorBody::new(msg))).into_response()
}

/// Middleware: 413 with a JSON message for bodies whose declared length exceeds `limit`,
/// and 408 (connection closed) for bodies not complete within [`BODY_DEADLINE`].
pub async fn enforce(State(limits): State<BodyLimits>, req: Request, next: Next) -> Response {
    let limit = limits.max_bytes;
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
            error(StatusCode::PAYLOAD_TOO_LARGE, msg)
        }
        Some(0) => next.run(req).await,
        _ if !has_body(&req) => next.run(req).await,
        _ => match read_body_in_time(req, limits).await {
            Ok(req) => next.run(req).await,
            Err(r) => r,
        },
    }
}

/// Whether a request announces a body (a length, or chunked transfer encoding).
fn has_body(req: &Request) -> bool {
    req.headers().contains_key(header::CONTENT_LENGTH)
        || req.headers().contains_key(header::TRANSFER_ENCODING)
}

/// The request with its body read whole within [`BODY_DEADLINE`] (at most `limit` bytes).
async fn read_body_in_time(req: Request, limits: BodyLimits) -> Result<Request, Response> {
    let limit = limits.max_bytes;
    let (parts, body) = req.into_parts();
    let limited = http_body_util::Limited::new(body, limit);
    match tokio::time::timeout(limits.deadline, limited.collect()).await {
        Err(_) => {
            let mut r = error(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the request body did not arrive within {} ms",
                    limits.deadline.as_millis()
                ),
            );
            r.headers_mut().insert(
                header::CONNECTION,
                header::HeaderValue::from_static("close"),
            );
            Err(r)
        }
        Ok(Err(e))
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            Err(error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("request body exceeds this node's limit of {limit} bytes"),
            ))
        }
        Ok(Err(_)) => Err(error(
            StatusCode::BAD_REQUEST,
            "the request body could not be read".into(),
        )),
        Ok(Ok(collected)) => Ok(Request::from_parts(parts, Body::from(collected.to_bytes()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::post;
    use tower::ServiceExt;

    fn app(deadline_ms: u64) -> axum::Router {
        let limits = BodyLimits {
            max_bytes: 1024,
            deadline: Duration::from_millis(deadline_ms),
        };
        axum::Router::new()
            .route("/x", post(|body: String| async move { body }))
            .layer(axum::middleware::from_fn_with_state(limits, enforce))
    }

    /// A body that sends one byte and then stalls is cut at the deadline with a 408 that
    /// closes the connection; a prompt body passes through unchanged.
    #[tokio::test]
    async fn a_stalled_body_is_cut_at_the_deadline() {
        let req = Request::builder()
            .method("POST")
            .uri("/x")
            .header(header::CONTENT_LENGTH, "100")
            .body(Body::new(Stalled(false)))
            .unwrap();
        let started = std::time::Instant::now();
        let r = app(200).oneshot(req).await.unwrap();
        assert_eq!(r.status(), StatusCode::REQUEST_TIMEOUT);
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(r.headers().get(header::CONNECTION).unwrap(), "close");

        let req = Request::builder()
            .method("POST")
            .uri("/x")
            .header(header::CONTENT_LENGTH, "5")
            .body(Body::from("hello"))
            .unwrap();
        let r = app(200).oneshot(req).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let b = r.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&b[..], b"hello");
    }

    /// One byte, then nothing, forever.
    struct Stalled(bool);

    impl hyper::body::Body for Stalled {
        type Data = axum::body::Bytes;
        type Error = std::io::Error;

        fn poll_frame(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
            if self.0 {
                return std::task::Poll::Pending;
            }
            self.0 = true;
            let one = axum::body::Bytes::from_static(b"x");
            std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(one))))
        }
    }
}
