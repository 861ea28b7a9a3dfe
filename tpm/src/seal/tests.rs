//! Against swtpm: the policy digest is the one TPM 2.0 Part 3 (§23.7) defines, which systemd
//! computes in software; the sealed object is what systemd's token describes; bad input is
//! refused before the TPM sees it.

use super::*;
use crate::command::pcr_read;
use crate::swtpm::Swtpm;
use crate::unseal::{unseal, SealedObject};
use sha2::{Digest, Sha256};

const TPM_CC_POLICY_PCR: u32 = 0x0000_017f;

/// PolicyPCR's digest from an empty policy: H(0^32 || TPM_CC_PolicyPCR || pcrs || H(values)).
fn expected_policy(selection: &[u8], values: &[[u8; 32]]) -> Vec<u8> {
    let mut pcr_digest = Sha256::new();
    for v in values {
        pcr_digest.update(v);
    }
    let mut h = Sha256::new();
    h.update([0u8; 32]);
    h.update(TPM_CC_POLICY_PCR.to_be_bytes());
    h.update(selection);
    h.update(pcr_digest.finalize());
    h.finalize().to_vec()
}

#[test]
fn the_policy_is_part_3s_policy_pcr_digest_and_the_object_unseals() {
    let dir = tempfile::tempdir().unwrap();
    let sw = Swtpm::start(dir.path()).unwrap();
    let mut t = sw.connect().unwrap();
    crate::command::pcr_extend(&mut t, 11, &[3; 32]).unwrap();
    for alg in [PrimaryAlg::Ecc, PrimaryAlg::Rsa] {
        let sealed = seal(&mut t, &[9; 32], &[11], "sha256", alg).unwrap();
        let pcr11 = pcr_read(&mut t).unwrap()[&11];
        let selection = pcr_selection(TPM_ALG_SHA256, &[11]).unwrap();
        assert_eq!(sealed.policy_hash, expected_policy(&selection, &[pcr11]));
        let object = SealedObject {
            blob: &sealed.blob,
            pcrs: &[11],
            bank: "sha256",
            primary: Some(alg),
            storage_key: Some(&sealed.storage_key),
        };
        assert_eq!(unseal(&mut t, &object).unwrap().as_bytes(), [9; 32]);
        // The object's public area carries the policy and no userWithAuth.
        let mut r = Reader::new(&sealed.blob);
        r.tpm2b("private").unwrap();
        let public = r.tpm2b("public").unwrap().to_vec();
        let attributes = u32::from_be_bytes(public[4..8].try_into().unwrap());
        assert_eq!(attributes, SEALED_ATTRIBUTES);
        assert_eq!(&public[10..42], &sealed.policy_hash[..]);
    }
}

#[test]
fn each_seal_is_a_new_object_and_bad_input_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let sw = Swtpm::start(dir.path()).unwrap();
    let mut t = sw.connect().unwrap();
    let a = seal(&mut t, b"secret", &[11], "sha256", PrimaryAlg::Ecc).unwrap();
    let b = seal(&mut t, b"secret", &[11], "sha256", PrimaryAlg::Ecc).unwrap();
    assert_eq!(a.policy_hash, b.policy_hash);
    assert_ne!(
        a.blob, b.blob,
        "the TPM's seed and IV make each private area new"
    );
    for (secret, pcrs, bank) in [
        (&[][..], &[11][..], "sha256"),
        (&[1; 129][..], &[11][..], "sha256"),
        (&b"s"[..], &[24][..], "sha256"),
        (&b"s"[..], &[11][..], "sm3"),
    ] {
        assert!(matches!(
            seal(&mut t, secret, pcrs, bank, PrimaryAlg::Ecc),
            Err(TpmError::Unsupported { .. })
        ));
    }
    // Nothing was left loaded: more seals than a TPM has object slots still work.
    for _ in 0..6 {
        seal(&mut t, b"secret", &[11], "sha256", PrimaryAlg::Ecc).unwrap();
    }
}
