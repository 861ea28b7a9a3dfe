//! Debian's tools, driven from the build: `apt-get` resolves and downloads, `dpkg-deb -x`
//! unpacks. Nothing here installs anything on the build host or runs a maintainer script.

use crate::lock::{Lock, Locked, Part, PartSpec, Spec};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Why resolving, fetching or unpacking failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AptError {
    /// A tool could not be started or failed.
    #[error(transparent)]
    Tool(#[from] crate::tool::ToolError),
    /// The archive no longer serves a pinned version (a security update replaced it).
    #[error(
        "package {name} {version} of packages.lock is no longer served by the Debian archive \
         (it serves {available}); a newer version replaced it. Refresh the lock on purpose with \
         `cargo run -p image -- lock`, review the diff, and commit it"
    )]
    Superseded {
        /// Package.
        name: String,
        /// Pinned version.
        version: String,
        /// What the archive serves now.
        available: String,
    },
    /// A downloaded `.deb` is not the pinned one.
    #[error(
        "{path}: SHA-256 {got}, but packages.lock pins {name} {version} at {want}. Delete the \
         file so that the build downloads it again; if the download differs too, do not build: \
         the mirror serves other bytes than those the lock was made from"
    )]
    HashMismatch {
        /// The file.
        path: PathBuf,
        /// Package.
        name: String,
        /// Version.
        version: String,
        /// Pinned hash.
        want: String,
        /// Hash of the file.
        got: String,
    },
    /// File system error.
    #[error("{path}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// `apt-get` resolved nothing or something unexpected.
    #[error("resolving packages: {0}")]
    Resolve(String),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> AptError + '_ {
    move |source| AptError::Io {
        path: path.to_owned(),
        source,
    }
}

fn run(cmd: &mut Command) -> Result<String, AptError> {
    Ok(crate::tool::run(cmd)?)
}

/// Resolves `packages.toml` into a lock: the dependency closure of each part as apt would
/// install it on an empty system (no Recommends), minus the excluded names, each with the
/// SHA-256 the archive's index gives.
pub fn resolve(spec: &Spec) -> Result<Lock, AptError> {
    let mut packages = Vec::new();
    for (part, ps) in [(Part::Image, &spec.image), (Part::Stub, &spec.stub)] {
        for (name, version) in closure(ps)? {
            let sha256 = index_sha256(&name, &version)?;
            packages.push(Locked {
                part,
                name,
                version,
                sha256,
            });
        }
    }
    packages.sort();
    Ok(Lock { packages })
}

/// `apt-get -s install` against an empty dpkg status: every package it would unpack.
fn closure(ps: &PartSpec) -> Result<BTreeMap<String, String>, AptError> {
    let out = run(Command::new("apt-get")
        .args([
            "-s",
            "-qq",
            "-o",
            "Dir::State::status=/dev/null",
            "-o",
            "APT::Install-Recommends=false",
            "install",
        ])
        .args(&ps.install))?;
    let mut found = BTreeMap::new();
    for line in out.lines() {
        let mut f = line.split_whitespace();
        if f.next() != Some("Inst") {
            continue;
        }
        let (Some(name), Some(version)) = (f.next(), f.next()) else {
            return Err(AptError::Resolve(format!("unexpected line {line:?}")));
        };
        let name = name.split(':').next().unwrap_or(name);
        if !ps.exclude.iter().any(|e| e == name) {
            found.insert(name.to_owned(), version.trim_start_matches('(').to_owned());
        }
    }
    if found.is_empty() {
        return Err(AptError::Resolve(format!(
            "apt-get resolved nothing for {:?}",
            ps.install
        )));
    }
    Ok(found)
}

/// The SHA-256 the archive index lists for `name` `version` (`apt-cache show`).
fn index_sha256(name: &str, version: &str) -> Result<[u8; 32], AptError> {
    let out = run(Command::new("apt-cache").args(["show", &format!("{name}={version}")]))?;
    for stanza in out.split("\n\n") {
        let field = |key: &str| {
            stanza
                .lines()
                .find_map(|l| l.strip_prefix(key).map(str::trim))
        };
        if field("Version:") != Some(version) {
            continue;
        }
        let mut sha = [0u8; 32];
        if let Some(h) = field("SHA256:") {
            if hex::decode_to_slice(h, &mut sha).is_ok() {
                return Ok(sha);
            }
        }
    }
    Err(AptError::Resolve(format!(
        "the index has no SHA256 for {name} {version}"
    )))
}

/// The versions of `name` the archive serves now.
fn served_versions(name: &str) -> String {
    let out = Command::new("apt-cache")
        .args(["madison", name])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let versions: Vec<&str> = out
        .lines()
        .filter_map(|l| l.split('|').nth(1).map(str::trim))
        .collect();
    if versions.is_empty() {
        "no version".to_owned()
    } else {
        versions.join(", ")
    }
}

/// The cache file of a pinned package.
pub fn deb_path(cache: &Path, p: &Locked) -> PathBuf {
    cache.join(format!(
        "{}_{}_{}.deb",
        p.name,
        p.version.replace(':', "%3a"),
        hex::encode(&p.sha256[..4])
    ))
}

/// Makes sure every pinned `.deb` is in `cache` with its pinned hash, downloading the missing
/// ones with `apt-get download`. A hash mismatch is an error, never a retry with other bytes.
pub fn fetch(lock: &Lock, cache: &Path) -> Result<Vec<(Locked, PathBuf)>, AptError> {
    std::fs::create_dir_all(cache).map_err(io(cache))?;
    let missing: Vec<&Locked> = lock
        .packages
        .iter()
        .filter(|p| !deb_path(cache, p).exists())
        .collect();
    if !missing.is_empty() {
        download(&missing, cache)?;
    }
    lock.packages
        .iter()
        .map(|p| {
            let path = deb_path(cache, p);
            check_hash(p, &path)?;
            Ok((p.clone(), path))
        })
        .collect()
}

fn download(missing: &[&Locked], cache: &Path) -> Result<(), AptError> {
    let staging = cache.join(".download");
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::create_dir_all(&staging).map_err(io(&staging))?;
    let specs: Vec<String> = missing
        .iter()
        .map(|p| format!("{}={}", p.name, p.version))
        .collect();
    if let Err(e) = run(Command::new("apt-get")
        .current_dir(&staging)
        .args(["download", "-qq"])
        .args(&specs))
    {
        return Err(explain_download_failure(missing).unwrap_or(e));
    }
    for p in missing {
        let prefix = format!("{}_", p.name);
        let file = std::fs::read_dir(&staging)
            .map_err(io(&staging))?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|f| {
                f.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&prefix))
            })
            .ok_or_else(|| AptError::Resolve(format!("apt-get did not download {p}")))?;
        check_hash(p, &file)?;
        let dest = deb_path(cache, p);
        std::fs::rename(&file, &dest).map_err(io(&dest))?;
    }
    let _ = std::fs::remove_dir_all(&staging);
    Ok(())
}

/// After a failed download: the first pinned version the archive no longer serves.
fn explain_download_failure(missing: &[&Locked]) -> Option<AptError> {
    missing.iter().find_map(|p| {
        let served = Command::new("apt-cache")
            .args(["show", &format!("{}={}", p.name, p.version)])
            .output()
            .is_ok_and(|o| o.status.success());
        (!served).then(|| AptError::Superseded {
            name: p.name.clone(),
            version: p.version.clone(),
            available: served_versions(&p.name),
        })
    })
}

fn check_hash(p: &Locked, path: &Path) -> Result<(), AptError> {
    let got = sha256_file(path)?;
    if got != p.sha256 {
        return Err(AptError::HashMismatch {
            path: path.to_owned(),
            name: p.name.clone(),
            version: p.version.clone(),
            want: hex::encode(p.sha256),
            got: hex::encode(got),
        });
    }
    Ok(())
}

/// SHA-256 of a file, streamed.
pub fn sha256_file(path: &Path) -> Result<[u8; 32], AptError> {
    let mut f = std::fs::File::open(path).map_err(io(path))?;
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h).map_err(io(path))?;
    Ok(h.finalize().into())
}

/// Unpacks a `.deb`'s files into `dest` (`dpkg-deb -x`: data only, no scripts).
pub fn unpack(deb: &Path, dest: &Path) -> Result<(), AptError> {
    run(Command::new("dpkg-deb").arg("-x").arg(deb).arg(dest)).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn locked(sha256: [u8; 32]) -> Locked {
        Locked {
            part: Part::Image,
            name: "hello".into(),
            version: "1:2.10-3".into(),
            sha256,
        }
    }

    #[test]
    fn a_cached_deb_with_other_bytes_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = locked([7; 32]);
        let path = deb_path(dir.path(), &p);
        assert!(path.to_str().unwrap().contains("1%3a2.10-3"));
        std::fs::write(&path, b"not the pinned deb").unwrap();
        let lock = Lock { packages: vec![p] };
        let err = fetch(&lock, dir.path()).unwrap_err();
        assert!(matches!(err, AptError::HashMismatch { .. }), "{err}");
        assert!(err.to_string().contains("pins hello 1:2.10-3"), "{err}");
    }

    #[test]
    fn a_cached_deb_with_the_pinned_bytes_is_used_without_downloading() {
        let dir = tempfile::tempdir().unwrap();
        let bytes = b"pretend deb";
        let p = locked(Sha256::digest(bytes).into());
        std::fs::write(deb_path(dir.path(), &p), bytes).unwrap();
        let lock = Lock {
            packages: vec![p.clone()],
        };
        let got = fetch(&lock, dir.path()).unwrap();
        assert_eq!(got, vec![(p.clone(), deb_path(dir.path(), &p))]);
    }
}
