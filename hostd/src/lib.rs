//! # hostd — the Sovereign Host node daemon
//!
//! The imperative shell around the pure `attest` and `policy` crates: storage (sled), the mTLS
//! API, GPUs through NVML, leases, metering into the signed ledger, and audit export.

pub mod admission;
pub mod api;
pub mod attestation;
pub mod audit;
pub mod cli;
pub mod clock;
pub mod config;
pub mod daemon;
#[cfg(feature = "dev")]
pub mod dev;
pub mod failures;
pub mod gpu;
pub mod keys;
pub mod lease;
pub mod ledger;
pub mod limits;
pub mod meter;
pub mod metrics;
pub mod node;
pub mod pki;
pub mod principal;
pub mod recover;
pub mod residency;
pub mod state;
pub mod tls;
pub mod witness;
pub mod workload;
