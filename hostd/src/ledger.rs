//! The node's signed usage ledger: the `attest` Merkle log kept in sled, with a signed
//! checkpoint after every append.
//!
//! # Storage
//!
//! One sled tree, `ledger`, in the node's database holds everything, so one atomic batch can
//! commit an append:
//!
//! | key                  | value                                                      |
//! |----------------------|------------------------------------------------------------|
//! | `L` ‖ be64(i)        | entry of leaf `i`: `n` (1 byte) ‖ `n` hashes ‖ leaf bytes  |
//! | `S`                  | be64 number of committed leaves                            |
//! | `C`                  | latest signed checkpoint note (UTF-8)                      |
//! | `K`                  | the log's verifier key (`<name>+<id>+<b64>`)               |
//!
//! The `n` 32-byte hashes in leaf `i`'s entry are those of the complete subtrees whose last
//! leaf is `i`, at levels `0..n` (`n = trailing_ones(i) + 1`: level 0 is the leaf hash) —
//! exactly the subtrees that appending leaf `i` completed. Keeping them with the leaf makes
//! an append one sled insert per leaf instead of three (sled's cost is per key), and every
//! subtree hash is still one lookup: the subtree (level `l`, index `k`) lives in the entry of
//! leaf `((k + 1) << l) - 1`.
//!
//! Leaves, node hashes and `S` of one append go in one `apply_batch` followed by a `flush`,
//! so after a crash the log has either all of an append or none of it. The checkpoint is
//! signed and stored afterwards and not flushed on its own: a crash can lose it, and
//! [`Ledger::open`] then signs one for the committed size (Ed25519 is deterministic, so the
//! note is byte-identical to the one that was lost). Keeping `K` lets `hostd audit export`
//! write the verifier key without touching the private key.

use crate::witness::{Witness, WitnessError};
use attest::checkpoint::{open_checkpoint, sign_checkpoint, Checkpoint, CheckpointError};
use attest::log::{AppendBatch, NodeId};
use attest::log::{Hash, Log, LogError, LogStore};
use attest::note::{NoteSigner, NoteVerifier};
use attest::receipt::Receipt;
use attest::report::report;
use auditor::layout::ConsistencyProof;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use std::collections::HashMap;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

mod problem;
pub use problem::StateProblem;

/// Name of the sled tree holding the ledger.
pub const TREE_NAME: &str = "ledger";

const LEAF_PREFIX: u8 = b'L';
const SIZE_KEY: &[u8] = b"S";
const CHECKPOINT_KEY: &[u8] = b"C";
const VKEY_KEY: &[u8] = b"K";

fn leaf_key(index: u64) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = LEAF_PREFIX;
    k[1..].copy_from_slice(&index.to_be_bytes());
    k
}

/// The last leaf of a complete subtree: the leaf whose entry holds its hash.
fn last_leaf(id: NodeId) -> Option<u64> {
    let level = u32::from(id.level);
    let end = id.index.checked_add(1)?;
    if level >= 64 || end.leading_zeros() < level {
        return None;
    }
    Some((end << level) - 1)
}

/// Splits leaf `index`'s entry into its subtree hashes (levels `0..n`) and the leaf bytes.
fn split_entry(index: u64, v: &[u8]) -> Result<(&[u8], &[u8]), StoreError> {
    let n = usize::from(*v.first().ok_or_else(|| StoreError::BadLength {
        what: format!("the entry of leaf {index}"),
        len: 0,
        expected: 33,
    })?);
    let hashes_end = 1 + 32 * n;
    if n == 0 || v.len() < hashes_end {
        return Err(StoreError::BadLength {
            what: format!("the entry of leaf {index} (with {n} subtree hashes)"),
            len: v.len(),
            expected: hashes_end.max(33),
        });
    }
    Ok((&v[1..hashes_end], &v[hashes_end..]))
}

/// Errors of the sled-backed store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("ledger database")]
    Sled(#[from] sled::Error),
    /// A stored value has the wrong shape: the database was damaged or edited.
    #[error("ledger store is corrupt: {what} is {len} bytes, expected {expected}")]
    BadLength {
        what: String,
        len: usize,
        expected: usize,
    },
    #[error("ledger store is corrupt: {0}")]
    Corrupt(String),
    /// Someone else appended to the tree, or an earlier failed flush left it ahead of us.
    #[error("ledger append starts at {start} but the store holds {size} leaves; restart hostd")]
    Conflict { start: u64, size: u64 },
    /// A flush failed after a batch was applied: whether it reached the disk is unknown, so
    /// no further append may build on it until a restart re-reads the durable state.
    #[error(
        "an earlier ledger flush failed, so the ledger's durable state is unknown; restart hostd"
    )]
    Poisoned,
}

/// [`LogStore`] over one sled tree (see the module docs for the key layout).
#[derive(Debug, Clone)]
pub struct SledLogStore {
    tree: sled::Tree,
    poisoned: bool,
    /// Hashes of large subtrees (level >= [`CACHE_MIN_LEVEL`]), which every proof needs
    /// and which never change once written; shared by clones (snapshots).
    cache: Arc<Mutex<HashMap<NodeId, Hash>>>,
}

/// Subtrees of at least 2^10 leaves are cached: at most two hashes per 1,024 records
/// (~100 KB per million), and they make up half of a proof at a million records.
const CACHE_MIN_LEVEL: u8 = 10;
/// Bound on cached hashes (~50 MB), reached only past 500 million records.
const CACHE_MAX: usize = 1 << 20;

impl SledLogStore {
    fn cache_get(&self, id: NodeId) -> Option<Hash> {
        if id.level < CACHE_MIN_LEVEL {
            return None;
        }
        self.cache.lock().ok()?.get(&id).copied()
    }

    fn cache_put(&self, id: NodeId, hash: Hash) {
        if id.level < CACHE_MIN_LEVEL {
            return;
        }
        if let Ok(mut c) = self.cache.lock() {
            if c.len() < CACHE_MAX {
                c.insert(id, hash);
            }
        }
    }
}

impl SledLogStore {
    /// The store in `db`'s [`TREE_NAME`] tree (created empty if missing).
    pub fn open(db: &sled::Db) -> Result<Self, StoreError> {
        Ok(Self::new(db.open_tree(TREE_NAME)?))
    }

    pub fn new(tree: sled::Tree) -> Self {
        Self {
            tree,
            poisoned: false,
            cache: Arc::default(),
        }
    }

    pub fn tree(&self) -> &sled::Tree {
        &self.tree
    }

    /// The latest stored signed checkpoint, if any.
    pub fn checkpoint(&self) -> Result<Option<String>, StoreError> {
        self.text(CHECKPOINT_KEY, "checkpoint")
    }

    /// The stored verifier key, if any.
    pub fn vkey(&self) -> Result<Option<String>, StoreError> {
        self.text(VKEY_KEY, "verifier key")
    }

    fn text(&self, key: &[u8], what: &str) -> Result<Option<String>, StoreError> {
        match self.tree.get(key)? {
            None => Ok(None),
            Some(v) => String::from_utf8(v.to_vec())
                .map(Some)
                .map_err(|_| StoreError::Corrupt(format!("stored {what} is not UTF-8"))),
        }
    }

    /// Stored leaves with index in `range`, in order, as `(index, bytes)`. Missing leaves
    /// are skipped, so callers that need every leaf compare indices.
    pub fn leaves(
        &self,
        range: Range<u64>,
    ) -> impl Iterator<Item = Result<(u64, sled::IVec), StoreError>> + '_ {
        let r = leaf_key(range.start)..leaf_key(range.end);
        self.tree.range(r).map(|item| {
            let (k, v) = item?;
            let index = <[u8; 8]>::try_from(&k[1..])
                .map(u64::from_be_bytes)
                .map_err(|_| StoreError::BadLength {
                    what: "a leaf key".into(),
                    len: k.len(),
                    expected: 9,
                })?;
            let (_, leaf) = split_entry(index, &v)?;
            let len = leaf.len();
            Ok((index, v.subslice(v.len() - len, len)))
        })
    }
}

impl LogStore for SledLogStore {
    type Error = StoreError;

    fn size(&self) -> Result<u64, StoreError> {
        match self.tree.get(SIZE_KEY)? {
            None => Ok(0),
            Some(v) => <[u8; 8]>::try_from(v.as_ref())
                .map(u64::from_be_bytes)
                .map_err(|_| StoreError::BadLength {
                    what: "the stored size".into(),
                    len: v.len(),
                    expected: 8,
                }),
        }
    }

    fn node(&self, id: NodeId) -> Result<Option<Hash>, StoreError> {
        if let Some(h) = self.cache_get(id) {
            return Ok(Some(h));
        }
        let Some(leaf) = last_leaf(id) else {
            return Ok(None);
        };
        let Some(v) = self.tree.get(leaf_key(leaf))? else {
            return Ok(None);
        };
        let (hashes, _) = split_entry(leaf, &v)?;
        let at = usize::from(id.level) * 32;
        let hash = hashes.get(at..at + 32).map(|h| {
            let mut out = [0u8; 32];
            out.copy_from_slice(h);
            out
        });
        if let Some(h) = hash {
            self.cache_put(id, h);
        }
        Ok(hash)
    }

    fn leaf(&self, index: u64) -> Result<Option<Vec<u8>>, StoreError> {
        match self.tree.get(leaf_key(index))? {
            None => Ok(None),
            Some(v) => Ok(Some(split_entry(index, &v)?.1.to_vec())),
        }
    }

    fn commit(&mut self, batch: &AppendBatch) -> Result<(), StoreError> {
        if self.poisoned {
            return Err(StoreError::Poisoned);
        }
        let size = self.size()?;
        let count = batch.leaves.len() as u64;
        if batch.start != size || batch.start.checked_add(count) != Some(batch.new_size) {
            return Err(StoreError::Conflict {
                start: batch.start,
                size,
            });
        }
        // Each leaf's entry: the hashes of the subtrees it completes, then its bytes.
        let mut entries: Vec<Vec<u8>> = (batch.start..)
            .zip(&batch.leaves)
            .map(|(i, leaf)| {
                let n = i.trailing_ones() as usize + 1;
                let mut e = vec![0u8; 1 + 32 * n + leaf.len()];
                e[0] = n as u8;
                e[1 + 32 * n..].copy_from_slice(leaf);
                e
            })
            .collect();
        let mut filled = vec![0u64; entries.len()];
        for (id, hash) in &batch.nodes {
            let slot = last_leaf(*id)
                .and_then(|r| r.checked_sub(batch.start))
                .and_then(|r| usize::try_from(r).ok())
                .filter(|&r| r < entries.len());
            let Some(r) = slot else {
                return Err(StoreError::Corrupt(format!(
                    "append batch has a subtree hash (level {} index {}) outside its leaves",
                    id.level, id.index
                )));
            };
            let e = &mut entries[r];
            let level = usize::from(id.level);
            if level >= usize::from(e[0]) {
                return Err(StoreError::Corrupt(format!(
                    "append batch has a subtree hash (level {} index {}) that its last leaf \
                     does not complete",
                    id.level, id.index
                )));
            }
            e[1 + 32 * level..33 + 32 * level].copy_from_slice(hash);
            filled[r] |= 1 << level;
        }
        for (r, e) in entries.iter().enumerate() {
            if filled[r].count_ones() != u32::from(e[0]) {
                return Err(StoreError::Corrupt(format!(
                    "append batch lacks subtree hashes completed by leaf {}",
                    batch.start + r as u64
                )));
            }
        }
        let mut b = sled::Batch::default();
        for (index, entry) in (batch.start..).zip(entries) {
            b.insert(&leaf_key(index)[..], entry);
        }
        b.insert(SIZE_KEY, &batch.new_size.to_be_bytes()[..]);
        self.tree.apply_batch(b)?;
        if let Err(e) = self.tree.flush() {
            self.poisoned = true;
            return Err(e.into());
        }
        for (id, hash) in &batch.nodes {
            self.cache_put(*id, *hash);
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("ledger")]
    Log(#[from] LogError),
    #[error("ledger checkpoint")]
    Checkpoint(#[from] CheckpointError),
    #[error(
        "the ledger was started with log key {stored} but this node's log key is {current}; \
         refusing to start — restore the original log key (a new key needs a new state directory)"
    )]
    KeyChanged { stored: String, current: String },
    #[error(
        "the stored ledger checkpoint does not verify with log key {vkey} (it was replaced or \
         damaged; refusing to start)"
    )]
    BadStoredCheckpoint {
        vkey: String,
        source: CheckpointError,
    },
    #[error(
        "the stored ledger checkpoint covers {checkpoint} records but the ledger holds only \
         {size}: records were removed — refusing to start; restore the state directory from backup"
    )]
    Truncated { checkpoint: u64, size: u64 },
    #[error(
        "the stored ledger checkpoint for {size} records has root {signed} but the stored tree \
         gives {computed}: the ledger was altered — refusing to start"
    )]
    RootMismatch {
        size: u64,
        signed: String,
        computed: String,
    },
    #[error("record {index} of the append contains a newline; records must be single-line JSON")]
    NewlineInRecord { index: usize },
    #[error("record {index} does not exist: the ledger holds {size} records")]
    NoSuchRecord { index: u64, size: u64 },
    #[error("no consistency proof from size {old} to {size}: the ledger is smaller than {old}")]
    OldSizeTooLarge { old: u64, size: u64 },
    #[error("the ledger has no stored checkpoint")]
    NoCheckpoint,
    #[error("the ledger has no stored verifier key (it was never opened by hostd)")]
    NoVkey,
    #[error("record {index} is missing from the ledger store below checkpoint size {size}")]
    MissingRecord { index: u64, size: u64 },
    #[error(transparent)]
    Witness(#[from] WitnessError),
    #[error(
        "the ledger store is damaged: {what}. hostd refuses to start rather than serve or sign \
         from it. Move the state's db/ aside, restore it from a backup (or start with none), \
         then run `hostd ledger recover --from-export DIR` (docs/operations.md, \"Backup, \
         restore and recovery\")"
    )]
    Damaged { what: String },
    #[error(
        "this node already signed a checkpoint of {witnessed} records ({path}) but the ledger \
         store holds only {stored}: the database was restored from an older backup or deleted. \
         Signing now would fork the published log, so hostd refuses to start. Recover the \
         missing records with `hostd ledger recover --from-export DIR` from an audit export \
         that covers them (see docs/operations.md, \"Backup, restore and recovery\")"
    )]
    BehindWitness {
        witnessed: u64,
        stored: u64,
        path: PathBuf,
    },
    #[error(
        "the ledger store does not extend the last checkpoint this node signed ({path}): at \
         size {size} it gives root {computed} but the signed root is {signed}. The database \
         was replaced by another log's; hostd refuses to start (see docs/operations.md, \
         \"Backup, restore and recovery\")"
    )]
    ForkedFromWitness {
        size: u64,
        signed: String,
        computed: String,
        path: PathBuf,
    },
}

/// What [`Ledger::append`] returns once the records are durable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendOutcome {
    /// Leaf indices (= record ids) of the appended records.
    pub range: Range<u64>,
    /// The signed checkpoint covering them.
    pub checkpoint: String,
}

/// The node's usage log. Not `Sync`-safe to append from two places: the caller serialises
/// appends (hostd holds it in a `Mutex`), which is also what makes [`next_index`] exact.
///
/// [`next_index`]: Ledger::next_index
pub struct Ledger {
    log: Log<SledLogStore>,
    tree: sled::Tree,
    signer: NoteSigner,
    verifier: NoteVerifier,
    /// Latest signed checkpoint and the size it covers (always the log's size unless
    /// signing failed after a commit, which only a bug could cause).
    checkpoint: String,
    checkpoint_size: u64,
    /// Where every checkpoint is written before it is stored and published; `None` only
    /// for tools and tests that open a ledger without one.
    witness: Option<Witness>,
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger")
            .field("origin", &self.signer.name())
            .field("size", &self.log.size())
            .finish_non_exhaustive()
    }
}

/// The log's key must stay the one it was first signed with; a new log stores it.
fn check_or_store_vkey(store: &SledLogStore, vkey: &str) -> Result<(), LedgerError> {
    match store.vkey()? {
        Some(stored) if stored != vkey => Err(LedgerError::KeyChanged {
            stored,
            current: vkey.to_owned(),
        }),
        Some(_) => Ok(()),
        None => {
            store
                .tree()
                .insert(VKEY_KEY, vkey.as_bytes())
                .map_err(StoreError::from)?;
            Ok(())
        }
    }
}

impl Ledger {
    /// Opens (creating if empty) the ledger in `db`, signing with `signer` whose key name is
    /// the log's origin (hostd uses `<node-name>/usage`).
    ///
    /// Refuses to start when the stored state contradicts itself: a stored key other than
    /// `signer`'s, a checkpoint that does not verify, covers more records than are stored, or
    /// whose root differs from the stored tree's. A checkpoint that is missing or older than
    /// the committed size (a crash between commit and signing) is re-signed.
    pub fn open(db: &sled::Db, signer: NoteSigner) -> Result<Ledger, LedgerError> {
        Self::open_inner(db, signer, None)
    }

    /// [`Ledger::open`] for a running node: the stored log must also extend the last
    /// checkpoint this node ever signed, kept in `witness` outside the database, and every
    /// new checkpoint is written there before it is stored (see [`crate::witness`]).
    pub fn open_witnessed(
        db: &sled::Db,
        signer: NoteSigner,
        witness: Witness,
    ) -> Result<Ledger, LedgerError> {
        Self::open_inner(db, signer, Some(witness))
    }

    fn open_inner(
        db: &sled::Db,
        signer: NoteSigner,
        witness: Option<Witness>,
    ) -> Result<Ledger, LedgerError> {
        let store = SledLogStore::open(db)?;
        let tree = store.tree().clone();
        let verifier = signer.verifier();
        check_or_store_vkey(&store, &verifier.to_vkey())?;
        let stored = store.checkpoint()?;
        let log = Log::open(store)?;
        let mut ledger = Ledger {
            log,
            tree,
            signer,
            verifier,
            checkpoint: String::new(),
            checkpoint_size: 0,
            witness,
        };
        ledger.check_witness()?;
        match stored {
            Some(note) => ledger.resume_from(note)?,
            None => {
                if ledger.log.size() > 0 {
                    tracing::warn!(
                        committed = ledger.log.size(),
                        "the ledger has no stored checkpoint; signing one"
                    );
                }
                ledger.sign_and_store()?;
            }
        }
        // A node that ran before witnesses existed, or whose witness write was the last thing
        // a crash interrupted, is witnessed now, at the checkpoint just checked or signed.
        if let Some(w) = &ledger.witness {
            w.store(&ledger.checkpoint)?;
        }
        ledger.tree.flush().map_err(StoreError::from)?;
        tracing::info!(
            origin = ledger.signer.name(),
            size = ledger.log.size(),
            key_id = format_args!("{:08x}", ledger.verifier.key_id()),
            "ledger opened"
        );
        Ok(ledger)
    }

    /// Takes up the stored checkpoint `note`: it must verify under this ledger's key, cover
    /// no more records than are stored, and have the stored tree's root at its size. One
    /// older than the committed size (a crash between commit and signing) is re-signed.
    fn resume_from(&mut self, note: String) -> Result<(), LedgerError> {
        let size = self.log.size();
        let cp = open_checkpoint(&note, &self.verifier).map_err(|source| {
            LedgerError::BadStoredCheckpoint {
                vkey: self.verifier.to_vkey(),
                source,
            }
        })?;
        if cp.size > size {
            return Err(LedgerError::Truncated {
                checkpoint: cp.size,
                size,
            });
        }
        let computed = self.log.root_at(cp.size)?;
        if computed != cp.root {
            return Err(LedgerError::RootMismatch {
                size: cp.size,
                signed: B64.encode(cp.root),
                computed: B64.encode(computed),
            });
        }
        if cp.size < size {
            tracing::warn!(
                signed = cp.size,
                committed = size,
                "the last ledger append was not followed by a stored checkpoint \
                 (crash?); signing one for the committed records"
            );
            self.sign_and_store()
        } else {
            self.checkpoint = note;
            self.checkpoint_size = size;
            Ok(())
        }
    }

    /// The stored log must extend the witnessed checkpoint: at least its size, and its root
    /// at that size.
    fn check_witness(&self) -> Result<(), LedgerError> {
        let Some(w) = &self.witness else {
            return Ok(());
        };
        let Some(cp) = w.load(&self.verifier)? else {
            return Ok(());
        };
        let stored = self.log.size();
        if cp.size > stored {
            return Err(LedgerError::BehindWitness {
                witnessed: cp.size,
                stored,
                path: w.path().to_owned(),
            });
        }
        let computed = self.log.root_at(cp.size)?;
        if computed != cp.root {
            return Err(LedgerError::ForkedFromWitness {
                size: cp.size,
                signed: B64.encode(cp.root),
                computed: B64.encode(computed),
                path: w.path().to_owned(),
            });
        }
        Ok(())
    }

    fn sign_and_store(&mut self) -> Result<(), LedgerError> {
        let cp = Checkpoint {
            origin: self.signer.name().to_owned(),
            size: self.log.size(),
            root: self.log.root(),
            extensions: Vec::new(),
        };
        let note = sign_checkpoint(&cp, &self.signer)?;
        // Witnessed before it is stored or published: whatever happens next, this node will
        // never sign a tree that does not extend it.
        if let Some(w) = &self.witness {
            w.store(&note)?;
        }
        self.tree
            .insert(CHECKPOINT_KEY, note.as_bytes())
            .map_err(StoreError::from)?;
        self.checkpoint = note;
        self.checkpoint_size = cp.size;
        Ok(())
    }

    /// Checks every stored record against the leaf hash its tree was built from, and that
    /// none is missing below the checkpoint: what the root check at open cannot see (a record
    /// cut short or with a flipped byte in the store). One pass over the log at start.
    pub fn check_leaves(&self) -> Result<(), LedgerError> {
        let snap = self.snapshot();
        let mut next = 0u64;
        for item in snap.stored_records() {
            let (index, bytes) = item.map_err(|e| LedgerError::Damaged {
                what: format!("record {next} cannot be read ({e})", e = report(&e)),
            })?;
            if index != next {
                return Err(LedgerError::Damaged {
                    what: format!("record {next} is missing"),
                });
            }
            match snap.stored_leaf_hash(index)? {
                Some(h) if h == attest::log::leaf_hash(&bytes) => {}
                _ => {
                    return Err(LedgerError::Damaged {
                        what: format!(
                            "record {index} does not match the hash the log was built from"
                        ),
                    })
                }
            }
            next += 1;
        }
        if next != snap.size() {
            return Err(LedgerError::Damaged {
                what: format!("record {next} is missing"),
            });
        }
        Ok(())
    }

    /// The root of the log's first `size` records.
    pub fn root_at(&self, size: u64) -> Result<Hash, LedgerError> {
        Ok(self.log.root_at(size)?)
    }

    /// Number of records.
    pub fn size(&self) -> u64 {
        self.log.size()
    }

    /// The id the next appended record gets.
    pub fn next_index(&self) -> u64 {
        self.log.size()
    }

    /// The log's origin (the key name).
    pub fn origin(&self) -> &str {
        self.signer.name()
    }

    /// The verifier key line auditors pin: `<origin>+<key id>+<base64 key>`.
    pub fn vkey(&self) -> String {
        self.verifier.to_vkey()
    }

    pub fn verifier(&self) -> &NoteVerifier {
        &self.verifier
    }

    /// The latest signed checkpoint note.
    pub fn checkpoint_note(&self) -> &str {
        &self.checkpoint
    }

    /// Appends `leaves` (one record's compact JSON each) durably, then signs and stores the
    /// checkpoint covering them. Once this returns `Ok`, the records survive a crash.
    pub fn append(&mut self, leaves: &[Vec<u8>]) -> Result<AppendOutcome, LedgerError> {
        if let Some(index) = leaves.iter().position(|l| l.contains(&b'\n')) {
            return Err(LedgerError::NewlineInRecord { index });
        }
        let range = self.log.append(leaves)?;
        if !range.is_empty() {
            self.sign_and_store()?;
        }
        Ok(AppendOutcome {
            range,
            checkpoint: self.checkpoint.clone(),
        })
    }

    /// Record `index`'s bytes, or `None` past the end.
    pub fn record(&self, index: u64) -> Result<Option<Vec<u8>>, LedgerError> {
        if index >= self.log.size() {
            return Ok(None);
        }
        Ok(Some(self.log.leaf(index)?))
    }

    /// The C2SP tlog-proof receipt for record `index` against the latest checkpoint.
    pub fn receipt(&self, index: u64) -> Result<String, LedgerError> {
        if index >= self.checkpoint_size {
            return Err(LedgerError::NoSuchRecord {
                index,
                size: self.checkpoint_size,
            });
        }
        let proof = self.log.inclusion_proof(index, self.checkpoint_size)?;
        Ok(Receipt {
            index,
            extra: None,
            proof,
            checkpoint_note: self.checkpoint.clone(),
        }
        .format())
    }

    /// The consistency proof from the tree of `old_size` records to the latest checkpoint,
    /// in the text format of [`ConsistencyProof`] (see docs/audit.md).
    pub fn consistency_proof(&self, old_size: u64) -> Result<String, LedgerError> {
        let size = self.checkpoint_size;
        if old_size > size {
            return Err(LedgerError::OldSizeTooLarge {
                old: old_size,
                size,
            });
        }
        let hashes = if old_size == 0 || old_size == size {
            Vec::new()
        } else {
            self.log.consistency_proof(old_size, size)?
        };
        Ok(ConsistencyProof {
            old_size,
            new_size: size,
            hashes,
        }
        .format())
    }

    /// A consistent view for export: the latest checkpoint and exactly the records it covers.
    /// Records below a checkpoint never change, so the view can be read after the caller
    /// releases the ledger's lock while appends go on.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            store: SledLogStore::new(self.tree.clone()),
            checkpoint_note: self.checkpoint.clone(),
            size: self.checkpoint_size,
            vkey: self.vkey(),
        }
    }

    /// Reads the records in `range` (clamped to the ledger's size), in order.
    pub fn records(
        &self,
        range: Range<u64>,
    ) -> impl Iterator<Item = Result<Vec<u8>, LedgerError>> + '_ {
        let end = range.end.min(self.log.size());
        let start = range.start.min(end);
        strict_records(self.log.store(), start..end)
    }
}

fn strict_records(
    store: &SledLogStore,
    range: Range<u64>,
) -> impl Iterator<Item = Result<Vec<u8>, LedgerError>> + '_ {
    let end = range.end;
    let mut expected = range.start;
    let mut inner = store.leaves(range);
    std::iter::from_fn(move || {
        if expected >= end {
            return None;
        }
        let item = match inner.next() {
            Some(Ok((index, bytes))) if index == expected => Ok(bytes.to_vec()),
            Some(Err(e)) => Err(e.into()),
            _ => Err(LedgerError::MissingRecord {
                index: expected,
                size: end,
            }),
        };
        // After an error, stop: the caller reports it and the iterator is exhausted.
        expected = if item.is_ok() { expected + 1 } else { end };
        Some(item)
    })
}

/// A signed checkpoint together with read access to exactly the records it covers.
#[derive(Debug, Clone)]
pub struct Snapshot {
    store: SledLogStore,
    checkpoint_note: String,
    size: u64,
    vkey: String,
}

impl Snapshot {
    /// Reads the ledger of a *stopped* node without its private key, for
    /// `hostd audit export`. Nothing is verified here beyond parsing the checkpoint for its
    /// size: a damaged state is exported as it is, and [`Snapshot::check`] (or the auditor's
    /// `sovctl audit verify`) names the damage.
    pub fn from_db(db: &sled::Db) -> Result<Snapshot, LedgerError> {
        let store = SledLogStore::open(db)?;
        let checkpoint_note = store.checkpoint()?.ok_or(LedgerError::NoCheckpoint)?;
        let vkey = store.vkey()?.ok_or(LedgerError::NoVkey)?;
        let size = unverified_checkpoint(&checkpoint_note)?.size;
        Ok(Snapshot {
            store,
            checkpoint_note,
            size,
            vkey,
        })
    }

    pub fn checkpoint_note(&self) -> &str {
        &self.checkpoint_note
    }

    /// Number of records the checkpoint covers.
    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn vkey(&self) -> &str {
        &self.vkey
    }

    /// Records `0..size()`, in order; a missing record is an error that ends the iteration.
    pub fn records(&self) -> impl Iterator<Item = Result<Vec<u8>, LedgerError>> + '_ {
        strict_records(&self.store, 0..self.size)
    }

    /// Records `range` (clamped to `0..size()`), in order, each with its index; a missing
    /// record is an error that ends the iteration. Reads one record at a time, so a caller
    /// that keeps none of them reads any range in constant memory.
    pub fn records_in(
        &self,
        range: Range<u64>,
    ) -> impl Iterator<Item = Result<(u64, Vec<u8>), LedgerError>> + '_ {
        let end = range.end.min(self.size);
        let start = range.start.min(end);
        (start..)
            .zip(strict_records(&self.store, start..end))
            .map(|(i, r)| r.map(|b| (i, b)))
    }

    /// The stored records below the checkpoint's size as they are, gaps included, as
    /// `(index, bytes)` — what a faithful export of a damaged state writes.
    pub fn stored_records(&self) -> impl Iterator<Item = Result<(u64, Vec<u8>), LedgerError>> + '_ {
        self.store
            .leaves(0..self.size)
            .map(|r| r.map(|(i, v)| (i, v.to_vec())).map_err(Into::into))
    }

    /// The stored hash of leaf `index` (what the tree was built from), if present.
    pub fn stored_leaf_hash(&self, index: u64) -> Result<Option<Hash>, LedgerError> {
        Ok(self.store.node(NodeId { level: 0, index })?)
    }

    /// Receipt for record `index` against this snapshot's checkpoint.
    pub fn receipt(&self, index: u64) -> Result<String, LedgerError> {
        if index >= self.size {
            return Err(LedgerError::NoSuchRecord {
                index,
                size: self.size,
            });
        }
        let log = Log::open(self.store.clone())?;
        let proof = log.inclusion_proof(index, self.size)?;
        Ok(Receipt {
            index,
            extra: None,
            proof,
            checkpoint_note: self.checkpoint_note.clone(),
        }
        .format())
    }

    /// Cross-checks the stored state the way [`Ledger::open`] would, without the private key,
    /// returning each inconsistency (empty when none is found). Leaf contents are not
    /// compared here; exports compare each leaf with its stored hash as they go.
    pub fn check(&self) -> Vec<StateProblem> {
        let mut problems = Vec::new();
        match NoteVerifier::parse(&self.vkey) {
            Ok(v) => {
                if let Err(source) = open_checkpoint(&self.checkpoint_note, &v) {
                    problems.push(StateProblem::CheckpointUnverified {
                        vkey: self.vkey.clone(),
                        source,
                    });
                }
            }
            Err(e) => problems.push(StateProblem::MalformedVerifierKey(e)),
        }
        match self.store.size() {
            Ok(stored) if stored < self.size => problems.push(StateProblem::RecordsRemoved {
                signed: self.size,
                stored,
            }),
            Ok(_) => {}
            Err(e) => problems.push(StateProblem::SizeUnreadable(e)),
        }
        problems.extend(self.check_root());
        problems
    }

    /// The stored tree's root at the checkpoint's size against the one it signs.
    fn check_root(&self) -> Option<StateProblem> {
        let log = match Log::open(self.store.clone()) {
            Ok(log) => log,
            Err(e) => return Some(StateProblem::TreeDamaged(e)),
        };
        // A checkpoint whose body does not parse was reported as unverified.
        let signed = unverified_checkpoint(&self.checkpoint_note).ok()?.root;
        if log.size() < self.size {
            return None; // reported as RecordsRemoved
        }
        match log.root_at(self.size) {
            Ok(root) if root != signed => Some(StateProblem::RootMismatch {
                size: self.size,
                stored: B64.encode(root),
                signed: B64.encode(signed),
            }),
            Ok(_) => None,
            Err(e) => Some(StateProblem::TreeDamaged(e)),
        }
    }
}

/// Parses a signed checkpoint's body without checking its signature.
fn unverified_checkpoint(note: &str) -> Result<Checkpoint, LedgerError> {
    let parsed = attest::note::parse(note).map_err(CheckpointError::from)?;
    Ok(Checkpoint::parse(&parsed.text)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_db() -> (tempfile::TempDir, sled::Db) {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new()
            .path(dir.path().join("db"))
            .open()
            .unwrap();
        (dir, db)
    }

    fn signer() -> NoteSigner {
        NoteSigner::from_seed("node-1/usage", &[7; 32]).unwrap()
    }

    fn leaves(range: Range<u64>) -> Vec<Vec<u8>> {
        range
            .map(|i| format!("{{\"leaf\":{i}}}").into_bytes())
            .collect()
    }

    #[test]
    fn appends_sign_and_prove() {
        let (_d, db) = temp_db();
        let mut l = Ledger::open(&db, signer()).unwrap();
        assert_eq!(l.size(), 0);
        let out = l.append(&leaves(0..10)).unwrap();
        assert_eq!(out.range, 0..10);
        let cp = open_checkpoint(&out.checkpoint, l.verifier()).unwrap();
        assert_eq!(cp.size, 10);
        assert_eq!(cp.origin, "node-1/usage");
        let mem = Log::from_leaves(&leaves(0..10)).unwrap();
        assert_eq!(cp.root, mem.root());
        assert_eq!(l.next_index(), 10);
        assert_eq!(l.record(3).unwrap().unwrap(), leaves(3..4)[0]);
        assert_eq!(l.record(10).unwrap(), None);

        let receipt = Receipt::parse(&l.receipt(4).unwrap()).unwrap();
        attest::receipt::verify(&receipt, &leaves(4..5)[0], l.verifier()).unwrap();
        assert!(matches!(
            l.receipt(10),
            Err(LedgerError::NoSuchRecord { .. })
        ));

        let old = cp;
        l.append(&leaves(10..17)).unwrap();
        let new = open_checkpoint(l.checkpoint_note(), l.verifier()).unwrap();
        let proof = ConsistencyProof::parse(&l.consistency_proof(10).unwrap()).unwrap();
        assert_eq!((proof.old_size, proof.new_size), (10, 17));
        attest::log::verify_consistency(10, 17, &proof.hashes, &old.root, &new.root).unwrap();
        assert!(l.consistency_proof(18).is_err());
        assert!(ConsistencyProof::parse(&l.consistency_proof(0).unwrap())
            .unwrap()
            .hashes
            .is_empty());

        let all: Vec<_> = l.records(0..100).collect::<Result<_, _>>().unwrap();
        assert_eq!(all, leaves(0..17));
        assert!(matches!(
            l.append(&[b"a\nb".to_vec()]),
            Err(LedgerError::NewlineInRecord { index: 0 })
        ));
        assert_eq!(l.size(), 17);
    }

    #[test]
    fn reopens_and_resigns_a_lost_checkpoint() {
        let (_d, db) = temp_db();
        let mut l = Ledger::open(&db, signer()).unwrap();
        let first = l.append(&leaves(0..5)).unwrap().checkpoint;
        l.append(&leaves(5..9)).unwrap();
        let latest = l.checkpoint_note().to_owned();
        drop(l);
        // A crash between commit and checkpoint: the stored checkpoint is the older one.
        db.open_tree(TREE_NAME)
            .unwrap()
            .insert(CHECKPOINT_KEY, first.as_bytes())
            .unwrap();
        let l = Ledger::open(&db, signer()).unwrap();
        assert_eq!(l.size(), 9);
        assert_eq!(l.checkpoint_note(), latest, "re-signing is deterministic");
        drop(l);
        // And without any checkpoint at all.
        db.open_tree(TREE_NAME)
            .unwrap()
            .remove(CHECKPOINT_KEY)
            .unwrap();
        let l = Ledger::open(&db, signer()).unwrap();
        assert_eq!(l.checkpoint_note(), latest);
    }

    #[test]
    fn refuses_to_start_on_contradictions() {
        let (_d, db) = temp_db();
        let mut l = Ledger::open(&db, signer()).unwrap();
        l.append(&leaves(0..9)).unwrap();
        drop(l);
        let tree = db.open_tree(TREE_NAME).unwrap();

        let other = NoteSigner::from_seed("node-1/usage", &[8; 32]).unwrap();
        let err = Ledger::open(&db, other).unwrap_err();
        assert!(matches!(err, LedgerError::KeyChanged { .. }), "{err}");

        // Truncation: the size goes back but the checkpoint still covers 9.
        tree.insert(SIZE_KEY, &8u64.to_be_bytes()[..]).unwrap();
        let err = Ledger::open(&db, signer()).unwrap_err();
        assert!(
            matches!(
                err,
                LedgerError::Truncated {
                    checkpoint: 9,
                    size: 8
                }
            ),
            "{err}"
        );
        tree.insert(SIZE_KEY, &9u64.to_be_bytes()[..]).unwrap();

        // A stored subtree hash altered: the tree no longer gives the signed root.
        let saved = tree.get(leaf_key(8)).unwrap().unwrap();
        let mut edited = saved.to_vec();
        edited[1..33].copy_from_slice(&[0u8; 32]);
        tree.insert(leaf_key(8), edited).unwrap();
        let err = Ledger::open(&db, signer()).unwrap_err();
        assert!(
            matches!(err, LedgerError::RootMismatch { size: 9, .. }),
            "{err}"
        );
        tree.insert(leaf_key(8), saved).unwrap();

        // A checkpoint signed by someone else.
        let forged = sign_checkpoint(
            &Checkpoint {
                origin: "node-1/usage".into(),
                size: 9,
                root: [1; 32],
                extensions: vec![],
            },
            &NoteSigner::from_seed("node-1/usage", &[9; 32]).unwrap(),
        )
        .unwrap();
        let good = tree
            .insert(CHECKPOINT_KEY, forged.as_bytes())
            .unwrap()
            .unwrap();
        let err = Ledger::open(&db, signer()).unwrap_err();
        assert!(
            matches!(err, LedgerError::BadStoredCheckpoint { .. }),
            "{err}"
        );
        tree.insert(CHECKPOINT_KEY, good).unwrap();

        Ledger::open(&db, signer()).unwrap();
    }

    #[test]
    fn corrupt_values_are_errors_not_panics() {
        let (_d, db) = temp_db();
        let mut l = Ledger::open(&db, signer()).unwrap();
        l.append(&leaves(0..4)).unwrap();
        drop(l);
        let tree = db.open_tree(TREE_NAME).unwrap();
        let store = SledLogStore::new(tree.clone());

        tree.insert(SIZE_KEY, &[1u8, 2, 3][..]).unwrap();
        let err = store.size().unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::BadLength {
                    len: 3,
                    expected: 8,
                    ..
                }
            ),
            "{err}"
        );
        let err = Ledger::open(&db, signer()).unwrap_err();
        let shown = attest::report::report(&err).to_string();
        assert!(shown.contains("corrupt"), "{shown}");
        tree.insert(SIZE_KEY, &4u64.to_be_bytes()[..]).unwrap();

        // Leaf 3's entry holds the hashes of levels 0, 1 and 2 (the first four leaves).
        let id = NodeId { level: 2, index: 0 };
        let saved = tree.get(leaf_key(3)).unwrap().unwrap();
        assert_eq!(saved[0], 3);
        tree.insert(leaf_key(3), &saved[..70]).unwrap();
        let err = store.node(id).unwrap_err();
        assert!(err.to_string().contains("entry of leaf 3"), "{err}");
        assert!(store.leaf(3).is_err());
        assert!(Ledger::open(&db, signer()).is_err());
        tree.insert(leaf_key(3), &[][..]).unwrap();
        assert!(store.node(id).is_err());
        // An entry claiming fewer hashes: the level-2 hash is gone.
        let mut fewer = vec![2u8];
        fewer.extend_from_slice(&saved[1..65]);
        fewer.extend_from_slice(&saved[97..]);
        tree.insert(leaf_key(3), fewer).unwrap();
        assert_eq!(store.node(id).unwrap(), None);
        let err = Ledger::open(&db, signer()).unwrap_err();
        let shown = attest::report::report(&err).to_string();
        assert!(shown.contains("missing"), "{shown}");
        tree.insert(leaf_key(3), saved).unwrap();
        Ledger::open(&db, signer()).unwrap();
    }

    #[test]
    fn commit_refuses_a_batch_that_does_not_start_at_the_end() {
        let (_d, db) = temp_db();
        let mut store = SledLogStore::open(&db).unwrap();
        let batch = AppendBatch {
            start: 3,
            leaves: vec![b"x".to_vec()],
            nodes: vec![],
            new_size: 4,
        };
        assert!(matches!(
            store.commit(&batch),
            Err(StoreError::Conflict { start: 3, size: 0 })
        ));
    }

    #[test]
    fn snapshot_from_a_stopped_db_sees_what_was_signed() {
        let (_d, db) = temp_db();
        let mut l = Ledger::open(&db, signer()).unwrap();
        l.append(&leaves(0..6)).unwrap();
        let vkey = l.vkey();
        drop(l);
        let s = Snapshot::from_db(&db).unwrap();
        assert_eq!(s.size(), 6);
        assert_eq!(s.vkey(), vkey);
        assert!(s.check().is_empty(), "{:?}", s.check());
        let recs: Vec<_> = s.records().collect::<Result<_, _>>().unwrap();
        assert_eq!(recs, leaves(0..6));
        let some: Vec<_> = s.records_in(2..4).collect::<Result<_, _>>().unwrap();
        assert_eq!(
            some,
            vec![(2, leaves(2..3)[0].clone()), (3, leaves(3..4)[0].clone())]
        );
        assert_eq!(s.records_in(5..100).count(), 1, "clamped to the checkpoint");
        assert_eq!(s.records_in(9..100).count(), 0);

        let tree = db.open_tree(TREE_NAME).unwrap();
        tree.remove(leaf_key(5)).unwrap();
        tree.insert(SIZE_KEY, &5u64.to_be_bytes()[..]).unwrap();
        let s = Snapshot::from_db(&db).unwrap();
        let err = s.records().last().unwrap().unwrap_err();
        assert!(
            matches!(err, LedgerError::MissingRecord { index: 5, .. }),
            "{err}"
        );
        let problems = s.check();
        assert!(
            problems.iter().any(|p| matches!(
                p,
                StateProblem::RecordsRemoved {
                    signed: 6,
                    stored: 5
                }
            )),
            "{problems:?}"
        );
    }
}
