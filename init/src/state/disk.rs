//! The state disk as a whole, before it has its partition: found by the stable name the
//! build was given (`--state-device`, a `/dev/disk/by-id/` path), and partitioned when it is
//! blank ([`crate::gpt`]).
//!
//! In the root, udev has made the `/dev/disk/by-id/` link and [`Disk::from_node`] follows it.
//! The initrd has no udev, so [`Disk::by_id`] finds the disk in sysfs the way udev's
//! `60-persistent-storage.rules` name it, for the kinds a node's state disk is: virtio
//! (`virtio-<serial>`), NVMe (`nvme-<model>_<serial>`, spaces as `_`) and SATA
//! (`ata-<model>_<serial>`, as udev's `ata_id` spells them). For any other name it finds
//! nothing, and the root's `sovereign-state.service` makes the disk instead.

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
    /// (`/sys/class/block`), if it is a virtio, NVMe or ATA name and such a disk is there.
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

    /// The disk behind a device node or a link to one (udev's `/dev/disk/by-id/…`). It must
    /// be a whole disk (sysfs `DEVTYPE=disk`, as [`Disk::by_id`] requires): a partition or a
    /// dm device named by mistake would get a partition table written inside it.
    pub fn from_node(node: &Path) -> Result<Disk, StateError> {
        Disk::from_node_in(node, Path::new("/dev"), Path::new("/sys/class/block"))
    }

    /// [`Disk::from_node`] with the device nodes in `dev` and sysfs's block class in `class`.
    fn from_node_in(node: &Path, dev: &Path, class: &Path) -> Result<Disk, StateError> {
        let read = |path: &Path| {
            let path = path.to_owned();
            move |source| StateError::Read { path, source }
        };
        let real = std::fs::canonicalize(node).map_err(read(node))?;
        let name = real
            .file_name()
            .and_then(|n| n.to_str())
            .filter(|_| real.parent() == Some(dev))
            .ok_or_else(|| StateError::NotADisk { path: real.clone() })?;
        let sys = class.join(name);
        let uevent_path = sys.join("uevent");
        let uevent = std::fs::read_to_string(&uevent_path).map_err(read(&uevent_path))?;
        let devtype = uevent
            .lines()
            .find_map(|l| l.strip_prefix("DEVTYPE="))
            .unwrap_or_default();
        if devtype != "disk" {
            return Err(StateError::NotWholeDisk {
                path: real,
                devtype: devtype.to_owned(),
            });
        }
        Ok(Disk { node: real, sys })
    }

    /// Writes the state partition's table on the disk if it is blank, or holds only part of
    /// that table (a first boot a power cut interrupted: [`gpt::is_unfinished`]); returns
    /// whether it did. A disk with anything else at either end is left as it is.
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
        let blank = gpt::is_blank(&mut dev, bytes).map_err(gpt)?;
        if !blank && !gpt::is_unfinished(&mut dev, bytes, sector, super::PARTLABEL).map_err(gpt)? {
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

/// The `/dev/disk/by-id/` name udev gives the disk `dev` (its sysfs folder `sys`), for virtio,
/// NVMe and ATA disks.
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
    if dev.starts_with("sd") {
        return ata_name(sys);
    }
    None
}

/// Where the ATA Information VPD page (0x89) has the disk's IDENTIFY DEVICE data (SAT).
const VPD89_IDENTIFY: usize = 60;
/// IDENTIFY DEVICE's serial number (words 10 to 19) and model (words 27 to 46), in bytes.
const ATA_SERIAL: (usize, usize) = (20, 20);
const ATA_MODEL: (usize, usize) = (54, 40);

/// udev's name for a disk behind an ATA controller (SCSI vendor `ATA`): `ata-<model>_<serial>`,
/// which udev's `ata_id` makes from the disk's IDENTIFY DEVICE data. The initrd has no
/// `ata_id`, but the kernel kept that data when it scanned the disk, and sysfs shows it in
/// the ATA Information VPD page (`device/vpd_pg89`), so no command goes to the disk here.
fn ata_name(sys: &Path) -> Option<String> {
    let vendor = std::fs::read_to_string(sys.join("device/vendor")).ok()?;
    if vendor.trim() != "ATA" {
        return None;
    }
    let page = std::fs::read(sys.join("device/vpd_pg89")).ok()?;
    let identify = page.get(VPD89_IDENTIFY..VPD89_IDENTIFY + 512)?;
    let model = udev_word(&ata_string(identify, ATA_MODEL));
    let serial = udev_word(&ata_string(identify, ATA_SERIAL));
    match (model.is_empty(), serial.is_empty()) {
        // udev makes no link without ID_SERIAL, which is the model when there is no serial.
        (true, _) => None,
        (false, true) => Some(format!("ata-{model}")),
        (false, false) => Some(format!("ata-{model}_{serial}")),
    }
}

/// An ATA string field (`(offset, length)` in bytes): two characters a 16-bit little-endian
/// word, the first in its high byte.
fn ata_string(identify: &[u8], (offset, len): (usize, usize)) -> Vec<u8> {
    identify[offset..offset + len]
        .chunks_exact(2)
        .flat_map(|pair| [pair[1], pair[0]])
        .collect()
}

/// The text as udev's `ata_id` writes it into a name: up to the first NUL, without leading
/// and trailing white space, each run of it as one `_`, and every byte but ASCII letters,
/// digits and `#+-.:=@_` as `_` (ATA strings are ASCII; udev would keep valid UTF-8).
fn udev_word(raw: &[u8]) -> String {
    let text = raw.split(|&b| b == 0).next().unwrap_or_default();
    let space = |b: &u8| b.is_ascii_whitespace() || *b == 0x0b;
    let allowed = |b: u8| b.is_ascii_alphanumeric() || b"#+-.:=@_".contains(&b);
    text.split(space)
        .filter(|w| !w.is_empty())
        .map(|w| {
            w.iter()
                .map(|&b| if allowed(b) { b as char } else { '_' })
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("_")
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

    /// An ATA Information VPD page as the kernel's SAT layer answers it, with `model` and
    /// `serial` (space-padded, as disks give them) in its IDENTIFY DEVICE data.
    fn vpd_pg89(model: &str, serial: &str) -> Vec<u8> {
        let mut page = vec![0u8; VPD89_IDENTIFY + 512];
        page[1] = 0x89;
        page[2..4].copy_from_slice(&0x238u16.to_be_bytes());
        for (text, (offset, len)) in [(model, ATA_MODEL), (serial, ATA_SERIAL)] {
            let padded = format!("{text:<len$}");
            for (i, pair) in padded.as_bytes().chunks(2).enumerate() {
                let at = VPD89_IDENTIFY + offset + 2 * i;
                page[at] = pair[1];
                page[at + 1] = pair[0];
            }
        }
        page
    }

    fn ata_disk(class: &Path, dev: &str, vendor: &str, page: &[u8]) {
        block(class, dev, "disk", &[("device/vendor", vendor)]);
        std::fs::write(class.join(dev).join("device/vpd_pg89"), page).unwrap();
    }

    #[test]
    fn ata_disks_are_found_by_the_name_ata_id_gives_them() {
        let dir = tempfile::tempdir().unwrap();
        let class = dir.path();
        ata_disk(
            class,
            "sda",
            "ATA     \n",
            &vpd_pg89("QEMU HARDDISK", "QM00001"),
        );
        ata_disk(
            class,
            "sdb",
            "ATA     \n",
            &vpd_pg89("Samsung SSD 870 EVO 1TB", "  S6PUNX0T123456A"),
        );
        // A disk on a SCSI (not ATA) controller with the same data is not an ATA name.
        ata_disk(
            class,
            "sdc",
            "QEMU    \n",
            &vpd_pg89("QEMU HARDDISK", "other"),
        );
        // A serial with characters udev replaces, and a disk whose page is cut short.
        ata_disk(class, "sdd", "ATA\n", &vpd_pg89("Odd/Disk  v2", "a b$c"));
        ata_disk(
            class,
            "sde",
            "ATA\n",
            &vpd_pg89("QEMU HARDDISK", "short")[..100],
        );
        let found = |name: &str| Disk::by_id(class, &format!("/dev/disk/by-id/{name}"));
        let node = |name: &str| found(name).map(|d| d.node);
        assert_eq!(node("ata-QEMU_HARDDISK_QM00001"), Some("/dev/sda".into()));
        assert_eq!(
            node("ata-Samsung_SSD_870_EVO_1TB_S6PUNX0T123456A"),
            Some("/dev/sdb".into())
        );
        assert_eq!(node("ata-Odd_Disk_v2_a_b_c"), Some("/dev/sdd".into()));
        for other in [
            "ata-QEMU_HARDDISK_other",
            "scsi-0QEMU_QEMU_HARDDISK_other",
            "ata-QEMU_HARDDISK_short",
            "ata-QEMU_HARDDISK",
        ] {
            assert_eq!(found(other), None, "{other}");
        }
    }

    #[test]
    fn udev_words_are_trimmed_joined_and_replaced() {
        assert_eq!(udev_word(b"  a  b\tc  "), "a_b_c");
        assert_eq!(udev_word(b"x/y\x0bz"), "x_y_z");
        assert_eq!(udev_word(b"ab\0cd"), "ab");
        assert_eq!(udev_word(b"#+-.:=@_\xff"), "#+-.:=@__");
        assert_eq!(udev_word(b"   "), "");
    }

    #[test]
    fn only_a_whole_disk_is_taken_from_its_node() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let (dev, class) = (root.join("dev"), root.join("class"));
        std::fs::create_dir_all(dev.join("disk/by-id")).unwrap();
        block(&class, "vdb", "disk", &[]);
        block(&class, "vdb1", "partition", &[]);
        block(&class, "dm-0", "", &[]);
        for name in ["vdb", "vdb1", "dm-0"] {
            std::fs::write(dev.join(name), "").unwrap();
        }
        // The disk, through a by-id link as udev makes it.
        let link = dev.join("disk/by-id/virtio-state");
        std::os::unix::fs::symlink("../../vdb", &link).unwrap();
        let disk = Disk::from_node_in(&link, &dev, &class).unwrap();
        assert_eq!(disk.node, dev.join("vdb"));
        assert_eq!(disk.sys, class.join("vdb"));
        for (name, devtype) in [("vdb1", "partition"), ("dm-0", "")] {
            let err = Disk::from_node_in(&dev.join(name), &dev, &class).unwrap_err();
            assert!(
                matches!(&err, StateError::NotWholeDisk { path, devtype: t }
                    if *path == dev.join(name) && t == devtype),
                "{err:?}"
            );
            assert!(err.to_string().contains("not a whole disk"), "{err}");
        }
        // A node sysfs does not list is not taken either.
        std::fs::write(dev.join("vdz"), "").unwrap();
        let err = Disk::from_node_in(&dev.join("vdz"), &dev, &class).unwrap_err();
        assert!(matches!(err, StateError::Read { .. }), "{err:?}");
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
