//! Changing a running gateway without a restart: keys added (the secret goes straight to the keychain,
//! the key is probed and joins the pool), tested, changed, switched on and off, removed (its secret
//! deleted; sessions pinned to it follow the `lost_org` policy); client tokens created (shown once) and
//! revoked (refused at once); pools created, changed and removed (`pools`); routing paused and resumed. The control API, the tray and the CLI all
//! call these; the config file is edited in place, keeping the user's comments (`config_file`).
//!
//! The steps that need no running gateway (checking a new key, storing its secret, writing the config)
//! are also used by the CLI when no gateway runs.

pub mod bodies;
mod error;
pub mod import;
mod key_changes;
pub mod live;
pub(crate) mod login;
pub mod pools;
pub mod setup;

pub use error::{ControlError, ALREADY_POOLED};
pub use key_changes::{apply_changes, KeyChanges, NewKey};

use key_changes::apply_entry_changes;

use crate::config::{Config, KeyConfig, TokenConfig};
use crate::config_file;
use crate::events::{GatewayEvent, KeyChange};
use crate::gateway::Gateway;
use crate::keys::KeyTest;
use crate::keys::{validate_base_url, validate_label, validate_org, KeyEntry, KeyId, KeySource};
use crate::secrets::{self, account, Secret};
use crate::settings::Settings;

/// Checks a new key against the config, and its secret, before anything is stored. The messages never
/// repeat the secret.
pub fn check_new_key(config: &Config, labels_in_use: &[String], new: &NewKey) -> Result<(), ControlError> {
    validate_label(&new.label).map_err(ControlError::Invalid)?;
    if config.find_key(&new.label).is_some() || labels_in_use.iter().any(|l| l.eq_ignore_ascii_case(&new.label)) {
        return Err(ControlError::Invalid(format!(
            "a key labelled '{}' already exists; pick another label",
            new.label
        )));
    }
    if let Some(url) = &new.base_url {
        validate_base_url(url).map_err(ControlError::Invalid)?;
    }
    if let Some(org) = &new.org {
        validate_org(org).map_err(ControlError::Invalid)?;
    }
    new.settings.validate().map_err(ControlError::Invalid)?;
    new.money.validate().map_err(ControlError::Invalid)?;
    new.provider.get().check_new(&new.secret, new.base_url.as_deref()).map_err(ControlError::Invalid)
}

/// The config entry of a new key.
pub fn key_config(id: KeyId, new: &NewKey) -> KeyConfig {
    KeyConfig {
        id,
        label: new.label.clone(),
        provider: new.provider,
        base_url: new.base_url.clone(),
        org: new.org.clone(),
        disabled: false,
        imported: new.imported,
        settings: new.settings.clone(),
        money: new.money,
    }
}

/// Stores a new key's secret and lists it in the config, keeping the two in step (no orphaned secret
/// when the config cannot be written). Used with and without a running gateway.
pub async fn store_new_key(
    settings: &Settings,
    labels_in_use: &[String],
    new: &NewKey,
) -> Result<KeyConfig, ControlError> {
    // A secret pooled already is named before its label is checked: importing the same key (or a plan's
    // account) again is about the key it is, not about the label it asked for.
    let identity = new.provider.get().identity(&new.secret);
    if let Some(holder) = stored_holder(settings, &identity, None).await? {
        return Err(ControlError::AlreadyPooled(holder));
    }
    check_new_key(&settings.config(), labels_in_use, new)?;
    let key = key_config(KeyId::generate(), new);
    let account = account::key(key.id.as_str());
    let value = new.secret.clone();
    secrets::blocking(settings.store().clone(), move |s| s.set(&account, &value)).await?;
    let listed = key.clone();
    if let Err(e) = settings.edit(|doc| config_file::add_key(doc, &listed), |c| c.keys.push(listed.clone())) {
        let account = account::key(key.id.as_str());
        let _ = secrets::blocking(settings.store().clone(), move |s| s.delete(&account)).await;
        return Err(e.into());
    }
    Ok(key)
}

/// The label of the configured key whose keychain secret is `identity` (`Provider::identity`: the
/// secret, or a ChatGPT plan's account) (other than `except`), if any.
async fn stored_holder(
    settings: &Settings,
    identity: &Secret,
    except: Option<&KeyId>,
) -> Result<Option<String>, ControlError> {
    for key in settings.config().keys.into_iter().filter(|k| Some(&k.id) != except) {
        let account = account::key(key.id.as_str());
        let stored = secrets::blocking(settings.store().clone(), move |s| s.get(&account)).await?;
        let held = stored.map(|stored| key.provider.get().identity(&stored));
        if held.is_some_and(|held| held.expose() == identity.expose()) {
            return Ok(Some(key.label));
        }
    }
    Ok(None)
}

/// Replaces a configured key's secret in the keychain, in place: its id, label, settings and pools stay.
/// Used with and without a running gateway.
pub async fn replace_secret(settings: &Settings, id: &KeyId, secret: &Secret) -> Result<KeyConfig, ControlError> {
    let key = settings.config().keys.into_iter().find(|k| &k.id == id).ok_or_else(|| {
        ControlError::Invalid(format!(
            "key {id} is not in the config (a key from the environment): change its KEYMUX_KEY_* variable"
        ))
    })?;
    let provider = key.provider.get();
    let account = account::key(id.as_str());
    let kept = secrets::blocking(settings.store().clone(), move |s| s.get(&account)).await?;
    provider.check_replacement(&key.label, kept.as_ref(), secret).map_err(ControlError::Invalid)?;
    if let Some(holder) = stored_holder(settings, &provider.identity(secret), Some(id)).await? {
        return Err(ControlError::AlreadyPooled(holder));
    }
    let (account, value) = (account::key(id.as_str()), secret.clone());
    secrets::blocking(settings.store().clone(), move |s| s.set(&account, &value)).await?;
    Ok(key)
}

/// Deletes a configured key's secret and its config entry. Used with and without a running gateway.
pub async fn forget_key(settings: &Settings, id: &KeyId) -> Result<Option<KeyConfig>, ControlError> {
    let found = settings.config().keys.into_iter().find(|k| &k.id == id);
    let Some(found) = found else { return Ok(None) };
    let account = account::key(id.as_str());
    secrets::blocking(settings.store().clone(), move |s| s.delete(&account)).await?;
    let gone = id.as_str().to_owned();
    let names = [gone.as_str(), found.label.as_str()];
    settings.edit(
        |doc| {
            config_file::remove_key(doc, &gone)?;
            config_file::rename_in_pools(doc, &names, None)
        },
        |c| {
            c.keys.retain(|k| k.id.as_str() != gone);
            c.rename_in_pools(&names, None);
        },
    )?;
    Ok(Some(found))
}

/// Changes a configured key's settings in the config (a key from the environment has none: `Ok(None)`).
/// Used with and without a running gateway.
pub fn edit_key(settings: &Settings, id: &KeyId, changes: &KeyChanges) -> Result<Option<KeyConfig>, ControlError> {
    let Some(mut key) = settings.config().keys.into_iter().find(|k| &k.id == id) else { return Ok(None) };
    let old_label = key.label.clone();
    apply_changes(&mut key, changes)?;
    let updated = key.clone();
    // Pools name keys by label: a renamed key stays in its pools under its new name.
    let (old_names, new_label) = ([old_label.as_str()], Some(updated.label.as_str()));
    settings.edit(
        |doc| {
            config_file::update_key(doc, &updated)?;
            config_file::rename_in_pools(doc, &old_names, new_label)
        },
        |c| {
            c.keys.iter_mut().filter(|k| k.id == updated.id).for_each(|k| *k = updated.clone());
            c.rename_in_pools(&old_names, new_label);
        },
    )?;
    Ok(Some(key))
}

/// Records a configured key as switched on or off (a key from the environment has no entry:
/// `Ok(None)`). Used with and without a running gateway.
pub fn record_enabled(settings: &Settings, id: &KeyId, enabled: bool) -> Result<Option<KeyConfig>, ControlError> {
    let Some(mut key) = settings.config().keys.into_iter().find(|k| &k.id == id) else { return Ok(None) };
    if key.disabled != enabled {
        return Ok(Some(key));
    }
    key.disabled = !enabled;
    let updated = key.clone();
    settings.edit(
        |doc| config_file::update_key(doc, &updated),
        |c| c.keys.iter_mut().filter(|k| k.id == updated.id).for_each(|k| *k = updated.clone()),
    )?;
    Ok(Some(key))
}

/// Creates a client token: stored in the keychain, listed in the config. Returns it (shown once).
pub async fn store_new_token(
    settings: &Settings,
    name: &str,
    pool: &str,
    created_unix: u64,
) -> Result<(TokenConfig, Secret), ControlError> {
    let token = secrets::generate(crate::tokens::TOKEN_PREFIX);
    Ok((store_token(settings, name, pool, created_unix, false, &token).await?, token))
}

/// Lists a client token named `name` in `pool` with `stored` in the keychain under its id: the token
/// itself, or for a `login` (`oauth`) the digest of its refresh token.
pub async fn store_token(
    settings: &Settings,
    name: &str,
    pool: &str,
    created_unix: u64,
    login: bool,
    stored: &Secret,
) -> Result<TokenConfig, ControlError> {
    validate_label(name).map_err(ControlError::Invalid)?;
    let config = settings.config();
    if config.tokens.iter().any(|t| t.name.eq_ignore_ascii_case(name)) {
        return Err(ControlError::Invalid(format!("a token named '{name}' already exists; pick another name")));
    }
    if !crate::pools::exists(&config.pools, pool) {
        return Err(ControlError::Invalid(crate::pools::unknown_pool(pool)));
    }
    let listed = TokenConfig {
        id: format!("t_{}", &KeyId::generate().as_str()[2..]),
        name: name.to_owned(),
        created_unix,
        pool: pools::canonical(&config.pools, pool),
        login,
    };
    let account = account::token(&listed.id);
    let value = stored.clone();
    secrets::blocking(settings.store().clone(), move |s| s.set(&account, &value)).await?;
    let entry = listed.clone();
    if let Err(e) = settings.edit(|doc| config_file::add_token(doc, &entry), |c| c.tokens.push(entry.clone())) {
        let account = account::token(&listed.id);
        let _ = secrets::blocking(settings.store().clone(), move |s| s.delete(&account)).await;
        return Err(e.into());
    }
    Ok(listed)
}

/// A name for a new client token: `base` when no token has it yet, else `base-2`, `base-3`… (names
/// compare without case, as `store_new_token` does).
pub fn free_token_name(base: &str, taken: &[String]) -> String {
    let free = |name: &str| !taken.iter().any(|t| t.eq_ignore_ascii_case(name));
    if free(base) {
        return base.to_owned();
    }
    let mut n = 2;
    loop {
        let name = format!("{base}-{n}");
        if free(&name) {
            return name;
        }
        n += 1;
    }
}

/// Revokes a client token by id or name: its secret deleted, its config entry removed.
pub async fn forget_token(settings: &Settings, id_or_name: &str) -> Result<TokenConfig, ControlError> {
    let found = settings
        .config()
        .tokens
        .into_iter()
        .find(|t| t.id == id_or_name || t.name.eq_ignore_ascii_case(id_or_name))
        .ok_or_else(|| ControlError::NotFound(format!("no token named '{id_or_name}'; see `keymux token list`")))?;
    let account = account::token(&found.id);
    secrets::blocking(settings.store().clone(), move |s| s.delete(&account)).await?;
    let gone = found.id.clone();
    settings.edit(|doc| config_file::remove_token(doc, &gone), |c| c.tokens.retain(|t| t.id != gone))?;
    Ok(found)
}

impl Gateway {
    /// Adds a key: its secret to the keychain, its entry to the config, the key to the pool (probed,
    /// so its organization is known before the first request).
    pub async fn add_key(&self, new: NewKey) -> Result<KeyId, ControlError> {
        if self.pool().len() >= crate::pool::MAX_KEYS {
            return Err(ControlError::Invalid(format!(
                "the pool already has {} keys, the most it takes",
                crate::pool::MAX_KEYS
            )));
        }
        let labels = self.pool().labels();
        let identity = new.provider.get().identity(&new.secret);
        if let Some(holder) = self.pool().holder_of(&self.markers().digest().fingerprint(&identity)) {
            return Err(ControlError::AlreadyPooled(self.pool().label(&holder)));
        }
        let key = store_new_key(self.settings(), &labels, &new).await?;
        let mut entry = key.entry(new.secret.clone());
        entry.source = KeySource::Keychain;
        self.join(entry);
        let _ = self.test_key(&key.id).await;
        Ok(key.id)
    }

    /// Puts a key into the pool and tells the event stream.
    fn join(&self, entry: KeyEntry) {
        let id = entry.id.clone();
        if self.pool().add(entry) {
            self.refresh_pools();
            self.announce(&id, KeyChange::Added);
        }
    }

    /// Removes a key: from the pool at once (requests it is serving finish), its secret from the
    /// keychain and its entry from the config. A key from the environment leaves the pool until restart.
    pub async fn remove_key(&self, id: &KeyId) -> Result<(), ControlError> {
        let label = self.pool().label(id);
        if !self.pool().ids().contains(id) {
            return Err(ControlError::NotFound(format!("no key {id}; see `keymux keys list`")));
        }
        forget_key(self.settings(), id).await?;
        self.pool().remove(id);
        self.refresh_pools();
        self.announce_as(id, label, KeyChange::Removed);
        Ok(())
    }

    /// Changes a key's settings (label, priority, budget, models), in the pool and in the config.
    pub fn update_key(&self, id: &KeyId, changes: KeyChanges) -> Result<(), ControlError> {
        let in_pool = self.pool().ids().contains(id);
        if !in_pool {
            return Err(ControlError::NotFound(format!("no key {id}; see `keymux keys list`")));
        }
        changes.check()?;
        if let Some(label) = changes.label() {
            let taken = self
                .pool()
                .status(self.clock().now(), self.today())
                .into_iter()
                .any(|k| &k.id != id && k.label.eq_ignore_ascii_case(label));
            if taken {
                return Err(ControlError::Invalid(format!(
                    "a key labelled '{label}' already exists; pick another label"
                )));
            }
        }
        edit_key(self.settings(), id, &changes)?;
        self.pool().update(id, |entry| apply_entry_changes(entry, &changes));
        self.refresh_pools();
        self.announce(id, KeyChange::Updated);
        Ok(())
    }

    /// Gives a key a new secret in place (keychain and pool), and probes it: its health and windows
    /// start afresh, its settings and pools stay.
    pub async fn replace_secret(&self, id: &KeyId, secret: Secret) -> Result<KeyTest, ControlError> {
        let Some(mut entry) = self.pool().entry(id) else {
            return Err(ControlError::NotFound(format!("no key {id}; see `keymux keys list`")));
        };
        if let Some(holder) = self.pool().holder_of(&self.markers().digest().fingerprint(&secret)) {
            if &holder != id {
                return Err(ControlError::AlreadyPooled(self.pool().label(&holder)));
            }
        }
        replace_secret(self.settings(), id, &secret).await?;
        entry.secret = secret;
        self.pool().replace(entry);
        self.announce(id, KeyChange::Updated);
        self.test_key(id).await
    }

    /// Switches a key on or off, in the pool and (for a configured key) in the config, so a restart
    /// keeps it as the user left it.
    pub fn set_enabled(&self, id: &KeyId, enabled: bool) -> Result<(), ControlError> {
        if !self.pool().contains(id) {
            return Err(ControlError::NotFound(format!("no key {id}; see `keymux keys list`")));
        }
        record_enabled(self.settings(), id, enabled)?;
        self.pool().set_disabled(id, !enabled);
        self.announce(id, if enabled { KeyChange::Enabled } else { KeyChange::Disabled });
        Ok(())
    }

    /// Tests a key with one free call (`GET /models`); what it teaches goes to the pool as usual. A
    /// key cooling or resting for quota that the provider now accepts is ready again at once: the user
    /// asked ("Test now" on a cooling key, for a quota that reset early).
    pub async fn test_key(&self, id: &KeyId) -> Result<KeyTest, ControlError> {
        let mut test = crate::pipeline::probe(self, id.clone())
            .await
            .ok_or_else(|| ControlError::NotFound(format!("no key {id}; see `keymux keys list`")))?;
        if test.ok && self.pool().lift_rest(id) {
            test.message.push_str("; its cooldown is lifted, it takes requests again");
            self.announce(id, KeyChange::CoolingEnded);
        }
        Ok(test)
    }

    /// Creates a client token, accepted at once. The token is returned once and never shown again.
    pub async fn create_token(&self, name: &str, pool: &str) -> Result<(TokenConfig, Secret), ControlError> {
        let (listed, token) = store_new_token(self.settings(), name, pool, self.clock().unix_ms() / 1000).await?;
        self.swap_tokens(|set| set.with(&listed.id, &listed.name, &listed.pool, &token));
        self.notify(GatewayEvent::TokenCreated { name: listed.name.clone() });
        Ok((listed, token))
    }

    /// The secret of the client token named `name`, when this gateway lists one and can read it (so a
    /// client set up again keeps the token it has).
    pub async fn token_secret(&self, name: &str) -> Option<Secret> {
        let listed = self.settings().config().tokens.into_iter().find(|t| t.name.eq_ignore_ascii_case(name))?;
        // A login's keychain entry is a digest, not a token to hand out.
        if listed.login {
            return None;
        }
        let account = account::token(&listed.id);
        secrets::blocking(self.settings().store().clone(), move |s| s.get(&account)).await.ok().flatten()
    }

    /// A client token for a client named `base` (`codex`, `pi`): its existing one if there is one,
    /// else a new one under the first free name (`codex`, `codex-2`…).
    pub async fn token_for_client(&self, base: &str) -> Result<Secret, ControlError> {
        if let Some(secret) = self.token_secret(base).await {
            return Ok(secret);
        }
        let taken: Vec<String> = self.settings().config().tokens.into_iter().map(|t| t.name).collect();
        Ok(self.create_token(&free_token_name(base, &taken), crate::pools::ALL).await?.1)
    }

    /// Revokes a client token: refused from the next request on.
    pub async fn revoke_token(&self, id_or_name: &str) -> Result<TokenConfig, ControlError> {
        let gone = forget_token(self.settings(), id_or_name).await?;
        self.swap_tokens(|set| set.without(&gone.id));
        self.logins().forget(&gone.id);
        self.notify(GatewayEvent::TokenRevoked { name: gone.name.clone() });
        Ok(gone)
    }

    /// Pauses routing: new requests get 503 with `retry-after`; streams in flight finish.
    pub fn pause(&self) {
        if !self.set_paused(true) {
            self.notify(GatewayEvent::Paused);
        }
    }

    /// Resumes routing.
    pub fn resume(&self) {
        if self.set_paused(false) {
            self.notify(GatewayEvent::Resumed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_token_takes_the_first_free_name() {
        let taken = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
        assert_eq!(free_token_name("codex", &taken(&["default", "pi"])), "codex");
        assert_eq!(free_token_name("codex", &taken(&["Codex"])), "codex-2");
        assert_eq!(free_token_name("codex", &taken(&["codex", "codex-2", "codex-4"])), "codex-3");
    }
}
