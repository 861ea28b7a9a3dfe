//! The signed log must never fork: a node whose database was restored from an older backup,
//! or deleted, refuses to sign again until its records are recovered from an audit export,
//! and the recovery is recorded in the ledger itself.

use attest::note::NoteSigner;
use auditor::money::amount_paise;
use auditor::record::{Record, UsageRecord, RECORD_VERSION};
use auditor::source::DirSource;
use auditor::verify::{verify_export, Supplied, VerifyOptions};
use hostd::lease::{Lease, LeaseState};
use hostd::ledger::{Ledger, LedgerError};
use hostd::recover::{recover_from_export, RecoverError};
use hostd::state::Store;
use hostd::witness::{Witness, WITNESS_FILE};
use std::fs;
use std::path::Path;

const NODE: &str = "node-7";
const ORIGIN: &str = "node-7/usage";

fn signer() -> NoteSigner {
    NoteSigner::from_seed(ORIGIN, &[5; 32]).unwrap()
}

fn usage(id: u64) -> Vec<u8> {
    Record::Usage(UsageRecord {
        v: RECORD_VERSION,
        id,
        node: NODE.into(),
        tenant: "acme".into(),
        lease: "lease-a".into(),
        gpu_uuid: "GPU-0".into(),
        gpu_model: "H100".into(),
        start: format!("2026-03-01T{:02}:00:00.000Z", id),
        end: format!("2026-03-01T{:02}:00:00.000Z", id + 1),
        gpu_ms: 3_600_000,
        gpu_seconds: 3600.0,
        energy_joules: 1.0,
        peak_memory_bytes: 0,
        mean_utilization_pct: 50.0,
        rate_paise_per_hour: 25_000,
        amount_paise: amount_paise(3_600_000, 25_000),
        policy_digest: "sha256:00".into(),
        prev: id.checked_sub(1),
        attestation: None,
    })
    .to_leaf()
    .unwrap()
}

/// A node's state directory: the log key file, the store, the witness.
fn open(state: &Path) -> (Store, Result<Ledger, LedgerError>) {
    let store = Store::open_stopped(state).unwrap();
    let ledger =
        Ledger::open_witnessed(store.db(), signer(), Witness::at(state.join(WITNESS_FILE)));
    (store, ledger)
}

fn append(state: &Path, ids: std::ops::Range<u64>) {
    let (_store, ledger) = open(state);
    let mut ledger = ledger.unwrap();
    assert_eq!(ledger.size(), ids.start);
    ledger.append(&ids.map(usage).collect::<Vec<_>>()).unwrap();
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            fs::copy(e.path(), target).unwrap();
        }
    }
}

fn active_lease() -> Lease {
    Lease {
        id: "lease-a".into(),
        tenant: "acme".into(),
        model: "H100".into(),
        gpus: vec![],
        classification: "public".into(),
        dataset: None,
        state: LeaseState::Active,
        started_ms: 1_772_323_200_000, // 2026-03-01T00:00:00Z
        ended_ms: None,
        started: "2026-03-01T00:00:00.000Z".into(),
        ended: None,
        rate_paise_per_hour: 25_000,
        policy_digest: "sha256:00".into(),
        decision: vec![],
    }
}

#[test]
fn a_restored_or_deleted_store_is_refused_then_recovered_from_an_export() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    fs::create_dir_all(&state).unwrap();
    hostd::keys::write_new_private(&state.join("log.key"), signer().to_skey().as_bytes()).unwrap();
    append(&state, 0..10);
    {
        // The backup also holds a lease that was still active when it was taken.
        let store = Store::open_stopped(&state).unwrap();
        let t = store.tree("leases").unwrap();
        t.put("lease/lease-a", &active_lease()).unwrap();
        t.put("cursor/lease-a/GPU-0", &serde_json::json!({"any": 1}))
            .unwrap();
        store.flush().unwrap();
    }
    copy_dir(&state.join("db"), &tmp.path().join("backup-db"));
    append(&state, 10..15);
    let export = tmp.path().join("export");
    {
        let (_s, ledger) = open(&state);
        hostd::audit::export(&ledger.unwrap(), &export, &[]).unwrap();
    }

    // Restore the older database: hostd refuses, naming sizes and the recovery command.
    fs::remove_dir_all(state.join("db")).unwrap();
    copy_dir(&tmp.path().join("backup-db"), &state.join("db"));
    let err = open(&state)
        .1
        .expect_err("a store behind the witness must be refused");
    assert!(
        matches!(
            err,
            LedgerError::BehindWitness {
                witnessed: 15,
                stored: 10,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("hostd ledger recover"), "{err}");

    // Recovery re-appends records 10..15 exactly as exported and records what it did.
    let r = recover_from_export(&state, NODE, ORIGIN, &export, 1_772_400_000_000).unwrap();
    assert_eq!(
        (r.store_size, r.witnessed_size, r.reappended, r.record),
        (10, 15, 5, 15)
    );
    assert_eq!(r.leases_ended, vec!["lease-a".to_owned()]);
    let (store, ledger) = open(&state);
    let ledger = ledger.expect("recovered store opens");
    assert_eq!(ledger.size(), 16);
    for i in 0..15 {
        assert_eq!(ledger.record(i).unwrap().unwrap(), usage(i), "record {i}");
    }
    let rec: Record = serde_json::from_slice(&ledger.record(15).unwrap().unwrap()).unwrap();
    assert!(
        matches!(rec, Record::Recovery(ref r) if r.reappended == 5),
        "{rec:?}"
    );
    // The restored active lease is ended at its last recorded interval; its cursor is gone.
    let leases = store.tree("leases").unwrap();
    let lease: Lease = leases.get("lease/lease-a").unwrap().unwrap();
    assert_eq!(lease.state, LeaseState::Ended);
    assert_eq!(lease.ended.as_deref(), Some("2026-03-01T15:00:00.000Z"));
    assert!(leases.keys("cursor/lease-a/").unwrap().is_empty());

    // An auditor holding the earlier export's checkpoint sees the log extended, not forked.
    let export2 = tmp.path().join("export2");
    hostd::audit::export(&ledger, &export2, &[]).unwrap();
    let opts = VerifyOptions {
        vkey: Some(Supplied {
            name: "pinned".into(),
            text: ledger.vkey(),
        }),
        previous: Some(Supplied {
            name: "earlier".into(),
            text: fs::read_to_string(export.join("checkpoint")).unwrap(),
        }),
        consistency: None,
    };
    let report = verify_export(&DirSource::open(&export2).unwrap(), &opts, |_, _| {}).unwrap();
    assert!(report.is_valid(), "{:?}", report.problems);
    assert_eq!(report.totals.by_kind.get("recovery"), Some(&1));
    // Every handle on the database goes, as when hostd stops.
    drop((ledger, leases, store));

    // Nothing left to recover.
    let again = recover_from_export(&state, NODE, ORIGIN, &export, 1_772_400_000_000);
    assert!(
        matches!(again, Err(RecoverError::NotBehind { .. })),
        "{again:?}"
    );

    // A deleted database is refused the same way.
    fs::remove_dir_all(state.join("db")).unwrap();
    let err = open(&state).1.expect_err("an empty store must be refused");
    assert!(
        matches!(err, LedgerError::BehindWitness { stored: 0, .. }),
        "{err}"
    );
}

#[test]
fn a_store_of_another_log_under_the_same_key_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    fs::create_dir_all(&state).unwrap();
    append(&state, 0..3);
    // Another history of at least the witnessed size, signed with the same key.
    fs::remove_dir_all(state.join("db")).unwrap();
    {
        let store = Store::open_stopped(&state).unwrap();
        let mut l = Ledger::open(store.db(), signer()).unwrap();
        l.append(&[usage(0), usage(7), usage(2), usage(3)]).unwrap();
    }
    let err = open(&state).1.expect_err("a forked store must be refused");
    assert!(
        matches!(err, LedgerError::ForkedFromWitness { size: 3, .. }),
        "{err}"
    );
}

/// A record whose stored bytes changed (a flipped byte, a cut tail) leaves the tree's hashes,
/// and so the root check at open, intact; the start-up check of every record finds it.
#[test]
fn a_changed_record_in_the_store_is_found_at_start() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    fs::create_dir_all(&state).unwrap();
    append(&state, 0..5);
    {
        let store = Store::open_stopped(&state).unwrap();
        let tree = store.db().open_tree(hostd::ledger::TREE_NAME).unwrap();
        let mut key = vec![b'L'];
        key.extend_from_slice(&2u64.to_be_bytes());
        let mut v = tree.get(&key).unwrap().unwrap().to_vec();
        let last = v.len() - 2;
        v[last] ^= 0x01;
        tree.insert(&key, v).unwrap();
        store.flush().unwrap();
    }
    let (_store, ledger) = open(&state);
    let ledger = ledger.expect("hashes and root are intact");
    let err = ledger
        .check_leaves()
        .expect_err("the changed record is found");
    assert!(matches!(err, LedgerError::Damaged { .. }), "{err}");
    assert!(err.to_string().contains("record 2"), "{err}");
    assert!(err.to_string().contains("hostd ledger recover"), "{err}");
}
