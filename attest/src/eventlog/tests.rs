use super::sim::LogBuilder;
use super::*;
use proptest::prelude::*;

const APP: [u8; 32] = [0xa5; 32];
const APP2: [u8; 32] = [0x5c; 32];
/// `EV_IPL`: measured by boot loaders into other PCRs, never expected in PCR 4.
const EV_IPL: u32 = 0x0000_000d;
const EV_POST_CODE: u32 = 0x0000_0001;

/// SHA-256(a || b), written out here rather than taken from the module.
fn ext(pcr: [u8; 32], digest: [u8; 32]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(pcr);
    h.update(digest);
    h.finalize().into()
}

fn sha(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

fn fold(start: [u8; 32], digests: &[[u8; 32]]) -> [u8; 32] {
    digests.iter().fold(start, |pcr, d| ext(pcr, *d))
}

/// A log with events in PCRs 0, 4 and 7 of several types.
fn sample(builder: LogBuilder) -> LogBuilder {
    builder
        .event(0, EV_POST_CODE, [1; 32], b"POST CODE")
        .boot_from_disk(APP, b"image load event 1")
        .event(7, 0x8000_00e0, [7; 32], b"db")
        .event(
            4,
            EV_EFI_BOOT_SERVICES_APPLICATION,
            APP2,
            b"image load event 2",
        )
}

fn separator() -> [u8; 32] {
    sha(&[0; 4])
}

#[test]
fn a_built_log_parses_and_replays_to_the_expected_values() {
    let builder = sample(LogBuilder::new());
    let log = EventLog::parse(&builder.build()).unwrap();
    assert_eq!(log.events.len(), 13);
    assert_eq!(
        log.events[0],
        Event {
            pcr: 0,
            event_type: EV_POST_CODE,
            sha256: Some([1; 32]),
            data: b"POST CODE".to_vec(),
        }
    );
    assert_eq!(log.events[1].event_type, EV_EFI_ACTION);
    assert_eq!(log.events[1].data, CALLING_EFI_APPLICATION);

    let calling = sha(b"Calling EFI Application from Boot Option");
    let want0 = fold([0; 32], &[[1; 32], separator()]);
    let want4 = fold([0; 32], &[calling, separator(), APP, APP2]);
    let want7 = fold([0; 32], &[separator(), [7; 32]]);
    let want1 = fold([0; 32], &[separator()]);
    assert_eq!(log.replay(0).unwrap(), want0);
    assert_eq!(log.replay(1).unwrap(), want1);
    assert_eq!(log.replay(4).unwrap(), want4);
    assert_eq!(log.replay(7).unwrap(), want7);
    assert_eq!(
        log.replay(11).unwrap(),
        [0; 32],
        "no events: the reset value"
    );
    for pcr in [0, 1, 4, 7, 11] {
        assert_eq!(builder.expected_pcr(pcr), log.replay(pcr).unwrap());
    }
}

#[test]
fn a_log_with_sha1_and_sha256_digests_uses_the_sha256_one() {
    let builder = sample(LogBuilder::with_sha1());
    let bytes = builder.build();
    // Each event carries a 20-byte SHA-1 digest too: the two-bank log is longer by
    // 13 events × (2 + 20) bytes, plus 4 bytes in the header's algorithm list.
    assert_eq!(
        bytes.len(),
        sample(LogBuilder::new()).build().len() + 13 * 22 + 4
    );
    let log = EventLog::parse(&bytes).unwrap();
    let single = EventLog::parse(&sample(LogBuilder::new()).build()).unwrap();
    assert_eq!(log, single);
    assert_eq!(log.events[12].sha256, Some(APP2));
    assert_eq!(
        log.replay(4).unwrap(),
        fold(
            [0; 32],
            &[sha(CALLING_EFI_APPLICATION), separator(), APP, APP2]
        )
    );

    // Digests in another order than the header's list are read by algorithm, not position.
    let log = EventLog::parse(
        &LogBuilder::with_sha1()
            .raw_event(
                4,
                EV_EFI_BOOT_SERVICES_APPLICATION,
                &[(TPM_ALG_SHA256, &APP), (TPM_ALG_SHA1, &[0xee; 20])],
                b"",
            )
            .build(),
    )
    .unwrap();
    assert_eq!(log.events[0].sha256, Some(APP));
}

#[test]
fn boot_applications_returns_the_app_digests_in_order() {
    let builder = sample(LogBuilder::with_sha1())
        .measure(4, EV_EFI_ACTION, RETURNING_FROM_EFI_APPLICATION)
        .measure(4, EV_EFI_ACTION, CALLING_EFI_APPLICATION)
        .event(4, EV_EFI_BOOT_SERVICES_APPLICATION, [3; 32], b"third");
    let log = EventLog::parse(&builder.build()).unwrap();
    let quoted = fold(
        [0; 32],
        &[
            sha(CALLING_EFI_APPLICATION),
            separator(),
            APP,
            APP2,
            sha(RETURNING_FROM_EFI_APPLICATION),
            sha(CALLING_EFI_APPLICATION),
            [3; 32],
        ],
    );
    assert_eq!(
        log.boot_applications(&quoted).unwrap(),
        vec![APP, APP2, [3; 32]]
    );
}

#[test]
fn boot_applications_refuses_a_wrong_quoted_pcr4() {
    let builder = sample(LogBuilder::new());
    let log = EventLog::parse(&builder.build()).unwrap();
    let replayed = builder.expected_pcr(4);
    let quoted = [0x44; 32];
    let err = log.boot_applications(&quoted).unwrap_err();
    assert_eq!(
        err,
        EventLogError::ReplayMismatch {
            pcr: 4,
            replayed,
            quoted
        }
    );
    let shown = err.to_string();
    assert!(shown.contains(&hex::encode(replayed)), "{shown}");
    assert!(shown.contains(&hex::encode(quoted)), "{shown}");

    // A log missing its last PCR 4 event (cut between events: it parses) is caught here.
    let short = LogBuilder::new().boot_from_disk(APP, b"x");
    let full = short
        .clone()
        .event(4, EV_EFI_BOOT_SERVICES_APPLICATION, APP2, b"y");
    let log = EventLog::parse(&short.build()).unwrap();
    assert!(matches!(
        log.boot_applications(&full.expected_pcr(4)),
        Err(EventLogError::ReplayMismatch { pcr: 4, .. })
    ));
}

#[test]
fn boot_applications_refuses_an_unexpected_event_type_in_pcr4() {
    let builder =
        LogBuilder::new()
            .boot_from_disk(APP, b"app")
            .event(4, EV_IPL, [9; 32], b"grub.cfg");
    let log = EventLog::parse(&builder.build()).unwrap();
    assert_eq!(
        log.boot_applications(&builder.expected_pcr(4)),
        Err(EventLogError::UnexpectedEvent {
            pcr: 4,
            event_type: EV_IPL,
            index: 10
        })
    );
    // The same event in another PCR is none of PCR 4's business.
    let builder =
        LogBuilder::new()
            .boot_from_disk(APP, b"app")
            .event(9, EV_IPL, [9; 32], b"grub.cfg");
    let log = EventLog::parse(&builder.build()).unwrap();
    assert_eq!(
        log.boot_applications(&builder.expected_pcr(4)),
        Ok(vec![APP])
    );
}

#[test]
fn an_application_relabelled_as_an_action_or_separator_is_refused() {
    // The quote vouches for digests only: an app's extend logged as the "Calling" action
    // would drop it from the list. Its digest is not the hash of the action string.
    let builder = LogBuilder::new().boot_from_disk(APP, b"app").event(
        4,
        EV_EFI_ACTION,
        APP2,
        CALLING_EFI_APPLICATION,
    );
    let log = EventLog::parse(&builder.build()).unwrap();
    assert_eq!(
        log.boot_applications(&builder.expected_pcr(4)),
        Err(EventLogError::DigestMismatch {
            pcr: 4,
            event_type: EV_EFI_ACTION,
            index: 10,
            logged: APP2,
            computed: sha(CALLING_EFI_APPLICATION),
        })
    );
    let builder = LogBuilder::new().event(4, EV_SEPARATOR, APP2, &SEPARATOR_DATA);
    let log = EventLog::parse(&builder.build()).unwrap();
    assert!(matches!(
        log.boot_applications(&builder.expected_pcr(4)),
        Err(EventLogError::DigestMismatch { index: 0, .. })
    ));

    // An action string or separator value the verifier does not know is refused even when
    // its digest matches.
    for (event_type, data) in [
        (
            EV_EFI_ACTION,
            &b"Calling EFI Application from Boot Option\0"[..],
        ),
        (EV_EFI_ACTION, b"Exit Boot Services Invocation"),
        (EV_SEPARATOR, &[0, 0, 0, 1]),
        (EV_SEPARATOR, &[]),
    ] {
        let builder = LogBuilder::new().measure(4, event_type, data);
        let log = EventLog::parse(&builder.build()).unwrap();
        assert_eq!(
            log.boot_applications(&builder.expected_pcr(4)),
            Err(EventLogError::UnexpectedEventData {
                pcr: 4,
                event_type,
                index: 0,
                data: data.to_vec(),
            })
        );
    }
}

#[test]
fn no_action_events_are_not_extended() {
    let with = LogBuilder::new()
        .event(4, EV_NO_ACTION, [0xff; 32], b"not extended")
        .boot_from_disk(APP, b"app")
        .event(0, EV_NO_ACTION, [0xee; 32], b"Spec ID Event03\0 later")
        .event(4, EV_NO_ACTION, [0xdd; 32], b"");
    let without = LogBuilder::new().boot_from_disk(APP, b"app");
    let log = EventLog::parse(&with.build()).unwrap();
    assert_eq!(log.events.len(), 13, "kept in the parsed log");
    assert_eq!(log.events[0].event_type, EV_NO_ACTION);
    let want = fold([0; 32], &[sha(CALLING_EFI_APPLICATION), separator(), APP]);
    assert_eq!(log.replay(4).unwrap(), want);
    assert_eq!(log.replay(0).unwrap(), fold([0; 32], &[separator()]));
    assert_eq!(log.replay(4).unwrap(), without.expected_pcr(4));
    assert_eq!(log.boot_applications(&want).unwrap(), vec![APP]);

    // Nor need they carry a SHA-256 digest.
    let log = EventLog::parse(
        &LogBuilder::new()
            .raw_event(4, EV_NO_ACTION, &[], b"")
            .build(),
    )
    .unwrap();
    assert_eq!(log.replay(4).unwrap(), [0; 32]);
}

#[test]
fn startup_locality_sets_pcr0s_start_value() {
    let builder = LogBuilder::with_sha1()
        .startup_locality(3)
        .event(0, EV_POST_CODE, [1; 32], b"")
        .boot_from_disk(APP, b"app");
    let log = EventLog::parse(&builder.build()).unwrap();
    assert_eq!(log.startup_locality().unwrap(), Some(3));
    let mut start = [0; 32];
    start[31] = 3;
    assert_eq!(log.replay(0).unwrap(), fold(start, &[[1; 32], separator()]));
    assert_eq!(log.replay(0).unwrap(), builder.expected_pcr(0));
    // Other PCRs start at zero.
    assert_eq!(
        log.replay(4).unwrap(),
        fold([0; 32], &[sha(CALLING_EFI_APPLICATION), separator(), APP])
    );
    // Without it, locality 0.
    let log = EventLog::parse(&LogBuilder::new().event(0, 1, [1; 32], b"").build()).unwrap();
    assert_eq!(log.startup_locality().unwrap(), None);
    assert_eq!(log.replay(0).unwrap(), ext([0; 32], [1; 32]));

    // The same record in another PCR does not count.
    let mut data = STARTUP_LOCALITY_SIGNATURE.to_vec();
    data.push(3);
    let log = EventLog::parse(
        &LogBuilder::new()
            .event(4, EV_NO_ACTION, [0; 32], &data)
            .build(),
    )
    .unwrap();
    assert_eq!(log.replay(4).unwrap(), [0; 32]);
    assert_eq!(log.replay(0).unwrap(), [0; 32]);
}

#[test]
fn a_malformed_or_repeated_startup_locality_is_refused() {
    let bytes = LogBuilder::new()
        .event(0, EV_NO_ACTION, [0; 32], STARTUP_LOCALITY_SIGNATURE)
        .build();
    assert_eq!(
        EventLog::parse(&bytes),
        Err(EventLogError::BadStartupLocality { index: 0, len: 16 })
    );
    let bytes = LogBuilder::new()
        .startup_locality(0)
        .startup_locality(3)
        .build();
    assert_eq!(
        EventLog::parse(&bytes),
        Err(EventLogError::BadStartupLocality { index: 1, len: 17 })
    );
}

/// The byte offsets at which a log may end: after the header, and after each event (with
/// `data_lens` bytes of data). Computed from the layout, independently of the parser.
fn boundaries(header_algs: usize, digest_bytes: usize, data_lens: &[usize]) -> Vec<usize> {
    let mut at = 4 + 4 + 20 + 4 + (16 + 4 + 4 + 4 + 4 * header_algs + 1);
    let mut out = vec![at];
    for len in data_lens {
        at += 4 + 4 + 4 + digest_bytes + 4 + len;
        out.push(at);
    }
    out
}

#[test]
fn every_truncation_is_a_typed_error_or_a_shorter_log() {
    let builder = sample(LogBuilder::with_sha1()).startup_locality(0);
    let bytes = builder.build();
    let full = EventLog::parse(&bytes).unwrap();
    let lens: Vec<usize> = full.events.iter().map(|e| e.data.len()).collect();
    let ends = boundaries(2, 2 + 20 + 2 + 32, &lens);
    assert_eq!(ends.last(), Some(&bytes.len()));
    for cut in 0..bytes.len() {
        match EventLog::parse(&bytes[..cut]) {
            Ok(log) => {
                let n = ends.iter().position(|&e| e == cut);
                assert_eq!(n, Some(log.events.len()), "cut at {cut} parsed");
                assert_eq!(log.events[..], full.events[..log.events.len()]);
            }
            Err(EventLogError::Truncated { offset, needed, .. }) => {
                assert!(!ends.contains(&cut), "cut at {cut} is an event boundary");
                assert!(
                    needed > 0 && offset <= cut,
                    "cut at {cut}: {offset} {needed}"
                );
            }
            Err(other) => panic!("cut at {cut}: {other:?}"),
        }
    }
}

#[test]
fn every_single_byte_mutation_is_handled_without_panicking() {
    let builder = sample(LogBuilder::with_sha1()).startup_locality(3);
    let bytes = builder.build();
    let quoted = builder.expected_pcr(4);
    let mut accepted_other = 0;
    for i in 0..bytes.len() {
        for flip in [0x01, 0x80, 0xff] {
            let mut m = bytes.clone();
            m[i] ^= flip;
            if let Ok(log) = EventLog::parse(&m) {
                for pcr in 0..24 {
                    let _ = log.replay(pcr);
                }
                if let Ok(apps) = log.boot_applications(&quoted) {
                    // Only changes outside what PCR 4 vouches for can keep the list valid:
                    // then it is the honest list.
                    assert_eq!(apps, vec![APP, APP2], "mutation at {i}");
                    accepted_other += 1;
                }
            }
        }
    }
    // Image load event data, other PCRs' events, SHA-1 filler: not vouched for, still fine.
    assert!(accepted_other > 0);
}

proptest! {
    #[test]
    fn hostile_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        if let Ok(log) = EventLog::parse(&bytes) {
            let _ = log.replay(0);
            let _ = log.replay(4);
            let _ = log.boot_applications(&[0; 32]);
        }
    }

    #[test]
    fn mutated_logs_never_panic(
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
        cut in any::<usize>(),
    ) {
        let builder = sample(LogBuilder::with_sha1());
        let mut bytes = builder.build();
        for (i, v) in edits {
            let i = i % bytes.len();
            bytes[i] = v;
        }
        bytes.truncate(cut % (bytes.len() + 1));
        if let Ok(log) = EventLog::parse(&bytes) {
            for pcr in 0..24 {
                let _ = log.replay(pcr);
            }
            let _ = log.boot_applications(&builder.expected_pcr(4));
        }
    }
}

#[test]
fn bounds_are_refused() {
    assert_eq!(
        EventLog::parse(&vec![0; MAX_LOG_BYTES + 1]),
        Err(EventLogError::TooLarge {
            what: "event log bytes",
            len: MAX_LOG_BYTES + 1,
            max: MAX_LOG_BYTES
        })
    );

    let mut builder = LogBuilder::new();
    for i in 0..MAX_EVENTS {
        builder = builder.event(8, EV_IPL, [i as u8; 32], b"");
    }
    let log = EventLog::parse(&builder.build()).unwrap();
    assert_eq!(log.events.len(), MAX_EVENTS);
    assert_eq!(log.replay(8).unwrap(), builder.expected_pcr(8));
    assert_eq!(
        EventLog::parse(&builder.event(8, EV_IPL, [0; 32], b"").build()),
        Err(EventLogError::TooLarge {
            what: "events",
            len: MAX_EVENTS + 1,
            max: MAX_EVENTS
        })
    );

    let big = vec![0; MAX_EVENT_DATA_BYTES];
    assert!(EventLog::parse(&LogBuilder::new().event(1, 1, [0; 32], &big).build()).is_ok());
    let bigger = vec![0; MAX_EVENT_DATA_BYTES + 1];
    assert_eq!(
        EventLog::parse(&LogBuilder::new().event(1, 1, [0; 32], &bigger).build()),
        Err(EventLogError::TooLarge {
            what: "TCG_PCR_EVENT2.eventSize",
            len: MAX_EVENT_DATA_BYTES + 1,
            max: MAX_EVENT_DATA_BYTES
        })
    );

    let digests: Vec<(u16, &[u8])> = (0..=MAX_DIGESTS_PER_EVENT)
        .map(|_| (TPM_ALG_SHA256, &APP[..]))
        .collect();
    assert_eq!(
        EventLog::parse(&LogBuilder::new().raw_event(4, 1, &digests, b"").build()),
        Err(EventLogError::TooLarge {
            what: "TPML_DIGEST_VALUES.count",
            len: MAX_DIGESTS_PER_EVENT + 1,
            max: MAX_DIGESTS_PER_EVENT
        })
    );

    let algorithms: Vec<(u16, u16)> = (0..=MAX_DIGESTS_PER_EVENT as u16)
        .map(|i| (0x000b + i, 32))
        .collect();
    assert_eq!(
        EventLog::parse(&LogBuilder::new().algorithms(&algorithms).build()),
        Err(EventLogError::TooLarge {
            what: "TCG_EfiSpecIDEvent.numberOfAlgorithms",
            len: MAX_DIGESTS_PER_EVENT + 1,
            max: MAX_DIGESTS_PER_EVENT
        })
    );
}

#[test]
fn a_legacy_sha1_log_is_refused() {
    // A TPM 1.2-era log: the first event is a real measurement in the SHA-1 format.
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&0u32.to_le_bytes());
    bytes.extend_from_slice(&0x0000_0008u32.to_le_bytes()); // EV_S_CRTM_VERSION
    bytes.extend_from_slice(&[0x11; 20]);
    bytes.extend_from_slice(&4u32.to_le_bytes());
    bytes.extend_from_slice(b"1.0\0");
    assert_eq!(
        EventLog::parse(&bytes),
        Err(EventLogError::NotCryptoAgile {
            event_type: 8,
            signature: b"1.0\0".to_vec()
        })
    );
    // A SHA-1 log with a Spec ID header of the TPM 1.2 profile.
    let mut bytes = LogBuilder::new().build();
    bytes[32 + 14] = b'0'; // "Spec ID Event00"
    assert_eq!(
        EventLog::parse(&bytes),
        Err(EventLogError::NotCryptoAgile {
            event_type: EV_NO_ACTION,
            signature: b"Spec ID Event00\0".to_vec()
        })
    );
    // A major version other than 2.
    let mut bytes = LogBuilder::new().build();
    bytes[32 + 16 + 4 + 1] = 1; // specVersionMajor
    assert_eq!(
        EventLog::parse(&bytes),
        Err(EventLogError::UnsupportedSpecVersion {
            major: 1,
            minor: 0,
            errata: 2
        })
    );
}

#[test]
fn spec_id_headers_without_a_usable_sha256_bank_are_refused() {
    let parse = |algorithms: &[(u16, u16)]| {
        EventLog::parse(&LogBuilder::new().algorithms(algorithms).build())
    };
    assert_eq!(
        parse(&[(TPM_ALG_SHA1, 20)]),
        Err(EventLogError::NoSha256 {
            algorithms: vec![(TPM_ALG_SHA1, 20)]
        })
    );
    assert_eq!(
        parse(&[]),
        Err(EventLogError::NoSha256 { algorithms: vec![] })
    );
    assert_eq!(
        parse(&[(TPM_ALG_SHA256, 20)]),
        Err(EventLogError::BadDigestSize {
            alg: TPM_ALG_SHA256,
            size: 20
        })
    );
    assert_eq!(
        parse(&[(TPM_ALG_SHA256, 32), (0x000c, 0)]),
        Err(EventLogError::BadDigestSize {
            alg: 0x000c,
            size: 0
        })
    );
    assert_eq!(
        parse(&[(0x000d, 65), (TPM_ALG_SHA256, 32)]),
        Err(EventLogError::BadDigestSize {
            alg: 0x000d,
            size: 65
        })
    );
    assert_eq!(
        parse(&[(TPM_ALG_SHA256, 32), (0x000d, 64)]).map(|l| l.events.len()),
        Ok(0)
    );
    assert_eq!(
        parse(&[(TPM_ALG_SHA256, 32), (TPM_ALG_SHA256, 32)]),
        Err(EventLogError::DuplicateAlgorithm {
            alg: TPM_ALG_SHA256
        })
    );
}

#[test]
fn a_spec_id_header_with_trailing_bytes_is_refused() {
    let mut bytes = LogBuilder::new().build();
    bytes[28] += 1; // eventSize
    bytes.push(0);
    assert_eq!(
        EventLog::parse(&bytes),
        Err(EventLogError::Trailing {
            what: "TCG_EfiSpecIDEvent",
            extra: 1
        })
    );
}

#[test]
fn digests_of_unlisted_algorithms_or_twice_the_same_are_refused() {
    let bytes = LogBuilder::new()
        .boot_from_disk(APP, b"")
        .raw_event(4, 1, &[(0x000c, &[0; 48])], b"")
        .build();
    assert_eq!(
        EventLog::parse(&bytes),
        Err(EventLogError::UnknownAlgorithm {
            alg: 0x000c,
            index: 10
        })
    );
    let bytes = LogBuilder::with_sha1()
        .raw_event(
            4,
            EV_EFI_BOOT_SERVICES_APPLICATION,
            &[(TPM_ALG_SHA256, &APP), (TPM_ALG_SHA256, &APP2)],
            b"",
        )
        .build();
    assert_eq!(
        EventLog::parse(&bytes),
        Err(EventLogError::DuplicateDigest {
            alg: TPM_ALG_SHA256,
            index: 0
        })
    );
}

#[test]
fn an_extended_event_without_a_sha256_digest_cannot_be_replayed() {
    let log = EventLog::parse(
        &LogBuilder::with_sha1()
            .boot_from_disk(APP, b"")
            .raw_event(
                4,
                EV_EFI_BOOT_SERVICES_APPLICATION,
                &[(TPM_ALG_SHA1, &[0; 20])],
                b"",
            )
            .build(),
    )
    .unwrap();
    assert_eq!(
        log.replay(4),
        Err(EventLogError::MissingSha256 { pcr: 4, index: 10 })
    );
    assert_eq!(
        log.boot_applications(&[0; 32]),
        Err(EventLogError::MissingSha256 { pcr: 4, index: 10 })
    );
    assert!(log.replay(0).is_ok(), "other PCRs still replay");
}

/// The bytes of a hex string (spaces and newlines ignored).
fn unhex(s: &str) -> Vec<u8> {
    hex::decode(s.replace([' ', '\n'], "")).unwrap()
}

/// A log as OVMF writes it (SHA-1 and SHA-256 banks) when booting one EFI application from a
/// disk, laid out by hand from the PFP spec rather than by [`LogBuilder`]: the Spec ID header,
/// then PCR 4's "Calling EFI Application from Boot Option" action, the PCR 4 separator and the
/// application. SHA-1 digests are the real ones (`sha1sum`).
#[test]
fn an_ovmf_boot_of_one_application_yields_its_authenticode_digest() {
    let authenticode: [u8; 32] =
        unhex("8b2e7b8e4bb1b5f0a3a9c3a7d0b2b5d1c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6")
            .try_into()
            .unwrap();
    let header = unhex(
        "00000000 03000000 0000000000000000000000000000000000000000 25000000
         53706563204944204576656e74303300 00000000 00 02 02 02 02000000
         0400 1400 0b00 2000 00",
    );
    let calling = unhex(
        "04000000 07000080 02000000
         0400 cd0fdb4531a6ec41be2753ba042637d6e5f7f256
         0b00 3d6772b4f84ed47595d72a2c4c5ffd15f5bb72c7507fe26f2aaee2c69d5633ba
         28000000",
    );
    let separator = unhex(
        "04000000 04000000 02000000
         0400 9069ca78e7450a285173431b3e52c5c25299e473
         0b00 df3f619804a92fdb4057192dc43dd748ea778adc52bc498ce80524c014b81119
         04000000 00000000",
    );
    // UEFI_IMAGE_LOAD_EVENT: location, length, link-time address, device path length, then
    // the device path (a file path node "\EFI\BOOT\BOOTX64.EFI" and the end node).
    let path: Vec<u8> = "\\EFI\\BOOT\\BOOTX64.EFI\0"
        .encode_utf16()
        .flat_map(u16::to_le_bytes)
        .collect();
    let mut device_path = vec![0x04, 0x04];
    device_path.extend_from_slice(&(4 + path.len() as u16).to_le_bytes());
    device_path.extend_from_slice(&path);
    device_path.extend_from_slice(&[0x7f, 0xff, 0x04, 0x00]);
    let mut load_event = Vec::new();
    load_event.extend_from_slice(&0x7e1b_2018u64.to_le_bytes());
    load_event.extend_from_slice(&0x000f_4a00u64.to_le_bytes());
    load_event.extend_from_slice(&0u64.to_le_bytes());
    load_event.extend_from_slice(&(device_path.len() as u64).to_le_bytes());
    load_event.extend_from_slice(&device_path);
    let mut app = unhex("04000000 03000080 02000000 0400");
    app.extend_from_slice(&[0x3c; 20]); // SHA-1 Authenticode, unused
    app.extend_from_slice(&unhex("0b00"));
    app.extend_from_slice(&authenticode);
    app.extend_from_slice(&(load_event.len() as u32).to_le_bytes());
    app.extend_from_slice(&load_event);

    let mut bytes = header;
    bytes.extend_from_slice(&calling);
    bytes.extend_from_slice(CALLING_EFI_APPLICATION);
    bytes.extend_from_slice(&separator);
    bytes.extend_from_slice(&app);

    // The hand-written digests are what the data hashes to.
    assert_eq!(
        hex::encode(sha(CALLING_EFI_APPLICATION)),
        "3d6772b4f84ed47595d72a2c4c5ffd15f5bb72c7507fe26f2aaee2c69d5633ba"
    );
    let log = EventLog::parse(&bytes).unwrap();
    assert_eq!(log.events.len(), 3);
    assert_eq!(log.events[2].data, load_event);
    let pcr4 = fold(
        [0; 32],
        &[sha(CALLING_EFI_APPLICATION), sha(&[0; 4]), authenticode],
    );
    assert_eq!(log.boot_applications(&pcr4).unwrap(), vec![authenticode]);
    // The builder's OVMF sequence replays PCR 4 to the same value.
    assert_eq!(
        LogBuilder::with_sha1()
            .boot_from_disk(authenticode, b"")
            .expected_pcr(4),
        pcr4
    );
}

#[test]
fn errors_show_their_evidence() {
    let e = EventLogError::UnexpectedEventData {
        pcr: 4,
        event_type: EV_EFI_ACTION,
        index: 2,
        data: vec![b'A'; 100],
    };
    let shown = e.to_string();
    assert!(shown.contains(&"A".repeat(64)), "{shown}");
    assert!(!shown.contains(&"A".repeat(65)), "{shown}");
    assert!(shown.contains("0x80000007"), "{shown}");
    let e = EventLogError::NotCryptoAgile {
        event_type: 8,
        signature: b"1.0\0".to_vec(),
    };
    assert!(e.to_string().contains("1.0\\x00"), "{e}");
}
