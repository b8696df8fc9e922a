//! Changes to settings, typed. Each group of settings has its change beside it (`KeySettingsChange`
//! next to `KeySettings`, `MoneyBudgetChange` next to `MoneyBudget`, `PoolPoliciesChange` next to
//! `PoolPolicies`), and every field of a change is an `Option` of the setting's own type:
//!
//! * left out (`None`): the setting stays as it is;
//! * given (`Some(value)`): it replaces the setting; for a setting that may be absent (an
//!   `Option<T>`), `null` is a value too, so `Some(None)` clears it. [`given`] reads a field so, and
//!   refuses `null` for a setting that cannot be absent.
//!
//! The API reads a change a person sent with [`read`], which refuses an unknown field or a value of the
//! wrong type in words that name the field; the CLI builds one from its flags, and the dashboard's
//! TypeScript types are generated from the same structs.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// Reads a field of a change that was given: its value, `null` included (a setting that may be absent
/// is cleared by it; any other refuses it). Used with `#[serde(deserialize_with = "given")]` on every
/// field of a change, whose container is `#[serde(default)]` so a field left out is `None`.
pub fn given<'de, D: Deserializer<'de>, T: Deserialize<'de>>(deserializer: D) -> Result<Option<T>, D::Error> {
    T::deserialize(deserializer).map(Some)
}

/// The names of the fields of `views` (settings serialized, each a JSON object), in their order: the
/// fields a change of them may give.
pub fn names(views: &[Value]) -> Vec<String> {
    views.iter().filter_map(Value::as_object).flat_map(|fields| fields.keys().cloned()).collect()
}

/// Reads a change from the JSON a person (or the dashboard, or the CLI) sent: refused, in words that
/// name the field, when a field is not one of `settable` or its value is not of the field's type. The
/// values' own checks (`validate`) are the caller's, on the settings the change makes.
pub fn read<C: DeserializeOwned>(body: Value, settable: &[String]) -> Result<C, String> {
    let Value::Object(fields) = &body else {
        return Err(format!("a change is a JSON object of the settings to change: {}", settable.join(", ")));
    };
    if let Some(unknown) = fields.keys().find(|f| !settable.contains(f)) {
        return Err(format!("unknown field `{unknown}`: the settings that can be changed are {}", settable.join(", ")));
    }
    match serde_json::from_value(body.clone()) {
        Ok(change) => Ok(change),
        Err(whole) => Err(culprit::<C>(fields, &whole)),
    }
}

/// The refusal of a change that does not read as `C`, naming the field whose value does not: each field
/// is tried alone.
fn culprit<C: DeserializeOwned>(fields: &serde_json::Map<String, Value>, whole: &serde_json::Error) -> String {
    let bad = fields.iter().find_map(|(field, value)| {
        let one = Value::Object([(field.clone(), value.clone())].into_iter().collect());
        serde_json::from_value::<C>(one).err().map(|e| (field, value, e))
    });
    match bad {
        Some((field, value, e)) => {
            let shown = value.to_string().chars().take(40).collect::<String>();
            format!("{field} = {shown}: {}", clean(&e.to_string()))
        }
        None => clean(&whole.to_string()),
    }
}

/// A serde message without its position in a JSON text nobody typed.
fn clean(message: &str) -> String {
    message.split(" at line ").next().unwrap_or(message).to_owned()
}
