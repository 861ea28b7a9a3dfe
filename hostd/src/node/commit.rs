//! The write-ahead intent: records and the state they imply are written to the store before
//! the ledger append, so a crash at any point neither loses nor duplicates a record.

use super::*;

/// A record's leaf bytes as the intent holds them. serde_json writes UTF-8, so this never
/// converts lossily; a record that cannot be serialised is an error, never an empty leaf.
pub(super) fn leaf_text(rec: &Record) -> Result<String, NodeError> {
    let leaf = rec.to_leaf().map_err(|e| internal("record", e))?;
    String::from_utf8(leaf).map_err(|e| internal("record", e))
}

/// A pending ledger append and the state it commits, written before the append.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Intent {
    start: u64,
    leaves: Vec<String>,
    puts: Vec<(String, serde_json::Value)>,
    removes: Vec<String>,
}

impl Node {
    pub(super) fn recover(&self) -> Result<(), NodeError> {
        let _w = lock(&self.write);
        self.complete_pending_intent()?;
        Ok(())
    }

    /// Finishes an append whose state change did not land (a crash, or a failure after the
    /// records were appended); `true` if there was one. The caller holds the write lock.
    fn complete_pending_intent(&self) -> Result<bool, NodeError> {
        let Some(intent) = self.leases.get::<Intent>(&LeasesKey::Intent.key())? else {
            return Ok(false);
        };
        let n = intent.leaves.len() as u64;
        let size = lock(&self.ledger).size();
        if size == intent.start {
            info!(
                start = intent.start,
                records = n,
                "completing an interrupted ledger append"
            );
            let leaves: Vec<Vec<u8>> = intent
                .leaves
                .iter()
                .map(|l| l.clone().into_bytes())
                .collect();
            lock(&self.ledger)
                .append(&leaves)
                .map_err(|e| internal("ledger append", e))?;
        } else if size != intent.start + n {
            return Err(NodeError::internal(format!(
                "state and ledger disagree: a pending append of records {}..{} but the ledger holds {size} records; refusing to guess — restore the state directory from backup",
                intent.start,
                intent.start + n
            )));
        }
        self.apply_intent(&intent)?;
        Ok(true)
    }

    /// Refuses to commit over an earlier append whose state change did not land: the caller
    /// computed what it commits from the state before that change (a meter cursor that had
    /// not moved), so committing it would repeat the earlier records' span, and its own
    /// intent would replace the earlier one. The earlier append is completed first; the
    /// caller's next round starts from the completed state.
    fn no_pending_intent(&self) -> Result<(), NodeError> {
        if self.complete_pending_intent()? {
            warn!("completed an earlier ledger append whose state change had not landed");
            return Err(NodeError::Unavailable(
                "the node completed an earlier change first; try again".into(),
            ));
        }
        Ok(())
    }

    /// Makes the intent durable, then appends its records: the order that lets
    /// [`Node::recover`] tell, after a crash, whether the append happened.
    pub(super) fn write_ahead_and_append(&self, intent: &Intent) -> Result<(), NodeError> {
        if intent.leaves.is_empty() {
            return Ok(());
        }
        self.leases.put(&LeasesKey::Intent.key(), intent)?;
        self.store.flush()?;
        let bytes: Vec<Vec<u8>> = intent
            .leaves
            .iter()
            .map(|l| l.clone().into_bytes())
            .collect();
        let appended = lock(&self.ledger).append(&bytes);
        if let Err(e) = appended {
            self.apply_if_appended(intent);
            return Err(internal("ledger append", e));
        }
        self.stats
            .records
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// After a failed append: if its records made it into the log (signing or storing the
    /// checkpoint failed after), their state change is applied now, so the next round does
    /// not meter their span again. If that fails too, the intent stays for
    /// [`Node::no_pending_intent`] to complete before the next commit.
    fn apply_if_appended(&self, intent: &Intent) {
        let n = intent.leaves.len() as u64;
        if lock(&self.ledger).size() != intent.start + n {
            return;
        }
        if let Err(e) = self.apply_intent(intent) {
            warn!(error = %report(&e), start = intent.start, records = n, "records appended but their state change failed; completing it before the next commit");
        }
    }

    pub(super) fn apply_intent(&self, intent: &Intent) -> Result<(), NodeError> {
        self.apply_intent_with(intent, true)
    }

    pub(super) fn apply_intent_with(
        &self,
        intent: &Intent,
        durable: bool,
    ) -> Result<(), NodeError> {
        let mut ops: Vec<(String, Option<&serde_json::Value>)> = Vec::new();
        for (k, v) in &intent.puts {
            ops.push((k.clone(), Some(v)));
        }
        for k in &intent.removes {
            ops.push((k.clone(), None));
        }
        ops.push((LeasesKey::Intent.key(), None));
        self.leases.apply(&ops)?;
        if durable {
            self.store.flush()?;
        }
        Ok(())
    }

    /// Appends `usages` as records (ids = leaf indices) together with the state changes,
    /// crash-safely. Returns the record ids.
    pub(super) fn commit(
        &self,
        usages: &[(Usage, &Lease)],
        cursors: &mut BTreeMap<String, Cursor>,
        mut puts: Vec<(String, serde_json::Value)>,
        removes: Vec<String>,
    ) -> Result<Vec<u64>, NodeError> {
        self.no_pending_intent()?;
        let start = lock(&self.ledger).next_index();
        let mut leaves = Vec::with_capacity(usages.len());
        let mut ids = Vec::with_capacity(usages.len());
        for (i, (u, lease)) in usages.iter().enumerate() {
            let id = start + i as u64;
            let key = LeasesKey::Cursor {
                lease: &u.lease,
                gpu: &u.gpu_uuid,
            }
            .key();
            let prev = cursors.get(&key).and_then(|c| c.prev_record);
            let gpu_ms = u64::try_from(u.end_ms - u.start_ms).unwrap_or(0);
            let rec = Record::Usage(UsageRecord {
                v: RECORD_VERSION,
                id,
                node: self.cfg.node.name.clone(),
                tenant: lease.tenant.clone(),
                lease: lease.id.clone(),
                gpu_uuid: u.gpu_uuid.clone(),
                gpu_model: u.gpu_model.clone(),
                start: rfc3339_ms(u.start_ms),
                end: rfc3339_ms(u.end_ms),
                gpu_ms,
                gpu_seconds: gpu_ms as f64 / 1000.0,
                energy_joules: u.energy_joules,
                peak_memory_bytes: u.peak_memory_bytes,
                mean_utilization_pct: u.mean_utilization_pct,
                rate_paise_per_hour: lease.rate_paise_per_hour,
                amount_paise: amount_paise(gpu_ms, lease.rate_paise_per_hour),
                policy_digest: lease.policy_digest.clone(),
                prev,
                attestation: lock(&self.latest_attestation).as_ref().map(|(id, _)| *id),
            });
            if let Some(c) = cursors.get_mut(&key) {
                c.prev_record = Some(id);
            }
            leaves.push(leaf_text(&rec)?);
            ids.push(id);
        }
        for (k, c) in cursors.iter().filter(|(k, _)| !removes.contains(k)) {
            puts.push((
                k.clone(),
                serde_json::to_value(c).map_err(|e| internal("cursor", e))?,
            ));
        }
        let intent = Intent {
            start,
            leaves,
            puts,
            removes,
        };
        self.write_ahead_and_append(&intent)?;
        // Cursor-only updates (plain accumulation) need no fsync: a cursor lost in a crash
        // only loses utilization statistics, never GPU time or energy (the energy baseline
        // is saved with the accumulated energy). Records, lease changes and removals do.
        let durable = !intent.leaves.is_empty()
            || !intent.removes.is_empty()
            || intent.puts.iter().any(|(k, _)| k.starts_with(LEASE_PREFIX));
        self.apply_intent_with(&intent, durable)?;
        Ok(ids)
    }

    /// Appends records built from their first id, with `puts` to and `removes` from the
    /// leases tree, through the same crash-safe intent as usage records: the state changes
    /// land exactly when the records do. The caller holds the write lock.
    pub(super) fn append_records(
        &self,
        build: impl FnOnce(u64) -> Vec<Record>,
        puts: Vec<(String, serde_json::Value)>,
        removes: Vec<String>,
    ) -> Result<Vec<u64>, NodeError> {
        self.no_pending_intent()?;
        let start = lock(&self.ledger).next_index();
        let records = build(start);
        let ids: Vec<u64> = records.iter().map(Record::id).collect();
        let intent = Intent {
            start,
            leaves: records.iter().map(leaf_text).collect::<Result<_, _>>()?,
            puts,
            removes,
        };
        self.write_ahead_and_append(&intent)?;
        self.apply_intent_with(&intent, true)?;
        Ok(ids)
    }
}
