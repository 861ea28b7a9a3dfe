//! `/v1/leases`.

use super::*;
use hostd_api::answer::{LeaseEnded, LeaseList};

pub(super) async fn list_leases(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
) -> ApiResult<Json<LeaseList>> {
    let all = blocking(&node, |n| n.leases()).await?;
    let a = Access(&p);
    let visible: Vec<Lease> = all
        .into_iter()
        .filter(|l| a.sees_tenant(&l.tenant))
        .collect();
    Ok(Json(LeaseList { leases: visible }))
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
