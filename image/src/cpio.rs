//! A deterministic initramfs: the SVR4 "newc" cpio format the kernel unpacks, written with
//! every entry sorted by path, owned by 0:0, timestamped with the build's `SOURCE_DATE_EPOCH`
//! and numbered in order, so that the same tree gives the same bytes on any machine at any
//! time (`cpio` and `find` give neither: directory order and inode numbers leak in).
//!
//! Format (the kernel's `Documentation/driver-api/early-userspace/buffer-format.rst`): per
//! entry a 110-byte ASCII header (`070701` and thirteen 8-digit hex fields: ino, mode, uid,
//! gid, nlink, mtime, filesize, devmajor, devminor, rdevmajor, rdevminor, namesize with its
//! NUL, check), the name and its NUL padded to a multiple of 4, the data padded to a multiple
//! of 4; the archive ends with an entry named `TRAILER!!!`.

use std::collections::BTreeMap;

/// One member of the archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A directory with its permission bits.
    Dir { mode: u32 },
    /// A regular file with its permission bits and contents.
    File { mode: u32, data: Vec<u8> },
    /// A symbolic link to `target`.
    Symlink { target: String },
}

/// Why a path cannot be in the archive.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpioError {
    /// Empty, absolute, with `.` or `..` components, or with a NUL byte.
    #[error("{0:?} is not a relative path of plain components")]
    BadPath(String),
    /// Added twice with different contents.
    #[error("{0} is already in the archive as something else")]
    Conflict(String),
    /// More than the format's 4 GiB per member.
    #[error("{0} is larger than newc's 4 GiB per member")]
    TooLarge(String),
}

/// A tree to be written as an initramfs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Archive {
    entries: BTreeMap<String, Entry>,
}

fn check(path: &str) -> Result<(), CpioError> {
    let plain = !path.is_empty()
        && !path.starts_with('/')
        && !path.contains('\0')
        && path
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..");
    if plain {
        Ok(())
    } else {
        Err(CpioError::BadPath(path.to_owned()))
    }
}

impl Archive {
    /// An empty archive.
    pub fn new() -> Archive {
        Archive::default()
    }

    /// Adds `entry` at `path` (relative: `usr/lib/foo`), and its missing parent directories
    /// (mode 0755).
    pub fn add(&mut self, path: &str, entry: Entry) -> Result<(), CpioError> {
        check(path)?;
        if let Entry::File { data, .. } = &entry {
            if u32::try_from(data.len()).is_err() {
                return Err(CpioError::TooLarge(path.to_owned()));
            }
        }
        let mut parent = String::new();
        for c in path
            .split('/')
            .collect::<Vec<_>>()
            .split_last()
            .map(|(_, p)| p)
            .unwrap_or(&[])
        {
            if !parent.is_empty() {
                parent.push('/');
            }
            parent.push_str(c);
            self.insert(parent.clone(), Entry::Dir { mode: 0o755 }, true)?;
        }
        self.insert(path.to_owned(), entry, false)
    }

    fn insert(&mut self, path: String, entry: Entry, implied: bool) -> Result<(), CpioError> {
        match self.entries.get(&path) {
            None => {
                self.entries.insert(path, entry);
                Ok(())
            }
            Some(Entry::Dir { .. }) if implied => Ok(()),
            Some(e) if *e == entry => Ok(()),
            Some(_) => Err(CpioError::Conflict(path)),
        }
    }

    /// The archive's bytes, every entry stamped with `mtime` (seconds since the epoch, the
    /// build's `SOURCE_DATE_EPOCH`).
    pub fn write(&self, mtime: u32) -> Vec<u8> {
        let mut out = Vec::new();
        for (ino, (path, entry)) in self.entries.iter().enumerate() {
            let (mode, nlink, data): (u32, u32, &[u8]) = match entry {
                Entry::Dir { mode } => (0o040000 | (mode & 0o7777), 2, &[]),
                Entry::File { mode, data } => (0o100000 | (mode & 0o7777), 1, data),
                Entry::Symlink { target } => (0o120777, 1, target.as_bytes()),
            };
            let ino = u32::try_from(ino + 1).unwrap_or(u32::MAX);
            member(&mut out, path, ino, mode, nlink, mtime, data);
        }
        member(&mut out, "TRAILER!!!", 0, 0, 1, 0, &[]);
        out
    }
}

fn pad4(out: &mut Vec<u8>) {
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
}

fn member(out: &mut Vec<u8>, name: &str, ino: u32, mode: u32, nlink: u32, mtime: u32, data: &[u8]) {
    let namesize = name.len() + 1;
    let fields = [
        ino,
        mode,
        0, // uid
        0, // gid
        nlink,
        mtime,
        u32::try_from(data.len()).unwrap_or(u32::MAX),
        0, // devmajor
        0, // devminor
        0, // rdevmajor
        0, // rdevminor
        u32::try_from(namesize).unwrap_or(u32::MAX),
        0, // check
    ];
    out.extend_from_slice(b"070701");
    for f in fields {
        out.extend_from_slice(format!("{f:08X}").as_bytes());
    }
    out.extend_from_slice(name.as_bytes());
    out.push(0);
    pad4(out);
    out.extend_from_slice(data);
    pad4(out);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal newc reader: (name, mode, uid, mtime, data) of each member.
    fn read(mut b: &[u8]) -> Vec<(String, u32, u32, u32, Vec<u8>)> {
        let mut out = Vec::new();
        let start = b.as_ptr() as usize;
        loop {
            assert_eq!(&b[..6], b"070701");
            let field = |i: usize| {
                u32::from_str_radix(std::str::from_utf8(&b[6 + 8 * i..14 + 8 * i]).unwrap(), 16)
                    .unwrap()
            };
            let (mode, uid, mtime, size, namesize) = (
                field(1),
                field(2),
                field(5),
                field(6) as usize,
                field(11) as usize,
            );
            let name = std::str::from_utf8(&b[110..110 + namesize - 1])
                .unwrap()
                .to_owned();
            let mut at = 110 + namesize;
            at += (4 - (b.as_ptr() as usize + at - start) % 4) % 4;
            let data = b[at..at + size].to_vec();
            at += size;
            at += (4 - (b.as_ptr() as usize + at - start) % 4) % 4;
            b = &b[at..];
            if name == "TRAILER!!!" {
                assert!(b.is_empty());
                return out;
            }
            out.push((name, mode, uid, mtime, data));
        }
    }

    fn sample() -> Archive {
        let mut a = Archive::new();
        a.add(
            "usr/lib/systemd/systemd",
            Entry::File {
                mode: 0o755,
                data: b"ELF...".to_vec(),
            },
        )
        .unwrap();
        a.add(
            "init",
            Entry::Symlink {
                target: "usr/lib/systemd/systemd".into(),
            },
        )
        .unwrap();
        a.add(
            "etc/os-release",
            Entry::File {
                mode: 0o644,
                data: b"ID=sovereign\n".to_vec(),
            },
        )
        .unwrap();
        a
    }

    #[test]
    fn members_are_sorted_owned_by_root_stamped_and_readable() {
        let bytes = sample().write(1_700_000_000);
        assert_eq!(bytes.len() % 4, 0);
        let m = read(&bytes);
        let names: Vec<&str> = m.iter().map(|x| x.0.as_str()).collect();
        assert_eq!(
            names,
            [
                "etc",
                "etc/os-release",
                "init",
                "usr",
                "usr/lib",
                "usr/lib/systemd",
                "usr/lib/systemd/systemd"
            ]
        );
        assert!(m.iter().all(|x| x.2 == 0 && x.3 == 1_700_000_000));
        let init = m.iter().find(|x| x.0 == "init").unwrap();
        assert_eq!(
            (init.1, init.4.as_slice()),
            (0o120777, &b"usr/lib/systemd/systemd"[..])
        );
        let sd = m.iter().find(|x| x.0 == "usr/lib/systemd/systemd").unwrap();
        assert_eq!((sd.1, sd.4.as_slice()), (0o100755, &b"ELF..."[..]));
        assert_eq!(m.iter().find(|x| x.0 == "etc").unwrap().1, 0o040755);
    }

    #[test]
    fn the_same_tree_gives_the_same_bytes_whatever_the_insertion_order() {
        let a = sample().write(1);
        let mut b = Archive::new();
        b.add(
            "etc/os-release",
            Entry::File {
                mode: 0o644,
                data: b"ID=sovereign\n".to_vec(),
            },
        )
        .unwrap();
        b.add(
            "init",
            Entry::Symlink {
                target: "usr/lib/systemd/systemd".into(),
            },
        )
        .unwrap();
        b.add(
            "usr/lib/systemd/systemd",
            Entry::File {
                mode: 0o755,
                data: b"ELF...".to_vec(),
            },
        )
        .unwrap();
        assert_eq!(a, b.write(1));
        assert_ne!(a, sample().write(2), "the timestamp is in the bytes");
    }

    #[test]
    fn bad_paths_and_conflicts_are_refused() {
        let mut a = Archive::new();
        for p in ["", "/etc/x", "a/../b", "./a", "a//b", "a\0b"] {
            assert_eq!(
                a.add(p, Entry::Dir { mode: 0o755 }),
                Err(CpioError::BadPath(p.into())),
                "{p:?}"
            );
        }
        a.add(
            "etc",
            Entry::File {
                mode: 0o644,
                data: vec![],
            },
        )
        .unwrap();
        assert_eq!(
            a.add("etc/x", Entry::Dir { mode: 0o755 }),
            Err(CpioError::Conflict("etc".into()))
        );
    }
}
