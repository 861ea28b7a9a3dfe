//! The state disk as a whole, before it has its partition: found by the stable name the
//! build was given (`--state-device`, a `/dev/disk/by-id/` path), and partitioned when it is
//! blank ([`crate::gpt`]).
//!
//! In the root, udev has made the `/dev/disk/by-id/` link and [`Disk::from_node`] follows it.
//! The initrd has no udev, so [`Disk::by_id`] finds the disk in sysfs the way udev's
//! `60-persistent-storage.rules` name it, for the two kinds a node's state disk is: virtio
//! (`virtio-<serial>`) and NVMe (`nvme-<model>_<serial>`, spaces as `_`). For any other name
//! it finds nothing, and the root's `sovereign-state.service` makes the disk instead.

use super::StateError;
use crate::gpt;
use rand_core::OsRng;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

const BY_ID: &str = "/dev/disk/by-id/";

/// A whole disk: its node and its sysfs folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disk {
    /// `/dev/<name>`.
    pub node: PathBuf,
    sys: PathBuf,
}

impl Disk {
    /// The disk `by_id` (`/dev/disk/by-id/…`) names, among the disks under `class`
    /// (`/sys/class/block`), if it is a virtio or NVMe name and such a disk is there.
    pub fn by_id(class: &Path, by_id: &str) -> Option<Disk> {
        let name = by_id.strip_prefix(BY_ID)?;
        let mut entries: Vec<_> = std::fs::read_dir(class).ok()?.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        entries.into_iter().find_map(|entry| {
            let sys = entry.path();
            let dev = entry.file_name().into_string().ok()?;
            let uevent = std::fs::read_to_string(sys.join("uevent")).ok()?;
            if !uevent.lines().any(|l| l == "DEVTYPE=disk") {
                return None;
            }
            (udev_name(&sys, &dev).as_deref() == Some(name)).then(|| Disk {
                node: Path::new("/dev").join(&dev),
                sys,
            })
        })
    }

    /// The disk behind a device node or a link to one (udev's `/dev/disk/by-id/…`).
    pub fn from_node(node: &Path) -> Result<Disk, StateError> {
        let real = std::fs::canonicalize(node).map_err(|source| StateError::Read {
            path: node.to_owned(),
            source,
        })?;
        let name = real
            .file_name()
            .and_then(|n| n.to_str())
            .filter(|_| real.parent() == Some(Path::new("/dev")))
            .ok_or_else(|| StateError::NotADisk { path: real.clone() })?;
        Ok(Disk {
            node: real.clone(),
            sys: Path::new("/sys/class/block").join(name),
        })
    }

    /// Writes the state partition's table on the disk if it is blank; returns whether it
    /// did. A disk with anything at either end is left as it is.
    pub fn partition_if_blank(&self) -> Result<bool, StateError> {
        let bytes = super::read_u64(&self.sys.join("size"))? * super::SECTOR;
        let sector = super::read_u64(&self.sys.join("queue/logical_block_size"))?;
        let gpt = |source| StateError::Gpt {
            disk: self.node.clone(),
            source,
        };
        // Exclusive: the kernel refuses (EBUSY) if anything has the disk mounted or mapped.
        let mut dev: File = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_EXCL)
            .open(&self.node)
            .map_err(|source| self.write_error(source))?;
        if !gpt::is_blank(&mut dev, bytes).map_err(gpt)? {
            return Ok(false);
        }
        gpt::write(&mut dev, bytes, sector, super::PARTLABEL, &mut OsRng).map_err(gpt)?;
        dev.sync_all().map_err(|source| self.write_error(source))?;
        crate::sys::reread_partitions(&dev).map_err(|source| self.write_error(source))?;
        Ok(true)
    }

    fn write_error(&self, source: std::io::Error) -> StateError {
        StateError::Write {
            path: self.node.clone(),
            source,
        }
    }
}

/// The `/dev/disk/by-id/` name udev gives the disk `dev` (its sysfs folder `sys`), for virtio
/// and NVMe disks.
fn udev_name(sys: &Path, dev: &str) -> Option<String> {
    let attr = |path: &str| {
        let text = std::fs::read_to_string(sys.join(path)).ok()?;
        let words: Vec<&str> = text.split_whitespace().collect();
        (!words.is_empty()).then(|| words.join("_"))
    };
    if dev.starts_with("vd") {
        return attr("serial").map(|s| format!("virtio-{s}"));
    }
    if dev.starts_with("nvme") {
        return Some(format!(
            "nvme-{}_{}",
            attr("device/model")?,
            attr("device/serial")?
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(class: &Path, dev: &str, devtype: &str, attrs: &[(&str, &str)]) {
        let dir = class.join(dev);
        std::fs::create_dir_all(dir.join("device")).unwrap();
        std::fs::write(
            dir.join("uevent"),
            format!("DEVNAME={dev}\nDEVTYPE={devtype}\n"),
        )
        .unwrap();
        for (name, value) in attrs {
            std::fs::write(dir.join(name), value).unwrap();
        }
    }

    #[test]
    fn virtio_and_nvme_disks_are_found_by_udevs_names() {
        let dir = tempfile::tempdir().unwrap();
        let class = dir.path();
        block(class, "vda", "disk", &[("serial", "")]);
        block(class, "vdd", "disk", &[("serial", "sovereign-state\n")]);
        block(
            class,
            "vdd1",
            "partition",
            &[("serial", "sovereign-state\n")],
        );
        block(
            class,
            "nvme0n1",
            "disk",
            &[
                ("device/model", "Samsung SSD 980 PRO 2TB   \n"),
                ("device/serial", "  S6B0NL0T\n"),
            ],
        );
        let vdd = Disk::by_id(class, "/dev/disk/by-id/virtio-sovereign-state").unwrap();
        assert_eq!(vdd.node, Path::new("/dev/vdd"));
        let nvme = Disk::by_id(
            class,
            "/dev/disk/by-id/nvme-Samsung_SSD_980_PRO_2TB_S6B0NL0T",
        )
        .unwrap();
        assert_eq!(nvme.node, Path::new("/dev/nvme0n1"));
        for other in [
            "/dev/disk/by-id/virtio-other",
            "/dev/disk/by-id/ata-QEMU_HARDDISK_QM00001",
            "/dev/vdd",
            "/dev/disk/by-id/virtio-",
        ] {
            assert_eq!(Disk::by_id(class, other), None, "{other}");
        }
    }

    #[test]
    fn a_node_that_is_not_a_device_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("disk");
        std::fs::write(&file, "").unwrap();
        assert!(matches!(
            Disk::from_node(&file),
            Err(StateError::NotADisk { .. })
        ));
        assert!(matches!(
            Disk::from_node(&dir.path().join("missing")),
            Err(StateError::Read { .. })
        ));
    }
}
