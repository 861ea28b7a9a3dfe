//! The root file system tree: the locked packages unpacked, then the few effects their
//! maintainer scripts would have had, done explicitly (merged `/usr`, users, the linker cache,
//! module dependencies, unit enablement), then what the image leaves out removed.
//!
//! Everything here works on a folder of the build host as an unprivileged tree; nothing runs
//! inside it (no chroot), so no package script can run and nothing depends on the host's own
//! configuration beyond the tools named in docs/image.md.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Why the tree could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TreeError {
    /// File system error.
    #[error("{path}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A tool failed.
    #[error(transparent)]
    Tool(#[from] crate::tool::ToolError),
    /// The packages did not give what the image needs.
    #[error("the unpacked packages lack {0}")]
    Missing(String),
    /// A module the image's lists name is neither a module file nor built into the kernel:
    /// a typo, or a module renamed in the kernel the lock now pins.
    #[error("kernel {version} has no module {name} (neither in modules.dep nor in modules.builtin): correct the list in image/src/modules.rs")]
    UnknownModule { name: String, version: String },
    /// The kernel's modules are compressed; the initrd loads plain `.ko` files.
    #[error("kernel {version} ships compressed modules ({path}); sovereign-init loads plain .ko files: decompress them at build time before this kernel is used")]
    CompressedModule { path: String, version: String },
}

pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> TreeError + '_ {
    move |source| TreeError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Runs a tool to completion (see [`crate::tool::run`]).
pub(crate) fn run(cmd: &mut Command) -> Result<String, TreeError> {
    Ok(crate::tool::run(cmd)?)
}

/// Copies `program` to `dest` (its folder made if missing) without its debug information,
/// mode 0755: what the node runs needs no debugger's data, and hostd hashes its own binary as
/// it starts. `objcopy --strip-debug` keeps the symbols, and its output is deterministic.
pub(crate) fn install_stripped(program: &Path, dest: &Path) -> Result<(), TreeError> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(dir) = dest.parent() {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
    }
    run(Command::new("objcopy")
        .arg("--strip-debug")
        .arg(program)
        .arg(dest))?;
    std::fs::set_permissions(dest, std::fs::Permissions::from_mode(0o755)).map_err(io(dest))
}

/// The top-level folders Debian bookworm packages still ship outside `/usr`: merged into
/// `/usr` and replaced by links, as `usrmerge` does on an installed system.
const MERGED: [&str; 6] = ["bin", "sbin", "lib", "lib32", "lib64", "libx32"];

/// Moves `root/<d>` into `root/usr/<d>` for every merged folder and links `<d>` → `usr/<d>`.
pub fn merge_usr(root: &Path) -> Result<(), TreeError> {
    for d in MERGED {
        let top = root.join(d);
        let usr = root.join("usr").join(d);
        match std::fs::symlink_metadata(&top) {
            Ok(m) if m.is_dir() => {
                move_into(&top, &usr)?;
                std::fs::remove_dir(&top).map_err(io(&top))?;
            }
            Ok(_) => continue,
            Err(_) if !usr.exists() => continue,
            Err(_) => {}
        }
        std::os::unix::fs::symlink(format!("usr/{d}"), &top).map_err(io(&top))?;
    }
    Ok(())
}

/// Moves every entry of `from` into `to`, merging folders that exist in both.
fn move_into(from: &Path, to: &Path) -> Result<(), TreeError> {
    std::fs::create_dir_all(to).map_err(io(to))?;
    for entry in sorted_entries(from)? {
        let src = from.join(&entry);
        let dst = to.join(&entry);
        let src_dir = std::fs::symlink_metadata(&src).map_err(io(&src))?.is_dir();
        let dst_meta = std::fs::symlink_metadata(&dst).ok();
        match dst_meta {
            Some(m) if m.is_dir() && src_dir => {
                move_into(&src, &dst)?;
                std::fs::remove_dir(&src).map_err(io(&src))?;
            }
            Some(_) => {
                // The /usr copy wins, as in usrmerge: both come from the same packages.
                remove_any(&src)?;
            }
            None => std::fs::rename(&src, &dst).map_err(io(&dst))?,
        }
    }
    Ok(())
}

/// The names in a folder, sorted (the order never depends on the file system).
pub fn sorted_entries(dir: &Path) -> Result<Vec<std::ffi::OsString>, TreeError> {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .map_err(io(dir))?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<Result<_, _>>()
        .map_err(io(dir))?;
    names.sort();
    Ok(names)
}

/// Removes a file, link or whole folder; absent is fine.
pub fn remove_any(path: &Path) -> Result<(), TreeError> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path).map_err(io(path)),
        Ok(_) => std::fs::remove_file(path).map_err(io(path)),
        Err(_) => Ok(()),
    }
}

/// Writes a file (creating parents) with a mode.
pub fn write_file(root: &Path, rel: &str, data: &[u8], mode: u32) -> Result<(), TreeError> {
    use std::os::unix::fs::PermissionsExt;
    let path = root.join(rel);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(io(parent))?;
    }
    remove_any(&path)?;
    std::fs::write(&path, data).map_err(io(&path))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).map_err(io(&path))
}

/// The one kernel version the tree holds (`usr/lib/modules/<version>`).
pub fn kernel_version(root: &Path) -> Result<String, TreeError> {
    let dir = root.join("usr/lib/modules");
    let names = sorted_entries(&dir)?;
    match &names[..] {
        [one] => one
            .to_str()
            .map(str::to_owned)
            .ok_or_else(|| TreeError::Missing("a UTF-8 kernel version".into())),
        _ => Err(TreeError::Missing(format!(
            "exactly one kernel in usr/lib/modules (found {})",
            names.len()
        ))),
    }
}

/// Paths (relative, globs ending in `/` mean "the whole folder") the image does not carry:
/// documentation, translations, and what only an interactive or package-managed system uses.
pub const LEFT_OUT: &[&str] = &[
    "usr/share/doc/",
    "usr/share/man/",
    "usr/share/info/",
    "usr/share/locale/",
    "usr/share/lintian/",
    "usr/share/bug/",
    "usr/share/bash-completion/",
    "usr/share/zsh/",
    "usr/share/fish/",
    "usr/share/initramfs-tools/",
    "usr/lib/kernel/",
    "etc/kernel/",
    "var/lib/dpkg/",
    "var/cache/",
    "var/log/",
    // No login of any kind: no getty is ever started, and nothing offers a console prompt.
    "usr/lib/systemd/system-generators/systemd-getty-generator",
    "usr/lib/systemd/system/getty@.service",
    "usr/lib/systemd/system/serial-getty@.service",
    "usr/lib/systemd/system/console-getty.service",
    "usr/lib/systemd/system/container-getty@.service",
    "usr/lib/systemd/system/getty.target",
    "usr/lib/systemd/system/getty-static.service",
    "usr/lib/systemd/system/multi-user.target.wants/getty.target",
    "usr/lib/systemd/system/autovt@.service",
    "usr/sbin/sulogin",
    "usr/bin/login",
    "usr/sbin/agetty",
    "usr/bin/su",
    // udev reads only a compiled hwdb.bin, which nothing here compiles: the sources are dead
    // weight (8.8 MB, in the initrd too).
    "usr/lib/udev/hwdb.d/",
    // udev rules and helpers for what a headless server has no use for (sound, cameras,
    // joysticks, mice and touchpads, input and video naming, FIDO keys, CD-ROMs, tapes, MTD
    // flash, USB autosuspend, btrfs, seats and their access lists, memory DIMM probing, the
    // e2scrub timer): udevd parses every rule at start and runs some of these helpers for each
    // matching device, in the initrd and again in the root. 60-input-id and 70-power-switch
    // stay: they mark the power button, which logind watches.
    "usr/lib/udev/rules.d/60-autosuspend.rules",
    "usr/lib/udev/rules.d/60-cdrom_id.rules",
    "usr/lib/udev/rules.d/60-evdev.rules",
    "usr/lib/udev/rules.d/60-fido-id.rules",
    "usr/lib/udev/rules.d/60-persistent-alsa.rules",
    "usr/lib/udev/rules.d/60-persistent-input.rules",
    "usr/lib/udev/rules.d/60-persistent-storage-tape.rules",
    "usr/lib/udev/rules.d/60-persistent-v4l.rules",
    "usr/lib/udev/rules.d/60-sensor.rules",
    "usr/lib/udev/rules.d/60-serial.rules",
    "usr/lib/udev/rules.d/64-btrfs.rules",
    "usr/lib/udev/rules.d/70-camera.rules",
    "usr/lib/udev/rules.d/70-joystick.rules",
    "usr/lib/udev/rules.d/70-memory.rules",
    "usr/lib/udev/rules.d/70-mouse.rules",
    "usr/lib/udev/rules.d/70-touchpad.rules",
    "usr/lib/udev/rules.d/70-uaccess.rules",
    "usr/lib/udev/rules.d/71-seat.rules",
    "usr/lib/udev/rules.d/73-seat-late.rules",
    "usr/lib/udev/rules.d/75-probe_mtd.rules",
    "usr/lib/udev/rules.d/78-sound-card.rules",
    "usr/lib/udev/rules.d/96-e2scrub.rules",
    "usr/lib/udev/cdrom_id",
    "usr/lib/udev/dmi_memory_id",
    "usr/lib/udev/fido_id",
    "usr/lib/udev/mtd_probe",
    "usr/lib/udev/v4l_id",
    // Generators for what the image never has (SysV scripts, rc.local, hibernation, integrity
    // volumes, offline updates, units on the command line, automatic GPT discovery, which
    // could otherwise mount an ESP it found), and verity volumes (sovereign-init, the initrd,
    // has opened the root's already: systemd's would start a service that finds it active),
    // and encrypted volumes (the image has no crypttab: sovereign-init makes and opens the
    // state disk, in the initrd or in sovereign-state.service): each is a process at every
    // boot. fstab's stays.
    "usr/lib/systemd/system-generators/systemd-cryptsetup-generator",
    "usr/lib/systemd/system-generators/systemd-debug-generator",
    "usr/lib/systemd/system-generators/systemd-gpt-auto-generator",
    "usr/lib/systemd/system-generators/systemd-hibernate-resume-generator",
    "usr/lib/systemd/system-generators/systemd-integritysetup-generator",
    "usr/lib/systemd/system-generators/systemd-rc-local-generator",
    "usr/lib/systemd/system-generators/systemd-run-generator",
    "usr/lib/systemd/system-generators/systemd-system-update-generator",
    "usr/lib/systemd/system-generators/systemd-sysv-generator",
    "usr/lib/systemd/system-generators/systemd-veritysetup-generator",
    // Boot units for what the node does not offer: foreign binaries (binfmt_misc), FUSE,
    // configfs, debugfs and tracefs mounts, huge pages, password prompts (it is headless),
    // first-boot and machine-id setup (its root is read-only), users made at boot (made at
    // build time), logins and their records (utmp, user sessions, initctl). logind stays, for
    // the power button only (see `install_files`).
    "usr/lib/systemd/system/sysinit.target.wants/dev-hugepages.mount",
    "usr/lib/systemd/system/sysinit.target.wants/proc-sys-fs-binfmt_misc.automount",
    "usr/lib/systemd/system/sysinit.target.wants/systemd-binfmt.service",
    "usr/lib/systemd/system/sysinit.target.wants/sys-fs-fuse-connections.mount",
    "usr/lib/systemd/system/sysinit.target.wants/sys-kernel-config.mount",
    "usr/lib/systemd/system/sysinit.target.wants/sys-kernel-debug.mount",
    "usr/lib/systemd/system/sysinit.target.wants/sys-kernel-tracing.mount",
    "usr/lib/systemd/system/sysinit.target.wants/systemd-ask-password-console.path",
    "usr/lib/systemd/system/sysinit.target.wants/systemd-firstboot.service",
    "usr/lib/systemd/system/sysinit.target.wants/systemd-machine-id-commit.service",
    "usr/lib/systemd/system/sysinit.target.wants/systemd-sysusers.service",
    "usr/lib/systemd/system/sysinit.target.wants/systemd-update-utmp.service",
    "usr/lib/systemd/system/sysinit.target.wants/integritysetup.target",
    // /var is memory: no saved random seed to load (none would survive the boot; the kernel
    // seeds itself from the CPU's and the TPM's generators) and no persistent journal to
    // flush to. The stock systemd-repart unit is for the root disk, which is read-only and
    // complete; sovereign-init partitions the state disk.
    "usr/lib/systemd/system/sysinit.target.wants/systemd-random-seed.service",
    "usr/lib/systemd/system/sysinit.target.wants/systemd-journal-flush.service",
    "usr/lib/systemd/system/sysinit.target.wants/systemd-repart.service",
    "usr/lib/systemd/system/multi-user.target.wants/systemd-ask-password-wall.path",
    "usr/lib/systemd/system/multi-user.target.wants/systemd-update-utmp-runlevel.service",
    "usr/lib/systemd/system/multi-user.target.wants/systemd-user-sessions.service",
    "usr/lib/systemd/system/graphical.target.wants/systemd-update-utmp-runlevel.service",
    "usr/lib/systemd/system/sockets.target.wants/systemd-initctl.socket",
    // Boot-time files for what the node has not: root's SSH keys, /etc/hosts and login
    // banners written from credentials (no sshd, no login, and a read-only root, where each
    // write failed with an error in every boot's journal), X11's sockets, and the copy-on-write
    // flag of a persistent journal. systemd-tmpfiles runs on the path to sysinit.target.
    "usr/lib/tmpfiles.d/provision.conf",
    "usr/lib/tmpfiles.d/x11.conf",
    "usr/lib/tmpfiles.d/journal-nocow.conf",
];

/// Removes [`LEFT_OUT`] from the tree.
pub fn leave_out(root: &Path) -> Result<(), TreeError> {
    for rel in LEFT_OUT {
        remove_any(&root.join(rel.trim_end_matches('/')))?;
    }
    Ok(())
}

/// `systemd-sysusers --root`: the users and groups of the packages' sysusers.d, with
/// `/etc/shadow`'s last-change field from `SOURCE_DATE_EPOCH` (set by the caller).
pub fn sysusers(root: &Path, epoch: u64) -> Result<(), TreeError> {
    run(Command::new("systemd-sysusers")
        .env("SOURCE_DATE_EPOCH", epoch.to_string())
        .arg(format!("--root={}", root.display())))
    .map(|_| ())
}

/// Checks that every group udev's rules give devices to (`GROUP="…"`) is in the tree's
/// `etc/group`: a rule whose group is missing leaves its devices to root's group and has
/// udevd warn at every boot, and no maintainer script runs here to make it.
pub fn check_udev_groups(root: &Path) -> Result<(), TreeError> {
    let group = root.join("etc/group");
    let groups = std::fs::read_to_string(&group).map_err(io(&group))?;
    let known: BTreeSet<&str> = groups.lines().filter_map(|l| l.split(':').next()).collect();
    let rules = root.join("usr/lib/udev/rules.d");
    for name in sorted_entries(&rules)? {
        let path = rules.join(name);
        let text = std::fs::read_to_string(&path).map_err(io(&path))?;
        let missing = rule_groups(&text).find(|g| !known.contains::<str>(g));
        if let Some(missing) = missing {
            return Err(TreeError::Missing(format!(
                "the group {missing:?} that {} gives devices to (add it to UDEV_GROUPS)",
                path.display()
            )));
        }
    }
    Ok(())
}

/// The groups `GROUP="…"` (or `GROUP:="…"`) assignments in udev rules name.
fn rule_groups(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .flat_map(|l| l.split(','))
        .filter_map(|field| {
            let (key, value) = field.split_once('=')?;
            (key.trim().trim_end_matches(':') == "GROUP").then(|| value.trim().trim_matches('"'))
        })
        .filter(|g| !g.is_empty() && !g.contains('$') && !g.contains('%'))
}

/// `ldconfig -r`: the dynamic linker's cache for the tree's libraries.
pub fn ldconfig(root: &Path) -> Result<(), TreeError> {
    run(Command::new("ldconfig").arg("-r").arg(root)).map(|_| ())
}

/// Masks units as `systemctl mask` would (a link to /dev/null in /etc), offline: whatever
/// wants them, they never start.
pub fn mask_units(root: &Path, units: &[&str]) -> Result<(), TreeError> {
    systemctl_offline(root, "mask", units)
}

/// Enables units as `systemctl enable` would (their `[Install]` sections), offline.
pub fn enable_units(root: &Path, units: &[&str]) -> Result<(), TreeError> {
    systemctl_offline(root, "enable", units)
}

/// `systemctl --root=ROOT VERB UNITS…`: unit links made in the tree, no systemd asked.
fn systemctl_offline(root: &Path, verb: &str, units: &[&str]) -> Result<(), TreeError> {
    run(Command::new("systemctl")
        .arg(format!("--root={}", root.display()))
        .arg(verb)
        .args(units))
    .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(group: &str, rules: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::create_dir_all(root.join("usr/lib/udev/rules.d")).unwrap();
        std::fs::write(root.join("etc/group"), group).unwrap();
        std::fs::write(
            root.join("usr/lib/udev/rules.d/50-udev-default.rules"),
            rules,
        )
        .unwrap();
        dir
    }

    /// Lines as udev 252's own rules have them.
    const RULES: &str = "# GROUP=\"commented\"\n\
        SUBSYSTEM==\"input\", GROUP=\"input\"\n\
        KERNEL==\"kvm\", GROUP=\"kvm\", MODE=\"0660\"\n\
        SUBSYSTEM==\"sound\", GROUP:=\"audio\"\n\
        ENV{ID_GROUP}==\"?*\", GROUP=\"$env{ID_GROUP}\"\n";

    #[test]
    fn every_group_udevs_rules_name_must_exist() {
        let ok = tree("root:x:0:\naudio:x:29:\ninput:x:999:\nkvm:x:998:\n", RULES);
        check_udev_groups(ok.path()).unwrap();
        let missing = tree("root:x:0:\naudio:x:29:\ninput:x:999:\n", RULES);
        let err = check_udev_groups(missing.path()).unwrap_err();
        assert!(err.to_string().contains("\"kvm\""), "{err}");
    }
}
