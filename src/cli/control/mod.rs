//! The one interface the CLI's commands change and read Keymux through, [`Control`], with two
//! implementations: [`running::Running`], the gateway that runs with this config (reached through the
//! control API after it has proved who it is; a change takes effect at once), and
//! [`offline::Offline`], the config file and the keychain (a change is picked up at the next start).
//! A command is written once against the trait; which one it gets is decided once, by [`open`].
//!
//! Both answer with the API's own types (`KeyInfo`, `PoolInfo`, `KeyTestBody`…) and fail with one
//! typed [`Refusal`]: its `code` is the control API's error code whichever side refused (offline, the
//! same `ControlError` decides it), so a command reads what happened from the code, never from words.

pub(super) mod offline;
pub(super) mod running;

use async_trait::async_trait;

use super::loaded::Loaded;
use crate::api::types::{KeyInfo, KeyTestBody, PoolInfo, SpendBy, SpendReport};
use crate::control::pools::PoolChanges;
use crate::control::{KeyChanges, NewKey};
use crate::keys::KeyId;
use crate::pool::HealthState;
use crate::pools::PoolConfig;
pub(super) use crate::remote::Refusal;
use crate::secrets::Secret;
use crate::startup::StartError;

/// The code of a refusal that needs a running gateway (testing a key, a login link, pausing).
pub(super) const NO_GATEWAY: &str = "keymux_not_running";

/// A key just added, as the pool now knows it.
pub(super) struct KeyAdded {
    pub(super) id: String,
    /// The keyed fingerprint (never the secret).
    pub(super) fingerprint: String,
    /// Its organization, when known already (given, or said by the provider's answer to the probe).
    pub(super) org: Option<String>,
}

/// What adding a key came to, besides a failure: `keys add` treats all but `Ready` as errors, an import
/// or a setup as news.
pub(super) enum Added {
    /// In the pool, and the provider took it (or has not answered yet, or nobody asked it: offline).
    Ready(KeyAdded),
    /// Its secret is pooled already: the refusal's words, and the label of the key holding it.
    AlreadyPooled { why: String, holder: String },
    /// In the pool, but the provider refused it or could not be reached (what to do).
    Refused(KeyAdded, String),
}

/// Everything the CLI changes or reads, through the running gateway or offline.
#[async_trait]
pub(super) trait Control: Send + Sync {
    /// Whether a gateway runs with this config (a change takes effect at once).
    fn is_running(&self) -> bool;
    /// Where a change is kept, in words ("the running gateway, the config and the OS keychain").
    async fn kept_in(&self) -> String;
    /// The base URL a client reaches Keymux at (`http://127.0.0.1:8787/v1`).
    fn base_url(&self) -> Result<String, Refusal>;

    /// A key's id from its label or id.
    async fn key_id(&self, label_or_id: &str) -> Result<KeyId, Refusal>;
    /// What the running gateway says of each key; `None` when none runs.
    async fn live_keys(&self) -> Result<Option<Vec<KeyInfo>>, Refusal>;
    /// Adds a key (the running gateway probes it first).
    async fn add_key(&self, new: NewKey) -> Result<Added, Refusal>;
    /// Removes a key; its label.
    async fn remove_key(&self, id: &KeyId) -> Result<String, Refusal>;
    /// Replaces a key's secret; what the provider said of the new one, when a gateway asked it.
    async fn replace_secret(&self, id: &KeyId, secret: Secret) -> Result<Option<KeyTestBody>, Refusal>;
    /// Changes a key's label or settings.
    async fn set_key(&self, id: &KeyId, changes: KeyChanges) -> Result<(), Refusal>;
    /// Switches a key on or off; its health now, when a gateway runs.
    async fn switch_key(&self, id: &KeyId, on: bool) -> Result<Option<HealthState>, Refusal>;
    /// Sends a key's test request (a running gateway only).
    async fn test_key(&self, id: &KeyId) -> Result<KeyTestBody, Refusal>;

    /// The client tokens' names.
    async fn token_names(&self) -> Result<Vec<String>, Refusal>;
    /// Creates a client token bound to `pool`; its secret, shown once.
    async fn create_token(&self, name: &str, pool: &str) -> Result<Secret, Refusal>;
    /// Revokes a token by name or id; its name.
    async fn revoke_token(&self, name: &str) -> Result<String, Refusal>;
    /// Binds a token to another pool; the pool's name as Keymux spells it.
    async fn move_token(&self, name: &str, pool: &str) -> Result<String, Refusal>;

    /// Every pool, the built-in `all` first (usable keys: a running gateway only).
    async fn pools(&self) -> Result<Vec<PoolInfo>, Refusal>;
    async fn create_pool(&self, pool: PoolConfig) -> Result<PoolInfo, Refusal>;
    async fn change_pool(&self, name: &str, changes: PoolChanges) -> Result<PoolInfo, Refusal>;
    /// Removes a pool; its name.
    async fn remove_pool(&self, name: &str) -> Result<String, Refusal>;

    /// A one-time dashboard login link (a running gateway only).
    async fn login_link(&self) -> Result<String, Refusal>;
    /// Pauses or resumes routing (a running gateway only).
    async fn pause(&self, paused: bool) -> Result<(), Refusal>;
    /// The spend report; `None` when no gateway runs (the caller reads the metrics store itself).
    async fn spend(&self, days: u32, by: SpendBy) -> Result<Option<SpendReport>, Refusal>;
}

/// The running gateway of this config when one answers and proves who it is, else the config and
/// keychain.
pub(super) async fn open(loaded: &Loaded) -> Result<Box<dyn Control + '_>, StartError> {
    Ok(match running::Running::find(loaded).await? {
        Some(running) => Box::new(running),
        None => Box::new(offline::Offline::new(loaded)),
    })
}

/// A key's id from its label or id among `keys` (the running gateway's), else in the config.
pub(super) fn find_key(keys: &[KeyInfo], loaded: &Loaded, label_or_id: &str) -> Result<KeyId, Refusal> {
    let live = keys
        .iter()
        .map(|k| &k.status)
        .find(|k| k.id.as_str() == label_or_id || k.label.eq_ignore_ascii_case(label_or_id));
    let found = live.map(|k| k.id.clone()).or_else(|| loaded.config.find_key(label_or_id).map(|k| k.id.clone()));
    found.ok_or_else(|| Refusal {
        code: Some("not_found".to_owned()),
        message: format!("no key labelled or with id '{label_or_id}'; see `keymux keys list`"),
    })
}
