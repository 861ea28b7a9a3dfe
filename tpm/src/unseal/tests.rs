//! Against swtpm: an object sealed to PCR 11 the way systemd seals it ([`crate::seal`])
//! unseals while PCR 11 holds, and not after PCR 11 is extended.

use super::*;
use crate::command::pcr_extend;
use crate::seal::seal;
use crate::swtpm::Swtpm;

#[test]
fn sealed_to_pcr_11_unseals_until_pcr_11_changes() {
    let dir = tempfile::tempdir().unwrap();
    let sw = Swtpm::start(dir.path()).unwrap();
    let mut t = sw.connect().unwrap();
    let sealed = seal(
        &mut t,
        b"the volume's passphrase",
        &[11],
        "sha256",
        PrimaryAlg::Ecc,
    )
    .unwrap();
    let blob = sealed.blob;
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
