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
//! This module accepts the EKs of the TCG EK Credential Profile's templates L-1 (RSA 2048),
//! whose certificate every TPM 2.0 maker provisions at NV index `0x01c00002`, and L-2 (ECC
//! NIST P-256, at `0x01c0000a`, which many also provision): both with AES-128-CFB and the
//! PolicySecret(TPM_RH_ENDORSEMENT) policy ([`EkKind`]). [`TpmIdentity`] is what a node hands
//! the enroller. Pure: the node's `tpm` crate reads the bytes, the enroller passes the roots
//! and the time.

use super::TPM_ALG_SHA256;
use super::{put_tpm2b, AkPublic, Reader, TpmError, TPM_ALG_NULL};
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
/// TPM_ALG_ECC.
pub const TPM_ALG_ECC: u16 = super::TPM_ALG_ECC;
/// The NV index of the RSA 2048 EK certificate (TCG EK Credential Profile 2.x, §2.2.1.4).
pub const EK_RSA_CERT_NV_INDEX: u32 = 0x01c0_0002;
/// The NV index of the ECC NIST P-256 EK certificate (same section).
pub const EK_ECC_CERT_NV_INDEX: u32 = 0x01c0_000a;
/// The EK's object attributes in templates L-1 and L-2: fixedTPM, fixedParent, sensitiveDataOrigin,
/// adminWithPolicy, restricted, decrypt. No userWithAuth: the EK is used only under its policy.
pub const EK_ATTRIBUTES: u32 = 0x0003_00b2;
/// The EK's authPolicy in templates L-1 and L-2: PolicySecret(TPM_RH_ENDORSEMENT), so only
/// whoever can authorize the endorsement hierarchy may use the key.
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
/// id-ecPublicKey (1.2.840.10045.2.1).
const ID_EC_PUBLIC_KEY: const_oid::ObjectIdentifier =
    const_oid::ObjectIdentifier::new_unwrap("1.2.840.10045.2.1");
/// prime256v1 (1.2.840.10045.3.1.7).
const PRIME256V1: const_oid::ObjectIdentifier =
    const_oid::ObjectIdentifier::new_unwrap("1.2.840.10045.3.1.7");
/// An EK certificate larger than this is refused before parsing (real ones are about 1 KiB;
/// NV indices hold at most a few KiB).
pub const MAX_EK_CERTIFICATE_BYTES: usize = 4096;

/// Why an endorsement key or its certificate is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EkError {
    /// The EK's public area is neither template L-1's nor L-2's.
    #[error("the endorsement key is not a TCG template L-1 (RSA 2048) or L-2 (ECC P-256) key")]
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
    /// The certificate certifies neither an RSA 2048 key with exponent 65537 nor a P-256
    /// key, or one this module cannot read.
    #[error("the EK certificate's key is neither RSA 2048 (exponent 65537) nor ECC P-256")]
    CertificateKey,
    /// The certified key is not the EK the TPM derived: the certificate belongs to another TPM.
    #[error(
        "the EK certificate certifies a key of SHA-256 {}, the TPM's EK has {}",
        hex::encode(certified),
        hex::encode(tpm)
    )]
    KeyMismatch {
        /// SHA-256 of the certified key (the RSA modulus, or the uncompressed P-256 point).
        certified: [u8; 32],
        /// SHA-256 of the TPM's EK, the same way.
        tpm: [u8; 32],
    },
}

/// Which standard EK: the TCG EK Credential Profile's low-range templates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EkKind {
    /// Template L-1: RSA 2048, the EK every TPM 2.0 maker certifies.
    Rsa2048,
    /// Template L-2: ECC NIST P-256.
    EccP256,
}

impl EkKind {
    /// In the order a node looks for them: RSA first, as every maker provisions it.
    pub const ALL: [EkKind; 2] = [EkKind::Rsa2048, EkKind::EccP256];

    /// The NV index of this EK's certificate.
    pub fn certificate_index(self) -> u32 {
        match self {
            EkKind::Rsa2048 => EK_RSA_CERT_NV_INDEX,
            EkKind::EccP256 => EK_ECC_CERT_NV_INDEX,
        }
    }

    /// The template, as TPM2_CreatePrimary takes it in the endorsement hierarchy: every TPM
    /// derives the same EK from it for as long as its endorsement seed lasts, and that is the
    /// key its maker certified.
    pub fn template(self) -> Vec<u8> {
        match self {
            EkKind::Rsa2048 => marshal_rsa_ek(&[0; EK_MODULUS_BYTES]),
            EkKind::EccP256 => marshal_ecc_ek(&[0; 32], &[0; 32]),
        }
    }
}

/// An endorsement key's public key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EkKey {
    /// RSA 2048 with exponent 65537: the modulus, big-endian, [`EK_MODULUS_BYTES`] long.
    Rsa {
        /// The modulus.
        modulus: Vec<u8>,
    },
    /// A point on P-256.
    EccP256 {
        /// The point's x coordinate, big-endian.
        x: [u8; 32],
        /// The point's y coordinate, big-endian.
        y: [u8; 32],
    },
}

impl EkKey {
    /// Which template gives such a key.
    pub fn kind(&self) -> EkKind {
        match self {
            EkKey::Rsa { .. } => EkKind::Rsa2048,
            EkKey::EccP256 { .. } => EkKind::EccP256,
        }
    }

    /// The bytes a certificate's key is compared with: the modulus, or the uncompressed SEC1
    /// point (`04 ‖ x ‖ y`).
    pub fn comparable(&self) -> Vec<u8> {
        match self {
            EkKey::Rsa { modulus } => modulus.clone(),
            EkKey::EccP256 { x, y } => [&[0x04][..], x, y].concat(),
        }
    }
}

/// A parsed endorsement key (template L-1 or L-2) and its public area.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EkPublic {
    public_area: Vec<u8>,
    key: EkKey,
}

impl EkPublic {
    /// Parse a TPMT_PUBLIC and check it is exactly template L-1's or L-2's key. Trailing
    /// bytes are refused.
    pub fn parse(bytes: &[u8]) -> Result<Self, EkError> {
        parse_standard_ek(bytes)
            .map(|key| Self {
                public_area: bytes.to_vec(),
                key,
            })
            .map_err(EkError::Public)
    }

    /// The TPMT_PUBLIC bytes.
    pub fn public_area(&self) -> &[u8] {
        &self.public_area
    }

    /// The public key.
    pub fn key(&self) -> &EkKey {
        &self.key
    }

    /// Which template.
    pub fn kind(&self) -> EkKind {
        self.key.kind()
    }
}

/// The attributes, policy and symmetric algorithm the two templates share, after the type.
fn parse_common<'a>(
    bytes: &'a [u8],
    kind: u16,
    name: &'static str,
) -> Result<Reader<'a>, TpmError> {
    let (mut r, attributes) = super::public_header(bytes, kind, name)?;
    if attributes != EK_ATTRIBUTES {
        return Err(TpmError::Unsupported {
            field: "TPMT_PUBLIC.objectAttributes",
            got: attributes.into(),
            expected: "0x000300b2 (templates L-1, L-2)",
        });
    }
    if r.tpm2b("TPMT_PUBLIC.authPolicy")? != EK_AUTH_POLICY {
        return Err(TpmError::Unsupported {
            field: "TPMT_PUBLIC.authPolicy",
            got: 0,
            expected: "PolicySecret(TPM_RH_ENDORSEMENT) (templates L-1, L-2)",
        });
    }
    r.expect_u16("parameters.symmetric", TPM_ALG_AES, "TPM_ALG_AES")?;
    r.expect_u16("parameters.symmetric.keyBits", 128, "128")?;
    r.expect_u16("parameters.symmetric.mode", TPM_ALG_CFB, "TPM_ALG_CFB")?;
    r.expect_u16("parameters.scheme", TPM_ALG_NULL, "TPM_ALG_NULL")?;
    Ok(r)
}

fn parse_standard_ek(bytes: &[u8]) -> Result<EkKey, TpmError> {
    match bytes.get(..2) {
        Some([0x00, 0x23]) => parse_l2(bytes),
        _ => parse_l1(bytes),
    }
}

fn parse_l1(bytes: &[u8]) -> Result<EkKey, TpmError> {
    let mut r = parse_common(bytes, TPM_ALG_RSA, "TPM_ALG_RSA or TPM_ALG_ECC")?;
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
    Ok(EkKey::Rsa {
        modulus: modulus.to_vec(),
    })
}

fn parse_l2(bytes: &[u8]) -> Result<EkKey, TpmError> {
    let mut r = parse_common(bytes, TPM_ALG_ECC, "TPM_ALG_ECC")?;
    r.expect_u16(
        "TPMS_ECC_PARMS.curveID",
        super::TPM_ECC_NIST_P256,
        "TPM_ECC_NIST_P256",
    )?;
    r.expect_u16("TPMS_ECC_PARMS.kdf", TPM_ALG_NULL, "TPM_ALG_NULL")?;
    let x = r.tpm2b("TPMS_ECC_POINT.x")?;
    let y = r.tpm2b("TPMS_ECC_POINT.y")?;
    r.finish("TPMT_PUBLIC")?;
    let (Ok(x), Ok(y)) = (<[u8; 32]>::try_from(x), <[u8; 32]>::try_from(y)) else {
        return Err(TpmError::BadPoint);
    };
    let key = EkKey::EccP256 { x, y };
    p256::PublicKey::from_sec1_bytes(&key.comparable()).map_err(|_| TpmError::BadPoint)?;
    Ok(key)
}

/// Template L-1's public area with `modulus` (zeros in the template).
pub fn marshal_rsa_ek(modulus: &[u8]) -> Vec<u8> {
    let mut out = marshal_common(TPM_ALG_RSA);
    out.extend_from_slice(&2048u16.to_be_bytes()); // keyBits
    out.extend_from_slice(&0u32.to_be_bytes()); // exponent: the default, 65537
    put_tpm2b(&mut out, modulus);
    out
}

/// Template L-2's public area with the point (`x`, `y`) (zeros in the template).
pub fn marshal_ecc_ek(x: &[u8], y: &[u8]) -> Vec<u8> {
    let mut out = marshal_common(TPM_ALG_ECC);
    for v in [super::TPM_ECC_NIST_P256, TPM_ALG_NULL] {
        out.extend_from_slice(&v.to_be_bytes());
    }
    put_tpm2b(&mut out, x);
    put_tpm2b(&mut out, y);
    out
}

/// Type, name algorithm, attributes, policy, symmetric algorithm and scheme.
fn marshal_common(kind: u16) -> Vec<u8> {
    let mut out = Vec::with_capacity(330);
    for v in [kind, TPM_ALG_SHA256] {
        out.extend_from_slice(&v.to_be_bytes());
    }
    out.extend_from_slice(&EK_ATTRIBUTES.to_be_bytes());
    put_tpm2b(&mut out, &EK_AUTH_POLICY);
    for v in [TPM_ALG_AES, 128, TPM_ALG_CFB, TPM_ALG_NULL] {
        out.extend_from_slice(&v.to_be_bytes());
    }
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
/// usage, if it has one, includes tcg-kp-EKCertificate), and it certifies exactly `ek`'s key
/// (for RSA with exponent 65537).
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
    let certified = certified_key(certificate)?.comparable();
    let tpm = ek.key().comparable();
    if certified != tpm {
        return Err(EkError::KeyMismatch {
            certified: Sha256::digest(&certified).into(),
            tpm: Sha256::digest(&tpm).into(),
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

/// The key the certificate certifies: an RSA modulus (without a leading zero; the exponent
/// must be 65537), or a P-256 point.
pub fn certified_key(certificate: &[u8]) -> Result<EkKey, EkError> {
    let cert = x509_cert::Certificate::from_der(certificate).map_err(|e| {
        EkError::CertificateEncoding {
            reason: e.to_string(),
        }
    })?;
    let spki = &cert.tbs_certificate.subject_public_key_info;
    let key = spki
        .subject_public_key
        .as_bytes()
        .ok_or(EkError::CertificateKey)?;
    if spki.algorithm.oid == RSA_ENCRYPTION {
        let (modulus, exponent) = rsa_public_key(key).map_err(|_| EkError::CertificateKey)?;
        if exponent != EK_EXPONENT {
            return Err(EkError::CertificateKey);
        }
        return Ok(EkKey::Rsa { modulus });
    }
    let curve = spki
        .algorithm
        .parameters
        .as_ref()
        .and_then(|p| p.decode_as::<const_oid::ObjectIdentifier>().ok());
    if spki.algorithm.oid != ID_EC_PUBLIC_KEY || curve != Some(PRIME256V1) {
        return Err(EkError::CertificateKey);
    }
    let point = p256::PublicKey::from_sec1_bytes(key).map_err(|_| EkError::CertificateKey)?;
    sec1_point(&point.to_sec1_bytes()).ok_or(EkError::CertificateKey)
}

/// The key of an uncompressed SEC1 P-256 point (`04 ‖ x ‖ y`).
fn sec1_point(sec1: &[u8]) -> Option<EkKey> {
    match sec1 {
        [0x04, rest @ ..] if rest.len() == 64 => Some(EkKey::EccP256 {
            x: rest[..32].try_into().ok()?,
            y: rest[32..].try_into().ok()?,
        }),
        _ => None,
    }
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
    /// The EK's TPMT_PUBLIC (template L-1 or L-2).
    #[serde(with = "hex_bytes")]
    pub ek_public: Vec<u8>,
    /// The EK certificate, DER.
    #[serde(with = "hex_bytes")]
    pub ek_certificate: Vec<u8>,
}

/// A [`TpmIdentity`] whose parts were checked: the AK is in the profile, the EK is template
/// L-1's or L-2's, and its certificate verifies to a trusted maker root. That the AK lives in
/// the same TPM is what the credential challenge ([`super::credential`]) is still to show.
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
