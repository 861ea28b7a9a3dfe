//! `GET /v1/health` and `GET /metrics`.

use super::*;
use hostd_api::answer::Health;

pub(super) async fn health(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
) -> ApiResult<Json<Health>> {
    let n = node.clone();
    let (size, (problems, gpus)) = blocking(&node, move |_| {
        Ok((n.with_ledger(|l| l.size()), n.health()))
    })
    .await?;
    let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
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
