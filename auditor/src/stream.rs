//! The streaming pass over `records.jsonl`: one read of the file, spread over all cores.
//!
//! Worker threads hash leaves and check each record on its own ([`crate::check`]) chunk by
//! chunk while the calling thread reads the file, folds leaf hashes into the tree in order,
//! keeping the roots at the sizes asked for and the leaf hashes of the records asked for, and
//! checks each record against the ones before it ([`RecordChecker`]). Memory use does not
//! grow with the number of records (the checks across records remember leases and
//! attestation records, not usage records).

use crate::check::{check_line, LineCheck, RecordChecker, Totals, MAX_LISTED_PROBLEMS};
use crate::finding::Finding;
use attest::log::{leaf_hash, Hash, RootBuilder, TreeFull};
use std::collections::BTreeMap;
use std::io::{self, Read};
use std::sync::{mpsc, Arc};

/// A record line longer than this is not a record; refusing it bounds the verifier's memory.
pub const MAX_RECORD_LEN: usize = CHUNK;

/// Why the pass over `records.jsonl` could not complete.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    /// Reading the file failed; the operating system's error.
    #[error("cannot read records.jsonl: {0}")]
    Read(Arc<io::Error>),
    /// A line is longer than any record can be; the file is not an export (and reading
    /// on would make memory use unbounded).
    #[error("records.jsonl has a line longer than {limit} bytes: not an export")]
    LineTooLong {
        /// The longest line accepted, in bytes ([`MAX_RECORD_LEN`]).
        limit: usize,
    },
    /// A worker thread hashing and checking records ended early (it panicked); a bug in
    /// the verifier, not a property of the export.
    #[error("verification worker stopped")]
    WorkerStopped,
    /// The file has more lines than a tree size can count (2^64 - 1).
    #[error("records.jsonl")]
    TreeFull(#[from] TreeFull),
}

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
    /// Counts by kind and per-tenant usage over the records that passed their checks (on
    /// their own and against the records before them).
    pub totals: Totals,
    /// The first record-level problems ([`MAX_LISTED_PROBLEMS`] [`Finding::BadRecord`]s), in
    /// record order.
    pub problems: Vec<Finding>,
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
    first_index: u64,
    leaf_hashes: Vec<Hash>,
    /// Each line's own checks, in order.
    checks: Vec<LineCheck>,
    data: Vec<u8>,
}

fn process_chunk(job: ChunkJob) -> ChunkResult {
    let mut r = ChunkResult {
        first_index: job.first_index,
        leaf_hashes: Vec::new(),
        checks: Vec::new(),
        data: Vec::new(),
    };
    let data = job.data.as_slice();
    let body = data.strip_suffix(b"\n").unwrap_or(data);
    if !data.is_empty() {
        for (index, line) in (job.first_index..).zip(body.split(|&b| b == b'\n')) {
            r.leaf_hashes.push(leaf_hash(line));
            r.checks.push(check_line(index, line));
        }
    }
    r.data = job.data;
    r
}

/// Reads `reader` (records.jsonl) once: leaf hashes and record checks on worker threads,
/// roots at each of `sizes` and the leaf hashes of `leaves` on the calling thread.
/// `progress` is called with the number of bytes done so far.
pub fn stream_records(
    reader: impl Read,
    sizes: &[u64],
    leaves: &[u64],
    mut progress: impl FnMut(u64),
) -> Result<StreamOutcome, StreamError> {
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 8);
    let mut chunker = Chunker::new(reader);
    let mut collector = Collector::new(sizes, leaves);
    let mut done_bytes = 0u64;
    std::thread::scope(|scope| -> Result<(), StreamError> {
        let (to_workers, from_workers) = spawn_workers(scope, workers);
        // Chunks go to the workers in turn and come back in the same turn, so results are
        // folded in record order; at most two per worker are in flight.
        let mut in_flight = std::collections::VecDeque::new();
        let mut seq = 0usize;
        loop {
            while in_flight.len() < 2 * workers {
                let Some(job) = chunker.next_job()? else {
                    break;
                };
                to_workers[seq % workers]
                    .send(job)
                    .map_err(|_| StreamError::WorkerStopped)?;
                in_flight.push_back(seq);
                seq += 1;
            }
            let Some(s) = in_flight.pop_front() else {
                break;
            };
            let result = from_workers[s % workers]
                .recv()
                .map_err(|_| StreamError::WorkerStopped)?;
            done_bytes += result.data.len() as u64;
            let buffer = collector.absorb(result)?;
            progress(done_bytes);
            chunker.recycle(buffer);
        }
        Ok(())
    })?;
    let mut out = collector.finish();
    out.unterminated = chunker.unterminated;
    Ok(out)
}

/// `n` worker threads in `scope`, each hashing and checking the chunks sent to it, in order.
fn spawn_workers<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    n: usize,
) -> (
    Vec<mpsc::Sender<ChunkJob>>,
    Vec<mpsc::Receiver<ChunkResult>>,
) {
    let mut to_workers = Vec::with_capacity(n);
    let mut from_workers = Vec::with_capacity(n);
    for _ in 0..n {
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
    (to_workers, from_workers)
}

/// Cuts the input into chunks of whole lines, numbering each chunk's first line; buffers
/// come back through [`Chunker::recycle`], so memory stays at a few chunks per worker.
struct Chunker<R> {
    reader: R,
    carry: Vec<u8>,
    spare: Vec<Vec<u8>>,
    eof: bool,
    next_index: u64,
    /// The input's last line has no newline.
    unterminated: bool,
}

impl<R: Read> Chunker<R> {
    fn new(reader: R) -> Self {
        Chunker {
            reader,
            carry: Vec::new(),
            spare: Vec::new(),
            eof: false,
            next_index: 0,
            unterminated: false,
        }
    }

    /// The next chunk, or `None` once the input is read.
    fn next_job(&mut self) -> Result<Option<ChunkJob>, StreamError> {
        while !self.eof {
            let mut buf = self.spare.pop().unwrap_or_default();
            buf.clear();
            buf.append(&mut self.carry);
            let (data, tail, at_eof) = read_chunk(&mut self.reader, buf)?;
            self.eof = at_eof;
            self.carry = tail;
            if data.is_empty() {
                self.spare.push(data);
                continue;
            }
            let mut lines = data.iter().filter(|&&b| b == b'\n').count() as u64;
            if data.last() != Some(&b'\n') {
                // Only possible at EOF: an unterminated last line.
                self.unterminated = true;
                lines += 1;
            }
            let job = ChunkJob {
                first_index: self.next_index,
                data,
            };
            self.next_index += lines;
            return Ok(Some(job));
        }
        Ok(None)
    }

    fn recycle(&mut self, buffer: Vec<u8>) {
        self.spare.push(buffer);
    }
}

/// The calling thread's half: folds chunk results, in record order, into the tree (keeping
/// the roots and leaf hashes asked for), the checks across records, the totals and the
/// problems.
struct Collector {
    /// Sorted, without duplicates.
    sizes: Vec<u64>,
    /// Sorted, without duplicates.
    leaves: Vec<u64>,
    next_size: usize,
    next_leaf: usize,
    builder: RootBuilder,
    checker: RecordChecker,
    out: StreamOutcome,
}

impl Collector {
    fn new(sizes: &[u64], leaves: &[u64]) -> Self {
        let sorted = |v: &[u64]| {
            let mut v = v.to_vec();
            v.sort_unstable();
            v.dedup();
            v
        };
        Collector {
            sizes: sorted(sizes),
            leaves: sorted(leaves),
            next_size: 0,
            next_leaf: 0,
            builder: RootBuilder::new(),
            checker: RecordChecker::new(),
            out: StreamOutcome::default(),
        }
    }

    /// Folds in the next chunk's result; returns its buffer for reuse.
    fn absorb(&mut self, r: ChunkResult) -> Result<Vec<u8>, StreamError> {
        for h in r.leaf_hashes {
            let i = self.builder.size();
            while self.next_size < self.sizes.len() && self.sizes[self.next_size] <= i {
                if self.sizes[self.next_size] == i {
                    self.out.roots.insert(i, self.builder.root());
                }
                self.next_size += 1;
            }
            while self.next_leaf < self.leaves.len() && self.leaves[self.next_leaf] <= i {
                if self.leaves[self.next_leaf] == i {
                    self.out.leaf_hashes.insert(i, h);
                }
                self.next_leaf += 1;
            }
            self.builder.push_leaf_hash(h)?;
        }
        for (index, check) in (r.first_index..).zip(r.checks) {
            if let Err(problem) = self.checker.admit(index, check, &mut self.out.totals) {
                self.out.bad_records += 1;
                if self.out.problems.len() < MAX_LISTED_PROBLEMS {
                    self.out
                        .problems
                        .push(Finding::BadRecord { index, problem });
                }
            }
        }
        Ok(r.data)
    }

    /// The outcome, with the root at the whole file's size if it was asked for.
    fn finish(self) -> StreamOutcome {
        let mut out = self.out;
        out.lines = self.builder.size();
        if self.sizes.binary_search(&out.lines).is_ok() {
            out.roots.insert(out.lines, self.builder.root());
        }
        out
    }
}

/// Fills `buf` (which may already hold a carried-over partial line) to [`CHUNK`] bytes and
/// splits it after its last newline. Returns (complete lines, the rest, EOF). At EOF
/// everything is returned as data, an unterminated last line included.
fn read_chunk(
    reader: &mut impl Read,
    mut buf: Vec<u8>,
) -> Result<(Vec<u8>, Vec<u8>, bool), StreamError> {
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
            Err(e) => return Err(StreamError::Read(Arc::new(e))),
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
        None => Err(StreamError::LineTooLong {
            limit: MAX_RECORD_LEN,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{leaves, usage};

    fn records_text(n: u64) -> Vec<u8> {
        let mut out = Vec::new();
        for leaf in leaves(n) {
            out.extend_from_slice(&leaf);
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

    /// The checks across records see records in other chunks: a chain spans them without a
    /// finding, and a copy of an early record at the end is found.
    #[test]
    fn checks_across_records_span_chunks() {
        let n = 25_000;
        let mut text = records_text(n);
        assert!(text.len() > 2 * CHUNK, "{}", text.len());
        let mut copy: crate::record::Record = serde_json::from_slice(&leaves(4)[3]).unwrap();
        if let crate::record::Record::Usage(u) = &mut copy {
            u.id = n;
        }
        text.extend_from_slice(&copy.to_leaf().unwrap());
        text.push(b'\n');
        let s = stream_records(&text[..], &[], &[], |_| {}).unwrap();
        assert_eq!((s.lines, s.bad_records), (n + 1, 1), "{:?}", s.problems);
        assert!(
            matches!(
                &s.problems[0],
                Finding::BadRecord {
                    index,
                    problem: crate::check::RecordProblem::OverlapsEarlier { earlier, .. }
                } if *index == n && *earlier == n - 1
            ),
            "{:?}",
            s.problems
        );
        assert_eq!(s.totals.records, n);
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
    fn bad_records_are_listed_up_to_a_limit_and_counted() {
        let mut text = Vec::new();
        for i in 0..30u64 {
            text.extend_from_slice(&usage(i + 1, "a", 1, 1).to_leaf().unwrap());
            text.push(b'\n');
        }
        let s = stream_records(&text[..], &[30], &[], |_| {}).unwrap();
        assert_eq!((s.lines, s.bad_records), (30, 30));
        assert_eq!(s.problems.len(), MAX_LISTED_PROBLEMS);
        assert!(matches!(s.problems[0], Finding::BadRecord { index: 0, .. }));
    }

    #[test]
    fn a_line_longer_than_a_record_is_refused() {
        let text = vec![b'x'; MAX_RECORD_LEN + 1];
        let e = stream_records(&text[..], &[1], &[], |_| {}).unwrap_err();
        assert!(matches!(e, StreamError::LineTooLong { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            format!("records.jsonl has a line longer than {MAX_RECORD_LEN} bytes: not an export")
        );
    }
}
