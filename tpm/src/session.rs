//! Salted sessions with parameter encryption (TPM 2.0 Library, Part 1, §19.6 and §21), so that
//! a secret crossing the bus between CPU and TPM is ciphertext: the passphrase TPM2_Unseal
//! returns (response encryption) and the one TPM2_Create seals (command encryption).
//!
//! The session is salted with the storage key the objects live under, which is what
//! systemd 252 does (`tpm2_make_encryption_session`):
//! - the caller makes an ephemeral P-256 key, and sends its public point as the encrypted
//!   salt; the TPM does ECDH with the storage key's private half, so both sides derive
//!   `salt = KDFe(SHA-256, Z, "SECRET", ephemeral.x, storage.x)` (Part 1, §11.4.10.3 and
//!   Annex C.6.1) and no one on the bus can;
//! - `sessionKey = KDFa(SHA-256, salt, "ATH", nonceTPM, nonceCaller)` (the session is bound
//!   to no object, so the key is the salt alone);
//! - each command authorized in the session carries an HMAC over its cpHash and the nonces,
//!   and each response one over its rpHash, which is checked: a response altered on the bus
//!   is an error, never a secret;
//! - the first parameter's bytes (a TPM2B's contents) are encrypted with AES-128-CFB keyed by
//!   `KDFa(SHA-256, sessionKey, "CFB", nonceNewer, nonceOlder)` (Part 1, §21.4).
//!
//! The objects authorized here have empty authorization values, so "sessionKey || authValue"
//! is the session key throughout.

use crate::command::{Auth, Command};
use crate::transport::Transport;
use crate::TpmError;
use attest::tpm::kdf::{hmac_sha256, kdfa, DIGEST};
use attest::tpm::secret::{ecc_secret, rsa_secret};
use attest::tpm::{put_tpm2b, Reader, TPM_ALG_NULL, TPM_ALG_SHA256};
use cfb_mode::cipher::KeyIvInit;
use hmac::Mac;
use rand_core::{OsRng, RngCore};
use sha2_011::{Digest, Sha256};
use zeroize::Zeroizing;

type HmacSha256 = hmac::Hmac<Sha256>;
type Aes128CfbEnc = cfb_mode::Encryptor<aes::Aes128>;
type Aes128CfbDec = cfb_mode::Decryptor<aes::Aes128>;

const TPM_CC_START_AUTH_SESSION: u32 = 0x0000_0176;
const TPM_RH_NULL: u32 = 0x4000_0007;
const TPM_ALG_AES: u16 = 0x0006;
const TPM_ALG_CFB: u16 = 0x0043;
/// A session attribute: the command's first parameter is encrypted.
pub(crate) const DECRYPT: u8 = 0x20;
/// A session attribute: the response's first parameter is encrypted.
pub(crate) const ENCRYPT: u8 = 0x40;

/// The public part of the storage key a session is salted with, as its public area holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SaltKey {
    /// An ECC P-256 key's point (TPMS_ECC_POINT): the salt is shared by ECDH.
    Ecc { x: Vec<u8>, y: Vec<u8> },
    /// An RSA key's modulus (exponent 65537): the salt is sent RSA-OAEP encrypted.
    Rsa { modulus: Vec<u8> },
}

/// An open salted session: its handle, key and the TPM's latest nonce.
pub(crate) struct SaltedSession {
    pub(crate) handle: u32,
    key: Zeroizing<[u8; DIGEST]>,
    nonce_tpm: Vec<u8>,
    /// The nonce of the command last authorized, which its response's HMAC covers.
    nonce_caller: [u8; DIGEST],
}

impl SaltedSession {
    /// TPM2_StartAuthSession of a `kind` session (policy, HMAC) salted with the key loaded at
    /// `tpm_key`, whose public part is `salt_key`; AES-128-CFB, SHA-256.
    pub(crate) fn start<T: Transport + ?Sized>(
        t: &mut T,
        tpm_key: u32,
        salt_key: &SaltKey,
        kind: u8,
    ) -> Result<SaltedSession, TpmError> {
        let mut rng = getrandom_04::SysRng;
        let (salt, encrypted_salt) = match salt_key {
            SaltKey::Ecc { x, y } => ecc_secret(x, y, b"SECRET", &mut rng),
            SaltKey::Rsa { modulus } => rsa_secret(modulus, b"SECRET", &mut rng),
        }
        .map_err(TpmError::Salt)?;
        let nonce_caller = random_nonce()?;
        let symmetric = [TPM_ALG_AES, 128, TPM_ALG_CFB];
        let (handle, nonce_tpm) =
            start_auth_session(t, tpm_key, &nonce_caller, &encrypted_salt, kind, &symmetric)?;
        let key = kdfa::<DIGEST>(&salt[..], b"ATH", &nonce_tpm, &nonce_caller);
        Ok(SaltedSession {
            handle,
            key,
            nonce_tpm,
            nonce_caller,
        })
    }

    /// The authorization of command `code` on handles named `names` with `params`, under
    /// `attributes`; takes a fresh caller nonce. With [`DECRYPT`], the first parameter's
    /// contents (a TPM2B's bytes) are encrypted in `params` first: the HMAC covers the
    /// ciphertext, as the TPM computes it.
    pub(crate) fn authorize(
        &mut self,
        code: u32,
        names: &[&[u8]],
        params: &mut [u8],
        attributes: u8,
    ) -> Result<Auth, TpmError> {
        self.nonce_caller = random_nonce()?;
        if attributes & DECRYPT != 0 {
            let (key, iv) = self.cfb(&self.nonce_caller, &self.nonce_tpm);
            Aes128CfbEnc::new(&(*key).into(), &(*iv).into()).encrypt(first_tpm2b(params));
        }
        let mut cp = Sha256::new();
        cp.update(code.to_be_bytes());
        for name in names {
            cp.update(name);
        }
        cp.update(&*params);
        let cp_hash = cp.finalize();
        let hmac = self.hmac(&[
            &cp_hash[..],
            &self.nonce_caller,
            &self.nonce_tpm,
            &[attributes],
        ]);
        Ok(Auth::Hmac {
            handle: self.handle,
            nonce: self.nonce_caller,
            attributes,
            hmac,
        })
    }

    /// Checks the response's authorization (TPMS_AUTH_RESPONSE) against its rpHash and takes
    /// the TPM's new nonce; returns the attributes the TPM echoed.
    pub(crate) fn check_response(
        &mut self,
        cmd: &Command,
        params: &[u8],
        auth: &[u8],
    ) -> Result<u8, TpmError> {
        let mut r = Reader::new(auth);
        let parse = |e| cmd.parse_error(e);
        let nonce_tpm = r.tpm2b("nonceTPM").map_err(parse)?.to_vec();
        let attributes = r.u8("sessionAttributes").map_err(parse)?;
        let hmac = r.tpm2b("hmac").map_err(parse)?;
        let mut rp = Sha256::new();
        rp.update(0u32.to_be_bytes()); // responseCode: success
        rp.update(cmd.code.to_be_bytes());
        rp.update(params);
        let rp_hash = rp.finalize();
        let mut mac = self.mac();
        for part in [&rp_hash[..], &nonce_tpm, &self.nonce_caller, &[attributes]] {
            mac.update(part);
        }
        mac.verify_slice(hmac)
            .map_err(|_| TpmError::ResponseHmac { command: cmd.name })?;
        self.nonce_tpm = nonce_tpm;
        Ok(attributes)
    }

    /// Decrypts a response's first parameter (a TPM2B's contents) in place; call after
    /// [`SaltedSession::check_response`], which takes the response's nonce.
    pub(crate) fn decrypt_response(&self, data: &mut [u8]) {
        let (key, iv) = self.cfb(&self.nonce_tpm, &self.nonce_caller);
        Aes128CfbDec::new(&(*key).into(), &(*iv).into()).decrypt(data);
    }

    /// AES-128 key and IV from KDFa(sessionKey, "CFB", nonceNewer, nonceOlder), wiped when
    /// dropped (the cipher's own copy is wiped by `aes`'s and `cfb-mode`'s zeroize feature).
    fn cfb(&self, newer: &[u8], older: &[u8]) -> (Zeroizing<[u8; 16]>, Zeroizing<[u8; 16]>) {
        let bits = kdfa::<DIGEST>(&self.key[..], b"CFB", newer, older);
        let mut key = Zeroizing::new([0; 16]);
        let mut iv = Zeroizing::new([0; 16]);
        key.copy_from_slice(&bits[..16]);
        iv.copy_from_slice(&bits[16..]);
        (key, iv)
    }

    fn mac(&self) -> HmacSha256 {
        hmac_sha256(&self.key[..])
    }

    fn hmac(&self, parts: &[&[u8]]) -> [u8; DIGEST] {
        let mut mac = self.mac();
        for part in parts {
            mac.update(part);
        }
        mac.finalize().into_bytes().into()
    }
}

/// TPM2_StartAuthSession, bound to no object, with SHA-256: salted to `tpm_key` with
/// `encrypted_salt` (or neither: `TPM_RH_NULL` and empty), `symmetric` the TPMT_SYM_DEF
/// (`[TPM_ALG_NULL]` for none). Returns the session's handle and the TPM's first nonce.
pub(crate) fn start_auth_session<T: Transport + ?Sized>(
    t: &mut T,
    tpm_key: u32,
    nonce_caller: &[u8],
    encrypted_salt: &[u8],
    kind: u8,
    symmetric: &[u16],
) -> Result<(u32, Vec<u8>), TpmError> {
    let mut params = Vec::new();
    put_tpm2b(&mut params, nonce_caller);
    put_tpm2b(&mut params, encrypted_salt);
    params.push(kind);
    for v in symmetric.iter().chain(&[TPM_ALG_SHA256]) {
        params.extend_from_slice(&v.to_be_bytes()); // symmetric, then authHash
    }
    let cmd = Command {
        name: "TPM2_StartAuthSession",
        code: TPM_CC_START_AUTH_SESSION,
        handles: vec![tpm_key, TPM_RH_NULL],
        auth: Auth::None,
        params,
    };
    let (handles, params) = cmd.run(t, 1)?;
    let handle = cmd.first_handle(handles)?;
    let nonce_tpm = Reader::new(&params)
        .tpm2b("nonceTPM")
        .map_err(|e| cmd.parse_error(e))?
        .to_vec();
    Ok((handle, nonce_tpm))
}

/// The contents of the TPM2B that `params` starts with (all that follows its size field, if
/// the size claims more than there is: the TPM then rejects the command's size).
fn first_tpm2b(params: &mut [u8]) -> &mut [u8] {
    let size = match params {
        [hi, lo, ..] => usize::from(u16::from_be_bytes([*hi, *lo])),
        _ => 0,
    };
    let end = (2 + size).min(params.len());
    params.get_mut(2..end).unwrap_or_default()
}

fn random_nonce() -> Result<[u8; DIGEST], TpmError> {
    let mut nonce = [0; DIGEST];
    OsRng.try_fill_bytes(&mut nonce).map_err(TpmError::Random)?;
    Ok(nonce)
}

/// The public part of an ECC or RSA key's TPMT_PUBLIC (Part 2, §12.2.4): its point, or its
/// modulus (an exponent other than 65537 is refused).
pub(crate) fn salt_key(public: &[u8]) -> Result<SaltKey, attest::tpm::TpmError> {
    const TPM_ALG_RSA: u16 = 0x0001;
    const TPM_ALG_ECC: u16 = 0x0023;
    let mut r = Reader::new(public);
    let kind = r.u16("type")?;
    if kind != TPM_ALG_ECC && kind != TPM_ALG_RSA {
        return Err(attest::tpm::TpmError::Unsupported {
            field: "TPMT_PUBLIC.type",
            got: kind.into(),
            expected: "TPM_ALG_ECC or TPM_ALG_RSA",
        });
    }
    r.u16("nameAlg")?;
    r.u32("objectAttributes")?;
    r.tpm2b("authPolicy")?;
    if r.u16("symmetric")? != TPM_ALG_NULL {
        r.u16("keyBits")?;
        r.u16("mode")?;
    }
    if r.u16("scheme")? != TPM_ALG_NULL {
        r.u16("scheme.hashAlg")?;
    }
    let key = if kind == TPM_ALG_ECC {
        r.u16("curveID")?;
        if r.u16("kdf")? != TPM_ALG_NULL {
            r.u16("kdf.hashAlg")?;
        }
        let x = r.tpm2b("unique.x")?.to_vec();
        let y = r.tpm2b("unique.y")?.to_vec();
        SaltKey::Ecc { x, y }
    } else {
        r.u16("keyBits")?;
        let exponent = r.u32("exponent")?;
        if exponent != 0 && exponent != 65537 {
            return Err(attest::tpm::TpmError::Unsupported {
                field: "TPMS_RSA_PARMS.exponent",
                got: exponent.into(),
                expected: "0 (65537)",
            });
        }
        let modulus = r.tpm2b("unique.rsa")?.to_vec();
        SaltKey::Rsa { modulus }
    };
    r.finish("TPMT_PUBLIC")?;
    Ok(key)
}

#[cfg(test)]
mod tests;
