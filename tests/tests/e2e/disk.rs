//! A full disk: writes fail cleanly, nothing acknowledged is lost, `/v1/health` says so, and
//! the node stops loudly after a bounded time so its supervisor restarts it once space is
//! back. Runs on a small tmpfs the test mounts (needs root, as the rest of the e2e bed).

use e2e::DevNode;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A mounted tmpfs, unmounted when dropped.
struct SmallFs(PathBuf);

impl SmallFs {
    fn mount(size: &str) -> SmallFs {
        let dir = tempfile::tempdir().unwrap().keep();
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .status()
            .expect("run mount");
        assert!(st.success(), "mounting a tmpfs needs root (CAP_SYS_ADMIN)");
        SmallFs(dir)
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Writes zeros into `path` until the file system is full.
fn fill(path: &Path) {
    use std::io::Write;
    let mut f = std::fs::File::create(path).unwrap();
    let block = vec![0u8; 64 * 1024];
    while f.write_all(&block).is_ok() {}
    let _ = f.sync_all();
}

#[test]
fn a_full_disk_degrades_health_then_stops_loudly_and_loses_nothing() {
    let fs = SmallFs::mount("48m");
    let mut node = DevNode::start_in(
        &fs.0,
        &[
            "--time-scale",
            "3600",
            "--interval",
            "60",
            "--stop-after-failing-secs",
            "3",
        ],
    );
    crate::create_tenants(&node);
    let l = crate::lease(&node, "operator", "hyd-speech", 1, "H100");
    let id = l["id"].as_str().unwrap().to_owned();
    let before = node.dir.parent().unwrap().join("export-before");
    crate::export_and_verify(&node, &before, &[]);
    let acknowledged = std::fs::read_to_string(before.join("checkpoint")).unwrap();

    let filler = node.dir.parent().unwrap().join("filler");
    fill(&filler);
    let degraded = crate::wait_for(20, "health to report the failing rounds", || {
        let out = node.sovctl("operator", &["--json", "health"]);
        assert!(out.status.success(), "hostd died: {}", node.log_text());
        let h = crate::json(&out);
        (h["status"] == "degraded").then_some(h)
    });
    let problem = degraded["problems"][0].as_str().unwrap();
    assert!(problem.contains("metering"), "{degraded}");
    assert!(!problem.contains('/'), "no paths in answers: {problem}");

    let code = node
        .wait_exit(30)
        .expect("hostd must stop after 3 s of failing rounds");
    assert_eq!(code, Some(1), "{}", node.log_text());
    let log = node.log_text();
    assert!(log.contains("supervisor restarts"), "{log}");
    assert!(
        log.matches("metering round failed").count() < 10,
        "no log flood: {log}"
    );

    // Space is back; the supervisor starts hostd again: it serves, and every record it
    // acknowledged before is there (the new log extends the checkpoint exported before).
    std::fs::remove_file(&filler).unwrap();
    node.spawn();
    let h = crate::json(&node.sovctl("operator", &["--json", "health"]));
    assert_eq!(h["status"], "ok", "{h}");
    crate::json(&node.sovctl("operator", &["--json", "lease", "end", &id]));
    let after = node.dir.parent().unwrap().join("export-after");
    crate::export_and_verify(&node, &after, &[]);
    let prev = node.dir.parent().unwrap().join("before.checkpoint");
    std::fs::write(&prev, acknowledged).unwrap();
    crate::verify_extends(&node, &after, &prev);
    drop(node);
}
