//! The metering round: samples every leased GPU and cuts usage records at hour boundaries.

use super::*;
use attest::report::report;

/// What one metering round gathers before it commits: every cursor (advanced or not), the
/// intervals that closed, leases whose GPUs failed, and cursors to remove.
#[derive(Default)]
struct Round {
    cursors: BTreeMap<String, Cursor>,
    usages: Vec<(Usage, String)>,
    changed_leases: BTreeMap<String, Lease>,
    removes: Vec<String>,
}

impl Node {
    /// One metering round: sample every GPU of every active lease and write the usage
    /// intervals that closed (hour boundaries, lost GPUs).
    pub fn meter_tick(&self) -> Result<usize, NodeError> {
        let _w = lock(&self.write);
        self.stats.ticks.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = self.watch_gpus() {
            error!(error = %report(&e), "recording GPU state changes failed");
        }
        let leases = self.active_leases()?;
        let mut round = Round::default();
        for lease in &leases {
            for (key, c) in self.cursors_of(lease)? {
                self.meter_gpu(lease, key, c, &mut round);
            }
        }
        self.commit_round(&leases, round)
    }

    /// Samples one leased GPU and advances its cursor; a GPU that is lost, or fails
    /// [`MAX_CONSECUTIVE_ERRORS`] samples in a row, is closed at its last good sample and
    /// marked faulty in its lease.
    fn meter_gpu(&self, lease: &Lease, key: String, mut c: Cursor, round: &mut Round) {
        let now = self.clock.now_ms();
        let e = match self.gpus.sample(&c.gpu_uuid) {
            Ok(s) => {
                self.stats.samples.fetch_add(1, Ordering::Relaxed);
                let (closed, anomaly) = c.observe(Reading {
                    at_ms: now,
                    energy_mj: s.total_energy_mj,
                    utilization_pct: s.utilization_pct,
                    memory_used_bytes: s.memory_used_bytes,
                });
                if let Some(Anomaly::EnergyBackwards {
                    previous_mj,
                    now_mj,
                }) = anomaly
                {
                    self.stats.energy_anomalies.fetch_add(1, Ordering::Relaxed);
                    warn!(tenant = %lease.tenant, lease = %lease.id, gpu = %c.gpu_uuid, previous_mj, now_mj,
                        "GPU energy counter went backwards; interval energy not charged, counter re-based");
                }
                round
                    .usages
                    .extend(closed.into_iter().map(|u| (u, lease.id.clone())));
                round.cursors.insert(key, c);
                return;
            }
            Err(e) => e,
        };
        self.stats.sample_errors.fetch_add(1, Ordering::Relaxed);
        c.consecutive_errors += 1;
        let lost = matches!(e, GpuError::Lost { .. });
        if lost || c.consecutive_errors >= MAX_CONSECUTIVE_ERRORS {
            error!(tenant = %lease.tenant, lease = %lease.id, gpu = %c.gpu_uuid, error = %report(&e),
                "GPU failed; metering stopped at its last good sample");
            let end = c.last_sample_ms;
            round
                .usages
                .extend(c.close(end).into_iter().map(|u| (u, lease.id.clone())));
            let l = round
                .changed_leases
                .entry(lease.id.clone())
                .or_insert_with(|| lease.clone());
            for g in l.gpus.iter_mut().filter(|g| g.uuid == c.gpu_uuid) {
                g.fault = Some(format!("{e} (at {})", rfc3339_ms(now), e = report(&e)));
            }
            lock(&self.lease_index).mark_faulted(&c.gpu_uuid);
            round.removes.push(key.clone());
        } else {
            warn!(tenant = %lease.tenant, lease = %lease.id, gpu = %c.gpu_uuid, error = %report(&e),
                attempt = c.consecutive_errors, "GPU sample failed");
        }
        round.cursors.insert(key, c);
    }

    /// Writes the round's closed intervals as usage records, with the cursors and the leases
    /// that changed, through the crash-safe commit. Returns the number of records.
    fn commit_round(&self, leases: &[Lease], round: Round) -> Result<usize, NodeError> {
        let Round {
            mut cursors,
            usages,
            changed_leases,
            removes,
        } = round;
        let by_id: BTreeMap<&str, &Lease> = leases.iter().map(|l| (l.id.as_str(), l)).collect();
        let pairs: Vec<(Usage, &Lease)> = usages
            .into_iter()
            .filter_map(|(u, lid)| {
                let l = changed_leases
                    .get(&lid)
                    .or_else(|| by_id.get(lid.as_str()).copied())?;
                Some((u, l))
            })
            .collect();
        let n = pairs.len();
        let mut puts = Vec::new();
        for (id, l) in &changed_leases {
            puts.push((
                LeasesKey::Lease(id).key(),
                serde_json::to_value(l).map_err(|e| internal("lease", e))?,
            ));
        }
        self.commit(&pairs, &mut cursors, puts, removes)?;
        Ok(n)
    }
}
