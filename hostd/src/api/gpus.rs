//! `GET /v1/gpus`.

use super::*;
use hostd_api::gpu::{GpuEntry, GpuList};

pub(super) async fn list_gpus(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
) -> ApiResult<Json<GpuList>> {
    Access(&p).reader("list the node's GPUs")?;
    let (gpus, leases) = blocking(&node, |n| Ok((n.inventory()?, n.active_leases()?))).await?;
    let gpus = gpus
        .into_iter()
        .map(|gpu| GpuEntry {
            lease: holder(&leases, &gpu.uuid).map(|l| l.id.clone()),
            gpu,
        })
        .collect();
    Ok(Json(GpuList { gpus }))
}
