//! Kernel modules: the image keeps only the modules its job needs (and what they depend on),
//! so that `module.sig_enforce=1` guards a small, known set, and the initrd carries only what
//! mounting the root takes.

use crate::rootfs::{io, remove_any, run, sorted_entries, TreeError};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

/// Modules the root keeps, by name or by folder under `kernel/` (a name ending in `/`).
pub const ROOT_MODULES: &[&str] = &[
    // boot and storage under qemu and on servers
    "virtio_blk",
    "virtio_pci",
    "virtio_net",
    "virtio_console",
    "virtio_rng",
    "nvme",
    "ahci",
    "sd_mod",
    "efivarfs",
    "autofs4",
    // the ACPI power button: an operator's (or the BMC's) power-off shuts down cleanly. evdev
    // gives it the event device logind watches (without it, the button is pressed in vain)
    "button",
    "evdev",
    // the root: erofs behind dm-verity; the state disk: ext4 behind dm-crypt
    "erofs",
    "dm_verity",
    "dm_crypt",
    "ext4",
    // LUKS2's aes-xts-plain64 (sovereign-init reads keyslots in user space: no crypto API
    // sockets, no loop device)
    "xts",
    "ecb",
    "aesni_intel",
    "crc32c_generic",
    "crc32c_intel",
    // leases' fscrypt scratch: HKDF-SHA512 for its keys, AES-256-XTS for contents and
    // AES-256-CTS-CBC for names
    "sha512_generic",
    "sha512_ssse3",
    "cts",
    // the TPM
    "tpm_crb",
    "tpm_tis",
    // lease networks: veths, namespaces' filtering and NAT
    "veth",
    "kernel/net/netfilter/",
    "kernel/net/ipv4/netfilter/",
    "kernel/net/ipv6/netfilter/",
];

/// Modules the root loads at boot (`modules-load.d`) rather than on the kernel's request: a
/// request that finds no module fails with a bare ENOENT (as dm-crypt's `xts(aes)` did), so
/// fscrypt's are loaded up front. The state disk's (dm-crypt, XTS) are `sovereign-init`'s
/// to load, before it opens the disk (`sovereign_init::state::MODULES`). `button` is the
/// ACPI power button's driver, which udev's coldplug would otherwise load: the coldplug
/// skips the firmware's device tree (`image/files/udev-coldplug.conf`).
pub const ROOT_PRELOAD: &[&str] = &["button", "sha512_generic", "cts"];

/// Modules the initrd carries and `sovereign-init` loads as it starts, in this order (each
/// after what `modules.dep` says it needs): the storage drivers, what mounting the verity root
/// takes, efivarfs (where systemd-stub says it measured the boot) and the TPM's drivers.
pub const INITRD_MODULES: &[&str] = &[
    "virtio_pci",
    "virtio_blk",
    "nvme",
    "ahci",
    "sd_mod",
    // libcrc32c (which erofs needs) asks the crypto API for crc32c when it loads: a soft
    // dependency depmod does not follow, and without it erofs fails with ENOENT.
    "crc32c_generic",
    "crc32c_intel",
    "erofs",
    "dm_verity",
    "efivarfs",
    "tpm_crb",
    "tpm_tis",
];

/// A module's name as modprobe spells it: file stem with `-` as `_`.
fn module_name(path: &str) -> String {
    let file = path.rsplit('/').next().unwrap_or(path);
    let stem = file
        .strip_suffix(".ko")
        .or_else(|| file.strip_suffix(".ko.xz"))
        .or_else(|| file.strip_suffix(".ko.zst"))
        .unwrap_or(file);
    stem.replace('-', "_")
}

/// `modules.dep` as a map from module path to the paths it needs.
fn parse_deps(text: &str) -> BTreeMap<String, Vec<String>> {
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(m, deps)| {
            (
                m.trim().to_owned(),
                deps.split_whitespace().map(str::to_owned).collect(),
            )
        })
        .collect()
}

/// The module paths `wanted` selects, with everything they depend on.
fn closure(deps: &BTreeMap<String, Vec<String>>, wanted: &[&str]) -> BTreeSet<String> {
    let selected = |path: &str| {
        wanted.iter().any(|w| match w.strip_suffix('/') {
            Some(dir) => path.starts_with(&format!("{dir}/")),
            None => module_name(path) == *w,
        })
    };
    let mut keep = BTreeSet::new();
    let mut todo: Vec<String> = deps.keys().filter(|p| selected(p)).cloned().collect();
    while let Some(p) = todo.pop() {
        if keep.insert(p.clone()) {
            todo.extend(deps.get(&p).into_iter().flatten().cloned());
        }
    }
    keep
}

/// Each wanted name is a module of this kernel, as a file or built in; each wanted folder
/// holds one.
fn check_known(
    deps: &BTreeMap<String, Vec<String>>,
    builtin: &str,
    wanted: &[&str],
    version: &str,
) -> Result<(), TreeError> {
    let known = |w: &str| match w.strip_suffix('/') {
        Some(dir) => deps.keys().any(|p| p.starts_with(&format!("{dir}/"))),
        None => deps
            .keys()
            .map(String::as_str)
            .chain(builtin.lines().map(str::trim))
            .any(|p| module_name(p) == w),
    };
    match wanted.iter().find(|w| !known(w)) {
        Some(w) => Err(TreeError::UnknownModule {
            name: (*w).to_owned(),
            version: version.to_owned(),
        }),
        None => Ok(()),
    }
}

/// The initrd's `sovereign-init` loads modules with `finit_module(2)` as plain `.ko` files:
/// bookworm's kernel ships them so. A kernel whose modules are compressed stops the build
/// here, by name, rather than an initrd that cannot load its first module.
fn check_uncompressed(keep: &BTreeSet<String>, version: &str) -> Result<(), TreeError> {
    match keep.iter().find(|p| !p.ends_with(".ko")) {
        Some(path) => Err(TreeError::CompressedModule {
            path: path.clone(),
            version: version.to_owned(),
        }),
        None => Ok(()),
    }
}

/// Keeps only the modules `wanted` selects (and their dependencies) in `root`'s kernel, and
/// regenerates the module index. Returns how many modules were kept.
pub fn keep_only(root: &Path, version: &str, wanted: &[&str]) -> Result<usize, TreeError> {
    depmod(root, version)?;
    let dir = root.join("usr/lib/modules").join(version);
    let dep_file = dir.join("modules.dep");
    let deps = parse_deps(&std::fs::read_to_string(&dep_file).map_err(io(&dep_file))?);
    let builtin_file = dir.join("modules.builtin");
    let builtin = std::fs::read_to_string(&builtin_file).map_err(io(&builtin_file))?;
    check_known(&deps, &builtin, wanted, version)?;
    let keep = closure(&deps, wanted);
    check_uncompressed(&keep, version)?;
    // A wanted name built into this kernel has no module file: nothing to keep for it.
    for path in deps.keys().filter(|p| !keep.contains(*p)) {
        remove_any(&dir.join(path))?;
    }
    prune_empty_dirs(&dir.join("kernel"))?;
    depmod(root, version)?;
    Ok(keep.len())
}

fn depmod(root: &Path, version: &str) -> Result<(), TreeError> {
    run(Command::new("depmod").arg("-b").arg(root).arg(version)).map(|_| ())
}

fn prune_empty_dirs(dir: &Path) -> Result<bool, TreeError> {
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return Ok(true);
    };
    if !meta.is_dir() {
        return Ok(false);
    }
    let mut empty = true;
    for name in sorted_entries(dir)? {
        if !prune_empty_dirs(&dir.join(name))? {
            empty = false;
        }
    }
    if empty {
        std::fs::remove_dir(dir).map_err(io(dir))?;
    }
    Ok(empty)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_what_is_named_and_what_it_needs() {
        let deps = parse_deps(
            "kernel/fs/erofs/erofs.ko: kernel/lib/lz4/lz4_decompress.ko\n\
             kernel/lib/lz4/lz4_decompress.ko:\n\
             kernel/drivers/md/dm-verity.ko: kernel/drivers/md/dm-bufio.ko kernel/drivers/md/dm-mod.ko\n\
             kernel/drivers/md/dm-bufio.ko:\n\
             kernel/drivers/md/dm-mod.ko:\n\
             kernel/net/netfilter/nf_tables.ko: kernel/lib/libcrc32c.ko\n\
             kernel/lib/libcrc32c.ko:\n\
             kernel/sound/snd.ko:\n",
        );
        let keep = closure(&deps, &["erofs", "dm_verity", "kernel/net/netfilter/"]);
        let names: Vec<String> = keep.iter().map(|p| module_name(p)).collect();
        assert_eq!(
            names,
            [
                "dm_bufio",
                "dm_mod",
                "dm_verity",
                "erofs",
                "libcrc32c",
                "lz4_decompress",
                "nf_tables"
            ]
        );
        assert!(!keep.iter().any(|p| p.contains("snd")));
    }

    #[test]
    fn compressed_modules_stop_the_build() {
        let plain: BTreeSet<String> = ["kernel/fs/erofs/erofs.ko".to_owned()].into();
        assert!(check_uncompressed(&plain, "6.1").is_ok());
        let xz: BTreeSet<String> = ["kernel/fs/erofs/erofs.ko.xz".to_owned()].into();
        assert!(matches!(
            check_uncompressed(&xz, "6.1"),
            Err(TreeError::CompressedModule { path, .. }) if path.ends_with(".xz")
        ));
    }

    /// A name that is a module file, a built-in, or a folder with modules passes; one that
    /// is none of them is named in the error.
    #[test]
    fn a_name_the_kernel_lacks_is_refused() {
        let deps = parse_deps("kernel/fs/erofs/erofs.ko:\nkernel/net/netfilter/nf_tables.ko:\n");
        let builtin = "kernel/drivers/block/virtio_blk.ko\n";
        let ok = ["erofs", "virtio_blk", "kernel/net/netfilter/"];
        assert!(check_known(&deps, builtin, &ok, "6.1").is_ok());
        for bad in ["erfos", "kernel/sound/"] {
            match check_known(&deps, builtin, &[bad], "6.1") {
                Err(TreeError::UnknownModule { name, .. }) => assert_eq!(name, bad),
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    #[test]
    fn what_is_loaded_up_front_is_carried() {
        for m in ROOT_PRELOAD {
            assert!(
                ROOT_MODULES.contains(m),
                "{m} is preloaded but not in the root"
            );
        }
    }

    #[test]
    fn names_follow_modprobe() {
        assert_eq!(module_name("kernel/drivers/md/dm-verity.ko"), "dm_verity");
        assert_eq!(module_name("kernel/x/a-b.ko.xz"), "a_b");
    }
}
