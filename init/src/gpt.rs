//! A GPT partition table with the state disk's one partition, written on a node's first boot
//! in place of `systemd-repart` (whose start-up alone took about 2 s of that boot under
//! emulation), so the initrd can make the state disk before the root starts.
//!
//! The layout is UEFI 2.10 §5.3 as every partitioner writes it: a protective MBR, the primary
//! header at LBA 1 with 128 entries of 128 bytes after it, their copies at the end of the
//! disk, CRC32 over the entries and over each header. The one partition starts at 1 MiB and
//! ends on a 1 MiB boundary; its type is `linux-generic` (repart's name for
//! 0FC63DAF-8483-4772-8E79-3D69D8477DE4), its name the label the init finds it by.
//!
//! Only a blank disk is partitioned ([`is_blank`]): nothing in its first or last MiB, where
//! a partition table, a filesystem's superblock or a LUKS header of a disk in use would be.
//! Or one that holds nothing but part of the very table [`write`] makes for it
//! ([`is_unfinished`]): what a power cut during [`write`] leaves. Whatever order the writes
//! reach the disk in, such a table has no partition the kernel shows, so nothing was ever
//! stored in it; without this, one badly timed power cut would make the disk "in use" for
//! good and the node would never boot again without someone wiping it.

use rand_core::{CryptoRng, RngCore};
use std::io::{self, Read, Seek, SeekFrom, Write};

/// `linux-generic`: 0FC63DAF-8483-4772-8E79-3D69D8477DE4.
const LINUX_GENERIC: &str = "0fc63daf-8483-4772-8e79-3d69d8477de4";
const ENTRIES: u32 = 128;
const ENTRY_LEN: u32 = 128;
const ENTRIES_BYTES: u64 = (ENTRIES * ENTRY_LEN) as u64;
const HEADER_LEN: u32 = 92;
/// Partitions start and end on 1 MiB boundaries.
const GRAIN: u64 = 1024 * 1024;
/// How much of each end of a disk must be zero for it to count as blank.
const BLANK_SPAN: u64 = 1024 * 1024;
/// The name field holds 36 UTF-16 code units.
const NAME_UNITS: usize = 36;

/// Why the table could not be written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GptError {
    /// Reading or writing the disk failed.
    #[error("{op} at byte {offset} of the disk")]
    Io {
        /// What was being done.
        op: &'static str,
        /// Where.
        offset: u64,
        #[source]
        source: io::Error,
    },
    /// The disk is too small for a table and a partition of at least one grain.
    #[error("the disk ({bytes} bytes) is too small for a partition table and a partition")]
    TooSmall {
        /// Its size.
        bytes: u64,
    },
    /// A logical sector size GPT does not use.
    #[error("logical sectors of {0} bytes (512 or 4096 expected)")]
    SectorSize(u64),
    /// The partition's name does not fit its field.
    #[error("the partition name {0:?} is longer than 36 UTF-16 units")]
    Name(String),
}

/// Where the one partition lies, in logical sectors (both ends inclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// Its first sector.
    pub first: u64,
    /// Its last sector.
    pub last: u64,
}

/// Whether the first and last MiB of a disk of `bytes` bytes are all zero.
pub fn is_blank(dev: &mut (impl Read + Seek), bytes: u64) -> Result<bool, GptError> {
    let span = BLANK_SPAN.min(bytes);
    for offset in [0, bytes - span] {
        if !zero(&read_at(dev, offset, span)?) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Whether the disk's first and last MiB hold nothing but (part of) the table [`write`] makes
/// on a disk of `bytes` bytes for a partition named `name`, any partition GUID and disk GUID,
/// and the partition's first 32 KiB (where a LUKS2 header and its secondary would be) are
/// zero. Each of the table's sectors is either zero or exactly what [`write`] writes there:
/// a foreign table, another partition, or any other byte makes the answer false.
pub fn is_unfinished(
    dev: &mut (impl Read + Seek),
    bytes: u64,
    sector: u64,
    name: &str,
) -> Result<bool, GptError> {
    if sector != 512 && sector != 4096 {
        return Ok(false);
    }
    let Ok(layout) = Layout::new(bytes, sector) else {
        return Ok(false);
    };
    let partition_head = read_at(dev, layout.partition.first * sector, 2 * LUKS_HDR)?;
    if !zero(&partition_head) {
        return Ok(false);
    }
    let span = BLANK_SPAN.min(bytes);
    let head = read_at(dev, 0, span)?;
    let tail_at = bytes - span;
    let tail = read_at(dev, tail_at, span)?;
    let s = sector as usize;
    let entries_len = ENTRIES_BYTES as usize;
    let backup_entries = (layout.backup_entries * sector - tail_at) as usize;
    let backup_header = (layout.last_lba * sector - tail_at) as usize;
    Ok(
        either_zero_or(&head[..s], &pad(&protective_mbr(layout.last_lba), sector))
            && header_or_zero(&head[s..2 * s], &layout, true)
            && entries_or_zero(&head[2 * s..2 * s + entries_len], &layout, name)
            && zero(&head[2 * s + entries_len..])
            && zero(&tail[..backup_entries])
            && entries_or_zero(&tail[backup_entries..backup_header], &layout, name)
            && header_or_zero(&tail[backup_header..], &layout, false),
    )
}

/// The LUKS2 header area's size (one of its two copies).
const LUKS_HDR: u64 = 16 * 1024;

fn zero(bytes: &[u8]) -> bool {
    bytes.iter().all(|&b| b == 0)
}

fn either_zero_or(bytes: &[u8], expected: &[u8]) -> bool {
    zero(bytes) || bytes == expected
}

/// A header sector: zero, or [`Layout::header`]'s with its own disk GUID and entries CRC.
fn header_or_zero(sector: &[u8], layout: &Layout, primary: bool) -> bool {
    if zero(sector) {
        return true;
    }
    let len = HEADER_LEN as usize;
    let (Ok(guid), Ok(crc)) = (
        <[u8; 16]>::try_from(&sector[56..72]),
        <[u8; 4]>::try_from(&sector[88..92]),
    ) else {
        return false;
    };
    let expected = layout.header(primary, &guid, u32::from_le_bytes(crc));
    sector[..len] == expected[..] && zero(&sector[len..])
}

/// An entry array: zero, or [`entries`]' with its own partition GUID.
fn entries_or_zero(array: &[u8], layout: &Layout, name: &str) -> bool {
    if zero(array) {
        return true;
    }
    let Ok(guid) = <[u8; 16]>::try_from(&array[16..32]) else {
        return false;
    };
    entries_with(layout, name, guid).is_ok_and(|expected| array == &expected[..])
}

fn read_at(dev: &mut (impl Read + Seek), offset: u64, len: u64) -> Result<Vec<u8>, GptError> {
    let mut buf = vec![0u8; len as usize];
    dev.seek(SeekFrom::Start(offset))
        .and_then(|_| dev.read_exact(&mut buf))
        .map_err(|source| GptError::Io {
            op: "reading",
            offset,
            source,
        })?;
    Ok(buf)
}

/// Writes a GPT holding one partition named `name` over the disk's usable space: backup
/// entries and header first, then the primary ones and the protective MBR. The caller syncs
/// and has the kernel re-read the table.
pub fn write(
    dev: &mut (impl Write + Seek),
    bytes: u64,
    sector: u64,
    name: &str,
    rng: &mut (impl RngCore + CryptoRng),
) -> Result<Extent, GptError> {
    if sector != 512 && sector != 4096 {
        return Err(GptError::SectorSize(sector));
    }
    let layout = Layout::new(bytes, sector)?;
    let entries = entries(&layout, name, rng)?;
    let entries_crc = crc32fast::hash(&entries);
    let disk_guid = random_guid(rng);
    let backup = layout.header(false, &disk_guid, entries_crc);
    let primary = layout.header(true, &disk_guid, entries_crc);
    write_at(dev, layout.backup_entries * sector, &entries)?;
    write_at(dev, layout.last_lba * sector, &pad(&backup, sector))?;
    write_at(dev, 2 * sector, &entries)?;
    write_at(dev, sector, &pad(&primary, sector))?;
    write_at(dev, 0, &pad(&protective_mbr(layout.last_lba), sector))?;
    dev.flush().map_err(|source| GptError::Io {
        op: "flushing",
        offset: 0,
        source,
    })?;
    Ok(layout.partition)
}

/// The table's geometry on a disk of a given size.
struct Layout {
    last_lba: u64,
    first_usable: u64,
    last_usable: u64,
    backup_entries: u64,
    partition: Extent,
}

impl Layout {
    fn new(bytes: u64, sector: u64) -> Result<Layout, GptError> {
        let entry_sectors = ENTRIES_BYTES / sector;
        let sectors = bytes / sector;
        let grain = GRAIN / sector;
        let too_small = GptError::TooSmall { bytes };
        let last_lba = sectors.checked_sub(1).ok_or(too_small)?;
        let last_usable = last_lba
            .checked_sub(entry_sectors + 1)
            .ok_or(GptError::TooSmall { bytes })?;
        let end = (last_usable + 1) / grain * grain;
        if end < 2 * grain {
            return Err(GptError::TooSmall { bytes });
        }
        Ok(Layout {
            last_lba,
            first_usable: 2 + entry_sectors,
            last_usable,
            backup_entries: last_lba - entry_sectors,
            partition: Extent {
                first: grain,
                last: end - 1,
            },
        })
    }

    /// The 92-byte header: at LBA 1 (`primary`) or at the disk's last LBA.
    fn header(&self, primary: bool, disk_guid: &[u8; 16], entries_crc: u32) -> Vec<u8> {
        let (mine, other, entries_at) = if primary {
            (1, self.last_lba, 2)
        } else {
            (self.last_lba, 1, self.backup_entries)
        };
        let mut h = Vec::with_capacity(HEADER_LEN as usize);
        h.extend_from_slice(b"EFI PART");
        h.extend_from_slice(&0x0001_0000u32.to_le_bytes());
        h.extend_from_slice(&HEADER_LEN.to_le_bytes());
        h.extend_from_slice(&[0; 8]); // CRC32 (set below), reserved
        for lba in [mine, other, self.first_usable, self.last_usable] {
            h.extend_from_slice(&u64::to_le_bytes(lba));
        }
        h.extend_from_slice(disk_guid);
        h.extend_from_slice(&u64::to_le_bytes(entries_at));
        h.extend_from_slice(&ENTRIES.to_le_bytes());
        h.extend_from_slice(&ENTRY_LEN.to_le_bytes());
        h.extend_from_slice(&entries_crc.to_le_bytes());
        let crc = crc32fast::hash(&h);
        h[16..20].copy_from_slice(&crc.to_le_bytes());
        h
    }
}

/// The entry array: the one partition, with a random GUID, then empty entries.
fn entries(
    layout: &Layout,
    name: &str,
    rng: &mut (impl RngCore + CryptoRng),
) -> Result<Vec<u8>, GptError> {
    entries_with(layout, name, random_guid(rng))
}

/// The entry array whose one partition has the GUID `guid`.
fn entries_with(layout: &Layout, name: &str, guid: [u8; 16]) -> Result<Vec<u8>, GptError> {
    let units: Vec<u16> = name.encode_utf16().collect();
    if units.len() > NAME_UNITS {
        return Err(GptError::Name(name.to_owned()));
    }
    let mut e = vec![0u8; ENTRIES_BYTES as usize];
    e[..16].copy_from_slice(&guid_bytes(LINUX_GENERIC));
    e[16..32].copy_from_slice(&guid);
    e[32..40].copy_from_slice(&layout.partition.first.to_le_bytes());
    e[40..48].copy_from_slice(&layout.partition.last.to_le_bytes());
    for (i, u) in units.iter().enumerate() {
        e[56 + 2 * i..58 + 2 * i].copy_from_slice(&u.to_le_bytes());
    }
    Ok(e)
}

/// A GUID in its on-disk form: the first three fields little-endian, the rest as written.
fn guid_bytes(text: &str) -> [u8; 16] {
    let hex: String = text.chars().filter(|c| *c != '-').collect();
    let mut b = [0u8; 16];
    for (i, byte) in b.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap_or(0);
    }
    b[0..4].reverse();
    b[4..6].reverse();
    b[6..8].reverse();
    b
}

/// A random (version 4) GUID in its on-disk form.
fn random_guid(rng: &mut (impl RngCore + CryptoRng)) -> [u8; 16] {
    let mut b = [0u8; 16];
    rng.fill_bytes(&mut b);
    b[7] = (b[7] & 0x0f) | 0x40; // the version, in the little-endian third field
    b[8] = (b[8] & 0x3f) | 0x80;
    b
}

/// One partition of type 0xEE over the whole disk (or as much as 32 bits count).
fn protective_mbr(last_lba: u64) -> Vec<u8> {
    let mut m = vec![0u8; 512];
    let size = u32::try_from(last_lba).unwrap_or(u32::MAX);
    m[446..462].copy_from_slice(&[0, 0, 2, 0, 0xee, 0xff, 0xff, 0xff, 1, 0, 0, 0, 0, 0, 0, 0]);
    m[458..462].copy_from_slice(&size.to_le_bytes());
    m[510] = 0x55;
    m[511] = 0xaa;
    m
}

fn pad(block: &[u8], sector: u64) -> Vec<u8> {
    let mut v = block.to_vec();
    v.resize(sector as usize, 0);
    v
}

fn write_at(dev: &mut (impl Write + Seek), offset: u64, buf: &[u8]) -> Result<(), GptError> {
    dev.seek(SeekFrom::Start(offset))
        .and_then(|_| dev.write_all(buf))
        .map_err(|source| GptError::Io {
            op: "writing",
            offset,
            source,
        })
}

#[cfg(test)]
mod tests;
