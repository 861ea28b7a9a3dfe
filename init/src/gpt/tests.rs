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
