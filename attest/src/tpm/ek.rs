//! The TPM's endorsement key (EK) and its certificate: what ties an attestation key to a real
//! TPM, in the way Keylime's registrar does it.
//!
//! A TPM maker puts an EK certificate into the TPM's NV memory at manufacture, signed by the
//! maker's CA: it vouches that the RSA key in it is the endorsement key of one genuine TPM. An
//! enroller that checks the certificate's chain up to a maker's root it trusts, and that the
//! EK the TPM derives from the standard template is the certified key, knows it speaks of a
//! real TPM. It then asks that TPM, with TPM2_MakeCredential ([`super::credential`]), to
//! prove that the attestation key sits beside that EK: only the TPM holding the EK's private
//! half can release the challenge's secret, and only to an object of exactly the AK's name.
//!
//! This module accepts the EK of the TCG EK Credential Profile's template L-1 (RSA 2048,
//! AES-128-CFB, the PolicySecret(TPM_RH_ENDORSEMENT) policy), whose certificate every TPM 2.0
//! maker provisions at NV index `0x01c00002`; [`TpmIdentity`] is what a node hands the
//! enroller. Pure: the node's `tpm` crate reads the bytes, the enroller passes the roots and
//! the time.

use super::TPM_ALG_SHA256;
use super::{put_tpm2b, AkPublic, TpmError, TPM_ALG_NULL};
use crate::canonical::hex_bytes;
use der::asn1::UintRef;
use der::{Decode, Encode as _, Reader as _, SliceReader};
use rustls_pki_types::{CertificateDer, UnixTime};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// TPM_ALG_RSA.
pub const TPM_ALG_RSA: u16 = 0x0001;
/// TPM_ALG_AES.
pub const TPM_ALG_AES: u16 = 0x0006;
/// TPM_ALG_CFB.
pub const TPM_ALG_CFB: u16 = 0x0043;
/// The NV index of the RSA 2048 EK certificate (TCG EK Credential Profile 2.x, §2.2.1.4).
pub const EK_RSA_CERT_NV_INDEX: u32 = 0x01c0_0002;
/// The EK's object attributes in template L-1: fixedTPM, fixedParent, sensitiveDataOrigin,
/// adminWithPolicy, restricted, decrypt. No userWithAuth: the EK is used only under its policy.
pub const EK_ATTRIBUTES: u32 = 0x0003_00b2;
/// The EK's authPolicy in template L-1: PolicySecret(TPM_RH_ENDORSEMENT), so only whoever can
/// authorize the endorsement hierarchy may use the key.
pub const EK_AUTH_POLICY: [u8; 32] = [
    0x83, 0x71, 0x97, 0x67, 0x44, 0x84, 0xb3, 0xf8, 0x1a, 0x90, 0xcc, 0x8d, 0x46, 0xa5, 0xd7, 0x24,
    0xfd, 0x52, 0xd7, 0x6e, 0x06, 0x52, 0x0b, 0x64, 0xf2, 0xa1, 0xda, 0x1b, 0x33, 0x14, 0x69, 0xaa,
];
/// The EK's modulus size in bytes (RSA 2048).
pub const EK_MODULUS_BYTES: usize = 256;
/// The public exponent template L-1 gives (`exponent` 0 in the template means 2¹⁶ + 1).
const EK_EXPONENT: [u8; 3] = [0x01, 0x00, 0x01];
/// tcg-kp-EKCertificate (2.23.133.8.1), the extended key usage an EK certificate may carry, as
/// the DER value bytes of the OID.
const TCG_KP_EK_CERTIFICATE: &[u8] = &[0x67, 0x81, 0x05, 0x08, 0x01];
/// rsaEncryption (1.2.840.113549.1.1.1).
const RSA_ENCRYPTION: const_oid::ObjectIdentifier =
    const_oid::ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.1");
/// An EK certificate larger than this is refused before parsing (real ones are about 1 KiB;
/// NV indices hold at most a few KiB).
pub const MAX_EK_CERTIFICATE_BYTES: usize = 4096;

/// Why an endorsement key or its certificate is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EkError {
    /// The EK's public area is not template L-1's.
    #[error("the endorsement key is not the TCG template L-1 key (RSA 2048)")]
    Public(#[source] TpmError),
    /// The attestation key is outside the AK profile.
    #[error("the attestation key is outside the AK profile")]
    AttestationKey(#[source] TpmError),
    /// The certificate's bytes are not one DER certificate (followed, as NV memory may hold
    /// it, by zero padding at most).
    #[error("the EK certificate is not a DER certificate: {reason}")]
    CertificateEncoding {
        /// What is wrong.
        reason: String,
    },
    /// No trusted root was given.
    #[error("no TPM maker root certificate to check the EK certificate against")]
    NoRoots,
    /// A root or intermediate certificate given by the enroller does not parse.
    #[error("CA certificate {position} is not usable as a trust anchor")]
    BadAnchor {
        /// Its position among the roots given.
        position: usize,
        /// webpki's reason.
        #[source]
        source: webpki::Error,
    },
    /// The certificate does not chain to a trusted root, is outside its validity, or is not an
    /// EK certificate (webpki's reason says which).
    #[error("the EK certificate does not verify up to a trusted TPM maker root")]
    Chain(#[source] webpki::Error),
    /// The certificate certifies no RSA key, or one this module cannot read.
    #[error("the EK certificate's key is not an RSA key")]
    CertificateKey,
    /// The certified key is not the EK the TPM derived: the certificate belongs to another TPM.
    #[error(
        "the EK certificate certifies modulus SHA-256 {}, the TPM's EK has {}",
        hex::encode(certified),
        hex::encode(tpm)
    )]
    KeyMismatch {
        /// SHA-256 of the certified modulus.
        certified: [u8; 32],
        /// SHA-256 of the TPM's EK modulus.
        tpm: [u8; 32],
    },
}

/// A parsed endorsement key (template L-1: RSA 2048) and its public area.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EkPublic {
    public_area: Vec<u8>,
    modulus: Vec<u8>,
}

impl EkPublic {
    /// Parse a TPMT_PUBLIC and check it is exactly template L-1's key. Trailing bytes are
    /// refused.
    pub fn parse(bytes: &[u8]) -> Result<Self, EkError> {
        parse_l1(bytes)
            .map(|modulus| Self {
                public_area: bytes.to_vec(),
                modulus,
            })
            .map_err(EkError::Public)
    }

    /// The TPMT_PUBLIC bytes.
    pub fn public_area(&self) -> &[u8] {
        &self.public_area
    }

    /// The RSA modulus, big-endian, [`EK_MODULUS_BYTES`] long.
    pub fn modulus(&self) -> &[u8] {
        &self.modulus
    }
}

fn parse_l1(bytes: &[u8]) -> Result<Vec<u8>, TpmError> {
    let (mut r, attributes) = super::public_header(bytes, TPM_ALG_RSA, "TPM_ALG_RSA")?;
    if attributes != EK_ATTRIBUTES {
        return Err(TpmError::Unsupported {
            field: "TPMT_PUBLIC.objectAttributes",
            got: attributes.into(),
            expected: "0x000300b2 (template L-1)",
        });
    }
    if r.tpm2b("TPMT_PUBLIC.authPolicy")? != EK_AUTH_POLICY {
        return Err(TpmError::Unsupported {
            field: "TPMT_PUBLIC.authPolicy",
            got: 0,
            expected: "PolicySecret(TPM_RH_ENDORSEMENT) (template L-1)",
        });
    }
    r.expect_u16("TPMS_RSA_PARMS.symmetric", TPM_ALG_AES, "TPM_ALG_AES")?;
    r.expect_u16("TPMS_RSA_PARMS.symmetric.keyBits", 128, "128")?;
    r.expect_u16("TPMS_RSA_PARMS.symmetric.mode", TPM_ALG_CFB, "TPM_ALG_CFB")?;
    r.expect_u16("TPMS_RSA_PARMS.scheme", TPM_ALG_NULL, "TPM_ALG_NULL")?;
    r.expect_u16("TPMS_RSA_PARMS.keyBits", 2048, "2048")?;
    let exponent = r.u32("TPMS_RSA_PARMS.exponent")?;
    if exponent != 0 && exponent != 65537 {
        return Err(TpmError::Unsupported {
            field: "TPMS_RSA_PARMS.exponent",
            got: exponent.into(),
            expected: "0 (65537)",
        });
    }
    let modulus = r.tpm2b("TPM2B_PUBLIC_KEY_RSA")?;
    r.finish("TPMT_PUBLIC")?;
    if modulus.len() != EK_MODULUS_BYTES || modulus[0] & 0x80 == 0 {
        return Err(TpmError::Unsupported {
            field: "TPM2B_PUBLIC_KEY_RSA.size",
            got: modulus.len() as u64,
            expected: "256 bytes, top bit set",
        });
    }
    Ok(modulus.to_vec())
}

/// Template L-1, as TPM2_CreatePrimary takes it in the endorsement hierarchy: every TPM
/// derives the same EK from it for as long as its endorsement seed lasts, and that is the key
/// its maker certified.
pub fn ek_template() -> Vec<u8> {
    marshal_ek(&[0; EK_MODULUS_BYTES])
}

/// The L-1 public area with `unique` as the modulus (zeros in the template).
pub fn marshal_ek(unique: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + unique.len());
    for v in [TPM_ALG_RSA, TPM_ALG_SHA256] {
        out.extend_from_slice(&v.to_be_bytes());
    }
    out.extend_from_slice(&EK_ATTRIBUTES.to_be_bytes());
    put_tpm2b(&mut out, &EK_AUTH_POLICY);
    for v in [TPM_ALG_AES, 128, TPM_ALG_CFB, TPM_ALG_NULL, 2048] {
        out.extend_from_slice(&v.to_be_bytes());
    }
    out.extend_from_slice(&0u32.to_be_bytes()); // exponent: the default, 65537
    put_tpm2b(&mut out, unique);
    out
}

/// The certificate's DER bytes in an NV index's contents: NV memory is sized by the maker,
/// and some pad the certificate with zeros. Anything else after it is refused.
pub fn certificate_in_nv(contents: &[u8]) -> Result<&[u8], EkError> {
    let encoding = |reason: String| EkError::CertificateEncoding { reason };
    let mut reader = SliceReader::new(contents).map_err(|e| encoding(e.to_string()))?;
    let header = der::Header::decode(&mut reader).map_err(|e| encoding(e.to_string()))?;
    let total = header
        .encoded_len()
        .and_then(|h| h + header.length)
        .map_err(|e| encoding(e.to_string()))?;
    let total = usize::try_from(total).map_err(|e| encoding(e.to_string()))?;
    let (der, padding) = contents
        .split_at_checked(total)
        .ok_or_else(|| encoding(format!("declares {total} bytes, {} held", contents.len())))?;
    if padding.iter().any(|&b| b != 0) {
        return Err(encoding(format!(
            "{} bytes after the certificate are not zero padding",
            padding.len()
        )));
    }
    Ok(der)
}

/// Checks `certificate` (DER) as the certificate of `ek`: it chains through `intermediates`
/// to one of `roots` (DER) at `now` (Unix seconds), it is fit for an EK (its extended key
/// usage, if it has one, includes tcg-kp-EKCertificate), and it certifies exactly `ek`'s
/// modulus with exponent 65537.
pub fn verify_ek_certificate(
    certificate: &[u8],
    ek: &EkPublic,
    roots: &[Vec<u8>],
    intermediates: &[Vec<u8>],
    now: u64,
) -> Result<(), EkError> {
    if certificate.len() > MAX_EK_CERTIFICATE_BYTES {
        return Err(EkError::CertificateEncoding {
            reason: format!(
                "{} bytes, more than {MAX_EK_CERTIFICATE_BYTES}",
                certificate.len()
            ),
        });
    }
    verify_chain(certificate, roots, intermediates, now)?;
    let certified = certified_modulus(certificate)?;
    if certified != ek.modulus() {
        return Err(EkError::KeyMismatch {
            certified: Sha256::digest(&certified).into(),
            tpm: Sha256::digest(ek.modulus()).into(),
        });
    }
    Ok(())
}

fn verify_chain(
    certificate: &[u8],
    roots: &[Vec<u8>],
    intermediates: &[Vec<u8>],
    now: u64,
) -> Result<(), EkError> {
    if roots.is_empty() {
        return Err(EkError::NoRoots);
    }
    let root_ders: Vec<CertificateDer<'_>> = roots
        .iter()
        .map(|r| CertificateDer::from(r.as_slice()))
        .collect();
    let anchors = root_ders
        .iter()
        .enumerate()
        .map(|(position, der)| {
            webpki::anchor_from_trusted_cert(der)
                .map_err(|source| EkError::BadAnchor { position, source })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let intermediates: Vec<CertificateDer<'_>> = intermediates
        .iter()
        .map(|c| CertificateDer::from(c.as_slice()))
        .collect();
    let der = CertificateDer::from(certificate);
    let leaf = webpki::EndEntityCert::try_from(&der).map_err(EkError::Chain)?;
    leaf.verify_for_usage(
        webpki::ALL_VERIFICATION_ALGS,
        &anchors,
        &intermediates,
        UnixTime::since_unix_epoch(std::time::Duration::from_secs(now)),
        webpki::KeyUsage::required_if_present(TCG_KP_EK_CERTIFICATE),
        None,
        None,
    )
    .map(drop)
    .map_err(EkError::Chain)
}

/// The RSA modulus the certificate certifies (without a leading zero), its exponent checked.
fn certified_modulus(certificate: &[u8]) -> Result<Vec<u8>, EkError> {
    let cert = x509_cert::Certificate::from_der(certificate).map_err(|e| {
        EkError::CertificateEncoding {
            reason: e.to_string(),
        }
    })?;
    let spki = &cert.tbs_certificate.subject_public_key_info;
    if spki.algorithm.oid != RSA_ENCRYPTION {
        return Err(EkError::CertificateKey);
    }
    let key = spki
        .subject_public_key
        .as_bytes()
        .ok_or(EkError::CertificateKey)?;
    let (modulus, exponent) = rsa_public_key(key).map_err(|_| EkError::CertificateKey)?;
    if exponent != EK_EXPONENT {
        return Err(EkError::CertificateKey);
    }
    Ok(modulus)
}

/// RFC 8017's RSAPublicKey: SEQUENCE { modulus INTEGER, publicExponent INTEGER }.
fn rsa_public_key(der: &[u8]) -> der::Result<(Vec<u8>, Vec<u8>)> {
    let mut reader = SliceReader::new(der)?;
    let parts = reader.sequence(|r| {
        let n = UintRef::decode(r)?;
        let e = UintRef::decode(r)?;
        Ok((n.as_bytes().to_vec(), e.as_bytes().to_vec()))
    })?;
    reader.finish(parts)
}

/// The certificates in a CA file: PEM (one or more `CERTIFICATE` blocks), or one DER
/// certificate, as TPM makers publish theirs. The bytes are taken as they are, not re-encoded.
pub fn certificates_from_file(bytes: &[u8]) -> Result<Vec<Vec<u8>>, EkError> {
    use rustls_pki_types::pem::PemObject as _;
    let is_pem = bytes.trim_ascii_start().starts_with(b"-----BEGIN");
    if !is_pem {
        let der = certificate_in_nv(bytes)?;
        return Ok(vec![der.to_vec()]);
    }
    let certs = CertificateDer::pem_slice_iter(bytes)
        .map(|c| c.map(|c| c.to_vec()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| EkError::CertificateEncoding {
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(EkError::CertificateEncoding {
            reason: "no CERTIFICATE block in the PEM file".into(),
        });
    }
    Ok(certs)
}

/// What a node hands its enroller about its TPM (`hostd tpm-identity`): the attestation key,
/// the endorsement key, and the EK certificate the TPM's maker put into its NV memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TpmIdentity {
    /// The AK's TPMT_PUBLIC (the fixed AK template's key).
    #[serde(with = "hex_bytes")]
    pub ak_public: Vec<u8>,
    /// The EK's TPMT_PUBLIC (template L-1).
    #[serde(with = "hex_bytes")]
    pub ek_public: Vec<u8>,
    /// The EK certificate, DER.
    #[serde(with = "hex_bytes")]
    pub ek_certificate: Vec<u8>,
}

/// A [`TpmIdentity`] whose parts were checked: the AK is in the profile, the EK is template
/// L-1's, and its certificate verifies to a trusted maker root. That the AK lives in the same
/// TPM is what the credential challenge ([`super::credential`]) is still to show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedIdentity {
    /// The attestation key.
    pub ak: AkPublic,
    /// The AK's TPMT_PUBLIC.
    pub ak_public: Vec<u8>,
    /// The endorsement key.
    pub ek: EkPublic,
    /// SHA-256 of the EK certificate (DER), which names the TPM in the enroller's records.
    pub ek_certificate_sha256: [u8; 32],
}

impl TpmIdentity {
    /// Checks every part against the profiles and the EK certificate against `roots` and
    /// `intermediates` (DER) at `now` (Unix seconds).
    pub fn check(
        &self,
        roots: &[Vec<u8>],
        intermediates: &[Vec<u8>],
        now: u64,
    ) -> Result<CheckedIdentity, EkError> {
        let ak = AkPublic::parse(&self.ak_public).map_err(EkError::AttestationKey)?;
        let ek = EkPublic::parse(&self.ek_public)?;
        verify_ek_certificate(&self.ek_certificate, &ek, roots, intermediates, now)?;
        Ok(CheckedIdentity {
            ak,
            ak_public: self.ak_public.clone(),
            ek,
            ek_certificate_sha256: Sha256::digest(&self.ek_certificate).into(),
        })
    }
}

#[cfg(test)]
mod tests;
