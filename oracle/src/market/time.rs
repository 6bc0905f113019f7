//! Civil dates (proleptic Gregorian) and the timestamp forms the loaders accept.

use super::{EPOCH_SECONDS_BELOW, MS_PER_DAY};

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant, "chrono-Compatible
/// Low-Level Date Algorithms").
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468
}

/// Inverse of [`days_from_civil`]: (year, month, day).
pub(super) fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

pub(super) fn civil_date(day: i64) -> String {
    let (y, m, d) = civil_from_days(day);
    format!("{y:04}{m:02}{d:02}")
}

/// Digits only, within [lo, hi].
fn digits(s: &str, len: usize, lo: i64, hi: i64) -> Option<i64> {
    (s.len() == len && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
        .filter(|v| (lo..=hi).contains(v))
}

/// Days since the epoch of a valid date given as (YYYY, MM, DD) strings.
fn date_days(y: &str, m: &str, d: &str) -> Option<i64> {
    let (y, m, d) = (
        digits(y, 4, 0, 9999)?,
        digits(m, 2, 1, 12)?,
        digits(d, 2, 1, 31)?,
    );
    let days = days_from_civil(y, m, d);
    (civil_from_days(days) == (y, m, d)).then_some(days)
}

/// `YYYYMMDD` -> days since the epoch.
pub(super) fn parse_date(s: &str) -> Option<i64> {
    (s.len() == 8 && s.is_ascii())
        .then(|| date_days(&s[..4], &s[4..6], &s[6..]))
        .flatten()
}

/// A CSV timestamp in epoch ms; see [`load_csv`](super::load_csv) for the accepted forms.
pub(super) fn parse_time(s: &str) -> Option<i64> {
    if let Ok(v) = s.parse::<i64>() {
        return Some(if v.unsigned_abs() < EPOCH_SECONDS_BELOW.unsigned_abs() {
            v * 1000
        } else {
            v
        });
    }
    let s = s.strip_suffix('Z').unwrap_or(s);
    let (date, clock) = s.split_once([' ', 'T'])?;
    let [y, mo, d] = date.split('-').collect::<Vec<_>>()[..] else {
        return None;
    };
    let hms: Vec<&str> = clock.split(':').collect();
    let (h, mi, sec) = match hms[..] {
        [h, mi] => (h, mi, "00"),
        [h, mi, sec] => (h, mi, sec),
        _ => return None,
    };
    let seconds = digits(h, 2, 0, 23)? * 3600 + digits(mi, 2, 0, 59)? * 60 + digits(sec, 2, 0, 59)?;
    Some(date_days(y, mo, d)? * MS_PER_DAY + seconds * 1000)
}
