//! Budgets in money, per key: what the user set (`daily_budget_usd`, `monthly_budget_usd`,
//! `reserve_at`, `on_limit`) and where a key stands against it now. Pure: the spend so far and the
//! local periods come in, a [`BudgetState`] goes out.
//!
//! * Past `reserve_at` percent of either budget the key is **reserved**: it takes no new sessions,
//!   and keeps serving the sessions already pinned to it (encrypted content, a response id, a bound
//!   WebSocket), so nobody's conversation breaks.
//! * At 100 % it stays reserved with `on_limit = "reserve"` (the default), or **stops** with
//!   `on_limit = "stop"`: even pinned turns are refused with a 429 that names the budget and when it
//!   resets. The user chose money over continuity.
//! * Without `reserve_at`, a key is reserved only at 100 %. Periods are the user's local day and
//!   month; everything opens again by itself when one ends.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::change::given;
use crate::clock::LocalPeriods;
use crate::spend::{Spent, Usd};

/// What a key does once a budget is used up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
#[serde(rename_all = "lowercase")]
pub enum OnLimit {
    /// Takes no new sessions; its pinned sessions go on.
    #[default]
    Reserve,
    /// Refuses everything until the budget resets.
    Stop,
}

impl OnLimit {
    /// Whether this is the default (left out of the config).
    pub fn is_default(&self) -> bool {
        *self == Self::Reserve
    }
}

/// A budget in money, as the user set it on a key or a pool: flattened into both (see `key_settings`),
/// so these are the names in the config file, the API and the CLI's flags.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
pub struct MoneyBudget {
    /// US dollars per local day.
    #[serde(default, rename = "daily_budget_usd")]
    #[ts(type = "number | null")]
    pub daily: Option<Usd>,
    /// US dollars per local month.
    #[serde(default, rename = "monthly_budget_usd")]
    #[ts(type = "number | null")]
    pub monthly: Option<Usd>,
    /// Percent of a budget (1 to 100) past which no new sessions start (absent: 100).
    #[serde(default)]
    pub reserve_at: Option<u8>,
    /// At 100 %: `reserve` (sessions already on it go on) or `stop` (refuse everything).
    #[serde(default)]
    pub on_limit: OnLimit,
}

/// A change to a budget in money (see `change`): each field given replaces the setting, `null` removes
/// a budget or the reserve threshold, fields left out stay. Flattened into the changes to a key and a
/// pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
#[serde(default, deny_unknown_fields)]
#[ts(optional_fields)]
pub struct MoneyBudgetChange {
    /// A new budget per local day, or none.
    #[serde(rename = "daily_budget_usd", deserialize_with = "given", skip_serializing_if = "Option::is_none")]
    #[ts(as = "Option<Option<f64>>")]
    pub daily: Option<Option<Usd>>,
    /// A new budget per local month, or none.
    #[serde(rename = "monthly_budget_usd", deserialize_with = "given", skip_serializing_if = "Option::is_none")]
    #[ts(as = "Option<Option<f64>>")]
    pub monthly: Option<Option<Usd>>,
    /// A new reserve threshold, or none (100).
    #[serde(deserialize_with = "given", skip_serializing_if = "Option::is_none")]
    pub reserve_at: Option<Option<u8>>,
    /// What happens at 100 % from now on.
    #[serde(deserialize_with = "given", skip_serializing_if = "Option::is_none")]
    pub on_limit: Option<OnLimit>,
}

impl MoneyBudgetChange {
    /// Applies the change to `money` (the values' checks are `MoneyBudget::validate`'s).
    pub fn apply(&self, money: &mut MoneyBudget) {
        let Self { daily, monthly, reserve_at, on_limit } = *self;
        money.daily = daily.unwrap_or(money.daily);
        money.monthly = monthly.unwrap_or(money.monthly);
        money.reserve_at = reserve_at.unwrap_or(money.reserve_at);
        money.on_limit = on_limit.unwrap_or(money.on_limit);
    }

    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// Which budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
#[serde(rename_all = "lowercase")]
pub enum Period {
    /// The local day's.
    Day,
    /// The local month's.
    Month,
}

impl Period {
    /// `daily`, `monthly`: as people and the config name the budget.
    pub fn adjective(self) -> &'static str {
        match self {
            Self::Day => "daily",
            Self::Month => "monthly",
        }
    }
}

/// Where a key stands against its budgets now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum BudgetState {
    /// Under every threshold (or no budget).
    #[default]
    Open,
    /// Past `reserve_at` (or at 100 % with `on_limit = "reserve"`): pinned sessions only.
    Reserved {
        /// The budget that reserves it.
        period: Period,
        /// Its amount.
        #[ts(type = "number")]
        limit: Usd,
        /// How much of it is spent, in thousandths (1000: all of it).
        #[ts(type = "number")]
        used_permille: u32,
        /// When that budget resets, Unix milliseconds.
        #[ts(type = "number")]
        resets_unix_ms: u64,
    },
    /// At 100 % with `on_limit = "stop"`: nothing until it resets.
    Stopped {
        /// The budget that stopped it.
        period: Period,
        /// Its amount.
        #[ts(type = "number")]
        limit: Usd,
        /// When it resets, Unix milliseconds.
        #[ts(type = "number")]
        resets_unix_ms: u64,
    },
}

impl BudgetState {
    /// Whether this state holds a key back more than `other`: stopped, then reserved, then open.
    pub fn worse_than(&self, other: &BudgetState) -> bool {
        self.rank() > other.rank()
    }

    /// How bad it is, to pick the worst of two budgets: open, reserved, stopped.
    fn rank(&self) -> u8 {
        match self {
            Self::Open => 0,
            Self::Reserved { .. } => 1,
            Self::Stopped { .. } => 2,
        }
    }
}

impl MoneyBudget {
    /// Its fields as serde spells them (for a group that flattens it: `flat::Fields`).
    pub const FIELDS: [&'static str; 4] = ["daily_budget_usd", "monthly_budget_usd", "reserve_at", "on_limit"];

    /// Checks the reserve threshold: a percent from 1 to 100.
    pub fn validate(&self) -> Result<(), String> {
        match self.reserve_at {
            Some(p @ (0 | 101..)) => Err(format!(
                "reserve_at = {p} is not a percent from 1 to 100: past it no new sessions start (80 keeps the \
                 last fifth of a budget for the sessions already going)"
            )),
            _ => Ok(()),
        }
    }

    /// Whether any budget in money is set.
    pub fn is_set(&self) -> bool {
        self.daily.is_some() || self.monthly.is_some()
    }

    /// Where the key stands, having spent `day` today and `month` this month (the local periods of
    /// `periods`); the worse of the two budgets.
    pub fn state(&self, day: Usd, month: Usd, periods: &LocalPeriods) -> BudgetState {
        let daily = self.daily.map(|limit| self.against(Period::Day, limit, day, periods.day_end_unix_ms));
        let monthly = self.monthly.map(|limit| self.against(Period::Month, limit, month, periods.month_end_unix_ms));
        [daily, monthly].into_iter().flatten().max_by_key(BudgetState::rank).unwrap_or_default()
    }

    /// When a budget runs out at the pace of the current hour (`pace.0` spent since `pace.1`, the
    /// hour's start), if before its period ends: now when one is spent already, `None` when neither
    /// runs out this period at this pace (or nothing was spent this hour).
    pub fn runs_out(
        &self,
        day: Usd,
        month: Usd,
        pace: (Usd, u64),
        now_unix_ms: u64,
        periods: &LocalPeriods,
    ) -> Option<u64> {
        let (this_hour, hour_start) = pace;
        // At least a minute of the hour, so one early request does not read as a runaway pace.
        let elapsed = u128::from(now_unix_ms.saturating_sub(hour_start).max(60_000));
        let at = |limit: Usd, spent: Usd, end: u64| -> Option<u64> {
            let left = u128::from(limit.nanos().checked_sub(spent.nanos()).filter(|l| *l > 0)?);
            let rate = u128::from(this_hour.nanos());
            if rate == 0 {
                return None;
            }
            let when = u128::from(now_unix_ms) + left * elapsed / rate;
            u64::try_from(when).ok().filter(|w| *w < end)
        };
        let spent_out = |limit: Option<Usd>, spent: Usd| limit.is_some_and(|l| spent >= l);
        if spent_out(self.daily, day) || spent_out(self.monthly, month) {
            return Some(now_unix_ms);
        }
        let daily = self.daily.and_then(|l| at(l, day, periods.day_end_unix_ms));
        let monthly = self.monthly.and_then(|l| at(l, month, periods.month_end_unix_ms));
        daily.into_iter().chain(monthly).min()
    }

    fn against(&self, period: Period, limit: Usd, spent: Usd, resets_unix_ms: u64) -> BudgetState {
        let used_permille = permille(spent, limit);
        let reserve_at = u32::from(self.reserve_at.unwrap_or(100).clamp(1, 100)) * 10;
        match (used_permille >= 1000, self.on_limit) {
            (true, OnLimit::Stop) => BudgetState::Stopped { period, limit, resets_unix_ms },
            _ if used_permille >= reserve_at => BudgetState::Reserved { period, limit, used_permille, resets_unix_ms },
            _ => BudgetState::Open,
        }
    }
}

/// Today's and this month's spend per key (by fingerprint), with the local periods they belong to:
/// what the budgets are checked against on the request path, and what the API shows per key and
/// pool. One entry per key that spent this month.
#[derive(Clone, Debug, Default)]
pub struct SpendNow {
    /// The local day and month the sums belong to.
    pub periods: LocalPeriods,
    /// Per fingerprint: (today, this month).
    pub by_key: HashMap<String, (Spent, Spent)>,
}

impl SpendNow {
    /// Where a key (by its fingerprint) stands against `money`.
    pub fn state_of(&self, fingerprint: &str, money: &MoneyBudget) -> BudgetState {
        if !money.is_set() {
            return BudgetState::Open;
        }
        let (day, month) = self.of(std::iter::once(fingerprint));
        money.state(day.usd, month.usd, &self.periods)
    }

    /// What the keys of these fingerprints spent together: (today, this month).
    pub fn of<'a>(&self, fingerprints: impl IntoIterator<Item = &'a str>) -> (Spent, Spent) {
        let (mut day, mut month) = (Spent::default(), Spent::default());
        for (d, m) in fingerprints.into_iter().filter_map(|fp| self.by_key.get(fp)) {
            day.add(*d);
            month.add(*m);
        }
        (day, month)
    }

    /// Counts what `fingerprint` spent in the hour that starts at `hour_start_unix_ms` (an hour
    /// counts with the period it starts in, as the hourly metrics do).
    pub fn add(&mut self, hour_start_unix_ms: u64, fingerprint: &str, spent: Spent) {
        let periods = &self.periods;
        if spent.is_empty() || hour_start_unix_ms < periods.month_start_unix_ms {
            return;
        }
        let sums = self.by_key.entry(fingerprint.to_owned()).or_default();
        sums.1.add(spent);
        if hour_start_unix_ms >= periods.day_start_unix_ms {
            sums.0.add(spent);
        }
    }
}

/// `spent` of `limit` in thousandths, rounded down (a budget of $0 is used up at once).
fn permille(spent: Usd, limit: Usd) -> u32 {
    if limit.nanos() == 0 {
        return 1000;
    }
    let ratio = u128::from(spent.nanos()) * 1000 / u128::from(limit.nanos());
    u32::try_from(ratio).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY_END: u64 = 86_400_000;
    const MONTH_END: u64 = 30 * 86_400_000;

    fn periods() -> LocalPeriods {
        LocalPeriods {
            zone: "UTC".into(),
            day_start_unix_ms: 0,
            month_start_unix_ms: 0,
            day_end_unix_ms: DAY_END,
            month_end_unix_ms: MONTH_END,
        }
    }

    fn usd(cents: u64) -> Usd {
        Usd::from_nanos(cents * 10_000_000)
    }

    #[test]
    fn a_key_is_reserved_past_reserve_at_and_stops_at_the_limit_only_when_told() {
        let five = MoneyBudget { daily: Some(usd(500)), reserve_at: Some(80), ..MoneyBudget::default() };
        assert_eq!(five.state(usd(399), usd(399), &periods()), BudgetState::Open);
        let reserved =
            BudgetState::Reserved { period: Period::Day, limit: usd(500), used_permille: 800, resets_unix_ms: DAY_END };
        assert_eq!(five.state(usd(400), usd(400), &periods()), reserved, "80 % of $5 is $4");
        let full = five.state(usd(700), usd(700), &periods());
        assert!(matches!(full, BudgetState::Reserved { used_permille: 1400, .. }), "reserve: pinned go on: {full:?}");
        let stop = MoneyBudget { on_limit: OnLimit::Stop, ..five };
        assert!(matches!(stop.state(usd(499), usd(0), &periods()), BudgetState::Reserved { .. }));
        let stopped = BudgetState::Stopped { period: Period::Day, limit: usd(500), resets_unix_ms: DAY_END };
        assert_eq!(stop.state(usd(500), usd(0), &periods()), stopped);
    }

    #[test]
    fn without_reserve_at_only_the_limit_reserves_and_the_worse_budget_wins() {
        let both = MoneyBudget { daily: Some(usd(500)), monthly: Some(usd(2000)), ..MoneyBudget::default() };
        assert_eq!(both.state(usd(499), usd(1999), &periods()), BudgetState::Open);
        let month = both.state(usd(10), usd(2000), &periods());
        assert!(matches!(month, BudgetState::Reserved { period: Period::Month, resets_unix_ms: MONTH_END, .. }));
        let stop = MoneyBudget { on_limit: OnLimit::Stop, ..both };
        // Stopped by the month beats reserved by... nothing: the day is still open; then both.
        assert!(matches!(stop.state(usd(600), usd(100), &periods()), BudgetState::Stopped { period: Period::Day, .. }));
        assert!(matches!(stop.state(usd(600), usd(2500), &periods()), BudgetState::Stopped { .. }));
        assert_eq!(MoneyBudget::default().state(usd(9999), usd(9999), &periods()), BudgetState::Open, "no budget");
    }

    #[test]
    fn a_budget_runs_out_at_the_pace_of_the_current_hour_if_before_its_period_ends() {
        let five = MoneyBudget { daily: Some(usd(500)), ..MoneyBudget::default() };
        // $1 spent in the first 30 minutes of the hour, $3 today: $2 left at $2 an hour, in an hour.
        let (now, hour) = (10 * 3_600_000 + 1_800_000, 10 * 3_600_000);
        assert_eq!(five.runs_out(usd(300), usd(300), (usd(100), hour), now, &periods()), Some(now + 3_600_000));
        assert_eq!(five.runs_out(usd(300), usd(300), (Usd::ZERO, hour), now, &periods()), None, "nothing this hour");
        assert_eq!(five.runs_out(usd(500), usd(500), (Usd::ZERO, hour), now, &periods()), Some(now), "spent already");
        // $0.10 in the half hour: $2 left lasts 10 hours, past the day's end at 24:00.
        let late = (20 * 3_600_000 + 1_800_000, 20 * 3_600_000);
        assert_eq!(five.runs_out(usd(300), usd(300), (usd(10), late.1), late.0, &periods()), None);
        let month = MoneyBudget { monthly: Some(usd(400)), ..five };
        assert_eq!(
            month.runs_out(usd(300), usd(300), (usd(100), hour), now, &periods()),
            Some(now + 1_800_000),
            "the sooner"
        );
        assert_eq!(MoneyBudget::default().runs_out(usd(1), usd(1), (usd(1), hour), now, &periods()), None);
    }

    #[test]
    fn a_change_to_a_budget_sets_clears_and_refuses_in_words() {
        let fields = crate::change::names(&[serde_json::to_value(MoneyBudget::default()).expect("json")]);
        let read = |body| crate::change::read::<MoneyBudgetChange>(body, &fields);
        let e = read(serde_json::json!({ "on_limit": "never" })).expect_err("not a choice");
        assert!(e.starts_with("on_limit = \"never\"") && e.contains("`reserve`"), "{e}");
        let e = read(serde_json::json!({ "daily_budget_usd": -1 })).expect_err("negative");
        assert!(e.contains("zero or more"), "{e}");
        let mut money = MoneyBudget { daily: Some(usd(500)), ..MoneyBudget::default() };
        read(serde_json::json!({ "daily_budget_usd": null, "reserve_at": 80 })).expect("a change").apply(&mut money);
        assert_eq!(money, MoneyBudget { reserve_at: Some(80), ..MoneyBudget::default() }, "cleared and set");
    }

    #[test]
    fn a_zero_budget_is_used_up_and_permille_is_exact_for_large_amounts() {
        let zero = MoneyBudget { daily: Some(Usd::ZERO), on_limit: OnLimit::Stop, ..MoneyBudget::default() };
        assert!(matches!(zero.state(Usd::ZERO, Usd::ZERO, &periods()), BudgetState::Stopped { .. }));
        assert_eq!(permille(Usd::from_nanos(u64::MAX), usd(1)), u32::MAX);
        assert_eq!(permille(usd(1), usd(3)), 333);
    }
}
