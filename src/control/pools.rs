//! Pools changed at runtime (and offline, by the CLI): created, changed (keys, fallbacks), removed, and
//! client tokens moved from one pool to another. Every change is checked as a whole, with the same
//! words the config file's check uses, before anything is written; a running gateway resolves its
//! pools again at once, so the next request already sees the new boundary.

use serde::{Deserialize, Serialize};

use super::ControlError;
use crate::config::Config;
use crate::config_file;
use crate::events::GatewayEvent;
use crate::gateway::Gateway;
use crate::key_settings::Patch;
use crate::pools::{self, PoolConfig};
use crate::secrets::{account, Secret};
use crate::settings::Settings;

/// A change to a pool, by field name: its keys (by label or id, replacing the list), its fallback pools
/// (in order; empty: never) and its budget in money (`null` removes a budget). A field left out stays as
/// it is.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(transparent)]
pub struct PoolChanges(pub Patch);

/// What of a pool a change may touch (its name stays).
#[derive(Serialize, Deserialize)]
struct Changeable {
    keys: Vec<String>,
    fallback: Vec<String>,
    #[serde(flatten)]
    money: crate::budget::MoneyBudget,
    allow_priority: bool,
    /// `null` removes the proxy.
    proxy: Option<String>,
}

impl PoolChanges {
    /// `pool` with the changes: refused, naming the field, if one is unknown or its value wrong (the
    /// whole pool is checked when it is saved).
    fn applied(&self, mut pool: PoolConfig) -> Result<PoolConfig, ControlError> {
        let current = Changeable {
            keys: pool.keys,
            fallback: pool.fallback,
            money: pool.money,
            allow_priority: pool.allow_priority,
            proxy: pool.proxy,
        };
        let new = self.0.apply(&current).map_err(ControlError::Invalid)?;
        (pool.keys, pool.fallback, pool.money) = (new.keys, new.fallback, new.money);
        (pool.allow_priority, pool.proxy) = (new.allow_priority, new.proxy);
        Ok(pool)
    }
}

/// What becomes of a pool's proxy login (its user and password, kept in the keychain) when it is saved.
pub enum Login {
    /// Nothing changes: the same proxy without a new login keeps the one kept, and a pool that had
    /// none still has none.
    Keep,
    /// A proxy URL given with a user and password: they are kept, the URL without them.
    Set(Secret),
    /// The pool had one, and now has no proxy, or one without a login: it is forgotten.
    Clear,
}

/// Creates pool `pool` (refused when the name is taken). `live_keys` are labels a running gateway holds
/// beyond the config's (keys from the environment), named in the refusal when a pool asks for one. Used
/// with and without a running gateway.
pub fn create_pool(settings: &Settings, pool: PoolConfig, live_keys: &[String]) -> Result<PoolConfig, ControlError> {
    create(settings, pool, live_keys).map(|(pool, _)| pool)
}

fn create(settings: &Settings, pool: PoolConfig, live_keys: &[String]) -> Result<(PoolConfig, Login), ControlError> {
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
) -> Result<(PoolConfig, Login), ControlError> {
    let before = find(&settings.config(), name)?;
    let pool = changes.applied(before.clone())?;
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

/// Drops repeated names (a key listed twice is one key), keeping the first; a proxy is checked and
/// kept as `pools::check_proxy` writes it (an empty one is none), its user and password taken out
/// (what becomes of them: the `Login`; the same proxy as `before` without them keeps its login).
fn tidy(mut pool: PoolConfig, before: Option<&PoolConfig>) -> Result<(PoolConfig, Login), ControlError> {
    let had = before.is_some_and(|b| b.proxy_login);
    let forget = if had { Login::Clear } else { Login::Keep };
    let (proxy, login, kept) = match pool.proxy.as_deref().map(str::trim) {
        None | Some("") => (None, forget, false),
        Some(proxy) => {
            let (url, login) = pools::split_proxy(proxy).map_err(ControlError::Invalid)?;
            let same = had && before.is_some_and(|b| b.proxy.as_deref() == Some(url.as_str()));
            match login {
                Some(login) => (Some(url), Login::Set(Secret::new(login)), true),
                None if same => (Some(url), Login::Keep, true),
                None => (Some(url), forget, false),
            }
        }
    };
    (pool.proxy, pool.proxy_login) = (proxy, kept);
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
    (pool, login): (PoolConfig, Login),
    live_keys: &[String],
) -> Result<(PoolConfig, Login), ControlError> {
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
        Login::Set(secret) => settings.store().set(&account, secret)?,
        Login::Clear => settings.store().delete(&account)?,
        Login::Keep => {}
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
        self.login_changed(&gone.name, Login::Clear);
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
    fn login_changed(&self, pool: &str, login: Login) {
        match login {
            Login::Set(secret) => self.set_proxy_login(pool, Some(secret)),
            Login::Clear => self.set_proxy_login(pool, None),
            Login::Keep => {}
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
