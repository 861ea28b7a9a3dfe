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
        storage_key: None,
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

    // The same secret under an RSA storage key crosses in the clear (no RSA salting here):
    // the check above can see a secret when there is one to see.
    bus.seen.clear();
    let rsa = seal(&mut bus, secret, &[11], "sha256", PrimaryAlg::Rsa).unwrap();
    let object = pcr_11_object(&rsa, PrimaryAlg::Rsa);
    assert_eq!(unseal(&mut bus, &object).unwrap().as_bytes(), secret);
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
    assert!(crate::session::ecc_point(public).unwrap().is_some());
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
