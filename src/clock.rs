//! The one place Keymux reads time. Everything else is handed `now` by its caller, so routing stays a
//! pure function and tests move time on instead of sleeping.
//!
//! A clock is real time plus a skew that only moves forward. `Clock::advance` exists for tests (and the
//! simulator has its twin), so a cooldown of 30 s can be passed in a microsecond on a busy machine.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

/// Real time plus a forward-only skew. Clones share the skew.
#[derive(Clone, Debug, Default)]
pub struct Clock {
    skew_ns: Arc<AtomicU64>,
}

impl Clock {
    /// The system clock (no skew).
    pub fn system() -> Self {
        Self::default()
    }

    fn skew(&self) -> Duration {
        Duration::from_nanos(self.skew_ns.load(Ordering::Relaxed))
    }

    /// The monotonic now: tokio's clock (so `start_paused` tests control it) plus the skew.
    pub fn now(&self) -> Instant {
        #[expect(clippy::disallowed_methods, reason = "the clock module is the one place time is read")]
        let real = Instant::now();
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
    }

    /// Milliseconds from `since` to now, saturating.
    pub fn elapsed_ms(&self, since: Instant) -> u32 {
        u32::try_from(self.now().saturating_duration_since(since).as_millis()).unwrap_or(u32::MAX)
    }
}

/// A deadline `by` from now for tokio's timers: tokio's own clock, without a `Clock`'s skew (timers run
/// on tokio's time, which tests pause and advance).
pub fn timer_deadline(by: Duration) -> Instant {
    #[expect(clippy::disallowed_methods, reason = "the clock module is the one place time is read")]
    let real = Instant::now();
    later(real, by)
}

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

    #[test]
    fn absurd_waits_are_clamped_not_panicking() {
        let clock = Clock::system();
        let now = clock.now();
        assert_eq!(later(now, Duration::MAX), now + MAX_WAIT);
        assert_eq!(later(now, Duration::from_secs(3)), now + Duration::from_secs(3));
    }
}
