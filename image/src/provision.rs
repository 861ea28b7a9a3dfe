//! The provisioning disk: how a node gets what is its own and not the image's (its API
//! certificate and key, its node identity key, its enrollment certificate, its config and the
//! signed residency policy). The operator writes these into a small ext4 disk labelled
//! `SOVPROVISION`, attaches it for the first boot (virtual media on a server's BMC, a disk
//! under qemu), and the node copies its `node/` folder onto the state disk once
//! (`sovereign_init::provision`, in the initrd or in `sovereign-provision.service`); the disk
//! can then be removed. docs/image.md says why the node key is made off the node and how to
//! do it safely.

use crate::rootfs::{run, TreeError};
use std::path::Path;
use std::process::Command;

/// The file system label the node finds its provisioning disk by (`sovereign-init`'s, which a
/// test holds this to).
pub const LABEL: &str = "SOVPROVISION";

/// Makes `out` (a new raw disk image of `size_mib`) holding `from` as its `node/` folder.
pub fn make_disk(from: &Path, out: &Path, size_mib: u32) -> Result<(), TreeError> {
    let staging = tempfile_dir(out)?;
    let node = staging.join("node");
    run(Command::new("cp").arg("-a").arg(from).arg(&node))?;
    let result = run(Command::new("mkfs.ext4")
        .args(["-q", "-F", "-L", LABEL, "-E", "root_owner=0:0", "-d"])
        .arg(&staging)
        .arg(out)
        .arg(format!("{size_mib}M")));
    let _ = std::fs::remove_dir_all(&staging);
    result.map(|_| ())
}

fn tempfile_dir(out: &Path) -> Result<std::path::PathBuf, TreeError> {
    let dir = out.with_extension("staging");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(crate::rootfs::io(&dir))?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    /// The disk the operator makes is the one the node looks for.
    #[test]
    fn the_label_is_the_one_the_node_finds() {
        assert_eq!(super::LABEL, sovereign_init::provision::LABEL);
    }
}
