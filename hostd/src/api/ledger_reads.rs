//! Reads that walk the ledger (usage pages, bills, the records export) take turns.
//!
//! Each holds a page of records, an invoice in the making or a stream's buffer; hundreds at
//! once would multiply that memory. At most [`MAX_CONCURRENT`] run at a time, the others
//! wait their turn (up to [`MAX_WAIT`], then 503 with `Retry-After`). Every other route,
//! `/v1/health` included, never waits here.

use super::*;
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
    match tokio::time::timeout(MAX_WAIT, turns.0.clone().acquire_owned()).await {
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
}
