//! Confidential-computing attestation of the simulated GPUs: each CC-capable GPU is an
//! [`attest::nvidia::sim::SimGpu`] (a P-384 root → ICA → leaf chain carrying the FWID) that
//! signs SPDM 1.1 `GET_MEASUREMENTS` reports over the nonce NVML is given.
//!
//! Everything is deterministic from `NVML_SIM_SEED` and the device index, so a test or
//! `hostd dev` can compute, without loading the library, what a verifier must trust:
//!
//! * [`root_bundle_pem`] — the roots of every CC-capable GPU of a fleet (one PEM certificate
//!   per GPU: each simulated GPU has a root of its own). The library also writes this bundle
//!   to the path in `NVML_SIM_ATTEST_ROOT_OUT` at `nvmlInit`, when that variable is set.
//! * [`rims`] — NVIDIA-style RIM SWID tags (one per VBIOS version, one per driver version)
//!   whose golden values are the measurements the simulated GPUs report, signed (XML-DSig,
//!   as NVIDIA signs its RIMs) by a simulated RIM publisher whose root is [`rim_root_pem`].
//!
//! Measurement blocks: 1–4 are derived from the VBIOS version, 5–8 from the driver version
//! (SHA-384 over a label, the version and the block index), so every GPU of a model under one
//! driver reports the same values, as real boards do. RIM index `i` covers block `i + 1`.
#![forbid(unsafe_code)]

use attest::nvidia::sim::{ReportSpec, SimError, SimGpu, SimRimSigner};
use sha2::{Digest, Sha256, Sha384};

use crate::config::SimConfig;

/// Certificates of the simulated chains are valid from 2020-01-01 …
pub const NOT_BEFORE: u64 = 1_577_836_800;
/// … to 2100-01-01 (Unix seconds).
pub const NOT_AFTER: u64 = 4_102_444_800;

/// Measurement blocks derived from the VBIOS version.
const VBIOS_BLOCKS: std::ops::RangeInclusive<u8> = 1..=4;
/// Measurement blocks derived from the driver version.
const DRIVER_BLOCKS: std::ops::RangeInclusive<u8> = 5..=8;

/// The seed of device `index`'s chain.
pub fn device_seed(seed: &str, index: u32) -> Vec<u8> {
    let mut s = b"nvml-sim/attestation/".to_vec();
    s.extend_from_slice(seed.as_bytes());
    s.push(0);
    s.extend_from_slice(&index.to_be_bytes());
    s
}

/// The simulated attestation identity of device `index`.
pub fn sim_gpu(seed: &str, index: u32) -> Result<SimGpu, SimError> {
    SimGpu::new(&device_seed(seed, index), NOT_BEFORE, NOT_AFTER)
}

/// The simulated publisher that signs this fleet's RIMs.
pub fn rim_signer(seed: &str) -> Result<SimRimSigner, SimError> {
    let mut s = b"nvml-sim/rim-signer/".to_vec();
    s.extend_from_slice(seed.as_bytes());
    SimRimSigner::new(&s, NOT_BEFORE, NOT_AFTER)
}

/// The root certificate RIMs from [`rims`] chain to, as PEM.
pub fn rim_root_pem(config: &SimConfig) -> Result<String, SimError> {
    Ok(pem(rim_signer(&config.seed)?.root_der()))
}

/// The 8 bytes of opaque field 6 for a printed VBIOS version `AA.BB.CC.DD.EE` (hex): the
/// low little-endian word holds `AABBCCDD`, the high word `EE` (see docs/attestation.md §5).
pub fn vbios_bytes(vbios: &str) -> Option<[u8; 8]> {
    let parts: Vec<u8> = vbios
        .split('.')
        .map(|p| u8::from_str_radix(p, 16))
        .collect::<Result<_, _>>()
        .ok()?;
    let [a, b, c, d, e] = parts.as_slice() else {
        return None;
    };
    Some([*d, *c, *b, *a, *e, 0, 0, 0])
}

fn block_value(label: &str, version: &str, index: u8) -> Vec<u8> {
    let mut h = Sha384::new();
    h.update(b"nvml-sim/measurement/");
    h.update(label.as_bytes());
    h.update([0]);
    h.update(version.as_bytes());
    h.update([index]);
    h.finalize().to_vec()
}

/// The measurement blocks a GPU with this VBIOS under this driver reports.
pub fn measurements(vbios: &str, driver: &str) -> Vec<(u8, Vec<u8>)> {
    VBIOS_BLOCKS
        .map(|i| (i, block_value("vbios", vbios, i)))
        .chain(DRIVER_BLOCKS.map(|i| (i, block_value("driver", driver, i))))
        .collect()
}

/// `request || response` signed by `gpu` over `nonce`.
pub fn report(
    gpu: &SimGpu,
    nonce: [u8; 32],
    vbios: &str,
    driver: &str,
) -> Result<Vec<u8>, SimError> {
    let vbios_version = vbios_bytes(vbios).ok_or(SimError::Layout("VBIOS version format"))?;
    let responder: [u8; 32] = Sha256::digest([b"responder".as_slice(), &nonce].concat()).into();
    gpu.report(&ReportSpec {
        nonce,
        responder_nonce: responder,
        measurements: measurements(vbios, driver),
        driver_version: driver.to_string(),
        vbios_version,
        extra_opaque: Vec::new(),
        fwid_override: None,
    })
}

/// PEM armour of one DER certificate.
pub fn pem(der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

/// PEM certificates, concatenated, leaf first: NVML's certificate-chain format.
pub fn chain_pem(chain: &[Vec<u8>]) -> String {
    chain.iter().map(|c| pem(c)).collect()
}

/// The roots of every CC-capable GPU of the fleet `config` describes, as one PEM bundle.
pub fn root_bundle_pem(config: &SimConfig) -> Result<String, SimError> {
    let mut out = String::new();
    for (i, m) in config.gpus.iter().enumerate() {
        if m.cc_capable {
            let gpu = sim_gpu(&config.seed, i as u32)?;
            out.push_str(&pem(gpu.root_der()));
        }
    }
    Ok(out)
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn rim_xml(kind: &str, product: &str, version: &str, blocks: &[(u8, Vec<u8>)]) -> String {
    let v = xml_escape(version);
    let p = xml_escape(product);
    let mut resources = String::new();
    for (index, value) in blocks {
        resources.push_str(&format!(
            "    <Resource type=\"Measurement\" index=\"{}\" active=\"True\" alternatives=\"1\" name=\"Measurement_{}\" SHA384:Hash0=\"{}\"/>\n",
            index - 1,
            index - 1,
            hex::encode(value)
        ));
    }
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<SoftwareIdentity xmlns="http://standards.iso.org/iso/19770/-2/2015/schema.xsd" xmlns:SHA384="http://www.w3.org/2001/04/xmlenc#sha384" name="Simulated {kind} {p}" version="{v}" tagId="nvml-sim-{kind}-{v}">
  <Meta product="{p}" colloquialVersion="{v}" edition="simulated"/>
  <Payload>
{resources}  </Payload>
</SoftwareIdentity>
"#
    )
}

/// RIMs for the fleet `config` describes: one per distinct VBIOS version of a CC-capable
/// model and one for the driver, as `(file name, SWID tag XML)`, each signed by
/// [`rim_signer`].
pub fn rims(config: &SimConfig) -> Result<Vec<(String, String)>, SimError> {
    let signer = rim_signer(&config.seed)?;
    let mut out: Vec<(String, String)> = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for m in config.gpus.iter().filter(|m| m.cc_capable) {
        if seen.insert(m.vbios) {
            let blocks: Vec<_> = measurements(m.vbios, &config.driver_version)
                .into_iter()
                .filter(|(i, _)| VBIOS_BLOCKS.contains(i))
                .collect();
            out.push((
                format!("vbios-{}.swidtag", m.vbios),
                signer.sign(&rim_xml("VBIOS", m.name, m.vbios, &blocks))?,
            ));
        }
    }
    if !seen.is_empty() {
        let blocks: Vec<_> = measurements("", &config.driver_version)
            .into_iter()
            .filter(|(i, _)| DRIVER_BLOCKS.contains(i))
            .collect();
        out.push((
            format!("driver-{}.swidtag", config.driver_version),
            signer.sign(&rim_xml(
                "driver",
                "NVIDIA driver",
                &config.driver_version,
                &blocks,
            ))?,
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use attest::nvidia::verify_report;
    use attest::rim::Rim;

    fn config() -> SimConfig {
        SimConfig::from_vars(|k| match k {
            "NVML_SIM_GPUS" => Some("H100:2".into()),
            "NVML_SIM_CC" => Some("on".into()),
            _ => None,
        })
        .unwrap()
    }

    #[test]
    fn vbios_layout_matches_the_documented_example() {
        assert_eq!(
            vbios_bytes("96.00.9F.00.01"),
            Some([0x00, 0x9f, 0x00, 0x96, 0x01, 0, 0, 0])
        );
        assert_eq!(vbios_bytes("96.00.9F.00"), None);
        assert_eq!(vbios_bytes("96.00.9G.00.01"), None);
    }

    #[test]
    fn reports_verify_against_the_published_root_and_match_the_rims() {
        let c = config();
        let gpu = sim_gpu(&c.seed, 1).unwrap();
        let nonce = [7u8; 32];
        let r = report(&gpu, nonce, c.gpus[1].vbios, &c.driver_version).unwrap();
        let roots_pem = root_bundle_pem(&c).unwrap();
        assert_eq!(roots_pem.matches("BEGIN CERTIFICATE").count(), 2);
        let roots = vec![
            sim_gpu(&c.seed, 0).unwrap().root_der().to_vec(),
            gpu.root_der().to_vec(),
        ];
        let parsed = verify_report(&r, gpu.chain(), &roots, 1_800_000_000, &nonce).unwrap();
        // Another nonce fails; another device's root alone does not anchor this chain.
        assert!(verify_report(&r, gpu.chain(), &roots, 1_800_000_000, &[8u8; 32]).is_err());
        assert!(verify_report(&r, gpu.chain(), &roots[..1], 1_800_000_000, &nonce).is_err());
        let rims = rims(&c).unwrap();
        let rim_root = rim_signer(&c.seed).unwrap().root_der().to_vec();
        assert!(rim_root_pem(&c).unwrap().contains("BEGIN CERTIFICATE"));
        assert_eq!(
            rims.len(),
            2,
            "one VBIOS RIM (one model) and one driver RIM"
        );
        for (_, xml) in &rims {
            let rim =
                Rim::parse_verified(xml, std::slice::from_ref(&rim_root), 1_800_000_000).unwrap();
            assert!(rim.signer().is_some());
            assert!(rim.compare(&parsed).is_match(), "{}", rim.tag_id);
            // The GPU roots do not vouch for RIMs.
            assert!(Rim::parse_verified(xml, &roots, 1_800_000_000).is_err());
        }
        // Deterministic from the seed.
        let mut sim = crate::sim::Simulation::new(c.clone(), 0);
        let via_sim = sim.attestation_report(1, nonce).unwrap();
        assert_eq!(via_sim, r);
        assert_eq!(sim.attestation_chain(1).unwrap(), gpu.chain());
        // CC toggled off through the control file: no more reports.
        let off = crate::config::Control::parse(r#"{"cc": "off"}"#).unwrap();
        sim.apply_control(&off, 1).unwrap();
        assert_eq!(sim.cc_mode(), crate::config::CcMode::Off);
        assert_eq!(
            sim.attestation_report(1, nonce),
            Err(crate::sim::SimError::NotSupported)
        );
        assert_eq!(sim_gpu(&c.seed, 1).unwrap().chain(), gpu.chain());
        assert_ne!(sim_gpu("other", 1).unwrap().chain(), gpu.chain());
    }
}
