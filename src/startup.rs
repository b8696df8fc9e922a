//! Assembles a gateway from the config, the keychain and the environment. Preparing has no side effects:
//! it reads, and never writes. The steps of a first run (the install secret, a first client token, the
//! saved config) are an explicit call, `first_run`, that the CLI and the tray make before they start.
//!
//! A keychain that cannot be reached is not fatal when the environment supplies what is needed (keys
//! from `KEYMUX_KEY_*`, `KEYMUX_CLIENT_TOKEN`): Keymux serves with those and says what it is missing.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use crate::config::{Config, ConfigError, EnvKey, EnvSecrets};
use crate::gateway::Gateway;
use crate::keys::{KeyEntry, KeyId, KeySource};
use crate::markers::Markers;
use crate::secrets::{self, account, KeychainStore, MemoryStore, Secret, SecretStore, SecretsError};
use crate::tokens::TokenSet;
use crate::upstream::UpstreamError;

/// Where the config comes from.
#[derive(Clone, Debug)]
pub enum ConfigSource {
    /// A file (`None`: the platform default path); changes are saved back to it.
    File(Option<PathBuf>),
    /// A value held in memory (tests, embedders); changes are not saved anywhere.
    Value(Box<Config>),
}

impl Default for ConfigSource {
    fn default() -> Self {
        Self::File(None)
    }
}

/// How to start.
#[derive(Clone, Default)]
pub struct StartOptions {
    /// The config.
    pub config: ConfigSource,
    /// The secret store (`None`: the OS keychain named by the config, or memory when ephemeral).
    pub store: Option<Arc<dyn SecretStore>>,
    /// Listen address override.
    pub listen: Option<SocketAddr>,
    /// Default upstream base URL override.
    pub upstream: Option<String>,
    /// Allow a non-loopback listen address.
    pub allow_remote: bool,
    /// Never touch the keychain: secrets only from the environment.
    pub ephemeral: bool,
    /// What the environment supplies.
    pub env: EnvSecrets,
}

/// Why the gateway cannot start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The config file.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The keychain.
    #[error(transparent)]
    Secrets(#[from] SecretsError),
    /// The upstream client.
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    /// The listen address is taken or cannot be bound.
    #[error("cannot listen on {addr}: {detail}. Stop the other program on that port, or pick another with --listen or `listen` in the config")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// What the OS said.
        detail: String,
    },
    /// Something the user must change.
    #[error("{0}")]
    Usage(String),
}

/// A gateway ready to serve.
pub struct Prepared {
    /// The gateway.
    pub gateway: Arc<Gateway>,
    /// The config it was built from.
    pub config: Config,
    /// Where to listen.
    pub listen: SocketAddr,
    /// The config file, when there is one.
    pub config_path: Option<PathBuf>,
    /// The secret store.
    pub store: Arc<dyn SecretStore>,
    /// Non-fatal problems to tell the user about.
    pub notices: Vec<String>,
    /// How clients get a token: the name of the first configured token, or the environment variable.
    pub token_hint: String,
}

/// The store a config names: the OS keychain, or memory when ephemeral.
pub fn open_store(config: &Config, ephemeral: bool) -> Arc<dyn SecretStore> {
    if ephemeral {
        Arc::new(MemoryStore::default())
    } else {
        Arc::new(KeychainStore::new(config.keychain_service.clone()))
    }
}

/// Reads the config an option names, with the overrides applied.
pub fn load_config(options: &StartOptions) -> Result<(Config, Option<PathBuf>), StartError> {
    let (mut config, path) = match &options.config {
        ConfigSource::Value(config) => ((**config).clone(), None),
        ConfigSource::File(path) => {
            let path = match path {
                Some(p) => p.clone(),
                None => Config::default_path()?,
            };
            (Config::load(&path)?, Some(path))
        }
    };
    if let Some(upstream) = &options.upstream {
        crate::keys::validate_base_url(upstream).map_err(|e| StartError::Usage(format!("--upstream: {e}")))?;
        config.upstream = upstream.trim_end_matches('/').to_owned();
    }
    for (var, field) in [
        ("KEYMUX_CHATGPT_BASE_URL", &mut config.chatgpt_base_url),
        ("KEYMUX_CHATGPT_AUTH_URL", &mut config.chatgpt_auth_url),
    ] {
        if let Some(url) = std::env::var(var).ok().filter(|u| !u.is_empty()) {
            crate::keys::validate_base_url(&url).map_err(|e| StartError::Usage(format!("{var}: {e}")))?;
            *field = url.trim_end_matches('/').to_owned();
        }
    }
    // Also for a config handed over as a value (the tray, tests), which no file parse checked.
    config.check_urls().map_err(StartError::Usage)?;
    config.price_table().map_err(|e| StartError::Usage(e.to_string()))?;
    Ok((config, path))
}

fn store_for(options: &StartOptions, config: &Config) -> Arc<dyn SecretStore> {
    options.store.clone().unwrap_or_else(|| open_store(config, options.ephemeral))
}

fn listen_address(options: &StartOptions, config: &Config) -> Result<SocketAddr, StartError> {
    let listen = match options.listen {
        Some(addr) => addr,
        None => config
            .listen
            .parse()
            .map_err(|_| StartError::Usage(format!("listen = {:?} is not an address", config.listen)))?,
    };
    if !listen.ip().is_loopback() && !options.allow_remote {
        return Err(StartError::Usage(format!(
            "{listen} is not a loopback address: anyone who can reach it could spend your keys with a \
             leaked token. Pass --allow-remote if you really mean it."
        )));
    }
    Ok(listen)
}

/// Loads everything and builds the gateway. Reads only: nothing is created or saved.
pub async fn prepare(options: &StartOptions) -> Result<Prepared, StartError> {
    let (config, config_path) = load_config(options)?;
    let listen = listen_address(options, &config)?;
    let store = store_for(options, &config);
    let mut notices = Vec::new();
    let (mut entries, keychain_ok) = keychain_keys(&config, &store, options, &mut notices).await?;
    entries.extend(env_keys(&options.env, &entries)?);
    if entries.len() > crate::pool::MAX_KEYS {
        return Err(StartError::Usage(format!(
            "{} keys configured; Keymux pools at most {}",
            entries.len(),
            crate::pool::MAX_KEYS
        )));
    }
    if entries.is_empty() {
        notices.push(
            "no API keys yet: add one with `keymux keys add --label work` (requests get a clear error until then)"
                .into(),
        );
    }
    check_env_pools(&config, &options.env, &entries)?;
    let mut logins = Vec::new();
    let (tokens, token_hint) = client_tokens(&config, &store, options, keychain_ok, &mut notices, &mut logins).await?;
    let install = install_secret_for(&store, options, keychain_ok, &mut notices).await?;
    let admin = admin_token_for(&store, options, keychain_ok).await;
    let metrics = {
        let (config, ephemeral) = (config.clone(), options.ephemeral);
        tokio::task::spawn_blocking(move || {
            let mut notices = Vec::new();
            let metrics = open_metrics(&config, ephemeral, &mut notices);
            (metrics, notices)
        })
        .await
        .map_err(|e| StartError::Usage(format!("the metrics store could not be opened: {e}")))?
    };
    notices.extend(metrics.1);
    // With secrets in memory (--ephemeral), runtime changes stay in memory too.
    let file = config_path.clone().filter(|_| store.persistent()).map(crate::config_file::ConfigFile::new);
    let settings = crate::settings::Settings::new(store.clone(), file, config.clone());
    let gateway = Gateway::new(&config, entries, tokens, Markers::new(&install))?
        .with_metrics(metrics.0)
        .with_settings(settings)
        .with_env_pools(options.env.pools.clone())
        .with_proxy_logins(proxy_logins(&config, &store, options).await);
    gateway.access().set_admin(admin.as_ref());
    gateway.logins().restore(logins);
    gateway.set_keychain_ok(keychain_ok || options.ephemeral);
    Ok(Prepared { gateway: Arc::new(gateway), config, listen, config_path, store, notices, token_hint })
}

/// The user and password of each proxy that has one: from the keychain for the config's pools (one
/// that cannot be read is said in the log, and the pool's requests then meet the proxy's refusal,
/// naming it), from the environment for its pools.
async fn proxy_logins(config: &Config, store: &Arc<dyn SecretStore>, options: &StartOptions) -> Vec<(String, Secret)> {
    let mut logins = options.env.proxy_logins.clone();
    for pool in config.pools.iter().filter(|p| p.uses_proxy_login()) {
        let account = secrets::account::proxy(&pool.name);
        match secrets::blocking(store.clone(), move |s| s.get(&account)).await {
            Ok(Some(login)) => logins.push((pool.name.clone(), login)),
            Ok(None) => {
                tracing::warn!(pool = %pool.name, "the proxy's user and password are not in the keychain; set them again with `keymux pool set NAME --proxy URL`")
            }
            Err(e) => tracing::warn!(pool = %pool.name, error = %e, "the proxy's user and password could not be read"),
        }
    }
    logins
}

/// The keys kept in the keychain; `false` when the keychain could not be reached (and the environment
/// supplies keys, so serving goes on without it).
async fn keychain_keys(
    config: &Config,
    store: &Arc<dyn SecretStore>,
    options: &StartOptions,
    notices: &mut Vec<String>,
) -> Result<(Vec<KeyEntry>, bool), StartError> {
    let mut entries = Vec::new();
    if options.ephemeral && options.store.is_none() {
        if !config.keys.is_empty() {
            notices.push(format!(
                "--ephemeral never reads the keychain: the {} key(s) in the config are left out",
                config.keys.len()
            ));
        }
        return Ok((entries, false));
    }
    for key in &config.keys {
        let account = account::key(key.id.as_str());
        match secrets::blocking(store.clone(), move |s| s.get(&account)).await {
            Ok(Some(secret)) => entries.push(key.entry(secret)),
            Ok(None) => notices.push(format!(
                "key '{}' ({}) has no secret in the {}; it is left out. Re-add it with `keymux keys remove {}` and `keymux keys add --label {}`.",
                key.label, key.id, store.describe(), key.label, key.label
            )),
            Err(e) if options.env.keys.is_empty() => return Err(e.into()),
            Err(e) => {
                notices.push(format!("{e}; continuing with the keys from the environment only"));
                return Ok((Vec::new(), false));
            }
        }
    }
    if config.keys.is_empty() {
        // Nothing read yet: find out whether the keychain answers at all.
        let probe = secrets::blocking(store.clone(), |s| s.get(account::INSTALL_SECRET)).await;
        if let Err(e) = probe {
            if options.env.keys.is_empty() && options.env.client_token.is_none() {
                return Err(e.into());
            }
            notices.push(format!("{e}; continuing with what the environment supplies"));
            return Ok((entries, false));
        }
    }
    Ok((entries, true))
}

/// Keys from the environment: ephemeral, never written anywhere.
fn env_keys(env: &EnvSecrets, existing: &[KeyEntry]) -> Result<Vec<KeyEntry>, StartError> {
    env.keys
        .iter()
        .map(|env_key: &EnvKey| {
            if existing.iter().any(|e| e.label.eq_ignore_ascii_case(&env_key.label)) {
                return Err(StartError::Usage(format!(
                    "KEYMUX_KEY_{} names label '{}', which the config already uses; pick another label",
                    env_key.label.to_ascii_uppercase(),
                    env_key.label
                )));
            }
            Ok(KeyEntry {
                base_url: env_key.base_url.clone(),
                org: env_key.org.clone(),
                settings: env_key.settings.clone(),
                ..KeyEntry::new(
                    KeyId::new(format!("env-{}", env_key.label)),
                    env_key.label.clone(),
                    env_key.provider,
                    env_key.secret.clone(),
                    KeySource::Environment,
                )
            })
        })
        .collect()
}

/// Checks the pools and tokens of the environment: every key a `KEYMUX_POOL_*` names exists (in the
/// config or the environment), no pool is defined twice, and every `KEYMUX_TOKEN_*_POOL` names a pool.
fn check_env_pools(config: &Config, env: &EnvSecrets, keys: &[KeyEntry]) -> Result<(), StartError> {
    let mut all = config.pools.clone();
    all.extend(env.pools.iter().cloned());
    let known = |name: &str| {
        config.find_key(name).is_some()
            || keys.iter().any(|k| k.id.as_str() == name || k.label.eq_ignore_ascii_case(name))
    };
    let token_pools = config.tokens.iter().map(|t| t.pool.as_str()).chain(env.tokens.iter().map(|t| t.pool.as_str()));
    crate::pools::validate(&all, known, token_pools).map_err(|problem| {
        let source = match problem.place {
            crate::pools::Place::Token(i) if i >= config.tokens.len() => {
                format!("KEYMUX_TOKEN_{}_POOL", env.tokens[i - config.tokens.len()].name.to_ascii_uppercase())
            }
            _ => "KEYMUX_POOL_* (with the config's pools)".to_owned(),
        };
        StartError::Usage(format!("{source}: {}", problem.message))
    })
}

/// The local client tokens, and how to tell a user which one to use.
async fn client_tokens(
    config: &Config,
    store: &Arc<dyn SecretStore>,
    options: &StartOptions,
    keychain_ok: bool,
    notices: &mut Vec<String>,
    logins: &mut Vec<(String, Secret)>,
) -> Result<(TokenSet, String), StartError> {
    let mut tokens = TokenSet::default();
    if let Some(token) = &options.env.client_token {
        tokens = tokens.with("env", "", crate::pools::ALL, token);
    }
    for token in &options.env.tokens {
        tokens = tokens.with(&format!("env-{}", token.name), &token.name, &token.pool, &token.secret);
    }
    let mut hint = options.env.client_token.as_ref().map(|_| "KEYMUX_CLIENT_TOKEN".to_owned());
    if let Some(first) = options.env.tokens.first() {
        hint.get_or_insert_with(|| format!("KEYMUX_TOKEN_{}", first.name.to_ascii_uppercase()));
    }
    if keychain_ok {
        for token in &config.tokens {
            let account = account::token(&token.id);
            match secrets::blocking(store.clone(), move |s| s.get(&account)).await {
                // A client's login: listed, and accepted again once its client refreshes (`oauth`).
                Ok(Some(refresh_digest)) if token.login => {
                    tokens = tokens.awaiting(&token.id, &token.name, &token.pool);
                    logins.push((token.id.clone(), refresh_digest));
                }
                Ok(Some(secret)) => {
                    tokens = tokens.with(&token.id, &token.name, &token.pool, &secret);
                    hint.get_or_insert_with(|| format!("`keymux token show {}`", token.name));
                }
                Ok(None) => notices.push(format!(
                    "local token '{}' is missing from the {}; create a new one with `keymux token create`",
                    token.name,
                    store.describe()
                )),
                Err(e) if !tokens.is_empty() => {
                    notices.push(format!("{e}; only KEYMUX_CLIENT_TOKEN is accepted"));
                    break;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    match hint {
        Some(hint) if !tokens.is_empty() => Ok((tokens, hint)),
        _ => Err(StartError::Usage(
            "no local client token: run `keymux token create` (with a keychain available), or set \
             KEYMUX_CLIENT_TOKEN for a headless run"
                .into(),
        )),
    }
}

/// The admin credential: from the environment, or the keychain (where `first_run` put it).
async fn admin_token_for(store: &Arc<dyn SecretStore>, options: &StartOptions, keychain_ok: bool) -> Option<Secret> {
    if let Some(token) = &options.env.admin_token {
        return Some(token.clone());
    }
    if !keychain_ok {
        return None;
    }
    secrets::blocking(store.clone(), |s| s.get(account::ADMIN_TOKEN)).await.ok().flatten()
}

/// The secret that keys every marker: from the environment, the keychain, or (with neither) this
/// process only.
async fn install_secret_for(
    store: &Arc<dyn SecretStore>,
    options: &StartOptions,
    keychain_ok: bool,
    notices: &mut Vec<String>,
) -> Result<Secret, StartError> {
    if let Some(secret) = &options.env.install_secret {
        return Ok(secret.clone());
    }
    if keychain_ok {
        if let Some(secret) = secrets::blocking(store.clone(), |s| s.get(account::INSTALL_SECRET)).await? {
            return Ok(secret);
        }
    }
    notices.push(
        "markers are keyed by a secret that lives only in this process: sessions started now lose their key \
         pins when Keymux restarts (set KEYMUX_INSTALL_SECRET to keep them)"
            .into(),
    );
    Ok(secrets::generate(""))
}

/// Where the metrics are kept: the configured directory, else the platform data directory; `None` for
/// ephemeral runs (which write nothing unless a directory is named explicitly).
pub fn metrics_dir(config: &Config, ephemeral: bool) -> Option<PathBuf> {
    config
        .metrics_dir
        .clone()
        .or_else(|| (!ephemeral).then(|| dirs::data_dir().map(|d| d.join("keymux").join("metrics"))).flatten())
}

/// The metrics store in `metrics_dir`, or memory.
fn open_metrics(config: &Config, ephemeral: bool, notices: &mut Vec<String>) -> crate::metrics::Metrics {
    let dir = metrics_dir(config, ephemeral);
    let metrics = match &dir {
        Some(dir) => crate::metrics::Metrics::open(dir, config.metrics_retention_days),
        None => crate::metrics::Metrics::in_memory(),
    };
    if let Some(error) = metrics.status().error {
        notices.push(error);
    }
    metrics
}

/// The first run's writes, made explicitly before starting: the install secret, the admin credential,
/// and a `default` client token saved in the config when there is none. Does nothing for ephemeral runs
/// or when the keychain cannot be reached (then `prepare` says what is missing). Returns what it did,
/// for the user.
pub async fn first_run(options: &StartOptions) -> Result<Vec<String>, StartError> {
    if options.ephemeral {
        return Ok(Vec::new());
    }
    let (config, path) = load_config(options)?;
    let store = store_for(options, &config);
    if secrets::blocking(store.clone(), |s| s.get(account::INSTALL_SECRET)).await.is_err() {
        return Ok(Vec::new());
    }
    install_secret(&store).await?;
    admin_token(&store).await?;
    let mut done = Vec::new();
    if config.tokens.is_empty() && options.env.client_token.is_none() {
        let settings = crate::settings::Settings::new(store, path.map(crate::config_file::ConfigFile::new), config);
        let now = crate::clock::Clock::system().unix_ms() / 1000;
        crate::control::store_new_token(&settings, "default", crate::pools::ALL, now)
            .await
            .map_err(|e| StartError::Usage(e.to_string()))?;
        done.push(
            "created the local client token 'default'; print it with `keymux token show default` and give it to Codex or pi"
                .into(),
        );
    }
    Ok(done)
}

/// The admin credential the CLI uses to reach a running gateway: read from the store, created on first
/// use.
pub async fn admin_token(store: &Arc<dyn SecretStore>) -> Result<Secret, StartError> {
    let existing = secrets::blocking(store.clone(), |s| s.get(account::ADMIN_TOKEN)).await?;
    if let Some(secret) = existing {
        return Ok(secret);
    }
    let fresh = secrets::generate(crate::access::ADMIN_PREFIX);
    let value = fresh.clone();
    secrets::blocking(store.clone(), move |s| s.set(account::ADMIN_TOKEN, &value)).await?;
    Ok(fresh)
}

/// The per-install secret that keys every marker: read from the store, created on first use.
pub async fn install_secret(store: &Arc<dyn SecretStore>) -> Result<Secret, StartError> {
    let existing = secrets::blocking(store.clone(), |s| s.get(account::INSTALL_SECRET)).await?;
    if let Some(secret) = existing {
        return Ok(secret);
    }
    let fresh = secrets::generate("");
    let value = fresh.clone();
    secrets::blocking(store.clone(), move |s| s.set(account::INSTALL_SECRET, &value)).await?;
    Ok(fresh)
}
