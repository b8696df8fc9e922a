//! Live state of every pooled key: health, cooldowns, rate-limit windows, in-flight counts, learned
//! organization, recent session starts and counters. Readers take a snapshot (`view`, `status`).
//!
//! State changes through three doors, and only these:
//! * `begin`: a request is about to use a key (its in-flight count, its local rate-limit countdown and,
//!   for a request placed by load alone, its recent starts). The returned guard undoes the in-flight
//!   count when the attempt ends.
//! * `apply`: what the provider taught (an answer's status, organization and rate-limit windows, or a
//!   finished answer's token usage). It returns the health transition, if any, for the event stream.
//! * the user's changes: `add`, `remove`, `set_disabled`, `update`.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use serde::Serialize;
use tokio::time::Instant;

use crate::keys::{KeyEntry, KeyId, KeySource, Provider};
use crate::markers::{Markers, OrgTag};
use crate::quota::{Quota, Reading};
use crate::relay::Usage;
use crate::router::{Health, KeyView, PoolView};

/// How long until a recent session start counts half: long enough to even out a burst of new sessions,
/// short enough that a key back from an outage (or just added) catches up within minutes.
pub const STARTS_HALF_LIFE: Duration = Duration::from_secs(120);
/// Most models remembered as unavailable per key.
pub const MAX_MISSING_MODELS: usize = 32;

/// The effect of one upstream attempt on the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutcomeKind {
    /// The key served the request (any 2xx).
    Served,
    /// The client's request was refused for its own reasons (4xx other than auth and rate limits).
    ClientError,
    /// Rate limited: cool the key for this long.
    RateLimited {
        /// How long.
        cooldown: Duration,
    },
    /// The provider rejected the key.
    Rejected,
    /// The upstream failed (5xx, connection, timeout).
    Failed,
    /// The account is out of quota: rest the key this long.
    QuotaExhausted {
        /// How long.
        recheck: Duration,
    },
}

/// What one upstream answer (or failure) taught about a key.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The key.
    pub key: KeyId,
    /// When it was observed.
    pub at: Instant,
    /// What happened.
    pub kind: OutcomeKind,
    /// The upstream status, if an answer came back.
    pub status: Option<u16>,
    /// The `openai-organization` the upstream reported, if any.
    pub org: Option<String>,
    /// The rate-limit windows the answer reported.
    pub limits: Reading,
    /// The provider said this key cannot use this model.
    pub model_missing: Option<String>,
    /// The provider answered `invalid_encrypted_content` to a request Keymux had pinned correctly.
    pub invalid_encrypted: bool,
}

impl Outcome {
    /// An outcome with nothing but its kind.
    pub fn new(key: KeyId, at: Instant, kind: OutcomeKind) -> Self {
        Self {
            key,
            at,
            kind,
            status: None,
            org: None,
            limits: Reading::default(),
            model_missing: None,
            invalid_encrypted: false,
        }
    }
}

/// What the provider taught: an answer, or the token usage of a finished one.
#[derive(Clone, Debug)]
pub enum Learned {
    /// An answer (or a failure to get one).
    Answer(Outcome),
    /// A finished answer's usage, on UTC day `day`.
    Usage {
        /// The key.
        key: KeyId,
        /// The usage.
        usage: Usage,
        /// UTC day number.
        day: u32,
    },
}

/// A change of a key's health, for the event stream and notifications.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HealthChange {
    /// Rate limited until then.
    Cooling {
        /// When it frees.
        until: Instant,
    },
    /// Out of quota until then (or until re-enabled).
    QuotaExhausted {
        /// When it is tried again.
        until: Instant,
    },
    /// Rejected by the provider.
    Rejected,
    /// Usable again after a rejection or an exhausted quota.
    Recovered,
}

/// How a request begins on a key.
#[derive(Clone, Copy, Debug, Default)]
pub struct Begin {
    /// Its estimated tokens, counted down from the key's windows.
    pub tokens: u64,
    /// It was placed by load alone: it counts as a session start for the spread.
    pub start: bool,
}

/// Live state of one key (replaced whole on every change).
#[derive(Clone, Debug)]
struct Live {
    health: Health,
    learned_org: Option<String>,
    org_tag: OrgTag,
    last_status: Option<u16>,
}

/// A count that halves every `STARTS_HALF_LIFE`.
#[derive(Clone, Copy, Debug, Default)]
struct Decaying {
    value: f64,
    at: Option<Instant>,
}

impl Decaying {
    fn at(self, now: Instant) -> f64 {
        match self.at {
            None => 0.0,
            Some(at) => {
                let age = now.saturating_duration_since(at).as_secs_f64();
                self.value * 0.5f64.powf(age / STARTS_HALF_LIFE.as_secs_f64())
            }
        }
    }

    fn bump(&mut self, now: Instant) {
        self.value = self.at(now) + 1.0;
        self.at = Some(now);
    }
}

#[derive(Default)]
struct Counters {
    served: AtomicU64,
    failed: AtomicU64,
    invalid_encrypted: AtomicU64,
    input_tokens: AtomicU64,
    cached_tokens: AtomicU64,
    output_tokens: AtomicU64,
}

/// Small values under short-held locks: changed when a request starts and when an answer arrives.
#[derive(Default)]
struct Tally {
    quota: Quota,
    // Models the provider said this key cannot use; bounded by MAX_MISSING_MODELS.
    missing_models: Vec<String>,
    // Tokens used on `budget_day` (UTC day number).
    budget_used: u64,
    budget_day: u32,
    starts: Decaying,
}

struct Slot {
    entry: ArcSwap<KeyEntry>,
    fingerprint: String,
    in_flight: AtomicU32,
    counters: Counters,
    usage: Mutex<Tally>,
    live: ArcSwap<Live>,
}

impl Slot {
    fn lock(&self) -> std::sync::MutexGuard<'_, Tally> {
        // The guarded values are plain counters: a panic elsewhere leaves them valid.
        self.usage.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The pool of keys.
pub struct Pool {
    // Replaced only when keys are added or removed; bounded by `router::MAX_KEYS`.
    slots: ArcSwap<Vec<Arc<Slot>>>,
    markers: Markers,
}

/// A key currently serving a request; the in-flight count drops when this is dropped.
pub struct InFlight {
    slot: Arc<Slot>,
    entry: Arc<KeyEntry>,
}

impl InFlight {
    /// The key being used (its settings when the request began).
    pub fn entry(&self) -> &KeyEntry {
        &self.entry
    }

    /// The key's organization tag, read from its live state: still there when the key was removed
    /// while this request was in flight, so its answer is tagged all the same.
    pub fn org_tag(&self) -> OrgTag {
        self.slot.live.load().org_tag
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.slot.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A key's state as shown by the status API and `keymux keys list`. Never holds the secret.
#[derive(Clone, Debug, Serialize)]
pub struct KeyStatus {
    /// Stable id.
    pub id: KeyId,
    /// Label.
    pub label: String,
    /// Short keyed fingerprint of the secret (as in `keymux keys list` and the metrics).
    pub fingerprint: String,
    /// Provider.
    pub provider: Provider,
    /// Where the key came from.
    pub source: KeySource,
    /// Organization set by the user.
    pub org: Option<String>,
    /// Organization learned from upstream.
    pub learned_org: Option<String>,
    /// `ready`, `cooling`, `invalid`, `quota_exhausted` or `disabled`.
    pub health: &'static str,
    /// Milliseconds of cooldown (or quota rest) left.
    pub cooldown_ms: u64,
    /// Requests in flight.
    pub in_flight: u32,
    /// Requests served since start.
    pub served: u64,
    /// Upstream failures since start.
    pub failed: u64,
    /// Last upstream status.
    pub last_status: Option<u16>,
    /// Upstream `invalid_encrypted_content` answers to requests Keymux had pinned correctly (a provider
    /// incident, never the key's fault).
    pub invalid_encrypted_content: u64,
    /// Prompt tokens of successful answers since start.
    pub input_tokens: u64,
    /// Of those, served from the provider's prompt cache (the provider's own cache result).
    pub cached_tokens: u64,
    /// Output tokens since start.
    pub output_tokens: u64,
    /// Priority tier.
    pub priority: u8,
    /// Share of the tighter rate-limit window left.
    pub headroom: f32,
    /// The rate-limit windows the provider reported.
    #[serde(skip)]
    pub limits: Quota,
    /// Daily token budget, if any.
    pub daily_token_budget: Option<u64>,
    /// Tokens used today (UTC); above the budget is an overrun.
    pub tokens_today: u64,
    /// Models the provider said this key cannot use (it is skipped for them).
    pub unavailable_models: Vec<String>,
    /// The request window as it stands now.
    #[serde(skip)]
    pub requests_window: Option<crate::quota::WindowState>,
    /// The token window as it stands now.
    #[serde(skip)]
    pub tokens_window: Option<crate::quota::WindowState>,
    /// If not empty, the only models it serves.
    pub models: Vec<String>,
    /// Models it never serves.
    pub exclude_models: Vec<String>,
    /// Its own base URL, if any.
    pub base_url: Option<String>,
}

/// What a view is taken for: a request for `model` of about `tokens` tokens, at `now` on UTC day `day`.
#[derive(Clone, Copy, Debug)]
pub struct ViewFor<'a> {
    /// The model the request names.
    pub model: Option<&'a str>,
    /// Its estimated tokens.
    pub tokens: u64,
    /// The time.
    pub now: Instant,
    /// The UTC day number (budgets are per day).
    pub day: u32,
}

impl Pool {
    /// A pool of these keys (at most `router::MAX_KEYS`; extra keys are refused by the caller).
    pub fn new(entries: Vec<KeyEntry>, markers: Markers) -> Self {
        let slots =
            entries.into_iter().take(crate::router::MAX_KEYS).map(|entry| Self::slot_for(entry, &markers)).collect();
        Self { slots: ArcSwap::from_pointee(slots), markers }
    }

    fn slot_for(mut entry: KeyEntry, markers: &Markers) -> Arc<Slot> {
        if entry.org.is_none() && entry.provider == Provider::Azure {
            // Azure sends no organization header; each resource is its own organization.
            entry.org = entry.base_url.as_deref().and_then(azure_resource);
        }
        let org_tag = markers.org_tag(entry.org.as_deref(), &entry.id);
        Arc::new(Slot {
            fingerprint: markers.digest().fingerprint(&entry.secret),
            entry: ArcSwap::from_pointee(entry),
            in_flight: AtomicU32::new(0),
            counters: Counters::default(),
            usage: Mutex::new(Tally::default()),
            live: ArcSwap::from_pointee(Live { health: Health::Ready, learned_org: None, org_tag, last_status: None }),
        })
    }

    fn slot(&self, key: &KeyId) -> Option<Arc<Slot>> {
        self.slots.load().iter().find(|s| &s.entry.load().id == key).cloned()
    }

    /// The markers this pool's tags are computed with.
    pub fn markers(&self) -> &Markers {
        &self.markers
    }

    /// How many keys.
    pub fn len(&self) -> usize {
        self.slots.load().len()
    }

    /// Whether the pool is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A key's fingerprint (a keyed HMAC of its secret), the only way metrics name it.
    pub fn fingerprint(&self, key: &KeyId) -> Option<String> {
        self.slot(key).map(|s| s.fingerprint.clone())
    }

    /// The organization tag a key's markers carry now.
    pub fn org_tag(&self, key: &KeyId) -> Option<OrgTag> {
        self.slot(key).map(|s| s.live.load().org_tag)
    }

    /// A key's organization: configured, or learned from the provider.
    pub fn org_of(&self, key: &KeyId) -> Option<String> {
        let slot = self.slot(key)?;
        let configured = slot.entry.load().org.clone();
        configured.or_else(|| slot.live.load().learned_org.clone())
    }

    /// A key's label, or a placeholder naming a key no longer in the pool.
    pub fn label(&self, key: &KeyId) -> String {
        self.slot(key).map_or_else(|| format!("{key} (removed)"), |s| s.entry.load().label.clone())
    }

    /// The ids of every key, in pool order.
    pub fn ids(&self) -> Vec<KeyId> {
        self.slots.load().iter().map(|s| s.entry.load().id.clone()).collect()
    }

    /// A snapshot for the router.
    pub fn view(&self, request: ViewFor<'_>) -> PoolView {
        PoolView { keys: self.slots.load().iter().map(|s| key_view(s, request)).collect() }
    }

    /// Door 1: marks a key as serving one more request. `None` if the key left the pool.
    pub fn begin(&self, key: &KeyId, begin: Begin, now: Instant) -> Option<InFlight> {
        let slot = self.slot(key)?;
        slot.in_flight.fetch_add(1, Ordering::AcqRel);
        {
            let mut usage = slot.lock();
            usage.quota.spend(begin.tokens);
            if begin.start {
                usage.starts.bump(now);
            }
        }
        let entry = slot.entry.load_full();
        Some(InFlight { slot, entry })
    }

    /// Door 2: records what the provider taught. Returns the key's health change, if any.
    pub fn apply(&self, learned: &Learned) -> Option<(KeyId, HealthChange)> {
        match learned {
            Learned::Usage { key, usage, day } => {
                self.add_usage(key, *usage, *day);
                None
            }
            Learned::Answer(outcome) => self.answered(outcome),
        }
    }

    fn add_usage(&self, key: &KeyId, usage: Usage, day: u32) {
        let Some(slot) = self.slot(key) else { return };
        {
            let mut state = slot.lock();
            if state.budget_day != day {
                state.budget_day = day;
                state.budget_used = 0;
            }
            state.budget_used = state.budget_used.saturating_add(usage.input + usage.output);
        }
        slot.counters.input_tokens.fetch_add(usage.input, Ordering::Relaxed);
        slot.counters.cached_tokens.fetch_add(usage.cached, Ordering::Relaxed);
        slot.counters.output_tokens.fetch_add(usage.output, Ordering::Relaxed);
    }

    fn answered(&self, outcome: &Outcome) -> Option<(KeyId, HealthChange)> {
        let slot = self.slot(&outcome.key)?;
        let counter = match outcome.kind {
            OutcomeKind::Served | OutcomeKind::ClientError => &slot.counters.served,
            OutcomeKind::RateLimited { .. }
            | OutcomeKind::Rejected
            | OutcomeKind::Failed
            | OutcomeKind::QuotaExhausted { .. } => &slot.counters.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if outcome.invalid_encrypted {
            slot.counters.invalid_encrypted.fetch_add(1, Ordering::Relaxed);
        }
        {
            let mut state = slot.lock();
            state.quota.observe(outcome.limits);
            if let Some(model) = &outcome.model_missing {
                note_missing(&mut state.missing_models, model);
            }
        }
        let configured_org = slot.entry.load().org.is_some();
        let id = slot.entry.load().id.clone();
        // `rcu` hands back the value it replaced.
        let before = slot.live.rcu(|live| next_live(live, outcome, configured_org, &id, &self.markers)).health;
        let after = slot.live.load().health;
        health_change(before, after, outcome.at).map(|c| (outcome.key.clone(), c))
    }

    /// Door 3: adds a key (refused past `router::MAX_KEYS` or for a duplicate id).
    pub fn add(&self, entry: KeyEntry) -> bool {
        let mut added = false;
        self.slots.rcu(|slots| {
            added = slots.len() < crate::router::MAX_KEYS && !slots.iter().any(|s| s.entry.load().id == entry.id);
            let mut next = Vec::clone(slots);
            if added {
                next.push(Self::slot_for(entry.clone(), &self.markers));
            }
            next
        });
        added
    }

    /// Door 3: removes a key. Requests it is serving finish; nothing new is routed to it.
    pub fn remove(&self, key: &KeyId) -> bool {
        let mut removed = false;
        self.slots.rcu(|slots| {
            removed = slots.iter().any(|s| &s.entry.load().id == key);
            slots.iter().filter(|s| &s.entry.load().id != key).cloned().collect::<Vec<_>>()
        });
        removed
    }

    /// Door 3: changes a key's settings (label, priority, budget, models, organization). Its live state
    /// and counters stay.
    pub fn update(&self, key: &KeyId, change: impl FnOnce(&mut KeyEntry)) -> bool {
        let Some(slot) = self.slot(key) else { return false };
        let mut entry = KeyEntry::clone(&slot.entry.load());
        change(&mut entry);
        entry.id = key.clone();
        let org = entry.org.clone();
        slot.entry.store(Arc::new(entry));
        let live = slot.live.load();
        let tag = self.markers.org_tag(org.as_deref().or(live.learned_org.as_deref()), key);
        slot.live.rcu(|live| Live { org_tag: tag, ..Live::clone(live) });
        true
    }

    /// Door 3: switches a key off or back on.
    pub fn set_disabled(&self, key: &KeyId, disabled: bool) -> bool {
        let Some(slot) = self.slot(key) else {
            return false;
        };
        slot.live.rcu(|live| {
            let mut next = Live::clone(live);
            next.health = match (disabled, next.health) {
                (true, _) => Health::Disabled,
                // Re-enabling is the user saying the key is fine again (replaced, topped up): it clears a
                // rejection and an exhausted quota too, but not a rate-limit cooldown, which ends by itself.
                (false, Health::Disabled | Health::Invalid | Health::QuotaExhausted { .. }) => Health::Ready,
                (false, other) => other,
            };
            next
        });
        true
    }

    /// Status of every key, for the API and the CLI.
    pub fn status(&self, now: Instant, day: u32) -> Vec<KeyStatus> {
        self.slots.load().iter().map(|s| key_status(s, now, day)).collect()
    }
}

fn key_view(s: &Slot, request: ViewFor<'_>) -> KeyView {
    let entry = s.entry.load();
    let live = s.live.load();
    let state = s.lock();
    let model_ok = request.model.is_none_or(|m| entry.allows(m) && !state.missing_models.iter().any(|x| x == m));
    let used = if state.budget_day == request.day { state.budget_used } else { 0 };
    KeyView {
        id: entry.id.clone(),
        org: entry.org.clone().or_else(|| live.learned_org.clone()),
        org_tag: live.org_tag,
        in_flight: s.in_flight.load(Ordering::Acquire),
        priority: entry.priority,
        headroom: state.quota.headroom(request.now),
        exhausted_until: state.quota.exhausted_until(request.now, request.tokens),
        over_budget: entry.daily_token_budget.is_some_and(|b| used >= b),
        model_ok,
        recent_starts: state.starts.at(request.now) as f32,
        health: live.health,
    }
}

fn key_status(s: &Slot, now: Instant, day: u32) -> KeyStatus {
    let entry = s.entry.load();
    let live = s.live.load();
    let state = s.lock();
    let left = |until: Instant| u64::try_from((until - now).as_millis()).unwrap_or(u64::MAX);
    let (health, cooldown_ms) = match live.health {
        Health::Ready => ("ready", 0),
        Health::Cooling { until } | Health::QuotaExhausted { until } if until <= now => ("ready", 0),
        Health::Cooling { until } => ("cooling", left(until)),
        Health::Invalid => ("invalid", 0),
        Health::Disabled => ("disabled", 0),
        Health::QuotaExhausted { until } => ("quota_exhausted", left(until)),
    };
    let counters = &s.counters;
    KeyStatus {
        id: entry.id.clone(),
        label: entry.label.clone(),
        fingerprint: s.fingerprint.clone(),
        provider: entry.provider,
        source: entry.source,
        org: entry.org.clone(),
        learned_org: live.learned_org.clone(),
        health,
        cooldown_ms,
        in_flight: s.in_flight.load(Ordering::Acquire),
        served: counters.served.load(Ordering::Relaxed),
        failed: counters.failed.load(Ordering::Relaxed),
        last_status: live.last_status,
        invalid_encrypted_content: counters.invalid_encrypted.load(Ordering::Relaxed),
        input_tokens: counters.input_tokens.load(Ordering::Relaxed),
        cached_tokens: counters.cached_tokens.load(Ordering::Relaxed),
        output_tokens: counters.output_tokens.load(Ordering::Relaxed),
        priority: entry.priority,
        headroom: state.quota.headroom(now),
        limits: state.quota,
        daily_token_budget: entry.daily_token_budget,
        tokens_today: if state.budget_day == day { state.budget_used } else { 0 },
        unavailable_models: state.missing_models.clone(),
        requests_window: state.quota.windows(now).0,
        tokens_window: state.quota.windows(now).1,
        models: entry.models.clone(),
        exclude_models: entry.exclude_models.clone(),
        base_url: entry.base_url.clone(),
    }
}

/// A key's live state after an outcome.
fn next_live(live: &Live, outcome: &Outcome, configured_org: bool, id: &KeyId, markers: &Markers) -> Live {
    let mut next = Live::clone(live);
    if outcome.status.is_some() {
        next.last_status = outcome.status;
    }
    next.health = next_health(next.health, outcome);
    if let Some(org) = &outcome.org {
        if next.learned_org.as_deref() != Some(org) {
            next.learned_org = Some(org.clone());
            // A configured organization wins over what the provider says.
            if !configured_org {
                next.org_tag = markers.org_tag(Some(org), id);
            }
        }
    }
    next
}

fn next_health(health: Health, outcome: &Outcome) -> Health {
    if health == Health::Disabled {
        return Health::Disabled;
    }
    let at = outcome.at;
    match outcome.kind {
        // A success proves the key works: lift an expired cooldown or an earlier rejection (a transient
        // 401 during key rotation must not stick).
        OutcomeKind::Served | OutcomeKind::ClientError => match health {
            Health::Cooling { until } if until > at => health,
            _ => Health::Ready,
        },
        OutcomeKind::RateLimited { cooldown } => {
            let until = crate::clock::later(at, cooldown);
            match health {
                Health::Cooling { until: old } if old > until => health,
                _ => Health::Cooling { until },
            }
        }
        OutcomeKind::Rejected => Health::Invalid,
        OutcomeKind::Failed => health,
        OutcomeKind::QuotaExhausted { recheck } => Health::QuotaExhausted { until: crate::clock::later(at, recheck) },
    }
}

/// The transition worth telling the user about, if the health changed kind (or a cooldown grew).
fn health_change(before: Health, after: Health, now: Instant) -> Option<HealthChange> {
    let usable = |h: Health| match h {
        Health::Ready => true,
        Health::Cooling { until } | Health::QuotaExhausted { until } => until <= now,
        Health::Invalid | Health::Disabled => false,
    };
    match after {
        Health::Cooling { until } if before != after && until > now => Some(HealthChange::Cooling { until }),
        Health::QuotaExhausted { until } if before != after => Some(HealthChange::QuotaExhausted { until }),
        Health::Invalid if before != Health::Invalid => Some(HealthChange::Rejected),
        Health::Ready if !usable(before) && matches!(before, Health::Invalid | Health::QuotaExhausted { .. }) => {
            Some(HealthChange::Recovered)
        }
        _ => None,
    }
}

fn note_missing(missing: &mut Vec<String>, model: &str) {
    if !missing.iter().any(|m| m == model) {
        if missing.len() == MAX_MISSING_MODELS {
            missing.remove(0);
        }
        missing.push(model.chars().take(128).collect());
    }
}

/// `azure:<host>` for an Azure base URL.
fn azure_resource(base_url: &str) -> Option<String> {
    let rest = base_url.split_once("://").map_or(base_url, |(_, r)| r);
    let host = rest.split(['/', '?']).next().filter(|h| !h.is_empty())?;
    Some(format!("azure:{}", host.to_ascii_lowercase()))
}

#[cfg(test)]
mod tests;
