//! Everything that is not pinned: usable keys, soft limits, priority tiers, headroom per step of load,
//! soft affinity as a preference inside the candidates, and the spread of new sessions.

use std::time::Instant;

use super::{fill, millis, skip_reason, tie_hash, whole_seconds_ceil, Ask};
use super::{Decision, Reason, Refusal, Route, SkipWhy};
use crate::budget::BudgetState;
use crate::pool::{Health, KeyView};

/// Requests in flight that count as one step of load: keys within a step of each other are equally
/// loaded. Momentary in-flight counts are noisy; with sticky sessions, where a session starts decides
/// its load for its whole life, so starts should spread rather than chase that noise.
pub const LOAD_STEP: u32 = 2;

/// Below this share of its tighter rate-limit window, a remembered key yields to one with more room.
pub const MIN_AFFINITY_HEADROOM: f32 = 0.1;

/// The keys that can take a request and the ones left out, with what refusing would say.
struct Sorted<'a> {
    open: Vec<&'a KeyView>,
    skipped: Vec<Reason>,
    /// Keys cooling, with a used-up window or past a budget in money, and when the first frees.
    cooling: usize,
    /// Of those, the keys past a budget in money.
    over_money: usize,
    earliest_free: Option<Instant>,
    unusable: usize,
}

/// Places an unpinned request.
pub(super) fn balance(ask: &Ask<'_>, decision: &mut Decision) -> Route {
    let mut sorted = sort_keys(ask, decision);
    if sorted.open.is_empty() {
        decision.refusal = Some(match (ask.keys.is_empty(), sorted.earliest_free) {
            (true, _) => Refusal::NoKeys,
            // Budgets the user set are kept: new sessions wait for the first one to reset.
            (false, Some(first)) if sorted.over_money == sorted.cooling => Refusal::BudgetReached {
                retry_after_secs: whole_seconds_ceil(first.saturating_duration_since(ask.now)),
                keys: sorted.over_money,
            },
            (false, Some(first)) => Refusal::AllCooling {
                retry_after_secs: whole_seconds_ceil(first.saturating_duration_since(ask.now)),
                cooling: sorted.cooling,
            },
            (false, None) => Refusal::NoUsableKey { unusable: sorted.unusable },
        });
        decision.reasons.append(&mut sorted.skipped);
        return Route::Refused;
    }
    let ranked = plan_first(ask, decision, rank_by_headroom(std::mem::take(&mut sorted.open), ask.facts.seq));
    let best = ranked[0];
    let tied = ranked.iter().take_while(|k| score(k) == score(best) && k.priority == best.priority).count();
    let candidates = ranked.len();
    if ranked.iter().any(|k| k.priority != best.priority) {
        decision.reasons.push(Reason::PriorityTier { tier: best.priority });
    }
    let (ranked, route) = match ask.target {
        Some(target) => prefer_remembered(ask, decision, ranked, target),
        None => (ranked, Route::Balanced),
    };
    fill(decision, ranked, ask.max_attempts);
    decision.reasons.push(Reason::MostHeadroom {
        headroom_permille: (best.headroom * 1000.0).round() as u16,
        in_flight: best.in_flight,
        candidates,
    });
    if tied > 1 && route == Route::Balanced {
        decision.reasons.push(Reason::FewestRecentStarts { tied });
    }
    decision.reasons.append(&mut sorted.skipped);
    route
}

/// Plan first: a ChatGPT plan that is open goes ahead of every API key, for a new session (no warm
/// API key remembered for it); a session moved off an API key's organization never goes to the plan
/// (what it replays could not be read there), nor does one an API key keeps warm. A plan that is
/// closed because its usage is used up says so (`plan_exhausted`) as the request overflows.
fn plan_first<'a>(ask: &Ask<'_>, decision: &mut Decision, ranked: Vec<&'a KeyView>) -> Vec<&'a KeyView> {
    for plan in ask.keys.iter().filter(|k| k.plan) {
        if let Some(resets_ms) = exhausted_ms(plan, ask.now) {
            decision.reasons.push(Reason::PlanExhausted { key: plan.id.clone(), resets_ms });
        }
    }
    let warm_api = ask.target.is_some_and(|t| ask.keys.iter().any(|k| &k.id == t && !k.plan));
    let plan_orgs: Vec<_> = ask.keys.iter().filter(|k| k.plan).map(|k| k.org_tag).collect();
    let moved_off_api = decision.rescued_orgs.iter().any(|org| !plan_orgs.contains(org));
    let (plans, api): (Vec<&KeyView>, Vec<&KeyView>) = ranked.into_iter().partition(|k| k.plan);
    if api.is_empty() && (warm_api || moved_off_api) {
        return plans;
    }
    match plans.first() {
        Some(first) if !warm_api && !moved_off_api => {
            decision.reasons.push(Reason::PlanFirst { key: first.id.clone() });
            plans.into_iter().chain(api).collect()
        }
        _ => api,
    }
}

/// How long until a ChatGPT plan that is closed for its usage opens again (cooling after
/// `usage_limit_reached`, or a window reported used up); `None` when it is not so closed.
pub(super) fn exhausted_ms(plan: &KeyView, now: Instant) -> Option<u64> {
    let cooling = match plan.health {
        Health::Cooling { until } if until > now => Some(until),
        _ => None,
    };
    let until = cooling.or(plan.exhausted_until.filter(|u| *u > now))?;
    Some(millis(until - now))
}

/// Splits the keys into those open to the request and those skipped (with why). Budgets are soft: when
/// every usable key is over its budget, they serve anyway.
fn sort_keys<'a>(ask: &Ask<'a>, decision: &mut Decision) -> Sorted<'a> {
    let mut sorted =
        Sorted { open: Vec::new(), skipped: Vec::new(), cooling: 0, over_money: 0, earliest_free: None, unusable: 0 };
    let mut over_budget = Vec::new();
    for key in ask.keys {
        match closed(key, ask.now) {
            None if key.over_budget => {
                sorted.skipped.push(Reason::Skipped { key: key.id.clone(), why: SkipWhy::OverBudget });
                over_budget.push(key);
            }
            None => sorted.open.push(key),
            Some(why) => {
                let frees = match (why, key.health) {
                    (SkipWhy::Cooling { .. }, Health::Cooling { until }) => Some(until),
                    (SkipWhy::NearExhaustion { .. } | SkipWhy::PlanUsedUp { .. }, _) => key.exhausted_until,
                    (SkipWhy::WindowReserved { .. }, _) => key.window_reserve.map(|r| r.frees),
                    (SkipWhy::BudgetReserved { .. } | SkipWhy::BudgetStopped { .. }, _) => {
                        sorted.over_money += 1;
                        key.budget_resets
                    }
                    _ => None,
                };
                match frees {
                    Some(until) => {
                        sorted.cooling += 1;
                        sorted.earliest_free = Some(sorted.earliest_free.map_or(until, |e| e.min(until)));
                    }
                    None => sorted.unusable += 1,
                }
                sorted.skipped.push(Reason::Skipped { key: key.id.clone(), why });
            }
        }
    }
    if sorted.open.is_empty() && !over_budget.is_empty() {
        decision.reasons.push(Reason::BudgetOverrun);
        sorted.open = over_budget;
    }
    sorted
}

/// Why a key is closed to an unpinned request now (its health, its model, a budget in money past
/// its reserve threshold, a used-up window, a window down to the share it keeps); `None` when it is open.
pub(super) fn closed(key: &KeyView, now: Instant) -> Option<SkipWhy> {
    skip_reason(key, now)
        .or_else(|| reserved(key))
        .or_else(|| {
            let until = key.exhausted_until.filter(|u| *u > now)?;
            let reset_ms = millis(until - now);
            Some(if key.plan { SkipWhy::PlanUsedUp { reset_ms } } else { SkipWhy::NearExhaustion { reset_ms } })
        })
        .or_else(|| {
            let kept = key.window_reserve.filter(|r| r.frees > now)?;
            Some(SkipWhy::WindowReserved {
                left_permille: kept.left_permille,
                keep_pct: kept.keep_pct,
                reset_ms: millis(kept.frees - now),
            })
        })
}

/// A key reserved by its budget in money takes no new sessions (pinned ones still reach it).
fn reserved(key: &KeyView) -> Option<SkipWhy> {
    match key.budget {
        BudgetState::Reserved { period, limit, used_permille, .. } => {
            Some(SkipWhy::BudgetReserved { period, limit, used_permille })
        }
        BudgetState::Open | BudgetState::Stopped { .. } => None,
    }
}

/// Soft affinity: a preference inside the candidates, never a widening of them. The remembered key
/// goes first unless it is too busy; then its organization's other keys (the prompt cache is per
/// organization); then everyone else by load.
fn prefer_remembered<'a>(
    ask: &Ask<'_>,
    decision: &mut Decision,
    ranked: Vec<&'a KeyView>,
    target: &crate::keys::KeyId,
) -> (Vec<&'a KeyView>, Route) {
    let limit = ask.policy.max_in_flight_per_key;
    let warm_org = ask.keys.iter().find(|k| &k.id == target).map(|k| k.org_tag);
    let remembered = ranked.iter().position(|k| &k.id == target).filter(|&i| !hot(ranked[i], &ranked, limit));
    let front = match remembered {
        Some(i) => Some(ranked[i]),
        None => ranked.iter().copied().find(|k| Some(k.org_tag) == warm_org && !hot(k, &ranked, limit)),
    };
    decision.reasons.push(match remembered {
        Some(_) => Reason::SoftAffinity { key: target.clone() },
        None => Reason::SoftTargetUnavailable { key: target.clone() },
    });
    let Some(first) = front else {
        return (ranked, Route::Balanced);
    };
    if remembered.is_none() {
        decision.reasons.push(Reason::WarmOrganization);
    }
    let mut reordered = vec![first];
    reordered.extend(ranked.iter().copied().filter(|k| k.id != first.id && k.org_tag == first.org_tag));
    reordered.extend(ranked.iter().copied().filter(|k| k.org_tag != first.org_tag));
    (reordered, Route::Affinity)
}

/// A remembered key that already carries `limit` requests, or has less than `MIN_AFFINITY_HEADROOM` of
/// its rate-limit window left, while another candidate is better off, is left alone for this request:
/// one hot session must not melt one key.
pub(super) fn hot(key: &KeyView, candidates: &[&KeyView], limit: u32) -> bool {
    (key.in_flight >= limit && candidates.iter().any(|o| o.in_flight < key.in_flight))
        || (key.headroom < MIN_AFFINITY_HEADROOM && candidates.iter().any(|o| o.headroom > key.headroom))
}

/// Headroom per step of load, in thousandths (quantized so near-equal keys tie).
fn score(key: &KeyView) -> u32 {
    let steps = (key.in_flight / LOAD_STEP) as f32;
    (key.headroom.clamp(0.0, 1.0) * 1_000_000.0 / (1.0 + steps)).round() as u32 / 1_000
}

/// Orders unpinned candidates: lowest priority tier first, then most headroom per step of load, then
/// the key that recently started the fewest sessions (self-correcting, so new sessions spread evenly),
/// then a stable hash of the request number.
pub(super) fn rank_by_headroom(mut keys: Vec<&KeyView>, seq: u64) -> Vec<&KeyView> {
    keys.sort_by(|a, b| {
        (a.priority, std::cmp::Reverse(score(a)))
            .cmp(&(b.priority, std::cmp::Reverse(score(b))))
            .then(a.recent_starts.total_cmp(&b.recent_starts))
            .then(tie_hash(seq, &a.id).cmp(&tie_hash(seq, &b.id)))
    });
    keys
}
