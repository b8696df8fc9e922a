//! Taking the router's snapshot (`keymux_core::pool::KeyView`) of one live key.

use std::sync::atomic::Ordering;

use super::{KeyView, Slot, ViewFor};
use crate::budget::BudgetState;

pub(super) fn key_view(s: &Slot, request: ViewFor<'_>) -> KeyView {
    let entry = s.entry.load();
    let live = s.live.load();
    let state = s.lock();
    let model_ok = request.model.is_none_or(|m| entry.allows(m) && !state.missing_models.iter().any(|x| x == m));
    let used = if state.budget_day == request.day { state.budget_used } else { 0 };
    let budget = request.spend.state_of(&s.fingerprint, &entry.money);
    let budget_resets = match budget {
        BudgetState::Open => None,
        BudgetState::Reserved { resets_unix_ms, .. } | BudgetState::Stopped { resets_unix_ms, .. } => {
            let left = resets_unix_ms.saturating_sub(request.now_unix_ms);
            Some(crate::clock::later(request.now, std::time::Duration::from_millis(left)))
        }
    };
    KeyView {
        id: entry.id.clone(),
        org: entry.org.clone().or_else(|| live.learned_org.clone()),
        org_tag: live.org_tag,
        imported: entry.imported,
        plan: entry.provider.get().is_plan(),
        serves: entry.provider.get().serves(request.ask),
        budget,
        budget_resets,
        in_flight: s.in_flight.load(Ordering::Acquire),
        priority: entry.settings.priority,
        headroom: state.quota.headroom(request.now),
        exhausted_until: state
            .quota
            .exhausted_until(request.now, request.tokens)
            .or_else(|| plan_used_up(&state, &request)),
        window_reserve: entry.settings.window_reserve(&state.quota, request.now),
        over_budget: entry.settings.over_token_budget(used),
        model_ok,
        recent_starts: state.starts.at(request.now) as f32,
        health: live.health,
    }
}

/// Until when a plan is used up by what its last answer reported (a 5-hour or weekly window at
/// 100 %, with its reset), on the request's clock. Closed so, the plan takes no new session (they
/// overflow to the API keys at once, `plan_exhausted`, instead of trying it first for its 429), while
/// sessions pinned to it still reach it.
fn plan_used_up(state: &super::Tally, request: &ViewFor<'_>) -> Option<std::time::Instant> {
    let reset_ms = state.plan_windows?.used_up_until_ms(request.now_unix_ms)?;
    let left = reset_ms - request.now_unix_ms;
    Some(crate::clock::later(request.now, std::time::Duration::from_millis(left)))
}
