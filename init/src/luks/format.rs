//! LUKS2, written: a new volume as `cryptsetup luksFormat` lays it out by default (16 KiB
//! headers, the keyslots area up to 16 MiB, the data from there to the end of the device),
//! with one PBKDF2 keyslot for a high-entropy passphrase and, optionally, a `systemd-tpm2`
//! token naming it. The image's first boot makes the node's state disk with it, in place of
//! `systemd-repart`, whose libcryptsetup spends seconds under emulation benchmarking a PBKDF
//! for a secret that needs none.
//!
//! The keyslot's KDF is what systemd uses for TPM-sealed secrets
//! (`cryptsetup_set_minimal_pbkdf`): PBKDF2-SHA512, 1000 iterations, no benchmark. A
//! passphrase typed by a person needs a slow KDF; 32 random bytes the TPM releases only under
//! the right PCRs do not. The volume key's digest is PBKDF2-SHA256, also 1000 iterations.
//!
//! The order of writing lets the caller leave no half-made volume after a crash: [`wipe`]
//! the header area first, fill the data segment ([`data_segment`]) through a dm-crypt
//! mapping of the new key, then [`write`] the keyslot area, the primary header and the
//! secondary, each made durable ([`Durable::sync`]) before the next is written: the page
//! cache writes back in any order, and a primary header on disk before its keyslot area
//! would be a volume that never opens. Until the primary is written the device is
//! [`blank`]: no header at all, so nothing of value, and it may be formatted again. A device
//! with a secondary header but no primary is a volume whose primary was damaged, not a blank
//! one: cryptsetup can repair it from the secondary, and it must never be formatted over.

use super::{
    xor, Hash, LuksError, Segment, Tpm2Token, VolumeKey, AREA_SECTOR, BINARY_LEN, CSUM, CSUM_ALG,
    HDR_OFFSET_AT, HDR_SIZE_AT, LABEL, MAGIC, UUID, VERSION_AT,
};
use aes::cipher::consts::U16;
use aes::cipher::{BlockCipherDecrypt, BlockCipherEncrypt, BlockSizeUser, KeyInit};
use aes::{Aes128, Aes256};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use pbkdf2::sha2::{Digest, Sha256};
use rand_core::{CryptoRng, RngCore};
use serde_json::{json, Value};
use std::fs::File;
use std::io::{self, Cursor, Read, Seek, SeekFrom, Write};
use xts_mode::{get_tweak_default, Xts128};
use zeroize::Zeroizing;

/// Each of the two headers: the 4 KiB binary header and 12 KiB of JSON.
const HDR_SIZE: u64 = 16 * 1024;
/// The keyslots area follows both headers.
const KEYSLOTS_OFFSET: u64 = 2 * HDR_SIZE;
/// The data segment starts at 16 MiB, cryptsetup's default alignment.
pub const DATA_OFFSET: u64 = 16 * 1024 * 1024;
/// The secondary header's magic.
const MAGIC_2: &[u8; 6] = b"SKUL\xba\xbe";
const SEQID_AT: usize = 16;
const SALT: (usize, usize) = (104, 168);
/// The AF split's stripes (LUKS's fixed 4000).
const STRIPES: usize = 4000;
const KDF_ITERATIONS: u32 = 1000;
const DIGEST_ITERATIONS: u32 = 1000;
const SALT_LEN: usize = 32;
/// The data segment's cipher: AES-XTS with the volume key's two halves.
const CIPHER: &str = "aes-xts-plain64";
/// XTS with AES-128 or AES-256: 32- or 64-byte volume keys.
const KEY_SIZES: [usize; 2] = [32, 64];

/// What a new volume holds besides its layout.
pub struct NewVolume<'a> {
    /// The binary header's UUID (see [`random_uuid`]).
    pub uuid: &'a str,
    /// The binary header's label (at most 47 bytes).
    pub label: &'a str,
    /// The data segment's key: 32 or 64 bytes.
    pub volume_key: &'a VolumeKey,
    /// Keyslot 0's passphrase.
    pub passphrase: &'a [u8],
    /// A `systemd-tpm2` token for keyslot 0 (token 0), when the passphrase is sealed.
    pub token: Option<&'a Tpm2Token>,
}

impl VolumeKey {
    /// `len` random bytes from `rng` (the OS's generator in production).
    pub fn random(rng: &mut (impl RngCore + CryptoRng), len: usize) -> VolumeKey {
        let mut key = Zeroizing::new(vec![0u8; len]);
        rng.fill_bytes(&mut key);
        VolumeKey(key)
    }
}

/// A random (version 4) UUID in the hyphenated lower-case form cryptsetup writes.
pub fn random_uuid(rng: &mut (impl RngCore + CryptoRng)) -> String {
    let mut b = [0u8; 16];
    rng.fill_bytes(&mut b);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    crate::probe::format_uuid(&b)
}

/// The data segment every volume made here has: from [`DATA_OFFSET`] to the end of the
/// device, [`CIPHER`] in 512-byte sectors, IVs counted from the segment's start.
pub fn data_segment() -> Segment {
    Segment {
        offset: DATA_OFFSET,
        size: None,
        iv_tweak: 0,
        cipher: CIPHER.to_owned(),
        sector_size: AREA_SECTOR as u32,
    }
}

/// Zeroes both headers and the keyslots area, so that no earlier volume's header or keyslot
/// survives and the device reads as not formatted until [`write`].
pub fn wipe(dev: &mut (impl Write + Seek)) -> Result<(), LuksError> {
    let zeros = vec![0u8; 1024 * 1024];
    for chunk in 0..DATA_OFFSET / zeros.len() as u64 {
        write_at(dev, chunk * zeros.len() as u64, &zeros)?;
    }
    Ok(())
}

/// Whether `dev` has neither a primary LUKS header nor a secondary one at any offset
/// cryptsetup may put it (a power of two from 16 KiB to 4 MiB).
pub fn blank(dev: &mut (impl Read + Seek)) -> Result<bool, LuksError> {
    let len = dev
        .seek(SeekFrom::End(0))
        .map_err(|source| super::LuksError::Read {
            offset: 0,
            len: 0,
            source,
        })?;
    let mut offset = 0;
    while offset + MAGIC.len() as u64 <= len && offset <= super::HDR_MAX {
        let mut magic = [0u8; 6];
        super::read_at(dev, offset, &mut magic)?;
        if &magic == MAGIC || &magic == MAGIC_2 {
            return Ok(false);
        }
        offset = if offset == 0 {
            super::HDR_MIN
        } else {
            offset * 2
        };
    }
    Ok(true)
}

/// A device whose writes can be ordered: [`write`] syncs between its steps so that what a
/// power cut leaves is one of the states the module documentation names, whatever order the
/// page cache would have written back in.
pub trait Durable: Write + Seek {
    /// Returns once everything written so far is on stable storage.
    fn sync(&mut self) -> io::Result<()>;
}

/// A block device or image: `fdatasync`, which also flushes the disk's write cache.
impl Durable for File {
    fn sync(&mut self) -> io::Result<()> {
        self.sync_data()
    }
}

/// Memory has no power cut to survive.
impl Durable for Cursor<Vec<u8>> {
    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Writes keyslot 0's area, then the primary and the secondary header, syncing after each:
/// the primary reaches the disk only after the keyslot it names, and returns only once all
/// three are durable.
pub fn write(
    dev: &mut impl Durable,
    new: &NewVolume,
    rng: &mut (impl RngCore + CryptoRng),
) -> Result<(), LuksError> {
    let key = new.volume_key.as_bytes();
    if !KEY_SIZES.contains(&key.len()) {
        return Err(super::invalid("volume key", format!("{} bytes", key.len())));
    }
    if new.label.len() >= LABEL.1 - LABEL.0 || new.uuid.len() >= UUID.1 - UUID.0 {
        return Err(super::invalid("label or uuid", "longer than its field"));
    }
    let kdf_salt = random::<SALT_LEN>(rng);
    let area = keyslot_area(key, new.passphrase, &kdf_salt, rng);
    let area_size = area_size(key.len());
    let metadata = metadata(new, &kdf_salt, area_size, rng);
    let json = json_area(&metadata)?;
    let primary = header(new, MAGIC, 0, &json, rng);
    let secondary = header(new, MAGIC_2, HDR_SIZE, &json, rng);
    durable_write_at(dev, KEYSLOTS_OFFSET, &area)?;
    durable_write_at(dev, 0, &primary)?;
    durable_write_at(dev, HDR_SIZE, &secondary)
}

fn random<const N: usize>(rng: &mut (impl RngCore + CryptoRng)) -> [u8; N] {
    let mut b = [0u8; N];
    rng.fill_bytes(&mut b);
    b
}

/// The keyslot area's size: the split key in whole 4 KiB blocks, as cryptsetup sizes it.
fn area_size(key_len: usize) -> u64 {
    ((key_len * STRIPES).next_multiple_of(4096)) as u64
}

/// The volume key AF-split over [`STRIPES`] stripes, encrypted with the key PBKDF2 derives
/// from the passphrase.
fn keyslot_area(
    key: &[u8],
    passphrase: &[u8],
    salt: &[u8],
    rng: &mut (impl RngCore + CryptoRng),
) -> Zeroizing<Vec<u8>> {
    let mut area = af_split(key, rng);
    let mut area_key = Zeroizing::new(vec![0u8; key.len()]);
    Hash::Sha512.pbkdf2(passphrase, salt, KDF_ITERATIONS, &mut area_key);
    if key.len() == 64 {
        xts_encrypt::<Aes256>(&area_key, &mut area);
    } else {
        xts_encrypt::<Aes128>(&area_key, &mut area);
    }
    area
}

/// LUKS's AF split, the inverse of [`super::af_merge`]: random stripes but the last, which
/// is the key XOR the diffused running XOR of the others; zero-padded to whole sectors.
fn af_split(key: &[u8], rng: &mut (impl RngCore + CryptoRng)) -> Zeroizing<Vec<u8>> {
    let n = key.len();
    let mut split = Zeroizing::new(vec![0u8; (n * STRIPES).next_multiple_of(AREA_SECTOR)]);
    rng.fill_bytes(&mut split[..n * (STRIPES - 1)]);
    let mut running = Zeroizing::new(vec![0u8; n]);
    for stripe in split[..n * (STRIPES - 1)].chunks_exact(n) {
        xor(&mut running, stripe);
        Hash::Sha512.diffuse(&mut running);
    }
    xor(&mut running, key);
    split[n * (STRIPES - 1)..n * STRIPES].copy_from_slice(&running);
    split
}

fn xts_encrypt<C>(key: &[u8], area: &mut [u8])
where
    C: KeyInit + BlockCipherEncrypt + BlockCipherDecrypt + BlockSizeUser<BlockSize = U16>,
{
    let (k1, k2) = key.split_at(key.len() / 2);
    // Both halves are 16 or 32 bytes: `write` admits only 32- and 64-byte keys.
    if let (Ok(c1), Ok(c2)) = (C::new_from_slice(k1), C::new_from_slice(k2)) {
        Xts128::new(c1, c2).encrypt_area(area, AREA_SECTOR, 0, get_tweak_default);
    }
}

/// The JSON metadata: keyslot 0, the data segment, the volume key's digest, the token.
fn metadata(
    new: &NewVolume,
    kdf_salt: &[u8],
    area_size: u64,
    rng: &mut (impl RngCore + CryptoRng),
) -> Value {
    let key = new.volume_key.as_bytes();
    let digest_salt = random::<SALT_LEN>(rng);
    let mut digest = [0u8; 32];
    Hash::Sha256.pbkdf2(key, &digest_salt, DIGEST_ITERATIONS, &mut digest);
    let segment = data_segment();
    let tokens = match new.token {
        Some(t) => json!({ "0": token_json(t) }),
        None => json!({}),
    };
    json!({
        "keyslots": { "0": {
            "type": "luks2",
            "key_size": key.len(),
            "area": {
                "type": "raw",
                "offset": KEYSLOTS_OFFSET.to_string(),
                "size": area_size.to_string(),
                "encryption": CIPHER,
                "key_size": key.len(),
            },
            "kdf": {
                "type": "pbkdf2",
                "hash": "sha512",
                "iterations": KDF_ITERATIONS,
                "salt": BASE64.encode(kdf_salt),
            },
            "af": { "type": "luks1", "stripes": STRIPES, "hash": "sha512" },
        }},
        "tokens": tokens,
        "segments": { "0": {
            "type": "crypt",
            "offset": segment.offset.to_string(),
            "size": "dynamic",
            "iv_tweak": segment.iv_tweak.to_string(),
            "encryption": segment.cipher,
            "sector_size": segment.sector_size,
        }},
        "digests": { "0": {
            "type": "pbkdf2",
            "keyslots": ["0"],
            "segments": ["0"],
            "hash": "sha256",
            "iterations": DIGEST_ITERATIONS,
            "salt": BASE64.encode(digest_salt),
            "digest": BASE64.encode(digest),
        }},
        "config": {
            "json_size": (HDR_SIZE - BINARY_LEN as u64).to_string(),
            "keyslots_size": (DATA_OFFSET - KEYSLOTS_OFFSET).to_string(),
        },
    })
}

/// A `systemd-tpm2` token as systemd 252 writes it.
fn token_json(t: &Tpm2Token) -> Value {
    let mut token = json!({
        "type": "systemd-tpm2",
        "keyslots": t.keyslots.iter().map(u32::to_string).collect::<Vec<_>>(),
        "tpm2-blob": BASE64.encode(&t.blob),
        "tpm2-pcrs": t.pcrs,
        "tpm2-pcr-bank": t.pcr_bank,
        "tpm2-policy-hash": hex::encode(&t.policy_hash),
        "tpm2-pin": t.pin,
    });
    if let Some(map) = token.as_object_mut() {
        if let Some(alg) = &t.primary_alg {
            map.insert("tpm2-primary-alg".into(), Value::from(alg.as_str()));
        }
        if let Some(srk) = &t.storage_key {
            map.insert("tpm2_srk".into(), Value::from(BASE64.encode(srk)));
        }
    }
    token
}

/// The JSON text, NUL-padded to the JSON area's size.
fn json_area(metadata: &Value) -> Result<Vec<u8>, LuksError> {
    let mut json = metadata.to_string().into_bytes();
    let size = HDR_SIZE as usize - BINARY_LEN;
    if json.len() >= size {
        return Err(super::invalid(
            "metadata",
            format!("{} bytes of JSON do not fit in {size}", json.len()),
        ));
    }
    json.resize(size, 0);
    Ok(json)
}

/// One header: the binary header at `offset` with its magic, a fresh salt and the checksum
/// over it and `json`.
fn header(
    new: &NewVolume,
    magic: &[u8; 6],
    offset: u64,
    json: &[u8],
    rng: &mut (impl RngCore + CryptoRng),
) -> Vec<u8> {
    let mut h = vec![0u8; BINARY_LEN];
    h[..MAGIC.len()].copy_from_slice(magic);
    h[VERSION_AT..VERSION_AT + 2].copy_from_slice(&2u16.to_be_bytes());
    h[HDR_SIZE_AT..HDR_SIZE_AT + 8].copy_from_slice(&HDR_SIZE.to_be_bytes());
    h[SEQID_AT..SEQID_AT + 8].copy_from_slice(&1u64.to_be_bytes());
    put_str(&mut h, LABEL, new.label);
    put_str(&mut h, CSUM_ALG, "sha256");
    h[SALT.0..SALT.1].copy_from_slice(&random::<64>(rng));
    put_str(&mut h, UUID, new.uuid);
    h[HDR_OFFSET_AT..HDR_OFFSET_AT + 8].copy_from_slice(&offset.to_be_bytes());
    h.extend_from_slice(json);
    let sum = Sha256::digest(&h);
    h[CSUM.0..CSUM.0 + sum.len()].copy_from_slice(&sum);
    h
}

fn put_str(h: &mut [u8], (from, _): (usize, usize), s: &str) {
    h[from..from + s.len()].copy_from_slice(s.as_bytes());
}

fn write_at(dev: &mut (impl Write + Seek), offset: u64, buf: &[u8]) -> Result<(), LuksError> {
    dev.seek(SeekFrom::Start(offset))
        .and_then(|_| dev.write_all(buf))
        .map_err(|source| write_error(offset, buf.len(), source))
}

/// [`write_at`], then flushed and synced: a write barrier before whatever comes next.
fn durable_write_at(dev: &mut impl Durable, offset: u64, buf: &[u8]) -> Result<(), LuksError> {
    write_at(dev, offset, buf)?;
    dev.flush()
        .and_then(|()| dev.sync())
        .map_err(|source| write_error(offset, buf.len(), source))
}

fn write_error(offset: u64, len: usize, source: io::Error) -> LuksError {
    LuksError::Write {
        offset,
        len,
        source,
    }
}

#[cfg(test)]
mod tests;
