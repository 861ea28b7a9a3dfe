//! Tables written here, read by util-linux's libblkid (`blkid -p`, `partx`), which checks
//! both CRCs and falls back to the backup header when the primary is damaged.

use super::*;
use rand_core::OsRng;
use std::fs::File;
use std::path::Path;
use std::process::Command;

fn tool(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program} (util-linux) is needed: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn disk(dir: &Path, bytes: u64) -> (std::path::PathBuf, File) {
    let path = dir.join("disk.img");
    let f = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    f.set_len(bytes).unwrap();
    (path, f)
}

#[test]
fn blkid_and_partx_read_the_table_and_its_one_partition() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = 512 << 20;
    let (path, mut f) = disk(dir.path(), bytes);
    assert!(is_blank(&mut f, bytes).unwrap());
    let extent = write(&mut f, bytes, 512, "sovereign-state", &mut OsRng).unwrap();
    assert_eq!(extent.first, 2048);
    // The last usable sector is 1048542; the partition ends on the last whole MiB before it.
    assert_eq!(extent.last, 1_046_527);
    let p = path.to_str().unwrap();
    let probe = tool("blkid", &["-p", "-o", "export", p]);
    assert!(probe.contains("PTTYPE=gpt"), "{probe}");
    let parts = tool(
        "partx",
        &["--raw", "--noheadings", "-o", "NR,START,END,NAME,TYPE", p],
    );
    assert_eq!(
        parts.trim(),
        "1 2048 1046527 sovereign-state 0fc63daf-8483-4772-8e79-3d69d8477de4"
    );
    assert!(!is_blank(&mut f, bytes).unwrap());
}

#[test]
fn the_backup_header_stands_in_for_a_damaged_primary() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = 64 << 20;
    let (path, mut f) = disk(dir.path(), bytes);
    write(&mut f, bytes, 512, "sovereign-state", &mut OsRng).unwrap();
    let mut image = std::fs::read(&path).unwrap();
    image[512 + 24] ^= 1; // the primary header's own LBA: its CRC no longer matches
    std::fs::write(&path, &image).unwrap();
    let parts = tool(
        "partx",
        &[
            "--raw",
            "--noheadings",
            "-o",
            "NR,NAME",
            path.to_str().unwrap(),
        ],
    );
    assert_eq!(parts.trim(), "1 sovereign-state");
}

#[test]
fn four_k_sectors_small_disks_and_long_names() {
    let dir = tempfile::tempdir().unwrap();
    let (_, mut f) = disk(dir.path(), 64 << 20);
    let extent = write(&mut f, 64 << 20, 4096, "s", &mut OsRng).unwrap();
    assert_eq!(extent.first, 256);
    assert_eq!((extent.last + 1) % 256, 0);
    assert!(matches!(
        write(&mut f, 64 << 20, 1024, "s", &mut OsRng),
        Err(GptError::SectorSize(1024))
    ));
    assert!(matches!(
        write(&mut f, 2 << 20, 512, "s", &mut OsRng),
        Err(GptError::TooSmall { .. })
    ));
    assert!(matches!(
        write(&mut f, 0, 512, "s", &mut OsRng),
        Err(GptError::TooSmall { .. })
    ));
    assert!(matches!(
        write(&mut f, 64 << 20, 512, &"x".repeat(37), &mut OsRng),
        Err(GptError::Name(_))
    ));
}

#[test]
fn anything_at_either_end_makes_a_disk_not_blank() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = 8 << 20;
    for at in [1024, bytes - 1] {
        let (path, mut f) = disk(dir.path(), bytes);
        assert!(is_blank(&mut f, bytes).unwrap());
        let mut image = std::fs::read(&path).unwrap();
        image[at as usize] = 0x53; // an ext4 superblock's first byte, or a backup GPT's
        std::fs::write(&path, &image).unwrap();
        assert!(!is_blank(&mut File::open(&path).unwrap(), bytes).unwrap());
    }
    // A disk smaller than the span is read once, whole.
    let (_, mut small) = disk(dir.path(), 4096);
    assert!(is_blank(&mut small, 4096).unwrap());
}

#[test]
fn guids_are_in_their_on_disk_form() {
    assert_eq!(
        hex::encode(guid_bytes(LINUX_GENERIC)),
        "af3dc60f838472478e793d69d8477de4"
    );
    let g = random_guid(&mut OsRng);
    assert_eq!(g[7] >> 4, 4);
    assert_eq!(g[8] >> 6, 2);
}

/// The byte ranges of the five pieces [`write`] writes on a disk of this layout.
fn pieces(layout: &Layout, sector: u64) -> [std::ops::Range<usize>; 5] {
    let (s, e) = (sector as usize, ENTRIES_BYTES as usize);
    let backup_entries = (layout.backup_entries * sector) as usize;
    let backup_header = (layout.last_lba * sector) as usize;
    [
        backup_entries..backup_entries + e,
        backup_header..backup_header + s,
        2 * s..2 * s + e,
        s..2 * s,
        0..s,
    ]
}

/// Whatever subset of its writes reached the disk before a power cut, the disk holds
/// "our unfinished table", and may be partitioned again; the finished table too (the caller
/// asks only when the kernel shows no partition of it).
#[test]
fn every_part_of_the_table_a_power_cut_may_leave_is_ours_to_redo() {
    for sector in [512u64, 4096] {
        let bytes = 8u64 << 20;
        let mut full = std::io::Cursor::new(vec![0u8; bytes as usize]);
        write(&mut full, bytes, sector, "sovereign-state", &mut OsRng).unwrap();
        let full = full.into_inner();
        let layout = Layout::new(bytes, sector).unwrap();
        let pieces = pieces(&layout, sector);
        for subset in 1u32..32 {
            let mut disk = vec![0u8; bytes as usize];
            for (i, range) in pieces.iter().enumerate() {
                if subset & (1 << i) != 0 {
                    disk[range.clone()].copy_from_slice(&full[range.clone()]);
                }
            }
            let mut dev = std::io::Cursor::new(disk);
            assert!(
                is_unfinished(&mut dev, bytes, sector, "sovereign-state").unwrap(),
                "sector {sector}, pieces {subset:05b}"
            );
        }
    }
}

/// Anything beyond the table's own bytes, or a table that is not the one [`write`] makes for
/// this disk and name, is a disk in use.
#[test]
fn anything_but_our_table_is_not_ours_to_redo() {
    let bytes = 8u64 << 20;
    let ours = |name: &str| {
        let mut c = std::io::Cursor::new(vec![0u8; bytes as usize]);
        write(&mut c, bytes, 512, name, &mut OsRng).unwrap();
        c.into_inner()
    };
    let check = |disk: Vec<u8>| {
        is_unfinished(
            &mut std::io::Cursor::new(disk),
            bytes,
            512,
            "sovereign-state",
        )
        .unwrap()
    };
    assert!(check(ours("sovereign-state")));
    // Another partition name: another's table.
    assert!(!check(ours("data")));
    // Something where the partition starts (a LUKS header, a superblock).
    let mut used = ours("sovereign-state");
    used[(1 << 20) + 1] = b'L';
    assert!(!check(used));
    // A byte in the first MiB outside the table.
    let mut other = ours("sovereign-state");
    other[512 << 10] = 1;
    assert!(!check(other));
    // A header whose CRC does not hold.
    let mut torn = ours("sovereign-state");
    torn[512 + 20] ^= 1;
    assert!(!check(torn));
    // The table of a disk of another size (a disk image grown since).
    let mut smaller = std::io::Cursor::new(vec![0u8; bytes as usize]);
    write(
        &mut smaller,
        bytes - (1 << 20),
        512,
        "sovereign-state",
        &mut OsRng,
    )
    .unwrap();
    assert!(!check(smaller.into_inner()));
    // A blank disk is blank, not an unfinished table; both answers allow partitioning.
    assert!(check(vec![0u8; bytes as usize]));
}
