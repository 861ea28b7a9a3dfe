//! The GPU models the simulation can serve, with the figures the real boards report.
//!
//! The figures matter beyond looks: hostd rates leases by model name, meters energy against
//! these power envelopes, and allocates by memory size, so a simulated fleet must look like
//! the real one to every NVML query hostd makes.
#![forbid(unsafe_code)]

/// One GPU product as NVML describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Model {
    /// Short name used in `NVML_SIM_GPUS` (case-insensitive), e.g. `H100`.
    pub key: &'static str,
    /// What `nvmlDeviceGetName` returns.
    pub name: &'static str,
    /// Total framebuffer as reported by `nvmlDeviceGetMemoryInfo`, in MiB.
    pub memory_mib: u64,
    /// Memory the driver reserves (reported separately by the v2 memory query), in MiB.
    pub reserved_mib: u64,
    /// Board power limit (TDP), in watts.
    pub tdp_w: u32,
    /// Power drawn when idle, in watts.
    pub idle_w: u32,
    /// Combined PCI device and vendor id, as in `nvmlPciInfo_t.pciDeviceId`.
    pub pci_device_id: u32,
    /// Combined PCI subsystem id, as in `nvmlPciInfo_t.pciSubSystemId`.
    pub pci_subsystem_id: u32,
    /// What `nvmlDeviceGetVbiosVersion` returns.
    pub vbios: &'static str,
    /// Whether the board has an infoROM serial number (GeForce boards do not).
    pub has_serial: bool,
    /// Whether the board supports MIG (it is reported disabled when supported).
    pub mig_capable: bool,
    /// Whether the board supports confidential computing.
    pub cc_capable: bool,
    /// GPU temperature when idle and at full load, in °C.
    pub temp_idle_c: u32,
    pub temp_full_c: u32,
}

/// Every model the simulation knows, in the order the documentation lists them.
pub const MODELS: &[Model] = &[
    Model {
        key: "H100",
        name: "NVIDIA H100 80GB HBM3",
        memory_mib: 81_559,
        reserved_mib: 530,
        tdp_w: 700,
        idle_w: 70,
        pci_device_id: 0x2330_10DE,
        pci_subsystem_id: 0x16C1_10DE,
        vbios: "96.00.99.00.01",
        has_serial: true,
        mig_capable: true,
        cc_capable: true,
        temp_idle_c: 31,
        temp_full_c: 68,
    },
    Model {
        key: "L4",
        name: "NVIDIA L4",
        memory_mib: 23_034,
        reserved_mib: 428,
        tdp_w: 72,
        idle_w: 16,
        pci_device_id: 0x27B8_10DE,
        pci_subsystem_id: 0x16CA_10DE,
        vbios: "95.04.5B.00.01",
        has_serial: true,
        mig_capable: false,
        cc_capable: false,
        temp_idle_c: 36,
        temp_full_c: 74,
    },
    Model {
        key: "A100",
        name: "NVIDIA A100-SXM4-80GB",
        memory_mib: 81_920,
        reserved_mib: 516,
        tdp_w: 400,
        idle_w: 55,
        pci_device_id: 0x20B2_10DE,
        pci_subsystem_id: 0x1463_10DE,
        vbios: "92.00.45.00.03",
        has_serial: true,
        mig_capable: true,
        cc_capable: false,
        temp_idle_c: 30,
        temp_full_c: 65,
    },
    Model {
        key: "RTX4090",
        name: "NVIDIA GeForce RTX 4090",
        memory_mib: 24_564,
        reserved_mib: 322,
        tdp_w: 450,
        idle_w: 21,
        pci_device_id: 0x2684_10DE,
        pci_subsystem_id: 0x1681_1043,
        vbios: "95.02.18.80.87",
        has_serial: false,
        mig_capable: false,
        cc_capable: false,
        temp_idle_c: 38,
        temp_full_c: 80,
    },
];

/// Finds a model by its short key, ignoring case.
pub fn lookup(key: &str) -> Option<&'static Model> {
    MODELS.iter().find(|m| m.key.eq_ignore_ascii_case(key))
}

impl Model {
    pub const MIB: u64 = 1024 * 1024;

    /// Total framebuffer in bytes.
    pub fn memory_total_bytes(&self) -> u64 {
        self.memory_mib * Self::MIB
    }

    /// Board power at `load_pct` (0-100), in milliwatts: linear from idle to TDP.
    pub fn power_mw(&self, load_pct: u32) -> u32 {
        let load = load_pct.min(100);
        let idle = self.idle_w * 1000;
        let span = (self.tdp_w - self.idle_w) * 1000;
        idle + span / 100 * load
    }

    /// Memory in use (excluding the driver's reservation) at `load_pct`, in bytes.
    ///
    /// A loaded GPU holds most of its memory, as training and inference jobs do.
    pub fn memory_used_bytes(&self, load_pct: u32) -> u64 {
        let usable = (self.memory_mib - self.reserved_mib) * Self::MIB;
        usable / 100 * 90 / 100 * u64::from(load_pct.min(100))
    }

    /// GPU temperature at `load_pct`, in °C.
    pub fn temperature_c(&self, load_pct: u32) -> u32 {
        self.temp_idle_c + (self.temp_full_c - self.temp_idle_c) * load_pct.min(100) / 100
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_is_case_insensitive_and_strict() {
        assert_eq!(
            lookup("h100").map(|m| m.name),
            Some("NVIDIA H100 80GB HBM3")
        );
        assert_eq!(lookup("L4").map(|m| m.memory_mib), Some(23_034));
        assert!(lookup("H200").is_none());
        assert!(lookup("").is_none());
    }

    #[test]
    fn power_runs_from_idle_to_tdp() {
        let h100 = lookup("H100").unwrap();
        assert_eq!(h100.power_mw(0), 70_000);
        assert_eq!(h100.power_mw(100), 700_000);
        assert_eq!(h100.power_mw(250), 700_000, "load is clamped");
        let l4 = lookup("L4").unwrap();
        assert_eq!(l4.power_mw(0), 16_000);
        assert_eq!(l4.power_mw(50), 44_000);
        assert_eq!(l4.power_mw(100), 72_000);
    }

    #[test]
    fn memory_and_temperature_follow_load() {
        for m in MODELS {
            assert_eq!(m.memory_used_bytes(0), 0);
            assert!(m.memory_used_bytes(100) < m.memory_total_bytes());
            assert!(m.memory_used_bytes(50) < m.memory_used_bytes(100));
            assert_eq!(m.temperature_c(0), m.temp_idle_c);
            assert_eq!(m.temperature_c(100), m.temp_full_c);
            assert!(m.idle_w < m.tdp_w);
        }
    }
}
