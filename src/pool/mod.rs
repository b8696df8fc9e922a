//! Live state of every pooled key: health, cooldowns, in-flight counts, learned organization and simple
//! counters. Readers take a lock-free snapshot (`view`); state changes only through `apply(Outcome)`.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use serde::Serialize;
use tokio::time::Instant;

use crate::keys::{KeyEntry, KeyId, KeySource, Provider};
use crate::markers::{Markers, OrgTag};
use crate::router::{Health, KeyView, PoolView};

/// What happened when a key was used; the only way pool state changes.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The key.
    pub key: KeyId,
    /// When it was observed.
    pub at: Instant,
    /// What happened.
    pub kind: OutcomeKind,
    /// The `openai-organization` the upstream reported, if any.
    pub org: Option<String>,
}

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

/// Live state of one key (replaced whole on every change).
#[derive(Clone, Debug)]
struct Live {
    health: Health,
    learned_org: Option<String>,
    org_tag: OrgTag,
    last_status: Option<u16>,
}

struct Slot {
    entry: KeyEntry,
    fingerprint: String,
    in_flight: AtomicU32,
    served: AtomicU64,
    failed: AtomicU64,
    invalid_encrypted: AtomicU64,
    input_tokens: AtomicU64,
    cached_tokens: AtomicU64,
    output_tokens: AtomicU64,
    // Small and short-held: updated when a request starts and when an answer arrives.
    quota: std::sync::Mutex<crate::quota::Quota>,
    // Models the provider said this key cannot use; bounded by MAX_MISSING_MODELS.
    missing_models: std::sync::Mutex<Vec<String>>,
    // Tokens used on `budget_day` (UTC day number).
    budget_used: AtomicU64,
    budget_day: AtomicU64,
    starts: AtomicU64,
    live: ArcSwap<Live>,
}

/// Most models remembered as unavailable per key.
pub const MAX_MISSING_MODELS: usize = 32;

/// The pool of keys.
pub struct Pool {
    // Replaced only when keys are added or removed; bounded by `router::MAX_KEYS`.
    slots: ArcSwap<Vec<Arc<Slot>>>,
    markers: Markers,
}

/// A key currently serving a request; the in-flight count drops when this is dropped.
pub struct InFlight {
    slot: Arc<Slot>,
}

impl InFlight {
    /// The key being used.
    pub fn entry(&self) -> &KeyEntry {
        &self.slot.entry
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
    /// `ready`, `cooling`, `invalid` or `disabled`.
    pub health: &'static str,
    /// Milliseconds of cooldown left.
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
    pub limits: crate::quota::Quota,
    /// Daily token budget, if any.
    pub daily_token_budget: Option<u64>,
    /// Tokens used today (UTC); above the budget is an overrun.
    pub tokens_today: u64,
    /// Models the provider said this key cannot use (it is skipped for them).
    pub unavailable_models: Vec<String>,
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
            fingerprint: markers.key_fingerprint(&entry.secret),
            entry,
            in_flight: AtomicU32::new(0),
            served: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            invalid_encrypted: AtomicU64::new(0),
            input_tokens: AtomicU64::new(0),
            cached_tokens: AtomicU64::new(0),
            output_tokens: AtomicU64::new(0),
            quota: std::sync::Mutex::new(crate::quota::Quota::default()),
            missing_models: std::sync::Mutex::new(Vec::new()),
            budget_used: AtomicU64::new(0),
            budget_day: AtomicU64::new(0),
            starts: AtomicU64::new(0),
            live: ArcSwap::from_pointee(Live { health: Health::Ready, learned_org: None, org_tag, last_status: None }),
        })
    }

    /// Adds a key (refused past `router::MAX_KEYS` or for a duplicate id).
    pub fn add(&self, entry: KeyEntry) -> bool {
        let mut added = false;
        self.slots.rcu(|slots| {
            added = slots.len() < crate::router::MAX_KEYS && !slots.iter().any(|s| s.entry.id == entry.id);
            let mut next = Vec::clone(slots);
            if added {
                next.push(Self::slot_for(entry.clone(), &self.markers));
            }
            next
        });
        added
    }

    /// Removes a key. Requests it is serving finish; nothing new is routed to it.
    pub fn remove(&self, key: &KeyId) -> bool {
        let mut removed = false;
        self.slots.rcu(|slots| {
            removed = slots.iter().any(|s| &s.entry.id == key);
            slots.iter().filter(|s| &s.entry.id != key).cloned().collect::<Vec<_>>()
        });
        removed
    }

    /// Switches a key off or back on.
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

    /// A key's fingerprint (a keyed HMAC of its secret), the only way metrics name it.
    pub fn fingerprint(&self, key: &KeyId) -> Option<String> {
        self.slot(key).map(|s| s.fingerprint.clone())
    }

    /// The organization tag a key's markers carry now.
    pub fn org_tag(&self, key: &KeyId) -> Option<OrgTag> {
        self.slot(key).map(|s| s.live.load().org_tag)
    }

    /// Adds the token counts a successful answer reported.
    pub fn add_usage(&self, key: &KeyId, usage: crate::relay::Usage) {
        if let Some(slot) = self.slot(key) {
            let today = utc_day();
            if slot.budget_day.swap(today, Ordering::Relaxed) != today {
                slot.budget_used.store(0, Ordering::Relaxed);
            }
            slot.budget_used.fetch_add(usage.input + usage.output, Ordering::Relaxed);
            slot.input_tokens.fetch_add(usage.input, Ordering::Relaxed);
            slot.cached_tokens.fetch_add(usage.cached, Ordering::Relaxed);
            slot.output_tokens.fetch_add(usage.output, Ordering::Relaxed);
        }
    }

    /// Counts an upstream `invalid_encrypted_content` on a correctly pinned request.
    pub fn note_invalid_encrypted(&self, key: &KeyId) {
        if let Some(slot) = self.slot(key) {
            slot.invalid_encrypted.fetch_add(1, Ordering::Relaxed);
        }
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

    /// A snapshot for the router (any model).
    pub fn view(&self) -> PoolView {
        self.view_for(None, 0, Instant::now())
    }

    /// A snapshot for a request for `model` of about `tokens` tokens.
    pub fn view_for(&self, model: Option<&str>, tokens: u64, now: Instant) -> PoolView {
        let slots = self.slots.load();
        let today = utc_day();
        PoolView {
            keys: slots
                .iter()
                .map(|s| {
                    let live = s.live.load();
                    let quota = *lock(&s.quota);
                    let model_ok =
                        model.is_none_or(|m| s.entry.allows(m) && !lock(&s.missing_models).iter().any(|x| x == m));
                    let used = if s.budget_day.load(Ordering::Relaxed) == today {
                        s.budget_used.load(Ordering::Relaxed)
                    } else {
                        0
                    };
                    KeyView {
                        id: s.entry.id.clone(),
                        org: s.entry.org.clone().or_else(|| live.learned_org.clone()),
                        org_tag: live.org_tag,
                        in_flight: s.in_flight.load(Ordering::Acquire),
                        priority: s.entry.priority,
                        headroom: quota.headroom(now),
                        exhausted_until: quota.exhausted_until(now, tokens),
                        over_budget: s.entry.daily_token_budget.is_some_and(|b| used >= b),
                        model_ok,
                        starts: s.starts.load(Ordering::Relaxed),
                        health: live.health,
                    }
                })
                .collect(),
        }
    }

    /// Marks a key as serving one more request of about `tokens` tokens. `None` if the key left the pool.
    pub fn begin(&self, key: &KeyId) -> Option<InFlight> {
        self.begin_spending(key, 0)
    }

    /// Like `begin`, and counts the request down from the key's rate-limit windows.
    pub fn begin_spending(&self, key: &KeyId, tokens: u64) -> Option<InFlight> {
        let slot = self.slot(key)?;
        slot.in_flight.fetch_add(1, Ordering::AcqRel);
        lock(&slot.quota).spend(tokens);
        Some(InFlight { slot })
    }

    /// Takes the rate-limit figures of an answer.
    pub fn observe_limits(&self, key: &KeyId, headers: &axum::http::HeaderMap, now: Instant) {
        if let Some(slot) = self.slot(key) {
            lock(&slot.quota).observe(headers, now);
        }
    }

    /// Counts a session started on this key by load alone.
    pub fn note_start(&self, key: &KeyId) {
        if let Some(slot) = self.slot(key) {
            slot.starts.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Remembers that the provider said this key cannot use `model`.
    pub fn note_model_missing(&self, key: &KeyId, model: &str) {
        if let Some(slot) = self.slot(key) {
            let mut missing = lock(&slot.missing_models);
            if !missing.iter().any(|m| m == model) {
                if missing.len() == MAX_MISSING_MODELS {
                    missing.remove(0);
                }
                missing.push(model.chars().take(128).collect());
            }
        }
    }

    fn slot(&self, key: &KeyId) -> Option<Arc<Slot>> {
        self.slots.load().iter().find(|s| &s.entry.id == key).cloned()
    }

    /// Records what happened on a key.
    pub fn apply(&self, outcome: &Outcome) {
        let Some(slot) = self.slot(&outcome.key) else {
            return;
        };
        match outcome.kind {
            OutcomeKind::Served | OutcomeKind::ClientError => {
                slot.served.fetch_add(1, Ordering::Relaxed);
            }
            OutcomeKind::RateLimited { .. }
            | OutcomeKind::Rejected
            | OutcomeKind::Failed
            | OutcomeKind::QuotaExhausted { .. } => {
                slot.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
        slot.live.rcu(|live| {
            let mut next = Live::clone(live);
            match outcome.kind {
                OutcomeKind::Served | OutcomeKind::ClientError => {
                    // A success proves the key works: lift an expired cooldown or an earlier rejection
                    // (a transient 401 during key rotation must not stick).
                    if !matches!(next.health, Health::Cooling { until } if until > outcome.at)
                        && next.health != Health::Disabled
                    {
                        next.health = Health::Ready;
                    }
                }
                OutcomeKind::RateLimited { cooldown } => {
                    let until = outcome.at + cooldown;
                    next.health = match next.health {
                        Health::Cooling { until: old } if old > until => Health::Cooling { until: old },
                        Health::Disabled => Health::Disabled,
                        _ => Health::Cooling { until },
                    };
                }
                OutcomeKind::Rejected => {
                    if next.health != Health::Disabled {
                        next.health = Health::Invalid;
                    }
                }
                OutcomeKind::Failed => {}
                OutcomeKind::QuotaExhausted { recheck } => {
                    if next.health != Health::Disabled {
                        next.health = Health::QuotaExhausted { until: outcome.at + recheck };
                    }
                }
            }
            if let Some(org) = &outcome.org {
                if next.learned_org.as_deref() != Some(org) {
                    next.learned_org = Some(org.clone());
                    // A configured organization wins over what the provider says.
                    if slot.entry.org.is_none() {
                        next.org_tag = self.markers.org_tag(Some(org), &slot.entry.id);
                    }
                }
            }
            next
        });
    }

    /// Status of every key, for the API and the CLI.
    pub fn status(&self, now: Instant) -> Vec<KeyStatus> {
        self.slots
            .load()
            .iter()
            .map(|s| {
                let live = s.live.load();
                let (health, cooldown_ms) = match live.health {
                    Health::Ready => ("ready", 0),
                    Health::Cooling { until } if until <= now => ("ready", 0),
                    Health::Cooling { until } => {
                        ("cooling", u64::try_from((until - now).as_millis()).unwrap_or(u64::MAX))
                    }
                    Health::Invalid => ("invalid", 0),
                    Health::Disabled => ("disabled", 0),
                    Health::QuotaExhausted { until } if until <= now => ("ready", 0),
                    Health::QuotaExhausted { until } => {
                        ("quota_exhausted", u64::try_from((until - now).as_millis()).unwrap_or(u64::MAX))
                    }
                };
                let quota = *lock(&s.quota);
                let today = utc_day();
                let used = if s.budget_day.load(Ordering::Relaxed) == today {
                    s.budget_used.load(Ordering::Relaxed)
                } else {
                    0
                };
                KeyStatus {
                    id: s.entry.id.clone(),
                    label: s.entry.label.clone(),
                    fingerprint: s.fingerprint.clone(),
                    provider: s.entry.provider,
                    source: s.entry.source,
                    org: s.entry.org.clone(),
                    learned_org: live.learned_org.clone(),
                    health,
                    cooldown_ms,
                    in_flight: s.in_flight.load(Ordering::Acquire),
                    served: s.served.load(Ordering::Relaxed),
                    failed: s.failed.load(Ordering::Relaxed),
                    last_status: live.last_status,
                    invalid_encrypted_content: s.invalid_encrypted.load(Ordering::Relaxed),
                    input_tokens: s.input_tokens.load(Ordering::Relaxed),
                    cached_tokens: s.cached_tokens.load(Ordering::Relaxed),
                    output_tokens: s.output_tokens.load(Ordering::Relaxed),
                    priority: s.entry.priority,
                    headroom: quota.headroom(now),
                    limits: quota,
                    daily_token_budget: s.entry.daily_token_budget,
                    tokens_today: used,
                    unavailable_models: lock(&s.missing_models).clone(),
                }
            })
            .collect()
    }

    /// Records the last upstream status of a key (display only).
    pub fn note_status(&self, key: &KeyId, status: u16) {
        if let Some(slot) = self.slot(key) {
            slot.live.rcu(|live| {
                let mut next = Live::clone(live);
                next.last_status = Some(status);
                next
            });
        }
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The guarded values are plain counters: a panic elsewhere leaves them valid.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn utc_day() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() / 86_400)
}

/// `azure:<host>` for an Azure base URL.
fn azure_resource(base_url: &str) -> Option<String> {
    let rest = base_url.split_once("://").map_or(base_url, |(_, r)| r);
    let host = rest.split(['/', '?']).next().filter(|h| !h.is_empty())?;
    Some(format!("azure:{}", host.to_ascii_lowercase()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secrets::Secret;

    fn pool(entries: Vec<KeyEntry>) -> Pool {
        Pool::new(entries, Markers::new(&Secret::new("pool-tests")))
    }

    fn entry(id: &str) -> KeyEntry {
        KeyEntry::new(KeyId::new(id), id, Provider::Openai, Secret::new(format!("sk-{id}")), KeySource::Embedded)
    }

    fn outcome(key: &str, at: Instant, kind: OutcomeKind) -> Outcome {
        Outcome { key: KeyId::new(key), at, kind, org: None }
    }

    #[tokio::test(start_paused = true)]
    async fn cooldown_expires_with_time() {
        let pool = pool(vec![entry("a")]);
        let now = Instant::now();
        pool.apply(&outcome("a", now, OutcomeKind::RateLimited { cooldown: Duration::from_secs(2) }));
        assert_eq!(pool.status(Instant::now())[0].health, "cooling");
        tokio::time::advance(Duration::from_millis(2_001)).await;
        assert_eq!(pool.status(Instant::now())[0].health, "ready");
        // A shorter later cooldown never shortens a longer one.
        let now = Instant::now();
        pool.apply(&outcome("a", now, OutcomeKind::RateLimited { cooldown: Duration::from_secs(10) }));
        pool.apply(&outcome("a", now, OutcomeKind::RateLimited { cooldown: Duration::from_secs(1) }));
        assert!(pool.status(now)[0].cooldown_ms >= 9_000);
    }

    #[tokio::test(start_paused = true)]
    async fn in_flight_follows_guards_and_orgs_are_learned() {
        let pool = pool(vec![entry("a"), entry("b")]);
        let g1 = pool.begin(&KeyId::new("a")).expect("a");
        let g2 = pool.begin(&KeyId::new("a")).expect("a");
        assert_eq!(pool.view().keys[0].in_flight, 2);
        drop(g1);
        assert_eq!(pool.view().keys[0].in_flight, 1);
        drop(g2);
        assert_eq!(pool.view().keys[0].in_flight, 0);
        assert!(pool.begin(&KeyId::new("zzz")).is_none());

        let mut o = outcome("b", Instant::now(), OutcomeKind::Served);
        o.org = Some("org-b".into());
        let before = pool.view().keys[1].org_tag;
        pool.apply(&o);
        assert_eq!(pool.view().keys[1].org.as_deref(), Some("org-b"));
        assert_ne!(pool.view().keys[1].org_tag, before, "learning the org changes the tag");
        assert!(pool.remove(&KeyId::new("a")));
        assert_eq!(pool.len(), 1);
        assert!(pool.add(entry("a")));
        assert!(!pool.add(entry("a")), "no duplicate ids");
    }

    #[test]
    fn azure_keys_of_one_resource_share_an_organization() {
        let az = |id: &str, url: &str| KeyEntry { provider: Provider::Azure, base_url: Some(url.into()), ..entry(id) };
        let pool = pool(vec![
            az("x", "https://east.openai.azure.com/openai/v1"),
            az("y", "https://EAST.openai.azure.com/openai/v1/"),
            az("z", "https://west.openai.azure.com/openai/v1"),
        ]);
        let view = pool.view();
        assert_eq!(view.keys[0].org_tag, view.keys[1].org_tag);
        assert_ne!(view.keys[0].org_tag, view.keys[2].org_tag);
        assert_eq!(view.keys[0].org.as_deref(), Some("azure:east.openai.azure.com"));
    }

    #[tokio::test(start_paused = true)]
    async fn rejection_sticks_until_a_success() {
        let pool = pool(vec![entry("a")]);
        pool.apply(&outcome("a", Instant::now(), OutcomeKind::Rejected));
        assert_eq!(pool.view().keys[0].health, Health::Invalid);
        pool.apply(&outcome("a", Instant::now(), OutcomeKind::Failed));
        assert_eq!(pool.view().keys[0].health, Health::Invalid);
        pool.apply(&outcome("a", Instant::now(), OutcomeKind::Served));
        assert_eq!(pool.view().keys[0].health, Health::Ready);
    }
}
