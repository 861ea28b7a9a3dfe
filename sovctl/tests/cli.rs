//! The `sovctl` binary's exit-code convention (0 ok, 1 the thing checked is bad, 2 usage or
//! I/O error), checked on the real binary. (Its presence also makes `cargo test` build the
//! binary that the end-to-end tests drive.)

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

fn sovctl(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sovctl"))
        .args(args)
        .env_remove("SOVCTL_PROFILE")
        .output()
        .expect("run sovctl");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn an_online_command_without_a_profile_is_a_usage_error() {
    let (code, err) = sovctl(&["health"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("no profile"), "{err}");
}

#[test]
fn a_missing_profile_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nowhere");
    let (code, err) = sovctl(&["--profile", missing.to_str().unwrap(), "gpus"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("profile.toml"), "{err}");
}

#[test]
fn keygen_writes_0600_and_refuses_to_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("release.key");
    let (code, err) = sovctl(&["attest", "keygen", "--out", key.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let (code, err) = sovctl(&["attest", "keygen", "--out", key.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("refusing to overwrite"), "{err}");
}

/// One key-file convention for every keygen: `--out KEY` writes KEY (0600) and KEY.pub, and
/// refuses to overwrite either.
#[test]
fn every_keygen_writes_key_and_key_pub() {
    let dir = tempfile::tempdir().unwrap();
    let attest = dir.path().join("release.key");
    let policy = dir.path().join("authority.key");
    let runs: [Vec<&str>; 2] = [
        vec!["attest", "keygen", "--out", attest.to_str().unwrap()],
        vec![
            "policy",
            "keygen",
            "--name",
            "authority.example.in",
            "--out",
            policy.to_str().unwrap(),
        ],
    ];
    for (args, key) in runs.iter().zip([&attest, &policy]) {
        let (code, err) = sovctl(args);
        assert_eq!(code, Some(0), "{err}");
        let mode = std::fs::metadata(key).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", key.display());
        assert!(keyfile::public_key_path(key).is_file(), "{}", key.display());
        let (code, err) = sovctl(args);
        assert_eq!(code, Some(2), "{err}");
        assert!(err.contains("refusing to overwrite"), "{err}");
    }
}

#[test]
fn verifying_an_export_with_unreadable_files_is_an_io_error() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let (code, err) = sovctl(&["audit", "verify", "--quiet", "--trust-export-key", d]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("VERIFICATION FAILED"), "{err}");
    assert!(err.contains("cannot read"), "{err}");
    let missing = dir.path().join("nowhere");
    let m = missing.to_str().unwrap();
    let (code, err) = sovctl(&["audit", "verify", "--quiet", "--trust-export-key", m]);
    assert_eq!(code, Some(2), "{err}");
    // Without a pinned key nothing is verified at all: a usage error that names --vkey.
    let (code, err) = sovctl(&["audit", "verify", "--quiet", d]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--vkey"), "{err}");
}

/// A TPMT_PUBLIC in the AK profile (ECDSA P-256 key of scalar 32 × 0x17, as
/// `attest::tpm::sim::SoftAk::from_seed(&[0x17; 32])` makes it).
const AK_HEX: &str = "0023000b00050072000000100018000b0003001000209bece2a08e2cd04cbb9ba5102a51870f54b1e450c2fd417da83efe16707a19060020cda14b5eeddade58cef7527ff0c9b98e7fe6fddb16496102871cf62cea694ec4";

#[test]
fn enroll_binds_a_valid_tpm_ak_and_refuses_others() {
    let dir = tempfile::tempdir().unwrap();
    let authority = dir.path().join("ea.key");
    let (code, err) = sovctl(&["attest", "keygen", "--out", authority.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    let ak_file = dir.path().join("ak.hex");
    std::fs::write(&ak_file, format!("{AK_HEX}\n")).unwrap();
    let out = dir.path().join("enrollment.json");
    let enroll = |ak: &str| {
        sovctl(&[
            "attest",
            "enroll",
            "--authority-key",
            authority.to_str().unwrap(),
            "--node-key",
            &"ab".repeat(32),
            "--node-name",
            "n1",
            "--jurisdiction",
            "IN-TG",
            "--facility",
            "HYD1",
            "--tpm-ak",
            ak,
            "--out",
            out.to_str().unwrap(),
        ])
    };
    for ak in [AK_HEX, ak_file.to_str().unwrap()] {
        let (code, err) = enroll(ak);
        assert_eq!(code, Some(0), "{err}");
        let cert = std::fs::read_to_string(&out).unwrap();
        assert!(cert.contains(&format!("\"tpm_ak\":\"{AK_HEX}\"")), "{cert}");
    }
    // An unrestricted key (attributes without bit 16) is not an attestation key.
    let unrestricted = AK_HEX.replacen("00050072", "00040072", 1);
    for bad in ["zz", "0023", unrestricted.as_str()] {
        let (code, err) = enroll(bad);
        assert_eq!(code, Some(2), "{bad}: {err}");
        assert!(err.contains("--tpm-ak"), "{err}");
    }
}
