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
use std::time::Instant;

use crate::keys::{KeyEntry, KeyId};
use crate::markers::{Markers, OrgTag};
use crate::quota::Quota;
use crate::spend::Usage;

mod learned;
mod models;
mod status;
mod view;

pub use keymux_core::pool::{
    unreachable_backoff, Health, HealthChange, HealthState, KeyView, OutcomeKind, PoolView, ViewFor, MAX_KEYS,
    MAX_UNREACHABLE_BACKOFF,
};
pub use learned::{Begin, Learned, Outcome};
pub use models::{listed_models, MAX_LIST_BYTES, MAX_MODELS_PER_KEY, MAX_SLUG_BYTES};
pub use status::KeyStatus;

use keymux_core::pool::{health_change, next_health, switched};
use view::key_view;
/// How long a background probe of an unreachable key may run before another may start.
const RETRY_CLAIM: std::time::Duration = std::time::Duration::from_secs(60);

/// How long until a recent session start counts half: long enough to even out a burst of new sessions,
/// short enough that a key back from an outage (or just added) catches up within minutes.
pub const STARTS_HALF_LIFE: Duration = Duration::from_secs(120);
/// Most models remembered as unavailable per key.
pub const MAX_MISSING_MODELS: usize = 32;

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
    reasoning_dropped: AtomicU64,
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
    // A ChatGPT plan's usage windows, as its latest answer that reported them said.
    plan_windows: Option<keymux_core::provider::chatgpt::PlanWindows>,
    // The models the provider listed for this key (`GET /models`), bounded by `MAX_MODELS_PER_KEY`.
    listed_models: Option<Arc<[String]>>,
}

struct Slot {
    /// The key's id, fixed for the slot's life (`update` keeps it): found without loading the entry.
    id: KeyId,
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
    // Replaced only when keys are added or removed; bounded by `MAX_KEYS`.
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

impl Pool {
    /// A pool of these keys (at most `MAX_KEYS`; extra keys are refused by the caller).
    pub fn new(entries: Vec<KeyEntry>, markers: Markers) -> Self {
        let slots = entries.into_iter().take(MAX_KEYS).map(|entry| Self::slot_for(entry, &markers)).collect();
        Self { slots: ArcSwap::from_pointee(slots), markers }
    }

    /// The organization a key is filed under before any answer names one, as its provider says (an
    /// Azure resource, a ChatGPT plan's account).
    fn with_provider_org(mut entry: KeyEntry) -> KeyEntry {
        entry.org = entry.provider.get().org(&entry.secret, entry.base_url.as_deref(), entry.org.take());
        entry
    }

    fn slot_for(entry: KeyEntry, markers: &Markers) -> Arc<Slot> {
        let entry = Self::with_provider_org(entry);
        let org_tag = markers.org_tag(entry.org.as_deref(), &entry.id);
        Arc::new(Slot {
            fingerprint: markers.digest().fingerprint(&entry.provider.get().identity(&entry.secret)),
            id: entry.id.clone(),
            entry: ArcSwap::from_pointee(entry),
            in_flight: AtomicU32::new(0),
            counters: Counters::default(),
            usage: Mutex::new(Tally::default()),
            live: ArcSwap::from_pointee(Live { health: Health::Ready, learned_org: None, org_tag, last_status: None }),
        })
    }

    fn slot(&self, key: &KeyId) -> Option<Arc<Slot>> {
        self.slots.load().iter().find(|s| &s.id == key).cloned()
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

    /// Whether a key is a plan (whose use the subscription includes: it costs nothing more).
    pub fn is_plan(&self, key: &KeyId) -> bool {
        self.slot(key).is_some_and(|s| s.entry.load().provider.get().is_plan())
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

    /// Whether `key` is in the pool.
    pub fn contains(&self, key: &KeyId) -> bool {
        self.slot(key).is_some()
    }

    /// The labels of every key, in pool order.
    pub fn labels(&self) -> Vec<String> {
        self.slots.load().iter().map(|s| s.entry.load().label.clone()).collect()
    }

    /// The ids of every key, in pool order.
    pub fn ids(&self) -> Vec<KeyId> {
        self.slots.load().iter().map(|s| s.id.clone()).collect()
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
            Learned::Outcome(outcome) => self.answered(outcome),
            Learned::ReasoningDropped { key } => {
                self.slot(key).map(|s| s.counters.reasoning_dropped.fetch_add(1, Ordering::Relaxed));
                None
            }
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
            | OutcomeKind::QuotaExhausted { .. }
            | OutcomeKind::Unreachable => &slot.counters.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if outcome.invalid_encrypted {
            slot.counters.invalid_encrypted.fetch_add(1, Ordering::Relaxed);
        }
        {
            let mut state = slot.lock();
            state.quota.observe(outcome.limits);
            if let Some(windows) = &outcome.plan {
                state.plan_windows = Some(**windows);
            }
            if let Some(model) = &outcome.model_missing {
                note_missing(&mut state.missing_models, model);
            }
        }
        let configured_org = slot.entry.load().org.is_some();
        let id = slot.id.clone();
        // `rcu` hands back the value it replaced.
        let before = slot.live.rcu(|live| next_live(live, outcome, configured_org, &id, &self.markers)).health;
        let after = slot.live.load().health;
        health_change(before, after, outcome.at).map(|c| (outcome.key.clone(), c))
    }

    /// Door 3: adds a key (refused past `MAX_KEYS` or for a duplicate id).
    pub fn add(&self, entry: KeyEntry) -> bool {
        let mut added = false;
        self.slots.rcu(|slots| {
            added = slots.len() < MAX_KEYS && !slots.iter().any(|s| s.id == entry.id);
            let mut next = Vec::clone(slots);
            if added {
                next.push(Self::slot_for(entry.clone(), &self.markers));
            }
            next
        });
        added
    }

    /// Door 3: gives a key a new secret: a fresh slot (new fingerprint, fresh health, windows and
    /// counters) in the same place. Requests the old secret is serving finish with it.
    pub fn replace(&self, entry: KeyEntry) -> bool {
        let mut replaced = false;
        self.slots.rcu(|slots| {
            let mut next = Vec::clone(slots);
            let at = next.iter().position(|s| s.id == entry.id);
            replaced = at.is_some();
            if let Some(at) = at {
                next[at] = Self::slot_for(entry.clone(), &self.markers);
            }
            next
        });
        replaced
    }

    /// The unreachable keys due for their background probe, claimed: each is left alone for another
    /// minute, so a probe still running is not started twice (its outcome sets the next try).
    pub fn claim_retries(&self, now: Instant) -> Vec<KeyId> {
        let mut due = Vec::new();
        let is_due = |health: Health| matches!(health, Health::Unreachable { until, .. } if until <= now);
        // Most ticks find nothing due: only a due key's live state is written.
        for slot in self.slots.load().iter().filter(|s| is_due(s.live.load().health)) {
            let claimed = slot.live.rcu(|live| match live.health {
                Health::Unreachable { until, streak } if until <= now => Live {
                    health: Health::Unreachable { until: crate::clock::later(now, RETRY_CLAIM), streak },
                    ..Live::clone(live)
                },
                _ => Live::clone(live),
            });
            if is_due(claimed.health) {
                due.push(slot.id.clone());
            }
        }
        due
    }

    /// The key whose secret has this fingerprint, if one has.
    pub fn holder_of(&self, fingerprint: &str) -> Option<KeyId> {
        self.slots.load().iter().find(|s| s.fingerprint == fingerprint).map(|s| s.id.clone())
    }

    /// A key's runtime entry (settings and secret), if it is in the pool.
    pub fn entry(&self, key: &KeyId) -> Option<KeyEntry> {
        self.slot(key).map(|s| KeyEntry::clone(&s.entry.load()))
    }

    /// Where `key` stands against its budget in money, by what `spend` says it spent; `None` when it is
    /// not in the pool.
    pub fn budget_of(&self, key: &KeyId, spend: &crate::budget::SpendNow) -> Option<crate::budget::BudgetState> {
        let slot = self.slot(key)?;
        Some(spend.state_of(&slot.fingerprint, &slot.entry.load().money))
    }

    /// The keys with a budget in money: id, label, fingerprint and the budget.
    pub fn budgeted(&self) -> Vec<(KeyId, String, String, crate::budget::MoneyBudget)> {
        let slots = self.slots.load();
        let with = slots.iter().filter(|s| s.entry.load().money.is_set());
        with.map(|s| {
            let entry = s.entry.load();
            (entry.id.clone(), entry.label.clone(), s.fingerprint.clone(), entry.money)
        })
        .collect()
    }

    /// Door 3: removes a key. Requests it is serving finish; nothing new is routed to it.
    pub fn remove(&self, key: &KeyId) -> bool {
        let mut removed = false;
        self.slots.rcu(|slots| {
            removed = slots.iter().any(|s| &s.id == key);
            slots.iter().filter(|s| &s.id != key).cloned().collect::<Vec<_>>()
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
        let entry = Self::with_provider_org(entry);
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
            next.health = switched(next.health, disabled);
            next
        });
        true
    }

    /// Door 3: the user tested a cooling (or quota-resting) key and the provider answered ("Test
    /// now", for a quota that reset early): the key is ready again at once. Any other state stays.
    /// Whether a rest was lifted.
    pub fn lift_rest(&self, key: &KeyId) -> bool {
        let Some(slot) = self.slot(key) else {
            return false;
        };
        let resting = |h: Health| matches!(h, Health::Cooling { .. } | Health::QuotaExhausted { .. });
        let before = slot.live.rcu(|live| {
            let mut next = Live::clone(live);
            if resting(next.health) {
                next.health = Health::Ready;
            }
            next
        });
        resting(before.health)
    }

    /// Status of every key, for the API and the CLI.
    pub fn status(&self, now: Instant, day: u32) -> Vec<KeyStatus> {
        self.slots.load().iter().map(|s| status::key_status(s, now, day)).collect()
    }
}

/// A key's live state after an outcome.
fn next_live(live: &Live, outcome: &Outcome, configured_org: bool, id: &KeyId, markers: &Markers) -> Live {
    let mut next = Live::clone(live);
    if outcome.status.is_some() {
        next.last_status = outcome.status;
    }
    next.health = next_health(next.health, outcome.kind, outcome.at);
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

fn note_missing(missing: &mut Vec<String>, model: &str) {
    if !missing.iter().any(|m| m == model) {
        if missing.len() == MAX_MISSING_MODELS {
            missing.remove(0);
        }
        missing.push(model.chars().take(128).collect());
    }
}

#[cfg(test)]
mod tests;
