//! [`Control`] through the gateway running with this config: the control API, after the gateway has
//! proved who it is (`remote`). A change takes effect at once, and the gateway writes it to the config
//! and the keychain itself.

use async_trait::async_trait;
use http::Method;

use super::{find_key, Added, Control, KeyAdded, Refusal};
use crate::api::types::{
    CreatedToken, KeyBody, KeyInfo, KeyTestBody, LoginLink, NewSecret, NewToken, PoolInfo, SpendBy, SpendReport,
    StatusBody, TokenChanges, TokenInfo,
};
use crate::cli::loaded::Loaded;
use crate::control::pools::PoolChanges;
use crate::control::{self, KeyChanges, NewKey};
use crate::keys::KeyId;
use crate::pool::HealthState;
use crate::pools::PoolConfig;
use crate::remote::{Found, Remote};
use crate::secrets::Secret;
use crate::startup::StartError;

/// The running gateway of a config, authenticated.
pub(in crate::cli) struct Running<'a> {
    loaded: &'a Loaded,
    remote: Remote,
}

impl<'a> Running<'a> {
    /// The running gateway of this config, if one answers and proves who it is.
    pub(super) async fn find(loaded: &'a Loaded) -> Result<Option<Self>, StartError> {
        let admin = super::super::env_secrets()?.admin_token;
        let found = Remote::find(&loaded.config, &loaded.path, &loaded.store, admin).await;
        match found.map_err(StartError::Usage)? {
            Found::Gateway(remote) => Ok(Some(Self { loaded, remote })),
            Found::Nobody => Ok(None),
        }
    }

    async fn keys(&self) -> Result<Vec<KeyInfo>, Refusal> {
        self.remote.get("/keys").await
    }
}

/// Sends `value` as a request body.
fn body(value: impl serde::Serialize) -> Result<Option<serde_json::Value>, Refusal> {
    serde_json::to_value(value).map(Some).map_err(|e| Refusal::message(e.to_string()))
}

/// What the provider said of a key just added (the gateway probes it before answering).
fn probed(key: KeyInfo) -> Added {
    let status = key.status;
    let added = KeyAdded { id: status.id.to_string(), fingerprint: status.fingerprint, org: status.org };
    let label = &status.label;
    match status.health {
        HealthState::Rejected => {
            let said = status.last_status.map_or_else(|| "no status".to_owned(), |s| s.to_string());
            let why = format!(
                "the provider refused this key ({said}): check it, or `keymux keys set {label} --secret` to replace it"
            );
            Added::Refused(added, why)
        }
        HealthState::Unreachable => {
            let url = status.base_url.as_deref().unwrap_or("the default upstream");
            let why = format!(
                "the provider could not be reached at {url}: check the key's base URL (and the network); Keymux tries \
                 it again in the background, and `keymux keys test {label}` tries at once"
            );
            Added::Refused(added, why)
        }
        HealthState::Ready | HealthState::Cooling | HealthState::QuotaExhausted | HealthState::Disabled => {
            Added::Ready(added)
        }
    }
}

#[async_trait]
impl Control for Running<'_> {
    fn is_running(&self) -> bool {
        true
    }

    async fn kept_in(&self) -> String {
        match self.remote.get::<StatusBody>("/status").await {
            Ok(status) if status.gateway.keychain.kind == "memory" => {
                "the running gateway only (memory: it runs with --ephemeral, so this is gone when it stops)".to_owned()
            }
            Ok(status) => format!("the running gateway, the config and the {}", status.gateway.keychain.kind),
            Err(_) => "the running gateway".to_owned(),
        }
    }

    fn base_url(&self) -> Result<String, Refusal> {
        Ok(format!("{}/v1", self.remote.root()))
    }

    async fn key_id(&self, label_or_id: &str) -> Result<KeyId, Refusal> {
        find_key(&self.keys().await?, self.loaded, label_or_id)
    }

    async fn live_keys(&self) -> Result<Option<Vec<KeyInfo>>, Refusal> {
        self.keys().await.map(Some)
    }

    async fn add_key(&self, new: NewKey) -> Result<Added, Refusal> {
        match self.remote.send(Method::POST, "/keys", Some(new.request_body())).await {
            Ok(key) => Ok(probed(key)),
            Err(e) if e.code.as_deref() == Some(control::ALREADY_POOLED) => {
                let holder = quoted_label(&e.message).unwrap_or_default().to_owned();
                Ok(Added::AlreadyPooled { why: e.message, holder })
            }
            Err(e) => Err(e),
        }
    }

    async fn remove_key(&self, id: &KeyId) -> Result<String, Refusal> {
        let keys = self.keys().await?;
        let label = keys.iter().find(|k| &k.status.id == id).map_or_else(|| id.to_string(), |k| k.status.label.clone());
        self.remote.call(Method::DELETE, &format!("/keys/{id}"), None).await?;
        Ok(label)
    }

    async fn replace_secret(&self, id: &KeyId, secret: Secret) -> Result<Option<KeyTestBody>, Refusal> {
        let body = NewSecret { secret }.request_body();
        self.remote.send(Method::PUT, &format!("/keys/{id}/secret"), Some(body)).await.map(Some)
    }

    async fn set_key(&self, id: &KeyId, changes: KeyChanges) -> Result<(), Refusal> {
        self.remote.call(Method::PATCH, &format!("/keys/{id}"), body(&changes)?).await.map(drop)
    }

    async fn switch_key(&self, id: &KeyId, on: bool) -> Result<Option<HealthState>, Refusal> {
        let action = if on { "enable" } else { "disable" };
        let answer: KeyBody = self.remote.send(Method::POST, &format!("/keys/{id}/{action}"), None).await?;
        Ok(answer.key.map(|k| k.status.health))
    }

    async fn test_key(&self, id: &KeyId) -> Result<KeyTestBody, Refusal> {
        self.remote.send(Method::POST, &format!("/keys/{id}/test"), None).await
    }

    async fn token_names(&self) -> Result<Vec<String>, Refusal> {
        let tokens: Vec<TokenInfo> = self.remote.get("/tokens").await?;
        Ok(tokens.into_iter().map(|t| t.name).collect())
    }

    async fn create_token(&self, name: &str, pool: &str) -> Result<Secret, Refusal> {
        let new = NewToken { name: name.to_owned(), pool: Some(pool.to_owned()) };
        let created: CreatedToken = self.remote.send(Method::POST, "/tokens", body(new)?).await?;
        Ok(Secret::new(created.secret))
    }

    async fn revoke_token(&self, name: &str) -> Result<String, Refusal> {
        let id = super::offline::token_id(self.loaded, name);
        self.remote.call(Method::DELETE, &format!("/tokens/{id}"), None).await?;
        Ok(name.to_owned())
    }

    async fn move_token(&self, name: &str, pool: &str) -> Result<String, Refusal> {
        let id = super::offline::token_id(self.loaded, name);
        let changes = TokenChanges { pool: pool.to_owned() };
        let moved: Option<TokenInfo> =
            self.remote.send(Method::PATCH, &format!("/tokens/{id}"), body(changes)?).await?;
        Ok(moved.map_or_else(|| pool.to_owned(), |t| t.pool))
    }

    async fn pools(&self) -> Result<Vec<PoolInfo>, Refusal> {
        self.remote.get("/pools").await
    }

    async fn create_pool(&self, pool: PoolConfig) -> Result<PoolInfo, Refusal> {
        self.remote.send(Method::POST, "/pools", body(&pool)?).await
    }

    async fn change_pool(&self, name: &str, changes: PoolChanges) -> Result<PoolInfo, Refusal> {
        self.remote.send(Method::PATCH, &format!("/pools/{name}"), body(&changes)?).await
    }

    async fn remove_pool(&self, name: &str) -> Result<String, Refusal> {
        self.remote.call(Method::DELETE, &format!("/pools/{name}"), None).await?;
        Ok(name.to_owned())
    }

    async fn login_link(&self) -> Result<String, Refusal> {
        let link: LoginLink = self.remote.send(Method::POST, "/login-link", None).await?;
        Ok(link.url)
    }

    async fn pause(&self, paused: bool) -> Result<(), Refusal> {
        let path = if paused { "/pause" } else { "/resume" };
        self.remote.call(Method::POST, path, None).await.map(drop)
    }

    async fn spend(&self, days: u32, by: SpendBy) -> Result<Option<SpendReport>, Refusal> {
        let by = serde_json::to_value(by).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
        self.remote.get(&format!("/spend?days={days}&by={by}")).await.map(Some)
    }
}

/// The label a `key_already_pooled` refusal names (`… as key 'LABEL'; …`): labels hold no quotes.
fn quoted_label(message: &str) -> Option<&str> {
    let (_, rest) = message.split_once("as key '")?;
    rest.split_once('\'').map(|(label, _)| label)
}
