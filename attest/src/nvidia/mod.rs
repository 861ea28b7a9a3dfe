//! NVIDIA GPU attestation: the SPDM measurement report ([`spdm`]), the device certificate
//! chain ([`chain`]), and — with the `sim` feature only — a builder of report-shaped test data
//! for simulators (`sim`).
//!
//! [`verify_report`] ties them together in the order a relying party must apply them: the
//! chain up to a configured NVIDIA root, the report signature with the leaf key, the leaf's
//! FWID against the report's FWID, and the requester nonce against the one the verifier
//! derived for this GPU.

pub mod chain;
// Signs with throw-away keys: test and simulator data only, so it is not part of a production
// build unless something (fake-nvml, attest's own tests) asks for it.
#[cfg(feature = "sim")]
pub mod sim;
pub mod spdm;

use chain::{CertChain, ChainError, VerifiedChain};
use spdm::{SpdmError, SpdmReport};

/// Why a GPU report is not acceptable.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GpuReportError {
    /// The report bytes do not parse.
    #[error("GPU report malformed: {0}")]
    Malformed(SpdmError),
    /// The certificate chain does not verify.
    #[error("GPU certificate chain")]
    Chain(#[from] ChainError),
    /// The report signature does not verify.
    #[error("GPU report signature: {0}")]
    Signature(SpdmError),
    /// The report has no FWID opaque field, or it differs from the leaf certificate's.
    #[error("GPU report FWID does not match the attestation certificate")]
    FwidMismatch,
    /// The requester nonce is not the expected one.
    #[error("GPU report nonce {found} is not the expected {expected}")]
    NonceMismatch {
        /// Expected nonce, hex.
        expected: String,
        /// Nonce in the report, hex.
        found: String,
    },
}

/// What names one physical GPU in a verified chain, so that one GPU cannot pass as several in
/// one piece of evidence (its reports over several derived nonces would each verify). Keys are
/// SEC1 compressed points.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum DeviceIdentity {
    /// The device certificate's key ([`VerifiedChain::device_key`]): the chip's, for life.
    DeviceKey(Vec<u8>),
    /// The attestation (leaf) key that signed the report: no two chips share one.
    AttestationKey(Vec<u8>),
}

impl DeviceIdentity {
    /// Every identity the chain names: its device key when it has one (a chip whose firmware
    /// changed between two reports keeps it), then its attestation key.
    pub fn of(chain: &VerifiedChain) -> Vec<Self> {
        let sec1 = |k: &p384::ecdsa::VerifyingKey| k.to_sec1_point(true).as_bytes().to_vec();
        let device = chain.device_key.as_ref().map(|k| Self::DeviceKey(sec1(k)));
        let attestation = Self::AttestationKey(sec1(&chain.leaf_key));
        device.into_iter().chain([attestation]).collect()
    }
}

impl std::fmt::Display for DeviceIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::DeviceKey(k) => write!(f, "device certificate key {}", hex::encode(k)),
            Self::AttestationKey(k) => write!(f, "attestation key {}", hex::encode(k)),
        }
    }
}

/// Verify a report against its chain, roots, time and expected nonce; returns the parsed
/// report on success.
pub fn verify_report(
    report: &[u8],
    chain_ders: &[Vec<u8>],
    roots: &[Vec<u8>],
    now: u64,
    expected_nonce: &[u8; 32],
) -> Result<SpdmReport, GpuReportError> {
    let parsed = SpdmReport::parse(report).map_err(GpuReportError::Malformed)?;
    let verified = CertChain::from_der_list(chain_ders)?.verify(roots, now)?;
    verify_report_with_chain(parsed, &verified, expected_nonce)
}

/// The report checks after the chain: signature with the leaf key, FWID, nonce. For callers
/// that verified (or remember verifying) the chain themselves.
pub fn verify_report_with_chain(
    report: SpdmReport,
    verified: &VerifiedChain,
    expected_nonce: &[u8; 32],
) -> Result<SpdmReport, GpuReportError> {
    report
        .verify_signature(&verified.leaf_key)
        .map_err(GpuReportError::Signature)?;
    match (verified.leaf_fwid.as_deref(), report.opaque.fwid()) {
        (Some(a), Some(b)) if a == b => {}
        _ => return Err(GpuReportError::FwidMismatch),
    }
    if &report.request_nonce != expected_nonce {
        return Err(GpuReportError::NonceMismatch {
            expected: hex::encode(expected_nonce),
            found: hex::encode(report.request_nonce),
        });
    }
    Ok(report)
}
