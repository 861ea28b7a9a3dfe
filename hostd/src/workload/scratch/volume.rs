//! A filesystem that supports fscrypt, for `hostd dev` and tests: a sparse ext4 image made
//! with `-O encrypt`, loop-mounted at `<dir>/mnt`.
//!
//! Without quota: ext4's project quota (`-O quota,project`) would let the kernel enforce a
//! per-lease limit, but a kernel without `CONFIG_QFMT_V2` (the development one) refuses to
//! mount such an image at all, so the image is made without it (see the module doc of
//! `workload::scratch`).
//!
//! The mount outlives the process on purpose: a restarted `hostd dev` finds it in
//! `/proc/self/mountinfo` and reuses it (and the image, if only the mount is gone), so
//! leftover scratch can be listed and erased. [`DevVolume::unmount`] takes it down.

use std::fs::{self, File};
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Why the volume could not be made, mounted or unmounted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VolumeError {
    #[error("{tool} is not available (Debian package {package})")]
    MissingTool {
        tool: &'static str,
        package: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("{tool} is not permitted: loop-mounting needs root (CAP_SYS_ADMIN): {stderr}")]
    NotPermitted { tool: &'static str, stderr: String },
    #[error("{tool} {args} failed: {stderr}")]
    ToolFailed {
        tool: &'static str,
        args: String,
        stderr: String,
    },
    #[error("cannot {what} {path}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

fn io_err(what: &'static str, path: &Path) -> impl FnOnce(io::Error) -> VolumeError {
    let path = path.to_owned();
    move |source| VolumeError::Io { what, path, source }
}

/// Runs `tool args`; its failure as a [`VolumeError`] that says which tool and why. The tool
/// runs in a process group of its own, so that Ctrl-C at a `hostd dev` terminal does not stop
/// a `cryptsetup close` of the shutdown half way (see `egress::run`).
fn run(tool: &'static str, package: &'static str, args: &[&Path]) -> Result<(), VolumeError> {
    let out = Command::new(tool)
        .args(args)
        .process_group(0)
        .output()
        .map_err(|source| VolumeError::MissingTool {
            tool,
            package,
            source,
        })?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    let lower = stderr.to_lowercase();
    if lower.contains("permission denied") || lower.contains("must be superuser") {
        return Err(VolumeError::NotPermitted { tool, stderr });
    }
    let args = args
        .iter()
        .map(|a| a.display().to_string())
        .collect::<Vec<_>>();
    Err(VolumeError::ToolFailed {
        tool,
        args: args.join(" "),
        stderr,
    })
}

/// Undoes the octal escapes (`\040` for a space) mountinfo uses in paths.
fn unescape_mountinfo(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| {
            let s = std::str::from_utf8(d).ok()?;
            u8::from_str_radix(s, 8).ok()
        });
        match (bytes[i], octal) {
            (b'\\', Some(b)) => {
                out.push(b);
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether `path` (canonical) is a mount point, per `/proc/self/mountinfo` (field 5).
pub(crate) fn is_mount_point(path: &Path) -> Result<bool, VolumeError> {
    let info_path = Path::new("/proc/self/mountinfo");
    let info = fs::read_to_string(info_path).map_err(io_err("read", info_path))?;
    Ok(info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|mp| Path::new(&unescape_mountinfo(mp)) == path))
}

/// A loop-mounted ext4 with the `encrypt` feature.
#[derive(Debug)]
pub struct DevVolume {
    image: PathBuf,
    mnt: PathBuf,
}

impl DevVolume {
    /// Mounts `<dir>/scratch.img` (made sparse, `size_bytes` long, if missing) at
    /// `<dir>/mnt`, or reuses that mount if it is already there.
    pub fn mount(dir: &Path, size_bytes: u64) -> Result<DevVolume, VolumeError> {
        let dir = fs::canonicalize(dir).map_err(io_err("use as volume folder", dir))?;
        let image = dir.join("scratch.img");
        let mnt = dir.join("mnt");
        fs::create_dir_all(&mnt).map_err(io_err("create", &mnt))?;
        if is_mount_point(&mnt)? {
            tracing::info!(mnt = %mnt.display(), "reusing the mounted scratch volume");
            return Ok(DevVolume { image, mnt });
        }
        if !image.exists() {
            make_image(&image, size_bytes)?;
        }
        run(
            "mount",
            "mount",
            &[Path::new("-o"), Path::new("loop"), &image, &mnt],
        )?;
        tracing::info!(mnt = %mnt.display(), size_bytes, "scratch volume mounted");
        Ok(DevVolume { image, mnt })
    }

    /// Where the filesystem is mounted.
    pub fn path(&self) -> &Path {
        &self.mnt
    }

    /// The image file behind it.
    pub fn image(&self) -> &Path {
        &self.image
    }

    /// Unmounts it and detaches its loop device (keys in its keyring go with it); the image
    /// stays.
    pub fn unmount(self) -> Result<(), VolumeError> {
        run("umount", "mount", &[Path::new("-d"), &self.mnt])?;
        tracing::info!(mnt = %self.mnt.display(), "scratch volume unmounted");
        Ok(())
    }
}

/// A sparse file of `size_bytes`, formatted ext4 with encryption support (4 KiB blocks); removed again if
/// formatting fails, so the next try starts clean.
fn make_image(image: &Path, size_bytes: u64) -> Result<(), VolumeError> {
    let file = File::create_new(image).map_err(io_err("create", image))?;
    file.set_len(size_bytes).map_err(io_err("size", image))?;
    drop(file);
    // 4 KiB blocks as on a node's disk (mkfs would pick 1 KiB for a small image).
    let args = ["-q", "-b", "4096", "-O", "encrypt"].map(Path::new);
    let made = run("mkfs.ext4", "e2fsprogs", &[&args[..], &[image]].concat());
    if made.is_err() {
        let _ = fs::remove_file(image);
    }
    made
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape_mountinfo(r"/a\040b\134c"), r"/a b\c");
        assert_eq!(unescape_mountinfo(r"/plain\0"), r"/plain\0");
    }

    #[test]
    fn the_root_is_a_mount_point_and_a_fresh_dir_is_not() {
        assert!(is_mount_point(Path::new("/")).unwrap());
        let dir = tempfile::tempdir().unwrap();
        let dir = fs::canonicalize(dir.path()).unwrap();
        assert!(!is_mount_point(&dir).unwrap());
    }

    #[test]
    fn a_missing_tool_is_named() {
        let err = run("no-such-tool-here", "nothing", &[]).unwrap_err();
        assert!(matches!(
            err,
            VolumeError::MissingTool {
                tool: "no-such-tool-here",
                ..
            }
        ));
        assert!(err.to_string().contains("no-such-tool-here"), "{err}");
    }

    /// A tool in hostd's own process group would get the Ctrl-C of a `hostd dev` terminal:
    /// each leads a group of its own (its process group, field 5 of /proc/PID/stat, is its own
    /// PID), or the script fails.
    #[test]
    fn tools_run_outside_hostds_process_group() {
        let script = Path::new(r#"test "$(cut -d' ' -f5 /proc/$$/stat)" = $$"#);
        run("sh", "dash", &[Path::new("-c"), script]).unwrap();
    }
}
