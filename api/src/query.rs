//! Query strings of the `GET` routes.
//!
//! Clients build them with [`QueryString`], the one place that percent-encodes, and the
//! daemon parses the same structs (with unknown parameters refused), so both sides agree on
//! names and types.

use serde::{Deserialize, Serialize};

/// Builds `path?k=v&k=v`, percent-encoding every value (RFC 3986 unreserved characters pass
/// through; everything else, `+`, `&`, `=` and non-ASCII included, is `%XX`).
#[derive(Debug, Clone, Default)]
pub struct QueryString {
    pairs: Vec<(&'static str, String)>,
}

impl QueryString {
    /// An empty query.
    pub fn new() -> QueryString {
        QueryString::default()
    }

    /// Adds `key=value`.
    pub fn push(mut self, key: &'static str, value: impl std::fmt::Display) -> QueryString {
        self.pairs.push((key, value.to_string()));
        self
    }

    /// Adds `key=value` when there is a value.
    pub fn push_opt(self, key: &'static str, value: Option<impl std::fmt::Display>) -> Self {
        match value {
            Some(v) => self.push(key, v),
            None => self,
        }
    }

    /// `path` followed by `?` and the pairs, or `path` alone when there are none.
    pub fn to_path(&self, path: &str) -> String {
        if self.pairs.is_empty() {
            return path.to_owned();
        }
        let pairs: Vec<String> = self
            .pairs
            .iter()
            .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
            .collect();
        format!("{path}?{}", pairs.join("&"))
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(char::from(b))
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// `GET /v1/usage`: one page of usage records, optionally of one tenant and one lease.
///
/// A page holds the matching records with id greater than `after`, in id order, at most
/// `limit` of them; the answer's `next_after` is the `after` of the next page (absent once
/// the end of the ledger was reached). The node also stops a page after scanning
/// [`USAGE_SCAN_MAX`] records, matching or not, so a page can hold fewer than `limit`
/// records (even none) and still have a `next_after`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageQuery {
    /// Only this tenant's records (a tenant always sees only its own).
    pub tenant: Option<String>,
    /// Only this lease's records.
    pub lease: Option<String>,
    /// Only records with a greater id; default: from the ledger's first record.
    pub after: Option<u64>,
    /// At most this many records; default [`USAGE_LIMIT_DEFAULT`], at most
    /// [`USAGE_LIMIT_MAX`] (a larger one is refused with 400).
    pub limit: Option<u64>,
}

/// Records in a `GET /v1/usage` page when the query names no `limit`.
pub const USAGE_LIMIT_DEFAULT: u64 = 1_000;
/// The largest `limit` a `GET /v1/usage` query may ask for.
pub const USAGE_LIMIT_MAX: u64 = 10_000;
/// The most ledger records one `GET /v1/usage` page scans (matching or not) before it
/// answers with what it found and a `next_after`: a tenant with few records cannot make one
/// request walk a whole large ledger.
pub const USAGE_SCAN_MAX: u64 = 100_000;

impl UsageQuery {
    /// The request path.
    pub fn path(&self) -> String {
        QueryString::new()
            .push_opt("tenant", self.tenant.as_deref())
            .push_opt("lease", self.lease.as_deref())
            .push_opt("after", self.after)
            .push_opt("limit", self.limit)
            .to_path("/v1/usage")
    }
}

/// `GET /v1/bill`: a tenant's invoice over an optional period.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BillQuery {
    /// The tenant billed.
    pub tenant: String,
    /// Start (RFC 3339 or YYYY-MM-DD), inclusive.
    pub from: Option<String>,
    /// End (RFC 3339 or YYYY-MM-DD), exclusive.
    pub to: Option<String>,
}

impl BillQuery {
    /// The request path.
    pub fn path(&self) -> String {
        QueryString::new()
            .push("tenant", &self.tenant)
            .push_opt("from", self.from.as_deref())
            .push_opt("to", self.to.as_deref())
            .to_path("/v1/bill")
    }
}

/// `GET /v1/audit/records`: `records.jsonl` for records `0..size`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordsQuery {
    /// Records `0..size`; default: the current checkpoint's size.
    pub size: Option<u64>,
}

impl RecordsQuery {
    /// The request path.
    pub fn path(&self) -> String {
        QueryString::new()
            .push_opt("size", self.size)
            .to_path("/v1/audit/records")
    }
}

/// `GET /v1/audit/consistency`: a consistency proof from an older size to the current one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsistencyQuery {
    /// The older tree size.
    pub from: u64,
}

impl ConsistencyQuery {
    /// The request path.
    pub fn path(&self) -> String {
        QueryString::new()
            .push("from", self.from)
            .to_path("/v1/audit/consistency")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_every_value() {
        let q = BillQuery {
            tenant: "hyd speech&x=1".into(),
            from: Some("2026-01-01T00:00:00+05:30".into()),
            to: None,
        };
        assert_eq!(
            q.path(),
            "/v1/bill?tenant=hyd%20speech%26x%3D1&from=2026-01-01T00%3A00%3A00%2B05%3A30"
        );
        assert_eq!(UsageQuery::default().path(), "/v1/usage");
        let page = UsageQuery {
            tenant: Some("t".into()),
            after: Some(41),
            limit: Some(5),
            ..UsageQuery::default()
        };
        assert_eq!(page.path(), "/v1/usage?tenant=t&after=41&limit=5");
        assert_eq!(
            RecordsQuery { size: Some(7) }.path(),
            "/v1/audit/records?size=7"
        );
        assert_eq!(encode("₹"), "%E2%82%B9");
        assert_eq!(LeasesQuery::default().path(), "/v1/leases");
        let q = LeasesQuery {
            after: Some("lease-1".into()),
            limit: Some(2),
            state: Some(crate::lease::LeaseState::Active),
        };
        assert_eq!(q.path(), "/v1/leases?after=lease-1&limit=2&state=active");
    }
}

/// `GET /v1/leases`: one page of the leases the caller may see.
///
/// A page holds the leases whose id comes after `after` (from the first when absent), in id
/// order, at most `limit` of them, only those in `state` when given; the answer's
/// `next_after` is the `after` of the next page, absent on the last. A node keeps every lease
/// it ever had, so no answer holds them all at once.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeasesQuery {
    /// Only leases whose id comes after this one; default: from the first.
    pub after: Option<String>,
    /// At most this many leases; default and at most [`LEASES_LIMIT_MAX`] (a larger one, or
    /// 0, is refused with 400).
    pub limit: Option<u64>,
    /// Only leases in this state (`active`, `ended`).
    pub state: Option<crate::lease::LeaseState>,
}

/// The most leases a `GET /v1/leases` page holds, and the default.
pub const LEASES_LIMIT_MAX: u64 = 1_000;

impl LeasesQuery {
    /// The request path (percent-encoded).
    pub fn path(&self) -> String {
        QueryString::new()
            .push_opt("after", self.after.as_deref())
            .push_opt("limit", self.limit)
            .push_opt("state", self.state.map(|s| s.as_str()))
            .to_path("/v1/leases")
    }
}

/// `GET /v1/leases/{id}/jobs`: one page of a lease's jobs.
///
/// A page holds the jobs after the job `after` (from the first when absent), oldest first, at
/// most `limit` of them; the answer's `next_after` is the `after` of the next page, absent on
/// the last. A lease that runs short jobs in a loop (a render farm's burst) has as many
/// records as jobs, so no answer holds them all at once.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobsQuery {
    /// Only jobs started after this one; default: from the lease's first job.
    pub after: Option<String>,
    /// At most this many jobs; default and at most [`JOBS_LIMIT_MAX`] (a larger one, or 0, is
    /// refused with 400).
    pub limit: Option<u64>,
}

/// The most jobs a `GET /v1/leases/{id}/jobs` page holds, and the default.
pub const JOBS_LIMIT_MAX: u64 = 1_000;

impl JobsQuery {
    /// The request path for lease `lease` (percent-encoded).
    pub fn path(&self, lease: &str) -> String {
        QueryString::new()
            .push_opt("after", self.after.as_deref())
            .push_opt("limit", self.limit)
            .to_path(&format!("/v1/leases/{}/jobs", encode(lease)))
    }
}

/// `GET /v1/leases/{id}/jobs/{job}/logs`: the job's output (stdout and stderr interleaved).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogsQuery {
    /// Keep the answer open and stream new output until the job ends.
    #[serde(default)]
    pub follow: bool,
}

impl LogsQuery {
    /// The request path for job `job` of lease `lease` (ids are percent-encoded).
    pub fn path(&self, lease: &str, job: &str) -> String {
        QueryString::new()
            .push_opt("follow", self.follow.then_some("true"))
            .to_path(&format!(
                "/v1/leases/{}/jobs/{}/logs",
                encode(lease),
                encode(job)
            ))
    }
}
