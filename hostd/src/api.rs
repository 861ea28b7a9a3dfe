//! The HTTPS JSON API (`/v1/...`) and its authorization rules.
//!
//! Authentication happened at the TLS handshake (see `tls`); every handler receives the
//! caller's [`Principal`] and decides with [`Access`] what it may see. Tenants are confined to
//! their own tenant, leases, usage and receipts; asking for another tenant's lease answers
//! 404 exactly as for a lease that does not exist, so ids cannot be probed. Auditors read and
//! never write.

use crate::clock::parse_time_ms;
use crate::lease::{Lease, NewLease};
use crate::metrics;
use crate::node::{holder, Node, NodeError};
use crate::principal::{Principal, Role};
use auditor::billing::{self, Invoice};
use auditor::money::format_inr;
use auditor::record::{Record, UsageRecord};
use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use hostd_api::answer::ErrorBody;
use hostd_api::tenant::NewTenant;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;

/// An API error: status code plus the one documented JSON body, [`ErrorBody`].
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    body: ErrorBody,
}

impl ApiError {
    fn new(status: StatusCode, msg: impl Into<String>) -> ApiError {
        ApiError {
            status,
            body: ErrorBody::new(msg),
        }
    }

    /// A failure of the node itself. The whole error, source chain included, goes to the log
    /// under a fresh request id; the client gets only that id, never internal text or paths.
    fn internal(e: &(dyn std::error::Error + 'static)) -> ApiError {
        let request_id = request_id();
        let mut chain = e.to_string();
        let mut source = e.source();
        while let Some(s) = source {
            chain.push_str(": ");
            chain.push_str(&s.to_string());
            source = s.source();
        }
        tracing::error!(request_id = %request_id, error = %chain, "internal error");
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            body: ErrorBody {
                request_id: Some(request_id),
                ..ErrorBody::new(
                    "internal error; the node's log has the details under this request id",
                )
            },
        }
    }

    fn forbidden(p: &Principal, what: &str) -> ApiError {
        ApiError::new(
            StatusCode::FORBIDDEN,
            format!("{} may not {what}", p.spiffe_uri()),
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body)).into_response()
    }
}

impl From<NodeError> for ApiError {
    fn from(e: NodeError) -> ApiError {
        match e {
            NodeError::BadRequest(m) => ApiError::new(StatusCode::BAD_REQUEST, m),
            NodeError::NotFound(m) => ApiError::new(StatusCode::NOT_FOUND, m),
            NodeError::Conflict(m) => ApiError::new(StatusCode::CONFLICT, m),
            NodeError::Unavailable(m) => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, m),
            NodeError::Busy(m) => ApiError::new(StatusCode::TOO_MANY_REQUESTS, m),
            NodeError::Denied {
                policy_digest,
                reasons,
            } => ApiError {
                status: StatusCode::FORBIDDEN,
                body: ErrorBody {
                    policy_digest: Some(policy_digest),
                    reasons: Some(reasons),
                    ..ErrorBody::new("placement denied by residency policy")
                },
            },
            NodeError::Internal(e) => ApiError::internal(&e),
        }
    }
}

impl From<JsonRejection> for ApiError {
    /// axum already picks the right status: 400 malformed JSON, 413 body too large, 415 not
    /// JSON, 422 well-formed but wrong fields (unknown, missing or mistyped).
    fn from(r: JsonRejection) -> ApiError {
        ApiError::new(r.status(), r.body_text())
    }
}

type ApiResult<T> = Result<T, ApiError>;

/// A request id for the log line of an internal error: 16 hex digits, unique in practice.
fn request_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    format!(
        "{:016x}",
        t ^ n.rotate_left(48) ^ u64::from(std::process::id())
    )
}

/// What a principal may do, in one place.
struct Access<'a>(&'a Principal);

impl Access<'_> {
    fn operator(&self, what: &str) -> ApiResult<()> {
        match self.0.role {
            Role::Operator => Ok(()),
            _ => Err(ApiError::forbidden(self.0, what)),
        }
    }

    fn reader(&self, what: &str) -> ApiResult<()> {
        match self.0.role {
            Role::Operator | Role::Auditor => Ok(()),
            Role::Tenant => Err(ApiError::forbidden(self.0, what)),
        }
    }

    /// Operators and auditors see every tenant; a tenant sees itself.
    fn sees_tenant(&self, tenant: &str) -> bool {
        match self.0.role {
            Role::Operator | Role::Auditor => true,
            Role::Tenant => self.0.name == tenant,
        }
    }

    /// Operators act for any tenant; a tenant acts for itself; auditors never act.
    fn acts_for(&self, tenant: &str, what: &str) -> ApiResult<()> {
        match self.0.role {
            Role::Operator => Ok(()),
            Role::Tenant if self.0.name == tenant => Ok(()),
            _ => Err(ApiError::forbidden(self.0, what)),
        }
    }
}

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

/// The API's routes over `node`.
pub fn router(node: Arc<Node>) -> Router {
    let limit = node.config().api.max_body_bytes;
    Router::new()
        .route("/v1/health", get(health))
        .route("/metrics", get(prometheus))
        .route("/v1/tenants", get(list_tenants).post(create_tenant))
        .route("/v1/tenants/{id}", get(get_tenant))
        .route("/v1/tenants/{id}/suspend", post(suspend_tenant))
        .route("/v1/gpus", get(list_gpus))
        .route("/v1/leases", get(list_leases).post(create_lease))
        .route("/v1/leases/{id}", get(get_lease))
        .route("/v1/leases/{id}/end", post(end_lease))
        .route("/v1/usage", get(list_usage))
        .route("/v1/usage/{id}", get(get_usage))
        .route("/v1/usage/{id}/receipt", get(get_receipt))
        .route("/v1/bill", get(bill))
        .route("/v1/audit/checkpoint", get(checkpoint))
        .route("/v1/audit/vkey", get(vkey))
        .route("/v1/audit/records", get(records))
        .route("/v1/audit/consistency", get(consistency))
        .route("/v1/attestation", post(attestation))
        .route("/v1/attestation/results", post(attestation_result))
        .route("/v1/attestation/latest", get(latest_attestation))
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such endpoint") })
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn_with_state(
            limit,
            crate::limits::enforce,
        ))
        .with_state(node)
}

async fn health(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
) -> ApiResult<Json<Value>> {
    let n = node.clone();
    let (size, gpus) = blocking(&node, move |_| {
        let size = n.with_ledger(|l| l.size());
        let gpus = n.inventory().map(|g| g.len()).unwrap_or(0);
        Ok((size, gpus))
    })
    .await?;
    Ok(Json(json!({
        "status": "ok",
        "node": node.config().node.name,
        "jurisdiction": node.config().node.jurisdiction,
        "version": env!("CARGO_PKG_VERSION"),
        "gpus": gpus,
        "ledger_size": size,
        "you": p.spiffe_uri(),
    })))
}

async fn prometheus(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
) -> ApiResult<Response> {
    Access(&p).reader("read metrics")?;
    let text = blocking(&node, |n| Ok(metrics::render(n))).await?;
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response())
}

async fn list_tenants(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
) -> ApiResult<Json<Value>> {
    let all = blocking(&node, |n| n.tenants()).await?;
    let a = Access(&p);
    let visible: Vec<_> = all.into_iter().filter(|t| a.sees_tenant(&t.id)).collect();
    Ok(Json(json!({ "tenants": visible })))
}

async fn create_tenant(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
    body: Result<Json<NewTenant>, JsonRejection>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    Access(&p).operator("create tenants")?;
    let Json(req) = body?;
    let t = blocking(&node, move |n| n.create_tenant(req)).await?;
    Ok((StatusCode::CREATED, Json(json!(t))))
}

async fn get_tenant(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    if !Access(&p).sees_tenant(&id) {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no tenant {id}"),
        ));
    }
    let t = blocking(&node, move |n| n.tenant(&id)).await?;
    Ok(Json(json!(t)))
}

async fn suspend_tenant(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    Access(&p).operator("suspend tenants")?;
    let t = blocking(&node, move |n| n.suspend_tenant(&id)).await?;
    Ok(Json(json!(t)))
}

async fn list_gpus(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
) -> ApiResult<Json<Value>> {
    Access(&p).reader("list the node's GPUs")?;
    let (gpus, leases) = blocking(&node, |n| Ok((n.inventory()?, n.leases()?))).await?;
    let out: Vec<Value> = gpus
        .into_iter()
        .map(|g| {
            let lease = holder(&leases, &g.uuid).map(|l| l.id.clone());
            let mut v = json!(g);
            if let Some(obj) = v.as_object_mut() {
                obj.insert("lease".into(), json!(lease));
            }
            v
        })
        .collect();
    Ok(Json(json!({ "gpus": out })))
}

async fn list_leases(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
) -> ApiResult<Json<Value>> {
    let all = blocking(&node, |n| n.leases()).await?;
    let a = Access(&p);
    let visible: Vec<Lease> = all
        .into_iter()
        .filter(|l| a.sees_tenant(&l.tenant))
        .collect();
    Ok(Json(json!({ "leases": visible })))
}

async fn create_lease(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
    body: Result<Json<NewLease>, JsonRejection>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let Json(req) = body?;
    Access(&p).acts_for(&req.tenant, "lease GPUs for another tenant")?;
    let l = blocking(&node, move |n| n.create_lease(req)).await?;
    Ok((StatusCode::CREATED, Json(json!(l))))
}

/// A lease the principal may see, else 404 (not 403: don't confirm other tenants' ids).
fn visible_lease(node: &Node, p: &Principal, id: &str) -> Result<Lease, NodeError> {
    let l = node.lease(id)?;
    if Access(p).sees_tenant(&l.tenant) {
        Ok(l)
    } else {
        Err(NodeError::NotFound(format!("no lease {id}")))
    }
}

async fn get_lease(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let l = blocking(&node, move |n| visible_lease(n, &p, &id)).await?;
    Ok(Json(json!(l)))
}

async fn end_lease(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    if p.role == Role::Auditor {
        return Err(ApiError::forbidden(&p, "end leases"));
    }
    let (lease, records) = blocking(&node, move |n| {
        visible_lease(n, &p, &id)?;
        n.end_lease(&id)
    })
    .await?;
    Ok(Json(json!({ "lease": lease, "records": records })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UsageQuery {
    tenant: Option<String>,
    lease: Option<String>,
}

fn usage_records(node: &Node) -> Result<Vec<UsageRecord>, NodeError> {
    let leaves = node
        .with_ledger(|l| l.records(0..l.size()).collect::<Result<Vec<_>, _>>())
        .map_err(NodeError::internal)?;
    billing::usage_records(&leaves).map_err(NodeError::internal)
}

async fn list_usage(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
    q: Result<Query<UsageQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<Value>> {
    let Query(q) = q.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.body_text()))?;
    let tenant = match p.role {
        Role::Tenant => {
            if q.tenant.as_deref().is_some_and(|t| t != p.name) {
                return Err(ApiError::forbidden(&p, "read another tenant's usage"));
            }
            Some(p.name.clone())
        }
        _ => q.tenant,
    };
    let records = blocking(&node, usage_records).await?;
    let out: Vec<UsageRecord> = records
        .into_iter()
        .filter(|r| tenant.as_deref().is_none_or(|t| r.tenant == t))
        .filter(|r| q.lease.as_deref().is_none_or(|l| r.lease == l))
        .collect();
    Ok(Json(json!({ "records": out })))
}

fn visible_record(
    node: &Node,
    p: &Principal,
    id: u64,
) -> Result<(Vec<u8>, UsageRecord), NodeError> {
    let leaf = node
        .with_ledger(|l| l.record(id))
        .map_err(NodeError::internal)?
        .ok_or_else(|| NodeError::NotFound(format!("no record {id}")))?;
    let rec = match serde_json::from_slice::<Record>(&leaf) {
        Ok(Record::Usage(u)) => u,
        Ok(Record::Attestation(_) | Record::GpuEvent(_)) => {
            return Err(NodeError::NotFound(format!(
                "record {id} is not a usage record"
            )))
        }
        Err(e) => {
            return Err(NodeError::internal(format!(
                "record {id} is undecodable: {e}"
            )))
        }
    };
    if Access(p).sees_tenant(&rec.tenant) {
        Ok((leaf, rec))
    } else {
        Err(NodeError::NotFound(format!("no record {id}")))
    }
}

async fn get_usage(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
    Path(id): Path<u64>,
) -> ApiResult<Json<Value>> {
    let (_, rec) = blocking(&node, move |n| visible_record(n, &p, id)).await?;
    Ok(Json(json!(rec)))
}

async fn get_receipt(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
    Path(id): Path<u64>,
) -> ApiResult<Json<Value>> {
    let (leaf, receipt) = blocking(&node, move |n| {
        let (leaf, _) = visible_record(n, &p, id)?;
        let receipt = n
            .with_ledger(|l| l.receipt(id))
            .map_err(NodeError::internal)?;
        Ok((leaf, receipt))
    })
    .await?;
    Ok(Json(json!({
        "id": id,
        "record": String::from_utf8_lossy(&leaf),
        "receipt": receipt,
    })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BillQuery {
    tenant: String,
    from: Option<String>,
    to: Option<String>,
}

async fn bill(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
    q: Result<Query<BillQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<Invoice>> {
    let Query(q) = q.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.body_text()))?;
    if !Access(&p).sees_tenant(&q.tenant) {
        return Err(ApiError::forbidden(&p, "read another tenant's bill"));
    }
    let parse = |s: &Option<String>| -> ApiResult<Option<i64>> {
        s.as_deref()
            .map(parse_time_ms)
            .transpose()
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e))
    };
    let (from_ms, to_ms) = (parse(&q.from)?, parse(&q.to)?);
    let invoice = blocking(&node, move |n| {
        let verified = n.verified_ledger()?;
        let records = billing::usage_records(&verified.leaves).map_err(NodeError::internal)?;
        let start = |r: &UsageRecord| parse_time_ms(&r.start).ok();
        let (lines, record_ids) = billing::invoice(&records, &q.tenant, from_ms, to_ms, start);
        let total_paise = lines.iter().map(|l| l.amount_paise).sum();
        Ok(Invoice {
            tenant: q.tenant,
            from: q.from,
            to: q.to,
            lines,
            total_paise,
            total: format_inr(total_paise),
            record_ids,
            checkpoint: verified.checkpoint,
        })
    })
    .await?;
    Ok(Json(invoice))
}

async fn checkpoint(State(node): State<Arc<Node>>) -> ApiResult<Response> {
    let note = blocking(&node, |n| {
        Ok(n.with_ledger(|l| l.checkpoint_note().to_string()))
    })
    .await?;
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], note).into_response())
}

async fn vkey(State(node): State<Arc<Node>>) -> ApiResult<Response> {
    let v = blocking(&node, |n| Ok(n.with_ledger(|l| l.vkey()))).await?;
    Ok((
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("{v}\n"),
    )
        .into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RecordsQuery {
    /// Records `0..size`; default: the current checkpoint's size.
    size: Option<u64>,
}

/// `records.jsonl` for records `0..size`: the auditor pairs it with a checkpoint of that size.
async fn records(
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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConsistencyQuery {
    from: u64,
}

async fn consistency(
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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AttestationRequest {
    /// The verifier's challenge: 32 bytes, 64 hex digits.
    nonce: String,
}

/// Operators and auditors may attest the node; a tenant only while it holds an active lease
/// here (it must be able to check the node it is about to trust with data).
fn may_attest(node: &Node, p: &Principal) -> Result<bool, NodeError> {
    Ok(match p.role {
        Role::Operator | Role::Auditor => true,
        Role::Tenant => node
            .leases()?
            .iter()
            .any(|l| l.tenant == p.name && l.state == crate::lease::LeaseState::Active),
    })
}

/// `POST /v1/attestation {"nonce": HEX}` → fresh signed evidence over that nonce.
async fn attestation(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
    body: Result<Json<AttestationRequest>, JsonRejection>,
) -> ApiResult<Json<Value>> {
    let Json(req) = body?;
    let mut nonce = [0u8; 32];
    if req.nonce.len() != 64 || hex::decode_to_slice(&req.nonce, &mut nonce).is_err() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "nonce must be 32 bytes as 64 hex digits",
        ));
    }
    let who = p.clone();
    let allowed = blocking(&node, move |n| may_attest(n, &who)).await?;
    if !allowed {
        return Err(ApiError::forbidden(
            &p,
            "attest this node without an active lease on it",
        ));
    }
    let collected = blocking(&node, move |n| n.attest(nonce)).await?;
    tracing::info!(principal = %p.spiffe_uri(), "attestation evidence issued");
    Ok(Json(json!({
        "evidence": String::from_utf8_lossy(&collected.evidence),
        "measurement_notes": collected.notes,
    })))
}

/// `POST /v1/attestation/results` with a signed attestation result (canonical JSON) from
/// the control plane's verifier: verified and appended to the ledger (operators only).
async fn attestation_result(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
    body: axum::body::Bytes,
) -> ApiResult<(StatusCode, Json<Value>)> {
    Access(&p).operator("deliver attestation results")?;
    let rec = blocking(&node, move |n| n.receive_attestation_result(&body)).await?;
    Ok((StatusCode::CREATED, Json(json!(rec))))
}

/// `GET /v1/attestation/latest`: the attestation record in force (readers).
async fn latest_attestation(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
) -> ApiResult<Json<Value>> {
    Access(&p).reader("read the node's attestation record")?;
    let latest = blocking(&node, |n| {
        let Some((id, _)) = n.latest_attestation() else {
            return Err(NodeError::NotFound(
                "no attestation result has been delivered to this node".into(),
            ));
        };
        let leaf = n
            .with_ledger(|l| l.record(id))
            .map_err(NodeError::internal)?
            .ok_or_else(|| NodeError::internal(format!("record {id} is missing")))?;
        serde_json::from_slice::<Value>(&leaf).map_err(NodeError::internal)
    })
    .await?;
    Ok(Json(latest))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store failure's text names state paths; the client sees neither the path nor the
    /// error text, only a request id it can quote to the operator.
    #[tokio::test]
    async fn an_internal_error_answers_500_without_paths_or_internal_text() {
        let io = std::io::Error::other("/var/lib/hostd/state/db/blobs/7: No space left on device");
        let e = NodeError::Internal(crate::node::InternalError {
            context: "writing the intent".into(),
            source: Box::new(io),
        });
        let response = ApiError::from(e).into_response();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let bytes = http_body_util::BodyExt::collect(response.into_body())
            .await
            .unwrap()
            .to_bytes();
        let text = String::from_utf8(bytes.to_vec()).unwrap();
        for leak in ["/var", "state/db", "No space", "intent"] {
            assert!(!text.contains(leak), "{leak} leaked: {text}");
        }
        let body: ErrorBody = serde_json::from_str(&text).unwrap();
        assert_eq!(body.request_id.as_deref().map(str::len), Some(16), "{text}");
    }
}
