//! Dev mode only: running jobs make their lease's simulated GPUs busy.
//!
//! The fake NVML library reads per-GPU load from its control file (`gpu-control.json`:
//! `{"load": {"0": 85}, "faults": {…}}`), which people also edit by hand to inject faults. While
//! a lease has a running job, its GPUs show [`JOB_LOAD`] % (utilization, memory and power
//! follow in the simulation), so a dev run's usage records and metrics look like a real
//! node's; when its jobs end, the load goes back to what it was. Only the `load` entries of
//! GPUs this module set are touched; everything else in the file is kept.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Utilization a simulated GPU shows while its lease runs a job.
pub const JOB_LOAD: u64 = 85;

/// The control file and which GPUs' load this process set.
#[derive(Debug)]
pub struct SimLoad {
    control: PathBuf,
    busy: BTreeSet<u32>,
}

impl SimLoad {
    /// Drives the control file at `control`.
    pub fn new(control: PathBuf) -> SimLoad {
        SimLoad {
            control,
            busy: BTreeSet::new(),
        }
    }

    /// Makes exactly `gpus` (NVML indices) busy; writes the file only when that changes.
    pub fn set_busy(&mut self, gpus: BTreeSet<u32>) -> std::io::Result<()> {
        if gpus == self.busy {
            return Ok(());
        }
        let mut doc = read(&self.control)?;
        let load = doc
            .as_object_mut()
            .ok_or_else(|| std::io::Error::other("control file is not a JSON object"))?
            .entry("load")
            .or_insert_with(|| serde_json::json!({}));
        let Some(load) = load.as_object_mut() else {
            return Err(std::io::Error::other(
                "control file's load is not an object",
            ));
        };
        for gone in self.busy.difference(&gpus) {
            load.remove(&gone.to_string());
        }
        for g in &gpus {
            load.insert(g.to_string(), JOB_LOAD.into());
        }
        write(&self.control, &doc)?;
        self.busy = gpus;
        Ok(())
    }
}

fn read(path: &Path) -> std::io::Result<serde_json::Value> {
    let text = std::fs::read_to_string(path)?;
    serde_json::from_str(&text).map_err(std::io::Error::other)
}

/// Writes atomically (the library may read it at any moment).
fn write(path: &Path, doc: &serde_json::Value) -> std::io::Result<()> {
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, format!("{doc:#}\n"))?;
    std::fs::rename(tmp, path)
}

/// GPUs of `leases` (lease → NVML indices) whose lease is in `running`.
pub fn busy_gpus(leases: &BTreeMap<String, Vec<u32>>, running: &BTreeSet<String>) -> BTreeSet<u32> {
    running
        .iter()
        .filter_map(|l| leases.get(l))
        .flatten()
        .copied()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_follows_running_leases_and_keeps_the_rest_of_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let control = dir.path().join("gpu-control.json");
        std::fs::write(&control, r#"{"load": {"7": 10}, "faults": {"2": "lost"}}"#).unwrap();
        let mut s = SimLoad::new(control.clone());
        s.set_busy(BTreeSet::from([0, 1])).unwrap();
        let v = read(&control).unwrap();
        assert_eq!(v["load"]["0"], 85);
        assert_eq!(v["load"]["1"], 85);
        assert_eq!(v["load"]["7"], 10, "a hand-set load is kept");
        assert_eq!(v["faults"]["2"], "lost");
        s.set_busy(BTreeSet::from([1])).unwrap();
        let v = read(&control).unwrap();
        assert!(v["load"].get("0").is_none());
        assert_eq!(v["load"]["1"], 85);
        let leases = BTreeMap::from([("a".into(), vec![0, 1]), ("b".into(), vec![2])]);
        assert_eq!(
            busy_gpus(&leases, &BTreeSet::from(["b".into()])),
            BTreeSet::from([2])
        );
    }
}
