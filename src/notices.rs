//! What has been told, so that each change is told once: a key's health state, a plan that ran out
//! and came back, a key's or a pool's budget state, and the last problem of the config file. The
//! gateway feeds it what it sees and publishes what it says is news; nothing here publishes.
//!
//! Bounds: one entry per key (the pool's `MAX_KEYS`) in the health and plan tables, one per key and
//! pool with a budget in the budget table (entries of keys and pools that left are dropped at each
//! reading), one message for the config file.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};

use crate::budget::BudgetState;
use crate::events::{BudgetOf, KeyChange};
use crate::keys::KeyId;
use crate::pool::{HealthState, KeyStatus};

/// What has been told.
#[derive(Default)]
pub struct Notices {
    /// The health state last told per key.
    health: Mutex<HashMap<KeyId, HealthState>>,
    /// The plans last told used up.
    used_up: Mutex<HashSet<KeyId>>,
    /// The budget state last told per key and per pool.
    budgets: Mutex<HashMap<BudgetOf, BudgetState>>,
    /// The last config-file problem told.
    refused: Mutex<Option<String>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The health state a change puts a key in, for those that have one.
fn state_after(change: KeyChange) -> Option<HealthState> {
    match change {
        KeyChange::CoolingStarted { .. } => Some(HealthState::Cooling),
        KeyChange::QuotaExhausted { .. } => Some(HealthState::QuotaExhausted),
        KeyChange::Rejected => Some(HealthState::Rejected),
        KeyChange::Unreachable { .. } => Some(HealthState::Unreachable),
        KeyChange::Disabled => Some(HealthState::Disabled),
        KeyChange::CoolingEnded | KeyChange::Recovered | KeyChange::Enabled | KeyChange::Added => {
            Some(HealthState::Ready)
        }
        KeyChange::Removed | KeyChange::Updated | KeyChange::PlanUsedUp { .. } | KeyChange::PlanBack => None,
    }
}

impl Notices {
    /// Whether `change` of `key` is news, remembering it: a change of health state is told once (a
    /// cooldown that grew is news again); a key removed is forgotten; changes without a state always
    /// are.
    pub fn key_change(&self, key: &KeyId, change: KeyChange) -> bool {
        let mut told = lock(&self.health);
        match (state_after(change), change) {
            (_, KeyChange::Removed) => {
                told.remove(key);
                true
            }
            (Some(state), _)
                if told.get(key) == Some(&state) && !matches!(change, KeyChange::CoolingStarted { .. }) =>
            {
                false
            }
            (Some(state), _) => {
                told.insert(key.clone(), state);
                true
            }
            (None, _) => true,
        }
    }

    /// The keys told cooling or out of quota that time alone made ready again (`statuses` now), each
    /// with the change that says so.
    pub fn back_by_time(&self, statuses: &[KeyStatus]) -> Vec<(KeyId, KeyChange)> {
        let told = lock(&self.health);
        statuses
            .iter()
            .filter(|k| k.health == HealthState::Ready)
            .filter_map(|k| match told.get(&k.id)? {
                HealthState::Cooling => Some((k.id.clone(), KeyChange::CoolingEnded)),
                HealthState::QuotaExhausted => Some((k.id.clone(), KeyChange::Recovered)),
                _ => None,
            })
            .collect()
    }

    /// The plans that ran out (by a 429, or a window their answer reported used up) or came back
    /// since last told, from the keys' `statuses` at `now_unix_ms`: each once.
    pub fn plans(&self, statuses: &[KeyStatus], now_unix_ms: u64) -> Vec<(KeyId, KeyChange)> {
        let plans: Vec<(&KeyId, Option<u64>)> = statuses
            .iter()
            .filter(|k| k.plan.is_some())
            .map(|k| (&k.id, k.plan_used_up_until_unix_ms(now_unix_ms)))
            .collect();
        let mut told = lock(&self.used_up);
        told.retain(|id| plans.iter().any(|(plan, _)| *plan == id));
        plans
            .into_iter()
            .filter_map(|(id, until)| match until {
                Some(until_unix_ms) if told.insert(id.clone()) => {
                    Some((id.clone(), KeyChange::PlanUsedUp { until_unix_ms }))
                }
                None if told.remove(id) => Some((id.clone(), KeyChange::PlanBack)),
                _ => None,
            })
            .collect()
    }

    /// Of the budget states `now` (of every key and pool with a budget), those that are news after
    /// what was told ([`budget_news`]), remembering them; entries of keys and pools not in `now` go.
    pub fn budgets<T>(&self, now: Vec<(BudgetOf, T, BudgetState)>) -> Vec<(BudgetOf, T, BudgetState)> {
        let mut told = lock(&self.budgets);
        told.retain(|of, _| now.iter().any(|(o, _, _)| o == of));
        now.into_iter().filter(|(of, _, state)| budget_news(told.insert(of.clone(), *state), *state)).collect()
    }

    /// Whether a config-file problem is new (and so worth saying), remembering it.
    pub fn config_refused(&self, message: &str) -> bool {
        let mut last = lock(&self.refused);
        let new = last.as_deref() != Some(message);
        *last = Some(message.to_owned());
        new
    }

    /// A valid config again: the next problem is news.
    pub fn config_valid(&self) {
        *lock(&self.refused) = None;
    }
}

/// Whether a budget state is news after `before` (`None`: not seen yet): a change of state or of the
/// budget that causes it; not the same state again, and not a key first seen open.
fn budget_news(before: Option<BudgetState>, now: BudgetState) -> bool {
    let kind = |s: &BudgetState| match s {
        BudgetState::Open => (0, None),
        BudgetState::Reserved { period, resets_unix_ms, .. } => (1, Some((*period, *resets_unix_ms))),
        BudgetState::Stopped { period, resets_unix_ms, .. } => (2, Some((*period, *resets_unix_ms))),
    };
    match before {
        None => now != BudgetState::Open,
        Some(before) => kind(&before) != kind(&now),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_health_state_is_told_once_and_a_grown_cooldown_again() {
        let notices = Notices::default();
        let key = KeyId::new("k1");
        assert!(notices.key_change(&key, KeyChange::Rejected));
        assert!(!notices.key_change(&key, KeyChange::Rejected));
        assert!(notices.key_change(&key, KeyChange::CoolingStarted { until_unix_ms: 1 }));
        assert!(notices.key_change(&key, KeyChange::CoolingStarted { until_unix_ms: 2 }), "a cooldown that grew");
        assert!(notices.key_change(&key, KeyChange::Updated), "no state: always news");
        assert!(notices.key_change(&key, KeyChange::Removed));
        assert!(notices.key_change(&key, KeyChange::Rejected), "a removed key is forgotten");
    }

    #[test]
    fn a_config_problem_is_said_once_until_the_config_is_valid_again() {
        let notices = Notices::default();
        assert!(notices.config_refused("bad"));
        assert!(!notices.config_refused("bad"));
        assert!(notices.config_refused("worse"));
        notices.config_valid();
        assert!(notices.config_refused("worse"));
    }

    #[test]
    fn a_budget_state_is_news_when_it_changes_and_a_gone_key_is_forgotten() {
        use crate::budget::Period;
        let notices = Notices::default();
        let of = |k: &str| BudgetOf::Key { key: KeyId::new(k) };
        let stopped = BudgetState::Stopped { period: Period::Day, limit: crate::spend::Usd::ZERO, resets_unix_ms: 9 };
        let news = |now: Vec<(BudgetOf, (), BudgetState)>| notices.budgets(now).len();
        assert_eq!(news(vec![(of("a"), (), BudgetState::Open)]), 0, "first seen open is no news");
        assert_eq!(news(vec![(of("a"), (), stopped)]), 1);
        assert_eq!(news(vec![(of("a"), (), stopped)]), 0);
        assert_eq!(news(vec![]), 0);
        assert_eq!(news(vec![(of("a"), (), stopped)]), 1, "a key that left and came back is news again");
    }
}
