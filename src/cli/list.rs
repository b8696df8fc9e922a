//! `keymux keys list`: the configured keys, those from the environment, and what the running gateway
//! says of each.

use super::control::Control;
use super::loaded::Loaded;
use super::{env_secrets, out};

use crate::api::types::KeyInfo;
use crate::digest::InstallKey;
use crate::keys::ProviderId;
use crate::pool::HealthState;
use crate::secrets::{self, account};
use crate::startup::{self, StartError};
use keymux_core::provider::chatgpt::PlanInfo;

pub(super) async fn list_keys(loaded: &Loaded, control: &dyn Control, json: bool) -> Result<(), StartError> {
    let env = env_secrets()?;
    // A gateway whose list cannot be read leaves the config's rows, without their health.
    let live: Option<Vec<KeyInfo>> = control.live_keys().await.ok().flatten();
    let mut pools = loaded.config.pools.clone();
    pools.extend(env.pools.iter().cloned());
    let mut rows = config_rows(loaded, &pools, live.as_deref()).await?;
    rows.extend(env_rows(&env, &pools, live.as_deref()));
    rows.extend(live_only_rows(loaded, &env, live.as_deref()));
    if json {
        let listed: Vec<serde_json::Value> = rows.iter().map(|(r, state)| r.json(*state)).collect();
        out(&serde_json::Value::Array(listed).to_string());
        return Ok(());
    }
    if rows.is_empty() {
        out("no keys yet: add one with `keymux keys add --label work`");
        return Ok(());
    }
    out(&format!(
        "{:<16} {:<14} {:<8} {:<24} {:<11} {:<16} {:<24} STATUS",
        "LABEL", "ID", "PROVIDER", "ORG", "FINGERPRINT", "POOLS", "SETTINGS"
    ));
    for (r, state) in &rows {
        out(&r.line(*state));
    }
    if live.is_none() {
        out(&format!(
            "(no gateway running with {}: health and learned organizations appear while it runs)",
            loaded.path.display()
        ));
    }
    Ok(())
}

/// The rows of the configured keys (their secrets read from the keychain for the fingerprint, and a
/// plan's claims).
async fn config_rows<'k>(
    loaded: &Loaded,
    pools: &[crate::pools::PoolConfig],
    live: Option<&'k [KeyInfo]>,
) -> Result<Vec<(Row, Option<&'k KeyInfo>)>, StartError> {
    let install = match loaded.config.keys.is_empty() {
        true => None,
        false => Some(InstallKey::new(&startup::install_secret(&loaded.store).await?)),
    };
    let mut rows = Vec::with_capacity(loaded.config.keys.len());
    for key in &loaded.config.keys {
        let account = account::key(key.id.as_str());
        let secret = secrets::blocking(loaded.store.clone(), move |s| s.get(&account)).await?;
        let (fp, stored) = match (&secret, &install) {
            (Some(secret), Some(install)) => (install.fingerprint(&key.provider.get().identity(secret)), "in keychain"),
            _ => ("-".to_owned(), "MISSING from keychain"),
        };
        let state = live.and_then(|keys| keys.iter().find(|k| k.status.id == key.id));
        let row = Row {
            label: key.label.clone(),
            id: key.id.as_str().to_owned(),
            provider: key.provider,
            org: key.org.clone(),
            fp,
            pools: pools_of(pools, &key.label, key.id.as_str()),
            settings: key.settings.summary(),
            stored,
            plan: secret.and_then(|s| key.provider.get().plan(&s)),
        };
        rows.push((row, state));
    }
    Ok(rows)
}

/// The rows of the keys this CLI's environment supplies.
fn env_rows<'k>(
    env: &crate::config::EnvSecrets,
    pools: &[crate::pools::PoolConfig],
    live: Option<&'k [KeyInfo]>,
) -> Vec<(Row, Option<&'k KeyInfo>)> {
    let mut rows = Vec::with_capacity(env.keys.len());
    for key in &env.keys {
        let id = format!("env-{}", key.label);
        let state = live.and_then(|keys| keys.iter().find(|k| k.status.id.as_str() == id));
        let row = Row {
            label: key.label.clone(),
            pools: pools_of(pools, &key.label, &id),
            id,
            provider: key.provider,
            org: key.org.clone(),
            fp: "-".to_owned(),
            settings: key.settings.summary(),
            stored: "environment (ephemeral)",
            plan: None,
        };
        rows.push((row, state));
    }
    rows
}

/// The rows of keys only the running gateway holds (a headless gateway's environment keys).
fn live_only_rows<'k>(
    loaded: &Loaded,
    env: &crate::config::EnvSecrets,
    live: Option<&'k [KeyInfo]>,
) -> Vec<(Row, Option<&'k KeyInfo>)> {
    let listed = |id: &str| {
        loaded.config.keys.iter().any(|k| k.id.as_str() == id)
            || env.keys.iter().any(|k| format!("env-{}", k.label) == id)
    };
    let only = live.unwrap_or_default().iter().filter(|k| !listed(k.status.id.as_str()));
    only.map(|key| {
        let k = &key.status;
        let row = Row {
            label: k.label.clone(),
            id: k.id.as_str().to_owned(),
            provider: k.provider,
            org: None,
            fp: k.fingerprint.clone(),
            pools: if key.pools.is_empty() { crate::pools::ALL.to_owned() } else { key.pools.join(",") },
            settings: k.settings.summary(),
            stored: "running gateway only (memory)",
            plan: k.plan.clone(),
        };
        (row, Some(key))
    })
    .collect()
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

/// One key of `keymux keys list`.
struct Row {
    label: String,
    id: String,
    provider: ProviderId,
    org: Option<String>,
    fp: String,
    pools: String,
    settings: String,
    stored: &'static str,
    /// A ChatGPT plan's account and plan type (from its tokens' claims).
    plan: Option<PlanInfo>,
}

impl Row {
    /// Its organization as shown: a plan's account, the configured one, or the one learned.
    fn org_shown(&self, state: Option<&KeyInfo>) -> String {
        if let Some(plan) = &self.plan {
            return format!("{} ({})", plan.account_id, plan.plan_type.as_deref().unwrap_or("plan"));
        }
        self.org
            .clone()
            .or_else(|| state.and_then(|s| s.status.org.as_deref()).map(|o| format!("{o} (learned)")))
            .unwrap_or_else(|| "(learned on first use)".into())
    }

    /// Where it is kept, and what the running gateway says of it.
    fn status(&self, state: Option<&KeyInfo>) -> String {
        let mut status = self.stored.to_owned();
        let Some(s) = state else { return status };
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
        let dropped = s.status.reasoning_dropped;
        if dropped > 0 {
            status.push_str(&format!(", {dropped} answers dropped reasoning"));
        }
        status
    }

    /// Its line.
    fn line(&self, state: Option<&KeyInfo>) -> String {
        let (label, id, fp, pools, settings) = (&self.label, &self.id, &self.fp, &self.pools, &self.settings);
        format!(
            "{label:<16} {id:<14} {:<8} {:<24} {fp:<11} {pools:<16} {settings:<24} {}",
            self.provider.as_str(),
            self.org_shown(state),
            self.status(state)
        )
    }

    /// Its object in `keys list --json` (never a secret).
    fn json(&self, state: Option<&KeyInfo>) -> serde_json::Value {
        serde_json::json!({
            "label": self.label,
            "id": self.id,
            "provider": self.provider,
            "org": self.org.clone().or_else(|| state.and_then(|s| s.status.org.clone())),
            "fingerprint": self.fp,
            "pools": self.pools.split(',').collect::<Vec<_>>(),
            "settings": self.settings,
            "stored": self.stored,
            "health": state.map(|s| health_word(s.status.health)),
            "account_id": self.plan.as_ref().map(|p| &p.account_id),
            "plan_type": self.plan.as_ref().and_then(|p| p.plan_type.as_ref()),
        })
    }
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
