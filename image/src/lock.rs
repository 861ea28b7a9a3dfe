//! The package lock: every Debian package of the image with its exact version and SHA-256.
//!
//! `packages.toml` says *what* the image is made of (package names); `packages.lock` says
//! *exactly which bytes* (name, version, SHA-256 of the `.deb`). A build installs the lock and
//! nothing else, and refuses a `.deb` whose hash differs. Re-resolving the lock is a deliberate
//! act (`image lock`), reviewed as a diff like any code change.
//!
//! The lock's text form, one package a line, sorted by part then name:
//!
//! ```text
//! # comment
//! image  libc6  2.36-9+deb12u14  <64 hex digits>
//! stub   systemd-boot-efi  252.39-1~deb12u2  <64 hex digits>
//! ```

use serde::Deserialize;
use std::collections::BTreeSet;
use std::fmt;

/// Where a package goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Part {
    /// Installed into the image's root (and, in part, its initrd).
    Image,
    /// Read at build time for the UKI's EFI stub; not installed.
    Stub,
}

impl Part {
    fn as_str(self) -> &'static str {
        match self {
            Part::Image => "image",
            Part::Stub => "stub",
        }
    }
}

/// One pinned package.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Locked {
    /// Where it goes.
    pub part: Part,
    /// Debian package name.
    pub name: String,
    /// Exact Debian version (with its epoch, if any).
    pub version: String,
    /// SHA-256 of the `.deb`.
    pub sha256: [u8; 32],
}

/// A parsed lock.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Lock {
    /// The packages, sorted by part then name.
    pub packages: Vec<Locked>,
}

/// What is wrong with a lock or a package list.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockError {
    /// A line does not have the four fields.
    #[error("packages.lock line {line}: {reason}")]
    Line {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// The same package twice.
    #[error("packages.lock lists {0} twice")]
    Duplicate(String),
    /// `packages.toml` is not valid TOML of the expected shape.
    #[error("packages.toml")]
    Spec(#[source] toml::de::Error),
    /// `packages.toml` names something that cannot be a Debian package (the names reach
    /// `apt-get`'s command line).
    #[error("packages.toml: {0:?} is not a package name")]
    NotAPackageName(String),
}

impl Lock {
    /// Parses the text form. Every line is checked: a lock is a security input.
    pub fn parse(text: &str) -> Result<Lock, LockError> {
        let mut packages = Vec::new();
        let mut seen = BTreeSet::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |reason: &str| LockError::Line {
                line: i + 1,
                reason: reason.to_owned(),
            };
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [part, name, version, hash] = fields[..] else {
                return Err(bad("expected: part name version sha256"));
            };
            let part = match part {
                "image" => Part::Image,
                "stub" => Part::Stub,
                _ => return Err(bad("part must be `image` or `stub`")),
            };
            if !is_package_name(name) {
                return Err(bad("not a Debian package name"));
            }
            if !is_version(version) {
                return Err(bad("not a Debian version"));
            }
            let mut sha256 = [0u8; 32];
            hex::decode_to_slice(hash, &mut sha256)
                .map_err(|_| bad("sha256 must be 64 hex digits"))?;
            if !seen.insert(name.to_owned()) {
                return Err(LockError::Duplicate(name.to_owned()));
            }
            packages.push(Locked {
                part,
                name: name.to_owned(),
                version: version.to_owned(),
                sha256,
            });
        }
        packages.sort();
        Ok(Lock { packages })
    }

    /// The text form, with a header saying how it was made.
    pub fn render(&self) -> String {
        let mut out = String::from(
            "# Debian bookworm packages of the Sovereign Host image, pinned: part, name, version, \
             SHA-256 of the .deb.\n# Written by `cargo run -p image -- lock` from packages.toml; \
             review changes like code.\n",
        );
        let mut sorted = self.packages.clone();
        sorted.sort();
        for p in &sorted {
            out.push_str(&format!(
                "{} {} {} {}\n",
                p.part.as_str(),
                p.name,
                p.version,
                hex::encode(p.sha256)
            ));
        }
        out
    }

    /// The packages of one part.
    pub fn part(&self, part: Part) -> impl Iterator<Item = &Locked> {
        self.packages.iter().filter(move |p| p.part == part)
    }
}

/// Debian policy 5.6.1: lower-case letters, digits, `+ - .`, starting alphanumeric.
fn is_package_name(s: &str) -> bool {
    s.len() >= 2
        && s.as_bytes()[0].is_ascii_alphanumeric()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"+-.".contains(&b))
}

/// Debian policy 5.6.12: `[epoch:]upstream[-revision]` of alphanumerics and `. + ~ - :`.
fn is_version(s: &str) -> bool {
    !s.is_empty()
        && s.as_bytes()[0].is_ascii_digit()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".+~-:".contains(&b))
}

/// `packages.toml`: the names an image is made of.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// Packages installed into the image.
    pub image: PartSpec,
    /// Build-time inputs (the EFI stub).
    pub stub: PartSpec,
}

/// One part of the spec.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartSpec {
    /// Names whose dependency closure is wanted.
    pub install: Vec<String>,
    /// Names dropped from that closure.
    pub exclude: Vec<String>,
}

impl Spec {
    /// Parses `packages.toml`.
    pub fn parse(text: &str) -> Result<Spec, LockError> {
        let spec: Spec = toml::from_str(text).map_err(LockError::Spec)?;
        for name in spec
            .image
            .install
            .iter()
            .chain(&spec.image.exclude)
            .chain(&spec.stub.install)
            .chain(&spec.stub.exclude)
        {
            if !is_package_name(name) {
                return Err(LockError::NotAPackageName(name.clone()));
            }
        }
        Ok(spec)
    }
}

impl fmt::Display for Locked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.name, self.version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: &str = "2e6e2f1a0007dc43bc91c273fd36e91e40a4f1c2765a03eca68b70a42103878a";

    #[test]
    fn round_trips_sorted() {
        let text = format!("stub systemd-boot-efi 252.39-1~deb12u2 {H}\n# c\n\nimage zlib1g 1:1.2.13.dfsg-1 {H}\nimage libc6 2.36-9 {H}\n");
        let lock = Lock::parse(&text).unwrap();
        let names: Vec<_> = lock.packages.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["libc6", "zlib1g", "systemd-boot-efi"]);
        assert_eq!(Lock::parse(&lock.render()).unwrap(), lock);
        assert_eq!(lock.part(Part::Stub).count(), 1);
    }

    #[test]
    fn refuses_bad_lines() {
        let cases = [
            (format!("image libc6 2.36 {H} extra"), "expected"),
            (format!("rootfs libc6 2.36 {H}"), "part"),
            (format!("image LibC 2.36 {H}"), "package name"),
            (format!("image libc6 v2.36 {H}"), "version"),
            ("image libc6 2.36 abcd".to_owned(), "64 hex"),
            (
                format!("image libc6 2.36 {H}\nimage libc6 2.37 {H}"),
                "twice",
            ),
        ];
        for (text, want) in cases {
            let err = Lock::parse(&text).unwrap_err().to_string();
            assert!(err.contains(want), "{text}: {err}");
        }
    }

    #[test]
    fn the_shipped_spec_and_lock_parse_and_agree() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let spec =
            Spec::parse(&std::fs::read_to_string(dir.join("packages.toml")).unwrap()).unwrap();
        let lock =
            Lock::parse(&std::fs::read_to_string(dir.join("packages.lock")).unwrap()).unwrap();
        for p in &lock.packages {
            let excluded = match p.part {
                Part::Image => &spec.image.exclude,
                Part::Stub => &spec.stub.exclude,
            };
            assert!(
                !excluded.contains(&p.name),
                "{} is excluded but locked",
                p.name
            );
        }
        // Every package asked for is locked (those excluded, such as the kernel's meta
        // package, aside): a name added to packages.toml without `image lock` fails here.
        for (part, asked) in [(Part::Image, &spec.image), (Part::Stub, &spec.stub)] {
            for name in asked.install.iter().filter(|n| !asked.exclude.contains(n)) {
                assert!(
                    lock.part(part).any(|p| &p.name == name),
                    "{name} is in packages.toml but not locked: run `cargo run -p image -- lock`"
                );
            }
        }
        assert!(lock
            .part(Part::Image)
            .any(|p| p.name.starts_with("linux-image-6.1")));
    }
}
