//! Helpers shared by hostd's integration tests.

/// The `sovctl` binary that `cargo test --workspace` builds beside this test's executable
/// (it belongs to the `sovctl` crate, so Cargo does not name it for hostd's tests).
pub(crate) fn sovctl_bin() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe
        .parent()
        .and_then(std::path::Path::parent)
        .expect("test executable lives in target/<profile>/deps");
    let p = dir.join("sovctl");
    assert!(
        p.exists(),
        "{} not found: run the tests with `cargo test --workspace` so Cargo builds sovctl",
        p.display()
    );
    p
}
