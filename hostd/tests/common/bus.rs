//! A private `dbus-daemon` for the tests that fake systemd on it (the real zbus code path and
//! wire types, as fake-nvml fakes NVML at its C ABI). Killed when dropped.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub(crate) struct Bus {
    child: Child,
    pub(crate) address: String,
    _dir: tempfile::TempDir,
}

impl Bus {
    pub(crate) fn start() -> Bus {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("bus");
        let address = format!("unix:path={}", sock.display());
        let child = Command::new("dbus-daemon")
            .args(["--session", "--nofork", "--address"])
            .arg(&address)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("dbus-daemon (Debian package dbus) is needed for this test");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !sock.exists() {
            assert!(Instant::now() < deadline, "dbus-daemon did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Bus {
            child,
            address,
            _dir: dir,
        }
    }
}

impl Drop for Bus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
