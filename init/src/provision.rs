//! The node's own material, copied once from its provisioning disk onto its state disk.
//!
//! The image is the same for every node; what is a node's own (API certificate and key, node
//! key, enrollment, config, signed policy) comes on a small ext4 disk labelled [`LABEL`] whose
//! `node/` folder is copied to `/var/lib/hostd/provisioned` on the first boot (docs/image.md).
//! The initrd does it right after it made the state disk, when it sees the provisioning disk
//! (a virtio or NVMe disk, probed before the initrd looks); otherwise the root's
//! `sovereign-provision.service` does it with `sovereign-init provision`, waiting for the disk
//! (virtual media on a BMC may show up late). One process either way: under emulation, the
//! eight programs the unit ran before (mount, cp, sync, mv, …) cost the first boot about 2 s.
//!
//! The folder appears complete or not at all: the copy goes to `provisioned.new`, every file
//! and folder is synced, and only then is it renamed (a power cut seconds after a first boot
//! once left empty files behind a completed rename: ext4 writes file data late).
//!
//! What lands is root's alone (owner 0:0, files 0600, folders 0700), whatever the disk says:
//! `image provision` copies with the operator's uid (often 1000), and on the node tenants'
//! jobs run as uids from 1000. The state disk is hostd's, which runs as root.

use crate::probe;
use rustix::mount::{mount, unmount, MountFlags, UnmountFlags};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The file system label the operator's provisioning disk carries (`image provision`).
pub const LABEL: &str = "SOVPROVISION";
/// The folder on the provisioning disk that is copied.
pub const NODE_DIR: &str = "node";
/// Where, in the state folder, the copy lands.
pub const PROVISIONED: &str = "provisioned";
/// The file whose presence says the node is provisioned (hostd's config).
pub const CONFIG: &str = "hostd.toml";

/// Why the node's material could not be copied.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProvisionError {
    /// No disk with the label appeared.
    #[error("no disk labelled {LABEL} appeared within {secs} s: attach the node's provisioning disk (image provision) for its first boot")]
    NoDisk {
        /// How long it was waited for.
        secs: u64,
    },
    /// More than one disk has the label: which one is the node's is not for the node to guess.
    #[error(
        "both {first} and {second} are labelled {LABEL}: attach only this node's provisioning disk"
    )]
    Ambiguous {
        /// One disk.
        first: PathBuf,
        /// Another.
        second: PathBuf,
    },
    /// The disk could not be mounted or unmounted.
    #[error("mounting {device} on {target}")]
    Mount {
        /// The disk.
        device: PathBuf,
        /// Where.
        target: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The disk has no `node/` folder.
    #[error("the provisioning disk {device} has no {NODE_DIR}/ folder")]
    NoNodeFolder {
        /// The disk.
        device: PathBuf,
    },
    /// Something on the disk is neither a file nor a folder (a link, a device node, …).
    #[error(
        "{path} on the provisioning disk is neither a file nor a folder: only those are copied"
    )]
    NotCopied {
        /// What it is, on the mounted disk.
        path: PathBuf,
    },
    /// The state disk has a `provisioned/` folder without the node's config: it may hold
    /// hostd's state, so it is not replaced, and nothing is copied beside it.
    #[error(
        "{path} exists but has no {CONFIG}: it is not replaced; move it away to provision \
         this node again"
    )]
    ProvisionedExists {
        /// The folder.
        path: PathBuf,
    },
    /// A file could not be read.
    #[error("reading {path}")]
    Read {
        /// The file or folder.
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A file could not be written, synced or renamed.
    #[error("writing {path}")]
    Write {
        /// The file or folder.
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// What became of the provisioning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Provisioned {
    /// The state disk already has the node's config: nothing was read.
    Already,
    /// No provisioning disk was there (the initrd leaves it to the root).
    NoDisk,
    /// The disk's `node/` folder was copied: `files` files.
    Copied {
        /// The provisioning disk.
        device: PathBuf,
        /// How many files.
        files: usize,
    },
}

impl std::fmt::Display for Provisioned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Provisioned::Already => write!(f, "the state disk is provisioned already"),
            Provisioned::NoDisk => write!(
                f,
                "no disk labelled {LABEL} yet: sovereign-provision.service will wait for it"
            ),
            Provisioned::Copied { device, files } => write!(
                f,
                "provisioned: {files} files of {} copied onto the state disk",
                device.display()
            ),
        }
    }
}

/// Where the state disk (`state`, `/var/lib/hostd`) is, where to mount the provisioning disk
/// (`mount_at`), and where the block devices are listed (`/sys/class/block`) and named
/// (`/dev`).
#[derive(Debug, Clone)]
pub struct Places {
    /// The mounted state disk.
    pub state: PathBuf,
    /// An empty folder to mount the provisioning disk on (made if missing).
    pub mount_at: PathBuf,
    /// sysfs's block class.
    pub class: PathBuf,
    /// The device nodes.
    pub dev: PathBuf,
}

impl Places {
    /// The places of a root mounted at `root` (`/sysroot` in the initrd, `/` after it), with
    /// the disk mounted at `mount_at` and the kernel's own sysfs and devtmpfs.
    pub fn in_root(root: &Path, mount_at: &str) -> Places {
        Places {
            state: root.join(crate::state::STATE_DIR),
            mount_at: PathBuf::from(mount_at),
            class: PathBuf::from("/sys/class/block"),
            dev: PathBuf::from("/dev"),
        }
    }
}

/// Copies the provisioning disk's `node/` folder onto the state disk unless the state disk
/// has the node's config already. Waits up to `wait` for the disk; with a zero `wait` (the
/// initrd), no disk is [`Provisioned::NoDisk`], after a wait it is an error.
pub fn provision(places: &Places, wait: Duration) -> Result<Provisioned, ProvisionError> {
    if places.state.join(PROVISIONED).join(CONFIG).exists() {
        return Ok(Provisioned::Already);
    }
    let found = crate::poll::until(wait, || find_disk(&places.class, &places.dev).transpose());
    let device = match found.transpose()? {
        Some(device) => device,
        None if wait.is_zero() => return Ok(Provisioned::NoDisk),
        None => {
            return Err(ProvisionError::NoDisk {
                secs: wait.as_secs(),
            })
        }
    };
    let files = copy_from_disk(&device, places)?;
    Ok(Provisioned::Copied { device, files })
}

/// The one disk or partition under `class` whose ext4 label is [`LABEL`], as its node in
/// `dev`; none if there is none yet.
pub fn find_disk(class: &Path, dev: &Path) -> Result<Option<PathBuf>, ProvisionError> {
    let Ok(entries) = fs::read_dir(class) else {
        return Ok(None);
    };
    let mut names: Vec<String> = entries
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    let mut found: Option<PathBuf> = None;
    for name in names {
        let node = dev.join(&name);
        if suspended(&class.join(&name)) || !has_label(&node) {
            continue;
        }
        if let Some(first) = found {
            return Err(ProvisionError::Ambiguous {
                first,
                second: node,
            });
        }
        found = Some(node);
    }
    Ok(found)
}

/// Whether `sys` (a block device's sysfs folder) is a suspended device-mapper device, whose
/// reads would wait until it is resumed (libblkid passes over these too).
fn suspended(sys: &Path) -> bool {
    fs::read_to_string(sys.join("dm/suspended")).is_ok_and(|s| s.trim() == "1")
}

/// Whether the device's ext4 superblock carries [`LABEL`]; false for what cannot be read.
fn has_label(node: &Path) -> bool {
    probe::read_head(node).is_some_and(|head| probe::ext4_label(&head) == Some(LABEL.as_bytes()))
}

/// Mounts `device` read-only, copies its `node/` folder, unmounts it (whatever the copy did).
fn copy_from_disk(device: &Path, places: &Places) -> Result<usize, ProvisionError> {
    let target = &places.mount_at;
    let mount_err = |source: io::Error| ProvisionError::Mount {
        device: device.to_owned(),
        target: target.clone(),
        source,
    };
    fs::create_dir_all(target).map_err(mount_err)?;
    let flags = MountFlags::RDONLY | MountFlags::NODEV | MountFlags::NOSUID | MountFlags::NOEXEC;
    mount(device, target, "ext4", flags, None).map_err(|e| mount_err(e.into()))?;
    let copied = copy_node_folder(device, &target.join(NODE_DIR), &places.state);
    let unmounted = unmount(target, UnmountFlags::empty()).map_err(|e| mount_err(e.into()));
    let files = copied?;
    unmounted?;
    Ok(files)
}

/// Copies `from` (the mounted disk's `node/`) to `<state>/provisioned` through
/// `provisioned.new`, synced before the rename and after it. An existing `provisioned/` is
/// refused before anything is copied: the rename could not replace it, and a staging copy of
/// the node's keys would be left behind.
fn copy_node_folder(device: &Path, from: &Path, state: &Path) -> Result<usize, ProvisionError> {
    if !from.is_dir() {
        return Err(ProvisionError::NoNodeFolder {
            device: device.to_owned(),
        });
    }
    let staging = state.join(format!("{PROVISIONED}.new"));
    if staging.exists() {
        // A copy a power cut interrupted: keys nobody will use, removed in any case.
        fs::remove_dir_all(&staging).map_err(write_err(&staging))?;
    }
    let done = state.join(PROVISIONED);
    if fs::symlink_metadata(&done).is_ok() {
        return Err(ProvisionError::ProvisionedExists { path: done });
    }
    let files = copy_tree(from, &staging)?;
    fs::rename(&staging, &done).map_err(write_err(&done))?;
    sync_dir(state)?;
    Ok(files)
}

/// Copies the folder `from` to the new folder `to`, syncing each file and folder; returns the
/// number of files. Every folder is root's, mode 0700 from its creation, whatever the disk
/// says (see the module documentation).
fn copy_tree(from: &Path, to: &Path) -> Result<usize, ProvisionError> {
    fs::DirBuilder::new()
        .mode(DIR_MODE)
        .create(to)
        .map_err(write_err(to))?;
    let mut entries: Vec<_> = fs::read_dir(from)
        .map_err(read_err(from))?
        .collect::<Result<_, _>>()
        .map_err(read_err(from))?;
    entries.sort_by_key(|e| e.file_name());
    let mut files = 0;
    for entry in entries {
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type().map_err(read_err(&src))?;
        if kind.is_dir() {
            files += copy_tree(&src, &dst)?;
        } else if kind.is_file() {
            copy_file(&src, &dst)?;
            files += 1;
        } else {
            return Err(ProvisionError::NotCopied { path: src });
        }
    }
    let dir = File::open(to).map_err(write_err(to))?;
    make_roots(&dir, DIR_MODE, to)?;
    dir.sync_all().map_err(write_err(to))?;
    Ok(files)
}

/// Copies one file's contents into the new file `dst`, root's and mode 0600 whatever the
/// source's owner and mode (see the module documentation), and syncs it.
fn copy_file(src: &Path, dst: &Path) -> Result<(), ProvisionError> {
    let mut input = File::open(src).map_err(read_err(src))?;
    let mut output = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .open(dst)
        .map_err(write_err(dst))?;
    io::copy(&mut input, &mut output).map_err(write_err(dst))?;
    make_roots(&output, FILE_MODE, dst)?;
    output.sync_all().map_err(write_err(dst))
}

/// Files copied onto the state disk: read and written by root (hostd) alone.
const FILE_MODE: u32 = 0o600;
/// Folders copied onto the state disk: entered by root alone.
const DIR_MODE: u32 = 0o700;

/// Owner 0:0 and `mode`, set on the open file: the creating mode is masked by the umask, and
/// a process not running as root would otherwise leave its own uid on the node's keys.
fn make_roots(file: &File, mode: u32, path: &Path) -> Result<(), ProvisionError> {
    std::os::unix::fs::fchown(file, Some(0), Some(0)).map_err(write_err(path))?;
    file.set_permissions(fs::Permissions::from_mode(mode))
        .map_err(write_err(path))
}

fn sync_dir(dir: &Path) -> Result<(), ProvisionError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(write_err(dir))
}

fn read_err(path: &Path) -> impl FnOnce(io::Error) -> ProvisionError {
    let path = path.to_owned();
    move |source| ProvisionError::Read { path, source }
}

fn write_err(path: &Path) -> impl FnOnce(io::Error) -> ProvisionError {
    let path = path.to_owned();
    move |source| ProvisionError::Write { path, source }
}

#[cfg(test)]
mod tests;
