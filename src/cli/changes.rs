//! Key and token changes made through the gateway running with this config when there is one (through
//! the control API, after it has proved who it is), so they take effect at once; with no gateway
//! running, in the keychain and the config, picked up at the next start. One place for each change,
//! whoever asks for it (`keys`, `import`, `setup`, `tokens`, `pools`).

use http::Method;

use super::list::health_word;
use super::loaded::{kept_in, remote, running, usage, Loaded};
use super::out;

use crate::api::types::{KeyBody, KeyInfo, KeyTestBody};
use crate::config::Config;
use crate::control::{self, KeyChanges, NewKey};
use crate::digest::InstallKey;
use crate::keys::KeyId;
use crate::pool::HealthState;
use crate::remote::Remote;
use crate::secrets::Secret;
use crate::startup::{self, StartError};

/// What adding a key came to, besides a failure: `keys add` treats all but `Added` as errors, an import
/// or a setup as news.
pub(super) enum Added {
    /// In the pool, and the provider took it (or has not answered yet).
    Ready,
    /// Its secret is pooled already, as this key (the refusal's words).
    AlreadyPooled(String),
    /// In the pool, but the provider refused it (what to do).
    Refused(String),
}

/// Adds a key, to the running gateway or, without one, to the keychain and the config.
pub(super) async fn add_key(loaded: &Loaded, new: NewKey) -> Result<Added, StartError> {
    let label = new.label.clone();
    if let Some(remote) = remote(loaded).await? {
        let key: KeyInfo = match remote.send(Method::POST, "/keys", Some(new.request_body())).await {
            Ok(key) => key,
            Err(e) if e.code.as_deref() == Some(control::ALREADY_POOLED) => return Ok(Added::AlreadyPooled(e.message)),
            Err(e) => return Err(usage(e)),
        };
        out(&format!(
            "added key '{label}' ({}, fingerprint {}) to {}; organization: {}",
            key.status.id,
            key.status.fingerprint,
            kept_in(&remote).await,
            key.status.org.as_deref().unwrap_or("(learned on first use)"),
        ));
        return probed(&key);
    }
    let key = match control::store_new_key(&loaded.settings(), &[], &new).await {
        Ok(key) => key,
        Err(e @ control::ControlError::AlreadyPooled(_)) => return Ok(Added::AlreadyPooled(e.to_string())),
        Err(e) => return Err(usage(e)),
    };
    let fp = InstallKey::new(&startup::install_secret(&loaded.store).await?).fingerprint(&new.secret);
    out(&format!("added key '{label}' ({}, fingerprint {fp}) to the {}", key.id, loaded.store.describe()));
    Ok(Added::Ready)
}

/// What the provider said of a key just added (the gateway probes it before answering).
pub(super) fn probed(key: &KeyInfo) -> Result<Added, StartError> {
    let label = &key.status.label;
    match key.status.health {
        HealthState::Rejected => Ok(Added::Refused(format!(
            "the provider refused this key ({}): check it, or `keymux keys set {label} --secret` to replace it",
            key.status.last_status.map_or_else(|| "no status".to_owned(), |s| s.to_string())
        ))),
        HealthState::Unreachable => Err(usage(format!(
            "the provider could not be reached at {}: check the key's base URL (and the network); Keymux tries it \
             again in the background, and `keymux keys test {label}` tries at once",
            key.status.base_url.as_deref().unwrap_or("the default upstream")
        ))),
        HealthState::Ready | HealthState::Cooling | HealthState::QuotaExhausted | HealthState::Disabled => {
            Ok(Added::Ready)
        }
    }
}

/// A key's id from its label or id, in the running gateway's list or the config.
pub(super) fn key_id(keys: &[KeyInfo], config: &Config, label_or_id: &str) -> Result<String, StartError> {
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
pub(super) async fn replace_secret(loaded: &Loaded, label_or_id: &str, secret: Secret) -> Result<(), StartError> {
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
    let body = crate::api::types::NewSecret { secret }.request_body();
    let test: KeyTestBody = remote.send(Method::PUT, &format!("/keys/{id}/secret"), Some(body)).await.map_err(usage)?;
    out(&format!("replaced the secret of key '{label_or_id}' ({id}); the provider says: {}", test.message));
    if test.ok {
        Ok(())
    } else {
        Err(usage(format!("the new secret did not pass: {}", test.message)))
    }
}

pub(super) async fn set_key(loaded: &Loaded, label_or_id: &str, changes: KeyChanges) -> Result<(), StartError> {
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

pub(super) async fn switch_key(loaded: &Loaded, label_or_id: &str, action: &str) -> Result<(), StartError> {
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

pub(super) async fn test_key(loaded: &Loaded, label_or_id: &str) -> Result<(), StartError> {
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

/// Creates a client token bound to `pool`: through the running gateway when there is one (accepted at
/// once), else in the keychain and the config (accepted from the next start).
pub(super) async fn new_token(
    loaded: &Loaded,
    remote: Option<&Remote>,
    name: &str,
    pool: &str,
) -> Result<Secret, StartError> {
    if let Some(remote) = remote {
        let new = crate::api::types::NewToken { name: name.to_owned(), pool: Some(pool.to_owned()) };
        let body = serde_json::to_value(new).map_err(usage)?;
        let created: crate::api::types::CreatedToken =
            remote.send(Method::POST, "/tokens", Some(body)).await.map_err(usage)?;
        return Ok(Secret::new(created.secret));
    }
    let now = crate::clock::Clock::system().unix_ms() / 1000;
    Ok(control::store_new_token(&loaded.settings(), name, pool, now).await.map_err(usage)?.1)
}

/// A token's id from its name or id, as the config lists it (else what was given).
pub(super) fn token_id(config: &Config, name: &str) -> String {
    config
        .tokens
        .iter()
        .find(|t| t.id == name || t.name.eq_ignore_ascii_case(name))
        .map_or(name.to_owned(), |t| t.id.clone())
}
