//! Subcommands shared by the `hostd` and `sovctl` binaries, one module per area.

pub mod audit;
pub mod policy;
