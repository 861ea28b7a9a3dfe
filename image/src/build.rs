//! `image build`: from the lock, the production `hostd` and the files in `image/files/`, the
//! four outputs a node boots and a verifier trusts:
//!
//! * `uki.efi` — systemd-stub + kernel + os-release + command line + initrd;
//! * `root.erofs` and `root.verity` — the read-only root and its dm-verity hash tree, whose
//!   root hash is in the UKI's (measured) command line;
//! * `esp.img` — a FAT ESP holding the UKI as the removable-media boot path;
//! * `manifest.json` — the signed reference manifest: predicted PCR 11, the hostd digest, and
//!   as components the UKI section digests and the verity root hash.
//!
//! Every step is deterministic for a given lock, `SOURCE_DATE_EPOCH` and hostd binary; the
//! table of what that took is in docs/image.md.

use crate::apt;
use crate::cpio::{Archive, Entry};
use crate::lock::{Lock, Part};
use crate::measure::{predict_pcr11, Section};
use crate::modules;
use crate::rootfs::{self, io, run, write_file, TreeError};
use attest::manifest::{ImageManifest, SignedImageManifest};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The image's name in manifests and os-release.
pub const IMAGE_NAME: &str = "sovereign-host";

/// What to build.
#[derive(Debug, Clone)]
pub struct BuildSpec {
    /// The package lock.
    pub lock: Lock,
    /// Folder of downloaded `.deb`s (kept between builds).
    pub cache: PathBuf,
    /// Output folder (created; must be empty or absent).
    pub out: PathBuf,
    /// The production hostd binary (`--no-default-features`, release).
    pub hostd: PathBuf,
    /// The initrd's init, `sovereign-init` (its debug information is stripped).
    pub init: PathBuf,
    /// `image/files`.
    pub files: PathBuf,
    /// `SOURCE_DATE_EPOCH`.
    pub epoch: u64,
    /// Image version.
    pub version: String,
    /// The test variant: the simulated NVML library to install, and the manifest says so.
    pub simulated_nvml: Option<PathBuf>,
    /// The block device of the state disk (a stable `/dev/disk/by-id/…` path).
    pub state_device: String,
    /// Extra kernel command line (appended after the image's own; still measured).
    pub extra_cmdline: String,
}

/// Why a build failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// Fetching or unpacking packages.
    #[error(transparent)]
    Apt(#[from] apt::AptError),
    /// Making the tree.
    #[error(transparent)]
    Tree(#[from] TreeError),
    /// Assembling the UKI.
    #[error("assembling the UKI")]
    Uki(#[from] crate::uki::UkiError),
    /// The initrd.
    #[error("writing the initrd")]
    Cpio(#[from] crate::cpio::CpioError),
    /// Cutting the initrd down to what mounting the root takes.
    #[error("cutting down the initrd")]
    Initrd(#[from] crate::initrd::InitrdError),
    /// Signing the manifest.
    #[error("signing the manifest")]
    Manifest(#[from] attest::manifest::ManifestError),
    /// The output folder holds something: a build never writes over earlier outputs.
    #[error("{} is not empty: give a new or empty output folder", out.display())]
    OutNotEmpty { out: PathBuf },
    /// The PE header's and the cpio's timestamps are 32-bit.
    #[error("SOURCE_DATE_EPOCH {epoch} is beyond 2106, which the UKI's and the initrd's 32-bit timestamps cannot hold")]
    EpochTooLate { epoch: u64 },
    /// The version goes into os-release, which the UKI carries and PCR 11 measures.
    #[error("--version {given:?}: use only 0-9, a-z, '.', '_' and '-' (os-release's VERSION_ID), at most 64 characters")]
    Version { given: String },
    /// The state disk's path goes into a unit's command line, where systemd expands `%`.
    #[error("--state-device {given:?}: give the disk's stable /dev path, one word of A-Z, a-z, 0-9 and . _ : / + - (e.g. /dev/disk/by-id/virtio-sovereign-state)")]
    StateDevice { given: String },
    /// A cpio name must be UTF-8 here (the archive is built from names as text).
    #[error("{}: a name that is not UTF-8 cannot go into the initrd", path.display())]
    NonUtf8Name { path: PathBuf },
    /// What Debian's e2fsprogs ships changed shape.
    #[error("{}: no base_features line to add ext4's encrypt feature to", path.display())]
    MkeConf { path: PathBuf },
    /// veritysetup's output changed shape.
    #[error("veritysetup format printed no root hash (its output: {output:?})")]
    VerityOutput { output: String },
}

/// Checks what the build writes into the image from its command line, before it downloads
/// or unpacks anything.
fn check_spec(spec: &BuildSpec) -> Result<u32, BuildError> {
    let version_ok = !spec.version.is_empty()
        && spec.version.len() <= 64
        && spec
            .version
            .bytes()
            .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase() || b"._-".contains(&b));
    if !version_ok {
        return Err(BuildError::Version {
            given: spec.version.clone(),
        });
    }
    check_state_device(&spec.state_device)?;
    u32::try_from(spec.epoch).map_err(|_| BuildError::EpochTooLate { epoch: spec.epoch })
}

fn check_state_device(device: &str) -> Result<(), BuildError> {
    let word = device
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._:/+-".contains(&b));
    if device.len() > "/dev/".len() && device.starts_with("/dev/") && word {
        Ok(())
    } else {
        Err(BuildError::StateDevice {
            given: device.to_owned(),
        })
    }
}

/// What a build produced.
#[derive(Debug, Clone)]
pub struct Built {
    /// `uki.efi`.
    pub uki: PathBuf,
    /// `esp.img`.
    pub esp: PathBuf,
    /// `root.erofs`.
    pub root: PathBuf,
    /// `root.verity`.
    pub verity: PathBuf,
    /// The manifest (unsigned form; `manifest.json` holds the signed one).
    pub manifest: ImageManifest,
    /// The kernel command line in the UKI.
    pub cmdline: String,
}

/// The UUIDs the build gives the root and its hash tree (fixed, so builds are reproducible;
/// the root hash, not these, is what protects the root).
const ROOT_UUID: &str = "5ce7a1e5-0000-4000-8000-000000000001";
const VERITY_UUID: &str = "5ce7a1e5-0000-4000-8000-000000000002";
/// dm-verity salt: fixed for reproducibility (the salt only defeats precomputation across
/// images; a public, per-image-name salt is what reproducible builds can offer).
const VERITY_SALT: &str = "736f7665726569676e2d686f73742f726f6f742f7665726974792f7631000000";

/// The hardened kernel command line (docs/image.md gives the reason for each word).
pub const HARDENING: &str = "lockdown=integrity module.sig_enforce=1 init_on_alloc=1 \
    init_on_free=1 slab_nomerge pti=on randomize_kstack_offset=on vsyscall=none debugfs=off \
    oops=panic panic=10";

/// Builds the image into `spec.out`.
pub fn build(spec: &BuildSpec) -> Result<Built, BuildError> {
    let epoch32 = check_spec(spec)?;
    // The build's files take their modes from the packages and from this code, never from
    // the builder's umask: under 077 the folders the build makes (and those dpkg-deb, cp and
    // depmod make) would be 0700, which changes the root hash, the initrd and so PCR 11: two
    // builders, two images. The umask is the process's; the build is its only work.
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o022));
    prepare_out(&spec.out)?;
    let built = build_into(spec, epoch32);
    if built.is_err() {
        discard(&spec.out);
    }
    built
}

/// What a build writes into its output folder ([`write_signed_manifest`] the last).
const OUTPUTS: [&str; 6] = [
    ".work",
    "uki.efi",
    "esp.img",
    "root.erofs",
    "root.verity",
    "manifest.json",
];

/// Removes what a failed build wrote into its output folder (which it found empty): no UKI
/// without a manifest is left to be mistaken for a release, none of the unpacked root's
/// gigabyte, and a rerun into the same folder can start. Best effort: the build's own error is
/// the one to report, and what could not be removed makes a rerun say the folder is not empty.
pub fn discard(out: &Path) {
    for name in OUTPUTS {
        let _ = rootfs::remove_any(&out.join(name));
    }
}

fn build_into(spec: &BuildSpec, epoch32: u32) -> Result<Built, BuildError> {
    let work = spec.out.join(".work");
    let debs = apt::fetch(&spec.lock, &spec.cache)?;
    let root = work.join("root");
    let stub_tree = work.join("stub");
    for (p, deb) in &debs {
        let dest = match p.part {
            Part::Image => &root,
            Part::Stub => &stub_tree,
        };
        std::fs::create_dir_all(dest).map_err(io(dest))?;
        apt::unpack(deb, dest)?;
    }
    let kernel = configure_root(spec, &root)?;
    let initrd = make_initrd(spec, &root, &work.join("initrd"), epoch32)?;
    let hostd_digest = apt::sha256_file(&root.join(HOSTD))?;
    let (root_img, verity_img, root_hash) = make_root(spec, &root)?;
    let cmdline = cmdline(spec, &hex::encode(root_hash));
    let osrel = os_release(spec);
    let stub_path = stub_tree.join("usr/lib/systemd/boot/efi/linuxx64.efi.stub");
    let stub = std::fs::read(&stub_path).map_err(|e| TreeError::Io {
        path: stub_path.clone(),
        source: e,
    })?;
    let sections: [(Section, &[u8]); 4] = [
        (Section::Osrel, osrel.as_bytes()),
        (Section::Cmdline, cmdline.as_bytes()),
        (Section::Linux, &kernel),
        (Section::Initrd, &initrd),
    ];
    let uki = crate::uki::assemble(&stub, &sections, epoch32)?;
    let uki_path = spec.out.join("uki.efi");
    std::fs::write(&uki_path, &uki).map_err(io(&uki_path))?;
    let esp = make_esp(spec, &uki_path)?;
    let manifest = manifest(spec, &sections, root_hash, &uki, hostd_digest)?;
    rootfs::remove_any(&work)?;
    Ok(Built {
        uki: uki_path,
        esp,
        root: root_img,
        verity: verity_img,
        manifest,
        cmdline,
    })
}

fn prepare_out(out: &Path) -> Result<(), BuildError> {
    if out.exists() {
        let mut entries = std::fs::read_dir(out).map_err(io(out))?;
        if entries.next().is_some() {
            return Err(BuildError::OutNotEmpty {
                out: out.to_owned(),
            });
        }
    }
    std::fs::create_dir_all(out).map_err(io(out))?;
    Ok(())
}

/// The root's configuration; returns the kernel image (taken out of `/boot`).
fn configure_root(spec: &BuildSpec, root: &Path) -> Result<Vec<u8>, BuildError> {
    rootfs::merge_usr(root)?;
    let kernel = take_kernel(root)?;
    rootfs::leave_out(root)?;
    install_files(spec, root)?;
    write_file(
        root,
        "usr/lib/sysusers.d/sovereign-udev.conf",
        UDEV_GROUPS.as_bytes(),
        0o644,
    )?;
    rootfs::sysusers(root, spec.epoch)?;
    rootfs::check_udev_groups(root)?;
    rootfs::ldconfig(root)?;
    set_up_units(root)?;
    what_packages_scripts_make(root)?;
    Ok(kernel)
}

/// Takes the kernel image out of `/boot` (it goes into the UKI) and cuts the kernel's modules
/// to the root's, with those loaded up front named for `systemd-modules-load`.
fn take_kernel(root: &Path) -> Result<Vec<u8>, BuildError> {
    let version = rootfs::kernel_version(root)?;
    let vmlinuz = root.join("boot").join(format!("vmlinuz-{version}"));
    let kernel = std::fs::read(&vmlinuz).map_err(io(&vmlinuz))?;
    rootfs::remove_any(&root.join("boot"))?;
    modules::keep_only(root, &version, modules::ROOT_MODULES)?;
    let preload = modules::ROOT_PRELOAD.join("\n") + "\n";
    write_file(
        root,
        "usr/lib/modules-load.d/50-sovereign.conf",
        preload.as_bytes(),
        0o644,
    )?;
    Ok(kernel)
}

/// The units the node starts, masks and boots to.
fn set_up_units(root: &Path) -> Result<(), BuildError> {
    rootfs::enable_units(
        root,
        &[
            "hostd.service",
            "nftables.service",
            "systemd-networkd.service",
        ],
    )?;
    // Enabling networkd enables its command-line generator too, but the uplink's
    // configuration is a file of the image, never the command line. logind (kept for the
    // power button) wants the DRM module loaded, for seats with displays the node has none of.
    rootfs::mask_units(
        root,
        &["systemd-network-generator.service", "modprobe@drm.service"],
    )?;
    // /tmp is a tmpfs (systemd's own unit, shipped but not enabled by Debian).
    let tmp_mount = read(&root.join("usr/share/systemd/tmp.mount"))?;
    write_file(root, "usr/lib/systemd/system/tmp.mount", &tmp_mount, 0o644)?;
    let wants = root.join("usr/lib/systemd/system/local-fs.target.wants/tmp.mount");
    std::fs::create_dir_all(wants.parent().unwrap_or(root)).map_err(io(&wants))?;
    std::os::unix::fs::symlink("../tmp.mount", &wants).map_err(io(&wants))?;
    // A server boots to multi-user.target; Debian's default is graphical.target, which only
    // adds a display manager the node does not have.
    let default = root.join("usr/lib/systemd/system/default.target");
    rootfs::remove_any(&default)?;
    std::os::unix::fs::symlink("multi-user.target", &default).map_err(io(&default))?;
    Ok(())
}

/// What base-files, systemd-sysv and systemd's scripts would have made (no maintainer script
/// runs): the mount points a read-only root needs, `/etc/mtab`, an empty machine-id and
/// `/sbin/init`.
fn what_packages_scripts_make(root: &Path) -> Result<(), BuildError> {
    for dir in [
        "dev", "proc", "sys", "run", "tmp", "var", "mnt", "root", "home", "srv",
    ] {
        let d = root.join(dir);
        std::fs::create_dir_all(&d).map_err(io(&d))?;
    }
    // root's home, as base-files makes it: nobody logs in, but nothing else may read it.
    let home = root.join("root");
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).map_err(io(&home))?;
    let mtab = root.join("etc/mtab");
    rootfs::remove_any(&mtab)?;
    std::os::unix::fs::symlink("../proc/self/mounts", &mtab).map_err(io(&mtab))?;
    write_file(root, "etc/machine-id", b"", 0o444)?;
    // What systemd-sysv would provide: the initrd switches root into /sbin/init.
    let init = root.join("usr/sbin/init");
    rootfs::remove_any(&init)?;
    std::os::unix::fs::symlink("../lib/systemd/systemd", &init).map_err(io(&init))?;
    Ok(())
}

/// The groups udev's rules give devices to, which Debian's udev makes in its maintainer
/// script (`addgroup --system`), not in a sysusers.d file: without them udevd warns of each
/// rule at every boot and leaves those devices to root's group.
const UDEV_GROUPS: &str = "# What udev's postinst makes (addgroup --system), for udev's rules.\n\
                           g input -\ng sgx -\ng kvm -\ng render -\n";

fn read(path: &Path) -> Result<Vec<u8>, TreeError> {
    std::fs::read(path).map_err(io(path))
}

/// Where the image has hostd.
const HOSTD: &str = "usr/bin/hostd";

/// Copies hostd into the root without its debug information, as the initrd's init is: the
/// node has no debugger to use it, and hostd hashes its own binary as it starts (the
/// attestation's `hostd` measurement), under emulation seconds of CPU for a debug build's
/// hundreds of megabytes. The manifest's digest is of the binary as installed.
fn install_hostd(spec: &BuildSpec, root: &Path) -> Result<(), BuildError> {
    Ok(rootfs::install_stripped(&spec.hostd, &root.join(HOSTD))?)
}

/// Where the root has `sovereign-init`, for its `pcrphase`, `open-state` and `provision`
/// modes.
const ROOT_INIT_COPY: &str = "usr/lib/sovereign-host/sovereign-init";

/// The units that measure the root's boot phases, with the phase each measures as it starts
/// and as it stops (systemd 252's).
const PCRPHASE_UNITS: [(&str, &str, &str); 2] = [
    ("systemd-pcrphase-sysinit.service", "sysinit", "final"),
    ("systemd-pcrphase.service", "ready", "shutdown"),
];

/// The root's boot phases are measured by `sovereign-init pcrphase`, as the initrd's are,
/// rather than by systemd-pcrphase: the same digests into the same PCR, without loading
/// systemd's shared library, the TPM software stack and OpenSSL at each phase (seconds of
/// the path to hostd under emulation). The units, their ordering and conditions stay
/// systemd's.
fn install_pcrphase(spec: &BuildSpec, root: &Path) -> Result<(), BuildError> {
    rootfs::install_stripped(&spec.init, &root.join(ROOT_INIT_COPY))?;
    for (unit, start, stop) in PCRPHASE_UNITS {
        let dropin = format!(
            "[Service]\nExecStart=\nExecStart=/{ROOT_INIT_COPY} pcrphase {start}\n\
             ExecStop=\nExecStop=/{ROOT_INIT_COPY} pcrphase {stop}\n"
        );
        write_file(
            root,
            &format!("usr/lib/systemd/system/{unit}.d/50-sovereign.conf"),
            dropin.as_bytes(),
            0o644,
        )?;
    }
    Ok(())
}

/// hostd, its units and the image's configuration files.
/// The files of `image/files/` and where the image has them (each 0644).
const IMAGE_FILES: &[(&str, &str)] = &[
    ("hostd.service", "usr/lib/systemd/system/hostd.service"),
    (
        "sovereign-provision.service",
        "usr/lib/systemd/system/sovereign-provision.service",
    ),
    ("nftables.conf", "etc/nftables.conf"),
    ("uplink.network", "etc/systemd/network/50-uplink.network"),
    (
        "journald.conf",
        "etc/systemd/journald.conf.d/50-sovereign.conf",
    ),
    ("sysctl.conf", "etc/sysctl.d/50-sovereign.conf"),
    ("nsswitch.conf", "etc/nsswitch.conf"),
    ("logind.conf", "etc/systemd/logind.conf.d/50-sovereign.conf"),
    (
        "logind-after-hostd.conf",
        "usr/lib/systemd/system/systemd-logind.service.d/50-sovereign.conf",
    ),
    (
        "udev-coldplug.conf",
        "usr/lib/systemd/system/systemd-udev-trigger.service.d/50-sovereign.conf",
    ),
];

fn install_files(spec: &BuildSpec, root: &Path) -> Result<(), BuildError> {
    install_hostd(spec, root)?;
    install_pcrphase(spec, root)?;
    for (name, at) in IMAGE_FILES {
        write_file(root, at, &read(&spec.files.join(name))?, 0o644)?;
    }
    // The node resolves no names. The file is there because each job gets its lease's own
    // resolv.conf bind-mounted over it, and a bind mount needs its target.
    write_file(
        root,
        "etc/resolv.conf",
        b"# This node resolves no names (hostd needs none); jobs see their lease's own file.
",
        0o644,
    )?;
    write_file(root, "etc/fstab", fstab().as_bytes(), 0o644)?;
    install_state_disk(spec, root)?;
    for unit in ["emergency.service", "rescue.service"] {
        write_file(
            root,
            &format!("usr/lib/systemd/system/{unit}.d/50-no-shell.conf"),
            NO_SHELL,
            0o644,
        )?;
    }
    write_file(
        root,
        "usr/lib/os-release",
        os_release(spec).as_bytes(),
        0o644,
    )?;
    rootfs::remove_any(&root.join("etc/os-release"))?;
    std::os::unix::fs::symlink("../usr/lib/os-release", root.join("etc/os-release"))
        .map_err(io(&root.join("etc/os-release")))?;
    enable_ext4_encryption(root)?;
    if let Some(lib) = &spec.simulated_nvml {
        write_file(
            root,
            "usr/lib/sovereign-host/libnvidia_ml_sim.so",
            &read(lib)?,
            0o644,
        )?;
        // One simulated H100 in confidential-computing mode, so its reports are appraised.
        write_file(
            root,
            "usr/lib/systemd/system/hostd.service.d/50-simulated-gpus.conf",
            b"[Service]\nEnvironment=NVML_SIM_GPUS=H100:1 NVML_SIM_CC=on\n",
            0o644,
        )?;
    }
    Ok(())
}

/// There is no shell to rescue into: a boot that fails says so on the console and powers off,
/// so that the operator's tooling (or a test) sees the failure instead of a hung machine.
const NO_SHELL: &[u8] =
    b"[Service]\nExecStart=\nExecStart=/usr/bin/systemctl --no-block poweroff\n";

/// The state disk gets the ext4 `encrypt` feature when systemd-makefs formats it, so leases'
/// scratch can be fscrypt-encrypted on it.
fn enable_ext4_encryption(root: &Path) -> Result<(), BuildError> {
    let path = root.join("etc/mke2fs.conf");
    let text = std::fs::read_to_string(&path).map_err(io(&path))?;
    let Some(at) = text.find("base_features = ") else {
        return Err(BuildError::MkeConf { path });
    };
    let end = at + text[at..].find('\n').unwrap_or(text.len() - at);
    let mut out = text.clone();
    out.insert_str(end, ",encrypt");
    write_file(root, "etc/mke2fs.conf", out.as_bytes(), 0o644)?;
    Ok(())
}

fn fstab() -> String {
    "# The root is the dm-verity device the initrd set up from the measured command line.\n\
     # /var is memory, and the sealed state disk is mounted at /var/lib/hostd: the initrd\n\
     # mounts both (sovereign-init), or on the first boot sovereign-state.service the disk.\n"
        .to_owned()
}

/// The sealed state disk. On the first boot the initrd (`sovereign-init`, told the disk by
/// the command line's `sovereign.state_disk=`) partitions the blank disk, makes the volume
/// (LUKS2 with a random volume key whose only keyslot's passphrase is sealed to the TPM under a
/// policy of PCRs 4, 11 and 12, ext4 inside) and mounts it; on every later boot it opens and mounts it.
/// `sovereign-state.service` does the same in the root where the initrd could not (a disk it
/// cannot name in sysfs, or one that showed late). Sealing and opening both see the same PCR 11
/// (the UKI's sections, `enter-initrd`, `leave-initrd`): under another image, or off this
/// node's TPM, the disk does not open.
fn install_state_disk(spec: &BuildSpec, root: &Path) -> Result<(), BuildError> {
    check_state_device(&spec.state_device)?;
    write_file(
        root,
        "usr/lib/systemd/system/sovereign-state.service",
        state_unit(&spec.state_device).as_bytes(),
        0o644,
    )?;
    Ok(())
}

/// `sovereign-state.service`: the state disk made or opened in the root, where the initrd left
/// it.
fn state_unit(device: &str) -> String {
    format!(
        "[Unit]\n\
         Description=Sealed state disk (first boot: partitioned, made as LUKS2 sealed to PCRs 4, 11 and 12, mounted)\n\
         Documentation=file:/usr/share/sovereign-host/docs/image.md\n\
         DefaultDependencies=no\n\
         Wants=systemd-udevd.service systemd-udev-trigger.service\n\
         After=systemd-udevd.service systemd-udev-trigger.service\n\
         Before=systemd-pcrphase-sysinit.service sysinit.target shutdown.target\n\
         Conflicts=shutdown.target\n\
         # The initrd made or opened the disk and mounted it on every boot where it could name\n\
         # the disk: then nothing here runs, and nothing waits for udev to announce the disk.\n\
         ConditionPathIsMountPoint=!/var/lib/hostd\n\
         \n\
         [Service]\n\
         Type=oneshot\n\
         RemainAfterExit=yes\n\
         ExecStart=/usr/bin/udevadm wait --timeout=120 {device}\n\
         # Partitions the disk if it is blank and makes the volume (its passphrase sealed to\n\
         # PCR 11 as it is now: this runs before the sysinit phase, so the initrd sees the same\n\
         # PCR 11 on later boots), or opens it as the initrd does; mounts it.\n\
         ExecStart=/{ROOT_INIT_COPY} open-state {device}\n",
    )
}

/// os-release of the image (also the UKI's `.osrel`).
fn os_release(spec: &BuildSpec) -> String {
    let variant = match spec.simulated_nvml {
        Some(_) => "VARIANT=\"test: simulated NVML library\"\nVARIANT_ID=simulated-gpus\n",
        None => "",
    };
    format!(
        "NAME=\"Sovereign Host\"\nID={IMAGE_NAME}\nID_LIKE=debian\nVERSION_ID={v}\n\
         PRETTY_NAME=\"Sovereign Host {v}\"\nIMAGE_ID={name}\nIMAGE_VERSION={v}\n{variant}",
        v = spec.version,
        name = manifest_name(spec),
    )
}

/// The manifest's image name: the test variant has its own, so it can never pass as the
/// production image.
pub fn manifest_name(spec: &BuildSpec) -> String {
    match spec.simulated_nvml {
        Some(_) => format!("{IMAGE_NAME}-simulated-gpus"),
        None => IMAGE_NAME.to_owned(),
    }
}

fn cmdline(spec: &BuildSpec, root_hash: &str) -> String {
    let mut c = format!(
        "console=ttyS0 roothash={root_hash} systemd.verity_root_data=/dev/disk/by-uuid/{ROOT_UUID} \
         systemd.verity_root_hash=/dev/disk/by-uuid/{VERITY_UUID} rootfstype=erofs ro \
         {HARDENING} quiet loglevel=3 systemd.show_status=error sovereign.state_disk={state}",
        state = spec.state_device
    );
    if !spec.extra_cmdline.is_empty() {
        c.push(' ');
        c.push_str(&spec.extra_cmdline);
    }
    c
}

/// The initrd: `sovereign-init` with the C library it links and the boot modules
/// (`crate::initrd`).
fn make_initrd(
    spec: &BuildSpec,
    root: &Path,
    tree: &Path,
    epoch: u32,
) -> Result<Vec<u8>, BuildError> {
    run(Command::new("cp").arg("-a").arg(root).arg(tree))?;
    let version = rootfs::kernel_version(tree)?;
    modules::keep_only(tree, &version, modules::INITRD_MODULES)?;
    crate::initrd::assemble(tree, &spec.init, modules::INITRD_MODULES)?;
    let mut archive = Archive::new();
    add_tree(&mut archive, tree, "")?;
    let cpio = archive.write(epoch);
    compress(&cpio, &spec.out.join(".work/initrd.cpio"))
}

fn add_tree(archive: &mut Archive, dir: &Path, prefix: &str) -> Result<(), BuildError> {
    for name in rootfs::sorted_entries(dir)? {
        let name = name
            .to_str()
            .ok_or_else(|| BuildError::NonUtf8Name {
                path: dir.join(&name),
            })?
            .to_owned();
        let path = dir.join(&name);
        let rel = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}/{name}")
        };
        let meta = std::fs::symlink_metadata(&path).map_err(io(&path))?;
        let mode = meta.permissions().mode() & 0o7777;
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&path).map_err(io(&path))?;
            let target = target
                .to_str()
                .ok_or_else(|| BuildError::NonUtf8Name { path: path.clone() })?;
            archive.add(
                &rel,
                Entry::Symlink {
                    target: target.to_owned(),
                },
            )?;
        } else if meta.is_dir() {
            archive.add(&rel, Entry::Dir { mode })?;
            add_tree(archive, &path, &rel)?;
        } else if meta.is_file() {
            archive.add(
                &rel,
                Entry::File {
                    mode,
                    data: read(&path)?,
                },
            )?;
        }
    }
    Ok(())
}

/// zstd, single-threaded and without a timestamp: the same input gives the same output.
fn compress(data: &[u8], scratch: &Path) -> Result<Vec<u8>, BuildError> {
    std::fs::write(scratch, data).map_err(io(scratch))?;
    let out = scratch.with_extension("cpio.zst");
    run(Command::new("zstd")
        .args(["-q", "-f", "-12", "-T1", "--no-progress"])
        .arg(scratch)
        .arg("-o")
        .arg(&out))?;
    Ok(read(&out)?)
}

/// erofs (lz4hc, every owner root, every time the epoch) and its dm-verity hash tree; returns
/// the two images and the root hash.
fn make_root(spec: &BuildSpec, root: &Path) -> Result<(PathBuf, PathBuf, [u8; 32]), BuildError> {
    let img = spec.out.join("root.erofs");
    let verity = spec.out.join("root.verity");
    run(Command::new("mkfs.erofs")
        .args(["-zlz4hc", "--all-root", "-x-1", "--quiet"])
        .arg(format!("-T{}", spec.epoch))
        .arg(format!("-U{ROOT_UUID}"))
        .arg(&img)
        .arg(root))?;
    let out = run(Command::new("veritysetup")
        .args(["format", "--salt", VERITY_SALT, "--uuid", VERITY_UUID])
        .arg(&img)
        .arg(&verity))?;
    let mut hash = [0u8; 32];
    out.lines()
        .find_map(|l| l.strip_prefix("Root hash:"))
        .and_then(|h| hex::decode_to_slice(h.trim(), &mut hash).ok())
        .ok_or_else(|| BuildError::VerityOutput {
            output: out.clone(),
        })?;
    Ok((img, verity, hash))
}

fn make_esp(spec: &BuildSpec, uki: &Path) -> Result<PathBuf, BuildError> {
    let esp = spec.out.join("esp.img");
    write_esp(uki, &esp, spec.epoch)?;
    Ok(esp)
}

/// Writes `esp`: a FAT ESP with `uki` at the removable-media path `EFI/BOOT/BOOTX64.EFI`,
/// every timestamp `epoch`.
pub fn write_esp(uki: &Path, esp: &Path, epoch: u64) -> Result<(), BuildError> {
    let size = std::fs::metadata(uki).map_err(io(uki))?.len();
    let kib = (size / 1024) * 12 / 10 + 4096;
    // `mcopy -m` keeps the file's own mtime: make it the epoch.
    let stamp = std::time::UNIX_EPOCH + std::time::Duration::from_secs(epoch);
    std::fs::File::options()
        .write(true)
        .open(uki)
        .and_then(|f| f.set_modified(stamp))
        .map_err(io(uki))?;
    rootfs::remove_any(esp)?;
    run(Command::new("mkfs.fat")
        .args(["-C", "-i", "5ce7a1e5", "--invariant", "-n", "SOVESP"])
        .arg(esp)
        .arg(kib.to_string()))?;
    let img = format!("{}", esp.display());
    let epoch = epoch.to_string();
    let mtools = |args: &[&str]| -> Result<(), BuildError> {
        run(Command::new(args[0])
            .env("SOURCE_DATE_EPOCH", &epoch)
            .env("MTOOLS_SKIP_CHECK", "1")
            .args(&args[1..]))?;
        Ok(())
    };
    mtools(&["mmd", "-i", &img, "::/EFI", "::/EFI/BOOT"])?;
    mtools(&[
        "mcopy",
        "-m",
        "-i",
        &img,
        &format!("{}", uki.display()),
        "::/EFI/BOOT/BOOTX64.EFI",
    ])?;
    Ok(())
}

fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

/// The reference manifest: what a verifier appraises (`pcr.11` after the `ready` phase, `pcr.12`
/// at zero, the EFI applications the firmware starts, the hostd binary) and, for people, what
/// those are made of.
fn manifest(
    spec: &BuildSpec,
    sections: &[(Section, &[u8])],
    root_hash: [u8; 32],
    uki: &[u8],
    hostd: [u8; 32],
) -> Result<ImageManifest, BuildError> {
    let [.., ready] = predict_pcr11(sections);
    let mut measurements = BTreeMap::new();
    measurements.insert("pcr.11".to_owned(), ready.pcr11);
    // Nothing of this image extends PCR 12: systemd-stub measures there only a command line
    // given in place of the UKI's (which it takes when Secure Boot is off), credentials and
    // system extensions, none of which the image has. Zero is its value on every boot of it.
    measurements.insert("pcr.12".to_owned(), [0u8; 32]);
    measurements.insert("hostd".to_owned(), hostd);
    let mut components = BTreeMap::new();
    for (s, data) in sections {
        components.insert(format!("uki{}", s.name()), sha256(data));
    }
    components.insert("uki".to_owned(), sha256(uki));
    // What the firmware measures into PCR 4 as it boots the image: the UKI, then the kernel
    // systemd-stub loads from its `.linux` section (each as its Authenticode digest).
    let kernel = sections
        .iter()
        .find(|(s, _)| *s == Section::Linux)
        .map(|(_, data)| *data)
        .unwrap_or_default();
    let apps = [
        crate::uki::authenticode_sha256(uki)?,
        crate::uki::authenticode_sha256(kernel)?,
    ];
    measurements.insert(
        attest::verifier::BOOT_APPLICATIONS.to_owned(),
        attest::verifier::boot_applications_digest(&apps),
    );
    components.insert("uki.authenticode".to_owned(), apps[0]);
    components.insert("uki.linux.authenticode".to_owned(), apps[1]);
    components.insert("verity.roothash".to_owned(), root_hash);
    Ok(ImageManifest {
        name: manifest_name(spec),
        version: spec.version.clone(),
        measurements,
        components,
    })
}

/// Signs and writes `manifest.json` next to the outputs.
pub fn write_signed_manifest(
    out: &Path,
    manifest: ImageManifest,
    key: &ed25519_dalek::SigningKey,
) -> Result<SignedImageManifest, BuildError> {
    let signed = manifest.sign(key)?;
    let path = out.join("manifest.json");
    std::fs::write(&path, signed.to_bytes()?).map_err(io(&path))?;
    Ok(signed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The initrd is told the state disk by the command line, as the root's unit is by its
    /// command; both make or open it with the same code.
    #[test]
    fn the_state_disk_is_the_one_the_initrd_makes() {
        let device = "/dev/disk/by-id/virtio-sovereign-state";
        let unit = state_unit(device);
        assert!(unit.contains("ConditionPathIsMountPoint=!/var/lib/hostd"));
        assert!(unit.contains(&format!(
            "ExecStart=/{ROOT_INIT_COPY} open-state {device}\n"
        )));
        let spec = BuildSpec {
            lock: crate::lock::Lock {
                packages: Vec::new(),
            },
            cache: PathBuf::new(),
            out: PathBuf::new(),
            hostd: PathBuf::new(),
            init: PathBuf::new(),
            files: PathBuf::new(),
            epoch: 0,
            version: "0".into(),
            simulated_nvml: None,
            state_device: device.to_owned(),
            extra_cmdline: String::new(),
        };
        let root = tempfile::tempdir().unwrap();
        install_state_disk(&spec, root.path()).unwrap();
        assert!(root
            .path()
            .join("usr/lib/systemd/system/sovereign-state.service")
            .exists());
        for bad in [
            "/dev/disk/by-id/a b",
            "vdb",
            "",
            "/dev/",
            "/dev/vd%b",
            "/dev/vdb\n",
        ] {
            let spec = BuildSpec {
                state_device: bad.to_owned(),
                ..spec.clone()
            };
            assert!(
                matches!(
                    install_state_disk(&spec, Path::new("/nonexistent")),
                    Err(BuildError::StateDevice { .. })
                ),
                "{bad:?}"
            );
        }
        let line = cmdline(&spec, &"ab".repeat(32));
        let parsed = sovereign_init::cmdline::parse(&line).unwrap();
        assert_eq!(parsed.state_disk.as_deref(), Some(device));
    }

    /// Every file of `image/files/` goes into the image, each once.
    #[test]
    fn every_image_file_is_installed() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("files");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        files.sort();
        let mut installed: Vec<String> = IMAGE_FILES.iter().map(|(f, _)| f.to_string()).collect();
        installed.sort();
        assert_eq!(files, installed);
    }

    /// The root's phases measured in place of systemd-pcrphase are the ones the prediction
    /// has, and ones `sovereign-init pcrphase` accepts.
    #[test]
    fn the_pcrphase_units_measure_the_predicted_phases() {
        let roots = sovereign_init::phase::ROOT_PHASES;
        for (_, start, stop) in PCRPHASE_UNITS {
            assert!(roots.contains(&start) && roots.contains(&stop));
        }
        let started: Vec<&str> = PCRPHASE_UNITS.iter().map(|(_, s, _)| *s).collect();
        assert_eq!(started, crate::measure::BOOT_PHASES[2..]);
    }

    /// The provisioning unit (a file of the image, not written here) runs the root's copy of
    /// `sovereign-init`, and only while the state disk lacks the config it copies.
    #[test]
    fn the_provisioning_unit_runs_the_roots_sovereign_init() {
        let unit = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("files/sovereign-provision.service"),
        )
        .unwrap();
        assert!(
            unit.contains(&format!("\nExecStart=/{ROOT_INIT_COPY} provision\n")),
            "{unit}"
        );
        use sovereign_init::provision::{CONFIG, PROVISIONED};
        assert!(unit.contains(&format!(
            "\nConditionPathExists=!/var/lib/hostd/{PROVISIONED}/{CONFIG}\n"
        )));
    }
}
