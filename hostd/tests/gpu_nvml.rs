//! hostd's real NVML code path (`hostd::gpu`, nvml-wrapper) against the simulated
//! `libnvidia_ml_sim.so` built next to this test binary.
//!
//! The library reads its configuration from the environment at `nvmlInit` and keeps global
//! state, so every scenario runs in a child process: the test re-executes this binary, filtered
//! to itself, with the scenario's environment and a marker variable; in the child the marker is
//! set and the body runs. Nothing calls `set_var`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hostd::clock::Clock;
use hostd::gpu::{self, GpuError, GpuInfo, GpuStatus, Gpus};

const CHILD: &str = "GPU_NVML_SCENARIO";
const SIM_VARS: [&str; 6] = [
    "NVML_SIM_GPUS",
    "NVML_SIM_SEED",
    "NVML_SIM_DRIVER",
    "NVML_SIM_CLOCK",
    "NVML_SIM_CC",
    "NVML_SIM_CONTROL",
];
const MIB: u64 = 1024 * 1024;

/// Runs test `name` of this binary in a child process with exactly `env` as the simulation's
/// configuration; returns its stdout. Fails if the child fails or did not run the test.
fn run_child(name: &str, env: &[(&str, String)]) -> String {
    let exe = std::env::current_exe().expect("test binary path");
    let mut cmd = Command::new(exe);
    cmd.args([name, "--exact", "--nocapture", "--test-threads=1"]);
    for v in SIM_VARS {
        cmd.env_remove(v);
    }
    cmd.env(CHILD, name);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("re-running the test binary");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "scenario {name} failed:\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
    assert!(
        stdout.contains("1 passed"),
        "scenario {name} did not run:\n{stdout}"
    );
    stdout
}

/// In the child: runs `body`. In the parent: runs this test again in a child with `env`.
fn scenario(name: &str, env: &[(&str, String)], body: impl FnOnce()) {
    if std::env::var(CHILD).as_deref() == Ok(name) {
        body();
    } else {
        run_child(name, env);
    }
}

fn env(pairs: &[(&str, &str)]) -> Vec<(&'static str, String)> {
    pairs
        .iter()
        .map(|(k, v)| {
            let k: &'static str = SIM_VARS
                .iter()
                .find(|s| *s == k)
                .expect("a simulation variable");
            (k, v.to_string())
        })
        .collect()
}

fn sim_lib() -> PathBuf {
    gpu::sim_library_path().expect(
        "libnvidia_ml_sim.so next to the test binary (built by Cargo as a hostd dependency)",
    )
}

fn open() -> Gpus {
    Gpus::open(Some(&sim_lib())).expect("opening the simulated NVML")
}

fn real_now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The control file of a scenario: a fresh one in the parent (kept alive by the returned
/// directory), the parent's one (from the environment) in the child.
fn control_file() -> (Option<tempfile::TempDir>, PathBuf) {
    match std::env::var_os("NVML_SIM_CONTROL") {
        Some(p) if std::env::var_os(CHILD).is_some() => (None, PathBuf::from(p)),
        _ => {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("control.json");
            (Some(dir), path)
        }
    }
}

/// Replaces the control file atomically, as an operator script should.
fn write_control(path: &Path, json: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, json).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn is_uuid(s: &str) -> bool {
    let Some(rest) = s.strip_prefix("GPU-") else {
        return false;
    };
    let groups: Vec<&str> = rest.split('-').collect();
    groups.iter().map(|g| g.len()).collect::<Vec<_>>() == [8, 4, 4, 4, 12]
        && groups.iter().all(|g| {
            g.chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        })
}

fn is_bus_id(s: &str) -> bool {
    let b = s.as_bytes();
    s.len() == 16
        && b[8] == b':'
        && b[11] == b':'
        && s.ends_with(".0")
        && s[..8].chars().all(|c| c.is_ascii_hexdigit())
}

#[test]
fn sim_library_is_found_next_to_the_test_binary() {
    let p = sim_lib();
    assert_eq!(p.file_name().unwrap(), "libnvidia_ml_sim.so");
    assert!(p.is_file());
}

#[test]
fn a_missing_library_is_unavailable() {
    let missing = Path::new("/nonexistent/libnvidia-ml.so.1");
    match Gpus::open(Some(missing)) {
        Err(GpuError::LibraryUnavailable { path, reason }) => {
            assert_eq!(path, missing);
            assert!(!reason.is_empty());
        }
        other => panic!("expected LibraryUnavailable, got {other:?}"),
    }
}

#[test]
fn a_file_that_is_not_a_library_is_unavailable() {
    let not_lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    assert!(matches!(
        Gpus::open(Some(&not_lib)),
        Err(GpuError::LibraryUnavailable { .. })
    ));
}

#[test]
fn a_library_without_nvml_is_unavailable() {
    // libc loads fine but has no nvmlInit_v2.
    match Gpus::open(Some(Path::new("libc.so.6"))) {
        Err(GpuError::LibraryUnavailable { reason, .. }) => {
            assert!(reason.contains("not an NVML library"), "{reason}")
        }
        other => panic!("expected LibraryUnavailable, got {other:?}"),
    }
}

fn print_uuids(inv: &[GpuInfo]) {
    let uuids: Vec<&str> = inv.iter().map(|g| g.uuid.as_str()).collect();
    println!("UUIDS={}", uuids.join(","));
}

fn uuids_from(stdout: &str) -> Vec<String> {
    let line = stdout
        .lines()
        // libtest may have printed "test name ... " on the same line first.
        .find_map(|l| l.split_once("UUIDS=").map(|(_, u)| u))
        .expect("the child printed its UUIDs");
    line.split(',').map(str::to_string).collect()
}

#[test]
fn fleet_inventory() {
    let e = env(&[
        ("NVML_SIM_GPUS", "H100:4,L4:4"),
        ("NVML_SIM_SEED", "node-a"),
        ("NVML_SIM_DRIVER", "535.183.01"),
    ]);
    scenario("fleet_inventory", &e, || {
        let gpus = open();
        assert_eq!(gpus.driver_version().unwrap(), "535.183.01");
        let inv = gpus.inventory().unwrap();
        assert_eq!(inv.len(), 8);
        for (i, g) in inv.iter().enumerate() {
            assert_eq!(g.status, GpuStatus::Ok, "{g:?}");
            assert!(g.is_healthy());
            assert_eq!(g.index, i as u32);
            assert!(is_uuid(&g.uuid), "{}", g.uuid);
            assert!(is_bus_id(&g.pci_bus_id), "{}", g.pci_bus_id);
            assert_eq!(g.minor_number, Some(i as u32));
            assert_eq!(
                g.device_path.as_deref(),
                Some(format!("/dev/nvidia{i}").as_str())
            );
            assert_eq!(g.serial.as_ref().map(String::len), Some(13));
            assert!(g.vbios_version.is_some());
            assert_eq!(g.driver_version, "535.183.01");
            assert_eq!(g.cc_mode, Some(false));
            if i < 4 {
                assert_eq!(g.name, "NVIDIA H100 80GB HBM3");
                assert_eq!(g.model, "H100");
                assert_eq!(g.memory_total_bytes, 81_559 * MIB);
                assert_eq!(g.mig_mode, Some(false));
            } else {
                assert_eq!(g.name, "NVIDIA L4");
                assert_eq!(g.model, "L4");
                assert_eq!(g.memory_total_bytes, 23_034 * MIB);
                assert_eq!(g.mig_mode, None, "L4 has no MIG");
            }
        }
        assert_eq!(inv[0].pci_bus_id, "00000000:1B:00.0");
        let uuids: std::collections::BTreeSet<_> = inv.iter().map(|g| &g.uuid).collect();
        let buses: std::collections::BTreeSet<_> = inv.iter().map(|g| &g.pci_bus_id).collect();
        let serials: std::collections::BTreeSet<_> = inv.iter().map(|g| &g.serial).collect();
        assert_eq!((uuids.len(), buses.len(), serials.len()), (8, 8, 8));

        // A second NVML session at the same time, then re-initialisation: same node.
        let second = open();
        assert_eq!(second.inventory().unwrap(), inv);
        drop(gpus);
        drop(second);
        let again = open();
        assert_eq!(again.inventory().unwrap(), inv);

        // Shared between threads, as the daemon does.
        let shared = Arc::new(again);
        let handles: Vec<_> = inv
            .iter()
            .map(|g| {
                let (gpus, uuid) = (Arc::clone(&shared), g.uuid.clone());
                std::thread::spawn(move || gpus.sample(&uuid).map(|s| s.uuid))
            })
            .collect();
        for (h, g) in handles.into_iter().zip(&inv) {
            assert_eq!(h.join().unwrap().unwrap(), g.uuid);
        }
        print_uuids(&inv);
    });
}

#[test]
fn identities_are_stable_across_processes_and_follow_the_seed() {
    let run = |seed: &str| {
        let e = env(&[
            ("NVML_SIM_GPUS", "H100:4,L4:4"),
            ("NVML_SIM_SEED", seed),
            ("NVML_SIM_DRIVER", "535.183.01"),
        ]);
        uuids_from(&run_child("fleet_inventory", &e))
    };
    let a = run("node-a");
    assert_eq!(a.len(), 8);
    assert_eq!(run("node-a"), a, "same seed, same UUIDs");
    let b = run("node-b");
    assert!(
        b.iter().all(|u| !a.contains(u)),
        "another seed, other UUIDs"
    );
}

#[test]
fn default_fleet() {
    scenario("default_fleet", &[], || {
        let inv = open().inventory().unwrap();
        let models: Vec<&str> = inv.iter().map(|g| g.model.as_str()).collect();
        assert_eq!(
            models,
            ["H100", "H100", "H100", "H100", "L4", "L4", "L4", "L4"]
        );
        assert_eq!(inv[0].driver_version, "550.90.07");
    });
}

#[test]
fn optional_queries_are_none_on_boards_without_them() {
    let e = env(&[("NVML_SIM_GPUS", "RTX4090:1,A100:1")]);
    scenario(
        "optional_queries_are_none_on_boards_without_them",
        &e,
        || {
            let gpus = open();
            let inv = gpus.inventory().unwrap();
            assert_eq!(inv.len(), 2);
            assert!(inv.iter().all(GpuInfo::is_healthy), "{inv:?}");
            assert_eq!(inv[0].model, "RTX 4090");
            assert_eq!(inv[0].serial, None, "GeForce boards have no serial");
            assert_eq!(inv[0].mig_mode, None);
            assert_eq!(inv[1].model, "A100");
            assert!(inv[1].serial.is_some());
            assert_eq!(inv[1].mig_mode, Some(false));
            for g in &inv {
                let s = gpus.sample(&g.uuid).unwrap();
                assert!(s.total_energy_mj.is_some() && s.power_mw.is_some());
            }
        },
    );
}

#[test]
fn a_node_without_gpus_has_an_empty_inventory() {
    let e = env(&[("NVML_SIM_GPUS", "none")]);
    scenario("a_node_without_gpus_has_an_empty_inventory", &e, || {
        assert_eq!(open().inventory().unwrap(), Vec::new());
    });
}

#[test]
fn a_bad_simulation_config_fails_init() {
    let e = env(&[("NVML_SIM_GPUS", "H100:2,Z9:1")]);
    scenario(
        "a_bad_simulation_config_fails_init",
        &e,
        || match Gpus::open(Some(&sim_lib())) {
            Err(GpuError::Init(_)) => {}
            other => panic!("expected Init, got {other:?}"),
        },
    );
}

#[test]
fn confidential_computing_mode_is_reported() {
    let e = env(&[("NVML_SIM_GPUS", "H100:2"), ("NVML_SIM_CC", "on")]);
    scenario("confidential_computing_mode_is_reported", &e, || {
        let inv = open().inventory().unwrap();
        assert!(inv.iter().all(|g| g.cc_mode == Some(true)), "{inv:?}");
    });
}

/// The accelerated clock a scenario's parent configured, as hostd would build it.
fn clock_from_env() -> Clock {
    let v = std::env::var("NVML_SIM_CLOCK").expect("NVML_SIM_CLOCK is set");
    let (epoch, scale) = v.split_once(':').expect("<epoch>:<scale>");
    Clock::scaled(epoch.parse().unwrap(), scale.parse().unwrap())
}

/// Virtual milliseconds elapsed between two samples, bounded by wall-clock readings taken
/// around each of them; one extra real millisecond of slack each side for truncation.
fn virtual_window(before0: i64, after0: i64, before1: i64, after1: i64, scale: i64) -> (i64, i64) {
    (
        ((before1 - after0 - 1).max(0)) * scale,
        (after1 - before0 + 1) * scale,
    )
}

#[test]
fn energy_integrates_power_over_the_accelerated_clock() {
    let (_dir, control) = control_file();
    if std::env::var_os(CHILD).is_none() {
        write_control(&control, r#"{"load": {"0": 100}}"#);
    }
    let e = vec![
        ("NVML_SIM_GPUS", "H100:2,L4:1".to_string()),
        // hostd's own accelerated clock hands the library its epoch and scale.
        (
            "NVML_SIM_CLOCK",
            Clock::scaled(real_now_ms(), 1000.0).sim_env(),
        ),
        ("NVML_SIM_CONTROL", control.display().to_string()),
    ];
    scenario(
        "energy_integrates_power_over_the_accelerated_clock",
        &e,
        || {
            let clock = clock_from_env();
            let gpus = open();
            let inv = gpus.inventory().unwrap();
            // Read hostd's clock around each set of samples: the library's virtual time at
            // each sample lies between the two readings.
            let read = || {
                let before = clock.now_ms();
                let s: Vec<_> = inv.iter().map(|g| gpus.sample(&g.uuid).unwrap()).collect();
                (before, clock.now_ms(), s)
            };
            let (b0, a0, first) = read();
            std::thread::sleep(Duration::from_millis(150));
            let (b1, a1, second) = read();
            let (lo, hi) = (b1 - a0, a1 - b0);
            // 150 ms of wall time is 150 s of virtual time.
            assert!(lo >= 100_000, "{lo}");

            for (k, watts) in [(0usize, 700u64), (1, 70), (2, 16)] {
                assert_eq!(first[k].power_mw, Some(watts as u32 * 1000), "GPU {k}");
                let e0 = first[k].total_energy_mj.unwrap();
                let e1 = second[k].total_energy_mj.unwrap();
                let delta = e1 - e0;
                // mW × ms = µJ; energy in mJ.
                let (min, max) = (watts * lo as u64, watts * hi as u64);
                assert!(
                (min..=max).contains(&delta),
                "GPU {k}: {delta} mJ outside [{min}, {max}] for {watts} W over {lo}..{hi} virtual ms"
            );
            }
            let delta =
                |k: usize| second[k].total_energy_mj.unwrap() - first[k].total_energy_mj.unwrap();
            assert!(
                delta(0) > 9 * delta(1),
                "a loaded H100 draws ten times its idle power"
            );

            assert_eq!(first[0].utilization_pct, 100);
            assert_eq!(first[1].utilization_pct, 0);
            assert!(first[0].temperature_c > first[1].temperature_c);
            assert_eq!(first[0].processes.len(), 1, "a loaded GPU runs a process");
            assert!(first[0].processes[0].used_memory_bytes.unwrap() > 60 * 1024 * MIB);
            assert!(first[0].memory_used_bytes > 60 * 1024 * MIB);
            assert!(first[1].processes.is_empty());
            assert_eq!(first[1].memory_used_bytes, 0);
        },
    );
}

#[test]
fn energy_at_real_time_by_default() {
    scenario(
        "energy_at_real_time_by_default",
        &env(&[("NVML_SIM_GPUS", "H100:1")]),
        || {
            let gpus = open();
            let uuid = gpus.inventory().unwrap()[0].uuid.clone();
            let (b0, e0, a0) = (real_now_ms(), gpus.sample(&uuid).unwrap(), real_now_ms());
            std::thread::sleep(Duration::from_millis(100));
            let (b1, e1, a1) = (real_now_ms(), gpus.sample(&uuid).unwrap(), real_now_ms());
            let (lo, hi) = virtual_window(b0, a0, b1, a1, 1);
            let delta = e1.total_energy_mj.unwrap() - e0.total_energy_mj.unwrap();
            assert!(
                (70 * lo as u64..=70 * hi as u64).contains(&delta),
                "{delta} for {lo}..{hi} ms"
            );
        },
    );
}

#[test]
fn load_and_processes_follow_the_control_file() {
    let (_dir, control) = control_file();
    let e = vec![
        ("NVML_SIM_GPUS", "H100:2".to_string()),
        ("NVML_SIM_CONTROL", control.display().to_string()),
    ];
    scenario("load_and_processes_follow_the_control_file", &e, || {
        let gpus = open();
        let inv = gpus.inventory().unwrap();
        let (u0, u1) = (&inv[0].uuid, &inv[1].uuid);
        // No control file yet: idle.
        assert_eq!(gpus.sample(u0).unwrap().utilization_pct, 0);
        assert!(gpus.sample(u0).unwrap().processes.is_empty());

        write_control(
            &control,
            &format!(r#"{{"load": {{"0": 60}}, "processes": {{"{u1}": [4242, 4243]}}}}"#),
        );
        let s0 = gpus.sample(u0).unwrap();
        assert_eq!(s0.utilization_pct, 60);
        assert_eq!(s0.processes.len(), 1);
        assert_eq!(s0.power_mw, Some(70_000 + 6_300 * 60));
        let s1 = gpus.sample(u1).unwrap();
        let pids: Vec<u32> = s1.processes.iter().map(|p| p.pid).collect();
        assert_eq!(pids, [4242, 4243]);
        assert!(s1
            .processes
            .iter()
            .all(|p| p.used_memory_bytes.unwrap() > 0));

        // A broken file is ignored (reported on stderr); the last good settings stay.
        write_control(&control, r#"{"load": {"0": "#);
        assert_eq!(gpus.sample(u0).unwrap().utilization_pct, 60);
        write_control(&control, r#"{"load": {"9": 50}}"#);
        assert_eq!(gpus.sample(u0).unwrap().utilization_pct, 60);

        // Removing the file returns every GPU to idle.
        std::fs::remove_file(&control).unwrap();
        let s0 = gpus.sample(u0).unwrap();
        assert_eq!((s0.utilization_pct, s0.processes.len()), (0, 0));
    });
}

#[test]
fn injected_faults_surface_as_errors() {
    let (_dir, control) = control_file();
    let e = vec![
        ("NVML_SIM_GPUS", "H100:4".to_string()),
        ("NVML_SIM_CONTROL", control.display().to_string()),
    ];
    scenario("injected_faults_surface_as_errors", &e, || {
        let gpus = open();
        let healthy = gpus.inventory().unwrap();
        let uuid = |i: usize| healthy[i].uuid.clone();
        let before = gpus.sample(&uuid(3)).unwrap().total_energy_mj.unwrap();

        write_control(
            &control,
            &format!(
                r#"{{"faults": {{"1": "lost", "2": "error", "{}": "energy-backwards"}}}}"#,
                uuid(3)
            ),
        );
        let inv = gpus.inventory().unwrap();
        assert_eq!(inv.len(), 4, "failing GPUs are listed, not dropped");
        assert_eq!(inv[0], healthy[0]);
        assert_eq!(inv[1].status, GpuStatus::Lost);
        assert!(inv[1].uuid.is_empty() && !inv[1].is_healthy());
        match &inv[2].status {
            GpuStatus::Error { op, message } => {
                assert_eq!(op, "uuid");
                assert!(!message.is_empty());
            }
            other => panic!("expected an error status, got {other:?}"),
        }
        assert_eq!(
            inv[3], healthy[3],
            "energy faults do not show in the inventory"
        );

        match gpus.sample(&uuid(1)) {
            Err(GpuError::Lost { uuid: u }) => assert_eq!(u, uuid(1)),
            other => panic!("expected Lost, got {other:?}"),
        }
        match gpus.sample(&uuid(2)) {
            Err(GpuError::Nvml { uuid: Some(u), .. }) => assert_eq!(u, uuid(2)),
            other => panic!("expected an NVML error, got {other:?}"),
        }
        let e1 = gpus.sample(&uuid(3)).unwrap().total_energy_mj.unwrap();
        let e2 = gpus.sample(&uuid(3)).unwrap().total_energy_mj.unwrap();
        assert!(e1 < before && e2 < e1, "backwards: {before} {e1} {e2}");

        // Unknown or malformed UUIDs.
        for bad in ["GPU-00000000-0000-4000-8000-000000000000", "", "GPU-\0"] {
            assert!(
                matches!(gpus.sample(bad), Err(GpuError::NotFound { .. })),
                "{bad:?}"
            );
        }

        // Healing: everything answers again and the counter is past where it was.
        write_control(&control, "{}");
        let inv = gpus.inventory().unwrap();
        assert!(inv.iter().all(GpuInfo::is_healthy));
        assert_eq!(inv, healthy);
        assert!(gpus.sample(&uuid(3)).unwrap().total_energy_mj.unwrap() >= before);
    });
}
