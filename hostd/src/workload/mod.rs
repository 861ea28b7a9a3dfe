//! Tenants' work: jobs as locked-down systemd transient units.
//!
//! This is the first part of the workload area (issue 11): the sandbox a job runs in, written
//! as the systemd unit properties that enforce it ([`sandbox`]), and the adapter that starts
//! and stops units over systemd's D-Bus API ([`units`]), behind the [`units::UnitManager`]
//! trait so that it can be driven against a fake `org.freedesktop.systemd1` in tests and the
//! real one on a node; the device nodes a lease may open ([`devices`], the UVM major read
//! from `/proc/devices`); a uid per lease ([`uids`]); and per-lease scratch directories
//! encrypted under a key only the kernel holds, crypto-erased at lease end ([`scratch`]). Jobs,
//! the API and network namespaces build on these.

pub mod accounts;
pub mod container;
pub mod devices;
pub mod job;
pub mod runner;
pub mod sandbox;
pub mod scratch;
pub mod uids;
pub mod units;
