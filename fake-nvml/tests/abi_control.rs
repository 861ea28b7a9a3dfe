//! The C ABI under a control file: the process-list protocol with real entries, and fault
//! codes on every device function. The library reads its environment at init, so the test
//! re-executes this binary with the environment set (never `set_var`).

use std::ffi::{c_char, c_uint, c_ulonglong};
use std::path::PathBuf;
use std::process::Command;
use std::ptr;

use nvidia_ml_sim::ffi::*;

const CHILD: &str = "FAKE_NVML_ABI_CHILD";

fn handle(i: c_uint) -> nvmlDevice_t {
    let mut d: nvmlDevice_t = ptr::null_mut();
    assert_eq!(
        unsafe { nvmlDeviceGetHandleByIndex_v2(i, &mut d) },
        NVML_SUCCESS
    );
    d
}

/// Every per-device query, with the code it returned.
fn device_codes(d: nvmlDevice_t) -> Vec<(&'static str, nvmlReturn_t)> {
    let mut buf = [0 as c_char; 96];
    let mut u: c_uint = 0;
    let mut u2: c_uint = 0;
    let mut ull: c_ulonglong = 0;
    let mut pci = nvmlPciInfo_t::default();
    let mut mem = nvmlMemory_t::default();
    let mut mem2 = nvmlMemory_v2_t {
        version: nvmlMemory_v2,
        ..Default::default()
    };
    let mut util = nvmlUtilization_t::default();
    unsafe {
        vec![
            ("index", nvmlDeviceGetIndex(d, &mut u)),
            ("uuid", nvmlDeviceGetUUID(d, buf.as_mut_ptr(), 96)),
            ("serial", nvmlDeviceGetSerial(d, buf.as_mut_ptr(), 96)),
            ("name", nvmlDeviceGetName(d, buf.as_mut_ptr(), 96)),
            ("vbios", nvmlDeviceGetVbiosVersion(d, buf.as_mut_ptr(), 96)),
            ("pci", nvmlDeviceGetPciInfo_v3(d, &mut pci)),
            ("minor", nvmlDeviceGetMinorNumber(d, &mut u)),
            ("memory", nvmlDeviceGetMemoryInfo(d, &mut mem)),
            ("memory_v2", nvmlDeviceGetMemoryInfo_v2(d, &mut mem2)),
            ("utilization", nvmlDeviceGetUtilizationRates(d, &mut util)),
            ("energy", nvmlDeviceGetTotalEnergyConsumption(d, &mut ull)),
            ("power", nvmlDeviceGetPowerUsage(d, &mut u)),
            ("power_limit", nvmlDeviceGetPowerManagementLimit(d, &mut u)),
            (
                "temperature",
                nvmlDeviceGetTemperature(d, NVML_TEMPERATURE_GPU, &mut u),
            ),
            ("mig", nvmlDeviceGetMigMode(d, &mut u, &mut u2)),
            (
                "processes",
                nvmlDeviceGetComputeRunningProcesses_v3(d, &mut u, ptr::null_mut()),
            ),
        ]
    }
}

fn scenario_body() {
    assert_eq!(nvmlInit_v2(), NVML_SUCCESS);

    // Process list: ask for the count, try a short buffer, then fetch.
    let d0 = handle(0);
    let mut count: c_uint = 0;
    let rc = unsafe { nvmlDeviceGetComputeRunningProcesses_v3(d0, &mut count, ptr::null_mut()) };
    assert_eq!((rc, count), (NVML_ERROR_INSUFFICIENT_SIZE, 3));
    let mut infos = [nvmlProcessInfo_t::default(); 8];
    let mut short: c_uint = 2;
    let rc = unsafe { nvmlDeviceGetComputeRunningProcesses_v3(d0, &mut short, infos.as_mut_ptr()) };
    assert_eq!((rc, short), (NVML_ERROR_INSUFFICIENT_SIZE, 3));
    assert_eq!(infos[0], nvmlProcessInfo_t::default(), "nothing written");
    let mut cap: c_uint = 8;
    let rc = unsafe { nvmlDeviceGetComputeRunningProcesses_v3(d0, &mut cap, infos.as_mut_ptr()) };
    assert_eq!((rc, cap), (NVML_SUCCESS, 3));
    let pids: Vec<u32> = infos[..3].iter().map(|p| p.pid).collect();
    assert_eq!(pids, [11, 12, 13]);
    assert!(infos[..3].iter().all(|p| p.usedGpuMemory > 0
        && p.gpuInstanceId == NVML_VALUE_NOT_AVAILABLE_UINT
        && p.computeInstanceId == NVML_VALUE_NOT_AVAILABLE_UINT));
    assert_eq!(
        infos[3],
        nvmlProcessInfo_t::default(),
        "nothing written past the count"
    );

    // A healthy device answers everything (the H100 supports every query listed).
    for (op, rc) in device_codes(d0) {
        let expected = if op == "processes" {
            NVML_ERROR_INSUFFICIENT_SIZE
        } else {
            NVML_SUCCESS
        };
        assert_eq!(rc, expected, "{op}");
    }
    // Lost and erroring devices fail every query with their code.
    for (device, code) in [(1, NVML_ERROR_GPU_IS_LOST), (2, NVML_ERROR_UNKNOWN)] {
        for (op, rc) in device_codes(handle(device)) {
            assert_eq!(rc, code, "device {device} {op}");
        }
    }
    // The energy counter of device 3 runs backwards.
    let d3 = handle(3);
    let (mut a, mut b): (c_ulonglong, c_ulonglong) = (0, 0);
    unsafe {
        assert_eq!(
            nvmlDeviceGetTotalEnergyConsumption(d3, &mut a),
            NVML_SUCCESS
        );
        assert_eq!(
            nvmlDeviceGetTotalEnergyConsumption(d3, &mut b),
            NVML_SUCCESS
        );
    }
    assert!(b < a, "{a} then {b}");

    assert_eq!(nvmlShutdown(), NVML_SUCCESS);
    assert_eq!(nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
    let mut n: c_uint = 0;
    assert_eq!(
        unsafe { nvmlDeviceGetCount_v2(&mut n) },
        NVML_ERROR_UNINITIALIZED
    );
}

#[test]
fn abi_under_control_file() {
    if std::env::var_os(CHILD).is_some() {
        scenario_body();
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let control: PathBuf = dir.path().join("control.json");
    std::fs::write(
        &control,
        r#"{"processes": {"0": [11, 12, 13]}, "faults": {"1": "lost", "2": "error", "3": "energy-backwards"}}"#,
    )
    .unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["abi_under_control_file", "--exact", "--nocapture"])
        .env_clear()
        .env(CHILD, "1")
        .env("NVML_SIM_GPUS", "H100:4")
        .env("NVML_SIM_CONTROL", &control)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
