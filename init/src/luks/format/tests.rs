//! Volumes written here, checked by real cryptsetup (2.6, which CI installs) and by this
//! crate's reader: cryptsetup reads the header, opens keyslot 0 with the passphrase and
//! recovers the same volume key; the secondary header stands in for a damaged primary; the
//! token round-trips; a half-made volume reads as not formatted.

use super::super::tests::{cryptsetup, path, volume_key_in};
use super::*;
use crate::luks::Header;
use rand_core::OsRng;
use std::fs::File;
use std::path::PathBuf;

const PASSPHRASE: &[u8] = b"c2VjcmV0IHNlYWxlZCB0byB0aGUgVFBN";

fn token() -> Tpm2Token {
    Tpm2Token {
        keyslots: vec![0],
        blob: vec![0, 2, 0xaa, 0xbb, 0, 1, 0xcc],
        pcrs: vec![11],
        pcr_bank: "sha256".into(),
        primary_alg: Some("ecc".into()),
        policy_hash: vec![0x11; 32],
        pin: false,
        storage_key: Some(vec![0, 2, 0x12, 0x34]),
    }
}

/// A 24 MiB device file in its own folder, formatted with `key`; returns it and the
/// passphrase's key file.
fn formatted(key: &VolumeKey, token: Option<&Tpm2Token>) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("state.img");
    let keyfile = dir.path().join("key");
    std::fs::write(&keyfile, PASSPHRASE).unwrap();
    let mut dev = File::create(&image).unwrap();
    dev.set_len(24 << 20).unwrap();
    wipe(&mut dev).unwrap();
    let uuid = random_uuid(&mut OsRng);
    let new = NewVolume {
        uuid: &uuid,
        label: "sovereign-state",
        volume_key: key,
        passphrase: PASSPHRASE,
        token,
    };
    write(&mut dev, &new, &mut OsRng).unwrap();
    (dir, image, keyfile)
}

fn dumped_key(image: &std::path::Path, keyfile: &std::path::Path) -> Vec<u8> {
    volume_key_in(&cryptsetup(&[
        "luksDump",
        "--dump-volume-key",
        "--batch-mode",
        "--key-file",
        path(keyfile),
        path(image),
    ]))
}

#[test]
fn cryptsetup_opens_what_is_written_and_finds_the_same_key() {
    for len in KEY_SIZES {
        let key = VolumeKey::random(&mut OsRng, len);
        let (_dir, image, keyfile) = formatted(&key, Some(&token()));
        assert_eq!(dumped_key(&image, &keyfile), key.as_bytes());
        let dump = cryptsetup(&["luksDump", path(&image)]);
        for expected in [
            "Version:       \t2",
            "Label:         \tsovereign-state",
            "offset: 16777216 [bytes]",
            "cipher: aes-xts-plain64",
            "PBKDF:      pbkdf2",
            // systemd's token plugin (Debian's systemd-cryptsetup) parsed the token.
            "tpm2-hash-pcrs:   11",
            "tpm2-pcr-bank:    sha256",
        ] {
            assert!(dump.contains(expected), "{expected:?} not in:\n{dump}");
        }
        // This crate's reader: the same key, segment and token.
        let header = Header::read(&mut File::open(&image).unwrap()).unwrap();
        let opened = header
            .unlock(&mut File::open(&image).unwrap(), PASSPHRASE, Some(&[0]))
            .unwrap();
        assert_eq!(opened.as_bytes(), key.as_bytes());
        assert_eq!(header.segment().unwrap(), data_segment());
        assert_eq!(header.systemd_tpm2_token(), Some(token()));
        assert_eq!(header.label(), "sovereign-state");
    }
}

#[test]
fn a_wrong_passphrase_opens_nothing() {
    let key = VolumeKey::random(&mut OsRng, 64);
    let (dir, image, _) = formatted(&key, None);
    let wrong = dir.path().join("wrong");
    std::fs::write(&wrong, b"not the passphrase").unwrap();
    let out = std::process::Command::new("/usr/sbin/cryptsetup")
        .args([
            "open",
            "--test-passphrase",
            "--key-file",
            path(&wrong),
            path(&image),
        ])
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "cryptsetup accepted a wrong passphrase"
    );
    let header = Header::read(&mut File::open(&image).unwrap()).unwrap();
    assert!(header.systemd_tpm2_token().is_none());
    assert!(matches!(
        header.unlock(&mut File::open(&image).unwrap(), b"wrong", None),
        Err(LuksError::WrongPassphrase { tried: 1 })
    ));
}

#[test]
fn the_secondary_header_stands_in_for_a_damaged_primary() {
    let key = VolumeKey::random(&mut OsRng, 64);
    let (_dir, image, keyfile) = formatted(&key, Some(&token()));
    let mut bytes = std::fs::read(&image).unwrap();
    bytes[BINARY_LEN + 10] ^= 0xff; // the primary's JSON
    std::fs::write(&image, &bytes).unwrap();
    assert!(matches!(
        Header::read(&mut File::open(&image).unwrap()),
        Err(LuksError::Checksum { .. })
    ));
    // cryptsetup finds the secondary header valid and uses it.
    assert_eq!(dumped_key(&image, &keyfile), key.as_bytes());
    // With the primary gone entirely, the volume is still not blank: never formatted over.
    assert!(!blank(&mut File::open(&image).unwrap()).unwrap());
    bytes[..BINARY_LEN].fill(0);
    std::fs::write(&image, &bytes).unwrap();
    assert!(!blank(&mut File::open(&image).unwrap()).unwrap());
    assert!(matches!(
        Header::read(&mut File::open(&image).unwrap()),
        Err(LuksError::NotLuks)
    ));
}

#[test]
fn a_volume_cryptsetup_made_is_not_blank() {
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("c.img");
    let keyfile = dir.path().join("key");
    std::fs::write(&keyfile, PASSPHRASE).unwrap();
    File::create(&image).unwrap().set_len(20 << 20).unwrap();
    assert!(blank(&mut File::open(&image).unwrap()).unwrap());
    cryptsetup(&[
        "luksFormat",
        "--type",
        "luks2",
        "--batch-mode",
        "--pbkdf",
        "pbkdf2",
        "--pbkdf-force-iterations",
        "1000",
        "--luks2-metadata-size",
        "64k",
        "--key-file",
        path(&keyfile),
        path(&image),
    ]);
    let mut bytes = std::fs::read(&image).unwrap();
    bytes[..BINARY_LEN].fill(0);
    std::fs::write(&image, &bytes).unwrap();
    // Its secondary header is at 64 KiB, the metadata size: found where cryptsetup put it.
    assert!(!blank(&mut File::open(&image).unwrap()).unwrap());
    // A device shorter than a header is blank, not an error.
    let tiny = dir.path().join("tiny");
    std::fs::write(&tiny, [0u8; 100]).unwrap();
    assert!(blank(&mut File::open(&tiny).unwrap()).unwrap());
}

#[test]
fn a_wiped_device_reads_as_not_formatted_and_bad_input_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("old.img");
    std::fs::write(&image, vec![0x5a; 20 << 20]).unwrap();
    let mut dev = std::fs::OpenOptions::new()
        .write(true)
        .open(&image)
        .unwrap();
    wipe(&mut dev).unwrap();
    let bytes = std::fs::read(&image).unwrap();
    assert!(bytes[..DATA_OFFSET as usize].iter().all(|&b| b == 0));
    assert!(bytes[DATA_OFFSET as usize..].iter().all(|&b| b == 0x5a));
    assert!(matches!(
        Header::read(&mut File::open(&image).unwrap()),
        Err(LuksError::NotLuks)
    ));
    assert!(blank(&mut File::open(&image).unwrap()).unwrap());
    let short = VolumeKey::random(&mut OsRng, 16);
    let uuid = random_uuid(&mut OsRng);
    let mut new = NewVolume {
        uuid: &uuid,
        label: "l",
        volume_key: &short,
        passphrase: PASSPHRASE,
        token: None,
    };
    assert!(matches!(
        write(&mut dev, &new, &mut OsRng),
        Err(LuksError::Invalid { .. })
    ));
    let key = VolumeKey::random(&mut OsRng, 32);
    let long_label = "x".repeat(48);
    new.volume_key = &key;
    new.label = &long_label;
    assert!(matches!(
        write(&mut dev, &new, &mut OsRng),
        Err(LuksError::Invalid { .. })
    ));
    // Nothing was written by the refusals.
    assert!(std::fs::read(&image).unwrap()[..DATA_OFFSET as usize]
        .iter()
        .all(|&b| b == 0));
}

#[test]
fn uuids_are_version_4_and_keys_random() {
    let u = random_uuid(&mut OsRng);
    assert_eq!(u.len(), 36);
    assert_eq!(&u[14..15], "4");
    assert!(matches!(&u[19..20], "8" | "9" | "a" | "b"), "{u}");
    assert_ne!(u, random_uuid(&mut OsRng));
    let (a, b) = (
        VolumeKey::random(&mut OsRng, 64),
        VolumeKey::random(&mut OsRng, 64),
    );
    assert_ne!(a.as_bytes(), b.as_bytes());
}

/// What [`write`] did to a device, in order: each write by the region it lands in, and syncs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Keyslots,
    Primary,
    Secondary,
    Sync,
}

/// An in-memory device that records its writes and syncs.
struct Recording {
    dev: std::io::Cursor<Vec<u8>>,
    steps: Vec<Step>,
}

impl Write for Recording {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let at = self.dev.position();
        let step = match at {
            _ if at >= KEYSLOTS_OFFSET => Step::Keyslots,
            _ if at >= HDR_SIZE => Step::Secondary,
            _ => Step::Primary,
        };
        if self.steps.last() != Some(&step) {
            self.steps.push(step);
        }
        self.dev.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Seek for Recording {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        self.dev.seek(pos)
    }
}

impl Durable for Recording {
    fn sync(&mut self) -> io::Result<()> {
        self.steps.push(Step::Sync);
        Ok(())
    }
}

#[test]
fn the_keyslot_area_is_durable_before_the_primary_header_and_that_before_the_secondary() {
    let key = VolumeKey::random(&mut OsRng, 64);
    let uuid = random_uuid(&mut OsRng);
    let new = NewVolume {
        uuid: &uuid,
        label: "sovereign-state",
        volume_key: &key,
        passphrase: PASSPHRASE,
        token: Some(&token()),
    };
    let mut dev = Recording {
        dev: std::io::Cursor::new(vec![0u8; DATA_OFFSET as usize]),
        steps: Vec::new(),
    };
    write(&mut dev, &new, &mut OsRng).unwrap();
    use Step::*;
    assert_eq!(
        dev.steps,
        [Keyslots, Sync, Primary, Sync, Secondary, Sync],
        "a power cut between two writes must never leave a header without its keyslot"
    );
    // What was written is a volume this crate opens.
    let mut bytes = dev.dev;
    let header = Header::read(&mut bytes).unwrap();
    let opened = header.unlock(&mut bytes, PASSPHRASE, None).unwrap();
    assert_eq!(opened.as_bytes(), key.as_bytes());
}
