//! The `KEYMUX_*` variables that add ephemeral keys (and their settings) for headless use.

use super::*;
use crate::pools::PoolPolicies;

/// A key supplied by the environment: `KEYMUX_KEY_<LABEL>=sk-...`, with optional
/// `KEYMUX_KEY_<LABEL>_BASE_URL`, `_ORG` and `_PROVIDER`.
#[derive(Clone, Debug)]
pub struct EnvKey {
    /// Label, lower-cased from the variable name.
    pub label: String,
    /// The secret value.
    pub secret: crate::secrets::Secret,
    /// Provider (default OpenAI).
    pub provider: ProviderId,
    /// Base URL override.
    pub base_url: Option<String>,
    /// Organization.
    pub org: Option<String>,
    /// Its priority tier (`_PRIORITY`) and daily token budget (`_BUDGET`); the rest at their default.
    pub settings: crate::key_settings::KeySettings,
}

/// A client token supplied by the environment: `KEYMUX_TOKEN_<NAME>=…`, bound to the pool
/// `KEYMUX_TOKEN_<NAME>_POOL` (default `all`).
#[derive(Clone, Debug)]
pub struct EnvToken {
    /// Name, lower-cased from the variable name.
    pub name: String,
    /// The token.
    pub secret: crate::secrets::Secret,
    /// Its pool.
    pub pool: String,
}

/// What the environment supplies: ephemeral keys, pools and client tokens.
#[derive(Clone, Debug, Default)]
pub struct EnvSecrets {
    /// Keys from `KEYMUX_KEY_*`.
    pub keys: Vec<EnvKey>,
    /// Pools from `KEYMUX_POOL_<NAME>=label1,label2`.
    pub pools: Vec<PoolConfig>,
    /// The user and password of a pool's proxy (`KEYMUX_POOL_<NAME>_PROXY=http://user:password@…`), by
    /// pool: kept in memory only, like every environment secret.
    pub proxy_logins: Vec<(String, crate::secrets::Secret)>,
    /// Named tokens from `KEYMUX_TOKEN_<NAME>`.
    pub tokens: Vec<EnvToken>,
    /// `KEYMUX_CLIENT_TOKEN`.
    pub client_token: Option<crate::secrets::Secret>,
    /// `KEYMUX_INSTALL_SECRET`: keys the markers of an ephemeral run, so they survive restarts.
    pub install_secret: Option<crate::secrets::Secret>,
    /// `KEYMUX_ADMIN_TOKEN`: the admin credential of an ephemeral run, for the CLI and tools.
    pub admin_token: Option<crate::secrets::Secret>,
}

const KEY_PREFIX: &str = "KEYMUX_KEY_";
const ATTRS: [&str; 5] = ["_BASE_URL", "_ORG", "_PROVIDER", "_PRIORITY", "_BUDGET"];

impl EnvSecrets {
    /// Reads the variables from any list of (name, value) pairs, so tests pass their own.
    pub fn from_vars<I>(vars: I) -> Result<Self, String>
    where
        I: IntoIterator<Item = (String, String)>,
    {
        let vars: BTreeMap<String, String> = vars.into_iter().filter(|(k, _)| k.starts_with("KEYMUX_")).collect();
        let (pools, proxy_logins) = env_pools(&vars)?;
        let mut out = Self {
            client_token: vars
                .get("KEYMUX_CLIENT_TOKEN")
                .filter(|v| !v.is_empty())
                .map(|v| crate::secrets::Secret::new(v.as_str())),
            install_secret: vars
                .get("KEYMUX_INSTALL_SECRET")
                .filter(|v| v.len() >= 16)
                .map(|v| crate::secrets::Secret::new(v.as_str())),
            admin_token: vars
                .get("KEYMUX_ADMIN_TOKEN")
                .filter(|v| !v.is_empty())
                .map(|v| crate::secrets::Secret::new(v.as_str())),
            keys: Vec::new(),
            pools,
            proxy_logins,
            tokens: env_tokens(&vars)?,
        };
        for name in ["KEYMUX_CLIENT_TOKEN", "KEYMUX_ADMIN_TOKEN"] {
            if let Some(value) = vars.get(name).filter(|v| !v.is_empty()) {
                crate::tokens::check_strength(value).map_err(|e| format!("{name}: {e}"))?;
            }
        }
        if vars.get("KEYMUX_INSTALL_SECRET").is_some_and(|v| v.len() < 16) {
            return Err("KEYMUX_INSTALL_SECRET must be at least 16 characters".into());
        }
        for (name, value) in &vars {
            let Some(rest) = name.strip_prefix(KEY_PREFIX) else {
                continue;
            };
            // `KEYMUX_KEY_WORK_ORG` is an attribute of `work` when `KEYMUX_KEY_WORK` exists.
            let is_attr = ATTRS
                .iter()
                .any(|a| rest.strip_suffix(a).is_some_and(|base| vars.contains_key(&format!("{KEY_PREFIX}{base}"))));
            if is_attr || rest.is_empty() {
                continue;
            }
            let label = rest.to_ascii_lowercase();
            validate_label(&label).map_err(|e| format!("{name}: {e}"))?;
            crate::keys::validate_secret(value).map_err(|e| format!("{name}: {e}"))?;
            let attr = |suffix: &str| vars.get(&format!("{name}{suffix}")).filter(|v| !v.is_empty()).cloned();
            let provider = match attr("_PROVIDER") {
                None => ProviderId::Openai,
                Some(p) => ProviderId::parse(&p)
                    .ok_or_else(|| format!("{name}_PROVIDER={p:?}: expected \"openai\" or \"azure\""))?,
            };
            if let Some(org) = attr("_ORG") {
                crate::keys::validate_org(&org).map_err(|e| format!("{name}_ORG: {e}"))?;
            }
            if let Some(url) = attr("_BASE_URL") {
                crate::keys::validate_base_url(&url).map_err(|e| format!("{name}_BASE_URL: {e}"))?;
            }
            out.keys.push(EnvKey {
                label,
                secret: crate::secrets::Secret::new(value.as_str()),
                provider,
                base_url: attr("_BASE_URL"),
                org: attr("_ORG"),
                settings: crate::key_settings::KeySettings {
                    priority: match attr("_PRIORITY") {
                        None => 0,
                        Some(p) => p.parse().map_err(|_| format!("{name}_PRIORITY={p:?}: expected 0 to 255"))?,
                    },
                    daily_token_budget: match attr("_BUDGET") {
                        None => None,
                        Some(b) => Some(b.parse().map_err(|_| format!("{name}_BUDGET={b:?}: expected a token count"))?),
                    },
                    ..Default::default()
                },
            });
        }
        Ok(out)
    }
}

const POOL_PREFIX: &str = "KEYMUX_POOL_";
const TOKEN_PREFIX: &str = "KEYMUX_TOKEN_";

/// The policies a `KEYMUX_POOL_<NAME>` pool takes from `KEYMUX_POOL_<NAME>_<ATTR>`.
const POOL_ATTRS: [&str; 3] = ["_ALLOW_PRIORITY", "_ALLOW_ULTRAFAST", "_PROXY"];

/// `KEYMUX_POOL_<NAME>=label1,label2`: a pool of those keys (checked against the keys at startup), with
/// `KEYMUX_POOL_<NAME>_ALLOW_PRIORITY=true|false`, `KEYMUX_POOL_<NAME>_ALLOW_ULTRAFAST=true|false` and
/// `KEYMUX_POOL_<NAME>_PROXY=http://host:port`.
fn env_pools(vars: &BTreeMap<String, String>) -> Result<EnvPools, String> {
    let mut pools = Vec::new();
    let mut logins = Vec::new();
    for (name, value) in vars {
        let Some(rest) = name.strip_prefix(POOL_PREFIX) else { continue };
        let attribute = POOL_ATTRS
            .iter()
            .any(|attr| rest.strip_suffix(attr).is_some_and(|base| vars.contains_key(&format!("{POOL_PREFIX}{base}"))));
        if attribute {
            continue;
        }
        let pool = rest.to_ascii_lowercase();
        crate::pools::check_name(&pool).map_err(|e| format!("{name}: {e}"))?;
        let keys = value.split(',').map(str::trim).filter(|k| !k.is_empty()).map(str::to_owned).collect();
        let mut policies = PoolPolicies::default();
        let flag =
            |attr: &str, default: bool| match vars.get(&format!("{name}{attr}")).map(|v| v.trim().to_ascii_lowercase())
            {
                None => Ok(default),
                Some(v) if ["true", "1", "yes"].contains(&v.as_str()) => Ok(true),
                Some(v) if ["false", "0", "no"].contains(&v.as_str()) => Ok(false),
                Some(_) => Err(format!("{name}{attr}: use true or false")),
            };
        policies.allow_priority = flag("_ALLOW_PRIORITY", policies.allow_priority)?;
        policies.allow_ultrafast = flag("_ALLOW_ULTRAFAST", policies.allow_ultrafast)?;
        let login;
        (policies.proxy, login) = match vars.get(&format!("{name}_PROXY")).filter(|v| !v.trim().is_empty()) {
            // The message never quotes a user or password the URL carries (`pools::safe_proxy`).
            Some(url) => {
                let (url, login) = crate::pools::split_proxy(url).map_err(|e| format!("{name}_PROXY: {e}"))?;
                (Some(url), login)
            }
            None => (None, None),
        };
        let proxy_login = login.is_some();
        if let Some(login) = login {
            logins.push((pool.clone(), crate::secrets::Secret::new(login)));
        }
        pools.push(PoolConfig { name: pool, keys, fallback: Vec::new(), policies, proxy_login });
    }
    Ok((pools, logins))
}

/// The environment's pools, and their proxies' logins by pool.
type EnvPools = (Vec<PoolConfig>, Vec<(String, crate::secrets::Secret)>);

/// `KEYMUX_TOKEN_<NAME>=…` with `KEYMUX_TOKEN_<NAME>_POOL=<pool>`: a named client token.
fn env_tokens(vars: &BTreeMap<String, String>) -> Result<Vec<EnvToken>, String> {
    let mut tokens = Vec::new();
    for (name, value) in vars {
        let Some(rest) = name.strip_prefix(TOKEN_PREFIX) else { continue };
        let is_pool =
            rest.strip_suffix("_POOL").is_some_and(|base| vars.contains_key(&format!("{TOKEN_PREFIX}{base}")));
        if is_pool || rest.is_empty() {
            continue;
        }
        let token_name = rest.to_ascii_lowercase();
        validate_label(&token_name).map_err(|e| format!("{name}: {e}"))?;
        crate::tokens::check_strength(value).map_err(|e| format!("{name}: {e}"))?;
        let pool =
            vars.get(&format!("{name}_POOL")).filter(|p| !p.is_empty()).map_or(crate::pools::ALL, String::as_str);
        tokens.push(EnvToken {
            name: token_name,
            secret: crate::secrets::Secret::new(value.as_str()),
            pool: pool.to_ascii_lowercase(),
        });
    }
    Ok(tokens)
}
