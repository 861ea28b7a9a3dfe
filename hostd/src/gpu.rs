//! GPUs, through NVML — the daemon's only GPU code path.
//!
//! hostd talks to GPUs exclusively through nvml-wrapper, which loads a `libnvidia-ml` at run
//! time. On a GPU node that is the driver's `libnvidia-ml.so.1`; in tests and `hostd dev` it
//! is the simulation built from the `fake-nvml` crate (`libnvidia_ml_sim.so`, see
//! `docs/gpu-simulation.md`). Nothing here knows or cares which one it got, so the code the
//! tests exercise is the code that runs in production, and no GPU is ever invented: without a
//! library, [`Gpus::open`] fails.
//!
//! Queries that some boards do not implement (a GeForce card has no serial number, an L4 no
//! MIG) come back as `None`; they never fail an inventory. A device that does fail is still
//! listed, with its [`GpuStatus`], so an operator sees a broken GPU instead of a shrunken node.

use attest::report::report;
use std::path::{Path, PathBuf};

use nvml_wrapper::enum_wrappers::device::TemperatureSensor;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use serde::{Deserialize, Serialize};
use tracing::{debug, info, warn};

/// The driver's NVML library, as installed by every NVIDIA Linux driver package.
pub const SYSTEM_LIBRARY: &str = "libnvidia-ml.so.1";
/// File name of the simulated NVML library built by the `fake-nvml` crate.
#[cfg(feature = "dev")]
pub const SIM_LIBRARY: &str = "libnvidia_ml_sim.so";

/// NVML's `NVML_DEVICE_MIG_ENABLE`.
const MIG_ENABLED: u32 = 1;
/// NVML's `NVML_ERROR_ARGUMENT_VERSION_MISMATCH`, which nvml-wrapper does not name.
const ARGUMENT_VERSION_MISMATCH: u32 = 25;

#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// The NVML library could not be loaded, or is not an NVML library.
    #[error("NVML library {path} is unavailable: {reason}")]
    LibraryUnavailable { path: PathBuf, reason: String },
    /// The library loaded but refused to initialise (no driver, no permission, bad simulation
    /// configuration…).
    #[error("NVML failed to initialise")]
    Init(#[source] NvmlError),
    /// The GPU fell off the bus or otherwise stopped answering.
    #[error("GPU {uuid} is lost (fallen off the bus or unreachable)")]
    Lost { uuid: String },
    /// No GPU with this UUID on this node.
    #[error("no GPU {uuid} on this node")]
    NotFound { uuid: String },
    /// The GPU answered an attestation query with something unusable.
    #[error("GPU {uuid} returned an unusable attestation: {message}")]
    BadAttestation { uuid: String, message: String },
    /// Any other NVML failure, with the operation that failed.
    #[error("NVML {op} failed{}", uuid.as_deref().map(|u| format!(" on GPU {u}")).unwrap_or_default())]
    Nvml {
        uuid: Option<String>,
        op: &'static str,
        #[source]
        source: NvmlError,
    },
}

pub use hostd_api::gpu::{GpuInfo, GpuStatus};

/// A point-in-time reading of one GPU, for metering and metrics.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct GpuSample {
    pub uuid: String,
    pub utilization_pct: u32,
    pub memory_used_bytes: u64,
    /// Energy since the driver loaded, in mJ; the basis of energy metering.
    pub total_energy_mj: Option<u64>,
    pub power_mw: Option<u32>,
    pub temperature_c: Option<u32>,
    pub processes: Vec<GpuProcess>,
}

/// A compute process on a GPU.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct GpuProcess {
    pub pid: u32,
    /// `None` where the driver cannot tell (e.g. under Windows WDDM).
    pub used_memory_bytes: Option<u64>,
}

/// The node's GPUs: an initialised NVML library. Shut down when dropped.
pub struct Gpus {
    nvml: Nvml,
    library: PathBuf,
}

impl std::fmt::Debug for Gpus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpus")
            .field("library", &self.library)
            .finish_non_exhaustive()
    }
}

/// Treats "this board or driver does not have that query" as absent rather than as a failure.
fn optional<T>(r: Result<T, NvmlError>) -> Result<Option<T>, NvmlError> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(NvmlError::NotSupported) | Err(NvmlError::FailedToLoadSymbol(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Short model name from an NVML product name: `NVIDIA H100 80GB HBM3` → `H100`,
/// `NVIDIA A100-SXM4-80GB` → `A100`, `NVIDIA GeForce RTX 4090` → `RTX 4090`,
/// `NVIDIA RTX A6000` → `RTX A6000`, `Tesla V100-SXM2-16GB` → `V100`.
pub fn model_from_name(name: &str) -> String {
    const VENDOR_WORDS: [&str; 5] = ["NVIDIA", "GeForce", "Tesla", "Quadro", "TITAN"];
    let mut words = name
        .split_whitespace()
        .filter(|w| !VENDOR_WORDS.iter().any(|v| w.eq_ignore_ascii_case(v)))
        .flat_map(|w| w.split('-'))
        .filter(|w| !w.is_empty());
    let Some(first) = words.next() else {
        return name.trim().to_string();
    };
    if first.eq_ignore_ascii_case("RTX") || first.eq_ignore_ascii_case("GTX") {
        if let Some(second) = words.next() {
            return format!("{first} {second}");
        }
    }
    first.to_string()
}

/// The simulated NVML library next to the running executable (`target/<profile>/`) or in its
/// `deps/` folder, where Cargo puts it for test binaries and for `hostd` respectively.
/// Only in builds with the `dev` feature: a production daemon never looks for a simulation.
#[cfg(feature = "dev")]
pub fn sim_library_path() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [dir.join(SIM_LIBRARY), dir.join("deps").join(SIM_LIBRARY)]
        .into_iter()
        .find(|p| p.is_file())
}

fn status_of(op: &str, e: &NvmlError) -> GpuStatus {
    match e {
        NvmlError::GpuLost => GpuStatus::Lost,
        e => GpuStatus::Error {
            op: op.to_string(),
            message: e.to_string(),
        },
    }
}

/// Collects a device's answers, remembering the first failure (a loss outranks other errors).
struct Reader {
    status: GpuStatus,
}

impl Reader {
    fn note(&mut self, op: &str, e: &NvmlError) {
        let s = status_of(op, e);
        if self.status == GpuStatus::Ok || s == GpuStatus::Lost {
            self.status = s;
        }
    }

    fn required<T: Default>(&mut self, op: &str, r: Result<T, NvmlError>) -> T {
        r.unwrap_or_else(|e| {
            self.note(op, &e);
            T::default()
        })
    }

    fn optional<T>(&mut self, op: &str, r: Result<T, NvmlError>) -> Option<T> {
        optional(r).unwrap_or_else(|e| {
            self.note(op, &e);
            None
        })
    }
}

impl Gpus {
    /// Loads and initialises NVML. `lib_path` None → the system's `libnvidia-ml.so.1`.
    pub fn open(lib_path: Option<&Path>) -> Result<Gpus, GpuError> {
        let library = lib_path.unwrap_or_else(|| Path::new(SYSTEM_LIBRARY));
        let nvml = Nvml::builder()
            .lib_path(library.as_os_str())
            .init()
            .map_err(|e| match e {
                NvmlError::LibloadingError(e) => GpuError::LibraryUnavailable {
                    path: library.to_path_buf(),
                    reason: report(&e).to_string(),
                },
                NvmlError::FailedToLoadSymbol(s) => GpuError::LibraryUnavailable {
                    path: library.to_path_buf(),
                    reason: format!("not an NVML library ({s})"),
                },
                e => GpuError::Init(e),
            })?;
        let gpus = Gpus {
            nvml,
            library: library.to_path_buf(),
        };
        match gpus.driver_version() {
            Ok(v) => info!(library = %library.display(), driver = %v, "NVML initialised"),
            Err(e) => {
                warn!(library = %library.display(), error = %report(&e), "NVML initialised, driver version unknown")
            }
        }
        Ok(gpus)
    }

    /// The library this was opened from.
    pub fn library(&self) -> &Path {
        &self.library
    }

    pub fn driver_version(&self) -> Result<String, GpuError> {
        self.nvml
            .sys_driver_version()
            .map_err(|source| GpuError::Nvml {
                uuid: None,
                op: "driver_version",
                source,
            })
    }

    /// Every GPU NVML enumerates, in index order, including failing ones (see [`GpuStatus`]).
    pub fn inventory(&self) -> Result<Vec<GpuInfo>, GpuError> {
        let driver = self.driver_version()?;
        let count = self.nvml.device_count().map_err(|source| GpuError::Nvml {
            uuid: None,
            op: "device_count",
            source,
        })?;
        Ok((0..count).map(|i| self.read_device(i, &driver)).collect())
    }

    fn read_device(&self, index: u32, driver: &str) -> GpuInfo {
        let mut r = Reader {
            status: GpuStatus::Ok,
        };
        let mut info = GpuInfo {
            index,
            uuid: String::new(),
            serial: None,
            name: String::new(),
            model: String::new(),
            pci_bus_id: String::new(),
            minor_number: None,
            device_path: None,
            memory_total_bytes: 0,
            vbios_version: None,
            driver_version: driver.to_string(),
            mig_mode: None,
            cc_mode: None,
            status: GpuStatus::Ok,
        };
        let dev = match self.nvml.device_by_index(index) {
            Ok(d) => d,
            Err(e) => {
                warn!(gpu = index, error = %report(&e), "GPU does not answer");
                info.status = status_of("device_by_index", &e);
                return info;
            }
        };
        info.uuid = r.required("uuid", dev.uuid());
        info.name = r.required("name", dev.name());
        info.model = if info.name.is_empty() {
            String::new()
        } else {
            model_from_name(&info.name)
        };
        info.pci_bus_id = r.required("pci_info", dev.pci_info().map(|p| p.bus_id));
        info.memory_total_bytes = r.required("memory_info", dev.memory_info().map(|m| m.total));
        info.serial = r.optional("serial", dev.serial());
        info.minor_number = r.optional("minor_number", dev.minor_number());
        info.device_path = info.minor_number.map(|m| format!("/dev/nvidia{m}"));
        info.vbios_version = r.optional("vbios_version", dev.vbios_version());
        info.mig_mode = r
            .optional("mig_mode", dev.mig_mode())
            .map(|m| m.current == MIG_ENABLED);
        info.cc_mode = cc_mode(&dev);
        info.status = r.status;
        if info.status != GpuStatus::Ok {
            warn!(gpu = index, uuid = %info.uuid, status = ?info.status, "GPU is not healthy");
        }
        info
    }

    /// Current utilisation, memory, energy, power, temperature and processes of one GPU.
    pub fn sample(&self, uuid: &str) -> Result<GpuSample, GpuError> {
        let dev = self.nvml.device_by_uuid(uuid).map_err(|e| match e {
            NvmlError::NotFound | NvmlError::InvalidArg | NvmlError::NulError(_) => {
                GpuError::NotFound { uuid: uuid.into() }
            }
            e => device_error(uuid, "device_by_uuid", e),
        })?;
        let err = |op: &'static str| move |e: NvmlError| device_error(uuid, op, e);
        let utilization_pct = dev
            .utilization_rates()
            .map_err(err("utilization_rates"))?
            .gpu;
        let memory_used_bytes = dev.memory_info().map_err(err("memory_info"))?.used;
        let total_energy_mj =
            optional(dev.total_energy_consumption()).map_err(err("total_energy_consumption"))?;
        let power_mw = optional(dev.power_usage()).map_err(err("power_usage"))?;
        let temperature_c =
            optional(dev.temperature(TemperatureSensor::Gpu)).map_err(err("temperature"))?;
        let processes = dev
            .running_compute_processes()
            .map_err(err("running_compute_processes"))?
            .into_iter()
            .map(|p| GpuProcess {
                pid: p.pid,
                used_memory_bytes: match p.used_gpu_memory {
                    UsedGpuMemory::Used(b) => Some(b),
                    UsedGpuMemory::Unavailable => None,
                },
            })
            .collect();
        Ok(GpuSample {
            uuid: uuid.to_string(),
            utilization_pct,
            memory_used_bytes,
            total_energy_mj,
            power_mw,
            temperature_c,
            processes,
        })
    }
}

impl Gpus {
    /// The GPU's confidential-computing attestation: the SPDM `request || response` it signed
    /// over `nonce`, and its attestation certificate chain (DER, leaf first, as NVML lists
    /// it; NVML hands out PEM). `None` when the GPU or driver cannot attest (no CC firmware, CC off, an old
    /// driver): the caller reports the GPU without a report rather than failing.
    pub fn attestation_report(
        &self,
        uuid: &str,
        nonce: [u8; 32],
    ) -> Result<Option<GpuAttestation>, GpuError> {
        let dev = self.nvml.device_by_uuid(uuid).map_err(|e| match e {
            NvmlError::NotFound | NvmlError::InvalidArg | NvmlError::NulError(_) => {
                GpuError::NotFound { uuid: uuid.into() }
            }
            e => device_error(uuid, "device_by_uuid", e),
        })?;
        let report = match optional(dev.confidential_compute_gpu_attestation_report(nonce)) {
            Ok(Some(r)) => r,
            Ok(None) => return Ok(None),
            Err(e) => return Err(device_error(uuid, "attestation_report", e)),
        };
        let certs = match optional(dev.confidential_compute_gpu_certificate()) {
            Ok(Some(c)) => c,
            Ok(None) => return Ok(None),
            Err(e) => return Err(device_error(uuid, "attestation_certificate", e)),
        };
        let spdm = report
            .attestation_report
            .get(..report.attestation_report_size as usize)
            .ok_or_else(|| GpuError::BadAttestation {
                uuid: uuid.into(),
                message: format!(
                    "report size {} exceeds the buffer",
                    report.attestation_report_size
                ),
            })?
            .to_vec();
        let pem = certs
            .attestation_cert_chain
            .get(..certs.attestation_cert_chain_size as usize)
            .ok_or_else(|| GpuError::BadAttestation {
                uuid: uuid.into(),
                message: "certificate chain size exceeds the buffer".into(),
            })?;
        let chain = pem_certificates(pem).map_err(|e| GpuError::BadAttestation {
            uuid: uuid.into(),
            message: attest::report::report(&e).to_string(),
        })?;
        Ok(Some(GpuAttestation {
            spdm,
            cert_chain: chain,
        }))
    }
}

/// A GPU's answer to an attestation challenge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuAttestation {
    /// SPDM `GET_MEASUREMENTS` request ‖ signed response, as NVML returns it.
    pub spdm: Vec<u8>,
    /// The attestation certificate chain, DER, leaf first.
    pub cert_chain: Vec<Vec<u8>>,
}

/// Why NVML's certificate chain was refused.
#[derive(Debug, thiserror::Error)]
enum BadChain {
    #[error("certificate chain is not PEM")]
    NotPem(#[source] std::io::Error),
    #[error("certificate chain holds no certificate")]
    Empty,
}

/// DER certificates from NVML's PEM chain (concatenated `CERTIFICATE` blocks).
fn pem_certificates(pem: &[u8]) -> Result<Vec<Vec<u8>>, BadChain> {
    let mut reader = std::io::BufReader::new(pem);
    let mut out = Vec::new();
    for item in rustls_pemfile::certs(&mut reader) {
        let der = item.map_err(BadChain::NotPem)?;
        out.push(der.as_ref().to_vec());
    }
    if out.is_empty() {
        return Err(BadChain::Empty);
    }
    Ok(out)
}

fn device_error(uuid: &str, op: &'static str, e: NvmlError) -> GpuError {
    match e {
        NvmlError::GpuLost => GpuError::Lost { uuid: uuid.into() },
        source => GpuError::Nvml {
            uuid: Some(uuid.into()),
            op,
            source,
        },
    }
}

/// The system's CC mode, or `None` when it cannot be told. nvml-wrapper 0.11 passes the
/// settings struct unversioned, which a driver may reject as a version mismatch; that, like
/// any failure of this system-wide query, means "unknown" rather than "off".
fn cc_mode(dev: &Device<'_>) -> Option<bool> {
    match dev.is_cc_enabled() {
        Ok(on) => Some(on),
        Err(e) => {
            if !matches!(
                e,
                NvmlError::NotSupported
                    | NvmlError::FailedToLoadSymbol(_)
                    | NvmlError::UnexpectedVariant(ARGUMENT_VERSION_MISMATCH)
            ) {
                debug!(error = %report(&e), "confidential-computing state unknown");
            }
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_names() {
        for (name, model) in [
            ("NVIDIA H100 80GB HBM3", "H100"),
            ("NVIDIA H100 PCIe", "H100"),
            ("NVIDIA L4", "L4"),
            ("NVIDIA A100-SXM4-80GB", "A100"),
            ("NVIDIA GeForce RTX 4090", "RTX 4090"),
            ("NVIDIA RTX A6000", "RTX A6000"),
            ("Tesla V100-SXM2-16GB", "V100"),
            ("NVIDIA GH200 480GB", "GH200"),
            ("NVIDIA B200", "B200"),
            ("NVIDIA", "NVIDIA"),
            ("", ""),
        ] {
            assert_eq!(model_from_name(name), model, "{name}");
        }
    }

    #[test]
    fn unsupported_queries_are_absent_not_errors() {
        assert_eq!(optional::<u32>(Err(NvmlError::NotSupported)).unwrap(), None);
        assert_eq!(
            optional::<u32>(Err(NvmlError::FailedToLoadSymbol("x".into()))).unwrap(),
            None
        );
        assert!(optional::<u32>(Err(NvmlError::GpuLost)).is_err());
        assert_eq!(optional(Ok(3)).unwrap(), Some(3));
    }

    #[test]
    fn a_loss_outranks_other_errors() {
        let mut r = Reader {
            status: GpuStatus::Ok,
        };
        r.note("serial", &NvmlError::Unknown);
        r.note("name", &NvmlError::GpuLost);
        r.note("uuid", &NvmlError::Unknown);
        assert_eq!(r.status, GpuStatus::Lost);
    }

    #[test]
    fn status_serialises_with_a_tag() {
        let s = serde_json::to_string(&GpuStatus::Error {
            op: "uuid".into(),
            message: "boom".into(),
        })
        .unwrap();
        assert_eq!(s, r#"{"state":"error","op":"uuid","message":"boom"}"#);
        assert_eq!(
            serde_json::to_string(&GpuStatus::Ok).unwrap(),
            r#"{"state":"ok"}"#
        );
    }

    #[test]
    fn gpus_can_be_shared_between_threads() {
        fn shared<T: Send + Sync>() {}
        shared::<Gpus>();
    }
}
