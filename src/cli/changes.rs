//! Key changes, written once against [`Control`]: through the gateway running with this config when
//! there is one (they take effect at once), else in the keychain and the config (picked up at the
//! next start). One place for each change, whoever asks for it (`keys`, `import`, `setup`).

use super::control::{Added, Control};
use super::list::health_word;
use super::loaded::usage;
use super::out;

use crate::control::{KeyChanges, NewKey};
use crate::secrets::Secret;
use crate::startup::StartError;

/// Adds a key and says where it went; what it came to.
pub(super) async fn add_key(control: &dyn Control, new: NewKey) -> Result<Added, StartError> {
    let label = new.label.clone();
    let added = control.add_key(new).await.map_err(usage)?;
    if let Added::Ready(key) | Added::Refused(key, _) = &added {
        out(&format!(
            "added key '{label}' ({}, fingerprint {}) to {}; organization: {}",
            key.id,
            key.fingerprint,
            control.kept_in().await,
            key.org.as_deref().unwrap_or("(learned on first use)"),
        ));
    }
    Ok(added)
}

pub(super) async fn remove_key(control: &dyn Control, label_or_id: &str) -> Result<(), StartError> {
    let id = control.key_id(label_or_id).await.map_err(usage)?;
    let label = control.remove_key(&id).await.map_err(usage)?;
    out(&format!("removed key '{label}' ({id}) from {}", control.kept_in().await));
    Ok(())
}

/// `keys set NAME --secret`: the key keeps its id, label, settings and pools; a running gateway probes
/// the new secret and says what the provider answered.
pub(super) async fn replace_secret(control: &dyn Control, label_or_id: &str, secret: Secret) -> Result<(), StartError> {
    let id = control.key_id(label_or_id).await.map_err(usage)?;
    let test = control.replace_secret(&id, secret).await.map_err(usage)?;
    let kept = control.kept_in().await;
    match test {
        None => out(&format!("replaced the secret of key '{label_or_id}' ({id}) in {kept}")),
        Some(test) => {
            out(&format!("replaced the secret of key '{label_or_id}' ({id}); the provider says: {}", test.message));
            if !test.ok {
                return Err(usage(format!("the new secret did not pass: {}", test.message)));
            }
        }
    }
    Ok(())
}

/// The plan `holder` (the key the same account is pooled as) takes `login` when it is newer than the
/// one Keymux keeps (the user logged in to Codex again); an older copy changes nothing, and says so.
pub(super) async fn renew(control: &dyn Control, holder: &str, login: Secret) -> Result<(), StartError> {
    let id = control.key_id(holder).await.map_err(usage)?;
    match control.replace_secret(&id, login).await {
        Ok(_) => {
            out(&format!("renewed the login of the plan '{holder}': Keymux uses the one you logged in with now"));
            Ok(())
        }
        Err(refusal) => {
            out(&format!("the login is in Keymux's pool already as '{holder}': {refusal}"));
            Ok(())
        }
    }
}

pub(super) async fn set_key(control: &dyn Control, label_or_id: &str, changes: KeyChanges) -> Result<(), StartError> {
    let id = control.key_id(label_or_id).await.map_err(usage)?;
    control.set_key(&id, changes).await.map_err(usage)?;
    out(&format!("updated key '{label_or_id}' ({id}) in {}", control.kept_in().await));
    Ok(())
}

pub(super) async fn switch_key(control: &dyn Control, label_or_id: &str, on: bool) -> Result<(), StartError> {
    let id = control.key_id(label_or_id).await.map_err(usage)?;
    match control.switch_key(&id, on).await.map_err(usage)? {
        Some(health) => out(&format!("key '{label_or_id}' is now {}", health_word(health))),
        None => {
            let state = if on { "on" } else { "off" };
            out(&format!("key '{label_or_id}' ({id}) is {state}, kept in {}", control.kept_in().await));
        }
    }
    Ok(())
}

pub(super) async fn test_key(control: &dyn Control, label_or_id: &str) -> Result<(), StartError> {
    let id = control.key_id(label_or_id).await.map_err(usage)?;
    let test = control.test_key(&id).await.map_err(usage)?;
    let org = test.org.as_deref().map(|o| format!(", organization {o}")).unwrap_or_default();
    out(&format!("{} ({} ms{org})", test.message, test.duration_ms));
    if test.ok {
        Ok(())
    } else {
        Err(usage("the key did not pass"))
    }
}
