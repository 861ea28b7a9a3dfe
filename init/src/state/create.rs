//! The state disk's first boot: the partition just made is blank, and this makes the sealed
//! volume on it, as `systemd-repart`'s `Encrypt=tpm2` and `Format=ext4` did
//! (the same LUKS2 layout, token and PCR 11 policy, so the initrd opens it on every later
//! boot), in a fraction of the time: no PBKDF benchmark, no loop device, no libcryptsetup.
//!
//! 1. a 32-byte secret from the OS's generator, sealed by the TPM to PCRs 4, 11 and 12 as
//!    they are now ([`PCRS`]: the PCR 11 the initrd sees when it unseals, since this runs
//!    after `leave-initrd` in the initrd, or before the root's `sysinit` phase);
//! 2. the header area wiped, then ext4 made inside a dm-crypt mapping of a new random
//!    AES-256-XTS volume key;
//! 3. only then the LUKS2 header: keyslot 0 (passphrase: the secret in base64, systemd's
//!    convention) and the `systemd-tpm2` token.
//!
//! A crash before step 3 leaves a blank partition (no LUKS header), which the next boot
//! makes again: nothing was stored on it yet.

use super::{map_volume, passphrase_of, read_u64, wait_for_tpm, Partition, StateError};
use crate::luks::format::{self, NewVolume};
use crate::luks::{Tpm2Token, VolumeKey};
use rand_core::{OsRng, RngCore};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use zeroize::Zeroizing;

/// The volume key: AES-256-XTS, cryptsetup's default.
const KEY_LEN: usize = 64;
/// The sealed secret's length, as systemd's.
const SECRET_LEN: usize = 32;
/// The PCRs the secret is sealed to, each as it is when the volume is made:
/// - 11: the UKI's sections and the boot phases (systemd-stub's and systemd-pcrphase's PCR).
///   Alone it is not enough: nothing stops a program from extending PCR 11, and every value
///   that goes into it is public (the manifest lists the sections' digests), so another
///   kernel, booted without systemd-stub, could bring PCR 11 from zero to this image's value
///   and unseal.
/// - 4: what the firmware started (each boot application's Authenticode hash, after its boot
///   attempts): another kernel or loader is in it for good, and nothing can extend it back.
/// - 12: systemd-stub's record of a command line given in place of the UKI's (which it
///   accepts when Secure Boot is off), and of credentials and system extensions: zero on
///   this image's boots, anything else under a changed command line such as another root
///   hash, which PCR 11 (the `.cmdline` section, unchanged) would not show.
pub(super) const PCRS: [u32; 3] = [4, 11, 12];
/// Fewer data sectors than this (32 MiB) is not a state disk but a mistake.
const MIN_DATA_SECTORS: u64 = 64 * 1024;
/// Debian's mkfs.ext4, in the image's root.
const MKFS: &str = "usr/sbin/mkfs.ext4";
/// The root's libraries and its dynamic loader (amd64, merged `/usr`).
const LIB_DIR: &str = "usr/lib/x86_64-linux-gnu";
const LOADER: &str = "ld-linux-x86-64.so.2";
/// The ext4 label (at most 16 bytes).
const FS_LABEL: &str = "sovereign-state";

/// Makes the sealed volume on the blank partition and maps it; returns the dm-crypt device
/// ([`super::NAME`]), holding a new, empty ext4.
pub(super) fn create(
    part: &Partition,
    root: &Path,
    tpm_device: &Path,
    wait: Duration,
) -> Result<PathBuf, StateError> {
    check_size(part)?;
    let mut secret = Zeroizing::new([0u8; SECRET_LEN]);
    OsRng
        .try_fill_bytes(&mut secret[..])
        .map_err(StateError::Random)?;
    wait_for_tpm(tpm_device, wait)?;
    let token = seal(tpm_device, &secret[..])?;
    let key = VolumeKey::random(&mut OsRng, KEY_LEN);
    let uuid = format::random_uuid(&mut OsRng);
    wipe(part)?;
    let mapped = map_volume(part, &uuid, &format::data_segment(), key.as_bytes())?;
    let made = mkfs(root, &mapped).and_then(|()| {
        let passphrase = passphrase_of(&secret[..]);
        let new = NewVolume {
            uuid: &uuid,
            label: super::PARTLABEL,
            volume_key: &key,
            passphrase: passphrase.as_bytes(),
            token: Some(&token),
        };
        write_header(part, &new)
    });
    if let Err(e) = made {
        // Without a header the partition is still blank, and the next try makes it again:
        // the mapping (and its live key) must not be left for that try to trip over.
        super::unmap(Some(&mapped));
        return Err(e);
    }
    Ok(mapped)
}

fn check_size(part: &Partition) -> Result<(), StateError> {
    let sectors = read_u64(&part.sys.join("size"))?;
    let offset = format::DATA_OFFSET / super::SECTOR;
    if sectors < offset + MIN_DATA_SECTORS {
        return Err(StateError::TooSmall { sectors, offset });
    }
    Ok(())
}

/// Seals the secret to [`PCRS`] under systemd's ECC storage key; returns keyslot 0's token.
fn seal(tpm_device: &Path, secret: &[u8]) -> Result<Tpm2Token, StateError> {
    use tpm::unseal::PrimaryAlg;
    let mut t = tpm::Device::open(tpm_device).map_err(StateError::Seal)?;
    let sealed = tpm::seal::seal(&mut t, secret, &PCRS, "sha256", PrimaryAlg::Ecc)
        .map_err(StateError::Seal)?;
    Ok(Tpm2Token {
        keyslots: vec![0],
        blob: sealed.blob,
        pcrs: PCRS.to_vec(),
        pcr_bank: "sha256".to_owned(),
        primary_alg: Some("ecc".to_owned()),
        policy_hash: sealed.policy_hash,
        pin: false,
        storage_key: Some(sealed.storage_key),
    })
}

/// Zeroes the header area, with the partition opened exclusively: a partition something
/// has mounted or mapped is refused by the kernel (EBUSY), never overwritten.
fn wipe(part: &Partition) -> Result<(), StateError> {
    let mut dev = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_EXCL)
        .open(&part.node)
        .map_err(|source| write_error(part, source))?;
    format::wipe(&mut dev).map_err(|source| luks_error(part, source))?;
    dev.sync_all().map_err(|source| write_error(part, source))
}

/// The header, written while the data segment is mapped (as cryptsetup changes keyslots of
/// an open volume: the header area is outside the mapping); [`format::write`] syncs each
/// step, so it is on the disk when this returns.
fn write_header(part: &Partition, new: &NewVolume) -> Result<(), StateError> {
    let mut dev: File = OpenOptions::new()
        .write(true)
        .open(&part.node)
        .map_err(|source| write_error(part, source))?;
    format::write(&mut dev, new, &mut OsRng).map_err(|source| luks_error(part, source))
}

/// ext4 as `systemd-repart`'s `Format=ext4` made it (no reserved blocks, no discard, inode
/// tables zeroed lazily by the kernel), with the verified root's `mkfs.ext4`, whose
/// `/etc/mke2fs.conf` adds the `encrypt` feature for leases' fscrypt scratch.
fn mkfs(root: &Path, device: &Path) -> Result<(), StateError> {
    let mut cmd = mkfs_command(root);
    let out = cmd
        .args(["-q", "-F", "-t", "ext4", "-L", FS_LABEL, "-m", "0"])
        .args(["-E", "nodiscard,lazy_itable_init=1"])
        .arg(device)
        .output()
        .map_err(|source| StateError::RunMkfs {
            path: PathBuf::from(cmd.get_program()),
            source,
        })?;
    if out.status.success() {
        return Ok(());
    }
    Err(StateError::Mkfs {
        device: device.to_owned(),
        status: out.status.to_string(),
        stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
    })
}

/// `mkfs.ext4` of the root at `root`. In the initrd (`root` is `/sysroot`) the root's own
/// dynamic loader runs it with the root's libraries and configuration: the initrd carries
/// neither, and the program and everything it loads are under the verified root hash.
fn mkfs_command(root: &Path) -> Command {
    if root == Path::new("/") {
        return Command::new(Path::new("/").join(MKFS));
    }
    let lib = root.join(LIB_DIR);
    let mut cmd = Command::new(lib.join(LOADER));
    cmd.arg("--library-path")
        .arg(&lib)
        .arg(root.join(MKFS))
        .env("MKE2FS_CONFIG", root.join("etc/mke2fs.conf"));
    cmd
}

fn luks_error(part: &Partition, source: crate::luks::LuksError) -> StateError {
    StateError::Luks {
        device: part.node.clone(),
        source,
    }
}

fn write_error(part: &Partition, source: std::io::Error) -> StateError {
    StateError::Write {
        path: part.node.clone(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partition(dir: &Path, sectors: u64) -> Partition {
        std::fs::write(dir.join("size"), format!("{sectors}\n")).unwrap();
        Partition {
            node: dir.join("node"),
            sys: dir.to_owned(),
        }
    }

    #[test]
    fn a_partition_without_room_for_data_is_refused_before_anything_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let small = partition(dir.path(), 32_768 + MIN_DATA_SECTORS - 1);
        assert!(matches!(
            check_size(&small),
            Err(StateError::TooSmall { offset: 32_768, .. })
        ));
        let other = tempfile::tempdir().unwrap();
        assert!(check_size(&partition(other.path(), 32_768 + MIN_DATA_SECTORS)).is_ok());
        // create() checks first: no TPM and no device node are touched.
        let err = create(
            &small,
            dir.path(),
            &dir.path().join("no-tpm"),
            Duration::ZERO,
        )
        .unwrap_err();
        assert!(matches!(err, StateError::TooSmall { .. }), "{err:?}");
    }

    #[test]
    fn mkfs_failures_carry_what_mkfs_said() {
        let dir = tempfile::tempdir().unwrap();
        match mkfs(Path::new("/"), &dir.path().join("missing-device")) {
            Err(StateError::Mkfs { stderr, status, .. }) => {
                assert!(!stderr.is_empty() && !status.is_empty());
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_mkfs_that_cannot_run_is_not_a_read_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = mkfs(dir.path(), &dir.path().join("device")).unwrap_err();
        let loader = dir.path().join(LIB_DIR).join(LOADER);
        assert!(
            matches!(&err, StateError::RunMkfs { path, .. } if *path == loader),
            "{err:?}"
        );
        assert!(err.to_string().starts_with("running "), "{err}");
        assert!(std::error::Error::source(&err).is_some());
    }

    /// The initrd's way: this machine's root stands in for `/sysroot` (Debian, amd64, as the
    /// image), its mkfs.ext4 run through its loader on a file.
    #[test]
    fn the_roots_mkfs_runs_through_its_loader_with_its_configuration() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        for d in ["usr/sbin", "usr/lib", "etc"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::os::unix::fs::symlink(Path::new("/").join(LIB_DIR), root.join(LIB_DIR)).unwrap();
        std::os::unix::fs::symlink(Path::new("/").join(MKFS), root.join(MKFS)).unwrap();
        // A configuration of its own: the image's adds `encrypt`, so does this one.
        let conf = std::fs::read_to_string("/etc/mke2fs.conf").unwrap();
        let conf = conf.replacen("base_features = ", "base_features = encrypt,", 1);
        std::fs::write(root.join("etc/mke2fs.conf"), conf).unwrap();
        let image = dir.path().join("fs.img");
        std::fs::File::create(&image)
            .unwrap()
            .set_len(64 << 20)
            .unwrap();
        mkfs(&root, &image).unwrap();
        let out = Command::new("dumpe2fs")
            .arg("-h")
            .arg(&image)
            .output()
            .unwrap();
        let header = String::from_utf8_lossy(&out.stdout);
        assert!(
            header.contains("Filesystem volume name:   sovereign-state"),
            "{header}"
        );
        assert!(
            header.contains(" encrypt"),
            "the root's mke2fs.conf was not used:\n{header}"
        );
    }
}
