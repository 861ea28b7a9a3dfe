//! hostd's systemd adapter against a fake `org.freedesktop.systemd1` on a private
//! `dbus-daemon`: the real zbus code path and the real D-Bus wire types, as fake-nvml fakes
//! NVML at its C ABI. The properties arrive with the types systemd 252 introspects; refusals
//! and a vanished bus are clear errors, never a panic.

#[path = "common/bus.rs"]
mod bus;
use bus::Bus;
use hostd::workload::sandbox::{JobSandbox, Limits};
use hostd::workload::units::{Systemd, UnitError, UnitManager};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use zbus::zvariant::{OwnedObjectPath, OwnedValue};

type Calls = Arc<Mutex<Vec<(String, String, Vec<(String, OwnedValue)>)>>>;

struct FakeManager {
    calls: Calls,
    refuse: Arc<AtomicBool>,
}

#[zbus::interface(name = "org.freedesktop.systemd1.Manager")]
impl FakeManager {
    async fn start_transient_unit(
        &self,
        name: String,
        mode: String,
        properties: Vec<(String, OwnedValue)>,
        _aux: Vec<(String, Vec<(String, OwnedValue)>)>,
    ) -> zbus::fdo::Result<OwnedObjectPath> {
        if self.refuse.load(Ordering::SeqCst) {
            return Err(zbus::fdo::Error::Failed(format!(
                "Unit {name} was already loaded or has a fragment file."
            )));
        }
        self.calls.lock().unwrap().push((name, mode, properties));
        Ok(OwnedObjectPath::try_from("/org/freedesktop/systemd1/job/1").unwrap())
    }

    async fn stop_unit(&self, _name: String, _mode: String) -> zbus::fdo::Result<OwnedObjectPath> {
        Ok(OwnedObjectPath::try_from("/org/freedesktop/systemd1/job/2").unwrap())
    }
}

fn job() -> JobSandbox {
    JobSandbox {
        tenant: "hyd-speech".into(),
        argv: vec!["/usr/bin/true".into()],
        env: BTreeMap::from([("EPOCHS".into(), "40".into())]),
        workdir: "/tmp".into(),
        uid: 61001,
        gid: 61001,
        gpu_devices: vec!["/dev/nvidia0".into()],
        uvm_device: None,
        limits: Limits {
            memory_bytes: 1 << 30,
            cpu_quota_usec_per_sec: 1_000_000,
            tasks: 64,
            runtime_usec: 60_000_000,
        },
        writable: vec!["/tmp".into()],
    }
}

#[tokio::test]
async fn units_start_with_systemds_types_and_failures_are_clear() {
    let bus = Bus::start();
    let calls: Calls = Arc::default();
    let refuse = Arc::new(AtomicBool::new(false));
    let fake = FakeManager {
        calls: calls.clone(),
        refuse: refuse.clone(),
    };
    let _server = zbus::connection::Builder::address(bus.address.as_str())
        .unwrap()
        .name("org.freedesktop.systemd1")
        .unwrap()
        .serve_at("/org/freedesktop/systemd1", fake)
        .unwrap()
        .build()
        .await
        .unwrap();

    let systemd = Systemd::connect(&bus.address).await.unwrap();
    let props = job().properties().unwrap();
    systemd
        .start("sovereign-job-1.service", &props)
        .await
        .unwrap();
    {
        let calls = calls.lock().unwrap();
        let (name, mode, sent) = &calls[0];
        assert_eq!(
            (name.as_str(), mode.as_str()),
            ("sovereign-job-1.service", "fail")
        );
        let sig = |n: &str| {
            sent.iter()
                .find(|(k, _)| k == n)
                .map(|(_, v)| v.value_signature().to_string())
                .unwrap_or_else(|| panic!("{n} not sent"))
        };
        // The D-Bus types systemd 252 expects (../shared/notes/isolation.md).
        for (name, signature) in [
            ("DeviceAllow", "a(ss)"),
            ("DevicePolicy", "s"),
            ("NoNewPrivileges", "b"),
            ("CapabilityBoundingSet", "t"),
            ("SystemCallFilter", "(bas)"),
            ("SystemCallErrorNumber", "i"),
            ("RestrictAddressFamilies", "(bas)"),
            ("RestrictNamespaces", "t"),
            ("MemoryMax", "t"),
            ("CPUQuotaPerSecUSec", "t"),
            ("TasksMax", "t"),
            ("RuntimeMaxUSec", "t"),
            ("ExecStart", "a(sasb)"),
            ("Environment", "as"),
            ("Slice", "s"),
        ] {
            assert_eq!(sig(name), signature, "{name}");
        }
    }
    systemd.stop("sovereign-job-1.service").await.unwrap();

    // A refusal names the unit and systemd's reason.
    refuse.store(true, Ordering::SeqCst);
    let err = systemd
        .start("sovereign-job-1.service", &props)
        .await
        .unwrap_err();
    assert!(matches!(err, UnitError::StartRefused { .. }), "{err}");
    let shown = attest::report::report(&err).to_string();
    assert!(shown.contains("already loaded"), "{shown}");

    // The bus gone: a clear error, no panic, no hang.
    drop(bus);
    let started = Instant::now();
    let err = tokio::time::timeout(
        Duration::from_secs(10),
        systemd.start("sovereign-job-2.service", &props),
    )
    .await
    .expect("a vanished bus must not hang the caller")
    .unwrap_err();
    assert!(matches!(err, UnitError::StartRefused { .. }), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));
    let err = Systemd::connect("unix:path=/nonexistent/bus")
        .await
        .unwrap_err();
    assert!(matches!(err, UnitError::Connect { .. }), "{err}");
}
