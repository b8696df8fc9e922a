//! A key's settings, declared once: [`KeySettings`] (where the router may send it and what it keeps back)
//! beside [`MoneyBudget`] (its budget in money, which pools share). Both are flattened into every shape
//! a key takes, so the config file, the API and the CLI read the same field names from here:
//!
//! * the config file's key (`config::KeyConfig`) and the key as the gateway holds it (`keys::KeyEntry`);
//! * a new key as the API and the CLI send it (`control::NewKey`) and the API's key view
//!   (`pool::KeyStatus`, and through it the dashboard's TypeScript types);
//! * a change, as a [`KeySettingsChange`] (beside `budget::MoneyBudgetChange`): the settings given
//!   replace the key's, `null` clears one that may be absent, the rest stay (see `change`).
//!
//! Fields are always serialized (the API shows every setting); the config file leaves out the ones at
//! their default (`config::defaults::drop_defaults`), as a person writing it would.

use serde::{Deserialize, Serialize};

use crate::change::given;
use crate::quota::{Quota, MAX_RESERVE_WINDOW_PCT};

/// Most models in either of a key's model lists.
pub const MAX_MODELS: usize = 64;
/// Longest model name.
pub const MAX_MODEL_CHARS: usize = 100;

/// What the user set on a key, besides its name, its provider and its budget in money.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
pub struct KeySettings {
    /// Priority tier: unpinned traffic goes to the lowest tier with a usable key (work keys 0, personal
    /// keys 1, say).
    #[serde(default)]
    pub priority: u8,
    /// Soft daily token budget (input + output, UTC day). Over it, unpinned traffic avoids the key;
    /// pinned requests still go (only this key's organization can read them) and the overrun is shown.
    #[serde(default)]
    pub daily_token_budget: Option<u64>,
    /// If not empty, the only models this key is used for.
    #[serde(default)]
    pub models: Vec<String>,
    /// Models this key is never used for.
    #[serde(default)]
    pub exclude_models: Vec<String>,
    /// Percent of the key's request and token windows kept for the sessions already on it (1 to 90):
    /// while less than that is left, the key takes no new sessions, until the window refills.
    #[serde(default)]
    pub reserve_window_pct: Option<u8>,
}

impl KeySettings {
    /// Checks every setting, in the words the config file, the API and the CLI show.
    pub fn validate(&self) -> Result<(), String> {
        validate_models("models", &self.models)?;
        validate_models("exclude_models", &self.exclude_models)?;
        match self.reserve_window_pct {
            Some(p) if p == 0 || p > MAX_RESERVE_WINDOW_PCT => Err(format!(
                "reserve_window_pct = {p} is not a percent from 1 to {MAX_RESERVE_WINDOW_PCT}: it is the share of \
                 the key's request and token windows kept for the sessions already on it (20 keeps the last fifth)"
            )),
            _ => Ok(()),
        }
    }

    /// Whether the user allows this key for `model`.
    pub fn allows(&self, model: &str) -> bool {
        (self.models.is_empty() || self.models.iter().any(|m| m == model))
            && !self.exclude_models.iter().any(|m| m == model)
    }

    /// Whether `used` tokens today reach its soft daily token budget.
    pub fn over_token_budget(&self, used: u64) -> bool {
        self.daily_token_budget.is_some_and(|budget| used >= budget)
    }

    /// The settings in a few words, as `keymux keys list` shows them: `priority 1, budget 5000/day,
    /// only gpt-5.5`.
    pub fn summary(&self) -> String {
        let mut parts = vec![format!("priority {}", self.priority)];
        if let Some(budget) = self.daily_token_budget {
            parts.push(format!("budget {budget}/day"));
        }
        if !self.models.is_empty() {
            parts.push(format!("only {}", self.models.join(",")));
        }
        if !self.exclude_models.is_empty() {
            parts.push(format!("not {}", self.exclude_models.join(",")));
        }
        parts.join(", ")
    }

    /// Until when the key keeps what is left of its windows for its pinned sessions (less than its
    /// reserved share is left now), if it keeps any.
    pub fn window_reserve(&self, quota: &Quota, now: std::time::Instant) -> Option<crate::quota::WindowReserve> {
        self.reserve_window_pct.and_then(|pct| quota.reserve(now, pct))
    }
}

/// Checks one of a key's model lists (named `field`): at most [`MAX_MODELS`] names, each 1 to
/// [`MAX_MODEL_CHARS`] printable characters with no spaces. They are shown in listings, the status API
/// and the dashboard, so none may be huge or carry terminal escapes.
pub fn validate_models(field: &str, models: &[String]) -> Result<(), String> {
    if models.len() > MAX_MODELS {
        return Err(format!("{field} lists {} models; at most {MAX_MODELS} are allowed", models.len()));
    }
    let bad = models.iter().find(|m| m.is_empty() || m.chars().count() > MAX_MODEL_CHARS || !printable_word(m));
    match bad {
        Some(m) => Err(format!(
            "{field}: the model name {:?} must be 1 to {MAX_MODEL_CHARS} printable characters without spaces",
            m.chars().take(40).collect::<String>()
        )),
        None => Ok(()),
    }
}

/// Whether `text` is printable and one word: no control characters (terminal escapes), no spaces.
pub(crate) fn printable_word(text: &str) -> bool {
    text.chars().all(|c| !c.is_control() && !c.is_whitespace())
}

/// A change to a key's settings (see `change`): each field given replaces the setting, `null` clears
/// one that may be absent, fields left out stay. Flattened into a change to a key
/// (`control::KeyChanges`), which the API takes (`PATCH /keys/{id}`) and the CLI builds from its flags.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
#[serde(default, deny_unknown_fields)]
#[ts(optional_fields)]
pub struct KeySettingsChange {
    /// A new priority tier.
    #[serde(deserialize_with = "given", skip_serializing_if = "Option::is_none")]
    pub priority: Option<u8>,
    /// A new soft daily token budget, or none.
    #[serde(deserialize_with = "given", skip_serializing_if = "Option::is_none")]
    pub daily_token_budget: Option<Option<u64>>,
    /// The only models it is used for (empty: every model).
    #[serde(deserialize_with = "given", skip_serializing_if = "Option::is_none")]
    pub models: Option<Vec<String>>,
    /// The models it is never used for.
    #[serde(deserialize_with = "given", skip_serializing_if = "Option::is_none")]
    pub exclude_models: Option<Vec<String>>,
    /// A new share of its windows kept for its sessions, or none.
    #[serde(deserialize_with = "given", skip_serializing_if = "Option::is_none")]
    pub reserve_window_pct: Option<Option<u8>>,
}

impl KeySettingsChange {
    /// Applies the change to `settings` (the values' checks are `KeySettings::validate`'s).
    pub fn apply(&self, settings: &mut KeySettings) {
        let Self { priority, daily_token_budget, models, exclude_models, reserve_window_pct } = self.clone();
        settings.priority = priority.unwrap_or(settings.priority);
        settings.daily_token_budget = daily_token_budget.unwrap_or(settings.daily_token_budget);
        settings.models = models.unwrap_or(std::mem::take(&mut settings.models));
        settings.exclude_models = exclude_models.unwrap_or(std::mem::take(&mut settings.exclude_models));
        settings.reserve_window_pct = reserve_window_pct.unwrap_or(settings.reserve_window_pct);
    }

    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn read(body: Value) -> Result<KeySettingsChange, String> {
        let settable = crate::change::names(&[serde_json::to_value(KeySettings::default()).expect("json")]);
        crate::change::read(body, &settable)
    }

    #[test]
    fn a_change_replaces_what_it_names_clears_nulls_and_keeps_the_rest() {
        let mut settings = KeySettings { priority: 2, daily_token_budget: Some(9), ..KeySettings::default() };
        let change = read(serde_json::json!({ "daily_token_budget": null, "models": ["gpt-5.5"] })).expect("reads");
        change.apply(&mut settings);
        assert_eq!(settings.priority, 2, "kept");
        assert_eq!(settings.daily_token_budget, None, "cleared");
        assert_eq!(settings.models, ["gpt-5.5"], "replaced");
        let back: KeySettingsChange = serde_json::from_value(serde_json::to_value(&change).expect("json")).expect("");
        assert_eq!(back, change, "a clear survives the trip from the CLI to a running gateway");
    }

    #[test]
    fn a_change_names_an_unknown_field_and_a_value_of_the_wrong_type() {
        let e = read(serde_json::json!({ "secret": "sk-x" })).expect_err("unknown");
        assert!(e.contains("unknown field `secret`") && e.contains("priority"), "{e}");
        let e = read(serde_json::json!({ "priority": "high" })).expect_err("text for a number");
        assert!(e.starts_with("priority = \"high\": invalid type"), "{e}");
        let e = read(serde_json::json!({ "priority": null })).expect_err("a priority cannot be absent");
        assert!(e.starts_with("priority = null: invalid type"), "{e}");
        let e = serde_json::from_value::<KeySettingsChange>(serde_json::json!({ "secret": 1 })).expect_err("");
        assert!(e.to_string().contains("unknown field `secret`"), "refused by the type itself too: {e}");
    }

    #[test]
    fn a_change_names_every_setting_and_only_those() {
        let every = serde_json::to_value(KeySettings::default()).expect("json");
        let change: KeySettingsChange = serde_json::from_value(every.clone()).expect("every setting is changeable");
        assert_eq!(serde_json::to_value(change).expect("json"), every, "and each is written back");
    }

    #[test]
    fn model_lists_are_short_and_printable() {
        assert!(validate_models("models", &["gpt-5.5".into(), "ft:gpt-4o:org:x:1".into()]).is_ok());
        assert!(validate_models("models", &vec!["m".to_owned(); MAX_MODELS + 1]).is_err());
        assert!(validate_models("models", &["m".repeat(MAX_MODEL_CHARS + 1)]).is_err());
        let escape = validate_models("models", &["gpt\u{1b}[31m".into()]).expect_err("escape");
        assert!(!escape.contains('\u{1b}'), "the message escapes it: {escape}");
    }

    #[test]
    fn settings_check_their_values() {
        for bad in [0, 91, 100] {
            let e = KeySettings { reserve_window_pct: Some(bad), ..KeySettings::default() }.validate().expect_err("");
            assert!(e.contains(&format!("reserve_window_pct = {bad}")) && e.contains("1 to 90"), "{e}");
        }
        assert!(KeySettings { reserve_window_pct: Some(90), ..KeySettings::default() }.validate().is_ok());
        assert!(KeySettings { models: vec![String::new()], ..KeySettings::default() }.validate().is_err());
        let only = KeySettings { models: vec!["a".into()], exclude_models: vec!["b".into()], ..KeySettings::default() };
        assert!(only.allows("a") && !only.allows("b") && !only.allows("c"));
    }
}
