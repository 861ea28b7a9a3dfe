//! The GPU inventory, and the GPU event records the metering loop writes when a GPU changes.

use super::*;
use attest::report::report;

/// What the metering loop remembers of one GPU, to notice changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct GpuState {
    index: u32,
    /// The last UUID the GPU answered with (kept while it does not answer).
    uuid: String,
    healthy: bool,
    cc_mode: Option<bool>,
    driver: String,
}

pub(super) fn cc_text(c: Option<bool>) -> String {
    match c {
        Some(true) => "on",
        Some(false) => "off",
        None => "unknown",
    }
    .into()
}

/// A change seen in one GPU: what happened, to which GPU, state before and after.
pub(super) type GpuChange = (GpuEventKind, GpuState, Option<String>, Option<String>);

/// GPU events between two snapshots (by NVML index), and the snapshot to remember next.
pub(super) fn gpu_changes(
    prev: &[GpuState],
    inventory: &[GpuInfo],
) -> (Vec<GpuState>, Vec<GpuChange>) {
    let mut next = Vec::new();
    let mut events = Vec::new();
    for g in inventory {
        let old = prev.iter().find(|p| p.index == g.index);
        let mut cur = GpuState {
            index: g.index,
            uuid: g.uuid.clone(),
            healthy: g.is_healthy(),
            cc_mode: g.cc_mode,
            driver: g.driver_version.clone(),
        };
        if cur.uuid.is_empty() {
            cur.uuid = old.map(|o| o.uuid.clone()).unwrap_or_default();
        }
        match old {
            None => events.push((GpuEventKind::Appeared, cur.clone(), None, None)),
            Some(o) if !g.uuid.is_empty() && !o.uuid.is_empty() && o.uuid != g.uuid => {
                events.push((GpuEventKind::Disappeared, o.clone(), None, None));
                events.push((GpuEventKind::Appeared, cur.clone(), None, None));
            }
            Some(o) => changes_of_the_same_gpu(o, &mut cur, &mut events),
        }
        next.push(cur);
    }
    for o in prev {
        if !inventory.iter().any(|g| g.index == o.index) {
            events.push((GpuEventKind::Disappeared, o.clone(), None, None));
        }
    }
    (next, events)
}

/// Events of a GPU seen at the same index with the same UUID: lost or recovered, and, while
/// it answers, a changed CC mode or driver. An unhealthy `cur` keeps `old`'s last good facts,
/// so that a GPU that comes back in another CC mode or under another driver is reported too.
fn changes_of_the_same_gpu(old: &GpuState, cur: &mut GpuState, events: &mut Vec<GpuChange>) {
    let state = |h: bool| Some(if h { "ok" } else { "not answering" }.to_string());
    if old.healthy && !cur.healthy {
        events.push((GpuEventKind::Lost, cur.clone(), state(true), state(false)));
    } else if !old.healthy && cur.healthy {
        events.push((
            GpuEventKind::Recovered,
            cur.clone(),
            state(false),
            state(true),
        ));
    }
    if !cur.healthy {
        cur.cc_mode = old.cc_mode;
        cur.driver = old.driver.clone();
        return;
    }
    if old.cc_mode != cur.cc_mode {
        events.push((
            GpuEventKind::CcModeChanged,
            cur.clone(),
            Some(cc_text(old.cc_mode)),
            Some(cc_text(cur.cc_mode)),
        ));
    }
    if old.driver != cur.driver && !cur.driver.is_empty() && !old.driver.is_empty() {
        events.push((
            GpuEventKind::DriverChanged,
            cur.clone(),
            Some(old.driver.clone()),
            Some(cur.driver.clone()),
        ));
    }
}

impl Node {
    /// Logs a failed GPU inventory: at once, then once a minute with the count, so that a
    /// wedged driver does not write a line every metering round and every health check.
    pub(super) fn inventory_failed(&self, e: &(dyn std::error::Error + 'static)) {
        if let Some(n) = self
            .repeated
            .hit("gpu-inventory", std::time::Instant::now())
        {
            warn!(
                error = %report(e),
                events = n,
                "the GPU inventory cannot be read; GPU state changes are not checked and \
                 health says degraded until it can"
            );
        }
    }

    /// The GPU inventory; when NVML cannot give it, the caller is told so in words and the
    /// driver's error goes to the log (rate-limited), not to the caller.
    pub fn inventory(&self) -> Result<Vec<GpuInfo>, NodeError> {
        self.gpus.inventory().map_err(|e| {
            self.inventory_failed(&e);
            NodeError::Unavailable(
                "the node cannot read its GPU inventory (the NVIDIA driver does not answer); \
                 the node's log says why"
                    .into(),
            )
        })
    }

    /// Compares the GPU inventory with the last snapshot and appends a GPU event record per
    /// change (CC mode toggled, GPU lost/recovered/appeared/disappeared, driver changed).
    /// The first snapshot of a node is only remembered. The caller holds the write lock.
    pub(super) fn watch_gpus(&self) -> Result<(), NodeError> {
        let inventory = match self.gpus.inventory() {
            Ok(i) => i,
            Err(e) => {
                self.inventory_failed(&e);
                return Ok(());
            }
        };
        let prev: Option<Vec<GpuState>> = self.leases.get(&LeasesKey::GpuSnapshot.key())?;
        let (next, events) = gpu_changes(prev.as_deref().unwrap_or(&[]), &inventory);
        if prev.as_ref() == Some(&next) {
            return Ok(());
        }
        let snapshot = serde_json::to_value(&next).map_err(|e| internal("GPU snapshot", e))?;
        let Some(_) = prev else {
            self.leases.put(&LeasesKey::GpuSnapshot.key(), &snapshot)?;
            self.store.flush()?;
            return Ok(());
        };
        let at = rfc3339_ms(self.clock.now_ms());
        let node = self.cfg.node.name.clone();
        for (kind, g, from, to) in &events {
            warn!(gpu = %g.uuid, index = g.index, event = ?kind, from = ?from, to = ?to, "GPU state changed");
        }
        self.append_records(
            |start| {
                events
                    .into_iter()
                    .enumerate()
                    .map(|(i, (event, g, from, to))| {
                        Record::GpuEvent(GpuEventRecord {
                            v: RECORD_VERSION,
                            id: start + i as u64,
                            node: node.clone(),
                            at: at.clone(),
                            event,
                            gpu_index: g.index,
                            gpu_uuid: g.uuid,
                            from,
                            to,
                        })
                    })
                    .collect()
            },
            vec![(LeasesKey::GpuSnapshot.key(), snapshot)],
            Vec::new(),
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::GpuStatus;

    fn gpu(index: u32, uuid: &str, status: GpuStatus, cc: Option<bool>, driver: &str) -> GpuInfo {
        GpuInfo {
            index,
            uuid: uuid.into(),
            serial: None,
            name: "NVIDIA H100 80GB HBM3".into(),
            model: "H100".into(),
            pci_bus_id: String::new(),
            minor_number: None,
            device_path: None,
            memory_total_bytes: 0,
            vbios_version: None,
            driver_version: driver.into(),
            mig_mode: None,
            cc_mode: cc,
            status,
        }
    }

    fn kinds(changes: &[GpuChange]) -> Vec<(GpuEventKind, u32, String)> {
        changes
            .iter()
            .map(|(k, g, _, _)| (*k, g.index, g.uuid.clone()))
            .collect()
    }

    #[test]
    fn gpu_changes_between_snapshots() {
        use GpuEventKind::*;
        let ok = GpuStatus::Ok;
        let first = [
            gpu(0, "GPU-a", ok.clone(), Some(true), "550"),
            gpu(1, "GPU-b", ok.clone(), Some(true), "550"),
        ];
        let (s0, e) = gpu_changes(&[], &first);
        assert_eq!(
            kinds(&e),
            [(Appeared, 0, "GPU-a".into()), (Appeared, 1, "GPU-b".into())]
        );
        // Nothing changed: nothing to record, same snapshot.
        let (s1, e) = gpu_changes(&s0, &first);
        assert!(e.is_empty());
        assert_eq!(s0, s1);
        // GPU 1 lost (it no longer tells its UUID); CC toggled off on GPU 0.
        let second = [
            gpu(0, "GPU-a", ok.clone(), Some(false), "550"),
            gpu(1, "", GpuStatus::Lost, None, "550"),
        ];
        let (s2, e) = gpu_changes(&s1, &second);
        assert_eq!(
            kinds(&e),
            [
                (CcModeChanged, 0, "GPU-a".into()),
                (Lost, 1, "GPU-b".into())
            ]
        );
        assert_eq!(
            (e[0].2.as_deref(), e[0].3.as_deref()),
            (Some("on"), Some("off"))
        );
        // Still lost: no new event; then recovered under a new driver, and GPU 0 is gone.
        let (s3, e) = gpu_changes(&s2, &second);
        assert!(e.is_empty(), "{:?}", kinds(&e));
        let third = [gpu(1, "GPU-b", ok.clone(), Some(true), "560")];
        let (_, e) = gpu_changes(&s3, &third);
        assert_eq!(
            kinds(&e),
            [
                (Recovered, 1, "GPU-b".into()),
                (DriverChanged, 1, "GPU-b".into()),
                (Disappeared, 0, "GPU-a".into())
            ]
        );
        // Another board at the same index.
        let swapped = [gpu(1, "GPU-c", ok, Some(true), "560")];
        let (_, e) = gpu_changes(&gpu_changes(&s3, &third).0, &swapped);
        assert_eq!(
            kinds(&e),
            [
                (Disappeared, 1, "GPU-b".into()),
                (Appeared, 1, "GPU-c".into())
            ]
        );
    }
}
