//! The node's state disk (`/var/lib/hostd`: sled, keys, the ledger), opened and mounted here
//! so that the root's systemd finds it mounted and hostd starts without waiting for udev to
//! announce the disk and for `systemd-cryptsetup` (together 3 to 5 s of boot under the VM
//! test's emulation).
//!
//! On the node's first boot the disk is blank: it gets a GPT partition labelled
//! [`PARTLABEL`] ([`disk`], [`crate::gpt`]) and the volume is made on it ([`open_or_create`],
//! `create`): LUKS2 whose one keyslot's passphrase is a secret sealed to the TPM under a PCR
//! policy (PCRs 4, 11 and 12: `create::PCRS` says why each), described by the volume's
//! `systemd-tpm2` token, as `systemd-repart`'s `Encrypt=tpm2` wrote it before. Opening it is
//! what `systemd-cryptsetup` does with that token:
//! 1. unseal the secret with the TPM ([`tpm::unseal`]): it is released only while the PCRs
//!    hold what they held when the secret was sealed: PCR 11 before the root's `sysinit`
//!    phase (this image's UKI sections, `enter-initrd` and `leave-initrd`), PCR 4 (the
//!    firmware started this UKI) and PCR 12 (no command line given in place of the UKI's). So this runs after
//!    `leave-initrd` is measured, as the root's `systemd-cryptsetup` ran;
//! 2. the keyslot's passphrase is the secret in base64 (systemd's convention); with it the
//!    keyslot gives the volume key ([`crate::luks`]);
//! 3. the dm-crypt device [`NAME`] over the partition's data segment, as `cryptsetup open`
//!    makes it ([`crate::dm`]), and ext4 on it mounted at `/var/lib/hostd` on a tmpfs `/var`.
//!
//! The initrd does all of this, on the first boot too, for a disk it can name in sysfs (the
//! command line's `sovereign.state_disk=`); otherwise the root's `sovereign-state.service`
//! does, with the same code (`sovereign-init open-state`). A partition with no LUKS header at
//! all ([`format::blank`]: a first boot cut short) gets its volume made again. A partition that does
//! not open (another image, another TPM, a damaged header) is an error: the node powers off
//! rather than start without its state, or format over it.

use crate::dm::{Control, DmError};
use crate::luks::{format, Header, LuksError, Segment};
use crate::verity::{DevNum, Table};
use base64::Engine;
use rustix::mount::MountFlags;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;
use zeroize::{Zeroize, Zeroizing};

mod create;
pub mod disk;

/// The GPT partition label of the state partition (repart's `Label=` on nodes it made).
pub const PARTLABEL: &str = "sovereign-state";
/// The dm-crypt device's name (the root's `/dev/mapper/sovstate`).
pub const NAME: &str = "sovstate";
/// Modules the state disk needs, loaded from the verified root (they are in its tree, and
/// leaving them out of the initrd keeps the UKI small): dm-crypt, AES-XTS (with AES-NI where
/// the CPU has it) and ext4.
pub const MODULES: &[&str] = &["dm_crypt", "xts", "ecb", "aesni_intel", "ext4"];
/// `/var` inside the root: memory, as the image has always had it.
const VAR: &str = "var";
/// The state disk's mount point inside the root.
pub(crate) const STATE_DIR: &str = "var/lib/hostd";
/// The only data segment layout this writes and opens (as `repart` wrote it).
const CIPHER: &str = "aes-xts-plain64";
const SECTOR: u64 = 512;

/// Why the state disk could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// A device or sysfs file could not be read.
    #[error("reading {path}")]
    Read {
        /// The file.
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The partition's LUKS2 header is unreadable, or no keyslot opens with the secret.
    #[error("the LUKS2 volume on {device}")]
    Luks {
        /// The partition.
        device: PathBuf,
        #[source]
        source: LuksError,
    },
    /// The volume has no `systemd-tpm2` token: nothing says how to unseal its passphrase.
    #[error("{device} has no systemd-tpm2 token")]
    NoToken {
        /// The partition.
        device: PathBuf,
    },
    /// No partition labelled [`PARTLABEL`] appeared (after the table was written).
    #[error("no partition labelled {PARTLABEL} appeared within {secs} s")]
    NoPartition {
        /// How long was waited.
        secs: u64,
    },
    /// The TPM did not appear.
    #[error("the state disk is sealed to the TPM, but {device} did not appear within {secs} s")]
    NoTpm {
        /// The TPM device.
        device: PathBuf,
        /// How long the init waited.
        secs: u64,
    },
    /// The TPM refused to unseal the passphrase (under another image, another boot path or
    /// another command line: PCR 11, 4 or 12 differs).
    #[error("unsealing the state disk's passphrase")]
    Unseal(#[source] tpm::TpmError),
    /// The data segment is not one this init can map.
    #[error("the state volume's data segment ({cipher}, {sector_size}-byte sectors) is not {CIPHER} with 512-byte sectors")]
    Segment {
        /// Its cipher.
        cipher: String,
        /// Its sector size.
        sector_size: u32,
    },
    /// The partition ends before the header says its data starts.
    #[error(
        "the state partition ({sectors} sectors) ends before its data segment (sector {offset})"
    )]
    TooSmall {
        /// The partition's length.
        sectors: u64,
        /// Where the data segment starts.
        offset: u64,
    },
    /// The header's fixed data size does not fit in the partition.
    #[error(
        "the state volume's header says {wanted} data sectors, the partition holds {available} \
         after its header"
    )]
    SegmentBeyondPartition {
        /// Sectors the header's segment size asks for.
        wanted: u64,
        /// Sectors from the segment's start to the partition's end.
        available: u64,
    },
    /// device-mapper refused the dm-crypt device.
    #[error("setting up the dm-crypt device {NAME}")]
    Dm(#[source] DmError),
    /// The device node could not be made.
    #[error("making the device node {path}")]
    Node {
        /// The node.
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The partition has no LUKS header at all: its volume is yet to be made.
    #[error("{device} has no LUKS volume yet")]
    NoVolume {
        /// The partition.
        device: PathBuf,
    },
    /// The partition has lost its primary LUKS header but keeps a secondary one: a damaged
    /// volume, never formatted over.
    #[error(
        "{device} has no primary LUKS header but keeps a secondary one: the node's state is \
         damaged, not new; restore the primary with `cryptsetup repair` from a rescue system"
    )]
    Damaged {
        /// The partition.
        device: PathBuf,
    },
    /// Sealing a new volume's passphrase to the TPM failed.
    #[error("sealing the new state disk's passphrase to PCRs 4, 11 and 12")]
    Seal(#[source] tpm::TpmError),
    /// The OS's random generator failed.
    #[error("the OS's random generator")]
    Random(#[source] rand_core::Error),
    /// mkfs.ext4 could not be run at all (its loader or the program is missing).
    #[error("running {path}")]
    RunMkfs {
        /// The program run: the root's dynamic loader, or mkfs.ext4 itself.
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Writing the new volume failed.
    #[error("writing {path}")]
    Write {
        /// The partition.
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// mkfs.ext4 failed on the new volume.
    #[error("mkfs.ext4 on {device} exited with {status}: {stderr}")]
    Mkfs {
        /// The dm-crypt device.
        device: PathBuf,
        /// Its exit status.
        status: String,
        /// What it printed.
        stderr: String,
    },
    /// There is no state partition, and no disk was named to make it on.
    #[error(
        "there is no partition labelled {PARTLABEL}, and no state disk was named to make it on"
    )]
    NoDevice,
    /// The state device is not a disk's node under `/dev`.
    #[error("the state device {path} is not a disk under /dev")]
    NotADisk {
        /// Where its name led.
        path: PathBuf,
    },
    /// The state device is a block device but not a whole disk (a partition, a dm device):
    /// a partition table written inside it would nest the state in whatever holds it.
    #[error("the state device {path} is a {devtype:?} device, not a whole disk: name the disk")]
    NotWholeDisk {
        /// The device.
        path: PathBuf,
        /// Its sysfs `DEVTYPE` (empty when it has none).
        devtype: String,
    },
    /// Two partitions are labelled [`PARTLABEL`] (a clone of the disk attached): which one is
    /// this node's state is not for the node to guess, and neither is opened or made.
    #[error(
        "both {first} and {second} are labelled {PARTLABEL}: detach the disk that is not this \
         node's state disk"
    )]
    Ambiguous {
        /// One partition.
        first: PathBuf,
        /// Another.
        second: PathBuf,
    },
    /// The disk is neither blank nor has the state partition: it is not touched.
    #[error(
        "{disk} has no partition labelled {PARTLABEL} but is not blank either (something is in \
         its first or last MiB): the node does not partition a disk that may hold data"
    )]
    NotBlank {
        /// The disk.
        disk: PathBuf,
    },
    /// Writing the partition table failed.
    #[error("partitioning {disk}")]
    Gpt {
        /// The disk.
        disk: PathBuf,
        #[source]
        source: crate::gpt::GptError,
    },
    /// A mount failed.
    #[error("mounting {what} on {target}")]
    Mount {
        /// What was mounted.
        what: String,
        /// Where.
        target: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// A block device partition as its sysfs `uevent` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    /// `/dev/<DEVNAME>`.
    pub node: PathBuf,
    /// `/sys/class/block/<DEVNAME>`.
    sys: PathBuf,
}

/// Waits, bounded, for the state partition: on the first boot the partition table has just
/// been written and the kernel re-reads it. Two of them end the wait at once.
pub fn wait_for(wait: Duration) -> Result<Partition, StateError> {
    crate::poll::until(wait, || find().transpose())
        .transpose()?
        .ok_or(StateError::NoPartition {
            secs: wait.as_secs(),
        })
}

/// The state partition, if the kernel has one: none on the first boot, before the disk is
/// partitioned; an error if it has two.
pub fn find() -> Result<Option<Partition>, StateError> {
    find_partition(Path::new("/sys/class/block"))
}

/// The volume's ext4 at `/var/lib/hostd` in `sysroot`: no devices, no set-uid.
fn mount_state(mapped: &Path, sysroot: &Path) -> Result<(), StateError> {
    mount_at(
        &mapped.display().to_string(),
        &sysroot.join(STATE_DIR),
        "ext4",
        MountFlags::NODEV | MountFlags::NOSUID,
        "",
    )
}

/// Opens the partition (unseal, unlock, map) or, when it has no LUKS volume yet, makes the
/// sealed volume on it (`create`); mounts it at `/var/lib/hostd` in `root` (after
/// [`mount_var`]; `/sysroot` in the initrd, `/` in the root). Returns the dm-crypt device and
/// whether it was made now. `tpm_device` is the TPM's resource manager, waited for up to
/// `wait`.
pub fn open_or_create(
    part: &Partition,
    root: &Path,
    tpm_device: &Path,
    wait: Duration,
) -> Result<(PathBuf, bool), StateError> {
    let (mapped, created) = match map(part, tpm_device, wait) {
        Err(StateError::NoVolume { .. }) => (create::create(part, root, tpm_device, wait)?, true),
        mapped => (mapped?, false),
    };
    if let Err(e) = mount_state(&mapped, root) {
        // The open volume, its key in the kernel, is of no use unmounted: the node powers off
        // or the unit is retried, and either way the mapping must not outlive the failure.
        unmap(Some(&mapped));
        return Err(e);
    }
    Ok((mapped, created))
}

/// Mounts `/var` in `sysroot`: memory, as the root's fstab had it, with the state disk's
/// mount point inside. On every boot, first or not.
pub fn mount_var(sysroot: &Path) -> Result<(), StateError> {
    let var = sysroot.join(VAR);
    mount_at(
        "tmpfs",
        &var,
        "tmpfs",
        MountFlags::NODEV | MountFlags::NOSUID,
        "mode=0755,size=256M",
    )?;
    let dir = sysroot.join(STATE_DIR);
    std::fs::create_dir_all(&dir).map_err(|source| StateError::Mount {
        what: "the state disk's mount point".into(),
        target: dir,
        source,
    })
}

fn mount_at(
    what: &str,
    target: &Path,
    fstype: &str,
    flags: MountFlags,
    data: &str,
) -> Result<(), StateError> {
    let err = |source: io::Error| StateError::Mount {
        what: what.to_owned(),
        target: target.to_owned(),
        source,
    };
    let data = std::ffi::CString::new(data).map_err(|e| err(io::Error::other(e)))?;
    crate::boot::mount_fs(what, target, fstype, flags, Some(data.as_c_str())).map_err(err)
}

/// The one partition under `class` (sysfs `/sys/class/block`) whose GPT name is
/// [`PARTLABEL`]; [`StateError::Ambiguous`] if there are two (a cloned disk attached): the
/// node never picks one, which it might then open with the wrong key or format.
fn find_partition(class: &Path) -> Result<Option<Partition>, StateError> {
    let Ok(entries) = std::fs::read_dir(class) else {
        return Ok(None);
    };
    let mut entries: Vec<_> = entries.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    let mut found: Option<Partition> = None;
    for entry in entries {
        let sys = entry.path();
        let Ok(uevent) = std::fs::read_to_string(sys.join("uevent")) else {
            continue;
        };
        let Some(devname) = labelled(&uevent, PARTLABEL) else {
            continue;
        };
        let node = Path::new("/dev").join(devname);
        if let Some(first) = found {
            return Err(StateError::Ambiguous {
                first: first.node,
                second: node,
            });
        }
        found = Some(Partition { node, sys });
    }
    Ok(found)
}

/// The `DEVNAME` of a partition `uevent` whose `PARTNAME` is `label`.
fn labelled<'a>(uevent: &'a str, label: &str) -> Option<&'a str> {
    let field = |key: &str| {
        uevent
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
    };
    (field("DEVTYPE")? == "partition" && field("PARTNAME")? == label)
        .then(|| field("DEVNAME"))
        .flatten()
        .filter(|name| !name.is_empty() && !name.contains('/') && !name.contains(".."))
}

/// Unseals, unlocks and maps the partition; returns `/dev/mapper/`[`NAME`].
fn map(part: &Partition, tpm_device: &Path, wait: Duration) -> Result<PathBuf, StateError> {
    let device = &part.node;
    let luks = |source| StateError::Luks {
        device: device.clone(),
        source,
    };
    let mut dev = std::fs::File::open(device).map_err(|source| StateError::Read {
        path: device.clone(),
        source,
    })?;
    let header = match Header::read(&mut dev) {
        Ok(header) => header,
        // No primary header: a volume not made yet (no header at all: the first boot, or one
        // cut short), or one whose primary was lost while a secondary remains.
        Err(LuksError::NotLuks) => {
            let device = device.clone();
            return Err(match format::blank(&mut dev).map_err(luks)? {
                true => StateError::NoVolume { device },
                false => StateError::Damaged { device },
            });
        }
        Err(e) => return Err(luks(e)),
    };
    let token = header
        .systemd_tpm2_token()
        .ok_or_else(|| StateError::NoToken {
            device: device.clone(),
        })?;
    wait_for_tpm(tpm_device, wait)?;
    let secret = unseal(tpm_device, &token)?;
    let passphrase = passphrase_of(secret.as_bytes());
    let key = header
        .unlock(&mut dev, passphrase.as_bytes(), Some(&token.keyslots))
        .map_err(luks)?;
    let segment = header.segment().map_err(luks)?;
    map_volume(part, header.uuid(), &segment, key.as_bytes())
}

/// The keyslot's passphrase for a sealed secret: its base64, as systemd enrols it.
fn passphrase_of(secret: &[u8]) -> Zeroizing<String> {
    Zeroizing::new(base64::engine::general_purpose::STANDARD.encode(secret))
}

/// The dm-crypt device [`NAME`] over `segment` of the partition, keyed with `key`, as
/// `cryptsetup open` makes it (the same table and device-mapper UUID).
fn map_volume(
    part: &Partition,
    uuid: &str,
    segment: &Segment,
    key: &[u8],
) -> Result<PathBuf, StateError> {
    let device = &part.node;
    let sectors = read_u64(&part.sys.join("size"))?;
    let mut table = crypt_table(
        segment,
        key,
        DevNum::of(device).map_err(|source| StateError::Read {
            path: device.clone(),
            source,
        })?,
        sectors,
    )?;
    let dm_uuid = format!("CRYPT-LUKS2-{}-{NAME}", uuid.replace('-', ""));
    let created = Control::open(Path::new(DM_CONTROL))
        .and_then(|c| c.create(NAME, &dm_uuid, "crypt", &table, 0));
    table.params.zeroize();
    let dev = created.map_err(StateError::Dm)?;
    crate::boot::make_node(NAME, dev).map_err(|(path, source)| {
        unmap(None);
        StateError::Node { path, source }
    })
}

/// device-mapper's control device.
const DM_CONTROL: &str = "/dev/mapper/control";

/// Undoes [`map_volume`] after a later step failed: the device node `node` (when made) and
/// the dm-crypt device [`NAME`], which holds the volume key and whose name a retry without a
/// reboot would find taken. Best effort: the caller returns the error that stopped it.
fn unmap(node: Option<&Path>) {
    if let Some(node) = node {
        let _ = std::fs::remove_file(node);
    }
    let _ = Control::open(Path::new(DM_CONTROL)).and_then(|c| c.remove(NAME));
}

/// Waits, bounded, for the TPM's device.
fn wait_for_tpm(tpm_device: &Path, wait: Duration) -> Result<(), StateError> {
    crate::poll::until(wait, || tpm_device.exists().then_some(())).ok_or_else(|| {
        StateError::NoTpm {
            device: tpm_device.to_owned(),
            secs: wait.as_secs(),
        }
    })
}

/// Unseals the token's secret with the TPM.
fn unseal(
    tpm_device: &Path,
    token: &crate::luks::Tpm2Token,
) -> Result<tpm::unseal::Secret, StateError> {
    let primary = token
        .primary_alg
        .as_deref()
        .map(tpm::unseal::PrimaryAlg::parse)
        .transpose()
        .map_err(StateError::Unseal)?;
    let object = tpm::unseal::SealedObject {
        blob: &token.blob,
        pcrs: &token.pcrs,
        bank: &token.pcr_bank,
        primary,
        storage_key: token.storage_key.as_deref(),
    };
    let mut t = tpm::Device::open(tpm_device).map_err(StateError::Unseal)?;
    tpm::unseal::unseal(&mut t, &object).map_err(StateError::Unseal)
}

/// The dm-crypt table `cryptsetup open` loads for a LUKS2 data segment: the cipher, the key
/// in hex, the IV offset, the partition and the segment's start, both in 512-byte sectors.
/// The partition is `sectors` long.
fn crypt_table(
    segment: &Segment,
    key: &[u8],
    partition: DevNum,
    sectors: u64,
) -> Result<Table, StateError> {
    if segment.cipher != CIPHER || u64::from(segment.sector_size) != SECTOR {
        return Err(StateError::Segment {
            cipher: segment.cipher.clone(),
            sector_size: segment.sector_size,
        });
    }
    let offset = segment.offset / SECTOR;
    let available = sectors
        .checked_sub(offset)
        .filter(|&n| n > 0)
        .ok_or(StateError::TooSmall { sectors, offset })?;
    let length = match segment.size.map(|bytes| bytes / SECTOR) {
        // A fixed size beyond the partition is a header for another disk, or a truncated
        // one: mapped short, the file system would meet its end early.
        Some(wanted) if wanted > available => {
            return Err(StateError::SegmentBeyondPartition { wanted, available })
        }
        Some(wanted) => wanted,
        None => available,
    };
    // The key in hex, written straight into a buffer sized for the longest table (never
    // grown, so never copied) and wiped if dropped here; the caller wipes the table's.
    let mut params = Zeroizing::new(String::with_capacity(table_capacity(key.len())));
    params.push_str(CIPHER);
    params.push(' ');
    for b in key {
        for nibble in [b >> 4, b & 0xf] {
            params.push(char::from(HEX_DIGITS[usize::from(nibble)]));
        }
    }
    let (major, minor) = (partition.major, partition.minor);
    params.push_str(&format!(" {} {major}:{minor} {offset}", segment.iv_tweak));
    Ok(Table {
        sectors: length,
        // Moved out, not copied: the one buffer.
        params: std::mem::take(&mut *params),
    })
}

const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";

/// The longest dm-crypt table [`crypt_table`] writes for a `key_len`-byte key: the cipher,
/// the key in hex, and four numbers of at most 20 digits, with their separators.
fn table_capacity(key_len: usize) -> usize {
    CIPHER.len() + 1 + 2 * key_len + 4 * 21
}

fn read_u64(path: &Path) -> Result<u64, StateError> {
    let err = |source| StateError::Read {
        path: path.to_owned(),
        source,
    };
    let text = std::fs::read_to_string(path).map_err(err)?;
    text.trim()
        .parse()
        .map_err(|e| err(io::Error::new(io::ErrorKind::InvalidData, e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_partition_is_found_by_its_gpt_name() {
        let part = "MAJOR=254\nMINOR=49\nDEVNAME=vdd1\nDEVTYPE=partition\nDISKSEQ=4\nPARTN=1\nPARTNAME=sovereign-state\n";
        assert_eq!(labelled(part, PARTLABEL), Some("vdd1"));
        assert_eq!(
            labelled(&part.replace("sovereign-state", "other"), PARTLABEL),
            None
        );
        // A whole disk is never taken, nor a name that would leave /dev.
        assert_eq!(
            labelled(&part.replace("=partition", "=disk"), PARTLABEL),
            None
        );
        assert_eq!(labelled(&part.replace("vdd1", "../sda"), PARTLABEL), None);
        assert_eq!(labelled("PARTNAME=sovereign-state\n", PARTLABEL), None);
    }

    #[test]
    fn a_sysfs_tree_without_the_label_means_first_boot() {
        let dir = tempfile::tempdir().unwrap();
        for (name, uevent) in [
            ("vda", "DEVNAME=vda\nDEVTYPE=disk\n"),
            ("vdb1", "DEVNAME=vdb1\nDEVTYPE=partition\nPARTNAME=esp\n"),
        ] {
            std::fs::create_dir(dir.path().join(name)).unwrap();
            std::fs::write(dir.path().join(name).join("uevent"), uevent).unwrap();
        }
        assert_eq!(find_partition(dir.path()).unwrap(), None);
        std::fs::create_dir(dir.path().join("vdd1")).unwrap();
        std::fs::write(
            dir.path().join("vdd1/uevent"),
            "DEVNAME=vdd1\nDEVTYPE=partition\nPARTNAME=sovereign-state\n",
        )
        .unwrap();
        let found = find_partition(dir.path()).unwrap().unwrap();
        assert_eq!(found.node, Path::new("/dev/vdd1"));
        assert_eq!(found.sys, dir.path().join("vdd1"));
        // No sysfs at all is no partition yet, not an error.
        assert_eq!(find_partition(&dir.path().join("missing")).unwrap(), None);
    }

    #[test]
    fn two_state_partitions_are_refused_not_one_picked() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["sda1", "vdd1"] {
            std::fs::create_dir(dir.path().join(name)).unwrap();
            std::fs::write(
                dir.path().join(name).join("uevent"),
                format!("DEVNAME={name}\nDEVTYPE=partition\nPARTNAME=sovereign-state\n"),
            )
            .unwrap();
        }
        let err = find_partition(dir.path()).unwrap_err();
        assert!(
            matches!(&err, StateError::Ambiguous { first, second }
                if first == Path::new("/dev/sda1") && second == Path::new("/dev/vdd1")),
            "{err:?}"
        );
        assert!(err.to_string().contains("detach"), "{err}");
    }

    fn segment(cipher: &str, sector_size: u32, size: Option<u64>) -> Segment {
        Segment {
            offset: 16 << 20,
            size,
            iv_tweak: 0,
            cipher: cipher.into(),
            sector_size,
        }
    }

    #[test]
    fn the_table_is_cryptsetups() {
        let dev = DevNum {
            major: 254,
            minor: 49,
        };
        let t = crypt_table(&segment(CIPHER, 512, None), &[0xab; 32], dev, 1_046_528).unwrap();
        assert_eq!(t.sectors, 1_046_528 - 32_768);
        assert_eq!(
            t.params,
            format!("aes-xts-plain64 {} 0 254:49 32768", "ab".repeat(32))
        );
        let fixed = crypt_table(
            &segment(CIPHER, 512, Some(1 << 20)),
            &[1; 32],
            dev,
            1_046_528,
        )
        .unwrap();
        assert_eq!(fixed.sectors, 2048);
        assert!(matches!(
            crypt_table(
                &segment(CIPHER, 512, Some(1 << 30)),
                &[1; 32],
                dev,
                1_046_528
            ),
            Err(StateError::SegmentBeyondPartition {
                wanted: 2_097_152,
                available: 1_013_760
            })
        ));
        assert!(matches!(
            crypt_table(&segment(CIPHER, 512, None), &[1; 32], dev, 32_768),
            Err(StateError::TooSmall {
                sectors: 32_768,
                offset: 32_768
            })
        ));
        // The longest numbers fit the buffer as reserved: it was never grown (and copied).
        let mut far = segment(CIPHER, 512, None);
        far.iv_tweak = u64::MAX;
        let widest = DevNum {
            major: u32::MAX,
            minor: u32::MAX,
        };
        let long = crypt_table(&far, &[0xcd; 64], widest, u64::MAX).unwrap();
        assert!(long.params.contains(&"cd".repeat(64)), "{}", long.params);
        assert_eq!(long.params.capacity(), table_capacity(64));
        assert!(matches!(
            crypt_table(&segment(CIPHER, 4096, None), &[1; 32], dev, 1_046_528),
            Err(StateError::Segment { .. })
        ));
        assert!(matches!(
            crypt_table(
                &segment("aes-cbc-essiv:sha256", 512, None),
                &[1; 32],
                dev,
                1 << 20
            ),
            Err(StateError::Segment { .. })
        ));
    }
}
