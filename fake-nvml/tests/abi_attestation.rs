//! Attestation through the C ABI with CC on: the report is over the caller's nonce and
//! verifies against the roots the library wrote to `NVML_SIM_ATTEST_ROOT_OUT`; toggling CC off
//! in the control file stops reports. The library reads its environment at init, so the test
//! re-executes this binary with the environment set (never `set_var`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::ptr;

use nvidia_ml_sim::ffi::*;

const CHILD: &str = "FAKE_NVML_ATTEST_CHILD";

fn handle(i: u32) -> nvmlDevice_t {
    let mut d: nvmlDevice_t = ptr::null_mut();
    assert_eq!(
        unsafe { nvmlDeviceGetHandleByIndex_v2(i, &mut d) },
        NVML_SUCCESS
    );
    d
}

fn empty_report(nonce: [u8; 32]) -> Box<nvmlConfComputeGpuAttestationReport_t> {
    Box::new(nvmlConfComputeGpuAttestationReport_t {
        isCecAttestationReportPresent: 7,
        attestationReportSize: 0,
        cecAttestationReportSize: 7,
        nonce,
        attestationReport: [0; 8192],
        cecAttestationReport: [0; 4096],
    })
}

fn pem_ders(pem: &[u8]) -> Vec<Vec<u8>> {
    use base64::Engine;
    let text = String::from_utf8(pem.to_vec()).unwrap();
    text.split("-----BEGIN CERTIFICATE-----")
        .skip(1)
        .map(|block| {
            let body: String = block
                .split("-----END CERTIFICATE-----")
                .next()
                .unwrap()
                .split_whitespace()
                .collect();
            base64::engine::general_purpose::STANDARD
                .decode(body)
                .unwrap()
        })
        .collect()
}

fn scenario_body(roots_path: &Path, control: &Path) {
    assert_eq!(nvmlInit_v2(), NVML_SUCCESS);
    let roots = pem_ders(&std::fs::read(roots_path).expect("roots written at init"));
    assert_eq!(roots.len(), 2, "one root per CC-capable GPU");
    let nonce = [0x5a; 32];
    for i in 0..2 {
        let d = handle(i);
        let mut r = empty_report(nonce);
        assert_eq!(
            unsafe { nvmlDeviceGetConfComputeGpuAttestationReport(d, &mut *r) },
            NVML_SUCCESS
        );
        assert_eq!(r.isCecAttestationReportPresent, 0);
        let spdm = &r.attestationReport[..r.attestationReportSize as usize];
        let mut c = Box::new(nvmlConfComputeGpuCertificate_t {
            certChainSize: 0,
            attestationCertChainSize: 0,
            certChain: [0; 4096],
            attestationCertChain: [0; 5120],
        });
        assert_eq!(
            unsafe { nvmlDeviceGetConfComputeGpuCertificate(d, &mut *c) },
            NVML_SUCCESS
        );
        let chain = pem_ders(&c.attestationCertChain[..c.attestationCertChainSize as usize]);
        assert_eq!(chain.len(), 3, "leaf, ICA, root");
        assert_eq!(
            pem_ders(&c.certChain[..c.certChainSize as usize]),
            chain[1..].to_vec()
        );
        attest::nvidia::verify_report(spdm, &chain, &roots, 1_800_000_000, &nonce)
            .expect("report verifies against the published roots");
        assert!(
            attest::nvidia::verify_report(spdm, &chain, &roots, 1_800_000_000, &[0; 32]).is_err()
        );
    }
    // Null pointers are refused.
    assert_eq!(
        unsafe { nvmlDeviceGetConfComputeGpuAttestationReport(handle(0), ptr::null_mut()) },
        NVML_ERROR_INVALID_ARGUMENT
    );
    // CC toggled off through the control file: the GPUs stop attesting.
    std::fs::write(control, r#"{"cc": "off"}"#).unwrap();
    let mut r = empty_report(nonce);
    assert_eq!(
        unsafe { nvmlDeviceGetConfComputeGpuAttestationReport(handle(0), &mut *r) },
        NVML_ERROR_NOT_SUPPORTED
    );
    assert_eq!(nvmlShutdown(), NVML_SUCCESS);
}

#[test]
fn attestation_over_the_abi() {
    let dir_var = std::env::var_os(CHILD);
    if let Some(dir) = dir_var {
        let dir = PathBuf::from(dir);
        scenario_body(&dir.join("roots.pem"), &dir.join("control.json"));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["attestation_over_the_abi", "--exact", "--nocapture"])
        .env_clear()
        .env(CHILD, dir.path())
        .env("NVML_SIM_GPUS", "H100:2")
        .env("NVML_SIM_CC", "on")
        .env("NVML_SIM_CONTROL", dir.path().join("control.json"))
        .env("NVML_SIM_ATTEST_ROOT_OUT", dir.path().join("roots.pem"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
