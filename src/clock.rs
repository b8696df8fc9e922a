//! The one place Keymux reads time. Everything else is handed `now` by its caller, so routing stays a
//! pure function and tests move time on instead of sleeping.
//!
//! A clock is real time plus a skew that only moves forward. `Clock::advance` exists for tests (and the
//! simulator has its twin), so a cooldown of 30 s can be passed in a microsecond on a busy machine.
//!
//! It also knows the user's time zone, for the periods spend is counted in ("today", "this month"):
//! the system's zone (`TZ`, else `/etc/localtime` and its platform twins), with its daylight-saving
//! rules, or one a test sets. What needs no clock (deadlines, local periods) is `keymux_core::clock`,
//! re-exported here.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::tz::TimeZone;
pub use keymux_core::clock::*;

/// Real time plus a forward-only skew, in the user's time zone. Clones share the skew.
#[derive(Clone, Debug, Default)]
pub struct Clock {
    skew_ns: Arc<AtomicU64>,
    /// Wakes what waits on this clock (`sleep_until`) when the skew moves.
    moved: Arc<tokio::sync::Notify>,
    /// The zone local periods follow (`None`: the system's, read when asked).
    zone: Option<TimeZone>,
}

impl Clock {
    /// The system clock (no skew).
    pub fn system() -> Self {
        Self::default()
    }

    fn skew(&self) -> Duration {
        Duration::from_nanos(self.skew_ns.load(Ordering::Relaxed))
    }

    /// The monotonic now: tokio's clock (so `start_paused` tests control it) plus the skew, as the
    /// `std` instant the core's types hold.
    pub fn now(&self) -> Instant {
        #[expect(clippy::disallowed_methods, reason = "the clock module is the one place time is read")]
        let real = tokio::time::Instant::now().into_std();
        real + self.skew()
    }

    /// Wall-clock time in Unix milliseconds, as records and metrics carry it.
    pub fn unix_ms(&self) -> u64 {
        #[expect(clippy::disallowed_methods, reason = "the clock module is the one place time is read")]
        let real = std::time::SystemTime::now();
        let since = real.duration_since(std::time::UNIX_EPOCH).unwrap_or_default() + self.skew();
        u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
    }

    /// Moves this clock (and every clone) forward by `by`.
    pub fn advance(&self, by: Duration) {
        let ns = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        self.skew_ns.fetch_add(ns, Ordering::Relaxed);
        self.moved.notify_waiters();
    }

    /// Waits until this clock reads `at`: tokio's timer, woken early when the clock is moved on, so a
    /// deadline on this clock passes when the clock passes it, whether time or a test moved it.
    pub async fn sleep_until(&self, at: Instant) {
        loop {
            let moved = self.moved.notified();
            tokio::pin!(moved);
            // Registered before `now` is read: a move between the two still wakes this wait.
            moved.as_mut().enable();
            let left = at.saturating_duration_since(self.now());
            if left.is_zero() {
                return;
            }
            tokio::select! {
                () = tokio::time::sleep_until(timer_deadline(left)) => {}
                () = moved => {}
            }
        }
    }

    /// This clock in `zone` instead of the system's time zone (tests, and users of a fixed zone).
    #[must_use]
    pub fn with_zone(mut self, zone: TimeZone) -> Self {
        self.zone = Some(zone);
        self
    }

    /// The time zone local days and months follow: the one set, else the system's now (so a change of
    /// the system's zone is followed; jiff caches it between reads).
    pub fn zone(&self) -> TimeZone {
        self.zone.clone().unwrap_or_else(TimeZone::system)
    }

    /// The local day and month now.
    pub fn periods(&self) -> LocalPeriods {
        local_periods(self.unix_ms(), &self.zone())
    }

    /// Milliseconds from `since` to now, saturating.
    pub fn elapsed_ms(&self, since: Instant) -> u32 {
        u32::try_from(self.now().saturating_duration_since(since).as_millis()).unwrap_or(u32::MAX)
    }
}

/// A deadline `by` from now for tokio's timers: tokio's own clock, without a `Clock`'s skew (timers run
/// on tokio's time, which tests pause and advance).
pub fn timer_deadline(by: Duration) -> tokio::time::Instant {
    #[expect(clippy::disallowed_methods, reason = "the clock module is the one place time is read")]
    let real = tokio::time::Instant::now();
    tokio::time::Instant::from_std(later(real.into_std(), by))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn advancing_moves_every_clone() {
        let clock = Clock::system();
        let other = clock.clone();
        let before = clock.now();
        let wall = clock.unix_ms();
        other.advance(Duration::from_secs(90));
        assert!(clock.now() - before >= Duration::from_secs(90));
        assert!(clock.unix_ms() - wall >= 90_000);
        assert!(clock.elapsed_ms(before) >= 90_000);
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_on_the_clock_ends_when_time_or_the_clock_passes_its_deadline() {
        let clock = Clock::system();
        let wait = |at: Instant| {
            let clock = clock.clone();
            tokio::spawn(async move { clock.sleep_until(at).await })
        };
        #[expect(clippy::disallowed_methods, reason = "tokio's own time, to see it did not pass")]
        let timers = tokio::time::Instant::now;
        let started = timers();
        let moved = wait(clock.now() + Duration::from_secs(3600));
        clock.advance(Duration::from_secs(1800));
        tokio::task::yield_now().await;
        assert!(!moved.is_finished(), "half way there");
        clock.advance(Duration::from_secs(1800));
        moved.await.expect("the clock passed the deadline");
        assert!(timers() - started < Duration::from_secs(1), "woken by the move, not by its timer");
        let timed = wait(clock.now() + Duration::from_secs(60));
        tokio::time::advance(Duration::from_secs(60)).await;
        timed.await.expect("time passed the deadline");
    }

    #[test]
    fn absurd_waits_are_clamped_not_panicking() {
        let clock = Clock::system();
        let now = clock.now();
        assert_eq!(later(now, Duration::MAX), now + MAX_WAIT);
        assert_eq!(later(now, Duration::from_secs(3)), now + Duration::from_secs(3));
    }

    /// 2026-03-08 17:30 UTC: a Sunday, the day New York moves its clocks forward at 02:00 local.
    const SPRING: u64 = 1_772_991_000_000;

    #[test]
    fn local_periods_follow_the_zone_and_its_daylight_saving() {
        let utc = local_periods(SPRING, &TimeZone::UTC);
        assert_eq!(utc.day_start_unix_ms, 1_772_928_000_000, "2026-03-08T00:00Z");
        assert_eq!(utc.month_start_unix_ms, 1_772_323_200_000, "2026-03-01T00:00Z");
        assert_eq!(utc.zone, "UTC");
        let new_york = TimeZone::posix("EST5EDT,M3.2.0,M11.1.0").expect("a POSIX zone");
        let ny = local_periods(SPRING, &new_york);
        // 13:30 EDT: the day began at 00:00 EST = 05:00Z, the month at 00:00 EST on March 1st.
        assert_eq!(ny.day_start_unix_ms, 1_772_928_000_000 + 5 * 3_600_000);
        assert_eq!(ny.month_start_unix_ms, 1_772_323_200_000 + 5 * 3_600_000);
        assert_eq!(ny.zone, "UTC-04", "a zone without a name is shown by its offset now");
        // The day of the change ends 23 hours after it began; the month at 00:00 EDT on April 1st.
        assert_eq!(ny.day_end_unix_ms, ny.day_start_unix_ms + 23 * 3_600_000);
        assert_eq!(ny.month_end_unix_ms, 1_775_001_600_000 + 4 * 3_600_000, "2026-04-01T04:00Z");
        assert_eq!(utc.day_end_unix_ms, utc.day_start_unix_ms + 24 * 3_600_000);
        // The day before lasted 24 hours, the day of the change 23.
        assert_eq!(local_day_start(SPRING, &new_york, 1), ny.day_start_unix_ms - 24 * 3_600_000);
        let monday = SPRING + 12 * 3_600_000;
        assert_eq!(local_day_start(monday, &new_york, 1), ny.day_start_unix_ms);
        assert_eq!(local_day_start(monday, &new_york, 0), ny.day_start_unix_ms + 23 * 3_600_000);
        let kolkata = TimeZone::fixed(jiff::tz::Offset::from_seconds(19_800).expect("+05:30"));
        // 23:00 local on the 8th: the day began at 18:30Z on the 7th.
        assert_eq!(local_periods(SPRING, &kolkata).day_start_unix_ms, 1_772_928_000_000 - 5 * 3_600_000 - 1_800_000);
    }

    #[test]
    fn a_clock_can_be_given_a_zone() {
        let clock = Clock::system().with_zone(TimeZone::fixed(jiff::tz::offset(-7)));
        let periods = clock.periods();
        assert_eq!(periods.day_start_unix_ms % 86_400_000, 7 * 3_600_000, "local midnight at UTC-7 is 07:00Z");
        assert!(periods.month_start_unix_ms <= periods.day_start_unix_ms);
        assert!(clock.unix_ms() - periods.day_start_unix_ms < 86_400_000);
    }
}
