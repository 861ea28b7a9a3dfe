//! The initrd: `sovereign-init` as `/init`, the C library and loader it links (followed
//! through ELF `DT_NEEDED` and `DT_RUNPATH`), the boot modules and the list of those to load.
//! Nothing else: no shell, no udev, no systemd (the root's systemd is the node's only one).
//! The initrd is loaded, hashed twice (firmware for PCR 4, stub for PCR 11) and unpacked at
//! every boot; under emulation each megabyte costs.

use crate::rootfs::{io, write_file, TreeError};
use object::elf;
use object::read::elf::{Dyn, FileHeader};
use std::collections::{BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

/// Trees the initrd keeps whole: the modules (already cut to the initrd's list) and the
/// init's module list; and the ELF interpreter the init names.
pub const KEEP_TREES: &[&str] = &[
    "usr/lib/modules",
    "usr/lib/sovereign-init",
    "usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
];

/// The initrd's one program.
pub const INIT: &str = "init";

/// Where the init reads the modules to load (`sovereign_init::boot::MODULE_LIST`).
pub const MODULE_LIST: &str = "usr/lib/sovereign-init/modules";

/// Mount points the init uses, made empty in the archive.
const MOUNT_POINTS: &[&str] = &["dev", "proc", "sys", "sysroot"];

const LIB_DIR: &str = "usr/lib/x86_64-linux-gnu";
const SYSTEMD_LIB_DIR: &str = "usr/lib/x86_64-linux-gnu/systemd";

/// Why the initrd could not be cut down.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InitrdError {
    #[error(transparent)]
    Tree(#[from] TreeError),
    #[error("{path}: not a readable ELF file")]
    Elf {
        path: PathBuf,
        #[source]
        source: object::read::Error,
    },
    #[error("the initrd needs {program}, which is not in the root")]
    MissingProgram { program: String },
    #[error("{program} needs {library}, which is not in the root")]
    MissingLibrary { program: PathBuf, library: String },
}

/// Makes `tree` (a copy of the root, with the kernel's modules already cut to the initrd's)
/// into the initrd: `init` is `init_program` without its debug information, `modules` the
/// modules it loads as it starts; then every file the init does not need goes, and with
/// them the folders and symlinks left empty or dangling. Returns how many files were kept.
pub fn assemble(tree: &Path, init_program: &Path, modules: &[&str]) -> Result<usize, InitrdError> {
    crate::rootfs::install_stripped(init_program, &tree.join(INIT))?;
    let list = format!(
        "# Loaded by sovereign-init, in this order, each after what it depends on.\n{}\n",
        modules.join("\n")
    );
    write_file(tree, MODULE_LIST, list.as_bytes(), 0o644)?;
    let kept = prune(tree, &[INIT])?;
    // Until a pass removes nothing: a symlink checked before the folder it names was emptied,
    // or one naming a symlink removed later in its pass, is caught by the next. Each pass
    // that goes on removed something, so the passes end.
    while tidy(tree, tree)? > 0 {}
    for dir in MOUNT_POINTS {
        let d = tree.join(dir);
        std::fs::create_dir_all(&d).map_err(io(&d))?;
    }
    Ok(kept)
}

/// Removes, below `dir`, the symlinks that lead nowhere inside `tree` and the folders left
/// empty, deepest first, in name order (what stays must not depend on the file system's
/// order); returns how many it removed.
fn tidy(tree: &Path, dir: &Path) -> Result<usize, TreeError> {
    let mut removed = 0;
    for name in crate::rootfs::sorted_entries(dir)? {
        let path = dir.join(name);
        let meta = std::fs::symlink_metadata(&path).map_err(io(&path))?;
        if meta.is_dir() {
            removed += tidy(tree, &path)?;
            let empty = std::fs::read_dir(&path)
                .map_err(io(&path))?
                .next()
                .is_none();
            if empty {
                std::fs::remove_dir(&path).map_err(io(&path))?;
                removed += 1;
            }
        } else if meta.file_type().is_symlink() {
            let rel = path.strip_prefix(tree).unwrap_or(&path);
            if !tree.join(resolve(tree, rel)).exists() {
                std::fs::remove_file(&path).map_err(io(&path))?;
                removed += 1;
            }
        }
    }
    Ok(removed)
}

/// Removes from `tree` (a copy of the root) every regular file the initrd does not need;
/// returns how many files were kept. Symlinks and directories stay: they cost nothing, and
/// a symlink left dangling is never followed by what the initrd runs.
pub fn prune(tree: &Path, programs: &[&str]) -> Result<usize, InitrdError> {
    let keep = needed(tree, programs)?;
    let mut kept = 0;
    for file in regular_files(tree)? {
        let rel = file.strip_prefix(tree).unwrap_or(&file).to_path_buf();
        if keep.contains(&rel) || KEEP_TREES.iter().any(|t| rel.starts_with(t)) {
            kept += 1;
        } else {
            std::fs::remove_file(&file).map_err(io(&file))?;
        }
    }
    Ok(kept)
}

/// The programs and the closure of the libraries they load, as paths relative to `tree`
/// with symlinks resolved.
fn needed(tree: &Path, programs: &[&str]) -> Result<BTreeSet<PathBuf>, InitrdError> {
    if let Some(missing) = programs.iter().find(|p| !tree.join(p).exists()) {
        return Err(InitrdError::MissingProgram {
            program: (*missing).to_owned(),
        });
    }
    let mut queue: VecDeque<PathBuf> = programs.iter().map(PathBuf::from).collect();
    let mut seen = BTreeSet::new();
    while let Some(rel) = queue.pop_front() {
        let real = resolve(tree, &rel);
        if !seen.insert(real.clone()) {
            continue;
        }
        for lib in libraries(tree, &real)? {
            queue.push_back(lib);
        }
    }
    Ok(seen)
}

/// `rel` with its symlinks followed inside `tree` (absolute targets are the tree's), and
/// `..` folded, so that it names the file the way [`prune`] walks to it.
fn resolve(tree: &Path, rel: &Path) -> PathBuf {
    let mut path = rel.to_path_buf();
    for _ in 0..16 {
        match std::fs::read_link(tree.join(&path)) {
            Ok(target) if target.is_absolute() => {
                path = target.strip_prefix("/").unwrap_or(&target).to_path_buf();
            }
            Ok(target) => {
                path = fold_parents(&path.parent().unwrap_or(Path::new("")).join(target));
            }
            Err(_) => break,
        }
    }
    path
}

/// `a/b/../c` → `a/c`, lexically (the tree's folders are real folders, not symlinks, below
/// the merged `/usr`).
fn fold_parents(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The libraries `rel` names in `DT_NEEDED`, found in its `DT_RUNPATH` or the library
/// directory, relative to `tree`.
fn libraries(tree: &Path, rel: &Path) -> Result<Vec<PathBuf>, InitrdError> {
    let path = tree.join(rel);
    let data = std::fs::read(&path).map_err(io(&path))?;
    let elf_err = |source| InitrdError::Elf {
        path: path.clone(),
        source,
    };
    let header = elf::FileHeader64::<object::Endianness>::parse(&*data).map_err(elf_err)?;
    let endian = header.endian().map_err(elf_err)?;
    let sections = header.sections(endian, &*data).map_err(elf_err)?;
    let Some((dyns, link)) = sections.dynamic(endian, &*data).map_err(elf_err)? else {
        return Ok(Vec::new());
    };
    let strings = sections.strings(endian, &*data, link).map_err(elf_err)?;
    // The library directory, systemd's private one (its libraries name each other without a
    // run path: the programs' run path finds them), and the file's own directory.
    let own = rel.parent().unwrap_or(Path::new("")).display().to_string();
    let (mut names, mut dirs) = (
        Vec::new(),
        vec![LIB_DIR.to_owned(), SYSTEMD_LIB_DIR.to_owned(), own.clone()],
    );
    for d in dyns {
        let text = || -> Result<String, InitrdError> {
            let s = d.string(endian, strings).map_err(elf_err)?;
            Ok(String::from_utf8_lossy(s).into_owned())
        };
        match d.tag32(endian).map(i64::from) {
            Some(elf::DT_NEEDED) => names.push(text()?),
            Some(elf::DT_RUNPATH | elf::DT_RPATH) => {
                for dir in text()?.split(':') {
                    let dir = dir.replace("$ORIGIN", &format!("/{own}"));
                    dirs.push(dir.trim_start_matches('/').to_owned());
                }
            }
            _ => {}
        }
    }
    let mut found = Vec::new();
    for name in names {
        let hit = dirs
            .iter()
            .map(|d| Path::new(d).join(&name))
            .find(|p| tree.join(p).exists())
            .ok_or_else(|| InitrdError::MissingLibrary {
                program: rel.to_path_buf(),
                library: name.clone(),
            })?;
        found.push(hit);
    }
    Ok(found)
}

/// Every regular file under `dir` (none if it does not exist).
fn regular_files(dir: &Path) -> Result<Vec<PathBuf>, TreeError> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = match std::fs::read_dir(&d) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io(&d)(e)),
        };
        for entry in entries {
            let entry = entry.map_err(io(&d))?;
            let kind = entry.file_type().map_err(io(&entry.path()))?;
            if kind.is_dir() {
                stack.push(entry.path());
            } else if kind.is_file() {
                out.push(entry.path());
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// Copies the host's file `from` to `tree/rel`.
    fn put(tree: &Path, rel: &str, from: &Path) {
        let to = tree.join(rel);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(from, &to).unwrap();
    }

    /// Copies the host's `program` (relative to `/`) into `tree` with the libraries it loads
    /// (whatever they are here), under their real names and the names it asks for.
    fn with_libraries(tree: &Path, program: &str) {
        let host = Path::new("/");
        put(tree, program, &host.join(program));
        let mut queue = vec![PathBuf::from(program)];
        while let Some(rel) = queue.pop() {
            for lib in libraries(host, &resolve(host, &rel)).unwrap() {
                let real = resolve(host, &lib);
                if tree.join(&real).exists() {
                    continue;
                }
                put(tree, real.to_str().unwrap(), &host.join(&real));
                if real != lib && !tree.join(&lib).exists() {
                    std::os::unix::fs::symlink(real.file_name().unwrap(), tree.join(&lib)).unwrap();
                }
                queue.push(real);
            }
        }
    }

    /// A tree with the host's own `kmod` and its libraries (whatever they are here), a module
    /// and stray files: pruning keeps the program, its loader-visible closure and the kept
    /// trees, and nothing else.
    #[test]
    fn keeps_programs_with_their_libraries_and_drops_the_rest() {
        let kmod = Path::new("/usr/bin/kmod");
        if !kmod.exists() {
            eprintln!("skipped: no /usr/bin/kmod on this machine");
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let tree = t.path();
        let put = |rel: &str, from: &Path| put(tree, rel, from);
        with_libraries(tree, "usr/bin/kmod");
        put("usr/bin/stray", kmod);
        put("usr/share/doc/readme", kmod);
        put("etc/gone.conf", kmod);
        put("usr/lib/modules/6.1.0-x/kept.ko", kmod);
        let before = regular_files(tree).unwrap().len();
        let kept = prune(tree, &["usr/bin/kmod"]).unwrap();
        assert!(tree.join("usr/bin/kmod").exists());
        assert!(tree.join("usr/lib/modules/6.1.0-x/kept.ko").exists());
        assert!(!tree.join("etc/gone.conf").exists());
        assert!(!tree.join("usr/bin/stray").exists());
        assert!(!tree.join("usr/share/doc/readme").exists());
        assert_eq!(kept, before - 3, "every library of kmod stays");
        assert!(matches!(
            prune(tree, &["usr/bin/systemctl"]),
            Err(InitrdError::MissingProgram { .. })
        ));
    }

    /// A copy of a root with a program, its libraries (the host's, whatever they are here),
    /// a module, strays, a symlink into what goes and a folder left empty: the initrd keeps
    /// the init, the libraries, the modules and the list, and nothing else.
    #[test]
    fn the_initrd_is_the_init_its_libraries_and_the_modules() {
        let program = Path::new("/usr/bin/true");
        if !program.exists() || crate::tool::run(Command::new("objcopy").arg("--version")).is_err()
        {
            eprintln!("skipped: no /usr/bin/true or objcopy on this machine");
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let tree = t.path();
        let put = |rel: &str, from: &Path| put(tree, rel, from);
        with_libraries(tree, "usr/bin/true");
        put("usr/lib/modules/6.1.0-x/kernel/fs/erofs/erofs.ko", program);
        put("usr/bin/stray", program);
        put("usr/share/doc/readme", program);
        std::os::unix::fs::symlink("usr/bin", tree.join("bin")).unwrap();
        std::fs::create_dir_all(tree.join("var/empty/deeper")).unwrap();
        let kept = assemble(tree, program, &["virtio_blk", "erofs"]).unwrap();
        assert!(tree.join(INIT).is_file());
        let list = std::fs::read_to_string(tree.join(MODULE_LIST)).unwrap();
        assert!(list.ends_with("virtio_blk\nerofs\n"), "{list}");
        assert!(tree
            .join("usr/lib/modules/6.1.0-x/kernel/fs/erofs/erofs.ko")
            .exists());
        for gone in ["usr/bin", "bin", "usr/share", "var"] {
            assert!(
                std::fs::symlink_metadata(tree.join(gone)).is_err(),
                "{gone} should be gone"
            );
        }
        for dir in MOUNT_POINTS {
            assert!(tree.join(dir).is_dir(), "{dir}");
        }
        let files = regular_files(tree).unwrap().len();
        assert_eq!(kept, files, "every file left is one the initrd keeps");
    }

    #[test]
    fn relative_symlinks_with_parents_resolve_to_the_file_itself() {
        let t = tempfile::tempdir().unwrap();
        let tree = t.path();
        std::fs::create_dir_all(tree.join("usr/lib/a")).unwrap();
        std::fs::create_dir_all(tree.join("usr/lib/b")).unwrap();
        std::fs::write(tree.join("usr/lib/b/real.so"), b"x").unwrap();
        std::os::unix::fs::symlink("../b/real.so", tree.join("usr/lib/a/link.so")).unwrap();
        assert_eq!(
            resolve(tree, Path::new("usr/lib/a/link.so")),
            PathBuf::from("usr/lib/b/real.so")
        );
    }

    /// A link to a folder whose only content is a link to a folder holding only a dangling
    /// link: each pass empties one level, so three passes are needed and nothing is left.
    #[test]
    fn links_into_folders_that_empty_are_removed_whatever_the_depth() {
        let t = tempfile::tempdir().unwrap();
        let tree = t.path();
        let link = |to: &str, at: &str| std::os::unix::fs::symlink(to, tree.join(at)).unwrap();
        std::fs::create_dir_all(tree.join("m")).unwrap();
        std::fs::create_dir_all(tree.join("z")).unwrap();
        std::fs::create_dir_all(tree.join("kept")).unwrap();
        std::fs::write(tree.join("kept/file"), b"x").unwrap();
        link("m", "a");
        link("../z", "m/l");
        link("../nowhere", "z/d");
        link("kept/file", "b");
        let mut passes = 0;
        while tidy(tree, tree).unwrap() > 0 {
            passes += 1;
        }
        assert_eq!(passes, 3);
        let mut left = crate::rootfs::sorted_entries(tree).unwrap();
        left.sort();
        assert_eq!(left, ["b", "kept"]);
    }

    #[test]
    fn a_missing_library_is_named() {
        if !Path::new("/usr/bin/kmod").exists() {
            eprintln!("skipped: no /usr/bin/kmod on this machine");
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let tree = t.path();
        std::fs::create_dir_all(tree.join("usr/bin")).unwrap();
        std::fs::copy("/usr/bin/kmod", tree.join("usr/bin/kmod")).unwrap();
        let err = libraries(tree, Path::new("usr/bin/kmod")).unwrap_err();
        assert!(
            matches!(&err, InitrdError::MissingLibrary { library, .. } if library.starts_with("lib")),
            "{err}"
        );
    }
}
