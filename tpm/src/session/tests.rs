//! The public-area parser (the KDFs' known answers are `attest::tpm::kdf`'s tests). That the
//! TPM derives the same keys is what the swtpm tests of `seal` and `unseal` show: a wrong salt
//! or session key fails the command's HMAC there.

use super::*;

fn ecc_public(symmetric: bool, x: &[u8], y: &[u8]) -> Vec<u8> {
    let mut p = Vec::new();
    for v in [0x0023u16, 0x000b] {
        p.extend_from_slice(&v.to_be_bytes()); // type ECC, nameAlg SHA-256
    }
    p.extend_from_slice(&0x0003_0072u32.to_be_bytes());
    put_tpm2b(&mut p, &[]);
    if symmetric {
        for v in [0x0006u16, 128, 0x0043] {
            p.extend_from_slice(&v.to_be_bytes());
        }
    } else {
        p.extend_from_slice(&TPM_ALG_NULL.to_be_bytes());
    }
    for v in [TPM_ALG_NULL, 0x0003, TPM_ALG_NULL] {
        p.extend_from_slice(&v.to_be_bytes()); // scheme, curveID, kdf
    }
    put_tpm2b(&mut p, x);
    put_tpm2b(&mut p, y);
    p
}

#[test]
fn the_salt_key_is_read_from_an_ecc_or_rsa_public_area() {
    let p = ecc_public(true, &[1; 32], &[2; 32]);
    assert_eq!(
        salt_key(&p).unwrap(),
        SaltKey::Ecc {
            x: vec![1; 32],
            y: vec![2; 32]
        }
    );
    let unrestricted = ecc_public(false, &[3; 32], &[4; 32]);
    assert!(matches!(salt_key(&unrestricted).unwrap(), SaltKey::Ecc { y, .. } if y == vec![4; 32]));
    // An RSA area gives its modulus; a truncated or padded one is an error, not a key.
    let mut rsa = Vec::new();
    for v in [0x0001u16, 0x000b] {
        rsa.extend_from_slice(&v.to_be_bytes());
    }
    rsa.extend_from_slice(&0x0003_0072u32.to_be_bytes());
    put_tpm2b(&mut rsa, &[]);
    for v in [0x0006u16, 128, 0x0043, TPM_ALG_NULL, 2048] {
        rsa.extend_from_slice(&v.to_be_bytes());
    }
    rsa.extend_from_slice(&0u32.to_be_bytes());
    put_tpm2b(&mut rsa, &[0xc5; 256]);
    assert_eq!(
        salt_key(&rsa).unwrap(),
        SaltKey::Rsa {
            modulus: vec![0xc5; 256]
        }
    );
    let mut three = rsa.clone();
    three[20..24].copy_from_slice(&3u32.to_be_bytes()); // exponent 3
    assert!(salt_key(&three).is_err());
    assert!(
        salt_key(&[0x00, 0x08, 0, 0x0b]).is_err(),
        "a keyed-hash object"
    );
    assert!(salt_key(&p[..p.len() - 1]).is_err());
    let mut padded = p.clone();
    padded.push(0);
    assert!(salt_key(&padded).is_err());
}

#[test]
fn a_point_off_the_curve_salts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let sw = crate::swtpm::Swtpm::start(dir.path()).unwrap();
    let mut t = sw.connect().unwrap();
    let off_curve = SaltKey::Ecc {
        x: vec![1; 32],
        y: vec![2; 32],
    };
    let started = SaltedSession::start(&mut t, TPM_RH_NULL, &off_curve, 0x00);
    assert!(matches!(started, Err(TpmError::Salt(_))));
}

#[test]
fn only_the_first_parameters_contents_are_encrypted() {
    let mut params = vec![0, 3, 1, 2, 3, 9, 9];
    assert_eq!(first_tpm2b(&mut params), &mut [1, 2, 3][..]);
    // A size beyond the buffer covers what there is; a buffer too short for a size, nothing.
    let mut short = vec![0, 9, 1];
    assert_eq!(first_tpm2b(&mut short), &mut [1][..]);
    assert!(first_tpm2b(&mut [0]).is_empty());
}
