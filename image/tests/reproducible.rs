//! Two builds from the same lock and `SOURCE_DATE_EPOCH`, in different folders at different
//! times and under different umasks, give byte-identical outputs; a different epoch does not
//! (so the test can fail).

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

const OUTPUTS: [&str; 5] = [
    "uki.efi",
    "esp.img",
    "root.erofs",
    "root.verity",
    "manifest.json",
];

/// Held by each test while it builds: the tests share the package cache, and two `apt-get
/// download`s into one folder at once trip over each other's partial files.
static CACHE: Mutex<()> = Mutex::new(());

fn cache_lock() -> std::sync::MutexGuard<'static, ()> {
    CACHE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs `image build` under the builder's `umask`, which must not reach the outputs.
fn build(work: &Path, name: &str, epoch: &str, umask: &str, key: &Path, hostd: &Path) -> PathBuf {
    let out = work.join(name);
    let target = PathBuf::from(env!("CARGO_BIN_EXE_image"));
    let target = target.parent().and_then(Path::parent).expect("target dir");
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!("umask {umask} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_image"))
        .env("SOURCE_DATE_EPOCH", epoch)
        .arg("build")
        .arg("--out")
        .arg(&out)
        .arg("--hostd")
        .arg(hostd)
        // Any dynamically linked program stands for the initrd's init: the build strips it,
        // follows the libraries it links, and archives it.
        .arg("--init")
        .arg("/usr/bin/true")
        .arg("--release-key")
        .arg(key)
        .arg("--cache")
        .arg(target.join("image-debs"))
        .status()
        .expect("image build");
    assert!(status.success(), "image build {name} failed");
    out
}

fn digest(path: &Path) -> String {
    hex::encode(Sha256::digest(std::fs::read(path).expect("output")))
}

#[test]
fn two_builds_are_byte_identical() {
    let _cache = cache_lock();
    let work = tempfile::tempdir().expect("work");
    // Any program stands for hostd here: the build strips it, installs it and records its
    // digest.
    let hostd = PathBuf::from("/usr/bin/true");
    let key = work.path().join("release.key");
    std::fs::write(&key, format!("{}\n", "42".repeat(32))).expect("key");
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("key mode");
    let a = build(work.path(), "a", "1764547200", "022", &key, &hostd);
    std::thread::sleep(std::time::Duration::from_secs(2));
    let b = build(
        &work.path().join("elsewhere"),
        "b",
        "1764547200",
        // A cautious builder's umask: folders the build makes would be 0700, not 0755.
        "077",
        &key,
        &hostd,
    );
    for name in OUTPUTS {
        assert_eq!(
            digest(&a.join(name)),
            digest(&b.join(name)),
            "{name} differs"
        );
    }
    let c = build(work.path(), "c", "1764547201", "022", &key, &hostd);
    assert_ne!(
        digest(&a.join("uki.efi")),
        digest(&c.join("uki.efi")),
        "the epoch must reach the outputs"
    );
}

/// A build that fails half-way (here: no hostd to install, found after the packages were
/// unpacked) leaves its output folder as it found it: empty, so no UKI without a manifest is
/// left behind and a rerun into it can start.
#[test]
fn a_failed_build_leaves_its_folder_empty() {
    let _cache = cache_lock();
    let work = tempfile::tempdir().expect("work");
    let key = work.path().join("release.key");
    std::fs::write(&key, format!("{}\n", "42".repeat(32))).expect("key");
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("key mode");
    let out = work.path().join("out");
    let target = PathBuf::from(env!("CARGO_BIN_EXE_image"));
    let target = target.parent().and_then(Path::parent).expect("target dir");
    let output = Command::new(env!("CARGO_BIN_EXE_image"))
        .env("SOURCE_DATE_EPOCH", "1764547200")
        .arg("build")
        .arg("--out")
        .arg(&out)
        .arg("--hostd")
        .arg(work.path().join("no-hostd"))
        .arg("--init")
        .arg("/usr/bin/true")
        .arg("--release-key")
        .arg(&key)
        .arg("--cache")
        .arg(target.join("image-debs"))
        .output()
        .expect("image build");
    assert!(!output.status.success(), "a build without hostd succeeded");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("no-hostd"), "{stderr}");
    let left: Vec<_> = std::fs::read_dir(&out)
        .expect("the output folder")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
