//! Secret sharing with a TPM key (TPM 2.0 Library, Part 1, Annexes B.10 and C.6): a 32-byte
//! value that the caller knows and only the TPM holding the key's private half can recover.
//! TPM2_MakeCredential's seed (label `IDENTITY`) and a salted session's salt (label `SECRET`)
//! are shared this way, with SHA-256 as the key's name algorithm:
//! - under an RSA key, the value is random and sent as RSA-OAEP(SHA-256, label with its NUL);
//! - under an ECC P-256 key, an ephemeral key's ECDH with it gives Z, the value is
//!   `KDFe(Z, label, ephemeral.x, key.x)`, and the ephemeral point is sent (TPMS_ECC_POINT).

use super::kdf::{kdfe, DIGEST};
use super::put_tpm2b;
use rsa::rand_core::TryCryptoRng;
use zeroize::Zeroizing;

/// The shared value.
pub type Seed = Zeroizing<[u8; DIGEST]>;

/// Why a value could not be shared.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SecretError {
    /// The random generator failed.
    #[error("the random generator failed")]
    Random,
    /// RSA-OAEP encryption under the key failed (its modulus is not a usable RSA key).
    #[error("RSA-OAEP encryption under the TPM's key failed")]
    Rsa(#[source] rsa::Error),
    /// The ECC key's point is not on P-256.
    #[error("the TPM key's point is not on P-256")]
    EccPoint,
}

/// A random value and its RSA-OAEP encryption under `modulus` (exponent 65537) with `label`
/// (given without its NUL, which this adds).
pub fn rsa_secret<R: TryCryptoRng + ?Sized>(
    modulus: &[u8],
    label: &[u8],
    rng: &mut R,
) -> Result<(Seed, Vec<u8>), SecretError> {
    let mut seed = Zeroizing::new([0u8; DIGEST]);
    rng.try_fill_bytes(&mut seed[..])
        .map_err(|_| SecretError::Random)?;
    let key = rsa::PublicKey::new(
        rsa::BoxedUint::from_be_slice_vartime(modulus),
        rsa::BoxedUint::from(65537u32),
    )
    .map_err(SecretError::Rsa)?;
    let padding = rsa::Oaep::<sha2_011::Sha256>::new_with_label([label, b"\0"].concat());
    let encrypted = key
        .encrypt(rng, padding, &seed[..])
        .map_err(SecretError::Rsa)?;
    Ok((seed, encrypted))
}

/// The value an ephemeral P-256 key's ECDH with the point (`x`, `y`) gives under `label`
/// (without its NUL), and that ephemeral key's point as a TPMS_ECC_POINT.
pub fn ecc_secret<R: TryCryptoRng + ?Sized>(
    x: &[u8],
    y: &[u8],
    label: &[u8],
    rng: &mut R,
) -> Result<(Seed, Vec<u8>), SecretError> {
    use p256::elliptic_curve::Generate as _;
    let theirs = p256::PublicKey::from_sec1_bytes(&[&[0x04][..], x, y].concat())
        .map_err(|_| SecretError::EccPoint)?;
    let ephemeral =
        p256::ecdh::EphemeralSecret::try_generate_from_rng(rng).map_err(|_| SecretError::Random)?;
    let z = ephemeral.diffie_hellman(&theirs);
    // Uncompressed SEC1: 04 ‖ x ‖ y.
    let point = ephemeral.public_key().to_sec1_bytes();
    let (Some(ex), Some(ey)) = (point.get(1..33), point.get(33..65)) else {
        return Err(SecretError::EccPoint);
    };
    let seed = kdfe(z.raw_secret_bytes(), label, ex, x);
    let mut encrypted = Vec::with_capacity(68);
    put_tpm2b(&mut encrypted, ex);
    put_tpm2b(&mut encrypted, ey);
    Ok((seed, encrypted))
}
