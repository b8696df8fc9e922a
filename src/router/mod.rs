//! The routing decision: a pure function of the request's facts, a snapshot of the pool and the time.
//! No I/O, no clock reads, no randomness, no logging. The `Decision` it returns is exactly what the
//! dashboard and the event stream show.

use serde::Serialize;
use tokio::time::Instant;

use crate::facts::RequestFacts;
use crate::keys::KeyId;
use crate::markers::{OrgTag, Pin};

/// Most keys a pool may hold; keeps every per-decision list small.
pub const MAX_KEYS: usize = 64;
/// Most upstream attempts for one request, whatever the config says.
pub const MAX_ATTEMPTS: usize = 4;

/// A key's health as the router sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    /// Usable.
    Ready,
    /// Rate limited until then.
    Cooling {
        /// When the cooldown ends.
        until: Instant,
    },
    /// The provider rejected the key (401/403).
    Invalid,
    /// The account is out of quota (`insufficient_quota`) until then, or until re-enabled.
    QuotaExhausted {
        /// When to try it again.
        until: Instant,
    },
    /// Switched off by the user.
    Disabled,
}

/// One key in a pool snapshot.
#[derive(Clone, Debug)]
pub struct KeyView {
    /// Stable id.
    pub id: KeyId,
    /// Organization, set or learned.
    pub org: Option<String>,
    /// Tag of the organization (or of the key itself while its organization is unknown).
    pub org_tag: OrgTag,
    /// Requests currently being served by this key.
    pub in_flight: u32,
    /// Priority tier (lower first).
    pub priority: u8,
    /// Share of the tighter rate-limit window left, 0 to 1 (1 when unknown).
    pub headroom: f32,
    /// A rate-limit window is used up until then: the key would answer 429.
    pub exhausted_until: Option<Instant>,
    /// Over its daily token budget.
    pub over_budget: bool,
    /// Allowed for the request's model, and not known to lack it.
    pub model_ok: bool,
    /// Sessions this key started among requests routed by load alone (settles near-ties).
    pub starts: u64,
    /// Health.
    pub health: Health,
}

/// A snapshot of the pool, in the pool's stable key order.
#[derive(Clone, Debug, Default)]
pub struct PoolView {
    /// The keys.
    pub keys: Vec<KeyView>,
}

/// Where an affinity signal came from. Affinities arrive in later capabilities; today there is none.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AffinitySource {
    /// No affinity signal was used.
    None,
    /// The request's `prompt_cache_key`.
    PromptCacheKey,
    /// A digest of the prompt prefix.
    PromptPrefix,
}

/// What became of the affinity signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AffinityState {
    /// The request carried no signal.
    NoSignal,
    /// A signal, but nothing remembered for it.
    CacheMiss,
    /// The remembered key was chosen.
    Hit,
    /// The remembered key could not take the request.
    TargetUnavailable,
    /// Affinity is switched off.
    Disabled,
    /// The affinity table could not be consulted.
    CacheUnavailable,
}

/// Why a key was skipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SkipWhy {
    /// Rate limited; frees in that many milliseconds.
    Cooling {
        /// Milliseconds left.
        remaining_ms: u64,
    },
    /// Rejected by the provider.
    Invalid,
    /// Switched off by the user.
    Disabled,
    /// Out of quota (`insufficient_quota`); tried again after that many milliseconds.
    QuotaExhausted {
        /// Milliseconds left.
        remaining_ms: u64,
    },
    /// Not allowed for the request's model, or the provider said it lacks it.
    ModelUnavailable,
    /// A rate-limit window is used up; it refills in that many milliseconds.
    NearExhaustion {
        /// Milliseconds until the window refills.
        reset_ms: u64,
    },
    /// Over its daily token budget.
    OverBudget,
}

/// One line of a decision's explanation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "rule", rename_all = "snake_case")]
pub enum Reason {
    /// The chosen key had the most rate-limit headroom for its load (headroom / (1 + in flight)).
    MostHeadroom {
        /// Its headroom, in thousandths of its tighter window.
        headroom_permille: u16,
        /// Its in-flight count.
        in_flight: u32,
        /// How many usable keys were compared.
        candidates: usize,
    },
    /// Only the lowest priority tier with a usable key takes unpinned traffic first.
    PriorityTier {
        /// That tier.
        tier: u8,
    },
    /// Every usable key is over its daily budget: budgets are soft, so they serve anyway.
    BudgetOverrun,
    /// Several keys had the same load; they take turns (round-robin over the requests routed by load).
    TieBrokenByTurn {
        /// How many keys were tied.
        tied: usize,
    },
    /// The request continues a response stored with one key (`previous_response_id`, or a
    /// `/v1/responses/{id}` call): only that key can serve it.
    ContinuityBinding {
        /// The key.
        key: KeyId,
    },
    /// The request names a response id without a Keymux marker (made before Keymux or directly
    /// upstream), so it is routed by the normal rules and may land on a key that does not hold it.
    UnmarkedResponseId,
    /// A frame on a Responses WebSocket goes to the upstream socket its connection is bound to.
    WebSocketBound {
        /// The key of that socket.
        key: KeyId,
    },
    /// A new Responses WebSocket whose first frame carries no markers goes to the organization that served
    /// this session's pinned requests before (Codex prewarms a resumed session without them).
    SessionHint {
        /// The key that served the session last.
        key: KeyId,
        /// Usable keys of its organization.
        usable: usize,
    },
    /// The key that last served this request's `prompt_cache_key` (or prompt prefix) to a successful end
    /// was preferred, to keep the session on a warm prompt cache.
    SoftAffinity {
        /// That key.
        key: KeyId,
    },
    /// The remembered key could not take this request (cooling, rejected, gone, or too busy).
    SoftTargetUnavailable {
        /// That key.
        key: KeyId,
    },
    /// Another key of the remembered key's organization was preferred (the prompt cache is per
    /// organization).
    WarmOrganization,
    /// Encrypted content in the request can only be read by one organization's keys.
    PinnedToOrg {
        /// The key that produced the content.
        key: KeyId,
        /// Keys of that organization in the pool.
        org_keys: usize,
        /// Of those, usable now.
        usable: usize,
    },
    /// The owning organization has no usable key: the unreadable items are dropped and the request is
    /// routed as unpinned.
    Rescued {
        /// The key named by the marker.
        key: KeyId,
    },
    /// Markers of another Keymux install were removed without routing on them.
    ForeignMarkersStripped {
        /// How many.
        count: usize,
    },
    /// Encrypted-content affinity is switched off: markers were removed but not used.
    AffinityOff,
    /// A key was left out.
    Skipped {
        /// Which.
        key: KeyId,
        /// Why.
        why: SkipWhy,
    },
}

/// Why no key can take the request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Refusal {
    /// The request replays encrypted content of two organizations; no key can read both.
    MixedOrgs {
        /// One key per organization named.
        keys: Vec<KeyId>,
    },
    /// The key that holds the referenced response cannot serve (removed, rejected or disabled).
    ContinuityLost {
        /// That key.
        key: KeyId,
    },
    /// The organization that can read the request has no usable key, and the policy is `fail`.
    LostOrg {
        /// The key named by the marker.
        key: KeyId,
    },
    /// The pool is empty.
    NoKeys,
    /// Every usable key is cooling; the first frees after that many whole seconds (at least 1).
    AllCooling {
        /// Seconds until the first key frees.
        retry_after_secs: u64,
        /// Keys cooling.
        cooling: usize,
    },
    /// No key is usable at all.
    NoUsableKey {
        /// Keys that are invalid or disabled.
        unusable: usize,
    },
}

/// The routing decision for one request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Decision {
    /// The request's gateway-local number.
    pub seq: u64,
    /// The key to try first.
    pub choice: Option<KeyId>,
    /// Keys to try next, in order, if the choice fails before any byte reached the client.
    pub fallbacks: Vec<KeyId>,
    /// The explanation, one line per rule applied (bounded by `MAX_KEYS + 2`).
    pub reasons: Vec<Reason>,
    /// Where the affinity signal came from.
    pub affinity_source: AffinitySource,
    /// What became of it.
    pub affinity_state: AffinityState,
    /// Whether a hard binding (previous response, WebSocket) was found and used.
    pub continuity_hit: bool,
    /// The encrypted-content pin, when the request carried one.
    pub pin: Option<PinDecision>,
    /// Organizations whose items are dropped before the request goes upstream (rescue: no usable key of
    /// theirs is left). Bounded by `markers::MAX_PINS`.
    pub rescued_orgs: Vec<OrgTag>,
    /// Set when no key can take the request.
    pub refusal: Option<Refusal>,
}

/// What the encrypted-content pin did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PinDecision {
    /// The key named by the marker.
    pub key: KeyId,
    /// The organization tag the marker carries.
    pub org: OrgTag,
    /// Whether the choice is that very key (otherwise another key of its organization).
    pub exact: bool,
}

/// What happens when the organization that can read a request has no usable key left.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum LostOrgPolicy {
    /// Drop the unreadable encrypted items and route normally (the session continues, minus that state).
    #[default]
    Rescue,
    /// Answer 409 naming the key, so the user decides.
    Fail,
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

impl Decision {
    /// The choice followed by the fallbacks.
    pub fn candidates(&self) -> impl Iterator<Item = &KeyId> {
        self.choice.iter().chain(self.fallbacks.iter())
    }
}

/// Chooses the keys for a request.
///
/// * Encrypted content pins the request to the organization that produced it: only that organization's
///   usable keys are candidates, least in flight first, the producing key first among equals. If they
///   are all cooling, the answer is a 429 for the earliest of them; if none is left, the lost-org policy
///   applies (rescue: route unpinned after dropping the unreadable items; fail: refuse).
/// * Otherwise, the usable key with the fewest requests in flight, ties broken by a stable hash of
///   (request number, key id) so equal keys share the load evenly and a request always ranks them the
///   same way.
///
/// At most `policy.max_attempts` candidates are returned.
pub fn decide(facts: &RequestFacts, view: &PoolView, now: Instant, policy: &Policy) -> Decision {
    use crate::facts::Remembered;
    let (state, target) = match (facts.signal.is_some(), policy.soft_affinity, &facts.remembered) {
        (false, ..) => (AffinityState::NoSignal, None),
        (true, false, _) => (AffinityState::Disabled, None),
        (true, true, Remembered::Unavailable) => (AffinityState::CacheUnavailable, None),
        (true, true, Remembered::Key(key)) => (AffinityState::Hit, Some(key)),
        (true, true, Remembered::Miss | Remembered::NotAsked) => (AffinityState::CacheMiss, None),
    };
    let mut decision = decide_keys(facts, view, now, policy, target);
    decision.affinity_source = facts.signal.map_or(AffinitySource::None, |s| s.source);
    decision.affinity_state = match target {
        // `hit` means only that the remembered key was chosen.
        Some(t) if decision.choice.as_ref() == Some(t) => AffinityState::Hit,
        Some(_) => AffinityState::TargetUnavailable,
        None => state,
    };
    decision
}

/// Below this share of its tighter rate-limit window, a remembered key yields to one with more room.
pub const MIN_AFFINITY_HEADROOM: f32 = 0.1;

/// A remembered key that already carries `limit` requests, or has less than `MIN_AFFINITY_HEADROOM` of
/// its rate-limit window left, while another candidate is better off, is left alone for this request:
/// one hot session must not melt one key.
fn hot(key: &KeyView, candidates: &[&KeyView], limit: u32) -> bool {
    (key.in_flight >= limit && candidates.iter().any(|o| o.in_flight < key.in_flight))
        || (key.headroom < MIN_AFFINITY_HEADROOM && candidates.iter().any(|o| o.headroom > key.headroom))
}

fn decide_keys(
    facts: &RequestFacts,
    view: &PoolView,
    now: Instant,
    policy: &Policy,
    target: Option<&KeyId>,
) -> Decision {
    let max_attempts = policy.max_attempts.clamp(1, MAX_ATTEMPTS);
    let mut decision = Decision {
        seq: facts.seq,
        choice: None,
        fallbacks: Vec::new(),
        reasons: Vec::new(),
        affinity_source: AffinitySource::None,
        affinity_state: AffinityState::NoSignal,
        continuity_hit: false,
        pin: None,
        rescued_orgs: Vec::new(),
        refusal: None,
    };
    let keys = &view.keys[..view.keys.len().min(MAX_KEYS)];
    if facts.foreign_markers > 0 {
        decision.reasons.push(Reason::ForeignMarkersStripped { count: facts.foreign_markers });
    }

    if let (Some(bound), true) = (&facts.continuity, policy.continuity) {
        return bind_to_key(decision, facts, keys, bound, now);
    }
    if facts.unmarked_response_id {
        decision.reasons.push(Reason::UnmarkedResponseId);
    }

    if !facts.pins.is_empty() && !policy.encrypted_affinity {
        decision.reasons.push(Reason::AffinityOff);
    } else if !facts.pins.is_empty() {
        // One pin per organization; an organization with no key left that could ever serve (removed,
        // rejected, disabled) is lost, the others are live.
        let mut live: Vec<&Pin> = Vec::new();
        let mut lost: Vec<&Pin> = Vec::new();
        for pin in &facts.pins {
            if live.iter().chain(lost.iter()).any(|p| p.org == pin.org) {
                continue;
            }
            let alive = keys.iter().any(|k| {
                (k.org_tag == pin.org || k.id == pin.key) && matches!(k.health, Health::Ready | Health::Cooling { .. })
            });
            if alive {
                live.push(pin)
            } else {
                lost.push(pin)
            }
        }
        if live.len() > 1 {
            decision.refusal = Some(Refusal::MixedOrgs { keys: live.iter().map(|p| p.key.clone()).collect() });
            return decision;
        }
        if let Some(gone) = lost.first() {
            match policy.lost_org {
                LostOrgPolicy::Fail => {
                    decision.refusal = Some(Refusal::LostOrg { key: gone.key.clone() });
                    return decision;
                }
                LostOrgPolicy::Rescue => {
                    for pin in &lost {
                        decision.rescued_orgs.push(pin.org);
                        decision.reasons.push(Reason::Rescued { key: pin.key.clone() });
                    }
                }
            }
        }
        if let Some(first) = live.first() {
            let members: Vec<&KeyView> = keys.iter().filter(|k| k.org_tag == first.org || k.id == first.key).collect();
            let usable: Vec<&KeyView> = members.iter().copied().filter(|k| skip_reason(k, now).is_none()).collect();
            decision.reasons.push(Reason::PinnedToOrg {
                key: first.key.clone(),
                org_keys: members.len(),
                usable: usable.len(),
            });
            let mut pin = PinDecision { key: first.key.clone(), org: first.org, exact: false };
            if usable.is_empty() {
                // Alive but all cooling: only they can read it, so the client waits for the first.
                let first_free = members
                    .iter()
                    .filter_map(|k| match k.health {
                        Health::Cooling { until } if until > now => Some(until),
                        _ => None,
                    })
                    .min()
                    .unwrap_or(now);
                decision.pin = Some(pin);
                decision.refusal = Some(Refusal::AllCooling {
                    retry_after_secs: whole_seconds_ceil(first_free.saturating_duration_since(now)),
                    cooling: members.len(),
                });
                return decision;
            }
            // Inside the organization, the remembered key (warm cache) first, else the producing key.
            let prefer = target
                .filter(|t| usable.iter().any(|k| &k.id == *t && !hot(k, &usable, policy.max_in_flight_per_key)))
                .unwrap_or(&first.key);
            let ranked = rank(usable, facts.seq, Some(prefer));
            pin.exact = ranked.first().is_some_and(|k| k.id == first.key);
            decision.pin = Some(pin);
            fill(&mut decision, ranked, max_attempts);
            return decision;
        }
    }

    if let (Some(hint), true) = (&facts.session_hint, decision.pin.is_none()) {
        if let Some(hinted) = keys.iter().find(|k| &k.id == hint) {
            let usable: Vec<&KeyView> =
                keys.iter().filter(|k| k.org_tag == hinted.org_tag && skip_reason(k, now).is_none()).collect();
            if !usable.is_empty() {
                decision.reasons.push(Reason::SessionHint { key: hint.clone(), usable: usable.len() });
                let prefer = target.filter(|t| usable.iter().any(|k| &k.id == *t)).unwrap_or(hint);
                let ranked = rank(usable, facts.seq, Some(prefer));
                fill(&mut decision, ranked, max_attempts);
                return decision;
            }
        }
    }

    let mut usable = Vec::new();
    let mut skipped = Vec::new();
    let mut earliest_free: Option<Instant> = None;
    let (mut cooling, mut unusable) = (0usize, 0usize);
    for key in keys {
        match skip_reason(key, now) {
            None => usable.push(key),
            Some(why) => {
                match (why, key.health) {
                    (SkipWhy::Cooling { .. }, Health::Cooling { until }) => {
                        cooling += 1;
                        earliest_free = Some(earliest_free.map_or(until, |e| e.min(until)));
                    }
                    _ => unusable += 1,
                }
                skipped.push(Reason::Skipped { key: key.id.clone(), why });
            }
        }
    }
    // Soft limits: a used-up rate-limit window (it would answer 429) and a spent daily budget.
    let (mut open, mut over_budget) = (Vec::new(), Vec::new());
    for key in usable {
        if let Some(until) = key.exhausted_until.filter(|u| *u > now) {
            cooling += 1;
            earliest_free = Some(earliest_free.map_or(until, |e| e.min(until)));
            skipped.push(Reason::Skipped {
                key: key.id.clone(),
                why: SkipWhy::NearExhaustion { reset_ms: millis(until - now) },
            });
        } else if key.over_budget {
            skipped.push(Reason::Skipped { key: key.id.clone(), why: SkipWhy::OverBudget });
            over_budget.push(key);
        } else {
            open.push(key);
        }
    }
    if open.is_empty() && !over_budget.is_empty() {
        decision.reasons.push(Reason::BudgetOverrun);
        open = over_budget;
    }
    if open.is_empty() {
        decision.refusal = Some(match (keys.is_empty(), earliest_free) {
            (true, _) => Refusal::NoKeys,
            (false, Some(first)) => Refusal::AllCooling {
                retry_after_secs: whole_seconds_ceil(first.saturating_duration_since(now)),
                cooling,
            },
            (false, None) => Refusal::NoUsableKey { unusable },
        });
        decision.reasons.extend(skipped);
        return decision;
    }
    let mut ranked = rank_by_headroom(open, keys, facts.rotation);
    let tied = ranked.iter().take_while(|k| score(k) == score(ranked[0]) && k.priority == ranked[0].priority).count();
    let candidates = ranked.len();
    let best = ranked[0];
    let (best_in_flight, best_headroom, tier) = (best.in_flight, best.headroom, best.priority);
    if ranked.iter().any(|k| k.priority != tier) {
        decision.reasons.push(Reason::PriorityTier { tier });
    }
    if let Some(t) = target {
        // Soft affinity: a preference inside the candidates, never a widening of them.
        let limit = policy.max_in_flight_per_key;
        let warm_org = keys.iter().find(|k| &k.id == t).map(|k| k.org_tag);
        let remembered = ranked.iter().position(|k| &k.id == t).filter(|&i| !hot(ranked[i], &ranked, limit));
        let front: Option<&KeyView> = match remembered {
            Some(i) => Some(ranked[i]),
            None => ranked.iter().copied().find(|k| Some(k.org_tag) == warm_org && !hot(k, &ranked, limit)),
        };
        decision.reasons.push(match remembered {
            Some(_) => Reason::SoftAffinity { key: t.clone() },
            None => Reason::SoftTargetUnavailable { key: t.clone() },
        });
        if let Some(first) = front {
            if remembered.is_none() {
                decision.reasons.push(Reason::WarmOrganization);
            }
            // Then the warm organization's other keys, then everyone else by load.
            let mut reordered = vec![first];
            reordered.extend(ranked.iter().copied().filter(|k| k.id != first.id && k.org_tag == first.org_tag));
            reordered.extend(ranked.iter().copied().filter(|k| k.org_tag != first.org_tag));
            ranked = reordered;
        }
    }
    fill(&mut decision, ranked, max_attempts);
    decision.reasons.push(Reason::MostHeadroom {
        headroom_permille: (best_headroom * 1000.0).round() as u16,
        in_flight: best_in_flight,
        candidates,
    });
    if tied > 1 {
        decision.reasons.push(Reason::TieBrokenByTurn { tied });
    }
    decision.reasons.extend(skipped);
    decision
}

/// Continuity: exactly the key that holds the response, or a refusal that says why it cannot serve.
fn bind_to_key(mut decision: Decision, facts: &RequestFacts, keys: &[KeyView], bound: &Pin, now: Instant) -> Decision {
    let Some(key) = keys.iter().find(|k| k.id == bound.key) else {
        decision.refusal = Some(Refusal::ContinuityLost { key: bound.key.clone() });
        return decision;
    };
    match (skip_reason(key, now), key.health) {
        (None, _) => {}
        (Some(SkipWhy::Cooling { .. }), Health::Cooling { until }) => {
            decision.refusal = Some(Refusal::AllCooling {
                retry_after_secs: whole_seconds_ceil(until.saturating_duration_since(now)),
                cooling: 1,
            });
            return decision;
        }
        (Some(_), _) => {
            decision.refusal = Some(Refusal::ContinuityLost { key: bound.key.clone() });
            return decision;
        }
    }
    // Replayed encrypted content must be readable by the bound key's organization.
    if let Some(other) = facts.pins.iter().find(|p| p.org != key.org_tag && p.key != key.id) {
        decision.refusal = Some(Refusal::MixedOrgs { keys: vec![key.id.clone(), other.key.clone()] });
        return decision;
    }
    decision.continuity_hit = true;
    decision.choice = Some(key.id.clone());
    decision.reasons.push(Reason::ContinuityBinding { key: key.id.clone() });
    decision
}

fn skip_reason(key: &KeyView, now: Instant) -> Option<SkipWhy> {
    if !key.model_ok {
        return Some(SkipWhy::ModelUnavailable);
    }
    match key.health {
        Health::Ready => None,
        Health::Cooling { until } | Health::QuotaExhausted { until } if until <= now => None,
        Health::Cooling { until } => Some(SkipWhy::Cooling { remaining_ms: millis(until - now) }),
        Health::QuotaExhausted { until } => Some(SkipWhy::QuotaExhausted { remaining_ms: millis(until - now) }),
        Health::Invalid => Some(SkipWhy::Invalid),
        Health::Disabled => Some(SkipWhy::Disabled),
    }
}

/// Requests in flight that count as one step of load: keys within a step of each other are equally
/// loaded and take turns. Momentary in-flight counts are noisy; with sticky sessions, where a session
/// starts decides its load for its whole life, so starts should rotate rather than chase that noise.
pub const LOAD_STEP: u32 = 2;

/// Headroom per step of load, in thousandths (quantized so equal keys tie and take turns).
fn score(key: &KeyView) -> u32 {
    let steps = (key.in_flight / LOAD_STEP) as f32;
    (key.headroom.clamp(0.0, 1.0) * 1_000_000.0 / (1.0 + steps)).round() as u32 / 1_000
}

/// Orders unpinned candidates: lowest priority tier first, then most headroom per step of load, then the
/// key that started the fewest sessions (self-correcting, so new sessions spread evenly), then turns.
fn rank_by_headroom<'a>(mut keys: Vec<&'a KeyView>, all: &[KeyView], rotation: u64) -> Vec<&'a KeyView> {
    // Equal keys take turns: the key `rotation` places after the previous turn's comes first. Fairer than
    // a hash when samples are few (a hash spreads only on average), and just as replayable.
    let n = all.len().max(1) as u64;
    let turn = |k: &KeyView| {
        let position = all.iter().position(|o| o.id == k.id).unwrap_or(0) as u64;
        (position + n - rotation % n) % n
    };
    keys.sort_by_key(|k| (k.priority, std::cmp::Reverse(score(k)), k.starts, turn(k)));
    keys
}

/// Orders candidates: fewest in flight, then the preferred key, then the stable hash.
fn rank<'a>(mut keys: Vec<&'a KeyView>, seq: u64, prefer: Option<&KeyId>) -> Vec<&'a KeyView> {
    keys.sort_by_key(|k| (k.in_flight, Some(&k.id) != prefer, std::cmp::Reverse(tie_hash(seq, &k.id))));
    keys
}

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
mod tests {
    use super::*;
    use crate::facts::Operation;
    use crate::markers::{Field, Markers};
    use crate::secrets::Secret;
    use std::collections::BTreeMap;
    use std::time::Duration;

    fn facts(seq: u64) -> RequestFacts {
        RequestFacts {
            model: Some("gpt-5.5".into()),
            stream: true,
            ..RequestFacts::new(seq, Operation::ResponsesCreate)
        }
    }

    fn markers() -> Markers {
        Markers::new(&Secret::new("router-tests"))
    }

    fn key(id: &str, in_flight: u32, health: Health) -> KeyView {
        let id = KeyId::new(id);
        KeyView {
            org_tag: markers().org_tag(None, &id),
            id,
            org: None,
            in_flight,
            health,
            priority: 0,
            headroom: 1.0,
            exhausted_until: None,
            over_budget: false,
            model_ok: true,
            starts: 0,
        }
    }

    /// A key of organization `org`.
    fn org_key(id: &str, org: &str, in_flight: u32, health: Health) -> KeyView {
        let id = KeyId::new(id);
        KeyView {
            org_tag: markers().org_tag(Some(org), &id),
            org: Some(org.into()),
            ..key(id.as_str(), in_flight, health)
        }
    }

    fn pinned(seq: u64, key: &str, org: &str) -> RequestFacts {
        let id = KeyId::new(key);
        let mut f = facts(seq);
        f.pins.push(Pin { org: markers().org_tag(Some(org), &id), key: id, field: Field::EncryptedContent });
        f
    }

    fn policy(max_attempts: usize) -> Policy {
        Policy { max_attempts, ..Policy::default() }
    }

    fn ids(d: &Decision) -> Vec<&str> {
        d.candidates().map(KeyId::as_str).collect()
    }

    #[test]
    fn table_of_decisions() {
        let now = Instant::now();
        let later = now + Duration::from_millis(2_500);
        struct Case {
            name: &'static str,
            keys: Vec<KeyView>,
            want_choice: Option<&'static str>,
            want_refusal: Option<Refusal>,
        }
        let cases = vec![
            Case {
                name: "least in flight wins",
                keys: vec![key("a", 3, Health::Ready), key("b", 1, Health::Ready), key("c", 2, Health::Ready)],
                want_choice: Some("b"),
                want_refusal: None,
            },
            Case {
                name: "cooling key is skipped even when idle",
                keys: vec![key("a", 0, Health::Cooling { until: later }), key("b", 5, Health::Ready)],
                want_choice: Some("b"),
                want_refusal: None,
            },
            Case {
                name: "expired cooldown is usable",
                keys: vec![key("a", 0, Health::Cooling { until: now }), key("b", 5, Health::Ready)],
                want_choice: Some("a"),
                want_refusal: None,
            },
            Case {
                name: "invalid and disabled keys are skipped",
                keys: vec![key("a", 0, Health::Invalid), key("b", 0, Health::Disabled), key("c", 9, Health::Ready)],
                want_choice: Some("c"),
                want_refusal: None,
            },
            Case { name: "empty pool", keys: vec![], want_choice: None, want_refusal: Some(Refusal::NoKeys) },
            Case {
                name: "all cooling gives whole seconds, rounded up",
                keys: vec![
                    key("a", 0, Health::Cooling { until: later }),
                    key("b", 0, Health::Cooling { until: later + Duration::from_secs(5) }),
                    key("c", 0, Health::Invalid),
                ],
                want_choice: None,
                want_refusal: Some(Refusal::AllCooling { retry_after_secs: 3, cooling: 2 }),
            },
            Case {
                name: "nothing usable",
                keys: vec![key("a", 0, Health::Invalid), key("b", 0, Health::Disabled)],
                want_choice: None,
                want_refusal: Some(Refusal::NoUsableKey { unusable: 2 }),
            },
        ];
        for case in cases {
            let d = decide(&facts(7), &PoolView { keys: case.keys }, now, &policy(3));
            assert_eq!(d.choice.as_ref().map(KeyId::as_str), case.want_choice, "{}", case.name);
            assert_eq!(d.refusal, case.want_refusal, "{}", case.name);
            assert!(!d.continuity_hit, "{}", case.name);
            assert_eq!(d.affinity_source, AffinitySource::None, "{}", case.name);
        }
    }

    #[test]
    fn fallbacks_are_ranked_and_capped() {
        let now = Instant::now();
        let view = PoolView {
            keys: vec![
                key("a", 4, Health::Ready),
                key("b", 1, Health::Ready),
                key("c", 2, Health::Ready),
                key("d", 3, Health::Ready),
                key("e", 0, Health::Invalid),
            ],
        };
        let d = decide(&facts(1), &view, now, &policy(3));
        assert_eq!(ids(&d), ["b", "c", "d"]);
        assert!(d.reasons.contains(&Reason::Skipped { key: KeyId::new("e"), why: SkipWhy::Invalid }));
        let d = decide(&facts(1), &view, now, &policy(99));
        assert_eq!(d.candidates().count(), MAX_ATTEMPTS);
    }

    #[test]
    fn ties_spread_evenly_and_replay_identically() {
        let now = Instant::now();
        let view = PoolView {
            keys: vec![key("k_a", 0, Health::Ready), key("k_b", 0, Health::Ready), key("k_c", 0, Health::Ready)],
        };
        let mut counts: BTreeMap<String, u32> = BTreeMap::new();
        for seq in 0..3000 {
            let f = RequestFacts { rotation: seq * 7 + 3, ..facts(seq) };
            let d = decide(&f, &view, now, &policy(3));
            assert_eq!(d, decide(&f, &view, now, &policy(3)), "deterministic");
            assert!(d.reasons.contains(&Reason::TieBrokenByTurn { tied: 3 }));
            *counts.entry(d.choice.expect("chosen").to_string()).or_default() += 1;
        }
        for (k, n) in &counts {
            assert_eq!(*n, 1000, "{k}: equal keys take exact turns");
        }
    }

    #[test]
    fn decision_serializes_without_secrets() {
        let now = Instant::now();
        let view = PoolView {
            keys: vec![
                key("k_a", 0, Health::Cooling { until: now + Duration::from_secs(1) }),
                key("k_b", 0, Health::Ready),
            ],
        };
        let json = serde_json::to_value(decide(&facts(3), &view, now, &policy(3))).expect("json");
        assert_eq!(json["choice"], "k_b");
        assert_eq!(json["affinity_source"], "none");
        assert_eq!(json["affinity_state"], "no_signal");
        assert_eq!(json["continuity_hit"], false);
        assert_eq!(json["reasons"][1]["rule"], "skipped");
        assert_eq!(json["reasons"][1]["why"]["kind"], "cooling");
    }

    #[test]
    fn encrypted_content_pins_to_the_organization() {
        let now = Instant::now();
        let later = now + Duration::from_secs(4);
        let org = |o: &str, k: &str| markers().org_tag(Some(o), &KeyId::new(k));
        let two_orgs = |a1: u32, a2: u32, a1_health: Health, a2_health: Health| PoolView {
            keys: vec![
                org_key("a1", "org-a", a1, a1_health),
                org_key("a2", "org-a", a2, a2_health),
                org_key("b1", "org-b", 0, Health::Ready),
            ],
        };

        // The org's least-loaded key serves; the other org is never a candidate.
        let d = decide(&pinned(1, "a1", "org-a"), &two_orgs(3, 0, Health::Ready, Health::Ready), now, &policy(3));
        assert_eq!(ids(&d), ["a2", "a1"]);
        assert_eq!(d.pin.as_ref().map(|p| p.exact), Some(false));
        // Equal load: the producing key first.
        let d = decide(&pinned(1, "a1", "org-a"), &two_orgs(0, 0, Health::Ready, Health::Ready), now, &policy(3));
        assert_eq!(ids(&d), ["a1", "a2"]);
        assert_eq!(d.pin.as_ref().map(|p| p.exact), Some(true));
        // The whole org cooling: a 429 for the org, though another org is idle.
        let cooling = Health::Cooling { until: later };
        let d = decide(&pinned(1, "a1", "org-a"), &two_orgs(0, 0, cooling, cooling), now, &policy(3));
        assert_eq!(d.refusal, Some(Refusal::AllCooling { retry_after_secs: 4, cooling: 2 }));
        // One key of the org rejected: the other serves.
        let d = decide(&pinned(1, "a1", "org-a"), &two_orgs(0, 0, Health::Invalid, Health::Ready), now, &policy(3));
        assert_eq!(ids(&d), ["a2"]);

        // The org is gone: rescue routes unpinned and names the org to drop; fail refuses.
        let only_b = PoolView { keys: vec![org_key("b1", "org-b", 0, Health::Ready)] };
        let d = decide(&pinned(1, "a1", "org-a"), &only_b, now, &policy(3));
        assert_eq!(ids(&d), ["b1"]);
        assert_eq!(d.rescued_orgs, vec![org("org-a", "a1")]);
        assert!(d.pin.is_none());
        let fail = Policy { lost_org: LostOrgPolicy::Fail, ..policy(3) };
        let d = decide(&pinned(1, "a1", "org-a"), &only_b, now, &fail);
        assert_eq!(d.refusal, Some(Refusal::LostOrg { key: KeyId::new("a1") }));

        // Items of a lost org beside items of a live org: drop the lost, pin to the live.
        let mut f = pinned(1, "a1", "org-a");
        f.pins.push(Pin { key: KeyId::new("b1"), org: org("org-b", "b1"), field: Field::ItemId });
        let d = decide(&f, &only_b, now, &policy(3));
        assert_eq!(ids(&d), ["b1"]);
        assert_eq!(d.rescued_orgs.len(), 1);
        assert!(d.pin.is_some());
        // Two live orgs: nobody can read both.
        let d = decide(&f, &two_orgs(0, 0, Health::Ready, Health::Ready), now, &policy(3));
        assert_eq!(d.refusal, Some(Refusal::MixedOrgs { keys: vec![KeyId::new("a1"), KeyId::new("b1")] }));

        // Affinity switched off: markers are ignored for routing, and the decision says so.
        let off = Policy { encrypted_affinity: false, ..policy(3) };
        let d = decide(&pinned(1, "a1", "org-a"), &two_orgs(3, 3, Health::Ready, Health::Ready), now, &off);
        assert_eq!(d.choice.as_ref().map(KeyId::as_str), Some("b1"));
        assert!(d.reasons.contains(&Reason::AffinityOff));
    }

    #[test]
    fn continuity_binds_to_exactly_one_key() {
        let now = Instant::now();
        let bound = |seq: u64, key: &str| {
            let id = KeyId::new(key);
            let mut f = facts(seq);
            f.continuity = Some(Pin { org: markers().org_tag(Some("org-a"), &id), key: id, field: Field::ResponseId });
            f
        };
        let view = |a1: Health| PoolView {
            keys: vec![
                org_key("a1", "org-a", 9, a1),
                org_key("a2", "org-a", 0, Health::Ready),
                org_key("b1", "org-b", 0, Health::Ready),
            ],
        };
        // Busy or not, only the key holding the response serves; no fallbacks (they would only answer
        // previous_response_not_found).
        let d = decide(&bound(1, "a1"), &view(Health::Ready), now, &policy(3));
        assert_eq!(ids(&d), ["a1"]);
        assert!(d.continuity_hit);
        assert!(d.reasons.contains(&Reason::ContinuityBinding { key: KeyId::new("a1") }));
        // Cooling: wait for it.
        let cooling = Health::Cooling { until: now + Duration::from_millis(1500) };
        let d = decide(&bound(1, "a1"), &view(cooling), now, &policy(3));
        assert_eq!(d.refusal, Some(Refusal::AllCooling { retry_after_secs: 2, cooling: 1 }));
        // Rejected, disabled or removed: a clear refusal, never a silent move.
        for health in [Health::Invalid, Health::Disabled] {
            let d = decide(&bound(1, "a1"), &view(health), now, &policy(3));
            assert_eq!(d.refusal, Some(Refusal::ContinuityLost { key: KeyId::new("a1") }));
            assert!(!d.continuity_hit);
        }
        let d = decide(&bound(1, "gone"), &view(Health::Ready), now, &policy(3));
        assert_eq!(d.refusal, Some(Refusal::ContinuityLost { key: KeyId::new("gone") }));
        // Switched off: routed like any request.
        let off = Policy { continuity: false, ..policy(3) };
        let d = decide(&bound(1, "a1"), &view(Health::Ready), now, &off);
        assert_ne!(d.choice, Some(KeyId::new("a1")));
        assert!(!d.continuity_hit);
        // An id without a marker is routed normally, and the decision says so.
        let mut f = facts(2);
        f.unmarked_response_id = true;
        let d = decide(&f, &view(Health::Ready), now, &policy(3));
        assert!(d.reasons.contains(&Reason::UnmarkedResponseId));
        assert!(!d.continuity_hit);
    }
}
