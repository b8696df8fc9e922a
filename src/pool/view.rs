//! The snapshot the router reads: one `KeyView` per key, for one request's model, size and time.

use std::sync::atomic::Ordering;

use tokio::time::Instant;

use super::{Health, Slot};
use crate::budget::{BudgetState, SpendNow};
use crate::keys::KeyId;
use crate::markers::OrgTag;

/// One key in a pool snapshot.
#[derive(Clone, Debug)]
pub struct KeyView {
    /// Stable id.
    pub id: KeyId,
    /// Organization, set or learned.
    pub org: Option<String>,
    /// Tag of the organization (or of the key itself while its organization is unknown).
    pub org_tag: OrgTag,
    /// Imported from a client's own login: a session from before Keymux is looked for on its
    /// organization first.
    pub imported: bool,
    /// Where it stands against its budgets in money.
    pub budget: BudgetState,
    /// When that budget resets (reserved or stopped), on the router's clock.
    pub budget_resets: Option<Instant>,
    /// Requests currently being served by this key.
    pub in_flight: u32,
    /// Priority tier (lower first).
    pub priority: u8,
    /// Share of the tighter rate-limit window left, 0 to 1 (1 when unknown).
    pub headroom: f32,
    /// A rate-limit window is used up until then: the key would answer 429.
    pub exhausted_until: Option<Instant>,
    /// Less than its `reserve_window_pct` of a window is left: kept for its pinned sessions.
    pub window_reserve: Option<crate::quota::WindowReserve>,
    /// Over its daily token budget.
    pub over_budget: bool,
    /// Allowed for the request's model, and not known to lack it.
    pub model_ok: bool,
    /// Requests this key started among those routed by load alone, recently: a count that decays with
    /// a half-life of minutes, so a key that was out for a while (or was just added) gets its fair share
    /// of new sessions instead of all of them.
    pub recent_starts: f32,
    /// Health.
    pub health: Health,
}

/// A snapshot of the pool, in the pool's stable key order.
#[derive(Clone, Debug, Default)]
pub struct PoolView {
    /// The keys.
    pub keys: Vec<KeyView>,
}

/// What a view is taken for: a request for `model` of about `tokens` tokens, at `now` on UTC day `day`.
#[derive(Clone, Copy, Debug)]
pub struct ViewFor<'a> {
    /// The model the request names.
    pub model: Option<&'a str>,
    /// Its estimated tokens.
    pub tokens: u64,
    /// The time.
    pub now: Instant,
    /// The UTC day number (token budgets are per day).
    pub day: u32,
    /// The time, Unix milliseconds (budgets in money reset at local midnights).
    pub now_unix_ms: u64,
    /// Today's and this month's spend per key, for the budgets in money.
    pub spend: &'a SpendNow,
}

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
        budget,
        budget_resets,
        in_flight: s.in_flight.load(Ordering::Acquire),
        priority: entry.priority,
        headroom: state.quota.headroom(request.now),
        exhausted_until: state.quota.exhausted_until(request.now, request.tokens),
        window_reserve: entry.reserve_window_pct.and_then(|pct| state.quota.reserve(request.now, pct)),
        over_budget: entry.daily_token_budget.is_some_and(|b| used >= b),
        model_ok,
        recent_starts: state.starts.at(request.now) as f32,
        health: live.health,
    }
}
