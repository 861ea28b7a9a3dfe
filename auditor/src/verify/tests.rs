//! One test per finding, warning and failure: each tampering yields its own variant.

use super::*;
use crate::check::RecordProblem;
use crate::layout::RECEIPTS_DIR;
use crate::testutil::*;
use attest::note::NoteSigner;
use std::fs;

#[test]
fn an_untouched_export_verifies_with_totals() {
    let f = Fx::new(10, &[3, 9]);
    let r = f.run().unwrap();
    assert!(r.is_valid(), "{:#?}", r.problems);
    assert!(r.warnings.is_empty(), "{:#?}", r.warnings);
    assert_eq!(
        (r.records, r.checkpoint.size, r.receipts_verified),
        (10, 10, 2)
    );
    assert!(r.key_pinned);
    assert_eq!(r.totals.tenants["a"].records, 4);
    assert_eq!(r.totals.by_kind["usage"], 10);
    let s = crate::summary::format_summary(&r);
    assert!(
        s.starts_with(
            "OK: 10 records verified against the checkpoint of node-1/usage (size 10, root "
        ),
        "{s}"
    );
    assert!(s.contains("key: node-1/usage+"), "{s}");
    assert!(
        s.contains(" (pinned)\nreceipts verified: 2\nby kind: usage 10\n"),
        "{s}"
    );
    assert!(s.contains("\nTOTAL  "), "{s}");
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["checkpoint"]["size"], 10);
    assert_eq!(json["totals"]["tenants"]["a"]["records"], 4);
}

/// An export holding job usage and scratch erasures among usage records verifies (what
/// `sovctl audit verify` runs over a directory), counts them by kind and bills only usage;
/// a job-usage record that crosses an hour is a finding naming it.
#[test]
fn an_export_with_job_usage_and_scratch_erasures_verifies() {
    let mut leaves = leaves(2);
    leaves.push(
        job_usage(2, "2026-01-01T00:00:00.000Z", "2026-01-01T01:00:00.000Z")
            .to_leaf()
            .unwrap(),
    );
    leaves.push(
        scratch_erased(3, "2026-01-01T01:00:00.000Z")
            .to_leaf()
            .unwrap(),
    );
    let f = Fx::of_leaves(leaves.clone(), &[2, 3]);
    let r = f.run().unwrap();
    assert!(r.is_valid(), "{:#?}", r.problems);
    assert_eq!((r.records, r.receipts_verified), (4, 2));
    assert_eq!(r.totals.by_kind["job-usage"], 1);
    assert_eq!(r.totals.by_kind["scratch-erased"], 1);
    assert_eq!(r.totals.tenants["a"].records, 1, "only usage is billed");
    let s = crate::summary::format_summary(&r);
    assert!(
        s.contains("by kind: job-usage 1, scratch-erased 1, usage 2\n"),
        "{s}"
    );
    leaves[2] = job_usage(2, "2026-01-01T00:30:00.000Z", "2026-01-01T01:30:00.000Z")
        .to_leaf()
        .unwrap();
    let f = Fx::of_leaves(leaves, &[]);
    assert!(matches!(
        f.one_problem(),
        Finding::BadRecord {
            index: 2,
            problem: RecordProblem::CrossesHour { .. }
        }
    ));
}

/// An export holding transfers (allowed both ways, one refused) verifies, counts them by
/// kind and bills nothing of them; a refusal that claims bytes is a finding naming it.
#[test]
fn an_export_with_transfers_verifies() {
    let mut leaves = leaves(1);
    for (i, (dir, decision, bytes)) in [
        ("in", "allow", 10),
        ("out", "allow", 10),
        ("out", "deny", 0),
    ]
    .into_iter()
    .enumerate()
    {
        leaves.push(
            transfer(i as u64 + 1, dir, decision, bytes)
                .to_leaf()
                .unwrap(),
        );
    }
    let f = Fx::of_leaves(leaves.clone(), &[3]);
    let r = f.run().unwrap();
    assert!(r.is_valid(), "{:#?}", r.problems);
    assert_eq!((r.records, r.receipts_verified), (4, 1));
    assert_eq!(r.totals.by_kind["transfer"], 3);
    assert_eq!(r.totals.tenants["a"].records, 1, "only usage is billed");
    let s = crate::summary::format_summary(&r);
    assert!(s.contains("by kind: transfer 3, usage 1\n"), "{s}");
    leaves[3] = transfer(3, "out", "deny", 5).to_leaf().unwrap();
    let f = Fx::of_leaves(leaves, &[]);
    assert!(matches!(
        f.one_problem(),
        Finding::BadRecord {
            index: 3,
            problem: RecordProblem::DeniedWithBytes { bytes: 5 }
        }
    ));
}

// --- Records

#[test]
fn bad_record() {
    let f = Fx::new(5, &[]);
    let mut lines = f.leaves.clone();
    lines.swap(1, 2);
    f.write_records(&lines);
    let r = f.run().unwrap();
    assert!(matches!(
        r.problems[0],
        Finding::BadRecord {
            index: 1,
            problem: RecordProblem::IdMismatch { id: 2, line: 1 }
        }
    ));
    assert!(matches!(r.problems[1], Finding::BadRecord { index: 2, .. }));
    assert!(matches!(
        r.problems[2],
        Finding::RootMismatch { size: 5, .. }
    ));
    assert_eq!(r.problems.len(), 3);
    assert!(r.problems[0]
        .to_string()
        .starts_with("record 1: claims id 2 but is line 1"));
}

/// A node that bills an hour twice signs the copy like any record: only the checks across
/// records see it. It is a finding naming both records, and it is not totalled.
#[test]
fn a_double_charge_is_found_and_not_totalled() {
    let mut leaves = leaves(6);
    let mut copy: crate::record::Record = serde_json::from_slice(&leaves[4]).unwrap();
    if let crate::record::Record::Usage(u) = &mut copy {
        u.id = 6;
    }
    leaves.push(copy.to_leaf().unwrap());
    let f = Fx::of_leaves(leaves, &[6]);
    let r = f.run().unwrap();
    assert_eq!(r.receipts_verified, 1, "the node signed it");
    assert_eq!(r.problems.len(), 1, "{:#?}", r.problems);
    assert!(
        matches!(
            &r.problems[0],
            Finding::BadRecord {
                index: 6,
                problem: RecordProblem::OverlapsEarlier { earlier: 4, .. }
            }
        ),
        "{:?}",
        r.problems
    );
    assert!(
        r.problems[0]
            .to_string()
            .starts_with("record 6: starts at 2026-01-01T04:00:00.000Z, before 2026-01-01T04:01:00.000Z, the end of record 4 of lease lease-b"),
        "{}",
        r.problems[0]
    );
    assert_eq!((r.totals.records, r.totals.tenants["b"].records), (6, 2));
    let json = serde_json::to_value(&r.problems[0]).unwrap();
    assert_eq!(json["problem"]["problem"], "overlaps-earlier");
    assert_eq!(json["problem"]["earlier"], 4);
}

/// A node that bills one GPU to a second lease while the first holds it signs that record
/// like any other: only the checks across records see it. It is a finding naming the other
/// lease and its time on the GPU, and it is not totalled.
#[test]
fn a_gpu_billed_to_two_leases_is_found_and_not_totalled() {
    let mut leaves = leaves(6);
    // Lease-a has GPU …0001 from record 0 (00:00) to record 3 (03:01); lease-d bills it at
    // 01:00.
    let d = usage_on(
        6,
        "d",
        "lease-d",
        "GPU-0b8c1a52-0000-4000-8000-000000000001",
        ("2026-01-01T01:00:00.000Z", "2026-01-01T01:01:00.000Z"),
        None,
    );
    leaves.push(crate::record::Record::Usage(d).to_leaf().unwrap());
    let f = Fx::of_leaves(leaves, &[6]);
    let r = f.run().unwrap();
    assert_eq!(r.receipts_verified, 1, "the node signed it");
    assert_eq!(r.problems.len(), 1, "{:#?}", r.problems);
    assert!(
        matches!(
            &r.problems[0],
            Finding::BadRecord {
                index: 6,
                problem: RecordProblem::OverlapsOtherLease(o)
            } if o.other_first == 0 && o.other_lease == "lease-a"
        ),
        "{:?}",
        r.problems
    );
    assert!(
        r.problems[0].to_string().starts_with(
            "record 6: puts lease lease-d on GPU GPU-0b8c1a52-0000-4000-8000-000000000001 over \
             2026-01-01T01:00:00.000Z..2026-01-01T01:01:00.000Z, across lease lease-a's time on \
             it, 2026-01-01T00:00:00.000Z..2026-01-01T03:01:00.000Z (from record 0)"
        ),
        "{}",
        r.problems[0]
    );
    assert_eq!(r.totals.records, 6);
    assert!(
        !r.totals.tenants.contains_key("d"),
        "{:?}",
        r.totals.tenants
    );
    let json = serde_json::to_value(&r.problems[0]).unwrap();
    assert_eq!(json["problem"]["problem"], "overlaps-other-lease");
    assert_eq!(json["problem"]["other_lease"], "lease-a");
    assert_eq!(json["problem"]["other_end"], "2026-01-01T03:01:00.000Z");
}

#[test]
fn more_invalid_records() {
    let f = Fx::new(25, &[]);
    let shifted: Vec<Vec<u8>> = (0..25)
        .map(|i| usage(i + 1, "a", 1, 1).to_leaf().unwrap())
        .collect();
    f.write_records(&shifted);
    let r = f.run().unwrap();
    assert_eq!(r.problems.len(), 22, "{:#?}", r.problems);
    assert!(matches!(
        r.problems[20],
        Finding::MoreInvalidRecords { count: 5 }
    ));
    assert_eq!(r.problems[20].to_string(), "… and 5 more invalid records");
}

#[test]
fn unterminated() {
    let f = Fx::new(5, &[]);
    let text = fs::read(f.path(RECORDS_FILE)).unwrap();
    f.write(RECORDS_FILE, &text[..text.len() - 10]);
    let r = f.run().unwrap();
    assert!(
        r.problems
            .iter()
            .any(|p| matches!(p, Finding::Unterminated { record: 4 })),
        "{:#?}",
        r.problems
    );
    let p = r
        .problems
        .iter()
        .find(|p| matches!(p, Finding::Unterminated { .. }))
        .unwrap();
    assert_eq!(
        p.to_string(),
        "records.jsonl does not end with a newline: record 4 is incomplete (the export was truncated)"
    );
}

#[test]
fn truncated() {
    let f = Fx::new(5, &[]);
    f.write_records(&f.leaves[..3]);
    let p = f.one_problem();
    assert!(
        matches!(
            p,
            Finding::Truncated {
                signed_size: 5,
                lines: 3
            }
        ),
        "{p:?}"
    );
    assert_eq!(
        p.to_string(),
        "export truncated: the checkpoint covers 5 records but records.jsonl has 3"
    );
}

#[test]
fn unsigned_records() {
    let f = Fx::new(5, &[]);
    f.write_records(&leaves(7));
    let p = f.one_problem();
    assert!(
        matches!(
            p,
            Finding::UnsignedRecords {
                lines: 7,
                signed_size: 5
            }
        ),
        "{p:?}"
    );
    assert_eq!(
        p.to_string(),
        "records.jsonl has 7 records but the checkpoint covers only 5: records 5..6 are not signed"
    );
}

#[test]
fn root_mismatch() {
    let f = Fx::new(5, &[]);
    let mut lines = f.leaves.clone();
    lines[2] = String::from_utf8(lines[2].clone())
        .unwrap()
        .replace("87.5", "88.5")
        .into_bytes();
    f.write_records(&lines);
    let p = f.one_problem();
    let signed = attest::log::Log::from_leaves(&f.leaves).unwrap().root();
    let computed = attest::log::Log::from_leaves(&lines).unwrap().root();
    assert!(
        matches!(p, Finding::RootMismatch { size: 5, computed: c, signed: s } if c == computed && s == signed),
        "{p:?}"
    );
    assert!(p.to_string().starts_with(
        "records.jsonl does not match the signed log: root mismatch at size 5 (records give "
    ));
    let json = serde_json::to_value(&p).unwrap();
    assert_eq!(json["finding"], "root-mismatch");
    assert_eq!(json["signed"], crate::ser::b64(&signed));
}

// --- The previous checkpoint

#[test]
fn previous_checks_pass_both_ways() {
    let mut f = Fx::new(9, &[]);
    f.previous(signed_checkpoint(&f.leaves[..4], &signer()));
    assert_eq!(
        f.run().unwrap().previous,
        Some(PreviousCheck::Recomputed { old_size: 4 })
    );
    f.proof(consistency(&f.leaves, 4));
    assert_eq!(
        f.run().unwrap().previous,
        Some(PreviousCheck::ProofVerified { old_size: 4 })
    );
    f.previous(signed_checkpoint(&[], &signer()));
    f.proof(consistency(&f.leaves, 0));
    assert_eq!(
        f.run().unwrap().previous,
        Some(PreviousCheck::ProofVerified { old_size: 0 })
    );
}

#[test]
fn previous_does_not_verify() {
    let mut f = Fx::new(5, &[]);
    let other = NoteSigner::from_seed("node-2/usage", &[1; 32]).unwrap();
    f.previous(signed_checkpoint(&f.leaves[..2], &other));
    let p = f.one_problem();
    assert!(
        matches!(p, Finding::PreviousDoesNotVerify { ref file, .. } if file == "prev.checkpoint"),
        "{p:?}"
    );
    assert!(
        p.to_string().starts_with(
            "previous checkpoint prev.checkpoint does not verify with key node-1/usage+"
        ),
        "{p}"
    );
}

#[test]
fn previous_larger() {
    let mut f = Fx::new(5, &[]);
    f.previous(signed_checkpoint(&leaves(6), &signer()));
    let p = f.one_problem();
    assert!(
        matches!(
            p,
            Finding::PreviousLarger {
                previous_size: 6,
                size: 5
            }
        ),
        "{p:?}"
    );
    assert_eq!(
        p.to_string(),
        "log truncated: previous checkpoint size 6 > 5"
    );
}

#[test]
fn proof_size_mismatch() {
    let mut f = Fx::new(9, &[]);
    f.previous(signed_checkpoint(&f.leaves[..4], &signer()));
    f.proof(consistency(&f.leaves, 3));
    let p = f.one_problem();
    assert!(
        matches!(
            p,
            Finding::ProofSizeMismatch {
                proof_old: 3,
                proof_new: 9,
                previous_size: 4,
                size: 9,
                ..
            }
        ),
        "{p:?}"
    );
    assert_eq!(
        p.to_string(),
        "consistency proof the.proof is from size 3 to 9, but the checkpoints are for sizes 4 and 9"
    );
}

fn forked(f: &Fx, n: usize) -> Vec<Vec<u8>> {
    let mut fork = f.leaves[..n].to_vec();
    fork[1] = usage(1, "b", 60_000, 20_000).to_leaf().unwrap();
    fork
}

#[test]
fn proof_rejected() {
    let mut f = Fx::new(9, &[]);
    f.previous(signed_checkpoint(&forked(&f, 4), &signer()));
    f.proof(consistency(&f.leaves, 4));
    let p = f.one_problem();
    assert!(
        matches!(
            p,
            Finding::ProofRejected {
                size: 9,
                previous_size: 4,
                reason: Inconsistency::Proof(_)
            }
        ),
        "{p:?}"
    );
    assert!(p.to_string().starts_with(
        "log rewritten: the log at size 9 does not extend the previous checkpoint at size 4 ("
    ));
    // Size 0 with a root other than the empty tree's.
    let bad_zero = attest::checkpoint::sign_checkpoint(
        &Checkpoint {
            origin: ORIGIN.into(),
            size: 0,
            root: [1; 32],
            extensions: vec![],
        },
        &signer(),
    )
    .unwrap();
    f.previous(bad_zero);
    f.proof(consistency(&f.leaves, 0));
    let p = f.one_problem();
    assert!(
        matches!(
            p,
            Finding::ProofRejected {
                reason: Inconsistency::NonEmptyRootAtZero,
                ..
            }
        ),
        "{p:?}"
    );
    // Size 0 with the empty root, but a proof that is not empty (docs/audit.md: it must be).
    f.previous(signed_checkpoint(&[], &signer()));
    let mut proof = crate::layout::ConsistencyProof::parse(&consistency(&f.leaves, 0)).unwrap();
    proof.hashes.push([7; 32]);
    f.proof(proof.format());
    let p = f.one_problem();
    assert!(
        matches!(
            p,
            Finding::ProofRejected {
                reason: Inconsistency::NonEmptyProofFromZero { hashes: 1 },
                ..
            }
        ),
        "{p:?}"
    );
    assert!(
        p.to_string()
            .ends_with("(a consistency proof from size 0 must be empty, but it has 1 hashes): it was rewritten or forked"),
        "{p}"
    );
}

#[test]
fn log_rewritten() {
    let mut f = Fx::new(9, &[]);
    let fork = forked(&f, 4);
    f.previous(signed_checkpoint(&fork, &signer()));
    let p = f.one_problem();
    let signed = attest::log::Log::from_leaves(&fork).unwrap().root();
    assert!(
        matches!(p, Finding::LogRewritten { previous_size: 4, signed: s, .. } if s == signed),
        "{p:?}"
    );
    assert!(p
        .to_string()
        .starts_with("log rewritten: the first 4 records give root "));
}

#[test]
fn previous_beyond_records() {
    let mut f = Fx::new(9, &[]);
    f.previous(signed_checkpoint(&f.leaves[..7], &signer()));
    f.write_records(&f.leaves[..5]);
    let r = f.run().unwrap();
    assert!(matches!(
        r.problems[0],
        Finding::Truncated {
            signed_size: 9,
            lines: 5
        }
    ));
    assert!(matches!(
        r.problems[1],
        Finding::PreviousBeyondRecords {
            previous_size: 7,
            lines: 5
        }
    ));
    assert_eq!(
        r.problems[1].to_string(),
        "log truncated: previous checkpoint size 7 > 5 records in the export"
    );
}

// --- Receipts

#[test]
fn receipt_unreadable() {
    let f = Fx::new(5, &[]);
    f.write_receipt(2, "");
    fs::remove_file(f.path(&crate::layout::receipt_path(2))).unwrap();
    fs::create_dir(f.path(&crate::layout::receipt_path(2))).unwrap();
    let p = f.one_problem();
    assert!(
        matches!(
            p,
            Finding::ReceiptUnreadable {
                error: SourceError::NotRegularFile,
                ..
            }
        ),
        "{p:?}"
    );
    assert_eq!(
        p.to_string(),
        format!(
            "cannot read receipt {}: not a regular file",
            f.describe("receipts/2.tlog-proof")
        )
    );
}

#[test]
fn receipt_malformed() {
    let f = Fx::new(5, &[]);
    f.write_receipt(2, "not a receipt\n");
    let p = f.one_problem();
    assert!(matches!(p, Finding::ReceiptMalformed { .. }), "{p:?}");
    assert!(p.to_string().starts_with(&format!(
        "receipt {}: ",
        f.describe("receipts/2.tlog-proof")
    )));
}

#[test]
fn receipt_index_mismatch() {
    let f = Fx::new(5, &[2]);
    fs::rename(
        f.path("receipts/2.tlog-proof"),
        f.path("receipts/3.tlog-proof"),
    )
    .unwrap();
    let p = f.one_problem();
    assert!(
        matches!(
            p,
            Finding::ReceiptIndexMismatch {
                index: 2,
                named: 3,
                ..
            }
        ),
        "{p:?}"
    );
    assert!(
        p.to_string()
            .ends_with("3.tlog-proof is for record 2, not 3"),
        "{p}"
    );
}

#[test]
fn receipt_checkpoint_does_not_verify() {
    let f = Fx::new(5, &[]);
    let other = NoteSigner::from_seed(ORIGIN, &[9; 32]).unwrap();
    let log = attest::log::Log::from_leaves(&f.leaves).unwrap();
    let r = Receipt {
        index: 2,
        extra: None,
        proof: log.inclusion_proof(2, 5).unwrap(),
        checkpoint_note: signed_checkpoint(&f.leaves, &other),
    };
    f.write_receipt(2, &r.format());
    let p = f.one_problem();
    assert!(
        matches!(p, Finding::ReceiptCheckpointDoesNotVerify { record: 2, .. }),
        "{p:?}"
    );
    assert!(p
        .to_string()
        .contains("carries a checkpoint that does not verify with key node-1/usage+"));
}

#[test]
fn receipt_record_missing() {
    let f = Fx::new(9, &[7]);
    f.write_records(&f.leaves[..5]);
    let r = f.run().unwrap();
    assert!(matches!(r.problems[0], Finding::Truncated { .. }));
    assert!(
        matches!(
            r.problems[1],
            Finding::ReceiptRecordMissing { record: 7, .. }
        ),
        "{:#?}",
        r.problems
    );
    assert!(r.problems[1]
        .to_string()
        .starts_with("record 7: has a receipt ("));
    assert_eq!(r.problems.len(), 2);
}

#[test]
fn receipt_mismatch() {
    let f = Fx::new(5, &[2]);
    let mut lines = f.leaves.clone();
    lines[2] = String::from_utf8(lines[2].clone())
        .unwrap()
        .replace("87.5", "88.5")
        .into_bytes();
    f.write_records(&lines);
    let r = f.run().unwrap();
    assert!(matches!(r.problems[0], Finding::RootMismatch { .. }));
    assert!(
        matches!(r.problems[1], Finding::ReceiptMismatch { record: 2, .. }),
        "{:#?}",
        r.problems
    );
    assert!(r.problems[1]
        .to_string()
        .starts_with("record 2: line does not match its receipt "));
}

#[test]
fn receipt_tree_not_reproduced() {
    let f = Fx::new(9, &[]);
    // A receipt for record 0 in a forked tree of size 4: its proof holds, its tree is not ours.
    f.write_receipt(0, &receipt(&forked(&f, 4), 0));
    let p = f.one_problem();
    assert!(
        matches!(
            p,
            Finding::ReceiptTreeNotReproduced {
                record: 0,
                size: 4,
                ..
            }
        ),
        "{p:?}"
    );
    assert!(p
        .to_string()
        .ends_with("is for a tree of size 4 that records.jsonl does not reproduce"));
}

// --- Warnings

#[test]
fn self_asserted_key() {
    let mut f = Fx::new(3, &[]);
    f.opts.vkey = None;
    let r = f.run().unwrap();
    assert!(r.is_valid() && !r.key_pinned);
    assert_eq!(
        r.warnings,
        [Warning::SelfAssertedKey {
            file: f.describe("log.vkey")
        }]
    );
    assert!(r.warnings[0].to_string().contains("so it is self-asserted"));
}

#[test]
fn export_key_differs() {
    let f = Fx::new(3, &[]);
    let other = NoteSigner::from_seed(ORIGIN, &[9; 32])
        .unwrap()
        .verifier()
        .to_vkey();
    f.write("log.vkey", format!("{other}\n"));
    let r = f.run().unwrap();
    assert!(r.is_valid());
    assert_eq!(
        r.warnings,
        [Warning::ExportKeyDiffers {
            export_key: other.clone()
        }]
    );
    assert_eq!(
        r.warnings[0].to_string(),
        format!("the export's own log.vkey ({other}) differs from the pinned key; it is ignored")
    );
}

#[test]
fn receipt_against_later_checkpoint() {
    let f = Fx::new(5, &[]);
    f.write_receipt(3, &receipt(&leaves(8), 3));
    let r = f.run().unwrap();
    assert!(r.is_valid(), "{:#?}", r.problems);
    assert_eq!(r.receipts_verified, 0);
    assert!(
        matches!(
            &r.warnings[..],
            [Warning::ReceiptAgainstLaterCheckpoint {
                record: 3,
                receipt_size: 8,
                size: 5,
                ..
            }]
        ),
        "{:#?}",
        r.warnings
    );
}

#[test]
fn ignored_file() {
    let f = Fx::new(3, &[]);
    f.write_receipt(1, &receipt(&f.leaves, 1));
    f.write(&format!("{RECEIPTS_DIR}/notes.txt"), "hello");
    let r = f.run().unwrap();
    assert!(r.is_valid());
    assert_eq!(r.receipts_verified, 1);
    assert_eq!(
        r.warnings,
        [Warning::IgnoredFile {
            file: f.describe("receipts/notes.txt")
        }]
    );
    assert_eq!(
        r.warnings[0].to_string(),
        format!(
            "ignoring {}: not <id>.tlog-proof",
            f.describe("receipts/notes.txt")
        )
    );
    let json = serde_json::to_value(&r.warnings[0]).unwrap();
    assert_eq!(json["warning"], "ignored-file");
}

// --- Failures

#[test]
fn cannot_read() {
    let f = Fx::new(3, &[]);
    fs::remove_file(f.path("checkpoint")).unwrap();
    let e = f.fails();
    assert!(
        matches!(e, VerifyError::CannotRead { what: FileRole::Checkpoint, ref error, .. } if error.is_not_found()),
        "{e:?}"
    );
    assert!(e.to_string().starts_with(&format!(
        "cannot read checkpoint {}: ",
        f.describe("checkpoint")
    )));
}

#[cfg(unix)]
#[test]
fn a_checkpoint_linked_to_dev_zero_fails_clearly() {
    let f = Fx::new(3, &[]);
    fs::remove_file(f.path("checkpoint")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", f.path("checkpoint")).unwrap();
    let e = f.fails();
    assert!(
        matches!(
            e,
            VerifyError::CannotRead {
                error: SourceError::NotRegularFile,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        format!(
            "cannot read checkpoint {}: not a regular file",
            f.describe("checkpoint")
        )
    );
}

#[test]
fn unreadable_records() {
    let f = Fx::new(3, &[]);
    fs::remove_file(f.path(RECORDS_FILE)).unwrap();
    let e = f.fails();
    assert!(
        matches!(e, VerifyError::Unreadable { ref file, .. } if *file == f.describe(RECORDS_FILE)),
        "{e:?}"
    );
}

#[test]
fn malformed_key() {
    let mut f = Fx::new(3, &[]);
    f.opts.vkey = Some(Supplied {
        name: "k".into(),
        text: "garbage".into(),
    });
    let e = f.fails();
    assert!(
        matches!(e, VerifyError::MalformedKey { ref file, .. } if file == "k"),
        "{e:?}"
    );
    assert!(e.to_string().starts_with("verifier key k is malformed: "));
}

#[test]
fn checkpoint_does_not_verify() {
    let f = Fx::new(3, &[]);
    let forger = NoteSigner::from_seed(ORIGIN, &[6; 32]).unwrap();
    f.write("checkpoint", signed_checkpoint(&f.leaves, &forger));
    f.write("log.vkey", format!("{}\n", forger.verifier().to_vkey()));
    let failure = f.run().unwrap_err();
    assert!(
        matches!(failure.error, VerifyError::CheckpointDoesNotVerify { .. }),
        "{failure:?}"
    );
    assert!(failure
        .to_string()
        .starts_with("checkpoint signature does not verify with key node-1/usage+"));
    assert!(matches!(
        failure.warnings[..],
        [Warning::ExportKeyDiffers { .. }]
    ));
    let json = serde_json::to_value(&failure).unwrap();
    assert_eq!(json["error"]["failure"], "checkpoint-does-not-verify");
}

#[test]
fn malformed_proof() {
    let mut f = Fx::new(5, &[]);
    f.previous(signed_checkpoint(&f.leaves[..2], &signer()));
    f.proof("junk".into());
    let e = f.fails();
    assert!(
        matches!(
            e,
            VerifyError::MalformedProof {
                error: ProofParseError::MissingNewline,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        "the.proof: consistency proof must end with a newline"
    );
}

#[test]
fn records_stream_failure() {
    let f = Fx::new(1, &[]);
    f.write(RECORDS_FILE, vec![b'x'; crate::stream::MAX_RECORD_LEN + 1]);
    let e = f.fails();
    assert!(
        matches!(
            e,
            VerifyError::Records {
                error: StreamError::LineTooLong { .. }
            }
        ),
        "{e:?}"
    );
}

#[test]
fn supplied_files_are_read_bounded() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("pinned.vkey");
    let e = Supplied::read(&p, FileRole::VerifierKey).unwrap_err();
    assert!(e
        .to_string()
        .starts_with(&format!("cannot read verifier key {}: ", p.display())));
    fs::write(&p, "k\n").unwrap();
    let s = Supplied::read(&p, FileRole::VerifierKey).unwrap();
    assert_eq!(
        (s.name, s.text),
        (p.display().to_string(), "k\n".to_owned())
    );
}
