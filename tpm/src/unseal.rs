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
//! As systemd does, the policy session is salted with the storage key and TPM2_Unseal's
//! response is encrypted (the crate's `session` module): the secret crosses the bus between
//! CPU and TPM as ciphertext, and a response altered on the way is refused (its HMAC does not
//! verify). Under an ECC storage key the salt is shared by ECDH; under an RSA one (a TPM
//! without ECC, systemd's fallback) it is sent RSA-OAEP encrypted (`attest::tpm::secret`).

use crate::command::{create_primary, flush_context, Auth, Command};
use crate::session::{salt_key, start_auth_session, SaltKey, SaltedSession, ENCRYPT};
use crate::transport::Transport;
use crate::TpmError;
use attest::tpm::{put_tpm2b, Reader, TPM_ALG_NULL, TPM_ALG_SHA256};
use zeroize::Zeroizing;

const TPM_CC_LOAD: u32 = 0x0000_0157;
const TPM_CC_UNSEAL: u32 = 0x0000_015e;
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
/// storage key, as systemd 252's template has it.
const SYSTEMD_252_SRK_ATTRIBUTES: u32 =
    (1 << 16) | (1 << 17) | (1 << 1) | (1 << 4) | (1 << 5) | (1 << 6);
/// PC client TPMs have 24 PCRs: three bytes of selection bitmap.
const PCR_SELECT_BYTES: usize = 3;
/// RC_FMT1: a format-one response code, about a parameter, handle or session (Part 2, §6.6).
const RC_FMT1: u32 = 0x080;
/// The format-one errors a TPM answers a template it cannot make with (Part 2, §6.6.3):
/// TPM_RC_ASYMMETRIC, TPM_RC_VALUE, TPM_RC_TYPE (the reference code's answer to an algorithm
/// it does not implement), TPM_RC_SCHEME and TPM_RC_CURVE.
const ALG_UNSUPPORTED: [u32; 5] = [0x001, 0x004, 0x00a, 0x012, 0x026];

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
    /// `tpm2_srk` (systemd 255 and later): the storage key's TPM2B_PUBLIC as it was at
    /// sealing. When given, the TPM must make that very key again, or nothing is sent to it:
    /// the session is salted to a key known in advance, so an active interposer answering
    /// TPM2_CreatePrimary with a key of its own learns nothing.
    pub storage_key: Option<&'a [u8]>,
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

/// Which storage key template: the attributes are all that differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Srk {
    /// systemd 252's (`tpm2_make_primary`), which tokens without a pinned key were sealed
    /// under: subject to dictionary-attack protection.
    Systemd252,
    /// The same with noDA ([`attest::tpm::attr::NO_DA`], as TCG's standard SRK template
    /// and systemd 255's have it), which this crate seals under: a power cut after an unseal
    /// does not count as a failed authorization, so power cuts never lock the TPM out.
    NoDa,
}

impl Srk {
    fn attributes(self) -> u32 {
        match self {
            Srk::Systemd252 => SYSTEMD_252_SRK_ATTRIBUTES,
            Srk::NoDa => SYSTEMD_252_SRK_ATTRIBUTES | attest::tpm::attr::NO_DA,
        }
    }

    /// The template a token's pinned key (TPM2B_PUBLIC) was made from; systemd 252's when
    /// nothing is pinned.
    fn of_pin(pin: Option<&[u8]>) -> Result<Srk, TpmError> {
        let Some(pin) = pin else {
            return Ok(Srk::Systemd252);
        };
        // TPM2B size (2), type (2), nameAlg (2), then objectAttributes (4).
        let attributes = pin
            .get(6..10)
            .map(|a| u32::from_be_bytes([a[0], a[1], a[2], a[3]]));
        [Srk::Systemd252, Srk::NoDa]
            .into_iter()
            .find(|srk| Some(srk.attributes()) == attributes)
            .ok_or_else(|| TpmError::Unsupported {
                what: "pinned storage key's attributes",
                value: attributes.map_or_else(|| "none".into(), |a| format!("{a:#010x}")),
            })
    }
}

/// Unseals `object` if the TPM's PCRs hold the values it was sealed to; a PCR that differs
/// is the TPM's policy failure ([`TpmError::Response`] from `TPM2_Unseal`, rc 0x99d).
pub fn unseal<T: Transport + ?Sized>(t: &mut T, object: &SealedObject) -> Result<Secret, TpmError> {
    let bank = pcr_bank(object.bank)?;
    let selection = pcr_selection(bank, object.pcrs)?;
    check_blob(object.blob)?;
    let srk = Srk::of_pin(object.storage_key)?;
    let primary = match object.primary {
        Some(alg) => create_storage_key(t, alg, srk)?,
        None => match create_storage_key(t, PrimaryAlg::Ecc, srk) {
            Err(e) if cannot_make_ecc(&e) => create_storage_key(t, PrimaryAlg::Rsa, srk)?,
            made => made?,
        },
    };
    let secret = check_pinned(&primary, object.storage_key)
        .and_then(|()| unseal_under(t, &primary, object.blob, &selection));
    let flushed = flush_context(t, primary.handle);
    let secret = secret?;
    flushed?;
    Ok(secret)
}

/// Whether TPM2_CreatePrimary's `err` is the TPM saying it cannot make the ECC key (no ECC,
/// not P-256, not its scheme): only then is an old token's RSA storage key tried (systemd
/// falls back the same way). Anything else (a lockout, an I/O error, a TPM in failure mode)
/// is the answer, not hidden behind RSA's or a later TPM2_Load's failure.
fn cannot_make_ecc(err: &TpmError) -> bool {
    let TpmError::Response { rc, .. } = err else {
        return false;
    };
    // Format one, from the TPM itself (no layer bits): the error is bits 0 to 5; bit 6 and
    // bits 8 to 11 say which parameter, handle or session it is about.
    rc & !0xfff == 0 && rc & RC_FMT1 != 0 && ALG_UNSUPPORTED.contains(&(rc & 0x3f))
}

/// The storage key the TPM made must be the one the token pins, if it pins one.
fn check_pinned(primary: &StorageKey, pinned: Option<&[u8]>) -> Result<(), TpmError> {
    match pinned {
        Some(pinned) if pinned != primary.public.as_slice() => Err(TpmError::StorageKeyChanged),
        _ => Ok(()),
    }
}

/// Loads the sealed object under `primary` and unseals it; flushes it again.
fn unseal_under<T: Transport + ?Sized>(
    t: &mut T,
    primary: &StorageKey,
    blob: &[u8],
    selection: &[u8],
) -> Result<Secret, TpmError> {
    let (item, name) = load(t, primary.handle, blob)?;
    let secret = unseal_encrypted(t, primary.handle, &primary.salt, item, &name, selection);
    let flushed = flush_context(t, item);
    let secret = secret?;
    flushed?;
    Ok(secret)
}

/// A policy session salted with the storage key at `primary` and satisfied by the PCRs, then
/// TPM2_Unseal of `item` (named `name`) under it with its response encrypted. The session
/// ends with the command; on an earlier failure it is flushed here.
fn unseal_encrypted<T: Transport + ?Sized>(
    t: &mut T,
    primary: u32,
    salt: &SaltKey,
    item: u32,
    name: &[u8],
    selection: &[u8],
) -> Result<Secret, TpmError> {
    let mut session = SaltedSession::start(t, primary, salt, TPM_SE_POLICY)?;
    let secret = policy_pcr(t, session.handle, selection)
        .and_then(|()| unseal_in(t, &mut session, item, name));
    if secret.is_err() {
        // A failed command leaves the session loaded (a flush of a closed one fails harmlessly).
        let _ = flush_context(t, session.handle);
    }
    secret
}

/// TPM2_Unseal in the salted `session`: the response's HMAC is checked, then its one
/// parameter decrypted.
fn unseal_in<T: Transport + ?Sized>(
    t: &mut T,
    session: &mut SaltedSession,
    item: u32,
    name: &[u8],
) -> Result<Secret, TpmError> {
    let auth = session.authorize(TPM_CC_UNSEAL, &[name], &mut [], ENCRYPT)?;
    let cmd = Command {
        name: "TPM2_Unseal",
        code: TPM_CC_UNSEAL,
        handles: vec![item],
        auth,
        params: Vec::new(),
    };
    let response = cmd.exchange(t, 0)?;
    let echoed = session.check_response(&cmd, &response.params, &response.auth)?;
    if echoed & ENCRYPT == 0 {
        return Err(cmd.malformed("the response is not encrypted".into()));
    }
    let mut r = Reader::new(&response.params);
    let mut data = Zeroizing::new(r.tpm2b("outData").map_err(|e| cmd.parse_error(e))?.to_vec());
    session.decrypt_response(&mut data);
    Ok(Secret(data))
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
/// unique field; `srk` says whether with noDA.
fn storage_key_template(alg: PrimaryAlg, srk: Srk) -> Vec<u8> {
    let mut p = Vec::new();
    let kind = match alg {
        PrimaryAlg::Ecc => TPM_ALG_ECC,
        PrimaryAlg::Rsa => TPM_ALG_RSA,
    };
    p.extend_from_slice(&kind.to_be_bytes());
    p.extend_from_slice(&TPM_ALG_SHA256.to_be_bytes());
    p.extend_from_slice(&srk.attributes().to_be_bytes());
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

/// A storage key loaded from a storage key template ([`Srk`]).
pub(crate) struct StorageKey {
    pub(crate) handle: u32,
    /// Its public point or modulus, which salts sessions.
    pub(crate) salt: SaltKey,
    /// Its Name (nameAlg ‖ digest of its public area), which a command's cpHash covers.
    pub(crate) name: Vec<u8>,
    /// Its TPM2B_PUBLIC, as a token pins it.
    pub(crate) public: Vec<u8>,
}

/// TPM2_CreatePrimary of the storage key in the owner hierarchy.
pub(crate) fn create_storage_key<T: Transport + ?Sized>(
    t: &mut T,
    alg: PrimaryAlg,
    srk: Srk,
) -> Result<StorageKey, TpmError> {
    let cmd = create_primary(TPM_RH_OWNER, &storage_key_template(alg, srk));
    let (handles, params) = cmd.run(t, 1)?;
    let handle = cmd.first_handle(handles)?;
    match storage_key_public(&params) {
        Ok((public, salt, name)) => Ok(StorageKey {
            handle,
            salt,
            name,
            public,
        }),
        Err(e) => {
            let _ = flush_context(t, handle);
            Err(cmd.parse_error(e))
        }
    }
}

/// TPM2_CreatePrimary's outPublic (as TPM2B_PUBLIC, and its point) and name.
type StoragePublic = (Vec<u8>, SaltKey, Vec<u8>);

/// [`StoragePublic`] from TPM2_CreatePrimary's response parameters; the creation data and
/// ticket between outPublic and name are skipped (Part 3, §24.1).
fn storage_key_public(params: &[u8]) -> Result<StoragePublic, attest::tpm::TpmError> {
    let mut r = Reader::new(params);
    let out_public = r.tpm2b("outPublic")?;
    let point = salt_key(out_public)?;
    let mut public = Vec::new();
    put_tpm2b(&mut public, out_public);
    r.tpm2b("creationData")?;
    r.tpm2b("creationHash")?;
    r.u16("creationTicket.tag")?;
    r.u32("creationTicket.hierarchy")?;
    r.tpm2b("creationTicket.digest")?;
    let name = r.tpm2b("name")?.to_vec();
    Ok((public, point, name))
}

/// TPM2_Load of a sealed object under `parent`; returns its handle and Name.
fn load<T: Transport + ?Sized>(
    t: &mut T,
    parent: u32,
    blob: &[u8],
) -> Result<(u32, Vec<u8>), TpmError> {
    let cmd = Command {
        name: "TPM2_Load",
        code: TPM_CC_LOAD,
        handles: vec![parent],
        auth: Auth::Password,
        params: blob.to_vec(),
    };
    let (handles, params) = cmd.run(t, 1)?;
    let handle = cmd.first_handle(handles)?;
    match Reader::new(&params).tpm2b("name") {
        Ok(name) => Ok((handle, name.to_vec())),
        Err(e) => {
            let _ = flush_context(t, handle);
            Err(cmd.parse_error(e))
        }
    }
}

/// TPM2_StartAuthSession of an unsalted, unbound policy session with SHA-256.
pub(crate) fn start_policy_session<T: Transport + ?Sized>(t: &mut T) -> Result<u32, TpmError> {
    start_session(t, TPM_SE_POLICY)
}

pub(crate) fn start_session<T: Transport + ?Sized>(t: &mut T, kind: u8) -> Result<u32, TpmError> {
    // nonceCaller: 16 bytes at least (Part 3, §11.1). The session is neither salted nor
    // bound and computes no HMAC, so the nonce's value protects nothing here.
    start_auth_session(t, TPM_RH_NULL, &[0x5a; 16], &[], kind, &[TPM_ALG_NULL])
        .map(|(handle, _)| handle)
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

#[cfg(test)]
mod tests;
