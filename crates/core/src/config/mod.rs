//! The config file (TOML, ids and labels only, never secrets) and the environment variables that add
//! ephemeral keys for headless use.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::budget::MoneyBudget;
use crate::key_settings::KeySettings;
use crate::keys::{validate_label, KeyEntry, KeyId, KeySource, ProviderId};
use crate::pools::PoolConfig;
use crate::secrets::Secret;
use crate::spend::{PriceError, PriceOverrides, PriceTable};

pub mod defaults;
mod env;
mod locate;
pub use env::{EnvKey, EnvSecrets, EnvToken};

/// The default OpenAI base URL.
pub const DEFAULT_UPSTREAM: &str = crate::provider::openai::DEFAULT_BASE_URL;
/// The default listen address: loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8787";
/// The default request body cap: Codex histories run to megabytes.
pub const DEFAULT_MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// Why the config could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file exists but could not be read or written.
    #[error("cannot access config file {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML or has an unknown or wrong field.
    #[error("config file {path}{} is invalid: {message}", locate::suffix(*.at))]
    Parse { path: PathBuf, message: String, at: Option<(usize, usize)> },
    /// A value is out of range or inconsistent.
    #[error("config file {path}{}: {message}", locate::suffix(*.at))]
    Invalid { path: PathBuf, message: String, at: Option<(usize, usize)> },
    /// No platform config directory and no `--config`.
    #[error("no config directory found for this user; pass --config PATH")]
    NoConfigDir,
}

/// Per-phase upstream timeouts. There is no timeout on a whole stream: reasoning models stream for minutes.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Timeouts {
    /// TCP and TLS connect.
    pub connect_ms: u64,
    /// From sending the request to the response headers.
    pub first_byte_ms: u64,
    /// Longest silence between two chunks of a streamed body.
    pub idle_ms: u64,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self { connect_ms: 10_000, first_byte_ms: 300_000, idle_ms: 300_000 }
    }
}

/// Routing affinities.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AffinityConfig {
    /// Pin requests that replay encrypted content to the organization that produced it. Switching this
    /// off breaks Codex and pi sessions across organizations; it exists for diagnosis.
    pub encrypted_content: bool,
    /// Bind `previous_response_id` and `/v1/responses/{id}` calls to the key that holds the response.
    pub continuity: bool,
    /// Prefer the key that last served a session's `prompt_cache_key` (or, without one, its prompt
    /// prefix) to a successful end, to keep the session on a warm prompt cache.
    pub prompt_cache: bool,
    /// Most sessions the soft-affinity table remembers.
    pub table_capacity: usize,
    /// Seconds a remembered session lives without being refreshed.
    pub table_ttl_secs: u64,
    /// A remembered key with this many requests in flight, while another candidate has fewer, is left
    /// alone (`target_unavailable`): one hot session must not melt one key.
    pub max_in_flight_per_key: u32,
    /// When that organization has no usable key left: `rescue` (drop the unreadable items and carry on)
    /// or `fail` (answer 409 naming the key).
    pub lost_org: crate::router::LostOrgPolicy,
}

impl Default for AffinityConfig {
    fn default() -> Self {
        Self {
            encrypted_content: true,
            continuity: true,
            prompt_cache: true,
            table_capacity: 50_000,
            table_ttl_secs: 3_600,
            max_in_flight_per_key: 8,
            lost_org: crate::router::LostOrgPolicy::Rescue,
        }
    }
}

/// A key as listed in the config file. Its secret lives in the keychain under `key:<id>`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct KeyConfig {
    /// Stable id.
    pub id: KeyId,
    /// User-chosen label.
    pub label: String,
    /// API dialect.
    #[serde(default)]
    pub provider: ProviderId,
    /// Base URL override.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// Organization set by the user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub org: Option<String>,
    /// Switched off by the user (`keymux keys disable`): kept off across restarts until enabled.
    #[serde(default, skip_serializing_if = "is_false")]
    pub disabled: bool,
    /// Imported from a client's own login (Codex's or pi's `auth.json`, `OPENAI_API_KEY`): a session
    /// begun before Keymux most likely began on this key's organization, so it is tried there first.
    #[serde(default, skip_serializing_if = "is_false")]
    pub imported: bool,
    /// Where the router may send it and what it keeps back (`key_settings`).
    #[serde(flatten)]
    pub settings: KeySettings,
    /// Its budget in money.
    #[serde(flatten)]
    pub money: MoneyBudget,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// A local client token as listed in the config file. The token itself is in the keychain under
/// `token:<id>`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    /// Stable id.
    pub id: String,
    /// User-chosen name ("codex", "pi").
    pub name: String,
    /// Unix seconds at creation, for listings.
    #[serde(default)]
    pub created_unix: u64,
    /// The pool its requests may reach (`all`, the default, is every key).
    #[serde(default = "all_pool", skip_serializing_if = "is_all_pool")]
    pub pool: String,
    /// Issued by a client's login (Codex's `gateway_oauth`) rather than made by the user: the keychain
    /// holds the digest of its refresh token, never a token, and its access tokens live in memory.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub login: bool,
}

fn all_pool() -> String {
    crate::pools::ALL.to_owned()
}

fn is_all_pool(pool: &str) -> bool {
    pool.eq_ignore_ascii_case(crate::pools::ALL)
}

/// The whole config file.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Where the gateway listens.
    pub listen: String,
    /// The upstream base URL for keys that have none of their own.
    pub upstream: String,
    /// The ChatGPT Codex backend a ChatGPT plan's requests go to (`KEYMUX_CHATGPT_BASE_URL` overrides).
    pub chatgpt_base_url: String,
    /// The auth server that refreshes a ChatGPT login (`{url}/oauth/token`; `KEYMUX_CHATGPT_AUTH_URL`
    /// overrides).
    pub chatgpt_auth_url: String,
    /// The keychain service name every secret is stored under.
    pub keychain_service: String,
    /// Request body cap in bytes.
    pub max_body_bytes: usize,
    /// Most upstream attempts for one request (one per key).
    pub max_attempts: usize,
    /// After `insufficient_quota`, how long a key rests before it is tried again (its billing may have
    /// been topped up); `keymux` also clears it on restart.
    pub quota_recheck_secs: u64,
    /// Upstream timeouts.
    pub timeouts: Timeouts,
    /// Where the hashed metrics are kept (default: the platform data directory, `keymux/metrics`;
    /// an ephemeral run keeps them in memory unless this is set).
    pub metrics_dir: Option<PathBuf>,
    /// Days of metrics kept.
    pub metrics_retention_days: u32,
    /// Routing affinities.
    pub affinity: AffinityConfig,
    /// Pooled keys.
    pub keys: Vec<KeyConfig>,
    /// Named sets of keys that client tokens are bound to.
    pub pools: Vec<PoolConfig>,
    /// Local client tokens.
    pub tokens: Vec<TokenConfig>,
    /// The user's prices (`[prices."model"]`, US dollars per 1M tokens, or `alias = "model"`), laid
    /// over the price table Keymux embeds.
    #[serde(skip_serializing_if = "PriceOverrides::is_empty")]
    pub prices: PriceOverrides,
    /// Root certificates (PEM) the upstream client trusts beside the public ones. Never read from the
    /// config file or the environment: only a program that embeds Keymux sets it (its tests, in front
    /// of a local TLS upstream).
    #[serde(skip)]
    pub extra_roots_pem: Vec<String>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: DEFAULT_LISTEN.into(),
            upstream: DEFAULT_UPSTREAM.into(),
            chatgpt_base_url: crate::provider::chatgpt::DEFAULT_BASE_URL.into(),
            chatgpt_auth_url: crate::provider::chatgpt::DEFAULT_AUTH_URL.into(),
            keychain_service: "keymux".into(),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_attempts: 3,
            quota_recheck_secs: 3_600,
            timeouts: Timeouts::default(),
            metrics_dir: None,
            metrics_retention_days: 90,
            affinity: AffinityConfig::default(),
            keys: Vec::new(),
            pools: Vec::new(),
            tokens: Vec::new(),
            prices: PriceOverrides::default(),
            extra_roots_pem: Vec::new(),
        }
    }
}

impl Config {
    /// The base URLs each provider picks its keys' default from.
    pub fn endpoints(&self) -> crate::provider::Endpoints {
        crate::provider::Endpoints {
            api: self.upstream.trim_end_matches('/').to_owned(),
            chatgpt: self.chatgpt_base_url.trim_end_matches('/').to_owned(),
            chatgpt_auth: self.chatgpt_auth_url.trim_end_matches('/').to_owned(),
        }
    }

    /// The platform's default config path (`~/.config/keymux/config.toml` on Linux).
    pub fn default_path() -> Result<PathBuf, ConfigError> {
        dirs::config_dir().map(|d| d.join("keymux").join("config.toml")).ok_or(ConfigError::NoConfigDir)
    }

    /// Loads the file, or the defaults when it does not exist yet.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(source) => return Err(ConfigError::Io { path: path.to_owned(), source }),
        };
        Self::parse(&text, path)
    }

    /// Parses TOML text; `path` is only used in messages.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let config: Self = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: e.message().to_owned(),
            at: e
                .span()
                .map(|span| locate::flattened_value(text, span.start).unwrap_or(locate::line_col(text, span.start))),
        })?;
        config.validate(path)?;
        config.price_table().map_err(|e| ConfigError::Invalid {
            path: path.to_owned(),
            at: e.line_col(text),
            message: e.to_string(),
        })?;
        config.check_pools().map_err(|problem| ConfigError::Invalid {
            path: path.to_owned(),
            at: locate::place(text, &problem.place),
            message: problem.message,
        })?;
        Ok(config)
    }

    /// The embedded price table with this config's `[prices]` over it (the API and the gateway's cost
    /// of every request use it); an error names the model, the field and the fix.
    pub fn price_table(&self) -> Result<PriceTable, PriceError> {
        PriceTable::builtin().with_overrides(&self.prices)
    }

    /// Checks the pools against the keys and the tokens' pools (the API gives the same words).
    pub fn check_pools(&self) -> Result<(), crate::pools::PoolProblem> {
        crate::pools::validate(
            &self.pools,
            |name| self.find_key(name).is_some(),
            self.tokens.iter().map(|t| t.pool.as_str()),
        )
    }

    fn validate(&self, path: &Path) -> Result<(), ConfigError> {
        let invalid = |message: String| ConfigError::Invalid { path: path.to_owned(), message, at: None };
        self.listen
            .parse::<SocketAddr>()
            .map_err(|_| invalid(format!("listen = {:?} is not an IP:port address", self.listen)))?;
        self.check_urls().map_err(&invalid)?;
        if self.max_body_bytes < 1024 {
            return Err(invalid("max_body_bytes must be at least 1024".into()));
        }
        if !(1..=10_000_000).contains(&self.affinity.table_capacity) {
            return Err(invalid("[affinity] table_capacity must be between 1 and 10000000".into()));
        }
        if self.affinity.table_ttl_secs == 0 || self.affinity.max_in_flight_per_key == 0 {
            return Err(invalid("[affinity] table_ttl_secs and max_in_flight_per_key must be at least 1".into()));
        }
        if self.max_attempts == 0 || self.max_attempts > crate::router::MAX_ATTEMPTS {
            return Err(invalid(format!("max_attempts must be between 1 and {}", crate::router::MAX_ATTEMPTS)));
        }
        let mut seen = BTreeMap::new();
        for key in &self.keys {
            validate_label(&key.label).map_err(&invalid)?;
            key.settings.validate().map_err(&invalid)?;
            key.money.validate().map_err(&invalid)?;
            if let Some(org) = &key.org {
                crate::keys::validate_org(org).map_err(&invalid)?;
            }
            if let Some(prev) = seen.insert(key.label.to_ascii_lowercase(), key.id.clone()) {
                return Err(invalid(format!("two keys are labelled {:?} ({} and {})", key.label, prev, key.id)));
            }
        }
        Ok(())
    }

    /// Checks the upstream and every key's base URL (`https://`, or `http://` to this machine only).
    pub fn check_urls(&self) -> Result<(), String> {
        crate::keys::validate_base_url(&self.upstream).map_err(|e| format!("upstream: {e}"))?;
        crate::keys::validate_base_url(&self.chatgpt_base_url).map_err(|e| format!("chatgpt_base_url: {e}"))?;
        crate::keys::validate_base_url(&self.chatgpt_auth_url).map_err(|e| format!("chatgpt_auth_url: {e}"))?;
        for key in &self.keys {
            if let Some(url) = &key.base_url {
                crate::keys::validate_base_url(url).map_err(|e| format!("key {:?}: {e}", key.label))?;
            }
        }
        Ok(())
    }

    /// Writes the file atomically (temp file + rename), creating its directory.
    pub fn save(&self, path: &Path) -> Result<(), ConfigError> {
        let io = |source| ConfigError::Io { path: path.to_owned(), source };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let invalid = |message: String| ConfigError::Invalid { path: path.to_owned(), message, at: None };
        let text = toml::to_string_pretty(self).map_err(|e| invalid(e.to_string()))?;
        let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e: toml_edit::TomlError| invalid(e.to_string()))?;
        for list in ["keys", "pools"] {
            let tables = doc.get_mut(list).and_then(toml_edit::Item::as_array_of_tables_mut);
            tables.into_iter().flat_map(|a| a.iter_mut()).for_each(defaults::drop_defaults);
        }
        let text = doc.to_string();
        let tmp = path.with_extension("toml.tmp");
        std::fs::write(&tmp, text).map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    }

    /// In every pool, replaces the names in `old` (a key's id and label) with `new`, or removes them
    /// (the key was removed): the in-memory twin of `config_file::rename_in_pools`.
    pub fn rename_in_pools(&mut self, old: &[&str], new: Option<&str>) {
        for pool in &mut self.pools {
            let matches = |k: &String| old.iter().any(|o| o.eq_ignore_ascii_case(k));
            match new {
                None => pool.keys.retain(|k| !matches(k)),
                Some(new) => pool.keys.iter_mut().filter(|k| matches(k)).for_each(|k| new.clone_into(k)),
            }
        }
    }

    /// Finds a key by label (case-insensitive) or id.
    pub fn find_key(&self, label_or_id: &str) -> Option<&KeyConfig> {
        self.keys.iter().find(|k| k.id.as_str() == label_or_id || k.label.eq_ignore_ascii_case(label_or_id))
    }
}

impl KeyConfig {
    /// This key's runtime entry, with its secret.
    pub fn entry(&self, secret: Secret) -> KeyEntry {
        KeyEntry {
            base_url: self.base_url.clone(),
            org: self.org.clone(),
            imported: self.imported,
            settings: self.settings.clone(),
            money: self.money,
            ..KeyEntry::new(self.id.clone(), self.label.clone(), self.provider, secret, KeySource::Keychain)
        }
    }
}

#[cfg(test)]
mod tests;
