//! Attestation: fresh evidence for a verifier, signed results from it, and the facts the
//! residency policy sees.

use super::*;
use attest::report::report;

/// The attestation facts residency rules are evaluated against.
pub(super) struct PolicyAttestation {
    pub(super) status: policy::AttestationStatus,
    /// Seconds since the result was issued; `None` without a result.
    pub(super) age_s: Option<u64>,
    /// The image version the verifier vouched for; `None` without one.
    pub(super) image_version: Option<String>,
}

/// A slot among [`MAX_CONCURRENT_ATTESTATIONS`], released on drop.
pub(super) struct InFlight<'a>(&'a AtomicUsize);

impl<'a> InFlight<'a> {
    pub(super) fn try_enter(counter: &'a AtomicUsize, max: usize) -> Option<InFlight<'a>> {
        counter
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| InFlight(counter))
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How far in the future an attestation result's `iat` may be (clock skew), seconds.
pub(super) const MAX_RESULT_SKEW_S: u64 = 300;

impl Node {
    pub fn attester(&self) -> &Attester {
        &self.attester
    }

    /// Fresh evidence answering `nonce`: GPU reports over derived nonces, the active policy
    /// digest and the ledger's latest checkpoint among the measurements.
    pub fn attest(&self, nonce: [u8; 32]) -> Result<Collected, NodeError> {
        use sha2::{Digest, Sha256};
        if self.attester.enrollment().is_none() {
            // The node's paths are for its operator's log, not for every caller.
            warn!(
                node_key = %self.cfg.state.dir.join(crate::attestation::NODE_PUB_FILE).display(),
                "asked to attest without an enrollment certificate: issue one for the node key \
                 and set [attestation] enrollment_certificate"
            );
            return Err(NodeError::Unavailable(
                "this node has no enrollment certificate, so it cannot attest; its operator \
                 must enrol it (the node's log says how)"
                    .into(),
            ));
        }
        let _slot = InFlight::try_enter(&self.attestations_in_flight, MAX_CONCURRENT_ATTESTATIONS)
            .ok_or_else(|| {
                NodeError::Busy(format!(
                    "{MAX_CONCURRENT_ATTESTATIONS} attestations are already being collected on \
                     this node; retry shortly"
                ))
            })?;
        let inventory = self.inventory()?;
        let mut dynamic: Vec<(&str, [u8; 32])> = Vec::new();
        if let Some(p) = self.residency.policy() {
            dynamic.push(("policy", p.digest().0));
        }
        let checkpoint = self.with_ledger(|l| l.checkpoint_note().to_string());
        dynamic.push((
            "ledger.checkpoint",
            Sha256::digest(checkpoint.as_bytes()).into(),
        ));
        self.attester
            .collect(nonce, unix_now(), &self.gpus, &inventory, &dynamic)
            .map_err(|e| internal("collecting evidence", e))
    }

    /// The latest attestation record in force: its id and the verified result.
    pub fn latest_attestation(&self) -> Option<(u64, AttestationResult)> {
        lock(&self.latest_attestation).clone()
    }

    /// What the policy learns from the latest verified attestation result: its status, its
    /// age, and the image version the verifier vouched for. The version comes only from the
    /// result (the reference manifest that matched), never from the node's own say-so; with
    /// no result it is `None`, and rules with `min_image_version` deny.
    pub(super) fn attestation_for_policy(&self) -> PolicyAttestation {
        use policy::AttestationStatus as P;
        let none = PolicyAttestation {
            status: P::None,
            age_s: None,
            image_version: None,
        };
        let Some((_, r)) = self.latest_attestation() else {
            return none;
        };
        let now = unix_now();
        if r.result.iat > now {
            return none;
        }
        let status = match r.status() {
            Status::Affirming => P::Affirming,
            Status::Warning => P::Warning,
            Status::Contraindicated => P::Contraindicated,
            Status::None => P::None,
        };
        PolicyAttestation {
            status,
            age_s: Some(now - r.result.iat),
            image_version: r.result.image.as_ref().map(|i| i.version.clone()),
        }
    }

    pub(super) fn load_latest_attestation(&self) -> Result<(), NodeError> {
        let Some(id) = self
            .leases
            .get::<u64>(&LeasesKey::LatestAttestation.key())?
        else {
            return Ok(());
        };
        let leaf = self
            .with_ledger(|l| l.record(id))
            .map_err(|e| internal("reading the latest attestation record", e))?
            .ok_or_else(|| {
                NodeError::internal(format!(
                    "state names attestation record {id}, which the ledger does not hold"
                ))
            })?;
        let Ok(Record::Attestation(a)) = serde_json::from_slice::<Record>(&leaf) else {
            return Err(NodeError::internal(format!(
                "state names record {id} as the latest attestation, but it is not one"
            )));
        };
        let r = AttestationResult::from_bytes(a.result.as_bytes())
            .map_err(|e| internal("attestation record", e))?;
        *lock(&self.latest_attestation) = Some((id, r));
        Ok(())
    }

    /// Verifies an attestation result from the control plane (signature by a configured
    /// verifier key, about this node, not older than the one in force) and appends it to the
    /// ledger. Returns the record id.
    pub fn receive_attestation_result(&self, bytes: &[u8]) -> Result<AttestationRecord, NodeError> {
        let trimmed = bytes.strip_suffix(b"\n").unwrap_or(bytes);
        let result = self.verified_result(trimmed)?;
        let _w = lock(&self.write);
        if let Some((id, latest)) = self.latest_attestation() {
            if result.result.iat < latest.result.iat
                || (result.result.iat == latest.result.iat
                    && result.result.evidence_digest == latest.result.evidence_digest)
            {
                return Err(NodeError::Conflict(format!(
                    "attestation result issued at {} is not newer than record {id} (issued at {}) already in force",
                    result.result.iat, latest.result.iat
                )));
            }
        }
        let rec =
            self.append_attestation(&result, String::from_utf8_lossy(trimmed).into_owned())?;
        info!(record = rec.id, status = %rec.status, "attestation result appended to the ledger");
        *lock(&self.latest_attestation) = Some((rec.id, result));
        Ok(rec)
    }

    /// The result, if a configured verifier key signed it, it is about this node's key, and
    /// it was not issued in the future.
    fn verified_result(&self, bytes: &[u8]) -> Result<AttestationResult, NodeError> {
        let keys = self
            .cfg
            .attestation
            .verifier_keys()
            .map_err(NodeError::internal)?;
        if keys.is_empty() {
            return Err(NodeError::Conflict(
                "no verifier keys are configured ([attestation] verifier_keys), so no attestation result can be accepted".into(),
            ));
        }
        let result = AttestationResult::from_bytes(bytes).map_err(|e| {
            NodeError::BadRequest(format!("not an attestation result: {e}", e = report(&e)))
        })?;
        result.verify_result_signature(&keys).map_err(|e| {
            NodeError::BadRequest(format!("attestation result refused: {e}", e = report(&e)))
        })?;
        let ours = self.attester.node_public_key();
        match &result.result.node {
            Some(n) if n.node_public_key == ours => {}
            Some(n) => {
                return Err(NodeError::BadRequest(format!(
                    "attestation result is about node key {}, not this node ({})",
                    hex::encode(n.node_public_key),
                    hex::encode(ours)
                )))
            }
            None => {
                return Err(NodeError::BadRequest(
                    "attestation result names no node (its evidence's enrollment did not verify)"
                        .into(),
                ))
            }
        }
        // A result from the future would never be in force for the policy, yet would block
        // every genuine later result (they must be newer): refuse it.
        let now = unix_now();
        if result.result.iat > now + MAX_RESULT_SKEW_S {
            return Err(NodeError::BadRequest(format!(
                "attestation result issued at {} is more than {MAX_RESULT_SKEW_S} s in the future (now {now}); check the verifier's clock",
                result.result.iat
            )));
        }
        Ok(result)
    }

    /// Appends the attestation record of `result` (its `text` as received), and the pointer
    /// to it as the latest, in one commit.
    fn append_attestation(
        &self,
        result: &AttestationResult,
        text: String,
    ) -> Result<AttestationRecord, NodeError> {
        let received = rfc3339_ms(self.clock.now_ms());
        let mut made = None;
        let node_name = self.cfg.node.name.clone();
        self.append_records(
            |id| {
                let rec = AttestationRecord {
                    v: RECORD_VERSION,
                    id,
                    node: node_name,
                    received,
                    status: format!("{:?}", result.status()).to_lowercase(),
                    iat: result.result.iat,
                    evidence_digest: hex::encode(result.result.evidence_digest),
                    verifier_key: hex::encode(result.result.verifier_key),
                    result: text,
                };
                made = Some(rec.clone());
                vec![Record::Attestation(rec)]
            },
            vec![(
                LeasesKey::LatestAttestation.key(),
                serde_json::json!(self.ledger_next_hint()),
            )],
            Vec::new(),
        )?;
        made.ok_or_else(|| NodeError::internal("no record"))
    }

    /// The id the next appended record gets.
    pub(super) fn ledger_next_hint(&self) -> u64 {
        lock(&self.ledger).next_index()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// At most `max` slots at once, from many threads; every slot is given back.
    #[test]
    fn attestation_slots_are_bounded_and_released() {
        let counter = AtomicUsize::new(0);
        let a = InFlight::try_enter(&counter, 2).expect("first");
        let b = InFlight::try_enter(&counter, 2).expect("second");
        assert!(InFlight::try_enter(&counter, 2).is_none(), "third refused");
        drop(a);
        let c = InFlight::try_enter(&counter, 2).expect("a released slot is reusable");
        drop((b, c));
        assert_eq!(counter.load(Ordering::Acquire), 0);
        let peak = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..1_000 {
                        if let Some(_slot) = InFlight::try_enter(&counter, 3) {
                            peak.fetch_max(counter.load(Ordering::Acquire), Ordering::AcqRel);
                        }
                    }
                });
            }
        });
        assert!(peak.load(Ordering::Acquire) <= 3);
        assert_eq!(counter.load(Ordering::Acquire), 0);
    }
}
