//! Unsealing a secret that systemd sealed to PCRs: the `systemd-tpm2` token of a LUKS2 volume
//! (written by `systemd-repart` with `Encrypt=tpm2`, or `systemd-cryptenroll --tpm2-device`).
//!
//! The image's initrd opens the node's state disk with it, so that the root's systemd finds
//! the disk mounted and hostd need not wait for udev to announce the disk (seconds of boot
//! under emulation). It does what systemd 252's `tpm2_unseal` does, without a PIN or signed
//! PCR policy (the image's tokens have neither):
//! 1. TPM2_CreatePrimary of the storage key in the owner hierarchy from systemd's template
//!    (a TPM derives the same key from the same template every time, so the sealed object's
//!    parent is back);
//! 2. TPM2_Load of the sealed object (the token's blob: TPM2B_PRIVATE then TPM2B_PUBLIC);
//! 3. a policy session with TPM2_PolicyPCR over the token's PCRs at their current values;
//! 4. TPM2_Unseal under that session: the TPM releases the secret only if the PCRs hold the
//!    values the object was sealed to (its authPolicy).
//!
//! systemd also encrypts the unsealed secret on its way from the TPM (a session salted with
//! the storage key). This client does not: the secret crosses the bus between CPU and TPM in
//! the clear, readable by someone with a probe on a discrete TPM's bus (firmware TPMs have no
//! such bus). docs/image.md says so.

use crate::command::{create_primary, flush_context, Auth, Command};
use crate::transport::Transport;
use crate::TpmError;
use attest::tpm::{put_tpm2b, Reader, TPM_ALG_NULL, TPM_ALG_SHA256};
use zeroize::Zeroizing;

const TPM_CC_LOAD: u32 = 0x0000_0157;
const TPM_CC_UNSEAL: u32 = 0x0000_015e;
const TPM_CC_START_AUTH_SESSION: u32 = 0x0000_0176;
const TPM_CC_POLICY_PCR: u32 = 0x0000_017f;
const TPM_RH_OWNER: u32 = 0x4000_0001;
const TPM_RH_NULL: u32 = 0x4000_0007;
const TPM_SE_POLICY: u8 = 0x01;
const TPM_ALG_SHA1: u16 = 0x0004;
const TPM_ALG_RSA: u16 = 0x0001;
const TPM_ALG_ECC: u16 = 0x0023;
const TPM_ALG_AES: u16 = 0x0006;
const TPM_ALG_CFB: u16 = 0x0043;
const TPM_ECC_NIST_P256: u16 = 0x0003;
/// restricted | decrypt | fixedTPM | fixedParent | sensitiveDataOrigin | userWithAuth: a
/// storage key, as systemd's template has it.
const STORAGE_KEY_ATTRIBUTES: u32 =
    (1 << 16) | (1 << 17) | (1 << 1) | (1 << 4) | (1 << 5) | (1 << 6);
/// PC client TPMs have 24 PCRs: three bytes of selection bitmap.
const PCR_SELECT_BYTES: usize = 3;

/// The storage key's algorithm: the token's `tpm2-primary-alg`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrimaryAlg {
    /// NIST P-256 (systemd's first choice).
    Ecc,
    /// RSA 2048 (systemd's fallback on TPMs without ECC).
    Rsa,
}

impl PrimaryAlg {
    /// From the token's `tpm2-primary-alg` (`ecc`, `rsa`).
    pub fn parse(name: &str) -> Result<Self, TpmError> {
        match name {
            "ecc" => Ok(PrimaryAlg::Ecc),
            "rsa" => Ok(PrimaryAlg::Rsa),
            other => Err(TpmError::Unsupported {
                what: "primary key algorithm",
                value: other.to_owned(),
            }),
        }
    }
}

/// What a `systemd-tpm2` token says about its sealed object.
#[derive(Debug, Clone)]
pub struct SealedObject<'a> {
    /// `tpm2-blob`: TPM2B_PRIVATE then TPM2B_PUBLIC.
    pub blob: &'a [u8],
    /// `tpm2-pcrs`: the PCRs of the policy.
    pub pcrs: &'a [u32],
    /// `tpm2-pcr-bank`: `sha256` or `sha1`.
    pub bank: &'a str,
    /// `tpm2-primary-alg`; `None` (older tokens): ECC, then RSA, as systemd tries.
    pub primary: Option<PrimaryAlg>,
}

/// The unsealed secret, wiped from memory when dropped.
pub struct Secret(Zeroizing<Vec<u8>>);

impl Secret {
    /// The secret's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

/// Unseals `object` if the TPM's PCRs hold the values it was sealed to; a PCR that differs
/// is the TPM's policy failure ([`TpmError::Response`] from `TPM2_Unseal`, rc 0x99d).
pub fn unseal<T: Transport + ?Sized>(t: &mut T, object: &SealedObject) -> Result<Secret, TpmError> {
    let bank = pcr_bank(object.bank)?;
    let selection = pcr_selection(bank, object.pcrs)?;
    check_blob(object.blob)?;
    let primary = match object.primary {
        Some(alg) => create_storage_key(t, alg)?,
        None => create_storage_key(t, PrimaryAlg::Ecc)
            .or_else(|_| create_storage_key(t, PrimaryAlg::Rsa))?,
    };
    let loaded = load(t, primary, object.blob);
    let flushed = flush_context(t, primary);
    let item = loaded?;
    flushed?;
    let secret = unseal_loaded(t, item, &selection);
    let flushed = flush_context(t, item);
    let secret = secret?;
    flushed?;
    Ok(secret)
}

/// A policy session satisfied by the PCRs, then TPM2_Unseal of `item` under it. The session
/// ends with the command; on an earlier failure it is flushed here.
fn unseal_loaded<T: Transport + ?Sized>(
    t: &mut T,
    item: u32,
    selection: &[u8],
) -> Result<Secret, TpmError> {
    let session = start_policy_session(t)?;
    if let Err(e) = policy_pcr(t, session, selection) {
        let _ = flush_context(t, session);
        return Err(e);
    }
    let cmd = Command {
        name: "TPM2_Unseal",
        code: TPM_CC_UNSEAL,
        handles: vec![item],
        auth: Auth::Policy(session),
        params: Vec::new(),
    };
    let result = cmd.run(t, 0);
    if result.is_err() {
        // A failed command leaves the session loaded.
        let _ = flush_context(t, session);
    }
    let (_, params) = result?;
    let params = Zeroizing::new(params);
    let mut r = Reader::new(&params);
    let data = r.tpm2b("outData").map_err(|e| cmd.parse_error(e))?;
    Ok(Secret(Zeroizing::new(data.to_vec())))
}

pub(crate) fn pcr_bank(name: &str) -> Result<u16, TpmError> {
    match name {
        "sha256" => Ok(TPM_ALG_SHA256),
        "sha1" => Ok(TPM_ALG_SHA1),
        other => Err(TpmError::Unsupported {
            what: "PCR bank",
            value: other.to_owned(),
        }),
    }
}

/// TPML_PCR_SELECTION of one bank.
pub(crate) fn pcr_selection(bank: u16, pcrs: &[u32]) -> Result<Vec<u8>, TpmError> {
    let mut bitmap = [0u8; PCR_SELECT_BYTES];
    for &pcr in pcrs {
        let byte = bitmap
            .get_mut(pcr as usize / 8)
            .ok_or_else(|| TpmError::Unsupported {
                what: "PCR index",
                value: pcr.to_string(),
            })?;
        *byte |= 1 << (pcr % 8);
    }
    let mut out = 1u32.to_be_bytes().to_vec();
    out.extend_from_slice(&bank.to_be_bytes());
    out.push(PCR_SELECT_BYTES as u8);
    out.extend_from_slice(&bitmap);
    Ok(out)
}

/// The blob must be exactly a TPM2B_PRIVATE and a TPM2B_PUBLIC, so that a damaged token is
/// named as such rather than as a TPM error.
fn check_blob(blob: &[u8]) -> Result<(), TpmError> {
    let mut r = Reader::new(blob);
    r.tpm2b("TPM2B_PRIVATE")
        .and_then(|_| r.tpm2b("TPM2B_PUBLIC"))
        .and_then(|_| r.finish("sealed object"))
        .map_err(TpmError::SealedObject)
}

/// systemd's storage key template (`tpm2_make_primary`): AES-128-CFB, no scheme, empty
/// unique field.
fn storage_key_template(alg: PrimaryAlg) -> Vec<u8> {
    let mut p = Vec::new();
    let kind = match alg {
        PrimaryAlg::Ecc => TPM_ALG_ECC,
        PrimaryAlg::Rsa => TPM_ALG_RSA,
    };
    p.extend_from_slice(&kind.to_be_bytes());
    p.extend_from_slice(&TPM_ALG_SHA256.to_be_bytes());
    p.extend_from_slice(&STORAGE_KEY_ATTRIBUTES.to_be_bytes());
    p.extend_from_slice(&[0, 0]); // authPolicy: empty
    for v in [TPM_ALG_AES, 128, TPM_ALG_CFB, TPM_ALG_NULL] {
        p.extend_from_slice(&v.to_be_bytes()); // symmetric, then scheme: NULL
    }
    match alg {
        PrimaryAlg::Ecc => {
            p.extend_from_slice(&TPM_ECC_NIST_P256.to_be_bytes());
            p.extend_from_slice(&TPM_ALG_NULL.to_be_bytes()); // kdf
            p.extend_from_slice(&[0, 0, 0, 0]); // unique: empty x and y
        }
        PrimaryAlg::Rsa => {
            p.extend_from_slice(&2048u16.to_be_bytes());
            p.extend_from_slice(&0u32.to_be_bytes()); // exponent: default
            p.extend_from_slice(&[0, 0]); // unique: empty
        }
    }
    p
}

/// TPM2_CreatePrimary of the storage key in the owner hierarchy; returns its handle.
pub(crate) fn create_storage_key<T: Transport + ?Sized>(
    t: &mut T,
    alg: PrimaryAlg,
) -> Result<u32, TpmError> {
    let cmd = create_primary(TPM_RH_OWNER, &storage_key_template(alg));
    first_handle(&cmd, cmd.run(t, 1)?.0)
}

/// TPM2_Load of a sealed object under `parent`; returns its handle.
fn load<T: Transport + ?Sized>(t: &mut T, parent: u32, blob: &[u8]) -> Result<u32, TpmError> {
    let cmd = Command {
        name: "TPM2_Load",
        code: TPM_CC_LOAD,
        handles: vec![parent],
        auth: Auth::Password,
        params: blob.to_vec(),
    };
    first_handle(&cmd, cmd.run(t, 1)?.0)
}

/// TPM2_StartAuthSession of an unsalted, unbound policy session with SHA-256.
pub(crate) fn start_policy_session<T: Transport + ?Sized>(t: &mut T) -> Result<u32, TpmError> {
    start_session(t, TPM_SE_POLICY)
}

pub(crate) fn start_session<T: Transport + ?Sized>(t: &mut T, kind: u8) -> Result<u32, TpmError> {
    let mut params = Vec::new();
    // nonceCaller: 16 bytes at least (Part 3, §11.1). The session is neither salted nor
    // bound and computes no HMAC, so the nonce's value protects nothing here.
    put_tpm2b(&mut params, &[0x5a; 16]);
    params.extend_from_slice(&[0, 0]); // encryptedSalt: none
    params.push(kind);
    params.extend_from_slice(&TPM_ALG_NULL.to_be_bytes()); // symmetric: none
    params.extend_from_slice(&TPM_ALG_SHA256.to_be_bytes()); // authHash
    let cmd = Command {
        name: "TPM2_StartAuthSession",
        code: TPM_CC_START_AUTH_SESSION,
        handles: vec![TPM_RH_NULL, TPM_RH_NULL],
        auth: Auth::None,
        params,
    };
    first_handle(&cmd, cmd.run(t, 1)?.0)
}

/// TPM2_PolicyPCR: the session's policy includes the PCRs of `selection` at their current
/// values.
pub(crate) fn policy_pcr<T: Transport + ?Sized>(
    t: &mut T,
    session: u32,
    selection: &[u8],
) -> Result<(), TpmError> {
    let mut params = vec![0, 0]; // pcrDigest: empty, the TPM uses the current values
    params.extend_from_slice(selection);
    Command {
        name: "TPM2_PolicyPCR",
        code: TPM_CC_POLICY_PCR,
        handles: vec![session],
        auth: Auth::None,
        params,
    }
    .run(t, 0)
    .map(drop)
}

fn first_handle(cmd: &Command, handles: Vec<u32>) -> Result<u32, TpmError> {
    handles
        .first()
        .copied()
        .ok_or_else(|| cmd.malformed("no handle".into()))
}

#[cfg(test)]
mod tests;
