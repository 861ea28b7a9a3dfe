//! The five TPM 2.0 commands hostd needs, marshalled by hand (TPM 2.0 Library, Part 3).

use crate::transport::Transport;
use crate::TpmError;
use attest::tpm::{
    ak_template, parse_pcr_selection, pcr_digest, put_tpm2b, quoted_pcr_selection, AkPublic,
    QuoteClaim, QuoteInfo, Reader, QUOTED_PCRS, QUOTED_PCR_BITMAP, TPM_ALG_NULL, TPM_ALG_SHA256,
};
use std::collections::BTreeMap;

const TPM_ST_NO_SESSIONS: u16 = 0x8001;
const TPM_ST_SESSIONS: u16 = 0x8002;
const TPM_CC_CREATE_PRIMARY: u32 = 0x0000_0131;
const TPM_CC_QUOTE: u32 = 0x0000_0158;
const TPM_CC_FLUSH_CONTEXT: u32 = 0x0000_0165;
const TPM_CC_PCR_READ: u32 = 0x0000_017e;
const TPM_CC_PCR_EXTEND: u32 = 0x0000_0182;
const TPM_CC_GET_CAPABILITY: u32 = 0x0000_017a;
const TPM_CAP_TPM_PROPERTIES: u32 = 6;
/// TPM_PT_LOCKOUT_COUNTER; TPM_PT_MAX_AUTH_FAIL, TPM_PT_LOCKOUT_INTERVAL and
/// TPM_PT_LOCKOUT_RECOVERY follow it.
const TPM_PT_LOCKOUT_COUNTER: u32 = 0x0000_020e;
pub(crate) const TPM_RH_ENDORSEMENT: u32 = 0x4000_000b;
/// The password "session": authorization with a (here empty) password, no HMAC.
const TPM_RS_PW: u32 = 0x4000_0009;
/// TPM_RC_YIELDED, TPM_RC_TESTING, TPM_RC_RETRY.
const RETRY_CODES: [u32; 3] = [0x908, 0x90a, 0x922];
/// Resends of a command the TPM asked to retry (with 10 ms, 20 ms, … pauses).
const MAX_RETRIES: u32 = 20;
/// Quote attempts when PCRs change between the quote and reading them.
const QUOTE_ATTEMPTS: u32 = 3;

/// How a command's (first) handle is authorized.
#[derive(Clone, Copy)]
pub(crate) enum Auth {
    /// The command has no authorized handle.
    None,
    /// The empty-password session.
    Password,
    /// Two authorized handles: the first with the empty password, the second in a policy
    /// session (TPM2_ActivateCredential: the AK, then the EK under its policy).
    PasswordThenPolicy(u32),
    /// A salted session's authorization ([`crate::session::SaltedSession::authorize`]).
    Hmac {
        handle: u32,
        nonce: [u8; 32],
        attributes: u8,
        hmac: [u8; 32],
    },
}

/// A successful response, split.
pub(crate) struct Response {
    pub(crate) handles: Vec<u32>,
    pub(crate) params: Vec<u8>,
    /// The authorization area (empty without sessions).
    pub(crate) auth: Vec<u8>,
}

/// A command before marshalling.
pub(crate) struct Command {
    pub(crate) name: &'static str,
    pub(crate) code: u32,
    pub(crate) handles: Vec<u32>,
    /// How the (first) handle is authorized.
    pub(crate) auth: Auth,
    pub(crate) params: Vec<u8>,
}

impl Command {
    fn marshal(&self) -> Vec<u8> {
        let tag = match self.auth {
            Auth::None => TPM_ST_NO_SESSIONS,
            _ => TPM_ST_SESSIONS,
        };
        let mut out = Vec::with_capacity(32 + self.params.len());
        out.extend_from_slice(&tag.to_be_bytes());
        out.extend_from_slice(&[0; 4]); // commandSize, filled in below
        out.extend_from_slice(&self.code.to_be_bytes());
        for h in &self.handles {
            out.extend_from_slice(&h.to_be_bytes());
        }
        let sessions = self.sessions();
        if !sessions.is_empty() {
            let size: usize = sessions
                .iter()
                .map(|(_, nonce, _, hmac)| 4 + 2 + nonce.len() + 1 + 2 + hmac.len())
                .sum();
            out.extend_from_slice(&(size as u32).to_be_bytes());
            for (handle, nonce, attributes, hmac) in sessions {
                out.extend_from_slice(&handle.to_be_bytes());
                put_tpm2b(&mut out, nonce);
                out.push(attributes);
                put_tpm2b(&mut out, hmac);
            }
        }
        out.extend_from_slice(&self.params);
        let size = (out.len() as u32).to_be_bytes();
        out[2..6].copy_from_slice(&size);
        out
    }

    /// The TPMS_AUTH_COMMANDs, in handle order: (session handle, nonce, attributes, password
    /// or HMAC). The password and unsalted policy sessions have an empty nonce, attributes 0
    /// (a policy session ends with the command) and an empty password or HMAC (the policies
    /// used here, of PCRs or of a hierarchy's secret, need none).
    fn sessions(&self) -> Vec<(u32, &[u8], u8, &[u8])> {
        match &self.auth {
            Auth::None => vec![],
            Auth::Password => vec![(TPM_RS_PW, &[][..], 0, &[][..])],
            Auth::PasswordThenPolicy(handle) => vec![
                (TPM_RS_PW, &[][..], 0, &[][..]),
                (*handle, &[][..], 0, &[][..]),
            ],
            Auth::Hmac {
                handle,
                nonce,
                attributes,
                hmac,
            } => vec![(*handle, &nonce[..], *attributes, &hmac[..])],
        }
    }

    /// Send, check the response code, and return (response handles, parameter bytes).
    /// TPM_RC_RETRY, TPM_RC_YIELDED and TPM_RC_TESTING mean "not now, send it again"
    /// (Part 1, §6.4): libtpms answers RETRY to a first ECDSA signature, for one. The command
    /// is resent a bounded number of times.
    pub(crate) fn run<T: Transport + ?Sized>(
        &self,
        t: &mut T,
        response_handles: usize,
    ) -> Result<(Vec<u32>, Vec<u8>), TpmError> {
        self.exchange(t, response_handles)
            .map(|r| (r.handles, r.params))
    }

    /// [`Command::run`], keeping the response's authorization area (TPMS_AUTH_RESPONSE) for a
    /// salted session to check.
    pub(crate) fn exchange<T: Transport + ?Sized>(
        &self,
        t: &mut T,
        response_handles: usize,
    ) -> Result<Response, TpmError> {
        // Wiped when done: a TPM2_Create's command carries the secret it seals.
        let command = zeroize::Zeroizing::new(self.marshal());
        let mut attempt = 0;
        loop {
            match self.run_once(t, &command, response_handles) {
                Err(TpmError::Response { rc, .. })
                    if RETRY_CODES.contains(&rc) && attempt < MAX_RETRIES =>
                {
                    attempt += 1;
                    std::thread::sleep(std::time::Duration::from_millis(10 * u64::from(attempt)));
                }
                other => return other,
            }
        }
    }

    fn run_once<T: Transport + ?Sized>(
        &self,
        t: &mut T,
        command: &[u8],
        response_handles: usize,
    ) -> Result<Response, TpmError> {
        // Wiped when done: TPM2_Unseal's response in the clear holds the secret.
        let response = zeroize::Zeroizing::new(t.transact(command)?);
        let parse = |source| self.parse_error(source);
        let mut r = Reader::new(&response);
        let tag = r.u16("tag").map_err(parse)?;
        let size = r.u32("responseSize").map_err(parse)?;
        let rc = r.u32("responseCode").map_err(parse)?;
        if size as usize != response.len() {
            return Err(self.malformed(format!(
                "declares {size} bytes, {} received",
                response.len()
            )));
        }
        if rc != 0 {
            return Err(TpmError::Response {
                command: self.name,
                rc,
            });
        }
        let handles = (0..response_handles)
            .map(|_| r.u32("handle"))
            .collect::<Result<Vec<_>, _>>()
            .map_err(parse)?;
        let params = match tag {
            TPM_ST_SESSIONS => {
                let n = r.u32("parameterSize").map_err(parse)?;
                r.take(n as usize, "parameters").map_err(parse)?
            }
            TPM_ST_NO_SESSIONS => r.take(r.remaining(), "parameters").map_err(parse)?,
            other => return Err(self.malformed(format!("unknown tag {other:#x}"))),
        };
        let auth = r.take(r.remaining(), "authorization").map_err(parse)?;
        Ok(Response {
            handles,
            params: params.to_vec(),
            auth: auth.to_vec(),
        })
    }

    /// The response to this command did not parse.
    pub(crate) fn parse_error(&self, source: attest::tpm::TpmError) -> TpmError {
        TpmError::Parse {
            command: self.name,
            source,
        }
    }

    /// The first of the response's handles (the object or session the command made).
    pub(crate) fn first_handle(&self, handles: Vec<u32>) -> Result<u32, TpmError> {
        handles
            .first()
            .copied()
            .ok_or_else(|| self.malformed("no handle".into()))
    }

    pub(crate) fn malformed(&self, reason: String) -> TpmError {
        TpmError::Malformed {
            command: self.name,
            reason,
        }
    }
}

/// The parameters TPM2_CreatePrimary and TPM2_Create share: an empty authorization value
/// with `data` as the sensitive part, the object's `template` (TPMT_PUBLIC), no outside
/// information and no creation PCRs.
///
/// `data` is a secret being sealed: the sensitive part is wiped when dropped, and both
/// buffers are allocated at their final size, so no reallocation leaves a copy behind. The
/// caller wipes the parameters returned.
pub(crate) fn create_params(data: &[u8], template: &[u8]) -> Vec<u8> {
    let mut sensitive = zeroize::Zeroizing::new(Vec::with_capacity(2 + 2 + data.len()));
    sensitive.extend_from_slice(&[0, 0]); // userAuth: empty
    put_tpm2b(&mut sensitive, data);
    let mut params = Vec::with_capacity(2 + sensitive.len() + 2 + template.len() + 2 + 4);
    put_tpm2b(&mut params, &sensitive);
    put_tpm2b(&mut params, template);
    params.extend_from_slice(&[0, 0]); // outsideInfo
    params.extend_from_slice(&[0, 0, 0, 0]); // creationPCR: none
    params
}

/// TPM2_CreatePrimary in `hierarchy` (empty password) from `template`.
pub(crate) fn create_primary(hierarchy: u32, template: &[u8]) -> Command {
    Command {
        name: "TPM2_CreatePrimary",
        code: TPM_CC_CREATE_PRIMARY,
        handles: vec![hierarchy],
        auth: Auth::Password,
        params: create_params(&[], template),
    }
}

/// TPM2_CreatePrimary of the AK in the endorsement hierarchy from the fixed template.
/// Returns the transient handle (flush it with [`flush_context`]) and the AK's TPMT_PUBLIC.
pub fn create_ak<T: Transport + ?Sized>(t: &mut T) -> Result<(u32, Vec<u8>), TpmError> {
    let cmd = create_primary(TPM_RH_ENDORSEMENT, &ak_template());
    let (handles, params) = cmd.run(t, 1)?;
    let public = Reader::new(&params)
        .tpm2b("outPublic")
        .map_err(|e| cmd.parse_error(e))?
        .to_vec();
    // The TPM must have made exactly the key the verifier will accept.
    let checked = AkPublic::parse(&public).map_err(|e| cmd.parse_error(e));
    match (handles.first(), checked) {
        (Some(&h), Ok(_)) => Ok((h, public)),
        (Some(&h), Err(e)) => {
            let _ = flush_context(t, h);
            Err(e)
        }
        (None, _) => Err(cmd.malformed("no object handle".into())),
    }
}

/// TPM2_FlushContext: unload a transient object.
pub fn flush_context<T: Transport + ?Sized>(t: &mut T, handle: u32) -> Result<(), TpmError> {
    Command {
        name: "TPM2_FlushContext",
        code: TPM_CC_FLUSH_CONTEXT,
        handles: vec![],
        auth: Auth::None,
        params: handle.to_be_bytes().to_vec(),
    }
    .run(t, 0)
    .map(drop)
}

/// The AK's TPMT_PUBLIC, for the operator to enrol (`hostd tpm-ak`). The same TPM always
/// answers the same bytes.
pub fn ak_public<T: Transport + ?Sized>(t: &mut T) -> Result<Vec<u8>, TpmError> {
    let (handle, public) = create_ak(t)?;
    flush_context(t, handle)?;
    Ok(public)
}

/// The TPM's dictionary-attack state (Part 2, §6.13: TPM_PT_LOCKOUT_*).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lockout {
    /// Failed authorizations counted (power cuts after a DA-protected use count too).
    pub failed_tries: u32,
    /// At this many the TPM refuses every DA-protected authorization (TPM_RC_LOCKOUT).
    pub max_tries: u32,
    /// Seconds for one failed try to be forgiven.
    pub interval: u32,
    /// Seconds before the lockout hierarchy may be tried again after its own failure.
    pub recovery: u32,
}

/// TPM2_GetCapability of the dictionary-attack properties.
pub fn lockout<T: Transport + ?Sized>(t: &mut T) -> Result<Lockout, TpmError> {
    let values = properties(t, TPM_PT_LOCKOUT_COUNTER, 4)?;
    let value = |offset: u32| {
        values
            .get(&(TPM_PT_LOCKOUT_COUNTER + offset))
            .copied()
            .ok_or_else(|| TpmError::Malformed {
                command: "TPM2_GetCapability",
                reason: format!("no TPM_PT_LOCKOUT property +{offset}"),
            })
    };
    Ok(Lockout {
        failed_tries: value(0)?,
        max_tries: value(1)?,
        interval: value(2)?,
        recovery: value(3)?,
    })
}

/// TPM2_GetCapability of up to `count` (at most 8) fixed or variable TPM properties from
/// `first`, by property.
pub(crate) fn properties<T: Transport + ?Sized>(
    t: &mut T,
    first: u32,
    count: u32,
) -> Result<BTreeMap<u32, u32>, TpmError> {
    let count = count.min(8);
    let mut params = TPM_CAP_TPM_PROPERTIES.to_be_bytes().to_vec();
    params.extend_from_slice(&first.to_be_bytes());
    params.extend_from_slice(&count.to_be_bytes());
    let cmd = Command {
        name: "TPM2_GetCapability",
        code: TPM_CC_GET_CAPABILITY,
        handles: vec![],
        auth: Auth::None,
        params,
    };
    let (_, params) = cmd.run(t, 0)?;
    let parse = |source| cmd.parse_error(source);
    let mut r = Reader::new(&params);
    r.u8("moreData").map_err(parse)?;
    r.u32("capability").map_err(parse)?;
    let returned = r.u32("TPML_TAGGED_TPM_PROPERTY.count").map_err(parse)?;
    let mut values = BTreeMap::new();
    for _ in 0..returned.min(count) {
        let property = r.u32("property").map_err(parse)?;
        values.insert(property, r.u32("value").map_err(parse)?);
    }
    Ok(values)
}

/// TPM2_PCR_Read of the SHA-256 bank's PCRs 4, 7, 11 and 12, by index.
pub fn pcr_read<T: Transport + ?Sized>(t: &mut T) -> Result<BTreeMap<u8, [u8; 32]>, TpmError> {
    let cmd = Command {
        name: "TPM2_PCR_Read",
        code: TPM_CC_PCR_READ,
        handles: vec![],
        auth: Auth::None,
        params: quoted_pcr_selection(),
    };
    let (_, params) = cmd.run(t, 0)?;
    let parse = |source| cmd.parse_error(source);
    let mut r = Reader::new(&params);
    r.u32("pcrUpdateCounter").map_err(parse)?;
    let selection = parse_pcr_selection(&mut r).map_err(parse)?;
    let returned = selection.first().map(|s| (s.hash, s.bitmap.as_slice()));
    if selection.len() != 1 || returned != Some((TPM_ALG_SHA256, &QUOTED_PCR_BITMAP[..])) {
        return Err(cmd.malformed(format!(
            "returned selection {selection:?}: the SHA-256 bank is not active?"
        )));
    }
    let count = r.u32("TPML_DIGEST.count").map_err(parse)?;
    if count as usize != QUOTED_PCRS.len() {
        return Err(cmd.malformed(format!("{count} digests for 3 PCRs")));
    }
    let mut out = BTreeMap::new();
    for index in QUOTED_PCRS {
        let d = r.tpm2b("pcrValues").map_err(parse)?;
        let v: [u8; 32] = d
            .try_into()
            .map_err(|_| cmd.malformed(format!("PCR {index}: {} bytes", d.len())))?;
        out.insert(index, v);
    }
    r.finish("TPM2_PCR_Read response").map_err(parse)?;
    Ok(out)
}

/// TPM2_PCR_Extend of the SHA-256 bank: PCR := SHA-256(PCR || digest). The image's initrd
/// (`sovereign-init`) measures its boot phases into PCR 11 with it; tests use it to change a
/// PCR.
pub fn pcr_extend<T: Transport + ?Sized>(
    t: &mut T,
    index: u8,
    digest: &[u8; 32],
) -> Result<(), TpmError> {
    let mut params = 1u32.to_be_bytes().to_vec();
    params.extend_from_slice(&TPM_ALG_SHA256.to_be_bytes());
    params.extend_from_slice(digest);
    Command {
        name: "TPM2_PCR_Extend",
        code: TPM_CC_PCR_EXTEND,
        handles: vec![u32::from(index)],
        auth: Auth::Password,
        params,
    }
    .run(t, 0)
    .map(drop)
}

/// TPM2_Quote with the loaded AK `handle`: qualifyingData = `nonce`, the key's own scheme,
/// PCRs 4, 7, 11 and 12 of the SHA-256 bank. Returns (TPMS_ATTEST bytes, TPMT_SIGNATURE bytes).
fn tpm_quote<T: Transport + ?Sized>(
    t: &mut T,
    handle: u32,
    nonce: &[u8; 32],
) -> Result<(Vec<u8>, Vec<u8>), TpmError> {
    let mut params = Vec::new();
    put_tpm2b(&mut params, nonce);
    params.extend_from_slice(&TPM_ALG_NULL.to_be_bytes()); // inScheme: the key's
    params.extend_from_slice(&quoted_pcr_selection());
    let cmd = Command {
        name: "TPM2_Quote",
        code: TPM_CC_QUOTE,
        handles: vec![handle],
        auth: Auth::Password,
        params,
    };
    let (_, params) = cmd.run(t, 0)?;
    let mut r = Reader::new(&params);
    let attest = r.tpm2b("quoted").map_err(|e| cmd.parse_error(e))?;
    let signature = &params[params.len() - r.remaining()..];
    Ok((attest.to_vec(), signature.to_vec()))
}

/// A quote answering `nonce`, with the PCR values it covers: the `tpm` claim of evidence.
pub fn quote<T: Transport + ?Sized>(t: &mut T, nonce: &[u8; 32]) -> Result<QuoteClaim, TpmError> {
    let (handle, _) = create_ak(t)?;
    let result = quote_with(t, handle, nonce);
    let flushed = flush_context(t, handle);
    let claim = result?;
    flushed?;
    Ok(claim)
}

/// [`quote`] with an AK already loaded at `handle`. The values are read after the quote and
/// must hash to its PCR digest; if a PCR was extended in between, the quote is taken again.
pub fn quote_with<T: Transport + ?Sized>(
    t: &mut T,
    handle: u32,
    nonce: &[u8; 32],
) -> Result<QuoteClaim, TpmError> {
    for _ in 0..QUOTE_ATTEMPTS {
        let (attest, signature) = tpm_quote(t, handle, nonce)?;
        let info = QuoteInfo::parse(&attest).map_err(|source| TpmError::Parse {
            command: "TPM2_Quote",
            source,
        })?;
        let pcrs = pcr_read(t)?;
        let ordered = QUOTED_PCRS.map(|i| pcrs.get(&i).copied().unwrap_or_default());
        if info.pcr_digest == pcr_digest(&ordered) {
            return Ok(QuoteClaim {
                attest,
                signature,
                pcrs: pcrs.into_iter().map(|(i, v)| (i.to_string(), v)).collect(),
                event_log: None,
            });
        }
    }
    Err(TpmError::PcrsChanging {
        attempts: QUOTE_ATTEMPTS,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Replays canned responses and records commands.
    struct Canned {
        responses: Vec<Vec<u8>>,
        sent: Vec<Vec<u8>>,
    }

    impl Transport for Canned {
        fn transact(&mut self, command: &[u8]) -> Result<Vec<u8>, TpmError> {
            self.sent.push(command.to_vec());
            Ok(self.responses.remove(0))
        }
    }

    fn response(tag: u16, rc: u32, body: &[u8]) -> Vec<u8> {
        let mut out = tag.to_be_bytes().to_vec();
        out.extend_from_slice(&((10 + body.len()) as u32).to_be_bytes());
        out.extend_from_slice(&rc.to_be_bytes());
        out.extend_from_slice(body);
        out
    }

    #[test]
    fn commands_are_framed_with_size_and_password_session() {
        let mut t = Canned {
            responses: vec![response(TPM_ST_SESSIONS, 0, &[0, 0, 0, 0, 0, 0, 0, 0, 0])],
            sent: vec![],
        };
        pcr_extend(&mut t, 11, &[0xab; 32]).unwrap();
        let c = &t.sent[0];
        assert_eq!(&c[..2], &[0x80, 0x02]);
        assert_eq!(
            u32::from_be_bytes([c[2], c[3], c[4], c[5]]) as usize,
            c.len()
        );
        assert_eq!(&c[6..10], &TPM_CC_PCR_EXTEND.to_be_bytes());
        assert_eq!(&c[10..14], &11u32.to_be_bytes());
        assert_eq!(&c[14..27], &[0, 0, 0, 9, 0x40, 0, 0, 9, 0, 0, 0, 0, 0]);
        assert_eq!(&c[27..33], &[0, 0, 0, 1, 0, 0x0b]);
        assert_eq!(&c[33..], &[0xab; 32]);
    }

    #[test]
    fn error_codes_are_typed_with_their_value() {
        let mut t = Canned {
            responses: vec![response(TPM_ST_NO_SESSIONS, 0x100, &[])],
            sent: vec![],
        };
        match pcr_read(&mut t) {
            Err(TpmError::Response { command, rc }) => {
                assert_eq!((command, rc), ("TPM2_PCR_Read", 0x100));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn retry_codes_resend_the_command() {
        let ok = response(TPM_ST_NO_SESSIONS, 0, &[]);
        let mut t = Canned {
            responses: vec![response(TPM_ST_NO_SESSIONS, 0x922, &[]), ok],
            sent: vec![],
        };
        flush_context(&mut t, 0x8000_0000).unwrap();
        assert_eq!(t.sent.len(), 2);
        assert_eq!(t.sent[0], t.sent[1]);
    }

    #[test]
    fn create_params_are_laid_out_in_one_allocation() {
        let secret = [0x5a; 32];
        let template = [7u8; 45];
        let params = create_params(&secret, &template);
        // TPM2B_SENSITIVE_CREATE { size, userAuth (empty), data }, then the template.
        let mut expected = vec![0, 36, 0, 0, 0, 32];
        expected.extend_from_slice(&secret);
        expected.extend_from_slice(&[0, 45]);
        expected.extend_from_slice(&template);
        expected.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
        assert_eq!(params, expected);
        // Sized up front: a grown buffer would have left a copy of the secret in the old one.
        assert_eq!(params.capacity(), params.len());
    }

    #[test]
    fn short_and_mis_sized_responses_are_errors_not_panics() {
        for bad in [
            vec![],
            vec![0x80],
            response(TPM_ST_NO_SESSIONS, 0, &[0, 0]),
            {
                let mut r = response(TPM_ST_NO_SESSIONS, 0, &[]);
                r[5] = 50;
                r
            },
        ] {
            let mut t = Canned {
                responses: vec![bad],
                sent: vec![],
            };
            assert!(pcr_read(&mut t).is_err());
        }
    }
}
