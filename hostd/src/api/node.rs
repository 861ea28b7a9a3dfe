//! `GET /v1/health` and `GET /metrics`.

use super::*;
use hostd_api::answer::Health;

pub(super) async fn health(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
) -> ApiResult<Json<Health>> {
    let n = node.clone();
    let (size, gpus, problems) = blocking(&node, move |_| {
        let size = n.with_ledger(|l| l.size());
        let gpus = n.inventory().map(|g| g.len()).unwrap_or(0);
        Ok((size, gpus, n.problems()))
    })
    .await?;
    Ok(Json(Health {
        status: if problems.is_empty() {
            "ok"
        } else {
            "degraded"
        }
        .into(),
        problems,
        node: node.config().node.name.clone(),
        jurisdiction: node.config().node.jurisdiction.clone(),
        version: env!("CARGO_PKG_VERSION").into(),
        gpus,
        ledger_size: size,
        you: p.spiffe_uri(),
    }))
}

pub(super) async fn prometheus(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
) -> ApiResult<Response> {
    Access(&p).reader("read metrics")?;
    let text = blocking(&node, |n| Ok(metrics::render(n))).await?;
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response())
}
