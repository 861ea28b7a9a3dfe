//! Who gets a connection, and how many: the API's admission control.
//!
//! One client must never lock out the others, the operator above all. Three bounds, each
//! enforced without ever blocking the accept loop:
//!
//! - **Handshaking** ([`Handshaking`]): connections that have not finished TLS (a stranger's
//!   idle sockets, a slow handshake) share a small pool and a short timeout; when the pool is
//!   full the *oldest* pending handshake is dropped for the newcomer, so a flood of idle
//!   sockets delays nobody whose handshake takes milliseconds.
//! - **Authenticated connections** ([`Admission`]): per principal, all tenants together, and
//!   all principals together. Tenants can never take the slots kept for operators and
//!   auditors.
//! - **Requests in flight per principal** ([`InFlight`]): beyond it, 429 at once.
//! - **A tenant's request rate** ([`RequestRate`]): a token bucket per tenant, so that one
//!   tenant's loop of requests cannot take the node's time from the others, nor grow the
//!   signed ledger (every download, listing and refused download is a `transfer` record) as
//!   fast as it can send. Beyond it, 429 with `Retry-After`. Operators and auditors are not
//!   rate-limited: they are few, and an export or a bill must not stall behind a quota.
//!
//! Refusals are counted and logged at most once per interval per kind ([`LogLimiter`]),
//! never a line per connection.

use crate::principal::{Principal, Role};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Connections still in the TCP/TLS handshake, oldest dropped first when full.
#[derive(Debug)]
pub struct Handshaking {
    max: usize,
    next: AtomicU64,
    pending: Mutex<BTreeMap<u64, oneshot::Sender<()>>>,
}

/// A place among the handshaking connections; leaving happens on drop.
#[derive(Debug)]
pub struct HandshakeSlot {
    id: u64,
    pool: Arc<Handshaking>,
    /// Resolves when this connection was dropped for a newer one.
    pub evicted: oneshot::Receiver<()>,
}

impl Handshaking {
    /// A pool of `max` pending handshakes.
    pub fn new(max: usize) -> Arc<Handshaking> {
        Arc::new(Handshaking {
            max: max.max(1),
            next: AtomicU64::new(0),
            pending: Mutex::new(BTreeMap::new()),
        })
    }

    /// Enters a new connection; returns its slot and whether an older one was dropped.
    pub fn enter(self: &Arc<Self>) -> (HandshakeSlot, bool) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        let mut pending = lock(&self.pending);
        let mut evicted = false;
        while pending.len() >= self.max {
            if let Some((_, oldest)) = pending.pop_first() {
                let _ = oldest.send(());
                evicted = true;
            }
        }
        pending.insert(id, tx);
        (
            HandshakeSlot {
                id,
                pool: self.clone(),
                evicted: rx,
            },
            evicted,
        )
    }

    /// Connections handshaking now.
    pub fn len(&self) -> usize {
        lock(&self.pending).len()
    }

    /// Whether no connection is handshaking.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for HandshakeSlot {
    fn drop(&mut self) {
        lock(&self.pool.pending).remove(&self.id);
    }
}

/// Bounds on authenticated connections.
#[derive(Debug, Clone)]
pub struct Limits {
    /// All principals together.
    pub total: usize,
    /// All tenants together (the rest is kept for operators and auditors).
    pub tenants: usize,
    /// One principal.
    pub per_principal: usize,
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    tenants: usize,
    by_principal: HashMap<String, usize>,
}

/// Authenticated connections, counted per principal, per role class and in total.
#[derive(Debug)]
pub struct Admission {
    limits: Limits,
    counts: Mutex<Counts>,
}

/// Why a connection was refused after the handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The principal holds its maximum of connections.
    Principal,
    /// Tenants together hold theirs.
    Tenants,
    /// The node holds its maximum.
    Total,
}

/// An admitted connection; its counts are released on drop.
#[derive(Debug)]
pub struct Admitted {
    admission: Arc<Admission>,
    key: String,
    tenant: bool,
}

impl Admission {
    /// Admission under `limits`.
    pub fn new(limits: Limits) -> Arc<Admission> {
        Arc::new(Admission {
            limits,
            counts: Mutex::new(Counts::default()),
        })
    }

    /// Admits a connection of `p`, or says which bound refuses it.
    pub fn admit(self: &Arc<Self>, p: &Principal) -> Result<Admitted, Refusal> {
        let key = p.spiffe_uri();
        let tenant = p.role == Role::Tenant;
        let mut c = lock(&self.counts);
        if c.total >= self.limits.total {
            return Err(Refusal::Total);
        }
        if tenant && c.tenants >= self.limits.tenants {
            return Err(Refusal::Tenants);
        }
        let mine = c.by_principal.get(&key).copied().unwrap_or(0);
        if mine >= self.limits.per_principal {
            return Err(Refusal::Principal);
        }
        c.total += 1;
        if tenant {
            c.tenants += 1;
        }
        c.by_principal.insert(key.clone(), mine + 1);
        Ok(Admitted {
            admission: self.clone(),
            key,
            tenant,
        })
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut c = lock(&self.admission.counts);
        c.total = c.total.saturating_sub(1);
        if self.tenant {
            c.tenants = c.tenants.saturating_sub(1);
        }
        if let Some(n) = c.by_principal.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                c.by_principal.remove(&self.key);
            }
        }
    }
}

/// Requests in flight per principal.
#[derive(Debug)]
pub struct InFlight {
    per_principal: usize,
    semaphores: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl InFlight {
    /// At most `per_principal` requests of one principal at once.
    pub fn new(per_principal: usize) -> Arc<InFlight> {
        Arc::new(InFlight {
            per_principal: per_principal.max(1),
            semaphores: Mutex::new(HashMap::new()),
        })
    }

    /// A permit for one request of `p`, or `None` when it has its maximum in flight.
    pub fn try_start(&self, p: &Principal) -> Option<OwnedSemaphorePermit> {
        let sem = {
            let mut map = lock(&self.semaphores);
            // Forget principals with nothing in flight, so the map stays small.
            if map.len() > 4096 {
                let full = self.per_principal;
                map.retain(|_, s| s.available_permits() < full);
            }
            map.entry(p.spiffe_uri())
                .or_insert_with(|| Arc::new(Semaphore::new(self.per_principal)))
                .clone()
        };
        sem.try_acquire_owned().ok()
    }
}

/// A tenant's sustained requests a second and the burst it may send at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Requests a second, sustained (at least 1).
    pub per_sec: u32,
    /// Requests that may come at once after a quiet spell (at least 1).
    pub burst: u32,
}

impl Rate {
    /// Time between two requests at the sustained rate.
    fn interval(self) -> Duration {
        Duration::from_secs(1) / self.per_sec.max(1)
    }

    /// How far ahead of the sustained rate a tenant may run: its burst less the one request.
    fn tolerance(self) -> Duration {
        self.interval() * (self.burst.max(1) - 1)
    }
}

/// One tenant's bucket, kept as the generic cell rate algorithm keeps it: the time at which
/// the tenant's requests so far would have been spent at the sustained rate (its theoretical
/// arrival time). Whole durations, so waits are exact.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tat: Instant,
}

impl Bucket {
    /// Takes a request at `now`, or says how long until one may come.
    fn take(&mut self, rate: Rate, now: Instant) -> Result<(), Duration> {
        let tat = self.tat.max(now);
        let ahead = tat - now;
        if ahead > rate.tolerance() {
            return Err(ahead - rate.tolerance());
        }
        self.tat = tat + rate.interval();
        Ok(())
    }

    /// Whether the bucket has refilled by `now` (as if the tenant had never been seen).
    fn is_full(&self, now: Instant) -> bool {
        self.tat <= now
    }
}

/// Tenants' request rates: one [`Bucket`] per tenant, none without a [`Rate`].
#[derive(Debug)]
pub struct RequestRate {
    rate: Option<Rate>,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl RequestRate {
    /// Tenants held to `rate`; `None` lets every request through.
    pub fn new(rate: Option<Rate>) -> Arc<RequestRate> {
        Arc::new(RequestRate {
            rate,
            buckets: Mutex::new(HashMap::new()),
        })
    }

    /// Whether `p` may send a request at `now`: `Err` with the time until it may, for a
    /// tenant that has spent its burst. Operators and auditors always may.
    pub fn admit(&self, p: &Principal, now: Instant) -> Result<(), Duration> {
        let Some(rate) = self.rate else {
            return Ok(());
        };
        if p.role != Role::Tenant {
            return Ok(());
        }
        let mut buckets = lock(&self.buckets);
        // Forget tenants whose bucket has refilled: they are as if never seen.
        if buckets.len() > 4096 {
            buckets.retain(|_, b| !b.is_full(now));
        }
        buckets
            .entry(p.name.clone())
            .or_insert(Bucket { tat: now })
            .take(rate, now)
    }
}

/// At most one log line per kind per interval, with the count of events since the last one.
#[derive(Debug)]
pub struct LogLimiter {
    every: Duration,
    seen: Mutex<HashMap<&'static str, (Option<Instant>, u64)>>,
}

impl LogLimiter {
    /// One line per kind per `every`.
    pub fn new(every: Duration) -> LogLimiter {
        LogLimiter {
            every,
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// Counts an event of `kind` at `now`; `Some(n)` when a line is due, `n` events since
    /// the last line (this one included).
    pub fn hit(&self, kind: &'static str, now: Instant) -> Option<u64> {
        let mut seen = lock(&self.seen);
        let (last, count) = seen.entry(kind).or_insert((None, 0));
        *count += 1;
        if last.is_none_or(|t| now.duration_since(t) >= self.every) {
            *last = Some(now);
            return Some(std::mem::take(count));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(role: Role, name: &str) -> Principal {
        Principal::new("sovereign.local", role, name).unwrap()
    }

    /// A tenant cannot take more than its share, tenants together cannot take the slots
    /// kept for operators, and slots come back when connections close.
    #[test]
    fn tenants_never_starve_operators() {
        let a = Admission::new(Limits {
            total: 10,
            tenants: 6,
            per_principal: 4,
        });
        let evil = p(Role::Tenant, "evil");
        let held: Vec<_> = (0..4).map(|_| a.admit(&evil).unwrap()).collect();
        assert_eq!(a.admit(&evil).unwrap_err(), Refusal::Principal);
        let other: Vec<_> = (0..2)
            .map(|_| a.admit(&p(Role::Tenant, "other")).unwrap())
            .collect();
        assert_eq!(
            a.admit(&p(Role::Tenant, "third")).unwrap_err(),
            Refusal::Tenants
        );
        let ops: Vec<_> = (0..4)
            .map(|_| a.admit(&p(Role::Operator, "ops")).unwrap())
            .collect();
        assert_eq!(
            a.admit(&p(Role::Auditor, "aud")).unwrap_err(),
            Refusal::Total
        );
        drop(held);
        assert!(a.admit(&evil).is_ok());
        drop((other, ops));
    }

    /// A full pool drops its oldest pending handshake for a newcomer.
    #[tokio::test]
    async fn the_oldest_handshake_makes_room() {
        let pool = Handshaking::new(2);
        let (mut first, evicted) = pool.enter();
        assert!(!evicted);
        let (_second, _) = pool.enter();
        let (_third, evicted) = pool.enter();
        assert!(evicted);
        assert!((&mut first.evicted).await.is_ok(), "the oldest was told");
        assert_eq!(pool.len(), 2);
        drop(first);
        assert_eq!(pool.len(), 2, "an evicted slot was already gone");
    }

    #[test]
    fn in_flight_requests_are_bounded_per_principal() {
        let f = InFlight::new(2);
        let t = p(Role::Tenant, "t");
        let a = f.try_start(&t).unwrap();
        let _b = f.try_start(&t).unwrap();
        assert!(f.try_start(&t).is_none());
        assert!(f.try_start(&p(Role::Operator, "o")).is_some());
        drop(a);
        assert!(f.try_start(&t).is_some());
    }

    /// A tenant sends its burst at once, then one request per 1/rate seconds; the wait it is
    /// told is the time until its next token. Each tenant has its own bucket.
    #[test]
    fn a_tenants_requests_spend_a_burst_then_the_rate() {
        let r = RequestRate::new(Some(Rate {
            per_sec: 4,
            burst: 3,
        }));
        let (t, other) = (p(Role::Tenant, "t"), p(Role::Tenant, "other"));
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(r.admit(&t, t0), Ok(()));
        }
        assert_eq!(r.admit(&t, t0), Err(Duration::from_millis(250)));
        let later = t0 + Duration::from_millis(100);
        assert_eq!(r.admit(&t, later), Err(Duration::from_millis(150)));
        assert_eq!(
            r.admit(&other, t0),
            Ok(()),
            "another tenant's bucket is its own"
        );
        assert_eq!(r.admit(&t, t0 + Duration::from_millis(250)), Ok(()));
        assert!(r.admit(&t, t0 + Duration::from_millis(260)).is_err());
        // A long quiet spell refills the burst, never more.
        let quiet = t0 + Duration::from_secs(3600);
        for _ in 0..3 {
            assert_eq!(r.admit(&t, quiet), Ok(()));
        }
        assert!(r.admit(&t, quiet).is_err());
    }

    /// Operators and auditors are never rate-limited; without a rate, nobody is.
    #[test]
    fn only_tenants_are_rate_limited() {
        let r = RequestRate::new(Some(Rate {
            per_sec: 1,
            burst: 1,
        }));
        let t0 = Instant::now();
        for role in [Role::Operator, Role::Auditor] {
            for _ in 0..100 {
                assert_eq!(r.admit(&p(role, "x"), t0), Ok(()));
            }
        }
        let off = RequestRate::new(None);
        for _ in 0..100 {
            assert_eq!(off.admit(&p(Role::Tenant, "t"), t0), Ok(()));
        }
    }

    /// A clock read out of order (two requests racing to the lock) takes tokens and adds none.
    #[test]
    fn an_earlier_instant_adds_no_tokens() {
        let r = RequestRate::new(Some(Rate {
            per_sec: 1000,
            burst: 1,
        }));
        let t = p(Role::Tenant, "t");
        let t0 = Instant::now() + Duration::from_secs(1);
        assert_eq!(r.admit(&t, t0), Ok(()));
        assert!(r.admit(&t, t0 - Duration::from_millis(500)).is_err());
        assert_eq!(r.admit(&t, t0 + Duration::from_millis(1)), Ok(()));
    }

    #[test]
    fn refusals_are_logged_once_per_interval_with_a_count() {
        let l = LogLimiter::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(l.hit("x", t0), Some(1));
        for i in 1..1000 {
            assert_eq!(l.hit("x", t0 + Duration::from_millis(i)), None);
        }
        assert_eq!(l.hit("y", t0), Some(1));
        assert_eq!(l.hit("x", t0 + Duration::from_secs(10)), Some(1000));
    }
}
