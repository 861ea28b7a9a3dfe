//! TPM2_MakeCredential, done by the enroller in software (TPM 2.0 Library, Part 1, §24; Part 3,
//! §12.6): a secret that only the TPM holding a given endorsement key can recover, and only for
//! an object loaded beside it whose name is exactly the attestation key's.
//!
//! The node answers with TPM2_ActivateCredential. Its TPM decrypts the seed with the EK's
//! private half, checks the outer HMAC over the encrypted credential and the object's name,
//! and releases the secret only if both hold. So an answer that equals the secret proves the
//! AK lives in the TPM whose EK the maker certified ([`super::ek`]): a software key, or one in
//! another TPM, has another name or no EK to decrypt with.
//!
//! With SHA-256 and AES-128-CFB, as both standard EKs have them:
//! - `seed`, for an RSA EK (template L-1): 32 random bytes, sent as RSA-OAEP(SHA-256, label
//!   "IDENTITY\0") under the EK. For an ECC EK (template L-2): an ephemeral P-256 key's ECDH
//!   with the EK gives Z, and `seed = KDFe(Z, "IDENTITY", ephemeral.x, ek.x)`; the ephemeral
//!   public point is sent (TPMS_ECC_POINT), as the node's salted sessions do with "SECRET";
//! - `symKey = KDFa(seed, "STORAGE", name, ∅, 128)`, and `encIdentity` the TPM2B_DIGEST of
//!   the secret under AES-128-CFB with a zero IV;
//! - `HMACkey = KDFa(seed, "INTEGRITY", ∅, ∅, 256)`, `outerHMAC = HMAC(HMACkey, encIdentity ‖
//!   name)`;
//! - the credential blob (TPM2B_ID_OBJECT's contents) is the TPM2B of `outerHMAC`, then
//!   `encIdentity`.

use super::ek::{CheckedIdentity, EkKey, EkKind, EkPublic};
use super::kdf::{hmac_sha256, kdfa, DIGEST};
use super::secret::{ecc_secret, rsa_secret};
use super::{put_tpm2b, TPM_ALG_SHA256};
use crate::canonical::hex_bytes;
use cfb_mode::cipher::KeyIvInit;
use hmac::Mac;
use rsa::rand_core::TryCryptoRng;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

type Aes128CfbEnc = cfb_mode::Encryptor<aes::Aes128>;

/// The length of the secret a challenge carries: the EK's name algorithm's digest size, the
/// most a TPM2B_DIGEST under it may hold.
pub const SECRET_BYTES: usize = DIGEST;

/// Why a credential could not be made: the seed's sharing failed.
pub use super::secret::SecretError as CredentialError;

/// The name of a TPM object with a SHA-256 name algorithm: the algorithm's identifier, then
/// SHA-256 of its TPMT_PUBLIC (Part 1, §16). This is what TPM2_ActivateCredential compares.
pub fn object_name(public_area: &[u8]) -> Vec<u8> {
    let mut name = TPM_ALG_SHA256.to_be_bytes().to_vec();
    name.extend_from_slice(&Sha256::digest(public_area));
    name
}

/// A credential challenge, as TPM2_ActivateCredential takes it (`hostd tpm-activate`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Challenge {
    /// Which of the TPM's endorsement keys the challenge is under.
    pub ek: EkKind,
    /// The contents of the TPM2B_ID_OBJECT: the outer HMAC's TPM2B, then the encrypted
    /// credential.
    #[serde(with = "hex_bytes")]
    pub credential_blob: Vec<u8>,
    /// The contents of the TPM2B_ENCRYPTED_SECRET: the RSA-OAEP encrypted seed, or the
    /// ephemeral ECC point (TPMS_ECC_POINT).
    #[serde(with = "hex_bytes")]
    pub encrypted_secret: Vec<u8>,
}

/// TPM2_MakeCredential for the object named `name` under `ek`, carrying `secret`; the seed and
/// OAEP's randomness come from `rng`.
pub fn make_credential<R: TryCryptoRng + ?Sized>(
    ek: &EkPublic,
    name: &[u8],
    secret: &[u8; SECRET_BYTES],
    rng: &mut R,
) -> Result<Challenge, CredentialError> {
    let (seed, encrypted_secret) = match ek.key() {
        EkKey::Rsa { modulus } => rsa_secret(modulus, b"IDENTITY", rng)?,
        EkKey::EccP256 { x, y } => ecc_secret(x, y, b"IDENTITY", rng)?,
    };
    Ok(Challenge {
        ek: ek.kind(),
        credential_blob: credential_blob(&seed[..], name, secret),
        encrypted_secret,
    })
}

/// The TPM2B_ID_OBJECT's contents for `seed`, `name` and `secret` (the module doc's steps).
fn credential_blob(seed: &[u8], name: &[u8], secret: &[u8]) -> Vec<u8> {
    let sym_key = kdfa::<16>(seed, b"STORAGE", name, &[]);
    let mut identity = Zeroizing::new(Vec::with_capacity(2 + secret.len()));
    put_tpm2b(&mut identity, secret);
    Aes128CfbEnc::new(&(*sym_key).into(), &[0u8; 16].into()).encrypt(&mut identity[..]);
    let hmac_key = kdfa::<DIGEST>(seed, b"INTEGRITY", &[], &[]);
    let mut mac = hmac_sha256(&hmac_key[..]);
    mac.update(&identity);
    mac.update(name);
    let outer: [u8; DIGEST] = mac.finalize().into_bytes().into();
    let mut blob = Vec::with_capacity(2 + DIGEST + identity.len());
    put_tpm2b(&mut blob, &outer);
    blob.extend_from_slice(&identity);
    blob
}

/// A challenge for a checked identity's AK under its EK, with a fresh secret from `rng`.
/// Returns the challenge for the node and the secret its answer must equal.
pub fn challenge<R: TryCryptoRng + ?Sized>(
    identity: &CheckedIdentity,
    rng: &mut R,
) -> Result<(Challenge, Zeroizing<[u8; SECRET_BYTES]>), CredentialError> {
    let mut secret = Zeroizing::new([0u8; SECRET_BYTES]);
    rng.try_fill_bytes(&mut secret[..])
        .map_err(|_| CredentialError::Random)?;
    let name = object_name(&identity.ak_public);
    let challenge = make_credential(&identity.ek, &name, &secret, rng)?;
    Ok((challenge, secret))
}

#[cfg(test)]
mod tests {
    use super::*;

    type Aes128CfbDec = cfb_mode::Decryptor<aes::Aes128>;

    /// The blob's layout and keys, undone step by step as the TPM does it (given the seed the
    /// TPM would decrypt): the HMAC covers the encrypted identity and the name, and the
    /// identity decrypts to the secret's TPM2B.
    #[test]
    fn the_blob_undoes_to_the_secret_for_its_name_only() {
        let seed = [7u8; 32];
        let name = object_name(b"an ak's public area");
        let secret = [9u8; 32];
        let blob = credential_blob(&seed, &name, &secret);
        assert_eq!(&blob[..2], &[0, 32]);
        let (outer, identity) = blob[2..].split_at(32);
        let hmac_key = kdfa::<32>(&seed, b"INTEGRITY", &[], &[]);
        let check = |name: &[u8]| {
            let mut mac = hmac_sha256(&hmac_key[..]);
            mac.update(identity);
            mac.update(name);
            mac.verify_slice(outer).is_ok()
        };
        assert!(check(&name));
        assert!(!check(&object_name(b"another key")));
        let key = kdfa::<16>(&seed, b"STORAGE", &name, &[]);
        let mut plain = identity.to_vec();
        Aes128CfbDec::new(&(*key).into(), &[0u8; 16].into()).decrypt(&mut plain);
        assert_eq!(&plain[..2], &[0, 32]);
        assert_eq!(&plain[2..], &secret);
    }

    /// The ECC seed is what the TPM derives from the sent point: KDFe over the ECDH of the
    /// EK's private key with it (here the test holds that key), "IDENTITY", and both x's.
    #[test]
    fn an_ecc_seed_is_the_kdfe_of_the_ecdh_with_the_sent_point() {
        let ek_key = p256::SecretKey::from_slice(&[9; 32]).unwrap();
        let ek_point = ek_key.public_key().to_sec1_bytes();
        let (x, y): ([u8; 32], [u8; 32]) = (
            ek_point[1..33].try_into().unwrap(),
            ek_point[33..].try_into().unwrap(),
        );
        let (seed, sent) = ecc_secret(&x, &y, b"IDENTITY", &mut getrandom_04::SysRng).unwrap();
        let mut r = super::super::Reader::new(&sent);
        let ex = r.tpm2b("x").unwrap();
        let ey = r.tpm2b("y").unwrap();
        r.finish("point").unwrap();
        let theirs = p256::PublicKey::from_sec1_bytes(&[&[0x04][..], ex, ey].concat()).unwrap();
        let z = p256::ecdh::diffie_hellman(ek_key.to_nonzero_scalar(), theirs.as_affine());
        let kdfe = super::super::kdf::kdfe;
        assert_eq!(*seed, *kdfe(z.raw_secret_bytes(), b"IDENTITY", ex, &x));
    }

    #[test]
    fn a_name_is_the_algorithm_then_the_digest() {
        let name = object_name(b"x");
        assert_eq!(&name[..2], &[0x00, 0x0b]);
        assert_eq!(&name[2..], Sha256::digest(b"x").as_slice());
    }
}
