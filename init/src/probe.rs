//! Which block device is which, from its first bytes: the two signatures the image's root is
//! made of. There is no udev in this initrd (under emulation its coldplug alone took seconds),
//! so the `/dev/disk/by-uuid/` names the command line uses are resolved here, from the same
//! superblock fields libblkid reads.

use std::io::Read;
use std::path::Path;

/// How many bytes of a device [`identify`] and [`ext4_label`] need.
pub const PROBE_LEN: usize = 4096;

/// erofs: `EROFS_SUPER_OFFSET`, its magic (little-endian `0xE0F5E1E2`) and the offset of its
/// `uuid` within `struct erofs_super_block`.
const EROFS_OFFSET: usize = 1024;
const EROFS_MAGIC: [u8; 4] = [0xe2, 0xe1, 0xf5, 0xe0];
const EROFS_UUID: usize = 48;

/// dm-verity's on-disk superblock (cryptsetup's `struct verity_sb`): signature, then
/// version, hash type, and the UUID at offset 16.
pub(crate) const VERITY_SIGNATURE: &[u8; 8] = b"verity\0\0";
const VERITY_UUID: usize = 16;

/// What a device's first bytes say it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signature {
    /// An erofs filesystem, with its UUID.
    Erofs([u8; 16]),
    /// A dm-verity hash device with a superblock, with its UUID.
    Verity([u8; 16]),
}

impl Signature {
    /// The UUID, as `/dev/disk/by-uuid/` spells it.
    pub fn uuid(&self) -> String {
        let (Signature::Erofs(u) | Signature::Verity(u)) = self;
        format_uuid(u)
    }
}

/// The signature in `head` (a device's first bytes), if it is one of the root's.
pub fn identify(head: &[u8]) -> Option<Signature> {
    if head.get(..8) == Some(VERITY_SIGNATURE.as_slice()) {
        return uuid_at(head, VERITY_UUID).map(Signature::Verity);
    }
    if head.get(EROFS_OFFSET..EROFS_OFFSET + 4) == Some(EROFS_MAGIC.as_slice()) {
        return uuid_at(head, EROFS_OFFSET + EROFS_UUID).map(Signature::Erofs);
    }
    None
}

/// A block device's first [`PROBE_LEN`] bytes; none for a device that cannot be read (no
/// medium, an unbound loop device, one shorter than that).
pub fn read_head(node: &Path) -> Option<Vec<u8>> {
    let mut head = vec![0u8; PROBE_LEN];
    let mut device = std::fs::File::open(node).ok()?;
    device.read_exact(&mut head).ok()?;
    Some(head)
}

/// ext4's superblock: 1024 bytes in, its magic (`0xEF53`, little-endian) at 0x38 and its
/// 16-byte volume name at 0x78, as libblkid reads them.
const EXT4_SUPER: usize = 1024;
const EXT4_MAGIC_AT: usize = 0x38;
const EXT4_MAGIC: [u8; 2] = [0x53, 0xef];
const EXT4_LABEL_AT: usize = 0x78;

/// The volume name in an ext4 superblock (`head`: a device's first bytes), without its NUL
/// padding; none if `head` is not ext4. The provisioning disk is found by it.
pub fn ext4_label(head: &[u8]) -> Option<&[u8]> {
    let sb = head.get(EXT4_SUPER..EXT4_SUPER + 1024)?;
    if sb.get(EXT4_MAGIC_AT..EXT4_MAGIC_AT + 2)? != EXT4_MAGIC {
        return None;
    }
    let name = sb.get(EXT4_LABEL_AT..EXT4_LABEL_AT + 16)?;
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    Some(&name[..end])
}

fn uuid_at(head: &[u8], at: usize) -> Option<[u8; 16]> {
    head.get(at..at + 16)?.try_into().ok()
}

/// `8-4-4-4-12` lowercase hex.
pub fn format_uuid(u: &[u8; 16]) -> String {
    let h = hex::encode(u);
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const UUID: [u8; 16] = [
        0x5c, 0xe7, 0xa1, 0xe5, 0, 0, 0x40, 0, 0x80, 0, 0, 0, 0, 0, 0, 1,
    ];

    #[test]
    fn an_erofs_superblock_gives_its_uuid() {
        let mut head = vec![0u8; PROBE_LEN];
        head[1024..1028].copy_from_slice(&EROFS_MAGIC);
        head[1024 + 48..1024 + 64].copy_from_slice(&UUID);
        let sig = identify(&head).unwrap();
        assert_eq!(sig, Signature::Erofs(UUID));
        assert_eq!(sig.uuid(), "5ce7a1e5-0000-4000-8000-000000000001");
    }

    #[test]
    fn a_verity_superblock_gives_its_uuid() {
        let mut head = vec![0u8; 512];
        head[..8].copy_from_slice(VERITY_SIGNATURE);
        head[16..32].copy_from_slice(&UUID);
        assert_eq!(identify(&head), Some(Signature::Verity(UUID)));
    }

    #[test]
    fn other_or_short_devices_are_nothing() {
        assert_eq!(identify(&[0u8; PROBE_LEN]), None);
        assert_eq!(identify(b"verity\0\0short"), None);
        let mut head = vec![0u8; 1030];
        head[1024..1028].copy_from_slice(&EROFS_MAGIC);
        assert_eq!(identify(&head), None, "magic but no room for the UUID");
    }
}
