//! Deciding inside a pool: the same `decide`, over a snapshot that holds only the keys of the request's
//! pool, then (only when none of them can serve) of each fallback pool in turn.

use std::time::Instant;

use super::{decide, Decision, Memory, Policy, Reason};
use crate::facts::RequestFacts;
use crate::keys::KeyId;
use crate::pool::PoolView;

/// One step of a request's reach: a pool's name and its keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tier<'a> {
    /// The pool.
    pub pool: &'a str,
    /// Its keys.
    pub keys: &'a [KeyId],
}

/// Decides a request that may reach only the keys of `tiers`: the first tier (the token's pool) if
/// it can serve the request as it is, else the first fallback tier that can, else the first tier's
/// own answer (its refusal, or its rescue). With no tiers (the built-in pool `all`), the whole view.
///
/// "Can serve as it is" means a choice without dropping anything: a fallback pool whose keys can read
/// a session's encrypted content is better than rescuing it inside the pool.
pub fn decide_within(
    facts: &RequestFacts,
    view: PoolView,
    tiers: &[Tier<'_>],
    memory: &Memory,
    now: Instant,
    policy: &Policy,
) -> Decision {
    let Some((first, rest)) = tiers.split_first() else { return decide(facts, &view, memory, now, policy) };
    let own = decide(facts, &only(&view, first.keys), memory, now, policy);
    if serves(&own) {
        return own;
    }
    for tier in rest {
        let mut other = decide(facts, &only(&view, tier.keys), memory, now, policy);
        if serves(&other) {
            let fell_back = Reason::PoolFallback { from: first.pool.to_owned(), to: tier.pool.to_owned() };
            other.reasons.insert(0, fell_back);
            return other;
        }
    }
    own
}

/// The snapshot with only `keys` in it, in the pool's order.
fn only(view: &PoolView, keys: &[KeyId]) -> PoolView {
    PoolView { keys: view.keys.iter().filter(|k| keys.contains(&k.id)).cloned().collect() }
}

fn serves(decision: &Decision) -> bool {
    decision.refusal.is_none() && decision.rescued_orgs.is_empty() && decision.choice.is_some()
}
