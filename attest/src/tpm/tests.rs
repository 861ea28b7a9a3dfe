use super::sim::{marshal_signature, QuoteFields, SoftAk};
use super::*;
use proptest::prelude::*;

const NONCE: [u8; 32] = [0x42; 32];
const PCRS: [[u8; 32]; 4] = [[4; 32], [7; 32], [11; 32], [0; 32]];

fn ak() -> SoftAk {
    SoftAk::from_seed(&[0x17; 32]).expect("valid scalar")
}

fn verify(claim: &QuoteClaim) -> Result<VerifiedPcrs, TpmError> {
    let ak = ak();
    verify_quote(&AkPublic::parse(&ak.public_area()).unwrap(), claim, &NONCE)
}

#[test]
fn an_honest_quote_verifies_and_returns_the_pcr_values() {
    let got = verify(&ak().quote(&NONCE, &PCRS)).unwrap();
    assert_eq!(got.len(), 4);
    assert_eq!(got[&4], [4; 32]);
    assert_eq!(got[&7], [7; 32]);
    assert_eq!(got[&11], [11; 32]);
    assert_eq!(got[&12], [0; 32]);
}

#[test]
fn the_template_and_selection_are_the_documented_bytes() {
    assert_eq!(
        hex::encode(ak_template()),
        "0023000b00050472000000100018000b000300100000 0000".replace(' ', "")
    );
    assert_eq!(hex::encode(quoted_pcr_selection()), "00000001000b03901800");
}

#[test]
fn quote_info_fields_are_parsed() {
    let info = QuoteInfo::parse(&QuoteFields::honest(&NONCE, &PCRS).marshal()).unwrap();
    assert_eq!(info.extra_data, NONCE);
    assert_eq!(info.clock, 123_456);
    assert_eq!(info.reset_count, 1);
    assert!(info.safe);
    assert_eq!(info.firmware_version, 0x2023_0001);
    assert_eq!(info.pcr_digest, pcr_digest(&PCRS));
}

#[test]
fn a_signature_by_another_key_is_refused() {
    let other = SoftAk::from_seed(&[0x18; 32]).unwrap();
    assert_eq!(
        verify(&other.quote(&NONCE, &PCRS)),
        Err(TpmError::BadSignature)
    );
}

#[test]
fn a_high_s_signature_is_accepted_as_tpms_produce_them() {
    let mut claim = ak().quote(&NONCE, &PCRS);
    let sig = parse_signature(&claim.signature).unwrap();
    let (r, s) = (sig.r(), sig.s());
    let high = p256::ecdsa::Signature::from_scalars(r.to_bytes(), (-*s).to_bytes()).unwrap();
    claim.signature = marshal_signature(&high.to_bytes());
    assert!(verify(&claim).is_ok());
}

#[test]
fn altered_attest_bytes_fail_the_signature() {
    let mut claim = ak().quote(&NONCE, &PCRS);
    let last = claim.attest.len() - 1;
    claim.attest[last] ^= 1;
    assert_eq!(verify(&claim), Err(TpmError::BadSignature));
}

#[test]
fn another_nonce_is_refused_with_both_values() {
    let err = verify(&ak().quote(&[0x43; 32], &PCRS)).unwrap_err();
    assert_eq!(
        err,
        TpmError::NonceMismatch {
            got: vec![0x43; 32],
            expected: NONCE
        }
    );
}

#[test]
fn changed_pcr_values_fail_the_digest_with_both_digests() {
    let mut claim = ak().quote(&NONCE, &PCRS);
    claim.pcrs.insert("11".into(), [0xee; 32]);
    match verify(&claim) {
        Err(TpmError::PcrDigestMismatch { got, quoted }) => {
            assert_eq!(quoted, pcr_digest(&PCRS));
            assert_eq!(got, pcr_digest(&[[4; 32], [7; 32], [0xee; 32], [0; 32]]));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn other_pcr_selections_are_refused() {
    let sel = |count: u32, banks: &[(u16, &[u8])]| {
        let mut out = count.to_be_bytes().to_vec();
        for (hash, bitmap) in banks {
            out.extend_from_slice(&hash.to_be_bytes());
            out.push(bitmap.len() as u8);
            out.extend_from_slice(bitmap);
        }
        out
    };
    for selection in [
        sel(1, &[(TPM_ALG_SHA256, &[0x90, 0x18])]),
        sel(1, &[(TPM_ALG_SHA256, &[0x90, 0x00, 0x00])]),
        // PCRs 4, 7 and 11 without 12: the quotes before PCR 12 was added.
        sel(1, &[(TPM_ALG_SHA256, &[0x90, 0x08, 0x00])]),
        sel(1, &[(TPM_ALG_SHA256, &[0x91, 0x18, 0x00])]),
        sel(1, &[(0x0004, &[0x90, 0x18, 0x00])]),
        sel(
            2,
            &[(TPM_ALG_SHA256, &[0x90, 0x18, 0x00]), (0x0004, &[0, 0, 0])],
        ),
        sel(0, &[]),
    ] {
        let mut fields = QuoteFields::honest(&NONCE, &PCRS);
        fields.selection = selection;
        let claim = ak().quote_with(&fields, &PCRS);
        assert!(
            matches!(verify(&claim), Err(TpmError::PcrSelection { .. })),
            "{:?}",
            verify(&claim)
        );
    }
}

#[test]
fn wrong_magic_and_type_are_refused_even_when_signed() {
    let mut fields = QuoteFields::honest(&NONCE, &PCRS);
    fields.magic = 0xff54_4348;
    let err = verify(&ak().quote_with(&fields, &PCRS)).unwrap_err();
    assert!(
        matches!(
            err,
            TpmError::Unsupported {
                field: "TPMS_ATTEST.magic",
                ..
            }
        ),
        "{err}"
    );
    let mut fields = QuoteFields::honest(&NONCE, &PCRS);
    fields.st = 0x8017; // TPM_ST_ATTEST_CERTIFY
    let err = verify(&ak().quote_with(&fields, &PCRS)).unwrap_err();
    assert!(
        matches!(
            err,
            TpmError::Unsupported {
                field: "TPMS_ATTEST.type",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn carried_pcr_sets_other_than_4_7_11_12_are_refused() {
    let mut claim = ak().quote(&NONCE, &PCRS);
    claim.pcrs.insert("0".into(), [0; 32]);
    assert!(matches!(verify(&claim), Err(TpmError::PcrSet { .. })));
    let mut claim = ak().quote(&NONCE, &PCRS);
    claim.pcrs.remove("7");
    assert!(matches!(verify(&claim), Err(TpmError::PcrSet { .. })));
    let mut claim = ak().quote(&NONCE, &PCRS);
    let v = claim.pcrs.remove("4").unwrap();
    claim.pcrs.insert("04".into(), v);
    assert!(matches!(verify(&claim), Err(TpmError::PcrSet { .. })));
}

#[test]
fn oversized_claims_are_refused_before_parsing() {
    let mut claim = ak().quote(&NONCE, &PCRS);
    claim.attest = vec![0; MAX_TPM_STRUCT_BYTES + 1];
    assert!(matches!(claim.validate(), Err(TpmError::TooLarge { .. })));
    assert!(matches!(
        AkPublic::parse(&[0; MAX_TPM_STRUCT_BYTES + 1]),
        Err(TpmError::TooLarge { .. })
    ));
}

#[test]
fn signatures_of_other_schemes_or_sizes_are_refused() {
    let good = ak().quote(&NONCE, &PCRS).signature;
    let mut rsa = good.clone();
    rsa[1] = 0x14; // TPM_ALG_RSASSA
    assert!(matches!(
        parse_signature(&rsa),
        Err(TpmError::Unsupported { .. })
    ));
    let mut sha1 = good.clone();
    sha1[3] = 0x04;
    assert!(matches!(
        parse_signature(&sha1),
        Err(TpmError::Unsupported { .. })
    ));
    let long = marshal_signature(&[1u8; 66]);
    assert_eq!(parse_signature(&long), Err(TpmError::BadSignatureEncoding));
    let zero = marshal_signature(&[0u8; 64]);
    assert_eq!(parse_signature(&zero), Err(TpmError::BadSignatureEncoding));
    let mut trailing = good;
    trailing.push(0);
    assert!(matches!(
        parse_signature(&trailing),
        Err(TpmError::Trailing { .. })
    ));
}

#[test]
fn short_r_and_s_are_left_padded() {
    let sig = parse_signature(&marshal_signature(&[[0u8; 1], [1u8; 1]].concat())).unwrap_err();
    // r = 0 is not a valid scalar: padding happened, then the scalar check refused it.
    assert_eq!(sig, TpmError::BadSignatureEncoding);
    let ok = parse_signature(&marshal_signature(&[[5u8; 1], [6u8; 1]].concat())).unwrap();
    assert_eq!(ok.to_bytes()[31], 5);
    assert_eq!(ok.to_bytes()[63], 6);
}

#[test]
fn ak_profile_is_enforced() {
    let ak = ak();
    assert!(AkPublic::parse(&ak.public_area()).is_ok());
    for (attrs, why) in [
        (AK_TEMPLATE_ATTRIBUTES & !attr::FIXED_TPM, "not fixedTPM"),
        (
            AK_TEMPLATE_ATTRIBUTES & !attr::FIXED_PARENT,
            "not fixedParent",
        ),
        (
            AK_TEMPLATE_ATTRIBUTES & !attr::SENSITIVE_DATA_ORIGIN,
            "imported",
        ),
        (AK_TEMPLATE_ATTRIBUTES & !attr::RESTRICTED, "unrestricted"),
        (AK_TEMPLATE_ATTRIBUTES & !attr::SIGN, "not a signing key"),
        (AK_TEMPLATE_ATTRIBUTES | attr::DECRYPT, "also decrypts"),
    ] {
        assert!(
            matches!(
                AkPublic::parse(&ak.public_area_with(attrs)),
                Err(TpmError::Attributes { .. })
            ),
            "{why}"
        );
    }
    let good = ak.public_area();
    for (offset, field) in [
        (1, "TPMT_PUBLIC.type"),
        (3, "TPMT_PUBLIC.nameAlg"),
        (11, "TPMS_ECC_PARMS.symmetric"),
        (13, "TPMS_ECC_PARMS.scheme"),
        (15, "TPMS_ECC_PARMS.scheme.hashAlg"),
        (17, "TPMS_ECC_PARMS.curveID"),
        (19, "TPMS_ECC_PARMS.kdf"),
    ] {
        let mut bad = good.clone();
        bad[offset] ^= 0x01;
        match AkPublic::parse(&bad) {
            Err(TpmError::Unsupported { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{field}: {other:?}"),
        }
    }
}

#[test]
fn ak_points_off_the_curve_or_short_are_refused() {
    let mut bad = ak().public_area();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    assert_eq!(AkPublic::parse(&bad), Err(TpmError::BadPoint));
    assert_eq!(AkPublic::parse(&ak_template()), Err(TpmError::BadPoint));
    let mut trailing = ak().public_area();
    trailing.push(0);
    assert!(matches!(
        AkPublic::parse(&trailing),
        Err(TpmError::Trailing { .. })
    ));
}

#[test]
fn every_truncation_is_a_typed_error() {
    let public = ak().public_area();
    for n in 0..public.len() {
        assert!(
            matches!(
                AkPublic::parse(&public[..n]),
                Err(TpmError::Truncated { .. })
            ),
            "{n}"
        );
    }
    let attest = QuoteFields::honest(&NONCE, &PCRS).marshal();
    for n in 0..attest.len() {
        assert!(
            matches!(
                QuoteInfo::parse(&attest[..n]),
                Err(TpmError::Truncated { .. })
            ),
            "{n}"
        );
    }
}

/// Checks after the signature, on signed input: a nonce of another length, or bytes after
/// the structure, are refused though the AK signed them.
#[test]
fn signed_odd_lengths_and_trailing_bytes_are_refused() {
    for len in [0, 31, 33, 64] {
        let mut fields = QuoteFields::honest(&NONCE, &PCRS);
        fields.extra_data = vec![0x42; len];
        let claim = ak().quote_with(&fields, &PCRS);
        assert!(
            matches!(verify(&claim), Err(TpmError::NonceMismatch { .. })),
            "{len}"
        );
    }
    let mut claim = ak().quote(&NONCE, &PCRS);
    claim.attest.push(0);
    claim.signature = ak().sign(&claim.attest);
    assert!(matches!(
        verify(&claim),
        Err(TpmError::Trailing { .. } | TpmError::Truncated { .. })
    ));
}

proptest! {
    #[test]
    fn hostile_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = AkPublic::parse(&bytes);
        let _ = QuoteInfo::parse(&bytes);
        let _ = parse_signature(&bytes);
    }

    #[test]
    fn mutated_quotes_never_panic_and_never_verify(
        index in 0usize..160, value in any::<u8>(), cut in 0usize..160,
    ) {
        let honest = ak().quote(&NONCE, &PCRS);
        let mut claim = honest.clone();
        let i = index % claim.attest.len();
        claim.attest[i] = value;
        claim.attest.truncate(cut.max(1));
        prop_assume!(claim.attest != honest.attest);
        prop_assert!(verify(&claim).is_err());
        let _ = QuoteInfo::parse(&claim.attest);
    }

    /// The same mutations, signed by the AK: the checks after the signature run on them.
    /// Fields the verifier ignores (clock, firmware version, signer name) may change and
    /// still verify; nothing it checks may.
    #[test]
    fn signed_mutations_verify_only_with_the_checked_fields_intact(
        index in 0usize..160, value in any::<u8>(), cut in 0usize..160, trailing in 0usize..3,
    ) {
        let honest = ak().quote(&NONCE, &PCRS);
        let mut attest = honest.attest.clone();
        let i = index % attest.len();
        attest[i] = value;
        attest.truncate(cut.max(1));
        attest.extend(std::iter::repeat_n(0u8, trailing));
        let claim = QuoteClaim {
            signature: ak().sign(&attest),
            attest,
            pcrs: honest.pcrs.clone(),
            event_log: None,
        };
        if let Ok(pcrs) = verify(&claim) {
            let info = QuoteInfo::parse(&claim.attest).unwrap();
            let want = QuoteInfo::parse(&honest.attest).unwrap();
            prop_assert_eq!(pcrs, verify(&honest).unwrap());
            prop_assert_eq!(info.extra_data, want.extra_data);
            prop_assert_eq!(info.pcr_select, want.pcr_select);
            prop_assert_eq!(info.pcr_digest, want.pcr_digest);
            prop_assert_eq!(claim.attest.len(), honest.attest.len());
        }
    }
}
