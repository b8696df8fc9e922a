//! The members of a `usage` object that `Usage` reads, each taken as `serde_json::Value::as_u64`
//! would take it: a count when it is a non-negative integer, nothing when it is anything else.

use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

#[derive(Deserialize)]
pub(super) struct Counts {
    #[serde(default)]
    pub input_tokens: Count,
    #[serde(default)]
    pub prompt_tokens: Count,
    #[serde(default)]
    pub output_tokens: Count,
    #[serde(default)]
    pub completion_tokens: Count,
    #[serde(default)]
    pub input_tokens_details: Details,
    #[serde(default)]
    pub prompt_tokens_details: Details,
}

/// A details object (`present` even when it is not an object, as `Value::get` finds it).
#[derive(Default)]
pub(super) struct Details {
    pub present: bool,
    pub cached_tokens: Count,
    pub cache_write_tokens: Count,
}

#[derive(Default)]
pub(super) struct Count(pub Option<u64>);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(CountVisitor)
    }
}

struct CountVisitor;

impl<'de> Visitor<'de> for CountVisitor {
    type Value = Count;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_u64<E>(self, v: u64) -> Result<Count, E> {
        Ok(Count(Some(v)))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Count, E> {
        Ok(Count(u64::try_from(v).ok()))
    }
    fn visit_f64<E>(self, _: f64) -> Result<Count, E> {
        Ok(Count(None))
    }
    fn visit_bool<E>(self, _: bool) -> Result<Count, E> {
        Ok(Count(None))
    }
    fn visit_str<E>(self, _: &str) -> Result<Count, E> {
        Ok(Count(None))
    }
    fn visit_unit<E>(self) -> Result<Count, E> {
        Ok(Count(None))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Count, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Count(None))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Count, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Count(None))
    }
}

impl<'de> Deserialize<'de> for Details {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(DetailsVisitor)
    }
}

struct DetailsVisitor;

impl DetailsVisitor {
    fn other<E>(self) -> Result<Details, E> {
        Ok(Details { present: true, ..Details::default() })
    }
}

impl<'de> Visitor<'de> for DetailsVisitor {
    type Value = Details;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_u64<E>(self, _: u64) -> Result<Details, E> {
        self.other()
    }
    fn visit_i64<E>(self, _: i64) -> Result<Details, E> {
        self.other()
    }
    fn visit_f64<E>(self, _: f64) -> Result<Details, E> {
        self.other()
    }
    fn visit_bool<E>(self, _: bool) -> Result<Details, E> {
        self.other()
    }
    fn visit_str<E>(self, _: &str) -> Result<Details, E> {
        self.other()
    }
    fn visit_unit<E>(self) -> Result<Details, E> {
        self.other()
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Details, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        self.other()
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Details, A::Error> {
        let mut details = Details { present: true, ..Details::default() };
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match key.as_ref() {
                "cached_tokens" => details.cached_tokens = map.next_value()?,
                "cache_write_tokens" => details.cache_write_tokens = map.next_value()?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(details)
    }
}
