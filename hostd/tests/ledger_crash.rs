//! Crash safety of the ledger: a writer process is killed with SIGKILL at random moments,
//! again and again, and after each kill the ledger must open, verify, extend the previous
//! checkpoint and hold every record whose append was acknowledged.
//!
//! The writer is this test binary itself, re-run with `--exact crash_writer --ignored`.

use attest::checkpoint::open_checkpoint;
use attest::log::{verify_consistency, RootBuilder};
use attest::note::NoteSigner;
use auditor::layout::ConsistencyProof;
use hostd::ledger::Ledger;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const DIR_ENV: &str = "HOSTD_LEDGER_CRASH_DIR";
const ORIGIN: &str = "crash-node/usage";
/// Markers of the writer's lines on stdout, which libtest shares.
const READY: &str = "@@ready";
const ACK: &str = "@@ack";

fn signer() -> NoteSigner {
    NoteSigner::from_seed(ORIGIN, &[42; 32]).expect("valid key name")
}

/// Leaf `i`'s bytes are a function of `i`, so any leaf can be checked for being unchanged.
fn leaf(i: u64) -> Vec<u8> {
    format!(
        r#"{{"kind":"usage","id":{i},"tenant":"t{}","pad":"{}"}}"#,
        i % 7,
        "x".repeat((i % 200) as usize)
    )
    .into_bytes()
}

fn open_db(dir: &Path) -> sled::Db {
    // sled's background threads may hold the file lock for a moment after the previous
    // owner dropped its last handle.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match sled::Config::new().path(dir.join("db")).open() {
            Ok(db) => return db,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("cannot open the ledger state: {e}"),
        }
    }
}

/// Small deterministic PRNG (xorshift64*) seeded from the clock; the seed is printed so a
/// failing run can be replayed by setting `HOSTD_LEDGER_CRASH_SEED`.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The writer: appends batches forever, printing each range only after `append` returned.
#[test]
#[ignore = "child process of crash_kill_and_recover"]
fn crash_writer() {
    let Some(dir) = std::env::var_os(DIR_ENV) else {
        return;
    };
    let db = open_db(Path::new(&dir));
    let mut ledger = Ledger::open(&db, signer()).expect("writer: open ledger");
    let mut rng = Rng(std::process::id() as u64 | 1);
    println!("{READY} {}", ledger.size());
    loop {
        let start = ledger.next_index();
        let n = 1 + rng.below(64);
        let leaves: Vec<Vec<u8>> = (start..start + n).map(leaf).collect();
        let out = ledger.append(&leaves).expect("writer: append");
        assert_eq!(out.range, start..start + n);
        println!("{ACK} {} {}", out.range.start, out.range.end);
    }
}

#[test]
fn crash_kill_and_recover() {
    let seed = std::env::var("HOSTD_LEDGER_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
                | 1
        });
    eprintln!("crash test seed {seed} (replay with HOSTD_LEDGER_CRASH_SEED={seed})");
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let verifier = signer().verifier();

    let began = Instant::now();
    let mut acked_end = 0u64;
    let mut previous: Option<attest::checkpoint::Checkpoint> = None;
    let mut rounds = 0;
    let mut appends = 0;
    while rounds < 25 && (rounds < 15 || began.elapsed() < Duration::from_secs(25)) {
        rounds += 1;
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "crash_writer",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(DIR_ENV, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        // Wait until the writer has opened the ledger (its recovery is under test too), then
        // let it append for a random while, and kill it.
        // (libtest prints its own lines around ours.)
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(line) = rx.recv_timeout(left) else {
                let _ = child.kill();
                panic!("round {rounds}: the writer did not open the ledger within 60 s");
            };
            if line.contains(READY) {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(20 + rng.below(400)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        reader.join().unwrap();
        for line in rx.try_iter() {
            // libtest may print "test crash_writer ... " in front of the first line.
            let Some(at) = line.find(ACK) else { continue };
            let mut parts = line[at..].split_whitespace();
            if parts.next() == Some(ACK) {
                let _start: u64 = parts.next().unwrap().parse().unwrap();
                let end: u64 = parts.next().unwrap().parse().unwrap();
                assert!(end >= acked_end, "acks go forward");
                acked_end = end;
                appends += 1;
            }
        }

        // Recover and verify.
        let db = open_db(dir.path());
        let ledger = Ledger::open(&db, signer())
            .unwrap_or_else(|e| panic!("round {rounds}: ledger does not open after kill: {e}"));
        let size = ledger.size();
        assert!(
            size >= acked_end,
            "round {rounds}: acknowledged records lost: acked up to {acked_end}, ledger has {size}"
        );
        let cp = open_checkpoint(ledger.checkpoint_note(), &verifier).unwrap();
        assert_eq!(cp.size, size, "round {rounds}: checkpoint size");
        let mut builder = RootBuilder::new();
        let mut n = 0u64;
        for rec in ledger.records(0..size) {
            let rec = rec.unwrap_or_else(|e| panic!("round {rounds}: {e}"));
            assert_eq!(rec, leaf(n), "round {rounds}: leaf {n} changed");
            builder.push(&rec).unwrap();
            n += 1;
        }
        assert_eq!(n, size);
        assert_eq!(
            builder.root(),
            cp.root,
            "round {rounds}: root recomputed from the leaves differs from the checkpoint"
        );
        if let Some(old) = &previous {
            assert!(old.size <= size, "round {rounds}: log shrank");
            let proof =
                ConsistencyProof::parse(&ledger.consistency_proof(old.size).unwrap()).unwrap();
            if old.size > 0 {
                verify_consistency(old.size, size, &proof.hashes, &old.root, &cp.root)
                    .unwrap_or_else(|e| panic!("round {rounds}: not consistent: {e}"));
            }
        }
        previous = Some(cp);
        drop(ledger);
        drop(db);
    }
    eprintln!(
        "{rounds} kills, {} records, {appends} acknowledged appends, {:?}",
        acked_end,
        began.elapsed()
    );
    assert!(acked_end > 0, "the writer never acknowledged an append");
}
