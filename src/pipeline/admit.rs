//! Step 1: facts, memory, decision, rescue.

use bytes::Bytes;
use std::time::Instant;

use super::{Admitted, Entry, Trace};
use crate::affinity::Table;
use crate::budget::{BudgetState, SpendNow};
use crate::error::ApiError;
use crate::facts::Operation;
use crate::facts::{self, FactsError, Incoming, RequestFacts};
use crate::gateway::Gateway;
use crate::keys::KeyId;
use crate::markers::{OrgTag, SessionKey};
use crate::pool::{PoolView, ViewFor};
use crate::pools::Reach;
use crate::provider::{Ask, Transport};
use crate::router::{self, Decision, Memory, Reason, Refusal, Remembered};

/// Step 1: facts, memory, decision, rescue. A refusal comes back as the error to answer with (the
/// trace already holds the decision that explains it).
pub fn admit(gw: &Gateway, incoming: &Incoming<'_>, entry: Entry, trace: &mut Trace) -> Result<Admitted, ApiError> {
    let extracted = facts::extract(incoming, gw.markers()).map_err(|e| match e {
        FactsError::Body(detail) => ApiError::BadJson { detail },
        FactsError::Marker(e) => e.into(),
    })?;
    trace.facts(&extracted.facts);
    let mut facts = extracted.facts;
    let pools = gw.pools();
    let reach = pools.reach(incoming.pool);
    if let Some(refusal) = pool_mismatch(gw, &reach, &facts) {
        trace.decided(Decision { refusal: Some(refusal.clone()), ..Decision::new(facts.seq) });
        return Err(refusal_error(gw, refusal, &reach));
    }
    let now = gw.clock().now();
    let kept = still_rescued(gw, &mut facts, now);
    let memory = memory(gw, &facts, entry, now);
    let mut view = pool_view(gw, &facts, entry, now, &reach);
    // Keys whose provider cannot serve this request (a plan: streamed Responses over HTTP only).
    if view.keys.iter().any(|k| !k.serves) {
        view.keys.retain(|k| k.serves);
        if view.keys.is_empty() {
            trace.decided(Decision { refusal: Some(Refusal::NoKeys), ..Decision::new(facts.seq) });
            return Err(ApiError::PlanCannotServe);
        }
    }
    if facts.unmarked_encrypted && facts.pins.is_empty() {
        avoid_moved_off(gw, &facts, &mut view, now);
    }
    if facts.unmarked_response_id {
        match bare_id_keys(gw, &reach) {
            Ok(None) => {}
            Ok(Some(keys)) => view.keys.retain(|k| keys.contains(&k.id)),
            Err(refusal) => {
                trace.decided(Decision { refusal: Some(refusal.clone()), ..Decision::new(facts.seq) });
                return Err(refusal_error(gw, refusal, &reach));
            }
        }
    }
    let mut decision = router::decide_within(&facts, view, reach.tiers(), &memory, now, gw.policy());
    keep_rescued(gw, &facts, &mut decision, kept, now);
    let tier_changed = tier_change(&pools, incoming.pool, &facts);
    if let (Some(reason), None) = (&tier_changed, &decision.refusal) {
        decision.reasons.push(reason.clone());
    }
    let refusal = decision.refusal.clone();
    let rescued = decision.rescued_orgs.clone();
    trace.decided(decision.clone());
    if let Some(refusal) = refusal {
        return Err(refusal_error(gw, refusal, &reach));
    }
    // Unmarked encrypted content belongs to the session's organization (or to none Keymux has): moved
    // off an organization, or once found unreadable everywhere, its items go too.
    // An organization that dropped the session's reasoning as another's never held the unmarked part.
    let misplaced = facts.session.and_then(|s| gw.misplaced().get(&s, now)).unwrap_or_default();
    let moved_home = rescued.iter().any(|o| !misplaced.contains(o));
    let unmarked = facts.unmarked_encrypted && (moved_home || kept_unmarked(gw, &facts, now));
    let body = match (rescued.is_empty(), unmarked) {
        (true, false) => extracted.body,
        _ => rescue(gw, incoming.body, &rescued, unmarked, trace)?,
    };
    let body = match &tier_changed {
        Some(Reason::TierChanged { sent, .. }) => with_tier(&body, sent)?,
        _ => body,
    };
    Ok(Admitted { facts, decision, body, path: extracted.path, pool: incoming.pool.to_owned(), entry })
}

/// The tier change a request's pool makes (the reason its decision records): when the request asks
/// for a `service_tier` above the standard one that its pool's policies do not allow
/// (`pools::PoolPolicies::sent_tier`: standard, or priority for ultrafast). Nothing is looked up for a
/// request that names no tier.
pub fn tier_change(pools: &crate::pools::Pools, pool: &str, facts: &RequestFacts) -> Option<Reason> {
    let asked = facts.service_tier.as_deref().filter(|t| crate::pools::above_standard(t))?;
    let sent = pools.sent_tier(pool, asked)?;
    Some(Reason::TierChanged { pool: pool.to_owned(), asked: asked.to_owned(), sent: sent.to_owned() })
}

/// `body` with its `service_tier` set to `tier` (`pools::with_tier`); refused, never sent in the tier
/// the pool does not allow, when it cannot be re-read.
pub fn with_tier(body: &[u8], tier: &str) -> Result<Bytes, ApiError> {
    crate::pools::with_tier(body, tier).map(Bytes::from).ok_or_else(|| ApiError::BadJson {
        detail: format!("the body could not be re-read to send it in the {tier} service tier"),
    })
}

/// The organizations this request's session was rescued from before: their pins are taken out of the
/// facts (they do not steer routing any more), and returned so their items are dropped again.
fn still_rescued(gw: &Gateway, facts: &mut RequestFacts, now: Instant) -> Vec<OrgTag> {
    let orgs = rescued_from(gw, facts, now);
    facts.pins.retain(|p| !orgs.contains(&p.org));
    orgs
}

/// The organizations among the request's pins that its session was rescued from on an earlier turn,
/// each once (both transports drop their items again).
pub fn rescued_from(gw: &Gateway, facts: &RequestFacts, now: Instant) -> Vec<OrgTag> {
    let Some(dropped) = facts.session.and_then(|s| gw.rescued().get(&s, now)) else { return Vec::new() };
    let mut orgs: Vec<OrgTag> = Vec::new();
    for org in facts.pins.iter().map(|p| p.org).filter(|o| dropped.contains(o)) {
        if !orgs.contains(&org) {
            orgs.push(org);
        }
    }
    orgs
}

/// Encrypted content without a marker, of a session an organization was found not to hold (it
/// dropped the session's reasoning, `pipeline::dropped`): that organization is left out of the search
/// for the session's own while a ready key of another can take it.
fn avoid_moved_off(gw: &Gateway, facts: &RequestFacts, view: &mut PoolView, now: Instant) {
    let Some(moved) = facts.session.and_then(|s| gw.misplaced().get(&s, now)) else { return };
    let elsewhere = |k: &crate::pool::KeyView| !moved.contains(&k.org_tag);
    if view.keys.iter().any(|k| elsewhere(k) && k.health == crate::pool::Health::Ready) {
        view.keys.retain(elsewhere);
    }
}

/// Whether this session's unmarked encrypted content was found unreadable by every organization on an
/// earlier turn (so it is dropped again rather than searched for again).
fn kept_unmarked(gw: &Gateway, facts: &RequestFacts, now: Instant) -> bool {
    facts.session.and_then(|s| gw.rescued().get(&s, now)).is_some_and(|orgs| orgs.contains(&OrgTag::UNMARKED))
}

/// Remembers that no organization could read this session's unmarked encrypted content, so later turns
/// drop it again.
pub fn remember_unreadable(gw: &Gateway, facts: &RequestFacts) {
    if let Some(session) = facts.session {
        remember_rescued(gw, session, &[OrgTag::UNMARKED], gw.clock().now());
    }
}

/// Adds `orgs` to the organizations the rescued table remembers for `session` (each once, at most
/// `markers::MAX_PINS`).
pub(super) fn remember_rescued(gw: &Gateway, session: SessionKey, orgs: &[OrgTag], now: Instant) {
    remember_in(gw.rescued(), session, orgs, now);
}

/// Adds `orgs` to those `table` remembers for `session` (each once, at most `markers::MAX_PINS`).
pub(super) fn remember_in(table: &Table<Vec<OrgTag>>, session: SessionKey, orgs: &[OrgTag], now: Instant) {
    let mut remembered = table.get(&session, now).unwrap_or_default();
    for org in orgs {
        if !remembered.contains(org) && remembered.len() < crate::markers::MAX_PINS {
            remembered.push(*org);
        }
    }
    table.insert(session, remembered, now);
}

/// Drops `kept` again (saying so in the decision), and remembers every organization this session was
/// rescued from, so a later turn is not refused for a mix Keymux itself caused.
fn keep_rescued(gw: &Gateway, facts: &RequestFacts, decision: &mut Decision, kept: Vec<OrgTag>, now: Instant) {
    if !kept.is_empty() {
        decision.reasons.push(Reason::StillRescued { orgs: kept.len() });
        for org in kept {
            if !decision.rescued_orgs.contains(&org) {
                decision.rescued_orgs.push(org);
            }
        }
    }
    if let (Some(session), false, None) = (facts.session, decision.rescued_orgs.is_empty(), &decision.refusal) {
        remember_rescued(gw, session, &decision.rescued_orgs, now);
    }
}

/// The pool-mismatch refusal, when the request replays state made by a key outside its pool.
pub fn pool_mismatch(gw: &Gateway, reach: &Reach<'_>, facts: &RequestFacts) -> Option<Refusal> {
    let pinned = facts.pins.iter().chain(&facts.continuity).map(|p| &p.key);
    let (key, owner) = reach.mismatch(pinned, |k| gw.pool().contains(k))?;
    Some(Refusal::PoolMismatch { key, pool: reach.pool().to_owned(), owner })
}

/// The keys a request naming a response by its bare provider id may reach (`Reach::bare_id_keys`):
/// `None` for the pool `all`; the refusal when no key of the token's pool has an organization of its own.
pub fn bare_id_keys(gw: &Gateway, reach: &Reach<'_>) -> Result<Option<Vec<KeyId>>, Refusal> {
    let every: Vec<(KeyId, Option<OrgTag>)> =
        gw.pool().ids().into_iter().map(|k| (k.clone(), gw.pool().org_tag(&k))).collect();
    reach
        .bare_id_keys(&every)
        .map_err(|shared_with| Refusal::BareResponseId { pool: reach.pool().to_owned(), shared_with })
}

/// For a socket bound to `key`: the refusal when a bare response id may not go to that key.
pub fn bare_id_refusal(gw: &Gateway, reach: &Reach<'_>, key: &KeyId) -> Option<Refusal> {
    let shared_with = reach.shared_outside(&orgs_of_keys(gw), key)?;
    Some(Refusal::BareResponseId { pool: reach.pool().to_owned(), shared_with })
}

/// Every key with its organization (`None` until its first answer tells it).
fn orgs_of_keys(gw: &Gateway) -> Vec<(KeyId, Option<OrgTag>)> {
    gw.pool().ids().into_iter().map(|k| (k.clone(), gw.pool().org_tag(&k))).collect()
}

/// What Keymux remembers about a request: the soft-affinity table (only for prompts long enough to
/// cache), and for a new socket or a request replaying unmarked encrypted content the session hint.
fn memory(gw: &Gateway, facts: &RequestFacts, entry: Entry, now: Instant) -> Memory {
    let remembered = match (facts.signal, gw.policy().soft_affinity && facts.cache_eligible()) {
        (Some(signal), true) => gw.soft().get(&signal.key, now).map_or(Remembered::Miss, Remembered::Key),
        _ => Remembered::NotAsked,
    };
    let session_hint = match (entry, facts.pins.is_empty(), facts.session) {
        (Entry::SocketOpen, true, Some(session)) => gw.hints().get(&session, now),
        (Entry::Request, true, Some(session)) if facts.unmarked_encrypted => gw.hints().get(&session, now),
        _ => None,
    };
    Memory { remembered, session_hint }
}

/// The router's view of the pool for a request bound to `reach`: each key as it stands, the pool's
/// own keys held to its budget too (`budgets::hold_to_pool`).
pub(super) fn pool_view(gw: &Gateway, facts: &RequestFacts, entry: Entry, now: Instant, reach: &Reach<'_>) -> PoolView {
    let spend = gw.spend_now();
    let view = gw.pool().view(view_for(gw, facts, entry, now, &spend));
    crate::budgets::hold_to_pool(gw, view, now, reach)
}

/// Whether a new WebSocket of a token bound to `pool` could be served at all right now: some key it
/// may reach is usable for a new request, by the same view a request is decided on (the pool's
/// budget included), so a handshake and a request never disagree.
pub fn can_open_socket(gw: &Gateway, pool: &str) -> bool {
    if gw.paused() {
        return false;
    }
    let now = gw.clock().now();
    let spend = gw.spend_now();
    let now_unix_ms = gw.clock().unix_ms();
    let ask = Ask { operation: Operation::ResponsesCreate, stream: true, transport: Transport::WebSocket };
    let view_for = ViewFor { model: None, tokens: 0, now, day: gw.today(), now_unix_ms, spend: &spend, ask };
    let pools = gw.pools();
    let reach = pools.reach(pool);
    let mut view = gw.pool().view(view_for);
    // Keys whose provider serves no WebSocket (a plan): with only those usable, Codex is told to use HTTP.
    view.keys.retain(|k| k.serves);
    if !reach.tiers().is_empty() {
        view.keys.retain(|k| reach.tiers().iter().any(|t| t.keys.contains(&k.id)));
    }
    router::any_open(&crate::budgets::hold_to_pool(gw, view, now, &reach), now)
}

pub(super) fn view_for<'a>(
    gw: &Gateway,
    facts: &'a RequestFacts,
    entry: Entry,
    now: Instant,
    spend: &'a SpendNow,
) -> ViewFor<'a> {
    let now_unix_ms = gw.clock().unix_ms();
    let transport = match entry {
        Entry::Request => Transport::Http,
        Entry::SocketOpen => Transport::WebSocket,
    };
    let ask = Ask { operation: facts.operation, stream: facts.stream, transport };
    ViewFor {
        model: facts.model.as_deref(),
        tokens: facts.prompt_tokens,
        now,
        day: gw.today(),
        now_unix_ms,
        spend,
        ask,
    }
}

/// Rescue: drops what no remaining key can read (the items of `orgs`, and with `unmarked` those that
/// carry no marker), then strips the rest of the markers. The same for both transports: a body that
/// cannot be re-read is refused, never forwarded un-rescued.
fn rescue(gw: &Gateway, raw: &Bytes, orgs: &[OrgTag], unmarked: bool, trace: &mut Trace) -> Result<Bytes, ApiError> {
    let reread = || ApiError::BadJson { detail: "the body could not be re-read to drop unreadable items".into() };
    let (rescued, dropped) = gw.markers().drop_unreadable(raw, orgs, unmarked).ok_or_else(reread)?;
    trace.rescued(dropped);
    let stripped = gw.markers().strip(&rescued)?;
    Ok(Bytes::from(stripped.body.into_owned()))
}

/// The proxy (`host:port`) that keys this request may reach go out through, when one of them rests
/// unreachable through it: a refusal then names the proxy.
fn proxy_down(gw: &Gateway, reach: &Reach<'_>) -> Option<String> {
    let upstream = gw.upstream();
    let status = gw.pool().status(gw.clock().now(), gw.today());
    let reachable = |key: &KeyId| reach.tiers().is_empty() || reach.tiers().iter().any(|t| t.keys.contains(key));
    status
        .iter()
        .filter(|k| k.health == crate::pool::HealthState::Unreachable && reachable(&k.id))
        .find_map(|k| upstream.proxy_of(&k.id))
}

/// The error a refusal is answered with, naming keys by their labels, and the pool when the request
/// is bound to one (so the user knows no key outside it was tried).
pub fn refusal_error(gw: &Gateway, refusal: Refusal, reach: &Reach<'_>) -> ApiError {
    let label = |key: &KeyId| gw.pool().label(key);
    let pool = match reach {
        Reach::All => None,
        Reach::Pool { .. } => Some(reach.pool().to_owned()),
    };
    match refusal {
        Refusal::NoKeys => ApiError::NoKeys { pool },
        Refusal::AllCooling { retry_after_secs, cooling } => ApiError::AllCooling { retry_after_secs, cooling, pool },
        Refusal::NoUsableKey { unusable } => match proxy_down(gw, reach) {
            Some(proxy) => ApiError::ProxyUnreachable { pool: reach.pool().to_owned(), proxy },
            None => ApiError::NoUsableKey { unusable, pool },
        },
        Refusal::BudgetReached { retry_after_secs, keys } => ApiError::BudgetReached { retry_after_secs, keys, pool },
        Refusal::BudgetStopped { key, period, limit, retry_after_secs } => {
            // The pool's budget rather than the key's, when the pool is the one stopped at this limit.
            let pool = match crate::budgets::pool_state(gw, reach.pool()) {
                BudgetState::Stopped { period: p, limit: l, .. } if (p, l) == (period, limit) => {
                    Some(reach.pool().to_owned())
                }
                _ => None,
            };
            ApiError::BudgetStopped { label: label(&key), pool, period, limit, retry_after_secs }
        }
        Refusal::PoolMismatch { key, pool, owner } => ApiError::PoolMismatch { label: label(&key), pool, owner },
        Refusal::BareResponseId { pool, shared_with } => ApiError::BareResponseId { pool, shared_with },
        Refusal::MixedOrgs { keys } => ApiError::MixedOrgs { labels: keys.iter().map(label).collect() },
        Refusal::LostOrg { key } => ApiError::LostOrg { label: label(&key) },
        Refusal::ContinuityLost { key } => ApiError::ContinuityLost { label: label(&key) },
    }
}
