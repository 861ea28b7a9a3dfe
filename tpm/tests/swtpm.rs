//! The TPM client against a real software TPM (swtpm): the AK is stable across restarts, the
//! quote verifies with `attest`, and an extended PCR changes what verifies.

use attest::tpm::{verify_quote, AkPublic, TpmError as QuoteError};
use sha2::{Digest, Sha256};
use tpm::swtpm::Swtpm;

const NONCE: [u8; 32] = [0x42; 32];

#[test]
fn the_same_tpm_derives_the_same_ak_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let first = {
        let sw = Swtpm::start(dir.path()).unwrap();
        tpm::ak_public(&mut sw.connect().unwrap()).unwrap()
    };
    let sw = Swtpm::start(dir.path()).unwrap();
    let mut t = sw.connect().unwrap();
    assert_eq!(tpm::ak_public(&mut t).unwrap(), first);
    assert!(AkPublic::parse(&first).is_ok());
    // Another TPM (fresh state) has another endorsement seed, so another AK.
    let other_dir = tempfile::tempdir().unwrap();
    let other = Swtpm::start(other_dir.path()).unwrap();
    assert_ne!(
        tpm::ak_public(&mut other.connect().unwrap()).unwrap(),
        first
    );
}

#[test]
fn a_quote_verifies_and_an_extended_pcr_11_changes_what_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let sw = Swtpm::start(dir.path()).unwrap();
    let mut t = sw.connect().unwrap();
    let ak = AkPublic::parse(&tpm::ak_public(&mut t).unwrap()).unwrap();

    let before = tpm::quote(&mut t, &NONCE).unwrap();
    let pcrs = verify_quote(&ak, &before, &NONCE).unwrap();
    assert_eq!(pcrs, tpm::pcr_read(&mut t).unwrap());
    assert!(matches!(
        verify_quote(&ak, &before, &[0x43; 32]),
        Err(QuoteError::NonceMismatch { .. })
    ));

    let event: [u8; 32] = Sha256::digest(b"a different UKI").into();
    tpm::pcr_extend(&mut t, 11, &event).unwrap();
    let after = tpm::quote(&mut t, &NONCE).unwrap();
    let mut expected_11 = Sha256::new();
    expected_11.update(pcrs[&11]);
    expected_11.update(event);
    assert_eq!(after.pcrs["11"], <[u8; 32]>::from(expected_11.finalize()));
    assert_eq!(after.pcrs["4"], before.pcrs["4"]);

    // The new quote with the old values: the digest no longer matches.
    let mut stale = after.clone();
    stale.pcrs = before.pcrs.clone();
    assert!(matches!(
        verify_quote(&ak, &stale, &NONCE),
        Err(QuoteError::PcrDigestMismatch { .. })
    ));
    let now = verify_quote(&ak, &after, &NONCE).unwrap();
    assert_ne!(now[&11], pcrs[&11]);
}

#[test]
fn a_second_connection_after_the_first_closes_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let sw = Swtpm::start(dir.path()).unwrap();
    let a = tpm::pcr_read(&mut sw.connect().unwrap()).unwrap();
    let b = tpm::pcr_read(&mut sw.connect().unwrap()).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.keys().copied().collect::<Vec<_>>(), vec![4, 7, 11, 12]);
}
