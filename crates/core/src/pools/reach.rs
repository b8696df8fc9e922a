//! What one request may reach: every key, or one pool's keys then its fallbacks'; and the checks of
//! state a request replays against that boundary.

use super::{Pools, ALL};
use crate::digest::OrgTag;
use crate::keys::KeyId;
use crate::router::Tier;

/// What one request may reach.
#[derive(Debug)]
pub enum Reach<'a> {
    /// Every key (the built-in pool `all`).
    All,
    /// The keys of one pool, then of its fallbacks, in order.
    Pool {
        /// The pool first, then its fallbacks.
        tiers: Vec<Tier<'a>>,
        /// Keys taken out of the pool while Keymux ran.
        former: &'a [KeyId],
        /// Every pool, to name the one a foreign key belongs to.
        pools: &'a Pools,
    },
}

impl Reach<'_> {
    /// The first key among `pinned` (keys named by the request's markers) that exists (`known`) but is
    /// outside this request's pool and its fallbacks, with the pool it belongs to. State made by a key
    /// that was taken out of the pool, or that no longer exists, is not a mismatch: the `lost_org`
    /// rules handle it inside the pool.
    pub fn mismatch<'k>(
        &self,
        pinned: impl IntoIterator<Item = &'k KeyId>,
        known: impl Fn(&KeyId) -> bool,
    ) -> Option<(KeyId, String)> {
        let Self::Pool { tiers, former, pools } = self else { return None };
        let inside = |key: &KeyId| tiers.iter().any(|t| t.keys.contains(key)) || former.contains(key);
        let key = pinned.into_iter().find(|k| !inside(k) && known(k))?;
        let owner = pools.pools_of(key).into_iter().next().unwrap_or_else(|| ALL.to_owned());
        Some((key.clone(), owner))
    }

    /// The keys that may take a request naming a response by its bare provider id (without Keymux's
    /// marker, so nothing says which key or pool made it). A key reads every stored response of its
    /// organization, so a key whose organization a key outside this reach shares could read a response
    /// made through another pool: only keys whose organization is theirs alone may take it. A key whose
    /// organization is not known yet counts as shared. `every` is each key with its organization.
    ///
    /// `Ok(None)` for `all` (no boundary); `Ok(Some(keys))` otherwise; `Err(owner)` when no key is
    /// left, naming a pool outside that shares an organization.
    pub fn bare_id_keys(&self, every: &[(KeyId, Option<OrgTag>)]) -> Result<Option<Vec<KeyId>>, String> {
        let Self::Pool { tiers, .. } = self else { return Ok(None) };
        let (mut keys, mut sharer) = (Vec::new(), None);
        for (key, _) in every.iter().filter(|(k, _)| tiers.iter().any(|t| t.keys.contains(k))) {
            match self.shared_outside(every, key) {
                None => keys.push(key.clone()),
                Some(pool) => {
                    sharer.get_or_insert(pool);
                }
            }
        }
        if keys.is_empty() {
            return Err(sharer.unwrap_or_else(|| ALL.to_owned()));
        }
        Ok(Some(keys))
    }

    /// The pool outside this reach holding a key of `key`'s organization (`all` for a key in no pool
    /// or when an organization is not known yet); `None` when that organization is this reach's alone.
    pub fn shared_outside(&self, every: &[(KeyId, Option<OrgTag>)], key: &KeyId) -> Option<String> {
        let Self::Pool { tiers, pools, .. } = self else { return None };
        let org = every.iter().find(|(k, _)| k == key).and_then(|(_, o)| *o);
        let inside = |k: &KeyId| tiers.iter().any(|t| t.keys.contains(k));
        let (other, _) = every.iter().find(|(k, o)| !inside(k) && (org.is_none() || o.is_none() || *o == org))?;
        Some(pools.pools_of(other).into_iter().next().unwrap_or_else(|| ALL.to_owned()))
    }

    /// The tiers to decide over: none for `all` (the whole pool), else the pool and its fallbacks.
    pub fn tiers(&self) -> &[Tier<'_>] {
        match self {
            Self::All => &[],
            Self::Pool { tiers, .. } => tiers,
        }
    }

    /// The name of the pool the request is bound to.
    pub fn pool(&self) -> &str {
        match self {
            Self::All => ALL,
            Self::Pool { tiers, .. } => tiers.first().map_or(ALL, |t| t.pool),
        }
    }
}
