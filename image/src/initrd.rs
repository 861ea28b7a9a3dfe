//! What the initrd keeps of the root: the programs that finding, verifying and mounting the
//! root take, the libraries they load (followed through ELF `DT_NEEDED` and `DT_RUNPATH`,
//! plus those systemd loads with `dlopen`), and the configuration trees they read. Every
//! other regular file goes. The initrd is loaded, hashed three times (firmware, stub, kernel
//! stub) and unpacked at every boot; under emulation each megabyte costs.

use crate::rootfs::{io, TreeError};
use object::elf;
use object::read::elf::{Dyn, FileHeader};
use std::collections::{BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

/// Trees the initrd keeps whole: unit files, udev's rules and helpers, the modules (already
/// cut to the initrd's list), and the configuration systemd reads at boot.
pub const KEEP_TREES: &[&str] = &[
    "etc",
    "usr/lib/systemd/system",
    "usr/lib/systemd/system-generators",
    "usr/lib/systemd/system-shutdown",
    "usr/lib/udev",
    "usr/lib/modules",
    "usr/lib/modprobe.d",
    "usr/lib/modules-load.d",
    "usr/lib/tmpfiles.d",
    "usr/lib/sysctl.d",
    "usr/lib/os-release",
    "usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
];

/// Programs the initrd runs, for [`prune`] (beyond the ELF files under `usr/lib/systemd/`, all kept): unit
/// commands, udev's coldplug, mounts, module loading.
pub const PROGRAMS: &[&str] = &[
    "usr/bin/systemctl",
    "usr/bin/udevadm",
    "usr/bin/systemd-tmpfiles",
    "usr/bin/systemd-escape",
    "usr/bin/journalctl",
    "usr/bin/mount",
    "usr/bin/umount",
    "usr/bin/kmod",
    // udev's device-mapper rules run it to tell libdevmapper the verity device is ready;
    // without it veritysetup waits until its device times out
    "usr/sbin/dmsetup",
];

/// Libraries loaded with `dlopen`, which no `DT_NEEDED` names: the TPM stack that
/// `systemd-pcrphase` measures with, and glibc's unwinder for thread cancellation.
pub const DLOPENED: &[&str] = &["libtss2-", "libgcc_s.so"];

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
    queue.extend(files_under(tree, "usr/lib/systemd", Depth::Top, is_elf)?);
    queue.extend(files_under(tree, LIB_DIR, Depth::Top, is_dlopened)?);
    queue.extend(files_under(tree, "usr/lib/udev", Depth::All, is_elf)?);
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

/// How deep [`files_under`] looks.
enum Depth {
    /// Only the folder's own files.
    Top,
    /// Its subfolders too.
    All,
}

/// The regular files under `tree/dir` that `wanted` accepts, relative to `tree`.
fn files_under(
    tree: &Path,
    dir: &str,
    depth: Depth,
    wanted: fn(&Path) -> bool,
) -> Result<Vec<PathBuf>, TreeError> {
    let top = tree.join(dir);
    Ok(regular_files(&top)?
        .into_iter()
        .filter(|f| matches!(depth, Depth::All) || f.parent() == Some(top.as_path()))
        .filter(|f| wanted(f))
        .map(|f| f.strip_prefix(tree).unwrap_or(&f).to_path_buf())
        .collect())
}

fn is_dlopened(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    DLOPENED.iter().any(|p| name.starts_with(p))
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
        match d.tag32(endian) {
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

fn is_elf(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && magic == *b"\x7fELF"
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

    /// A tree with the host's own `kmod` and its libraries (whatever they are here) and a
    /// stray file: pruning keeps the program, its loader-visible closure, and nothing else.
    #[test]
    fn keeps_programs_with_their_libraries_and_drops_the_rest() {
        let kmod = Path::new("/usr/bin/kmod");
        if !kmod.exists() {
            eprintln!("skipped: no /usr/bin/kmod on this machine");
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let tree = t.path();
        let put = |rel: &str, from: &Path| {
            let to = tree.join(rel);
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(from, &to).unwrap();
        };
        put("usr/bin/kmod", kmod);
        let host = Path::new("/");
        let mut queue = vec![PathBuf::from("usr/bin/kmod")];
        while let Some(rel) = queue.pop() {
            for lib in libraries(host, &resolve(host, &rel)).unwrap() {
                let real = resolve(host, &lib);
                if tree.join(&real).exists() {
                    continue;
                }
                put(real.to_str().unwrap(), &host.join(&real));
                if real != lib && !tree.join(&lib).exists() {
                    std::os::unix::fs::symlink(real.file_name().unwrap(), tree.join(&lib)).unwrap();
                }
                queue.push(real);
            }
        }
        put("usr/bin/stray", kmod);
        put("usr/share/doc/readme", kmod);
        put("etc/kept.conf", kmod);
        let before = regular_files(tree).unwrap().len();
        let kept = prune(tree, &["usr/bin/kmod"]).unwrap();
        assert!(tree.join("usr/bin/kmod").exists());
        assert!(tree.join("etc/kept.conf").exists());
        assert!(!tree.join("usr/bin/stray").exists());
        assert!(!tree.join("usr/share/doc/readme").exists());
        assert_eq!(kept, before - 2, "every library of kmod stays");
        assert!(matches!(
            prune(tree, &["usr/bin/systemctl"]),
            Err(InitrdError::MissingProgram { .. })
        ));
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
