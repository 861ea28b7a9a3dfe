//! # hostd — the Sovereign Host node daemon
//!
//! The imperative shell around the pure `attest` and `policy` crates: storage (sled), the mTLS
//! API, GPUs through NVML, leases, metering into the signed ledger, and audit export.

pub mod audit;
pub mod cli;
pub mod gpu;
pub mod keys;
pub mod ledger;
pub mod record;
