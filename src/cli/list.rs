//! `keymux keys list`: the configured keys, those from the environment, and what the running gateway
//! says of each.

use super::control::Control;
use super::loaded::Loaded;
use super::{env_secrets, out};

use crate::api::types::KeyInfo;
use crate::digest::InstallKey;
use crate::keys::Provider;
use crate::pool::HealthState;
use crate::secrets::{self, account};
use crate::startup::{self, StartError};

pub(super) async fn list_keys(loaded: &Loaded, control: &dyn Control) -> Result<(), StartError> {
    let env = env_secrets()?;
    // A gateway whose list cannot be read leaves the config's rows, without their health.
    let live: Option<Vec<KeyInfo>> = control.live_keys().await.ok().flatten();
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
                settings: &key.settings.summary(),
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
                settings: &key.settings.summary(),
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
                settings: &k.settings.summary(),
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
pub(super) fn health_word(health: HealthState) -> &'static str {
    match health {
        HealthState::Ready => "ready",
        HealthState::Cooling => "cooling",
        HealthState::QuotaExhausted => "quota_exhausted",
        HealthState::Rejected => "rejected",
        HealthState::Disabled => "disabled",
        HealthState::Unreachable => "unreachable",
    }
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
