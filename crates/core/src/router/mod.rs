//! The routing decision: a pure function of the request's facts, a snapshot of the pool, what Keymux
//! remembers about the request's session, and the time. No I/O, no clock reads, no randomness, no
//! logging: the caller looks things up and passes them in, and the `Decision` says how it routed.
//!
//! Rooms:
//! * [`decision`]: the inputs' snapshot types and the `Decision` with its reasons;
//! * `pin`: the hard rules (continuity binding, encrypted-content pins, session hints);
//! * `balance`: everything else (health, soft limits, priority tiers, headroom, soft affinity, spread);
//! * `within`: deciding inside a pool (the user's boundary), then its fallback pools.

pub mod decision;

mod balance;
mod pin;
mod within;

use std::time::Instant;

use crate::budget::BudgetState;
use crate::facts::{AffinitySource, RequestFacts};
use crate::keys::KeyId;

pub use decision::{AffinityState, Decision, LostOrgPolicy, PinDecision, Reason, Refusal, Route, SkipWhy};
pub use within::{decide_within, Tier};

use crate::pool::{Health, KeyView, PoolView, MAX_KEYS};
/// Most upstream attempts for one request, whatever the config says.
pub const MAX_ATTEMPTS: usize = 4;

/// What the soft-affinity table said about a request's signal.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Remembered {
    /// Not looked up (no signal, affinity off, or a prompt too short to cache).
    #[default]
    NotAsked,
    /// The table could not be consulted.
    Unavailable,
    /// Nothing remembered.
    Miss,
    /// The key that last served the signal successfully.
    Key(KeyId),
}

/// What Keymux remembers about a request's session, looked up by the caller.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Memory {
    /// The soft-affinity table's answer for the request's signal.
    pub remembered: Remembered,
    /// For the first frame of a Responses WebSocket, and for a request replaying unmarked encrypted
    /// content: the key that last served this session's requests.
    pub session_hint: Option<KeyId>,
}

/// The routing settings `decide` needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Most candidates to return.
    pub max_attempts: usize,
    /// Whether encrypted-content markers pin requests.
    pub encrypted_affinity: bool,
    /// Whether response-id markers bind requests to their key.
    pub continuity: bool,
    /// Whether the soft-affinity table is consulted.
    pub soft_affinity: bool,
    /// In-flight count at which a remembered key is left alone when another candidate is less busy.
    pub max_in_flight_per_key: u32,
    /// What to do when the pinned organization has no usable key.
    pub lost_org: LostOrgPolicy,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            encrypted_affinity: true,
            continuity: true,
            soft_affinity: true,
            max_in_flight_per_key: 8,
            lost_org: LostOrgPolicy::Rescue,
        }
    }
}

/// Everything one decision reads, in one place for the rule functions.
struct Ask<'a> {
    facts: &'a RequestFacts,
    keys: &'a [KeyView],
    now: Instant,
    policy: &'a Policy,
    /// The remembered key, when soft affinity applies to this request.
    target: Option<&'a KeyId>,
    max_attempts: usize,
}

/// Chooses the keys for a request, in this order of rules:
///
/// 1. Continuity: a marked response id binds the request to exactly the key that holds it.
/// 2. Encrypted content pins it to the organization that produced it; a lost organization is rescued
///    (its items dropped) or refused, by policy.
/// 3. Encrypted content without a marker (a session begun before Keymux) tries one key of each
///    organization in turn, the one that served its session last first.
/// 4. A new WebSocket with a session hint goes to the organization that served its session.
/// 5. Everything else is balanced: usable keys, soft limits (used-up windows, budgets), the lowest
///    priority tier, the most headroom per step of load, the remembered key of a cache-eligible prompt
///    first, and among equals the key that recently started the fewest sessions.
///
/// At most `policy.max_attempts` candidates are returned.
pub fn decide(facts: &RequestFacts, view: &PoolView, memory: &Memory, now: Instant, policy: &Policy) -> Decision {
    let (state, target) = soft_target(facts, memory, policy);
    let ask = Ask {
        facts,
        keys: &view.keys[..view.keys.len().min(MAX_KEYS)],
        now,
        policy,
        target,
        max_attempts: policy.max_attempts.clamp(1, MAX_ATTEMPTS),
    };
    let mut decision = Decision::new(facts.seq);
    if facts.foreign_markers > 0 {
        decision.reasons.push(Reason::ForeignMarkersStripped { count: facts.foreign_markers });
    }
    decision.route = route(&ask, &mut decision, memory);
    if decision.refusal.is_some() {
        decision.route = Route::Refused;
    }
    decision.affinity_source = facts.signal.map_or(AffinitySource::None, |s| s.source);
    decision.affinity_state = match target {
        // `hit` means only that the remembered key was chosen.
        Some(t) if decision.choice.as_ref() == Some(t) => AffinityState::Hit,
        Some(_) => AffinityState::TargetUnavailable,
        None => state,
    };
    decision
}

/// Whether some key could take an unpinned request now: `decide` would not refuse a request that
/// carries no markers, no model and no session. A new WebSocket opens only then.
pub fn any_open(view: &PoolView, now: Instant) -> bool {
    view.keys[..view.keys.len().min(MAX_KEYS)].iter().any(|key| balance::closed(key, now).is_none())
}

/// The rules in order; each either places the request (its route) or passes it on.
fn route(ask: &Ask<'_>, decision: &mut Decision, memory: &Memory) -> Route {
    if let (Some(bound), true) = (&ask.facts.continuity, ask.policy.continuity) {
        return pin::bind_to_key(ask, decision, bound);
    }
    if ask.facts.unmarked_response_id {
        decision.reasons.push(Reason::UnmarkedResponseId);
    }
    if let Some(route) = pin::pin_to_org(ask, decision) {
        return route;
    }
    if ask.facts.unmarked_encrypted && ask.facts.pins.is_empty() && ask.policy.encrypted_affinity {
        if let Some(route) = pin::find_org(ask, decision, memory.session_hint.as_ref()) {
            return route;
        }
    }
    if let Some(hint) = memory.session_hint.as_ref().filter(|_| decision.pin.is_none()) {
        if let Some(route) = pin::follow_hint(ask, decision, hint) {
            return route;
        }
    }
    balance::balance(ask, decision)
}

/// What soft affinity makes of the request: its state so far, and the key to prefer if any.
fn soft_target<'a>(facts: &RequestFacts, memory: &'a Memory, policy: &Policy) -> (AffinityState, Option<&'a KeyId>) {
    match (facts.signal.is_some(), facts.cache_eligible(), policy.soft_affinity, &memory.remembered) {
        (false, ..) => (AffinityState::NoSignal, None),
        (true, false, ..) => (AffinityState::ShortPrompt, None),
        (true, true, false, _) => (AffinityState::Disabled, None),
        (true, true, true, Remembered::Unavailable) => (AffinityState::CacheUnavailable, None),
        (true, true, true, Remembered::Key(key)) => (AffinityState::Hit, Some(key)),
        (true, true, true, Remembered::Miss | Remembered::NotAsked) => (AffinityState::CacheMiss, None),
    }
}

/// Whether a key can take a request now; if not, why.
fn skip_reason(key: &KeyView, now: Instant) -> Option<SkipWhy> {
    if !key.model_ok {
        return Some(SkipWhy::ModelUnavailable);
    }
    if let BudgetState::Stopped { period, limit, .. } = key.budget {
        let resets_ms = key.budget_resets.map_or(0, |at| millis(at.saturating_duration_since(now)));
        return Some(SkipWhy::BudgetStopped { period, limit, resets_ms });
    }
    match key.health {
        Health::Ready => None,
        Health::Cooling { until } | Health::QuotaExhausted { until } if until <= now => None,
        Health::Cooling { until } => Some(SkipWhy::Cooling { remaining_ms: millis(until - now) }),
        Health::QuotaExhausted { until } => Some(SkipWhy::QuotaExhausted { remaining_ms: millis(until - now) }),
        Health::Rejected => Some(SkipWhy::Invalid),
        Health::Disabled => Some(SkipWhy::Disabled),
        Health::Unreachable { until, .. } => {
            Some(SkipWhy::Unreachable { retry_ms: millis(until.saturating_duration_since(now)) })
        }
    }
}

/// Puts the ranked keys into the decision as choice and fallbacks.
fn fill(decision: &mut Decision, ranked: Vec<&KeyView>, max_attempts: usize) {
    let mut ids = ranked.into_iter().take(max_attempts).map(|k| k.id.clone());
    decision.choice = ids.next();
    decision.fallbacks = ids.collect();
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn whole_seconds_ceil(d: std::time::Duration) -> u64 {
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    secs.max(1)
}

/// A stable 64-bit hash of (request number, key id): FNV-1a folded through a SplitMix64 finaliser.
/// Stable across runs and platforms, unlike `std`'s hasher, so a decision can be replayed.
pub fn tie_hash(seq: u64, key: &KeyId) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in seq.to_le_bytes().iter().chain(key.as_str().as_bytes()) {
        h ^= u64::from(*byte);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

#[cfg(test)]
mod tests;
