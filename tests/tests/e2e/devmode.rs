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

/// The real daemon never forks its log: with its database deleted after it signed records,
/// it refuses to start and names the recovery command; recovered from an audit export (the
/// operator's explicit act, recorded in the ledger), it starts and the log extends the one
/// the auditor saw.
#[test]
fn a_deleted_database_is_refused_until_recovered_from_an_export() {
    let mut node = DevNode::start(&["--time-scale", "3600"]);
    crate::create_tenants(&node);
    let l = crate::lease(&node, "operator", "hyd-speech", 1, "H100");
    let id = l["id"].as_str().unwrap().to_owned();
    std::thread::sleep(std::time::Duration::from_millis(300));
    crate::json(&node.sovctl("operator", &["--json", "lease", "end", &id]));
    let export = node.dir.parent().unwrap().join("export-before");
    crate::export_and_verify(&node, &export, &[]);
    assert!(node.stop(), "hostd did not stop cleanly");

    std::fs::remove_dir_all(node.dir.join("state/db")).unwrap();
    let out = Command::new(bin("hostd"))
        .arg("dev")
        .arg("--dir")
        .arg(&node.dir)
        .arg("--listen")
        .arg(format!("127.0.0.1:{}", node.port))
        .output()
        .expect("run hostd");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("hostd ledger recover"), "{stderr}");

    let recovered = Command::new(bin("hostd"))
        .args(["ledger", "recover", "--config"])
        .arg(node.dir.join("hostd.toml"))
        .arg("--from-export")
        .arg(&export)
        .current_dir(&node.dir)
        .output()
        .expect("run hostd ledger recover");
    let text = e2e::ok(&recovered);
    assert!(text.contains("re-appended"), "{text}");

    node.spawn();
    let after = node.dir.parent().unwrap().join("export-after");
    let report = crate::export_and_verify(&node, &after, &[]);
    assert!(report.contains("recovery 1"), "{report}");
    let vkey = node.dir.join("state/log.vkey");
    e2e::ok(&node.sovctl(
        "",
        &[
            "audit",
            "verify",
            after.to_str().unwrap(),
            "--vkey",
            vkey.to_str().unwrap(),
            "--previous",
            export.join("checkpoint").to_str().unwrap(),
            "--quiet",
        ],
    ));
}
