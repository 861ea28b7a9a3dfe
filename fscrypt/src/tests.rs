//! Against a real kernel: a loop-mounted ext4 with `-O encrypt` in a temporary directory
//! (needs root for `mount`; skipped with a printed reason otherwise).

use super::*;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A loop-mounted ext4 with the `encrypt` feature; unmounted (and its loop device detached)
/// on drop, so a failing test leaves nothing mounted.
struct LoopFs {
    _dir: tempfile::TempDir,
    mnt: PathBuf,
}

fn run(cmd: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .map_err(|e| format!("{cmd}: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    ))
}

fn is_root() -> bool {
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        == Some("0")
}

impl LoopFs {
    /// `None` (with the reason printed) where `mount` is not permitted.
    fn new() -> Option<LoopFs> {
        if !is_root() {
            eprintln!("SKIPPED: mounting a loop ext4 needs root (euid is not 0)");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("fs.img");
        let mnt = dir.path().join("mnt");
        fs::create_dir(&mnt).unwrap();
        File::create(&img).unwrap().set_len(32 << 20).unwrap();
        let img_s = img.to_str().unwrap();
        run("mkfs.ext4", &["-q", "-O", "encrypt", img_s]).unwrap();
        run("mount", &["-o", "loop", img_s, mnt.to_str().unwrap()]).unwrap();
        Some(LoopFs { _dir: dir, mnt })
    }

    fn root(&self) -> File {
        File::open(&self.mnt).unwrap()
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        if let Err(e) = run("umount", &["-d", self.mnt.to_str().unwrap_or_default()]) {
            eprintln!("cleanup: {e}");
        }
    }
}

fn random_key(seed: u8) -> RawKey {
    let mut k = Zeroizing::new([0u8; KEY_SIZE]);
    for (i, b) in k.iter_mut().enumerate() {
        *b = seed.wrapping_mul(31).wrapping_add(i as u8);
    }
    k
}

/// A directory under `fs` bound to a freshly added key, holding `secret.txt`.
fn encrypted_dir(fs: &LoopFs, name: &str, seed: u8) -> (PathBuf, KeyIdentifier) {
    let id = add_key(fs.root(), &random_key(seed)).unwrap();
    let dir = fs.mnt.join(name);
    fs::create_dir(&dir).unwrap();
    set_policy(File::open(&dir).unwrap(), &id).unwrap();
    File::create(dir.join("secret.txt"))
        .unwrap()
        .write_all(b"tenant data")
        .unwrap();
    (dir, id)
}

fn names(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn added_key_encrypts_a_directory_readably() {
    let Some(fs) = LoopFs::new() else { return };
    let (dir, id) = encrypted_dir(&fs, "a", 1);
    assert_ne!(id.0, [0; 16], "the kernel returns the identifier");
    assert_eq!(key_status(fs.root(), &id).unwrap(), KeyStatus::Present);
    assert_eq!(
        policy_identifier(File::open(&dir).unwrap()).unwrap(),
        Some(id)
    );
    assert_eq!(
        policy_identifier(fs.root()).unwrap(),
        None,
        "the root is not encrypted"
    );
    let mut s = String::new();
    File::open(dir.join("secret.txt"))
        .unwrap()
        .read_to_string(&mut s)
        .unwrap();
    assert_eq!(s, "tenant data");
}

#[test]
fn removed_key_leaves_ciphertext_names_and_enokey() {
    let Some(fs) = LoopFs::new() else { return };
    let (dir, id) = encrypted_dir(&fs, "a", 2);
    let removal = remove_key(fs.root(), &id).unwrap();
    assert_eq!(removal, Removal::default());
    assert_eq!(key_status(fs.root(), &id).unwrap(), KeyStatus::Absent);
    let listed = names(&dir);
    assert_eq!(listed.len(), 1);
    assert_ne!(listed[0], "secret.txt", "names read as ciphertext");
    let err = File::open(dir.join(&listed[0])).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOKEY), "{err}");
    // Deleting without the key still works: the data is gone either way.
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn open_files_make_removal_incomplete_until_closed() {
    let Some(fs) = LoopFs::new() else { return };
    let (dir, id) = encrypted_dir(&fs, "a", 3);
    let open = File::open(dir.join("secret.txt")).unwrap();
    let removal = remove_key(fs.root(), &id).unwrap();
    assert!(removal.files_busy, "{removal:?}");
    assert_eq!(
        key_status(fs.root(), &id).unwrap(),
        KeyStatus::IncompletelyRemoved
    );
    drop(open);
    remove_key(fs.root(), &id).unwrap();
    assert_eq!(key_status(fs.root(), &id).unwrap(), KeyStatus::Absent);
}

#[test]
fn a_second_key_is_unaffected_by_removing_the_first() {
    let Some(fs) = LoopFs::new() else { return };
    let (_a, id_a) = encrypted_dir(&fs, "a", 4);
    let (b, id_b) = encrypted_dir(&fs, "b", 5);
    assert_ne!(id_a, id_b);
    remove_key(fs.root(), &id_a).unwrap();
    assert_eq!(key_status(fs.root(), &id_b).unwrap(), KeyStatus::Present);
    assert_eq!(fs::read(b.join("secret.txt")).unwrap(), b"tenant data");
}

#[test]
fn refusals_name_the_operation_and_errno() {
    let Some(fs) = LoopFs::new() else { return };
    let never_added = KeyIdentifier([7; 16]);
    let err = remove_key(fs.root(), &never_added).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOKEY), "{err}");
    assert!(
        err.to_string().contains("FS_IOC_REMOVE_ENCRYPTION_KEY"),
        "{err}"
    );
    assert_eq!(
        key_status(fs.root(), &never_added).unwrap(),
        KeyStatus::Absent
    );

    let id = add_key(fs.root(), &random_key(6)).unwrap();
    let full = fs.mnt.join("full");
    fs::create_dir(&full).unwrap();
    File::create(full.join("plain")).unwrap();
    let err = set_policy(File::open(&full).unwrap(), &id).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOTEMPTY), "{err}");
    assert!(matches!(
        err,
        Error::Ioctl {
            op: Operation::SetPolicy,
            ..
        }
    ));

    // Root (CAP_FOWNER) may name a key that is not there; nothing can be created under it.
    let unkeyed = fs.mnt.join("unkeyed");
    fs::create_dir(&unkeyed).unwrap();
    set_policy(File::open(&unkeyed).unwrap(), &never_added).unwrap();
    let err = File::create(unkeyed.join("f")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOKEY), "{err}");
}

#[test]
fn a_filesystem_without_encrypt_says_so() {
    if !is_root() {
        eprintln!("SKIPPED: needs root");
        return;
    }
    // tmpfs before 6.x-with-encryption, or any fs without the feature: EOPNOTSUPP/ENOTTY.
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().to_str().unwrap();
    run("mount", &["-t", "tmpfs", "tmpfs", mnt]).unwrap();
    let result = add_key(File::open(mnt).unwrap(), &random_key(8));
    run("umount", &[mnt]).unwrap();
    let err = result.unwrap_err();
    assert!(
        matches!(
            err.raw_os_error(),
            Some(libc::EOPNOTSUPP) | Some(libc::ENOTTY)
        ),
        "{err}"
    );
}
