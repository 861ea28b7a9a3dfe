//! # attest — evidence and the tamper-evident usage log
//!
//! Everything an outsider needs to check a Sovereign Host node lives here, as pure,
//! deterministic code with no I/O, no async runtime and no database: the daemon (`hostd`)
//! owns storage and networking, and auditors can link this crate (or re-implement the
//! public formats it follows) without trusting the daemon.
//!
//! * [`log`] — an RFC 6962 / RFC 9162 Merkle tree over opaque leaves, with inclusion and
//!   consistency proofs, behind a small storage trait so the daemon can keep it in sled.
#![forbid(unsafe_code)]

pub mod log;
