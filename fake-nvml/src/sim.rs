//! The simulated GPUs: identities, load, energy over virtual time, and injected faults.
//!
//! Pure and deterministic: time comes in as an argument, so the model is tested without a
//! clock and the FFI shell decides what "now" is.
#![forbid(unsafe_code)]

use sha2::{Digest, Sha256};

use crate::config::{CcMode, ConfigError, Control, DriverFault, Fault, SimConfig};
use crate::model::Model;

/// Why a device query failed; the FFI shell maps these to NVML return codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimError {
    /// No such device (index out of range, unknown UUID/serial/bus id).
    NotFound,
    /// The device fell off the bus (`lost` fault).
    Lost,
    /// The device answers with an unexpected error (`error` fault).
    Unknown,
    /// The device does not implement the query (e.g. no serial on GeForce boards).
    NotSupported,
}

/// PCI location of a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PciAddress {
    pub domain: u32,
    pub bus: u32,
    pub device: u32,
}

impl PciAddress {
    /// `00000000:1B:00.0`, the format of `nvmlPciInfo_t.busId`.
    pub fn bus_id(&self) -> String {
        format!("{:08X}:{:02X}:{:02X}.0", self.domain, self.bus, self.device)
    }

    /// `0000:1B:00.0`, the format of `nvmlPciInfo_t.busIdLegacy`.
    pub fn bus_id_legacy(&self) -> String {
        format!("{:04X}:{:02X}:{:02X}.0", self.domain, self.bus, self.device)
    }
}

/// PCI buses of the GPUs on an 8-GPU HGX board, used in order; beyond eight they continue upwards.
const BUSES: [u32; 8] = [0x1B, 0x43, 0x52, 0x61, 0x9D, 0xC3, 0xD1, 0xDF];

/// One compute process on a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Process {
    pub pid: u32,
    pub used_memory_bytes: u64,
}

/// One simulated GPU.
#[derive(Debug, Clone)]
pub struct Device {
    pub index: u32,
    pub model: &'static Model,
    pub uuid: String,
    pub serial: String,
    pub pci: PciAddress,
    load_pct: u32,
    fault: Option<Fault>,
    explicit_processes: Option<Vec<u32>>,
    /// Energy since "driver load", in microjoules (exact integral of milliwatts over ms).
    energy_uj: u64,
    /// The last energy value handed out, in mJ, for the `energy-backwards` fault.
    last_reported_mj: Option<u64>,
}

/// The whole simulated node.
#[derive(Debug, Clone)]
pub struct Simulation {
    config: SimConfig,
    devices: Vec<Device>,
    /// Virtual time up to which energy has been integrated, in Unix ms.
    now_ms: i64,
    cc_gpus_ready: bool,
    /// CC mode set through the control file, overriding `NVML_SIM_CC`.
    cc_override: Option<CcMode>,
    /// The driver fault the control file injects, if any.
    driver_fault: Option<DriverFault>,
    /// Attestation identities, built on first use (P-384 key derivation is not free).
    attesters: Vec<Option<std::sync::Arc<attest::nvidia::sim::SimGpu>>>,
}

fn digest(seed: &str, what: &str, index: u32) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"nvml-sim\0");
    h.update(seed.as_bytes());
    h.update(b"\0");
    h.update(what.as_bytes());
    h.update(index.to_be_bytes());
    h.finalize().into()
}

/// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` from the seed and index (RFC 4122 layout, v4 bits).
pub fn derive_uuid(seed: &str, index: u32) -> String {
    let mut b = [0u8; 16];
    b.copy_from_slice(&digest(seed, "uuid", index)[..16]);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// A 13-digit board serial from the seed and index, like the ones NVIDIA prints on boards.
pub fn derive_serial(seed: &str, index: u32) -> String {
    let d = digest(seed, "serial", index);
    let mut n = [0u8; 8];
    n.copy_from_slice(&d[..8]);
    format!("1{:012}", u64::from_be_bytes(n) % 1_000_000_000_000)
}

impl Device {
    fn new(config: &SimConfig, index: u32, model: &'static Model) -> Device {
        let bus = match BUSES.get(index as usize) {
            Some(b) => *b,
            None => 0xE0 + index,
        };
        // Energy "since driver load": a deterministic 1-24 h of idle draw, so counters look
        // like a running node's rather than starting at zero.
        let hours = u64::from(digest(&config.seed, "uptime", index)[0] % 24) + 1;
        let energy_uj = u64::from(model.idle_w) * 1_000_000 * 3600 * hours;
        Device {
            index,
            model,
            uuid: derive_uuid(&config.seed, index),
            serial: derive_serial(&config.seed, index),
            pci: PciAddress {
                domain: 0,
                bus,
                device: 0,
            },
            load_pct: 0,
            fault: None,
            explicit_processes: None,
            energy_uj,
            last_reported_mj: None,
        }
    }

    /// Fails the way the injected fault says; `energy-backwards` leaves other queries alone.
    fn healthy(&self) -> Result<&Device, SimError> {
        match self.fault {
            Some(Fault::Lost) => Err(SimError::Lost),
            Some(Fault::Error) => Err(SimError::Unknown),
            _ => Ok(self),
        }
    }

    pub fn load_pct(&self) -> u32 {
        self.load_pct
    }

    pub fn fault(&self) -> Option<Fault> {
        self.fault
    }

    pub fn power_mw(&self) -> u32 {
        self.model.power_mw(self.load_pct)
    }

    pub fn memory_used_bytes(&self) -> u64 {
        let by_load = self.model.memory_used_bytes(self.load_pct);
        match &self.explicit_processes {
            // Processes hold memory even when momentarily idle.
            Some(p) if !p.is_empty() && by_load == 0 => Model::MIB * 512 * p.len() as u64,
            _ => by_load,
        }
    }

    pub fn processes(&self) -> Vec<Process> {
        let pids: Vec<u32> = match &self.explicit_processes {
            Some(p) => p.clone(),
            None if self.load_pct > 0 => vec![100_000 + self.index * 100 + 1],
            None => Vec::new(),
        };
        if pids.is_empty() {
            return Vec::new();
        }
        let share = self.memory_used_bytes() / pids.len() as u64;
        pids.into_iter()
            .map(|pid| Process {
                pid,
                used_memory_bytes: share,
            })
            .collect()
    }
}

impl Simulation {
    /// A node as `config` describes it, with energy integrated from `now_ms` (virtual) on.
    pub fn new(config: SimConfig, now_ms: i64) -> Simulation {
        let devices: Vec<Device> = config
            .gpus
            .iter()
            .enumerate()
            .map(|(i, m)| Device::new(&config, i as u32, m))
            .collect();
        let attesters = vec![None; devices.len()];
        Simulation {
            config,
            devices,
            now_ms,
            cc_gpus_ready: false,
            cc_override: None,
            driver_fault: None,
            attesters,
        }
    }

    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    pub fn now_ms(&self) -> i64 {
        self.now_ms
    }

    /// Integrates every device's power up to `virtual_ms`; time never runs backwards here, even
    /// if the wall clock does.
    pub fn advance_to(&mut self, virtual_ms: i64) {
        if virtual_ms <= self.now_ms {
            return;
        }
        let dt = u64::try_from(virtual_ms - self.now_ms).unwrap_or(0);
        for d in &mut self.devices {
            let add = u64::from(d.power_mw()).saturating_mul(dt);
            d.energy_uj = d.energy_uj.saturating_add(add);
        }
        self.now_ms = virtual_ms;
    }

    fn resolve(&self, key: &str) -> Result<usize, ConfigError> {
        let found = match key.parse::<usize>() {
            Ok(i) if i < self.devices.len() => Some(i),
            Ok(_) => None,
            Err(_) => self.devices.iter().position(|d| d.uuid == key),
        };
        found.ok_or_else(|| {
            ConfigError(format!(
                "control file: no device {key:?} (there are {} devices, keyed by index or UUID)",
                self.devices.len()
            ))
        })
    }

    /// Applies a control file: integrate up to `virtual_ms` under the old loads first, then
    /// switch. All-or-nothing: a file naming an unknown device changes nothing.
    pub fn apply_control(&mut self, control: &Control, virtual_ms: i64) -> Result<(), ConfigError> {
        let mut load = vec![0u32; self.devices.len()];
        let mut faults = vec![None; self.devices.len()];
        let mut procs = vec![None; self.devices.len()];
        for (k, v) in &control.load {
            load[self.resolve(k)?] = (*v).min(100);
        }
        for (k, f) in &control.faults {
            faults[self.resolve(k)?] = Some(*f);
        }
        for (k, p) in &control.processes {
            procs[self.resolve(k)?] = Some(p.clone());
        }
        if control.cc.is_some_and(|c| c != CcMode::Off) {
            if let Some(d) = self.devices.iter().find(|d| !d.model.cc_capable) {
                return Err(ConfigError(format!(
                    "control file: confidential computing cannot be on with a {} in the fleet",
                    d.model.name
                )));
            }
        }
        self.advance_to(virtual_ms);
        if self.cc_override != control.cc {
            // Toggling CC mode needs a GPU reset: the CC ready state starts over.
            self.cc_gpus_ready = false;
        }
        self.cc_override = control.cc;
        self.driver_fault = control.driver;
        for (((d, l), f), p) in self.devices.iter_mut().zip(load).zip(faults).zip(procs) {
            d.load_pct = l;
            d.fault = f;
            d.explicit_processes = p;
        }
        Ok(())
    }

    pub fn device_count(&self) -> u32 {
        self.devices.len() as u32
    }

    /// Whether the driver answers system-wide queries (no injected driver fault).
    pub fn driver(&self) -> Result<(), SimError> {
        match self.driver_fault {
            None => Ok(()),
            Some(DriverFault::Error) => Err(SimError::Unknown),
        }
    }

    /// The device at `index`, whatever its state (handles are host-side and always resolve).
    pub fn device(&self, index: u32) -> Result<&Device, SimError> {
        self.devices.get(index as usize).ok_or(SimError::NotFound)
    }

    /// The device at `index`, failing as its injected fault says.
    pub fn healthy(&self, index: u32) -> Result<&Device, SimError> {
        self.device(index)?.healthy()
    }

    fn find(&self, pred: impl Fn(&Device) -> bool) -> Result<u32, SimError> {
        let d = self
            .devices
            .iter()
            .find(|d| pred(d))
            .ok_or(SimError::NotFound)?;
        d.healthy().map(|d| d.index)
    }

    /// Looks a device up by UUID; a lost device is reported lost rather than absent.
    pub fn by_uuid(&self, uuid: &str) -> Result<u32, SimError> {
        self.find(|d| d.uuid == uuid)
    }

    pub fn by_serial(&self, serial: &str) -> Result<u32, SimError> {
        self.find(|d| d.model.has_serial && d.serial == serial)
    }

    /// Accepts both the 8-digit and the legacy 4-digit domain form, any letter case.
    pub fn by_pci_bus_id(&self, bus_id: &str) -> Result<u32, SimError> {
        self.find(|d| {
            d.pci.bus_id().eq_ignore_ascii_case(bus_id)
                || d.pci.bus_id_legacy().eq_ignore_ascii_case(bus_id)
        })
    }

    pub fn serial(&self, index: u32) -> Result<String, SimError> {
        let d = self.healthy(index)?;
        if d.model.has_serial {
            Ok(d.serial.clone())
        } else {
            Err(SimError::NotSupported)
        }
    }

    /// MIG mode as (current, pending); 0 = disabled. Unsupported boards say so.
    pub fn mig_mode(&self, index: u32) -> Result<(u32, u32), SimError> {
        let d = self.healthy(index)?;
        if d.model.mig_capable {
            Ok((0, 0))
        } else {
            Err(SimError::NotSupported)
        }
    }

    /// Total energy in mJ. Monotonic, except under the `energy-backwards` fault, where each
    /// read returns less than the previous one (a tenth less, at least 1 mJ, floored at 0).
    pub fn energy_mj(&mut self, index: u32) -> Result<u64, SimError> {
        let d = self
            .devices
            .get_mut(index as usize)
            .ok_or(SimError::NotFound)?;
        d.healthy()?;
        let truth = d.energy_uj / 1000;
        let value = if d.fault == Some(Fault::EnergyBackwards) {
            let base = d.last_reported_mj.unwrap_or(truth);
            base.saturating_sub(base / 10 + 1)
        } else {
            truth
        };
        d.last_reported_mj = Some(value);
        Ok(value)
    }

    pub fn cc_mode(&self) -> CcMode {
        self.cc_override.unwrap_or(self.config.cc)
    }

    /// Whether every GPU supports confidential computing (NVML's system-wide capability).
    pub fn cc_capable(&self) -> bool {
        !self.devices.is_empty() && self.devices.iter().all(|d| d.model.cc_capable)
    }

    pub fn cc_gpus_ready(&self) -> bool {
        self.cc_gpus_ready
    }

    /// Sets the "accepting client requests" state; only meaningful with CC on.
    pub fn set_cc_gpus_ready(&mut self, ready: bool) -> Result<(), SimError> {
        if self.cc_mode() == CcMode::Off {
            return Err(SimError::NotSupported);
        }
        self.cc_gpus_ready = ready;
        Ok(())
    }

    /// CC protected / unprotected memory in KiB; only CC-capable boards with CC on have it.
    pub fn cc_mem_size_kib(&self, index: u32) -> Result<(u64, u64), SimError> {
        let d = self.healthy(index)?;
        if self.cc_mode() == CcMode::Off || !d.model.cc_capable {
            return Err(SimError::NotSupported);
        }
        let total_kib = d.model.memory_total_bytes() / 1024;
        let unprotected = 256 * 1024;
        Ok((total_kib - unprotected, unprotected))
    }

    /// The attestation identity of a healthy CC-capable device with CC on; anything else
    /// answers "not supported", as a GPU without CC firmware (or with CC off) does.
    fn attester(
        &mut self,
        index: u32,
    ) -> Result<std::sync::Arc<attest::nvidia::sim::SimGpu>, SimError> {
        let d = self.healthy(index)?;
        if self.cc_mode() == CcMode::Off || !d.model.cc_capable {
            return Err(SimError::NotSupported);
        }
        let slot = self
            .attesters
            .get_mut(index as usize)
            .ok_or(SimError::NotFound)?;
        if let Some(a) = slot {
            return Ok(a.clone());
        }
        let gpu =
            crate::attestation::sim_gpu(&self.config.seed, index).map_err(|_| SimError::Unknown)?;
        let gpu = std::sync::Arc::new(gpu);
        *slot = Some(gpu.clone());
        Ok(gpu)
    }

    /// What signing device `index`'s reports takes: its identity, VBIOS and driver version.
    /// Signing itself needs no simulation state, so callers can sign outside any lock and
    /// several GPUs can sign at once, as real ones do.
    pub fn attestation_signer(&mut self, index: u32) -> Result<ReportSigner, SimError> {
        let gpu = self.attester(index)?;
        let d = self.device(index)?;
        Ok(ReportSigner {
            gpu,
            vbios: d.model.vbios,
            driver: self.config.driver_version.clone(),
        })
    }

    /// The SPDM `request || response` of device `index` over `nonce`, signed by its leaf key.
    pub fn attestation_report(&mut self, index: u32, nonce: [u8; 32]) -> Result<Vec<u8>, SimError> {
        self.attestation_signer(index)?.sign(nonce)
    }

    /// Device `index`'s attestation certificate chain (DER, leaf first, root last).
    pub fn attestation_chain(&mut self, index: u32) -> Result<Vec<Vec<u8>>, SimError> {
        Ok(self.attester(index)?.chain().to_vec())
    }
}

/// Signs attestation reports for one device (see [`Simulation::attestation_signer`]).
#[derive(Debug, Clone)]
pub struct ReportSigner {
    gpu: std::sync::Arc<attest::nvidia::sim::SimGpu>,
    vbios: &'static str,
    driver: String,
}

impl ReportSigner {
    /// The SPDM `request || response` over `nonce`.
    pub fn sign(&self, nonce: [u8; 32]) -> Result<Vec<u8>, SimError> {
        crate::attestation::report(&self.gpu, nonce, self.vbios, &self.driver)
            .map_err(|_| SimError::Unknown)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sim(gpus: &str) -> Simulation {
        let gpus = gpus.to_string();
        let config =
            SimConfig::from_vars(|k| (k == "NVML_SIM_GPUS").then(|| gpus.clone())).unwrap();
        Simulation::new(config, 1_000_000)
    }

    fn control(json: &str) -> Control {
        Control::parse(json).unwrap()
    }

    #[test]
    fn identities_are_deterministic_and_distinct() {
        let a = sim("H100:4,L4:4");
        let b = sim("H100:4,L4:4");
        let mut uuids = std::collections::BTreeSet::new();
        let mut buses = std::collections::BTreeSet::new();
        for i in 0..8 {
            let (x, y) = (a.device(i).unwrap(), b.device(i).unwrap());
            assert_eq!(x.uuid, y.uuid);
            assert_eq!(x.serial, y.serial);
            assert!(
                x.uuid.starts_with("GPU-") && x.uuid.len() == 40,
                "{}",
                x.uuid
            );
            assert_eq!(x.serial.len(), 13);
            uuids.insert(x.uuid.clone());
            buses.insert(x.pci.bus_id());
        }
        assert_eq!((uuids.len(), buses.len()), (8, 8));
        assert_eq!(a.device(0).unwrap().pci.bus_id(), "00000000:1B:00.0");
        assert_eq!(a.device(0).unwrap().pci.bus_id_legacy(), "0000:1B:00.0");
        assert_ne!(derive_uuid("other-seed", 0), a.device(0).unwrap().uuid);
        // The worked example in docs/gpu-simulation.md.
        let seed = crate::config::DEFAULT_SEED;
        assert_eq!(
            derive_uuid(seed, 0),
            "GPU-f617de6d-2ac3-4a77-bc02-8baf66e6e519"
        );
        assert_eq!(derive_serial(seed, 0), "1952448322314");
        assert_eq!(
            derive_uuid(seed, 4),
            "GPU-bca8c974-dd71-4588-99c7-aa068f2d069e"
        );
        assert_eq!(derive_serial(seed, 4), "1268871631870");
        assert_eq!(a.device(8).unwrap_err(), SimError::NotFound);
    }

    #[test]
    fn energy_is_the_integral_of_power() {
        let mut s = sim("H100:1,L4:1");
        let e0 = s.energy_mj(0).unwrap();
        let l0 = s.energy_mj(1).unwrap();
        s.advance_to(1_000_000 + 10_000); // 10 s idle
        assert_eq!(s.energy_mj(0).unwrap() - e0, 70 * 10 * 1000);
        assert_eq!(s.energy_mj(1).unwrap() - l0, 16 * 10 * 1000);
        s.apply_control(&control(r#"{"load": {"0": 100}}"#), 1_010_000)
            .unwrap();
        s.advance_to(1_020_000); // 10 s at full load
        assert_eq!(s.energy_mj(0).unwrap() - e0, 700_000 + 7_000_000);
        // Time running backwards (wall-clock step) changes nothing.
        s.advance_to(1_000_000);
        assert_eq!(s.energy_mj(0).unwrap() - e0, 7_700_000);
        assert_eq!(s.now_ms(), 1_020_000);
    }

    #[test]
    fn control_switches_load_after_integrating_the_old_one() {
        let mut s = sim("L4:1");
        let e0 = s.energy_mj(0).unwrap();
        s.apply_control(&control(r#"{"load": {"0": 100}}"#), 1_001_000)
            .unwrap();
        // The second before the switch was idle.
        assert_eq!(s.energy_mj(0).unwrap() - e0, 16_000);
        assert_eq!(s.device(0).unwrap().power_mw(), 72_000);
        // Omitted devices return to idle.
        s.apply_control(&Control::default(), 1_002_000).unwrap();
        assert_eq!(s.device(0).unwrap().load_pct(), 0);
        assert_eq!(s.energy_mj(0).unwrap() - e0, 16_000 + 72_000);
    }

    #[test]
    fn control_keys_by_uuid_and_rejects_unknown_devices() {
        let mut s = sim("H100:2");
        let uuid = s.device(1).unwrap().uuid.clone();
        s.apply_control(
            &control(&format!(r#"{{"load": {{"{uuid}": 40}}}}"#)),
            1_000_000,
        )
        .unwrap();
        assert_eq!(s.device(1).unwrap().load_pct(), 40);
        let e = s
            .apply_control(&control(r#"{"load": {"0": 10, "7": 50}}"#), 1_000_000)
            .unwrap_err();
        assert!(e.0.contains("\"7\""), "{e}");
        // All-or-nothing: device 0 did not change either.
        assert_eq!(s.device(0).unwrap().load_pct(), 0);
        assert!(s
            .apply_control(&control(r#"{"faults": {"GPU-nope": "lost"}}"#), 0)
            .is_err());
    }

    #[test]
    fn processes_and_memory_follow_load() {
        let mut s = sim("H100:2");
        assert!(s.device(0).unwrap().processes().is_empty());
        assert_eq!(s.device(0).unwrap().memory_used_bytes(), 0);
        s.apply_control(
            &control(r#"{"load": {"0": 50}, "processes": {"1": [7, 8]}}"#),
            1_000_000,
        )
        .unwrap();
        let p = s.device(0).unwrap().processes();
        assert_eq!(p.len(), 1);
        assert_eq!(
            p[0].used_memory_bytes,
            s.device(0).unwrap().memory_used_bytes()
        );
        assert!(p[0].used_memory_bytes > 30 * 1024 * Model::MIB);
        let p1 = s.device(1).unwrap().processes();
        assert_eq!(p1.iter().map(|p| p.pid).collect::<Vec<_>>(), [7, 8]);
        assert!(p1[0].used_memory_bytes > 0);
    }

    #[test]
    fn a_driver_fault_fails_system_queries_until_it_is_cleared() {
        let mut s = sim("H100:2");
        assert_eq!(s.driver(), Ok(()));
        s.apply_control(&control(r#"{"driver": "error"}"#), 1_000_000)
            .unwrap();
        assert_eq!(s.driver(), Err(SimError::Unknown));
        s.apply_control(&control("{}"), 1_000_000).unwrap();
        assert_eq!(s.driver(), Ok(()));
        assert!(Control::parse(r#"{"driver": "lost"}"#).is_err());
    }

    #[test]
    fn faults() {
        let mut s = sim("H100:4");
        let uuid2 = s.device(2).unwrap().uuid.clone();
        s.apply_control(
            &control(r#"{"faults": {"2": "lost", "3": "error", "1": "energy-backwards"}}"#),
            1_000_000,
        )
        .unwrap();
        assert_eq!(s.healthy(2).unwrap_err(), SimError::Lost);
        assert_eq!(s.by_uuid(&uuid2).unwrap_err(), SimError::Lost);
        assert_eq!(s.energy_mj(2).unwrap_err(), SimError::Lost);
        assert_eq!(s.healthy(3).unwrap_err(), SimError::Unknown);
        assert_eq!(s.serial(3).unwrap_err(), SimError::Unknown);
        assert!(s.device(2).is_ok(), "handles still resolve");
        let a = s.energy_mj(1).unwrap();
        s.advance_to(1_100_000);
        let b = s.energy_mj(1).unwrap();
        let c = s.energy_mj(1).unwrap();
        assert!(b < a && c < b, "{a} {b} {c}");
        // Healing the fault restores the true (monotonic) counter.
        s.apply_control(&Control::default(), 1_100_000).unwrap();
        assert!(s.energy_mj(1).unwrap() > a);
        assert_eq!(s.by_uuid(&uuid2), Ok(2));
        assert_eq!(
            s.by_uuid("GPU-00000000-0000-0000-0000-000000000000"),
            Err(SimError::NotFound)
        );
    }

    #[test]
    fn lookups_and_unsupported_queries() {
        let s = sim("H100:1,RTX4090:1");
        assert_eq!(s.by_pci_bus_id("00000000:1b:00.0"), Ok(0));
        assert_eq!(s.by_pci_bus_id("0000:43:00.0"), Ok(1));
        assert_eq!(s.by_serial(&s.device(0).unwrap().serial), Ok(0));
        assert_eq!(
            s.by_serial(&s.device(1).unwrap().serial),
            Err(SimError::NotFound)
        );
        assert_eq!(s.serial(1).unwrap_err(), SimError::NotSupported);
        assert_eq!(s.mig_mode(0), Ok((0, 0)));
        assert_eq!(s.mig_mode(1).unwrap_err(), SimError::NotSupported);
        assert!(!s.cc_capable());
        assert_eq!(s.cc_mem_size_kib(0).unwrap_err(), SimError::NotSupported);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]

        /// Whatever the sequence of load changes and clock readings (including readings that
        /// go backwards), energy is monotonic and equals the exact integral of power.
        #[test]
        fn energy_is_exact_and_monotonic(
            steps in proptest::collection::vec((-5_000i64..600_000, 0u32..=100), 1..40)
        ) {
            let mut s = sim("H100:1,L4:1");
            let start = [s.energy_mj(0).unwrap(), s.energy_mj(1).unwrap()];
            let mut expected_uj = [0u64; 2];
            let mut now = s.now_ms();
            let mut last = start;
            let mut load = 0u32;
            for (dt, next_load) in steps {
                let t = now + dt;
                if t > now {
                    for (k, exp) in expected_uj.iter_mut().enumerate() {
                        let p = s.device(k as u32).unwrap().model.power_mw(load);
                        *exp += u64::from(p) * (t - now) as u64;
                    }
                    now = t;
                }
                let json = format!(r#"{{"load": {{"0": {next_load}, "1": {next_load}}}}}"#);
                s.apply_control(&control(&json), t).unwrap();
                load = next_load;
                for (k, l) in last.iter_mut().enumerate() {
                    let e = s.energy_mj(k as u32).unwrap();
                    proptest::prop_assert!(e >= *l);
                    *l = e;
                }
            }
            for k in 0..2 {
                let exact = start[k] as u128 * 1000 + expected_uj[k] as u128;
                let got = last[k] as u128 * 1000;
                // The counter is reported in whole mJ; the start was truncated too.
                proptest::prop_assert!(
                    got + 1000 >= exact && got <= exact + 1000,
                    "{got} vs {exact}"
                );
            }
        }
    }

    #[test]
    fn confidential_computing_state() {
        let config = SimConfig::from_vars(|k| match k {
            "NVML_SIM_GPUS" => Some("H100:2".into()),
            "NVML_SIM_CC" => Some("on".into()),
            _ => None,
        })
        .unwrap();
        let mut s = Simulation::new(config, 0);
        assert!(s.cc_capable());
        assert!(!s.cc_gpus_ready());
        s.set_cc_gpus_ready(true).unwrap();
        assert!(s.cc_gpus_ready());
        let (prot, unprot) = s.cc_mem_size_kib(1).unwrap();
        assert_eq!(prot + unprot, 81_559 * 1024);
        let mut off = sim("H100:1");
        assert_eq!(off.set_cc_gpus_ready(true), Err(SimError::NotSupported));
    }
}
