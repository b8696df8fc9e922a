//! What the router reads of the pool: a snapshot of every key for one request (`KeyView`, `PoolView`)
//! and key health with its pure transitions (`health`). The live pool that these are taken from is the
//! gateway's (`keymux::pool`).

use std::time::Instant;

use crate::budget::{BudgetState, SpendNow};
use crate::keys::KeyId;
use crate::markers::OrgTag;

mod health;

pub use health::{
    health_change, next_health, switched, unreachable_backoff, Health, HealthChange, HealthState, OutcomeKind,
    MAX_UNREACHABLE_BACKOFF,
};

/// Most keys a pool may hold; keeps every per-decision list small.
pub const MAX_KEYS: usize = 64;

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
    /// A subscription whose use costs nothing more (`Provider::is_plan`): new sessions go to it first.
    pub plan: bool,
    /// Its provider can serve the request the view is taken for (`Provider::serves`).
    pub serves: bool,
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
    /// Less than the share of a window it keeps is left: kept for its pinned sessions.
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
    /// The request as its keys' providers judge whether they serve it.
    pub ask: crate::provider::Ask,
}
