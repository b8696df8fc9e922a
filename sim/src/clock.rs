//! The simulator's one clock: real time plus a skew that tests move forward, so that rate-limit
//! windows, prompt-cache entries, standing faults and connection ages run out without a test
//! having to wait for them.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

/// Real time plus a forward skew.
#[derive(Debug)]
pub(crate) struct Clock {
    /// How far tests have moved time forward; waiters subscribe to learn of every move.
    skew: watch::Sender<Duration>,
}

impl Default for Clock {
    fn default() -> Self {
        Clock { skew: watch::Sender::new(Duration::ZERO) }
    }
}

impl Clock {
    /// The current simulated instant.
    #[expect(clippy::disallowed_methods, reason = "the one place that reads the real clock")]
    pub(crate) fn now(&self) -> Instant {
        // tokio's clock is the real one, except in a runtime a test paused: then the simulator
        // follows that paused time too, like every tokio timer does.
        tokio::time::Instant::now().into_std() + *self.skew.borrow()
    }

    /// Simulated seconds since the Unix epoch, for `created_at` fields.
    #[expect(clippy::disallowed_methods, reason = "the one place that reads the wall clock")]
    pub(crate) fn unix_secs(&self) -> u64 {
        let now = SystemTime::now() + *self.skew.borrow();
        now.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
    }

    /// Moves time forward by `by`; returns the total skew.
    pub(crate) fn advance(&self, by: Duration) -> Duration {
        self.skew.send_modify(|skew| *skew = skew.saturating_add(by));
        *self.skew.borrow()
    }

    /// Waits until the simulated time reaches `deadline`, waking early when a test advances.
    pub(crate) async fn sleep_until(&self, deadline: Instant) {
        let mut moves = self.skew.subscribe();
        loop {
            let left = deadline.saturating_duration_since(self.now());
            if left.is_zero() {
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep(left) => {}
                moved = moves.changed() => {
                    if moved.is_err() {
                        tokio::time::sleep(left).await;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advancing_moves_now_and_wall_time() {
        let clock = Clock::default();
        let before = clock.now();
        let unix_before = clock.unix_secs();
        assert_eq!(clock.advance(Duration::from_secs(90)), Duration::from_secs(90));
        assert!(clock.now().duration_since(before) >= Duration::from_secs(90));
        assert!(clock.unix_secs() >= unix_before + 90);
        assert_eq!(clock.advance(Duration::from_secs(10)), Duration::from_secs(100));
    }

    #[tokio::test]
    async fn sleepers_wake_when_time_is_advanced() {
        let clock = std::sync::Arc::new(Clock::default());
        let deadline = clock.now() + Duration::from_secs(3600);
        let sleeper = tokio::spawn({
            let clock = clock.clone();
            async move { clock.sleep_until(deadline).await }
        });
        tokio::task::yield_now().await;
        assert!(!sleeper.is_finished());
        clock.advance(Duration::from_secs(1800));
        tokio::task::yield_now().await;
        assert!(!sleeper.is_finished(), "half the wait is not the whole wait");
        clock.advance(Duration::from_secs(1800));
        let woke = tokio::time::timeout(Duration::from_secs(30), sleeper).await;
        assert!(matches!(woke, Ok(Ok(()))), "{woke:?}");
    }
}
