//! Metering of jobs, pure logic: where a job's usage is cut into records.
//!
//! The jobs controller reads a job's cumulative counters (CPU time, network bytes) and its
//! memory every second. Writing a record per reading would flood the ledger, so usage is
//! recorded once per UTC hour and when the job ends: a [`JobCursor`] remembers where the last
//! record stopped (its time and the counters there), and [`cut`] turns a reading into the
//! records now due. Nothing is due inside an hour, so the cursor only changes when records are
//! written, and the node stores both in one write-ahead intent: a crash can neither record a
//! span twice nor lose one.
//!
//! Counters are read less often than hours pass only when the node was down or stalled; the
//! delta since the cursor is then spread over the hours in proportion to time, in integers
//! whose sum is exactly the delta. A counter that went backwards (the unit was restarted, so
//! its counters restarted from 0) counts as no use at all, never as a negative one.

use crate::clock::next_hour_ms;
use serde::{Deserialize, Serialize};

/// Where a job's last record stopped: the time and the counters there. Stored in the node's
/// state between records (`jobmeter/<job>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobCursor {
    /// Id of the lease the job runs under.
    pub lease: String,
    /// Id of the job.
    pub job: String,
    /// Id of the tenant billed (the lease's tenant), copied so a record needs no lease lookup.
    pub tenant: String,
    /// Start of the span not yet recorded, Unix ms.
    pub from_ms: i64,
    /// CPU time counter at `from_ms`, ns.
    pub cpu_ns: u64,
    /// Bytes-received counter at `from_ms`.
    pub bytes_in: u64,
    /// Bytes-sent counter at `from_ms`.
    pub bytes_out: u64,
    /// The largest memory use known since `from_ms`, bytes.
    pub memory_peak_bytes: u64,
}

/// One reading of a job's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JobSample {
    /// CPU time used since the unit started, ns (cumulative).
    pub cpu_ns: u64,
    /// Bytes received since the job started (cumulative).
    pub bytes_in: u64,
    /// Bytes sent since the job started (cumulative).
    pub bytes_out: u64,
    /// Memory use: the unit's peak so far (systemd's `MemoryPeak`) or, where that is not
    /// known, its current use. Either way the peak of a record's interval is at least it.
    pub memory_bytes: u64,
}

/// One job's usage over `[start_ms, end_ms)`: what becomes a job-usage record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobUsage {
    /// Id of the lease.
    pub lease: String,
    /// Id of the job.
    pub job: String,
    /// Id of the tenant.
    pub tenant: String,
    /// Interval start, Unix ms (inclusive).
    pub start_ms: i64,
    /// Interval end, Unix ms (exclusive); at most the next hour boundary after `start_ms`.
    pub end_ms: i64,
    /// CPU time used in the interval, ns.
    pub cpu_ns: u64,
    /// The largest memory use known in the interval, bytes.
    pub memory_peak_bytes: u64,
    /// Bytes received in the interval.
    pub bytes_in: u64,
    /// Bytes sent in the interval.
    pub bytes_out: u64,
    /// The job ended in this interval (its last record).
    pub ended: bool,
    /// How it ended, when it ended and that is known.
    pub exit: Option<String>,
}

/// The three cumulative counters, in one array so they are apportioned alike.
type Counters = [u64; 3];

fn counters_of_cursor(c: &JobCursor) -> Counters {
    [c.cpu_ns, c.bytes_in, c.bytes_out]
}

fn counters_of_sample(s: &JobSample) -> Counters {
    [s.cpu_ns, s.bytes_in, s.bytes_out]
}

/// The records due at `now_ms` for a job whose cursor is `cursor`, given a reading `sample`
/// taken then, and the cursor to keep (`None` when the job ended).
///
/// Every UTC hour completed since `cursor.from_ms` gets a record; when `ended` is `Some`
/// (how the job ended; an empty text when unknown), the rest of the span up to `now_ms` gets
/// a last record with `ended`. When nothing is due the cursor comes back unchanged, so a
/// caller that writes only when there are records writes nothing inside an hour.
pub fn cut(
    cursor: &JobCursor,
    sample: &JobSample,
    now_ms: i64,
    ended: Option<String>,
) -> (Vec<JobUsage>, Option<JobCursor>) {
    let now = now_ms.max(cursor.from_ms);
    let spans = spans(cursor.from_ms, now, ended.is_some());
    if spans.is_empty() {
        return (Vec::new(), Some(cursor.clone()));
    }
    let base = counters_of_cursor(cursor);
    let read = counters_of_sample(sample);
    // Backwards means the unit restarted: no use counted, and the reading is the new base.
    let delta: Counters = std::array::from_fn(|i| read[i].saturating_sub(base[i]));
    let peak = cursor.memory_peak_bytes.max(sample.memory_bytes);
    let total_ms = now.saturating_sub(cursor.from_ms);
    let mut given: Counters = [0; 3];
    let mut out = Vec::with_capacity(spans.len());
    for (start, end) in spans {
        let upto: Counters =
            std::array::from_fn(|i| share(delta[i], end.saturating_sub(cursor.from_ms), total_ms));
        let d: Counters = std::array::from_fn(|i| upto[i] - given[i]);
        given = upto;
        out.push(JobUsage {
            lease: cursor.lease.clone(),
            job: cursor.job.clone(),
            tenant: cursor.tenant.clone(),
            start_ms: start,
            end_ms: end,
            cpu_ns: d[0],
            memory_peak_bytes: peak,
            bytes_in: d[1],
            bytes_out: d[2],
            ended: false,
            exit: None,
        });
    }
    let Some(exit) = ended else {
        let next = next_cursor(cursor, &out, base, read, given, sample.memory_bytes);
        return (out, Some(next));
    };
    if let Some(last) = out.last_mut() {
        last.ended = true;
        last.exit = Some(exit).filter(|e| !e.is_empty());
    }
    (out, None)
}

/// The cursor after `out` was recorded: at the end of the last record, its counters the
/// base plus what was recorded (or the reading, for a counter that went backwards).
fn next_cursor(
    cursor: &JobCursor,
    out: &[JobUsage],
    base: Counters,
    read: Counters,
    given: Counters,
    memory_bytes: u64,
) -> JobCursor {
    let at: Counters = std::array::from_fn(|i| {
        if read[i] < base[i] {
            read[i]
        } else {
            base[i] + given[i]
        }
    });
    JobCursor {
        from_ms: out.last().map_or(cursor.from_ms, |u| u.end_ms),
        cpu_ns: at[0],
        bytes_in: at[1],
        bytes_out: at[2],
        // The latest reading is all that is known of the span after the boundary.
        memory_peak_bytes: memory_bytes,
        ..cursor.clone()
    }
}

/// The intervals due between `from` and `now`: one per completed UTC hour and, when the job
/// `ended`, the rest up to `now` (an empty interval at `from` when nothing else is due, so
/// that the end is still recorded).
fn spans(from: i64, now: i64, ended: bool) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    let mut start = from;
    loop {
        let boundary = next_hour_ms(start);
        if boundary > now {
            break;
        }
        out.push((start, boundary));
        start = boundary;
    }
    if ended && (start < now || out.is_empty()) {
        out.push((start, now));
    }
    out
}

/// `delta × part / whole`, rounded down (the whole of `delta` when `part >= whole`, and when
/// `whole` is 0): cumulative shares, so consecutive differences sum exactly to `delta`.
fn share(delta: u64, part: i64, whole: i64) -> u64 {
    if whole <= 0 || part >= whole {
        return delta;
    }
    let part = u128::try_from(part.max(0)).unwrap_or(0);
    let whole = u128::try_from(whole).unwrap_or(1);
    // part < whole, so the quotient is below delta and fits.
    u64::try_from(u128::from(delta) * part / whole).unwrap_or(delta)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const H: i64 = 3_600_000;

    fn cursor(from_ms: i64) -> JobCursor {
        JobCursor {
            lease: "lease-1".into(),
            job: "job-1".into(),
            tenant: "acme".into(),
            from_ms,
            cpu_ns: 1_000,
            bytes_in: 10,
            bytes_out: 20,
            memory_peak_bytes: 100,
        }
    }

    fn sample(cpu_ns: u64, bytes_in: u64, bytes_out: u64, memory_bytes: u64) -> JobSample {
        JobSample {
            cpu_ns,
            bytes_in,
            bytes_out,
            memory_bytes,
        }
    }

    #[test]
    fn nothing_is_due_inside_an_hour() {
        let c = cursor(10 * H + 5);
        let (recs, next) = cut(&c, &sample(9_000, 99, 99, 500), 11 * H - 1, None);
        assert!(recs.is_empty());
        assert_eq!(next, Some(c));
    }

    #[test]
    fn hours_are_cut_and_apportioned_by_time() {
        // From 10:30 to 12:30: half an hour, a whole hour, and half an hour in the cursor.
        let c = cursor(10 * H + H / 2);
        let (recs, next) = cut(
            &c,
            &sample(1_000 + 4_000, 10, 20 + 7, 50),
            12 * H + H / 2,
            None,
        );
        let times: Vec<(i64, i64)> = recs.iter().map(|u| (u.start_ms, u.end_ms)).collect();
        assert_eq!(times, [(10 * H + H / 2, 11 * H), (11 * H, 12 * H)]);
        assert_eq!((recs[0].cpu_ns, recs[1].cpu_ns), (1_000, 2_000));
        assert_eq!((recs[0].bytes_out, recs[1].bytes_out), (1, 4));
        assert!(recs.iter().all(|u| u.memory_peak_bytes == 100 && !u.ended));
        let next = next.unwrap();
        assert_eq!(
            (next.from_ms, next.cpu_ns, next.bytes_out),
            (12 * H, 4_000, 25)
        );
        assert_eq!(next.memory_peak_bytes, 50);
    }

    #[test]
    fn an_end_writes_the_rest_and_drops_the_cursor() {
        let c = cursor(10 * H);
        let (recs, next) = cut(
            &c,
            &sample(2_000, 10, 20, 0),
            10 * H + 60_000,
            Some("exited 0".into()),
        );
        assert_eq!(next, None);
        assert_eq!(recs.len(), 1);
        let u = &recs[0];
        assert_eq!(
            (u.start_ms, u.end_ms, u.cpu_ns),
            (10 * H, 10 * H + 60_000, 1_000)
        );
        assert!(u.ended);
        assert_eq!(u.exit.as_deref(), Some("exited 0"));
        // Ending exactly on a boundary marks the hour's record; ending at once still records.
        let (recs, _) = cut(&c, &sample(2_000, 10, 20, 0), 11 * H, Some(String::new()));
        assert_eq!(recs.len(), 1);
        assert!(recs[0].ended && recs[0].exit.is_none() && recs[0].end_ms == 11 * H);
        let (recs, _) = cut(&c, &sample(0, 0, 0, 0), 10 * H, Some("killed 9".into()));
        assert_eq!(
            (recs.len(), recs[0].start_ms, recs[0].end_ms),
            (1, 10 * H, 10 * H)
        );
        assert_eq!(
            recs[0].cpu_ns, 0,
            "counters that went backwards count as nothing"
        );
    }

    #[test]
    fn a_restarted_counter_rebases_the_cursor() {
        let c = cursor(10 * H);
        let (recs, next) = cut(&c, &sample(300, 50, 20, 0), 11 * H + 1, None);
        // 40 bytes over one hour and 1 ms: 39 in the hour, 1 kept for the next.
        assert_eq!((recs[0].cpu_ns, recs[0].bytes_in), (0, 39));
        let next = next.unwrap();
        assert_eq!((next.cpu_ns, next.bytes_in), (300, 49));
    }

    fn arb_case() -> impl Strategy<Value = (JobCursor, JobSample, i64, bool)> {
        (
            0i64..100 * H,
            0u64..u64::MAX / 2,
            0u64..1 << 40,
            0i64..30 * H,
            any::<u64>(),
            0u64..1 << 40,
            any::<bool>(),
        )
            .prop_map(|(from, cpu0, in0, len, dcpu, din, ended)| {
                let mut c = cursor(from);
                (c.cpu_ns, c.bytes_in) = (cpu0, in0);
                let s = sample(cpu0.saturating_add(dcpu), in0 + din, 0, 7);
                (c, s, from + len, ended)
            })
    }

    proptest! {
        #[test]
        fn recorded_deltas_add_up_and_no_record_crosses_an_hour(
            (c, s, now, ended) in arb_case()
        ) {
            let (recs, next) = cut(&c, &s, now, ended.then(|| "exited 0".to_string()));
            let cpu: u128 = recs.iter().map(|u| u128::from(u.cpu_ns)).sum();
            let bytes_in: u128 = recs.iter().map(|u| u128::from(u.bytes_in)).sum();
            for u in &recs {
                prop_assert!(u.start_ms <= u.end_ms);
                prop_assert!(u.end_ms <= next_hour_ms(u.start_ms), "{u:?}");
            }
            // What was recorded plus what the cursor still holds is exactly the delta.
            let (kept_cpu, kept_in) = match &next {
                Some(n) => (s.cpu_ns - n.cpu_ns, s.bytes_in - n.bytes_in),
                None => (0, 0),
            };
            prop_assert_eq!(cpu + u128::from(kept_cpu), u128::from(s.cpu_ns - c.cpu_ns));
            prop_assert_eq!(bytes_in + u128::from(kept_in), u128::from(s.bytes_in - c.bytes_in));
            prop_assert_eq!(next.is_none(), ended);
        }

        #[test]
        fn a_second_cut_at_the_same_time_adds_nothing((c, s, now, _) in arb_case()) {
            let (_, next) = cut(&c, &s, now, None);
            let next = next.unwrap();
            let (again, after) = cut(&next, &s, now, None);
            prop_assert!(again.is_empty());
            prop_assert_eq!(after, Some(next));
        }

        #[test]
        fn cuts_along_the_way_record_the_whole_delta(
            (c, s, now, _) in arb_case(), steps in proptest::collection::vec(0i64..3 * H, 0..6)
        ) {
            // Readings along a straight line from the cursor to the sample, then an end.
            let total = now - c.from_ms;
            let mut cur = c.clone();
            let mut recorded: u128 = 0;
            let mut t = c.from_ms;
            for step in steps {
                t = (t + step).min(now);
                let part = share(s.cpu_ns - c.cpu_ns, t - c.from_ms, total);
                let reading = JobSample { cpu_ns: c.cpu_ns + part, ..s };
                let (recs, next) = cut(&cur, &reading, t, None);
                recorded += recs.iter().map(|u| u128::from(u.cpu_ns)).sum::<u128>();
                cur = next.unwrap();
            }
            let (recs, next) = cut(&cur, &s, now, Some(String::new()));
            recorded += recs.iter().map(|u| u128::from(u.cpu_ns)).sum::<u128>();
            prop_assert!(next.is_none());
            prop_assert_eq!(recorded, u128::from(s.cpu_ns - c.cpu_ns));
        }
    }
}
