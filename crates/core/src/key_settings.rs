//! A key's settings, declared once: [`KeySettings`] (where the router may send it and what it keeps back)
//! beside [`MoneyBudget`] (its budget in money, which pools share). Both are flattened into every shape
//! a key takes, so the config file, the API and the CLI read the same field names from here:
//!
//! * the config file's key (`config::KeyConfig`) and the key as the gateway holds it (`keys::KeyEntry`);
//! * a new key as the API and the CLI send it (`control::NewKey`) and the API's key view
//!   (`pool::KeyStatus`, and through it the dashboard's TypeScript types);
//! * a change, as a [`Patch`]: the settings given replace the key's, `null` clears one that may be
//!   absent, the rest stay. One `apply` checks the fields' names, types and values for keys and pools.
//!
//! Fields are always serialized (the API shows every setting); the config file leaves out the ones at
//! their default ([`drop_defaults`]), as a person writing it would.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

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

/// Changes to settings: each field given replaces the setting, `null` clears one that may be absent,
/// fields left out stay. The API takes it as a JSON object (`PATCH /keys/{id}`, `PATCH /pools/{name}`),
/// the CLI builds it from its flags, and [`Patch::apply`] is the one place it is checked and applied.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Patch(Map<String, Value>);

impl Patch {
    /// Sets `field` to `value` (`None` serializes as `null`: clear it).
    pub fn set(&mut self, field: &str, value: impl Serialize) {
        let value = serde_json::to_value(value).unwrap_or(Value::Null);
        self.0.insert(field.to_owned(), value);
    }

    /// Adds `other`'s changes (its value wins for a field both give).
    pub fn extend(&mut self, other: Patch) {
        self.0.extend(other.0);
    }

    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The value given for `field`, if any.
    pub fn get(&self, field: &str) -> Option<&Value> {
        self.0.get(field)
    }

    /// `current` with the changes applied: refused, naming the field, if a field is not one of
    /// `current`'s (the fields it serializes) or a value is not of the field's type. The values' own
    /// checks (`validate`) are the caller's, on the whole result.
    pub fn apply<T: Serialize + DeserializeOwned>(&self, current: &T) -> Result<T, String> {
        let Ok(Value::Object(fields)) = serde_json::to_value(current) else {
            return Err("these settings cannot be changed".into());
        };
        if let Some(unknown) = self.0.keys().find(|f| !fields.contains_key(*f)) {
            let known: Vec<&str> = fields.keys().map(String::as_str).collect();
            return Err(format!(
                "unknown field `{unknown}`: the settings that can be changed are {}",
                known.join(", ")
            ));
        }
        let mut merged = fields.clone();
        merged.extend(self.0.iter().map(|(f, v)| (f.clone(), v.clone())));
        serde_json::from_value(Value::Object(merged)).map_err(|e| self.culprit::<T>(&fields, e))
    }

    /// The refusal of a change that does not read as `T`, naming the field whose value does not: each
    /// change is tried alone on `fields` (the settings as they are).
    fn culprit<T: DeserializeOwned>(&self, fields: &Map<String, Value>, whole: serde_json::Error) -> String {
        let bad = self.0.iter().find_map(|(field, value)| {
            let mut one = fields.clone();
            one.insert(field.clone(), value.clone());
            serde_json::from_value::<T>(Value::Object(one)).err().map(|e| (field, value, e))
        });
        match bad {
            Some((field, value, e)) => {
                let shown = value.to_string().chars().take(40).collect::<String>();
                format!("{field} = {shown}: {}", clean(&e.to_string()))
            }
            None => clean(&whole.to_string()),
        }
    }
}

/// A serde message without its position in a JSON text nobody typed.
fn clean(message: &str) -> String {
    message.split(" at line ").next().unwrap_or(message).to_owned()
}

/// Leaves out of `table` (a key's or a pool's table in the config file) the settings at their default,
/// so the file holds what the user set: `priority = 0`, `models = []` and `on_limit = "reserve"` are
/// never written.
pub fn drop_defaults(table: &mut toml_edit::Table) {
    let defaults = defaults();
    let default_of = |field: &str| defaults.iter().find_map(|d| d.get(field));
    let at_default: Vec<String> = table
        .iter()
        .filter(|(field, item)| {
            let Some(default) = default_of(field) else { return false };
            let as_json = item.as_value().and_then(|v| serde_json::to_value(TomlValue(v)).ok());
            as_json.as_ref() == Some(default)
        })
        .map(|(field, _)| field.to_owned())
        .collect();
    for field in at_default {
        table.remove(&field);
    }
}

/// The settings of a key and of a pool at their default, serialized (for [`drop_defaults`]): a pool's
/// policies (`allow_priority = true`) among them.
pub fn defaults() -> [Value; 3] {
    [
        serde_json::to_value(KeySettings::default()).unwrap_or(Value::Null),
        serde_json::to_value(crate::budget::MoneyBudget::default()).unwrap_or(Value::Null),
        serde_json::json!({ "allow_priority": true }),
    ]
}

/// A TOML value as JSON, to compare with a default.
struct TomlValue<'a>(&'a toml_edit::Value);

impl Serialize for TomlValue<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq as _;
        match self.0 {
            toml_edit::Value::String(v) => s.serialize_str(v.value()),
            toml_edit::Value::Integer(v) => s.serialize_i64(*v.value()),
            toml_edit::Value::Float(v) => s.serialize_f64(*v.value()),
            toml_edit::Value::Boolean(v) => s.serialize_bool(*v.value()),
            toml_edit::Value::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(&TomlValue(item))?;
                }
                seq.end()
            }
            // Dates and inline tables are no setting's default: never dropped.
            _ => s.serialize_str("\u{0}not a default"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::{MoneyBudget, OnLimit};

    #[test]
    fn a_patch_replaces_what_it_names_clears_nulls_and_keeps_the_rest() {
        let before = KeySettings { priority: 2, daily_token_budget: Some(9), ..KeySettings::default() };
        let mut patch = Patch::default();
        patch.set("daily_token_budget", None::<u64>);
        patch.set("models", ["gpt-5.5"]);
        let after = patch.apply(&before).expect("applies");
        assert_eq!(after.priority, 2, "kept");
        assert_eq!(after.daily_token_budget, None, "cleared");
        assert_eq!(after.models, ["gpt-5.5"], "replaced");
    }

    #[test]
    fn a_patch_names_an_unknown_field_and_a_value_of_the_wrong_type() {
        let mut patch = Patch::default();
        patch.set("secret", "sk-x");
        let e = patch.apply(&KeySettings::default()).expect_err("unknown");
        assert!(e.contains("unknown field `secret`") && e.contains("priority"), "{e}");
        let mut patch = Patch::default();
        patch.set("priority", "high");
        let e = patch.apply(&KeySettings::default()).expect_err("text for a number");
        assert!(e.starts_with("priority = \"high\": invalid type"), "{e}");
        let mut patch = Patch::default();
        patch.set("on_limit", "never");
        let e = patch.apply(&MoneyBudget::default()).expect_err("not a choice");
        assert!(e.starts_with("on_limit = \"never\""), "{e}");
    }

    #[test]
    fn the_config_file_leaves_out_the_settings_at_their_default_only() {
        let text = "id = \"k\"\npriority = 0\nmodels = []\nexclude_models = [\"m\"]\nreserve_at = 80\n\
                    on_limit = \"reserve\"\ndaily_budget_usd = 0\n";
        let mut doc: toml_edit::DocumentMut = text.parse().expect("toml");
        drop_defaults(doc.as_table_mut());
        let left: Vec<&str> = doc.iter().map(|(k, _)| k).collect();
        assert_eq!(left, ["id", "exclude_models", "reserve_at", "daily_budget_usd"], "{doc}");
        let money: MoneyBudget = toml::from_str(&doc.to_string()).expect("reads back");
        assert_eq!((money.reserve_at, money.on_limit), (Some(80), OnLimit::Reserve));
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
