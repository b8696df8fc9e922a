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

use serde::{Deserialize, Serialize};

use crate::digest::OrgTag;
use crate::keys::{validate_label, KeyId};
use crate::router::Tier;

/// The built-in pool that holds every key.
pub const ALL: &str = "all";
/// Most pools a user can define (each is a small list of key ids; lookups walk them).
pub const MAX_POOLS: usize = 32;
/// Most fallback pools one pool declares.
pub const MAX_FALLBACKS: usize = 4;

/// A pool as the config file lists it: `[[pools]] name = "work"`, `keys = ["work", "work-2"]`,
/// `fallback = []`, and its policies (`allow_priority`, `proxy`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, ts_rs::TS)]
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
    /// Its keys' budget in money, together (see `budget`): what its tokens' requests may spend.
    #[serde(flatten)]
    pub money: crate::budget::MoneyBudget,
    /// Whether its tokens' requests may ask for a service tier that bills above the standard one
    /// (`service_tier` `priority` or `fast`, Codex's Fast mode, and `ultrafast`: see
    /// [`above_standard`]). `false`: such a request is sent with `service_tier: "default"`, and its
    /// decision says so. Default `true`.
    #[serde(default = "allowed")]
    pub allow_priority: bool,
    /// The HTTP proxy every upstream request of its keys goes through (`http://host:port` or
    /// `https://…`; SOCKS is not supported), probes and WebSockets included; never sent direct when it
    /// cannot be reached. Never with a user or password (see [`check_proxy`]): those are kept in the
    /// keychain, and `proxy_login` says so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<String>,
    /// The proxy's user and password are kept in the keychain (account `proxy:<pool>`), set with the
    /// proxy URL through the CLI, the API or the dashboard (`http://user:password@host:port`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub proxy_login: bool,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            name: String::new(),
            keys: Vec::new(),
            fallback: Vec::new(),
            money: crate::budget::MoneyBudget::default(),
            allow_priority: true,
            proxy: None,
            proxy_login: false,
        }
    }
}

fn allowed() -> bool {
    true
}

/// Whether a request's `service_tier` bills above the standard tier, so a pool with
/// `allow_priority = false` sends it as `default` instead: `priority` and `fast` (the same tier, Codex's
/// Fast mode) and `ultrafast`, in any case. `auto`, `default`, `flex` and tiers the price table does
/// not know (`scale`) are left as they are.
pub fn above_standard(service_tier: &str) -> bool {
    use crate::spend::ServiceTier;
    matches!(ServiceTier::from_response(Some(service_tier)), ServiceTier::Priority | ServiceTier::Ultrafast)
}

/// The tier a request a pool does not allow its tier is sent with.
pub const STANDARD_TIER: &str = "default";

/// `body` (a JSON object: a request or a `response.create` frame) with its top-level `service_tier`
/// set to [`STANDARD_TIER`], the other fields as they were, in their order. `None` when it cannot be
/// read as a JSON object (it was read once already, so only on a body changed since).
pub fn standard_tier(body: &[u8]) -> Option<Vec<u8>> {
    let mut object: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(body).ok()?;
    object.insert("service_tier".to_owned(), serde_json::Value::from(STANDARD_TIER));
    serde_json::to_vec(&object).ok()
}

/// The proxy schemes Keymux speaks.
pub const PROXY_SCHEMES: [&str; 4] = ["http", "https", "socks5", "socks5h"];

/// Checks a pool's `proxy`: an `http`, `https`, `socks5` (names resolved by Keymux) or `socks5h`
/// (names resolved by the proxy) URL with a host and a port (or the scheme's default), and nothing else: no user or password (Keymux keeps no proxy credentials in the
/// config file, where they would be readable), no path, query or fragment. Returns the URL as it is
/// kept (no trailing `/`).
pub fn check_proxy(url: &str) -> Result<String, String> {
    let url = url.trim();
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| format!("the proxy '{}' must be a URL such as http://proxy.example:3128", safe_proxy(url)))?;
    let scheme = scheme.to_ascii_lowercase();
    if !PROXY_SCHEMES.contains(&scheme.as_str()) {
        return Err(format!(
            "the proxy's scheme '{scheme}' is not one Keymux speaks; use an HTTP proxy (http:// or https://) or a \
             SOCKS5 proxy (socks5://, or socks5h:// to have the proxy resolve host names)"
        ));
    }
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.contains('@') {
        return Err(format!(
            "the proxy URL carries a user or password ({}), which Keymux never keeps in the config file or the \
             API's answers: set the proxy with `keymux pool set NAME --proxy URL` (or the dashboard), which keeps \
             them in the keychain",
            safe_proxy(url)
        ));
    }
    if authority.is_empty() || authority.contains(['/', '?', '#', ' ']) {
        return Err(format!(
            "the proxy '{}' must be only a scheme, a host and a port, such as http://proxy.example:3128",
            safe_proxy(url)
        ));
    }
    let port = match authority.strip_prefix('[') {
        Some(v6) => v6.split_once("]:").map(|(_, port)| port),
        None => authority.rsplit_once(':').map(|(_, port)| port),
    };
    if port.is_some_and(|port| port.parse::<u16>().is_err()) {
        return Err(format!("the proxy '{}' has a port that is not a number", safe_proxy(url)));
    }
    Ok(format!("{scheme}://{authority}"))
}

/// Splits a proxy URL given with a user and password (`http://user:password@host:port`) into the URL
/// without them (checked by [`check_proxy`]) and `user:password`, as the keychain keeps it. A URL
/// without them gives `None`. The errors never quote them.
pub fn split_proxy(url: &str) -> Result<(String, Option<String>), String> {
    let url = url.trim();
    let Some((scheme, rest)) = url.split_once("://") else { return check_proxy(url).map(|u| (u, None)) };
    let Some((login, host)) = rest.rsplit_once('@') else { return check_proxy(url).map(|u| (u, None)) };
    if login.is_empty() || login.contains(['/', '?', '#']) {
        return Err(format!("the proxy URL {} is not one Keymux can read", safe_proxy(url)));
    }
    Ok((check_proxy(&format!("{scheme}://{host}"))?, Some(login.to_owned())))
}

/// A proxy URL as it may be shown: any user or password replaced by `***`.
pub fn safe_proxy(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => match rest.rsplit_once('@') {
            Some((_, host)) => format!("{scheme}://***@{host}"),
            None => url.to_owned(),
        },
        None => match url.rsplit_once('@') {
            Some((_, host)) => format!("***@{host}"),
            None => url.to_owned(),
        },
    }
}

/// Where in a list of pools (and the tokens bound to them) a problem is, so the config file can name
/// its line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Place {
    /// `pools[i].name`.
    Name(usize),
    /// `pools[i].keys[j]`.
    Key(usize, usize),
    /// `pools[i].fallback[j]`.
    Fallback(usize, usize),
    /// `pools[i]` as a whole (too many, say).
    Pool(usize),
    /// `tokens[i].pool`.
    Token(usize),
}

/// A problem with the pools, worded for the user, with where it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolProblem {
    /// Where.
    pub place: Place,
    /// What is wrong and what to do.
    pub message: String,
}

/// Checks a list of pools against the keys that exist (`key_known` takes a label or id) and the
/// tokens' pools: names valid and distinct, keys known, fallbacks known and without a cycle.
pub fn validate<'a>(
    pools: &[PoolConfig],
    key_known: impl Fn(&str) -> bool,
    token_pools: impl IntoIterator<Item = &'a str>,
) -> Result<(), PoolProblem> {
    let problem = |place, message: String| Err(PoolProblem { place, message });
    if pools.len() > MAX_POOLS {
        return problem(Place::Pool(MAX_POOLS), format!("at most {MAX_POOLS} pools can be defined"));
    }
    for (i, pool) in pools.iter().enumerate() {
        check_name(&pool.name).map_err(|message| PoolProblem { place: Place::Name(i), message })?;
        if pools[..i].iter().any(|p| p.name.eq_ignore_ascii_case(&pool.name)) {
            let message = format!("two pools are named '{}'; rename or merge one of them", pool.name);
            return problem(Place::Name(i), message);
        }
        if let Some(j) = pool.keys.iter().position(|k| !key_known(k)) {
            let message = format!(
                "pool '{}' names the key '{}', which does not exist; see `keymux keys list` for the labels",
                pool.name, pool.keys[j]
            );
            return problem(Place::Key(i, j), message);
        }
        if pool.fallback.len() > MAX_FALLBACKS {
            let message = format!("pool '{}' has more than {MAX_FALLBACKS} fallback pools", pool.name);
            return problem(Place::Fallback(i, MAX_FALLBACKS), message);
        }
        for (j, fallback) in pool.fallback.iter().enumerate() {
            check_fallback(pools, pool, fallback)
                .map_err(|message| PoolProblem { place: Place::Fallback(i, j), message })?;
        }
        pool.money.validate().map_err(|message| PoolProblem {
            place: Place::Pool(i),
            message: format!("pool '{}': {message}", pool.name),
        })?;
        if let Some(proxy) = &pool.proxy {
            check_proxy(proxy).map_err(|message| PoolProblem {
                place: Place::Pool(i),
                message: format!("pool '{}': {message}", pool.name),
            })?;
        }
    }
    if let Some((i, message)) = proxy_conflict(pools) {
        return problem(Place::Pool(i), message);
    }
    if let Some(i) = cycle(pools) {
        let message = format!(
            "the fallbacks of pool '{}' lead back to it; a pool's fallbacks must not return to it",
            pools[i].name
        );
        return problem(Place::Fallback(i, 0), message);
    }
    for (i, name) in token_pools.into_iter().enumerate() {
        if !exists(pools, name) {
            return problem(Place::Token(i), unknown_pool(name));
        }
    }
    Ok(())
}

/// Checks a pool name: a valid label, and not the built-in `all`.
pub fn check_name(name: &str) -> Result<(), String> {
    validate_label(name).map_err(|e| format!("pool name: {e}"))?;
    if name.eq_ignore_ascii_case(ALL) {
        return Err("the pool 'all' is built in (it holds every key); pick another name".into());
    }
    Ok(())
}

/// Whether `name` is a pool: the built-in `all` or one of `pools`.
pub fn exists(pools: &[PoolConfig], name: &str) -> bool {
    name.eq_ignore_ascii_case(ALL) || pools.iter().any(|p| p.name.eq_ignore_ascii_case(name))
}

/// The message for a token or fallback that names a pool that does not exist.
pub fn unknown_pool(name: &str) -> String {
    format!("there is no pool named '{name}'; create it first (`keymux pool create {name} --keys LABEL`) or use 'all'")
}

fn check_fallback(pools: &[PoolConfig], pool: &PoolConfig, fallback: &str) -> Result<(), String> {
    if fallback.eq_ignore_ascii_case(&pool.name) {
        return Err(format!("pool '{}' lists itself as a fallback; remove it", pool.name));
    }
    if !exists(pools, fallback) {
        return Err(unknown_pool(fallback));
    }
    Ok(())
}

/// A key in two pools with different proxies: a key has one way out, so its pools must agree.
fn proxy_conflict(pools: &[PoolConfig]) -> Option<(usize, String)> {
    for (i, pool) in pools.iter().enumerate() {
        for earlier in &pools[..i] {
            if earlier.proxy == pool.proxy {
                continue;
            }
            let shared = pool.keys.iter().find(|k| earlier.keys.iter().any(|e| e.eq_ignore_ascii_case(k)));
            if let Some(key) = shared {
                let way = |p: &PoolConfig| p.proxy.as_deref().map_or_else(|| "no proxy".to_owned(), safe_proxy);
                let message = format!(
                    "the key '{key}' is in pool '{}' ({}) and in pool '{}' ({}); a key goes out one way, so give \
                     both pools the same proxy or keep the key in one of them",
                    earlier.name,
                    way(earlier),
                    pool.name,
                    way(pool)
                );
                return Some((i, message));
            }
        }
    }
    None
}

/// The first pool whose fallbacks lead back to it, if any.
fn cycle(pools: &[PoolConfig]) -> Option<usize> {
    let index = |name: &str| pools.iter().position(|p| p.name.eq_ignore_ascii_case(name));
    (0..pools.len()).find(|&start| {
        // Depth-first over fallbacks; bounded by MAX_POOLS levels, each visited once.
        let mut seen = vec![false; pools.len()];
        let mut stack: Vec<usize> = pools[start].fallback.iter().filter_map(|f| index(f)).collect();
        while let Some(i) = stack.pop() {
            if i == start {
                return true;
            }
            if !std::mem::replace(&mut seen[i], true) {
                stack.extend(pools[i].fallback.iter().filter_map(|f| index(f)));
            }
        }
        false
    })
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

    /// The user's pool `name`'s budget in money, if it has one, with its keys.
    pub fn money_of(&self, name: &str) -> Option<(crate::budget::MoneyBudget, &[KeyId])> {
        let def = self.defs.iter().find(|p| p.name.eq_ignore_ascii_case(name))?;
        Some((def.money, self.keys_of(name))).filter(|(money, _)| money.is_set())
    }

    /// Whether requests of pool `name` may ask for a tier above the standard one (`all` and pools that
    /// do not exist: yes).
    pub fn allows_priority(&self, name: &str) -> bool {
        self.defs.iter().find(|p| p.name.eq_ignore_ascii_case(name)).is_none_or(|p| p.allow_priority)
    }

    /// The proxy each key goes out through, for the keys of pools that have one, with the pool whose
    /// login it uses when it has one (pools that share a key have the same proxy: `validate` checks
    /// it; the first such pool's login).
    pub fn proxies(&self) -> Vec<(KeyId, String, Option<String>)> {
        let mut out: Vec<(KeyId, String, Option<String>)> = Vec::new();
        for (def, resolved) in self.defs.iter().zip(&self.resolved) {
            let Some(proxy) = &def.proxy else { continue };
            for key in &resolved.keys {
                if !out.iter().any(|(k, ..)| k == key) {
                    out.push((key.clone(), proxy.clone(), def.proxy_login.then(|| def.name.clone())));
                }
            }
        }
        out
    }

    /// The proxy `key` goes out through (its pools' proxy), if any.
    pub fn proxy_of(&self, key: &KeyId) -> Option<&str> {
        let mut pools = self.defs.iter().zip(&self.resolved);
        pools
            .find(|(def, resolved)| def.proxy.is_some() && resolved.keys.contains(key))
            .and_then(|(def, _)| def.proxy.as_deref())
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

#[cfg(test)]
mod tests;
