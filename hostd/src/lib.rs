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
pub mod clock;
pub mod config;
pub mod lease;
pub mod meter;
pub mod store;
pub mod tenant;
pub mod billing;
pub mod node;
pub mod residency;
pub mod api;
pub mod metrics;
pub mod daemon;
pub mod dev;
pub mod principal;
pub mod pki;
pub mod tls;
pub mod client;
