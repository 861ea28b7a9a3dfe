//! Crypto-agile event logs built from chosen events, **for simulators and tests only**
//! (behind the `sim` feature, like `tpm::sim`): with [`LogBuilder::expected_pcr`] a test makes
//! a log whose PCR 4 matches the PCR values of a simulated quote, and with
//! [`LogBuilder::raw_event`] and [`LogBuilder::algorithms`] every malformed variant real
//! firmware would never write.
//!
//! ```
//! use attest::eventlog::{sim::LogBuilder, EventLog};
//! let app = [0xa5; 32]; // the UKI's Authenticode hash
//! let log = LogBuilder::new().boot_from_disk(app, b"image load event");
//! let pcr4 = log.expected_pcr(4); // what the simulated TPM quotes
//! let parsed = EventLog::parse(&log.build()).unwrap();
//! assert_eq!(parsed.boot_applications(&pcr4).unwrap(), vec![app]);
//! ```

use super::{
    extend, CALLING_EFI_APPLICATION, EV_EFI_ACTION, EV_EFI_BOOT_SERVICES_APPLICATION, EV_NO_ACTION,
    EV_SEPARATOR, SEPARATOR_DATA, SPEC_ID_SIGNATURE, STARTUP_LOCALITY_SIGNATURE, TPM_ALG_SHA1,
};
use crate::tpm::TPM_ALG_SHA256;
use sha2::{Digest, Sha256};

/// The digests an entry carries.
#[derive(Debug, Clone)]
enum Digests {
    /// One per bank of the Spec ID header: the SHA-256 one given, the others filled in.
    Banks([u8; 32]),
    /// Exactly these `(hashAlg, digest)` pairs, as given.
    Raw(Vec<(u16, Vec<u8>)>),
}

#[derive(Debug, Clone)]
struct Entry {
    pcr: u32,
    event_type: u32,
    digests: Digests,
    data: Vec<u8>,
}

/// Builds the bytes of a crypto-agile event log, as firmware writes it.
#[derive(Debug, Clone)]
pub struct LogBuilder {
    algorithms: Vec<(u16, u16)>,
    entries: Vec<Entry>,
}

impl Default for LogBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl LogBuilder {
    /// A log with the SHA-256 bank only (swtpm's default banks) and no events yet.
    pub fn new() -> Self {
        Self {
            algorithms: vec![(TPM_ALG_SHA256, 32)],
            entries: Vec::new(),
        }
    }

    /// A log with SHA-1 and SHA-256 banks, so each event carries two digests, SHA-1 first.
    /// The SHA-1 digests are filler derived from the SHA-256 one, not real SHA-1 hashes:
    /// nothing replays that bank.
    pub fn with_sha1() -> Self {
        Self {
            algorithms: vec![(TPM_ALG_SHA1, 20), (TPM_ALG_SHA256, 32)],
            entries: Vec::new(),
        }
    }

    /// Replace the Spec ID header's `(algorithmId, digestSize)` list, written as given (also
    /// invalid lists, for refusal tests). Events added with [`Self::event`] carry one digest
    /// per listed algorithm.
    pub fn algorithms(mut self, algorithms: &[(u16, u16)]) -> Self {
        self.algorithms = algorithms.to_vec();
        self
    }

    /// An event extending `sha256` (and filler in the other banks) into `pcr`.
    pub fn event(mut self, pcr: u32, event_type: u32, sha256: [u8; 32], data: &[u8]) -> Self {
        self.entries.push(Entry {
            pcr,
            event_type,
            digests: Digests::Banks(sha256),
            data: data.to_vec(),
        });
        self
    }

    /// An event whose digest is the hash of its data, as firmware logs actions and separators.
    pub fn measure(self, pcr: u32, event_type: u32, data: &[u8]) -> Self {
        let digest = Sha256::digest(data).into();
        self.event(pcr, event_type, digest, data)
    }

    /// An event carrying exactly `digests` (`(hashAlg, digest)`, in this order), whatever the
    /// Spec ID header says.
    pub fn raw_event(
        mut self,
        pcr: u32,
        event_type: u32,
        digests: &[(u16, &[u8])],
        data: &[u8],
    ) -> Self {
        self.entries.push(Entry {
            pcr,
            event_type,
            digests: Digests::Raw(digests.iter().map(|(a, d)| (*a, d.to_vec())).collect()),
            data: data.to_vec(),
        });
        self
    }

    /// The `EV_NO_ACTION` `StartupLocality` event in PCR 0 (all digests zero), which makes
    /// PCR 0 start at `locality` instead of zero.
    pub fn startup_locality(self, locality: u8) -> Self {
        let mut data = STARTUP_LOCALITY_SIGNATURE.to_vec();
        data.push(locality);
        self.event(0, EV_NO_ACTION, [0; 32], &data)
    }

    /// What OVMF logs when it boots one EFI application from a disk boot option: the
    /// "Calling EFI Application from Boot Option" action in PCR 4, the separators of PCRs
    /// 0–7, then the application (its Authenticode hash, with `image_load_event` as the
    /// `UEFI_IMAGE_LOAD_EVENT` data) in PCR 4.
    pub fn boot_from_disk(self, authenticode: [u8; 32], image_load_event: &[u8]) -> Self {
        let mut log = self.measure(4, EV_EFI_ACTION, CALLING_EFI_APPLICATION);
        for pcr in 0..=7 {
            log = log.measure(pcr, EV_SEPARATOR, &SEPARATOR_DATA);
        }
        log.event(
            4,
            EV_EFI_BOOT_SERVICES_APPLICATION,
            authenticode,
            image_load_event,
        )
    }

    /// The SHA-256 bank value of `pcr` a TPM would hold after the events added so far (the
    /// value to put in a simulated quote). Raw events without a 32-byte SHA-256 digest are
    /// skipped (the parser refuses to replay them).
    pub fn expected_pcr(&self, pcr: u32) -> [u8; 32] {
        let mut value = [0u8; 32];
        for e in &self.entries {
            if e.pcr == 0 && pcr == 0 && e.event_type == EV_NO_ACTION {
                if let [signature @ .., locality] = e.data.as_slice() {
                    if signature == STARTUP_LOCALITY_SIGNATURE {
                        value = [0; 32];
                        value[31] = *locality;
                    }
                }
            }
        }
        for e in &self.entries {
            if e.pcr != pcr || e.event_type == EV_NO_ACTION {
                continue;
            }
            let digest = match &e.digests {
                Digests::Banks(d) => Some(*d),
                Digests::Raw(list) => list
                    .iter()
                    .find(|(alg, _)| *alg == TPM_ALG_SHA256)
                    .and_then(|(_, d)| <[u8; 32]>::try_from(d.as_slice()).ok()),
            };
            if let Some(d) = digest {
                value = extend(&value, &d);
            }
        }
        value
    }

    /// The log's bytes: the Spec ID header event, then one `TCG_PCR_EVENT2` per event.
    pub fn build(&self) -> Vec<u8> {
        let mut out = Vec::new();
        put_u32(&mut out, 0); // pcrIndex
        put_u32(&mut out, EV_NO_ACTION);
        out.extend_from_slice(&[0; 20]);
        let spec = self.spec_id();
        put_u32(&mut out, len_u32(&spec));
        out.extend_from_slice(&spec);
        for e in &self.entries {
            put_u32(&mut out, e.pcr);
            put_u32(&mut out, e.event_type);
            let digests = match &e.digests {
                Digests::Banks(sha256) => self
                    .algorithms
                    .iter()
                    .map(|&(alg, size)| (alg, bank_digest(alg, size, sha256)))
                    .collect(),
                Digests::Raw(list) => list.clone(),
            };
            put_u32(&mut out, len_u32(&digests));
            for (alg, digest) in digests {
                out.extend_from_slice(&alg.to_le_bytes());
                out.extend_from_slice(&digest);
            }
            put_u32(&mut out, len_u32(&e.data));
            out.extend_from_slice(&e.data);
        }
        out
    }

    /// `TCG_EfiSpecIDEvent` for the chosen banks (PC client platform class, version 2.0
    /// errata 2, UINTN of 8 bytes, no vendor info), as OVMF writes it.
    fn spec_id(&self) -> Vec<u8> {
        let mut out = SPEC_ID_SIGNATURE.to_vec();
        put_u32(&mut out, 0); // platformClass
        out.extend_from_slice(&[0, 2, 2, 2]); // minor, major, errata, uintnSize
        put_u32(&mut out, len_u32(&self.algorithms));
        for (alg, size) in &self.algorithms {
            out.extend_from_slice(&alg.to_le_bytes());
            out.extend_from_slice(&size.to_le_bytes());
        }
        out.push(0); // vendorInfoSize
        out
    }
}

/// The digest written for bank `alg`: the SHA-256 one for SHA-256, else `size` filler bytes
/// derived from it (so banks differ, and a parser that read the wrong one would notice).
fn bank_digest(alg: u16, size: u16, sha256: &[u8; 32]) -> Vec<u8> {
    if alg == TPM_ALG_SHA256 && size == 32 {
        return sha256.to_vec();
    }
    (0..usize::from(size))
        .map(|i| sha256[i % 32] ^ 0x5a ^ (alg as u8))
        .collect()
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// A length as the format's u32 (saturating: nothing built here comes near 4 GiB).
fn len_u32<T>(items: &[T]) -> u32 {
    u32::try_from(items.len()).unwrap_or(u32::MAX)
}
