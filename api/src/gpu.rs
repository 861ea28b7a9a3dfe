//! GPUs as the inventory reports them.

use serde::{Deserialize, Serialize};

/// Whether a GPU answered the inventory's queries.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum GpuStatus {
    #[default]
    Ok,
    /// The GPU fell off the bus; fields it could not answer are empty.
    Lost,
    /// A query failed; fields it could not answer are empty.
    Error { op: String, message: String },
}

/// A GPU as the inventory reports it. Fields a board does not support are `None`.
///
/// When `status` is not [`GpuStatus::Ok`], fields the GPU could not answer are empty (an empty
/// `uuid`, `name` or `pci_bus_id`, zero memory): such a GPU must not be leased.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct GpuInfo {
    pub index: u32,
    pub uuid: String,
    pub serial: Option<String>,
    /// The full product name, e.g. `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// Short model used for rates and lease requests, e.g. `H100` (hostd derives it from the name).
    pub model: String,
    /// `00000000:1B:00.0` form.
    pub pci_bus_id: String,
    pub minor_number: Option<u32>,
    /// `/dev/nvidiaN`, the device node a lease hands to the tenant's sandbox.
    pub device_path: Option<String>,
    pub memory_total_bytes: u64,
    pub vbios_version: Option<String>,
    pub driver_version: String,
    pub mig_mode: Option<bool>,
    /// Confidential-computing mode of the system the GPU is in; `None` when unknown.
    pub cc_mode: Option<bool>,
    #[serde(default)]
    pub status: GpuStatus,
}

impl GpuInfo {
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
