//! `/v1/audit/*`: what an auditor fetches to verify the ledger offline.

use super::*;
use hostd_api::query::{ConsistencyQuery, RecordsQuery};

pub(super) async fn checkpoint(State(node): State<Arc<Node>>) -> ApiResult<Response> {
    let note = blocking(&node, |n| {
        Ok(n.with_ledger(|l| l.checkpoint_note().to_string()))
    })
    .await?;
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], note).into_response())
}

pub(super) async fn vkey(State(node): State<Arc<Node>>) -> ApiResult<Response> {
    let v = blocking(&node, |n| Ok(n.with_ledger(|l| l.vkey()))).await?;
    Ok((
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("{v}\n"),
    )
        .into_response())
}

/// `records.jsonl` for records `0..size`: the auditor pairs it with a checkpoint of that size.
pub(super) async fn records(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
    q: Result<Query<RecordsQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Response> {
    Access(&p).reader("read every tenant's records")?;
    let Query(q) = q.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.body_text()))?;
    let body = blocking(&node, move |n| {
        n.with_ledger(|l| {
            let size = q.size.unwrap_or(l.size());
            if size > l.size() {
                return Err(NodeError::BadRequest(format!(
                    "size {size} is beyond the log's size {}",
                    l.size()
                )));
            }
            let mut out = Vec::new();
            for leaf in l.records(0..size) {
                out.extend_from_slice(&leaf.map_err(NodeError::internal)?);
                out.push(b'\n');
            }
            Ok(out)
        })
    })
    .await?;
    Ok(([(header::CONTENT_TYPE, "application/jsonl")], body).into_response())
}

pub(super) async fn consistency(
    State(node): State<Arc<Node>>,
    q: Result<Query<ConsistencyQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Response> {
    let Query(q) = q.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.body_text()))?;
    let proof = blocking(&node, move |n| {
        n.with_ledger(|l| l.consistency_proof(q.from))
            .map_err(|e| NodeError::BadRequest(e.to_string()))
    })
    .await?;
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], proof).into_response())
}
