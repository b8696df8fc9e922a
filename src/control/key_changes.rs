//! A key as the person adds one (`NewKey`) and changes one (`KeyChanges`: a `Patch` of its label and
//! settings, absent fields kept, `null` cleared), and the one way changes are applied to a config
//! entry or a pool entry. The settings themselves are declared once, in `key_settings`.

use serde::{Deserialize, Serialize};

use super::error::ControlError;
use crate::budget::MoneyBudget;
use crate::config::KeyConfig;
use crate::key_settings::{KeySettings, Patch};
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

/// Changes to a key: a new label, settings and budget in money, by name (`PATCH /keys/{id}` takes it as
/// a JSON object, the CLI builds it from its flags). Absent fields stay as they are; `null` removes a
/// setting that may be absent.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(transparent)]
pub struct KeyChanges(pub Patch);

/// What of a key a change may touch.
#[derive(Serialize, Deserialize)]
struct Changeable {
    label: String,
    #[serde(flatten)]
    settings: KeySettings,
    #[serde(flatten)]
    money: MoneyBudget,
}

impl KeyChanges {
    /// The new label, if the changes give one.
    pub fn label(&self) -> Option<&str> {
        self.0.get("label").and_then(serde_json::Value::as_str)
    }

    /// Checks every field given (its name, type and value) before anything is changed.
    pub fn check(&self) -> Result<(), ControlError> {
        self.applied(Changeable {
            label: "key".into(),
            settings: KeySettings::default(),
            money: MoneyBudget::default(),
        })
        .map(drop)
    }

    /// `key` with the changes: refused, naming the field, if one is unknown or its value wrong.
    fn applied(&self, key: Changeable) -> Result<Changeable, ControlError> {
        let new = self.0.apply(&key).map_err(ControlError::Invalid)?;
        validate_label(&new.label).map_err(ControlError::Invalid)?;
        new.settings.validate().map_err(ControlError::Invalid)?;
        new.money.validate().map_err(ControlError::Invalid)?;
        Ok(new)
    }
}

/// Applies changes to a key's config entry: refused, changing nothing, if a field is unknown or a value
/// wrong.
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
