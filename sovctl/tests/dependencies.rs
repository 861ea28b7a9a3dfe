//! Who links what is a design rule, so it is tested: the client never links the daemon's
//! store, HTTP server or NVML, and the production daemon never links the GPU simulation.

use std::process::Command;

/// `cargo tree` of a package (normal dependencies only), one package name per line.
fn tree(args: &[&str]) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["tree", "--offline", "-e", "normal", "--prefix", "none"])
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

#[test]
fn sovctl_links_no_daemon_code() {
    let deps = tree(&["-p", "sovctl"]);
    assert!(deps.iter().any(|d| d == "hostd-api"), "{deps:?}");
    for banned in [
        "hostd",
        "sled",
        "axum",
        "nvml-wrapper",
        "fake-nvml",
        "tower",
    ] {
        assert!(!deps.iter().any(|d| d == banned), "sovctl links {banned}");
    }
    // hyper, yes, but only its client half.
    let features = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args([
            "tree",
            "--offline",
            "-p",
            "sovctl",
            "-e",
            "features",
            "-i",
            "hyper",
        ])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .expect("run cargo tree");
    let text = String::from_utf8_lossy(&features.stdout);
    assert!(text.contains("hyper feature \"client\""), "{text}");
    assert!(!text.contains("hyper feature \"server\""), "{text}");
}

#[test]
fn the_auditors_library_needs_only_attest_and_serialisation() {
    let deps = tree(&["-p", "auditor", "--depth", "1"]);
    let direct: Vec<&str> = deps.iter().skip(1).map(String::as_str).collect();
    assert_eq!(
        direct,
        ["attest", "base64", "serde", "serde_json", "thiserror"],
        "{deps:?}"
    );
}

#[test]
fn the_production_daemon_has_no_simulation() {
    let deps = tree(&["-p", "hostd", "--no-default-features"]);
    assert!(deps.iter().any(|d| d == "nvml-wrapper"), "{deps:?}");
    assert!(
        !deps.iter().any(|d| d == "fake-nvml"),
        "production hostd links fake-nvml"
    );
    let features = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["tree", "--offline", "-p", "hostd", "--no-default-features"])
        .args(["-e", "features", "-i", "attest"])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .expect("run cargo tree");
    let text = String::from_utf8_lossy(&features.stdout);
    assert!(text.contains("attest v"), "{text}");
    assert!(!text.contains("attest feature \"sim\""), "{text}");
    // Nor a way to start a software TPM: the node quotes with its real one.
    let features = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["tree", "--offline", "-p", "hostd", "--no-default-features"])
        .args(["-e", "features,normal", "-i", "tpm"])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .expect("run cargo tree");
    let text = String::from_utf8_lossy(&features.stdout);
    assert!(text.contains("tpm v"), "{text}");
    assert!(!text.contains("tpm feature \"swtpm\""), "{text}");
    let dev = tree(&["-p", "hostd"]);
    assert!(
        dev.iter().any(|d| d == "fake-nvml"),
        "the dev build simulates GPUs"
    );
}
