//! `/v1/leases`.

use super::*;
use hostd_api::answer::{LeaseEnded, LeaseList};
use hostd_api::query::{LeasesQuery, LEASES_LIMIT_MAX};

/// Most leases one page reads (a tenant's page reads past other tenants' leases); a page that
/// stops there is short and says where the next one starts.
const MAX_SCANNED: usize = 100_000;

/// `GET /v1/leases?after=&limit=&state=`: a page of the leases the caller may see.
pub(super) async fn list_leases(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
    q: Result<Query<LeasesQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<LeaseList>> {
    let Query(q) = q.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.body_text()))?;
    let (after, limit) = page_request(q.after.as_deref(), q.limit, LEASES_LIMIT_MAX, "lease")?;
    let after = after.map(str::to_owned);
    let (state, principal) = (q.state, p.clone());
    let (leases, next_after) = blocking(&node, move |n| {
        let a = Access(&principal);
        let keep = |l: &Lease| a.sees_tenant(&l.tenant);
        n.lease_page(after.as_deref(), limit, state, MAX_SCANNED, keep)
    })
    .await?;
    Ok(Json(LeaseList { leases, next_after }))
}

pub(super) async fn create_lease(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
    body: Result<Json<NewLease>, JsonRejection>,
) -> ApiResult<(StatusCode, Json<Lease>)> {
    let Json(req) = body?;
    Access(&p).acts_for(&req.tenant, "lease GPUs for another tenant")?;
    let l = blocking(&node, move |n| n.create_lease(req)).await?;
    Ok((StatusCode::CREATED, Json(l)))
}

/// A lease the principal may see, else 404 (not 403: don't confirm other tenants' ids).
pub(super) fn visible_lease(node: &Node, p: &Principal, id: &str) -> Result<Lease, NodeError> {
    let l = node.lease(id)?;
    if Access(p).sees_tenant(&l.tenant) {
        Ok(l)
    } else {
        Err(NodeError::NotFound(format!("no lease {id}")))
    }
}

pub(super) async fn get_lease(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<Json<Lease>> {
    let l = blocking(&node, move |n| visible_lease(n, &p, &id)).await?;
    Ok(Json(l))
}

pub(super) async fn end_lease(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
    Extension(w): Extension<super::Workloads>,
    Path(id): Path<String>,
) -> ApiResult<Json<LeaseEnded>> {
    if p.role == Role::Auditor {
        return Err(ApiError::forbidden(&p, "end leases"));
    }
    let (lease, records) = blocking(&node, move |n| {
        visible_lease(n, &p, &id)?;
        n.end_lease(&id)
    })
    .await?;
    // Its jobs are stopped and its scratch erased now, not at the next tick.
    if let super::Workloads::On(jobs) = &w {
        jobs.poke();
    }
    Ok(Json(LeaseEnded { lease, records }))
}
