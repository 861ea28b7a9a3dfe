//! The binary's command line outside PID 1: what systemd's units in the root run, and what
//! an operator who starts it by hand is told. The jobs' success paths need the node's TPM
//! and disks; they are covered by the library's tests and the image's VM test.

use std::process::{Command, Output};

fn sovereign_init(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sovereign-init"))
        .args(args)
        .output()
        .expect("running sovereign-init")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn an_unknown_phase_is_refused_with_the_phases_named() {
    let out = sovereign_init(&["pcrphase", "sysnit"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stdout), "", "nothing claimed as done");
    let err = text(&out.stderr);
    assert!(
        err.starts_with("sovereign-init: \"sysnit\" is not a phase the root measures"),
        "{err}"
    );
    assert!(err.contains("sysinit") && err.contains("ready"), "{err}");
}

#[test]
fn outside_pid_1_without_a_job_it_says_what_it_is_for() {
    for args in [&[][..], &["open-state", "a", "b"], &["pcrphase"]] {
        let out = sovereign_init(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = text(&out.stderr);
        assert!(err.contains("it runs only as PID 1"), "{args:?}: {err}");
        assert!(err.contains("sovereign-init provision"), "{err}");
    }
}
