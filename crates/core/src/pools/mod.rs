//! Pools: the user's boundaries over keys (not to be confused with [`crate::pool`], the live state of
//! every key).
//!
//! A pool is a named set of keys ("work", "personal"); every client token is bound to one. A request
//! that comes with a token of pool `work` is only ever decided over the keys of `work`, then (only when
//! none of them can serve) over the keys of its declared fallback pools, in order. The built-in pool
//! `all` holds every key, so a user who never creates a pool sees no change.
//!
//! The boundary is safe by construction: the router is handed a snapshot that holds only the keys of one
//! pool at a time, so no rule (balancing, failover, the spread, soft affinity, rescue, session hints,
//! continuity) can reach a key outside it. A request that replays state made by a key outside its pool
//! is refused with `pool_mismatch` before anything is forwarded (see [`Reach::mismatch`]). A response
//! named by its bare provider id (no marker says which key made it) goes only to keys whose organization
//! no key outside the pool shares, and is refused when there are none ([`Reach::bare_id_keys`]).
//!
//! Pools name keys by label (or id), as the user wrote them; [`Pools::resolve`] turns that into key ids
//! whenever keys or pools change, never per request.
//!
//! Here, the pool as defined ([`PoolConfig`]) and resolved ([`Pools`]); beside it, by concern:
//! * `policies`: every other pool setting, declared once ([`PoolPolicies`]: the tier its requests may
//!   ask for, its proxy, its budget in money), and the tier a request is sent in.
//! * `proxy`: a pool's proxy URL checked, its login split off for the keychain, the proxy each key goes
//!   out through.
//! * `validate`: the check of a list of pools as a whole, each problem with its place.
//! * `reach`: what one request may reach, and the `pool_mismatch` and bare-id checks against it.

use serde::{Deserialize, Serialize};

use crate::keys::KeyId;
use crate::router::Tier;

mod policies;
mod proxy;
mod reach;
mod validate;

pub use policies::{above_standard, with_tier, PoolPolicies, PoolPoliciesChange, PRIORITY_TIER, STANDARD_TIER};
pub use proxy::{check_proxy, safe_proxy, split_proxy, take_login, ProxyLogin, PROXY_SCHEMES};
pub use reach::Reach;
pub use validate::{check_name, exists, unknown_pool, validate, Place, PoolProblem};

/// The built-in pool that holds every key (the pool a token is bound to unless the user picks one).
pub const ALL: &str = crate::tokens::ALL_POOL;
/// Most pools a user can define (each is a small list of key ids; lookups walk them).
pub const MAX_POOLS: usize = 32;
/// Most fallback pools one pool declares.
pub const MAX_FALLBACKS: usize = 4;

/// A pool as the config file lists it: `[[pools]] name = "work"`, `keys = ["work", "work-2"]`,
/// `fallback = []`, and its policies ([`PoolPolicies`], flattened: the priority tier, the proxy, a
/// budget in money).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq, ts_rs::TS)]
#[serde(deny_unknown_fields)]
pub struct PoolConfig {
    /// The pool's name (letters, digits, `-` and `_`; `all` is built in).
    pub name: String,
    /// Its keys, by label or id. A key may belong to several pools. Empty is allowed: its requests get
    /// a clear 503.
    #[serde(default)]
    pub keys: Vec<String>,
    /// Pools to use, in order, only when none of this pool's keys can serve. Empty: never.
    #[serde(default)]
    pub fallback: Vec<String>,
    /// Its policies: the tier its requests may ask for, its keys' way out, its budget in money.
    #[serde(flatten, deserialize_with = "crate::flat::fields")]
    pub policies: PoolPolicies,
    /// The proxy's user and password are kept in the keychain (account `proxy:<pool>`), set with the
    /// proxy URL through the CLI, the API or the dashboard (`http://user:password@host:port`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub proxy_login: bool,
}

/// One pool with its keys resolved to ids.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Resolved {
    name: String,
    keys: Vec<KeyId>,
    /// Indexes of the fallback pools, in order (`all` is not an index: see `fallback_all`).
    fallback: Vec<usize>,
    /// Whether `all` is among the fallbacks, and where.
    fallback_all: Option<usize>,
    /// Keys that were in this pool and were taken out while Keymux ran: state they made still follows
    /// the `lost_org` rules here instead of being refused as another pool's (bounded by the pool's
    /// `MAX_KEYS`: a key leaves this list when it comes back).
    former: Vec<KeyId>,
}

/// The pools of a running gateway, resolved to key ids. Replaced whole when a pool or a key changes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pools {
    defs: Vec<PoolConfig>,
    resolved: Vec<Resolved>,
    /// Every key, for `all` (in the pool's order).
    every: Vec<KeyId>,
}

impl Pools {
    /// Resolves `defs` against the keys there are (`(id, label)`). A name that matches no key is left
    /// out (the config was checked when it was loaded; a key removed since leaves its pools).
    pub fn resolve(defs: Vec<PoolConfig>, keys: &[(KeyId, String)], previous: &Pools) -> Self {
        let find = |name: &str| {
            keys.iter().find(|(id, label)| id.as_str() == name || label.eq_ignore_ascii_case(name)).map(|(id, _)| id)
        };
        let index = |name: &str| defs.iter().position(|p| p.name.eq_ignore_ascii_case(name));
        let resolved = defs
            .iter()
            .map(|def| {
                let mut ids: Vec<KeyId> = def.keys.iter().filter_map(|k| find(k)).cloned().collect();
                ids.dedup();
                let mut former = previous.former_of(&def.name, &ids);
                former.retain(|k| !ids.contains(k));
                Resolved {
                    name: def.name.clone(),
                    fallback: def.fallback.iter().filter_map(|f| index(f)).collect(),
                    fallback_all: def.fallback.iter().position(|f| f.eq_ignore_ascii_case(ALL)),
                    keys: ids,
                    former,
                }
            })
            .collect();
        Self { defs, resolved, every: keys.iter().map(|(id, _)| id.clone()).collect() }
    }

    /// What pool `name` held before, and what it no longer holds (`former` for the new resolution).
    fn former_of(&self, name: &str, now: &[KeyId]) -> Vec<KeyId> {
        let Some(before) = self.find(name) else { return Vec::new() };
        let mut former = before.former.clone();
        former.extend(before.keys.iter().filter(|k| !now.contains(k)).cloned());
        former.truncate(crate::pool::MAX_KEYS);
        former
    }

    fn find(&self, name: &str) -> Option<&Resolved> {
        self.resolved.iter().find(|p| p.name.eq_ignore_ascii_case(name))
    }

    /// The pools as defined (for the config file, the API and the CLI).
    pub fn defs(&self) -> &[PoolConfig] {
        &self.defs
    }

    /// The user's pool `name`, as defined.
    fn def(&self, name: &str) -> Option<&PoolConfig> {
        self.defs.iter().find(|p| p.name.eq_ignore_ascii_case(name))
    }

    /// The user's pool `name`'s budget in money, if it has one, with its keys.
    pub fn money_of(&self, name: &str) -> Option<(crate::budget::MoneyBudget, &[KeyId])> {
        let def = self.def(name)?;
        Some((def.policies.money, self.keys_of(name))).filter(|(money, _)| money.is_set())
    }

    /// The key ids of pool `name` (every key for `all`; none for a pool that does not exist).
    pub fn keys_of(&self, name: &str) -> &[KeyId] {
        if name.eq_ignore_ascii_case(ALL) {
            return &self.every;
        }
        self.find(name).map_or(&[], |p| &p.keys)
    }

    /// The user's pools that hold `key`, in their order.
    pub fn pools_of(&self, key: &KeyId) -> Vec<String> {
        self.resolved.iter().filter(|p| p.keys.contains(key)).map(|p| p.name.clone()).collect()
    }

    /// What a request with a token of pool `name` may reach. A pool that does not exist reaches no key
    /// (its requests get the clear 503), never every key.
    pub fn reach<'a>(&'a self, name: &'a str) -> Reach<'a> {
        if name.eq_ignore_ascii_case(ALL) {
            return Reach::All;
        }
        let Some(pool) = self.find(name) else {
            return Reach::Pool { tiers: vec![Tier { pool: name, keys: &[] }], former: &[], pools: self };
        };
        let mut tiers = vec![Tier { pool: &pool.name, keys: &pool.keys }];
        for (at, &i) in pool.fallback.iter().enumerate() {
            if pool.fallback_all == Some(at) {
                tiers.push(Tier { pool: ALL, keys: &self.every });
            }
            tiers.push(Tier { pool: &self.resolved[i].name, keys: &self.resolved[i].keys });
        }
        if pool.fallback_all.is_some_and(|at| at >= pool.fallback.len()) {
            tiers.push(Tier { pool: ALL, keys: &self.every });
        }
        Reach::Pool { tiers, former: &pool.former, pools: self }
    }
}

#[cfg(test)]
mod tests;
