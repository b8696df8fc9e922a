//! Credentials kept fresh: before an attempt, a key whose provider says its credential is due for a
//! refresh (`Provider::refresh_call`: a ChatGPT plan's access token with less than five minutes left)
//! is refreshed, one refresh at a time for the whole gateway (an auth server may rotate the refresh
//! token, so two at once would spend it twice). The call goes out the key's own way (its pool's proxy
//! when it has one). The new credential is written to the keychain first (one the keychain lost would
//! be lost at the next start), then to the live pool. Nothing here logs, stores or returns a credential
//! outside the keychain and the pool's entry.

use crate::gateway::Gateway;
use crate::keys::{KeyEntry, KeySource};
use crate::secrets::{self, account};

/// The entry to send an attempt with: `None` to use `entry` as it is (its credential needs no
/// refresh), else the entry with a fresh credential. When a refresh fails, the attempt goes with the
/// credential it has (the provider then says whether it still takes it), and the failure is logged.
pub async fn fresh(gw: &Gateway, entry: &KeyEntry) -> Option<KeyEntry> {
    let now = gw.clock().unix_ms() / 1000;
    entry.provider.get().refresh_call(&entry.secret, gw.upstream().endpoints(), now)?;
    // Boxed: the refresh's state (the lock, an HTTP request) would otherwise be part of every
    // attempt's future, and be copied with it on every request of every key.
    Box::pin(refresh_due(gw, entry)).await
}

/// [`fresh`] for a key whose credential is due.
async fn refresh_due(gw: &Gateway, entry: &KeyEntry) -> Option<KeyEntry> {
    let _one = gw.refreshing().lock().await;
    // Another attempt may have refreshed it while this one waited.
    let current = gw.pool().entry(&entry.id)?;
    let now = gw.clock().unix_ms() / 1000;
    let Some(call) = current.provider.get().refresh_call(&current.secret, gw.upstream().endpoints(), now) else {
        return Some(current);
    };
    match refresh(gw, &current, call).await {
        Ok(entry) => Some(entry),
        Err(why) => {
            tracing::warn!(key = %entry.id, label = %entry.label, error = %why, "could not refresh the key's credential");
            None
        }
    }
}

/// Makes the refresh call, and keeps what it gave: in the keychain first, then in the pool.
async fn refresh(gw: &Gateway, entry: &KeyEntry, call: crate::provider::RefreshCall) -> Result<KeyEntry, String> {
    let provider = entry.provider.get();
    let (status, body) = gw.upstream().refresh(entry, call).await?;
    if !(200..300).contains(&status) {
        return Err(format!("the token endpoint answered {status}; {}", provider.sign_in_again()));
    }
    let secret = provider.refreshed(&entry.secret, &body)?;
    if entry.source == KeySource::Keychain {
        let (store, account, value) = (gw.settings().store().clone(), account::key(entry.id.as_str()), secret.clone());
        secrets::blocking(store, move |s| s.set(&account, &value)).await.map_err(|e| e.to_string())?;
    }
    let expires = provider.plan(&secret).and_then(|p| p.expires_unix).unwrap_or_default();
    gw.pool().update(&entry.id, |e| e.secret = secret);
    tracing::info!(key = %entry.id, label = %entry.label, expires_unix = expires, "refreshed the key's credential");
    gw.pool().entry(&entry.id).ok_or_else(|| "the key left the pool during its refresh".to_owned())
}
