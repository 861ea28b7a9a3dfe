//! `/v1/audit/*`: what an auditor fetches to verify the ledger offline.

use super::*;
use crate::ledger::{LedgerError, Snapshot};
use crate::node::InternalError;
use attest::report::report;
use axum::body::{Body, Bytes};
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

/// Bytes of each chunk of a streamed `records.jsonl` (a chunk ends at the record that
/// reaches it).
const RECORDS_CHUNK: usize = 256 * 1024;
/// Chunks read ahead of the client: with [`RECORDS_CHUNK`], what one export holds in memory.
const RECORDS_AHEAD: usize = 2;

/// `records.jsonl` for records `0..size`: the auditor pairs it with a checkpoint of that size.
///
/// Streamed: a blocking task reads the records one at a time from a ledger snapshot (without
/// the ledger's lock) and sends chunks of about [`RECORDS_CHUNK`] bytes through a bounded
/// channel, so an export holds a few chunks whatever the ledger's size. A read error after
/// the answer has started aborts the body: the client sees a truncated transfer, never a
/// short file that looks complete.
pub(super) async fn records(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
    q: Result<Query<RecordsQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Response> {
    Access(&p).reader("read every tenant's records")?;
    let Query(q) = q.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.body_text()))?;
    let snap = node.ledger_snapshot();
    let size = q.size.unwrap_or(snap.size());
    if size > snap.size() {
        return Err(ApiError::from(NodeError::BadRequest(format!(
            "size {size} is beyond the log's size {}",
            snap.size()
        ))));
    }
    let (tx, mut rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(RECORDS_AHEAD);
    tokio::task::spawn_blocking(move || {
        records_chunks(&snap, size, RECORDS_CHUNK, |chunk| {
            let chunk = chunk.map(Bytes::from).map_err(|e| {
                tracing::error!(error = %report(&e), "audit records export aborted");
                std::io::Error::other(report(&e).to_string())
            });
            // An error means the client went away: stop reading.
            tx.blocking_send(chunk).is_ok()
        })
    });
    let body = Body::from_stream(futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)));
    Ok(([(header::CONTENT_TYPE, "application/jsonl")], body).into_response())
}

/// Records `0..size` of `snap` as `records.jsonl` (each record then `\n`), handed to `emit`
/// in chunks of at least `chunk` bytes (the last one shorter), reading one record at a time.
/// A read error is handed to `emit` and ends the export; so does `emit` answering `false`.
pub(super) fn records_chunks(
    snap: &Snapshot,
    size: u64,
    chunk: usize,
    mut emit: impl FnMut(Result<Vec<u8>, LedgerError>) -> bool,
) {
    let mut buf = Vec::with_capacity(chunk);
    for item in snap.records_in(0..size) {
        match item {
            Ok((_, leaf)) => {
                buf.extend_from_slice(&leaf);
                buf.push(b'\n');
                if buf.len() >= chunk
                    && !emit(Ok(std::mem::replace(&mut buf, Vec::with_capacity(chunk))))
                {
                    return;
                }
            }
            Err(e) => {
                emit(Err(e));
                return;
            }
        }
    }
    if !buf.is_empty() {
        emit(Ok(buf));
    }
}

pub(super) async fn consistency(
    State(node): State<Arc<Node>>,
    q: Result<Query<ConsistencyQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Response> {
    let Query(q) = q.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.body_text()))?;
    let proof = blocking(&node, move |n| {
        n.with_ledger(|l| l.consistency_proof(q.from))
            .map_err(|e| match e {
                // The caller's size; anything else is the node's own failure (500, logged).
                LedgerError::OldSizeTooLarge { .. } => NodeError::BadRequest(e.to_string()),
                e => NodeError::Internal(InternalError {
                    context: "a consistency proof".into(),
                    source: Box::new(e),
                }),
            })
    })
    .await?;
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], proof).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::Ledger;
    use attest::note::NoteSigner;

    #[test]
    fn the_streamed_export_is_the_ledgers_records_byte_for_byte() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new()
            .path(dir.path().join("db"))
            .open()
            .unwrap();
        let signer = NoteSigner::from_seed("n/usage", &[5; 32]).unwrap();
        let mut l = Ledger::open(&db, signer).unwrap();
        let leaves: Vec<Vec<u8>> = (0..500u64)
            .map(|i| {
                format!(r#"{{"i":{i},"pad":"{}"}}"#, "x".repeat((i % 37) as usize)).into_bytes()
            })
            .collect();
        l.append(&leaves).unwrap();
        let snap = l.snapshot();
        // Appends after the snapshot do not show in it.
        l.append(&[b"{\"later\":1}".to_vec()]).unwrap();
        for (size, chunk) in [
            (500, 1000),
            (500, 1),
            (500, RECORDS_CHUNK),
            (123, 4096),
            (0, 10),
        ] {
            let mut chunks = Vec::new();
            records_chunks(&snap, size, chunk, |c| {
                chunks.push(c.unwrap());
                true
            });
            let expected: Vec<u8> = leaves[..size as usize]
                .iter()
                .flat_map(|l| l.iter().copied().chain([b'\n']))
                .collect();
            assert_eq!(chunks.concat(), expected, "size {size}, chunk {chunk}");
            assert!(chunks[..chunks.len().saturating_sub(1)]
                .iter()
                .all(|c| c.len() >= chunk));
            if chunk == 1000 {
                assert!(chunks.len() > 5 && chunks.iter().all(|c| c.len() < 1100));
            }
        }
        // The client going away stops the reading.
        let mut sent = 0;
        records_chunks(&snap, 500, 10, |_| {
            sent += 1;
            false
        });
        assert_eq!(sent, 1);
        // A record missing from the store ends the export with an error, after what was read.
        drop(l);
        let tree = db.open_tree(crate::ledger::TREE_NAME).unwrap();
        let mut key = vec![b'L'];
        key.extend_from_slice(&200u64.to_be_bytes());
        tree.remove(key).unwrap();
        let mut got = Vec::new();
        let mut failed = false;
        records_chunks(&snap, 500, 1000, |c| match c {
            Ok(c) => {
                got.extend(c);
                true
            }
            Err(e) => {
                failed = true;
                assert!(e.to_string().contains("200"), "{e}");
                false
            }
        });
        assert!(failed);
        assert!(got.len() < leaves[..200].iter().map(|l| l.len() + 1).sum::<usize>());
    }
}
