//! # auditor — what an auditor needs to check a Sovereign Host bill
//!
//! This crate is the specification, in code, of the node's usage records, of the bill computed
//! from them, and of an **audit export**: a directory that anyone can verify offline with
//! nothing but the node's verifier key. It depends only on the pure `attest` crate (Merkle
//! log, signed notes and checkpoints, receipts) and on `serde`: no database, no async runtime,
//! no GPU library, so an auditor builds only this to check a bill. The node daemon (`hostd`)
//! writes the records and exports with these same types.
//!
//! ## Records ([`record`])
//!
//! Each leaf of the ledger is exactly one [`record::Record`] serialised as compact JSON (no
//! trailing newline); its `id` is its leaf index. Money is integer paise ([`money`]), so
//! totals add up exactly, and a bill ([`billing`]) is a pure function of the records.
//!
//! ## The export ([`layout`], [`export`])
//!
//! ```text
//! DIR/checkpoint                 signed C2SP tlog-checkpoint note
//! DIR/log.vkey                   the log's verifier key, one line
//! DIR/records.jsonl              record i is line i (its exact leaf bytes), '\n' after each
//! DIR/receipts/<id>.tlog-proof   optional C2SP tlog-proof receipts
//! ```
//!
//! The file names and the text format of consistency proofs between two checkpoints are
//! defined once, in [`layout`]; [`export::write_export`] writes a directory. The format is
//! specified, with worked examples, in `docs/audit.md`.
//!
//! ## Verification ([`source`], [`check`], [`stream`], [`verify`], [`summary`])
//!
//! The verifier reads an export only through the [`source::ExportSource`] trait (a directory:
//! [`source::DirSource`]), so all side effects sit behind one small interface and the rest is
//! pure logic. [`verify::verify_export`] checks, in order:
//!
//! 1. **the key**: a pinned key, or the export's own (a [`finding::Warning`] says it is then
//!    self-asserted);
//! 2. **the checkpoint**: its signature by that key (fatal otherwise: [`verify::VerifyError`]);
//! 3. **the previous checkpoint** and, optionally, a consistency proof to the export's;
//! 4. **receipts**: each names its record and proves it into a checkpoint signed by the key;
//! 5. **the records**: one streaming pass over `records.jsonl` ([`stream`]) recomputes the
//!    RFC 6962 root at every size of interest, checks every line on its own and against the
//!    records before it ([`check`]: one tenant per lease, no GPU time of a lease billed twice,
//!    no GPU billed to two leases for the same time, `prev` and `attestation` references) and
//!    totals the usage that passes per tenant.
//!
//! Everything found is a typed [`finding::Finding`] (or [`finding::Warning`]) carrying its evidence (sizes, computed and
//! signed roots, record index, file); its `Display` is the message `sovctl audit verify`
//! prints, and it serialises to JSON. [`summary::format_summary`] renders a valid report.

#![warn(missing_docs)]

pub mod billing;
pub mod check;
pub mod export;
pub mod finding;
pub mod layout;
pub mod money;
pub mod record;
pub mod source;
pub mod stream;
pub mod summary;
pub mod verify;

mod ser;
#[cfg(test)]
mod testutil;
mod time;
