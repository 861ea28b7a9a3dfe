//! The firmware's TCG event log: which EFI applications the firmware started, as far as a
//! verified TPM quote vouches for it.
//!
//! A quote proves PCR 4's value, but a PCR value is a hash chain: it says nothing readable by
//! itself. UEFI firmware (OVMF, real servers) also writes an event log, the "crypto-agile" log
//! of the TCG PC Client Platform Firmware Profile (PFP, §10), which Linux exposes as
//! `/sys/kernel/security/tpm0/binary_bios_measurements`: one record per extend, with the
//! digest extended and what it was. The node sends that log; it is the node's say-so until
//! its replay reproduces the quoted PCR value, and then every digest in it is vouched for.
//!
//! * [`EventLog::parse`] reads the log (everything little-endian): a first event in the SHA-1
//!   format carrying the `Spec ID Event03` header that lists the PCR banks and their digest
//!   sizes, then `TCG_PCR_EVENT2` records with one digest per bank. Legacy SHA-1-only logs and
//!   logs without a SHA-256 bank are refused: this project quotes the SHA-256 bank.
//! * [`EventLog::replay`] recomputes one PCR of the SHA-256 bank.
//! * [`EventLog::boot_applications`] checks the replay of PCR 4 against the quoted value and
//!   returns the Authenticode digests of the EFI applications the firmware started, so the
//!   verifier can compare them with the image's UKI. Every other extend into PCR 4 must be one
//!   whose digest the verifier can recompute from its data, so that no application can hide in
//!   the log under another event type.
//!
//! The log is hostile input: sizes are bounded before anything is allocated, every read is
//! bounds-checked, and nothing panics. Pure: no I/O; the node's agent reads the file.

use crate::tpm::TPM_ALG_SHA256;
use sha2::{Digest, Sha256};

/// `EV_NO_ACTION`: logged for information only, never extended into a PCR (the Spec ID
/// header, `StartupLocality`, and the like).
pub const EV_NO_ACTION: u32 = 0x0000_0003;
/// `EV_SEPARATOR`: marks the end of pre-OS measurements in PCRs 0–7.
pub const EV_SEPARATOR: u32 = 0x0000_0004;
/// `EV_EFI_BOOT_SERVICES_APPLICATION`: an EFI application the firmware loaded (boot loader,
/// UKI); its digest is the PE image's Authenticode hash.
pub const EV_EFI_BOOT_SERVICES_APPLICATION: u32 = 0x8000_0003;
/// `EV_EFI_ACTION`: a firmware action, its digest the hash of an ASCII string naming it.
pub const EV_EFI_ACTION: u32 = 0x8000_0007;

/// `TPM_ALG_SHA1`, the other bank firmware commonly logs.
pub const TPM_ALG_SHA1: u16 = 0x0004;

/// The `EV_EFI_ACTION` data the firmware logs in PCR 4 just before starting a boot option's
/// application (no NUL terminator, as EDK II measures it).
pub const CALLING_EFI_APPLICATION: &[u8] = b"Calling EFI Application from Boot Option";
/// The `EV_EFI_ACTION` data the firmware logs in PCR 4 when a boot option's application
/// returned (the firmware then tries the next boot option).
pub const RETURNING_FROM_EFI_APPLICATION: &[u8] =
    b"Returning from EFI Application from Boot Option";

/// The separator value of a normal boot. Firmware that hit an error logs another value
/// (`1`); the verifier refuses that in PCR 4 rather than guess what it means.
pub const SEPARATOR_DATA: [u8; 4] = [0; 4];

/// `TCG_EfiSpecIDEvent.signature` of a crypto-agile log (PFP §10.4.5.1).
pub const SPEC_ID_SIGNATURE: &[u8; 16] = b"Spec ID Event03\0";
/// `TCG_EfiStartupLocalityEvent.signature` (PFP §10.4.5.3).
pub const STARTUP_LOCALITY_SIGNATURE: &[u8; 16] = b"StartupLocality\0";

/// Largest log accepted, in bytes. Real logs are a few tens of KiB; the node sends this one,
/// so its size is bounded before it is read.
pub const MAX_LOG_BYTES: usize = 1 << 20;
/// Most events (after the Spec ID header) accepted in one log. A boot logs a few hundred.
pub const MAX_EVENTS: usize = 10_000;
/// Largest event data accepted. The largest real events (Secure Boot variables, image load
/// events with long device paths) are a few KiB.
pub const MAX_EVENT_DATA_BYTES: usize = 64 * 1024;
/// Most digests per event, and most algorithms in the Spec ID header: one per PCR bank, and a
/// TPM has a handful of banks at most.
pub const MAX_DIGESTS_PER_EVENT: usize = 8;
/// Largest digest size a Spec ID header may declare (SHA-512 and SHA3-512 are 64 bytes).
pub const MAX_DIGEST_BYTES: u16 = 64;

/// One extend (or information record) of the log, after the Spec ID header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// `pcrIndex`: the PCR extended.
    pub pcr: u32,
    /// `eventType` (`EV_*`).
    pub event_type: u32,
    /// The SHA-256 bank's digest, if the event carries one (other banks are read and dropped:
    /// this project quotes and replays only SHA-256).
    pub sha256: Option<[u8; 32]>,
    /// The event data, as logged. Not covered by the PCR: only what its digest vouches for
    /// can be trusted (see [`EventLog::boot_applications`]).
    pub data: Vec<u8>,
}

/// A parsed crypto-agile event log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventLog {
    /// The events after the Spec ID header, in log order. Error `index` fields count here.
    pub events: Vec<Event>,
}

/// Why an event log, or what it claims, is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EventLogError {
    /// Fewer bytes than the structure needs. A log cut exactly between two events is not
    /// this error (the format has no count): it parses, and its replay then misses the quote.
    #[error("{what}: truncated (needs {needed} more bytes at offset {offset})")]
    Truncated {
        /// Which field.
        what: &'static str,
        /// Offset in the log where reading failed.
        offset: usize,
        /// Bytes missing.
        needed: usize,
    },
    /// A size or count beyond the bounds, refused before anything is allocated.
    #[error("{what}: {len}, more than {max}")]
    TooLarge {
        /// Which size or count.
        what: &'static str,
        /// The value found (for the event count: the count reached).
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The first event is not the `Spec ID Event03` header of a crypto-agile log (a legacy
    /// SHA-1-only log, or not an event log at all).
    #[error(
        "not a crypto-agile event log: first event has type {event_type:#x} and signature \"{}\"",
        signature.escape_ascii()
    )]
    NotCryptoAgile {
        /// The first event's type (a Spec ID header is `EV_NO_ACTION`).
        event_type: u32,
        /// Up to the first 16 bytes of its data (where `Spec ID Event03\0` belongs).
        signature: Vec<u8>,
    },
    /// The Spec ID header is for another major version of the format.
    #[error("Spec ID header version {major}.{minor} errata {errata}, expected major version 2")]
    UnsupportedSpecVersion {
        /// `specVersionMajor`.
        major: u8,
        /// `specVersionMinor`.
        minor: u8,
        /// `specErrata`.
        errata: u8,
    },
    /// The Spec ID header declares an impossible digest size for an algorithm.
    #[error("Spec ID header: algorithm {alg:#06x} with digest size {size}")]
    BadDigestSize {
        /// `algorithmId`.
        alg: u16,
        /// `digestSize` (0, above [`MAX_DIGEST_BYTES`], or not 32 for SHA-256).
        size: u16,
    },
    /// The Spec ID header lists an algorithm twice (its digest size would be ambiguous).
    #[error("Spec ID header lists algorithm {alg:#06x} twice")]
    DuplicateAlgorithm {
        /// `algorithmId`.
        alg: u16,
    },
    /// The Spec ID header has no SHA-256 bank, the bank this project quotes.
    #[error("event log has no SHA-256 bank (algorithms {algorithms:04x?})")]
    NoSha256 {
        /// The `(algorithmId, digestSize)` pairs listed.
        algorithms: Vec<(u16, u16)>,
    },
    /// Bytes left over inside a structure that has a declared size.
    #[error("{what}: {extra} trailing bytes")]
    Trailing {
        /// Which structure.
        what: &'static str,
        /// How many.
        extra: usize,
    },
    /// An event carries a digest of an algorithm the Spec ID header does not list, so its
    /// size, and where the event goes on, are unknown.
    #[error("event {index}: digest of algorithm {alg:#06x}, not listed in the Spec ID header")]
    UnknownAlgorithm {
        /// `hashAlg`.
        alg: u16,
        /// The event's index in [`EventLog::events`].
        index: usize,
    },
    /// An event carries two digests of one algorithm (which one was extended is ambiguous).
    #[error("event {index}: two digests of algorithm {alg:#06x}")]
    DuplicateDigest {
        /// `hashAlg`.
        alg: u16,
        /// The event's index in [`EventLog::events`].
        index: usize,
    },
    /// An event extended into the replayed PCR has no SHA-256 digest.
    #[error("event {index} in PCR {pcr} has no SHA-256 digest")]
    MissingSha256 {
        /// The PCR.
        pcr: u32,
        /// The event's index in [`EventLog::events`].
        index: usize,
    },
    /// A `StartupLocality` event is malformed or repeated, so PCR 0's start value is unclear.
    #[error("event {index}: StartupLocality event of {len} bytes (expected 17) or repeated")]
    BadStartupLocality {
        /// The event's index in [`EventLog::events`].
        index: usize,
        /// Its data length.
        len: usize,
    },
    /// The log's replay does not reproduce the PCR value the quote vouches for: the log is
    /// not the one the firmware wrote, or not all of it.
    #[error(
        "PCR {pcr}: the event log replays to {}, the quote vouches for {}",
        hex::encode(replayed),
        hex::encode(quoted)
    )]
    ReplayMismatch {
        /// The PCR.
        pcr: u32,
        /// The value the log replays to.
        replayed: [u8; 32],
        /// The quoted value.
        quoted: [u8; 32],
    },
    /// An event type the verifier cannot interpret was extended into the PCR.
    #[error("event {index}: type {event_type:#010x} extended into PCR {pcr}, which the verifier cannot interpret")]
    UnexpectedEvent {
        /// The PCR.
        pcr: u32,
        /// `eventType`.
        event_type: u32,
        /// The event's index in [`EventLog::events`].
        index: usize,
    },
    /// An event of an accepted type carries data the verifier does not recognise.
    #[error(
        "event {index}: type {event_type:#010x} in PCR {pcr} with unrecognised data \"{}\"",
        shown(data)
    )]
    UnexpectedEventData {
        /// The PCR.
        pcr: u32,
        /// `eventType`.
        event_type: u32,
        /// The event's index in [`EventLog::events`].
        index: usize,
        /// Its data.
        data: Vec<u8>,
    },
    /// An event whose digest is the hash of its data logs another digest: its data does not
    /// say what was extended (something may be hiding under a harmless label).
    #[error(
        "event {index}: type {event_type:#010x} in PCR {pcr} extends {}, but its data hashes to {}",
        hex::encode(logged),
        hex::encode(computed)
    )]
    DigestMismatch {
        /// The PCR.
        pcr: u32,
        /// `eventType`.
        event_type: u32,
        /// The event's index in [`EventLog::events`].
        index: usize,
        /// The SHA-256 digest logged (and extended).
        logged: [u8; 32],
        /// SHA-256 of the event data.
        computed: [u8; 32],
    },
}

/// Event data for an error message: escaped, and cut at 64 bytes (the value keeps all of it).
fn shown(data: &[u8]) -> String {
    let cut = data.get(..64).unwrap_or(data);
    let mut s = cut.escape_ascii().to_string();
    if cut.len() < data.len() {
        s.push_str("...");
    }
    s
}

/// Bounds-checked little-endian reader: every read returns the bytes or a
/// [`EventLogError::Truncated`] naming the field, at its offset in the whole log.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// Offset of `bytes` in the log (for readers over one event's data).
    base: usize,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8], base: usize) -> Self {
        Self {
            bytes,
            pos: 0,
            base,
        }
    }

    fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.pos)
    }

    fn offset(&self) -> usize {
        self.base + self.pos
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], EventLogError> {
        let rest = self.bytes.get(self.pos..).unwrap_or_default();
        let Some(head) = rest.get(..n) else {
            return Err(EventLogError::Truncated {
                what,
                offset: self.offset(),
                needed: n - rest.len(),
            });
        };
        self.pos += n;
        Ok(head)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], EventLogError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, EventLogError> {
        Ok(u8::from_le_bytes(self.array(what)?))
    }

    fn u16(&mut self, what: &'static str) -> Result<u16, EventLogError> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, EventLogError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    /// A u32 size or count, refused above `max` before anything of that size is read.
    fn bounded(&mut self, what: &'static str, max: usize) -> Result<usize, EventLogError> {
        let len = usize::try_from(self.u32(what)?).unwrap_or(usize::MAX);
        if len > max {
            return Err(EventLogError::TooLarge { what, len, max });
        }
        Ok(len)
    }
}

/// The banks of the Spec ID header: `(algorithmId, digestSize)`, sizes checked.
type Algorithms = Vec<(u16, u16)>;

fn digest_size(algorithms: &Algorithms, alg: u16) -> Option<u16> {
    algorithms
        .iter()
        .find(|(id, _)| *id == alg)
        .map(|(_, size)| *size)
}

/// Read the first event (SHA-1 format) and its `TCG_EfiSpecIDEvent`.
fn parse_header(r: &mut Reader<'_>) -> Result<Algorithms, EventLogError> {
    // pcrIndex and the SHA-1 digest field are extended nowhere (the event is EV_NO_ACTION):
    // read, not judged.
    r.u32("TCG_PCClientPCREvent.pcrIndex")?;
    let event_type = r.u32("TCG_PCClientPCREvent.eventType")?;
    r.take(20, "TCG_PCClientPCREvent.digest")?;
    let size = r.bounded("TCG_PCClientPCREvent.eventSize", MAX_EVENT_DATA_BYTES)?;
    let base = r.offset();
    let data = r.take(size, "TCG_PCClientPCREvent.event")?;
    let signature = data.get(..16).unwrap_or(data);
    if event_type != EV_NO_ACTION || signature != SPEC_ID_SIGNATURE {
        return Err(EventLogError::NotCryptoAgile {
            event_type,
            signature: signature.to_vec(),
        });
    }
    let mut s = Reader::new(data, base);
    s.take(16, "TCG_EfiSpecIDEvent.signature")?;
    s.u32("TCG_EfiSpecIDEvent.platformClass")?;
    let minor = s.u8("TCG_EfiSpecIDEvent.specVersionMinor")?;
    let major = s.u8("TCG_EfiSpecIDEvent.specVersionMajor")?;
    let errata = s.u8("TCG_EfiSpecIDEvent.specErrata")?;
    s.u8("TCG_EfiSpecIDEvent.uintnSize")?;
    if major != 2 {
        return Err(EventLogError::UnsupportedSpecVersion {
            major,
            minor,
            errata,
        });
    }
    let count = s.bounded(
        "TCG_EfiSpecIDEvent.numberOfAlgorithms",
        MAX_DIGESTS_PER_EVENT,
    )?;
    let mut algorithms = Algorithms::with_capacity(count);
    for _ in 0..count {
        let alg = s.u16("TCG_EfiSpecIdEventAlgorithmSize.algorithmId")?;
        let size = s.u16("TCG_EfiSpecIdEventAlgorithmSize.digestSize")?;
        if size == 0 || size > MAX_DIGEST_BYTES {
            return Err(EventLogError::BadDigestSize { alg, size });
        }
        if digest_size(&algorithms, alg).is_some() {
            return Err(EventLogError::DuplicateAlgorithm { alg });
        }
        algorithms.push((alg, size));
    }
    let vendor = s.u8("TCG_EfiSpecIDEvent.vendorInfoSize")?;
    s.take(usize::from(vendor), "TCG_EfiSpecIDEvent.vendorInfo")?;
    if s.remaining() > 0 {
        return Err(EventLogError::Trailing {
            what: "TCG_EfiSpecIDEvent",
            extra: s.remaining(),
        });
    }
    match digest_size(&algorithms, TPM_ALG_SHA256) {
        None => Err(EventLogError::NoSha256 { algorithms }),
        Some(32) => Ok(algorithms),
        Some(size) => Err(EventLogError::BadDigestSize {
            alg: TPM_ALG_SHA256,
            size,
        }),
    }
}

/// Read one `TCG_PCR_EVENT2`, the `index`-th after the header.
fn parse_event(
    r: &mut Reader<'_>,
    algorithms: &Algorithms,
    index: usize,
) -> Result<Event, EventLogError> {
    let pcr = r.u32("TCG_PCR_EVENT2.pcrIndex")?;
    let event_type = r.u32("TCG_PCR_EVENT2.eventType")?;
    let count = r.bounded("TPML_DIGEST_VALUES.count", MAX_DIGESTS_PER_EVENT)?;
    let mut seen = Vec::with_capacity(count);
    let mut sha256 = None;
    for _ in 0..count {
        let alg = r.u16("TPMT_HA.hashAlg")?;
        let size =
            digest_size(algorithms, alg).ok_or(EventLogError::UnknownAlgorithm { alg, index })?;
        if seen.contains(&alg) {
            return Err(EventLogError::DuplicateDigest { alg, index });
        }
        seen.push(alg);
        if alg == TPM_ALG_SHA256 {
            // parse_header admits SHA-256 only with size 32.
            sha256 = Some(r.array::<32>("TPMT_HA.digest")?);
        } else {
            r.take(usize::from(size), "TPMT_HA.digest")?;
        }
    }
    let size = r.bounded("TCG_PCR_EVENT2.eventSize", MAX_EVENT_DATA_BYTES)?;
    let data = r.take(size, "TCG_PCR_EVENT2.event")?.to_vec();
    Ok(Event {
        pcr,
        event_type,
        sha256,
        data,
    })
}

fn extend(pcr: &[u8; 32], digest: &[u8; 32]) -> [u8; 32] {
    Sha256::new()
        .chain_update(pcr)
        .chain_update(digest)
        .finalize()
        .into()
}

impl EventLog {
    /// Parse a crypto-agile log, refusing anything malformed or beyond the bounds. A valid
    /// log needs no event after the header; whether it is complete only its replay against a
    /// quote can tell.
    pub fn parse(bytes: &[u8]) -> Result<EventLog, EventLogError> {
        if bytes.len() > MAX_LOG_BYTES {
            return Err(EventLogError::TooLarge {
                what: "event log bytes",
                len: bytes.len(),
                max: MAX_LOG_BYTES,
            });
        }
        let mut r = Reader::new(bytes, 0);
        let algorithms = parse_header(&mut r)?;
        let mut events = Vec::new();
        while r.remaining() > 0 {
            if events.len() == MAX_EVENTS {
                return Err(EventLogError::TooLarge {
                    what: "events",
                    len: MAX_EVENTS + 1,
                    max: MAX_EVENTS,
                });
            }
            events.push(parse_event(&mut r, &algorithms, events.len())?);
        }
        let log = EventLog { events };
        // A malformed StartupLocality is a malformed log, not a surprise at replay time.
        log.startup_locality()?;
        Ok(log)
    }

    /// The locality the TPM was started from, if the log records it: an `EV_NO_ACTION` event
    /// in PCR 0 whose data is `StartupLocality\0` and one byte. PCR 0 starts at that value
    /// (locality 3 or 4 marks an H-CRTM) instead of zero; other PCRs are not affected.
    pub fn startup_locality(&self) -> Result<Option<u8>, EventLogError> {
        let mut found = None;
        for (index, event) in self.events.iter().enumerate() {
            if event.pcr != 0
                || event.event_type != EV_NO_ACTION
                || !event.data.starts_with(STARTUP_LOCALITY_SIGNATURE)
            {
                continue;
            }
            let bad = EventLogError::BadStartupLocality {
                index,
                len: event.data.len(),
            };
            match (event.data.as_slice(), found) {
                ([.., locality], None) if event.data.len() == 17 => found = Some(*locality),
                _ => return Err(bad),
            }
        }
        Ok(found)
    }

    /// SHA-256 bank value of `pcr` after replaying the log: from zero (for PCR 0, from the
    /// startup locality), extend each event of that PCR in order, except `EV_NO_ACTION`
    /// events, which firmware logs without extending.
    pub fn replay(&self, pcr: u32) -> Result<[u8; 32], EventLogError> {
        let mut value = [0u8; 32];
        if pcr == 0 {
            if let Some(locality) = self.startup_locality()? {
                value[31] = locality;
            }
        }
        for (index, event) in self.extended(pcr) {
            let digest = event
                .sha256
                .ok_or(EventLogError::MissingSha256 { pcr, index })?;
            value = extend(&value, &digest);
        }
        Ok(value)
    }

    /// The events extended into `pcr`, with their indices.
    fn extended(&self, pcr: u32) -> impl Iterator<Item = (usize, &Event)> {
        self.events
            .iter()
            .enumerate()
            .filter(move |(_, e)| e.pcr == pcr && e.event_type != EV_NO_ACTION)
    }

    /// The Authenticode digests (SHA-256 bank) of the EFI applications the firmware started,
    /// in order, from PCR 4, after checking that the replay of PCR 4 equals `quoted_pcr4`
    /// (the value a verified TPM quote vouches for; without that check the log is the node's
    /// say-so).
    ///
    /// The quote vouches for digests, not for event types or data, so every other extend into
    /// PCR 4 must be recomputable from its data: `EV_EFI_ACTION` with one of the two boot
    /// option strings ([`CALLING_EFI_APPLICATION`], [`RETURNING_FROM_EFI_APPLICATION`]) and
    /// `EV_SEPARATOR` with [`SEPARATOR_DATA`], each with digest SHA-256(data). Otherwise an
    /// application's extend relabelled as an action would vanish from the list. Any other
    /// event type in PCR 4 is refused, naming it: something was measured there that the
    /// verifier cannot interpret.
    pub fn boot_applications(
        &self,
        quoted_pcr4: &[u8; 32],
    ) -> Result<Vec<[u8; 32]>, EventLogError> {
        const PCR: u32 = 4;
        let replayed = self.replay(PCR)?;
        if replayed != *quoted_pcr4 {
            return Err(EventLogError::ReplayMismatch {
                pcr: PCR,
                replayed,
                quoted: *quoted_pcr4,
            });
        }
        let mut apps = Vec::new();
        for (index, event) in self.extended(PCR) {
            let logged = event
                .sha256
                .ok_or(EventLogError::MissingSha256 { pcr: PCR, index })?;
            let known = match event.event_type {
                EV_EFI_BOOT_SERVICES_APPLICATION => {
                    apps.push(logged);
                    continue;
                }
                EV_EFI_ACTION => {
                    event.data == CALLING_EFI_APPLICATION
                        || event.data == RETURNING_FROM_EFI_APPLICATION
                }
                EV_SEPARATOR => event.data == SEPARATOR_DATA,
                event_type => {
                    return Err(EventLogError::UnexpectedEvent {
                        pcr: PCR,
                        event_type,
                        index,
                    })
                }
            };
            if !known {
                return Err(EventLogError::UnexpectedEventData {
                    pcr: PCR,
                    event_type: event.event_type,
                    index,
                    data: event.data.clone(),
                });
            }
            let computed: [u8; 32] = Sha256::digest(&event.data).into();
            if computed != logged {
                return Err(EventLogError::DigestMismatch {
                    pcr: PCR,
                    event_type: event.event_type,
                    index,
                    logged,
                    computed,
                });
            }
        }
        Ok(apps)
    }
}

// Builds logs from chosen events: test and simulator data only, like `tpm::sim`.
#[cfg(feature = "sim")]
pub mod sim;

#[cfg(test)]
mod tests;
