//! The name serde gives a unit enum variant, read straight off the serializer: `Serialize` hands
//! `serialize_unit_variant` the variant's name as written (renames applied) and as `&'static str`, so
//! naming a request's operation or failure in its counters neither builds a JSON value nor allocates.
//! Anything else is refused, and the caller falls back to serde_json.

use std::fmt;

use serde::ser::{Impossible, Serializer};

/// A serializer that accepts only unit variants and returns their names.
pub struct VariantName;

/// What `VariantName` says of any value that is not a unit variant.
#[derive(Debug)]
pub struct NotAUnitVariant;

impl fmt::Display for NotAUnitVariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not a unit variant")
    }
}

impl std::error::Error for NotAUnitVariant {}

impl serde::ser::Error for NotAUnitVariant {
    fn custom<T: fmt::Display>(_: T) -> Self {
        NotAUnitVariant
    }
}

/// The methods for the values `VariantName` refuses, each taking its value and failing.
macro_rules! refuse {
    ($($method:ident($($ty:ty),*)),* $(,)?) => {
        $(fn $method(self, $(_: $ty),*) -> Result<Self::Ok, Self::Error> { Err(NotAUnitVariant) })*
    };
}

impl Serializer for VariantName {
    type Ok = &'static str;
    type Error = NotAUnitVariant;
    type SerializeSeq = Impossible<&'static str, NotAUnitVariant>;
    type SerializeTuple = Impossible<&'static str, NotAUnitVariant>;
    type SerializeTupleStruct = Impossible<&'static str, NotAUnitVariant>;
    type SerializeTupleVariant = Impossible<&'static str, NotAUnitVariant>;
    type SerializeMap = Impossible<&'static str, NotAUnitVariant>;
    type SerializeStruct = Impossible<&'static str, NotAUnitVariant>;
    type SerializeStructVariant = Impossible<&'static str, NotAUnitVariant>;

    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<&'static str, Self::Error> {
        Ok(variant)
    }

    refuse! {
        serialize_bool(bool), serialize_i8(i8), serialize_i16(i16), serialize_i32(i32), serialize_i64(i64),
        serialize_u8(u8), serialize_u16(u16), serialize_u32(u32), serialize_u64(u64), serialize_f32(f32),
        serialize_f64(f64), serialize_char(char), serialize_str(&str), serialize_bytes(&[u8]),
        serialize_none(), serialize_unit(), serialize_unit_struct(&'static str),
    }

    fn serialize_some<T: ?Sized + serde::Serialize>(self, _: &T) -> Result<Self::Ok, Self::Error> {
        Err(NotAUnitVariant)
    }

    fn serialize_newtype_struct<T: ?Sized + serde::Serialize>(
        self,
        _: &'static str,
        _: &T,
    ) -> Result<Self::Ok, Self::Error> {
        Err(NotAUnitVariant)
    }

    fn serialize_newtype_variant<T: ?Sized + serde::Serialize>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<Self::Ok, Self::Error> {
        Err(NotAUnitVariant)
    }

    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, Self::Error> {
        Err(NotAUnitVariant)
    }

    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, Self::Error> {
        Err(NotAUnitVariant)
    }

    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeTupleStruct, Self::Error> {
        Err(NotAUnitVariant)
    }

    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, Self::Error> {
        Err(NotAUnitVariant)
    }

    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, Self::Error> {
        Err(NotAUnitVariant)
    }

    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct, Self::Error> {
        Err(NotAUnitVariant)
    }

    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, Self::Error> {
        Err(NotAUnitVariant)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Serialize;

    #[derive(Serialize)]
    #[serde(rename_all = "snake_case")]
    enum Sample {
        PromptCacheKey,
        #[serde(rename = "upstream_5xx")]
        Upstream5xx,
        Carrying(u8),
    }

    #[test]
    fn a_unit_variant_is_named_as_serde_json_names_it() {
        for value in [Sample::PromptCacheKey, Sample::Upstream5xx] {
            let json = serde_json::to_value(&value).expect("json");
            assert_eq!(value.serialize(VariantName).ok(), json.as_str());
        }
    }

    #[test]
    fn anything_else_is_refused() {
        assert!(Sample::Carrying(1).serialize(VariantName).is_err());
        assert!("text".serialize(VariantName).is_err());
        assert!(7u32.serialize(VariantName).is_err());
    }
}
