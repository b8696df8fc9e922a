//! A key's rate-limit windows as the provider reports them (`x-ratelimit-{limit,remaining,reset}-
//! {requests,tokens}` on every response), counted down locally between responses so that a key near
//! exhaustion is avoided before it answers 429; and the cooldown a 429 asks for (`retry-after-ms`,
//! `retry-after`, the reset headers). Every figure an upstream sends is parsed defensively and clamped.

use std::time::{Duration, Instant};

use http::{HeaderMap, HeaderName};

use crate::clock::later;

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
    /// How long a whole window is (at least a minute: OpenAI's limits are per minute, and its reset
    /// headers say when the window is full again, which is shorter while little was used).
    pub span: Duration,
}

/// A window as it stands now: the provider's figures, counted down by what was sent since.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WindowState {
    /// The limit per window.
    pub limit: u64,
    /// What is left now.
    pub remaining: u64,
    /// Until it refills fully.
    pub resets_in: Duration,
    /// How long a whole window is.
    pub span: Duration,
}

impl WindowState {
    /// Used share divided by elapsed share of the window: above 1, it runs out before it refills.
    /// `None` early in a window, where the figure would only be noise.
    pub fn pace(&self) -> Option<f32> {
        let used = 1.0 - self.remaining as f32 / self.limit.max(1) as f32;
        let elapsed = 1.0 - self.resets_in.as_secs_f32() / self.span.as_secs_f32().max(1e-3);
        (elapsed > 0.05).then(|| used / elapsed)
    }
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

/// The windows one answer's headers reported (either may be missing).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Reading {
    /// The request window, if reported.
    pub requests: Option<Window>,
    /// The token window, if reported.
    pub tokens: Option<Window>,
}

impl Reading {
    /// Reads `x-ratelimit-*` headers. Headers a provider does not send, sends as `-1`/`0` limits (Azure
    /// does), or fills with nonsense leave that window unknown; a reset past a day is clamped.
    pub fn from_headers(headers: &HeaderMap, now: Instant) -> Self {
        Self { requests: window(headers, &REQUESTS, now), tokens: window(headers, &TOKENS, now) }
    }
}

impl Quota {
    /// Takes the provider's latest figures.
    pub fn observe(&mut self, reading: Reading) {
        // Each window's local countdown restarts only when the provider reports that window.
        if let Some(requests) = reading.requests {
            self.requests = Some(requests);
            self.spent_requests = 0;
        }
        if let Some(tokens) = reading.tokens {
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

    /// The request and token windows as they stand now (`None`: unknown, or refilled since).
    pub fn windows(&self, now: Instant) -> (Option<WindowState>, Option<WindowState>) {
        let state = |left: Option<(u64, Window)>| {
            left.map(|(remaining, w)| WindowState {
                limit: w.limit,
                remaining,
                resets_in: w.resets_at.saturating_duration_since(now),
                span: w.span,
            })
        };
        (
            state(Self::left(self.requests, self.spent_requests, now)),
            state(Self::left(self.tokens, self.spent_tokens, now)),
        )
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

/// Most of a window a key may keep for its pinned sessions, percent: keeping all of it would shut the
/// key to new sessions for good.
pub const MAX_RESERVE_WINDOW_PCT: u8 = 90;

/// A key keeping part of its rate-limit windows for the sessions already on it: while less than
/// that share is left, it takes no new sessions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowReserve {
    /// What is left of the tighter window below the reserve, thousandths of its limit.
    pub left_permille: u16,
    /// The share the key keeps, percent.
    pub keep_pct: u8,
    /// When every window below the reserve has refilled.
    pub frees: Instant,
}

impl Quota {
    /// Whether less than `keep_pct` percent of a known window is left now (so the key keeps the rest
    /// for its pinned sessions), and until when. Unknown and refilled windows keep nothing.
    pub fn reserve(&self, now: Instant, keep_pct: u8) -> Option<WindowReserve> {
        let below = |left: Option<(u64, Window)>| {
            let (left, w) = left?;
            let permille = (u128::from(left) * 1000 / u128::from(w.limit.max(1))).min(1000) as u16;
            (u32::from(permille) < u32::from(keep_pct) * 10).then_some((permille, w.resets_at))
        };
        let windows = [
            below(Self::left(self.requests, self.spent_requests, now)),
            below(Self::left(self.tokens, self.spent_tokens, now)),
        ];
        windows.into_iter().flatten().fold(None, |acc: Option<WindowReserve>, (left_permille, resets)| {
            Some(match acc {
                None => WindowReserve { left_permille, keep_pct, frees: resets },
                Some(r) => WindowReserve {
                    left_permille: r.left_permille.min(left_permille),
                    keep_pct,
                    frees: r.frees.max(resets),
                },
            })
        })
    }
}

impl WindowState {
    /// How long until this window is used up at the pace since it began, if that is before it refills
    /// (`Some(0)` when it is used up now). `None` early in a window (too little to go by) and when
    /// nothing was used.
    pub fn runs_out_in(&self) -> Option<Duration> {
        if self.remaining == 0 {
            return Some(Duration::ZERO);
        }
        let elapsed = self.span.saturating_sub(self.resets_in);
        if elapsed.as_secs_f64() < self.span.as_secs_f64() * 0.05 {
            return None;
        }
        let used = self.limit.saturating_sub(self.remaining);
        if used == 0 {
            return None;
        }
        let per_sec = used as f64 / elapsed.as_secs_f64();
        let out = Duration::from_secs_f64(self.remaining as f64 / per_sec);
        (out < self.resets_in).then_some(out)
    }
}

/// The three headers of one rate-limit window, as names ready to look up (every answer is read).
struct WindowHeaders {
    limit: HeaderName,
    remaining: HeaderName,
    reset: HeaderName,
}

const REQUESTS: WindowHeaders = WindowHeaders {
    limit: HeaderName::from_static("x-ratelimit-limit-requests"),
    remaining: HeaderName::from_static("x-ratelimit-remaining-requests"),
    reset: HeaderName::from_static("x-ratelimit-reset-requests"),
};

const TOKENS: WindowHeaders = WindowHeaders {
    limit: HeaderName::from_static("x-ratelimit-limit-tokens"),
    remaining: HeaderName::from_static("x-ratelimit-remaining-tokens"),
    reset: HeaderName::from_static("x-ratelimit-reset-tokens"),
};

/// A header's value as trimmed text, if it is there and is text.
fn header_text(headers: &HeaderMap, name: impl http::header::AsHeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim)
}

fn window(headers: &HeaderMap, names: &WindowHeaders, now: Instant) -> Option<Window> {
    let text = |name: &HeaderName| header_text(headers, name);
    let limit: i64 = text(&names.limit)?.parse().ok()?;
    let remaining: i64 = text(&names.remaining)?.parse().ok()?;
    if limit <= 0 || remaining < 0 {
        return None;
    }
    let reset = text(&names.reset).and_then(parse_reset).unwrap_or(DEFAULT_WINDOW);
    let reset = reset.min(crate::clock::MAX_WAIT);
    Some(Window {
        limit: limit as u64,
        remaining: (remaining as u64).min(limit as u64),
        resets_at: later(now, reset),
        span: reset.max(DEFAULT_WINDOW),
    })
}

/// A rough token estimate for a request body (about four bytes per token), used only to count windows
/// down between responses.
pub fn estimate_tokens(body_len: usize) -> u64 {
    (body_len as u64).div_ceil(4)
}

/// Reads a cooldown from a 429's headers: `retry-after-ms`, then `retry-after` (seconds), then the
/// rate-limit reset headers. `None` when the upstream gave no hint.
/// Values past a day are clamped to a day; negative, non-finite and unparsable ones are ignored.
pub fn cooldown_hint(headers: &HeaderMap) -> Option<Duration> {
    let text = |name: &str| header_text(headers, name);
    if let Some(wait) = text("retry-after-ms").and_then(|v| v.parse::<f64>().ok()).and_then(|ms| seconds(ms / 1000.0)) {
        return Some(wait);
    }
    if let Some(wait) = text("retry-after").and_then(|v| v.parse::<f64>().ok()).and_then(seconds) {
        return Some(wait);
    }
    [&REQUESTS.reset, &TOKENS.reset].into_iter().filter_map(|h| header_text(headers, h).and_then(parse_reset)).max()
}

/// A wait in seconds from an upstream header, clamped to `clock::MAX_WAIT`; `None` for negative or
/// non-finite values (an upstream's nonsense must never panic a request).
fn seconds(secs: f64) -> Option<Duration> {
    if !secs.is_finite() || secs < 0.0 {
        return None;
    }
    let max = crate::clock::MAX_WAIT;
    Some(Duration::try_from_secs_f64(secs).map_or(max, |d| d.min(max)))
}

/// Parses OpenAI's reset durations: `6m0s`, `1s`, `12ms`, `1m30.5s`, `2h3m`.
pub fn parse_reset(text: &str) -> Option<Duration> {
    let text = text.trim();
    let mut total = 0f64;
    let mut number = 0..0;
    let mut any = false;
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        if c.is_ascii_digit() || c == '.' {
            number = if number.is_empty() { at..at + 1 } else { number.start..at + 1 };
            continue;
        }
        let value: f64 = text[number.clone()].parse().ok()?;
        number = 0..0;
        let unit = match c {
            'h' => 3600.0,
            'm' if chars.peek().map(|(_, c)| *c) == Some('s') => {
                chars.next();
                0.001
            }
            'm' => 60.0,
            's' => 1.0,
            _ => return None,
        };
        total += value * unit;
        any = true;
    }
    if !number.is_empty() || !any {
        return None;
    }
    seconds(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    use http::HeaderValue;

    fn clock_now() -> Instant {
        #[expect(clippy::disallowed_methods, reason = "a test's starting point; every later time is derived")]
        Instant::now()
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn counts_down_between_answers_and_refills_at_reset() {
        let now = clock_now();
        let mut q = Quota::default();
        assert_eq!(q.headroom(now), 1.0, "nothing known: no limit assumed");
        q.observe(Reading::from_headers(
            &headers(&[
                ("x-ratelimit-limit-requests", "10"),
                ("x-ratelimit-remaining-requests", "2"),
                ("x-ratelimit-reset-requests", "6s"),
                ("x-ratelimit-limit-tokens", "1000"),
                ("x-ratelimit-remaining-tokens", "900"),
                ("x-ratelimit-reset-tokens", "1m0s"),
            ]),
            now,
        ));
        assert!((q.headroom(now) - 0.2).abs() < 1e-6);
        assert_eq!(q.exhausted_until(now, 10), None);
        q.spend(10);
        q.spend(10);
        assert_eq!(q.headroom(now), 0.0);
        assert_eq!(q.exhausted_until(now, 10), Some(now + Duration::from_secs(6)));
        let later = now + Duration::from_secs(7);
        assert_eq!(q.exhausted_until(later, 10), None, "the request window refilled");
        assert!((q.headroom(later) - 0.88).abs() < 1e-3, "{}", q.headroom(later));
        // The next answer replaces the local estimate.
        let h = headers(&[("x-ratelimit-limit-requests", "10"), ("x-ratelimit-remaining-requests", "9")]);
        q.observe(Reading::from_headers(&h, later));
        assert!((q.headroom(later) - 0.88).abs() < 1e-3, "tokens window kept");
    }

    #[test]
    fn azure_minus_one_and_zero_limits_are_unknown() {
        let now = clock_now();
        let mut q = Quota::default();
        let h = headers(&[("x-ratelimit-limit-requests", "-1"), ("x-ratelimit-remaining-requests", "-1")]);
        q.observe(Reading::from_headers(&h, now));
        let h = headers(&[("x-ratelimit-limit-tokens", "0"), ("x-ratelimit-remaining-tokens", "0")]);
        q.observe(Reading::from_headers(&h, now));
        assert_eq!(q.requests, None);
        assert_eq!(q.tokens, None);
        assert_eq!(q.headroom(now), 1.0);
        assert_eq!(q.exhausted_until(now, 1), None);
    }

    #[test]
    fn token_window_too_small_for_the_next_request() {
        let now = clock_now();
        let mut q = Quota::default();
        q.observe(Reading::from_headers(
            &headers(&[
                ("x-ratelimit-limit-tokens", "1000"),
                ("x-ratelimit-remaining-tokens", "50"),
                ("x-ratelimit-reset-tokens", "12ms"),
            ]),
            now,
        ));
        assert_eq!(q.exhausted_until(now, 40), None);
        assert_eq!(q.exhausted_until(now, 60), Some(now + Duration::from_millis(12)));
    }

    #[test]
    fn absurd_headers_are_clamped_never_a_panic() {
        let now = clock_now();
        let h = headers(&[
            ("x-ratelimit-limit-tokens", "1000"),
            ("x-ratelimit-remaining-tokens", "5"),
            ("x-ratelimit-reset-tokens", "3000000000000000h"),
            ("x-ratelimit-limit-requests", "99999999999999999999999"),
            ("x-ratelimit-remaining-requests", "1"),
        ]);
        let r = Reading::from_headers(&h, now);
        assert_eq!(r.requests, None, "a limit that does not fit is unknown");
        assert_eq!(r.tokens.map(|w| w.resets_at), Some(now + crate::clock::MAX_WAIT));
    }
    #[test]
    fn reset_durations() {
        let cases = [
            ("6m0s", Some(360_000)),
            ("1s", Some(1_000)),
            ("12ms", Some(12)),
            ("1m30.5s", Some(90_500)),
            ("2h3m", Some(7_380_000)),
            ("0s", Some(0)),
            ("", None),
            ("-1", None),
            ("5", None),
            ("abc", None),
        ];
        for (text, want) in cases {
            assert_eq!(parse_reset(text).map(|d| d.as_millis() as u64), want, "{text}");
        }
    }

    #[test]
    fn absurd_hints_are_clamped_to_a_day() {
        let day = crate::clock::MAX_WAIT;
        for (name, value) in [
            ("retry-after", "1e30"),
            ("retry-after-ms", "1e300"),
            ("x-ratelimit-reset-tokens", "3000000000000000h"),
            ("retry-after", "18446744073709551616"),
        ] {
            let mut h = HeaderMap::new();
            h.insert(name, HeaderValue::from_static(value));
            assert_eq!(cooldown_hint(&h), Some(day), "{name}: {value}");
        }
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("-5"));
        h.insert("retry-after-ms", HeaderValue::from_static("NaN"));
        assert_eq!(cooldown_hint(&h), None);
        assert_eq!(parse_reset("1e999s"), None, "not a number the parser takes");
    }

    #[test]
    fn cooldown_prefers_ms_then_seconds_then_resets() {
        let mut h = HeaderMap::new();
        h.insert("x-ratelimit-reset-requests", HeaderValue::from_static("3s"));
        assert_eq!(cooldown_hint(&h), Some(Duration::from_secs(3)));
        h.insert("retry-after", HeaderValue::from_static("2"));
        assert_eq!(cooldown_hint(&h), Some(Duration::from_secs(2)));
        h.insert("retry-after-ms", HeaderValue::from_static("1500"));
        assert_eq!(cooldown_hint(&h), Some(Duration::from_millis(1500)));
        assert_eq!(cooldown_hint(&HeaderMap::new()), None);
    }

    fn window_of(limit: &'static str, remaining: &'static str, reset: &'static str) -> HeaderMap {
        headers(&[
            ("x-ratelimit-limit-requests", limit),
            ("x-ratelimit-remaining-requests", remaining),
            ("x-ratelimit-reset-requests", reset),
        ])
    }

    #[test]
    fn a_key_keeps_its_reserve_while_less_than_that_share_is_left_and_frees_at_the_refill() {
        let now = clock_now();
        let mut q = Quota::default();
        assert_eq!(q.reserve(now, 20), None, "nothing known: nothing kept");
        q.observe(Reading::from_headers(&window_of("100", "25", "30s"), now));
        assert_eq!(q.reserve(now, 20), None, "25 % left is above a 20 % reserve");
        q.spend(10);
        q.spend(10);
        q.spend(10);
        q.spend(10);
        q.spend(10);
        q.spend(10);
        let kept = q.reserve(now, 20).expect("19 % left is below it");
        assert_eq!((kept.left_permille, kept.keep_pct, kept.frees), (190, 20, now + Duration::from_secs(30)));
        assert_eq!(q.reserve(now + Duration::from_secs(30), 20), None, "the window refilled");
    }

    #[test]
    fn a_window_runs_out_only_if_its_pace_empties_it_before_it_refills() {
        let state = |remaining: u64, resets_in: u64| WindowState {
            limit: 100,
            remaining,
            resets_in: Duration::from_secs(resets_in),
            span: Duration::from_secs(60),
        };
        // 60 used in 30 s: 2 a second; 40 left last 20 s, before the refill in 30 s.
        assert_eq!(state(40, 30).runs_out_in(), Some(Duration::from_secs(20)));
        // 20 used in 30 s: the 80 left would last 120 s, past the refill.
        assert_eq!(state(80, 30).runs_out_in(), None);
        assert_eq!(state(0, 30).runs_out_in(), Some(Duration::ZERO), "used up now");
        assert_eq!(state(50, 59).runs_out_in(), None, "one second into the window is too little to go by");
        assert_eq!(state(100, 10).runs_out_in(), None, "nothing used");
    }
}
