//! The provisioning disk: how a node gets what is its own and not the image's (its API
//! certificate and key, its node identity key, its enrollment certificate, its config and the
//! signed residency policy). The operator writes these into a small ext4 disk labelled
//! `SOVPROVISION`, attaches it for the first boot (virtual media on a server's BMC, a disk
//! under qemu), and the node copies its `node/` folder onto the state disk once
//! (`sovereign_init::provision`, in the initrd or in `sovereign-provision.service`); the disk
//! can then be removed. docs/image.md says why the node key is made off the node and how to
//! do it safely.

use crate::rootfs::{run, TreeError};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

/// The file system label the node finds its provisioning disk by (`sovereign-init`'s, which a
/// test holds this to).
pub const LABEL: &str = "SOVPROVISION";

/// Makes `out` (a new raw disk image of `size_mib`) holding `from` as its `node/` folder.
///
/// The disk holds the node's private keys, so it is made 0600 before anything is written into
/// it, and the staging copy lives in a 0700 folder beside it that goes whatever happens. Who
/// owns the files on the disk does not matter: the node makes everything it copies root's.
pub fn make_disk(from: &Path, out: &Path, size_mib: u32) -> Result<(), TreeError> {
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let staging = tempfile::Builder::new()
        .prefix(".sovprovision-")
        .tempdir_in(parent)
        .map_err(crate::rootfs::io(parent))?;
    let node = staging.path().join("node");
    run(Command::new("cp").arg("-a").arg(from).arg(&node))?;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(out)
        .and_then(|f| f.set_permissions(std::fs::Permissions::from_mode(0o600)))
        .map_err(crate::rootfs::io(out))?;
    run(Command::new("mkfs.ext4")
        .args(["-q", "-F", "-L", LABEL, "-E", "root_owner=0:0", "-d"])
        .arg(staging.path())
        .arg(out)
        .arg(format!("{size_mib}M")))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    /// The disk the operator makes is the one the node looks for.
    #[test]
    fn the_label_is_the_one_the_node_finds() {
        assert_eq!(super::LABEL, sovereign_init::provision::LABEL);
    }

    /// The disk holds private keys: only its owner reads it, and no staging copy stays.
    #[test]
    fn the_disk_is_its_owners_alone_and_no_copy_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().join("node");
        std::fs::create_dir(&from).unwrap();
        std::fs::write(from.join("node.key"), b"secret").unwrap();
        let out = dir.path().join("disk.img");
        super::make_disk(&from, &out, 8).unwrap();
        let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let mut left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        left.sort();
        assert_eq!(left, ["disk.img", "node"]);
        // A copy that fails leaves nothing behind either.
        let missing = dir.path().join("absent");
        assert!(super::make_disk(&missing, &dir.path().join("b.img"), 8).is_err());
        assert!(!dir.path().join("b.img").exists());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    }
}
