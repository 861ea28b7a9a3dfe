//! Subcommands shared by the `hostd` and `sovctl` binaries, one module per area.

pub mod attest;
pub mod audit;
pub mod policy;
