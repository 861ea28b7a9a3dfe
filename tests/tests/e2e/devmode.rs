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
    crate::lease_some_time(&node);
    let export = node.dir.parent().unwrap().join("export-before");
    crate::export_and_verify(&node, &export, &[]);
    assert!(node.stop(), "hostd did not stop cleanly");

    std::fs::remove_dir_all(node.dir.join("state/db")).unwrap();
    let out = node.run_once(&[]);
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
    crate::verify_extends(&node, &after, &export.join("checkpoint"));
}

/// Restarted under a clock behind its state (here: dev time accelerated 3600×, then real
/// time), the node holds its time at the state's latest time: health says degraded, and the
/// lease it ends ends after it started with its last interval billed, never backwards.
#[test]
fn a_clock_behind_the_state_never_takes_time_backwards() {
    let mut node = DevNode::start(&["--time-scale", "3600", "--interval", "60"]);
    crate::create_tenants(&node);
    let l = crate::lease(&node, "operator", "hyd-speech", 1, "H100");
    let id = l["id"].as_str().unwrap().to_owned();
    let started = l["started_ms"].as_i64().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert!(node.stop(), "hostd did not stop cleanly");

    node.args = vec!["--time-scale".into(), "1".into()];
    node.spawn();
    let health = crate::json(&node.sovctl("operator", &["--json", "health"]));
    assert_eq!(health["status"], "degraded", "{health}");
    assert!(
        health["problems"][0].as_str().unwrap().contains("behind"),
        "{health}"
    );
    let ended = crate::json(&node.sovctl("operator", &["--json", "lease", "end", &id]));
    let ended_ms = ended["lease"]["ended_ms"].as_i64().unwrap();
    assert!(
        ended_ms >= started,
        "ended {ended_ms} before it started {started}"
    );
    let usage = crate::json(&node.sovctl("operator", &["--json", "usage", "list", "--lease", &id]));
    let records = usage["records"].as_array().unwrap();
    assert!(!records.is_empty(), "the lease's time was never billed");
    let mut last_end = String::new();
    let mut billed_ms = 0;
    for r in records {
        let (s, e) = (r["start"].as_str().unwrap(), r["end"].as_str().unwrap());
        assert!(s <= e && s >= last_end.as_str(), "{usage}");
        last_end = e.to_owned();
        billed_ms += r["gpu_ms"].as_u64().unwrap();
    }
    // About an hour of dev time ran before the restart; all of it is billed, once.
    assert!(
        billed_ms >= 3_000_000,
        "billed only {billed_ms} ms: {usage}"
    );
}

/// A damaged state database (a truncated sled file) is refused at start with one sentence
/// and the recovery procedure: no panic, no backtrace, no start followed by failing rounds.
#[test]
fn a_damaged_database_is_refused_with_the_recovery_procedure() {
    let mut node = DevNode::start(&["--time-scale", "3600"]);
    crate::lease_some_time(&node);
    assert!(node.stop(), "hostd did not stop cleanly");
    let file = node.dir.join("state/db/db");
    let original = std::fs::read(&file).unwrap();
    // Cut at several points: sled answers some with fewer records (which the witness
    // catches) and panics on others (which must not reach the operator as a panic).
    for cut in [original.len() / 2, 4096, 600, 64] {
        std::fs::write(&file, &original[..cut.min(original.len())]).unwrap();
        let out = node.run_once(&[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "cut at {cut}: {stderr}");
        assert!(!stderr.contains("panicked"), "cut at {cut}: {stderr}");
        assert!(!stderr.contains("backtrace"), "cut at {cut}: {stderr}");
        assert!(
            stderr.contains("hostd ledger recover"),
            "cut at {cut}: {stderr}"
        );
    }
}
