//! The settings the config file leaves out: those at their default, as a person writing the file
//! would, whichever table they are in, a key's or a pool's. The defaults are read from the settings'
//! own `Default`s (`KeySettings`, `MoneyBudget`, `PoolPolicies`), never written here.

use serde::Serialize;
use serde_json::Value;

/// Leaves out of `table` (a key's or a pool's table in the config file) the settings at their default,
/// so the file holds what the user set: a priority of 0, no models, a pool that allows the priority
/// tier are never written.
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

/// The settings of a key and of a pool at their default, serialized (for [`drop_defaults`]): a key's,
/// its budget in money, and a pool's policies.
pub fn defaults() -> [Value; 3] {
    [
        serde_json::to_value(crate::key_settings::KeySettings::default()).unwrap_or(Value::Null),
        serde_json::to_value(crate::budget::MoneyBudget::default()).unwrap_or(Value::Null),
        serde_json::to_value(crate::pools::PoolPolicies::default()).unwrap_or(Value::Null),
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
