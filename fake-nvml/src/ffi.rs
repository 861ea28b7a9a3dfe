//! The C ABI shell: NVML's exported functions, over one process-wide [`Simulation`].
//!
//! Every pointer comes from a caller we do not control, so each one is checked (null,
//! alignment, buffer length) before use, and the real library's return codes are used for each
//! failure. No panic crosses the ABI: each function runs inside `catch_unwind` and reports a
//! panic as `NVML_ERROR_UNKNOWN`. All `unsafe` in the crate lives in this module.
//!
//! Safety contract of every `unsafe extern "C"` function here (the NVML one): pointer
//! arguments are null or valid for the access NVML documents (a `char` buffer of the stated
//! length, one struct of the documented type, an array of `*infoCount` entries).
//!
//! Like the real library, initialisation is reference-counted: each `nvmlInit*` must be paired
//! with an `nvmlShutdown`. The simulated state (energy counters, CC ready flag) survives a
//! shutdown and re-init within the process as long as the environment still describes the same
//! node, just as a real driver's counters survive NVML sessions.
#![allow(
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    clippy::missing_safety_doc
)]
#![deny(unsafe_op_in_unsafe_fn)]

use std::ffi::{c_char, c_int, c_uint, c_ulonglong, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::config::{CcMode, Control, SimConfig};
use crate::sim::{SimError, Simulation};

// ---- NVML ABI types (nvml.h, as bound by nvml-wrapper-sys 0.9) ----

pub type nvmlReturn_t = c_uint;

pub const NVML_SUCCESS: nvmlReturn_t = 0;
pub const NVML_ERROR_UNINITIALIZED: nvmlReturn_t = 1;
pub const NVML_ERROR_INVALID_ARGUMENT: nvmlReturn_t = 2;
pub const NVML_ERROR_NOT_SUPPORTED: nvmlReturn_t = 3;
pub const NVML_ERROR_NOT_FOUND: nvmlReturn_t = 6;
pub const NVML_ERROR_INSUFFICIENT_SIZE: nvmlReturn_t = 7;
pub const NVML_ERROR_GPU_IS_LOST: nvmlReturn_t = 15;
pub const NVML_ERROR_ARGUMENT_VERSION_MISMATCH: nvmlReturn_t = 25;
pub const NVML_ERROR_UNKNOWN: nvmlReturn_t = 999;

pub const NVML_TEMPERATURE_GPU: c_uint = 0;
/// `gpuInstanceId` / `computeInstanceId` of a process outside any MIG instance.
pub const NVML_VALUE_NOT_AVAILABLE_UINT: c_uint = 0xFFFF_FFFF;

pub const NVML_CC_SYSTEM_CPU_CAPS_NONE: c_uint = 0;
pub const NVML_CC_SYSTEM_CPU_CAPS_INTEL_TDX: c_uint = 2;
pub const NVML_CC_SYSTEM_GPUS_CC_NOT_CAPABLE: c_uint = 0;
pub const NVML_CC_SYSTEM_GPUS_CC_CAPABLE: c_uint = 1;
pub const NVML_CC_SYSTEM_DEVTOOLS_MODE_OFF: c_uint = 0;
pub const NVML_CC_SYSTEM_DEVTOOLS_MODE_ON: c_uint = 1;
pub const NVML_CC_SYSTEM_ENVIRONMENT_UNAVAILABLE: c_uint = 0;
pub const NVML_CC_SYSTEM_ENVIRONMENT_PROD: c_uint = 2;
pub const NVML_CC_SYSTEM_FEATURE_DISABLED: c_uint = 0;
pub const NVML_CC_SYSTEM_FEATURE_ENABLED: c_uint = 1;
pub const NVML_CC_SYSTEM_MULTIGPU_NONE: c_uint = 0;
pub const NVML_CC_ACCEPTING_CLIENT_REQUESTS_FALSE: c_uint = 0;
pub const NVML_CC_ACCEPTING_CLIENT_REQUESTS_TRUE: c_uint = 1;

/// Opaque device; handles are tagged integers, never dereferenced.
#[repr(C)]
pub struct nvmlDevice_st {
    _private: [u8; 0],
}
pub type nvmlDevice_t = *mut nvmlDevice_st;

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct nvmlPciInfo_t {
    pub busIdLegacy: [c_char; 16],
    pub domain: c_uint,
    pub bus: c_uint,
    pub device: c_uint,
    pub pciDeviceId: c_uint,
    pub pciSubSystemId: c_uint,
    pub busId: [c_char; 32],
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct nvmlMemory_t {
    pub total: c_ulonglong,
    pub free: c_ulonglong,
    pub used: c_ulonglong,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct nvmlMemory_v2_t {
    pub version: c_uint,
    pub total: c_ulonglong,
    pub reserved: c_ulonglong,
    pub free: c_ulonglong,
    pub used: c_ulonglong,
}

/// `NVML_STRUCT_VERSION(Memory, 2)`.
pub const nvmlMemory_v2: c_uint = std::mem::size_of::<nvmlMemory_v2_t>() as c_uint | (2 << 24);

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct nvmlUtilization_t {
    pub gpu: c_uint,
    pub memory: c_uint,
}

/// `nvmlProcessInfo_t` as used by `nvmlDeviceGetComputeRunningProcesses_v3` (the v2 layout).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct nvmlProcessInfo_t {
    pub pid: c_uint,
    pub usedGpuMemory: c_ulonglong,
    pub gpuInstanceId: c_uint,
    pub computeInstanceId: c_uint,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct nvmlConfComputeSystemCaps_t {
    pub cpuCaps: c_uint,
    pub gpusCaps: c_uint,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct nvmlConfComputeSystemState_t {
    pub environment: c_uint,
    pub ccFeature: c_uint,
    pub devToolsMode: c_uint,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct nvmlSystemConfComputeSettings_t {
    pub version: c_uint,
    pub environment: c_uint,
    pub ccFeature: c_uint,
    pub devToolsMode: c_uint,
    pub multiGpuMode: c_uint,
}

/// `NVML_STRUCT_VERSION(SystemConfComputeSettings, 1)`.
pub const nvmlSystemConfComputeSettings_v1: c_uint =
    std::mem::size_of::<nvmlSystemConfComputeSettings_t>() as c_uint | (1 << 24);

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct nvmlConfComputeMemSizeInfo_t {
    pub protectedMemSizeKib: c_ulonglong,
    pub unprotectedMemSizeKib: c_ulonglong,
}

/// `nvmlConfComputeGpuAttestationReport_t`: the caller sets `nonce`.
#[repr(C)]
pub struct nvmlConfComputeGpuAttestationReport_t {
    pub isCecAttestationReportPresent: c_uint,
    pub attestationReportSize: c_uint,
    pub cecAttestationReportSize: c_uint,
    pub nonce: [u8; 32],
    pub attestationReport: [u8; 8192],
    pub cecAttestationReport: [u8; 4096],
}

/// `nvmlConfComputeGpuCertificate_t`: PEM chains.
#[repr(C)]
pub struct nvmlConfComputeGpuCertificate_t {
    pub certChainSize: c_uint,
    pub attestationCertChainSize: c_uint,
    pub certChain: [u8; 4096],
    pub attestationCertChain: [u8; 5120],
}

// ---- process-wide state ----

/// Identifies one version of the control file, so it is re-read only when replaced or edited.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Fingerprint {
    Missing,
    Present {
        modified: Option<SystemTime>,
        len: u64,
        inode: u64,
    },
}

fn fingerprint(path: &std::path::Path) -> Fingerprint {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata(path) {
        Ok(m) => Fingerprint::Present {
            modified: m.modified().ok(),
            len: m.len(),
            inode: m.ino(),
        },
        Err(_) => Fingerprint::Missing,
    }
}

struct ControlWatcher {
    applied: Option<Fingerprint>,
    reported: Option<Fingerprint>,
}

impl ControlWatcher {
    const fn new() -> ControlWatcher {
        ControlWatcher {
            applied: None,
            reported: None,
        }
    }

    /// Applies the control file if it changed. A broken file is reported once on stderr (the
    /// only channel a library loaded behind NVML's API has) and the previous settings stay.
    fn refresh(&mut self, sim: &mut Simulation, now_ms: i64) {
        let Some(path) = sim.config().control_path.clone() else {
            return;
        };
        let fp = fingerprint(&path);
        if self.applied.as_ref() == Some(&fp) {
            return;
        }
        let parsed = match fp {
            Fingerprint::Missing => Ok(Control::default()),
            Fingerprint::Present { .. } => std::fs::read_to_string(&path)
                .map_err(|e| format!("reading {}: {e}", path.display()))
                .and_then(|t| Control::parse(&t).map_err(|e| e.to_string())),
        };
        let result = parsed.and_then(|c| sim.apply_control(&c, now_ms).map_err(|e| e.to_string()));
        match result {
            Ok(()) => {
                self.applied = Some(fp);
                self.reported = None;
            }
            Err(e) => {
                if self.reported.as_ref() != Some(&fp) {
                    eprintln!(
                        "nvml-sim: ignoring NVML_SIM_CONTROL {}: {e}",
                        path.display()
                    );
                    self.reported = Some(fp);
                }
            }
        }
    }
}

struct Global {
    refcount: u32,
    sim: Option<Simulation>,
    control: ControlWatcher,
}

static STATE: Mutex<Global> = Mutex::new(Global {
    refcount: 0,
    sim: None,
    control: ControlWatcher::new(),
});

fn state() -> MutexGuard<'static, Global> {
    // A panic while holding the lock is caught at the ABI; the state itself stays consistent
    // (every mutation is a plain assignment), so carry on with it.
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

fn real_now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

type Ret = Result<(), nvmlReturn_t>;

/// Runs an ABI function body, turning errors and panics into NVML return codes.
fn guard(f: impl FnOnce() -> Ret) -> nvmlReturn_t {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => NVML_SUCCESS,
        Ok(Err(code)) => code,
        Err(_) => NVML_ERROR_UNKNOWN,
    }
}

fn code(e: SimError) -> nvmlReturn_t {
    match e {
        SimError::NotFound => NVML_ERROR_NOT_FOUND,
        SimError::Lost => NVML_ERROR_GPU_IS_LOST,
        SimError::Unknown => NVML_ERROR_UNKNOWN,
        SimError::NotSupported => NVML_ERROR_NOT_SUPPORTED,
    }
}

/// Runs `f` on the initialised simulation, after bringing it up to the current virtual time
/// and the current control file.
fn with_sim<T>(f: impl FnOnce(&mut Simulation) -> Result<T, SimError>) -> Result<T, nvmlReturn_t> {
    let mut g = state();
    let Global {
        refcount,
        sim,
        control,
    } = &mut *g;
    let sim = match sim {
        Some(s) if *refcount > 0 => s,
        _ => return Err(NVML_ERROR_UNINITIALIZED),
    };
    let now = sim.config().clock.virtual_ms(real_now_ms());
    control.refresh(sim, now);
    sim.advance_to(now);
    f(sim).map_err(code)
}

fn init() -> Ret {
    let mut g = state();
    if g.refcount > 0 {
        g.refcount = g.refcount.saturating_add(1);
        return Ok(());
    }
    let config = SimConfig::from_env().map_err(|e| {
        eprintln!("nvml-sim: {e}");
        NVML_ERROR_INVALID_ARGUMENT
    })?;
    let now = config.clock.virtual_ms(real_now_ms());
    let keep = matches!(&g.sim, Some(s) if *s.config() == config);
    if let Some(path) = std::env::var_os("NVML_SIM_ATTEST_ROOT_OUT").filter(|p| !p.is_empty()) {
        // Tests and dev mode configure this bundle as their NVIDIA root; failing to write it
        // must not take the GPUs down, so it is reported and initialisation goes on.
        match crate::attestation::root_bundle_pem(&config) {
            Ok(pem) => {
                if let Err(e) = std::fs::write(&path, pem) {
                    eprintln!(
                        "nvml-sim: cannot write NVML_SIM_ATTEST_ROOT_OUT {}: {e}",
                        std::path::Path::new(&path).display()
                    );
                }
            }
            Err(e) => eprintln!("nvml-sim: building the attestation roots: {e}"),
        }
    }
    if !keep {
        g.sim = Some(Simulation::new(config, now));
        g.control = ControlWatcher::new();
    }
    g.refcount = 1;
    Ok(())
}

// ---- handles ----

const HANDLE_TAG: usize = 0x4E56_0000;
const HANDLE_MASK: usize = !0xFFFF;

fn handle(index: u32) -> nvmlDevice_t {
    std::ptr::without_provenance_mut(HANDLE_TAG | index as usize)
}

/// The device index behind a handle; anything we did not hand out is an invalid argument.
fn index_of(device: nvmlDevice_t) -> Result<u32, nvmlReturn_t> {
    let v = device.addr();
    if v & HANDLE_MASK != HANDLE_TAG {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    Ok((v & 0xFFFF) as u32)
}

/// Resolves a handle against the live simulation and runs `f` with its index.
fn on_device<T>(
    device: nvmlDevice_t,
    f: impl FnOnce(&mut Simulation, u32) -> Result<T, SimError>,
) -> Result<T, nvmlReturn_t> {
    let index = index_of(device)?;
    with_sim(|sim| {
        sim.device(index)?;
        f(sim, index)
    })
    .map_err(|c| {
        if c == NVML_ERROR_NOT_FOUND {
            NVML_ERROR_INVALID_ARGUMENT
        } else {
            c
        }
    })
}

// ---- pointer helpers (the only places that touch caller memory) ----

/// Writes one value through an out-pointer.
///
/// # Safety
/// `out` is null or valid for writing a `T`.
unsafe fn put<T>(out: *mut T, value: T) -> Ret {
    if out.is_null() || !out.is_aligned() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    // SAFETY: non-null and aligned, and the caller guarantees it points to a writable T.
    unsafe { out.write(value) };
    Ok(())
}

/// Copies `s` and a terminating NUL into a caller buffer of `len` bytes.
///
/// # Safety
/// `buf` is null or valid for writing `len` bytes.
unsafe fn put_str(buf: *mut c_char, len: c_uint, s: &str) -> Ret {
    if buf.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    let bytes = s.as_bytes();
    if (len as usize) < bytes.len() + 1 {
        return Err(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    // SAFETY: the caller guarantees `len` writable bytes; we write bytes.len() + 1 <= len, and
    // our string cannot overlap the caller's buffer.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), bytes.len());
        buf.add(bytes.len()).write(0);
    }
    Ok(())
}

/// Reads a NUL-terminated UTF-8 argument.
///
/// # Safety
/// `p` is null or points to a NUL-terminated string.
unsafe fn arg_str<'a>(p: *const c_char) -> Result<&'a str, nvmlReturn_t> {
    if p.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    // SAFETY: non-null, and the caller guarantees NUL termination.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map_err(|_| NVML_ERROR_INVALID_ARGUMENT)
}

fn fixed<const N: usize>(s: &str) -> [c_char; N] {
    let mut out = [0 as c_char; N];
    for (o, b) in out.iter_mut().zip(s.bytes().take(N - 1)) {
        *o = b as c_char;
    }
    out
}

// ---- initialisation and system queries ----

#[no_mangle]
pub extern "C" fn nvmlInit_v2() -> nvmlReturn_t {
    guard(init)
}

#[no_mangle]
pub extern "C" fn nvmlInit() -> nvmlReturn_t {
    guard(init)
}

/// Flags (`NVML_INIT_FLAG_NO_GPUS`, `NVML_INIT_FLAG_NO_ATTACH`) change nothing here: a
/// simulated node with no GPUs initialises anyway, and there is nothing to attach.
#[no_mangle]
pub extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> nvmlReturn_t {
    guard(init)
}

#[no_mangle]
pub extern "C" fn nvmlShutdown() -> nvmlReturn_t {
    guard(|| {
        let mut g = state();
        if g.refcount == 0 {
            return Err(NVML_ERROR_UNINITIALIZED);
        }
        g.refcount -= 1;
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn nvmlErrorString(result: nvmlReturn_t) -> *const c_char {
    let s: &'static CStr = match result {
        0 => c"Success",
        1 => c"Uninitialized",
        2 => c"Invalid Argument",
        3 => c"Not Supported",
        4 => c"Insufficient Permissions",
        5 => c"Already Initialized",
        6 => c"Not Found",
        7 => c"Insufficient Size",
        8 => c"Insufficient External Power",
        9 => c"Driver Not Loaded",
        10 => c"Timeout",
        11 => c"Interrupt request issue",
        12 => c"NVML Shared Library Not Found",
        13 => c"Function Not Found",
        14 => c"Corrupted infoROM",
        15 => c"GPU is lost",
        16 => c"GPU requires restart",
        17 => c"The operating system has blocked the request.",
        18 => c"RM has detected an NVML/RM version mismatch.",
        19 => c"In use by another client",
        20 => c"Insufficient Memory",
        21 => c"No data",
        25 => c"Argument version mismatch",
        26 => c"Deprecated",
        27 => c"Not Ready",
        28 => c"GPU not found",
        29 => c"Invalid state",
        _ => c"Unknown Error",
    };
    s.as_ptr()
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(
    version: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    guard(|| {
        let v = with_sim(|s| {
            s.driver()?;
            Ok(s.config().driver_version.clone())
        })?;
        // SAFETY: NVML contract: `version` holds `length` bytes.
        unsafe { put_str(version, length, &v) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(
    version: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    guard(|| {
        let v = with_sim(|s| Ok(format!("12.{}", s.config().driver_version)))?;
        // SAFETY: NVML contract: `version` holds `length` bytes.
        unsafe { put_str(version, length, &v) }
    })
}

/// The CUDA version each driver branch ships with (e.g. 550 → 12.4 = 12040).
fn cuda_version(driver: &str) -> c_int {
    let major: u32 = driver
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    match major {
        0..=534 => 12000,
        535..=544 => 12020,
        545..=549 => 12030,
        550..=554 => 12040,
        555..=559 => 12050,
        560..=564 => 12060,
        565..=569 => 12070,
        _ => 12080,
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion(cuda: *mut c_int) -> nvmlReturn_t {
    guard(|| {
        let v = with_sim(|s| Ok(cuda_version(&s.config().driver_version)))?;
        // SAFETY: NVML contract: `cuda` is null or points to an int.
        unsafe { put(cuda, v) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(cuda: *mut c_int) -> nvmlReturn_t {
    // SAFETY: same contract as the v1 function.
    unsafe { nvmlSystemGetCudaDriverVersion(cuda) }
}

// ---- device enumeration ----

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> nvmlReturn_t {
    guard(|| {
        let n = with_sim(|s| {
            s.driver()?;
            Ok(s.device_count())
        })?;
        // SAFETY: NVML contract: `count` is null or points to a uint.
        unsafe { put(count, n) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount(count: *mut c_uint) -> nvmlReturn_t {
    // SAFETY: same contract as the v2 function.
    unsafe { nvmlDeviceGetCount_v2(count) }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    index: c_uint,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    guard(|| {
        with_sim(|s| s.device(index).map(|_| ())).map_err(|c| {
            if c == NVML_ERROR_NOT_FOUND {
                NVML_ERROR_INVALID_ARGUMENT
            } else {
                c
            }
        })?;
        // SAFETY: NVML contract: `device` is null or points to a handle slot.
        unsafe { put(device, handle(index)) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex(
    index: c_uint,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    // SAFETY: same contract as the v2 function.
    unsafe { nvmlDeviceGetHandleByIndex_v2(index, device) }
}

/// Shared body of the by-UUID, by-serial and by-bus-id lookups.
///
/// # Safety
/// `key` is null or NUL-terminated; `device` is null or points to a handle slot.
unsafe fn lookup(
    key: *const c_char,
    device: *mut nvmlDevice_t,
    find: impl FnOnce(&Simulation, &str) -> Result<u32, SimError>,
) -> nvmlReturn_t {
    guard(|| {
        // SAFETY: forwarded from the caller's contract.
        let key = unsafe { arg_str(key) }?;
        if device.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let index = with_sim(|s| find(s, key))?;
        // SAFETY: forwarded from the caller's contract.
        unsafe { put(device, handle(index)) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByUUID(
    uuid: *const c_char,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    // SAFETY: NVML contract, forwarded.
    unsafe { lookup(uuid, device, |s, k| s.by_uuid(k)) }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleBySerial(
    serial: *const c_char,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    // SAFETY: NVML contract, forwarded.
    unsafe { lookup(serial, device, |s, k| s.by_serial(k)) }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId_v2(
    bus_id: *const c_char,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    // SAFETY: NVML contract, forwarded.
    unsafe { lookup(bus_id, device, |s, k| s.by_pci_bus_id(k)) }
}

// ---- device queries ----

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetIndex(
    device: nvmlDevice_t,
    index: *mut c_uint,
) -> nvmlReturn_t {
    guard(|| {
        let i = on_device(device, |s, i| s.healthy(i).map(|d| d.index))?;
        // SAFETY: NVML contract: null or a uint.
        unsafe { put(index, i) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUUID(
    device: nvmlDevice_t,
    uuid: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    guard(|| {
        let v = on_device(device, |s, i| s.healthy(i).map(|d| d.uuid.clone()))?;
        // SAFETY: NVML contract: `uuid` holds `length` bytes.
        unsafe { put_str(uuid, length, &v) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetSerial(
    device: nvmlDevice_t,
    serial: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    guard(|| {
        let v = on_device(device, |s, i| s.serial(i))?;
        // SAFETY: NVML contract: `serial` holds `length` bytes.
        unsafe { put_str(serial, length, &v) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetName(
    device: nvmlDevice_t,
    name: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    guard(|| {
        let v = on_device(device, |s, i| s.healthy(i).map(|d| d.model.name))?;
        // SAFETY: NVML contract: `name` holds `length` bytes.
        unsafe { put_str(name, length, v) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetVbiosVersion(
    device: nvmlDevice_t,
    version: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    guard(|| {
        let v = on_device(device, |s, i| s.healthy(i).map(|d| d.model.vbios))?;
        // SAFETY: NVML contract: `version` holds `length` bytes.
        unsafe { put_str(version, length, v) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(
    device: nvmlDevice_t,
    pci: *mut nvmlPciInfo_t,
) -> nvmlReturn_t {
    guard(|| {
        let info = on_device(device, |s, i| {
            let d = s.healthy(i)?;
            Ok(nvmlPciInfo_t {
                busIdLegacy: fixed(&d.pci.bus_id_legacy()),
                domain: d.pci.domain,
                bus: d.pci.bus,
                device: d.pci.device,
                pciDeviceId: d.model.pci_device_id,
                pciSubSystemId: d.model.pci_subsystem_id,
                busId: fixed(&d.pci.bus_id()),
            })
        })?;
        // SAFETY: NVML contract: null or an nvmlPciInfo_t.
        unsafe { put(pci, info) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMinorNumber(
    device: nvmlDevice_t,
    minor: *mut c_uint,
) -> nvmlReturn_t {
    guard(|| {
        let v = on_device(device, |s, i| s.healthy(i).map(|d| d.index))?;
        // SAFETY: NVML contract: null or a uint.
        unsafe { put(minor, v) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(
    device: nvmlDevice_t,
    memory: *mut nvmlMemory_t,
) -> nvmlReturn_t {
    guard(|| {
        let v = on_device(device, |s, i| {
            let d = s.healthy(i)?;
            let total = d.model.memory_total_bytes();
            // v1 counts the driver's reservation as used.
            let used = d.memory_used_bytes() + d.model.reserved_mib * crate::model::Model::MIB;
            Ok(nvmlMemory_t {
                total,
                free: total - used,
                used,
            })
        })?;
        // SAFETY: NVML contract: null or an nvmlMemory_t.
        unsafe { put(memory, v) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: nvmlDevice_t,
    memory: *mut nvmlMemory_v2_t,
) -> nvmlReturn_t {
    guard(|| {
        if memory.is_null() || !memory.is_aligned() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: non-null and aligned; NVML contract: points to an nvmlMemory_v2_t whose
        // version field the caller set.
        let version = unsafe { (*memory).version };
        if version != nvmlMemory_v2 {
            return Err(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
        }
        let v = on_device(device, |s, i| {
            let d = s.healthy(i)?;
            let total = d.model.memory_total_bytes();
            let reserved = d.model.reserved_mib * crate::model::Model::MIB;
            let used = d.memory_used_bytes();
            Ok(nvmlMemory_v2_t {
                version,
                total,
                reserved,
                free: total - reserved - used,
                used,
            })
        })?;
        // SAFETY: as above.
        unsafe { put(memory, v) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(
    device: nvmlDevice_t,
    utilization: *mut nvmlUtilization_t,
) -> nvmlReturn_t {
    guard(|| {
        let v = on_device(device, |s, i| {
            let load = s.healthy(i)?.load_pct();
            Ok(nvmlUtilization_t {
                gpu: load,
                memory: load * 6 / 10,
            })
        })?;
        // SAFETY: NVML contract: null or an nvmlUtilization_t.
        unsafe { put(utilization, v) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTotalEnergyConsumption(
    device: nvmlDevice_t,
    energy: *mut c_ulonglong,
) -> nvmlReturn_t {
    guard(|| {
        if energy.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let v = on_device(device, |s, i| s.energy_mj(i))?;
        // SAFETY: NVML contract: points to an unsigned long long.
        unsafe { put(energy, v) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPowerUsage(
    device: nvmlDevice_t,
    power: *mut c_uint,
) -> nvmlReturn_t {
    guard(|| {
        let v = on_device(device, |s, i| s.healthy(i).map(|d| d.power_mw()))?;
        // SAFETY: NVML contract: null or a uint.
        unsafe { put(power, v) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPowerManagementLimit(
    device: nvmlDevice_t,
    limit: *mut c_uint,
) -> nvmlReturn_t {
    guard(|| {
        let v = on_device(device, |s, i| s.healthy(i).map(|d| d.model.tdp_w * 1000))?;
        // SAFETY: NVML contract: null or a uint.
        unsafe { put(limit, v) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetEnforcedPowerLimit(
    device: nvmlDevice_t,
    limit: *mut c_uint,
) -> nvmlReturn_t {
    // SAFETY: same contract.
    unsafe { nvmlDeviceGetPowerManagementLimit(device, limit) }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTemperature(
    device: nvmlDevice_t,
    sensor: c_uint,
    temp: *mut c_uint,
) -> nvmlReturn_t {
    guard(|| {
        if sensor != NVML_TEMPERATURE_GPU {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let v = on_device(device, |s, i| {
            let d = s.healthy(i)?;
            Ok(d.model.temperature_c(d.load_pct()))
        })?;
        // SAFETY: NVML contract: null or a uint.
        unsafe { put(temp, v) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: nvmlDevice_t,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> nvmlReturn_t {
    guard(|| {
        if current.is_null() || pending.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let (c, p) = on_device(device, |s, i| s.mig_mode(i))?;
        // SAFETY: NVML contract: both point to a uint.
        unsafe {
            put(current, c)?;
            put(pending, p)
        }
    })
}

/// NVML's two-call protocol: with too small a buffer (or none), `*infoCount` receives the
/// number of processes and the call returns `NVML_ERROR_INSUFFICIENT_SIZE`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: nvmlDevice_t,
    info_count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    guard(|| {
        if info_count.is_null() || !info_count.is_aligned() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let procs = on_device(device, |s, i| s.healthy(i).map(|d| d.processes()))?;
        // SAFETY: non-null, aligned, and NVML's contract makes it a readable/writable uint.
        let capacity = unsafe { info_count.read() } as usize;
        let n = procs.len() as c_uint;
        if procs.is_empty() {
            // SAFETY: as above.
            return unsafe { put(info_count, 0) };
        }
        if infos.is_null() || capacity < procs.len() {
            // SAFETY: as above.
            unsafe { put(info_count, n) }?;
            return Err(NVML_ERROR_INSUFFICIENT_SIZE);
        }
        if !infos.is_aligned() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        for (k, p) in procs.iter().enumerate() {
            let entry = nvmlProcessInfo_t {
                pid: p.pid,
                usedGpuMemory: p.used_memory_bytes,
                gpuInstanceId: NVML_VALUE_NOT_AVAILABLE_UINT,
                computeInstanceId: NVML_VALUE_NOT_AVAILABLE_UINT,
            };
            // SAFETY: k < procs.len() <= capacity, and the caller guarantees `infos` holds
            // `*infoCount` (= capacity) entries.
            unsafe { infos.add(k).write(entry) };
        }
        // SAFETY: as above.
        unsafe { put(info_count, n) }
    })
}

// ---- confidential computing ----
//
// System-wide CC state follows NVML_SIM_CC (or the control file's "cc"). Attestation (an SPDM
// report over the caller's nonce, signed with the GPU's simulated device key, and the matching
// certificate chain) is answered by CC-capable GPUs while CC is on; others answer "not
// supported", as a GPU without CC firmware does (see `crate::attestation`).

fn cc_state(s: &Simulation) -> (c_uint, c_uint, c_uint) {
    match s.cc_mode() {
        CcMode::Off => (
            NVML_CC_SYSTEM_ENVIRONMENT_UNAVAILABLE,
            NVML_CC_SYSTEM_FEATURE_DISABLED,
            NVML_CC_SYSTEM_DEVTOOLS_MODE_OFF,
        ),
        CcMode::On => (
            NVML_CC_SYSTEM_ENVIRONMENT_PROD,
            NVML_CC_SYSTEM_FEATURE_ENABLED,
            NVML_CC_SYSTEM_DEVTOOLS_MODE_OFF,
        ),
        CcMode::DevTools => (
            NVML_CC_SYSTEM_ENVIRONMENT_PROD,
            NVML_CC_SYSTEM_FEATURE_ENABLED,
            NVML_CC_SYSTEM_DEVTOOLS_MODE_ON,
        ),
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetConfComputeCapabilities(
    caps: *mut nvmlConfComputeSystemCaps_t,
) -> nvmlReturn_t {
    guard(|| {
        let v = with_sim(|s| {
            Ok(nvmlConfComputeSystemCaps_t {
                cpuCaps: if s.cc_mode() == CcMode::Off {
                    NVML_CC_SYSTEM_CPU_CAPS_NONE
                } else {
                    NVML_CC_SYSTEM_CPU_CAPS_INTEL_TDX
                },
                gpusCaps: if s.cc_capable() {
                    NVML_CC_SYSTEM_GPUS_CC_CAPABLE
                } else {
                    NVML_CC_SYSTEM_GPUS_CC_NOT_CAPABLE
                },
            })
        })?;
        // SAFETY: NVML contract: null or an nvmlConfComputeSystemCaps_t.
        unsafe { put(caps, v) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetConfComputeState(
    state: *mut nvmlConfComputeSystemState_t,
) -> nvmlReturn_t {
    guard(|| {
        let (environment, ccFeature, devToolsMode) = with_sim(|s| Ok(cc_state(s)))?;
        let v = nvmlConfComputeSystemState_t {
            environment,
            ccFeature,
            devToolsMode,
        };
        // SAFETY: NVML contract: null or an nvmlConfComputeSystemState_t.
        unsafe { put(state, v) }
    })
}

/// Accepts the versioned struct and also an unversioned (zeroed) one, which nvml-wrapper 0.11
/// passes; any other version is a mismatch.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetConfComputeSettings(
    settings: *mut nvmlSystemConfComputeSettings_t,
) -> nvmlReturn_t {
    guard(|| {
        if settings.is_null() || !settings.is_aligned() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: non-null, aligned; NVML contract: an nvmlSystemConfComputeSettings_t.
        let version = unsafe { (*settings).version };
        if version != 0 && version != nvmlSystemConfComputeSettings_v1 {
            return Err(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
        }
        let (environment, ccFeature, devToolsMode) = with_sim(|s| Ok(cc_state(s)))?;
        let v = nvmlSystemConfComputeSettings_t {
            version,
            environment,
            ccFeature,
            devToolsMode,
            multiGpuMode: NVML_CC_SYSTEM_MULTIGPU_NONE,
        };
        // SAFETY: as above.
        unsafe { put(settings, v) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetConfComputeGpusReadyState(
    is_accepting_work: *mut c_uint,
) -> nvmlReturn_t {
    guard(|| {
        let ready = with_sim(|s| Ok(s.cc_gpus_ready()))?;
        let v = if ready {
            NVML_CC_ACCEPTING_CLIENT_REQUESTS_TRUE
        } else {
            NVML_CC_ACCEPTING_CLIENT_REQUESTS_FALSE
        };
        // SAFETY: NVML contract: null or a uint.
        unsafe { put(is_accepting_work, v) }
    })
}

#[no_mangle]
pub extern "C" fn nvmlSystemSetConfComputeGpusReadyState(
    is_accepting_work: c_uint,
) -> nvmlReturn_t {
    guard(|| {
        let ready = match is_accepting_work {
            NVML_CC_ACCEPTING_CLIENT_REQUESTS_FALSE => false,
            NVML_CC_ACCEPTING_CLIENT_REQUESTS_TRUE => true,
            _ => return Err(NVML_ERROR_INVALID_ARGUMENT),
        };
        with_sim(|s| s.set_cc_gpus_ready(ready))
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetConfComputeMemSizeInfo(
    device: nvmlDevice_t,
    info: *mut nvmlConfComputeMemSizeInfo_t,
) -> nvmlReturn_t {
    guard(|| {
        let (p, u) = on_device(device, |s, i| s.cc_mem_size_kib(i))?;
        let v = nvmlConfComputeMemSizeInfo_t {
            protectedMemSizeKib: p,
            unprotectedMemSizeKib: u,
        };
        // SAFETY: NVML contract: null or an nvmlConfComputeMemSizeInfo_t.
        unsafe { put(info, v) }
    })
}

/// Copies `bytes` into a fixed NVML buffer, or fails with `INSUFFICIENT_SIZE`.
fn fill(buf: &mut [u8], bytes: &[u8]) -> Result<c_uint, nvmlReturn_t> {
    let dst = buf
        .get_mut(..bytes.len())
        .ok_or(NVML_ERROR_INSUFFICIENT_SIZE)?;
    dst.copy_from_slice(bytes);
    c_uint::try_from(bytes.len()).map_err(|_| NVML_ERROR_INSUFFICIENT_SIZE)
}

/// The SPDM report over the caller's `nonce` (set in the struct), as the real library
/// returns it: `request || response` in `attestationReport`. No CEC report is simulated.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetConfComputeGpuAttestationReport(
    device: nvmlDevice_t,
    report: *mut nvmlConfComputeGpuAttestationReport_t,
) -> nvmlReturn_t {
    guard(|| {
        if report.is_null() || !report.is_aligned() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: non-null, aligned; NVML contract: one nvmlConfComputeGpuAttestationReport_t.
        let out = unsafe { &mut *report };
        let nonce = out.nonce;
        // Sign outside the simulation lock: GPUs attest concurrently, as real ones do.
        let signer = on_device(device, |s, i| s.attestation_signer(i))?;
        let bytes = signer.sign(nonce).map_err(code)?;
        out.attestationReportSize = fill(&mut out.attestationReport, &bytes)?;
        out.isCecAttestationReportPresent = 0;
        out.cecAttestationReportSize = 0;
        Ok(())
    })
}

/// The device's certificates in PEM, leaf first: `attestationCertChain` is the chain that
/// signs attestation reports (leaf, ICA, root); `certChain` the device identity chain
/// (ICA, root).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetConfComputeGpuCertificate(
    device: nvmlDevice_t,
    certificate: *mut nvmlConfComputeGpuCertificate_t,
) -> nvmlReturn_t {
    guard(|| {
        if certificate.is_null() || !certificate.is_aligned() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let chain = on_device(device, |s, i| s.attestation_chain(i))?;
        let attestation = crate::attestation::chain_pem(&chain);
        let identity = crate::attestation::chain_pem(chain.get(1..).unwrap_or(&[]));
        // SAFETY: non-null, aligned; NVML contract: one nvmlConfComputeGpuCertificate_t.
        let out = unsafe { &mut *certificate };
        out.attestationCertChainSize = fill(&mut out.attestationCertChain, attestation.as_bytes())?;
        out.certChainSize = fill(&mut out.certChain, identity.as_bytes())?;
        Ok(())
    })
}
