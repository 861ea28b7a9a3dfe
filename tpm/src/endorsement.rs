//! The node's side of enrolling its attestation key against its TPM's endorsement key
//! (`attest::tpm::ek` and `attest::tpm::credential` are the enroller's side):
//! - [`identity`]: the AK, the EK (TCG template L-1, RSA 2048, or else L-2, ECC P-256,
//!   derived afresh: the same TPM always yields the same key) and the EK certificate its
//!   maker stored for it in NV memory (`0x01c00002`, `0x01c0000a`);
//! - [`activate_credential`]: TPM2_ActivateCredential of the enroller's challenge, with the
//!   AK and the EK loaded side by side. The TPM releases the secret only if the challenge was
//!   made for this EK and for exactly this AK's name.

use crate::command::TPM_RH_ENDORSEMENT;
use crate::command::{create_ak, create_primary, flush_context, properties, Auth, Command};
use crate::transport::Transport;
use crate::unseal::start_policy_session;
use crate::TpmError;
use attest::tpm::credential::Challenge;
use attest::tpm::ek::{certified_key, EkKind, EkPublic, TpmIdentity};
use attest::tpm::{put_tpm2b, Reader};
use zeroize::Zeroizing;

const TPM_CC_NV_READ_PUBLIC: u32 = 0x0000_0169;
const TPM_CC_NV_READ: u32 = 0x0000_014e;
const TPM_CC_POLICY_SECRET: u32 = 0x0000_0151;
const TPM_CC_ACTIVATE_CREDENTIAL: u32 = 0x0000_0147;
const TPM_RH_OWNER: u32 = 0x4000_0001;
/// TPM_PT_NV_BUFFER_MAX: the most bytes one TPM2_NV_Read returns.
const TPM_PT_NV_BUFFER_MAX: u32 = 0x0000_012c;
/// TPMA_NV_OWNERREAD and TPMA_NV_AUTHREAD.
const NV_OWNERREAD: u32 = 1 << 17;
const NV_AUTHREAD: u32 = 1 << 18;
/// NV indices larger than this are not an EK certificate (real ones are about 1 KiB).
const MAX_NV_CERTIFICATE: u16 = 4096;
/// A chunk size every TPM 2.0 supports, used when the TPM does not say its own.
const MIN_NV_BUFFER: u16 = 512;

/// The TPM's EK of `kind` as TPM2_CreatePrimary makes it: its transient handle (flush it with
/// [`flush_context`]) and its public area, checked against the template.
pub fn create_ek<T: Transport + ?Sized>(
    t: &mut T,
    kind: EkKind,
) -> Result<(u32, EkPublic), TpmError> {
    let cmd = create_primary(TPM_RH_ENDORSEMENT, &kind.template());
    let (handles, params) = cmd.run(t, 1)?;
    let handle = cmd.first_handle(handles)?;
    let public = Reader::new(&params)
        .tpm2b("outPublic")
        .map_err(|e| cmd.parse_error(e))
        .and_then(|p| {
            EkPublic::parse(p).map_err(|source| TpmError::Endorsement {
                what: "the endorsement key TPM2_CreatePrimary made",
                source,
            })
        });
    match public {
        Ok(public) if public.kind() == kind => Ok((handle, public)),
        Ok(_) => {
            let _ = flush_context(t, handle);
            Err(cmd.malformed("an EK of another type than the template's".into()))
        }
        Err(e) => {
            let _ = flush_context(t, handle);
            Err(e)
        }
    }
}

/// The certificate (DER) the TPM's maker stored for its EK of `kind`, `None` if its index is
/// not defined (a TPM without one, or a software TPM made without `--create-ek-cert`).
pub fn ek_certificate<T: Transport + ?Sized>(
    t: &mut T,
    kind: EkKind,
) -> Result<Option<Vec<u8>>, TpmError> {
    let index = kind.certificate_index();
    let Some((attributes, size)) = nv_read_public(t, index)? else {
        return Ok(None);
    };
    if size > MAX_NV_CERTIFICATE {
        return Err(TpmError::Unsupported {
            what: "EK certificate index size",
            value: size.to_string(),
        });
    }
    let auth_handle = if attributes & NV_AUTHREAD != 0 {
        index
    } else if attributes & NV_OWNERREAD != 0 {
        TPM_RH_OWNER
    } else {
        return Err(TpmError::Unsupported {
            what: "EK certificate index attributes (neither AUTHREAD nor OWNERREAD)",
            value: format!("{attributes:#010x}"),
        });
    };
    let chunk = nv_buffer_max(t)?;
    let mut contents = Vec::with_capacity(usize::from(size));
    while contents.len() < usize::from(size) {
        let offset = contents.len() as u16;
        let want = chunk.min(size - offset);
        contents.extend_from_slice(&nv_read(t, auth_handle, index, offset, want)?);
    }
    let der =
        attest::tpm::ek::certificate_in_nv(&contents).map_err(|source| TpmError::Endorsement {
            what: "the EK certificate's NV index",
            source,
        })?;
    Ok(Some(der.to_vec()))
}

/// What the enroller needs ([`TpmIdentity`]): the AK, and the first EK (RSA 2048, then ECC
/// P-256) whose certificate the TPM holds, with that certificate. A TPM with neither is an
/// error that says so.
pub fn identity<T: Transport + ?Sized>(t: &mut T) -> Result<TpmIdentity, TpmError> {
    for kind in EkKind::ALL {
        if let Some(certificate) = ek_certificate(t, kind)? {
            return identity_of(t, kind, certificate);
        }
    }
    Err(TpmError::NoEkCertificate)
}

/// [`identity`] with `certificate` (DER) as the EK certificate when one is given: firmware
/// TPMs keep theirs with the maker's online service rather than in NV memory. Its key says
/// which EK it is for; the enroller checks it like any other: against the maker's root, and
/// against the EK the TPM derives.
pub fn identity_with<T: Transport + ?Sized>(
    t: &mut T,
    certificate: Option<Vec<u8>>,
) -> Result<TpmIdentity, TpmError> {
    let Some(certificate) = certificate else {
        return identity(t);
    };
    let kind = match certified_key(&certificate) {
        Ok(key) => key.kind(),
        Err(source) => {
            return Err(TpmError::Endorsement {
                what: "the EK certificate given",
                source,
            })
        }
    };
    identity_of(t, kind, certificate)
}

fn identity_of<T: Transport + ?Sized>(
    t: &mut T,
    kind: EkKind,
    ek_certificate: Vec<u8>,
) -> Result<TpmIdentity, TpmError> {
    let ak_public = crate::ak_public(t)?;
    let (handle, ek) = create_ek(t, kind)?;
    flush_context(t, handle)?;
    Ok(TpmIdentity {
        ak_public,
        ek_public: ek.public_area().to_vec(),
        ek_certificate,
    })
}

/// TPM2_ActivateCredential of `challenge` with the AK and the EK: the secret it carries, if
/// it was made for this TPM's EK and this AK's name (otherwise the TPM's error, typically
/// TPM_RC_INTEGRITY or a failed decryption of the seed).
pub fn activate_credential<T: Transport + ?Sized>(
    t: &mut T,
    challenge: &Challenge,
) -> Result<Zeroizing<Vec<u8>>, TpmError> {
    let (ak, _) = create_ak(t)?;
    let ek = match create_ek(t, challenge.ek) {
        Ok((ek, _)) => ek,
        Err(e) => {
            let _ = flush_context(t, ak);
            return Err(e);
        }
    };
    let result = activate_with(t, ak, ek, challenge);
    let flushed = [flush_context(t, ak), flush_context(t, ek)];
    let secret = result?;
    for f in flushed {
        f?;
    }
    Ok(secret)
}

/// [`activate_credential`] with the AK and the EK loaded: a policy session satisfies the EK's
/// PolicySecret(TPM_RH_ENDORSEMENT) (the endorsement hierarchy's empty password), then
/// ActivateCredential runs under it.
fn activate_with<T: Transport + ?Sized>(
    t: &mut T,
    ak: u32,
    ek: u32,
    challenge: &Challenge,
) -> Result<Zeroizing<Vec<u8>>, TpmError> {
    let session = start_policy_session(t)?;
    let result = policy_secret(t, session).and_then(|()| {
        let mut params = Vec::new();
        put_tpm2b(&mut params, &challenge.credential_blob);
        put_tpm2b(&mut params, &challenge.encrypted_secret);
        let cmd = Command {
            name: "TPM2_ActivateCredential",
            code: TPM_CC_ACTIVATE_CREDENTIAL,
            handles: vec![ak, ek],
            auth: Auth::PasswordThenPolicy(session),
            params,
        };
        let (_, params) = cmd.run(t, 0)?;
        let params = Zeroizing::new(params);
        let mut r = Reader::new(&params);
        let info = r.tpm2b("certInfo").map_err(|e| cmd.parse_error(e))?;
        Ok(Zeroizing::new(info.to_vec()))
    });
    if result.is_err() {
        // A policy session ends with the command that uses it, but only when it succeeds.
        let _ = flush_context(t, session);
    }
    result
}

/// TPM2_PolicySecret with the endorsement hierarchy's (empty) password: the EK's policy.
fn policy_secret<T: Transport + ?Sized>(t: &mut T, session: u32) -> Result<(), TpmError> {
    // nonceTPM, cpHashA, policyRef: empty; expiration: 0 (none)
    let params = vec![0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    Command {
        name: "TPM2_PolicySecret",
        code: TPM_CC_POLICY_SECRET,
        handles: vec![TPM_RH_ENDORSEMENT, session],
        auth: Auth::Password,
        params,
    }
    .run(t, 0)
    .map(drop)
}

/// TPM2_NV_ReadPublic: the index's attributes and data size, `None` if it is not defined.
fn nv_read_public<T: Transport + ?Sized>(
    t: &mut T,
    index: u32,
) -> Result<Option<(u32, u16)>, TpmError> {
    let cmd = Command {
        name: "TPM2_NV_ReadPublic",
        code: TPM_CC_NV_READ_PUBLIC,
        handles: vec![index],
        auth: Auth::None,
        params: vec![],
    };
    let params = match cmd.run(t, 0) {
        Ok((_, params)) => params,
        // TPM_RC_HANDLE for handle 1: no such index.
        Err(TpmError::Response { rc, .. }) if rc & !0xf00 == 0x08b => return Ok(None),
        Err(e) => return Err(e),
    };
    let parse = |source| cmd.parse_error(source);
    let public = Reader::new(&params).tpm2b("nvPublic").map_err(parse)?;
    let mut r = Reader::new(public);
    let returned = r.u32("nvIndex").map_err(parse)?;
    if returned != index {
        return Err(cmd.malformed(format!("describes index {returned:#010x}")));
    }
    r.u16("nameAlg").map_err(parse)?;
    let attributes = r.u32("attributes").map_err(parse)?;
    r.tpm2b("authPolicy").map_err(parse)?;
    let size = r.u16("dataSize").map_err(parse)?;
    r.finish("TPMS_NV_PUBLIC").map_err(parse)?;
    Ok(Some((attributes, size)))
}

/// The TPM's largest NV read, at least [`MIN_NV_BUFFER`] and at most 1024 bytes.
fn nv_buffer_max<T: Transport + ?Sized>(t: &mut T) -> Result<u16, TpmError> {
    let values = properties(t, TPM_PT_NV_BUFFER_MAX, 1)?;
    let max = values.get(&TPM_PT_NV_BUFFER_MAX).copied().unwrap_or(0);
    Ok(u16::try_from(max.clamp(u32::from(MIN_NV_BUFFER), 1024)).unwrap_or(MIN_NV_BUFFER))
}

/// TPM2_NV_Read of `size` bytes at `offset` of NV `index`, authorized by `auth_handle` with
/// the empty password.
fn nv_read<T: Transport + ?Sized>(
    t: &mut T,
    auth_handle: u32,
    index: u32,
    offset: u16,
    size: u16,
) -> Result<Vec<u8>, TpmError> {
    let mut params = size.to_be_bytes().to_vec();
    params.extend_from_slice(&offset.to_be_bytes());
    let cmd = Command {
        name: "TPM2_NV_Read",
        code: TPM_CC_NV_READ,
        handles: vec![auth_handle, index],
        auth: Auth::Password,
        params,
    };
    let (_, params) = cmd.run(t, 0)?;
    let data = Reader::new(&params)
        .tpm2b("data")
        .map_err(|e| cmd.parse_error(e))?;
    if data.len() != usize::from(size) {
        return Err(cmd.malformed(format!("{} bytes for {size} asked", data.len())));
    }
    Ok(data.to_vec())
}

#[cfg(test)]
mod tests;
