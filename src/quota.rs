//! A key's rate-limit windows as the provider reports them (`x-ratelimit-{limit,remaining,reset}-
//! {requests,tokens}` on every response), counted down locally between responses so that a key near
//! exhaustion is avoided before it answers 429.

use std::time::Duration;

use axum::http::HeaderMap;
use tokio::time::Instant;

use crate::upstream::parse_reset;

/// A window whose reset the provider did not give is assumed to last this long.
const DEFAULT_WINDOW: Duration = Duration::from_secs(60);

/// One rate-limit window (requests or tokens).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Window {
    /// The limit per window.
    pub limit: u64,
    /// What the provider said was left at its last answer.
    pub remaining: u64,
    /// When the window refills.
    pub resets_at: Instant,
}

/// Both windows of a key, and what was spent since the provider last reported them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Quota {
    /// Requests per window, if the provider reports it.
    pub requests: Option<Window>,
    /// Tokens per window, if the provider reports it.
    pub tokens: Option<Window>,
    spent_requests: u64,
    spent_tokens: u64,
}

impl Quota {
    /// Takes the provider's latest figures. Headers it does not send, or sends as `-1`/`0` limits (Azure
    /// does), leave that window unknown.
    pub fn observe(&mut self, headers: &HeaderMap, now: Instant) {
        // Each window's local countdown restarts only when the provider reports that window.
        if let Some(requests) = window(headers, "requests", now) {
            self.requests = Some(requests);
            self.spent_requests = 0;
        }
        if let Some(tokens) = window(headers, "tokens", now) {
            self.tokens = Some(tokens);
            self.spent_tokens = 0;
        }
    }

    /// Counts a request about to be sent, with its estimated tokens.
    pub fn spend(&mut self, tokens: u64) {
        self.spent_requests = self.spent_requests.saturating_add(1);
        self.spent_tokens = self.spent_tokens.saturating_add(tokens);
    }

    fn left(window: Option<Window>, spent: u64, now: Instant) -> Option<(u64, Window)> {
        let w = window?;
        if w.resets_at <= now {
            return None;
        }
        Some((w.remaining.saturating_sub(spent), w))
    }

    /// The share of the tighter window left, from 0 to 1 (1 when nothing is known or a window refilled).
    pub fn headroom(&self, now: Instant) -> f32 {
        let share = |left: Option<(u64, Window)>| left.map_or(1.0, |(left, w)| left as f32 / w.limit.max(1) as f32);
        share(Self::left(self.requests, self.spent_requests, now))
            .min(share(Self::left(self.tokens, self.spent_tokens, now)))
            .clamp(0.0, 1.0)
    }

    /// When a window that is used up refills: until then the key would answer 429.
    pub fn exhausted_until(&self, now: Instant, next_tokens: u64) -> Option<Instant> {
        let requests = Self::left(self.requests, self.spent_requests, now).filter(|(left, _)| *left == 0);
        let tokens = Self::left(self.tokens, self.spent_tokens, now).filter(|(left, _)| *left < next_tokens.max(1));
        match (requests, tokens) {
            (Some((_, a)), Some((_, b))) => Some(a.resets_at.max(b.resets_at)),
            (Some((_, w)), None) | (None, Some((_, w))) => Some(w.resets_at),
            (None, None) => None,
        }
    }
}

fn window(headers: &HeaderMap, kind: &str, now: Instant) -> Option<Window> {
    let text = |name: String| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim).map(str::to_owned);
    let limit: i64 = text(format!("x-ratelimit-limit-{kind}"))?.parse().ok()?;
    let remaining: i64 = text(format!("x-ratelimit-remaining-{kind}"))?.parse().ok()?;
    if limit <= 0 || remaining < 0 {
        return None;
    }
    let reset = text(format!("x-ratelimit-reset-{kind}")).and_then(|r| parse_reset(&r)).unwrap_or(DEFAULT_WINDOW);
    Some(Window { limit: limit as u64, remaining: (remaining as u64).min(limit as u64), resets_at: now + reset })
}

/// A rough token estimate for a request body (about four bytes per token), used only to count windows
/// down between responses.
pub fn estimate_tokens(body_len: usize) -> u64 {
    (body_len as u64).div_ceil(4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[tokio::test(start_paused = true)]
    async fn counts_down_between_answers_and_refills_at_reset() {
        let now = Instant::now();
        let mut q = Quota::default();
        assert_eq!(q.headroom(now), 1.0, "nothing known: no limit assumed");
        q.observe(
            &headers(&[
                ("x-ratelimit-limit-requests", "10"),
                ("x-ratelimit-remaining-requests", "2"),
                ("x-ratelimit-reset-requests", "6s"),
                ("x-ratelimit-limit-tokens", "1000"),
                ("x-ratelimit-remaining-tokens", "900"),
                ("x-ratelimit-reset-tokens", "1m0s"),
            ]),
            now,
        );
        assert!((q.headroom(now) - 0.2).abs() < 1e-6);
        assert_eq!(q.exhausted_until(now, 10), None);
        q.spend(10);
        q.spend(10);
        assert_eq!(q.headroom(now), 0.0);
        assert_eq!(q.exhausted_until(now, 10), Some(now + Duration::from_secs(6)));
        tokio::time::advance(Duration::from_secs(7)).await;
        let later = Instant::now();
        assert_eq!(q.exhausted_until(later, 10), None, "the request window refilled");
        assert!((q.headroom(later) - 0.88).abs() < 1e-3, "{}", q.headroom(later));
        // The next answer replaces the local estimate.
        q.observe(&headers(&[("x-ratelimit-limit-requests", "10"), ("x-ratelimit-remaining-requests", "9")]), later);
        assert!((q.headroom(later) - 0.88).abs() < 1e-3, "tokens window kept");
    }

    #[test]
    fn azure_minus_one_and_zero_limits_are_unknown() {
        let now = Instant::now();
        let mut q = Quota::default();
        q.observe(&headers(&[("x-ratelimit-limit-requests", "-1"), ("x-ratelimit-remaining-requests", "-1")]), now);
        q.observe(&headers(&[("x-ratelimit-limit-tokens", "0"), ("x-ratelimit-remaining-tokens", "0")]), now);
        assert_eq!(q.requests, None);
        assert_eq!(q.tokens, None);
        assert_eq!(q.headroom(now), 1.0);
        assert_eq!(q.exhausted_until(now, 1), None);
    }

    #[test]
    fn token_window_too_small_for_the_next_request() {
        let now = Instant::now();
        let mut q = Quota::default();
        q.observe(
            &headers(&[
                ("x-ratelimit-limit-tokens", "1000"),
                ("x-ratelimit-remaining-tokens", "50"),
                ("x-ratelimit-reset-tokens", "12ms"),
            ]),
            now,
        );
        assert_eq!(q.exhausted_until(now, 40), None);
        assert_eq!(q.exhausted_until(now, 60), Some(now + Duration::from_millis(12)));
    }
}
