//! # hostd-api — the words hostd and its clients share
//!
//! The daemon (`hostd`) answers these types and `sovctl` (or any other client) reads them;
//! neither side walks untyped JSON. The crate holds no I/O beyond reading a profile file, so a
//! client that links it links nothing of the daemon (no database, no HTTP server, no NVML).
//!
//! - [`tenant`], [`lease`], [`gpu`], [`job`]: the resources, and the bodies that create them;
//! - [`file`]: files in a lease's scratch (upload answers, directory listings);
//! - [`answer`]: the other answers (health, lists, receipts, evidence) and the error body;
//! - [`query`]: the query strings of the `GET` routes, built by one URL-encoding helper;
//! - [`profile`]: a client profile (`profile.toml`): where a node is and which certificate
//!   proves who we are to it.

#![warn(missing_docs)]

pub mod answer;
pub mod file;
pub mod gpu;
pub mod job;
pub mod lease;
pub mod profile;
pub mod query;
pub mod tenant;
