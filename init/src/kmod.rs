//! Loading the initrd's modules without modprobe: the order comes from `modules.dep` (what
//! `depmod` wrote at build time), the loading is `finit_module(2)`, and the kernel checks each
//! module's signature (`module.sig_enforce=1`).

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};

/// Why the modules could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KmodError {
    /// A module the list names is neither in `modules.dep` nor built in.
    #[error("module {0} is not in this initrd (neither its modules.dep nor built in)")]
    Unknown(String),
    /// A module's dependencies loop.
    #[error("module {0} depends on itself through modules.dep")]
    Cycle(String),
    /// Reading the module index or list.
    #[error("reading {path}")]
    Read {
        /// The file.
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The kernel refused a module.
    #[error("loading {path}")]
    Load {
        /// The module file.
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// A module's name as modprobe spells it: file stem with `-` as `_`.
pub fn module_name(path: &str) -> String {
    let file = path.rsplit('/').next().unwrap_or(path);
    file.strip_suffix(".ko").unwrap_or(file).replace('-', "_")
}

/// The names in a modules-load.d style list: one per line, `#` and `;` start comments.
pub fn names(list: &str) -> Vec<String> {
    list.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with(';'))
        .map(|l| l.replace('-', "_"))
        .collect()
}

/// The module files to load for `wanted`, each after what it depends on, each once, in the
/// list's order otherwise; built-in modules (`modules.builtin`) need no loading.
pub fn load_order(dep: &str, builtin: &str, wanted: &[String]) -> Result<Vec<String>, KmodError> {
    let deps: BTreeMap<String, Vec<String>> = dep
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(m, d)| {
            let m = m.trim().to_owned();
            (m, d.split_whitespace().map(str::to_owned).collect())
        })
        .collect();
    let by_name: BTreeMap<String, &String> = deps.keys().map(|p| (module_name(p), p)).collect();
    let builtin: BTreeSet<String> = builtin.lines().map(module_name).collect();
    let mut order = Vec::new();
    let mut done = BTreeSet::new();
    for name in wanted {
        let Some(path) = by_name.get(name) else {
            if builtin.contains(name) {
                continue;
            }
            return Err(KmodError::Unknown(name.clone()));
        };
        visit(path, &deps, &mut done, &mut Vec::new(), &mut order)?;
    }
    Ok(order)
}

fn visit(
    path: &str,
    deps: &BTreeMap<String, Vec<String>>,
    done: &mut BTreeSet<String>,
    stack: &mut Vec<String>,
    order: &mut Vec<String>,
) -> Result<(), KmodError> {
    if done.contains(path) {
        return Ok(());
    }
    if stack.iter().any(|p| p == path) {
        return Err(KmodError::Cycle(module_name(path)));
    }
    stack.push(path.to_owned());
    for d in deps.get(path).into_iter().flatten() {
        visit(d, deps, done, stack, order)?;
    }
    stack.pop();
    done.insert(path.to_owned());
    order.push(path.to_owned());
    Ok(())
}

/// What loading one module came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loaded {
    /// Now loaded.
    Yes,
    /// Was loaded already.
    Already,
    /// Its init found nothing to drive here (e.g. `crc32c_intel` on a CPU without SSE 4.2).
    NoDevice,
}

/// Loads the module at `path` with no parameters.
pub fn load(path: &Path) -> Result<Loaded, KmodError> {
    let err = |source| KmodError::Load {
        path: path.to_owned(),
        source,
    };
    let file = std::fs::File::open(path).map_err(err)?;
    match rustix::system::finit_module(&file, c"", 0) {
        Ok(()) => Ok(Loaded::Yes),
        Err(rustix::io::Errno::EXIST) => Ok(Loaded::Already),
        Err(rustix::io::Errno::NODEV) => Ok(Loaded::NoDevice),
        Err(e) => Err(err(e.into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEP: &str = "kernel/fs/erofs/erofs.ko: kernel/lib/libcrc32c.ko\n\
        kernel/lib/libcrc32c.ko:\n\
        kernel/drivers/md/dm-verity.ko: kernel/drivers/md/dm-bufio.ko kernel/drivers/md/dm-mod.ko\n\
        kernel/drivers/md/dm-bufio.ko:\n\
        kernel/drivers/md/dm-mod.ko:\n\
        kernel/drivers/block/virtio_blk.ko:\n";

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn dependencies_load_first_and_once() {
        let order = load_order(
            DEP,
            "kernel/fs/efivarfs/efivarfs.ko\n",
            &strings(&["virtio_blk", "dm_verity", "efivarfs", "erofs", "dm_mod"]),
        )
        .unwrap();
        assert_eq!(
            order,
            strings(&[
                "kernel/drivers/block/virtio_blk.ko",
                "kernel/drivers/md/dm-bufio.ko",
                "kernel/drivers/md/dm-mod.ko",
                "kernel/drivers/md/dm-verity.ko",
                "kernel/lib/libcrc32c.ko",
                "kernel/fs/erofs/erofs.ko",
            ])
        );
    }

    #[test]
    fn an_unknown_module_or_a_loop_is_named() {
        assert!(matches!(
            load_order(DEP, "", &strings(&["nvme"])),
            Err(KmodError::Unknown(n)) if n == "nvme"
        ));
        let looped = "kernel/a.ko: kernel/b.ko\nkernel/b.ko: kernel/a.ko\n";
        assert!(matches!(
            load_order(looped, "", &strings(&["a"])),
            Err(KmodError::Cycle(_))
        ));
    }

    #[test]
    fn lists_read_like_modules_load_d() {
        assert_eq!(
            names("# storage\nvirtio-blk\n\n; old comment\n erofs \n"),
            strings(&["virtio_blk", "erofs"])
        );
    }
}
