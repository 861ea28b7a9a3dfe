//! NVIDIA GPU attestation report: an SPDM 1.1 `GET_MEASUREMENTS` request followed by its
//! `MEASUREMENTS` response (DMTF DSP0274), as returned by NVML for Hopper GPUs.
//!
//! Layout (all integers little-endian):
//!
//! ```text
//! request  (37 B): version(1)=0x11 code(1)=0xE0 param1(1) param2(1) nonce(32) slot_id(1)
//!                  param1 bit 0 = signature requested (required here); param2 = 0xFF (all)
//! response       : version(1) code(1)=0x60 param1(1) param2(1) number_of_blocks(1)
//!                  record_length(3) record(record_length) responder_nonce(32)
//!                  opaque_length(2) opaque(opaque_length) signature(96)
//! record         : number_of_blocks × { index(1) spec(1)=0x01 size(2)
//!                                        value_type(1) value_size(2) value(value_size) }
//!                  with size == 3 + value_size (DMTF measurement specification)
//! opaque (NVIDIA): TLVs { type(2) length(2) value(length) } filling opaque_length exactly
//! signature      : ECDSA P-384 raw r||s over SHA-384(request || response-without-signature)
//! ```

use p384::ecdsa::signature::Verifier as _;
use p384::ecdsa::{Signature, VerifyingKey};

/// SPDM request code `GET_MEASUREMENTS`.
pub const GET_MEASUREMENTS: u8 = 0xE0;
/// SPDM response code `MEASUREMENTS`.
pub const MEASUREMENTS: u8 = 0x60;
/// Length of an SPDM 1.1 signed `GET_MEASUREMENTS` request.
pub const REQUEST_LEN: usize = 37;
/// Length of a raw ECDSA P-384 signature (r || s).
pub const SIGNATURE_LEN: usize = 96;
/// DMTF measurement specification identifier.
pub const DMTF_MEASUREMENT_SPEC: u8 = 0x01;

/// NVIDIA opaque-data field types, as found in Hopper reports (nvtrust's numbering).
pub mod opaque_type {
    /// Certificate issuer name.
    pub const CERT_ISSUER_NAME: u16 = 1;
    /// Certificate authority key identifier.
    pub const CERT_AUTHORITY_KEY_ID: u16 = 2;
    /// Driver version, NUL-terminated ASCII (`550.90.07`).
    pub const DRIVER_VERSION: u16 = 3;
    /// GPU information.
    pub const GPU_INFO: u16 = 4;
    /// SKU.
    pub const SKU: u16 = 5;
    /// VBIOS version, 8 bytes (see [`super::OpaqueData::vbios_version`]).
    pub const VBIOS_VERSION: u16 = 6;
    /// Manufacturer id.
    pub const MANUFACTURER_ID: u16 = 7;
    /// Tamper detection.
    pub const TAMPER_DETECTION: u16 = 8;
    /// SMC.
    pub const SMC: u16 = 9;
    /// VPR.
    pub const VPR: u16 = 10;
    /// NVDEC0 status.
    pub const NVDEC0_STATUS: u16 = 11;
    /// Measurement counters (one u32 per measurement index).
    pub const MSRSCNT: u16 = 12;
    /// CPR info.
    pub const CPRINFO: u16 = 13;
    /// Board id.
    pub const BOARD_ID: u16 = 14;
    /// Chip SKU, NUL-padded ASCII (`882`).
    pub const CHIP_SKU: u16 = 15;
    /// Chip SKU modifier.
    pub const CHIP_SKU_MOD: u16 = 16;
    /// Project, NUL-terminated ASCII (`1010`).
    pub const PROJECT: u16 = 17;
    /// Project SKU, NUL-terminated ASCII (`0200`).
    pub const PROJECT_SKU: u16 = 18;
    /// Project SKU modifier.
    pub const PROJECT_SKU_MOD: u16 = 19;
    /// FWID: 48-byte SHA-384, must equal the FWID in the leaf certificate.
    pub const FWID: u16 = 20;
    /// Protected PCIe status.
    pub const PROTECTED_PCIE_STATUS: u16 = 21;
    /// NVSwitch PDI.
    pub const SWITCH_PDI: u16 = 22;
    /// Floorswept ports.
    pub const FLOORSWEPT_PORTS: u16 = 23;
    /// Position id.
    pub const POSITION_ID: u16 = 24;
    /// Lock switch status.
    pub const LOCK_SWITCH_STATUS: u16 = 25;
    /// GPU link connection.
    pub const GPU_LINK_CONN: u16 = 32;
    /// System enable status.
    pub const SYS_ENABLE_STATUS: u16 = 33;
    /// Opaque data version.
    pub const OPAQUE_DATA_VERSION: u16 = 34;
    /// Chip info.
    pub const CHIP_INFO: u16 = 35;
    /// Feature flag.
    pub const FEATURE_FLAG: u16 = 255;
}

/// Why a report could not be parsed or verified.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SpdmError {
    /// The input ends before a field that must be there.
    #[error("report truncated while reading {0}")]
    Truncated(&'static str),
    /// The text form is not hexadecimal.
    #[error("report text is not hexadecimal")]
    NotHex,
    /// Bytes remain after the signature.
    #[error("{0} trailing bytes after the signature")]
    TrailingBytes(usize),
    /// A version, code or parameter is not what a signed GET_MEASUREMENTS exchange carries.
    #[error("unexpected {field}: {value:#04x}")]
    Unexpected {
        /// Which field.
        field: &'static str,
        /// The value found.
        value: u32,
    },
    /// A measurement block is malformed.
    #[error("measurement block {index}: {reason}")]
    BadBlock {
        /// Block index byte.
        index: u8,
        /// What is wrong.
        reason: &'static str,
    },
    /// The opaque data TLVs do not fill the opaque area exactly.
    #[error("opaque data malformed at offset {0}")]
    BadOpaque(usize),
    /// The ECDSA signature bytes are not a valid P-384 signature.
    #[error("signature is not a valid P-384 signature encoding")]
    BadSignatureEncoding,
    /// The signature does not verify with the given key.
    #[error("report signature does not verify with the attestation certificate key")]
    SignatureMismatch,
}

/// One DMTF measurement block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeasurementBlock {
    /// Measurement index (1-based in Hopper reports).
    pub index: u8,
    /// DMTFSpecMeasurementValueType (bit 7: raw bit stream instead of digest).
    pub value_type: u8,
    /// The measurement value (a 48-byte SHA-384 digest on Hopper).
    pub value: Vec<u8>,
}

/// The opaque-data TLVs, in report order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OpaqueData {
    /// `(type, value)` pairs.
    pub fields: Vec<(u16, Vec<u8>)>,
}

impl OpaqueData {
    /// First value of a given type.
    pub fn get(&self, ty: u16) -> Option<&[u8]> {
        self.fields
            .iter()
            .find(|(t, _)| *t == ty)
            .map(|(_, v)| v.as_slice())
    }

    /// A NUL-terminated/padded ASCII field as a string (`None` if absent or not ASCII).
    pub fn ascii(&self, ty: u16) -> Option<String> {
        let v = self.get(ty)?;
        let end = v.iter().position(|&b| b == 0).unwrap_or(v.len());
        let s = &v[..end];
        if s.iter().all(|b| b.is_ascii_graphic() || *b == b' ') {
            Some(String::from_utf8_lossy(s).into_owned())
        } else {
            None
        }
    }

    /// Driver version string (`550.90.07`).
    pub fn driver_version(&self) -> Option<String> {
        self.ascii(opaque_type::DRIVER_VERSION)
    }

    /// VBIOS version in NVIDIA's dotted form (`96.00.9F.00.01`).
    ///
    /// The 8-byte field holds two little-endian u32 words: the low word printed as four
    /// dotted upper-case hex byte pairs (most significant first) followed by the low byte of
    /// the high word (inferred from the sample report and NVIDIA's RIM naming, e.g. RIM
    /// `…_96005E0001` with colloquial version `96.00.5E.00.01`).
    pub fn vbios_version(&self) -> Option<String> {
        let v = self.get(opaque_type::VBIOS_VERSION)?;
        if v.len() != 8 {
            return None;
        }
        let lo = u32::from_le_bytes([v[0], v[1], v[2], v[3]]);
        let hi = u32::from_le_bytes([v[4], v[5], v[6], v[7]]);
        let b = lo.to_be_bytes();
        Some(format!(
            "{:02X}.{:02X}.{:02X}.{:02X}.{:02X}",
            b[0],
            b[1],
            b[2],
            b[3],
            hi & 0xFF
        ))
    }

    /// FWID (48-byte SHA-384).
    pub fn fwid(&self) -> Option<&[u8]> {
        self.get(opaque_type::FWID)
    }
}

/// A parsed report. Keeps the raw bytes so the signature is checked over exactly what was
/// received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpdmReport {
    raw: Vec<u8>,
    /// SPDM version of the request (0x11 = 1.1).
    pub request_version: u8,
    /// Request param2: which measurement indices were requested (0xFF = all).
    pub requested_index: u8,
    /// The requester's nonce (the derived GPU nonce).
    pub request_nonce: [u8; 32],
    /// Slot id of the certificate chain to sign with.
    pub slot_id: u8,
    /// SPDM version of the response.
    pub response_version: u8,
    /// The measurement blocks.
    pub blocks: Vec<MeasurementBlock>,
    /// The responder's own nonce.
    pub responder_nonce: [u8; 32],
    /// NVIDIA opaque data.
    pub opaque: OpaqueData,
    /// Raw r||s signature.
    pub signature: [u8; SIGNATURE_LEN],
}

struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], SpdmError> {
        let end = self.pos.checked_add(n).ok_or(SpdmError::Truncated(what))?;
        let s = self
            .data
            .get(self.pos..end)
            .ok_or(SpdmError::Truncated(what))?;
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self, what: &'static str) -> Result<u8, SpdmError> {
        Ok(self.take(1, what)?[0])
    }
    fn u16(&mut self, what: &'static str) -> Result<u16, SpdmError> {
        let b = self.take(2, what)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn arr32(&mut self, what: &'static str) -> Result<[u8; 32], SpdmError> {
        let mut a = [0u8; 32];
        a.copy_from_slice(self.take(32, what)?);
        Ok(a)
    }
}

fn check_version(field: &'static str, v: u8) -> Result<(), SpdmError> {
    // SPDM 1.1 and 1.2 share this message layout.
    if v == 0x11 || v == 0x12 {
        Ok(())
    } else {
        Err(SpdmError::Unexpected {
            field,
            value: v.into(),
        })
    }
}

impl SpdmReport {
    /// Parse `request || response` bytes.
    pub fn parse(bytes: &[u8]) -> Result<Self, SpdmError> {
        let mut c = Cursor {
            data: bytes,
            pos: 0,
        };
        let request_version = c.u8("request version")?;
        check_version("request version", request_version)?;
        let code = c.u8("request code")?;
        if code != GET_MEASUREMENTS {
            return Err(SpdmError::Unexpected {
                field: "request code",
                value: code.into(),
            });
        }
        let param1 = c.u8("request param1")?;
        if param1 & 1 == 0 {
            return Err(SpdmError::Unexpected {
                field: "request param1 (signature not requested)",
                value: param1.into(),
            });
        }
        let requested_index = c.u8("request param2")?;
        let request_nonce = c.arr32("request nonce")?;
        let slot_id = c.u8("request slot id")?;

        let response_version = c.u8("response version")?;
        check_version("response version", response_version)?;
        if response_version != request_version {
            return Err(SpdmError::Unexpected {
                field: "response version (differs from request)",
                value: response_version.into(),
            });
        }
        let rcode = c.u8("response code")?;
        if rcode != MEASUREMENTS {
            return Err(SpdmError::Unexpected {
                field: "response code",
                value: rcode.into(),
            });
        }
        let _param1 = c.u8("response param1")?;
        let rparam2 = c.u8("response param2")?;
        if rparam2 & 0x0F != slot_id & 0x0F {
            return Err(SpdmError::Unexpected {
                field: "response slot id (differs from request)",
                value: rparam2.into(),
            });
        }
        let n_blocks = c.u8("number of blocks")?;
        let len_bytes = c.take(3, "record length")?;
        let record_len = u32::from_le_bytes([len_bytes[0], len_bytes[1], len_bytes[2], 0]);
        let record = c.take(record_len as usize, "measurement record")?;
        let blocks = parse_blocks(record, n_blocks)?;
        let responder_nonce = c.arr32("responder nonce")?;
        let opaque_len = c.u16("opaque length")?;
        let opaque_start = c.pos;
        let opaque_bytes = c.take(opaque_len.into(), "opaque data")?;
        let opaque = parse_opaque(opaque_bytes, opaque_start)?;
        let sig = c.take(SIGNATURE_LEN, "signature")?;
        let mut signature = [0u8; SIGNATURE_LEN];
        signature.copy_from_slice(sig);
        if c.pos != bytes.len() {
            return Err(SpdmError::TrailingBytes(bytes.len() - c.pos));
        }
        Ok(Self {
            raw: bytes.to_vec(),
            request_version,
            requested_index,
            request_nonce,
            slot_id,
            response_version,
            blocks,
            responder_nonce,
            opaque,
            signature,
        })
    }

    /// Parse the hex text form NVIDIA tools write (whitespace ignored).
    pub fn parse_hex(text: &str) -> Result<Self, SpdmError> {
        let cleaned: String = text.chars().filter(|c| !c.is_whitespace()).collect();
        let bytes = hex::decode(cleaned).map_err(|_| SpdmError::NotHex)?;
        Self::parse(&bytes)
    }

    /// The raw report bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.raw
    }

    /// The bytes the signature covers: request || response-without-signature.
    pub fn signed_bytes(&self) -> &[u8] {
        &self.raw[..self.raw.len() - SIGNATURE_LEN]
    }

    /// Measurement block with a given index.
    pub fn block(&self, index: u8) -> Option<&MeasurementBlock> {
        self.blocks.iter().find(|b| b.index == index)
    }

    /// Verify the ECDSA P-384 / SHA-384 signature with the attestation (leaf) key.
    pub fn verify_signature(&self, key: &VerifyingKey) -> Result<(), SpdmError> {
        let sig =
            Signature::from_slice(&self.signature).map_err(|_| SpdmError::BadSignatureEncoding)?;
        key.verify(self.signed_bytes(), &sig)
            .map_err(|_| SpdmError::SignatureMismatch)
    }
}

fn parse_blocks(record: &[u8], n_blocks: u8) -> Result<Vec<MeasurementBlock>, SpdmError> {
    let mut c = Cursor {
        data: record,
        pos: 0,
    };
    let mut blocks = Vec::with_capacity(n_blocks.into());
    for _ in 0..n_blocks {
        let index = c.u8("block index")?;
        let spec = c.u8("block measurement specification")?;
        if spec != DMTF_MEASUREMENT_SPEC {
            return Err(SpdmError::BadBlock {
                index,
                reason: "measurement specification is not DMTF",
            });
        }
        let size = c.u16("block size")?;
        let body = c.take(size.into(), "block body")?;
        if body.len() < 3 {
            return Err(SpdmError::BadBlock {
                index,
                reason: "shorter than the DMTF header",
            });
        }
        let value_type = body[0];
        let value_size = u16::from_le_bytes([body[1], body[2]]) as usize;
        if value_size + 3 != body.len() {
            return Err(SpdmError::BadBlock {
                index,
                reason: "value size disagrees with block size",
            });
        }
        if blocks.iter().any(|b: &MeasurementBlock| b.index == index) {
            return Err(SpdmError::BadBlock {
                index,
                reason: "duplicate index",
            });
        }
        blocks.push(MeasurementBlock {
            index,
            value_type,
            value: body[3..].to_vec(),
        });
    }
    if c.pos != record.len() {
        return Err(SpdmError::BadBlock {
            index: 0,
            reason: "record length exceeds the blocks",
        });
    }
    Ok(blocks)
}

fn parse_opaque(data: &[u8], base: usize) -> Result<OpaqueData, SpdmError> {
    let mut c = Cursor { data, pos: 0 };
    let mut fields = Vec::new();
    while c.pos < data.len() {
        let at = base + c.pos;
        let ty = c.u16("opaque type").map_err(|_| SpdmError::BadOpaque(at))?;
        let len = c
            .u16("opaque length")
            .map_err(|_| SpdmError::BadOpaque(at))?;
        let v = c
            .take(len.into(), "opaque value")
            .map_err(|_| SpdmError::BadOpaque(at))?;
        fields.push((ty, v.to_vec()));
    }
    Ok(OpaqueData { fields })
}
