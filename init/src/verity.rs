//! The root's dm-verity table, from the hash device's superblock (cryptsetup's on-disk
//! format, which `veritysetup format` wrote at build time) and the root hash on the measured
//! command line. The superblock itself is not trusted: every parameter read from it shapes
//! the hash tree, so a changed one makes the tree's top differ from the root hash and the
//! root unreadable, as with `veritysetup open`.

use crate::probe::VERITY_SIGNATURE;
use std::fmt;

/// The superblock is 512 bytes; the hash tree starts in the next hash block.
pub const SUPERBLOCK_LEN: usize = 512;

/// A block device's number, as device-mapper tables name devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevNum {
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
}

impl DevNum {
    /// The number of the block device node at `path`.
    pub fn of(path: &std::path::Path) -> std::io::Result<DevNum> {
        use std::os::unix::fs::MetadataExt;
        let rdev = std::fs::metadata(path)?.rdev();
        Ok(DevNum {
            major: rustix::fs::major(rdev),
            minor: rustix::fs::minor(rdev),
        })
    }
}

impl fmt::Display for DevNum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.major, self.minor)
    }
}

/// What the hash device's superblock says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superblock {
    /// 1: the normal format (0 is Chrome OS's, which the image never writes).
    pub hash_type: u32,
    /// The hash algorithm's kernel name.
    pub algorithm: String,
    /// Bytes per data block.
    pub data_block_size: u32,
    /// Bytes per hash block.
    pub hash_block_size: u32,
    /// Data blocks covered.
    pub data_blocks: u64,
    /// The salt.
    pub salt: Vec<u8>,
}

/// A device-mapper target line: its length in 512-byte sectors and its parameters.
///
/// `Debug` shows the parameters' length only: a `crypt` target's hold the volume key.
#[derive(Clone, PartialEq, Eq)]
pub struct Table {
    /// Length in sectors.
    pub sectors: u64,
    /// The `verity` target's parameters.
    pub params: String,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("sectors", &self.sectors)
            .field("params", &format_args!("<{} bytes>", self.params.len()))
            .finish()
    }
}

/// Why the hash device cannot give a table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VerityError {
    /// Fewer bytes than a superblock.
    #[error("the hash device's superblock is cut short ({0} bytes)")]
    Short(usize),
    /// No `verity` signature.
    #[error("the hash device has no dm-verity superblock")]
    NotVerity,
    /// A superblock version other than 1.
    #[error("dm-verity superblock version {0} (only 1 exists)")]
    Version(u32),
    /// A hash type other than 1.
    #[error("dm-verity hash type {0} (the image uses 1, the normal format)")]
    HashType(u32),
    /// An algorithm other than SHA-256.
    #[error("dm-verity algorithm {0:?} (the image's root hash is SHA-256)")]
    Algorithm(String),
    /// A block size that is not a power of two from 512 to 64 KiB.
    #[error("dm-verity {which} block size {size}")]
    BlockSize {
        /// `data` or `hash`.
        which: &'static str,
        /// The size read.
        size: u32,
    },
    /// No data blocks, or more than a device can have.
    #[error("dm-verity data block count {0}")]
    DataBlocks(u64),
    /// A salt longer than the superblock holds.
    #[error("dm-verity salt of {0} bytes (at most 256)")]
    Salt(u16),
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Reads the superblock from the hash device's first bytes.
pub fn parse(bytes: &[u8]) -> Result<Superblock, VerityError> {
    if bytes.len() < SUPERBLOCK_LEN {
        return Err(VerityError::Short(bytes.len()));
    }
    if &bytes[..8] != VERITY_SIGNATURE {
        return Err(VerityError::NotVerity);
    }
    let version = u32_at(bytes, 8);
    if version != 1 {
        return Err(VerityError::Version(version));
    }
    let hash_type = u32_at(bytes, 12);
    if hash_type != 1 {
        return Err(VerityError::HashType(hash_type));
    }
    let name = &bytes[32..64];
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    let algorithm = String::from_utf8_lossy(&name[..end]).into_owned();
    if algorithm != "sha256" {
        return Err(VerityError::Algorithm(algorithm));
    }
    let block = |which, size: u32| {
        if size.is_power_of_two() && (512..=65536).contains(&size) {
            Ok(size)
        } else {
            Err(VerityError::BlockSize { which, size })
        }
    };
    let data_block_size = block("data", u32_at(bytes, 64))?;
    let hash_block_size = block("hash", u32_at(bytes, 68))?;
    let mut blocks = [0u8; 8];
    blocks.copy_from_slice(&bytes[72..80]);
    let data_blocks = u64::from_le_bytes(blocks);
    let sectors_per_block = u64::from(data_block_size / 512);
    if data_blocks == 0 || data_blocks.checked_mul(sectors_per_block).is_none() {
        return Err(VerityError::DataBlocks(data_blocks));
    }
    let salt_size = u16::from_le_bytes([bytes[80], bytes[81]]);
    if salt_size > 256 {
        return Err(VerityError::Salt(salt_size));
    }
    Ok(Superblock {
        hash_type,
        algorithm,
        data_block_size,
        hash_block_size,
        data_blocks,
        salt: bytes[88..88 + usize::from(salt_size)].to_vec(),
    })
}

impl Superblock {
    /// The `verity` target over `data`, checked against `hash` (whose tree starts in the
    /// hash block after the superblock) and `root_hash` (hex).
    pub fn table(&self, data: DevNum, hash: DevNum, root_hash: &str) -> Table {
        let salt = if self.salt.is_empty() {
            "-".to_owned()
        } else {
            hex::encode(&self.salt)
        };
        Table {
            sectors: self.data_blocks * u64::from(self.data_block_size / 512),
            params: format!(
                "{} {data} {hash} {} {} {} 1 {} {root_hash} {salt}",
                self.hash_type,
                self.data_block_size,
                self.hash_block_size,
                self.data_blocks,
                self.algorithm,
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn superblock() -> Vec<u8> {
        let mut b = vec![0u8; 4096];
        b[..8].copy_from_slice(VERITY_SIGNATURE);
        b[8..12].copy_from_slice(&1u32.to_le_bytes());
        b[12..16].copy_from_slice(&1u32.to_le_bytes());
        b[32..38].copy_from_slice(b"sha256");
        b[64..68].copy_from_slice(&4096u32.to_le_bytes());
        b[68..72].copy_from_slice(&4096u32.to_le_bytes());
        b[72..80].copy_from_slice(&36560u64.to_le_bytes());
        b[80..82].copy_from_slice(&32u16.to_le_bytes());
        for (i, s) in b[88..120].iter_mut().enumerate() {
            *s = i as u8;
        }
        b
    }

    #[test]
    fn the_table_is_what_veritysetup_would_load() {
        let sb = parse(&superblock()).unwrap();
        let t = sb.table(
            DevNum {
                major: 254,
                minor: 16,
            },
            DevNum {
                major: 254,
                minor: 32,
            },
            "ab12",
        );
        assert_eq!(t.sectors, 36560 * 8);
        assert_eq!(
            t.params,
            "1 254:16 254:32 4096 4096 36560 1 sha256 ab12 \
             000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
        );
    }

    #[test]
    fn a_superblock_the_image_never_writes_is_refused() {
        let change = |at: usize, bytes: &[u8]| {
            let mut b = superblock();
            b[at..at + bytes.len()].copy_from_slice(bytes);
            parse(&b)
        };
        assert_eq!(parse(&[0u8; 100]), Err(VerityError::Short(100)));
        assert_eq!(change(0, b"notverit"), Err(VerityError::NotVerity));
        assert_eq!(change(8, &2u32.to_le_bytes()), Err(VerityError::Version(2)));
        assert_eq!(
            change(12, &0u32.to_le_bytes()),
            Err(VerityError::HashType(0))
        );
        assert_eq!(
            change(32, b"md5\0\0\0"),
            Err(VerityError::Algorithm("md5".into()))
        );
        assert_eq!(
            change(64, &1000u32.to_le_bytes()),
            Err(VerityError::BlockSize {
                which: "data",
                size: 1000
            })
        );
        assert_eq!(
            change(72, &0u64.to_le_bytes()),
            Err(VerityError::DataBlocks(0))
        );
        assert_eq!(
            change(80, &300u16.to_le_bytes()),
            Err(VerityError::Salt(300))
        );
    }

    #[test]
    fn no_salt_is_a_dash() {
        let mut b = superblock();
        b[80..82].copy_from_slice(&0u16.to_le_bytes());
        let t = parse(&b).unwrap().table(
            DevNum { major: 1, minor: 2 },
            DevNum { major: 3, minor: 4 },
            "ff",
        );
        assert!(t.params.ends_with(" ff -"), "{}", t.params);
    }
}
