//! `/v1/attestation*`: fresh evidence, signed results, the result in force.

use super::*;
use auditor::record::AttestationRecord;
use hostd_api::answer::{AttestationRequest, EvidenceAnswer};

/// Operators and auditors may attest the node; a tenant only while it holds an active lease
/// here (it must be able to check the node it is about to trust with data).
pub(super) fn may_attest(node: &Node, p: &Principal) -> Result<bool, NodeError> {
    Ok(match p.role {
        Role::Operator | Role::Auditor => true,
        Role::Tenant => node.active_leases()?.iter().any(|l| l.tenant == p.name),
    })
}

/// `POST /v1/attestation {"nonce": HEX}` → fresh signed evidence over that nonce.
pub(super) async fn attestation(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
    body: Result<Json<AttestationRequest>, JsonRejection>,
) -> ApiResult<Json<EvidenceAnswer>> {
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
    // Canonical JSON is UTF-8; anything else is the node's bug, never lossily "repaired".
    let evidence = String::from_utf8(collected.evidence).map_err(|e| ApiError::internal(&e))?;
    Ok(Json(EvidenceAnswer {
        evidence,
        measurement_notes: collected.notes,
    }))
}

/// `POST /v1/attestation/results` with a signed attestation result (canonical JSON) from
/// the control plane's verifier: verified and appended to the ledger (operators only).
pub(super) async fn attestation_result(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
    body: axum::body::Bytes,
) -> ApiResult<(StatusCode, Json<AttestationRecord>)> {
    Access(&p).operator("deliver attestation results")?;
    let rec = blocking(&node, move |n| n.receive_attestation_result(&body)).await?;
    Ok((StatusCode::CREATED, Json(rec)))
}

/// `GET /v1/attestation/latest`: the attestation record in force (readers).
pub(super) async fn latest_attestation(
    State(node): State<Arc<Node>>,
    Extension(p): Extension<Principal>,
) -> ApiResult<Json<AttestationRecord>> {
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
        match serde_json::from_slice::<Record>(&leaf).map_err(NodeError::internal)? {
            Record::Attestation(a) => Ok(a),
            _ => Err(NodeError::internal(format!(
                "record {id} is named the latest attestation but is not one"
            ))),
        }
    })
    .await?;
    Ok(Json(latest))
}
