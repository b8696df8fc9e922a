//! A key as the person adds one (`NewKey`) and changes one (`KeyChanges`: its label, and the typed
//! changes of its settings and budget, absent fields kept, `null` cleared), and the one way changes are
//! applied to a config entry or a pool entry. The settings themselves are declared once, in `key_settings`.

use serde::{Deserialize, Serialize};

use super::error::ControlError;
use crate::budget::{MoneyBudget, MoneyBudgetChange};
use crate::change::{self, given};
use crate::config::KeyConfig;
use crate::key_settings::{KeySettings, KeySettingsChange};
use crate::keys::{validate_label, KeyEntry, ProviderId};
use crate::secrets::Secret;

/// A key to add. The secret is read once and goes straight to the keychain. The CLI sends it to a
/// running gateway whole (`request_body`), so every setting it holds reaches the gateway.
#[derive(Clone, Deserialize, Serialize, ts_rs::TS)]
#[serde(deny_unknown_fields)]
pub struct NewKey {
    /// A short name: work, personal, azure-eu…
    pub label: String,
    /// The provider it talks to (default OpenAI).
    #[serde(default)]
    pub provider: ProviderId,
    /// Base URL (required for Azure).
    #[serde(default)]
    pub base_url: Option<String>,
    /// The key's organization, if known (otherwise learned from the provider).
    #[serde(default)]
    pub org: Option<String>,
    /// Its settings (all at their default when left out).
    #[serde(flatten)]
    pub settings: KeySettings,
    /// Its budget in money.
    #[serde(flatten)]
    pub money: MoneyBudget,
    /// The API key.
    #[ts(type = "string")]
    pub secret: Secret,
    /// Found in a client's own login by an import: the organizations of such keys are looked at first
    /// for a session that began before Keymux. `keymux keys import` sets it, offline or through a
    /// running gateway (the dashboard's import sets it in the gateway, so its type leaves it out).
    #[serde(default)]
    #[ts(skip)]
    pub imported: bool,
}

impl NewKey {
    /// An OpenAI key with every setting at its default, as an import adds one.
    pub fn openai(label: String, secret: Secret) -> Self {
        Self {
            label,
            provider: ProviderId::default(),
            base_url: None,
            org: None,
            settings: KeySettings::default(),
            money: MoneyBudget::default(),
            secret,
            imported: false,
        }
    }

    /// An OpenAI key found in a client's own login (Codex's or pi's files, `OPENAI_API_KEY`).
    pub fn imported(label: String, secret: Secret) -> Self {
        Self { imported: true, ..Self::openai(label, secret) }
    }

    /// The body `POST /keys` takes for this key: every field as serialized, and the secret in clear,
    /// the one place it is (sent over loopback to the running gateway, with the admin credential).
    pub fn request_body(&self) -> serde_json::Value {
        let mut body = serde_json::to_value(self).unwrap_or_else(|_| serde_json::json!({}));
        body["secret"] = serde_json::Value::String(self.secret.expose().to_owned());
        body
    }
}

impl std::fmt::Debug for NewKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewKey").field("label", &self.label).field("provider", &self.provider).finish_non_exhaustive()
    }
}

/// Changes to a key: a new label, settings and budget in money, each field as its setting names it
/// (`PATCH /keys/{id}` takes it as a JSON object, read by [`KeyChanges::read`]; the CLI builds it from its
/// flags). Fields left out stay as they are; `null` removes a setting that may be absent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, ts_rs::TS)]
#[serde(default, deny_unknown_fields)]
#[ts(optional_fields)]
pub struct KeyChanges {
    /// A new label.
    #[serde(deserialize_with = "given", skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Changes to its settings.
    #[serde(flatten)]
    pub settings: KeySettingsChange,
    /// Changes to its budget in money.
    #[serde(flatten)]
    pub money: MoneyBudgetChange,
}

impl KeyChanges {
    /// Reads the changes a person sent: refused, naming the field, when one is not a key's setting or
    /// its value is not of the setting's type.
    pub fn read(body: serde_json::Value) -> Result<Self, ControlError> {
        let label = serde_json::json!({ "label": "" });
        let views = [label, json(&KeySettings::default()), json(&MoneyBudget::default())];
        change::read(body, &change::names(&views)).map_err(ControlError::Invalid)
    }

    /// The new label, if the changes give one.
    pub fn label(&self) -> Option<&str> {
        self.label.as_deref()
    }

    /// Whether they change nothing.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Checks every value given before anything is changed.
    pub fn check(&self) -> Result<(), ControlError> {
        self.applied(Changeable {
            label: "key".into(),
            settings: KeySettings::default(),
            money: MoneyBudget::default(),
        })
        .map(drop)
    }

    /// `key` with the changes: refused, naming the setting, if a value is wrong.
    fn applied(&self, mut key: Changeable) -> Result<Changeable, ControlError> {
        if let Some(label) = &self.label {
            key.label.clone_from(label);
        }
        self.settings.apply(&mut key.settings);
        self.money.apply(&mut key.money);
        validate_label(&key.label).map_err(ControlError::Invalid)?;
        key.settings.validate().map_err(ControlError::Invalid)?;
        key.money.validate().map_err(ControlError::Invalid)?;
        Ok(key)
    }
}

/// What of a key a change touches.
struct Changeable {
    label: String,
    settings: KeySettings,
    money: MoneyBudget,
}

/// A setting's serialized view (its fields' names are what a change may give).
fn json(value: &impl Serialize) -> serde_json::Value {
    serde_json::to_value(value).unwrap_or_default()
}

/// Applies changes to a key's config entry: refused, changing nothing, if a value is wrong.
pub fn apply_changes(key: &mut KeyConfig, changes: &KeyChanges) -> Result<(), ControlError> {
    let current = Changeable { label: key.label.clone(), settings: key.settings.clone(), money: key.money };
    let new = changes.applied(current)?;
    (key.label, key.settings, key.money) = (new.label, new.settings, new.money);
    Ok(())
}

/// Applies checked changes to a key as the pool holds it (`check` has passed: a change that fails here
/// changes nothing).
pub(super) fn apply_entry_changes(entry: &mut KeyEntry, changes: &KeyChanges) {
    let current = Changeable { label: entry.label.clone(), settings: entry.settings.clone(), money: entry.money };
    if let Ok(new) = changes.applied(current) {
        (entry.label, entry.settings, entry.money) = (new.label, new.settings, new.money);
    }
}

#[cfg(test)]
mod tests;
