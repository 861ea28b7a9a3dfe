//! `hostd dev` on its folder: one node at a time, and profiles that follow the node.

use e2e::{bin, free_port, DevNode};
use std::process::Command;

/// A second `hostd dev` on a folder in use is refused before it writes anything: the config,
/// profiles and keys of the running node stay byte for byte as they were.
#[test]
fn a_second_dev_node_on_a_folder_in_use_changes_nothing() {
    let mut node = DevNode::start(&[]);
    let watched = ["hostd.toml", "operator/profile.toml", "enrollment.json"];
    let before: Vec<Vec<u8>> = watched
        .iter()
        .map(|f| std::fs::read(node.dir.join(f)).expect(f))
        .collect();
    let other = free_port();
    let out = Command::new(bin("hostd"))
        .arg("dev")
        .arg("--dir")
        .arg(&node.dir)
        .arg("--listen")
        .arg(format!("127.0.0.1:{other}"))
        .arg("--time-scale")
        .arg("7")
        .output()
        .expect("run hostd");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("in use"), "{stderr}");
    for (f, was) in watched.iter().zip(&before) {
        assert_eq!(
            &std::fs::read(node.dir.join(f)).unwrap(),
            was,
            "{f} was rewritten"
        );
    }
    // The running node is untouched and still serves.
    e2e::ok(&node.sovctl("operator", &["health"]));

    // Restarted on another port, the dev profiles follow it (the harness waits for health
    // through the operator profile, so a stale port would fail here).
    assert!(node.stop(), "hostd did not stop cleanly");
    node.port = free_port();
    node.spawn();
    let health = e2e::ok(&node.sovctl("operator", &["health"]));
    assert!(health.contains("is up"), "{health}");
}
