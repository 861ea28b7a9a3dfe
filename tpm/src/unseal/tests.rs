//! Against swtpm: an object sealed to PCR 11 the way systemd 252 seals it (its storage key,
//! no pin), or as [`crate::seal`] does (noDA, pinned), unseals while PCR 11 holds, and not
//! after PCR 11 is extended; the secret crosses the bus encrypted; power cuts do not lock the
//! TPM out.

use super::*;
use crate::command::pcr_extend;
use crate::seal::{seal, seal_under};
use crate::swtpm::Swtpm;

#[test]
fn sealed_to_pcr_11_unseals_until_pcr_11_changes() {
    let dir = tempfile::tempdir().unwrap();
    let sw = Swtpm::start(dir.path()).unwrap();
    let mut t = sw.connect().unwrap();
    // A token systemd 252 made: its storage key, nothing pinned.
    let sealed = seal_under(
        &mut t,
        b"the volume's passphrase",
        &[11],
        "sha256",
        PrimaryAlg::Ecc,
        Srk::Systemd252,
    )
    .unwrap();
    let blob = sealed.blob;
    let object = SealedObject {
        blob: &blob,
        pcrs: &[11],
        bank: "sha256",
        primary: Some(PrimaryAlg::Ecc),
        storage_key: None,
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

/// The state disk's policy (PCRs 4, 11 and 12), over power cycles of one TPM: the boot
/// that sealed it, repeated, unseals; a boot where any one of the three ends elsewhere does
/// not, even with PCR 11 brought to its sealed value (another kernel replaying PCR 11's
/// public extends: PCR 4 holds that kernel).
#[test]
fn sealed_to_pcrs_4_11_and_12_unseals_only_while_all_three_hold() {
    let pcrs = [4u32, 11, 12];
    let dir = tempfile::tempdir().unwrap();
    let boot = |pcr4: u8, pcr11: u8, pcr12: Option<u8>| {
        let sw = Swtpm::start(dir.path()).unwrap();
        let mut t = sw.connect().unwrap();
        pcr_extend(&mut t, 4, &[pcr4; 32]).unwrap();
        pcr_extend(&mut t, 11, &[pcr11; 32]).unwrap();
        if let Some(v) = pcr12 {
            pcr_extend(&mut t, 12, &[v; 32]).unwrap();
        }
        (sw, t)
    };
    let (sw, mut t) = boot(4, 11, None);
    let sealed = seal(&mut t, b"passphrase", &pcrs, "sha256", PrimaryAlg::Ecc).unwrap();
    drop(t);
    drop(sw);
    let object = SealedObject {
        blob: &sealed.blob,
        pcrs: &pcrs,
        bank: "sha256",
        primary: Some(PrimaryAlg::Ecc),
        storage_key: Some(&sealed.storage_key),
    };
    for (pcr4, pcr11, pcr12, opens) in [
        (4, 11, None, true),
        (5, 11, None, false),
        (4, 10, None, false),
        (4, 11, Some(12), false),
        (4, 11, None, true),
    ] {
        let (_sw, mut t) = boot(pcr4, pcr11, pcr12);
        match unseal(&mut t, &object) {
            Ok(secret) if opens => assert_eq!(secret.as_bytes(), b"passphrase"),
            Err(TpmError::Response { command, rc }) if !opens => {
                assert_eq!((command, rc), ("TPM2_Unseal", 0x99d));
            }
            other => panic!("PCR 4 {pcr4}, 11 {pcr11}, 12 {pcr12:?}: {other:?}"),
        }
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
        storage_key: None,
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
        storage_key: None,
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

/// A TPM that answers every command with `rcs` in turn, recording the command codes.
struct Refusing {
    rcs: Vec<u32>,
    codes: Vec<u32>,
}

impl Transport for Refusing {
    fn transact(&mut self, command: &[u8]) -> Result<Vec<u8>, TpmError> {
        let code = u32::from_be_bytes([command[6], command[7], command[8], command[9]]);
        self.codes.push(code);
        let rc = self.rcs.remove(0);
        let mut response = vec![0x80, 0x01, 0, 0, 0, 10];
        response.extend_from_slice(&rc.to_be_bytes());
        Ok(response)
    }
}

#[test]
fn rsa_is_tried_only_when_the_tpm_cannot_make_the_ecc_key() {
    let object = SealedObject {
        blob: &[0, 1, 0xaa, 0, 1, 0xbb],
        pcrs: &[11],
        bank: "sha256",
        primary: None,
        storage_key: None,
    };
    const CREATE_PRIMARY: u32 = 0x131;
    // TPM_RC_TYPE and TPM_RC_CURVE about parameter 2 (inPublic), TPM_RC_ASYMMETRIC: no ECC
    // P-256 here, so the RSA key is made (and refused here too: its answer is returned).
    for unsupported in [0x2ca, 0x2e6, 0x081] {
        let mut t = Refusing {
            rcs: vec![unsupported, 0x101],
            codes: vec![],
        };
        match unseal(&mut t, &object) {
            Err(TpmError::Response { rc: 0x101, .. }) => {}
            other => panic!("{unsupported:#x}: {other:?}"),
        }
        assert_eq!(
            t.codes,
            [CREATE_PRIMARY, CREATE_PRIMARY],
            "{unsupported:#x}"
        );
    }
    // A lockout, a TPM in failure mode, a resource manager's own error: ECC's answer stands.
    for other in [0x921, 0x101, 0x000b_0081] {
        let mut t = Refusing {
            rcs: vec![other],
            codes: vec![],
        };
        match unseal(&mut t, &object) {
            Err(TpmError::Response { rc, .. }) => assert_eq!(rc, other),
            result => panic!("{other:#x}: {result:?}"),
        }
        assert_eq!(t.codes, [CREATE_PRIMARY], "{other:#x}: no RSA key tried");
    }
}

/// A bus between this client and the TPM: it keeps every command and response, and alters
/// the responses to one command code when asked.
struct Bus<'a, T: Transport> {
    tpm: &'a mut T,
    seen: Vec<Vec<u8>>,
    alter: Option<u32>,
}

impl<T: Transport> Transport for Bus<'_, T> {
    fn transact(&mut self, command: &[u8]) -> Result<Vec<u8>, TpmError> {
        let mut response = self.tpm.transact(command)?;
        let code = command
            .get(6..10)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
        // Header (10 bytes), parameterSize (4), the TPM2B's size (2): the first data byte.
        if code == self.alter && response.len() > 16 {
            response[16] ^= 1;
        }
        self.seen.push(command.to_vec());
        self.seen.push(response.clone());
        Ok(response)
    }
}

/// The token's view of `sealed`, an object sealed to PCR 11 of the sha256 bank under `alg`.
fn pcr_11_object(sealed: &crate::seal::Sealed, alg: PrimaryAlg) -> SealedObject<'_> {
    SealedObject {
        blob: &sealed.blob,
        pcrs: &[11],
        bank: "sha256",
        primary: Some(alg),
        storage_key: Some(&sealed.storage_key),
    }
}

fn on_the_bus(seen: &[Vec<u8>], secret: &[u8]) -> bool {
    seen.iter()
        .any(|m| m.windows(8).any(|w| secret.windows(8).any(|s| s == w)))
}

#[test]
fn the_secret_crosses_the_bus_encrypted_both_ways() {
    let dir = tempfile::tempdir().unwrap();
    let sw = Swtpm::start(dir.path()).unwrap();
    let mut t = sw.connect().unwrap();
    let secret = b"a volume passphrase a probe must not read";
    let mut bus = Bus {
        tpm: &mut t,
        seen: Vec::new(),
        alter: None,
    };
    let sealed = seal(&mut bus, secret, &[11], "sha256", PrimaryAlg::Ecc).unwrap();
    let object = pcr_11_object(&sealed, PrimaryAlg::Ecc);
    assert_eq!(unseal(&mut bus, &object).unwrap().as_bytes(), secret);
    assert!(bus.seen.len() > 10);
    assert!(
        !on_the_bus(&bus.seen, secret),
        "8 bytes of the secret crossed the bus in the clear"
    );

    // Under an RSA storage key too: the salt goes RSA-OAEP encrypted.
    bus.seen.clear();
    let rsa = seal(&mut bus, secret, &[11], "sha256", PrimaryAlg::Rsa).unwrap();
    let object = pcr_11_object(&rsa, PrimaryAlg::Rsa);
    assert_eq!(unseal(&mut bus, &object).unwrap().as_bytes(), secret);
    assert!(
        !on_the_bus(&bus.seen, secret),
        "8 bytes of the secret crossed the bus in the clear under the RSA key"
    );
    // The check sees a secret when there is one to see: 32 of its bytes sent in the clear
    // (as a digest to extend the debug PCR 16 with).
    bus.seen.clear();
    let digest: [u8; 32] = secret[..32].try_into().unwrap();
    crate::pcr_extend(&mut bus, 16, &digest).unwrap();
    assert!(on_the_bus(&bus.seen, secret));
}

#[test]
fn a_response_altered_on_the_bus_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let sw = Swtpm::start(dir.path()).unwrap();
    let mut t = sw.connect().unwrap();
    let secret = b"the volume's passphrase";
    let sealed = seal(&mut t, secret, &[11], "sha256", PrimaryAlg::Ecc).unwrap();
    let object = pcr_11_object(&sealed, PrimaryAlg::Ecc);
    let mut bus = Bus {
        tpm: &mut t,
        seen: Vec::new(),
        alter: Some(TPM_CC_UNSEAL),
    };
    for _ in 0..8 {
        match unseal(&mut bus, &object) {
            Err(TpmError::ResponseHmac { command }) => assert_eq!(command, "TPM2_Unseal"),
            other => panic!("an altered response was taken: {other:?}"),
        }
    }
    // Nothing was left loaded by the refusals.
    assert_eq!(unseal(&mut t, &object).unwrap().as_bytes(), secret);
}

#[test]
fn a_pinned_storage_key_holds_the_tpm_to_the_key_it_sealed_under() {
    let dir = tempfile::tempdir().unwrap();
    let sw = Swtpm::start(dir.path()).unwrap();
    let mut t = sw.connect().unwrap();
    let secret = b"the volume's passphrase";
    let sealed = seal(&mut t, secret, &[11], "sha256", PrimaryAlg::Ecc).unwrap();
    // The pin is the storage key's TPM2B_PUBLIC: an ECC key with a point.
    let mut r = Reader::new(&sealed.storage_key);
    let public = r.tpm2b("TPM2B_PUBLIC").unwrap();
    r.finish("pin").unwrap();
    assert!(matches!(
        crate::session::salt_key(public).unwrap(),
        crate::session::SaltKey::Ecc { .. }
    ));
    let object = SealedObject {
        storage_key: Some(&sealed.storage_key),
        ..pcr_11_object(&sealed, PrimaryAlg::Ecc)
    };
    assert_eq!(unseal(&mut t, &object).unwrap().as_bytes(), secret);

    // Another key pinned (one bit of its point changed): refused before the object is loaded
    // or a session started, and nothing is left loaded.
    let mut other = sealed.storage_key.clone();
    let last = other.len() - 1;
    other[last] ^= 1;
    let mut bus = Bus {
        tpm: &mut t,
        seen: Vec::new(),
        alter: None,
    };
    let pinned_other = SealedObject {
        storage_key: Some(&other),
        ..object.clone()
    };
    for _ in 0..8 {
        assert!(matches!(
            unseal(&mut bus, &pinned_other),
            Err(TpmError::StorageKeyChanged)
        ));
    }
    let sent: Vec<u32> = bus
        .seen
        .iter()
        .step_by(2)
        .map(|c| u32::from_be_bytes([c[6], c[7], c[8], c[9]]))
        .collect();
    assert!(
        !sent.contains(&TPM_CC_LOAD) && !sent.contains(&0x176),
        "{sent:x?}"
    );
    assert_eq!(unseal(&mut t, &object).unwrap().as_bytes(), secret);
}

/// Nodes lose power. A power cut (swtpm killed: no TPM2_Shutdown) after a use of a key subject
/// to dictionary-attack protection counts as a failed authorization; at swtpm's 3 the TPM
/// refuses them all, and a node could no longer open its state disk. The image's keys have
/// noDA: cuts after unseals and quotes count nothing, while each cut after a use of systemd
/// 252's storage key counts one, and three lock that key out.
#[test]
fn power_cuts_after_unseals_and_quotes_never_lock_the_tpm_out() {
    let dir = tempfile::tempdir().unwrap();
    let secret = b"the volume's passphrase";
    let sealed = {
        let sw = Swtpm::start(dir.path()).unwrap();
        let mut t = sw.connect().unwrap();
        let lockout = crate::lockout(&mut t).unwrap();
        assert_eq!((lockout.failed_tries, lockout.max_tries), (0, 3));
        seal(&mut t, secret, &[11], "sha256", PrimaryAlg::Ecc).unwrap()
    };
    let object = SealedObject {
        storage_key: Some(&sealed.storage_key),
        ..pcr_11_object(&sealed, PrimaryAlg::Ecc)
    };
    for _ in 0..5 {
        let sw = Swtpm::start(dir.path()).unwrap();
        let mut t = sw.connect().unwrap();
        assert_eq!(crate::lockout(&mut t).unwrap().failed_tries, 0);
        assert_eq!(unseal(&mut t, &object).unwrap().as_bytes(), secret);
        crate::quote(&mut t, &[1; 32]).unwrap();
    }
    // systemd 252's storage key, used and cut three times: locked out, and the error says so.
    for tries in 0..3 {
        let sw = Swtpm::start(dir.path()).unwrap();
        let mut t = sw.connect().unwrap();
        assert_eq!(crate::lockout(&mut t).unwrap().failed_tries, tries);
        let key = create_storage_key(&mut t, PrimaryAlg::Ecc, Srk::Systemd252).unwrap();
        let _ = load(&mut t, key.handle, &sealed.blob);
    }
    let sw = Swtpm::start(dir.path()).unwrap();
    let mut t = sw.connect().unwrap();
    assert_eq!(crate::lockout(&mut t).unwrap().failed_tries, 3);
    let key = create_storage_key(&mut t, PrimaryAlg::Ecc, Srk::Systemd252).unwrap();
    let refused = load(&mut t, key.handle, &sealed.blob).unwrap_err();
    assert!(
        matches!(refused, TpmError::Response { rc: 0x921, .. })
            && refused.to_string().contains("TPM_RC_LOCKOUT"),
        "{refused}"
    );
    // The image's keys are not subject to it: the state disk still opens.
    assert_eq!(unseal(&mut t, &object).unwrap().as_bytes(), secret);
}

#[test]
fn a_pin_names_the_storage_keys_template_or_is_refused() {
    let pin = |attributes: u32| {
        let mut p = vec![0, 10, 0, 0x23, 0, 0x0b];
        p.extend_from_slice(&attributes.to_be_bytes());
        p
    };
    let no_da = SYSTEMD_252_SRK_ATTRIBUTES | attest::tpm::attr::NO_DA;
    assert_eq!(Srk::of_pin(None).unwrap(), Srk::Systemd252);
    let systemd = pin(SYSTEMD_252_SRK_ATTRIBUTES);
    assert_eq!(Srk::of_pin(Some(&systemd)).unwrap(), Srk::Systemd252);
    assert_eq!(Srk::of_pin(Some(&pin(no_da))).unwrap(), Srk::NoDa);
    for bad in [pin(no_da & !(1 << 16)), vec![0, 1]] {
        assert!(matches!(
            Srk::of_pin(Some(&bad)),
            Err(TpmError::Unsupported {
                what: "pinned storage key's attributes",
                ..
            })
        ));
    }
}
