//! A key's state as the status API, the tray and `keymux keys list` show it: the one projection of a
//! pool slot for people (the router reads `view` instead).

use std::sync::atomic::Ordering;

use serde::{Deserialize, Serialize};
use std::time::Instant;
use ts_rs::TS;

use super::{HealthState, Slot};
use crate::keys::{KeyId, KeySource, ProviderId};
use crate::quota::WindowState;

/// A key's state at one moment. Never holds the secret. The times are relative to that moment
/// (`api::types::KeyInfo` adds them as Unix milliseconds).
#[derive(Clone, Debug, Serialize, Deserialize, TS)]
pub struct KeyStatus {
    /// The id the config, the CLI and the control API name the key by (`k_work`, `env-b1`); never
    /// derived from the secret.
    pub id: KeyId,
    /// The name the user gave the key, shown on its card.
    pub label: String,
    /// A short digest of the secret under the install secret (as in `keymux keys list` and the
    /// metrics): tells keys apart, reveals nothing.
    pub fingerprint: String,
    /// The provider the key talks to (OpenAI, Azure OpenAI, a ChatGPT plan).
    pub provider: ProviderId,
    /// Where the key came from.
    pub source: KeySource,
    /// Its organization: configured, else learned.
    pub org: Option<String>,
    /// Whether the organization was learned from the provider (not configured).
    pub org_learned: bool,
    /// Whether the router may use it now, and if not, why (cooling, out of quota, rejected, disabled).
    pub health: HealthState,
    /// Requests sent on this key whose answer has not finished yet.
    pub in_flight: u32,
    /// Its settings: priority, token budget, models, the share of its windows kept.
    #[serde(flatten)]
    pub settings: crate::key_settings::KeySettings,
    /// Its budget in money.
    #[serde(flatten)]
    pub money: crate::budget::MoneyBudget,
    /// Tokens used today (UTC); above the budget is an overrun.
    pub tokens_today: u64,
    /// Whether less than that is left now: it takes no new sessions until the window refills.
    pub window_reserved: bool,
    /// Share of the tighter rate-limit window left, 0 to 1.
    pub headroom: f32,
    /// Answers since start that the key itself served: any 2xx, and client errors (the key was fine).
    pub served: u64,
    /// Answers since start that held against the key: rate limited, out of quota, rejected, or a
    /// provider failure (5xx, connection, timeout).
    pub failed: u64,
    /// The HTTP status of the provider's last answer on this key (`None`: it has not answered yet).
    pub last_status: Option<u16>,
    /// Upstream `invalid_encrypted_content` answers to requests Keymux had pinned correctly (a provider
    /// incident, never the key's fault).
    pub invalid_encrypted_content: u64,
    /// Answers served on this key that said the provider dropped reasoning from the input
    /// (`input_transformations`, turn boundaries left out): turns that lost part of their session's
    /// reasoning although they succeeded.
    pub reasoning_dropped: u64,
    /// Prompt tokens of successful answers since start.
    pub input_tokens: u64,
    /// Of those, served from the provider's prompt cache (the provider's own cache result).
    pub cached_tokens: u64,
    /// Output tokens (reasoning included) the provider counted on this key since start.
    pub output_tokens: u64,
    /// `cached_tokens / input_tokens`, 0 to 1 (0 before any prompt).
    pub cached_ratio: f32,
    /// Models the provider said this key cannot use (it is skipped for them).
    pub unavailable_models: Vec<String>,
    /// Its base URL, when it has its own (Azure, a proxy); otherwise the provider's default.
    pub base_url: Option<String>,
    /// A ChatGPT plan's account and plan type, from its tokens' claims (never a token).
    pub plan: Option<keymux_core::provider::chatgpt::PlanInfo>,
    /// A ChatGPT plan's usage windows (5-hour and weekly), as its latest answer reported them.
    pub plan_windows: Option<keymux_core::provider::chatgpt::PlanWindows>,
    /// Milliseconds of cooldown (or quota rest) left.
    #[serde(skip)]
    #[ts(skip)]
    pub cooldown_ms: u64,
    /// The request window as it stands now.
    #[serde(skip)]
    #[ts(skip)]
    pub requests_window: Option<WindowState>,
    /// The token window as it stands now.
    #[serde(skip)]
    #[ts(skip)]
    pub tokens_window: Option<WindowState>,
}

impl KeyStatus {
    /// Until when a ChatGPT plan takes no new session (Unix milliseconds, `now_unix_ms` being the
    /// moment this status was read at): resting after its `usage_limit_reached` answer, or a 5-hour or
    /// weekly window its last answer reported used up, whichever ends later. `None` for an API key or an
    /// open plan. The router closes a plan the same way (`view::plan_used_up`).
    pub fn plan_used_up_until_unix_ms(&self, now_unix_ms: u64) -> Option<u64> {
        self.plan.as_ref()?;
        let resting = matches!(self.health, HealthState::Cooling | HealthState::QuotaExhausted)
            .then(|| now_unix_ms.saturating_add(self.cooldown_ms))
            .filter(|_| self.cooldown_ms > 0);
        let reported = self.plan_windows.and_then(|w| w.used_up_until_ms(now_unix_ms));
        resting.max(reported)
    }
}

pub(super) fn key_status(s: &Slot, now: Instant, day: u32) -> KeyStatus {
    let entry = s.entry.load();
    let live = s.live.load();
    let state = s.lock();
    let (health, left) = live.health.at(now);
    let counters = &s.counters;
    let input_tokens = counters.input_tokens.load(Ordering::Relaxed);
    let cached_tokens = counters.cached_tokens.load(Ordering::Relaxed);
    let (requests_window, tokens_window) = state.quota.windows(now);
    KeyStatus {
        id: entry.id.clone(),
        label: entry.label.clone(),
        fingerprint: s.fingerprint.clone(),
        provider: entry.provider,
        source: entry.source,
        org_learned: entry.org.is_none() && live.learned_org.is_some(),
        org: entry.org.clone().or_else(|| live.learned_org.clone()),
        health,
        in_flight: s.in_flight.load(Ordering::Acquire),
        settings: entry.settings.clone(),
        money: entry.money,
        tokens_today: if state.budget_day == day { state.budget_used } else { 0 },
        window_reserved: entry.settings.window_reserve(&state.quota, now).is_some(),
        headroom: state.quota.headroom(now),
        served: counters.served.load(Ordering::Relaxed),
        failed: counters.failed.load(Ordering::Relaxed),
        last_status: live.last_status,
        invalid_encrypted_content: counters.invalid_encrypted.load(Ordering::Relaxed),
        reasoning_dropped: counters.reasoning_dropped.load(Ordering::Relaxed),
        input_tokens,
        cached_tokens,
        output_tokens: counters.output_tokens.load(Ordering::Relaxed),
        cached_ratio: if input_tokens == 0 { 0.0 } else { cached_tokens as f32 / input_tokens as f32 },
        unavailable_models: state.missing_models.clone(),
        base_url: entry.base_url.clone(),
        plan: entry.provider.get().plan(&entry.secret),
        plan_windows: state.plan_windows,
        cooldown_ms: left.map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        requests_window,
        tokens_window,
    }
}
