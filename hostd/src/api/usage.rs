//! `/v1/usage` and `GET /v1/bill`: usage records, receipts and invoices.

use super::*;
use crate::ledger::Snapshot;
use attest::report::report;
use hostd_api::answer::{UsageList, UsageReceipt};
use hostd_api::query::{
    BillQuery, UsageQuery, USAGE_LIMIT_DEFAULT, USAGE_LIMIT_MAX, USAGE_SCAN_MAX,
};

/// One `GET /v1/usage` page from `snap`: the usage records with id > `after` (from the start
/// when `None`) matching `tenant` and `lease`, in id order, at most `limit` of them, reading
/// one record at a time and at most `scan_max` records (matching or not). `next_after` is the
/// last id scanned, or `None` when the scan reached the snapshot's end.
pub(super) fn usage_page(
    snap: &Snapshot,
    tenant: Option<&str>,
    lease: Option<&str>,
    after: Option<u64>,
    limit: u64,
    scan_max: u64,
) -> Result<UsageList, NodeError> {
    let start = match after {
        None => 0,
        Some(a) => a.saturating_add(1),
    };
    let end = start.saturating_add(scan_max).min(snap.size());
    let mut records = Vec::new();
    let mut last = None;
    for item in snap.records_in(start..end) {
        let (id, leaf) = item.map_err(NodeError::internal)?;
        last = Some(id);
        let Some(r) = billing::usage_record(id, &leaf).map_err(NodeError::internal)? else {
            continue;
        };
        if tenant.is_some_and(|t| r.tenant != t) || lease.is_some_and(|l| r.lease != l) {
            continue;
        }
        records.push(r);
        if records.len() as u64 >= limit {
            break;
        }
    }
    let next_after = last.filter(|&id| id.saturating_add(1) < snap.size());
    Ok(UsageList {
        records,
        next_after,
    })
}

/// The page size a query asks for: [`USAGE_LIMIT_DEFAULT`] when it names none, refused
/// outside `1..=USAGE_LIMIT_MAX`.
pub(super) fn page_limit(q: &UsageQuery) -> Result<u64, ApiError> {
    match q.limit {
        None => Ok(USAGE_LIMIT_DEFAULT),
        Some(n) if (1..=USAGE_LIMIT_MAX).contains(&n) => Ok(n),
        Some(n) => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("limit {n} is out of range: a page holds 1 to {USAGE_LIMIT_MAX} records"),
        )),
    }
}

/// `GET /v1/usage`: one page (see [`UsageQuery`]) read from a ledger snapshot, without the
/// ledger's lock.
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
        _ => q.tenant.clone(),
    };
    let limit = page_limit(&q)?;
    let page = blocking(&node, move |n| {
        let snap = n.ledger_snapshot();
        usage_page(
            &snap,
            tenant.as_deref(),
            q.lease.as_deref(),
            q.after,
            limit,
            USAGE_SCAN_MAX,
        )
    })
    .await?;
    Ok(Json(page))
}

pub(super) fn visible_record(
    node: &Node,
    p: &Principal,
    id: u64,
) -> Result<(Vec<u8>, UsageRecord), NodeError> {
    let leaf = node
        .with_ledger(|l| l.record(id))
        .map_err(NodeError::internal)?
        .ok_or_else(|| NodeError::NotFound(format!("no usage record {id}")))?;
    let rec = match serde_json::from_slice::<Record>(&leaf) {
        Ok(Record::Usage(u)) => u,
        // Job usage, scratch erasures and transfers are not GPU usage: not served here.
        Ok(
            Record::Attestation(_)
            | Record::GpuEvent(_)
            | Record::Recovery(_)
            | Record::JobUsage(_)
            | Record::ScratchErased(_)
            | Record::Transfer(_),
        ) => {
            // Worded as for a record that does not exist: a tenant must not learn what kind
            // of record another tenant's id is.
            return Err(NodeError::NotFound(format!("no usage record {id}")));
        }
        Err(e) => {
            return Err(NodeError::internal(format!(
                "record {id} is undecodable: {e}",
                e = report(&e)
            )))
        }
    };
    if Access(p).sees_tenant(&rec.tenant) {
        Ok((leaf, rec))
    } else {
        Err(NodeError::NotFound(format!("no usage record {id}")))
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
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.to_string()))
    };
    let (from_ms, to_ms) = (parse(&q.from)?, parse(&q.to)?);
    // One pass over a snapshot: every record checked against the signed root, the tenant's
    // folded into the invoice as it goes; only the billed records' ids are kept.
    let invoice = blocking(&node, move |n| {
        let mut acc = billing::InvoiceBuilder::new(&q.tenant, from_ms, to_ms);
        let checkpoint = n.fold_verified_ledger(|index, leaf| {
            if let Some(r) = billing::usage_record(index, leaf).map_err(NodeError::internal)? {
                acc.add(&r, parse_time_ms(&r.start).ok())
                    .map_err(unbillable)?;
            }
            Ok(())
        })?;
        finish_invoice(acc, q, checkpoint)
    })
    .await?;
    Ok(Json(invoice))
}

/// The invoice of the records folded into `acc`, its total checked: sums past `u64` are an
/// error, never a wrapped total.
fn finish_invoice(
    acc: billing::InvoiceBuilder,
    q: BillQuery,
    checkpoint: String,
) -> Result<Invoice, NodeError> {
    let (lines, record_ids) = acc.finish();
    let total_paise = billing::total_paise(&lines).map_err(unbillable)?;
    Ok(Invoice {
        tenant: q.tenant,
        from: q.from,
        to: q.to,
        lines,
        total_paise,
        total: format_inr(total_paise),
        record_ids,
        checkpoint,
    })
}

/// A bill whose sums do not fit 64 bits: 409 with the line and record that overflowed (the
/// caller may see its own bill's records), logged; no real use comes near it.
fn unbillable(e: billing::BillOverflow) -> NodeError {
    tracing::warn!(error = %e, "a bill does not fit 64 bits; refused");
    NodeError::Conflict(format!(
        "the bill cannot be computed: {e}; the ledger's usage records hold amounts no real use \
         reaches (ask for a shorter period with from/to, and audit the ledger)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::Ledger;
    use attest::note::NoteSigner;

    fn usage(id: u64, tenant: &str, lease: &str) -> Vec<u8> {
        Record::Usage(UsageRecord {
            v: 1,
            id,
            node: "n".into(),
            tenant: tenant.into(),
            lease: lease.into(),
            gpu_uuid: "GPU-0".into(),
            gpu_model: "H100".into(),
            start: "2026-01-01T00:00:00Z".into(),
            end: "2026-01-01T00:01:00Z".into(),
            gpu_ms: 60_000,
            gpu_seconds: 60.0,
            energy_joules: 1.0,
            peak_memory_bytes: 0,
            mean_utilization_pct: 0.0,
            rate_paise_per_hour: 25_000,
            amount_paise: 417,
            policy_digest: String::new(),
            prev: None,
            attestation: None,
        })
        .to_leaf()
        .unwrap()
    }

    /// A job-usage record of tenant a, lease x.
    fn job_usage(id: u64) -> Vec<u8> {
        Record::JobUsage(auditor::record::JobUsageRecord {
            v: 1,
            id,
            node: "n".into(),
            tenant: "a".into(),
            lease: "x".into(),
            job: "job-1".into(),
            start: "2026-01-01T00:00:00.000Z".into(),
            end: "2026-01-01T00:01:00.000Z".into(),
            cpu_ns: 1,
            memory_peak_bytes: 1,
            bytes_in: 1,
            bytes_out: 1,
            ended: false,
            exit: None,
        })
        .to_leaf()
        .unwrap()
    }

    /// 30 records: every third is a non-usage leaf (recovery, job usage, scratch erasure); usage records alternate tenants a and b,
    /// and tenant a's alternate leases x and y.
    fn ledger() -> (tempfile::TempDir, Snapshot) {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new()
            .path(dir.path().join("db"))
            .open()
            .unwrap();
        let signer = NoteSigner::from_seed("n/usage", &[3; 32]).unwrap();
        let mut l = Ledger::open(&db, signer).unwrap();
        let leaves: Vec<Vec<u8>> = (0..30u64)
            .map(|i| match (i % 3, i % 9) {
                // Job usage and scratch erasures are not GPU usage: pages skip them.
                (0, 3) => job_usage(i),
                (0, 6) => Record::ScratchErased(auditor::record::ScratchErasedRecord {
                    v: 1,
                    id: i,
                    node: "n".into(),
                    tenant: "a".into(),
                    lease: "x".into(),
                    at: "2026-01-01T00:00:00.000Z".into(),
                    bytes: 1,
                    files_busy: false,
                })
                .to_leaf()
                .unwrap(),
                (0, _) => Record::Recovery(auditor::record::RecoveryRecord {
                    v: 1,
                    id: i,
                    node: "n".into(),
                    at: "2026-01-01T00:00:00Z".into(),
                    store_size: 0,
                    witnessed_size: 0,
                    reappended: 0,
                    export_size: 0,
                    export_root: String::new(),
                })
                .to_leaf()
                .unwrap(),
                (1, _) => usage(i, "a", if i % 2 == 0 { "x" } else { "y" }),
                _ => usage(i, "b", "z"),
            })
            .collect();
        l.append(&leaves).unwrap();
        (dir, l.snapshot())
    }

    fn ids(page: &UsageList) -> Vec<u64> {
        page.records.iter().map(|r| r.id).collect()
    }

    #[test]
    fn pages_follow_after_limit_and_filters() {
        let (_d, snap) = ledger();
        // Everything, one page.
        let all = usage_page(&snap, None, None, None, 1000, 100_000).unwrap();
        assert_eq!(all.records.len(), 20);
        assert_eq!(all.next_after, None);
        // Pages of 3 of tenant a's records, chained by next_after, give the same records.
        let mut after = None;
        let mut chained = Vec::new();
        loop {
            let page = usage_page(&snap, Some("a"), None, after, 3, 100_000).unwrap();
            assert!(page.records.len() <= 3);
            assert!(page.records.iter().all(|r| r.tenant == "a"));
            assert!(ids(&page).iter().all(|&id| after.is_none_or(|a| id > a)));
            chained.extend(ids(&page));
            match page.next_after {
                Some(n) => {
                    assert_eq!(
                        Some(&n),
                        chained.last(),
                        "a full page resumes after its last"
                    );
                    after = Some(n);
                }
                None => break,
            }
        }
        assert_eq!(chained, vec![1, 4, 7, 10, 13, 16, 19, 22, 25, 28]);
        // ids strictly greater than `after`.
        let page = usage_page(&snap, None, None, Some(4), 2, 100_000).unwrap();
        assert_eq!(ids(&page), vec![5, 7]);
        assert_eq!(page.next_after, Some(7));
        // A lease filter.
        let page = usage_page(&snap, Some("a"), Some("x"), None, 1000, 100_000).unwrap();
        assert_eq!(ids(&page), vec![4, 10, 16, 22, 28]);
        // A full page that ends on the last record has reached the end.
        let page = usage_page(&snap, Some("b"), None, Some(26), 1, 100_000).unwrap();
        assert_eq!((ids(&page), page.next_after), (vec![29], None));
        let page = usage_page(&snap, Some("a"), None, Some(25), 1, 100_000).unwrap();
        assert_eq!((ids(&page), page.next_after), (vec![28], Some(28)));
        // Past the end: nothing, and no next page.
        for after in [29, 30, u64::MAX] {
            let page = usage_page(&snap, None, None, Some(after), 10, 100_000).unwrap();
            assert!(page.records.is_empty() && page.next_after.is_none());
        }
    }

    #[test]
    fn a_page_scans_at_most_scan_max_records() {
        let (_d, snap) = ledger();
        // Records 0..7 scanned: tenant b's are 2 and 5; the next page starts after 6.
        let page = usage_page(&snap, Some("b"), None, None, 1000, 7).unwrap();
        assert_eq!(ids(&page), vec![2, 5]);
        assert_eq!(page.next_after, Some(6));
        // A tenant with no records still gets an answer per bounded scan, and reaches the end.
        let mut after = None;
        let mut pages = 0;
        loop {
            let page = usage_page(&snap, Some("nobody"), None, after, 1000, 7).unwrap();
            assert!(page.records.is_empty());
            pages += 1;
            match page.next_after {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        assert_eq!(pages, 5, "30 records, 7 per scan");
    }

    /// A bill past `u64::MAX` paise is a clear 409, never a wrapped total (release) or a
    /// panic (debug): per line while folding, and for the total of lines that each fit.
    #[test]
    fn a_bill_past_u64_is_refused_not_wrapped() {
        let rec = |id: u64, lease: &str, amount: u64| {
            let leaf = usage(id, "a", lease);
            let mut r = billing::usage_record(id, &leaf).unwrap().unwrap();
            r.amount_paise = amount;
            r
        };
        let q = || BillQuery {
            tenant: "a".into(),
            from: None,
            to: None,
        };
        let start = Some(0);
        let mut acc = billing::InvoiceBuilder::new("a", None, None);
        acc.add(&rec(0, "x", u64::MAX), start).unwrap();
        acc.add(&rec(1, "y", 1), start).unwrap();
        let e = finish_invoice(acc, q(), String::new()).unwrap_err();
        let NodeError::Conflict(m) = &e else {
            panic!("{e:?}")
        };
        assert!(
            m.starts_with("the bill cannot be computed: the invoice total of 2 lines does not fit"),
            "{m}"
        );
        let r = ApiError::from(e).into_response();
        assert_eq!(r.status(), StatusCode::CONFLICT);

        let mut acc = billing::InvoiceBuilder::new("a", None, None);
        acc.add(&rec(0, "x", u64::MAX), start).unwrap();
        let e = unbillable(acc.add(&rec(1, "x", 1), start).unwrap_err());
        assert!(
            matches!(&e, NodeError::Conflict(m) if m.contains("lease x") && m.contains("record 1")),
            "{e:?}"
        );
        // Within 64 bits: the total is the sum.
        let mut acc = billing::InvoiceBuilder::new("a", None, None);
        acc.add(&rec(0, "x", u64::MAX - 1), start).unwrap();
        acc.add(&rec(1, "y", 1), start).unwrap();
        let inv = finish_invoice(acc, q(), String::new()).unwrap();
        assert_eq!(inv.total_paise, u64::MAX);
    }

    #[test]
    fn limits_default_and_are_bounded() {
        let q = |limit| UsageQuery {
            limit,
            ..UsageQuery::default()
        };
        assert_eq!(page_limit(&q(None)).unwrap(), USAGE_LIMIT_DEFAULT);
        assert_eq!(
            page_limit(&q(Some(USAGE_LIMIT_MAX))).unwrap(),
            USAGE_LIMIT_MAX
        );
        for bad in [0, USAGE_LIMIT_MAX + 1, u64::MAX] {
            let e = page_limit(&q(Some(bad))).unwrap_err();
            assert_eq!(e.into_response().status(), StatusCode::BAD_REQUEST);
        }
    }
}
