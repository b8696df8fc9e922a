//! The plan's usage windows (5 hours and a week) as its answers report them in `x-codex-*` headers,
//! and the wait a `usage_limit_reached` refusal gives.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One of the plan's usage windows, from an answer's `x-codex-{primary,secondary}-*` headers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, ts_rs::TS)]
pub struct UsageWindow {
    /// How much of it is used, 0 to 100.
    pub used_percent: f32,
    /// Its length, minutes (300 for the 5-hour window, 10080 for the weekly one).
    pub window_minutes: Option<u64>,
    /// When it resets, Unix seconds.
    pub resets_unix: Option<u64>,
}

impl UsageWindow {
    /// Whether it is used up.
    pub fn exhausted(&self) -> bool {
        self.used_percent >= 100.0
    }
}

/// The plan's two windows as one answer reported them: the 5-hour one (`primary`) and the weekly one
/// (`secondary`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, ts_rs::TS)]
pub struct PlanWindows {
    /// The short window (5 hours).
    pub primary: Option<UsageWindow>,
    /// The long window (a week).
    pub secondary: Option<UsageWindow>,
}

impl PlanWindows {
    /// Reads the windows from an answer's headers (`get` looks a header up by its lowercase name); a
    /// window's reset is its `reset-at`, else `reset-after-seconds` from `now_unix` when given.
    pub fn from_headers<'a>(get: impl Fn(&str) -> Option<&'a str>, now_unix: Option<u64>) -> Self {
        let window = |which: &str| {
            let number =
                |what: &str| get(&format!("x-codex-{which}-{what}")).and_then(|v| v.trim().parse::<f64>().ok());
            let used = number("used-percent")?;
            let resets = number("reset-at")
                .map(|at| at as u64)
                .or_else(|| Some(now_unix?.saturating_add(number("reset-after-seconds")? as u64)));
            Some(UsageWindow {
                used_percent: used.clamp(0.0, 100.0) as f32,
                window_minutes: number("window-minutes").map(|m| m as u64),
                resets_unix: resets,
            })
        };
        Self { primary: window("primary"), secondary: window("secondary") }
    }

    /// Whether an answer reported either window.
    pub fn any(&self) -> bool {
        self.primary.is_some() || self.secondary.is_some()
    }

    /// Until when a window reported used up keeps the plan closed, Unix milliseconds, while that is
    /// after `now_unix_ms` (the gateway's pool view and its status read it alike).
    pub fn used_up_until_ms(&self, now_unix_ms: u64) -> Option<u64> {
        self.exhausted_until_unix().map(|secs| secs.saturating_mul(1000)).filter(|ms| *ms > now_unix_ms)
    }

    /// When the plan is usable again if a window is used up: the latest reset of the used-up windows.
    pub fn exhausted_until_unix(&self) -> Option<u64> {
        [self.primary, self.secondary]
            .into_iter()
            .flatten()
            .filter(UsageWindow::exhausted)
            .filter_map(|w| w.resets_unix)
            .max()
    }
}

/// How long until a `usage_limit_reached` error body's window resets, seconds: its
/// `resets_in_seconds`, or a minute when it gives none. `None` when the body is no such error.
pub fn usage_limit_wait(body: &[u8]) -> Option<u64> {
    let root: Value = serde_json::from_slice(body).ok()?;
    let error = root.get("error")?;
    let kind = error.get("type").or_else(|| error.get("code")).and_then(Value::as_str)?;
    if kind != "usage_limit_reached" {
        return None;
    }
    Some(error.get("resets_in_seconds").and_then(Value::as_u64).unwrap_or(60))
}
