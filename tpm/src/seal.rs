//! Sealing a secret to PCRs the way `systemd-repart` (`Encrypt=tpm2`) and
//! `systemd-cryptenroll --tpm2-device` do in systemd 252, for the [`crate::unseal`] of the
//! image's initrd:
//! 1. the policy digest of TPM2_PolicyPCR over the PCRs at their current values, computed by
//!    the TPM in a trial session (TPM2_PolicyGetDigest);
//! 2. TPM2_Create, under systemd's storage key with noDA added (a power cut after an unseal
//!    must not count towards a dictionary-attack lockout), of a keyed-hash object holding the
//!    secret, with that digest as its authPolicy, `fixedTPM | fixedParent` and no
//!    userWithAuth: only a policy session whose PCRs match releases it, and only this TPM can
//!    load it.
//!
//! The returned blob (TPM2B_PRIVATE then TPM2B_PUBLIC) and policy digest are the
//! `systemd-tpm2` token's `tpm2-blob` and `tpm2-policy-hash`; the storage key's public area is
//! its `tpm2_srk`, which tells [`crate::unseal`] the key's template. systemd 252's own unseal
//! does not open it (its storage key lacks noDA).
//!
//! As with unsealing, TPM2_Create is authorized in a session salted with the storage key, and
//! its first parameter, which holds the secret, is encrypted (the crate's `session` module):
//! the secret crosses the CPU–TPM bus as ciphertext, under an ECC or an RSA storage key.

use crate::command::{create_params, flush_context, Auth, Command};
use crate::session::{SaltedSession, DECRYPT};
use crate::transport::Transport;
use crate::unseal::{
    create_storage_key, pcr_bank, pcr_selection, policy_pcr, start_session, PrimaryAlg, Srk,
    StorageKey,
};
use crate::TpmError;
use attest::tpm::{put_tpm2b, Reader, TPM_ALG_NULL, TPM_ALG_SHA256};
use zeroize::Zeroize;

const TPM_CC_CREATE: u32 = 0x0000_0153;
const TPM_CC_POLICY_GET_DIGEST: u32 = 0x0000_0189;
const TPM_SE_HMAC: u8 = 0x00;
const TPM_SE_TRIAL: u8 = 0x03;
const TPM_ALG_KEYEDHASH: u16 = 0x0008;
/// fixedTPM | fixedParent, as systemd's sealed objects have: no userWithAuth, so the object's
/// empty password does not unseal it; only its policy does.
const SEALED_ATTRIBUTES: u32 = (1 << 1) | (1 << 4);
/// TPM2B_SENSITIVE_DATA holds at most 128 bytes (`MAX_SYM_DATA`).
const MAX_SECRET: usize = 128;

/// A sealed secret: what a `systemd-tpm2` token records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed {
    /// TPM2B_PRIVATE then TPM2B_PUBLIC (`tpm2-blob`).
    pub blob: Vec<u8>,
    /// The policy digest the object is sealed under (`tpm2-policy-hash`).
    pub policy_hash: Vec<u8>,
    /// The storage key's TPM2B_PUBLIC (`tpm2_srk`), for [`crate::unseal`] to hold the TPM to.
    pub storage_key: Vec<u8>,
}

/// Seals `secret` under `alg`'s storage key to `pcrs` of `bank` (`sha256`, `sha1`) at their
/// current values.
pub fn seal<T: Transport + ?Sized>(
    t: &mut T,
    secret: &[u8],
    pcrs: &[u32],
    bank: &str,
    alg: PrimaryAlg,
) -> Result<Sealed, TpmError> {
    seal_under(t, secret, pcrs, bank, alg, Srk::NoDa)
}

/// [`seal`] under the storage key of `srk`'s template (the tests seal as systemd 252 did).
pub(crate) fn seal_under<T: Transport + ?Sized>(
    t: &mut T,
    secret: &[u8],
    pcrs: &[u32],
    bank: &str,
    alg: PrimaryAlg,
    srk: Srk,
) -> Result<Sealed, TpmError> {
    if secret.is_empty() || secret.len() > MAX_SECRET {
        return Err(TpmError::Unsupported {
            what: "sealed secret length",
            value: secret.len().to_string(),
        });
    }
    let selection = pcr_selection(pcr_bank(bank)?, pcrs)?;
    let policy_hash = trial_policy(t, &selection)?;
    let primary = create_storage_key(t, alg, srk)?;
    let created = create_sealed(t, &primary, secret, &policy_hash);
    let flushed = flush_context(t, primary.handle);
    let blob = created?;
    flushed?;
    Ok(Sealed {
        blob,
        policy_hash,
        storage_key: primary.public,
    })
}

/// The digest a PolicyPCR over `selection` at the PCRs' current values leaves in a session.
fn trial_policy<T: Transport + ?Sized>(t: &mut T, selection: &[u8]) -> Result<Vec<u8>, TpmError> {
    let session = start_session(t, TPM_SE_TRIAL)?;
    let digest = policy_pcr(t, session, selection).and_then(|()| policy_digest(t, session));
    let flushed = flush_context(t, session);
    let digest = digest?;
    flushed?;
    Ok(digest)
}

fn policy_digest<T: Transport + ?Sized>(t: &mut T, session: u32) -> Result<Vec<u8>, TpmError> {
    let cmd = Command {
        name: "TPM2_PolicyGetDigest",
        code: TPM_CC_POLICY_GET_DIGEST,
        handles: vec![session],
        auth: Auth::None,
        params: Vec::new(),
    };
    let (_, params) = cmd.run(t, 0)?;
    let mut r = Reader::new(&params);
    let digest = r.tpm2b("policyDigest").map_err(|e| cmd.parse_error(e))?;
    Ok(digest.to_vec())
}

/// TPM2_Create of the keyed-hash object under `parent`; returns the token's blob. The
/// command (its secret) is wiped once sent.
fn create_sealed<T: Transport + ?Sized>(
    t: &mut T,
    parent: &StorageKey,
    secret: &[u8],
    policy: &[u8],
) -> Result<Vec<u8>, TpmError> {
    let mut public = TPM_ALG_KEYEDHASH.to_be_bytes().to_vec();
    public.extend_from_slice(&TPM_ALG_SHA256.to_be_bytes());
    public.extend_from_slice(&SEALED_ATTRIBUTES.to_be_bytes());
    put_tpm2b(&mut public, policy);
    public.extend_from_slice(&TPM_ALG_NULL.to_be_bytes()); // scheme
    public.extend_from_slice(&[0, 0]); // unique
    let mut cmd = Command {
        name: "TPM2_Create",
        code: TPM_CC_CREATE,
        handles: vec![parent.handle],
        auth: Auth::Password,
        params: create_params(secret, &public),
    };
    let result = create_encrypted(t, parent, &mut cmd);
    cmd.params.zeroize();
    let params = result?;
    let parse = |source| cmd.parse_error(source);
    let mut r = Reader::new(&params);
    let mut blob = Vec::new();
    put_tpm2b(&mut blob, r.tpm2b("outPrivate").map_err(parse)?);
    put_tpm2b(&mut blob, r.tpm2b("outPublic").map_err(parse)?);
    Ok(blob)
}

/// Runs `cmd` (TPM2_Create) in an HMAC session salted with the storage key, its first
/// parameter encrypted; checks the response's HMAC and returns its parameters.
fn create_encrypted<T: Transport + ?Sized>(
    t: &mut T,
    parent: &StorageKey,
    cmd: &mut Command,
) -> Result<Vec<u8>, TpmError> {
    let mut session = SaltedSession::start(t, parent.handle, &parent.salt, TPM_SE_HMAC)?;
    let response = session
        .authorize(cmd.code, &[&parent.name], &mut cmd.params, DECRYPT)
        .and_then(|auth| {
            cmd.auth = auth;
            cmd.exchange(t, 0)
        });
    let response = match response {
        Ok(response) => response,
        Err(e) => {
            // A failed command leaves the session loaded.
            let _ = flush_context(t, session.handle);
            return Err(e);
        }
    };
    session.check_response(cmd, &response.params, &response.auth)?;
    Ok(response.params)
}

#[cfg(test)]
mod tests;
