//! # sovctl — the client of a Sovereign Host node
//!
//! The operator's, tenant's and auditor's tool. It links the pure libraries (`attest`,
//! `policy`, `auditor`), the shared API types (`hostd-api`) and a TLS client, and never the
//! daemon: no database, no HTTP server, no NVML.
//!
//! - [`client`]: the mTLS API client, typed end to end;
//! - [`tls`]: its TLS configuration; `upload`: an upload's streamed request body;
//! - [`cli`]: the subcommands, with one failure idiom and exit-code convention.

pub mod cli;
pub mod client;
pub mod tls;
mod upload;
