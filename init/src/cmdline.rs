//! What the kernel command line says about the root. The command line is the UKI's
//! `.cmdline` section, measured into PCR 11 by systemd-stub, so what it names is what the
//! image was built with; the keys are systemd's own (`roothash=`,
//! `systemd.verity_root_data=`, `systemd.verity_root_hash=`, `rootfstype=`), which the
//! root's systemd reads too.

use std::path::PathBuf;

/// Where the root is, and the digest that every block of it must hash up to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootSpec {
    /// The dm-verity root hash: lowercase hex of a SHA-256 digest.
    pub root_hash: String,
    /// The device holding the root filesystem.
    pub data: Device,
    /// The device holding its hash tree.
    pub hash: Device,
    /// The root's filesystem type.
    pub fstype: String,
    /// `quiet`: say nothing on the console unless the boot fails.
    pub quiet: bool,
    /// `sovereign.state_disk=`: the node's state disk by its `/dev/disk/by-id/` name (the
    /// build's `--state-device`), which the initrd partitions and makes on the first boot.
    pub state_disk: Option<String>,
}

/// A block device as the command line names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Device {
    /// By the UUID in its superblock (`/dev/disk/by-uuid/…`, a name udev would make; there
    /// is no udev here, so the init reads the superblocks itself).
    Uuid(String),
    /// By its device node (`/dev/vdb`).
    Path(PathBuf),
}

/// Why the command line does not name a root the init can open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CmdlineError {
    /// A key the image's build always writes is absent.
    #[error("the kernel command line has no {0}= (the image's build writes it)")]
    Missing(&'static str),
    /// `roothash=` is not 64 hex digits.
    #[error("roothash={0} is not a SHA-256 digest in hex")]
    RootHash(String),
    /// A device is neither `/dev/…` nor `/dev/disk/by-uuid/…`.
    #[error("{key}={value}: give a device node under /dev or /dev/disk/by-uuid/UUID")]
    Device {
        /// The command line key.
        key: &'static str,
        /// Its value.
        value: String,
    },
}

const ROOT_HASH: &str = "roothash";
const DATA: &str = "systemd.verity_root_data";
const HASH: &str = "systemd.verity_root_hash";
const FSTYPE: &str = "rootfstype";
const STATE_DISK: &str = "sovereign.state_disk";

/// Reads the root's description from `/proc/cmdline`'s text. As with the kernel and systemd,
/// the last occurrence of a key wins.
pub fn parse(cmdline: &str) -> Result<RootSpec, CmdlineError> {
    let value = |key: &'static str| {
        cmdline
            .split_whitespace()
            .filter_map(|word| word.split_once('='))
            .filter(|(k, _)| *k == key)
            .map(|(_, v)| v.trim_matches('"'))
            .next_back()
    };
    let required = |key| value(key).ok_or(CmdlineError::Missing(key));
    let root_hash = required(ROOT_HASH)?;
    if root_hash.len() != 64 || !root_hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(CmdlineError::RootHash(root_hash.to_owned()));
    }
    Ok(RootSpec {
        root_hash: root_hash.to_ascii_lowercase(),
        data: device(DATA, required(DATA)?)?,
        hash: device(HASH, required(HASH)?)?,
        fstype: required(FSTYPE)?.to_owned(),
        quiet: cmdline.split_whitespace().any(|w| w == "quiet"),
        state_disk: value(STATE_DISK).map(str::to_owned),
    })
}

fn device(key: &'static str, value: &str) -> Result<Device, CmdlineError> {
    let bad = || CmdlineError::Device {
        key,
        value: value.to_owned(),
    };
    if let Some(uuid) = value.strip_prefix("/dev/disk/by-uuid/") {
        if uuid.is_empty() || uuid.contains('/') {
            return Err(bad());
        }
        return Ok(Device::Uuid(uuid.to_ascii_lowercase()));
    }
    if value.starts_with("/dev/") && !value.contains("/../") {
        return Ok(Device::Path(PathBuf::from(value)));
    }
    Err(bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH_HEX: &str = "5d2c4f0e6a1b3c7d9e8f00112233445566778899aabbccddeeff001122334455";

    fn line(extra: &str) -> String {
        format!(
            "console=ttyS0 roothash={HASH_HEX} systemd.verity_root_data=/dev/disk/by-uuid/5CE7A1E5-0000-4000-8000-000000000001 \
             systemd.verity_root_hash=/dev/vdc rootfstype=erofs ro quiet {extra}"
        )
    }

    #[test]
    fn the_images_command_line_names_its_root() {
        let spec = parse(&line("")).unwrap();
        assert_eq!(spec.root_hash, HASH_HEX);
        assert_eq!(
            spec.data,
            Device::Uuid("5ce7a1e5-0000-4000-8000-000000000001".into())
        );
        assert_eq!(spec.hash, Device::Path("/dev/vdc".into()));
        assert_eq!(spec.fstype, "erofs");
        assert!(spec.quiet);
        assert_eq!(spec.state_disk, None);
        let with_state = parse(&line(
            "sovereign.state_disk=/dev/disk/by-id/virtio-sovereign-state",
        ))
        .unwrap();
        assert_eq!(
            with_state.state_disk.as_deref(),
            Some("/dev/disk/by-id/virtio-sovereign-state")
        );
    }

    #[test]
    fn the_last_occurrence_wins_as_in_the_kernel() {
        let spec = parse(&line("rootfstype=ext4")).unwrap();
        assert_eq!(spec.fstype, "ext4");
    }

    #[test]
    fn missing_or_malformed_values_are_named() {
        assert_eq!(
            parse("console=ttyS0 ro"),
            Err(CmdlineError::Missing("roothash"))
        );
        let short = line("roothash=abcd");
        assert_eq!(parse(&short), Err(CmdlineError::RootHash("abcd".into())));
        let bad = line("systemd.verity_root_hash=LABEL=x");
        assert!(matches!(
            parse(&bad),
            Err(CmdlineError::Device { key, .. }) if key == "systemd.verity_root_hash"
        ));
        let escape = line("systemd.verity_root_hash=/dev/../etc/passwd");
        assert!(matches!(parse(&escape), Err(CmdlineError::Device { .. })));
    }
}
