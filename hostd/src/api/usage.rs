//! `/v1/usage` and `GET /v1/bill`: usage records, receipts and invoices.

use super::*;
use hostd_api::answer::{UsageList, UsageReceipt};
use hostd_api::query::{BillQuery, UsageQuery};

pub(super) fn usage_records(node: &Node) -> Result<Vec<UsageRecord>, NodeError> {
    let leaves = node
        .with_ledger(|l| l.records(0..l.size()).collect::<Result<Vec<_>, _>>())
        .map_err(NodeError::internal)?;
    billing::usage_records(&leaves).map_err(NodeError::internal)
}

pub(super) async fn list_usage(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
    q: Result<Query<UsageQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<UsageList>> {
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
    Ok(Json(UsageList { records: out }))
}

pub(super) fn visible_record(
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
        Ok(Record::Attestation(_) | Record::GpuEvent(_) | Record::Recovery(_)) => {
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

pub(super) async fn get_usage(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
    Path(id): Path<u64>,
) -> ApiResult<Json<UsageRecord>> {
    let (_, rec) = blocking(&node, move |n| visible_record(n, &p, id)).await?;
    Ok(Json(rec))
}

pub(super) async fn get_receipt(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
    Path(id): Path<u64>,
) -> ApiResult<Json<UsageReceipt>> {
    let (leaf, receipt) = blocking(&node, move |n| {
        let (leaf, _) = visible_record(n, &p, id)?;
        let receipt = n
            .with_ledger(|l| l.receipt(id))
            .map_err(NodeError::internal)?;
        Ok((leaf, receipt))
    })
    .await?;
    // Records are JSON, hence UTF-8; a leaf that is not is reported, never lossily "repaired".
    let record = String::from_utf8(leaf).map_err(|e| ApiError::internal(&e))?;
    Ok(Json(UsageReceipt {
        id,
        record,
        receipt,
    }))
}

pub(super) async fn bill(
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
