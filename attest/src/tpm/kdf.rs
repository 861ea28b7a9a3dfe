//! The TPM's key derivation functions (TPM 2.0 Library, Part 1, §11.4.10), with SHA-256, the
//! only name algorithm this project's keys use. Shared by the node's salted sessions (the
//! `tpm` crate) and by TPM2_MakeCredential here, so both sides derive keys the same way.

use hmac::{KeyInit, Mac};
use sha2_011::{Digest, Sha256};
use zeroize::Zeroizing;

type HmacSha256 = hmac::Hmac<Sha256>;

/// SHA-256's size: the longest output one round of either KDF gives.
pub const DIGEST: usize = 32;

/// HMAC-SHA-256 keyed with `key` (HMAC takes keys of any length).
pub fn hmac_sha256(key: &[u8]) -> hmac::Hmac<Sha256> {
    <HmacSha256 as KeyInit>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"))
}

/// SP 800-108 counter-mode KDF with HMAC-SHA-256, as the TPM's KDFa, for `N` bytes (at most
/// [`DIGEST`], one round): the first `N` bytes of
/// HMAC(key, [1]₃₂ ‖ label ‖ 0 ‖ contextU ‖ contextV ‖ [8N]₃₂). `label` is given without its
/// terminating NUL, which this adds.
pub fn kdfa<const N: usize>(key: &[u8], label: &[u8], u: &[u8], v: &[u8]) -> Zeroizing<[u8; N]> {
    const { assert!(N <= DIGEST) };
    let mut mac = hmac_sha256(key);
    mac.update(&1u32.to_be_bytes());
    mac.update(label);
    mac.update(&[0]);
    mac.update(u);
    mac.update(v);
    mac.update(&((N * 8) as u32).to_be_bytes());
    let block = Zeroizing::new(<[u8; DIGEST]>::from(mac.finalize().into_bytes()));
    let mut out = Zeroizing::new([0; N]);
    out.copy_from_slice(&block[..N]);
    out
}

/// SP 800-56A concatenation KDF with SHA-256, as the TPM's KDFe, for 256 bits:
/// SHA-256([1]₃₂ ‖ Z ‖ use ‖ 0 ‖ partyU ‖ partyV). `usage` is given without its NUL.
pub fn kdfe(z: &[u8], usage: &[u8], u: &[u8], v: &[u8]) -> Zeroizing<[u8; DIGEST]> {
    let mut h = Sha256::new();
    h.update(1u32.to_be_bytes());
    h.update(z);
    h.update(usage);
    h.update([0]);
    h.update(u);
    h.update(v);
    Zeroizing::new(h.finalize().into())
}

/// Known answers computed apart from this code (Python's `hmac` and `hashlib` over the
/// formulas of Part 1, §11.4.10).
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kdfa_is_the_counter_mode_hmac_of_part_1() {
        let key: Vec<u8> = (0..32).collect();
        let out = kdfa::<32>(&key, b"ATH", &[0xaa; 32], &[0xbb; 16]);
        assert_eq!(
            hex::encode(&out[..]),
            "ee3e2094530c3664d14c49fbbd4834a194be38f2e3935e6bd8198a66e911dfd3"
        );
    }

    #[test]
    fn kdfa_for_128_bits_hashes_128_in() {
        let key: Vec<u8> = (0..32).collect();
        let out = kdfa::<16>(&key, b"STORAGE", &[0xaa; 32], &[0xbb; 16]);
        assert_eq!(hex::encode(&out[..]), "e4da326f28c56d535401e27035cd3d0f");
    }

    #[test]
    fn kdfe_is_the_concatenation_kdf_of_part_1() {
        let out = kdfe(&[0x11; 32], b"SECRET", &[0x22; 32], &[0x33; 32]);
        assert_eq!(
            hex::encode(&out[..]),
            "99a86499d6542b6d5aaece21270df5f68372917b988146068ee79daeebe28427"
        );
    }

    /// KDFa for fewer bits is not a prefix of the 256-bit output: the bit count is hashed in.
    #[test]
    fn kdfa_binds_the_output_length() {
        let long = kdfa::<32>(b"key", b"STORAGE", b"u", b"");
        let short = kdfa::<16>(b"key", b"STORAGE", b"u", b"");
        assert_ne!(&long[..16], &short[..]);
    }

    /// The label's NUL separates it from contextU: moving a byte across changes the key.
    #[test]
    fn kdfa_separates_label_and_context() {
        assert_ne!(
            *kdfa::<32>(b"k", b"AB", b"C", b""),
            *kdfa::<32>(b"k", b"A", b"BC", b"")
        );
    }
}
