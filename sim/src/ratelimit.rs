//! Per-key fixed-window rate limits on requests and estimated input tokens, and the
//! `x-ratelimit-*` headers that describe the current window.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::config::Limits;
use crate::util::{format_reset, lock};

#[derive(Debug, Clone, Copy)]
struct Window {
    start: Instant,
    requests: u64,
    tokens: u64,
}

/// The state of one key's window as the headers show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Snapshot {
    pub limit_requests: u64,
    pub limit_tokens: u64,
    pub remaining_requests: u64,
    pub remaining_tokens: u64,
    pub reset_requests: Duration,
    pub reset_tokens: Duration,
}

impl Snapshot {
    pub(crate) fn headers(&self) -> [(&'static str, String); 6] {
        [
            ("x-ratelimit-limit-requests", self.limit_requests.to_string()),
            ("x-ratelimit-limit-tokens", self.limit_tokens.to_string()),
            ("x-ratelimit-remaining-requests", self.remaining_requests.to_string()),
            ("x-ratelimit-remaining-tokens", self.remaining_tokens.to_string()),
            ("x-ratelimit-reset-requests", format_reset(self.reset_requests)),
            ("x-ratelimit-reset-tokens", format_reset(self.reset_tokens)),
        ]
    }
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Refusal {
    pub dimension: &'static str,
    pub limit: u64,
    pub used: u64,
    pub requested: u64,
    pub wait: Duration,
}

#[derive(Debug)]
pub(crate) struct RateLimiter {
    limits: Limits,
    /// Bound: one window per configured key.
    windows: Mutex<HashMap<String, Window>>,
}

impl RateLimiter {
    pub(crate) fn new(limits: Limits) -> Self {
        RateLimiter { limits, windows: Mutex::new(HashMap::new()) }
    }

    pub(crate) fn limits(&self) -> Limits {
        self.limits
    }

    fn current(&self, w: Option<Window>, now: Instant) -> Option<Window> {
        w.filter(|w| now.duration_since(w.start) < self.limits.window)
    }

    fn snapshot_of(&self, w: Option<Window>, now: Instant) -> Snapshot {
        let l = self.limits;
        match w {
            None => Snapshot {
                limit_requests: l.requests,
                limit_tokens: l.tokens,
                remaining_requests: l.requests,
                remaining_tokens: l.tokens,
                reset_requests: Duration::ZERO,
                reset_tokens: Duration::ZERO,
            },
            Some(w) => {
                let left = (w.start + l.window).saturating_duration_since(now);
                Snapshot {
                    limit_requests: l.requests,
                    limit_tokens: l.tokens,
                    remaining_requests: l.requests.saturating_sub(w.requests),
                    remaining_tokens: l.tokens.saturating_sub(w.tokens),
                    reset_requests: if w.requests > 0 { left } else { Duration::ZERO },
                    reset_tokens: if w.tokens > 0 { left } else { Duration::ZERO },
                }
            }
        }
    }

    /// The current window of `key` without consuming anything.
    pub(crate) fn snapshot(&self, key: &str, now: Instant) -> Snapshot {
        let windows = lock(&self.windows);
        let w = self.current(windows.get(key).copied(), now);
        self.snapshot_of(w, now)
    }

    /// Consumes one request and `tokens` tokens, or refuses without consuming.
    pub(crate) fn admit(&self, key: &str, tokens: u64, now: Instant) -> Result<Snapshot, (Refusal, Snapshot)> {
        let mut windows = lock(&self.windows);
        let mut w =
            self.current(windows.get(key).copied(), now).unwrap_or(Window { start: now, requests: 0, tokens: 0 });
        let l = self.limits;
        let wait = (w.start + l.window).saturating_duration_since(now);
        let refusal = if w.requests.saturating_add(1) > l.requests {
            Some(Refusal { dimension: "requests", limit: l.requests, used: w.requests, requested: 1, wait })
        } else if w.tokens.saturating_add(tokens) > l.tokens {
            Some(Refusal { dimension: "tokens", limit: l.tokens, used: w.tokens, requested: tokens, wait })
        } else {
            None
        };
        if let Some(r) = refusal {
            let existing = self.current(windows.get(key).copied(), now);
            return Err((r, self.snapshot_of(existing, now)));
        }
        w.requests += 1;
        w.tokens = w.tokens.saturating_add(tokens);
        windows.insert(key.to_owned(), w);
        Ok(self.snapshot_of(Some(w), now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Clock;

    #[test]
    fn requests_and_tokens_are_limited_per_window() {
        let rl = RateLimiter::new(Limits { requests: 2, tokens: 100, window: Duration::from_secs(1) });
        let t0 = Clock::default().now();
        let s = rl.admit("k", 10, t0).ok();
        assert_eq!(s.map(|s| s.remaining_requests), Some(1));
        assert!(rl.admit("k", 10, t0).is_ok());
        let Err((r, s)) = rl.admit("k", 10, t0 + Duration::from_millis(200)) else {
            panic!("third request admitted");
        };
        assert_eq!(r.dimension, "requests");
        assert_eq!(r.wait, Duration::from_millis(800));
        assert_eq!(s.remaining_requests, 0);
        assert!(rl.admit("other", 10, t0).is_ok());
        assert!(rl.admit("k", 10, t0 + Duration::from_secs(1)).is_ok());
        let Err((r, _)) = rl.admit("k", 95, t0 + Duration::from_secs(1)) else {
            panic!("token overflow admitted");
        };
        assert_eq!(r.dimension, "tokens");
    }
}
