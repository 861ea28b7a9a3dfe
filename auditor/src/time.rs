//! RFC 3339 UTC timestamps as records write them (`2026-03-01T10:00:00.000Z`), parsed without
//! a date library so that the auditor stays small: the verifier only needs to know that a
//! record's times are real UTC instants, and to compare them.

/// Milliseconds in one hour: records that are cut at hour boundaries are checked against it.
pub(crate) const HOUR_MS: i64 = 3_600_000;

/// Unix milliseconds of `YYYY-MM-DDTHH:MM:SS[.fraction]Z` (UTC only: a record's times are
/// written in UTC, so any other offset means it was not written by a node). Digits beyond
/// milliseconds are truncated. `None` for anything else, including impossible dates.
pub(crate) fn parse_utc_ms(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' {
        return None;
    }
    if b[13] != b':' || b[16] != b':' || b.last() != Some(&b'Z') {
        return None;
    }
    let num = |from: usize, to: usize| -> Option<i64> {
        let d = b.get(from..to)?;
        d.iter()
            .all(u8::is_ascii_digit)
            .then(|| d.iter().fold(0i64, |n, c| n * 10 + i64::from(c - b'0')))
    };
    let (year, month, day) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (hour, minute, second) = (num(11, 13)?, num(14, 16)?, num(17, 19)?);
    let millis = fraction_ms(&b[19..b.len() - 1])?;
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        _ => return None,
    };
    if day < 1 || day > days_in_month || hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    Some(((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + millis)
}

/// `""` or `.` followed by 1 to 9 digits, as milliseconds (truncated).
fn fraction_ms(f: &[u8]) -> Option<i64> {
    let Some((&b'.', digits)) = f.split_first() else {
        return f.is_empty().then_some(0);
    };
    if digits.is_empty() || digits.len() > 9 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(
        digits
            .iter()
            .chain(std::iter::repeat(&b'0'))
            .take(3)
            .fold(0i64, |n, c| n * 10 + i64::from(c - b'0')),
    )
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` of Unix milliseconds, as nodes write times: what a finding shows
/// of a time the verifier kept only as a number. Years outside 0..=9999 are written as
/// `@<ms>ms` (no record holds one: they do not parse).
pub(crate) fn format_utc_ms(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let of_day = ms.rem_euclid(86_400_000);
    let (year, month, day) = civil_from_days(days);
    if !(0..=9999).contains(&year) {
        return format!("@{ms}ms");
    }
    let (h, m, s, milli) = (
        of_day / 3_600_000,
        of_day / 60_000 % 60,
        of_day / 1000 % 60,
        of_day % 1000,
    );
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{milli:03}Z")
}

/// The proleptic Gregorian date of a number of days since 1970-01-01 (H. Hinnant's
/// `civil_from_days`, the inverse of [`days_from_civil`]).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_nodes_write_and_nothing_else() {
        assert_eq!(parse_utc_ms("1970-01-01T00:00:00.000Z"), Some(0));
        assert_eq!(parse_utc_ms("1970-01-01T00:00:01Z"), Some(1000));
        assert_eq!(
            parse_utc_ms("2026-03-01T10:00:00.250Z"),
            Some(1_772_359_200_250)
        );
        assert_eq!(
            parse_utc_ms("2024-02-29T00:00:00.1234Z"),
            Some(1_709_164_800_123)
        );
        for bad in [
            "",
            "2026-03-01T10:00:00.000+05:30",
            "2026-03-01 10:00:00.000Z",
            "2025-02-29T00:00:00.000Z",
            "2026-13-01T00:00:00.000Z",
            "2026-03-01T24:00:00.000Z",
            "2026-03-01T10:00:00.Z",
            "2026-03-01T10:00:00.0000000000Z",
            "2026-03-01T1a:00:00.000Z",
            "+026-03-01T10:00:00.000Z",
        ] {
            assert_eq!(parse_utc_ms(bad), None, "{bad}");
        }
    }

    #[test]
    fn formats_what_it_parses() {
        for t in [
            "1970-01-01T00:00:00.000Z",
            "2026-03-01T10:00:00.250Z",
            "2024-02-29T23:59:59.999Z",
            "2000-03-01T00:00:00.001Z",
            "1969-12-31T23:59:59.999Z",
            "0000-01-01T00:00:00.000Z",
            "9999-12-31T23:59:59.999Z",
        ] {
            assert_eq!(format_utc_ms(parse_utc_ms(t).unwrap()), t);
        }
        let mut ms = -62_167_219_200_000; // 0000-01-01
        while ms < 253_402_300_800_000 {
            assert_eq!(parse_utc_ms(&format_utc_ms(ms)), Some(ms), "{ms}");
            ms += 86_399_937 * 97;
        }
        assert_eq!(format_utc_ms(i64::MAX), format!("@{}ms", i64::MAX));
    }
}
