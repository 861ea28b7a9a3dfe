//! A sceptical auditor's attacks on the ledger, through the real binaries:
//! `hostd audit export` on a stopped node's state, then `sovctl audit verify` offline.
//! Every tampering must make verification exit 1 with a message naming the problem; an
//! untouched export must verify and reproduce the per-tenant totals.

mod common;

use attest::checkpoint::{open_checkpoint, sign_checkpoint, Checkpoint};
use attest::note::NoteSigner;
use auditor::money::amount_paise;
use auditor::record::{Record, UsageRecord, RECORD_VERSION};
use hostd::ledger::{Ledger, TREE_NAME};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const ORIGIN: &str = "node-7/usage";
const HOUR_MS: u64 = 3_600_000;

fn signer() -> NoteSigner {
    NoteSigner::from_seed(ORIGIN, &[5; 32]).unwrap()
}

/// Record `id` starts at hour `id` from 2026-03-01 and lasts `gpu_ms`, as a node cuts it, on
/// the lease's own GPU (a leased GPU is exclusive: the audit refuses one billed to two leases
/// at once).
fn usage(id: u64, tenant: &str, lease: &str, gpu_ms: u64, rate: u64, prev: Option<u64>) -> Vec<u8> {
    let start = hostd::clock::parse_time_ms("2026-03-01T00:00:00.000Z").unwrap()
        + i64::try_from(id * HOUR_MS).unwrap();
    let end = start + i64::try_from(gpu_ms).unwrap();
    Record::Usage(UsageRecord {
        v: RECORD_VERSION,
        id,
        node: "node-7".into(),
        tenant: tenant.into(),
        lease: lease.into(),
        gpu_uuid: match lease {
            "lease-a" => "GPU-5a3e2f10-8c41-4b7e-9d2a-1f0c3b4d5e6f".into(),
            _ => "GPU-5a3e2f10-8c41-4b7e-9d2a-1f0c3b4d5e70".into(),
        },
        gpu_model: "NVIDIA H100 80GB HBM3".into(),
        start: hostd::clock::rfc3339_ms(start),
        end: hostd::clock::rfc3339_ms(end),
        gpu_ms,
        gpu_seconds: gpu_ms as f64 / 1000.0,
        energy_joules: 2_520_000.0, // 700 W for an hour = 0.7 kWh
        peak_memory_bytes: 64 << 30,
        mean_utilization_pct: 91.25,
        rate_paise_per_hour: rate,
        amount_paise: amount_paise(gpu_ms, rate),
        policy_digest: "sha256:9f2b4c".into(),
        prev,
        attestation: None,
    })
    .to_leaf()
    .unwrap()
}

/// 40 hours of one H100 for `acme` at ₹250/h interleaved with 10 half-hours of another for
/// `beta` at ₹100/h: 50 records.
fn records() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let (mut prev_a, mut prev_b) = (None, None);
    let mut id = 0u64;
    for i in 0..40 {
        out.push(usage(id, "acme", "lease-a", HOUR_MS, 25_000, prev_a));
        prev_a = Some(id);
        id += 1;
        if i % 4 == 3 {
            out.push(usage(id, "beta", "lease-b", HOUR_MS / 2, 10_000, prev_b));
            prev_b = Some(id);
            id += 1;
        }
    }
    out
}

struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    /// A stopped node's state with the 50 records appended in a few batches.
    fn new() -> Self {
        let f = Fixture {
            dir: tempfile::tempdir().unwrap(),
        };
        let db = f.db();
        let mut ledger = Ledger::open(&db, signer()).unwrap();
        let recs = records();
        for chunk in recs.chunks(7) {
            ledger.append(chunk).unwrap();
        }
        fs::write(f.vkey_file(), format!("{}\n", ledger.vkey())).unwrap();
        f
    }
    fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }
    fn db(&self) -> sled::Db {
        // sled's background threads may hold the file lock for a moment after the last
        // handle of a previous open was dropped.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            match sled::Config::new().path(self.state().join("db")).open() {
                Ok(db) => return db,
                Err(e) if std::time::Instant::now() < deadline => {
                    let _ = e;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e) => panic!("cannot open the test state: {e}"),
            }
        }
    }
    fn tree(&self) -> (sled::Db, sled::Tree) {
        let db = self.db();
        let t = db.open_tree(TREE_NAME).unwrap();
        (db, t)
    }
    fn vkey_file(&self) -> PathBuf {
        self.dir.path().join("pinned.vkey")
    }
    fn out(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
    fn export(&self, name: &str, extra: &[&str]) -> (Run, PathBuf) {
        let out = self.out(name);
        let mut args = vec![
            "audit".to_owned(),
            "export".into(),
            "--state".into(),
            self.state().display().to_string(),
            "--out".into(),
            out.display().to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        (run(env!("CARGO_BIN_EXE_hostd"), &args), out)
    }
    fn verify(&self, export: &Path, extra: &[&str]) -> Run {
        let mut args = vec![
            "audit".to_owned(),
            "verify".into(),
            export.display().to_string(),
            "--vkey".into(),
            self.vkey_file().display().to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        run(common::sovctl_bin(), &args)
    }
}

#[derive(Debug)]
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn run(bin: impl AsRef<std::ffi::OsStr>, args: &[String]) -> Run {
    let out = Command::new(bin).args(args).output().unwrap();
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[track_caller]
fn assert_ok(r: &Run) {
    assert_eq!(r.code, Some(0), "expected success: {r:#?}");
}

#[track_caller]
fn assert_fails_with(r: &Run, needle: &str) {
    assert_eq!(r.code, Some(1), "expected exit 1: {r:#?}");
    assert!(
        r.stderr.contains(needle),
        "expected {needle:?} in stderr: {}",
        r.stderr
    );
}

fn leaf_key(i: u64) -> Vec<u8> {
    let mut k = vec![b'L'];
    k.extend_from_slice(&i.to_be_bytes());
    k
}

/// Leaf `i`'s stored entry, split as the attacker reads it (hostd/src/ledger.rs): the count
/// and subtree hashes, then the record bytes.
fn get_leaf(t: &sled::Tree, i: u64) -> (Vec<u8>, Vec<u8>) {
    let v = t.get(leaf_key(i)).unwrap().unwrap();
    let split = 1 + 32 * usize::from(v[0]);
    (v[..split].to_vec(), v[split..].to_vec())
}

fn put_leaf(t: &sled::Tree, i: u64, hashes: &[u8], record: &[u8]) {
    t.insert(leaf_key(i), [hashes, record].concat()).unwrap();
}

#[test]
fn untouched_export_verifies_with_totals() {
    let f = Fixture::new();
    let (r, out) = f.export("exp", &["--receipt", "3", "--receipt", "49"]);
    assert_ok(&r);
    assert!(r.stdout.contains("exported 50 records"), "{r:#?}");
    let mut names: Vec<_> = fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["checkpoint", "log.vkey", "receipts", "records.jsonl"]
    );
    assert!(out.join("receipts/3.tlog-proof").is_file());
    let lines = fs::read_to_string(out.join("records.jsonl")).unwrap();
    let expected: Vec<String> = records()
        .into_iter()
        .map(|r| String::from_utf8(r).unwrap())
        .collect();
    assert_eq!(lines.lines().collect::<Vec<_>>(), expected);

    let v = f.verify(&out, &["--quiet"]);
    assert_ok(&v);
    assert!(v.stdout.contains("OK: 50 records verified"), "{v:#?}");
    assert!(v.stdout.contains("receipts verified: 2"), "{v:#?}");
    assert!(v.stdout.contains("by kind: usage 50"), "{v:#?}");
    let acme = v.stdout.lines().find(|l| l.starts_with("acme")).unwrap();
    let cols: Vec<&str> = acme.split_whitespace().collect();
    assert_eq!(
        cols,
        ["acme", "40", "40.000", "28.000", "₹10,000.00"],
        "{acme}"
    );
    let beta = v.stdout.lines().find(|l| l.starts_with("beta")).unwrap();
    let cols: Vec<&str> = beta.split_whitespace().collect();
    assert_eq!(cols, ["beta", "10", "5.000", "7.000", "₹500.00"], "{beta}");
    let total = v.stdout.lines().find(|l| l.starts_with("TOTAL")).unwrap();
    assert!(total.ends_with("₹10,500.00"), "{total}");

    // Without a pinned key nothing is checked: a forged export signed by any key that claims
    // the node's name would otherwise pass. Exit 2, and the message says how to pin.
    let v = run(
        common::sovctl_bin(),
        &["audit".into(), "verify".into(), out.display().to_string()],
    );
    assert_eq!(v.code, Some(2), "{v:#?}");
    assert!(v.stderr.contains("--vkey"), "{v:#?}");
    assert!(
        v.stdout.is_empty(),
        "no totals without a pinned key: {v:#?}"
    );
    // Trusting the export's own key is an explicit, loudly named choice, and warned about.
    let v = run(
        common::sovctl_bin(),
        &[
            "audit".into(),
            "verify".into(),
            "--trust-export-key".into(),
            out.display().to_string(),
        ],
    );
    assert_ok(&v);
    assert!(v.stderr.contains("self-asserted"), "{v:#?}");
}

#[test]
fn a_leaf_edited_in_the_store_is_caught() {
    let f = Fixture::new();
    {
        let (_db, t) = f.tree();
        let (hashes, old) = get_leaf(&t, 17);
        let edited = String::from_utf8(old.clone())
            .unwrap()
            .replace("acme", "acmf");
        assert_ne!(edited.as_bytes(), &old[..]);
        put_leaf(&t, 17, &hashes, edited.as_bytes());
        t.flush().unwrap();
    }
    let (r, out) = f.export("exp", &[]);
    assert_fails_with(&r, "record 17: the stored bytes do not match");
    let v = f.verify(&out, &[]);
    assert_fails_with(
        &v,
        "does not match the signed log: root mismatch at size 50",
    );
}

#[test]
fn a_deleted_last_leaf_is_caught() {
    let f = Fixture::new();
    {
        let (_db, t) = f.tree();
        t.remove(leaf_key(49)).unwrap();
        t.insert(b"S", &49u64.to_be_bytes()[..]).unwrap();
        t.flush().unwrap();
    }
    let (r, out) = f.export("exp", &[]);
    assert_fails_with(&r, "record 49 is missing from the store");
    let v = f.verify(&out, &[]);
    assert_fails_with(
        &v,
        "export truncated: the checkpoint covers 50 records but records.jsonl has 49",
    );
}

#[test]
fn a_changed_size_alone_does_not_fool_the_daemon() {
    let f = Fixture::new();
    {
        let (_db, t) = f.tree();
        t.insert(b"S", &45u64.to_be_bytes()[..]).unwrap();
        t.flush().unwrap();
    }
    let db = f.db();
    let err = Ledger::open(&db, signer()).unwrap_err().to_string();
    assert!(
        err.contains("covers 50 records but the ledger holds only 45"),
        "{err}"
    );
}

#[test]
fn swapped_leaves_are_caught() {
    let f = Fixture::new();
    {
        let (_db, t) = f.tree();
        let (ha, a) = get_leaf(&t, 3);
        let (hb, b) = get_leaf(&t, 5);
        put_leaf(&t, 3, &ha, &b);
        put_leaf(&t, 5, &hb, &a);
        t.flush().unwrap();
    }
    let (r, out) = f.export("exp", &[]);
    assert_fails_with(&r, "record 3: the stored bytes do not match");
    let v = f.verify(&out, &[]);
    assert_fails_with(&v, "record 3: claims id 5");
    assert_fails_with(&v, "root mismatch at size 50");
}

fn good_export(f: &Fixture) -> PathBuf {
    let (r, out) = f.export("exp", &[]);
    assert_ok(&r);
    out
}

fn edit_line(out: &Path, index: usize, edit: impl Fn(&str) -> String) {
    let path = out.join("records.jsonl");
    let text = fs::read_to_string(&path).unwrap();
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    let edited = edit(&lines[index]);
    assert_ne!(edited, lines[index], "the edit must change the line");
    lines[index] = edited;
    fs::write(&path, lines.join("\n") + "\n").unwrap();
}

#[test]
fn an_edited_record_line_is_caught() {
    let f = Fixture::new();
    let out = good_export(&f);
    // A consistent-looking edit (energy is not derived from other fields).
    edit_line(&out, 22, |l| l.replace("2520000.0", "252000.0"));
    let v = f.verify(&out, &[]);
    assert_fails_with(
        &v,
        "does not match the signed log: root mismatch at size 50",
    );

    // Cutting a bill: the amount no longer follows from time and rate.
    let out2 = f.out("exp2");
    let (r, _) = f.export("exp2", &[]);
    assert_ok(&r);
    edit_line(&out2, 7, |l| {
        l.replace("\"amount_paise\":25000", "\"amount_paise\":2500")
    });
    let v = f.verify(&out2, &[]);
    assert_fails_with(&v, "record 7: amount_paise 2500 does not equal");
}

#[test]
fn a_truncated_export_is_caught() {
    let f = Fixture::new();
    let out = good_export(&f);
    let path = out.join("records.jsonl");
    let text = fs::read(&path).unwrap();
    fs::write(&path, &text[..text.len() - 40]).unwrap();
    let v = f.verify(&out, &[]);
    assert_fails_with(
        &v,
        "records.jsonl does not end with a newline: record 49 is incomplete",
    );

    // Whole records dropped from the end.
    let cut: String = String::from_utf8(text)
        .unwrap()
        .lines()
        .take(45)
        .map(|l| format!("{l}\n"))
        .collect();
    fs::write(&path, cut).unwrap();
    let v = f.verify(&out, &[]);
    assert_fails_with(
        &v,
        "export truncated: the checkpoint covers 50 records but records.jsonl has 45",
    );
}

#[test]
fn a_checkpoint_resigned_by_another_key_is_refused() {
    let f = Fixture::new();
    let out = good_export(&f);
    // The forger signs a checkpoint for a different history under the same log name and
    // ships their own key in the export.
    let forger = NoteSigner::from_seed(ORIGIN, &[6; 32]).unwrap();
    let forged = sign_checkpoint(
        &Checkpoint {
            origin: ORIGIN.into(),
            size: 50,
            root: [0xab; 32],
            extensions: vec![],
        },
        &forger,
    )
    .unwrap();
    fs::write(out.join("checkpoint"), forged).unwrap();
    fs::write(
        out.join("log.vkey"),
        format!("{}\n", forger.verifier().to_vkey()),
    )
    .unwrap();
    let v = f.verify(&out, &[]);
    assert_fails_with(
        &v,
        "checkpoint signature does not verify with key node-7/usage+",
    );
    assert!(v.stderr.contains("differs from the pinned key"), "{v:#?}");
}

#[test]
fn previous_checkpoints_catch_forks_rewrites_and_truncation() {
    let f = Fixture::new();
    // The auditor kept the checkpoint at size 21 from an earlier visit.
    let recs = records();
    let mut mem = attest::log::Log::from_leaves(&recs[..21]).unwrap();
    let cp21 = sign_checkpoint(
        &Checkpoint {
            origin: ORIGIN.into(),
            size: 21,
            root: mem.root(),
            extensions: vec![],
        },
        &signer(),
    )
    .unwrap();
    let prev = f.out("prev21.checkpoint");
    fs::write(&prev, &cp21).unwrap();
    let proof_file = f.out("21-50.proof");
    {
        let db = f.db();
        let ledger = Ledger::open(&db, signer()).unwrap();
        fs::write(&proof_file, ledger.consistency_proof(21).unwrap()).unwrap();
    }
    let out = good_export(&f);
    let prev_s = prev.display().to_string();
    let proof_s = proof_file.display().to_string();

    let v = f.verify(&out, &["--previous", &prev_s]);
    assert_ok(&v);
    assert!(
        v.stdout
            .contains("previous checkpoint of size 21 (root recomputed"),
        "{v:#?}"
    );
    let v = f.verify(&out, &["--previous", &prev_s, "--consistency", &proof_s]);
    assert_ok(&v);
    assert!(v.stdout.contains("consistency proof verified"), "{v:#?}");

    // A forked log: same key, same size 21, different history (record 10 billed less).
    let mut forked = recs[..21].to_vec();
    forked[10] = usage(10, "acme", "lease-a", HOUR_MS, 20_000, Some(8));
    mem = attest::log::Log::from_leaves(&forked).unwrap();
    let fork_cp = sign_checkpoint(
        &Checkpoint {
            origin: ORIGIN.into(),
            size: 21,
            root: mem.root(),
            extensions: vec![],
        },
        &signer(),
    )
    .unwrap();
    let fork = f.out("fork.checkpoint");
    fs::write(&fork, fork_cp).unwrap();
    let fork_s = fork.display().to_string();
    let v = f.verify(&out, &["--previous", &fork_s]);
    assert_fails_with(&v, "log rewritten: the first 21 records give root");
    let v = f.verify(&out, &["--previous", &fork_s, "--consistency", &proof_s]);
    assert_fails_with(&v, "log rewritten: the log at size 50 does not extend");

    // A checkpoint of another log (another key) is not a valid previous checkpoint.
    let other = NoteSigner::from_seed("node-8/usage", &[1; 32]).unwrap();
    let other_cp = sign_checkpoint(
        &Checkpoint {
            origin: "node-8/usage".into(),
            size: 21,
            root: [1; 32],
            extensions: vec![],
        },
        &other,
    )
    .unwrap();
    let other_path = f.out("other.checkpoint");
    fs::write(&other_path, other_cp).unwrap();
    let v = f.verify(&out, &["--previous", &other_path.display().to_string()]);
    assert_fails_with(&v, "does not verify with key node-7/usage+");

    // A previous checkpoint larger than the export: the log was truncated.
    let big = sign_checkpoint(
        &Checkpoint {
            origin: ORIGIN.into(),
            size: 60,
            root: [2; 32],
            extensions: vec![],
        },
        &signer(),
    )
    .unwrap();
    let big_path = f.out("big.checkpoint");
    fs::write(&big_path, big).unwrap();
    let v = f.verify(&out, &["--previous", &big_path.display().to_string()]);
    assert_fails_with(&v, "log truncated: previous checkpoint size 60 > 50");

    // A proof between other sizes is refused by name.
    let proof20 = f.out("20-50.proof");
    {
        let db = f.db();
        let ledger = Ledger::open(&db, signer()).unwrap();
        fs::write(&proof20, ledger.consistency_proof(20).unwrap()).unwrap();
    }
    let v = f.verify(
        &out,
        &[
            "--previous",
            &prev_s,
            "--consistency",
            &proof20.display().to_string(),
        ],
    );
    assert_fails_with(
        &v,
        "is from size 20 to 50, but the checkpoints are for sizes 21 and 50",
    );
}

#[test]
fn receipts_are_checked_against_the_records() {
    let f = Fixture::new();
    let (r, out) = f.export("exp", &["--receipt", "12"]);
    assert_ok(&r);
    // Receipt 12 moved to another name: it no longer matches the record it names.
    fs::rename(
        out.join("receipts/12.tlog-proof"),
        out.join("receipts/13.tlog-proof"),
    )
    .unwrap();
    let v = f.verify(&out, &[]);
    assert_fails_with(&v, "is for record 12, not 13");

    // A receipt whose record line was replaced (and the checkpoint left alone).
    fs::rename(
        out.join("receipts/13.tlog-proof"),
        out.join("receipts/12.tlog-proof"),
    )
    .unwrap();
    edit_line(&out, 12, |l| l.replace("91.25", "91.5"));
    let v = f.verify(&out, &[]);
    assert_fails_with(&v, "record 12: line does not match its receipt");
}

#[test]
fn export_refuses_busy_state_and_non_empty_output() {
    let f = Fixture::new();
    {
        let _db = f.db(); // a "running hostd" holds the database lock
        let (r, _) = f.export("exp", &[]);
        assert_fails_with(
            &r,
            "state directory is in use by a running hostd; use `sovctl audit export`",
        );
    }
    let out = f.out("exp");
    fs::create_dir_all(&out).unwrap();
    fs::write(out.join("keep.txt"), "mine").unwrap();
    let (r, _) = f.export("exp", &[]);
    assert_fails_with(&r, "is not empty");
    assert_eq!(fs::read_to_string(out.join("keep.txt")).unwrap(), "mine");

    let r = run(
        env!("CARGO_BIN_EXE_hostd"),
        &[
            "audit".into(),
            "export".into(),
            "--state".into(),
            f.out("nothing-here").display().to_string(),
            "--out".into(),
            f.out("exp3").display().to_string(),
        ],
    );
    assert_fails_with(&r, "holds no hostd state");
}

#[test]
fn the_exported_checkpoint_is_the_nodes() {
    let f = Fixture::new();
    let out = good_export(&f);
    let note = fs::read_to_string(out.join("checkpoint")).unwrap();
    let cp = open_checkpoint(&note, &signer().verifier()).unwrap();
    assert_eq!(cp.size, 50);
    assert_eq!(
        cp.root,
        attest::log::Log::from_leaves(&records()).unwrap().root()
    );
    assert_eq!(
        fs::read_to_string(out.join("log.vkey")).unwrap(),
        format!("{}\n", signer().verifier().to_vkey())
    );
}
