//! The config file is live: a valid hand edit is applied like the equivalent command (keys changed,
//! added, removed, switched off; tokens moved to another pool or revoked; pools; prices), and logged. An edit
//! that does not parse or check is refused with the file, line and column, and the running settings
//! stay. Settings only a start reads (the address, timeouts, affinity) are said to wait for a restart.
//!
//! The runtime reads the file again every few seconds ([`RELOAD_EVERY`]); Keymux's own writes read
//! back as no change.

use std::time::Duration;

use crate::config::{Config, KeyConfig};
use crate::events::{GatewayEvent, KeyChange};
use crate::gateway::Gateway;
use crate::keys::KeySource;
use crate::secrets::{self, account};

/// How often the config file is read again.
pub const RELOAD_EVERY: Duration = Duration::from_secs(2);

impl Gateway {
    /// Reads the config file again and applies what changed; what happened, in words (empty when
    /// nothing did).
    pub async fn reload_config(&self) -> Vec<String> {
        match self.settings().reload() {
            Ok(None) => Vec::new(),
            Ok(Some((before, after))) => {
                self.notices().config_valid();
                let done = self.apply_config(&before, &after).await;
                tracing::info!(changes = ?done, "the config file changed and was applied");
                self.notify(GatewayEvent::ConfigApplied { changes: done.clone() });
                done
            }
            Err(e) => self.refuse_config(e.to_string()),
        }
    }

    /// A refused edit is said once per distinct problem, not every few seconds.
    fn refuse_config(&self, message: String) -> Vec<String> {
        if self.notices().config_refused(&message) {
            tracing::error!("{message}; the running settings stay. Fix the file and save it again");
            self.notify(GatewayEvent::ConfigRefused { message: message.clone() });
        }
        vec![message]
    }

    async fn apply_config(&self, before: &Config, after: &Config) -> Vec<String> {
        let mut done = Vec::new();
        for key in &after.keys {
            match before.keys.iter().find(|k| k.id == key.id) {
                Some(old) if old == key => {}
                Some(old) => done.push(self.key_edited(old, key)),
                None => done.push(self.key_listed(key).await),
            }
        }
        for gone in before.keys.iter().filter(|k| !after.keys.iter().any(|n| n.id == k.id)) {
            let keychain = self.pool().entry(&gone.id).is_some_and(|e| e.source == KeySource::Keychain);
            if keychain && self.pool().remove(&gone.id) {
                self.announce_as(&gone.id, gone.label.clone(), KeyChange::Removed);
                done.push(format!("key '{}' removed (its secret stays in the keychain)", gone.label));
            }
        }
        done.extend(self.tokens_edited(before, after).await);
        if before.pools != after.pools {
            done.push("pools changed".to_owned());
        }
        // The settings made the new price table with the config; requests finishing from now on use it.
        if before.prices != after.prices {
            done.push("prices changed".to_owned());
        }
        self.refresh_pools();
        done.extend(needs_restart(before, after));
        done
    }

    fn key_edited(&self, old: &KeyConfig, key: &KeyConfig) -> String {
        // The entry the file describes, with the secret the key already has.
        self.pool().update(&key.id, |entry| *entry = key.entry(entry.secret.clone()));
        if old.disabled != key.disabled {
            self.pool().set_disabled(&key.id, key.disabled);
            self.announce(&key.id, if key.disabled { KeyChange::Disabled } else { KeyChange::Enabled });
        } else {
            self.announce(&key.id, KeyChange::Updated);
        }
        format!("key '{}' updated", key.label)
    }

    async fn key_listed(&self, key: &KeyConfig) -> String {
        let account = account::key(key.id.as_str());
        match secrets::blocking(self.settings().store().clone(), move |s| s.get(&account)).await {
            Ok(Some(secret)) => {
                if self.pool().add(key.entry(secret)) {
                    self.pool().set_disabled(&key.id, key.disabled);
                    self.announce(&key.id, KeyChange::Added);
                }
                format!("key '{}' added", key.label)
            }
            Ok(None) | Err(_) => format!(
                "key '{}' is listed but its secret is not in the {}: add it with `keymux keys add --label {}`",
                key.label,
                self.settings().store().describe(),
                key.label
            ),
        }
    }

    async fn tokens_edited(&self, before: &Config, after: &Config) -> Vec<String> {
        let mut done = Vec::new();
        for token in &after.tokens {
            match before.tokens.iter().find(|t| t.id == token.id) {
                Some(old) if old.pool != token.pool => {
                    self.swap_tokens(|set| set.moved(&token.id, &token.pool));
                    done.push(format!("token '{}' moved to the pool '{}'", token.name, token.pool));
                }
                Some(_) => {}
                None if token.login => {
                    // A login copied in by hand: its client logs in again (no refresh token is taken over).
                    self.swap_tokens(|set| set.awaiting(&token.id, &token.name, &token.pool));
                }
                None => {
                    let account = account::token(&token.id);
                    let found = secrets::blocking(self.settings().store().clone(), move |s| s.get(&account)).await;
                    if let Ok(Some(secret)) = found {
                        self.swap_tokens(|set| set.with(&token.id, &token.name, &token.pool, &secret));
                        done.push(format!("token '{}' accepted", token.name));
                    }
                }
            }
        }
        for gone in before.tokens.iter().filter(|t| !after.tokens.iter().any(|n| n.id == t.id)) {
            self.swap_tokens(|set| set.without(&gone.id));
            self.logins().forget(&gone.id);
            done.push(format!("token '{}' no longer accepted", gone.name));
        }
        done
    }
}

/// The settings a start reads once, named when an edit changed them.
fn needs_restart(before: &Config, after: &Config) -> Vec<String> {
    let changed = [
        ("listen", before.listen != after.listen),
        ("upstream", before.upstream != after.upstream),
        ("keychain_service", before.keychain_service != after.keychain_service),
        ("max_body_bytes", before.max_body_bytes != after.max_body_bytes),
        ("max_attempts", before.max_attempts != after.max_attempts),
        ("quota_recheck_secs", before.quota_recheck_secs != after.quota_recheck_secs),
        ("[timeouts]", before.timeouts != after.timeouts),
        ("[affinity]", before.affinity != after.affinity),
        ("metrics_dir", before.metrics_dir != after.metrics_dir),
        ("metrics_retention_days", before.metrics_retention_days != after.metrics_retention_days),
    ];
    changed
        .into_iter()
        .filter(|(_, changed)| *changed)
        .map(|(name, _)| format!("{name} changed: it takes effect at the next start"))
        .collect()
}
