//! Report-shaped test data, **for simulators and tests only**: a throw-away three-level P-384
//! certificate chain (root → intermediate → attestation leaf carrying an NVIDIA-style FWID
//! extension) and SPDM 1.1 `GET_MEASUREMENTS` request/response pairs signed by the leaf.
//!
//! Real NVIDIA roots never sign anything built here; a verifier only accepts these reports if
//! it is explicitly configured with [`SimGpu::root_der`]. The fake NVML library and the tests use
//! this so the full verification path (derived nonces, chain, signature, FWID, RIM comparison)
//! runs without hardware. Everything is deterministic from the seed (RFC 6979 signatures).

use super::chain::{ECDSA_WITH_SHA384, ID_SHA384, TCG_DICE_TCB_INFO};
use super::spdm::{opaque_type, DMTF_MEASUREMENT_SPEC, GET_MEASUREMENTS, MEASUREMENTS};
use const_oid::ObjectIdentifier;
use der::asn1::{AnyRef, BitString, GeneralizedTime, OctetString, OctetStringRef};
use der::{Decode, Encode, Tag};
use p384::ecdsa::signature::Signer as _;
use p384::ecdsa::{Signature, SigningKey};
use p384::pkcs8::EncodePublicKey;
use sha2::{Digest, Sha384};
use spki::{AlgorithmIdentifierOwned, SubjectPublicKeyInfoOwned};
use std::str::FromStr;
use std::time::Duration;
use x509_cert::certificate::{TbsCertificate, Version};
use x509_cert::ext::pkix::{BasicConstraints, KeyUsage, KeyUsages};
use x509_cert::ext::Extension;
use x509_cert::name::Name;
use x509_cert::serial_number::SerialNumber;
use x509_cert::time::{Time, Validity};
use x509_cert::Certificate;

/// Errors while building simulated data (bad parameters, never expected in practice).
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// DER encoding failed.
    #[error("DER")]
    Der(#[from] der::Error),
    /// Key derivation or encoding failed.
    #[error("key: {0}")]
    Key(String),
    /// A field does not fit the SPDM layout.
    #[error("layout: {0}")]
    Layout(&'static str),
    /// A RIM to sign does not parse.
    #[error("RIM")]
    Rim(#[from] crate::rim::RimError),
}

/// What to put in a simulated report.
#[derive(Debug, Clone)]
pub struct ReportSpec {
    /// Requester nonce (the derived GPU nonce).
    pub nonce: [u8; 32],
    /// Responder nonce.
    pub responder_nonce: [u8; 32],
    /// `(index, value)` measurement blocks, written as DMTF digest blocks (value type 0x01).
    pub measurements: Vec<(u8, Vec<u8>)>,
    /// Driver version string.
    pub driver_version: String,
    /// Raw 8-byte VBIOS version field.
    pub vbios_version: [u8; 8],
    /// Further opaque TLVs appended after driver, VBIOS and FWID.
    pub extra_opaque: Vec<(u16, Vec<u8>)>,
    /// FWID to write instead of the leaf certificate's (to simulate a mismatch).
    pub fwid_override: Option<[u8; 48]>,
}

/// A simulated GPU: its chain and its attestation key.
pub struct SimGpu {
    leaf_key: SigningKey,
    chain: Vec<Vec<u8>>,
    fwid: [u8; 48],
}

impl std::fmt::Debug for SimGpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SimGpu(fwid {})", hex::encode(self.fwid))
    }
}

fn derive_key(seed: &[u8], label: &str) -> Result<SigningKey, SimError> {
    let mut h = Sha384::new();
    h.update(b"sovereign-host/sim-gpu-key/v1\0");
    h.update(label.as_bytes());
    h.update([0]);
    h.update(seed);
    SigningKey::from_slice(&h.finalize()).map_err(|e| SimError::Key(e.to_string()))
}

fn spki_of(key: &SigningKey) -> Result<SubjectPublicKeyInfoOwned, SimError> {
    let doc = p384::PublicKey::from(key.verifying_key())
        .to_public_key_der()
        .map_err(|e| SimError::Key(e.to_string()))?;
    Ok(SubjectPublicKeyInfoOwned::from_der(doc.as_bytes())?)
}

fn time(secs: u64) -> Result<Time, SimError> {
    Ok(Time::GeneralTime(GeneralizedTime::from_unix_duration(
        Duration::from_secs(secs),
    )?))
}

fn name(s: &str) -> Result<Name, SimError> {
    Name::from_str(s).map_err(SimError::Der)
}

fn ext<T: Encode>(oid: &str, critical: bool, value: &T) -> Result<Extension, SimError> {
    Ok(Extension {
        extn_id: ObjectIdentifier::new_unwrap(oid),
        critical,
        extn_value: OctetString::new(value.to_der()?)?,
    })
}

#[allow(clippy::too_many_arguments)]
fn issue(
    serial: u8,
    subject: &Name,
    subject_key: &SigningKey,
    issuer: &Name,
    issuer_key: &SigningKey,
    ca: bool,
    extra: Vec<Extension>,
    validity: (u64, u64),
) -> Result<Vec<u8>, SimError> {
    let mut extensions = vec![
        ext(
            "2.5.29.19",
            true,
            &BasicConstraints {
                ca,
                path_len_constraint: None,
            },
        )?,
        ext(
            "2.5.29.15",
            true,
            &KeyUsage(if ca {
                KeyUsages::KeyCertSign.into()
            } else {
                KeyUsages::DigitalSignature.into()
            }),
        )?,
    ];
    extensions.extend(extra);
    let alg = AlgorithmIdentifierOwned {
        oid: ECDSA_WITH_SHA384,
        parameters: None,
    };
    let tbs = TbsCertificate {
        version: Version::V3,
        serial_number: SerialNumber::new(&[serial])?,
        signature: alg.clone(),
        issuer: issuer.clone(),
        validity: Validity {
            not_before: time(validity.0)?,
            not_after: time(validity.1)?,
        },
        subject: subject.clone(),
        subject_public_key_info: spki_of(subject_key)?,
        issuer_unique_id: None,
        subject_unique_id: None,
        extensions: Some(extensions),
    };
    let sig: Signature = issuer_key.sign(&tbs.to_der()?);
    let cert = Certificate {
        tbs_certificate: tbs,
        signature_algorithm: alg,
        signature: BitString::from_bytes(sig.to_der().as_bytes())?,
    };
    Ok(cert.to_der()?)
}

/// A self-signed CA certificate (serial 1): the root of a simulated chain.
fn self_signed_root(
    name: &Name,
    key: &SigningKey,
    validity: (u64, u64),
) -> Result<Vec<u8>, SimError> {
    issue(1, name, key, name, key, true, vec![], validity)
}

/// DER of the NVIDIA-style FWID extension value:
/// `SEQUENCE { INTEGER 1, SubjectPublicKeyInfo(issuer), SEQUENCE { id-sha384, OCTET STRING } }`.
fn fwid_extension(issuer_key: &SigningKey, fwid: &[u8; 48]) -> Result<Extension, SimError> {
    let mut fwid_seq = ID_SHA384.to_der()?;
    fwid_seq.extend(OctetStringRef::new(fwid)?.to_der()?);
    let mut content = 1u8.to_der()?;
    content.extend(spki_of(issuer_key)?.to_der()?);
    content.extend(AnyRef::new(Tag::Sequence, &fwid_seq)?.to_der()?);
    let value = AnyRef::new(Tag::Sequence, &content)?.to_der()?;
    Ok(Extension {
        extn_id: TCG_DICE_TCB_INFO,
        critical: false,
        extn_value: OctetString::new(value)?,
    })
}

/// A simulated RIM publisher: a root and the leaf that signs RIMs, NVIDIA's RIM PKI in
/// miniature, so tests and dev nodes check RIM signatures exactly as production does.
pub struct SimRimSigner {
    key: SigningKey,
    chain: Vec<Vec<u8>>,
}

impl std::fmt::Debug for SimRimSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SimRimSigner({} certificates)", self.chain.len())
    }
}

impl SimRimSigner {
    /// Build the signer's chain (root → leaf), valid from `not_before` to `not_after`,
    /// deterministically from `seed`.
    pub fn new(seed: &[u8], not_before: u64, not_after: u64) -> Result<Self, SimError> {
        let root_key = derive_key(seed, "rim-root")?;
        let key = derive_key(seed, "rim-signer")?;
        let root_name = name("CN=Simulated RIM Signing Root,O=Sovereign Host Test")?;
        let leaf_name = name("CN=Simulated RIM Signer,O=Sovereign Host Test")?;
        let v = (not_before, not_after);
        let root = self_signed_root(&root_name, &root_key, v)?;
        let leaf = issue(2, &leaf_name, &key, &root_name, &root_key, false, vec![], v)?;
        Ok(Self {
            key,
            chain: vec![leaf, root],
        })
    }

    /// The root a verifier must be configured with to accept RIMs signed here.
    pub fn root_der(&self) -> &[u8] {
        &self.chain[self.chain.len() - 1]
    }

    /// `xml` with an enveloped XML-DSig signature in NVIDIA's profile (see [`crate::rim`]).
    pub fn sign(&self, xml: &str) -> Result<String, SimError> {
        Ok(crate::rim::sign_enveloped(xml, &self.key, &self.chain)?)
    }
}

impl SimGpu {
    /// Build a chain whose certificates are valid from `not_before` to `not_after`
    /// (Unix seconds), deterministically from `seed`.
    pub fn new(seed: &[u8], not_before: u64, not_after: u64) -> Result<Self, SimError> {
        let root_key = derive_key(seed, "root")?;
        let ica_key = derive_key(seed, "ica")?;
        let leaf_key = derive_key(seed, "leaf")?;
        let fwid: [u8; 48] = Sha384::digest([b"fwid".as_slice(), seed].concat()).into();
        let root_name = name("CN=Simulated GPU Device Root,O=Sovereign Host Test")?;
        let ica_name = name("CN=Simulated GPU Provisioner ICA,O=Sovereign Host Test")?;
        let leaf_name = name("CN=Simulated GPU Attestation Leaf,O=Sovereign Host Test")?;
        let v = (not_before, not_after);
        let root = self_signed_root(&root_name, &root_key, v)?;
        let ica = issue(
            2,
            &ica_name,
            &ica_key,
            &root_name,
            &root_key,
            true,
            vec![],
            v,
        )?;
        let leaf = issue(
            3,
            &leaf_name,
            &leaf_key,
            &ica_name,
            &ica_key,
            false,
            vec![fwid_extension(&ica_key, &fwid)?],
            v,
        )?;
        Ok(Self {
            leaf_key,
            chain: vec![leaf, ica, root],
            fwid,
        })
    }

    /// The root certificate a verifier must be configured with to accept this GPU.
    pub fn root_der(&self) -> &[u8] {
        &self.chain[self.chain.len() - 1]
    }

    /// The chain, leaf first (including the root, as NVML returns it).
    pub fn chain(&self) -> &[Vec<u8>] {
        &self.chain
    }

    /// The FWID embedded in the leaf certificate and in reports.
    pub fn fwid(&self) -> [u8; 48] {
        self.fwid
    }

    /// Build and sign `request || response` for `spec`.
    pub fn report(&self, spec: &ReportSpec) -> Result<Vec<u8>, SimError> {
        let mut out = vec![0x11, GET_MEASUREMENTS, 0x01, 0xFF];
        out.extend_from_slice(&spec.nonce);
        out.push(0x00);
        let mut record = Vec::new();
        for (index, value) in &spec.measurements {
            let vlen =
                u16::try_from(value.len()).map_err(|_| SimError::Layout("value too long"))?;
            let size = vlen
                .checked_add(3)
                .ok_or(SimError::Layout("value too long"))?;
            record.push(*index);
            record.push(DMTF_MEASUREMENT_SPEC);
            record.extend_from_slice(&size.to_le_bytes());
            record.push(0x01);
            record.extend_from_slice(&vlen.to_le_bytes());
            record.extend_from_slice(value);
        }
        let n = u8::try_from(spec.measurements.len())
            .map_err(|_| SimError::Layout("too many blocks"))?;
        let rlen = u32::try_from(record.len()).map_err(|_| SimError::Layout("record too long"))?;
        if rlen >= 1 << 24 {
            return Err(SimError::Layout("record too long"));
        }
        out.extend_from_slice(&[0x11, MEASUREMENTS, 0x00, 0x00, n]);
        out.extend_from_slice(&rlen.to_le_bytes()[..3]);
        out.extend_from_slice(&record);
        out.extend_from_slice(&spec.responder_nonce);
        let mut driver = spec.driver_version.as_bytes().to_vec();
        driver.push(0);
        let mut tlvs: Vec<(u16, Vec<u8>)> = vec![
            (opaque_type::DRIVER_VERSION, driver),
            (opaque_type::VBIOS_VERSION, spec.vbios_version.to_vec()),
            (
                opaque_type::FWID,
                spec.fwid_override.unwrap_or(self.fwid).to_vec(),
            ),
        ];
        tlvs.extend(spec.extra_opaque.iter().cloned());
        let mut opaque = Vec::new();
        for (ty, v) in &tlvs {
            let l =
                u16::try_from(v.len()).map_err(|_| SimError::Layout("opaque value too long"))?;
            opaque.extend_from_slice(&ty.to_le_bytes());
            opaque.extend_from_slice(&l.to_le_bytes());
            opaque.extend_from_slice(v);
        }
        let olen = u16::try_from(opaque.len()).map_err(|_| SimError::Layout("opaque too long"))?;
        out.extend_from_slice(&olen.to_le_bytes());
        out.extend_from_slice(&opaque);
        let sig: Signature = self.leaf_key.sign(&out);
        out.extend_from_slice(&sig.to_bytes());
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvidia::chain::{CertChain, ChainError, VerifiedChain};

    struct Keys {
        root: SigningKey,
        ica: SigningKey,
        leaf: SigningKey,
        root_name: Name,
        ica_name: Name,
        leaf_name: Name,
    }

    fn keys() -> Keys {
        Keys {
            root: derive_key(b"t", "root").unwrap(),
            ica: derive_key(b"t", "ica").unwrap(),
            leaf: derive_key(b"t", "leaf").unwrap(),
            root_name: name("CN=Root").unwrap(),
            ica_name: name("CN=ICA").unwrap(),
            leaf_name: name("CN=Leaf").unwrap(),
        }
    }

    const V: (u64, u64) = (1_000, 2_000);

    fn chain(k: &Keys, ica_is_ca: bool, leaf_ca: bool, leaf_extra: Vec<Extension>) -> Vec<Vec<u8>> {
        let root = issue(
            1,
            &k.root_name,
            &k.root,
            &k.root_name,
            &k.root,
            true,
            vec![],
            V,
        )
        .unwrap();
        let ica = issue(
            2,
            &k.ica_name,
            &k.ica,
            &k.root_name,
            &k.root,
            ica_is_ca,
            vec![],
            V,
        )
        .unwrap();
        let leaf = issue(
            3,
            &k.leaf_name,
            &k.leaf,
            &k.ica_name,
            &k.ica,
            leaf_ca,
            leaf_extra,
            V,
        )
        .unwrap();
        vec![leaf, ica, root]
    }

    #[test]
    fn sim_chain_verifies_with_and_without_root_in_chain() {
        let g = SimGpu::new(b"x", V.0, V.1).unwrap();
        let roots = vec![g.root_der().to_vec()];
        let full = CertChain::from_der_list(g.chain()).unwrap();
        let v = full.verify(&roots, 1_500).unwrap();
        assert_eq!(v.leaf_fwid.as_deref(), Some(g.fwid().as_slice()));
        let partial = CertChain::from_der_list(&g.chain()[..2]).unwrap();
        partial.verify(&roots, 1_500).unwrap();
        assert!(matches!(
            full.verify(&roots, 2_001),
            Err(ChainError::Validity { .. })
        ));
        assert!(matches!(
            full.verify(&roots, 999),
            Err(ChainError::Validity { .. })
        ));
    }

    #[test]
    fn device_key_is_the_leafs_issuer_below_the_root() {
        let k = keys();
        let c = chain(&k, true, false, vec![]);
        let v = verify_at_own_root(&c).unwrap();
        assert_eq!(v.device_key, Some(*k.ica.verifying_key()));
        // The root issues the leaf: it is every device's, so it names none.
        let fwid = fwid_extension(&k.root, &[7; 48]).unwrap();
        let leaf = issue(
            3,
            &k.leaf_name,
            &k.leaf,
            &k.root_name,
            &k.root,
            false,
            vec![fwid],
            V,
        );
        let direct = [leaf.unwrap(), c[2].clone()];
        for ders in [&direct[..], &direct[..1]] {
            let v = CertChain::from_der_list(ders)
                .unwrap()
                .verify(&[c[2].clone()], 1_500)
                .unwrap();
            assert_eq!(v.device_key, None);
            assert_eq!(v.leaf_key, *k.leaf.verifying_key());
        }
    }

    /// `c` (leaf, ICA, root) verified at time 1,500 against its own root.
    fn verify_at_own_root(c: &[Vec<u8>]) -> Result<VerifiedChain, ChainError> {
        CertChain::from_der_list(c)?.verify(&[c[2].clone()], 1_500)
    }

    #[test]
    fn non_ca_issuer_is_rejected() {
        let k = keys();
        let c = chain(&k, false, false, vec![]);
        let err = verify_at_own_root(&c).unwrap_err();
        // The ICA's keyUsage (digitalSignature only) or its cA=FALSE rejects it.
        assert!(
            matches!(err, ChainError::KeyUsage(1) | ChainError::NotCa(1)),
            "{err:?}"
        );
    }

    #[test]
    fn leaf_without_digital_signature_is_rejected() {
        let k = keys();
        let c = chain(&k, true, true, vec![]);
        let err = verify_at_own_root(&c).unwrap_err();
        assert_eq!(err, ChainError::KeyUsage(0));
    }

    #[test]
    fn unknown_critical_extension_is_rejected() {
        let k = keys();
        let odd = Extension {
            extn_id: ObjectIdentifier::new_unwrap("1.3.6.1.4.1.99999.1"),
            critical: true,
            extn_value: OctetString::new(vec![0x05, 0x00]).unwrap(),
        };
        let c = chain(&k, true, false, vec![odd]);
        let err = verify_at_own_root(&c).unwrap_err();
        assert!(
            matches!(
                err,
                ChainError::UnknownCriticalExtension { position: 0, .. }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn leaf_without_fwid_has_none() {
        let k = keys();
        let c = chain(&k, true, false, vec![]);
        let v = verify_at_own_root(&c).unwrap();
        assert!(v.leaf_fwid.is_none());
    }
}
