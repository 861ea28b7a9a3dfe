//! NVIDIA Reference Integrity Manifests (TCG RIM as ISO/IEC 19770-2 SWID tags): the golden
//! SHA-384 value(s) for each GPU measurement index, one file per VBIOS version and one per
//! driver version.
//!
//! Parsing uses the `xml-sec` crate's DOM (no DTDs, so no entity expansion; bounded node count). Element and attribute names are
//! matched by namespace, not prefix:
//!
//! * `SoftwareIdentity` (SWID namespace) — `name`, `version`, `tagId`;
//! * `Meta` — `colloquialVersion`, `product`, `edition`;
//! * `Payload/Resource[@type="Measurement"]` — `index`, `name`, `active` (`True`/`False`),
//!   `alternatives` (n) and the golden values `Hash0 … Hash{n-1}` in the namespace
//!   `http://www.w3.org/2001/04/xmlenc#sha384` (96 hex digits each).
//!
//! RIM index `i` is compared with SPDM measurement block index `i + 1` (Hopper reports number
//! their blocks from 1; e.g. in the nvtrust sample, RIM index 4 equals block 5).
//!
//! ## Signatures
//!
//! NVIDIA signs each RIM with an enveloped XML-DSig signature: ECDSA P-384 with SHA-384 over
//! the Canonical XML 1.1 form of `SignedInfo`, whose one `Reference` (`URI=""`) digests the
//! whole document without the `Signature` element. The signer's chain (leaf first) travels in
//! `KeyInfo/X509Data` and ends at NVIDIA's RIM root. [`Rim::parse_verified`] checks all of it;
//! a RIM that did not pass it must not be trusted as a reference value, so the verifier refuses
//! to appraise with one. Canonicalisation comes from the `xml-sec` crate; digests, signatures
//! and certificate paths from RustCrypto (`sha2`, `p384`) and [`crate::nvidia::chain`].
//!
//! The accepted profile is deliberately narrow, because XML-DSig's flexibility is where its
//! attacks live (signature wrapping, transforms that select other content): exactly one
//! `Signature`, a child of the root element; exactly one `Reference`, to the whole document
//! (`URI=""`); transforms exactly `enveloped-signature` then an inclusive canonicalisation;
//! SHA-384 digests and ECDSA-SHA384 signatures; no comments, no XPath. The measurements are
//! read from the very document tree whose digest was checked, so what is verified and what
//! is used cannot differ.

use crate::nvidia::chain::{CertChain, ChainError};
use crate::nvidia::spdm::SpdmReport;
use base64::Engine as _;
use p384::ecdsa::signature::Verifier as _;
use sha2::{Digest, Sha384};
use xml_sec::c14n::{canonicalize, C14nAlgorithm, C14nMode};
use xml_sec::{Document, Node};

/// SWID tag namespace.
pub const SWID_NS: &str = "http://standards.iso.org/iso/19770/-2/2015/schema.xsd";
/// Namespace of the `HashN` attributes.
pub const SHA384_NS: &str = "http://www.w3.org/2001/04/xmlenc#sha384";
/// XML-DSig namespace.
pub const XMLDSIG_NS: &str = "http://www.w3.org/2000/09/xmldsig#";
/// Canonical XML 1.1 (what NVIDIA's RIMs use).
pub const C14N11: &str = "http://www.w3.org/2006/12/xml-c14n11";
/// Canonical XML 1.0.
pub const C14N10: &str = "http://www.w3.org/TR/2001/REC-xml-c14n-20010315";
/// ECDSA with SHA-384 (RFC 6931).
pub const ECDSA_SHA384: &str = "http://www.w3.org/2001/04/xmldsig-more#ecdsa-sha384";
/// SHA-384 digest method (RFC 6931).
pub const DIGEST_SHA384: &str = "http://www.w3.org/2001/04/xmldsig-more#sha384";
/// The enveloped-signature transform.
pub const ENVELOPED_SIGNATURE: &str = "http://www.w3.org/2000/09/xmldsig#enveloped-signature";

/// Upper bound on alternatives per index, to keep hostile files cheap.
const MAX_ALTERNATIVES: usize = 64;
/// Upper bound on XML nodes; real RIMs have a few hundred.
const MAX_NODES: u32 = 100_000;
/// Upper bound on certificates in `KeyInfo`.
const MAX_CERTS: usize = 8;

/// Why a RIM could not be parsed or its signature not accepted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RimError {
    /// Not well-formed XML (or uses a DTD).
    #[error("RIM is not well-formed XML: {0}")]
    Xml(String),
    /// A required element or attribute is missing or malformed.
    #[error("RIM {what}: {reason}")]
    Invalid {
        /// Which element/attribute.
        what: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The XML-DSig signature is missing or does not verify.
    #[error("RIM signature")]
    Signature(#[from] RimSignatureError),
}

/// Why a RIM's XML-DSig signature is not accepted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RimSignatureError {
    /// No `Signature` element.
    #[error("the RIM is not signed")]
    Unsigned,
    /// The signature's structure is outside the accepted profile (see the module docs).
    #[error("{0}")]
    Structure(String),
    /// An algorithm other than the profile's.
    #[error("unsupported {what} algorithm {uri:?}")]
    Unsupported {
        /// Which algorithm slot.
        what: &'static str,
        /// The URI found.
        uri: String,
    },
    /// Canonicalisation failed.
    #[error("canonicalisation failed: {0}")]
    Canonicalization(String),
    /// The document's digest differs from the signed `DigestValue`: the content was changed.
    #[error("digest mismatch: the RIM content is not what was signed")]
    DigestMismatch,
    /// `SignatureValue` does not verify over `SignedInfo` with the signer's key.
    #[error("signature value does not verify with the signer certificate's key")]
    BadSignature,
    /// The signer's certificate chain does not verify up to a configured RIM root.
    #[error("signer certificate chain")]
    Chain(#[from] ChainError),
}

/// One golden measurement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RimMeasurement {
    /// RIM index (0-based; report block index − 1).
    pub index: u32,
    /// Resource name (`HashedMeasurement_1_FSP`).
    pub name: String,
    /// Whether the verifier must compare this index.
    pub active: bool,
    /// Acceptable SHA-384 values.
    pub alternatives: Vec<[u8; 48]>,
}

/// Who signed a RIM whose signature verified, and when that check stays valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RimSigner {
    /// Subject of the signing certificate (RFC 4514 string).
    pub subject: String,
    /// Latest notBefore on the signer's path, Unix seconds.
    pub valid_from: u64,
    /// Earliest notAfter on the signer's path, Unix seconds: after this the RIM is no longer
    /// an acceptable reference (NVIDIA publishes a re-signed one).
    pub valid_until: u64,
}

/// What is known about a RIM's signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RimSignature {
    /// The file has no `Signature` element.
    Absent,
    /// The file has one, but it was parsed with [`Rim::parse`], which does not check it.
    NotVerified,
    /// [`Rim::parse_verified`] checked it.
    Verified(RimSigner),
}

/// A parsed RIM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rim {
    /// `SoftwareIdentity/@name` (`GH100`).
    pub name: String,
    /// `SoftwareIdentity/@version`.
    pub version: String,
    /// `SoftwareIdentity/@tagId`.
    pub tag_id: String,
    /// `Meta/@product`.
    pub product: String,
    /// `Meta/@colloquialVersion`: the VBIOS (`96.00.5E.00.01`) or driver (`545.00`) version.
    pub colloquial_version: String,
    /// `Meta/@edition`.
    pub edition: String,
    /// Measurements in file order.
    pub measurements: Vec<RimMeasurement>,
    signature: RimSignature,
}

/// Result of comparing a report with a RIM (active indices only).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RimComparison {
    /// RIM indices whose report value equals one of the alternatives.
    pub matched: Vec<u32>,
    /// RIM indices whose report value differs.
    pub mismatched: Vec<u32>,
    /// RIM indices with no corresponding block in the report.
    pub missing: Vec<u32>,
}

impl RimComparison {
    /// True when every active index matched.
    pub fn is_match(&self) -> bool {
        self.mismatched.is_empty() && self.missing.is_empty()
    }
}

fn is(node: Node<'_, '_>, ns: &str, local: &str) -> bool {
    node.is_element() && node.tag_name().namespace() == Some(ns) && node.tag_name().name() == local
}

fn child<'a, 'i>(node: Node<'a, 'i>, ns: &str, local: &str) -> Option<Node<'a, 'i>> {
    node.children().find(|n| is(*n, ns, local))
}

fn attr<'a>(node: Node<'a, '_>, name: &str, what: &'static str) -> Result<&'a str, RimError> {
    node.attribute(name).ok_or_else(|| RimError::Invalid {
        what,
        reason: format!("missing attribute {name}"),
    })
}

fn parse_document(xml: &str) -> Result<Document<'_>, RimError> {
    let options = xml_sec::ParsingOptions {
        allow_dtd: false,
        nodes_limit: MAX_NODES,
    };
    Document::parse_with_options(xml, options).map_err(|e| RimError::Xml(e.to_string()))
}

impl Rim {
    /// Parse a `.swidtag` document **without** checking its signature: for inspecting files.
    /// Reference values must come from [`Rim::parse_verified`].
    pub fn parse(xml: &str) -> Result<Self, RimError> {
        let doc = parse_document(xml)?;
        let signature = if find_signatures(&doc).is_empty() {
            RimSignature::Absent
        } else {
            RimSignature::NotVerified
        };
        Self::from_document(&doc, signature)
    }

    /// Parse a `.swidtag` document and verify its XML-DSig signature at `now` (Unix seconds),
    /// with the signer's chain ending at one of `roots` (DER certificates: NVIDIA's RIM root,
    /// "NVIDIA CoRIM signing Root CA", in production).
    pub fn parse_verified(xml: &str, roots: &[Vec<u8>], now: u64) -> Result<Self, RimError> {
        let doc = parse_document(xml)?;
        let signer = verify_signature(&doc, roots, now)?;
        Self::from_document(&doc, RimSignature::Verified(signer))
    }

    fn from_document(doc: &Document<'_>, signature: RimSignature) -> Result<Self, RimError> {
        let root = doc.root_element();
        if !is(root, SWID_NS, "SoftwareIdentity") {
            return Err(RimError::Invalid {
                what: "root element",
                reason: "not a SWID SoftwareIdentity".into(),
            });
        }
        let meta = child(root, SWID_NS, "Meta").ok_or_else(|| RimError::Invalid {
            what: "Meta",
            reason: "missing".into(),
        })?;
        let payload = child(root, SWID_NS, "Payload").ok_or_else(|| RimError::Invalid {
            what: "Payload",
            reason: "missing".into(),
        })?;
        let mut measurements = Vec::new();
        for res in payload.children().filter(|n| is(*n, SWID_NS, "Resource")) {
            if res.attribute("type") != Some("Measurement") {
                continue;
            }
            measurements.push(parse_measurement(res)?);
        }
        let mut seen = std::collections::BTreeSet::new();
        for m in &measurements {
            if !seen.insert(m.index) {
                return Err(RimError::Invalid {
                    what: "Resource",
                    reason: format!("duplicate index {}", m.index),
                });
            }
        }
        Ok(Self {
            name: attr(root, "name", "SoftwareIdentity")?.to_string(),
            version: attr(root, "version", "SoftwareIdentity")?.to_string(),
            tag_id: attr(root, "tagId", "SoftwareIdentity")?.to_string(),
            product: attr(meta, "product", "Meta")?.to_string(),
            colloquial_version: attr(meta, "colloquialVersion", "Meta")?.to_string(),
            edition: meta.attribute("edition").unwrap_or_default().to_string(),
            measurements,
            signature,
        })
    }

    /// Whether the file carries an XML-DSig `Signature` element (verified or not).
    pub fn has_signature(&self) -> bool {
        self.signature != RimSignature::Absent
    }

    /// What is known about the signature.
    pub fn signature(&self) -> &RimSignature {
        &self.signature
    }

    /// The signer, when [`Rim::parse_verified`] checked the signature.
    pub fn signer(&self) -> Option<&RimSigner> {
        match &self.signature {
            RimSignature::Verified(s) => Some(s),
            _ => None,
        }
    }

    /// Compare the report's blocks with the active golden values.
    pub fn compare(&self, report: &SpdmReport) -> RimComparison {
        let mut c = RimComparison::default();
        for m in self.measurements.iter().filter(|m| m.active) {
            let block = u8::try_from(m.index + 1).ok().and_then(|i| report.block(i));
            match block {
                None => c.missing.push(m.index),
                Some(b)
                    if m.alternatives
                        .iter()
                        .any(|a| a.as_slice() == b.value.as_slice()) =>
                {
                    c.matched.push(m.index)
                }
                Some(_) => c.mismatched.push(m.index),
            }
        }
        c
    }
}

fn parse_measurement(res: Node<'_, '_>) -> Result<RimMeasurement, RimError> {
    let bad = |reason: String| RimError::Invalid {
        what: "Resource",
        reason,
    };
    let index: u32 = attr(res, "index", "Resource")?
        .parse()
        .map_err(|_| bad("index is not a non-negative integer".into()))?;
    if index > 254 {
        return Err(bad(format!("index {index} out of the SPDM range")));
    }
    let active = match attr(res, "active", "Resource")? {
        "True" | "true" => true,
        "False" | "false" => false,
        other => return Err(bad(format!("active = {other:?}"))),
    };
    let n: usize = attr(res, "alternatives", "Resource")?
        .parse()
        .map_err(|_| bad("alternatives is not an integer".into()))?;
    if n == 0 || n > MAX_ALTERNATIVES {
        return Err(bad(format!("index {index}: {n} alternatives")));
    }
    let mut alternatives = Vec::with_capacity(n);
    for i in 0..n {
        let name = format!("Hash{i}");
        let h = res
            .attribute((Some(SHA384_NS), name.as_str()))
            .ok_or_else(|| bad(format!("index {index}: missing {name}")))?;
        let bytes = hex::decode(h).map_err(|_| bad(format!("index {index}: {name} is not hex")))?;
        let arr = <[u8; 48]>::try_from(bytes.as_slice())
            .map_err(|_| bad(format!("index {index}: {name} is not 48 bytes")))?;
        alternatives.push(arr);
    }
    Ok(RimMeasurement {
        index,
        name: res.attribute("name").unwrap_or_default().to_string(),
        active,
        alternatives,
    })
}

fn find_signatures<'a, 'i>(doc: &'a Document<'i>) -> Vec<Node<'a, 'i>> {
    doc.descendants()
        .filter(|n| is(*n, XMLDSIG_NS, "Signature"))
        .collect()
}

fn structure(msg: impl Into<String>) -> RimSignatureError {
    RimSignatureError::Structure(msg.into())
}

/// The element children of `node` (whitespace between them is allowed, nothing else).
fn elements<'a, 'i>(node: Node<'a, 'i>) -> Result<Vec<Node<'a, 'i>>, RimSignatureError> {
    let mut out = Vec::new();
    for c in node.children() {
        if c.is_element() {
            out.push(c);
        } else if c.is_text() {
            if !c.text().unwrap_or_default().trim().is_empty() {
                return Err(structure(format!(
                    "unexpected text inside {}",
                    node.tag_name().name()
                )));
            }
        } else if !c.is_comment() {
            return Err(structure(format!(
                "unexpected node inside {}",
                node.tag_name().name()
            )));
        }
    }
    Ok(out)
}

/// The single element child named `local` (XML-DSig namespace) in `nodes`, at `position`.
fn expect<'a, 'i>(
    nodes: &[Node<'a, 'i>],
    position: usize,
    local: &str,
) -> Result<Node<'a, 'i>, RimSignatureError> {
    nodes
        .get(position)
        .filter(|n| is(**n, XMLDSIG_NS, local))
        .copied()
        .ok_or_else(|| structure(format!("expected ds:{local} at position {position}")))
}

fn algorithm<'a>(node: Node<'a, '_>) -> Result<&'a str, RimSignatureError> {
    node.attribute("Algorithm").ok_or_else(|| {
        structure(format!(
            "ds:{} has no Algorithm attribute",
            node.tag_name().name()
        ))
    })
}

/// The canonicalisations the profile accepts: inclusive, without comments.
fn c14n_algorithm(uri: &str, what: &'static str) -> Result<C14nAlgorithm, RimSignatureError> {
    let mode = match uri {
        C14N11 => C14nMode::Inclusive1_1,
        C14N10 => C14nMode::Inclusive1_0,
        other => {
            return Err(RimSignatureError::Unsupported {
                what,
                uri: other.to_string(),
            })
        }
    };
    Ok(C14nAlgorithm::new(mode, false))
}

fn decode_b64(node: Node<'_, '_>, what: &str) -> Result<Vec<u8>, RimSignatureError> {
    // XML-DSig base64 may be wrapped over several lines.
    let text: String = node
        .children()
        .filter_map(|c| c.text())
        .collect::<String>()
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    base64::engine::general_purpose::STANDARD
        .decode(text.as_bytes())
        .map_err(|_| structure(format!("{what} is not base64")))
}

/// Canonical bytes of the subtree at `apex`, excluding the subtree at `exclude`.
fn canonical_subset(
    doc: &Document<'_>,
    apex: Option<Node<'_, '_>>,
    exclude: Option<Node<'_, '_>>,
    algo: &C14nAlgorithm,
) -> Result<Vec<u8>, RimSignatureError> {
    let apex_id = apex.map(|n| n.id());
    let exclude_id = exclude.map(|n| n.id());
    let select = |n: Node<'_, '_>| {
        let within = |id| n.id() == id || n.ancestors().any(|a| a.id() == id);
        apex_id.is_none_or(within) && !exclude_id.is_some_and(within)
    };
    let mut out = Vec::new();
    canonicalize(doc, Some(&select), algo, &mut out)
        .map_err(|e| RimSignatureError::Canonicalization(e.to_string()))?;
    Ok(out)
}

/// Check the enveloped signature of `doc` (see the module docs for the profile): the
/// reference's digest over the document without its signature, the signer's chain up to
/// `roots` at `now`, and the signature over the canonical SignedInfo.
fn verify_signature(
    doc: &Document<'_>,
    roots: &[Vec<u8>],
    now: u64,
) -> Result<RimSigner, RimSignatureError> {
    let signature = enveloped_signature(doc)?;
    let parts = elements(signature)?;
    let signed_info = expect(&parts, 0, "SignedInfo")?;
    let signature_value = expect(&parts, 1, "SignatureValue")?;
    let key_info = expect(&parts, 2, "KeyInfo")?;
    if parts.len() > 3 {
        return Err(structure("ds:Object or other content after ds:KeyInfo"));
    }
    let (c14n, reference) = parse_signed_info(signed_info)?;
    let (reference_c14n, digest_value) = parse_reference(reference)?;
    // The reference: the whole document minus the Signature element.
    let content = canonical_subset(doc, None, Some(signature), &reference_c14n)?;
    if Sha384::digest(&content).as_slice() != digest_value.as_slice() {
        return Err(RimSignatureError::DigestMismatch);
    }
    let chain = CertChain::from_der_list(&signer_certificates(key_info)?)?;
    let verified = chain.verify(roots, now)?;
    let signed = canonical_subset(doc, Some(signed_info), None, &c14n)?;
    let sig_bytes = decode_b64(signature_value, "SignatureValue")?;
    // XML-DSig ECDSA values are r || s, 48 bytes each for P-384 (RFC 4050 §3.3).
    let sig = p384::ecdsa::Signature::from_slice(&sig_bytes)
        .map_err(|_| RimSignatureError::BadSignature)?;
    verified
        .leaf_key
        .verify(&signed, &sig)
        .map_err(|_| RimSignatureError::BadSignature)?;
    Ok(RimSigner {
        subject: chain.leaf_subject(),
        valid_from: verified.valid_from,
        valid_until: verified.valid_until,
    })
}

/// The document's one Signature element, which must be a child of the root (enveloped).
fn enveloped_signature<'a, 'i>(doc: &'a Document<'i>) -> Result<Node<'a, 'i>, RimSignatureError> {
    let signature = match find_signatures(doc).as_slice() {
        [] => return Err(RimSignatureError::Unsigned),
        [one] => *one,
        more => {
            return Err(structure(format!(
                "{} Signature elements; exactly one is accepted",
                more.len()
            )))
        }
    };
    if signature.parent_element() != Some(doc.root_element()) {
        return Err(structure(
            "the Signature element is not a child of the root element (not enveloped)",
        ));
    }
    Ok(signature)
}

/// SignedInfo: its canonicalization, ECDSA-SHA384 as the signature method, and its one
/// Reference, which must cover the whole document.
fn parse_signed_info<'a, 'i>(
    signed_info: Node<'a, 'i>,
) -> Result<(C14nAlgorithm, Node<'a, 'i>), RimSignatureError> {
    let si = elements(signed_info)?;
    let c14n = c14n_algorithm(
        algorithm(expect(&si, 0, "CanonicalizationMethod")?)?,
        "canonicalization",
    )?;
    let sig_method = algorithm(expect(&si, 1, "SignatureMethod")?)?;
    if sig_method != ECDSA_SHA384 {
        return Err(RimSignatureError::Unsupported {
            what: "signature",
            uri: sig_method.to_string(),
        });
    }
    let reference = expect(&si, 2, "Reference")?;
    if si.len() != 3 {
        return Err(structure("SignedInfo must hold exactly one ds:Reference"));
    }
    if reference.attribute("URI") != Some("") {
        return Err(structure(
            "the Reference must cover the whole document (URI=\"\")",
        ));
    }
    Ok((c14n, reference))
}

/// The Reference: its transforms (enveloped-signature, then a canonicalization) and its
/// SHA-384 digest value.
fn parse_reference(reference: Node<'_, '_>) -> Result<(C14nAlgorithm, Vec<u8>), RimSignatureError> {
    let r = elements(reference)?;
    let transforms = elements(expect(&r, 0, "Transforms")?)?;
    let digest_method = algorithm(expect(&r, 1, "DigestMethod")?)?;
    let digest_value = decode_b64(expect(&r, 2, "DigestValue")?, "DigestValue")?;
    if r.len() != 3 {
        return Err(structure("unexpected content in ds:Reference"));
    }
    if digest_method != DIGEST_SHA384 {
        return Err(RimSignatureError::Unsupported {
            what: "digest",
            uri: digest_method.to_string(),
        });
    }
    let transform_uris = transforms
        .iter()
        .map(|t| {
            if is(*t, XMLDSIG_NS, "Transform") && elements(*t)?.is_empty() {
                algorithm(*t)
            } else {
                Err(structure(
                    "a ds:Transforms child is not a plain ds:Transform",
                ))
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    let reference_c14n = match transform_uris.as_slice() {
        [ENVELOPED_SIGNATURE, c] => c14n_algorithm(c, "transform")?,
        other => {
            return Err(structure(format!(
                "transforms must be enveloped-signature then a canonicalization, found {other:?}"
            )))
        }
    };
    Ok((reference_c14n, digest_value))
}

/// The signer's certificates from KeyInfo/X509Data, leaf first (1 to [`MAX_CERTS`]).
fn signer_certificates(key_info: Node<'_, '_>) -> Result<Vec<Vec<u8>>, RimSignatureError> {
    let x509_data = elements(key_info)?
        .into_iter()
        .find(|n| is(*n, XMLDSIG_NS, "X509Data"))
        .ok_or_else(|| structure("ds:KeyInfo has no ds:X509Data"))?;
    let certs = elements(x509_data)?
        .into_iter()
        .filter(|n| is(*n, XMLDSIG_NS, "X509Certificate"))
        .map(|n| decode_b64(n, "X509Certificate"))
        .collect::<Result<Vec<_>, _>>()?;
    if certs.is_empty() || certs.len() > MAX_CERTS {
        return Err(structure(format!(
            "{} signer certificates; 1 to {MAX_CERTS} are accepted",
            certs.len()
        )));
    }
    Ok(certs)
}

/// Sign a RIM the way NVIDIA does (see the module docs), for simulators and tests: inserts
/// the enveloped `Signature` as the last child of the root element. `chain` is leaf first;
/// `key` must belong to its leaf. Only [`crate::nvidia::sim`] signs RIMs, hence the feature.
#[cfg(feature = "sim")]
pub(crate) fn sign_enveloped(
    xml: &str,
    key: &p384::ecdsa::SigningKey,
    chain: &[Vec<u8>],
) -> Result<String, RimError> {
    use p384::ecdsa::signature::Signer as _;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let algo = C14nAlgorithm::new(C14nMode::Inclusive1_1, false);
    let digest = {
        let doc = parse_document(xml)?;
        let content = canonical_subset(&doc, None, None, &algo)?;
        Sha384::digest(content)
    };
    let close = xml.rfind("</").ok_or_else(|| RimError::Invalid {
        what: "root element",
        reason: "no end tag to insert the signature before".into(),
    })?;
    let certs: String = chain
        .iter()
        .map(|c| format!("<ds:X509Certificate>{}</ds:X509Certificate>", b64(c)))
        .collect();
    const PLACEHOLDER: &str = "@SIGNATURE@";
    let signature = format!(
        "<ds:Signature xmlns:ds=\"{XMLDSIG_NS}\"><ds:SignedInfo>\
<ds:CanonicalizationMethod Algorithm=\"{C14N11}\"/>\
<ds:SignatureMethod Algorithm=\"{ECDSA_SHA384}\"/>\
<ds:Reference URI=\"\"><ds:Transforms>\
<ds:Transform Algorithm=\"{ENVELOPED_SIGNATURE}\"/><ds:Transform Algorithm=\"{C14N11}\"/>\
</ds:Transforms><ds:DigestMethod Algorithm=\"{DIGEST_SHA384}\"/>\
<ds:DigestValue>{}</ds:DigestValue></ds:Reference></ds:SignedInfo>\
<ds:SignatureValue>{PLACEHOLDER}</ds:SignatureValue>\
<ds:KeyInfo><ds:X509Data>{certs}</ds:X509Data></ds:KeyInfo></ds:Signature>",
        b64(&digest)
    );
    let unsigned = format!("{}{signature}{}", &xml[..close], &xml[close..]);
    let signed_info = {
        let doc = parse_document(&unsigned)?;
        let sig = find_signatures(&doc);
        let si = sig
            .first()
            .and_then(|s| child(*s, XMLDSIG_NS, "SignedInfo"))
            .ok_or_else(|| RimError::Invalid {
                what: "Signature",
                reason: "inserted signature not found".into(),
            })?;
        canonical_subset(&doc, Some(si), None, &algo)?
    };
    let value: p384::ecdsa::Signature = key.sign(&signed_info);
    Ok(unsigned.replacen(PLACEHOLDER, &b64(&value.to_bytes()), 1))
}
