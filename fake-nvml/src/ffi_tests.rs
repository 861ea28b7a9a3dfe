//! The C ABI shell called directly, as a C caller would: hostile pointers, short buffers,
//! the two-call process protocol, reference-counted init.
//!
//! Tests run in parallel inside one process and share the library's global state; each pairs
//! its init with a shutdown, and all of them use the configuration from the environment
//! (the defaults under `cargo test`), so they never disturb each other.

use std::ffi::{c_char, c_uint, c_ulonglong, CStr};
use std::ptr;

use crate::config::SimConfig;
use crate::ffi::*;

struct Session;

impl Session {
    fn open() -> Session {
        assert_eq!(nvmlInit_v2(), NVML_SUCCESS);
        Session
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        assert_eq!(nvmlShutdown(), NVML_SUCCESS);
    }
}

fn config() -> SimConfig {
    let c = SimConfig::from_env().expect("the test environment's NVML_SIM_* variables are valid");
    assert!(
        c.control_path.is_none(),
        "run these tests without NVML_SIM_CONTROL"
    );
    c
}

fn first_device() -> nvmlDevice_t {
    let mut d: nvmlDevice_t = ptr::null_mut();
    assert!(
        !config().gpus.is_empty(),
        "these tests need at least one simulated GPU"
    );
    assert_eq!(
        unsafe { nvmlDeviceGetHandleByIndex_v2(0, &mut d) },
        NVML_SUCCESS
    );
    d
}

#[test]
fn layouts_match_nvml_h() {
    use std::mem::{align_of, size_of};
    assert_eq!(size_of::<nvmlPciInfo_t>(), 68);
    assert_eq!(size_of::<nvmlMemory_t>(), 24);
    assert_eq!(size_of::<nvmlMemory_v2_t>(), 40);
    assert_eq!(nvmlMemory_v2, 40 | (2 << 24));
    assert_eq!(size_of::<nvmlUtilization_t>(), 8);
    assert_eq!(size_of::<nvmlProcessInfo_t>(), 24);
    assert_eq!(align_of::<nvmlProcessInfo_t>(), 8);
    assert_eq!(size_of::<nvmlConfComputeSystemState_t>(), 12);
    assert_eq!(size_of::<nvmlSystemConfComputeSettings_t>(), 20);
    assert_eq!(size_of::<nvmlConfComputeMemSizeInfo_t>(), 16);
    assert_eq!(
        size_of::<nvmlConfComputeGpuAttestationReport_t>(),
        12 + 32 + 8192 + 4096
    );
}

#[test]
fn init_is_reference_counted() {
    let a = Session::open();
    let b = Session::open();
    drop(a);
    let mut n: c_uint = 0;
    assert_eq!(unsafe { nvmlDeviceGetCount_v2(&mut n) }, NVML_SUCCESS);
    assert_eq!(n as usize, config().gpus.len());
    drop(b);
}

#[test]
fn error_strings_are_static_c_strings() {
    let s = unsafe { CStr::from_ptr(nvmlErrorString(NVML_ERROR_GPU_IS_LOST)) };
    assert_eq!(s.to_str().unwrap(), "GPU is lost");
    let s = unsafe { CStr::from_ptr(nvmlErrorString(12345)) };
    assert_eq!(s.to_str().unwrap(), "Unknown Error");
}

#[test]
fn null_pointers_are_invalid_arguments() {
    let _s = Session::open();
    let d = first_device();
    unsafe {
        assert_eq!(
            nvmlDeviceGetCount_v2(ptr::null_mut()),
            NVML_ERROR_INVALID_ARGUMENT
        );
        assert_eq!(
            nvmlDeviceGetHandleByIndex_v2(0, ptr::null_mut()),
            NVML_ERROR_INVALID_ARGUMENT
        );
        let mut h: nvmlDevice_t = ptr::null_mut();
        assert_eq!(
            nvmlDeviceGetHandleByUUID(ptr::null(), &mut h),
            NVML_ERROR_INVALID_ARGUMENT
        );
        assert_eq!(
            nvmlDeviceGetUUID(d, ptr::null_mut(), 96),
            NVML_ERROR_INVALID_ARGUMENT
        );
        assert_eq!(
            nvmlDeviceGetPciInfo_v3(d, ptr::null_mut()),
            NVML_ERROR_INVALID_ARGUMENT
        );
        assert_eq!(
            nvmlDeviceGetMemoryInfo_v2(d, ptr::null_mut()),
            NVML_ERROR_INVALID_ARGUMENT
        );
        assert_eq!(
            nvmlDeviceGetTotalEnergyConsumption(d, ptr::null_mut()),
            NVML_ERROR_INVALID_ARGUMENT
        );
        assert_eq!(
            nvmlDeviceGetComputeRunningProcesses_v3(d, ptr::null_mut(), ptr::null_mut()),
            NVML_ERROR_INVALID_ARGUMENT
        );
        let mut x: c_uint = 0;
        assert_eq!(
            nvmlDeviceGetMigMode(d, &mut x, ptr::null_mut()),
            NVML_ERROR_INVALID_ARGUMENT
        );
        assert_eq!(
            nvmlSystemGetDriverVersion(ptr::null_mut(), 80),
            NVML_ERROR_INVALID_ARGUMENT
        );
        assert_eq!(
            nvmlSystemGetConfComputeState(ptr::null_mut()),
            NVML_ERROR_INVALID_ARGUMENT
        );
    }
}

#[test]
fn forged_and_null_handles_are_invalid_arguments() {
    let _s = Session::open();
    let mut n: c_uint = 0;
    unsafe {
        assert_eq!(
            nvmlDeviceGetIndex(ptr::null_mut(), &mut n),
            NVML_ERROR_INVALID_ARGUMENT
        );
        let forged = ptr::without_provenance_mut::<nvmlDevice_st>(0xdead_beef);
        assert_eq!(
            nvmlDeviceGetIndex(forged, &mut n),
            NVML_ERROR_INVALID_ARGUMENT
        );
        // A well-formed handle for a device that does not exist.
        let mut h: nvmlDevice_t = ptr::null_mut();
        assert_eq!(
            nvmlDeviceGetHandleByIndex_v2(4000, &mut h),
            NVML_ERROR_INVALID_ARGUMENT
        );
        let beyond = ptr::without_provenance_mut::<nvmlDevice_st>(0x4E56_0000 | 4000);
        assert_eq!(
            nvmlDeviceGetIndex(beyond, &mut n),
            NVML_ERROR_INVALID_ARGUMENT
        );
    }
}

#[test]
fn short_buffers_are_insufficient_size() {
    let _s = Session::open();
    let d = first_device();
    let mut buf = [0x55 as c_char; 96];
    unsafe {
        // The UUID is 40 characters plus the terminator.
        assert_eq!(
            nvmlDeviceGetUUID(d, buf.as_mut_ptr(), 40),
            NVML_ERROR_INSUFFICIENT_SIZE
        );
        assert_eq!(
            nvmlDeviceGetUUID(d, buf.as_mut_ptr(), 0),
            NVML_ERROR_INSUFFICIENT_SIZE
        );
        assert!(buf.iter().all(|b| *b == 0x55), "nothing written on failure");
        assert_eq!(nvmlDeviceGetUUID(d, buf.as_mut_ptr(), 41), NVML_SUCCESS);
        let uuid = CStr::from_ptr(buf.as_ptr()).to_str().unwrap().to_string();
        assert_eq!(uuid.len(), 40);
        assert_eq!(buf[41], 0x55, "nothing written past the terminator");
        assert_eq!(
            nvmlSystemGetDriverVersion(buf.as_mut_ptr(), 3),
            NVML_ERROR_INSUFFICIENT_SIZE
        );
        assert_eq!(
            nvmlDeviceGetName(d, buf.as_mut_ptr(), 4),
            NVML_ERROR_INSUFFICIENT_SIZE
        );

        // The handle found by UUID is the same device.
        let mut h: nvmlDevice_t = ptr::null_mut();
        let c = std::ffi::CString::new(uuid).unwrap();
        assert_eq!(nvmlDeviceGetHandleByUUID(c.as_ptr(), &mut h), NVML_SUCCESS);
        assert_eq!(h, d);
        let bad = c"GPU-not-a-real-uuid";
        assert_eq!(
            nvmlDeviceGetHandleByUUID(bad.as_ptr(), &mut h),
            NVML_ERROR_NOT_FOUND
        );
        let not_utf8 = [0xffu8 as c_char, 0];
        assert_eq!(
            nvmlDeviceGetHandleByUUID(not_utf8.as_ptr(), &mut h),
            NVML_ERROR_INVALID_ARGUMENT
        );
    }
}

#[test]
fn versioned_structs_are_checked() {
    let _s = Session::open();
    let d = first_device();
    unsafe {
        let mut m = nvmlMemory_v2_t {
            version: 1,
            ..Default::default()
        };
        assert_eq!(
            nvmlDeviceGetMemoryInfo_v2(d, &mut m),
            NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        );
        m.version = nvmlMemory_v2;
        assert_eq!(nvmlDeviceGetMemoryInfo_v2(d, &mut m), NVML_SUCCESS);
        assert_eq!(m.total, m.reserved + m.free + m.used);
        assert_eq!(m.total, config().gpus[0].memory_total_bytes());
        let mut v1 = nvmlMemory_t::default();
        assert_eq!(nvmlDeviceGetMemoryInfo(d, &mut v1), NVML_SUCCESS);
        assert_eq!(v1.total, v1.free + v1.used);

        let mut cc = nvmlSystemConfComputeSettings_t {
            version: 7,
            ..Default::default()
        };
        assert_eq!(
            nvmlSystemGetConfComputeSettings(&mut cc),
            NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        );
        cc.version = nvmlSystemConfComputeSettings_v1;
        assert_eq!(nvmlSystemGetConfComputeSettings(&mut cc), NVML_SUCCESS);
    }
}

#[test]
fn process_list_two_call_protocol() {
    let _s = Session::open();
    let d = first_device();
    let mut count: c_uint = 0;
    // Without a control file every GPU is idle and runs nothing: count 0, success.
    let rc = unsafe { nvmlDeviceGetComputeRunningProcesses_v3(d, &mut count, ptr::null_mut()) };
    assert_eq!((rc, count), (NVML_SUCCESS, 0));
}

#[test]
fn energy_counter_is_monotonic_while_idle() {
    let _s = Session::open();
    let d = first_device();
    let mut a: c_ulonglong = 0;
    let mut b: c_ulonglong = 0;
    unsafe {
        assert_eq!(nvmlDeviceGetTotalEnergyConsumption(d, &mut a), NVML_SUCCESS);
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(nvmlDeviceGetTotalEnergyConsumption(d, &mut b), NVML_SUCCESS);
    }
    assert!(a > 0);
    assert!(b > a, "{a} then {b}");
}

#[test]
fn temperature_sensor_is_checked() {
    let _s = Session::open();
    let d = first_device();
    let mut t: c_uint = 0;
    unsafe {
        assert_eq!(
            nvmlDeviceGetTemperature(d, 7, &mut t),
            NVML_ERROR_INVALID_ARGUMENT
        );
        assert_eq!(
            nvmlDeviceGetTemperature(d, NVML_TEMPERATURE_GPU, &mut t),
            NVML_SUCCESS
        );
    }
    assert!((20..100).contains(&t));
}

#[test]
fn attestation_needs_cc_on() {
    // The test environment runs with CC off (the CC-on path is tested in `attestation`).
    let _s = Session::open();
    let d = first_device();
    let mut report = Box::new(nvmlConfComputeGpuAttestationReport_t {
        isCecAttestationReportPresent: 0,
        attestationReportSize: 0,
        cecAttestationReportSize: 0,
        nonce: [0; 32],
        attestationReport: [0; 8192],
        cecAttestationReport: [0; 4096],
    });
    unsafe {
        assert_eq!(
            nvmlDeviceGetConfComputeGpuAttestationReport(d, &mut *report),
            NVML_ERROR_NOT_SUPPORTED
        );
        assert_eq!(
            nvmlDeviceGetConfComputeGpuAttestationReport(d, ptr::null_mut()),
            NVML_ERROR_INVALID_ARGUMENT
        );
        assert_eq!(
            nvmlDeviceGetConfComputeGpuCertificate(d, ptr::null_mut()),
            NVML_ERROR_INVALID_ARGUMENT
        );
    }
}
