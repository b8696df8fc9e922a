//! Time without a clock: deadlines that never overflow, and the user's local day and month that spend
//! is counted in. Reading time is the gateway's (`keymux::clock::Clock`), which hands `now` to
//! everything here.

use std::time::{Duration, Instant};

use jiff::tz::TimeZone;
use jiff::{Span, Timestamp};
use serde::{Deserialize, Serialize};

/// `at + by`, or the latest representable instant not far past it: an absurd duration from an upstream
/// header must never panic (`Instant + Duration` overflows on some platforms).
pub fn later(at: Instant, by: Duration) -> Instant {
    at.checked_add(by.min(MAX_WAIT)).unwrap_or(at)
}

/// The longest wait Keymux ever schedules from something an upstream said (a day): beyond it a header
/// is nonsense, and a key would be lost for longer than anyone would wait.
pub const MAX_WAIT: Duration = Duration::from_secs(24 * 60 * 60);

/// The UTC day number (days since 1970-01-01) of a Unix millisecond time.
pub fn utc_day(unix_ms: u64) -> u32 {
    u32::try_from(unix_ms / 86_400_000).unwrap_or(u32::MAX)
}

/// The local day and month a moment falls in, as spend is counted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
pub struct LocalPeriods {
    /// The time zone they follow: its IANA name (`Europe/Berlin`), else its offset now (`UTC+05:30`).
    pub zone: String,
    /// When today began: local midnight, Unix milliseconds.
    pub day_start_unix_ms: u64,
    /// When this month began: local midnight of its first day, Unix milliseconds.
    pub month_start_unix_ms: u64,
    /// When tomorrow begins (today's budgets reset): the next local midnight, Unix milliseconds.
    pub day_end_unix_ms: u64,
    /// When next month begins (this month's budgets reset), Unix milliseconds.
    pub month_end_unix_ms: u64,
}

/// The local day and month of `unix_ms` in `zone`.
pub fn local_periods(unix_ms: u64, zone: &TimeZone) -> LocalPeriods {
    let at = timestamp(unix_ms);
    let date = at.to_zoned_datetime(zone.clone()).date();
    let name = zone.iana_name().map_or_else(|| format!("UTC{}", zone.to_offset(at)), str::to_owned);
    let month = date.first_of_month();
    let next = |d: jiff::civil::Date, by: Span| d.checked_add(by).map_or(u64::MAX, |d| midnight(d, zone));
    LocalPeriods {
        zone: name,
        day_start_unix_ms: midnight(date, zone),
        month_start_unix_ms: midnight(month, zone),
        day_end_unix_ms: next(date, Span::new().days(1)),
        month_end_unix_ms: next(month, Span::new().months(1)),
    }
}

/// Local midnight `days_back` calendar days before the local day of `unix_ms` (0: its own midnight),
/// Unix milliseconds. Calendar days, so a day of 23 or 25 hours (daylight saving) counts as one.
pub fn local_day_start(unix_ms: u64, zone: &TimeZone, days_back: u32) -> u64 {
    let date = timestamp(unix_ms).to_zoned_datetime(zone.clone()).date();
    midnight(date.checked_sub(Span::new().days(days_back)).unwrap_or(date), zone)
}

fn timestamp(unix_ms: u64) -> Timestamp {
    Timestamp::from_millisecond(i64::try_from(unix_ms).unwrap_or(i64::MAX)).unwrap_or(Timestamp::MAX)
}

/// When `date` began in `zone` (where midnight is skipped by a clock change, the first moment after).
fn midnight(date: jiff::civil::Date, zone: &TimeZone) -> u64 {
    let start = date.to_zoned_datetime(zone.clone()).map_or(0, |z| z.timestamp().as_millisecond());
    u64::try_from(start).unwrap_or(0)
}
