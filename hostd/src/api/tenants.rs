//! `/v1/tenants`.

use super::*;
use hostd_api::answer::TenantList;
use hostd_api::tenant::Tenant;

pub(super) async fn list_tenants(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
) -> ApiResult<Json<TenantList>> {
    let all = blocking(&node, |n| n.tenants()).await?;
    let a = Access(&p);
    let visible: Vec<_> = all.into_iter().filter(|t| a.sees_tenant(&t.id)).collect();
    Ok(Json(TenantList { tenants: visible }))
}

pub(super) async fn create_tenant(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
    body: Result<Json<NewTenant>, JsonRejection>,
) -> ApiResult<(StatusCode, Json<Tenant>)> {
    Access(&p).operator("create tenants")?;
    let Json(req) = body?;
    let t = blocking(&node, move |n| n.create_tenant(req)).await?;
    Ok((StatusCode::CREATED, Json(t)))
}

pub(super) async fn get_tenant(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<Json<Tenant>> {
    if !Access(&p).sees_tenant(&id) {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no tenant {id}"),
        ));
    }
    let t = blocking(&node, move |n| n.tenant(&id)).await?;
    Ok(Json(t))
}

pub(super) async fn suspend_tenant(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<Json<Tenant>> {
    Access(&p).operator("suspend tenants")?;
    let t = blocking(&node, move |n| n.suspend_tenant(&id)).await?;
    Ok(Json(t))
}
