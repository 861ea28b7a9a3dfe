//! Reads that walk the ledger (usage pages, bills, the records export) take turns.
//!
//! Each holds a page of records, an invoice in the making or a stream's buffer; hundreds at
//! once would multiply that memory. At most [`MAX_CONCURRENT`] run at a time, the others
//! wait their turn (up to [`MAX_WAIT`], then 503 with `Retry-After`). Every other route,
//! `/v1/health` included, never waits here.

use super::*;
use axum::body::Body;
use axum::extract::Request;
use axum::middleware::Next;
use std::time::Duration;
use tokio::sync::Semaphore;

/// Ledger-walking requests served at once.
pub(super) const MAX_CONCURRENT: usize = 4;
/// How long one waits for its turn.
pub(super) const MAX_WAIT: Duration = Duration::from_secs(30);

/// The turns.
#[derive(Clone)]
pub(super) struct LedgerReads(Arc<Semaphore>);

impl LedgerReads {
    pub(super) fn new(n: usize) -> LedgerReads {
        LedgerReads(Arc::new(Semaphore::new(n.max(1))))
    }
}

/// Whether a request walks the ledger.
fn walks_the_ledger(path: &str) -> bool {
    matches!(path, "/v1/usage" | "/v1/bill" | "/v1/audit/records")
}

/// Middleware: one turn per ledger-walking request.
pub(super) async fn limit(State(turns): State<LedgerReads>, req: Request, next: Next) -> Response {
    if !walks_the_ledger(req.uri().path()) {
        return next.run(req).await;
    }
    let streams = req.uri().path() == "/v1/audit/records";
    match tokio::time::timeout(MAX_WAIT, turns.0.clone().acquire_owned()).await {
        Ok(Ok(turn)) if streams => keep_turn_while_streaming(next.run(req).await, turn),
        Ok(Ok(_turn)) => next.run(req).await,
        _ => {
            let mut r = ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "the node is busy answering other ledger reads; retry shortly",
            )
            .into_response();
            r.headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
            r
        }
    }
}

/// The export's answer starts before its records are read: its turn ends with its body (sent
/// or dropped), not with its headers, or exports past the limit would run at once.
fn keep_turn_while_streaming(r: Response, turn: tokio::sync::OwnedSemaphorePermit) -> Response {
    use futures_util::StreamExt;
    let (parts, body) = r.into_parts();
    let guarded = body.into_data_stream().map(move |chunk| {
        let _held = &turn;
        chunk
    });
    Response::from_parts(parts, Body::from_stream(guarded))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_ledger_walks_take_turns() {
        assert!(walks_the_ledger("/v1/usage"));
        assert!(walks_the_ledger("/v1/bill"));
        assert!(walks_the_ledger("/v1/audit/records"));
        assert!(!walks_the_ledger("/v1/health"));
        assert!(!walks_the_ledger("/v1/usage/7/receipt"));
    }

    #[tokio::test]
    async fn an_export_keeps_its_turn_until_its_body_is_done() {
        let turns = Arc::new(Semaphore::new(1));
        let turn = turns.clone().acquire_owned().await.expect("a turn");
        let r = keep_turn_while_streaming(Response::new(Body::from("records")), turn);
        assert_eq!(turns.available_permits(), 0, "headers out, body not yet");
        let body = axum::body::to_bytes(r.into_body(), 1024)
            .await
            .expect("the body");
        assert_eq!(&body[..], b"records");
        assert_eq!(turns.available_permits(), 1);
    }
}
