//! The HTTPS JSON API (`/v1/...`) and its authorization rules.
//!
//! Authentication happened at the TLS handshake (see `tls`); every handler receives the
//! caller's [`Principal`] and decides with [`Access`] what it may see. Tenants are confined to
//! their own tenant, leases, usage and receipts; asking for another tenant's lease answers
//! 404 exactly as for a lease that does not exist, so ids cannot be probed. Auditors read and
//! never write.
//!
//! Thin handlers over [`Node`]: one file per resource (`node` health and metrics, `tenants`,
//! `gpus`, `leases`, `jobs`, `files`, `usage` and bills, `audit`, `attestation`), the access rules in
//! `access`, and the one error shape in `error`. Bodies and query strings are the
//! `hostd-api` types the clients use.

use crate::clock::parse_time_ms;
use crate::lease::{Lease, NewLease};
use crate::metrics;
use crate::node::{holder, Node, NodeError};
use crate::principal::{Principal, Role};
use access::Access;
use auditor::billing::{self, Invoice};
use auditor::money::format_inr;
use auditor::record::{Record, UsageRecord};
use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Extension, Json, Router};
use error::ApiResult;
use hostd_api::answer::ErrorBody;
use hostd_api::tenant::NewTenant;
use std::sync::Arc;

mod access;
mod attestation;
mod audit;
mod error;
mod files;
mod gpus;
mod jobs;
mod json_errors;
mod leases;
mod ledger_reads;
mod node;
mod tenants;
mod usage;

pub use error::ApiError;
pub use jobs::Workloads;

async fn blocking<T: Send + 'static>(
    node: &Arc<Node>,
    f: impl FnOnce(&Node) -> Result<T, NodeError> + Send + 'static,
) -> ApiResult<T> {
    let node = node.clone();
    tokio::task::spawn_blocking(move || f(&node))
        .await
        .map_err(|e| ApiError::internal(&e))?
        .map_err(ApiError::from)
}

/// A page's place and size, or 400: `after` must look like an id of `what` (it is read as a
/// place in the store's keys) and `limit` be 1 to `max` (`max` when unsaid).
fn page_request<'a>(
    after: Option<&'a str>,
    limit: Option<u64>,
    max: u64,
    what: &str,
) -> Result<(Option<&'a str>, usize), ApiError> {
    let bad = |m: String| ApiError::new(StatusCode::BAD_REQUEST, m);
    if let Some(a) = after {
        if !crate::workload::is_plain_name(a, 64) {
            return Err(bad(format!("after {a:?} is not a {what} id")));
        }
    }
    let limit = match limit {
        None => max,
        Some(n) if (1..=max).contains(&n) => n,
        Some(n) => {
            return Err(bad(format!(
                "limit {n} is out of range: a page holds 1 to {max} {what}s"
            )))
        }
    };
    let limit = usize::try_from(limit).map_err(|_| bad(format!("limit {limit} is too large")))?;
    Ok((after, limit))
}

/// `PUT /v1/leases/{id}/files/{*path}`, without the small JSON body limit.
fn uploads() -> Router<Arc<Node>> {
    Router::new()
        .route("/v1/leases/{id}/files/{*path}", put(files::put_file))
        .layer(DefaultBodyLimit::disable())
}

/// The API's routes over `node`, on a node that runs no jobs.
pub fn router(node: Arc<Node>) -> Router {
    router_with(
        node,
        Workloads::Off("jobs are not enabled on this node".into()),
    )
}

/// The API's routes over `node` and its jobs.
pub fn router_with(node: Arc<Node>, workloads: Workloads) -> Router {
    let limit = node.config().api.max_body_bytes;
    let body = crate::limits::BodyLimits {
        max_bytes: limit,
        deadline: std::time::Duration::from_secs(node.config().api.body_deadline_secs.max(1)),
    };
    Router::new()
        .route("/v1/health", get(node::health))
        .route("/metrics", get(node::prometheus))
        .route(
            "/v1/tenants",
            get(tenants::list_tenants).post(tenants::create_tenant),
        )
        .route("/v1/tenants/{id}", get(tenants::get_tenant))
        .route("/v1/tenants/{id}/suspend", post(tenants::suspend_tenant))
        .route("/v1/gpus", get(gpus::list_gpus))
        .route(
            "/v1/leases",
            get(leases::list_leases).post(leases::create_lease),
        )
        .route("/v1/leases/{id}", get(leases::get_lease))
        .route("/v1/leases/{id}/end", post(leases::end_lease))
        .route(
            "/v1/leases/{id}/jobs",
            get(jobs::list_jobs).post(jobs::start_job),
        )
        .route("/v1/leases/{id}/jobs/{job}", get(jobs::get_job))
        .route("/v1/leases/{id}/jobs/{job}/stop", post(jobs::stop_job))
        .route("/v1/leases/{id}/jobs/{job}/logs", get(jobs::job_logs))
        .route("/v1/leases/{id}/files", get(files::list_root))
        .route("/v1/leases/{id}/files/{*path}", get(files::get_file))
        .route("/v1/usage", get(usage::list_usage))
        .route("/v1/usage/{id}", get(usage::get_usage))
        .route("/v1/usage/{id}/receipt", get(usage::get_receipt))
        .route("/v1/bill", get(usage::bill))
        .route("/v1/audit/checkpoint", get(audit::checkpoint))
        .route("/v1/audit/vkey", get(audit::vkey))
        .route("/v1/audit/records", get(audit::records))
        .route("/v1/audit/consistency", get(audit::consistency))
        .route("/v1/attestation", post(attestation::attestation))
        .route(
            "/v1/attestation/results",
            post(attestation::attestation_result),
        )
        .route(
            "/v1/attestation/latest",
            get(attestation::latest_attestation),
        )
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such endpoint") })
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn_with_state(
            body,
            crate::limits::enforce,
        ))
        // Uploads stream up to the lease's quota with a per-piece deadline of their own
        // (see `files`): merged after the body limits, so that those never see them.
        .merge(uploads())
        .layer(axum::middleware::from_fn_with_state(
            ledger_reads::LedgerReads::new(ledger_reads::MAX_CONCURRENT),
            ledger_reads::limit,
        ))
        .layer(axum::middleware::map_response(json_errors::json_errors))
        .layer(Extension(workloads))
        .with_state(node)
}
