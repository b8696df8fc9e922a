//! A ChatGPT plan's login kept fresh: before an attempt on a plan key, its access token is refreshed
//! once it has less than `chatgpt::REFRESH_AHEAD_SECS` left, by one refresh at a time (the auth server
//! rotates the refresh token, so two at once would spend it twice), and the new login is written back
//! to the keychain and to the live pool. Nothing here logs, stores or returns a token outside the
//! keychain and the pool's entry.

use keymux_core::chatgpt::Login;

use crate::gateway::Gateway;
use crate::keys::{KeyEntry, KeySource, Provider};
use crate::secrets::{self, account};

/// One refresh at a time, for every plan key of the gateway.
#[derive(Default)]
pub struct Refresher {
    lock: tokio::sync::Mutex<()>,
}

/// The entry to send an attempt with: `None` to use `entry` as it is (not a plan key, or its token
/// has time left), else the entry with a fresh login. When a refresh fails, the attempt goes with the
/// login it has (the backend then says whether it still takes it), and the failure is logged.
pub async fn fresh(gw: &Gateway, entry: &KeyEntry) -> Option<KeyEntry> {
    if entry.provider != Provider::Chatgpt {
        return None;
    }
    // Boxed: the refresh's state (a login, the lock, an HTTP request) would otherwise be part of every
    // attempt's future, and be copied with it on every request of every key.
    Box::pin(fresh_plan(gw, entry)).await
}

/// [`fresh`] for a plan key.
async fn fresh_plan(gw: &Gateway, entry: &KeyEntry) -> Option<KeyEntry> {
    let now = || gw.clock().unix_ms() / 1000;
    let login = Login::from_secret(&entry.secret).ok()?;
    if !login.needs_refresh(now()) {
        return None;
    }
    let _one = gw.refresher().lock.lock().await;
    // Another attempt may have refreshed it while this one waited.
    let current = gw.pool().entry(&entry.id)?;
    let login = Login::from_secret(&current.secret).ok()?;
    if !login.needs_refresh(now()) {
        return Some(current);
    }
    match refresh(gw, &current, &login).await {
        Ok(entry) => Some(entry),
        Err(why) => {
            tracing::warn!(key = %entry.id, label = %entry.label, error = %why, "could not refresh the ChatGPT login");
            None
        }
    }
}

/// Asks the auth server for new tokens, and keeps them: in the keychain first (a login the keychain
/// lost would be lost at the next start), then in the pool.
async fn refresh(gw: &Gateway, entry: &KeyEntry, login: &Login) -> Result<KeyEntry, String> {
    let (status, body) = gw.upstream().refresh_login(login.refresh_body()).await?;
    if !(200..300).contains(&status) {
        return Err(format!(
            "the auth server answered {status}; log in to Codex again and run `keymux keys import --chatgpt`"
        ));
    }
    let next = login.refreshed(&body)?;
    let secret = next.to_secret();
    if entry.source == KeySource::Keychain {
        let (store, account, value) = (gw.settings().store().clone(), account::key(entry.id.as_str()), secret.clone());
        secrets::blocking(store, move |s| s.set(&account, &value)).await.map_err(|e| e.to_string())?;
    }
    gw.pool().update(&entry.id, |e| e.secret = secret);
    let expires = next.expires_unix().unwrap_or_default();
    tracing::info!(key = %entry.id, label = %entry.label, expires_unix = expires, "refreshed the ChatGPT login");
    gw.pool().entry(&entry.id).ok_or_else(|| "the key left the pool during its refresh".to_owned())
}
