//! A group of settings flattened into a struct that refuses unknown fields, when the group flattens
//! another in turn (a pool's policies hold its budget in money). serde reads such a nested `flatten`
//! as a map and leaves its fields behind, so the outer struct's `deny_unknown_fields` would refuse
//! them as unknown. Flattening it with `#[serde(flatten, deserialize_with = "crate::flat::fields")]`
//! reads it as a struct of exactly its [`Fields`] instead, taking each.

use serde::de::{DeserializeOwned, Deserializer, Error as _, MapAccess, Visitor};
use serde_json::{Map, Value};

/// A group of settings read by [`fields`]: its name and every field it reads, its flattened groups'
/// included, as serde spells them.
pub trait Fields {
    /// The group's name, for serde's messages.
    const NAME: &'static str;
    /// Every field it reads.
    const FIELDS: &'static [&'static str];
}

/// Reads `T` as a struct of exactly `T::FIELDS` (see the module's doc).
pub fn fields<'de, D: Deserializer<'de>, T: DeserializeOwned + Fields>(deserializer: D) -> Result<T, D::Error> {
    let taken = deserializer.deserialize_struct(T::NAME, T::FIELDS, Collect)?;
    serde_json::from_value(Value::Object(taken)).map_err(|e| D::Error::custom(e.to_string()))
}

/// The fields given, as they are.
struct Collect;

impl<'de> Visitor<'de> for Collect {
    type Value = Map<String, Value>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a table of settings")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut taken = Map::new();
        while let Some((field, value)) = map.next_entry::<String, Value>()? {
            taken.insert(field, value);
        }
        Ok(taken)
    }
}
