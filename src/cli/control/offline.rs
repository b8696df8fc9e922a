//! [`Control`] with no gateway running: the config file and the keychain, through the same
//! `control` functions the gateway uses for the same change, so both check it alike. A change is
//! picked up at the next start; what needs a running gateway (a key's test, a login link, pausing) is
//! refused with [`NO_GATEWAY`](super::NO_GATEWAY) and how to start one.

use async_trait::async_trait;

use super::{find_key, Added, Control, KeyAdded, Refusal, NO_GATEWAY};
use crate::api::types::{KeyInfo, KeyTestBody, PoolInfo, SpendBy, SpendReport};
use crate::cli::loaded::Loaded;
use crate::control::pools::{self, PoolChanges};
use crate::control::{self, ControlError, KeyChanges, NewKey};
use crate::digest::InstallKey;
use crate::keys::KeyId;
use crate::pool::HealthState;
use crate::pools::{PoolConfig, ALL};
use crate::secrets::Secret;

/// The config and keychain of one config file.
pub(in crate::cli) struct Offline<'a> {
    loaded: &'a Loaded,
}

impl<'a> Offline<'a> {
    pub(super) fn new(loaded: &'a Loaded) -> Self {
        Self { loaded }
    }
}

impl From<ControlError> for Refusal {
    fn from(e: ControlError) -> Self {
        let failure = e.failure();
        Self { code: Some(failure.code.to_owned()), message: failure.message }
    }
}

/// A pool change, off the async workers: it may write a proxy's login to the keychain, which blocks.
async fn off_thread<T: Send + 'static>(
    change: impl FnOnce() -> Result<T, ControlError> + Send + 'static,
) -> Result<T, Refusal> {
    match tokio::task::spawn_blocking(change).await {
        Ok(done) => Ok(done?),
        Err(e) => Err(Refusal { code: None, message: format!("the change did not finish: {e}") }),
    }
}

/// The refusal of what only a running gateway can do.
pub(super) fn not_running(loaded: &Loaded) -> Refusal {
    Refusal {
        code: Some(NO_GATEWAY.to_owned()),
        message: format!("no Keymux gateway is running with {}; start it with `keymux serve`", loaded.path.display()),
    }
}

/// A token's id from its name or id, as the config lists it (else what was given).
pub(super) fn token_id(loaded: &Loaded, name: &str) -> String {
    let tokens = &loaded.config.tokens;
    tokens.iter().find(|t| t.id == name || t.name.eq_ignore_ascii_case(name)).map_or(name.to_owned(), |t| t.id.clone())
}

#[async_trait]
impl Control for Offline<'_> {
    fn is_running(&self) -> bool {
        false
    }

    async fn kept_in(&self) -> String {
        format!("the config and the {} (no gateway is running: the next start uses it)", self.loaded.store.describe())
    }

    fn base_url(&self) -> Result<String, Refusal> {
        let listen = &self.loaded.config.listen;
        let addr = crate::remote::local_addr(listen)
            .ok_or_else(|| Refusal::message(format!("listen = {listen:?} in the config is not an address")))?;
        Ok(format!("http://{addr}/v1"))
    }

    async fn key_id(&self, label_or_id: &str) -> Result<KeyId, Refusal> {
        find_key(&[], self.loaded, label_or_id)
    }

    async fn live_keys(&self) -> Result<Option<Vec<KeyInfo>>, Refusal> {
        Ok(None)
    }

    async fn add_key(&self, new: NewKey) -> Result<Added, Refusal> {
        let key = match control::store_new_key(&self.loaded.settings(), &[], &new).await {
            Ok(key) => key,
            Err(ControlError::AlreadyPooled(holder)) => {
                let why = ControlError::AlreadyPooled(holder.clone()).to_string();
                return Ok(Added::AlreadyPooled { why, holder });
            }
            Err(e) => return Err(e.into()),
        };
        let install =
            crate::startup::install_secret(&self.loaded.store).await.map_err(|e| Refusal::message(e.to_string()))?;
        let fingerprint = InstallKey::new(&install).fingerprint(&new.provider.get().identity(&new.secret));
        Ok(Added::Ready(KeyAdded { id: key.id.to_string(), fingerprint, org: key.org }))
    }

    async fn remove_key(&self, id: &KeyId) -> Result<String, Refusal> {
        let found = control::forget_key(&self.loaded.settings(), id).await?;
        Ok(found.map_or_else(|| id.to_string(), |k| k.label))
    }

    async fn replace_secret(&self, id: &KeyId, secret: Secret) -> Result<Option<KeyTestBody>, Refusal> {
        control::replace_secret(&self.loaded.settings(), id, &secret).await?;
        Ok(None)
    }

    async fn set_key(&self, id: &KeyId, changes: KeyChanges) -> Result<(), Refusal> {
        control::edit_key(&self.loaded.settings(), id, &changes)?;
        Ok(())
    }

    async fn switch_key(&self, id: &KeyId, on: bool) -> Result<Option<HealthState>, Refusal> {
        control::record_enabled(&self.loaded.settings(), id, on)?;
        Ok(None)
    }

    async fn test_key(&self, _: &KeyId) -> Result<KeyTestBody, Refusal> {
        Err(not_running(self.loaded))
    }

    async fn token_names(&self) -> Result<Vec<String>, Refusal> {
        Ok(self.loaded.config.tokens.iter().map(|t| t.name.clone()).collect())
    }

    async fn create_token(&self, name: &str, pool: &str) -> Result<Secret, Refusal> {
        let now = crate::clock::Clock::system().unix_ms() / 1000;
        Ok(control::store_new_token(&self.loaded.settings(), name, pool, now).await?.1)
    }

    async fn revoke_token(&self, name: &str) -> Result<String, Refusal> {
        Ok(control::forget_token(&self.loaded.settings(), name).await?.name)
    }

    async fn move_token(&self, name: &str, pool: &str) -> Result<String, Refusal> {
        Ok(pools::move_token(&self.loaded.settings(), name, pool)?.pool)
    }

    async fn pools(&self) -> Result<Vec<PoolInfo>, Refusal> {
        let config = &self.loaded.config;
        let builtin = PoolConfig { name: ALL.to_owned(), ..PoolConfig::default() };
        let tokens = |pool: &str| {
            let bound = config.tokens.iter().filter(|t| t.pool.eq_ignore_ascii_case(pool));
            bound.map(|t| t.name.clone()).collect()
        };
        let defined = std::iter::once(&builtin).chain(&config.pools);
        Ok(defined.map(|def| PoolInfo { tokens: tokens(&def.name), ..PoolInfo::defined(def) }).collect())
    }

    async fn create_pool(&self, pool: PoolConfig) -> Result<PoolInfo, Refusal> {
        let settings = self.loaded.settings();
        Ok(PoolInfo::defined(&off_thread(move || pools::create_pool(&settings, pool, &[])).await?))
    }

    async fn change_pool(&self, name: &str, changes: PoolChanges) -> Result<PoolInfo, Refusal> {
        let (settings, name) = (self.loaded.settings(), name.to_owned());
        Ok(PoolInfo::defined(&off_thread(move || pools::change_pool(&settings, &name, &changes, &[])).await?))
    }

    async fn remove_pool(&self, name: &str) -> Result<String, Refusal> {
        let (settings, name) = (self.loaded.settings(), name.to_owned());
        Ok(off_thread(move || pools::remove_pool(&settings, &name, &[])).await?.name)
    }

    async fn login_link(&self) -> Result<String, Refusal> {
        Err(not_running(self.loaded))
    }

    async fn pause(&self, _: bool) -> Result<(), Refusal> {
        Err(not_running(self.loaded))
    }

    async fn spend(&self, _: u32, _: SpendBy) -> Result<Option<SpendReport>, Refusal> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::{ControlError, Refusal};

    /// An offline refusal carries the code the control API would answer with, so a command reads the
    /// same outcome from either side of `Control`.
    #[test]
    fn an_offline_refusal_carries_the_api_error_code() {
        let pooled = Refusal::from(ControlError::AlreadyPooled("work".into()));
        assert_eq!(pooled.code.as_deref(), Some(crate::control::ALREADY_POOLED));
        assert!(pooled.message.contains("'work'"), "{}", pooled.message);
        let missing = Refusal::from(ControlError::NotFound("no token named 'x'".into()));
        assert_eq!(missing.code.as_deref(), Some("not_found"));
        assert_eq!(missing.message, "no token named 'x'");
    }
}
