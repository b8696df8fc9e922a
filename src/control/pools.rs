//! Pools changed at runtime (and offline, by the CLI): created, changed (keys, fallbacks), removed, and
//! client tokens moved from one pool to another. Every change is checked as a whole, with the same
//! words the config file's check uses, before anything is written; a running gateway resolves its
//! pools again at once, so the next request already sees the new boundary.

use serde::{Deserialize, Serialize};

use super::ControlError;
use crate::change::{self, given};
use crate::config::Config;
use crate::config_file;
use crate::events::GatewayEvent;
use crate::gateway::Gateway;
use crate::pools::{self, PoolConfig, PoolPolicies, PoolPoliciesChange, ProxyLogin};
use crate::secrets::account;
use crate::settings::Settings;

/// A change to a pool, each field as the pool names it: its keys (by label or id, replacing the list),
/// its fallback pools (in order; empty: never) and its policies (`null` removes the proxy or a budget).
/// A field left out stays as it is. `PATCH /pools/{name}` takes it as a JSON object, read by
/// [`PoolChanges::read`]; the CLI builds it from its flags.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, ts_rs::TS)]
#[serde(default, deny_unknown_fields)]
#[ts(optional_fields)]
pub struct PoolChanges {
    /// Its keys, by label or id.
    #[serde(deserialize_with = "given", skip_serializing_if = "Option::is_none")]
    pub keys: Option<Vec<String>>,
    /// Its fallback pools, in order.
    #[serde(deserialize_with = "given", skip_serializing_if = "Option::is_none")]
    pub fallback: Option<Vec<String>>,
    /// Changes to its policies.
    #[serde(flatten, deserialize_with = "crate::flat::fields")]
    pub policies: PoolPoliciesChange,
}

impl PoolChanges {
    /// Reads the changes a person sent: refused, naming the field, when one is not a pool's setting or
    /// its value is not of the setting's type.
    pub fn read(body: serde_json::Value) -> Result<Self, ControlError> {
        let lists = serde_json::json!({ "keys": [], "fallback": [] });
        let policies = serde_json::to_value(PoolPolicies::default()).unwrap_or_default();
        change::read(body, &change::names(&[lists, policies])).map_err(ControlError::Invalid)
    }

    /// Whether they change nothing.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// `pool` with the changes (the whole pool is checked when it is saved).
    fn applied(&self, mut pool: PoolConfig) -> PoolConfig {
        pool.keys = self.keys.clone().unwrap_or(pool.keys);
        pool.fallback = self.fallback.clone().unwrap_or(pool.fallback);
        self.policies.apply(&mut pool.policies);
        pool
    }
}

/// Creates pool `pool` (refused when the name is taken). `live_keys` are labels a running gateway holds
/// beyond the config's (keys from the environment), named in the refusal when a pool asks for one. Used
/// with and without a running gateway.
pub fn create_pool(settings: &Settings, pool: PoolConfig, live_keys: &[String]) -> Result<PoolConfig, ControlError> {
    create(settings, pool, live_keys).map(|(pool, _)| pool)
}

fn create(
    settings: &Settings,
    pool: PoolConfig,
    live_keys: &[String],
) -> Result<(PoolConfig, ProxyLogin), ControlError> {
    pools::check_name(&pool.name).map_err(ControlError::Invalid)?;
    if pools::exists(&settings.config().pools, &pool.name) {
        return Err(ControlError::Invalid(format!(
            "a pool named '{}' already exists; change it with `keymux pool set {}`",
            pool.name, pool.name
        )));
    }
    save(settings, tidy(pool, None)?, live_keys)
}

/// Changes pool `name`. Used with and without a running gateway.
pub fn change_pool(
    settings: &Settings,
    name: &str,
    changes: &PoolChanges,
    live_keys: &[String],
) -> Result<PoolConfig, ControlError> {
    change(settings, name, changes, live_keys).map(|(pool, _)| pool)
}

fn change(
    settings: &Settings,
    name: &str,
    changes: &PoolChanges,
    live_keys: &[String],
) -> Result<(PoolConfig, ProxyLogin), ControlError> {
    let before = find(&settings.config(), name)?;
    let pool = changes.applied(before.clone());
    save(settings, tidy(pool, Some(&before))?, live_keys)
}

/// Removes pool `name`: refused while a token is bound to it or another pool falls back to it (so
/// nothing is left pointing at a pool that is gone). Used with and without a running gateway.
pub fn remove_pool(
    settings: &Settings,
    name: &str,
    live_tokens: &[(String, String)],
) -> Result<PoolConfig, ControlError> {
    let config = settings.config();
    let pool = find(&config, name)?;
    let bound: Vec<String> = config
        .tokens
        .iter()
        .map(|t| (t.name.clone(), t.pool.clone()))
        .chain(live_tokens.iter().cloned())
        .filter(|(_, p)| p.eq_ignore_ascii_case(&pool.name))
        .map(|(token, _)| if token.is_empty() { "KEYMUX_CLIENT_TOKEN".to_owned() } else { token })
        .fold(Vec::new(), |mut names, token| {
            if !names.contains(&token) {
                names.push(token);
            }
            names
        });
    if !bound.is_empty() {
        return Err(ControlError::Invalid(format!(
            "the pool '{}' still has tokens ({}); move them first (`keymux token set NAME --pool OTHER`) or \
             revoke them",
            pool.name,
            bound.join(", ")
        )));
    }
    if let Some(other) = config.pools.iter().find(|p| p.fallback.iter().any(|f| f.eq_ignore_ascii_case(&pool.name))) {
        return Err(ControlError::Invalid(format!(
            "the pool '{}' falls back to '{}'; change its fallbacks first (`keymux pool set {} --fallback ...`)",
            other.name, pool.name, other.name
        )));
    }
    let gone = pool.name.clone();
    settings.edit(
        |doc| config_file::remove_pool(doc, &gone),
        |c| c.pools.retain(|p| !p.name.eq_ignore_ascii_case(&gone)),
    )?;
    if pool.proxy_login {
        settings.store().delete(&account::proxy(&gone))?;
    }
    Ok(pool)
}

/// Binds token `id_or_name` to pool `pool`. Used with and without a running gateway.
pub fn move_token(
    settings: &Settings,
    id_or_name: &str,
    pool: &str,
) -> Result<crate::config::TokenConfig, ControlError> {
    let config = settings.config();
    if !pools::exists(&config.pools, pool) {
        return Err(ControlError::Invalid(pools::unknown_pool(pool)));
    }
    let mut token =
        config
            .tokens
            .into_iter()
            .find(|t| t.id == id_or_name || t.name.eq_ignore_ascii_case(id_or_name))
            .ok_or_else(|| ControlError::NotFound(format!("no token named '{id_or_name}'; see `keymux token list`")))?;
    token.pool = canonical(&config.pools, pool);
    let (id, bound) = (token.id.clone(), token.pool.clone());
    settings.edit(
        |doc| config_file::set_token_pool(doc, &id, &bound),
        |c| c.tokens.iter_mut().filter(|t| t.id == id).for_each(|t| t.pool.clone_from(&bound)),
    )?;
    Ok(token)
}

/// A pool's name as it was defined (`work` for `Work`), or `all`.
pub fn canonical(defined: &[PoolConfig], name: &str) -> String {
    defined.iter().find(|p| p.name.eq_ignore_ascii_case(name)).map_or_else(|| pools::ALL.to_owned(), |p| p.name.clone())
}

fn find(config: &Config, name: &str) -> Result<PoolConfig, ControlError> {
    if name.eq_ignore_ascii_case(pools::ALL) {
        return Err(ControlError::Invalid(
            "the pool 'all' is built in (it holds every key) and cannot be changed".into(),
        ));
    }
    config
        .pools
        .iter()
        .find(|p| p.name.eq_ignore_ascii_case(name))
        .cloned()
        .ok_or_else(|| ControlError::NotFound(format!("there is no pool named '{name}'; see `keymux pool list`")))
}

/// Drops repeated names (a key listed twice is one key), keeping the first; the proxy is made the one
/// kept, its user and password taken out (`pools::take_login`, which says what becomes of them).
fn tidy(mut pool: PoolConfig, before: Option<&PoolConfig>) -> Result<(PoolConfig, ProxyLogin), ControlError> {
    let login = pools::take_login(&mut pool, before).map_err(ControlError::Invalid)?;
    for list in [&mut pool.keys, &mut pool.fallback] {
        let mut seen: Vec<String> = Vec::new();
        list.retain(|k| {
            let new = !seen.iter().any(|s| s.eq_ignore_ascii_case(k));
            seen.push(k.clone());
            new
        });
    }
    Ok((pool, login))
}

/// Checks the pools with `pool` in place, then writes its proxy's login to the keychain and it to the
/// config file.
fn save(
    settings: &Settings,
    (pool, login): (PoolConfig, ProxyLogin),
    live_keys: &[String],
) -> Result<(PoolConfig, ProxyLogin), ControlError> {
    let mut config = settings.config();
    match config.pools.iter_mut().find(|p| p.name.eq_ignore_ascii_case(&pool.name)) {
        Some(old) => *old = pool.clone(),
        None => config.pools.push(pool.clone()),
    }
    // The config file is read without the environment, so a pool kept there may only name keys kept
    // there; a key from the environment belongs in a `KEYMUX_POOL_*` pool.
    if let Some(env_key) =
        pool.keys.iter().find(|k| config.find_key(k).is_none() && live_keys.iter().any(|l| l.eq_ignore_ascii_case(k)))
    {
        return Err(ControlError::Invalid(format!(
            "the key '{env_key}' comes from the environment, and a pool saved in the config can only name keys \
             saved there; add it to a pool with KEYMUX_POOL_<NAME>={env_key},... instead"
        )));
    }
    let known = |name: &str| config.find_key(name).is_some();
    pools::validate(&config.pools, known, config.tokens.iter().map(|t| t.pool.as_str()))
        .map_err(|problem| ControlError::Invalid(problem.message))?;
    let account = account::proxy(&pool.name);
    match &login {
        ProxyLogin::Set(secret) => settings.store().set(&account, secret)?,
        ProxyLogin::Clear => settings.store().delete(&account)?,
        ProxyLogin::Keep => {}
    }
    let saved = pool.clone();
    settings.edit(
        |doc| config_file::set_pool(doc, &saved),
        |c| match c.pools.iter_mut().find(|p| p.name.eq_ignore_ascii_case(&saved.name)) {
            Some(old) => *old = saved.clone(),
            None => c.pools.push(saved.clone()),
        },
    )?;
    Ok((pool, login))
}

impl Gateway {
    /// Creates a pool; requests of its tokens reach only its keys from the next request on.
    pub fn create_pool(&self, pool: PoolConfig) -> Result<PoolConfig, ControlError> {
        let (made, login) = create(self.settings(), pool, &self.pool().labels())?;
        self.login_changed(&made.name, login);
        self.pools_changed(&made.name);
        Ok(made)
    }

    /// Changes a pool's keys or fallbacks.
    pub fn change_pool(&self, name: &str, changes: &PoolChanges) -> Result<PoolConfig, ControlError> {
        self.refuse_env_pool(name)?;
        let (changed, login) = change(self.settings(), name, changes, &self.pool().labels())?;
        self.login_changed(&changed.name, login);
        self.pools_changed(&changed.name);
        Ok(changed)
    }

    /// Removes a pool (refused while tokens are bound to it).
    pub fn remove_pool(&self, name: &str) -> Result<PoolConfig, ControlError> {
        self.refuse_env_pool(name)?;
        let tokens = self.tokens();
        let live: Vec<(String, String)> =
            tokens.names().into_iter().zip(tokens.pools()).map(|((_, name), (_, pool))| (name, pool)).collect();
        let gone = remove_pool(self.settings(), name, &live)?;
        self.login_changed(&gone.name, ProxyLogin::Clear);
        self.pools_changed(&gone.name);
        Ok(gone)
    }

    /// Moves a client token to another pool, at once.
    pub fn move_token(&self, id_or_name: &str, pool: &str) -> Result<crate::config::TokenConfig, ControlError> {
        let moved = move_token(self.settings(), id_or_name, pool)?;
        self.swap_tokens(|set| set.moved(&moved.id, &moved.pool));
        self.pools_changed(&moved.pool);
        Ok(moved)
    }

    /// The gateway goes out with the pool's new proxy login (the keychain holds it already).
    fn login_changed(&self, pool: &str, login: ProxyLogin) {
        match login {
            ProxyLogin::Set(secret) => self.set_proxy_login(pool, Some(secret)),
            ProxyLogin::Clear => self.set_proxy_login(pool, None),
            ProxyLogin::Keep => {}
        }
    }

    fn pools_changed(&self, name: &str) {
        self.refresh_pools();
        self.notify(GatewayEvent::PoolsChanged { name: name.to_owned() });
    }

    fn refuse_env_pool(&self, name: &str) -> Result<(), ControlError> {
        let from_env = self.env_pools().iter().any(|p| p.name.eq_ignore_ascii_case(name));
        if from_env {
            return Err(ControlError::Invalid(format!(
                "the pool '{name}' comes from KEYMUX_POOL_{}; change the environment and restart",
                name.to_ascii_uppercase()
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
