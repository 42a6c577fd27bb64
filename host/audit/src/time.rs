//! Timestamps as hpcgate stores and shows them (audit records, instance metadata, job records):
//! RFC 3339 in UTC with microseconds, fixed width (`2026-11-21T12:10:44.123456Z`), so that text
//! order is time order.
//!
//! Hand-written (civil-date arithmetic after Howard Hinnant) because only this one format is
//! written; the parser also takes other offsets and fractions, dates, and relative bounds
//! (`2h`, `7d`) for filters.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A point in time, microseconds since the Unix epoch, shown as RFC 3339 UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp {
    micros: i64,
}

/// Why a text is not a timestamp.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}` is not a time; use RFC 3339 (`2026-11-21T12:00:00Z`), a date (`2026-11-21`) or an age (`30m`, `2h`, `7d`)"
)]
pub struct TimeError(pub String);

impl Timestamp {
    /// The system clock, now (the epoch if the clock is before it).
    pub fn now() -> Timestamp {
        let micros = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        Timestamp { micros }
    }

    pub fn from_unix_micros(micros: i64) -> Timestamp {
        Timestamp { micros }
    }

    pub fn unix_micros(self) -> i64 {
        self.micros
    }

    pub fn from_unix_ms(ms: u64) -> Timestamp {
        Timestamp {
            micros: i64::try_from(ms).unwrap_or(i64::MAX / 1000) * 1000,
        }
    }

    /// Milliseconds since the epoch (0 before it).
    pub fn unix_ms(self) -> u64 {
        u64::try_from(self.micros.div_euclid(1000)).unwrap_or(0)
    }

    /// `self - duration`, saturating.
    pub fn minus(self, duration: Duration) -> Timestamp {
        let micros = i64::try_from(duration.as_micros()).unwrap_or(i64::MAX);
        Timestamp {
            micros: self.micros.saturating_sub(micros),
        }
    }

    /// Time from `self` to `later` (zero if `later` is earlier).
    pub fn until(self, later: Timestamp) -> Duration {
        Duration::from_micros(u64::try_from(later.micros.saturating_sub(self.micros)).unwrap_or(0))
    }

    /// Parses a filter bound: RFC 3339 (any offset, optional fraction), a date (midnight UTC),
    /// or an age before `now` (`<n>s|m|h|d`).
    pub fn parse_bound(text: &str, now: Timestamp) -> Result<Timestamp, TimeError> {
        let err = || TimeError(text.to_owned());
        if let Some(unit) = text.chars().last().filter(|c| "smhd".contains(*c))
            && text.len() > 1
            && text[..text.len() - 1].bytes().all(|b| b.is_ascii_digit())
        {
            let n: i64 = text[..text.len() - 1].parse().map_err(|_| err())?;
            let seconds = match unit {
                's' => 1,
                'm' => 60,
                'h' => 3600,
                _ => 86_400,
            };
            let micros = n
                .checked_mul(seconds * 1_000_000)
                .and_then(|ago| now.micros.checked_sub(ago))
                .ok_or_else(err)?;
            return Ok(Timestamp { micros });
        }
        text.parse()
    }
}

impl FromStr for Timestamp {
    type Err = TimeError;

    fn from_str(text: &str) -> Result<Timestamp, TimeError> {
        parse_rfc3339(text.as_bytes()).ok_or_else(|| TimeError(text.to_owned()))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let seconds = self.micros.div_euclid(1_000_000);
        let micros = self.micros.rem_euclid(1_000_000);
        let (days, secs) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
        let (y, m, d) = civil_from_days(days);
        write!(
            f,
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{micros:06}Z",
            secs / 3600,
            secs / 60 % 60,
            secs % 60
        )
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Timestamp, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

fn parse_rfc3339(s: &[u8]) -> Option<Timestamp> {
    let num = |range: std::ops::Range<usize>| -> Option<i64> {
        let digits = s.get(range)?;
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(digits).ok()?.parse().ok()
    };
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    if s.get(4) != Some(&b'-') || s.get(7) != Some(&b'-') || !(1..=12).contains(&m) {
        return None;
    }
    if d < 1 || d > days_in_month(y, m) {
        return None;
    }
    let days = days_from_civil(y, m, d);
    if s.len() == 10 {
        return Some(Timestamp {
            micros: days * 86_400_000_000,
        });
    }
    if !matches!(s.get(10), Some(b'T' | b't' | b' '))
        || s.get(13) != Some(&b':')
        || s.get(16) != Some(&b':')
    {
        return None;
    }
    let (hh, mm, ss) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if hh > 23 || mm > 59 || ss > 59 {
        return None;
    }
    let mut i = 19;
    let mut micros = 0;
    if s.get(i) == Some(&b'.') {
        let start = i + 1;
        i = start;
        while s.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return None;
        }
        for (k, b) in s[start..i].iter().take(6).enumerate() {
            micros += i64::from(b - b'0') * 10_i64.pow(5 - k as u32);
        }
    }
    let offset = match s.get(i..)? {
        b"Z" | b"z" => 0,
        [sign @ (b'+' | b'-'), rest @ ..] if rest.len() == 5 && rest[2] == b':' => {
            let (oh, om) = (num(i + 1..i + 3)?, num(i + 4..i + 6)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let offset = (oh * 60 + om) * 60;
            if *sign == b'+' { offset } else { -offset }
        }
        _ => return None,
    };
    let seconds = days * 86_400 + hh * 3600 + mm * 60 + ss - offset;
    Some(Timestamp {
        micros: seconds * 1_000_000 + micros,
    })
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = (if y >= 0 { y } else { y - 399 }) / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = (if z >= 0 { z } else { z - 146_096 }) / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_parses_round_trip() {
        let t = Timestamp::from_unix_micros(1_795_263_044_123_456);
        assert_eq!(t.to_string(), "2026-11-21T12:10:44.123456Z");
        assert_eq!(t.to_string().parse::<Timestamp>(), Ok(t));
        assert_eq!(
            Timestamp::from_unix_micros(0).to_string(),
            "1970-01-01T00:00:00.000000Z"
        );
        assert_eq!(
            "2024-02-29T01:00:00+01:00".parse::<Timestamp>().unwrap(),
            "2024-02-29T00:00:00Z".parse::<Timestamp>().unwrap()
        );
        assert_eq!(
            "2026-11-21".parse::<Timestamp>().unwrap().to_string(),
            "2026-11-21T00:00:00.000000Z"
        );
        for bad in [
            "2023-02-29",
            "2026-13-01",
            "2026-11-21T25:00:00Z",
            "x",
            "2026-11-21T12:00:00",
        ] {
            assert!(bad.parse::<Timestamp>().is_err(), "{bad}");
        }
    }

    #[test]
    fn round_trips_many_points_and_milliseconds() {
        let mut ms = 0u64;
        while ms < 253_402_300_799_000 {
            let t = Timestamp::from_unix_ms(ms);
            assert_eq!(t.to_string().parse::<Timestamp>(), Ok(t), "{t}");
            assert_eq!(t.unix_ms(), ms);
            ms += 7_777_777_777;
        }
        let t = Timestamp::from_unix_ms(5_000);
        assert_eq!(
            t.minus(Duration::from_secs(2)),
            Timestamp::from_unix_ms(3_000)
        );
        assert_eq!(
            t.until(Timestamp::from_unix_ms(7_500)),
            Duration::from_millis(2_500)
        );
        assert_eq!(t.until(Timestamp::from_unix_ms(1)), Duration::ZERO);
    }

    #[test]
    fn ages_count_back_from_now() {
        let now = Timestamp::from_unix_micros(10 * 86_400_000_000);
        let bound = |s| Timestamp::parse_bound(s, now).unwrap().unix_micros();
        assert_eq!(bound("2h"), now.unix_micros() - 2 * 3_600_000_000);
        assert_eq!(bound("7d"), 3 * 86_400_000_000);
        assert!(Timestamp::parse_bound("h", now).is_err());
    }
}
