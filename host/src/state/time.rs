//! `Timestamp`: UTC milliseconds since the epoch, stored and shown as RFC 3339
//! (`2026-11-21T12:10:43.123Z`).
//!
//! One fixed format, written and parsed here, keeps the stored files readable without a date
//! library; the civil-date conversions are Howard Hinnant's `days_from_civil` algorithms.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A point in time, millisecond resolution, UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(u64);

impl Timestamp {
    pub fn now() -> Timestamp {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Timestamp(ms)
    }

    pub fn from_unix_ms(ms: u64) -> Timestamp {
        Timestamp(ms)
    }

    pub fn unix_ms(self) -> u64 {
        self.0
    }

    /// `self - duration`, saturating at the epoch.
    pub fn minus(self, duration: Duration) -> Timestamp {
        let ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        Timestamp(self.0.saturating_sub(ms))
    }

    /// Time from `self` to `later` (zero if `later` is earlier).
    pub fn until(self, later: Timestamp) -> Duration {
        Duration::from_millis(later.0.saturating_sub(self.0))
    }

    /// Parses exactly `YYYY-MM-DDTHH:MM:SS.mmmZ`.
    pub fn parse(text: &str) -> Option<Timestamp> {
        let b = text.as_bytes();
        if b.len() != 24 || text.get(23..) != Some("Z") {
            return None;
        }
        let num = |from: usize, to: usize| -> Option<u64> {
            let part = text.get(from..to)?;
            part.bytes()
                .all(|c| c.is_ascii_digit())
                .then(|| part.parse().ok())?
        };
        let separators = [
            (4, b'-'),
            (7, b'-'),
            (10, b'T'),
            (13, b':'),
            (16, b':'),
            (19, b'.'),
        ];
        if separators.iter().any(|&(i, c)| b[i] != c) {
            return None;
        }
        let (year, month, day) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
        let (hour, min, sec, ms) = (num(11, 13)?, num(14, 16)?, num(17, 19)?, num(20, 23)?);
        if !(1970..=9999).contains(&year)
            || !(1..=12).contains(&month)
            || !(1..=days_in_month(year, month)).contains(&day)
            || hour > 23
            || min > 59
            || sec > 59
        {
            return None;
        }
        let days = days_from_civil(year, month, day);
        Some(Timestamp(
            ((days * 24 + hour) * 60 + min) * 60_000 + sec * 1000 + ms,
        ))
    }
}

fn is_leap(year: u64) -> bool {
    year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400))
}

fn days_in_month(year: u64, month: u64) -> u64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 for a date on or after it.
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `(year, month, day)` for days since 1970-01-01.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0 % 1000;
        let secs = self.0 / 1000;
        let (year, month, day) = civil_from_days(secs / 86_400);
        let rest = secs % 86_400;
        write!(
            f,
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{ms:03}Z",
            rest / 3600,
            rest / 60 % 60,
            rest % 60
        )
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Timestamp::parse(&text).ok_or_else(|| {
            serde::de::Error::custom("expected a UTC timestamp like 2026-01-31T23:59:59.000Z")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_points() {
        assert_eq!(Timestamp(0).to_string(), "1970-01-01T00:00:00.000Z");
        let t = Timestamp(1_795_263_043_123);
        assert_eq!(t.to_string(), "2026-11-21T12:10:43.123Z");
        assert_eq!(
            Timestamp::parse("2000-02-29T23:59:59.999Z")
                .unwrap()
                .to_string(),
            "2000-02-29T23:59:59.999Z"
        );
    }

    #[test]
    fn round_trips_many_points() {
        let mut ms = 0u64;
        while ms < 253_402_300_799_000 {
            let t = Timestamp(ms);
            assert_eq!(Timestamp::parse(&t.to_string()), Some(t), "{t}");
            ms += 7_777_777_777;
        }
    }

    #[test]
    fn rejects_malformed() {
        for bad in [
            "",
            "2026-11-21T07:30:43Z",
            "2026-11-21T07:30:43.123+00:00",
            "2026-02-30T00:00:00.000Z",
            "2026-11-21T24:00:00.000Z",
            "2026-11-21 07:30:43.123Z",
            "+026-11-21T07:30:43.123Z",
            "2026-11-21T07:30:43.123Z\n",
        ] {
            assert_eq!(Timestamp::parse(bad), None, "{bad:?}");
        }
    }
}
