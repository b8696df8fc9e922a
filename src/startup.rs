//! Assembles a running gateway from the config file, the keychain and the environment. Used by
//! `keymux serve` and by the tray app, so both start the same way and report the same problems.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use crate::config::{Config, ConfigError, EnvSecrets, TokenConfig};
use crate::gateway::Gateway;
use crate::keys::{KeyEntry, KeyId, KeySource};
use crate::markers::Markers;
use crate::secrets::{self, account, KeychainStore, MemoryStore, Secret, SecretStore, SecretsError};
use crate::tokens::{TokenSet, TOKEN_PREFIX};
use crate::upstream::UpstreamError;

/// How to start.
#[derive(Clone, Debug, Default)]
pub struct StartOptions {
    /// Config file path (`None`: the platform default).
    pub config_path: Option<PathBuf>,
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
    /// Something the user must change.
    #[error("{0}")]
    Usage(String),
}

/// A gateway ready to serve.
pub struct Prepared {
    /// The gateway.
    pub gateway: Arc<Gateway>,
    /// Where to listen.
    pub listen: SocketAddr,
    /// The config file used.
    pub config_path: PathBuf,
    /// Non-fatal problems to tell the user about.
    pub notices: Vec<String>,
    /// How many keys are pooled.
    pub keys: usize,
}

/// Opens the store a config names: the OS keychain, or memory when ephemeral.
pub fn open_store(config: &Config, ephemeral: bool) -> Arc<dyn SecretStore> {
    if ephemeral {
        Arc::new(MemoryStore::default())
    } else {
        Arc::new(KeychainStore::new(config.keychain_service.clone()))
    }
}

/// Loads everything and builds the gateway.
pub async fn prepare(options: StartOptions) -> Result<Prepared, StartError> {
    let config_path = match options.config_path.clone() {
        Some(p) => p,
        None => Config::default_path()?,
    };
    let mut config = Config::load(&config_path)?;
    if let Some(upstream) = &options.upstream {
        if !(upstream.starts_with("http://") || upstream.starts_with("https://")) {
            return Err(StartError::Usage(format!("--upstream {upstream:?} must start with http:// or https://")));
        }
        config.upstream = upstream.trim_end_matches('/').to_owned();
    }
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

    let mut notices = Vec::new();
    let store = open_store(&config, options.ephemeral);
    let needs_keychain = !options.ephemeral;

    // Keys kept in the keychain.
    let mut entries: Vec<KeyEntry> = Vec::new();
    let mut keychain_ok = needs_keychain;
    for key in &config.keys {
        let account = account::key(&key.id);
        match secrets::blocking(store.clone(), move |s| s.get(&account)).await {
            Ok(Some(secret)) => entries.push(KeyEntry {
                base_url: key.base_url.clone(),
                org: key.org.clone(),
                priority: key.priority,
                daily_token_budget: key.daily_token_budget,
                models: key.models.clone(),
                exclude_models: key.exclude_models.clone(),
                ..KeyEntry::new(key.id.clone(), key.label.clone(), key.provider, secret, KeySource::Keychain)
            }),
            Ok(None) => notices.push(format!(
                "key '{}' ({}) has no secret in the {}; it is left out. Re-add it with `keymux keys remove {}` and `keymux keys add --label {}`.",
                key.label, key.id, store.describe(), key.label, key.label
            )),
            Err(e) => {
                if options.env.keys.is_empty() {
                    return Err(e.into());
                }
                notices.push(format!("{e}; continuing with the keys from the environment only"));
                keychain_ok = false;
                break;
            }
        }
    }

    // Keys from the environment: ephemeral, never written anywhere.
    for env_key in &options.env.keys {
        if entries.iter().any(|e| e.label.eq_ignore_ascii_case(&env_key.label)) {
            return Err(StartError::Usage(format!(
                "KEYMUX_KEY_{} names label '{}', which the config already uses; pick another label",
                env_key.label.to_ascii_uppercase(),
                env_key.label
            )));
        }
        entries.push(KeyEntry {
            base_url: env_key.base_url.clone(),
            org: env_key.org.clone(),
            priority: env_key.priority,
            daily_token_budget: env_key.daily_token_budget,
            ..KeyEntry::new(
                KeyId::new(format!("env-{}", env_key.label)),
                env_key.label.clone(),
                env_key.provider,
                env_key.secret.clone(),
                KeySource::Environment,
            )
        });
    }
    if entries.len() > crate::router::MAX_KEYS {
        return Err(StartError::Usage(format!(
            "{} keys configured; Keymux pools at most {}",
            entries.len(),
            crate::router::MAX_KEYS
        )));
    }
    if entries.is_empty() {
        notices.push(
            "no API keys yet: add one with `keymux keys add --label work` (requests get a clear error until then)"
                .into(),
        );
    }

    // Local client tokens.
    let mut tokens: Vec<Secret> = options.env.client_token.iter().cloned().collect();
    if keychain_ok {
        for token in &config.tokens {
            let account = account::token(&token.id);
            match secrets::blocking(store.clone(), move |s| s.get(&account)).await {
                Ok(Some(secret)) => tokens.push(secret),
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
        if tokens.is_empty() {
            let token = create_token(&store, &mut config, "default").await?;
            config.save(&config_path)?;
            tokens.push(token);
            notices.push(
                "created the local client token 'default'; print it with `keymux token show default` and give it to Codex or pi"
                    .into(),
            );
        }
    }
    if tokens.is_empty() {
        return Err(StartError::Usage(
            "no local client token: set KEYMUX_CLIENT_TOKEN (headless) or run `keymux token create` with a keychain available".into(),
        ));
    }

    let install = match (&options.env.install_secret, keychain_ok) {
        (Some(secret), _) => secret.clone(),
        (None, true) => install_secret(&store).await?,
        (None, false) => {
            notices.push(
                "markers are keyed by a secret that lives only in this process: sessions started now lose \
                 their key pins when Keymux restarts (set KEYMUX_INSTALL_SECRET to keep them)"
                    .into(),
            );
            secrets::generate("")
        }
    };
    let keys = entries.len();
    // Ephemeral runs write nothing unless a metrics directory is named explicitly.
    let metrics_dir = config
        .metrics_dir
        .clone()
        .or_else(|| (!options.ephemeral).then(|| dirs::data_dir().map(|d| d.join("keymux").join("metrics"))).flatten());
    let metrics = match &metrics_dir {
        Some(dir) => crate::metrics::Metrics::open(dir, config.metrics_retention_days),
        None => crate::metrics::Metrics::in_memory(),
    };
    if let Some(error) = metrics.status().error {
        notices.push(error);
    }
    let gateway = Gateway::new(&config, entries, TokenSet::new(&tokens), Markers::new(&install))?.with_metrics(metrics);
    Ok(Prepared { gateway: Arc::new(gateway), listen, config_path, notices, keys })
}

/// Creates a local client token named `name`, stores it, and lists it in `config` (not saved here).
pub async fn create_token(store: &Arc<dyn SecretStore>, config: &mut Config, name: &str) -> Result<Secret, StartError> {
    if config.tokens.iter().any(|t| t.name.eq_ignore_ascii_case(name)) {
        return Err(StartError::Usage(format!("a token named '{name}' already exists")));
    }
    crate::keys::validate_label(name).map_err(StartError::Usage)?;
    let token = secrets::generate(TOKEN_PREFIX);
    let id = format!("t_{}", &KeyId::generate().as_str()[2..]);
    let account = account::token(&id);
    let value = token.clone();
    secrets::blocking(store.clone(), move |s| s.set(&account, &value)).await?;
    config.tokens.push(TokenConfig {
        id,
        name: name.to_owned(),
        created_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    });
    Ok(token)
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
