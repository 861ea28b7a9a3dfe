//! # policy — data-residency decisions with reasons
//!
//! A pure library (no I/O, no async) that `hostd` consults before every placement, storage
//! and egress action. Filled in by the policy-engine issue.
#![forbid(unsafe_code)]
