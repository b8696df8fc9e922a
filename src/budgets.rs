//! Budgets in money held against the live pool, in one place: where a user's pool stands (what its
//! keys spent together), the rule that holds a pool's own keys to the pool's budget as well as their
//! own (the worse of the two), the refusal of a stopped key or pool, and the event stream told of each
//! change of state. A request's admission, a WebSocket's handshake and a bound socket's turns all ask
//! here, so they never disagree about a stopped pool.

use std::time::{Duration, Instant};

use crate::budget::{BudgetState, SpendNow};
use crate::events::{BudgetOf, GatewayEvent};
use crate::gateway::Gateway;
use crate::keys::KeyId;
use crate::pool::PoolView;
use crate::pools::{Pools, Reach};

/// Where the user's pool `name` stands against its budget in money: what its keys spent together
/// (`Open` for `all` and for a pool without one).
pub fn pool_state(gw: &Gateway, name: &str) -> BudgetState {
    pool_state_in(gw, &gw.pools(), &gw.spend_now(), name)
}

/// `pool_state` against pools and spend the caller already read.
fn pool_state_in(gw: &Gateway, pools: &Pools, spend: &SpendNow, name: &str) -> BudgetState {
    let Some((money, keys)) = pools.money_of(name) else { return BudgetState::Open };
    let fingerprints: Vec<String> = keys.iter().filter_map(|k| gw.pool().fingerprint(k)).collect();
    let (day, month) = spend.of(fingerprints.iter().map(String::as_str));
    money.state(day.usd, month.usd, &spend.periods)
}

/// The view with the keys of the user's pool that `reach` starts with held to that pool's budget too:
/// each takes the worse of its own state and the pool's (a pool past its reserve threshold starts no new
/// sessions, a stopped one serves nothing).
pub fn hold_to_pool(gw: &Gateway, mut view: PoolView, now: Instant, reach: &Reach<'_>) -> PoolView {
    let Some(own) = reach.tiers().first() else { return view };
    let state = pool_state(gw, own.pool);
    let resets = match state {
        BudgetState::Open => return view,
        BudgetState::Reserved { resets_unix_ms, .. } | BudgetState::Stopped { resets_unix_ms, .. } => resets_unix_ms,
    };
    let left = Duration::from_millis(resets.saturating_sub(gw.clock().unix_ms()));
    for key in view.keys.iter_mut().filter(|k| own.keys.contains(&k.id) && state.worse_than(&k.budget)) {
        key.budget = state;
        key.budget_resets = Some(crate::clock::later(now, left));
    }
    view
}

/// The state that holds `key` for a request bound to the pool `pool`: the worse of the key's own and
/// the pool's, with the pool's name when it is the pool's (`None`: the key has no budget state).
pub fn holding(gw: &Gateway, key: &KeyId, pool: &str) -> Option<(BudgetState, Option<String>)> {
    let own = gw.pool().budget_of(key, &gw.spend_now())?;
    let of_pool = pool_state(gw, pool);
    Some(if of_pool.worse_than(&own) { (of_pool, Some(pool.to_owned())) } else { (own, None) })
}

/// Tells the event stream each change of a key's or a pool's budget state: reserved, stopped, or
/// open again once its period ended (read on every tick, so a period's end is told without a
/// request). A state first seen open is not news; one first seen reserved or stopped is.
pub fn tell(gw: &Gateway) {
    let spend = gw.spend_now();
    let keys = gw.pool().budgeted().into_iter().map(|(id, label, fingerprint, money)| {
        (BudgetOf::Key { key: id }, label, spend.state_of(&fingerprint, &money))
    });
    let pools = gw.pools();
    let pools = pools.defs().iter().filter(|def| def.policies.money.is_set()).map(|def| {
        let state = pool_state_in(gw, &pools, &spend, &def.name);
        (BudgetOf::Pool { pool: def.name.clone() }, def.name.clone(), state)
    });
    for (of, label, state) in gw.notices().budgets(keys.chain(pools).collect()) {
        gw.notify(GatewayEvent::Budget { of, label, state });
    }
}
