//! The daemon's notion of time, optionally accelerated for dev mode.
//!
//! Metering and billing read time only through [`Clock`], so that dev mode can run the
//! 40-hour seed example in under a minute while the simulated GPUs' energy counters advance
//! at the same accelerated pace (the fake NVML library applies the identical formula, given
//! the same epoch and scale through `NVML_SIM_CLOCK`).

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// The node's clock. It never goes backwards: every reading is at least the latest reading
/// before it and at least the floor raised by [`Clock::raise_floor`] (the latest time the
/// node's state holds). A system clock that steps back, or a node restarted on a machine
/// whose clock is behind its state, makes node time stand still until the system clock
/// catches up: no interval is metered twice and no lease ends before it started.
#[derive(Debug, Clone)]
pub struct Clock {
    epoch_ms: i64,
    scale: f64,
    /// The latest time this clock (or any clone) returned or was floored at.
    high: Arc<AtomicI64>,
}

fn real_now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

impl Clock {
    /// Wall-clock time.
    pub fn real() -> Clock {
        Clock::scaled(0, 1.0)
    }

    /// Time that runs `scale` times faster than the wall clock from `epoch_ms` on.
    pub fn scaled(epoch_ms: i64, scale: f64) -> Clock {
        Clock {
            epoch_ms,
            scale,
            high: Arc::new(AtomicI64::new(i64::MIN)),
        }
    }

    /// Never answer earlier than `floor_ms` (the latest time already written in the state).
    /// Returns how far the underlying clock is behind it, in ms (0 when it is not).
    pub fn raise_floor(&self, floor_ms: i64) -> i64 {
        self.high.fetch_max(floor_ms, Ordering::AcqRel);
        floor_ms.saturating_sub(self.at(real_now_ms())).max(0)
    }

    /// How far the underlying clock is behind node time, in ms (0 when it is not).
    pub fn behind_ms(&self) -> i64 {
        self.high
            .load(Ordering::Acquire)
            .saturating_sub(self.at(real_now_ms()))
            .max(0)
    }

    /// A scaled clock whose epoch is now.
    pub fn scaled_from_now(scale: f64) -> Clock {
        Clock::scaled(real_now_ms(), scale)
    }

    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// Milliseconds since the Unix epoch, in (possibly accelerated) clock time.
    pub fn now_ms(&self) -> i64 {
        let t = self.at(real_now_ms());
        self.high.fetch_max(t, Ordering::AcqRel).max(t)
    }

    fn at(&self, real_ms: i64) -> i64 {
        if self.scale == 1.0 {
            return real_ms;
        }
        let elapsed = (real_ms - self.epoch_ms) as f64 * self.scale;
        self.epoch_ms + elapsed as i64
    }

    /// The value for the fake NVML library's `NVML_SIM_CLOCK`.
    pub fn sim_env(&self) -> String {
        format!("{}:{}", self.epoch_ms, self.scale)
    }
}

/// RFC 3339 UTC with millisecond precision, e.g. `2026-12-03T07:00:00.000Z`.
pub fn rfc3339_ms(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    match time::OffsetDateTime::from_unix_timestamp(secs) {
        Ok(t) => format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second(),
            millis
        ),
        Err(_) => format!("@{ms}ms"),
    }
}

/// Why a text is not a time [`parse_time_ms`] accepts. The message is a sentence for the
/// client that sent it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BadTime {
    /// Neither of the two accepted shapes.
    #[error("`{0}` is neither RFC 3339 nor YYYY-MM-DD")]
    Shape(String),
    /// A valid time whose milliseconds since 1970 do not fit an `i64`.
    #[error("`{0}` is out of range")]
    OutOfRange(String),
}

/// Parses RFC 3339 (any offset) or a plain date `YYYY-MM-DD` (midnight UTC) into Unix ms.
pub fn parse_time_ms(s: &str) -> Result<i64, BadTime> {
    use time::format_description::well_known::Rfc3339;
    if let Ok(t) = time::OffsetDateTime::parse(s, &Rfc3339) {
        return i64::try_from(t.unix_timestamp_nanos() / 1_000_000)
            .map_err(|_| BadTime::OutOfRange(s.to_owned()));
    }
    let fmt = time::macros::format_description!("[year]-[month]-[day]");
    let d = time::Date::parse(s, &fmt).map_err(|_| BadTime::Shape(s.to_owned()))?;
    Ok(d.midnight().assume_utc().unix_timestamp() * 1000)
}

/// Start of the UTC hour after `ms`.
pub fn next_hour_ms(ms: i64) -> i64 {
    (ms.div_euclid(3_600_000) + 1) * 3_600_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaled_clock_runs_fast_from_its_epoch() {
        let c = Clock::scaled(1_000_000, 3600.0);
        assert_eq!(c.at(1_000_000), 1_000_000);
        assert_eq!(c.at(1_001_000), 1_000_000 + 3_600_000);
        assert_eq!(Clock::real().at(42), 42);
    }

    /// A floor in the future holds the clock there; readings never go backwards, and
    /// clones share the guarantee.
    #[test]
    fn the_clock_never_goes_backwards() {
        let c = Clock::real();
        let now = c.now_ms();
        let later = now + 3_600_000;
        let behind = c.raise_floor(later);
        assert!((3_500_000..=3_600_000).contains(&behind), "{behind}");
        assert!(c.behind_ms() > 0);
        let copy = c.clone();
        assert_eq!(copy.now_ms(), later);
        assert_eq!(c.now_ms(), later);
        // A lower floor changes nothing.
        assert_eq!(c.raise_floor(now), 0);
        assert!(c.behind_ms() > 0);
        assert_eq!(c.now_ms(), later);
        // A fresh clock is behind nothing; one whose floor is in the past simply runs.
        let r = Clock::real();
        assert_eq!(r.behind_ms(), 0);
        assert_eq!(r.raise_floor(0), 0);
        let (a, b) = (r.now_ms(), r.now_ms());
        assert!(b >= a && a > 0);
    }

    #[test]
    fn formats_and_parses_times() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(1_500), "1970-01-01T00:00:01.500Z");
        assert_eq!(parse_time_ms("1970-01-02").unwrap(), 86_400_000);
        assert_eq!(parse_time_ms("1970-01-01T01:00:00+01:00").unwrap(), 0);
        assert_eq!(
            parse_time_ms("yesterday"),
            Err(BadTime::Shape("yesterday".into()))
        );
        assert_eq!(next_hour_ms(0), 3_600_000);
        assert_eq!(next_hour_ms(3_600_000), 7_200_000);
    }
}
