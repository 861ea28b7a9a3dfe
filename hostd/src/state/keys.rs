//! Keys of the `leases` tree, built in one place so the layout of a state directory is
//! written down once (`docs/operations.md`, "State") and no call site formats its own.
//!
//! | key | value |
//! | --- | --- |
//! | `lease/<id>` | a lease |
//! | `cursor/<lease>/<gpu uuid>` | the meter cursor of one GPU of a lease |
//! | `intent` | the pending write-ahead intent, if any |
//! | `attestation-latest` | the id of the latest attestation record |
//! | `gpu-snapshot` | the GPU inventory the metering loop compared last |
//! | `jobmeter/<job>` | the meter cursor of one running job (where its last record stopped) |

use std::fmt;

/// A key of the `leases` tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeasesKey<'a> {
    /// `lease/<id>`.
    Lease(&'a str),
    /// `cursor/<lease>/<gpu>`.
    Cursor {
        /// The lease id.
        lease: &'a str,
        /// The GPU's UUID.
        gpu: &'a str,
    },
    /// `intent`.
    Intent,
    /// `attestation-latest`.
    LatestAttestation,
    /// `gpu-snapshot`.
    GpuSnapshot,
    /// `jobmeter/<job>`.
    JobCursor {
        /// The job id.
        job: &'a str,
    },
}

/// Prefix of every lease key.
pub const LEASE_PREFIX: &str = "lease/";

/// Prefix of every meter cursor.
pub const CURSOR_PREFIX: &str = "cursor/";

/// Prefix of every job's meter cursor. Not under `cursor/`, whose entries are GPU cursors
/// read as such at start.
pub const JOB_CURSOR_PREFIX: &str = "jobmeter/";

/// Prefix of the cursors of one lease.
pub fn cursor_prefix(lease: &str) -> String {
    format!("{CURSOR_PREFIX}{lease}/")
}

impl LeasesKey<'_> {
    /// The key as stored.
    pub fn key(self) -> String {
        self.to_string()
    }
}

impl fmt::Display for LeasesKey<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeasesKey::Lease(id) => write!(f, "{LEASE_PREFIX}{id}"),
            LeasesKey::Cursor { lease, gpu } => write!(f, "{}{gpu}", cursor_prefix(lease)),
            LeasesKey::Intent => f.write_str("intent"),
            LeasesKey::LatestAttestation => f.write_str("attestation-latest"),
            LeasesKey::GpuSnapshot => f.write_str("gpu-snapshot"),
            LeasesKey::JobCursor { job } => write!(f, "{JOB_CURSOR_PREFIX}{job}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stored layout is a compatibility promise: existing state directories use it.
    #[test]
    fn keys_keep_their_stored_form() {
        assert_eq!(LeasesKey::Lease("lease-1").key(), "lease/lease-1");
        let c = LeasesKey::Cursor {
            lease: "lease-1",
            gpu: "GPU-0",
        };
        assert_eq!(c.key(), "cursor/lease-1/GPU-0");
        assert!(c.key().starts_with(&cursor_prefix("lease-1")));
        assert_eq!(LeasesKey::Intent.key(), "intent");
        assert_eq!(LeasesKey::LatestAttestation.key(), "attestation-latest");
        assert_eq!(LeasesKey::GpuSnapshot.key(), "gpu-snapshot");
        let j = LeasesKey::JobCursor { job: "job-1" };
        assert_eq!(j.key(), "jobmeter/job-1");
        assert!(j.key().starts_with(JOB_CURSOR_PREFIX));
        assert!(!j.key().starts_with(CURSOR_PREFIX) && !j.key().starts_with(LEASE_PREFIX));
    }
}
