//! Audit exports of the usage ledger, and their offline verification.
//!
//! An export is a directory an auditor can check with nothing but the node's verifier key
//! (the format is specified, with worked examples, in `docs/audit.md`):
//!
//! ```text
//! DIR/checkpoint                 signed C2SP tlog-checkpoint note
//! DIR/log.vkey                   the log's verifier key, one line
//! DIR/records.jsonl              record i is line i (its exact leaf bytes), '\n' after each
//! DIR/receipts/<id>.tlog-proof   optional C2SP tlog-proof receipts
//! ```
//!
//! Verification recomputes the RFC 6962 root from `records.jsonl` in one streaming pass and
//! compares it and the record count with the signed checkpoint; optionally checks that the
//! log extends a checkpoint seen earlier; and totals usage per tenant. The pass is spread
//! over all cores: workers hash leaves and check records chunk by chunk while the calling
//! thread reads the file and folds leaf hashes into the tree in order.

use crate::ledger::{Ledger, LedgerError, Snapshot};
use crate::record::{amount_paise, Record, RECORD_VERSION};
use attest::checkpoint::{open_checkpoint, Checkpoint};
use attest::log::{leaf_hash, verify_consistency, Hash, RootBuilder};
use attest::note::NoteVerifier;
use attest::receipt::Receipt;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde::Deserialize;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;

/// File names inside an export directory.
pub const CHECKPOINT_FILE: &str = "checkpoint";
pub const VKEY_FILE: &str = "log.vkey";
pub const RECORDS_FILE: &str = "records.jsonl";
pub const RECEIPTS_DIR: &str = "receipts";
pub const RECEIPT_EXT: &str = "tlog-proof";

/// First line of a consistency proof file.
pub const CONSISTENCY_HEADER: &str = "sovereign-host/consistency-proof@v1";

/// A record line longer than this is not a record; refusing it bounds the verifier's memory.
pub const MAX_RECORD_LEN: usize = CHUNK;

/// How many record-level problems a report lists before only counting them.
const MAX_LISTED_PROBLEMS: usize = 20;

// ---------------------------------------------------------------------------------------
// Consistency proof files

/// An RFC 9162 consistency proof between two sizes of the log, as a text file:
///
/// ```text
/// sovereign-host/consistency-proof@v1
/// old <size1>
/// new <size2>
/// <base64 hash>        (zero or more, in RFC 9162 order)
/// ```
///
/// every line ending in `\n`. The sizes are in the file so that a proof meant for other
/// checkpoints is refused with a precise message rather than a failed hash comparison.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsistencyProof {
    pub old_size: u64,
    pub new_size: u64,
    pub hashes: Vec<Hash>,
}

impl ConsistencyProof {
    pub fn format(&self) -> String {
        let mut s = format!(
            "{CONSISTENCY_HEADER}\nold {}\nnew {}\n",
            self.old_size, self.new_size
        );
        for h in &self.hashes {
            s.push_str(&B64.encode(h));
            s.push('\n');
        }
        s
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let body = text
            .strip_suffix('\n')
            .ok_or("consistency proof must end with a newline")?;
        let mut lines = body.split('\n');
        if lines.next() != Some(CONSISTENCY_HEADER) {
            return Err(format!(
                "consistency proof must start with the line {CONSISTENCY_HEADER:?}"
            ));
        }
        let mut size = |label: &str| -> Result<u64, String> {
            lines
                .next()
                .and_then(|l| l.strip_prefix(label))
                .and_then(|l| l.strip_prefix(' '))
                .and_then(parse_decimal)
                .ok_or(format!(
                    "consistency proof has no valid `{label} <decimal size>` line"
                ))
        };
        let old_size = size("old")?;
        let new_size = size("new")?;
        let mut hashes = Vec::new();
        for (i, line) in lines.enumerate() {
            if hashes.len() == 64 {
                return Err("consistency proof has more than 64 hashes".into());
            }
            let h = B64
                .decode(line)
                .ok()
                .and_then(|h| Hash::try_from(h.as_slice()).ok())
                .ok_or(format!(
                    "consistency proof hash #{} is not the standard base64 of 32 bytes",
                    i + 1
                ))?;
            hashes.push(h);
        }
        Ok(Self {
            old_size,
            new_size,
            hashes,
        })
    }
}

fn parse_decimal(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || (s.len() > 1 && s.starts_with('0'))
    {
        return None;
    }
    s.parse().ok()
}

// ---------------------------------------------------------------------------------------
// Export

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("output directory {0} is not empty; refusing to overwrite (choose a new directory)")]
    OutNotEmpty(PathBuf),
    #[error("{0} exists and is not a directory")]
    OutNotDir(PathBuf),
    #[error("state directory is in use by a running hostd; use `sovctl audit export`")]
    StateInUse,
    #[error("{0} holds no hostd state (no {0}/db database)")]
    NoState(PathBuf),
    #[error("cannot open the state database {path}: {source}")]
    OpenState { path: PathBuf, source: sled::Error },
    #[error("{0}")]
    Ledger(#[from] LedgerError),
    #[error("record {index} contains a newline and cannot be written as one JSON line")]
    NewlineInRecord { index: u64 },
    #[error(
        "the export is incomplete: the checkpoint covers {expected} records but {written} were supplied"
    )]
    CountMismatch { expected: u64, written: u64 },
    #[error("the checkpoint to export is malformed: {0}")]
    BadCheckpoint(String),
    #[error("the verifier key to export is malformed: {0}")]
    BadVkey(String),
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> AuditError + '_ {
    move |source| AuditError::Io {
        path: path.to_owned(),
        source,
    }
}

/// What an export wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportSummary {
    /// Records written to `records.jsonl`.
    pub records: u64,
    /// Size the checkpoint covers (equals `records` unless the state was damaged).
    pub checkpoint_size: u64,
    pub receipts: usize,
    /// Damage found in the exported state; empty for a healthy node. The files were written
    /// anyway, as they are, so an auditor can see it.
    pub problems: Vec<String>,
}

/// Exports `ledger`'s latest checkpoint and exactly the records it covers to `out` (which
/// must be missing or empty), with the receipts of the record ids in `receipts`.
pub fn export(ledger: &Ledger, out: &Path, receipts: &[u64]) -> Result<ExportSummary, AuditError> {
    let snap = ledger.snapshot();
    let mut rs = Vec::with_capacity(receipts.len());
    for &id in receipts {
        rs.push((id, snap.receipt(id)?));
    }
    export_snapshot(&snap, out, &rs)
}

/// Exports a [`Snapshot`] (the records are read after the ledger's lock is released, which
/// is safe because records below a checkpoint never change).
pub fn export_snapshot(
    snap: &Snapshot,
    out: &Path,
    receipts: &[(u64, String)],
) -> Result<ExportSummary, AuditError> {
    let records = snap.records().map(|r| r.map_err(AuditError::from));
    write_export_fallible(out, snap.checkpoint_note(), snap.vkey(), records, receipts)
}

/// Writes an export from parts fetched elsewhere (e.g. by `sovctl audit export` over the
/// API). `records` must be exactly the records `checkpoint_note` covers, in order.
pub fn write_export(
    out: &Path,
    checkpoint_note: &str,
    vkey: &str,
    records: impl Iterator<Item = Vec<u8>>,
    receipts: &[(u64, String)],
) -> Result<ExportSummary, AuditError> {
    write_export_fallible(out, checkpoint_note, vkey, records.map(Ok), receipts)
}

fn checkpoint_size_of(note: &str) -> Result<u64, AuditError> {
    let parsed = attest::note::parse(note).map_err(|e| AuditError::BadCheckpoint(e.to_string()))?;
    Checkpoint::parse(&parsed.text)
        .map(|c| c.size)
        .map_err(|e| AuditError::BadCheckpoint(e.to_string()))
}

fn write_export_fallible(
    out: &Path,
    checkpoint_note: &str,
    vkey: &str,
    records: impl Iterator<Item = Result<Vec<u8>, AuditError>>,
    receipts: &[(u64, String)],
) -> Result<ExportSummary, AuditError> {
    let expected = checkpoint_size_of(checkpoint_note)?;
    let vkey = vkey.trim_end_matches('\n');
    if vkey.contains('\n') {
        return Err(AuditError::BadVkey("it spans several lines".into()));
    }
    let mut w = ExportWriter::create(out)?;
    let result = (|| {
        let mut records_out = w.file(RECORDS_FILE)?;
        let mut written = 0u64;
        for rec in records {
            let rec = rec?;
            write_record(&mut records_out, written, &rec)?;
            written += 1;
        }
        if written != expected {
            return Err(AuditError::CountMismatch { expected, written });
        }
        w.finish(RECORDS_FILE, records_out)?;
        w.write_all_files(checkpoint_note, vkey, receipts)?;
        Ok(written)
    })();
    match result {
        Ok(written) => Ok(ExportSummary {
            records: written,
            checkpoint_size: expected,
            receipts: receipts.len(),
            problems: Vec::new(),
        }),
        Err(e) => {
            w.remove_created();
            Err(e)
        }
    }
}

fn write_record(out: &mut impl Write, index: u64, rec: &[u8]) -> Result<(), AuditError> {
    if rec.contains(&b'\n') {
        return Err(AuditError::NewlineInRecord { index });
    }
    out.write_all(rec)
        .and_then(|()| out.write_all(b"\n"))
        .map_err(|source| AuditError::Io {
            path: PathBuf::from(RECORDS_FILE),
            source,
        })
}

/// Creates files in an export directory and, on failure, removes what it created so the
/// directory is empty again and the export can be retried.
struct ExportWriter {
    out: PathBuf,
    created: Vec<PathBuf>,
    created_dir: Option<PathBuf>,
}

impl ExportWriter {
    fn create(out: &Path) -> Result<Self, AuditError> {
        let mut created_dir = None;
        match fs::metadata(out) {
            Ok(m) if !m.is_dir() => return Err(AuditError::OutNotDir(out.to_owned())),
            Ok(_) => {
                if fs::read_dir(out).map_err(io_at(out))?.next().is_some() {
                    return Err(AuditError::OutNotEmpty(out.to_owned()));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::create_dir_all(out).map_err(io_at(out))?;
                created_dir = Some(out.to_owned());
            }
            Err(e) => return Err(io_at(out)(e)),
        }
        Ok(Self {
            out: out.to_owned(),
            created: Vec::new(),
            created_dir,
        })
    }

    fn file(&mut self, name: &str) -> Result<BufWriter<File>, AuditError> {
        let path = self.out.join(name);
        let f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(io_at(&path))?;
        self.created.push(path);
        Ok(BufWriter::with_capacity(1 << 20, f))
    }

    fn finish(&self, name: &str, w: BufWriter<File>) -> Result<(), AuditError> {
        let path = self.out.join(name);
        let f = w.into_inner().map_err(|e| io_at(&path)(e.into_error()))?;
        f.sync_all().map_err(io_at(&path))
    }

    fn write_file(&mut self, name: &str, contents: &[u8]) -> Result<(), AuditError> {
        let mut w = self.file(name)?;
        let path = self.out.join(name);
        w.write_all(contents).map_err(io_at(&path))?;
        self.finish(name, w)
    }

    fn write_all_files(
        &mut self,
        checkpoint_note: &str,
        vkey: &str,
        receipts: &[(u64, String)],
    ) -> Result<(), AuditError> {
        self.write_file(CHECKPOINT_FILE, checkpoint_note.as_bytes())?;
        self.write_file(VKEY_FILE, format!("{vkey}\n").as_bytes())?;
        if !receipts.is_empty() {
            let dir = self.out.join(RECEIPTS_DIR);
            fs::create_dir(&dir).map_err(io_at(&dir))?;
            self.created.push(dir);
            let mut done = std::collections::BTreeSet::new();
            for (id, text) in receipts {
                if done.insert(*id) {
                    self.write_file(
                        &format!("{RECEIPTS_DIR}/{id}.{RECEIPT_EXT}"),
                        text.as_bytes(),
                    )?;
                }
            }
        }
        Ok(())
    }

    fn remove_created(&mut self) {
        for p in self.created.iter().rev() {
            let _ = fs::remove_file(p).or_else(|_| fs::remove_dir(p));
        }
        if let Some(d) = &self.created_dir {
            let _ = fs::remove_dir(d);
        }
    }
}

/// `hostd audit export`: exports the ledger of a *stopped* node from its state directory.
///
/// The state is exported as it is stored, even when damaged (a missing record, a record
/// whose bytes no longer match the hash the log was built from, a checkpoint that does not
/// match the tree): the summary's `problems` name the damage and the auditor's verification
/// of the export will fail. Only an unreadable state is an error.
pub fn export_state(
    state: &Path,
    out: &Path,
    receipts: &[u64],
) -> Result<ExportSummary, AuditError> {
    let db_path = state.join("db");
    if !db_path.is_dir() {
        return Err(AuditError::NoState(state.to_owned()));
    }
    // A hostd that just stopped may hold the lock for a moment while sled's background
    // threads finish; a running one holds it for good.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let db = loop {
        match sled::Config::new().path(&db_path).open() {
            Ok(db) => break db,
            Err(sled::Error::Io(e)) if e.to_string().contains("could not acquire lock") => {
                if std::time::Instant::now() >= deadline {
                    return Err(AuditError::StateInUse);
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(source) => {
                return Err(AuditError::OpenState {
                    path: db_path,
                    source,
                })
            }
        }
    };
    let snap = Snapshot::from_db(&db)?;
    let mut problems = snap.check();
    let mut rs = Vec::with_capacity(receipts.len());
    for &id in receipts {
        match snap.receipt(id) {
            Ok(r) => rs.push((id, r)),
            Err(e) => problems.push(format!("no receipt for record {id}: {e}")),
        }
    }
    let size = snap.size();
    let mut w = ExportWriter::create(out)?;
    let mut records_out = w.file(RECORDS_FILE)?;
    let mut written = 0u64;
    let mut damaged = Vec::new();
    let mut damaged_count = 0u64;
    let mut note = |msg: String| {
        damaged_count += 1;
        if damaged.len() < MAX_LISTED_PROBLEMS {
            damaged.push(msg);
        }
    };
    let mut next = 0u64;
    for item in snap.stored_records() {
        let (index, bytes) = item?;
        if index != next {
            note(if index == next + 1 {
                format!("record {next} is missing from the store")
            } else {
                format!("records {next}..{} are missing from the store", index - 1)
            });
        }
        match snap.stored_leaf_hash(index)? {
            Some(h) if h == leaf_hash(&bytes) => {}
            Some(_) => note(format!(
                "record {index}: the stored bytes do not match the hash the log was built from \
                 (the record was altered in the store)"
            )),
            None => note(format!("record {index}: its stored leaf hash is missing")),
        }
        write_record(&mut records_out, index, &bytes)?;
        written += 1;
        next = index + 1;
    }
    if next < size {
        note(if next + 1 == size {
            format!("record {next} is missing from the store")
        } else {
            format!("records {next}..{} are missing from the store", size - 1)
        });
    }
    w.finish(RECORDS_FILE, records_out)?;
    w.write_all_files(snap.checkpoint_note(), snap.vkey(), &rs)?;
    problems.extend(damaged);
    if damaged_count > MAX_LISTED_PROBLEMS as u64 {
        problems.push(format!(
            "… and {} more damaged records",
            damaged_count - MAX_LISTED_PROBLEMS as u64
        ));
    }
    Ok(ExportSummary {
        records: written,
        checkpoint_size: size,
        receipts: rs.len(),
        problems,
    })
}

// ---------------------------------------------------------------------------------------
// Record checks and totals (pure)

/// Usage per tenant, summed over verified records.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TenantTotals {
    pub records: u64,
    pub gpu_ms: u128,
    pub energy_joules: f64,
    pub amount_paise: u128,
}

/// Totals over an export's records.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Totals {
    pub records: u64,
    pub by_kind: BTreeMap<String, u64>,
    pub tenants: BTreeMap<String, TenantTotals>,
}

impl Totals {
    fn merge(&mut self, other: Totals) {
        self.records += other.records;
        for (k, n) in other.by_kind {
            *self.by_kind.entry(k).or_default() += n;
        }
        for (t, o) in other.tenants {
            let e = self.tenants.entry(t).or_default();
            e.records += o.records;
            e.gpu_ms += o.gpu_ms;
            e.energy_joules += o.energy_joules;
            e.amount_paise += o.amount_paise;
        }
    }

    fn add_other(&mut self, kind: &str) {
        self.records += 1;
        *self.by_kind.entry(kind.to_owned()).or_default() += 1;
    }

    fn add_usage(&mut self, tenant: &str, gpu_ms: u64, energy_joules: f64, amount: u64) {
        self.records += 1;
        // Looked up by &str first so the common case allocates nothing.
        match self.by_kind.get_mut("usage") {
            Some(n) => *n += 1,
            None => {
                self.by_kind.insert("usage".into(), 1);
            }
        }
        let t = match self.tenants.get_mut(tenant) {
            Some(t) => t,
            None => self.tenants.entry(tenant.to_owned()).or_default(),
        };
        t.records += 1;
        t.gpu_ms += u128::from(gpu_ms);
        t.energy_joules += energy_joules;
        t.amount_paise += u128::from(amount);
    }
}

/// GPU-hours with three decimals, from exact milliseconds (rounded half up).
pub fn format_gpu_hours(gpu_ms: u128) -> String {
    let thousandths = (gpu_ms * 1000 + 1_800_000) / 3_600_000;
    format!("{}.{:03}", thousandths / 1000, thousandths % 1000)
}

/// Kilowatt-hours with three decimals.
pub fn format_kwh(joules: f64) -> String {
    format!("{:.3}", joules / 3.6e6)
}

/// `₹10,000.00`, with Indian digit grouping (`₹1,00,000.00`), for any total.
pub fn format_inr(paise: u128) -> String {
    let rupees = (paise / 100).to_string();
    let digits = rupees.as_bytes();
    let mut grouped = String::with_capacity(digits.len() + digits.len() / 2 + 1);
    let n = digits.len();
    for (i, &d) in digits.iter().enumerate() {
        let left = n - i;
        grouped.push(char::from(d));
        // A comma before the last three digits, then every two (lakh, crore, ...).
        if left > 3 && (left - 3) % 2 == 1 {
            grouped.push(',');
        }
    }
    format!("₹{grouped}.{:02}", paise % 100)
}

/// The fields of a usage record, borrowed from the line: the same names, types and
/// `deny_unknown_fields` as [`crate::record::UsageRecord`] plus the `kind` tag, so it accepts
/// exactly the lines that parse as a usage [`Record`] (unit tests hold the two together),
/// without the allocations of the owned, internally tagged enum. Anything it rejects is
/// re-parsed as a [`Record`], so the owned type stays the authority.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // fields exist to be type-checked
struct UsageView<'a> {
    #[serde(borrow)]
    kind: Cow<'a, str>,
    v: u32,
    id: u64,
    #[serde(borrow)]
    node: Cow<'a, str>,
    #[serde(borrow)]
    tenant: Cow<'a, str>,
    #[serde(borrow)]
    lease: Cow<'a, str>,
    #[serde(borrow)]
    gpu_uuid: Cow<'a, str>,
    #[serde(borrow)]
    gpu_model: Cow<'a, str>,
    #[serde(borrow)]
    start: Cow<'a, str>,
    #[serde(borrow)]
    end: Cow<'a, str>,
    gpu_ms: u64,
    gpu_seconds: f64,
    energy_joules: f64,
    peak_memory_bytes: u64,
    mean_utilization_pct: f64,
    rate_paise_per_hour: u64,
    amount_paise: u64,
    #[serde(borrow)]
    policy_digest: Cow<'a, str>,
    prev: Option<u64>,
    #[serde(default)]
    attestation: Option<u64>,
}

/// The parts of a usage record that verification checks and totals.
struct UsageFacts<'a> {
    v: u32,
    id: u64,
    tenant: &'a str,
    gpu_ms: u64,
    gpu_seconds: f64,
    energy_joules: f64,
    rate: u64,
    amount: u64,
    prev: Option<u64>,
    attestation: Option<u64>,
}

/// Checks that `line` (without its newline) is record `index` and adds it to `totals`.
/// The error names the record and the problem.
pub fn check_record_line(index: u64, line: &[u8], totals: &mut Totals) -> Result<(), String> {
    if line.last() == Some(&b'\r') {
        return Err(format!(
            "record {index}: line ends with a carriage return (was records.jsonl converted to \
             CRLF line endings?); it does not match the signed log"
        ));
    }
    let owned;
    let facts = match serde_json::from_slice::<UsageView>(line) {
        Ok(v) if v.kind == "usage" => UsageFacts {
            v: v.v,
            id: v.id,
            tenant: match v.tenant {
                Cow::Borrowed(s) => s,
                Cow::Owned(s) => {
                    owned = s;
                    &owned
                }
            },
            gpu_ms: v.gpu_ms,
            gpu_seconds: v.gpu_seconds,
            energy_joules: v.energy_joules,
            rate: v.rate_paise_per_hour,
            amount: v.amount_paise,
            prev: v.prev,
            attestation: v.attestation,
        },
        _ => match serde_json::from_slice::<Record>(line) {
            Err(e) => return Err(format!("record {index}: not a valid record: {e}")),
            Ok(Record::Usage(u)) => {
                owned = u.tenant;
                UsageFacts {
                    v: u.v,
                    id: u.id,
                    tenant: &owned,
                    gpu_ms: u.gpu_ms,
                    gpu_seconds: u.gpu_seconds,
                    energy_joules: u.energy_joules,
                    rate: u.rate_paise_per_hour,
                    amount: u.amount_paise,
                    prev: u.prev,
                    attestation: u.attestation,
                }
            }
            Ok(other) => {
                // Attestation results and GPU events carry no money; they are checked for
                // their place in the log and counted by kind.
                check_place(index, other.id(), other.version())?;
                totals.add_other(other.kind());
                return Ok(());
            }
        },
    };
    check_usage(index, &facts)?;
    totals.add_usage(
        facts.tenant,
        facts.gpu_ms,
        facts.energy_joules,
        facts.amount,
    );
    Ok(())
}

/// A record claims the id of its line and a schema version this build understands.
fn check_place(index: u64, id: u64, v: u32) -> Result<(), String> {
    if id != index {
        return Err(format!(
            "record {index}: claims id {id} but is line {index} of records.jsonl (records were \
             reordered, inserted or removed)"
        ));
    }
    if v > RECORD_VERSION {
        return Err(format!(
            "record {index}: schema version {v} is newer than this sovctl understands \
             ({RECORD_VERSION}); upgrade sovctl"
        ));
    }
    Ok(())
}

fn check_usage(index: u64, f: &UsageFacts<'_>) -> Result<(), String> {
    check_place(index, f.id, f.v)?;
    if let Some(a) = f.attestation {
        if a >= f.id {
            return Err(format!(
                "record {index}: attestation {a} does not point to an earlier record"
            ));
        }
    }
    let expected = amount_paise(f.gpu_ms, f.rate);
    if f.amount != expected {
        return Err(format!(
            "record {index}: amount_paise {} does not equal gpu_ms {} at {} paise/hour ({expected})",
            f.amount, f.gpu_ms, f.rate
        ));
    }
    if f.gpu_seconds != f.gpu_ms as f64 / 1000.0 {
        return Err(format!(
            "record {index}: gpu_seconds {} does not equal gpu_ms {} / 1000",
            f.gpu_seconds, f.gpu_ms
        ));
    }
    if !f.energy_joules.is_finite() || f.energy_joules < 0.0 {
        return Err(format!(
            "record {index}: energy_joules {} is not a non-negative number",
            f.energy_joules
        ));
    }
    if let Some(p) = f.prev {
        if p >= f.id {
            return Err(format!(
                "record {index}: prev {p} does not point to an earlier record"
            ));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Streaming pass over records.jsonl

/// Bytes per chunk handed to a worker (about 9,000 records).
const CHUNK: usize = 4 << 20;

/// Results of one pass over records.jsonl.
#[derive(Debug, Default)]
pub struct StreamOutcome {
    /// Number of lines (records), counting an unterminated last line.
    pub lines: u64,
    /// Roots of the tree of the first `n` records, for each requested `n <= lines`.
    pub roots: BTreeMap<u64, Hash>,
    /// Leaf hashes of the requested record indices that exist.
    pub leaf_hashes: BTreeMap<u64, Hash>,
    pub totals: Totals,
    /// The first record-level problems, in record order.
    pub problems: Vec<String>,
    /// Number of records with a problem (may exceed `problems.len()`).
    pub bad_records: u64,
    /// The file does not end with a newline (its last record is incomplete).
    pub unterminated: bool,
}

struct ChunkJob {
    first_index: u64,
    data: Vec<u8>,
}

struct ChunkResult {
    leaf_hashes: Vec<Hash>,
    totals: Totals,
    problems: Vec<String>,
    bad: u64,
    data: Vec<u8>,
}

fn process_chunk(job: ChunkJob) -> ChunkResult {
    let mut r = ChunkResult {
        leaf_hashes: Vec::new(),
        totals: Totals::default(),
        problems: Vec::new(),
        bad: 0,
        data: Vec::new(),
    };
    let data = job.data.as_slice();
    let body = data.strip_suffix(b"\n").unwrap_or(data);
    if !data.is_empty() {
        for (index, line) in (job.first_index..).zip(body.split(|&b| b == b'\n')) {
            r.leaf_hashes.push(leaf_hash(line));
            if let Err(p) = check_record_line(index, line, &mut r.totals) {
                r.bad += 1;
                if r.problems.len() < MAX_LISTED_PROBLEMS {
                    r.problems.push(p);
                }
            }
        }
    }
    r.data = job.data;
    r
}

/// Reads `reader` (records.jsonl) once: leaf hashes and record checks on worker threads,
/// roots at each of `sizes` and the leaf hashes of `leaves` on the calling thread.
/// `progress` is called with the number of bytes done so far.
pub fn stream_records(
    mut reader: impl Read,
    sizes: &[u64],
    leaves: &[u64],
    mut progress: impl FnMut(u64),
) -> Result<StreamOutcome, String> {
    let mut sizes: Vec<u64> = sizes.to_vec();
    sizes.sort_unstable();
    sizes.dedup();
    let mut leaves: Vec<u64> = leaves.to_vec();
    leaves.sort_unstable();
    leaves.dedup();
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 8);
    let mut out = StreamOutcome::default();
    let mut builder = RootBuilder::new();
    let (mut next_size, mut next_leaf) = (0usize, 0usize);
    let mut done_bytes = 0u64;

    std::thread::scope(|scope| -> Result<(), String> {
        let mut to_workers = Vec::with_capacity(workers);
        let mut from_workers = Vec::with_capacity(workers);
        for _ in 0..workers {
            let (jtx, jrx) = mpsc::channel::<ChunkJob>();
            let (rtx, rrx) = mpsc::channel::<ChunkResult>();
            scope.spawn(move || {
                for job in jrx {
                    if rtx.send(process_chunk(job)).is_err() {
                        break;
                    }
                }
            });
            to_workers.push(jtx);
            from_workers.push(rrx);
        }
        let mut spare: Vec<Vec<u8>> = Vec::new();
        let mut carry: Vec<u8> = Vec::new();
        let mut in_flight = std::collections::VecDeque::new();
        let mut seq = 0usize;
        let mut eof = false;
        let mut next_index = 0u64;
        loop {
            while !eof && in_flight.len() < 2 * workers {
                let mut buf = spare.pop().unwrap_or_default();
                buf.clear();
                buf.append(&mut carry);
                let (data, tail, at_eof) = read_chunk(&mut reader, buf)?;
                eof = at_eof;
                carry = tail;
                if data.is_empty() {
                    spare.push(data);
                    continue;
                }
                let mut lines = data.iter().filter(|&&b| b == b'\n').count() as u64;
                if data.last() != Some(&b'\n') {
                    // Only possible at EOF: an unterminated last line.
                    out.unterminated = true;
                    lines += 1;
                }
                let job = ChunkJob {
                    first_index: next_index,
                    data,
                };
                next_index += lines;
                to_workers[seq % workers]
                    .send(job)
                    .map_err(|_| "verification worker stopped".to_owned())?;
                in_flight.push_back(seq);
                seq += 1;
            }
            let Some(s) = in_flight.pop_front() else {
                break;
            };
            let r = from_workers[s % workers]
                .recv()
                .map_err(|_| "verification worker stopped".to_owned())?;
            for h in r.leaf_hashes {
                let i = builder.size();
                while next_size < sizes.len() && sizes[next_size] <= i {
                    if sizes[next_size] == i {
                        out.roots.insert(i, builder.root());
                    }
                    next_size += 1;
                }
                while next_leaf < leaves.len() && leaves[next_leaf] <= i {
                    if leaves[next_leaf] == i {
                        out.leaf_hashes.insert(i, h);
                    }
                    next_leaf += 1;
                }
                builder
                    .push_leaf_hash(h)
                    .map_err(|e| format!("records.jsonl: {e}"))?;
            }
            out.totals.merge(r.totals);
            out.bad_records += r.bad;
            for p in r.problems {
                if out.problems.len() < MAX_LISTED_PROBLEMS {
                    out.problems.push(p);
                }
            }
            done_bytes += r.data.len() as u64;
            progress(done_bytes);
            spare.push(r.data);
        }
        Ok(())
    })?;
    out.lines = builder.size();
    if sizes.binary_search(&out.lines).is_ok() {
        out.roots.insert(out.lines, builder.root());
    }
    Ok(out)
}

/// Fills `buf` (which may already hold a carried-over partial line) to [`CHUNK`] bytes and
/// splits it after its last newline. Returns (complete lines, the rest, EOF). At EOF
/// everything is returned as data, an unterminated last line included.
fn read_chunk(
    reader: &mut impl Read,
    mut buf: Vec<u8>,
) -> Result<(Vec<u8>, Vec<u8>, bool), String> {
    let mut eof = false;
    let mut filled = buf.len();
    if filled < CHUNK {
        buf.resize(CHUNK, 0);
    }
    while filled < CHUNK {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => {
                eof = true;
                break;
            }
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("cannot read records.jsonl: {e}")),
        }
    }
    buf.truncate(filled);
    if eof {
        return Ok((buf, Vec::new(), true));
    }
    match buf.iter().rposition(|&b| b == b'\n') {
        Some(pos) => {
            let tail = buf[pos + 1..].to_vec();
            buf.truncate(pos + 1);
            Ok((buf, tail, false))
        }
        None => Err(format!(
            "records.jsonl has a line longer than {MAX_RECORD_LEN} bytes: not an export"
        )),
    }
}

// ---------------------------------------------------------------------------------------
// Verification

/// Inputs of `sovctl audit verify`.
#[derive(Debug, Clone)]
pub struct VerifyOptions {
    /// Export directory.
    pub dir: PathBuf,
    /// The verifier key to trust; `None` takes the export's own `log.vkey` (self-asserted).
    pub vkey: Option<PathBuf>,
    /// A checkpoint seen earlier that the export's log must extend.
    pub previous: Option<PathBuf>,
    /// Consistency proof from the previous checkpoint to the export's; without it the root
    /// at the previous size is recomputed from the records.
    pub consistency: Option<PathBuf>,
}

/// How the previous checkpoint was related to the export's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PreviousCheck {
    /// The consistency proof file verified.
    ProofVerified { old_size: u64 },
    /// The root at the old size was recomputed from the records and matched.
    Recomputed { old_size: u64 },
}

/// The outcome of verifying an export. Valid when `problems` is empty.
#[derive(Debug, Clone)]
pub struct VerifyReport {
    pub vkey: String,
    /// Whether the key came from `--vkey` rather than from the export itself.
    pub key_pinned: bool,
    pub checkpoint: Checkpoint,
    pub records: u64,
    pub totals: Totals,
    pub previous: Option<PreviousCheck>,
    pub receipts_verified: usize,
    pub warnings: Vec<String>,
    pub problems: Vec<String>,
}

impl VerifyReport {
    pub fn is_valid(&self) -> bool {
        self.problems.is_empty()
    }
}

fn read_text(path: &Path, what: &str) -> Result<String, String> {
    fs::read_to_string(path).map_err(|e| format!("cannot read {what} {}: {e}", path.display()))
}

struct ReceiptCheck {
    file: PathBuf,
    receipt: Receipt,
    checkpoint: Checkpoint,
}

/// Verification could not proceed: an unreadable file, or a checkpoint that does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct VerifyFailure {
    pub message: String,
    /// Warnings gathered before the failure (e.g. that the export's key differs from the
    /// pinned one), which often explain it.
    pub warnings: Vec<String>,
}

/// Verifies an export directory offline. `Err` means verification could not proceed;
/// otherwise the report lists every problem found. `progress` receives (bytes of
/// records.jsonl done, total bytes).
pub fn verify_export(
    opts: &VerifyOptions,
    progress: impl FnMut(u64, u64),
) -> Result<VerifyReport, VerifyFailure> {
    let mut warnings = Vec::new();
    match verify_inner(opts, progress, &mut warnings) {
        Ok(mut r) => {
            r.warnings = warnings;
            Ok(r)
        }
        Err(message) => Err(VerifyFailure { message, warnings }),
    }
}

fn verify_inner(
    opts: &VerifyOptions,
    mut progress: impl FnMut(u64, u64),
    warnings: &mut Vec<String>,
) -> Result<VerifyReport, String> {
    let dir = &opts.dir;
    if !dir.is_dir() {
        return Err(format!("{} is not an export directory", dir.display()));
    }
    let mut problems = Vec::new();

    // The key.
    let export_vkey_path = dir.join(VKEY_FILE);
    let (vkey_path, key_pinned) = match &opts.vkey {
        Some(p) => (p.clone(), true),
        None => (export_vkey_path.clone(), false),
    };
    let vkey_text = read_text(&vkey_path, "verifier key")?;
    let verifier = NoteVerifier::parse(vkey_text.trim())
        .map_err(|e| format!("verifier key {} is malformed: {e}", vkey_path.display()))?;
    let vkey = verifier.to_vkey();
    if key_pinned {
        if let Ok(theirs) = fs::read_to_string(&export_vkey_path) {
            if theirs.trim() != vkey {
                warnings.push(format!(
                    "the export's own {VKEY_FILE} ({}) differs from the pinned key; it is ignored",
                    theirs.trim()
                ));
            }
        }
    } else {
        warnings.push(format!(
            "the verifier key was taken from the export itself ({}), so it is self-asserted: \
             this proves the export is internally consistent, not that this node signed it — \
             pin the node's key with --vkey",
            export_vkey_path.display()
        ));
    }

    // The checkpoint.
    let cp_path = dir.join(CHECKPOINT_FILE);
    let note = read_text(&cp_path, "checkpoint")?;
    let checkpoint = open_checkpoint(&note, &verifier).map_err(|e| {
        format!(
            "checkpoint signature does not verify with key {vkey}: {e} ({})",
            cp_path.display()
        )
    })?;

    // The previous checkpoint and proof.
    let mut previous = None;
    let mut old_check: Option<Checkpoint> = None;
    let mut proof_check = None;
    if let Some(prev_path) = &opts.previous {
        let text = read_text(prev_path, "previous checkpoint")?;
        match open_checkpoint(&text, &verifier) {
            Err(e) => problems.push(format!(
                "previous checkpoint {} does not verify with key {vkey}: {e} (a checkpoint of \
                 another log?)",
                prev_path.display()
            )),
            Ok(old) if old.size > checkpoint.size => problems.push(format!(
                "log truncated: previous checkpoint size {} > {}",
                old.size, checkpoint.size
            )),
            Ok(old) => {
                if let Some(proof_path) = &opts.consistency {
                    let proof =
                        ConsistencyProof::parse(&read_text(proof_path, "consistency proof")?)
                            .map_err(|e| format!("{}: {e}", proof_path.display()))?;
                    proof_check = Some((proof_path.clone(), proof));
                }
                old_check = Some(old);
            }
        }
    }
    if let (Some(old), Some((path, proof))) = (&old_check, &proof_check) {
        if (proof.old_size, proof.new_size) != (old.size, checkpoint.size) {
            problems.push(format!(
                "consistency proof {} is from size {} to {}, but the checkpoints are for sizes \
                 {} and {}",
                path.display(),
                proof.old_size,
                proof.new_size,
                old.size,
                checkpoint.size
            ));
        } else {
            let r = if old.size == 0 {
                if old.root == attest::log::empty_root() {
                    Ok(())
                } else {
                    Err("the previous checkpoint claims size 0 with a non-empty root".to_owned())
                }
            } else {
                verify_consistency(
                    old.size,
                    checkpoint.size,
                    &proof.hashes,
                    &old.root,
                    &checkpoint.root,
                )
                .map_err(|e| e.to_string())
            };
            match r {
                Ok(()) => previous = Some(PreviousCheck::ProofVerified { old_size: old.size }),
                Err(e) => problems.push(format!(
                    "log rewritten: the log at size {} does not extend the previous checkpoint at \
                     size {} ({e}): it was rewritten or forked",
                    checkpoint.size, old.size
                )),
            }
        }
    }

    // Receipts.
    let mut receipt_checks = Vec::new();
    let rdir = dir.join(RECEIPTS_DIR);
    if rdir.is_dir() {
        let mut entries: Vec<_> = fs::read_dir(&rdir)
            .map_err(|e| format!("cannot read {}: {e}", rdir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        entries.sort();
        for file in entries {
            let id = file
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(&format!(".{RECEIPT_EXT}")))
                .and_then(parse_decimal);
            let Some(id) = id else {
                warnings.push(format!(
                    "ignoring {}: not <id>.{RECEIPT_EXT}",
                    file.display()
                ));
                continue;
            };
            let parsed = read_text(&file, "receipt").and_then(|t| {
                Receipt::parse(&t).map_err(|e| format!("receipt {}: {e}", file.display()))
            });
            let receipt = match parsed {
                Ok(r) => r,
                Err(e) => {
                    problems.push(e);
                    continue;
                }
            };
            if receipt.index != id {
                problems.push(format!(
                    "receipt {} is for record {}, not {id}",
                    file.display(),
                    receipt.index
                ));
                continue;
            }
            match open_checkpoint(&receipt.checkpoint_note, &verifier) {
                Ok(c) => receipt_checks.push(ReceiptCheck {
                    file,
                    receipt,
                    checkpoint: c,
                }),
                Err(e) => problems.push(format!(
                    "record {id}: receipt {} carries a checkpoint that does not verify with key \
                     {vkey}: {e}",
                    file.display()
                )),
            }
        }
    }

    // The records.
    let rec_path = dir.join(RECORDS_FILE);
    let file =
        File::open(&rec_path).map_err(|e| format!("cannot read {}: {e}", rec_path.display()))?;
    let total_bytes = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut sizes = vec![checkpoint.size];
    if proof_check.is_none() {
        if let Some(old) = &old_check {
            sizes.push(old.size);
        }
    }
    sizes.extend(receipt_checks.iter().map(|r| r.checkpoint.size));
    let wanted: Vec<u64> = receipt_checks.iter().map(|r| r.receipt.index).collect();
    let s = stream_records(file, &sizes, &wanted, |done| progress(done, total_bytes))?;

    problems.extend(s.problems.iter().cloned());
    if s.bad_records > s.problems.len() as u64 {
        problems.push(format!(
            "… and {} more invalid records",
            s.bad_records - s.problems.len() as u64
        ));
    }
    if s.unterminated {
        problems.push(format!(
            "records.jsonl does not end with a newline: record {} is incomplete (the export was \
             truncated)",
            s.lines - 1
        ));
    }
    if s.lines < checkpoint.size {
        problems.push(format!(
            "export truncated: the checkpoint covers {} records but records.jsonl has {}",
            checkpoint.size, s.lines
        ));
    } else {
        if s.lines > checkpoint.size {
            problems.push(format!(
                "records.jsonl has {} records but the checkpoint covers only {}: records {}..{} \
                 are not signed",
                s.lines,
                checkpoint.size,
                checkpoint.size,
                s.lines - 1
            ));
        }
        if let Some(root) = s.roots.get(&checkpoint.size) {
            if *root != checkpoint.root {
                problems.push(format!(
                    "records.jsonl does not match the signed log: root mismatch at size {} \
                     (records give {}, the checkpoint signs {}): a record was altered, inserted, \
                     removed or reordered",
                    checkpoint.size,
                    B64.encode(root),
                    B64.encode(checkpoint.root)
                ));
            }
        }
    }
    if proof_check.is_none() {
        if let Some(old) = &old_check {
            match s.roots.get(&old.size) {
                Some(root) if *root == old.root => {
                    previous = Some(PreviousCheck::Recomputed { old_size: old.size })
                }
                Some(root) => problems.push(format!(
                    "log rewritten: the first {} records give root {} but the previous checkpoint \
                     signs {}: the log was rewritten or forked since",
                    old.size,
                    B64.encode(root),
                    B64.encode(old.root)
                )),
                None => problems.push(format!(
                    "log truncated: previous checkpoint size {} > {} records in the export",
                    old.size, s.lines
                )),
            }
        }
    }
    let mut receipts_verified = 0;
    for rc in &receipt_checks {
        let id = rc.receipt.index;
        let Some(leaf) = s.leaf_hashes.get(&id) else {
            problems.push(format!(
                "record {id}: has a receipt ({}) but is not in records.jsonl",
                rc.file.display()
            ));
            continue;
        };
        if let Err(e) = attest::log::verify_inclusion(
            leaf,
            id,
            rc.checkpoint.size,
            &rc.receipt.proof,
            &rc.checkpoint.root,
        ) {
            problems.push(format!(
                "record {id}: line does not match its receipt {} ({e})",
                rc.file.display()
            ));
            continue;
        }
        match s.roots.get(&rc.checkpoint.size) {
            Some(root) if *root == rc.checkpoint.root => receipts_verified += 1,
            // A receipt fetched after the export's checkpoint, against a later one: the node
            // did sign the record at this index, but this export cannot tie that later tree
            // to its own without a consistency proof.
            None if rc.checkpoint.size > checkpoint.size => warnings.push(format!(
                "record {id}: receipt {} is against a later checkpoint (size {} > {}); its \
                 inclusion proof verifies, but its consistency with this export is not checked",
                rc.file.display(),
                rc.checkpoint.size,
                checkpoint.size
            )),
            _ => problems.push(format!(
                "record {id}: receipt {} is for a tree of size {} that records.jsonl does not \
                 reproduce",
                rc.file.display(),
                rc.checkpoint.size
            )),
        }
    }

    Ok(VerifyReport {
        vkey,
        key_pinned,
        checkpoint,
        records: s.lines,
        totals: s.totals,
        previous,
        receipts_verified,
        warnings: Vec::new(),
        problems,
    })
}

/// The human summary of a valid report.
pub fn format_summary(r: &VerifyReport) -> String {
    let mut s = String::new();
    let cp = &r.checkpoint;
    s.push_str(&format!(
        "OK: {} records verified against the checkpoint of {} (size {}, root {})\n",
        r.records,
        cp.origin,
        cp.size,
        B64.encode(cp.root)
    ));
    s.push_str(&format!(
        "key: {}{}\n",
        r.vkey,
        if r.key_pinned {
            " (pinned)"
        } else {
            " (self-asserted)"
        }
    ));
    match &r.previous {
        Some(PreviousCheck::ProofVerified { old_size }) => s.push_str(&format!(
            "extends the previous checkpoint of size {old_size} (consistency proof verified)\n"
        )),
        Some(PreviousCheck::Recomputed { old_size }) => s.push_str(&format!(
            "extends the previous checkpoint of size {old_size} (root recomputed from the records)\n"
        )),
        None => {}
    }
    if r.receipts_verified > 0 {
        s.push_str(&format!("receipts verified: {}\n", r.receipts_verified));
    }
    let kinds: Vec<String> = r
        .totals
        .by_kind
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    s.push_str(&format!(
        "by kind: {}\n",
        if kinds.is_empty() {
            "none".to_owned()
        } else {
            kinds.join(", ")
        }
    ));
    let header = ["tenant", "records", "GPU-hours", "energy kWh", "amount"];
    let mut rows: Vec<[String; 5]> = r
        .totals
        .tenants
        .iter()
        .map(|(t, v)| {
            [
                t.clone(),
                v.records.to_string(),
                format_gpu_hours(v.gpu_ms),
                format_kwh(v.energy_joules),
                format_inr(v.amount_paise),
            ]
        })
        .collect();
    if rows.len() > 1 {
        let sum = r
            .totals
            .tenants
            .values()
            .fold(TenantTotals::default(), |mut a, v| {
                a.records += v.records;
                a.gpu_ms += v.gpu_ms;
                a.energy_joules += v.energy_joules;
                a.amount_paise += v.amount_paise;
                a
            });
        rows.push([
            "TOTAL".into(),
            sum.records.to_string(),
            format_gpu_hours(sum.gpu_ms),
            format_kwh(sum.energy_joules),
            format_inr(sum.amount_paise),
        ]);
    }
    if !rows.is_empty() {
        let mut widths = header.map(|h| h.chars().count());
        for row in &rows {
            for (w, c) in widths.iter_mut().zip(row) {
                *w = (*w).max(c.chars().count());
            }
        }
        let line = |cells: &[String]| {
            let mut l = String::new();
            for (i, (c, w)) in cells.iter().zip(widths).enumerate() {
                let pad = w - c.chars().count();
                if i == 0 {
                    l.push_str(c);
                    l.push_str(&" ".repeat(pad));
                } else {
                    l.push_str("  ");
                    l.push_str(&" ".repeat(pad));
                    l.push_str(c);
                }
            }
            l.push('\n');
            l
        };
        s.push_str(&line(&header.map(String::from)));
        for row in &rows {
            s.push_str(&line(row));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::UsageRecord;

    fn usage(id: u64, tenant: &str, gpu_ms: u64, rate: u64) -> Record {
        Record::Usage(UsageRecord {
            v: RECORD_VERSION,
            id,
            node: "node-1".into(),
            tenant: tenant.into(),
            lease: "lease-1".into(),
            gpu_uuid: "GPU-0b8c1a52-0000-4000-8000-000000000001".into(),
            gpu_model: "NVIDIA H100 80GB HBM3".into(),
            start: "2026-01-01T00:00:00.000Z".into(),
            end: "2026-01-01T01:00:00.000Z".into(),
            gpu_ms,
            gpu_seconds: gpu_ms as f64 / 1000.0,
            energy_joules: 1.8e6,
            peak_memory_bytes: 1 << 30,
            mean_utilization_pct: 87.5,
            rate_paise_per_hour: rate,
            amount_paise: amount_paise(gpu_ms, rate),
            policy_digest: "sha256:00".into(),
            prev: id.checked_sub(1),
            attestation: None,
        })
    }

    #[test]
    fn money_and_units() {
        assert_eq!(format_inr(0), "₹0.00");
        assert_eq!(format_inr(5), "₹0.05");
        assert_eq!(format_inr(99_999), "₹999.99");
        assert_eq!(format_inr(100_000), "₹1,000.00");
        assert_eq!(format_inr(1_000_000), "₹10,000.00");
        assert_eq!(format_inr(10_000_000), "₹1,00,000.00");
        assert_eq!(format_inr(1_234_567_890), "₹1,23,45,678.90");
        assert_eq!(format_gpu_hours(40 * 3_600_000), "40.000");
        assert_eq!(format_gpu_hours(1_800), "0.001"); // 0.0005 h rounds up
        assert_eq!(format_gpu_hours(1_799), "0.000");
        assert_eq!(format_kwh(3.6e6 * 2.5), "2.500");
    }

    #[test]
    fn totals_forty_hours_of_h100() {
        let mut t = Totals::default();
        for i in 0..40 {
            let line = usage(i, "acme", 3_600_000, 25_000).to_leaf();
            check_record_line(i, &line, &mut t).unwrap();
        }
        let acme = &t.tenants["acme"];
        assert_eq!(acme.records, 40);
        assert_eq!(format_gpu_hours(acme.gpu_ms), "40.000");
        assert_eq!(format_inr(acme.amount_paise), "₹10,000.00");
        assert_eq!(format_kwh(acme.energy_joules), "20.000");
        assert_eq!(t.by_kind["usage"], 40);
    }

    #[test]
    fn record_checks_name_the_record() {
        let mut t = Totals::default();
        let good = usage(5, "acme", 1000, 25_000).to_leaf();
        let e = check_record_line(4, &good, &mut t).unwrap_err();
        assert!(e.starts_with("record 4: claims id 5"), "{e}");
        let e = check_record_line(7, b"{not json", &mut t).unwrap_err();
        assert!(e.starts_with("record 7: not a valid record"), "{e}");
        let mut crlf = good.clone();
        crlf.push(b'\r');
        let e = check_record_line(5, &crlf, &mut t).unwrap_err();
        assert!(e.contains("carriage return"), "{e}");
        let tampered = String::from_utf8(good.clone())
            .unwrap()
            .replace("\"amount_paise\":7", "\"amount_paise\":1");
        let e = check_record_line(5, tampered.as_bytes(), &mut t).unwrap_err();
        assert!(e.contains("amount_paise 1 does not equal"), "{e}");
        let fwd = String::from_utf8(good)
            .unwrap()
            .replace("\"prev\":4", "\"prev\":9");
        let e = check_record_line(5, fwd.as_bytes(), &mut t).unwrap_err();
        assert!(e.contains("prev 9"), "{e}");
        assert_eq!(t.records, 0);
    }

    /// The borrowed fast path must accept exactly what `Record` accepts.
    #[test]
    fn fast_path_agrees_with_the_record_type() {
        let base = serde_json::to_value(usage(3, "acme", 1000, 25_000)).unwrap();
        let obj = base.as_object().unwrap().clone();
        let mut variants: Vec<serde_json::Value> = vec![base.clone()];
        for key in obj.keys() {
            let mut v = obj.clone();
            v.remove(key);
            variants.push(v.into());
            for bad in [
                serde_json::json!(null),
                serde_json::json!("x"),
                serde_json::json!(-1),
                serde_json::json!(1.5),
                serde_json::json!(u64::MAX),
                serde_json::json!([]),
                serde_json::json!("esc\"aped\\"),
            ] {
                let mut v = obj.clone();
                v.insert(key.clone(), bad);
                variants.push(v.into());
            }
        }
        let mut extra = obj.clone();
        extra.insert("extra".into(), serde_json::json!(1));
        variants.push(extra.into());
        for att in [
            serde_json::json!(2),
            serde_json::json!(null),
            serde_json::json!("2"),
            serde_json::json!(-2),
        ] {
            let mut v = obj.clone();
            v.insert("attestation".into(), att);
            variants.push(v.into());
        }
        let mut kind = obj.clone();
        kind.insert("kind".into(), serde_json::json!("refund"));
        variants.push(kind.into());
        let mut texts: Vec<String> = variants.iter().map(|v| v.to_string()).collect();
        let good = base.to_string();
        texts.push(good.replacen("{", "{\"id\":3,", 1)); // duplicate field
        texts.push(good.replacen("{", "{\"kind\":\"usage\",", 1)); // duplicate tag
        texts.push(format!("{good} "));
        texts.push(format!("{good}x"));
        texts.push("[]".into());
        for text in &texts {
            let full = serde_json::from_slice::<Record>(text.as_bytes()).is_ok();
            let fast = matches!(
                serde_json::from_slice::<UsageView>(text.as_bytes()),
                Ok(v) if v.kind == "usage"
            );
            assert_eq!(full, fast, "{text}");
        }
    }

    fn records_text(n: u64) -> Vec<u8> {
        let mut out = Vec::new();
        for i in 0..n {
            out.extend_from_slice(
                &usage(i, ["a", "b", "c"][i as usize % 3], 60_000, 25_000).to_leaf(),
            );
            out.push(b'\n');
        }
        out
    }

    #[test]
    fn streaming_roots_match_the_log_at_every_requested_size() {
        let text = records_text(300);
        let leaves: Vec<&[u8]> = text
            .strip_suffix(b"\n")
            .unwrap()
            .split(|&b| b == b'\n')
            .collect();
        let log = attest::log::Log::from_leaves(&leaves).unwrap();
        let sizes = [0, 1, 7, 64, 299, 300, 301];
        let s = stream_records(&text[..], &sizes, &[0, 150, 299, 400], |_| {}).unwrap();
        assert_eq!(s.lines, 300);
        assert!(s.problems.is_empty(), "{:?}", s.problems);
        for n in [0u64, 1, 7, 64, 299, 300] {
            assert_eq!(s.roots[&n], log.root_at(n).unwrap(), "size {n}");
        }
        assert!(!s.roots.contains_key(&301));
        assert_eq!(s.leaf_hashes.len(), 3);
        assert_eq!(s.leaf_hashes[&150], leaf_hash(leaves[150]));
        assert_eq!(s.totals.records, 300);
        assert_eq!(s.totals.tenants["a"].records, 100);

        // One byte at a time, through the chunking and carrying paths.
        struct Trickle<'a>(&'a [u8]);
        impl Read for Trickle<'_> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                let n = buf.len().min(self.0.len()).min(7);
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let t = stream_records(Trickle(&text), &[300], &[], |_| {}).unwrap();
        assert_eq!(t.roots[&300], s.roots[&300]);

        let cut = &text[..text.len() - 5];
        let u = stream_records(cut, &[300], &[], |_| {}).unwrap();
        assert!(u.unterminated);
        assert_eq!(u.lines, 300);
        assert_eq!(u.bad_records, 1);
    }

    #[test]
    fn an_empty_export_has_the_empty_root() {
        let s = stream_records(&b""[..], &[0], &[0], |_| {}).unwrap();
        assert_eq!(s.lines, 0);
        assert_eq!(s.roots[&0], attest::log::empty_root());
        assert!(s.leaf_hashes.is_empty());
        assert!(!s.unterminated);
    }

    #[test]
    fn consistency_proof_files_round_trip_and_reject_garbage() {
        let p = ConsistencyProof {
            old_size: 3,
            new_size: 8,
            hashes: vec![[1; 32], [2; 32]],
        };
        let text = p.format();
        assert!(text.starts_with("sovereign-host/consistency-proof@v1\nold 3\nnew 8\n"));
        assert_eq!(ConsistencyProof::parse(&text).unwrap(), p);
        assert!(ConsistencyProof::parse(text.trim_end()).is_err());
        assert!(ConsistencyProof::parse(&text.replace("old 3", "old 03")).is_err());
        assert!(ConsistencyProof::parse(&text.replace("new 8\n", "new 8\nAAAA\n")).is_err());
        assert!(ConsistencyProof::parse("garbage\n").is_err());
    }
}
