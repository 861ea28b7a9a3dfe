//! A uid (and gid) per lease, from a range hostd manages.
//!
//! Jobs of one lease share a uid, so their files in the lease's scratch are theirs; jobs of
//! different leases never do, so one tenant's process cannot signal, trace or read another's.
//! The range is hostd's alone (not in /etc/passwd, never 0), and a uid is free again only when
//! its lease has ended and every unit of it is gone.

use std::collections::BTreeMap;

/// The range hostd gives out, `[first, first + count)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UidRange {
    /// First uid (and gid) of the range; never 0.
    pub first: u32,
    /// How many.
    pub count: u32,
}

/// The default range: above the usual system and user ranges, below systemd's DynamicUser
/// range (61184–65519).
pub const DEFAULT_RANGE: UidRange = UidRange {
    first: 60_000,
    count: 1_000,
};

// The default range stays clear of systemd's DynamicUser range.
const _: () = assert!(DEFAULT_RANGE.first + DEFAULT_RANGE.count <= 61_184);

/// Why no uid could be given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UidError {
    #[error("all {count} job uids from {first} are in use by live leases")]
    Exhausted { first: u32, count: u32 },
    #[error("the uid range must not include 0 and must not overflow")]
    BadRange,
}

/// Which uid each live lease holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UidPool {
    range: UidRange,
    by_lease: BTreeMap<String, u32>,
}

impl UidPool {
    /// An empty pool over `range`.
    pub fn new(range: UidRange) -> Result<UidPool, UidError> {
        if range.first == 0 || range.first.checked_add(range.count).is_none() {
            return Err(UidError::BadRange);
        }
        Ok(UidPool {
            range,
            by_lease: BTreeMap::new(),
        })
    }

    /// The lease's uid: the one it holds, or the lowest free one.
    pub fn assign(&mut self, lease: &str) -> Result<u32, UidError> {
        if let Some(u) = self.by_lease.get(lease) {
            return Ok(*u);
        }
        let used: std::collections::BTreeSet<u32> = self.by_lease.values().copied().collect();
        let free = (self.range.first..self.range.first + self.range.count)
            .find(|u| !used.contains(u))
            .ok_or(UidError::Exhausted {
                first: self.range.first,
                count: self.range.count,
            })?;
        self.by_lease.insert(lease.to_owned(), free);
        Ok(free)
    }

    /// Records that `lease` holds `uid` (re-adoption after a restart).
    pub fn restore(&mut self, lease: &str, uid: u32) {
        self.by_lease.insert(lease.to_owned(), uid);
    }

    /// Leases holding a uid.
    pub fn leases(&self) -> Vec<String> {
        self.by_lease.keys().cloned().collect()
    }

    /// Gives the lease's uid back (its lease ended and its units are gone).
    pub fn release(&mut self, lease: &str) -> Option<u32> {
        self.by_lease.remove(lease)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Leases never share a uid while both live; a released uid is reused; the range is
    /// bounded and never includes root.
    #[test]
    fn one_uid_per_live_lease() {
        assert_eq!(
            UidPool::new(UidRange { first: 0, count: 5 }).unwrap_err(),
            UidError::BadRange
        );
        let mut p = UidPool::new(UidRange {
            first: 60_000,
            count: 2,
        })
        .unwrap();
        let a = p.assign("lease-a").unwrap();
        let b = p.assign("lease-b").unwrap();
        assert_ne!(a, b);
        assert_eq!(p.assign("lease-a").unwrap(), a, "stable for a lease");
        assert!(matches!(
            p.assign("lease-c").unwrap_err(),
            UidError::Exhausted { .. }
        ));
        assert_eq!(p.release("lease-a"), Some(a));
        assert_eq!(p.assign("lease-c").unwrap(), a);
    }
}
