//! # attest — evidence and the tamper-evident usage log
//!
//! Everything an outsider needs to check a Sovereign Host node lives here, as pure,
//! deterministic code with no I/O, no async runtime and no database: the daemon (`hostd`)
//! owns storage and networking, and auditors can link this crate (or re-implement the
//! public formats it follows) without trusting the daemon.
//!
//! * [`log`] — an RFC 6962 / RFC 9162 Merkle tree over opaque leaves, with inclusion and
//!   consistency proofs, behind a small storage trait so the daemon can keep it in sled,
//!   and a streaming root computer for auditors.
//! * [`note`] — C2SP signed notes with Ed25519 keys (golang.org/x/mod/sumdb/note compatible).
//! * [`checkpoint`] — C2SP tlog checkpoints: the log's signed tree heads.
//! * [`receipt`] — C2SP tlog proofs: a record's inclusion proof with its signed checkpoint.
//! * [`identity`] — the node's Ed25519 identity and its enrollment certificate, the only source
//!   of a node's jurisdiction claim.
//! * [`evidence`] — signed EAT-shaped evidence over a verifier nonce, with one submodule per GPU
//!   and GPU nonces derived from the challenge; [`canonical`] is its deterministic encoding.
//! * [`nvidia`] — NVIDIA SPDM attestation reports and their certificate chains; [`rim`] the
//!   reference integrity manifests with golden measurements.
//! * [`manifest`] — signed image manifests (reference measurements of the host image).
//! * [`tpm`] — TPM 2.0 quotes over PCRs 4, 7, 11 and 12, signed by an enrolled attestation
//!   key.
//! * [`eventlog`] — the firmware's TCG event log: the EFI applications a quoted PCR 4 vouches for.
//! * [`verifier`] — appraisal of evidence into signed EAR-style results ([`ear`]).
//! * [`report`] — an error shown with its causes, as every crate of the workspace shows them.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod canonical;
pub mod checkpoint;
pub mod ear;
pub mod eventlog;
pub mod evidence;
pub mod identity;
pub mod log;
pub mod manifest;
pub mod note;
pub mod nvidia;
pub mod receipt;
pub mod report;
pub mod rim;
pub mod tpm;
pub mod verifier;
