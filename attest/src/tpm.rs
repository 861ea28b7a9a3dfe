//! TPM 2.0 quotes: the node's boot measurements as signed by its TPM, not as the node says.
//!
//! PCR values a node reads from sysfs are its own say-so: a compromised kernel can print any
//! value. A TPM quote is different: the TPM itself signs, with an attestation key (AK) that
//! never leaves it, a digest of the selected PCRs together with the verifier's nonce. This
//! module parses the TPM's binary structures (big-endian TPM marshalling, TPM 2.0 Library
//! Part 2) and verifies a quote:
//!
//! * [`AkPublic::parse`] accepts only the AK profile this project enrols: a restricted ECC
//!   NIST P-256 signing key (ECDSA with SHA-256, name algorithm SHA-256) that the TPM created
//!   and cannot export (fixedTPM, fixedParent, sensitiveDataOrigin). "Restricted" is what makes
//!   a quote trustworthy: such a key refuses to sign data that *looks like* a TPMS_ATTEST
//!   unless the TPM produced it.
//! * [`verify_quote`] checks the signature over the TPMS_ATTEST bytes, that the quote answers
//!   the expected nonce, that it covers exactly the SHA-256 bank PCRs 4, 7, 11 and 12, and that its
//!   PCR digest is SHA-256 of the PCR values carried alongside — and returns those values.
//!
//! Pure: no I/O; the node's TPM client (the `tpm` crate) produces the bytes. Parsers are
//! bounds-checked and never panic on hostile input.

use crate::canonical::hex_bytes;
use p256::ecdsa::signature::Verifier as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// `TPM_GENERATED_VALUE`: the magic a TPM puts at the start of everything it attests.
pub const TPM_GENERATED_VALUE: u32 = 0xff54_4347;
/// `TPM_ST_ATTEST_QUOTE`.
pub const TPM_ST_ATTEST_QUOTE: u16 = 0x8018;
/// `TPM_ALG_ECC`.
pub const TPM_ALG_ECC: u16 = 0x0023;
/// `TPM_ALG_SHA256`.
pub const TPM_ALG_SHA256: u16 = 0x000b;
/// `TPM_ALG_ECDSA`.
pub const TPM_ALG_ECDSA: u16 = 0x0018;
/// `TPM_ALG_NULL`.
pub const TPM_ALG_NULL: u16 = 0x0010;
/// `TPM_ECC_NIST_P256`.
pub const TPM_ECC_NIST_P256: u16 = 0x0003;

/// TPMA_OBJECT bits (TPM 2.0 Part 2, §8.3).
pub mod attr {
    /// The key cannot be duplicated off this TPM.
    pub const FIXED_TPM: u32 = 1 << 1;
    /// The key cannot be moved to another parent.
    pub const FIXED_PARENT: u32 = 1 << 4;
    /// The TPM generated the private key (nobody else knows it).
    pub const SENSITIVE_DATA_ORIGIN: u32 = 1 << 5;
    /// Authorisation with the user auth value (here: empty).
    pub const USER_WITH_AUTH: u32 = 1 << 6;
    /// Not subject to dictionary-attack protection. A key whose authorization value is the
    /// well-known empty one gains nothing from it, and loses much: each use marks the TPM
    /// "DA used", and every power cut after such a use counts as a failed authorization, so
    /// a few cuts lock the TPM out (swtpm's defaults: 3 tries, 1000 s each to recover).
    pub const NO_DA: u32 = 1 << 10;
    /// Signs only TPM-generated structures.
    pub const RESTRICTED: u32 = 1 << 16;
    /// Decryption key.
    pub const DECRYPT: u32 = 1 << 17;
    /// Signing key.
    pub const SIGN: u32 = 1 << 18;
}

/// Attributes an attestation key must have.
pub const AK_REQUIRED_ATTRIBUTES: u32 = attr::FIXED_TPM
    | attr::FIXED_PARENT
    | attr::SENSITIVE_DATA_ORIGIN
    | attr::RESTRICTED
    | attr::SIGN;

/// Attributes of the AK template this project creates: the required ones plus userWithAuth
/// (the key is used with the empty password; it is bound by being fixedTPM, not by a secret)
/// and noDA (an empty password needs no dictionary-attack protection, and a quote followed by
/// a power cut must not count as a failed try: [`attr::NO_DA`]).
pub const AK_TEMPLATE_ATTRIBUTES: u32 = AK_REQUIRED_ATTRIBUTES | attr::USER_WITH_AUTH | attr::NO_DA;

/// The PCRs a quote must cover, in the order their values enter the PCR digest:
/// 4 (boot loader and UKI as an EFI application), 7 (Secure Boot policy), 11 (the UKI's
/// sections as systemd-stub measures them, predicted by the image build).
pub const QUOTED_PCRS: [u8; 4] = [4, 7, 11, 12];

/// The TPML_PCR_SELECTION bitmap of [`QUOTED_PCRS`]: PCR n is bit n % 8 of byte n / 8.
pub const QUOTED_PCR_BITMAP: [u8; 3] = [0x90, 0x18, 0x00];

/// Upper bound on a marshalled TPMT_PUBLIC / TPMS_ATTEST / TPMT_SIGNATURE in evidence
/// (a TPM's own buffers are at most a few KiB).
pub const MAX_TPM_STRUCT_BYTES: usize = 4096;

/// Why TPM bytes are refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TpmError {
    /// Fewer bytes than the structure needs.
    #[error("{what}: truncated (needs {needed} more bytes at offset {offset})")]
    Truncated {
        /// Which field.
        what: &'static str,
        /// Offset where reading failed.
        offset: usize,
        /// Bytes missing.
        needed: usize,
    },
    /// A structure larger than any TPM produces, refused before parsing.
    #[error("{what}: {len} bytes, more than {max}")]
    TooLarge {
        /// Which structure.
        what: &'static str,
        /// Its size.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Bytes left over after the structure.
    #[error("{what}: {extra} trailing bytes")]
    Trailing {
        /// Which structure.
        what: &'static str,
        /// How many.
        extra: usize,
    },
    /// A field has a value outside the accepted profile.
    #[error("{field}: {got:#x}, expected {expected}")]
    Unsupported {
        /// Which field.
        field: &'static str,
        /// The value found.
        got: u64,
        /// What is accepted.
        expected: &'static str,
    },
    /// Object attributes lack a required bit or carry a forbidden one.
    #[error("AK attributes {got:#010x}: must set {required:#010x} and clear decrypt")]
    Attributes {
        /// The attributes found.
        got: u32,
        /// The bits required.
        required: u32,
    },
    /// The public point is not on P-256.
    #[error("AK public point is not a valid P-256 point")]
    BadPoint,
    /// The signature's scalars are not a valid ECDSA signature encoding.
    #[error("quote signature is not a valid ECDSA P-256 signature encoding")]
    BadSignatureEncoding,
    /// The signature does not verify with the AK.
    #[error("quote signature does not verify with the enrolled AK")]
    BadSignature,
    /// The quote answers another nonce.
    #[error(
        "quote answers nonce {}, expected {}",
        hex::encode(got),
        hex::encode(expected)
    )]
    NonceMismatch {
        /// The quote's extraData.
        got: Vec<u8>,
        /// The expected nonce.
        expected: [u8; 32],
    },
    /// The quote covers other PCRs than SHA-256 {4, 7, 11, 12}.
    #[error("quote selects {got:?}, expected SHA-256 PCRs 4, 7, 11, 12")]
    PcrSelection {
        /// The selections found.
        got: Vec<PcrSelection>,
    },
    /// The PCR values carried alongside do not hash to the quoted digest.
    #[error(
        "PCR digest {} of the carried values != quoted digest {}",
        hex::encode(got),
        hex::encode(quoted)
    )]
    PcrDigestMismatch {
        /// SHA-256(pcr4 || pcr7 || pcr11 || pcr12) of the carried values.
        got: [u8; 32],
        /// The digest the TPM signed.
        quoted: Vec<u8>,
    },
    /// The carried PCR values are not for exactly PCRs 4, 7, 11 and 12.
    #[error("carried PCR values for {got:?}, expected exactly 4, 7, 11 and 12")]
    PcrSet {
        /// The keys carried, as sent.
        got: Vec<String>,
    },
}

/// Bounds-checked big-endian reader over TPM marshalled bytes: every read either returns the
/// bytes or a [`TpmError::Truncated`] naming the field, so hostile input cannot panic a parser.
/// Public so the node's TPM client reads command responses with the same rules.
#[derive(Debug)]
pub struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// Read `bytes` from the start.
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, pos: 0 }
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], TpmError> {
        let rest = &self.bytes[self.pos..];
        if rest.len() < n {
            return Err(TpmError::Truncated {
                what,
                offset: self.pos,
                needed: n - rest.len(),
            });
        }
        self.pos += n;
        Ok(&rest[..n])
    }

    /// A byte.
    pub fn u8(&mut self, what: &'static str) -> Result<u8, TpmError> {
        Ok(self.take(1, what)?[0])
    }

    /// A big-endian u16.
    pub fn u16(&mut self, what: &'static str) -> Result<u16, TpmError> {
        let b = self.take(2, what)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    /// A big-endian u32.
    pub fn u32(&mut self, what: &'static str) -> Result<u32, TpmError> {
        let b = self.take(4, what)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A big-endian u64.
    pub fn u64(&mut self, what: &'static str) -> Result<u64, TpmError> {
        let hi = u64::from(self.u32(what)?);
        let lo = u64::from(self.u32(what)?);
        Ok(hi << 32 | lo)
    }

    /// A TPM2B: u16 size, then that many bytes.
    pub fn tpm2b(&mut self, what: &'static str) -> Result<&'a [u8], TpmError> {
        let n = self.u16(what)?;
        self.take(usize::from(n), what)
    }

    /// Read a u16 that must equal `want`.
    pub fn expect_u16(
        &mut self,
        field: &'static str,
        want: u16,
        expected: &'static str,
    ) -> Result<(), TpmError> {
        let got = self.u16(field)?;
        if got != want {
            return Err(TpmError::Unsupported {
                field,
                got: got.into(),
                expected,
            });
        }
        Ok(())
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// Succeeds only if every byte was read.
    pub fn finish(&self, what: &'static str) -> Result<(), TpmError> {
        match self.bytes.len() - self.pos {
            0 => Ok(()),
            extra => Err(TpmError::Trailing { what, extra }),
        }
    }
}

/// A parsed attestation key public area (TPMT_PUBLIC) within the accepted profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AkPublic {
    /// The object attributes.
    pub attributes: u32,
    key: p256::ecdsa::VerifyingKey,
}

impl AkPublic {
    /// Parse a TPMT_PUBLIC and check it is a restricted, TPM-bound ECDSA P-256 / SHA-256
    /// signing key. Trailing bytes are refused.
    pub fn parse(bytes: &[u8]) -> Result<Self, TpmError> {
        let (mut r, attributes) = public_header(bytes, TPM_ALG_ECC, "TPM_ALG_ECC")?;
        if attributes & AK_REQUIRED_ATTRIBUTES != AK_REQUIRED_ATTRIBUTES
            || attributes & attr::DECRYPT != 0
        {
            return Err(TpmError::Attributes {
                got: attributes,
                required: AK_REQUIRED_ATTRIBUTES,
            });
        }
        r.tpm2b("TPMT_PUBLIC.authPolicy")?;
        r.expect_u16("TPMS_ECC_PARMS.symmetric", TPM_ALG_NULL, "TPM_ALG_NULL")?;
        r.expect_u16("TPMS_ECC_PARMS.scheme", TPM_ALG_ECDSA, "TPM_ALG_ECDSA")?;
        r.expect_u16(
            "TPMS_ECC_PARMS.scheme.hashAlg",
            TPM_ALG_SHA256,
            "TPM_ALG_SHA256",
        )?;
        r.expect_u16(
            "TPMS_ECC_PARMS.curveID",
            TPM_ECC_NIST_P256,
            "TPM_ECC_NIST_P256",
        )?;
        r.expect_u16("TPMS_ECC_PARMS.kdf", TPM_ALG_NULL, "TPM_ALG_NULL")?;
        let x = r.tpm2b("TPMS_ECC_POINT.x")?;
        let y = r.tpm2b("TPMS_ECC_POINT.y")?;
        r.finish("TPMT_PUBLIC")?;
        if x.len() != 32 || y.len() != 32 {
            return Err(TpmError::BadPoint);
        }
        let mut sec1 = [0u8; 65];
        sec1[0] = 0x04;
        sec1[1..33].copy_from_slice(x);
        sec1[33..].copy_from_slice(y);
        let key =
            p256::ecdsa::VerifyingKey::from_sec1_bytes(&sec1).map_err(|_| TpmError::BadPoint)?;
        Ok(Self { attributes, key })
    }
}

/// The start of a TPMT_PUBLIC (at most [`MAX_TPM_STRUCT_BYTES`]) whose type must be `kind`
/// and name algorithm SHA-256: a reader past them, and the object attributes.
pub(crate) fn public_header<'a>(
    bytes: &'a [u8],
    kind: u16,
    kind_name: &'static str,
) -> Result<(Reader<'a>, u32), TpmError> {
    if bytes.len() > MAX_TPM_STRUCT_BYTES {
        return Err(TpmError::TooLarge {
            what: "TPMT_PUBLIC",
            len: bytes.len(),
            max: MAX_TPM_STRUCT_BYTES,
        });
    }
    let mut r = Reader::new(bytes);
    r.expect_u16("TPMT_PUBLIC.type", kind, kind_name)?;
    r.expect_u16("TPMT_PUBLIC.nameAlg", TPM_ALG_SHA256, "TPM_ALG_SHA256")?;
    let attributes = r.u32("TPMT_PUBLIC.objectAttributes")?;
    Ok((r, attributes))
}

/// One TPMS_PCR_SELECTION.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PcrSelection {
    /// Hash algorithm of the bank.
    pub hash: u16,
    /// Bitmap: PCR n is bit n % 8 of byte n / 8.
    pub bitmap: Vec<u8>,
}

/// A parsed TPMS_ATTEST of type quote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuoteInfo {
    /// Qualified name of the signing key.
    pub qualified_signer: Vec<u8>,
    /// The qualifying data (the verifier's nonce).
    pub extra_data: Vec<u8>,
    /// TPMS_CLOCK_INFO.clock (milliseconds the TPM has been powered).
    pub clock: u64,
    /// Times the TPM was reset.
    pub reset_count: u32,
    /// Times the TPM was restarted or resumed.
    pub restart_count: u32,
    /// Whether the clock value is known never to have gone backwards.
    pub safe: bool,
    /// TPM vendor firmware version.
    pub firmware_version: u64,
    /// The selected PCRs.
    pub pcr_select: Vec<PcrSelection>,
    /// Digest of the selected PCR values.
    pub pcr_digest: Vec<u8>,
}

/// Upper bound on selections in one TPML_PCR_SELECTION (one per hash bank).
const MAX_PCR_BANKS: u32 = 16;

impl QuoteInfo {
    /// Parse the TPMS_ATTEST bytes a TPM2_Quote returned (the contents of its TPM2B_ATTEST).
    pub fn parse(bytes: &[u8]) -> Result<Self, TpmError> {
        let mut r = Reader::new(bytes);
        let magic = r.u32("TPMS_ATTEST.magic")?;
        if magic != TPM_GENERATED_VALUE {
            return Err(TpmError::Unsupported {
                field: "TPMS_ATTEST.magic",
                got: magic.into(),
                expected: "TPM_GENERATED_VALUE (0xff544347)",
            });
        }
        r.expect_u16(
            "TPMS_ATTEST.type",
            TPM_ST_ATTEST_QUOTE,
            "TPM_ST_ATTEST_QUOTE (0x8018)",
        )?;
        let qualified_signer = r.tpm2b("TPMS_ATTEST.qualifiedSigner")?.to_vec();
        let extra_data = r.tpm2b("TPMS_ATTEST.extraData")?.to_vec();
        let clock = r.u64("TPMS_CLOCK_INFO.clock")?;
        let reset_count = r.u32("TPMS_CLOCK_INFO.resetCount")?;
        let restart_count = r.u32("TPMS_CLOCK_INFO.restartCount")?;
        let safe = r.u8("TPMS_CLOCK_INFO.safe")? != 0;
        let firmware_version = r.u64("TPMS_ATTEST.firmwareVersion")?;
        let pcr_select = parse_pcr_selection(&mut r)?;
        let pcr_digest = r.tpm2b("TPMS_QUOTE_INFO.pcrDigest")?.to_vec();
        r.finish("TPMS_ATTEST")?;
        Ok(Self {
            qualified_signer,
            extra_data,
            clock,
            reset_count,
            restart_count,
            safe,
            firmware_version,
            pcr_select,
            pcr_digest,
        })
    }
}

/// Read a TPML_PCR_SELECTION (at most 16 banks).
pub fn parse_pcr_selection(r: &mut Reader<'_>) -> Result<Vec<PcrSelection>, TpmError> {
    let count = r.u32("TPML_PCR_SELECTION.count")?;
    if count > MAX_PCR_BANKS {
        return Err(TpmError::Unsupported {
            field: "TPML_PCR_SELECTION.count",
            got: count.into(),
            expected: "at most 16",
        });
    }
    let mut out = Vec::new();
    for _ in 0..count {
        let hash = r.u16("TPMS_PCR_SELECTION.hash")?;
        let size = r.u8("TPMS_PCR_SELECTION.sizeofSelect")?;
        let bitmap = r
            .take(usize::from(size), "TPMS_PCR_SELECTION.pcrSelect")?
            .to_vec();
        out.push(PcrSelection { hash, bitmap });
    }
    Ok(out)
}

/// Parse a TPMT_SIGNATURE that must be ECDSA with SHA-256, into a P-256 signature.
/// r and s shorter than 32 bytes are left-padded (TPMs may drop leading zero bytes).
pub fn parse_signature(bytes: &[u8]) -> Result<p256::ecdsa::Signature, TpmError> {
    let mut r = Reader::new(bytes);
    r.expect_u16("TPMT_SIGNATURE.sigAlg", TPM_ALG_ECDSA, "TPM_ALG_ECDSA")?;
    r.expect_u16(
        "TPMS_SIGNATURE_ECDSA.hash",
        TPM_ALG_SHA256,
        "TPM_ALG_SHA256",
    )?;
    let sig_r = r.tpm2b("TPMS_SIGNATURE_ECDSA.signatureR")?;
    let sig_s = r.tpm2b("TPMS_SIGNATURE_ECDSA.signatureS")?;
    r.finish("TPMT_SIGNATURE")?;
    let pad = |v: &[u8]| -> Result<[u8; 32], TpmError> {
        if v.len() > 32 {
            return Err(TpmError::BadSignatureEncoding);
        }
        let mut out = [0u8; 32];
        out[32 - v.len()..].copy_from_slice(v);
        Ok(out)
    };
    let (sig_r, sig_s) = (pad(sig_r)?, pad(sig_s)?);
    p256::ecdsa::Signature::from_scalars(sig_r, sig_s).map_err(|_| TpmError::BadSignatureEncoding)
}

/// The evidence claim `tpm`: a quote as the TPM returned it, with the PCR values it covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuoteClaim {
    /// TPMS_ATTEST bytes (what the AK signed).
    #[serde(with = "hex_bytes")]
    pub attest: Vec<u8>,
    /// TPMT_SIGNATURE bytes.
    #[serde(with = "hex_bytes")]
    pub signature: Vec<u8>,
    /// SHA-256 bank values of PCRs 4, 7, 11 and 12, keyed by decimal index.
    #[serde(with = "hex_bytes::digest_map")]
    pub pcrs: BTreeMap<String, [u8; 32]>,
    /// The firmware's TCG event log (Linux's `binary_bios_measurements`), where the node has
    /// one: the node's say-so until a verifier replays PCR 4 from it and finds the quoted
    /// value (`crate::eventlog`). Absent from evidence made before it existed, so their
    /// signatures hold.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "hex_bytes::option"
    )]
    pub event_log: Option<Vec<u8>>,
}

/// The largest event log evidence may carry: the parser's own bound, so a log the evidence
/// accepts is one the verifier reads.
pub const MAX_EVENT_LOG_BYTES: usize = crate::eventlog::MAX_LOG_BYTES;

impl QuoteClaim {
    /// Size bounds and the exact PCR set, without cryptography.
    pub fn validate(&self) -> Result<(), TpmError> {
        let log_len = self.event_log.as_ref().map_or(0, Vec::len);
        for (what, len, max) in [
            ("attest", self.attest.len(), MAX_TPM_STRUCT_BYTES),
            ("signature", self.signature.len(), MAX_TPM_STRUCT_BYTES),
            ("event_log", log_len, MAX_EVENT_LOG_BYTES),
        ] {
            if len > max {
                return Err(TpmError::TooLarge { what, len, max });
            }
        }
        let want: Vec<String> = QUOTED_PCRS.iter().map(u8::to_string).collect();
        let mut got: Vec<&String> = self.pcrs.keys().collect();
        got.sort_by_key(|k| k.parse::<u16>().unwrap_or(u16::MAX));
        if got.len() != want.len() || got.iter().zip(&want).any(|(g, w)| *g != w) {
            return Err(TpmError::PcrSet {
                got: got.into_iter().cloned().collect(),
            });
        }
        Ok(())
    }

    /// The carried values in quote order (4, 7, 11, 12).
    fn ordered_values(&self) -> Result<[[u8; 32]; QUOTED_PCRS.len()], TpmError> {
        let mut out = [[0u8; 32]; QUOTED_PCRS.len()];
        for (slot, index) in out.iter_mut().zip(QUOTED_PCRS) {
            *slot = *self
                .pcrs
                .get(&index.to_string())
                .ok_or_else(|| TpmError::PcrSet {
                    got: self.pcrs.keys().cloned().collect(),
                })?;
        }
        Ok(out)
    }
}

/// The PCR values a verified quote vouches for, by PCR index.
pub type VerifiedPcrs = BTreeMap<u8, [u8; 32]>;

/// SHA-256(pcr4 || pcr7 || pcr11 || pcr12): the pcrDigest a TPM computes over [`QUOTED_PCRS`].
pub fn pcr_digest(values: &[[u8; 32]; QUOTED_PCRS.len()]) -> [u8; 32] {
    let mut h = Sha256::new();
    for v in values {
        h.update(v);
    }
    h.finalize().into()
}

/// Verify a quote: the AK's ECDSA P-256 signature over SHA-256 of the TPMS_ATTEST bytes,
/// the nonce as extraData, the selection exactly SHA-256 {4, 7, 11, 12}, and the PCR digest equal
/// to SHA-256 of the carried values. Returns the carried values, now vouched for by the TPM.
///
/// The signature is checked first, so every later error is about TPM-signed content.
pub fn verify_quote(
    ak: &AkPublic,
    claim: &QuoteClaim,
    expected_nonce: &[u8; 32],
) -> Result<VerifiedPcrs, TpmError> {
    claim.validate()?;
    let signature = parse_signature(&claim.signature)?;
    ak.key
        .verify(&claim.attest, &signature)
        .map_err(|_| TpmError::BadSignature)?;
    let info = QuoteInfo::parse(&claim.attest)?;
    if info.extra_data != expected_nonce {
        return Err(TpmError::NonceMismatch {
            got: info.extra_data.clone(),
            expected: *expected_nonce,
        });
    }
    let expected_selection = [PcrSelection {
        hash: TPM_ALG_SHA256,
        bitmap: QUOTED_PCR_BITMAP.to_vec(),
    }];
    if info.pcr_select != expected_selection {
        return Err(TpmError::PcrSelection {
            got: info.pcr_select.clone(),
        });
    }
    let values = claim.ordered_values()?;
    let digest = pcr_digest(&values);
    if info.pcr_digest != digest {
        return Err(TpmError::PcrDigestMismatch {
            got: digest,
            quoted: info.pcr_digest.clone(),
        });
    }
    Ok(QUOTED_PCRS.into_iter().zip(values).collect())
}

/// Marshal a TPMT_PUBLIC for an ECDSA P-256 / SHA-256 key with `attributes`, an empty
/// authPolicy and the public point (`x`, `y`). With empty `x` and `y` this is the AK template
/// TPM2_CreatePrimary takes: the same template in the same hierarchy always derives the same
/// key, so the AK needs no storage on the node.
pub fn marshal_ecc_public(attributes: u32, x: &[u8], y: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(24 + x.len() + y.len());
    for v in [TPM_ALG_ECC, TPM_ALG_SHA256] {
        out.extend_from_slice(&v.to_be_bytes());
    }
    out.extend_from_slice(&attributes.to_be_bytes());
    out.extend_from_slice(&0u16.to_be_bytes()); // authPolicy: empty
    for v in [
        TPM_ALG_NULL,
        TPM_ALG_ECDSA,
        TPM_ALG_SHA256,
        TPM_ECC_NIST_P256,
        TPM_ALG_NULL,
    ] {
        out.extend_from_slice(&v.to_be_bytes());
    }
    for coordinate in [x, y] {
        put_tpm2b(&mut out, coordinate);
    }
    out
}

/// The fixed AK template ([`AK_TEMPLATE_ATTRIBUTES`], empty unique).
pub fn ak_template() -> Vec<u8> {
    marshal_ecc_public(AK_TEMPLATE_ATTRIBUTES, &[], &[])
}

/// TPML_PCR_SELECTION of [`QUOTED_PCRS`] in the SHA-256 bank, as TPM2_Quote and
/// TPM2_PCR_Read take it.
pub fn quoted_pcr_selection() -> Vec<u8> {
    let mut out = Vec::with_capacity(10);
    out.extend_from_slice(&1u32.to_be_bytes());
    out.extend_from_slice(&TPM_ALG_SHA256.to_be_bytes());
    out.push(QUOTED_PCR_BITMAP.len() as u8);
    out.extend_from_slice(&QUOTED_PCR_BITMAP);
    out
}

/// Append a TPM2B (u16 big-endian size, then the bytes). Callers pass at most a few hundred
/// bytes; longer input is cut at u16::MAX rather than mis-sized.
pub fn put_tpm2b(out: &mut Vec<u8>, bytes: &[u8]) {
    let n = bytes.len().min(usize::from(u16::MAX));
    out.extend_from_slice(&(n as u16).to_be_bytes());
    out.extend_from_slice(&bytes[..n]);
}

pub mod credential;
pub mod ek;
pub mod kdf;
pub mod secret;

#[cfg(feature = "sim")]
pub mod sim;

#[cfg(test)]
mod tests;
