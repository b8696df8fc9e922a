//! The hard rules: state the provider keeps with one key or one organization decides where a request
//! may go, whatever the load.

use std::time::Instant;

use super::balance::rank_by_headroom;
use super::{fill, skip_reason, tie_hash, whole_seconds_ceil, Ask};
use super::{Decision, LostOrgPolicy, PinDecision, Reason, Refusal, Route, SkipWhy};
use crate::budget::BudgetState;
use crate::keys::KeyId;
use crate::markers::Pin;
use crate::pool::{Health, KeyView};

/// Continuity: exactly the key that holds the response, or a refusal that says why it cannot serve.
pub(super) fn bind_to_key(ask: &Ask<'_>, decision: &mut Decision, bound: &Pin) -> Route {
    let Some(key) = ask.keys.iter().find(|k| k.id == bound.key) else {
        decision.refusal = Some(Refusal::ContinuityLost { key: bound.key.clone() });
        return Route::Refused;
    };
    match (skip_reason(key, ask.now), key.health) {
        (None, _) => {}
        (Some(SkipWhy::BudgetStopped { period, limit, resets_ms }), _) => {
            let retry_after_secs = whole_seconds_ceil(std::time::Duration::from_millis(resets_ms));
            decision.refusal = Some(Refusal::BudgetStopped { key: key.id.clone(), period, limit, retry_after_secs });
            return Route::Refused;
        }
        (Some(SkipWhy::Cooling { .. }), Health::Cooling { until })
        | (Some(SkipWhy::Unreachable { .. }), Health::Unreachable { until, .. }) => {
            decision.refusal = Some(Refusal::AllCooling {
                retry_after_secs: whole_seconds_ceil(until.saturating_duration_since(ask.now)),
                cooling: 1,
            });
            return Route::Refused;
        }
        (Some(_), _) => {
            decision.refusal = Some(Refusal::ContinuityLost { key: bound.key.clone() });
            return Route::Refused;
        }
    }
    // Replayed encrypted content must be readable by the bound key's organization.
    if let Some(other) = ask.facts.pins.iter().find(|p| p.org != key.org_tag && p.key != key.id) {
        decision.refusal = Some(Refusal::MixedOrgs { keys: vec![key.id.clone(), other.key.clone()] });
        return Route::Refused;
    }
    decision.continuity_hit = true;
    decision.choice = Some(key.id.clone());
    decision.reasons.push(Reason::ContinuityBinding { key: key.id.clone() });
    Route::Continuity
}

/// Encrypted content: only the producing organization's keys can read it. `None` when the request is
/// not pinned (no markers, affinity off, or every organization it names was lost and rescued).
pub(super) fn pin_to_org(ask: &Ask<'_>, decision: &mut Decision) -> Option<Route> {
    if ask.facts.pins.is_empty() {
        return None;
    }
    if !ask.policy.encrypted_affinity {
        decision.reasons.push(Reason::AffinityOff);
        return None;
    }
    let (live, lost) = split_live(ask);
    if live.len() > 1 {
        decision.refusal = Some(Refusal::MixedOrgs { keys: live.iter().map(|p| p.key.clone()).collect() });
        return Some(Route::Refused);
    }
    if let Some(gone) = lost.first() {
        match ask.policy.lost_org {
            LostOrgPolicy::Fail => {
                decision.refusal = Some(Refusal::LostOrg { key: gone.key.clone() });
                return Some(Route::Refused);
            }
            LostOrgPolicy::Rescue => {
                for pin in &lost {
                    decision.rescued_orgs.push(pin.org);
                    decision.reasons.push(Reason::Rescued { key: pin.key.clone() });
                }
            }
        }
    }
    live.first().map(|first| place_in_org(ask, decision, first))
}

/// One pin per organization, split into organizations that still have a key that could ever serve
/// (ready or cooling) and lost ones (every key removed, rejected or disabled).
fn split_live<'a>(ask: &Ask<'a>) -> (Vec<&'a Pin>, Vec<&'a Pin>) {
    let (mut live, mut lost): (Vec<&Pin>, Vec<&Pin>) = (Vec::new(), Vec::new());
    for pin in &ask.facts.pins {
        if live.iter().chain(lost.iter()).any(|p| p.org == pin.org) {
            continue;
        }
        let alive = ask.keys.iter().any(|k| {
            // Unreachable may pass (a DNS hiccup): wait for it rather than drop the session's state. A
            // ChatGPT plan whose usage is used up is lost until it resets when sessions are rescued
            // (`fail` waits for the reset instead, with a 429 that says when).
            let exhausted = k.plan
                && ask.policy.lost_org == LostOrgPolicy::Rescue
                && super::balance::exhausted_ms(k, ask.now).is_some();
            (k.org_tag == pin.org || k.id == pin.key)
                && !exhausted
                && matches!(k.health, Health::Ready | Health::Cooling { .. } | Health::Unreachable { .. })
        });
        if alive {
            live.push(pin);
        } else {
            lost.push(pin);
        }
    }
    (live, lost)
}

/// Places a pinned request on its organization's usable keys, or refuses with the earliest cooldown.
fn place_in_org(ask: &Ask<'_>, decision: &mut Decision, first: &Pin) -> Route {
    let members: Vec<&KeyView> = ask.keys.iter().filter(|k| k.org_tag == first.org || k.id == first.key).collect();
    let usable: Vec<&KeyView> = members.iter().copied().filter(|k| skip_reason(k, ask.now).is_none()).collect();
    decision.reasons.push(Reason::PinnedToOrg {
        key: first.key.clone(),
        org_keys: members.len(),
        usable: usable.len(),
    });
    let mut pin = PinDecision { key: first.key.clone(), org: first.org, exact: false };
    if usable.is_empty() {
        decision.pin = Some(pin);
        decision.refusal = Some(unusable_org(ask, &members));
        return Route::Refused;
    }
    // Inside the organization, the remembered key (warm cache) first, else the producing key.
    let limit = ask.policy.max_in_flight_per_key;
    let prefer = ask.target.filter(|t| usable.iter().any(|k| &k.id == *t && !super::balance::hot(k, &usable, limit)));
    let ranked = rank_in_org(usable, ask.facts.seq, prefer.unwrap_or(&first.key));
    pin.exact = ranked.first().is_some_and(|k| k.id == first.key);
    decision.pin = Some(pin);
    fill(decision, ranked, ask.max_attempts);
    Route::Pinned
}

/// Why an organization that is alive cannot take a pinned request now: only its keys can read it, so
/// the client waits for the first to free (cooling), or for the budget that stopped them to reset
/// (set to stop there, when no key of it is merely cooling).
fn unusable_org(ask: &Ask<'_>, members: &[&KeyView]) -> Refusal {
    let cooling = members.iter().filter_map(|k| match k.health {
        Health::Cooling { until } | Health::Unreachable { until, .. } if until > ask.now => Some(until),
        _ => None,
    });
    let first_free = cooling.min();
    let stopped = members.iter().find_map(|k| match (k.budget, k.budget_resets) {
        (BudgetState::Stopped { period, limit, .. }, Some(resets)) => Some((k, period, limit, resets)),
        _ => None,
    });
    let wait = |until: Instant| whole_seconds_ceil(until.saturating_duration_since(ask.now));
    match (first_free, stopped) {
        (None, Some((key, period, limit, resets))) => {
            Refusal::BudgetStopped { key: key.id.clone(), period, limit, retry_after_secs: wait(resets) }
        }
        (Some(_), _) | (None, None) => {
            let first = first_free.or(stopped.map(|s| s.3)).unwrap_or(ask.now);
            Refusal::AllCooling { retry_after_secs: wait(first), cooling: members.len() }
        }
    }
}

/// A new WebSocket whose first frame carries no markers, for a session Keymux has served: the
/// organization that holds its state. `None` when the hinted key is gone or its organization has no
/// usable key (the request is then balanced).
pub(super) fn follow_hint(ask: &Ask<'_>, decision: &mut Decision, hint: &KeyId) -> Option<Route> {
    let hinted = ask.keys.iter().find(|k| &k.id == hint)?;
    let usable: Vec<&KeyView> =
        ask.keys.iter().filter(|k| k.org_tag == hinted.org_tag && skip_reason(k, ask.now).is_none()).collect();
    if usable.is_empty() {
        return None;
    }
    decision.reasons.push(Reason::SessionHint { key: hint.clone(), usable: usable.len() });
    let prefer = ask.target.filter(|t| usable.iter().any(|k| &k.id == *t)).unwrap_or(hint);
    let ranked = rank_in_org(usable, ask.facts.seq, prefer);
    fill(decision, ranked, ask.max_attempts);
    Some(Route::SessionHint)
}

/// Orders an organization's keys: fewest in flight, then the preferred key, then the stable hash.
fn rank_in_org<'a>(mut keys: Vec<&'a KeyView>, seq: u64, prefer: &KeyId) -> Vec<&'a KeyView> {
    keys.sort_by_key(|k| (k.in_flight, &k.id != prefer, std::cmp::Reverse(tie_hash(seq, &k.id))));
    keys
}

/// Encrypted content without a marker (a session begun before Keymux): nothing says which organization
/// can read it, so each is tried in turn, one key each: the organization that served this session last
/// first, then the organizations of keys imported from a client's own login (where such a session most
/// likely began), then the others by the balancer's order (priority tier, headroom, recent starts). The
/// attempts move on only when an organization answers that it cannot read it. `None` when no key is
/// open (the balancer then says why).
pub(super) fn find_org(ask: &Ask<'_>, decision: &mut Decision, last: Option<&KeyId>) -> Option<Route> {
    let open: Vec<&KeyView> = ask.keys.iter().filter(|k| skip_reason(k, ask.now).is_none()).collect();
    if open.is_empty() {
        return None;
    }
    let ranked = rank_by_headroom(open, ask.facts.seq);
    let known = last.and_then(|id| ask.keys.iter().find(|k| &k.id == id)).map(|k| k.org_tag);
    let first = known.and_then(|org| ranked.iter().find(|k| k.org_tag == org));
    let imported = ranked.iter().filter(|k| k.imported);
    let mut each: Vec<&KeyView> = Vec::new();
    for key in first.into_iter().chain(imported).chain(&ranked) {
        if !each.iter().any(|k| k.org_tag == key.org_tag) {
            each.push(key);
        }
    }
    decision.reasons.push(Reason::FindingOrg { orgs: each.len(), known: last.filter(|_| known.is_some()).cloned() });
    let orgs = each.len();
    fill(decision, each, orgs);
    Some(Route::FindingOrg)
}
