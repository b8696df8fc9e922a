//! `keymux keys …`, `keymux token …`, `keymux dashboard`, `keymux pause|resume`. Each acts on the
//! gateway running with this config when there is one (through the control API, after the gateway has
//! proved who it is), so the change takes effect at once; with no gateway running, keys and tokens are
//! changed in the keychain and the config, and the next start picks them up.

use std::io::{IsTerminal as _, Read as _};
use std::path::PathBuf;
use std::sync::Arc;

use http::Method;
use serde_json::json;

use super::{env_secrets, out, KeysCommand, TokenCommand};
use crate::api::types::{KeyBody, KeyInfo, KeyTestBody, StatusBody};
use crate::config::Config;
use crate::config_file::ConfigFile;
use crate::control::{self, KeyChanges, NewKey};
use crate::digest::InstallKey;
use crate::keys::{validate_secret, KeyId, Provider};
use crate::pool::HealthState;
use crate::remote::{Found, Remote};
use crate::secrets::{self, account, Secret, SecretStore};
use crate::settings::Settings;
use crate::startup::{self, StartError};

/// The config, its file and the secret store, as the CLI finds them.
pub(super) struct Loaded {
    pub(super) path: PathBuf,
    pub(super) config: Config,
    pub(super) store: Arc<dyn SecretStore>,
}

impl Loaded {
    pub(super) fn settings(&self) -> Settings {
        Settings::new(self.store.clone(), Some(ConfigFile::new(&self.path)), self.config.clone())
    }
}

pub(super) fn load(config_path: Option<PathBuf>) -> Result<Loaded, StartError> {
    let path = match config_path {
        Some(p) => p,
        None => Config::default_path()?,
    };
    let config = Config::load(&path)?;
    let store = startup::open_store(&config, false);
    Ok(Loaded { path, config, store })
}

/// The running gateway of this config, if one answers and proves who it is.
pub(super) async fn remote(loaded: &Loaded) -> Result<Option<Remote>, StartError> {
    let admin = env_secrets()?.admin_token;
    match Remote::find(&loaded.config, &loaded.path, &loaded.store, admin).await.map_err(StartError::Usage)? {
        Found::Gateway(remote) => Ok(Some(remote)),
        Found::Nobody => Ok(None),
    }
}

async fn running(loaded: &Loaded) -> Result<Remote, StartError> {
    remote(loaded).await?.ok_or_else(|| {
        StartError::Usage(format!(
            "no Keymux gateway is running with {}; start it with `keymux serve`",
            loaded.path.display()
        ))
    })
}

pub(super) fn usage(e: impl ToString) -> StartError {
    StartError::Usage(e.to_string())
}

pub(super) async fn keys(config_path: Option<PathBuf>, cmd: KeysCommand) -> Result<(), StartError> {
    let loaded = load(config_path)?;
    match cmd {
        KeysCommand::Add { label, provider, base_url, org, priority, daily_token_budget } => {
            let provider = Provider::parse(&provider)
                .ok_or_else(|| usage(format!("--provider {provider:?}: expected openai or azure")))?;
            let new = NewKey {
                label,
                provider,
                base_url,
                org,
                priority,
                daily_token_budget,
                models: Vec::new(),
                exclude_models: Vec::new(),
                secret: Secret::new(""),
                imported: false,
                daily_budget_usd: None,
                monthly_budget_usd: None,
                reserve_at: None,
                on_limit: None,
                reserve_window_pct: None,
            };
            // Checked before the secret is asked for, so a typo in the label costs no paste.
            control::check_new_key(
                &loaded.config,
                &[],
                &NewKey { secret: Secret::new("sk-placeholder"), ..new.clone() },
            )
            .map_err(usage)?;
            add_key(&loaded, NewKey { secret: read_secret()?, ..new }).await
        }
        KeysCommand::Import { from, yes, remove_plaintext } => {
            super::import::import(&loaded, super::import::ImportArgs { from, yes, remove_plaintext }).await
        }
        KeysCommand::List => list_keys(&loaded).await,
        KeysCommand::Remove { key } => remove_key(&loaded, &key).await,
        KeysCommand::Set {
            key,
            label,
            priority,
            daily_token_budget,
            no_budget,
            models,
            exclude_models,
            secret,
            reserve_window_pct,
            money,
        } => {
            let list = |v: Option<String>| {
                v.map(|v| v.split(',').map(str::trim).filter(|m| !m.is_empty()).map(str::to_owned).collect())
            };
            let budget = if no_budget { Some(None) } else { daily_token_budget.map(Some) };
            let changes = KeyChanges {
                label,
                priority,
                daily_token_budget: budget,
                models: list(models),
                exclude_models: list(exclude_models),
                reserve_window_pct: percent("reserve-window-pct", reserve_window_pct.as_deref(), 90)?,
                ..money_changes(&money)?
            };
            if secret {
                replace_secret(&loaded, &key, read_secret()?).await?;
            }
            let nothing = serde_json::to_value(&changes).is_ok_and(|v| v.as_object().is_some_and(|o| o.is_empty()));
            if nothing && secret {
                return Ok(());
            }
            set_key(&loaded, &key, changes).await
        }
        KeysCommand::Enable { key } => switch_key(&loaded, &key, "enable").await,
        KeysCommand::Disable { key } => switch_key(&loaded, &key, "disable").await,
        KeysCommand::Test { key } => test_key(&loaded, &key).await,
    }
}

pub(super) async fn add_key(loaded: &Loaded, new: NewKey) -> Result<(), StartError> {
    let label = new.label.clone();
    if let Some(remote) = remote(loaded).await? {
        let key: KeyInfo = remote.send(Method::POST, "/keys", Some(new.request_body())).await.map_err(usage)?;
        out(&format!(
            "added key '{label}' ({}, fingerprint {}) to {}; organization: {}",
            key.status.id,
            key.status.fingerprint,
            kept_in(&remote).await,
            key.status.org.as_deref().unwrap_or("(learned on first use)"),
        ));
        return probed(&key);
    }
    let key = control::store_new_key(&loaded.settings(), &[], &new).await.map_err(usage)?;
    let fp = InstallKey::new(&startup::install_secret(&loaded.store).await?).fingerprint(&new.secret);
    out(&format!("added key '{label}' ({}, fingerprint {fp}) to the {}", key.id, loaded.store.describe()));
    Ok(())
}

/// Where a change made through the running gateway is kept, in words: the gateway's store says.
pub(super) async fn kept_in(remote: &Remote) -> String {
    match remote.get::<StatusBody>("/status").await {
        Ok(status) if status.gateway.keychain.kind == "memory" => {
            "the running gateway only (memory: it runs with --ephemeral, so this is gone when it stops)".to_owned()
        }
        Ok(status) => format!("the running gateway, the config and the {}", status.gateway.keychain.kind),
        Err(_) => "the running gateway".to_owned(),
    }
}

/// What the provider said of a key just added (the gateway probes it before answering).
fn probed(key: &KeyInfo) -> Result<(), StartError> {
    let label = &key.status.label;
    match key.status.health {
        HealthState::Rejected => Err(usage(format!(
            "the provider refused this key ({}): check it, or `keymux keys set {label} --secret` to replace it",
            key.status.last_status.map_or_else(|| "no status".to_owned(), |s| s.to_string())
        ))),
        HealthState::Unreachable => Err(usage(format!(
            "the provider could not be reached at {}: check the key's base URL (and the network); Keymux tries it \
             again in the background, and `keymux keys test {label}` tries at once",
            key.status.base_url.as_deref().unwrap_or("the default upstream")
        ))),
        HealthState::Ready | HealthState::Cooling | HealthState::QuotaExhausted | HealthState::Disabled => Ok(()),
    }
}

/// A key's id from its label or id, in the running gateway's list or the config.
fn key_id(keys: &[KeyInfo], config: &Config, label_or_id: &str) -> Result<String, StartError> {
    let found = keys
        .iter()
        .map(|k| &k.status)
        .find(|k| k.id.as_str() == label_or_id || k.label.eq_ignore_ascii_case(label_or_id))
        .map(|k| k.id.to_string())
        .or_else(|| config.find_key(label_or_id).map(|k| k.id.to_string()));
    found.ok_or_else(|| usage(format!("no key labelled or with id '{label_or_id}'; see `keymux keys list`")))
}

pub(super) async fn remove_key(loaded: &Loaded, label_or_id: &str) -> Result<(), StartError> {
    if let Some(remote) = remote(loaded).await? {
        let keys: Vec<KeyInfo> = remote.get("/keys").await.map_err(usage)?;
        let id = key_id(&keys, &loaded.config, label_or_id)?;
        remote.call(Method::DELETE, &format!("/keys/{id}"), None).await.map_err(usage)?;
        out(&format!("removed key '{label_or_id}' ({id}) from {}", kept_in(&remote).await));
        return Ok(());
    }
    let id = KeyId::new(key_id(&[], &loaded.config, label_or_id)?);
    let found = control::forget_key(&loaded.settings(), &id).await.map_err(usage)?;
    let label = found.map_or_else(|| label_or_id.to_owned(), |k| k.label);
    out(&format!("removed key '{label}' ({id})"));
    Ok(())
}

/// `keys set NAME --secret`: the key keeps its id, label, settings and pools; the running gateway
/// probes the new secret and says what the provider answered.
async fn replace_secret(loaded: &Loaded, label_or_id: &str, secret: Secret) -> Result<(), StartError> {
    let Some(remote) = remote(loaded).await? else {
        let id = KeyId::new(key_id(&[], &loaded.config, label_or_id)?);
        control::replace_secret(&loaded.settings(), &id, &secret).await.map_err(usage)?;
        out(&format!(
            "replaced the secret of key '{label_or_id}' ({id}) in the {}; the next start uses it",
            loaded.store.describe()
        ));
        return Ok(());
    };
    let keys: Vec<KeyInfo> = remote.get("/keys").await.map_err(usage)?;
    let id = key_id(&keys, &loaded.config, label_or_id)?;
    let body = json!({ "secret": secret.expose() });
    let test: KeyTestBody = remote.send(Method::PUT, &format!("/keys/{id}/secret"), Some(body)).await.map_err(usage)?;
    out(&format!("replaced the secret of key '{label_or_id}' ({id}); the provider says: {}", test.message));
    if test.ok {
        Ok(())
    } else {
        Err(usage(format!("the new secret did not pass: {}", test.message)))
    }
}

async fn set_key(loaded: &Loaded, label_or_id: &str, changes: KeyChanges) -> Result<(), StartError> {
    if let Some(remote) = remote(loaded).await? {
        let keys: Vec<KeyInfo> = remote.get("/keys").await.map_err(usage)?;
        let id = key_id(&keys, &loaded.config, label_or_id)?;
        let body = serde_json::to_value(&changes).map_err(usage)?;
        remote.call(Method::PATCH, &format!("/keys/{id}"), Some(body)).await.map_err(usage)?;
        out(&format!("updated key '{label_or_id}' ({id}) in {}", kept_in(&remote).await));
        return Ok(());
    }
    let id = KeyId::new(key_id(&[], &loaded.config, label_or_id)?);
    control::edit_key(&loaded.settings(), &id, &changes).map_err(usage)?;
    out(&format!("updated key '{label_or_id}' ({id}); the next start uses it"));
    Ok(())
}

async fn switch_key(loaded: &Loaded, label_or_id: &str, action: &str) -> Result<(), StartError> {
    let Some(remote) = remote(loaded).await? else {
        let id = KeyId::new(key_id(&[], &loaded.config, label_or_id)?);
        control::record_enabled(&loaded.settings(), &id, action == "enable").map_err(usage)?;
        let state = if action == "enable" { "on" } else { "off" };
        out(&format!("key '{label_or_id}' ({id}) is {state} from the next start (no gateway is running)"));
        return Ok(());
    };
    let keys: Vec<KeyInfo> = remote.get("/keys").await.map_err(usage)?;
    let id = key_id(&keys, &loaded.config, label_or_id)?;
    let answer: KeyBody = remote.send(Method::POST, &format!("/keys/{id}/{action}"), None).await.map_err(usage)?;
    let now = answer.key.map_or(action, |k| health_word(k.status.health));
    out(&format!("key '{label_or_id}' is now {now}"));
    Ok(())
}

async fn test_key(loaded: &Loaded, label_or_id: &str) -> Result<(), StartError> {
    let remote = running(loaded).await?;
    let keys: Vec<KeyInfo> = remote.get("/keys").await.map_err(usage)?;
    let id = key_id(&keys, &loaded.config, label_or_id)?;
    let test: KeyTestBody = remote.send(Method::POST, &format!("/keys/{id}/test"), None).await.map_err(usage)?;
    let org = test.org.as_deref().map(|o| format!(", organization {o}")).unwrap_or_default();
    out(&format!("{} ({} ms{org})", test.message, test.duration_ms));
    if test.ok {
        Ok(())
    } else {
        Err(usage("the key did not pass"))
    }
}

async fn list_keys(loaded: &Loaded) -> Result<(), StartError> {
    let env = env_secrets()?;
    let live: Option<Vec<KeyInfo>> = match remote(loaded).await? {
        Some(remote) => remote.get("/keys").await.ok(),
        None => None,
    };
    if loaded.config.keys.is_empty() && env.keys.is_empty() && live.as_ref().is_none_or(Vec::is_empty) {
        out("no keys yet: add one with `keymux keys add --label work`");
        return Ok(());
    }
    let install = match loaded.config.keys.is_empty() {
        true => None,
        false => Some(InstallKey::new(&startup::install_secret(&loaded.store).await?)),
    };
    out(&format!(
        "{:<16} {:<14} {:<8} {:<24} {:<11} {:<16} {:<24} STATUS",
        "LABEL", "ID", "PROVIDER", "ORG", "FINGERPRINT", "POOLS", "SETTINGS"
    ));
    let mut pools = loaded.config.pools.clone();
    pools.extend(env.pools.iter().cloned());
    for key in &loaded.config.keys {
        let account = account::key(key.id.as_str());
        let secret = secrets::blocking(loaded.store.clone(), move |s| s.get(&account)).await?;
        let (fp, stored) = match (&secret, &install) {
            (Some(secret), Some(install)) => (install.fingerprint(secret), "in keychain"),
            _ => ("-".to_owned(), "MISSING from keychain"),
        };
        let state = live.as_ref().and_then(|keys| keys.iter().find(|k| k.status.id == key.id));
        let pools = pools_of(&pools, &key.label, key.id.as_str());
        row(
            Row {
                label: &key.label,
                id: key.id.as_str(),
                provider: key.provider,
                org: key.org.as_deref(),
                fp: &fp,
                pools: &pools,
                settings: &settings_of(key.priority, key.daily_token_budget, &key.models, &key.exclude_models),
                stored,
            },
            state,
        );
    }
    env_rows(&env, &pools, live.as_deref());
    live_only_rows(loaded, &env, live.as_deref());
    if live.is_none() {
        out(&format!(
            "(no gateway running with {}: health and learned organizations appear while it runs)",
            loaded.path.display()
        ));
    }
    Ok(())
}

/// The rows of the keys this CLI's environment supplies.
fn env_rows(env: &crate::config::EnvSecrets, pools: &[crate::pools::PoolConfig], live: Option<&[KeyInfo]>) {
    for key in &env.keys {
        let id = format!("env-{}", key.label);
        let state = live.and_then(|keys| keys.iter().find(|k| k.status.id.as_str() == id));
        let pools = pools_of(pools, &key.label, &id);
        let stored = "environment (ephemeral)";
        row(
            Row {
                label: &key.label,
                id: &id,
                provider: key.provider,
                org: key.org.as_deref(),
                fp: "-",
                pools: &pools,
                settings: &settings_of(key.priority, key.daily_token_budget, &[], &[]),
                stored,
            },
            state,
        );
    }
}

/// The rows of keys only the running gateway holds (a headless gateway's environment keys).
fn live_only_rows(loaded: &Loaded, env: &crate::config::EnvSecrets, live: Option<&[KeyInfo]>) {
    let listed = |id: &str| {
        loaded.config.keys.iter().any(|k| k.id.as_str() == id)
            || env.keys.iter().any(|k| format!("env-{}", k.label) == id)
    };
    for key in live.unwrap_or_default().iter().filter(|k| !listed(k.status.id.as_str())) {
        let k = &key.status;
        row(
            Row {
                label: &k.label,
                id: k.id.as_str(),
                provider: k.provider,
                org: None,
                fp: &k.fingerprint,
                pools: &if key.pools.is_empty() { crate::pools::ALL.to_owned() } else { key.pools.join(",") },
                settings: &settings_of(k.priority, k.daily_token_budget, &k.models, &k.exclude_models),
                stored: "running gateway only (memory)",
            },
            Some(key),
        );
    }
}

/// The user's pools that name a key (by label or id), comma-separated; `all` when none does.
fn pools_of(pools: &[crate::pools::PoolConfig], label: &str, id: &str) -> String {
    let named: Vec<&str> = pools
        .iter()
        .filter(|p| p.keys.iter().any(|k| k == id || k.eq_ignore_ascii_case(label)))
        .map(|p| p.name.as_str())
        .collect();
    if named.is_empty() {
        crate::pools::ALL.to_owned()
    } else {
        named.join(",")
    }
}

/// One line of `keymux keys list`.
struct Row<'a> {
    label: &'a str,
    id: &'a str,
    provider: Provider,
    org: Option<&'a str>,
    fp: &'a str,
    pools: &'a str,
    settings: &'a str,
    stored: &'a str,
}

/// A key's routing settings in a few words: its priority tier, budget and model lists.
fn settings_of(priority: u8, budget: Option<u64>, models: &[String], exclude: &[String]) -> String {
    let mut parts = vec![format!("priority {priority}")];
    if let Some(budget) = budget {
        parts.push(format!("budget {budget}/day"));
    }
    if !models.is_empty() {
        parts.push(format!("only {}", models.join(",")));
    }
    if !exclude.is_empty() {
        parts.push(format!("not {}", exclude.join(",")));
    }
    parts.join(", ")
}

fn row(r: Row<'_>, state: Option<&KeyInfo>) {
    let org = r
        .org
        .map(str::to_owned)
        .or_else(|| state.and_then(|s| s.status.org.as_deref()).map(|o| format!("{o} (learned)")))
        .unwrap_or_else(|| "(learned on first use)".into());
    let mut status = r.stored.to_owned();
    if let Some(s) = state {
        status.push_str(&format!(", {}", health_word(s.status.health)));
        if let Some(until) = s.until_unix_ms {
            let now = crate::clock::Clock::system().unix_ms();
            status.push_str(&format!(" {}s", until.saturating_sub(now).div_ceil(1000)));
        }
        if s.status.health == HealthState::Rejected {
            status.push_str(" (rejected by the provider: replace this key)");
        }
        let odd = s.status.invalid_encrypted_content;
        if odd > 0 {
            status.push_str(&format!(", {odd} invalid_encrypted_content from the provider"));
        }
    }
    let (label, id, fp, pools, settings) = (r.label, r.id, r.fp, r.pools, r.settings);
    out(&format!(
        "{label:<16} {id:<14} {:<8} {org:<24} {fp:<11} {pools:<16} {settings:<24} {status}",
        r.provider.as_str()
    ));
}

/// A key's health as `keymux keys list` prints it: the API's own word for it.
fn health_word(health: HealthState) -> &'static str {
    match health {
        HealthState::Ready => "ready",
        HealthState::Cooling => "cooling",
        HealthState::QuotaExhausted => "quota_exhausted",
        HealthState::Rejected => "rejected",
        HealthState::Disabled => "disabled",
        HealthState::Unreachable => "unreachable",
    }
}

pub(super) async fn token(config_path: Option<PathBuf>, cmd: TokenCommand) -> Result<(), StartError> {
    let loaded = load(config_path)?;
    match cmd {
        TokenCommand::Create { name, pool } => create_token(&loaded, &name, &pool).await,
        TokenCommand::List => {
            if loaded.config.tokens.is_empty() {
                out("no tokens yet: `keymux token create --name codex`");
                return Ok(());
            }
            out(&format!("{:<16} {:<16} POOL", "NAME", "ID"));
            for t in &loaded.config.tokens {
                out(&format!("{:<16} {:<16} {}", t.name, t.id, t.pool));
            }
            Ok(())
        }
        TokenCommand::Set { token, pool } => super::pools::move_token(&loaded, &token, &pool).await,
        TokenCommand::Show { token } => show_token(&loaded, &token).await,
        TokenCommand::Revoke { token } => revoke_token(&loaded, &token).await,
    }
}

async fn create_token(loaded: &Loaded, name: &str, pool: &str) -> Result<(), StartError> {
    let secret = new_token(loaded, remote(loaded).await?.as_ref(), name, pool).await?;
    out(secret.expose());
    let reach = if pool.eq_ignore_ascii_case(crate::pools::ALL) {
        String::new()
    } else {
        format!(" Its requests reach only the keys of the pool '{pool}'.")
    };
    eprintln!(
        "created token '{name}'.{reach} Export it for your client, e.g. `export KEYMUX_TOKEN=$(keymux token show {name})`."
    );
    Ok(())
}

/// Creates a client token bound to `pool`: through the running gateway when there is one (accepted at
/// once), else in the keychain and the config (accepted from the next start).
pub(super) async fn new_token(
    loaded: &Loaded,
    remote: Option<&Remote>,
    name: &str,
    pool: &str,
) -> Result<Secret, StartError> {
    if let Some(remote) = remote {
        let body = json!({ "name": name, "pool": pool });
        let created = remote.call(Method::POST, "/tokens", Some(body)).await.map_err(usage)?;
        return Ok(Secret::new(created["secret"].as_str().unwrap_or_default()));
    }
    let now = crate::clock::Clock::system().unix_ms() / 1000;
    Ok(control::store_new_token(&loaded.settings(), name, pool, now).await.map_err(usage)?.1)
}

async fn show_token(loaded: &Loaded, name: &str) -> Result<(), StartError> {
    let found = loaded
        .config
        .tokens
        .iter()
        .find(|t| t.id == name || t.name.eq_ignore_ascii_case(name))
        .ok_or_else(|| usage(format!("no token named '{name}'; see `keymux token list`")))?;
    let account = account::token(&found.id);
    match secrets::blocking(loaded.store.clone(), move |s| s.get(&account)).await? {
        Some(secret) => {
            out(secret.expose());
            Ok(())
        }
        None => {
            Err(usage(format!("token '{}' is missing from the keychain; revoke it and create a new one", found.name)))
        }
    }
}

/// A token's id from its name or id, as the config lists it (else what was given).
pub(super) fn token_id(config: &Config, name: &str) -> String {
    config
        .tokens
        .iter()
        .find(|t| t.id == name || t.name.eq_ignore_ascii_case(name))
        .map_or(name.to_owned(), |t| t.id.clone())
}

async fn revoke_token(loaded: &Loaded, name: &str) -> Result<(), StartError> {
    if let Some(remote) = remote(loaded).await? {
        let id = token_id(&loaded.config, name);
        remote.call(Method::DELETE, &format!("/tokens/{id}"), None).await.map_err(usage)?;
        out(&format!("revoked token '{name}'; the running gateway refuses it from now on"));
        return Ok(());
    }
    let gone = control::forget_token(&loaded.settings(), name).await.map_err(usage)?;
    out(&format!("revoked token '{}'", gone.name));
    Ok(())
}

pub(super) async fn dashboard(config_path: Option<PathBuf>, open: bool) -> Result<(), StartError> {
    let loaded = load(config_path)?;
    let remote = running(&loaded).await?;
    let link = remote.call(Method::POST, "/login-link", None).await.map_err(usage)?;
    let url = link["url"].as_str().unwrap_or_default().to_owned();
    out(&url);
    if open && !open_browser(&url) {
        // The link is printed: the user can still open it, so this is said, not failed on.
        eprintln!("no browser could be opened here; open the link above in one yourself");
    }
    Ok(())
}

pub(super) async fn pause(config_path: Option<PathBuf>, paused: bool) -> Result<(), StartError> {
    let loaded = load(config_path)?;
    let remote = running(&loaded).await?;
    let path = if paused { "/pause" } else { "/resume" };
    remote.call(Method::POST, path, None).await.map_err(usage)?;
    out(if paused { "routing paused: new requests get 503 until `keymux resume`" } else { "routing resumed" });
    Ok(())
}

/// Opens `url` in the default browser; whether one could be. The opener's own messages (`xdg-open`
/// without a browser prints several) are not passed on: the one line above says it all.
fn open_browser(url: &str) -> bool {
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else if cfg!(windows) {
        "explorer"
    } else {
        "xdg-open"
    };
    let child = std::process::Command::new(opener)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    let Ok(mut child) = child else { return false };
    // An opener that starts the browser itself may keep running as long as the browser does: still
    // running after a few seconds means it opened one.
    for _ in 0..50 {
        match child.try_wait() {
            Ok(Some(status)) => return status.success() || cfg!(windows),
            Ok(None) => std::thread::sleep(std::time::Duration::from_millis(100)),
            Err(_) => return false,
        }
    }
    true
}

/// Reads an API key from a hidden prompt, or from stdin when it is not a terminal.
fn read_secret() -> Result<Secret, StartError> {
    let raw = if std::io::stdin().is_terminal() {
        rpassword::prompt_password("API key (input hidden): ")
            .map_err(|e| usage(format!("cannot read the key: {e}")))?
    } else {
        let mut buf = String::new();
        std::io::stdin()
            .take(4096)
            .read_to_string(&mut buf)
            .map_err(|e| usage(format!("cannot read the key from stdin: {e}")))?;
        buf
    };
    let value = raw.trim_end_matches(['\n', '\r']).trim();
    validate_secret(value).map_err(usage)?;
    Ok(Secret::new(value))
}

/// A percent flag's value (`20`, `20%`), or `none` to remove the setting.
fn percent(flag: &str, value: Option<&str>, most: u8) -> Result<Option<Option<u8>>, StartError> {
    match value {
        None => Ok(None),
        Some(v) if v.eq_ignore_ascii_case("none") => Ok(Some(None)),
        Some(v) => v
            .trim_end_matches('%')
            .parse::<u8>()
            .map(|p| Some(Some(p)))
            .map_err(|_| usage(format!("--{flag} {v:?} is not a percent: give 1 to {most}, or `none`"))),
    }
}

/// The budget changes `keys set` was given: a number of dollars or percent, or `none` to remove one.
pub(super) fn money_changes(money: &super::MoneyArgs) -> Result<KeyChanges, StartError> {
    fn amount(flag: &str, v: &Option<String>) -> Result<Option<Option<crate::spend::Usd>>, StartError> {
        let Some(v) = v else { return Ok(None) };
        if v.eq_ignore_ascii_case("none") {
            return Ok(Some(None));
        }
        let dollars: f64 = v.trim_start_matches('$').parse().map_err(|_| {
            usage(format!("--{flag} {v:?} is not an amount: give US dollars (5, 0.50) or `none` to remove it"))
        })?;
        serde_json::from_value(serde_json::json!(dollars))
            .map(|usd| Some(Some(usd)))
            .map_err(|_| usage(format!("--{flag} {v}: a budget is zero or more US dollars")))
    }
    let reserve_at = percent("reserve-at", money.reserve_at.as_deref(), 100)?;
    let on_limit =
        match money.on_limit.as_deref() {
            None => None,
            Some(v) => Some(serde_json::from_value(serde_json::json!(v.to_ascii_lowercase())).map_err(|_| {
                usage(format!("--on-limit {v:?}: give `reserve` (sessions on the key go on) or `stop`"))
            })?),
        };
    Ok(KeyChanges {
        daily_budget_usd: amount("daily-budget-usd", &money.daily_budget_usd)?,
        monthly_budget_usd: amount("monthly-budget-usd", &money.monthly_budget_usd)?,
        reserve_at,
        on_limit,
        ..KeyChanges::default()
    })
}

#[cfg(test)]
mod tests {
    use super::{health_word, HealthState};

    /// The CLI prints the same word the control API sends (what it printed when it read the JSON).
    #[test]
    fn printed_health_words_are_the_api_words() {
        use HealthState::*;
        for state in [Ready, Cooling, QuotaExhausted, Rejected, Disabled, Unreachable] {
            assert_eq!(serde_json::to_value(state).ok(), Some(serde_json::Value::from(health_word(state))));
        }
    }
}
