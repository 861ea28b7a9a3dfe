//! A software attestation key producing TPM-shaped quotes, for tests and simulators only
//! (behind the `sim` feature, like `nvidia::sim`): it shows what a verifier accepts and lets
//! tests build every malformed variant a real TPM would never produce.

use super::{
    marshal_ecc_public, pcr_digest, put_tpm2b, quoted_pcr_selection, QuoteClaim,
    AK_TEMPLATE_ATTRIBUTES, QUOTED_PCRS, TPM_ALG_ECDSA, TPM_ALG_SHA256, TPM_GENERATED_VALUE,
    TPM_ST_ATTEST_QUOTE,
};
use p256::ecdsa::signature::Signer as _;
use p256::ecdsa::{Signature, SigningKey};

/// The fields of a TPMS_ATTEST of a quote, each settable so tests can break one at a time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuoteFields {
    /// `magic` (a TPM always writes [`TPM_GENERATED_VALUE`]).
    pub magic: u32,
    /// `type` ([`TPM_ST_ATTEST_QUOTE`]).
    pub st: u16,
    /// `qualifiedSigner`.
    pub qualified_signer: Vec<u8>,
    /// `extraData` (the nonce).
    pub extra_data: Vec<u8>,
    /// The marshalled TPML_PCR_SELECTION.
    pub selection: Vec<u8>,
    /// `pcrDigest`.
    pub pcr_digest: Vec<u8>,
}

impl QuoteFields {
    /// What a TPM would produce for `nonce` over PCRs 4, 7, 11, 12 holding `pcrs`.
    pub fn honest(nonce: &[u8], pcrs: &[[u8; 32]; QUOTED_PCRS.len()]) -> Self {
        Self {
            magic: TPM_GENERATED_VALUE,
            st: TPM_ST_ATTEST_QUOTE,
            qualified_signer: vec![0x00, 0x0b, 0x5a, 0x5a],
            extra_data: nonce.to_vec(),
            selection: quoted_pcr_selection(),
            pcr_digest: pcr_digest(pcrs).to_vec(),
        }
    }

    /// Marshal as TPMS_ATTEST (clock info and firmware version fixed).
    pub fn marshal(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&self.magic.to_be_bytes());
        out.extend_from_slice(&self.st.to_be_bytes());
        put_tpm2b(&mut out, &self.qualified_signer);
        put_tpm2b(&mut out, &self.extra_data);
        out.extend_from_slice(&123_456u64.to_be_bytes()); // clock
        out.extend_from_slice(&1u32.to_be_bytes()); // resetCount
        out.extend_from_slice(&0u32.to_be_bytes()); // restartCount
        out.push(1); // safe
        out.extend_from_slice(&0x2023_0001u64.to_be_bytes()); // firmwareVersion
        out.extend_from_slice(&self.selection);
        put_tpm2b(&mut out, &self.pcr_digest);
        out
    }
}

/// A software P-256 attestation key.
pub struct SoftAk {
    key: SigningKey,
}

impl std::fmt::Debug for SoftAk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SoftAk")
    }
}

impl SoftAk {
    /// A key from 32 seed bytes; `None` if they are not a valid P-256 scalar.
    pub fn from_seed(seed: &[u8; 32]) -> Option<Self> {
        SigningKey::from_slice(seed).ok().map(|key| Self { key })
    }

    /// Its TPMT_PUBLIC with the AK template's attributes.
    pub fn public_area(&self) -> Vec<u8> {
        self.public_area_with(AK_TEMPLATE_ATTRIBUTES)
    }

    /// Its TPMT_PUBLIC with other attributes.
    pub fn public_area_with(&self, attributes: u32) -> Vec<u8> {
        let point = self.key.verifying_key().to_sec1_point(false);
        let bytes = point.as_bytes();
        marshal_ecc_public(attributes, &bytes[1..33], &bytes[33..65])
    }

    /// A TPMT_SIGNATURE (ECDSA, SHA-256) over `attest`.
    pub fn sign(&self, attest: &[u8]) -> Vec<u8> {
        let sig: Signature = self.key.sign(attest);
        marshal_signature(&sig.to_bytes())
    }

    /// A quote over `fields`, carrying `pcrs` as the values of PCRs 4, 7, 11, 12.
    pub fn quote_with(
        &self,
        fields: &QuoteFields,
        pcrs: &[[u8; 32]; QUOTED_PCRS.len()],
    ) -> QuoteClaim {
        let attest = fields.marshal();
        QuoteClaim {
            signature: self.sign(&attest),
            attest,
            pcrs: QUOTED_PCRS
                .iter()
                .map(u8::to_string)
                .zip(pcrs.iter().copied())
                .collect(),
            event_log: None,
        }
    }

    /// An honest quote for `nonce` over `pcrs`.
    pub fn quote(&self, nonce: &[u8; 32], pcrs: &[[u8; 32]; QUOTED_PCRS.len()]) -> QuoteClaim {
        self.quote_with(&QuoteFields::honest(nonce, pcrs), pcrs)
    }
}

/// Marshal raw `r || s` (64 bytes) as TPMT_SIGNATURE.
pub fn marshal_signature(r_s: &[u8]) -> Vec<u8> {
    let (r, s) = r_s.split_at(r_s.len() / 2);
    let mut out = Vec::new();
    out.extend_from_slice(&TPM_ALG_ECDSA.to_be_bytes());
    out.extend_from_slice(&TPM_ALG_SHA256.to_be_bytes());
    put_tpm2b(&mut out, r);
    put_tpm2b(&mut out, s);
    out
}
