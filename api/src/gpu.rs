//! GPUs as the inventory reports them.

use serde::{Deserialize, Serialize};

/// Whether a GPU answered the inventory's queries.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum GpuStatus {
    /// Every query answered: the GPU may be leased.
    #[default]
    Ok,
    /// The GPU fell off the bus; fields it could not answer are empty.
    Lost,
    /// A query failed; fields it could not answer are empty.
    Error {
        /// The NVML query that failed (e.g. `memory_info`, `device_by_index`).
        op: String,
        /// NVML's error message.
        message: String,
    },
}

/// A GPU as the inventory reports it. Fields a board does not support are `None`.
///
/// When `status` is not [`GpuStatus::Ok`], fields the GPU could not answer are empty (an empty
/// `uuid`, `name` or `pci_bus_id`, zero memory): such a GPU must not be leased.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct GpuInfo {
    /// NVML index of the GPU on this node (0-based enumeration order).
    pub index: u32,
    /// The GPU's UUID as NVML reports it (`GPU-…`); stable across reboots, used to name the
    /// GPU in leases and usage records.
    pub uuid: String,
    /// The board serial number, where the board reports one.
    pub serial: Option<String>,
    /// The full product name, e.g. `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// Short model used for rates and lease requests, e.g. `H100` (hostd derives it from the name).
    pub model: String,
    /// `00000000:1B:00.0` form.
    pub pci_bus_id: String,
    /// Minor number of the GPU's device node (`N` in `/dev/nvidiaN`).
    pub minor_number: Option<u32>,
    /// `/dev/nvidiaN`, the device node a lease hands to the tenant's sandbox.
    pub device_path: Option<String>,
    /// Total framebuffer memory, bytes.
    pub memory_total_bytes: u64,
    /// Version of the GPU's VBIOS.
    pub vbios_version: Option<String>,
    /// Version of the NVIDIA driver the node runs (the same for every GPU).
    pub driver_version: String,
    /// Whether Multi-Instance GPU mode is currently enabled.
    pub mig_mode: Option<bool>,
    /// Confidential-computing mode of the system the GPU is in; `None` when unknown.
    pub cc_mode: Option<bool>,
    /// Whether the GPU answered the inventory's queries (`Ok` when absent from the JSON).
    #[serde(default)]
    pub status: GpuStatus,
}

impl GpuInfo {
    /// Whether every query answered ([`GpuStatus::Ok`]): only such a GPU may be leased.
    pub fn is_healthy(&self) -> bool {
        self.status == GpuStatus::Ok
    }
}

/// One line of `GET /v1/gpus`: the GPU and the lease holding it, if any.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct GpuEntry {
    /// The GPU.
    #[serde(flatten)]
    pub gpu: GpuInfo,
    /// Id of the active lease that holds it.
    pub lease: Option<String>,
}

/// `GET /v1/gpus`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct GpuList {
    /// The node's GPUs, by NVML index.
    pub gpus: Vec<GpuEntry>,
}
