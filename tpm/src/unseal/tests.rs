//! Against swtpm: an object sealed to PCR 11 the way systemd seals it (TPM2_Create under the
//! storage key, authPolicy from a trial PolicyPCR session) unseals while PCR 11 holds, and
//! not after PCR 11 is extended.

use super::*;
use crate::command::{create_params, pcr_extend};
use crate::swtpm::Swtpm;

const TPM_CC_CREATE: u32 = 0x0000_0153;
const TPM_CC_POLICY_GET_DIGEST: u32 = 0x0000_0189;
const TPM_SE_TRIAL: u8 = 0x03;
const TPM_ALG_KEYEDHASH: u16 = 0x0008;
/// fixedTPM | fixedParent, as systemd's sealed objects have.
const SEALED_ATTRIBUTES: u32 = (1 << 1) | (1 << 4);

/// The policy digest of PolicyPCR over `selection` at the PCRs' current values.
fn trial_policy<T: Transport + ?Sized>(t: &mut T, selection: &[u8]) -> Vec<u8> {
    let session = start_session(t, TPM_SE_TRIAL).unwrap();
    policy_pcr(t, session, selection).unwrap();
    let cmd = Command {
        name: "TPM2_PolicyGetDigest",
        code: TPM_CC_POLICY_GET_DIGEST,
        handles: vec![session],
        auth: Auth::None,
        params: vec![],
    };
    let (_, params) = cmd.run(t, 0).unwrap();
    flush_context(t, session).unwrap();
    Reader::new(&params).tpm2b("policyDigest").unwrap().to_vec()
}

/// TPM2_Create of a keyed-hash object holding `secret` under the storage key, with `policy`
/// as its authPolicy; returns the token's blob (TPM2B_PRIVATE then TPM2B_PUBLIC).
fn seal<T: Transport + ?Sized>(t: &mut T, secret: &[u8], policy: &[u8]) -> Vec<u8> {
    let primary = create_storage_key(t, PrimaryAlg::Ecc).unwrap();
    let mut public = TPM_ALG_KEYEDHASH.to_be_bytes().to_vec();
    public.extend_from_slice(&TPM_ALG_SHA256.to_be_bytes());
    public.extend_from_slice(&SEALED_ATTRIBUTES.to_be_bytes());
    put_tpm2b(&mut public, policy);
    public.extend_from_slice(&TPM_ALG_NULL.to_be_bytes()); // scheme
    public.extend_from_slice(&[0, 0]); // unique
    let cmd = Command {
        name: "TPM2_Create",
        code: TPM_CC_CREATE,
        handles: vec![primary],
        auth: Auth::Password,
        params: create_params(secret, &public),
    };
    let (_, params) = cmd.run(t, 0).unwrap();
    flush_context(t, primary).unwrap();
    let mut r = Reader::new(&params);
    let mut blob = Vec::new();
    put_tpm2b(&mut blob, r.tpm2b("outPrivate").unwrap());
    put_tpm2b(&mut blob, r.tpm2b("outPublic").unwrap());
    blob
}

#[test]
fn sealed_to_pcr_11_unseals_until_pcr_11_changes() {
    let dir = tempfile::tempdir().unwrap();
    let sw = Swtpm::start(dir.path()).unwrap();
    let mut t = sw.connect().unwrap();
    let selection = pcr_selection(TPM_ALG_SHA256, &[11]).unwrap();
    let policy = trial_policy(&mut t, &selection);
    let blob = seal(&mut t, b"the volume's passphrase", &policy);
    let object = SealedObject {
        blob: &blob,
        pcrs: &[11],
        bank: "sha256",
        primary: Some(PrimaryAlg::Ecc),
    };
    let secret = unseal(&mut t, &object).unwrap();
    assert_eq!(secret.as_bytes(), b"the volume's passphrase");
    assert_eq!(format!("{secret:?}"), "Secret(23 bytes)");
    // Older tokens name no primary algorithm: ECC is tried first, as systemd does.
    let unnamed = SealedObject {
        primary: None,
        ..object.clone()
    };
    assert_eq!(
        unseal(&mut t, &unnamed).unwrap().as_bytes(),
        secret.as_bytes()
    );

    pcr_extend(&mut t, 11, &[7; 32]).unwrap();
    match unseal(&mut t, &object) {
        Err(TpmError::Response { command, rc }) => {
            assert_eq!((command, rc), ("TPM2_Unseal", 0x99d));
        }
        other => panic!("unsealed under another PCR 11: {other:?}"),
    }
    // Nothing is left loaded by the failure: a TPM holds only a few transient objects.
    for _ in 0..8 {
        assert!(unseal(&mut t, &object).is_err());
    }
}

#[test]
fn a_damaged_token_is_named_not_sent() {
    let dir = tempfile::tempdir().unwrap();
    let sw = Swtpm::start(dir.path()).unwrap();
    let mut t = sw.connect().unwrap();
    let bad_bank = SealedObject {
        blob: &[0, 0, 0, 0],
        pcrs: &[11],
        bank: "sha384",
        primary: None,
    };
    assert!(matches!(
        unseal(&mut t, &bad_bank),
        Err(TpmError::Unsupported {
            what: "PCR bank",
            ..
        })
    ));
    let truncated = SealedObject {
        blob: &[0, 9, 1, 2],
        bank: "sha256",
        ..bad_bank.clone()
    };
    assert!(matches!(
        unseal(&mut t, &truncated),
        Err(TpmError::SealedObject(_))
    ));
    let pcr_out_of_range = SealedObject {
        blob: &[0, 0, 0, 0],
        pcrs: &[24],
        bank: "sha256",
        primary: None,
    };
    assert!(matches!(
        unseal(&mut t, &pcr_out_of_range),
        Err(TpmError::Unsupported {
            what: "PCR index",
            ..
        })
    ));
    assert!(PrimaryAlg::parse("ecc").is_ok() && PrimaryAlg::parse("dsa").is_err());
}
