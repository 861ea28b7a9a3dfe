//! The initrd's one job, in order: the kernel's filesystems, the boot modules, `enter-initrd`,
//! the root's two devices by their UUIDs, the verity device over them, the root mounted
//! read-only, `leave-initrd`, `/var` and the state disk (with, on the first boot, the copy of
//! the provisioning disk), and the switch into the root's `/sbin/init` (systemd). Each step's
//! failure is an [`InitError`] naming what it was doing; `main` prints it and powers the node
//! off, as the root's systemd does with a failed boot.

use crate::cmdline::{self, CmdlineError, Device, RootSpec};
use crate::dm::{Control, DmError};
use crate::kmod::{self, KmodError, Loaded};
use crate::phase::{self, PhaseError, Phases};
use crate::probe::{self, Signature};
use crate::provision;
use crate::state::{self, StateError};
use crate::verity::{self, DevNum, VerityError};
use rustix::mount::{mount, mount_move, MountFlags};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The modules to load, one name per line (the image's build writes it).
pub const MODULE_LIST: &str = "/usr/lib/sovereign-init/modules";
/// Where the root is mounted before the switch.
pub const SYSROOT: &str = "/sysroot";
/// The root's init.
pub const ROOT_INIT: &str = "/sbin/init";
/// The verity device's name (systemd's, so the root's units find it as before).
pub const ROOT_NAME: &str = "root";
/// How long the root's devices, and the TPM's, get to appear.
const DEVICE_WAIT: Duration = Duration::from_secs(30);

/// Why the initrd could not hand over to the root.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InitError {
    /// A filesystem could not be mounted or moved.
    #[error("mounting {what} on {target}")]
    Mount {
        /// What was mounted.
        what: String,
        /// Where.
        target: String,
        #[source]
        source: io::Error,
    },
    /// A file the initrd reads could not be read.
    #[error("reading {path}")]
    Read {
        /// The file.
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The command line does not name a root.
    #[error(transparent)]
    Cmdline(#[from] CmdlineError),
    /// A boot module could not be loaded.
    #[error(transparent)]
    Kmod(#[from] KmodError),
    /// A boot phase could not be measured.
    #[error("measuring the {phase} phase into PCR 11")]
    Phase {
        /// The phase.
        phase: &'static str,
        #[source]
        source: PhaseError,
    },
    /// A device the command line names never appeared.
    #[error("the root's {what} device ({device}) did not appear within {secs} s")]
    NoDevice {
        /// `data` or `hash tree`.
        what: &'static str,
        /// The command line's name for it.
        device: String,
        /// How long the init waited.
        secs: u64,
    },
    /// The verity device's node could not be made.
    #[error("making the device node {path}")]
    Node {
        /// The node.
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The hash device's superblock is not the image's.
    #[error("the root's hash tree on {device}")]
    Verity {
        /// The hash device.
        device: PathBuf,
        #[source]
        source: VerityError,
    },
    /// device-mapper refused the verity device.
    #[error("setting up the verity device")]
    Dm(#[source] DmError),
    /// The state disk is there but did not open (or `/var` could not be mounted).
    #[error("opening the state disk")]
    State(#[from] StateError),
    /// The mounted root has no init.
    #[error("the root has no {0}")]
    NoInit(&'static str),
    /// A step of the switch into the root failed.
    #[error("switching into the root: {step}")]
    Switch {
        /// The step.
        step: &'static str,
        #[source]
        source: io::Error,
    },
}

/// Boots the root; returns only on failure (on success this process becomes systemd).
pub fn run() -> Result<Infallible, InitError> {
    mount_kernel_filesystems()?;
    let line = read("/proc/cmdline")?;
    let spec = cmdline::parse(&line)?;
    let say = |text: &str| {
        if !spec.quiet {
            eprintln!("sovereign-init: {text}");
        }
    };
    load_modules(&say)?;
    let measured = mount_efivars()? && Path::new(phase::STUB_MEASURED).exists();
    let mut phases =
        Phases::open(measured, Path::new(tpm::DEFAULT_DEVICE), DEVICE_WAIT).map_err(|source| {
            InitError::Phase {
                phase: phase::ENTER_INITRD,
                source,
            }
        })?;
    measure(&mut phases, phase::ENTER_INITRD)?;
    let (data, hash) = find_devices(&spec)?;
    let root = open_verity(&spec, &data, &hash)?;
    mount_root(&root, &spec.fstype)?;
    say(&format!(
        "root {} verified against the command line's root hash, mounted read-only",
        data.display()
    ));
    measure(&mut phases, phase::LEAVE_INITRD)?;
    drop(phases);
    // After `leave-initrd`: the passphrase was sealed at that PCR 11 (docs/image.md).
    open_state(&spec, &say)?;
    switch_root(Path::new(SYSROOT))
}

fn read(path: impl AsRef<Path>) -> Result<String, InitError> {
    let path = path.as_ref();
    std::fs::read_to_string(path).map_err(|source| InitError::Read {
        path: path.to_owned(),
        source,
    })
}

fn mount_one(what: &str, target: &str, fstype: &str, flags: MountFlags) -> Result<(), InitError> {
    mount_fs(what, Path::new(target), fstype, flags, None).map_err(|source| InitError::Mount {
        what: what.to_owned(),
        target: target.to_owned(),
        source,
    })
}

/// Mounts `what` on `target`, which is made first if missing.
pub(crate) fn mount_fs(
    what: &str,
    target: &Path,
    fstype: &str,
    flags: MountFlags,
    data: Option<&std::ffi::CStr>,
) -> io::Result<()> {
    std::fs::create_dir_all(target)?;
    mount(what, target, fstype, flags, data).map_err(io::Error::from)
}

/// `/proc`, `/sys` and a devtmpfs `/dev` (the kernel makes device nodes there itself, which
/// is all this initrd needs of udev).
fn mount_kernel_filesystems() -> Result<(), InitError> {
    let hardened = MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC;
    mount_one("proc", "/proc", "proc", hardened)?;
    mount_one("sysfs", "/sys", "sysfs", hardened)?;
    mount_one("devtmpfs", "/dev", "devtmpfs", MountFlags::NOSUID)
}

/// efivarfs, where systemd-stub left word that it measured the UKI; false on a machine
/// without EFI.
fn mount_efivars() -> Result<bool, InitError> {
    if !Path::new("/sys/firmware/efi").exists() {
        return Ok(false);
    }
    let flags = MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC;
    mount_one("efivarfs", "/sys/firmware/efi/efivars", "efivarfs", flags)?;
    Ok(true)
}

fn load_modules(say: &dyn Fn(&str)) -> Result<(), InitError> {
    let wanted = kmod::names(&read(MODULE_LIST)?);
    load_modules_from(Path::new("/usr/lib/modules"), &wanted, say)
}

/// Loads `wanted` (and what they depend on) from `<modules>/<release>`.
fn load_modules_from(
    modules: &Path,
    wanted: &[String],
    say: &dyn Fn(&str),
) -> Result<(), InitError> {
    let release = rustix::system::uname()
        .release()
        .to_string_lossy()
        .into_owned();
    let dir = modules.join(&release);
    let dep = read(dir.join("modules.dep"))?;
    // Absent when nothing the list names is built in.
    let builtin = std::fs::read_to_string(dir.join("modules.builtin")).unwrap_or_default();
    for rel in kmod::load_order(&dep, &builtin, wanted)? {
        if kmod::load(&dir.join(&rel))? == Loaded::NoDevice {
            say(&format!(
                "{} has nothing to drive here",
                kmod::module_name(&rel)
            ));
        }
    }
    Ok(())
}

/// `sovereign-init open-state [DEVICE]`, in the root (`sovereign-state.service`), when the
/// initrd did not mount the state disk: on a first boot whose disk the initrd could not
/// name (not virtio, NVMe or SATA) or did not see yet. Partitions `device` if it is blank,
/// makes the volume on a blank partition, or opens it as the initrd does, and mounts it at
/// `/var/lib/hostd`. Returns the partition, the dm-crypt device and whether the volume was
/// made.
pub fn open_state_in_root(device: Option<&Path>) -> Result<(PathBuf, PathBuf, bool), InitError> {
    let part = match state::find()? {
        Some(part) => part,
        None => {
            let device = device.ok_or(StateError::NoDevice)?;
            partition(&state::disk::Disk::from_node(device)?)?
        }
    };
    load_modules_from(Path::new("/usr/lib/modules"), &state_modules(), &|_| {})?;
    let root = Path::new("/");
    let tpm = Path::new(tpm::DEFAULT_DEVICE);
    let (mapped, created) = state::open_or_create(&part, root, tpm, DEVICE_WAIT)?;
    Ok((part.node, mapped, created))
}

/// Writes the state partition's table on a blank disk and waits for the kernel's partition.
fn partition(disk: &state::disk::Disk) -> Result<state::Partition, InitError> {
    if !disk.partition_if_blank()? {
        return Err(StateError::NotBlank {
            disk: disk.node.clone(),
        }
        .into());
    }
    Ok(state::wait_for(DEVICE_WAIT)?)
}

fn state_modules() -> Vec<String> {
    state::MODULES.iter().map(|m| (*m).to_owned()).collect()
}

/// `/var`, then the state disk: opened when it has its volume, made when it is blank (the
/// first boot: partitioned, sealed, formatted). Its modules come from the verified root (the
/// initrd does not carry them), its key from the TPM (`state`).
fn open_state(spec: &RootSpec, say: &dyn Fn(&str)) -> Result<(), InitError> {
    let sysroot = Path::new(SYSROOT);
    state::mount_var(sysroot)?;
    let part = match state::find()? {
        Some(part) => part,
        None => match first_boot_disk(spec, say) {
            Some(disk) => partition(&disk)?,
            None => return Ok(()),
        },
    };
    load_modules_from(&sysroot.join("usr/lib/modules"), &state_modules(), say)?;
    let tpm = Path::new(tpm::DEFAULT_DEVICE);
    let (mapped, created) = state::open_or_create(&part, sysroot, tpm, DEVICE_WAIT)?;
    say(&state_opened(&part.node, &mapped, created));
    provision_in_initrd(sysroot, say);
    Ok(())
}

/// The first boot's copy of the provisioning disk, when the initrd sees the disk. What goes
/// wrong here is printed and left to the root's `sovereign-provision.service`, which tries
/// again (and waits for a disk that shows late); without the copy hostd does not start.
fn provision_in_initrd(sysroot: &Path, say: &dyn Fn(&str)) {
    let places = provision::Places::in_root(sysroot, "/provision");
    match provision::provision(&places, Duration::ZERO) {
        Ok(provision::Provisioned::Already) => {}
        Ok(done) => say(&done.to_string()),
        Err(e) => eprintln!(
            "sovereign-init: the provisioning disk: {} (left to the root)",
            attest::report::report(&e)
        ),
    }
}

/// `sovereign-init provision`, in the root (`sovereign-provision.service`): the first boot's
/// copy of the provisioning disk onto the mounted state disk, when the initrd did not make
/// it. Waits for the disk as for the root's devices.
pub fn provision_in_root() -> Result<provision::Provisioned, provision::ProvisionError> {
    let places = provision::Places::in_root(Path::new("/"), "/run/provision");
    provision::provision(&places, DEVICE_WAIT)
}

/// What became of the state disk, for the console (initrd) or the journal (root).
pub fn state_opened(part: &Path, mapped: &Path, created: bool) -> String {
    let how = if created {
        "made (LUKS2, its passphrase sealed to PCRs 4, 11 and 12, ext4 inside)"
    } else {
        "unsealed with the TPM"
    };
    format!(
        "state disk {}: {how}, {} mounted at /var/lib/hostd",
        part.display(),
        mapped.display()
    )
}

/// The command line's state disk, when it has no partition yet and the initrd can name it in
/// sysfs; otherwise the root's `sovereign-state.service` sees to it.
fn first_boot_disk(spec: &RootSpec, say: &dyn Fn(&str)) -> Option<state::disk::Disk> {
    let Some(name) = spec.state_disk.as_deref() else {
        say("no state partition, and the command line names no state disk: left to the root");
        return None;
    };
    let disk = state::disk::Disk::by_id(Path::new("/sys/class/block"), name);
    if disk.is_none() {
        say(&format!(
            "{name} is not a disk the initrd finds: left to the root"
        ));
    }
    disk
}

fn measure(phases: &mut Phases, phase: &'static str) -> Result<(), InitError> {
    phases
        .measure(phase)
        .map(drop)
        .map_err(|source| InitError::Phase { phase, source })
}

/// The data and hash devices: by path, or by the UUID in their superblocks, polling
/// `/sys/class/block` until both are there (the storage drivers probe as they load, but a
/// controller may take a moment).
fn find_devices(spec: &RootSpec) -> Result<(PathBuf, PathBuf), InitError> {
    let mut data_seen = false;
    let found = crate::poll::until(DEVICE_WAIT, || {
        let seen = scan_block_devices();
        let data = resolve(&spec.data, &seen);
        data_seen = data.is_some();
        Some((data?, resolve(&spec.hash, &seen)?))
    });
    found.ok_or_else(|| {
        let (what, device) = match data_seen {
            false => ("data", &spec.data),
            true => ("hash tree", &spec.hash),
        };
        InitError::NoDevice {
            what,
            device: describe(device),
            secs: DEVICE_WAIT.as_secs(),
        }
    })
}

fn describe(device: &Device) -> String {
    match device {
        Device::Uuid(u) => format!("UUID {u}"),
        Device::Path(p) => p.display().to_string(),
    }
}

fn resolve(device: &Device, seen: &BTreeMap<String, PathBuf>) -> Option<PathBuf> {
    match device {
        Device::Uuid(u) => seen.get(u).cloned(),
        Device::Path(p) => p.exists().then(|| p.clone()),
    }
}

/// UUID → device node for every block device whose first bytes are an erofs or verity
/// superblock. Devices that cannot be read (an empty drive) are skipped.
fn scan_block_devices() -> BTreeMap<String, PathBuf> {
    let mut found = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir("/sys/class/block") else {
        return found;
    };
    for entry in entries.flatten() {
        let node = Path::new("/dev").join(entry.file_name());
        let Some(head) = probe::read_head(&node) else {
            continue;
        };
        if let Some(sig @ (Signature::Erofs(_) | Signature::Verity(_))) = probe::identify(&head) {
            found.insert(sig.uuid(), node);
        }
    }
    found
}

fn dev_num(path: &Path) -> Result<DevNum, InitError> {
    DevNum::of(path).map_err(|source| InitError::Read {
        path: path.to_owned(),
        source,
    })
}

/// The read-only verity device `root` over `data`, checked against `hash` and the root
/// hash; returns its device node.
fn open_verity(spec: &RootSpec, data: &Path, hash: &Path) -> Result<PathBuf, InitError> {
    let read_err = |source| InitError::Read {
        path: hash.to_owned(),
        source,
    };
    let mut head = vec![0u8; verity::SUPERBLOCK_LEN];
    std::fs::File::open(hash)
        .and_then(|mut f| f.read_exact(&mut head))
        .map_err(read_err)?;
    let superblock = verity::parse(&head).map_err(|source| InitError::Verity {
        device: hash.to_owned(),
        source,
    })?;
    let table = superblock.table(dev_num(data)?, dev_num(hash)?, &spec.root_hash);
    let uuid = format!("CRYPT-VERITY-{}-{ROOT_NAME}", hex::encode(&head[16..32]));
    let control = Control::open(Path::new("/dev/mapper/control")).map_err(InitError::Dm)?;
    let dev = control
        .create_readonly(ROOT_NAME, &uuid, "verity", &table)
        .map_err(InitError::Dm)?;
    make_node(ROOT_NAME, dev).map_err(|(path, source)| InitError::Node { path, source })
}

/// `/dev/mapper/<name>` for a device-mapper device: devtmpfs names it dm-N; systemd, the
/// root's fstab and its units know it by name.
///
/// In the root (`sovereign-init open-state`, first boot) udev may have linked the name to the
/// device already (dmsetup's rules): a name that is there and is this device is kept.
pub(crate) fn make_node(name: &str, dev: DevNum) -> Result<PathBuf, (PathBuf, io::Error)> {
    make_node_in(Path::new("/dev/mapper"), name, dev)
}

fn make_node_in(dir: &Path, name: &str, dev: DevNum) -> Result<PathBuf, (PathBuf, io::Error)> {
    let node = dir.join(name);
    let made = rustix::fs::mknodat(
        rustix::fs::CWD,
        &node,
        rustix::fs::FileType::BlockDevice,
        rustix::fs::Mode::from_raw_mode(0o600),
        rustix::fs::makedev(dev.major, dev.minor),
    );
    match made {
        Ok(()) => Ok(node),
        Err(rustix::io::Errno::EXIST) if DevNum::of(&node).ok() == Some(dev) => Ok(node),
        Err(e) => Err((node, e.into())),
    }
}

fn mount_root(device: &Path, fstype: &str) -> Result<(), InitError> {
    mount_one(
        &device.display().to_string(),
        SYSROOT,
        fstype,
        MountFlags::RDONLY,
    )?;
    let init = Path::new(SYSROOT).join(ROOT_INIT.trim_start_matches('/'));
    // `exists` follows the symlink (/sbin/init → systemd) as exec will.
    if !init.exists() {
        return Err(InitError::NoInit(ROOT_INIT));
    }
    Ok(())
}

/// What systemd's and util-linux's switch_root do: move the kernel filesystems into the new
/// root, free the initramfs (it is memory), make the new root `/`, and exec its init with
/// the arguments the kernel gave this one.
fn switch_root(new_root: &Path) -> Result<Infallible, InitError> {
    let step = |step| move |source: io::Error| InitError::Switch { step, source };
    for dir in ["dev", "proc", "sys"] {
        mount_move(Path::new("/").join(dir), new_root.join(dir))
            .map_err(|e| step("moving /dev, /proc and /sys")(e.into()))?;
    }
    let root_dev = std::fs::symlink_metadata("/")
        .map_err(step("reading the initramfs"))?
        .dev();
    free_tree(Path::new("/"), root_dev);
    std::env::set_current_dir(new_root).map_err(step("entering the root"))?;
    mount_move(".", "/").map_err(|e| step("moving the root to /")(e.into()))?;
    rustix::process::chroot(".").map_err(|e| step("chroot")(e.into()))?;
    std::env::set_current_dir("/").map_err(step("entering the root"))?;
    let error = std::process::Command::new(ROOT_INIT)
        .args(std::env::args_os().skip(1))
        .exec();
    Err(step("starting /sbin/init")(error))
}

/// Removes the initramfs's files, staying on its filesystem (the new root, mounted inside
/// it, is another). Best effort: what cannot be removed only costs memory.
fn free_tree(dir: &Path, dev: u64) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.dev() != dev {
            continue;
        }
        if meta.is_dir() {
            free_tree(&path, dev);
            let _ = std::fs::remove_dir(&path);
        } else {
            let _ = std::fs::remove_file(&path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A name already there for the same device (udev's link, in the root) is kept; one for
    /// another device is an error.
    #[test]
    fn a_device_name_is_made_once_and_kept_for_the_same_device() {
        let dir = tempfile::tempdir().unwrap();
        let dev = DevNum {
            major: 254,
            minor: 77,
        };
        let node = make_node_in(dir.path(), "sovstate", dev).unwrap();
        assert_eq!(DevNum::of(&node).unwrap(), dev);
        assert_eq!(make_node_in(dir.path(), "sovstate", dev).unwrap(), node);
        let other = DevNum {
            major: 254,
            minor: 78,
        };
        let (path, err) = make_node_in(dir.path(), "sovstate", other).unwrap_err();
        assert_eq!((path, err.kind()), (node, io::ErrorKind::AlreadyExists));
    }
}
