//! The enroller's side of an EK-anchored enrollment, side by side in one run: checking an EK
//! certificate chain (rustls-webpki, RSA signatures), and TPM2_MakeCredential under an RSA
//! 2048 EK (RSA-OAEP) against under an ECC P-256 EK (ephemeral ECDH). Once per node, so the
//! figures say what an operator waits for, not a throughput anyone needs.

use attest::tpm::credential::{make_credential, object_name};
use attest::tpm::ek::{
    certificates_from_file, certified_key, marshal_ecc_ek, marshal_rsa_ek, verify_ek_certificate,
    EkKey, EkPublic,
};
use criterion::{black_box, criterion_group, criterion_main, Criterion};

const CERT: &[u8] = include_bytes!("../tests/data/ek/ek-rsa2048.der");
const ISSUER: &[u8] = include_bytes!("../tests/data/ek/issuer.pem");
const ROOT: &[u8] = include_bytes!("../tests/data/ek/root.pem");
const NOW: u64 = 1_900_000_000;

fn bench(c: &mut Criterion) {
    let EkKey::Rsa { modulus } = certified_key(CERT).expect("the fixture's key") else {
        panic!("the fixture certifies an RSA key");
    };
    let rsa = EkPublic::parse(&marshal_rsa_ek(&modulus)).expect("RSA EK");
    let point = p256::SecretKey::from_slice(&[7; 32])
        .expect("scalar")
        .public_key()
        .to_sec1_bytes();
    let ecc = EkPublic::parse(&marshal_ecc_ek(&point[1..33], &point[33..])).expect("ECC EK");
    let roots = certificates_from_file(ROOT).expect("root");
    let intermediates = certificates_from_file(ISSUER).expect("issuer");
    let name = object_name(b"an attestation key's public area");
    let mut g = c.benchmark_group("tpm_enroll");
    g.bench_function("verify_ek_certificate_rsa_chain", |b| {
        b.iter(|| {
            verify_ek_certificate(black_box(CERT), &rsa, &roots, &intermediates, NOW)
                .expect("verifies")
        })
    });
    for (label, ek) in [("rsa2048", &rsa), ("ecc_p256", &ecc)] {
        g.bench_function(format!("make_credential_{label}"), |b| {
            b.iter(|| {
                make_credential(ek, black_box(&name), &[9; 32], &mut getrandom_04::SysRng)
                    .expect("credential")
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
