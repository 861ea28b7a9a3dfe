//! Tenants' work: jobs as locked-down systemd transient units.
//!
//! This is the first part of the workload area (issue 11): the sandbox a job runs in, written
//! as the systemd unit properties that enforce it ([`sandbox`]), and the adapter that starts
//! and stops units over systemd's D-Bus API ([`units`]), behind the [`units::UnitManager`]
//! trait so that it can be driven against a fake `org.freedesktop.systemd1` in tests and the
//! real one on a node; the device nodes a lease may open ([`devices`], the UVM major read
//! from `/proc/devices`); a uid per lease ([`uids`]); a network namespace per lease whose
//! only way out is an nftables filter built from the lease's egress allow-list, with byte
//! counters ([`egress`]), because systemd's IP rules cannot allow a job's own loopback without
//! the host's; and published service ports, forwarded in userspace from a node address into
//! the lease's namespace so their bytes are counted exactly ([`publish`]). Jobs, the API and
//! scratch storage build on these.

pub mod devices;
pub mod egress;
pub mod publish;
pub mod sandbox;
pub mod uids;
pub mod units;
