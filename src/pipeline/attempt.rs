//! Step 2: one attempt per candidate, each judged by the one classifier and taught to the pool, until
//! one serves, the provider declines the client's own request, or none is left.

use super::admit::refusal_error;
use super::{Admitted, AttemptFor, Completion, Fallback, Reply, Settled, Trace, Transport};
use crate::classify::{self, Code, Context, Next, Verdict};
use crate::error::ApiError;
use crate::events::{Attempt, FailureKind};
use crate::facts::{Operation, RequestFacts};
use crate::gateway::Gateway;
use crate::keys::KeyId;
use crate::pool::{Begin, InFlight, Learned, Outcome};
use crate::relay::Tagger;
use crate::router::{self, LostOrgPolicy, Memory, Reason, Refusal};

/// Step 2: one attempt per candidate until one serves, the provider declines the client's own request,
/// or none is left. A request replaying unmarked encrypted content (`Route::FindingOrg`) moves on to
/// the next organization when one cannot read it; when none can, `lost_org` decides (`unreadable`).
pub async fn attempt_all<T: Transport>(
    gw: &Gateway,
    admitted: &Admitted,
    transport: &mut T,
    trace: &mut Trace,
) -> Settled<T::Accepted, T::Declined> {
    let finding = admitted.decision.finding_org();
    match attempt_each(gw, admitted, transport, trace, finding).await {
        Attempts::Settled(Settled::Failed(fallback)) if plan_used_up(gw, admitted) => {
            plan_rescue(gw, admitted, transport, trace, fallback).await
        }
        Attempts::Settled(settled) => settled,
        Attempts::Unreadable { tried } => unreadable(gw, admitted, transport, trace, tried).await,
    }
}

/// Whether a session pinned to a plan just found the plan used up (its only candidates are
/// plan keys, all now closed for their usage), with `lost_org = "rescue"`.
fn plan_used_up(gw: &Gateway, admitted: &Admitted) -> bool {
    let now = gw.clock().now();
    let is_plan = |key: &KeyId| gw.pool().is_plan(key);
    let cooling = |key: &KeyId| gw.pool().status(now, gw.today()).iter().any(|s| &s.id == key && s.cooldown_ms > 0);
    gw.policy().lost_org == LostOrgPolicy::Rescue
        && admitted.decision.pin.is_some()
        && admitted.decision.candidates().all(|k| is_plan(k) && cooling(k))
}

/// The plan ran out in the middle of a session: as for a lost organization, the plan's items (the
/// only encrypted content left in the body) are dropped, the session is remembered as moved off the
/// plan, and the request is decided again (the plan now closed) and sent to an API key.
async fn plan_rescue<T: Transport>(
    gw: &Gateway,
    admitted: &Admitted,
    transport: &mut T,
    trace: &mut Trace,
    fallback: Fallback<T::Declined>,
) -> Settled<T::Accepted, T::Declined> {
    let now = gw.clock().now();
    let pools = gw.pools();
    let reach = pools.reach(&admitted.pool);
    let view = super::admit::pool_view(gw, &admitted.facts, admitted.entry, now, &reach);
    let decision = router::decide_within(&admitted.facts, view, reach.tiers(), &Memory::default(), now, gw.policy());
    let dropped = gw.markers().drop_unreadable(&admitted.body, &[], true);
    let (Some((body, dropped)), None) = (dropped, &decision.refusal) else {
        return Settled::Failed(fallback);
    };
    decision.reasons.iter().cloned().for_each(|r| trace.reason(r));
    trace.rescued(dropped);
    if let Some(session) = admitted.facts.session {
        super::admit::remember_rescued(gw, session, &decision.rescued_orgs, now);
    }
    let body = bytes::Bytes::from(body);
    transport.rescue(body.clone());
    let again = Admitted {
        facts: admitted.facts.clone(),
        decision,
        body,
        path: admitted.path.clone(),
        pool: admitted.pool.clone(),
        entry: admitted.entry,
    };
    match attempt_each(gw, &again, transport, trace, false).await {
        Attempts::Settled(settled) => settled,
        Attempts::Unreadable { .. } => Settled::Failed(fallback),
    }
}

/// How walking the candidates ended.
enum Attempts<A, D> {
    /// As `attempt_all` says.
    Settled(Settled<A, D>),
    /// Finding the organization of unmarked encrypted content, every organization tried answered that
    /// it cannot read it.
    Unreadable { tried: usize },
}

async fn attempt_each<T: Transport>(
    gw: &Gateway,
    admitted: &Admitted,
    transport: &mut T,
    trace: &mut Trace,
    finding: bool,
) -> Attempts<T::Accepted, T::Declined> {
    let mut last: Option<Fallback<T::Declined>> = None;
    let mut cannot_read = 0;
    let begin = Begin { tokens: admitted.facts.prompt_tokens, start: admitted.decision.balanced() };
    for key in admitted.decision.candidates() {
        let started = gw.clock().now();
        let Some(guard) = gw.pool().begin(key, begin, started) else {
            continue;
        };
        trace.trying(key.clone(), started);
        let (reply, verdict) = attempt_key(gw, &guard, transport, admitted.attempt_for()).await;
        let heard = reply.heard();
        let code = heard.and_then(|h| h.code);
        let wrong_org = finding && code == Some(Code::InvalidEncryptedContent);
        trace.attempted(Attempt {
            key: key.clone(),
            status: heard.map(|h| h.status),
            failure: if wrong_org { Some(FailureKind::WrongOrganization) } else { verdict.failure },
            duration_ms: gw.clock().elapsed_ms(started),
            message: attempt_message(&reply),
        });
        let status = heard.map_or(401, |h| h.status);
        match (verdict.next, reply) {
            (_, Reply::Declined(..)) if wrong_org => cannot_read += 1,
            (Next::Relay | Next::Final, Reply::Accepted(_, accepted)) => {
                served(gw, &admitted.facts, key);
                return Attempts::Settled(Settled::Served { key: key.clone(), guard, accepted });
            }
            (Next::Relay | Next::Final, Reply::Declined(_, declined)) => {
                trace.upstream_code(code.and_then(Code::notable));
                return Attempts::Settled(Settled::Relayed { key: key.clone(), declined });
            }
            (Next::Rejected, _) => {
                let label = guard.entry().label.clone();
                tracing::warn!(key = %key, label = %label, "provider rejected key");
                last = Some(Fallback::Keymux(ApiError::KeyRejected { label, status }));
            }
            (Next::FailOver, Reply::Declined(_, declined)) => last = Some(Fallback::Upstream(declined)),
            (Next::FailOver, Reply::Failed(error)) => last = Some(Fallback::Keymux(error.into())),
            // The classifier never fails over a success; nothing to keep from one.
            (Next::FailOver, Reply::Accepted(..)) => {}
            (Next::Relay | Next::Final, Reply::Failed(error)) => last = Some(Fallback::Keymux(error.into())),
        }
    }
    if cannot_read > 0 && last.is_none() {
        return Attempts::Unreadable { tried: cannot_read };
    }
    Attempts::Settled(Settled::Failed(after_failover(gw, admitted, last)))
}

/// What an attempt's record says of its answer: the provider's message, or why none came.
fn attempt_message<A, D>(reply: &Reply<A, D>) -> Option<Box<str>> {
    match reply {
        Reply::Accepted(heard, _) | Reply::Declined(heard, _) => heard.message.as_deref().map(Box::from),
        Reply::Failed(error) => Some(classify::safe_message(&error.to_string()).into()),
    }
}

/// No organization could read the request's unmarked encrypted content: with `lost_org = "rescue"`
/// those items are dropped and the rest is sent to the candidates again (any organization can read
/// what is left); with `"fail"` the request is refused with what to do. The decision says which.
async fn unreadable<T: Transport>(
    gw: &Gateway,
    admitted: &Admitted,
    transport: &mut T,
    trace: &mut Trace,
    tried: usize,
) -> Settled<T::Accepted, T::Declined> {
    trace.reason(Reason::UnreadableEverywhere { tried });
    if gw.policy().lost_org == LostOrgPolicy::Fail {
        return Settled::Failed(Fallback::Keymux(ApiError::Unreadable { tried }));
    }
    let Some((body, dropped)) = gw.markers().drop_unreadable(&admitted.body, &[], true) else {
        let detail = "the body could not be re-read to drop unreadable items".into();
        return Settled::Failed(Fallback::Keymux(ApiError::BadJson { detail }));
    };
    trace.rescued(dropped);
    super::admit::remember_unreadable(gw, &admitted.facts);
    transport.rescue(bytes::Bytes::from(body));
    match attempt_each(gw, admitted, transport, trace, false).await {
        Attempts::Settled(settled) => settled,
        Attempts::Unreadable { tried } => Settled::Failed(Fallback::Keymux(ApiError::Unreadable { tried })),
    }
}

/// One attempt with the key `guard` holds: made by the transport, judged by the one classifier, and
/// taught to the pool (which tells the event stream about a health change). Every upstream answer
/// Keymux gets, for a client or for a probe, goes through here.
pub(super) async fn attempt_key<T: Transport>(
    gw: &Gateway,
    guard: &InFlight,
    transport: &mut T,
    attempt_for: AttemptFor<'_>,
) -> (Reply<T::Accepted, T::Declined>, Verdict) {
    let reply = transport.attempt(guard).await;
    let verdict = match &reply {
        Reply::Accepted(heard, _) | Reply::Declined(heard, _) => classify::judge(
            heard,
            Context { model_named: attempt_for.model.is_some(), quota_recheck: gw.quota_recheck() },
        ),
        Reply::Failed(error) => classify::judge_failure(error),
    };
    let mut outcome = Outcome::new(guard.entry().id.clone(), gw.clock().now(), verdict.outcome);
    if let Some(heard) = reply.heard() {
        outcome.status = Some(heard.status);
        outcome.org = heard.org.clone();
        outcome.limits = heard.limits;
        outcome.plan = heard.plan.any().then(|| Box::new(heard.plan));
        // Keymux routed this correctly; the provider could still not read it (it has had incidents).
        // Never the key's fault: counted, not cooled.
        outcome.invalid_encrypted = heard.code == Some(Code::InvalidEncryptedContent) && attempt_for.pinned;
    }
    if verdict.failure == Some(FailureKind::ModelUnavailable) {
        outcome.model_missing = attempt_for.model.map(str::to_owned);
    }
    gw.apply(Learned::Outcome(outcome));
    (reply, verdict)
}

/// A key served a request: the session's newest org-bound state now lives with its organization.
fn served(gw: &Gateway, facts: &RequestFacts, key: &KeyId) {
    if let (Some(session), Operation::ResponsesCreate) = (facts.session, facts.operation) {
        gw.hints().insert(session, key.clone(), gw.clock().now());
    }
}

/// After every candidate failed before anything reached the client: a 429 with `retry-after` if
/// every usable key the request may reach (its pool, then its fallbacks) is now cooling (Codex
/// retries only that), else the last failure.
fn after_failover<D>(gw: &Gateway, admitted: &Admitted, last: Option<Fallback<D>>) -> Fallback<D> {
    let (facts, now) = (&admitted.facts, gw.clock().now());
    let policy = router::Policy { max_attempts: 1, ..*gw.policy() };
    let pools = gw.pools();
    let reach = pools.reach(&admitted.pool);
    let view = super::admit::pool_view(gw, facts, admitted.entry, now, &reach);
    match router::decide_within(facts, view, reach.tiers(), &Memory::default(), now, &policy).refusal {
        Some(refusal @ (Refusal::AllCooling { .. } | Refusal::BudgetReached { .. })) => {
            Fallback::Keymux(refusal_error(gw, refusal, &reach))
        }
        _ => last.unwrap_or(Fallback::Keymux(ApiError::NoUsableKey { unusable: 0, pool: None })),
    }
}

/// What a successful end teaches: only requests placed by the rules that may learn (not bound, long
/// enough to cache) teach the soft-affinity table.
pub fn completion(admitted: &Admitted, key: &KeyId) -> Completion {
    let teaches = admitted.facts.cache_eligible() && !admitted.decision.continuity_hit;
    Completion {
        key: key.clone(),
        operation: admitted.facts.operation,
        signal: admitted.facts.signal.filter(|_| teaches).map(|s| s.key),
        session: admitted.facts.session,
        pinned: admitted.decision.pin.is_some(),
    }
}

/// The tagger for answers of `operation` served on `guard`, if they may carry org-bound values.
pub fn tagger_for(gw: &Gateway, operation: Operation, guard: &InFlight) -> Option<Tagger> {
    // From the guard, not the pool: a key removed while its answer was on the way is no longer in the
    // pool, and an answer relayed untagged would send the session's next turn to any organization (and
    // its replayed items would be unreadable there).
    operation.carries_org_state().then(|| Tagger::new(gw.markers().clone(), guard.entry().id.clone(), guard.org_tag()))
}
