//! LUKS2, read in the initrd: the primary header, its JSON metadata, and the volume key a
//! passphrase (typed, or unsealed by the TPM through a `systemd-tpm2` token) opens. There is no
//! libcryptsetup here (it would bring its C library, json-c, OpenSSL and libdevmapper into the
//! UKI), so this reads the on-disk format as cryptsetup writes it, for what cryptsetup and
//! systemd-cryptenroll write by default: `luks2` keyslots with an `aes-xts-plain64` raw area,
//! PBKDF2 or Argon2 KDFs, the LUKS1 anti-forensic split and PBKDF2 digests. Anything else is
//! refused by name rather than skipped, so a slot that could not be tried is never reported
//! as a wrong passphrase.
//!
//! The header is not authenticated: its checksum catches damage, not change (whoever can
//! write the disk can recompute it). A candidate key is returned only when it reproduces the
//! digest, and the key and digest lengths have floors (16 bytes each), so a changed header can
//! make a passphrase open nothing but cannot steer it to a key of the changer's choosing. The
//! data segment's cipher is the header's word too: a caller that expects one should check it.

use aes::cipher::consts::U16;
use aes::cipher::{BlockCipherDecrypt, BlockCipherEncrypt, BlockSizeUser, KeyInit};
use aes::{Aes128, Aes256};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use pbkdf2::sha2::{Digest, Sha256, Sha384, Sha512};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;
use sha1::Sha1;
use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::fmt;
use std::io::{self, Read, Seek, SeekFrom};
use subtle::ConstantTimeEq;
use xts_mode::{get_tweak_default, Xts128};
use zeroize::Zeroizing;

pub mod format;

/// `LUKS\xba\xbe`, the primary header's magic (the secondary's is `SKUL\xba\xbe`).
const MAGIC: &[u8; 6] = b"LUKS\xba\xbe";
/// The binary header is one 4 KiB block; the JSON area follows it up to `hdr_size`.
const BINARY_LEN: usize = 4096;
/// `hdr_size` is a power of two from 16 KiB to 4 MiB (`LUKS2_HDR_16K_LEN`..`LUKS2_HDR_OFFSET_MAX`).
const HDR_MIN: u64 = 16 * 1024;
const HDR_MAX: u64 = 4 * 1024 * 1024;
/// Field offsets in `struct luks2_hdr_disk` (all integers big-endian).
const VERSION_AT: usize = 6;
const HDR_SIZE_AT: usize = 8;
const LABEL: (usize, usize) = (24, 72);
const CSUM_ALG: (usize, usize) = (72, 104);
const UUID: (usize, usize) = (168, 208);
const HDR_OFFSET_AT: usize = 256;
const CSUM: (usize, usize) = (448, 512);
/// Keyslot areas are encrypted in 512-byte sectors whatever the data segment's sector size.
const AREA_SECTOR: usize = 512;
/// A volume key longer than this is not a dm-crypt key (XTS with AES-256 uses 64 bytes).
const MAX_KEY: usize = 512;
/// Keys and digests shorter than this are refused: a header with a 1-byte key or digest
/// would let whoever wrote it guess which key a passphrase it does not know opens.
const MIN_KEY: usize = 16;
/// cryptsetup's own ceiling for Argon2 memory (`MAX_PBKDF_MEMORY`, KiB): a header asking
/// for more is refused before it can exhaust the initrd's memory.
const MAX_ARGON2_KIB: u32 = 4 * 1024 * 1024;
/// cryptsetup's ceiling for the keyslots area (`LUKS2_MAX_KEYSLOTS_SIZE`, 128 MiB): every
/// keyslot area lies in it, so no keyslot makes this read (and allocate) more.
const MAX_KEYSLOTS_SIZE: u64 = 128 << 20;
/// PBKDF2 iterations, keyslot or digest. cryptsetup accepts up to 2^32-1, hours of hashing a
/// crafted header could make PID 1 spend before the node can power off; its benchmark
/// (`--iter-time`, 2 s by default) picks a few million on current CPUs, and the state disk's
/// keyslot (made here, or by systemd's minimal PBKDF) has 1000. Ten million is seconds here.
const MAX_PBKDF2_ITERATIONS: u32 = 10_000_000;
/// Argon2's work, memory (KiB) times passes: 64 GiB filled in all. cryptsetup accepts up to
/// 2^32-1 passes; its benchmark (2 s) takes at most 1 GiB by default (4 GiB at most) for a
/// handful of passes (at least 4), 4 to 16 GiB in all. Bounding the product, not the passes,
/// keeps what a small-memory keyslot's many cheap passes cost the same bound.
const MAX_ARGON2_WORK: u64 = 64 << 20;

/// Why a LUKS2 header cannot be read or a volume key recovered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LuksError {
    /// The device could not be read where the header points.
    #[error("reading {len} bytes at offset {offset} of the LUKS device")]
    Read {
        /// Byte offset on the device.
        offset: u64,
        /// Bytes wanted.
        len: usize,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// Writing a new volume's header or keyslot failed.
    #[error("writing {len} bytes at offset {offset} of the new LUKS device")]
    Write {
        /// Byte offset on the device.
        offset: u64,
        /// Bytes written.
        len: usize,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// No primary LUKS magic at offset 0.
    #[error("the device has no LUKS header")]
    NotLuks,
    /// A LUKS version other than 2 (LUKS1 is not read).
    #[error("LUKS version {0} (only LUKS2 is read)")]
    Version(u16),
    /// A header size cryptsetup never writes.
    #[error("LUKS2 header size {0} (a power of two from 16 KiB to 4 MiB)")]
    HeaderSize(u64),
    /// The header at offset 0 says it is elsewhere.
    #[error("the LUKS2 header at offset 0 says it is at offset {0}")]
    HeaderOffset(u64),
    /// A checksum algorithm other than SHA-256.
    #[error("LUKS2 header checksum algorithm {0:?} (only sha256 is read)")]
    ChecksumAlgorithm(String),
    /// The primary header's checksum does not match its contents.
    #[error(
        "the LUKS2 primary header's sha256 checksum does not match (stored {stored}, \
         computed {computed}): the header is damaged or was changed"
    )]
    Checksum {
        /// The checksum in the header, hex.
        stored: String,
        /// The checksum of the header's bytes, hex.
        computed: String,
    },
    /// The JSON area is not the metadata LUKS2 defines.
    #[error("the LUKS2 JSON metadata cannot be read")]
    Json(#[source] serde_json::Error),
    /// A metadata field is missing or malformed.
    #[error("LUKS2 metadata {field}: {reason}")]
    Invalid {
        /// Where, e.g. `keyslot 0 kdf.salt`.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A keyslot asked for does not exist.
    #[error("LUKS2 keyslot {0} does not exist")]
    NoKeyslot(u32),
    /// A keyslot whose key is not the volume key: no digest lists it with segment 0.
    #[error("LUKS2 keyslot {0} is not bound to the data segment (no digest lists both)")]
    Unbound(u32),
    /// A keyslot uses something this reader does not implement.
    #[error("LUKS2 keyslot {keyslot}: unsupported {what} {name:?}")]
    Unsupported {
        /// The keyslot.
        keyslot: u32,
        /// What, e.g. `area cipher` or `kdf`.
        what: &'static str,
        /// The name the header gives.
        name: String,
    },
    /// Argon2 refused the keyslot's parameters.
    #[error("LUKS2 keyslot {keyslot}: argon2: {reason}")]
    Argon2 {
        /// The keyslot.
        keyslot: u32,
        /// Argon2's error.
        reason: String,
    },
    /// No segment 0, the data.
    #[error("LUKS2 metadata has no segment 0")]
    NoSegment,
    /// Segment 0 is not a `crypt` segment (e.g. mid-reencryption).
    #[error("LUKS2 segment 0 has type {0:?} (only crypt is read)")]
    SegmentType(String),
    /// None of the keyslots tried opens with the passphrase.
    #[error("the passphrase opens none of the {tried} LUKS2 keyslots tried")]
    WrongPassphrase {
        /// How many keyslots were tried.
        tried: usize,
    },
}

/// A LUKS2 device's primary header: the binary header's identity and the checksummed JSON.
#[derive(Debug, Clone)]
pub struct Header {
    uuid: String,
    label: String,
    /// Each header's size: the keyslots area starts after two of them.
    hdr_size: u64,
    metadata: Metadata,
}

/// The JSON area's top-level objects, each member kept as JSON until used, so a keyslot or
/// token of a type this reader does not know does not stop the others being read.
#[derive(Debug, Clone, Deserialize)]
struct Metadata {
    keyslots: BTreeMap<String, Value>,
    #[serde(default)]
    tokens: BTreeMap<String, Value>,
    segments: BTreeMap<String, Value>,
    digests: BTreeMap<String, Value>,
    config: RawConfig,
}

/// The `config` object: the keyslots area's size is what bounds each keyslot's area.
#[derive(Debug, Clone, Deserialize)]
struct RawConfig {
    keyslots_size: String,
}

/// Where keyslot areas may lie: the keyslots area, after both headers.
#[derive(Debug, Clone, Copy)]
struct KeyslotsArea {
    start: u64,
    end: u64,
}

/// The data segment: where the ciphertext is and how dm-crypt must read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// Start of the encrypted data, in bytes from the start of the device.
    pub offset: u64,
    /// Length in bytes; `None` for `dynamic` (to the end of the device).
    pub size: Option<u64>,
    /// The IV sector number of the segment's first sector.
    pub iv_tweak: u64,
    /// The cipher, in cryptsetup's `cipher-mode-iv` form (e.g. `aes-xts-plain64`).
    pub cipher: String,
    /// Bytes per encryption sector (512 to 4096).
    pub sector_size: u32,
}

/// A `systemd-tpm2` token: what `systemd-cryptenroll --tpm2-device` stored for unsealing
/// the keyslots' passphrase with the TPM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tpm2Token {
    /// The keyslots the unsealed passphrase opens.
    pub keyslots: Vec<u32>,
    /// The sealed object (`tpm2-blob`): TPM2B_PRIVATE then TPM2B_PUBLIC, as systemd writes it.
    pub blob: Vec<u8>,
    /// The PCRs the policy binds (`tpm2-pcrs`).
    pub pcrs: Vec<u32>,
    /// Their bank (`tpm2-pcr-bank`; systemd's default `sha256` when absent).
    pub pcr_bank: String,
    /// The primary key's algorithm (`tpm2-primary-alg`: `ecc` or `rsa`), when recorded.
    pub primary_alg: Option<String>,
    /// The policy digest the object was sealed under (`tpm2-policy-hash`).
    pub policy_hash: Vec<u8>,
    /// Whether a PIN is part of the authorization (`tpm2-pin`).
    pub pin: bool,
    /// The storage key's TPM2B_PUBLIC at sealing (`tpm2_srk`, systemd 255's field), which the
    /// TPM is held to when unsealing; absent in systemd 252's tokens.
    pub storage_key: Option<Vec<u8>>,
}

impl Tpm2Token {
    fn parse(at: &str, token: &Value) -> Result<Tpm2Token, LuksError> {
        let raw: RawTpm2Token = decode(at, token)?;
        Ok(Tpm2Token {
            keyslots: ids(&raw.keyslots, &format!("{at} keyslots"))?,
            blob: base64(&format!("{at} tpm2-blob"), &raw.blob)?,
            pcrs: raw.pcrs,
            pcr_bank: raw.pcr_bank.unwrap_or_else(|| "sha256".to_owned()),
            primary_alg: raw.primary_alg,
            policy_hash: hex::decode(&raw.policy_hash)
                .map_err(|e| invalid(format!("{at} tpm2-policy-hash"), e))?,
            pin: raw.pin,
            storage_key: raw
                .srk
                .map(|srk| base64(&format!("{at} tpm2_srk"), &srk))
                .transpose()?,
        })
    }
}

/// The volume key: the dm-crypt key of segment 0. Wiped when dropped; `Debug` shows only its
/// length, so it cannot reach a log by accident.
pub struct VolumeKey(Zeroizing<Vec<u8>>);

impl VolumeKey {
    /// The key's bytes, for the dm-crypt table.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for VolumeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "VolumeKey({} bytes)", self.0.len())
    }
}

fn invalid(field: impl Into<String>, reason: impl fmt::Display) -> LuksError {
    LuksError::Invalid {
        field: field.into(),
        reason: reason.to_string(),
    }
}

fn read_at(dev: &mut (impl Read + Seek), offset: u64, buf: &mut [u8]) -> Result<(), LuksError> {
    let len = buf.len();
    let wrap = |source| LuksError::Read {
        offset,
        len,
        source,
    };
    dev.seek(SeekFrom::Start(offset)).map_err(wrap)?;
    dev.read_exact(buf).map_err(wrap)
}

/// A NUL-padded string field of the binary header.
fn c_string(bytes: &[u8], (from, to): (usize, usize)) -> String {
    let field = &bytes[from..to];
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    String::from_utf8_lossy(&field[..end]).into_owned()
}

fn be_u64(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[at..at + 8]);
    u64::from_be_bytes(b)
}

/// Checks the binary header's fixed fields and returns `hdr_size`.
fn check_binary(bin: &[u8]) -> Result<u64, LuksError> {
    if &bin[..MAGIC.len()] != MAGIC {
        return Err(LuksError::NotLuks);
    }
    let version = u16::from_be_bytes([bin[VERSION_AT], bin[VERSION_AT + 1]]);
    if version != 2 {
        return Err(LuksError::Version(version));
    }
    let hdr_size = be_u64(bin, HDR_SIZE_AT);
    if !hdr_size.is_power_of_two() || !(HDR_MIN..=HDR_MAX).contains(&hdr_size) {
        return Err(LuksError::HeaderSize(hdr_size));
    }
    let hdr_offset = be_u64(bin, HDR_OFFSET_AT);
    if hdr_offset != 0 {
        return Err(LuksError::HeaderOffset(hdr_offset));
    }
    let alg = c_string(bin, CSUM_ALG);
    if alg != "sha256" {
        return Err(LuksError::ChecksumAlgorithm(alg));
    }
    Ok(hdr_size)
}

/// SHA-256 over the whole header with the checksum field zeroed, against the stored one
/// (its first 32 bytes; the rest of the 64-byte field is padding).
fn check_checksum(header: &[u8]) -> Result<(), LuksError> {
    let mut hasher = Sha256::new();
    hasher.update(&header[..CSUM.0]);
    hasher.update([0u8; CSUM.1 - CSUM.0]);
    hasher.update(&header[CSUM.1..]);
    let computed = hasher.finalize();
    let stored = &header[CSUM.0..CSUM.0 + computed.len()];
    if stored == computed.as_slice() {
        Ok(())
    } else {
        Err(LuksError::Checksum {
            stored: hex::encode(stored),
            computed: hex::encode(computed),
        })
    }
}

impl Header {
    /// Reads and checks the primary header at offset 0 of `dev` (a partition or image).
    pub fn read(dev: &mut (impl Read + Seek)) -> Result<Header, LuksError> {
        let mut header = vec![0u8; BINARY_LEN];
        read_at(dev, 0, &mut header)?;
        let hdr_size = check_binary(&header)?;
        // hdr_size is at most HDR_MAX (4 MiB), so it fits any usize this runs on.
        header.resize(
            usize::try_from(hdr_size).map_err(|_| LuksError::HeaderSize(hdr_size))?,
            0,
        );
        read_at(dev, BINARY_LEN as u64, &mut header[BINARY_LEN..])?;
        check_checksum(&header)?;
        let json = &header[BINARY_LEN..];
        let end = json.iter().position(|&b| b == 0).unwrap_or(json.len());
        let metadata = serde_json::from_slice(&json[..end]).map_err(LuksError::Json)?;
        Ok(Header {
            uuid: c_string(&header, UUID),
            label: c_string(&header, LABEL),
            hdr_size,
            metadata,
        })
    }

    /// The UUID from the binary header, as `/dev/disk/by-uuid/` and `rd.luks.uuid=` spell it.
    pub fn uuid(&self) -> &str {
        &self.uuid
    }

    /// The label from the binary header (empty when none was set).
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Segment 0, the encrypted data.
    pub fn segment(&self) -> Result<Segment, LuksError> {
        let raw = self
            .metadata
            .segments
            .get("0")
            .ok_or(LuksError::NoSegment)?;
        let raw: RawSegment = decode("segment 0", raw)?;
        if raw.kind != "crypt" {
            return Err(LuksError::SegmentType(raw.kind));
        }
        let ss = raw.sector_size;
        if !ss.is_power_of_two() || !(512..=4096).contains(&ss) {
            return Err(invalid("segment 0 sector_size", ss));
        }
        let size = match raw.size.as_str() {
            "dynamic" => None,
            s => Some(decimal("segment 0 size", s)?),
        };
        // A fixed size is whole sectors of the segment (cryptsetup writes no other): a part
        // sector would be dropped, and the volume end short of what the header says.
        if let Some(size) = size.filter(|&n| n == 0 || n % u64::from(ss) != 0) {
            return Err(invalid(
                "segment 0 size",
                format!("{size} is not a positive multiple of the sector size {ss}"),
            ));
        }
        // dm-crypt counts the data's start in 512-byte sectors: another offset would be
        // rounded down, and the volume mapped from the wrong byte.
        let offset = decimal("segment 0 offset", &raw.offset)?;
        if offset % AREA_SECTOR as u64 != 0 {
            return Err(invalid(
                "segment 0 offset",
                format!("{offset} is not a multiple of {AREA_SECTOR}"),
            ));
        }
        Ok(Segment {
            offset,
            size,
            iv_tweak: decimal("segment 0 iv_tweak", &raw.iv_tweak)?,
            cipher: raw.encryption,
            sector_size: ss,
        })
    }

    /// The first well-formed `systemd-tpm2` token (by token number), if there is one. A token
    /// of that type that does not read (bad base64, a missing field) is passed over, as
    /// systemd-cryptsetup ignores tokens it cannot parse; [`Header::systemd_tpm2_tokens`]
    /// says why.
    pub fn systemd_tpm2_token(&self) -> Option<Tpm2Token> {
        self.systemd_tpm2_tokens().into_iter().find_map(Result::ok)
    }

    /// Every `systemd-tpm2` token by token number, each read or with why it does not read.
    pub fn systemd_tpm2_tokens(&self) -> Vec<Result<Tpm2Token, LuksError>> {
        let mut tokens: Vec<_> = self
            .metadata
            .tokens
            .iter()
            .filter(|(_, t)| t.get("type").and_then(Value::as_str) == Some("systemd-tpm2"))
            .map(|(id, t)| (id.parse::<u64>().unwrap_or(u64::MAX), id, t))
            .collect();
        tokens.sort_by_key(|(n, _, _)| *n);
        tokens
            .into_iter()
            .map(|(_, id, t)| Tpm2Token::parse(&format!("token {id}"), t))
            .collect()
    }

    /// The volume key the passphrase opens, trying `keyslots` in the order given, or else
    /// every passphrase keyslot bound to segment 0 (cryptsetup's order: priority `prefer`
    /// first, `ignore` never), and returning the first whose key matches the digest.
    pub fn unlock(
        &self,
        dev: &mut (impl Read + Seek),
        passphrase: &[u8],
        keyslots: Option<&[u32]>,
    ) -> Result<VolumeKey, LuksError> {
        let candidates = match keyslots {
            Some(ids) => ids.to_vec(),
            None => self.passphrase_keyslots()?,
        };
        let mut tried = 0;
        for id in candidates {
            let slot = self.keyslot(id)?;
            let digest = self.digest_for(id)?;
            tried += 1;
            let key = slot.open(dev, passphrase)?;
            if digest.matches(&key) {
                return Ok(VolumeKey(key));
            }
        }
        Err(LuksError::WrongPassphrase { tried })
    }

    /// `luks2` keyslots bound to segment 0 with a priority other than `ignore`, in order.
    fn passphrase_keyslots(&self) -> Result<Vec<u32>, LuksError> {
        let mut slots = Vec::new();
        for (id, raw) in numbered_keyslots(&self.metadata.keyslots)? {
            let head: KeyslotHead = decode(&format!("keyslot {id}"), raw)?;
            let priority = head.priority.unwrap_or(1);
            if head.kind != "luks2" || priority == 0 {
                continue;
            }
            match self.digest_for(id) {
                Ok(_) => slots.push((Reverse(priority), id)),
                Err(LuksError::Unbound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        slots.sort();
        Ok(slots.into_iter().map(|(_, id)| id).collect())
    }

    fn keyslot(&self, id: u32) -> Result<Keyslot, LuksError> {
        let raw = self
            .metadata
            .keyslots
            .get(&id.to_string())
            .ok_or(LuksError::NoKeyslot(id))?;
        Keyslot::parse(
            id,
            decode(&format!("keyslot {id}"), raw)?,
            self.keyslots_area()?,
        )
    }

    /// The keyslots area as `config.keyslots_size` gives it, at most cryptsetup's 128 MiB.
    fn keyslots_area(&self) -> Result<KeyslotsArea, LuksError> {
        let field = "config keyslots_size";
        let size = decimal(field, &self.metadata.config.keyslots_size)?;
        if size > MAX_KEYSLOTS_SIZE {
            let reason = format!("{size} bytes (cryptsetup's limit is {MAX_KEYSLOTS_SIZE})");
            return Err(invalid(field, reason));
        }
        let start = 2 * self.hdr_size;
        Ok(KeyslotsArea {
            start,
            end: start + size,
        })
    }

    /// The digest of the volume key: the one listing keyslot `id` and segment 0.
    fn digest_for(&self, id: u32) -> Result<Pbkdf2Digest, LuksError> {
        let slot = id.to_string();
        for (name, raw) in &self.metadata.digests {
            let digest: RawDigest = decode(&format!("digest {name}"), raw)?;
            if digest.keyslots.contains(&slot) && digest.segments.iter().any(|s| s == "0") {
                return Pbkdf2Digest::parse(id, name, digest);
            }
        }
        Err(LuksError::Unbound(id))
    }
}

fn decode<T: DeserializeOwned>(at: &str, value: &Value) -> Result<T, LuksError> {
    T::deserialize(value).map_err(|e| invalid(at, e))
}

fn decimal(field: &str, s: &str) -> Result<u64, LuksError> {
    s.parse().map_err(|e| invalid(field, format!("{s:?}: {e}")))
}

fn base64(field: &str, s: &str) -> Result<Vec<u8>, LuksError> {
    BASE64.decode(s).map_err(|e| invalid(field, e))
}

fn ids(list: &[String], field: &str) -> Result<Vec<u32>, LuksError> {
    list.iter()
        .map(|s| s.parse().map_err(|e| invalid(field, format!("{s:?}: {e}"))))
        .collect()
}

/// The members of the `keyslots` object with their numbers.
fn numbered_keyslots(map: &BTreeMap<String, Value>) -> Result<Vec<(u32, &Value)>, LuksError> {
    map.iter()
        .map(|(k, v)| {
            let id = k
                .parse()
                .map_err(|e| invalid(format!("keyslot {k:?}"), e))?;
            Ok((id, v))
        })
        .collect()
}

#[derive(Deserialize)]
struct RawSegment {
    #[serde(rename = "type")]
    kind: String,
    offset: String,
    size: String,
    iv_tweak: String,
    encryption: String,
    sector_size: u32,
}

#[derive(Deserialize)]
struct RawTpm2Token {
    keyslots: Vec<String>,
    #[serde(rename = "tpm2-blob")]
    blob: String,
    #[serde(rename = "tpm2-pcrs")]
    pcrs: Vec<u32>,
    #[serde(rename = "tpm2-pcr-bank")]
    pcr_bank: Option<String>,
    #[serde(rename = "tpm2-primary-alg")]
    primary_alg: Option<String>,
    #[serde(rename = "tpm2-policy-hash")]
    policy_hash: String,
    #[serde(rename = "tpm2-pin", default)]
    pin: bool,
    #[serde(rename = "tpm2_srk")]
    srk: Option<String>,
}

/// Enough of a keyslot to choose it: its type and priority (0 ignore, 1 normal, 2 prefer).
#[derive(Deserialize)]
struct KeyslotHead {
    #[serde(rename = "type")]
    kind: String,
    priority: Option<u32>,
}

#[derive(Deserialize)]
struct RawKeyslot {
    #[serde(rename = "type")]
    kind: String,
    key_size: usize,
    area: RawArea,
    kdf: RawKdf,
    af: RawAf,
}

#[derive(Deserialize)]
struct RawArea {
    #[serde(rename = "type")]
    kind: String,
    offset: String,
    size: String,
    encryption: String,
    key_size: usize,
}

#[derive(Deserialize)]
struct RawKdf {
    #[serde(rename = "type")]
    kind: String,
    salt: String,
    hash: Option<String>,
    iterations: Option<u32>,
    time: Option<u32>,
    memory: Option<u32>,
    cpus: Option<u32>,
}

#[derive(Deserialize)]
struct RawAf {
    #[serde(rename = "type")]
    kind: String,
    stripes: Option<u32>,
    hash: Option<String>,
}

#[derive(Deserialize)]
struct RawDigest {
    #[serde(rename = "type")]
    kind: String,
    keyslots: Vec<String>,
    segments: Vec<String>,
    hash: Option<String>,
    iterations: Option<u32>,
    salt: Option<String>,
    digest: Option<String>,
}

/// The hashes LUKS2 names for PBKDF2, the AF split and digests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hash {
    Sha1,
    Sha256,
    Sha384,
    Sha512,
}

impl Hash {
    fn parse(keyslot: u32, what: &'static str, name: Option<String>) -> Result<Hash, LuksError> {
        match name.as_deref() {
            Some("sha1") => Ok(Hash::Sha1),
            Some("sha256") => Ok(Hash::Sha256),
            Some("sha384") => Ok(Hash::Sha384),
            Some("sha512") => Ok(Hash::Sha512),
            _ => Err(LuksError::Unsupported {
                keyslot,
                what,
                name: name.unwrap_or_default(),
            }),
        }
    }

    fn pbkdf2(self, password: &[u8], salt: &[u8], rounds: u32, out: &mut [u8]) {
        use pbkdf2::pbkdf2_hmac;
        match self {
            Hash::Sha1 => pbkdf2_hmac::<Sha1>(password, salt, rounds, out),
            Hash::Sha256 => pbkdf2_hmac::<Sha256>(password, salt, rounds, out),
            Hash::Sha384 => pbkdf2_hmac::<Sha384>(password, salt, rounds, out),
            Hash::Sha512 => pbkdf2_hmac::<Sha512>(password, salt, rounds, out),
        }
    }

    fn diffuse(self, block: &mut [u8]) {
        match self {
            Hash::Sha1 => diffuse::<Sha1>(block),
            Hash::Sha256 => diffuse::<Sha256>(block),
            Hash::Sha384 => diffuse::<Sha384>(block),
            Hash::Sha512 => diffuse::<Sha512>(block),
        }
    }
}

/// LUKS's AF diffusion: each hash-sized piece (the last one possibly shorter) becomes the hash
/// of its big-endian 32-bit index followed by itself, truncated to the piece's length.
fn diffuse<D: Digest>(block: &mut [u8]) {
    let size = <D as Digest>::output_size();
    for (piece, i) in block.chunks_mut(size).zip(0u32..) {
        let mut h = D::new();
        h.update(i.to_be_bytes());
        h.update(&*piece);
        let out = h.finalize();
        piece.copy_from_slice(&out[..piece.len()]);
    }
}

/// LUKS's AF merge: the key is the last stripe XOR the diffused running XOR of the others.
/// `split` holds `key_size * stripes` bytes.
fn af_merge(split: &[u8], key_size: usize, hash: Hash) -> Zeroizing<Vec<u8>> {
    let mut key = Zeroizing::new(vec![0u8; key_size]);
    let mut stripes = split.chunks_exact(key_size).peekable();
    while let Some(stripe) = stripes.next() {
        xor(&mut key, stripe);
        if stripes.peek().is_some() {
            hash.diffuse(&mut key);
        }
    }
    key
}

fn xor(into: &mut [u8], from: &[u8]) {
    for (a, b) in into.iter_mut().zip(from) {
        *a ^= b;
    }
}

/// How a keyslot turns the passphrase into the key of its area.
enum Kdf {
    Pbkdf2 {
        hash: Hash,
        iterations: u32,
    },
    Argon2 {
        params: argon2::Params,
        algorithm: argon2::Algorithm,
    },
}

/// A `luks2` keyslot this reader can open.
struct Keyslot {
    id: u32,
    key_size: usize,
    area_offset: u64,
    area_key_size: usize,
    kdf: Kdf,
    salt: Vec<u8>,
    /// `key_size * stripes`: the AF-split key's length.
    split_len: usize,
    /// That rounded up to whole 512-byte sectors: what is read and decrypted.
    read_len: usize,
    af_hash: Hash,
}

impl Keyslot {
    /// The keyslot `raw`, whose area must lie in `keyslots`.
    fn parse(id: u32, raw: RawKeyslot, keyslots: KeyslotsArea) -> Result<Keyslot, LuksError> {
        let unsupported = |what, name: &str| LuksError::Unsupported {
            keyslot: id,
            what,
            name: name.to_owned(),
        };
        if raw.kind != "luks2" {
            return Err(unsupported("keyslot type", &raw.kind));
        }
        if !(MIN_KEY..=MAX_KEY).contains(&raw.key_size) {
            return Err(invalid(format!("keyslot {id} key_size"), raw.key_size));
        }
        let area = &raw.area;
        if area.kind != "raw" {
            return Err(unsupported("area type", &area.kind));
        }
        if area.encryption != "aes-xts-plain64" {
            return Err(unsupported("area cipher", &area.encryption));
        }
        if area.key_size != 32 && area.key_size != 64 {
            return Err(unsupported("area key size", &area.key_size.to_string()));
        }
        if raw.af.kind != "luks1" {
            return Err(unsupported("af type", &raw.af.kind));
        }
        let (area_offset, area_size) = area_place(id, area, keyslots)?;
        let (split_len, read_len) = split_lengths(id, raw.key_size, &raw.af, area_size)?;
        Ok(Keyslot {
            id,
            key_size: raw.key_size,
            area_offset,
            area_key_size: area.key_size,
            salt: base64(&format!("keyslot {id} kdf.salt"), &raw.kdf.salt)?,
            kdf: Kdf::parse(id, raw.kdf)?,
            split_len,
            read_len,
            af_hash: Hash::parse(id, "af hash", raw.af.hash.clone())?,
        })
    }

    /// The candidate volume key: derive the area key, decrypt the area, merge the stripes.
    fn open(
        &self,
        dev: &mut (impl Read + Seek),
        passphrase: &[u8],
    ) -> Result<Zeroizing<Vec<u8>>, LuksError> {
        let area_key = self.derive(passphrase)?;
        let mut area = Zeroizing::new(vec![0u8; self.read_len]);
        read_at(dev, self.area_offset, &mut area)?;
        if self.area_key_size == 64 {
            xts_decrypt::<Aes256>(self.id, &area_key, &mut area)?;
        } else {
            xts_decrypt::<Aes128>(self.id, &area_key, &mut area)?;
        }
        Ok(af_merge(
            &area[..self.split_len],
            self.key_size,
            self.af_hash,
        ))
    }

    fn derive(&self, passphrase: &[u8]) -> Result<Zeroizing<Vec<u8>>, LuksError> {
        let mut key = Zeroizing::new(vec![0u8; self.area_key_size]);
        match &self.kdf {
            Kdf::Pbkdf2 { hash, iterations } => {
                hash.pbkdf2(passphrase, &self.salt, *iterations, &mut key);
            }
            Kdf::Argon2 { params, algorithm } => {
                argon2::Argon2::new(*algorithm, argon2::Version::V0x13, params.clone())
                    .hash_password_into(passphrase, &self.salt, &mut key)
                    .map_err(|e| LuksError::Argon2 {
                        keyslot: self.id,
                        reason: e.to_string(),
                    })?;
            }
        }
        Ok(key)
    }
}

/// The keyslot area's offset and size, which must lie in the keyslots area: what is read
/// (and allocated) for a keyslot is bounded by the header's size, never by its word alone.
fn area_place(
    keyslot: u32,
    area: &RawArea,
    keyslots: KeyslotsArea,
) -> Result<(u64, u64), LuksError> {
    let offset = decimal(&format!("keyslot {keyslot} area.offset"), &area.offset)?;
    let size = decimal(&format!("keyslot {keyslot} area.size"), &area.size)?;
    let inside = offset >= keyslots.start
        && offset
            .checked_add(size)
            .is_some_and(|end| end <= keyslots.end);
    if !inside {
        return Err(invalid(
            format!("keyslot {keyslot} area"),
            format!(
                "{size} bytes at offset {offset} are outside the keyslots area \
                 (bytes {} to {})",
                keyslots.start, keyslots.end
            ),
        ));
    }
    Ok((offset, size))
}

/// The AF-split key's length (`key_size * stripes`) and that in whole sectors, which must
/// fit in the keyslot's area of `area_size` bytes.
fn split_lengths(
    keyslot: u32,
    key_size: usize,
    af: &RawAf,
    area_size: u64,
) -> Result<(usize, usize), LuksError> {
    let stripes = af.stripes.unwrap_or(0);
    let split = key_size.checked_mul(stripes as usize);
    let read = split.and_then(|n| n.checked_next_multiple_of(AREA_SECTOR));
    match split.zip(read) {
        Some((split, read)) if stripes > 0 && read as u64 <= area_size => Ok((split, read)),
        _ => Err(invalid(
            format!("keyslot {keyslot} af.stripes"),
            format!("{stripes} stripes of {key_size} bytes do not fit in {area_size} bytes"),
        )),
    }
}

/// aes-xts-plain64 over the area: 512-byte sectors, the tweak the little-endian sector number
/// from the area's start. `key` is the two XTS halves; `area` whole sectors.
fn xts_decrypt<C>(keyslot: u32, key: &[u8], area: &mut [u8]) -> Result<(), LuksError>
where
    C: KeyInit + BlockCipherEncrypt + BlockCipherDecrypt + BlockSizeUser<BlockSize = U16>,
{
    let (k1, k2) = key.split_at(key.len() / 2);
    let (Ok(c1), Ok(c2)) = (C::new_from_slice(k1), C::new_from_slice(k2)) else {
        return Err(LuksError::Unsupported {
            keyslot,
            what: "area key size",
            name: key.len().to_string(),
        });
    };
    Xts128::new(c1, c2).decrypt_area(area, AREA_SECTOR, 0, get_tweak_default);
    Ok(())
}

impl Kdf {
    fn parse(keyslot: u32, raw: RawKdf) -> Result<Kdf, LuksError> {
        let missing = |field: &str| invalid(format!("keyslot {keyslot} kdf.{field}"), "missing");
        let algorithm = match raw.kind.as_str() {
            "pbkdf2" => {
                let iterations = raw.iterations.ok_or_else(|| missing("iterations"))?;
                return Ok(Kdf::Pbkdf2 {
                    hash: Hash::parse(keyslot, "pbkdf2 hash", raw.hash)?,
                    iterations: bounded_iterations(
                        &format!("keyslot {keyslot} kdf.iterations"),
                        iterations,
                    )?,
                });
            }
            "argon2i" => argon2::Algorithm::Argon2i,
            "argon2id" => argon2::Algorithm::Argon2id,
            other => {
                return Err(LuksError::Unsupported {
                    keyslot,
                    what: "kdf",
                    name: other.to_owned(),
                })
            }
        };
        let memory = raw.memory.ok_or_else(|| missing("memory"))?;
        if memory > MAX_ARGON2_KIB {
            return Err(invalid(format!("keyslot {keyslot} kdf.memory"), memory));
        }
        let time = raw.time.ok_or_else(|| missing("time"))?;
        let work = u64::from(memory) * u64::from(time);
        if work > MAX_ARGON2_WORK {
            let reason = format!(
                "{time} passes over {memory} KiB: more than {} GiB in all",
                MAX_ARGON2_WORK >> 20
            );
            return Err(invalid(format!("keyslot {keyslot} kdf.time"), reason));
        }
        let cpus = raw.cpus.ok_or_else(|| missing("cpus"))?;
        let params =
            argon2::Params::new(memory, time, cpus, None).map_err(|e| LuksError::Argon2 {
                keyslot,
                reason: e.to_string(),
            })?;
        Ok(Kdf::Argon2 { params, algorithm })
    }
}

/// `iterations` of PBKDF2, refused above [`MAX_PBKDF2_ITERATIONS`].
fn bounded_iterations(field: &str, iterations: u32) -> Result<u32, LuksError> {
    if iterations > MAX_PBKDF2_ITERATIONS {
        let reason = format!("{iterations} (at most {MAX_PBKDF2_ITERATIONS} are run)");
        return Err(invalid(field, reason));
    }
    Ok(iterations)
}

/// A `pbkdf2` digest: PBKDF2 of the volume key, which a candidate key must reproduce.
struct Pbkdf2Digest {
    hash: Hash,
    iterations: u32,
    salt: Vec<u8>,
    digest: Vec<u8>,
}

impl Pbkdf2Digest {
    fn parse(keyslot: u32, name: &str, raw: RawDigest) -> Result<Pbkdf2Digest, LuksError> {
        if raw.kind != "pbkdf2" {
            return Err(LuksError::Unsupported {
                keyslot,
                what: "digest type",
                name: raw.kind,
            });
        }
        let at = format!("digest {name}");
        let missing = |field: &str| invalid(format!("{at} {field}"), "missing");
        let digest = base64(&at, raw.digest.as_deref().ok_or_else(|| missing("digest"))?)?;
        if !(MIN_KEY..=MAX_KEY).contains(&digest.len()) {
            let reason = format!("{} bytes (from {MIN_KEY} to {MAX_KEY})", digest.len());
            return Err(invalid(format!("{at} digest"), reason));
        }
        let iterations = raw.iterations.ok_or_else(|| missing("iterations"))?;
        Ok(Pbkdf2Digest {
            hash: Hash::parse(keyslot, "digest hash", raw.hash)?,
            iterations: bounded_iterations(&format!("{at} iterations"), iterations)?,
            salt: base64(&at, raw.salt.as_deref().ok_or_else(|| missing("salt"))?)?,
            digest,
        })
    }

    /// Whether `key` is the volume key, compared in constant time.
    fn matches(&self, key: &[u8]) -> bool {
        let mut out = vec![0u8; self.digest.len()];
        self.hash.pbkdf2(key, &self.salt, self.iterations, &mut out);
        out.ct_eq(&self.digest).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::path::{Path, PathBuf};
    use std::process::Command;

    /// Where Debian's `cryptsetup-bin` installs it (CI installs that package).
    const CRYPTSETUP: &str = "/usr/sbin/cryptsetup";
    const PASSPHRASE: &[u8] = b"correct horse battery staple";

    /// Runs cryptsetup, failing the test (never skipping it) when it is missing or fails.
    pub(super) fn cryptsetup(args: &[&str]) -> String {
        assert!(
            Path::new(CRYPTSETUP).exists(),
            "{CRYPTSETUP} is missing: these tests need real LUKS2 containers \
             (install the cryptsetup-bin package)"
        );
        let out = Command::new(CRYPTSETUP).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "cryptsetup {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// A 20 MiB LUKS2 container in its own directory, with its passphrase in a key file.
    struct Container {
        dir: tempfile::TempDir,
        image: PathBuf,
        keyfile: PathBuf,
    }

    impl Container {
        fn format(pbkdf: &[&str], extra: &[&str]) -> Container {
            let dir = tempfile::tempdir().unwrap();
            let image = dir.path().join("luks.img");
            let keyfile = dir.path().join("key");
            std::fs::write(&keyfile, PASSPHRASE).unwrap();
            File::create(&image).unwrap().set_len(20 << 20).unwrap();
            let mut args = vec!["luksFormat", "--type", "luks2", "--batch-mode"];
            args.extend(pbkdf);
            args.extend(["--key-file", path(&keyfile)]);
            args.extend(extra);
            args.push(path(&image));
            cryptsetup(&args);
            Container {
                dir,
                image,
                keyfile,
            }
        }

        /// PBKDF2-SHA512 with 1000 iterations, AES-XTS with two 128-bit keys, 512-byte sectors.
        fn pbkdf2() -> Container {
            Container::format(
                &["--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000"],
                &[
                    "--hash",
                    "sha512",
                    "--cipher",
                    "aes-xts-plain64",
                    "--key-size",
                    "256",
                    "--sector-size",
                    "512",
                ],
            )
        }

        /// Imports `token` as token `id`. systemd's token plugin, where installed, checks a
        /// `systemd-tpm2` token on import unless `plugin` is false.
        fn import_token(&self, id: &str, token: &Value, plugin: bool) {
            let json = self.dir.path().join(format!("token{id}.json"));
            std::fs::write(&json, token.to_string()).unwrap();
            let mut args = vec!["token", "import", "--json-file", path(&json)];
            args.extend(["--token-id", id]);
            if !plugin {
                args.push("--disable-external-tokens");
            }
            args.push(self.image());
            cryptsetup(&args);
        }

        fn image(&self) -> &str {
            path(&self.image)
        }

        fn open(&self) -> File {
            File::open(&self.image).unwrap()
        }

        /// A wrong passphrase is refused after trying the one keyslot; returns the error.
        fn refuses_a_wrong_passphrase(&self) -> LuksError {
            let err = self
                .header()
                .unlock(&mut self.open(), b"wrong", None)
                .unwrap_err();
            assert!(
                matches!(err, LuksError::WrongPassphrase { tried: 1 }),
                "{err:?}"
            );
            err
        }

        fn header(&self) -> Header {
            Header::read(&mut self.open()).unwrap()
        }

        /// The volume key as cryptsetup recovers it.
        fn volume_key(&self) -> Vec<u8> {
            let dump = cryptsetup(&[
                "luksDump",
                "--dump-volume-key",
                "--batch-mode",
                "--key-file",
                path(&self.keyfile),
                self.image(),
            ]);
            volume_key_in(&dump)
        }
    }

    pub(super) fn path(p: &Path) -> &str {
        p.to_str().unwrap()
    }

    /// The hex after `MK dump:` (cryptsetup 2.6) or `Volume key:` (later releases), which
    /// continues on the following indented lines.
    pub(super) fn volume_key_in(dump: &str) -> Vec<u8> {
        let mut lines = dump.lines();
        let first = lines
            .find_map(|l| {
                l.strip_prefix("MK dump:")
                    .or_else(|| l.strip_prefix("Volume key:"))
            })
            .unwrap_or_else(|| panic!("no volume key in luksDump's output:\n{dump}"));
        let rest = lines.take_while(|l| l.starts_with([' ', '\t']));
        let hex: String = std::iter::once(first)
            .chain(rest)
            .flat_map(str::split_whitespace)
            .collect();
        hex::decode(hex).unwrap()
    }

    /// A field of `cryptsetup luksDump`'s segment 0, e.g. `offset` or `sector`.
    fn dumped_segment_field(c: &Container, field: &str) -> String {
        let dump = cryptsetup(&["luksDump", c.image()]);
        let segments = dump.split("Data segments:").nth(1).unwrap();
        let line = segments
            .lines()
            .find_map(|l| l.trim().strip_prefix(&format!("{field}:")))
            .unwrap();
        line.split_whitespace().next().unwrap().to_owned()
    }

    #[test]
    fn the_volume_key_is_cryptsetups() {
        let c = Container::pbkdf2();
        let header = c.header();
        let key = header.unlock(&mut c.open(), PASSPHRASE, None).unwrap();
        let expected = c.volume_key();
        assert_eq!(expected.len(), 32);
        assert_eq!(key.as_bytes(), expected.as_slice());
        assert_eq!(
            header
                .unlock(&mut c.open(), PASSPHRASE, Some(&[0]))
                .unwrap()
                .as_bytes(),
            expected.as_slice()
        );
        assert_eq!(format!("{key:?}"), "VolumeKey(32 bytes)");
    }

    #[test]
    fn the_uuid_is_cryptsetups() {
        let c = Container::pbkdf2();
        let uuid = cryptsetup(&["luksUUID", c.image()]);
        assert_eq!(c.header().uuid(), uuid.trim());
        assert_eq!(c.header().label(), "");
    }

    #[test]
    fn a_wrong_passphrase_says_how_many_keyslots_were_tried() {
        let c = Container::pbkdf2();
        let err = c.refuses_a_wrong_passphrase();
        assert_eq!(
            err.to_string(),
            "the passphrase opens none of the 1 LUKS2 keyslots tried"
        );
    }

    #[test]
    fn only_the_keyslots_named_are_tried() {
        let c = Container::pbkdf2();
        let second = c.dir.path().join("second");
        std::fs::write(&second, b"another passphrase").unwrap();
        cryptsetup(&[
            "luksAddKey",
            "--batch-mode",
            "--pbkdf",
            "pbkdf2",
            "--pbkdf-force-iterations",
            "1000",
            "--key-file",
            path(&c.keyfile),
            c.image(),
            path(&second),
        ]);
        let header = c.header();
        let expected = c.volume_key();
        let mut dev = c.open();
        let with_second = header.unlock(&mut dev, b"another passphrase", Some(&[1]));
        assert_eq!(with_second.unwrap().as_bytes(), expected.as_slice());
        let all = header.unlock(&mut dev, b"another passphrase", None);
        assert_eq!(all.unwrap().as_bytes(), expected.as_slice());
        let err = header.unlock(&mut dev, PASSPHRASE, Some(&[1])).unwrap_err();
        assert!(
            matches!(err, LuksError::WrongPassphrase { tried: 1 }),
            "{err:?}"
        );
        let err = header.unlock(&mut dev, b"neither", None).unwrap_err();
        assert!(
            matches!(err, LuksError::WrongPassphrase { tried: 2 }),
            "{err:?}"
        );
        let err = header.unlock(&mut dev, PASSPHRASE, Some(&[7])).unwrap_err();
        assert!(matches!(err, LuksError::NoKeyslot(7)), "{err:?}");
    }

    #[test]
    fn a_changed_json_byte_fails_the_checksum() {
        let c = Container::pbkdf2();
        let mut bytes = std::fs::read(&c.image).unwrap();
        let json = BINARY_LEN + 20;
        bytes[json] ^= 0x01;
        let err = Header::read(&mut io::Cursor::new(&bytes)).unwrap_err();
        assert!(matches!(err, LuksError::Checksum { .. }), "{err:?}");
        assert!(err.to_string().contains("checksum does not match"), "{err}");
    }

    #[test]
    fn what_is_not_luks2_is_refused() {
        let zeros = vec![0u8; 64 * 1024];
        let err = Header::read(&mut io::Cursor::new(&zeros)).unwrap_err();
        assert!(matches!(err, LuksError::NotLuks), "{err:?}");
        let c = Container::pbkdf2();
        let mut bytes = std::fs::read(&c.image).unwrap();
        bytes[VERSION_AT + 1] = 1;
        let err = Header::read(&mut io::Cursor::new(&bytes)).unwrap_err();
        assert!(matches!(err, LuksError::Version(1)), "{err:?}");
        let short = &std::fs::read(&c.image).unwrap()[..8192];
        let err = Header::read(&mut io::Cursor::new(short)).unwrap_err();
        assert!(
            matches!(err, LuksError::Read { offset: 4096, .. }),
            "{err:?}"
        );
    }

    #[test]
    fn segment_zero_is_what_luks_dump_says() {
        let c = Container::pbkdf2();
        let segment = c.header().segment().unwrap();
        assert_eq!(
            segment,
            Segment {
                offset: 16 << 20,
                size: None,
                iv_tweak: 0,
                cipher: "aes-xts-plain64".into(),
                sector_size: 512,
            }
        );
        let offset = dumped_segment_field(&c, "offset");
        assert_eq!(offset, segment.offset.to_string());
        assert_eq!(dumped_segment_field(&c, "sector"), "512");
    }

    #[test]
    fn a_file_gets_4096_byte_sectors_unless_told() {
        let c = Container::format(
            &["--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000"],
            &[],
        );
        let segment = c.header().segment().unwrap();
        assert_eq!(
            segment.sector_size.to_string(),
            dumped_segment_field(&c, "sector")
        );
        assert_eq!(segment.sector_size, 4096);
    }

    #[test]
    fn the_systemd_tpm2_token_is_read_field_by_field() {
        let c = Container::pbkdf2();
        assert_eq!(c.header().systemd_tpm2_token(), None);
        let blob: Vec<u8> = (0..=255).collect();
        let policy = [0xa5u8; 32];
        let token = serde_json::json!({
            "type": "systemd-tpm2",
            "keyslots": ["0"],
            "tpm2-blob": BASE64.encode(&blob),
            "tpm2-pcrs": [11],
            "tpm2-pcr-bank": "sha256",
            "tpm2-primary-alg": "ecc",
            "tpm2-policy-hash": hex::encode(policy),
            "tpm2-pin": false,
            "tpm2_srk": BASE64.encode([0, 1, 7]),
        });
        c.import_token("0", &token, true);
        let t = c.header().systemd_tpm2_token().unwrap();
        assert_eq!(t.keyslots, [0]);
        assert_eq!(t.blob, blob);
        assert_eq!(t.pcrs, [11]);
        assert_eq!(t.pcr_bank, "sha256");
        assert_eq!(t.primary_alg.as_deref(), Some("ecc"));
        assert_eq!(t.policy_hash, policy);
        assert!(!t.pin);
        assert_eq!(t.storage_key, Some(vec![0, 1, 7]));
        // The key it unseals opens the keyslots it names.
        let key = c
            .header()
            .unlock(&mut c.open(), PASSPHRASE, Some(&t.keyslots));
        assert_eq!(key.unwrap().as_bytes(), c.volume_key().as_slice());
    }

    #[test]
    fn absent_tpm2_fields_take_systemds_defaults_and_a_bad_token_is_passed_over() {
        let c = Container::pbkdf2();
        let bad = serde_json::json!({
            "type": "systemd-tpm2", "keyslots": ["0"], "tpm2-blob": "not base64!",
            "tpm2-pcrs": [7], "tpm2-policy-hash": "00",
        });
        let good = serde_json::json!({
            "type": "systemd-tpm2", "keyslots": ["0"], "tpm2-blob": "AAEC",
            "tpm2-pcrs": [], "tpm2-policy-hash": "ff",
        });
        c.import_token("1", &bad, false);
        c.import_token("2", &good, true);
        let header = c.header();
        let all = header.systemd_tpm2_tokens();
        assert_eq!(all.len(), 2);
        let err = all[0].as_ref().unwrap_err();
        assert!(
            matches!(err, LuksError::Invalid { field, .. } if field == "token 1 tpm2-blob"),
            "{err:?}"
        );
        let t = header.systemd_tpm2_token().unwrap();
        assert_eq!(
            (t.blob, t.pcrs, t.policy_hash),
            (vec![0, 1, 2], vec![], vec![0xff])
        );
        assert_eq!(
            (t.pcr_bank.as_str(), t.primary_alg, t.pin, t.storage_key),
            ("sha256", None, false, None)
        );
    }

    #[test]
    fn an_argon2id_keyslot_opens() {
        // Two 256-bit XTS keys this time, so both AES key sizes are covered.
        let c = Container::format(
            &[
                "--pbkdf",
                "argon2id",
                "--pbkdf-memory",
                "32",
                "--pbkdf-force-iterations",
                "4",
            ],
            &[
                "--hash",
                "sha256",
                "--key-size",
                "512",
                "--sector-size",
                "512",
            ],
        );
        let key = c.header().unlock(&mut c.open(), PASSPHRASE, None).unwrap();
        let expected = c.volume_key();
        assert_eq!(expected.len(), 64);
        assert_eq!(key.as_bytes(), expected.as_slice());
        c.refuses_a_wrong_passphrase();
    }

    #[test]
    fn an_unsupported_keyslot_cipher_is_named() {
        let c = Container::format(
            &["--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000"],
            &[
                "--keyslot-cipher",
                "aes-cbc-essiv:sha256",
                "--keyslot-key-size",
                "256",
            ],
        );
        let err = c
            .header()
            .unlock(&mut c.open(), PASSPHRASE, None)
            .unwrap_err();
        assert!(
            matches!(
                &err,
                LuksError::Unsupported { keyslot: 0, what: "area cipher", name }
                    if name == "aes-cbc-essiv:sha256"
            ),
            "{err:?}"
        );
    }

    /// `bytes` with `edit` applied to the JSON area and the checksum redone, as whoever can
    /// write the disk could.
    fn rewrite_json(bytes: &mut [u8], edit: impl FnOnce(&mut Value)) {
        let hdr_size = usize::try_from(be_u64(bytes, HDR_SIZE_AT)).unwrap();
        let area = &bytes[BINARY_LEN..hdr_size];
        let end = area.iter().position(|&b| b == 0).unwrap();
        let mut json: Value = serde_json::from_slice(&area[..end]).unwrap();
        edit(&mut json);
        let text = json.to_string();
        let area = &mut bytes[BINARY_LEN..hdr_size];
        area.fill(0);
        area[..text.len()].copy_from_slice(text.as_bytes());
        bytes[CSUM.0..CSUM.1].fill(0);
        let sum = Sha256::digest(&bytes[..hdr_size]);
        bytes[CSUM.0..CSUM.0 + sum.len()].copy_from_slice(&sum);
    }

    #[test]
    fn a_rewritten_header_is_held_to_what_cryptsetup_writes() {
        let c = Container::pbkdf2();
        let original = std::fs::read(&c.image).unwrap();
        let unlock = |edit: fn(&mut Value), keyslots: Option<&[u32]>| {
            let mut bytes = original.clone();
            rewrite_json(&mut bytes, edit);
            let mut dev = io::Cursor::new(bytes);
            Header::read(&mut dev)?.unlock(&mut dev, PASSPHRASE, keyslots)
        };
        // Rewritten unchanged: the checksum is redone as cryptsetup does it.
        assert_eq!(unlock(|_| {}, None).unwrap().as_bytes(), c.volume_key());
        let err = unlock(
            |j| j["digests"]["0"]["digest"] = "AAECAwQFBgc=".into(),
            None,
        );
        assert!(
            matches!(&err, Err(LuksError::Invalid { field, .. }) if field == "digest 0 digest"),
            "{err:?}"
        );
        let err = unlock(|j| j["keyslots"]["0"]["key_size"] = 8.into(), None);
        assert!(
            matches!(&err, Err(LuksError::Invalid { field, .. }) if field == "keyslot 0 key_size"),
            "{err:?}"
        );
        let err = unlock(
            |j| j["keyslots"]["0"]["kdf"]["type"] = "scrypt".into(),
            None,
        );
        assert!(
            matches!(
                &err,
                Err(LuksError::Unsupported { keyslot: 0, what: "kdf", name }) if name == "scrypt"
            ),
            "{err:?}"
        );
        let unbind = |j: &mut Value| j["digests"]["0"]["segments"] = serde_json::json!([]);
        let err = unlock(unbind, None);
        assert!(
            matches!(err, Err(LuksError::WrongPassphrase { tried: 0 })),
            "{err:?}"
        );
        let err = unlock(unbind, Some(&[0]));
        assert!(matches!(err, Err(LuksError::Unbound(0))), "{err:?}");
    }

    /// `edit` applied to a cryptsetup-made header, then what reading and unlocking it says.
    fn crafted(c: &Container, edit: impl FnOnce(&mut Value)) -> Result<VolumeKey, LuksError> {
        let mut bytes = std::fs::read(&c.image).unwrap();
        rewrite_json(&mut bytes, edit);
        let mut dev = io::Cursor::new(bytes);
        Header::read(&mut dev)?.unlock(&mut dev, PASSPHRASE, None)
    }

    fn invalid_field(result: Result<VolumeKey, LuksError>) -> String {
        match result {
            Err(LuksError::Invalid { field, .. }) => field,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_keyslot_area_outside_the_keyslots_area_is_refused_before_it_is_read() {
        let c = Container::pbkdf2();
        // 1 GiB of stripes in a 1 GiB area: consistent, but far beyond the keyslots area
        // (and the 20 MiB device); never allocated nor read.
        let huge = |j: &mut Value| {
            j["keyslots"]["0"]["af"]["stripes"] = (1u64 << 25).into();
            j["keyslots"]["0"]["area"]["size"] = (1u64 << 30).to_string().into();
        };
        assert_eq!(invalid_field(crafted(&c, huge)), "keyslot 0 area");
        // An area over the headers, or running past the keyslots area's end.
        let over_header = |j: &mut Value| j["keyslots"]["0"]["area"]["offset"] = "4096".into();
        assert_eq!(invalid_field(crafted(&c, over_header)), "keyslot 0 area");
        let past_end = |j: &mut Value| {
            let size = j["config"]["keyslots_size"]
                .as_str()
                .unwrap()
                .parse::<u64>();
            j["keyslots"]["0"]["area"]["offset"] = (size.unwrap() + 1).to_string().into();
        };
        assert_eq!(invalid_field(crafted(&c, past_end)), "keyslot 0 area");
        // A keyslots area larger than cryptsetup ever makes bounds nothing.
        let big_config =
            |j: &mut Value| j["config"]["keyslots_size"] = (1u64 << 40).to_string().into();
        assert_eq!(
            invalid_field(crafted(&c, big_config)),
            "config keyslots_size"
        );
        // Unchanged, it opens.
        assert_eq!(crafted(&c, |_| {}).unwrap().as_bytes(), c.volume_key());
    }

    #[test]
    fn a_segment_offset_that_is_not_whole_sectors_is_refused() {
        let c = Container::pbkdf2();
        let mut bytes = std::fs::read(&c.image).unwrap();
        rewrite_json(&mut bytes, |j| {
            j["segments"]["0"]["offset"] = ((16u64 << 20) + 100).to_string().into();
        });
        let err = Header::read(&mut io::Cursor::new(bytes))
            .unwrap()
            .segment()
            .unwrap_err();
        assert!(
            matches!(&err, LuksError::Invalid { field, .. } if field == "segment 0 offset"),
            "{err:?}"
        );
    }

    #[test]
    fn a_segment_size_that_is_not_whole_sectors_is_refused() {
        let c = Container::pbkdf2();
        let with_size = |size: &str| {
            let mut bytes = std::fs::read(&c.image).unwrap();
            rewrite_json(&mut bytes, |j| {
                j["segments"]["0"]["size"] = size.into();
            });
            Header::read(&mut io::Cursor::new(bytes)).unwrap().segment()
        };
        for bad in ["1048577", "1048320", "0"] {
            let err = with_size(bad).unwrap_err();
            assert!(
                matches!(&err, LuksError::Invalid { field, .. } if field == "segment 0 size"),
                "{bad}: {err:?}"
            );
        }
        let sector = with_size("1048576").unwrap().sector_size;
        assert_eq!(
            with_size("1048576").unwrap().size,
            Some(1 << 20),
            "{sector}"
        );
    }

    fn kdf(kind: &str, iterations: Option<u32>, time: u32, memory: u32) -> RawKdf {
        RawKdf {
            kind: kind.into(),
            salt: BASE64.encode([0u8; 32]),
            hash: Some("sha256".into()),
            iterations,
            time: Some(time),
            memory: Some(memory),
            cpus: Some(4),
        }
    }

    #[test]
    fn kdf_costs_beyond_what_cryptsetup_picks_are_refused_before_running() {
        let field = |r: Result<Kdf, LuksError>| match r {
            Err(LuksError::Invalid { field, .. }) => field,
            Err(e) => panic!("{e:?}"),
            Ok(_) => panic!("accepted"),
        };
        let pbkdf2 = |n| Kdf::parse(0, kdf("pbkdf2", Some(n), 0, 0));
        assert!(pbkdf2(MAX_PBKDF2_ITERATIONS).is_ok());
        assert_eq!(
            field(pbkdf2(MAX_PBKDF2_ITERATIONS + 1)),
            "keyslot 0 kdf.iterations"
        );
        assert_eq!(field(pbkdf2(u32::MAX)), "keyslot 0 kdf.iterations");
        // cryptsetup's default (1 GiB, 4 passes) and its largest memory with a few passes.
        let argon2 = |time, memory| Kdf::parse(0, kdf("argon2id", None, time, memory));
        assert!(argon2(4, 1 << 20).is_ok());
        assert!(argon2(16, MAX_ARGON2_KIB).is_ok());
        assert_eq!(field(argon2(17, MAX_ARGON2_KIB)), "keyslot 0 kdf.time");
        // Many passes over little memory are the same hours of work.
        assert_eq!(field(argon2(u32::MAX, 32)), "keyslot 0 kdf.time");
        assert_eq!(field(argon2(4, MAX_ARGON2_KIB + 1)), "keyslot 0 kdf.memory");
        // The digest, run once per candidate key, is bounded the same.
        let digest = |iterations| RawDigest {
            kind: "pbkdf2".into(),
            keyslots: vec!["0".into()],
            segments: vec!["0".into()],
            hash: Some("sha256".into()),
            iterations: Some(iterations),
            salt: Some(BASE64.encode([0u8; 32])),
            digest: Some(BASE64.encode([0u8; 32])),
        };
        assert!(Pbkdf2Digest::parse(0, "0", digest(1000)).is_ok());
        match Pbkdf2Digest::parse(0, "0", digest(u32::MAX)) {
            Err(LuksError::Invalid { field, .. }) => assert_eq!(field, "digest 0 iterations"),
            Err(e) => panic!("{e:?}"),
            Ok(_) => panic!("accepted"),
        }
    }

    #[test]
    fn af_merge_undoes_a_split() {
        // A split made by hand: random-looking stripes s0, s1 and the last one chosen so
        // that the merge gives `key` (LUKS's AF_split with fixed instead of random stripes).
        let key: Vec<u8> = (0..40).collect();
        let s0: Vec<u8> = (100..140).collect();
        let s1: Vec<u8> = (200..240).collect();
        for hash in [Hash::Sha1, Hash::Sha256, Hash::Sha512] {
            let mut acc = s0.clone();
            hash.diffuse(&mut acc);
            xor(&mut acc, &s1);
            hash.diffuse(&mut acc);
            let mut last = key.clone();
            xor(&mut last, &acc);
            let split = [s0.clone(), s1.clone(), last].concat();
            assert_eq!(af_merge(&split, 40, hash).as_slice(), key.as_slice());
        }
        assert_eq!(af_merge(&key, 40, Hash::Sha1).as_slice(), key.as_slice());
    }

    #[test]
    fn diffusion_hashes_each_piece_with_its_index() {
        // 25 bytes with SHA-1 (20-byte output): one whole piece and a 5-byte tail.
        let mut block: Vec<u8> = (0..25).collect();
        diffuse::<Sha1>(&mut block);
        let piece = |i: u32, data: &[u8]| {
            let mut h = Sha1::new();
            h.update(i.to_be_bytes());
            h.update(data);
            h.finalize().to_vec()
        };
        let first = piece(0, &(0..20).collect::<Vec<u8>>());
        let tail = piece(1, &(20..25).collect::<Vec<u8>>());
        assert_eq!(block, [&first[..], &tail[..5]].concat());
    }
}
