//! Tenants' work: jobs as locked-down systemd transient units.
//!
//! The sandbox a job runs in, written as the systemd unit properties that enforce it
//! ([`sandbox`]), and the adapter that starts, watches and stops units over systemd's D-Bus
//! API ([`units`]), behind the [`units::UnitManager`] trait so that it can be driven against a
//! fake `org.freedesktop.systemd1` in tests and the real one on a node. The jobs controller
//! ([`runner`]) over one job's pure logic ([`job`]). The device nodes a lease may open
//! ([`devices`], the UVM major read from `/proc/devices`); a uid per lease ([`uids`]),
//! published as a user record ([`accounts`]); per-lease scratch directories encrypted under a
//! key only the kernel holds, crypto-erased at lease end ([`scratch`]), into and out of which files are copied without
//! ever following a link a job planted ([`confined`]); a network namespace
//! per lease whose only way out is an nftables filter built from the lease's egress
//! allow-list, with byte counters ([`egress`]), because systemd's IP rules cannot allow a
//! job's own loopback without the host's; and published service ports, forwarded in userspace
//! from a node address into the lease's namespace so their bytes are counted exactly
//! ([`publish`]). Dev mode runs all of it under a private systemd in a container
//! ([`container`]), where running jobs make their simulated GPUs busy (`simload`). What each job used is cut into one ledger record per UTC hour and one at
//! its end by pure logic ([`metering`]), so the node writes nothing inside an hour however
//! many jobs it meters every second.

pub mod accounts;
pub mod confined;
pub mod container;
pub mod devices;
pub mod egress;
pub mod job;
pub mod metering;
pub mod publish;
pub mod runner;
pub mod sandbox;
pub mod scratch;
#[cfg(feature = "dev")]
pub mod simload;
pub mod uids;
pub mod units;

/// Whether `name` (a lease or job id) is 1 to `max` characters of `[A-Za-z0-9_-]`: safe as a
/// path component, a network namespace, interface or nftables name, or a place in the store's
/// keys, so nothing derived from it reads as syntax.
pub fn is_plain_name(name: &str, max: usize) -> bool {
    !name.is_empty()
        && name.len() <= max
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}
