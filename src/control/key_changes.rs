//! A key's settings as the person adds a key (`NewKey`) and changes one (`KeyChanges`, absent fields
//! kept, `null` cleared), and the one way changes are applied to a config entry or a pool entry.

use serde::Deserialize;

use super::error::ControlError;
use crate::budget::{MoneyBudget, OnLimit};
use crate::config::KeyConfig;
use crate::keys::{validate_label, validate_models, KeyEntry, Provider};
use crate::secrets::Secret;
use crate::spend::Usd;

/// A key to add. The secret is read once and goes straight to the keychain. The CLI sends it to a
/// running gateway whole (`request_body`), so every setting it holds reaches the gateway.
#[derive(Clone, Deserialize, serde::Serialize, ts_rs::TS)]
#[serde(deny_unknown_fields)]
pub struct NewKey {
    /// A short name: work, personal, azure-eu…
    pub label: String,
    /// The API dialect (default OpenAI).
    #[serde(default)]
    pub provider: Provider,
    /// Base URL (required for Azure).
    #[serde(default)]
    pub base_url: Option<String>,
    /// The key's organization, if known (otherwise learned from the provider).
    #[serde(default)]
    pub org: Option<String>,
    /// Priority tier (lower first).
    #[serde(default)]
    pub priority: u8,
    /// Soft daily token budget.
    #[serde(default)]
    pub daily_token_budget: Option<u64>,
    /// If not empty, the only models this key serves.
    #[serde(default)]
    pub models: Vec<String>,
    /// Models this key never serves.
    #[serde(default)]
    pub exclude_models: Vec<String>,
    /// US dollars per local day (see `budget`).
    #[serde(default)]
    #[ts(optional, type = "number | null")]
    pub daily_budget_usd: Option<Usd>,
    /// US dollars per local month.
    #[serde(default)]
    #[ts(optional, type = "number | null")]
    pub monthly_budget_usd: Option<Usd>,
    /// Percent of a budget past which the key takes no new sessions.
    #[serde(default)]
    #[ts(optional)]
    pub reserve_at: Option<u8>,
    /// At 100 % of a budget: keep serving pinned sessions (the default), or stop.
    #[serde(default)]
    #[ts(optional)]
    pub on_limit: Option<OnLimit>,
    /// Percent of its rate-limit windows kept for the sessions already on it (1 to 90).
    #[serde(default)]
    #[ts(optional)]
    pub reserve_window_pct: Option<u8>,
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
            provider: Provider::default(),
            base_url: None,
            org: None,
            priority: 0,
            daily_token_budget: None,
            models: Vec::new(),
            exclude_models: Vec::new(),
            daily_budget_usd: None,
            monthly_budget_usd: None,
            reserve_at: None,
            on_limit: None,
            reserve_window_pct: None,
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

/// Changes to a key's settings; absent fields stay as they are.
#[derive(Clone, Debug, Default, Deserialize, serde::Serialize, ts_rs::TS)]
#[serde(deny_unknown_fields)]
pub struct KeyChanges {
    /// A new label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// A new priority tier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u8>,
    /// A new daily budget (`null` removes it).
    #[serde(default, with = "double_option", skip_serializing_if = "Option::is_none")]
    #[ts(optional, type = "number | null")]
    pub daily_token_budget: Option<Option<u64>>,
    /// The only models this key serves (empty: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub models: Option<Vec<String>>,
    /// Models this key never serves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclude_models: Option<Vec<String>>,
    /// A new daily budget in US dollars (`null` removes it).
    #[serde(default, with = "double_option", skip_serializing_if = "Option::is_none")]
    #[ts(optional, type = "number | null")]
    pub daily_budget_usd: Option<Option<Usd>>,
    /// A new monthly budget in US dollars (`null` removes it).
    #[serde(default, with = "double_option", skip_serializing_if = "Option::is_none")]
    #[ts(optional, type = "number | null")]
    pub monthly_budget_usd: Option<Option<Usd>>,
    /// A new reserve threshold, percent (`null`: reserve only at 100 %).
    #[serde(default, with = "double_option", skip_serializing_if = "Option::is_none")]
    #[ts(optional, type = "number | null")]
    pub reserve_at: Option<Option<u8>>,
    /// What happens at 100 %.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub on_limit: Option<OnLimit>,
    /// A new share of its rate-limit windows kept for its pinned sessions, percent (`null`: none).
    #[serde(default, with = "double_option", skip_serializing_if = "Option::is_none")]
    #[ts(optional, type = "number | null")]
    pub reserve_window_pct: Option<Option<u8>>,
}

impl KeyChanges {
    /// Checks every field given, before anything is changed.
    pub fn check(&self) -> Result<(), ControlError> {
        if let Some(label) = &self.label {
            validate_label(label).map_err(ControlError::Invalid)?;
        }
        for (field, models) in [("models", &self.models), ("exclude_models", &self.exclude_models)] {
            if let Some(models) = models {
                validate_models(field, models).map_err(ControlError::Invalid)?;
            }
        }
        crate::budget::validate_reserve_at(self.reserve_at.flatten()).map_err(ControlError::Invalid)?;
        crate::quota::validate_reserve_window_pct(self.reserve_window_pct.flatten()).map_err(ControlError::Invalid)
    }
}

/// Tells a missing field (keep) from an explicit `null` (clear).
pub(super) mod double_option {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer, T: Serialize>(v: &Option<Option<T>>, s: S) -> Result<S::Ok, S::Error> {
        // Only called for `Some` (absent fields are skipped): `Some(None)` is an explicit `null`.
        v.as_ref().and_then(Option::as_ref).serialize(s)
    }

    pub fn deserialize<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
    where
        D: Deserializer<'de>,
        T: Deserialize<'de>,
    {
        Option::<T>::deserialize(d).map(Some)
    }
}

impl KeyChanges {
    /// Applies the changes to a key's settings, wherever they are kept (config entry or pool entry).
    fn apply_to(
        &self,
        label: &mut String,
        priority: &mut u8,
        budget: &mut Option<u64>,
        models: &mut Vec<String>,
        exclude: &mut Vec<String>,
        money: &mut MoneyBudget,
    ) {
        self.apply_money(money);
        if let Some(new) = &self.label {
            label.clone_from(new);
        }
        if let Some(new) = self.priority {
            *priority = new;
        }
        if let Some(new) = self.daily_token_budget {
            *budget = new;
        }
        if let Some(new) = &self.models {
            models.clone_from(new);
        }
        if let Some(new) = &self.exclude_models {
            exclude.clone_from(new);
        }
    }
}

impl KeyChanges {
    /// The budget in money after these changes.
    fn apply_money(&self, money: &mut MoneyBudget) {
        if let Some(new) = self.daily_budget_usd {
            money.daily = new;
        }
        if let Some(new) = self.monthly_budget_usd {
            money.monthly = new;
        }
        if let Some(new) = self.reserve_at {
            money.reserve_at = new;
        }
        if let Some(new) = self.on_limit {
            money.on_limit = new;
        }
    }
}

pub(super) fn apply_changes(key: &mut KeyConfig, changes: &KeyChanges) {
    let mut money = key.money();
    changes.apply_to(
        &mut key.label,
        &mut key.priority,
        &mut key.daily_token_budget,
        &mut key.models,
        &mut key.exclude_models,
        &mut money,
    );
    key.set_money(money);
    if let Some(new) = changes.reserve_window_pct {
        key.reserve_window_pct = new;
    }
}

pub(super) fn apply_entry_changes(entry: &mut KeyEntry, changes: &KeyChanges) {
    changes.apply_to(
        &mut entry.label,
        &mut entry.priority,
        &mut entry.daily_token_budget,
        &mut entry.models,
        &mut entry.exclude_models,
        &mut entry.money,
    );
    if let Some(new) = changes.reserve_window_pct {
        entry.reserve_window_pct = new;
    }
}
