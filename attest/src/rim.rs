//! NVIDIA Reference Integrity Manifests (TCG RIM as ISO/IEC 19770-2 SWID tags): the golden
//! SHA-384 value(s) for each GPU measurement index, one file per VBIOS version and one per
//! driver version.
//!
//! Parsing uses `roxmltree` (no DTDs, so no entity expansion). Element and attribute names are
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
//! **Not done:** the RIM's enveloped XML-DSig signature (ECDSA-P384 over C14N 1.1) is *not*
//! verified — that needs an XML canonicalisation implementation this crate does not have.
//! [`Rim::has_signature`] only reports whether a signature element is present; callers must
//! obtain RIM files from a trusted channel (e.g. the image build) until this is added.

use crate::nvidia::spdm::SpdmReport;

/// SWID tag namespace.
pub const SWID_NS: &str = "http://standards.iso.org/iso/19770/-2/2015/schema.xsd";
/// Namespace of the `HashN` attributes.
pub const SHA384_NS: &str = "http://www.w3.org/2001/04/xmlenc#sha384";
/// XML-DSig namespace.
pub const XMLDSIG_NS: &str = "http://www.w3.org/2000/09/xmldsig#";

/// Upper bound on alternatives per index, to keep hostile files cheap.
const MAX_ALTERNATIVES: usize = 64;

/// Why a RIM could not be parsed.
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
    has_signature: bool,
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

fn attr<'a>(
    node: roxmltree::Node<'a, '_>,
    name: &str,
    what: &'static str,
) -> Result<&'a str, RimError> {
    node.attribute(name).ok_or_else(|| RimError::Invalid {
        what,
        reason: format!("missing attribute {name}"),
    })
}

impl Rim {
    /// Parse a `.swidtag` document.
    pub fn parse(xml: &str) -> Result<Self, RimError> {
        let doc = roxmltree::Document::parse(xml).map_err(|e| RimError::Xml(e.to_string()))?;
        let root = doc.root_element();
        if !root.has_tag_name((SWID_NS, "SoftwareIdentity")) {
            return Err(RimError::Invalid {
                what: "root element",
                reason: "not a SWID SoftwareIdentity".into(),
            });
        }
        let meta = root
            .children()
            .find(|n| n.has_tag_name((SWID_NS, "Meta")))
            .ok_or_else(|| RimError::Invalid {
                what: "Meta",
                reason: "missing".into(),
            })?;
        let payload = root
            .children()
            .find(|n| n.has_tag_name((SWID_NS, "Payload")))
            .ok_or_else(|| RimError::Invalid {
                what: "Payload",
                reason: "missing".into(),
            })?;
        let mut measurements = Vec::new();
        for res in payload
            .children()
            .filter(|n| n.has_tag_name((SWID_NS, "Resource")))
        {
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
        let has_signature = root
            .children()
            .any(|n| n.has_tag_name((XMLDSIG_NS, "Signature")));
        Ok(Self {
            name: attr(root, "name", "SoftwareIdentity")?.to_string(),
            version: attr(root, "version", "SoftwareIdentity")?.to_string(),
            tag_id: attr(root, "tagId", "SoftwareIdentity")?.to_string(),
            product: attr(meta, "product", "Meta")?.to_string(),
            colloquial_version: attr(meta, "colloquialVersion", "Meta")?.to_string(),
            edition: meta.attribute("edition").unwrap_or_default().to_string(),
            measurements,
            has_signature,
        })
    }

    /// Whether the file carries an XML-DSig `Signature` element. The signature is **not
    /// verified** (see the module documentation).
    pub fn has_signature(&self) -> bool {
        self.has_signature
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

fn parse_measurement(res: roxmltree::Node<'_, '_>) -> Result<RimMeasurement, RimError> {
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
            .attribute((SHA384_NS, name.as_str()))
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
