//! GPU device certificate chains: X.509 path checking from the attestation (leaf)
//! certificate up to a configured NVIDIA device root, with ECDSA P-384 / SHA-384 signatures.
//!
//! The chain is ordered leaf first, as NVML returns it. Each certificate must be signed by the
//! next one, name-chained (issuer == next subject), inside its validity period at the given
//! time; every certificate after the leaf must be a CA (basicConstraints cA = TRUE). The last
//! certificate must either be byte-identical to a configured root (whose self-signature is
//! also checked), or be issued and signed by one.

use const_oid::ObjectIdentifier;
use der::asn1::{ObjectIdentifier as Oid, OctetStringRef};
use der::{Decode, Encode, Reader, SliceReader, Tag, TagNumber, Tagged};
use p384::ecdsa::signature::Verifier as _;
use p384::ecdsa::{Signature, VerifyingKey};
use x509_cert::ext::pkix::{BasicConstraints, KeyUsage};
use x509_cert::Certificate;

/// ecdsa-with-SHA384 (RFC 5758).
pub const ECDSA_WITH_SHA384: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.4.3.3");
/// id-ecPublicKey.
pub const ID_EC_PUBLIC_KEY: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.2.1");
/// secp384r1.
pub const SECP384R1: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.132.0.34");
/// TCG DICE TcbInfo extension (tcg-dice-TcbInfo), which carries the FWID in NVIDIA certs.
pub const TCG_DICE_TCB_INFO: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.23.133.5.4.1");
/// id-sha384, the FWID hash algorithm.
pub const ID_SHA384: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.16.840.1.101.3.4.2.2");
/// basicConstraints.
const BASIC_CONSTRAINTS: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.29.19");
/// keyUsage.
const KEY_USAGE: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.29.15");

/// Why a chain does not verify.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ChainError {
    /// No certificates at all.
    #[error("empty certificate chain")]
    Empty,
    /// A certificate is not valid DER / PEM.
    #[error("certificate {position} does not parse: {reason}")]
    Parse {
        /// 0 = leaf.
        position: usize,
        /// Parser message.
        reason: String,
    },
    /// Unsupported algorithm or key type.
    #[error("certificate {position}: unsupported {what}")]
    Unsupported {
        /// 0 = leaf.
        position: usize,
        /// What was not supported.
        what: &'static str,
    },
    /// A certificate's issuer is not the next certificate's subject.
    #[error("certificate {0}: issuer does not match the next certificate's subject")]
    NameMismatch(usize),
    /// A signature does not verify.
    #[error("certificate {0}: signature does not verify with its issuer's key")]
    BadSignature(usize),
    /// Outside the validity period.
    #[error("certificate {position} not valid at {now}: valid {not_before}..={not_after}")]
    Validity {
        /// 0 = leaf.
        position: usize,
        /// Time checked.
        now: u64,
        /// notBefore, Unix seconds.
        not_before: u64,
        /// notAfter, Unix seconds.
        not_after: u64,
    },
    /// An issuing certificate is not a CA.
    #[error("certificate {0} issues another certificate but is not a CA")]
    NotCa(usize),
    /// The chain does not end at a configured root.
    #[error("chain does not end at a configured NVIDIA root")]
    UntrustedRoot,
    /// A critical extension this verifier does not understand (RFC 5280 §4.2).
    #[error("certificate {position}: unrecognised critical extension {oid}")]
    UnknownCriticalExtension {
        /// 0 = leaf.
        position: usize,
        /// The extension OID.
        oid: String,
    },
    /// keyUsage forbids the certificate's role (signing reports or certificates).
    #[error("certificate {0}: keyUsage does not allow its role in the chain")]
    KeyUsage(usize),
    /// The leaf has no FWID in its TcbInfo extension.
    #[error("leaf certificate carries no FWID (2.23.133.5.4.1)")]
    NoFwid,
}

/// A parsed chain, leaf first.
#[derive(Debug, Clone)]
pub struct CertChain {
    certs: Vec<Certificate>,
    ders: Vec<Vec<u8>>,
}

/// What a successful chain check yields.
#[derive(Debug, Clone)]
pub struct VerifiedChain {
    /// The attestation key that signs reports.
    pub leaf_key: VerifyingKey,
    /// The key of the device certificate, the one that issued the leaf (NVIDIA's per-chip
    /// "GSP BROM" certificate), when the chain carries it as a certificate of its own below
    /// the root: it names the chip whatever firmware derived the leaf, so a verifier can tell
    /// two reports of one GPU apart from reports of two.
    pub device_key: Option<VerifyingKey>,
    /// FWID from the leaf's TcbInfo extension, if present.
    pub leaf_fwid: Option<Vec<u8>>,
    /// Latest notBefore on the path (including an external root), Unix seconds.
    pub valid_from: u64,
    /// Earliest notAfter on the path, Unix seconds: with `valid_from`, the window in which
    /// the same verification would succeed again.
    pub valid_until: u64,
}

impl CertChain {
    /// Parse DER certificates, leaf first.
    pub fn from_der_list(ders: &[Vec<u8>]) -> Result<Self, ChainError> {
        if ders.is_empty() {
            return Err(ChainError::Empty);
        }
        let mut certs = Vec::with_capacity(ders.len());
        for (position, d) in ders.iter().enumerate() {
            let c = Certificate::from_der(d).map_err(|e| ChainError::Parse {
                position,
                reason: e.to_string(),
            })?;
            certs.push(c);
        }
        Ok(Self {
            certs,
            ders: ders.to_vec(),
        })
    }

    /// Parse concatenated PEM certificates, leaf first.
    pub fn from_pem(pem: &str) -> Result<Self, ChainError> {
        let certs = Certificate::load_pem_chain(pem.as_bytes()).map_err(|e| ChainError::Parse {
            position: 0,
            reason: e.to_string(),
        })?;
        let mut ders = Vec::with_capacity(certs.len());
        for (position, c) in certs.iter().enumerate() {
            ders.push(c.to_der().map_err(|e| ChainError::Parse {
                position,
                reason: e.to_string(),
            })?);
        }
        Self::from_der_list(&ders)
    }

    /// DER encodings, leaf first.
    pub fn ders(&self) -> &[Vec<u8>] {
        &self.ders
    }

    /// The leaf certificate's subject, as an RFC 4514 string.
    pub fn leaf_subject(&self) -> String {
        self.certs
            .first()
            .map(|c| c.tbs_certificate.subject.to_string())
            .unwrap_or_default()
    }

    /// Number of certificates.
    pub fn len(&self) -> usize {
        self.certs.len()
    }

    /// Whether the chain is empty (never true for a parsed chain).
    pub fn is_empty(&self) -> bool {
        self.certs.is_empty()
    }

    /// Verify the chain at `now` (Unix seconds) against configured root certificates (DER).
    pub fn verify(&self, roots: &[Vec<u8>], now: u64) -> Result<VerifiedChain, ChainError> {
        let n = self.certs.len();
        let mut window = (0u64, u64::MAX);
        for (i, cert) in self.certs.iter().enumerate() {
            check_validity(cert, i, now)?;
            narrow(&mut window, cert);
            check_extensions(cert, i, i > 0)?;
            if i + 1 < n {
                let issuer = &self.certs[i + 1];
                if cert.tbs_certificate.issuer != issuer.tbs_certificate.subject {
                    return Err(ChainError::NameMismatch(i));
                }
                check_ca(issuer, i + 1)?;
                verify_signed_by(cert, i, issuer, i + 1)?;
            }
        }
        let last = &self.certs[n - 1];
        let last_der = &self.ders[n - 1];
        let mut anchored = false;
        for root_der in roots {
            if root_der == last_der {
                // The chain carries the root itself: check its self-signature.
                if last.tbs_certificate.issuer != last.tbs_certificate.subject {
                    return Err(ChainError::NameMismatch(n - 1));
                }
                verify_signed_by(last, n - 1, last, n - 1)?;
                anchored = true;
                break;
            }
            let Ok(root) = Certificate::from_der(root_der) else {
                continue;
            };
            if root.tbs_certificate.subject == last.tbs_certificate.issuer
                && verify_signed_by(last, n - 1, &root, n).is_ok()
            {
                check_ca(&root, n)?;
                check_extensions(&root, n, true)?;
                check_validity(&root, n, now)?;
                narrow(&mut window, &root);
                anchored = true;
                break;
            }
        }
        if !anchored {
            return Err(ChainError::UntrustedRoot);
        }
        let leaf = &self.certs[0];
        Ok(VerifiedChain {
            leaf_key: p384_key(leaf, 0)?,
            device_key: self.device_key()?,
            leaf_fwid: leaf_fwid(leaf)?,
            valid_from: window.0,
            valid_until: window.1,
        })
    }

    /// The key of the leaf's issuer when that is a certificate of the chain and not a
    /// self-signed root (which every GPU under it shares).
    fn device_key(&self) -> Result<Option<VerifyingKey>, ChainError> {
        match self.certs.get(1) {
            Some(c) if c.tbs_certificate.issuer != c.tbs_certificate.subject => {
                p384_key(c, 1).map(Some)
            }
            _ => Ok(None),
        }
    }
}

fn narrow(window: &mut (u64, u64), cert: &Certificate) {
    let v = &cert.tbs_certificate.validity;
    window.0 = window.0.max(v.not_before.to_unix_duration().as_secs());
    window.1 = window.1.min(v.not_after.to_unix_duration().as_secs());
}

fn check_validity(cert: &Certificate, position: usize, now: u64) -> Result<(), ChainError> {
    let v = &cert.tbs_certificate.validity;
    let not_before = v.not_before.to_unix_duration().as_secs();
    let not_after = v.not_after.to_unix_duration().as_secs();
    if now < not_before || now > not_after {
        return Err(ChainError::Validity {
            position,
            now,
            not_before,
            not_after,
        });
    }
    Ok(())
}

/// Reject unknown critical extensions, and enforce keyUsage when present: issuers need
/// keyCertSign, the leaf (which signs reports) digitalSignature.
fn check_extensions(cert: &Certificate, position: usize, issuer: bool) -> Result<(), ChainError> {
    let exts = cert.tbs_certificate.extensions.as_deref().unwrap_or(&[]);
    for e in exts {
        if e.critical && e.extn_id != BASIC_CONSTRAINTS && e.extn_id != KEY_USAGE {
            return Err(ChainError::UnknownCriticalExtension {
                position,
                oid: e.extn_id.to_string(),
            });
        }
        if e.extn_id == KEY_USAGE {
            let ku =
                KeyUsage::from_der(e.extn_value.as_bytes()).map_err(|err| ChainError::Parse {
                    position,
                    reason: err.to_string(),
                })?;
            let allowed = if issuer {
                ku.key_cert_sign()
            } else {
                ku.digital_signature()
            };
            if !allowed {
                return Err(ChainError::KeyUsage(position));
            }
        }
    }
    Ok(())
}

fn check_ca(cert: &Certificate, position: usize) -> Result<(), ChainError> {
    let exts = cert.tbs_certificate.extensions.as_deref().unwrap_or(&[]);
    let bc = exts
        .iter()
        .find(|e| e.extn_id == BASIC_CONSTRAINTS)
        .ok_or(ChainError::NotCa(position))?;
    let bc =
        BasicConstraints::from_der(bc.extn_value.as_bytes()).map_err(|e| ChainError::Parse {
            position,
            reason: e.to_string(),
        })?;
    if bc.ca {
        Ok(())
    } else {
        Err(ChainError::NotCa(position))
    }
}

fn p384_key(cert: &Certificate, position: usize) -> Result<VerifyingKey, ChainError> {
    let spki = &cert.tbs_certificate.subject_public_key_info;
    if spki.algorithm.oid != ID_EC_PUBLIC_KEY {
        return Err(ChainError::Unsupported {
            position,
            what: "public key algorithm",
        });
    }
    let curve: Option<Oid> = spki
        .algorithm
        .parameters
        .as_ref()
        .and_then(|p| p.decode_as().ok());
    if curve != Some(SECP384R1) {
        return Err(ChainError::Unsupported {
            position,
            what: "elliptic curve (need P-384)",
        });
    }
    let bits = spki
        .subject_public_key
        .as_bytes()
        .ok_or(ChainError::Unsupported {
            position,
            what: "public key bit string",
        })?;
    VerifyingKey::from_sec1_bytes(bits).map_err(|_| ChainError::Unsupported {
        position,
        what: "P-384 public key encoding",
    })
}

fn verify_signed_by(
    cert: &Certificate,
    position: usize,
    issuer: &Certificate,
    issuer_position: usize,
) -> Result<(), ChainError> {
    if cert.signature_algorithm.oid != ECDSA_WITH_SHA384
        || cert.tbs_certificate.signature.oid != ECDSA_WITH_SHA384
    {
        return Err(ChainError::Unsupported {
            position,
            what: "signature algorithm",
        });
    }
    let key = p384_key(issuer, issuer_position)?;
    let tbs = cert
        .tbs_certificate
        .to_der()
        .map_err(|e| ChainError::Parse {
            position,
            reason: e.to_string(),
        })?;
    let sig_bytes = cert
        .signature
        .as_bytes()
        .ok_or(ChainError::BadSignature(position))?;
    let sig = Signature::from_der(sig_bytes).map_err(|_| ChainError::BadSignature(position))?;
    key.verify(&tbs, &sig)
        .map_err(|_| ChainError::BadSignature(position))
}

/// Extract the FWID from a certificate's 2.23.133.5.4.1 extension.
///
/// NVIDIA's Hopper leaf certificates encode the extension value as
/// `SEQUENCE { INTEGER, SubjectPublicKeyInfo, SEQUENCE { OID id-sha384, OCTET STRING (48) } }`
/// — the last element is a TCG DICE `FWID`. The standard DICE `TcbInfo` form, with
/// `fwids [6] IMPLICIT SEQUENCE OF FWID`, is accepted too. Exactly one SHA-384 FWID must be
/// present; anything else is treated as absent.
pub fn leaf_fwid(cert: &Certificate) -> Result<Option<Vec<u8>>, ChainError> {
    let exts = cert.tbs_certificate.extensions.as_deref().unwrap_or(&[]);
    let Some(ext) = exts.iter().find(|e| e.extn_id == TCG_DICE_TCB_INFO) else {
        return Ok(None);
    };
    let parse_err = |reason: String| ChainError::Parse {
        position: 0,
        reason,
    };
    let outer = der::asn1::AnyRef::from_der(ext.extn_value.as_bytes())
        .map_err(|e| parse_err(format!("TcbInfo: {e}")))?;
    if outer.tag() != Tag::Sequence {
        return Err(parse_err("TcbInfo is not a SEQUENCE".into()));
    }
    let mut found = Vec::new();
    collect_fwids(outer.value(), &mut found).map_err(|e| parse_err(format!("TcbInfo: {e}")))?;
    match found.len() {
        1 => Ok(found.pop()),
        _ => Ok(None),
    }
}

fn collect_fwids(content: &[u8], found: &mut Vec<Vec<u8>>) -> der::Result<()> {
    let mut r = SliceReader::new(content)?;
    while !r.is_finished() {
        let item: der::asn1::AnyRef<'_> = r.decode()?;
        let tag = item.tag();
        if tag == Tag::Sequence {
            if let Some(fwid) = as_fwid(item.value()) {
                found.push(fwid);
            }
        } else if tag
            == (Tag::ContextSpecific {
                constructed: true,
                number: TagNumber::new(6),
            })
        {
            // DICE TcbInfo fwids [6] IMPLICIT SEQUENCE OF FWID.
            let mut inner = SliceReader::new(item.value())?;
            while !inner.is_finished() {
                let f: der::asn1::AnyRef<'_> = inner.decode()?;
                if f.tag() == Tag::Sequence {
                    if let Some(fwid) = as_fwid(f.value()) {
                        found.push(fwid);
                    }
                }
            }
        }
    }
    Ok(())
}

fn as_fwid(content: &[u8]) -> Option<Vec<u8>> {
    let mut r = SliceReader::new(content).ok()?;
    let oid: Oid = r.decode().ok()?;
    let digest: OctetStringRef<'_> = r.decode().ok()?;
    if !r.is_finished() || oid != ID_SHA384 || digest.as_bytes().len() != 48 {
        return None;
    }
    Some(digest.as_bytes().to_vec())
}
