//! Reading price entries from TOML (the embedded table and the user's `[prices]`), with errors that
//! name the model, the field and the fix, and point at the line when the text is at hand.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use toml::{Spanned, Value};

use super::error::{PriceError, Problem};
use super::rates::{
    normalize, Entry, LongContext, ModelPrice, Rates, TierPrice, TierSchedule, TierStep, MILLI, PRICE_FIELDS,
};

/// $1,000,000 per 1M tokens, in pico-dollars per token: far above any real price, and low enough
/// that a request's sum cannot overflow.
const MAX_RATE: u64 = 1_000_000 * 1_000_000;
/// 100x, in thousandths.
const MAX_MULTIPLIER: u64 = 100 * MILLI;
const RATE_FIELDS: [&str; 5] = ["input", "cached_input", "cache_write", "cache_write_12h", "output"];
const MULTIPLIER_FIELDS: [&str; 4] = ["above", "input", "cached_input", "output"];

/// The user's `[prices]` table as written: model name -> `alias` or prices, in US dollars per 1M
/// tokens. Deserialize it from the config text to keep line numbers; [`PriceOverrides::from_table`]
/// takes a table without them. Checked by [`super::PriceTable::with_overrides`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PriceOverrides {
    entries: Vec<RawEntry>,
}

#[derive(Clone, Debug)]
struct RawEntry {
    name: String,
    span: Option<Range<usize>>,
    body: RawBody,
}

/// Entries are equal when they say the same, wherever they stand in the file: moving a table or adding
/// a comment above it is no change of price.
impl PartialEq for RawEntry {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && self.body == other.body
    }
}

#[derive(Clone, Debug, PartialEq)]
enum RawBody {
    Table(Vec<RawField>),
    /// What was written instead of a table ("a number", ...).
    NotATable(&'static str),
}

#[derive(Clone, Debug)]
struct RawField {
    key: String,
    span: Option<Range<usize>>,
    value: Value,
}

impl PartialEq for RawField {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key && self.value == other.value
    }
}

impl PriceOverrides {
    /// Entries from an already-parsed table (errors then carry no line numbers).
    pub fn from_table(table: &toml::Table) -> Self {
        let entries = table
            .iter()
            .map(|(name, value)| RawEntry { name: name.clone(), span: None, body: body_of(value) })
            .collect();
        Self { entries }
    }

    /// True when the user wrote no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

fn body_of(value: &Value) -> RawBody {
    match value {
        Value::Table(table) => RawBody::Table(
            table.iter().map(|(k, v)| RawField { key: k.clone(), span: None, value: v.clone() }).collect(),
        ),
        other => RawBody::NotATable(kind(other)),
    }
}

impl<'de> Deserialize<'de> for PriceOverrides {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let map = BTreeMap::<String, Spanned<RawBody>>::deserialize(deserializer)?;
        let mut entries: Vec<RawEntry> = map
            .into_iter()
            .map(|(name, body)| RawEntry { name, span: Some(body.span()), body: body.into_inner() })
            .collect();
        // In the order written, so that of two entries for one model the later one is the one named.
        entries.sort_by_key(|e| e.span.as_ref().map(|s| s.start));
        Ok(Self { entries })
    }
}

impl<'de> Deserialize<'de> for RawBody {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(BodyVisitor)
    }
}

/// Takes any value, so that a non-table entry becomes our error (naming the model), not serde's.
struct BodyVisitor;

impl<'de> Visitor<'de> for BodyVisitor {
    type Value = RawBody;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a table of prices")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawBody, A::Error> {
        let mut fields = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            if key.starts_with("$__toml_private") {
                // toml hands a date to deserialize_any as a one-key map.
                map.next_value::<de::IgnoredAny>()?;
                return Ok(RawBody::NotATable("a date"));
            }
            let value: Spanned<Value> = map.next_value()?;
            fields.push(RawField { key, span: Some(value.span()), value: value.into_inner() });
        }
        Ok(RawBody::Table(fields))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<RawBody, E> {
        Ok(RawBody::NotATable("a boolean"))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<RawBody, E> {
        Ok(RawBody::NotATable("a number"))
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<RawBody, E> {
        Ok(RawBody::NotATable("a number"))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<RawBody, E> {
        Ok(RawBody::NotATable("a number"))
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<RawBody, E> {
        Ok(RawBody::NotATable("a string"))
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<RawBody, A::Error> {
        while seq.next_element::<de::IgnoredAny>()?.is_some() {}
        Ok(RawBody::NotATable("an array"))
    }
}

impl Serialize for PriceOverrides {
    /// Writes the entries back as written; one that is not a table (which never loads) is left out.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let tables: Vec<_> = self
            .entries
            .iter()
            .filter_map(|e| match &e.body {
                RawBody::Table(fields) => Some((&e.name, fields)),
                RawBody::NotATable(_) => None,
            })
            .collect();
        let mut map = serializer.serialize_map(Some(tables.len()))?;
        for (name, fields) in tables {
            let table: toml::Table = fields.iter().map(|f| (f.key.clone(), f.value.clone())).collect();
            map.serialize_entry(name, &table)?;
        }
        map.end()
    }
}

/// The embedded file: the same `[prices."name"]` shape as the config.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EmbeddedFile {
    pub(super) prices: PriceOverrides,
}

/// One checked entry, ready to go into the table.
pub(super) struct ParsedEntry {
    pub(super) name: String,
    pub(super) entry: Entry,
    written: String,
    span: Option<Range<usize>>,
}

impl ParsedEntry {
    /// An error about this entry's alias.
    pub(super) fn error(&self, problem: Problem) -> PriceError {
        PriceError::new(&self.written, Some("alias"), self.span.as_ref(), problem)
    }
}

/// Checks every entry; `embedded` entries must carry `source` and `checked`.
pub(super) fn entries(raw: &PriceOverrides, embedded: bool) -> Result<Vec<ParsedEntry>, PriceError> {
    let mut seen: BTreeMap<String, &str> = BTreeMap::new();
    let mut out = Vec::with_capacity(raw.entries.len());
    for item in &raw.entries {
        let name = normalize(&item.name);
        let fail = |problem| PriceError::new(&item.name, None, item.span.as_ref(), problem);
        if name.is_empty() {
            return Err(fail(Problem::EmptyName));
        }
        if let Some(other) = seen.insert(name.clone(), &item.name) {
            return Err(fail(Problem::Duplicate { other: other.to_owned() }));
        }
        let fields = match &item.body {
            RawBody::Table(fields) => Fields { model: &item.name, fields },
            RawBody::NotATable(found) => return Err(fail(Problem::NotATable { found })),
        };
        let entry = fields.entry(embedded, item.span.as_ref())?;
        // An alias's problem (its target) is pointed at where the alias is written.
        let span = fields.get("alias").and_then(|f| f.span.clone()).or_else(|| item.span.clone());
        out.push(ParsedEntry { name, entry, written: item.name.clone(), span });
    }
    Ok(out)
}

/// The fields of one entry.
struct Fields<'a> {
    model: &'a str,
    fields: &'a [RawField],
}

impl Fields<'_> {
    fn get(&self, key: &str) -> Option<&RawField> {
        self.fields.iter().find(|f| f.key == key)
    }

    fn error(&self, field: &RawField, problem: Problem) -> PriceError {
        PriceError::new(self.model, Some(&field.key), field.span.as_ref(), problem)
    }

    fn entry(&self, embedded: bool, span: Option<&Range<usize>>) -> Result<Entry, PriceError> {
        let known = |k: &str| PRICE_FIELDS.contains(&k) || ["alias", "source", "checked"].contains(&k);
        if let Some(unknown) = self.fields.iter().find(|f| !known(&f.key)) {
            return Err(self.error(unknown, Problem::UnknownField));
        }
        let source = self.text("source")?;
        let checked = self.date("checked")?;
        if embedded {
            for (key, value) in [("source", &source), ("checked", &checked)] {
                if value.is_none() {
                    return Err(PriceError::new(self.model, Some(key), span, Problem::Missing));
                }
            }
        }
        if let Some(alias) = self.get("alias") {
            if let Some(price) = self.fields.iter().find(|f| PRICE_FIELDS.contains(&f.key.as_str())) {
                return Err(self.error(price, Problem::AliasWithPrices));
            }
            let target = string(&alias.value).map_err(|p| self.error(alias, p))?;
            return Ok(Entry::Alias(target));
        }
        let standard = self.rates(span)?;
        let tier_of = |key| self.get(key).map(|f| tier(&f.value).map_err(|p| self.error(f, p))).transpose();
        let long_context =
            self.get("long_context").map(|f| long_context(&f.value).map_err(|p| self.error(f, p))).transpose()?;
        Ok(Entry::Priced(Box::new(ModelPrice {
            standard,
            flex: tier_of("flex")?,
            priority: tier_of("priority")?,
            ultrafast: tier_of("ultrafast")?,
            long_context,
            source,
            checked,
        })))
    }

    fn rates(&self, span: Option<&Range<usize>>) -> Result<Rates, PriceError> {
        let rate = |key: &str| self.get(key).map(|f| price(&f.value).map_err(|p| self.error(f, p))).transpose();
        let required =
            |key: &str| rate(key)?.ok_or_else(|| PriceError::new(self.model, Some(key), span, Problem::Missing));
        Ok(Rates {
            input: required("input")?,
            cached_input: rate("cached_input")?,
            cache_write: rate("cache_write")?,
            cache_write_12h: rate("cache_write_12h")?,
            output: required("output")?,
        })
    }

    fn text(&self, key: &str) -> Result<Option<String>, PriceError> {
        self.get(key).map(|f| string(&f.value).map_err(|p| self.error(f, p))).transpose()
    }

    fn date(&self, key: &str) -> Result<Option<String>, PriceError> {
        let Some(field) = self.get(key) else { return Ok(None) };
        let text = match &field.value {
            Value::Datetime(d) => d.to_string(),
            other => string(other).map_err(|p| self.error(field, p))?,
        };
        match day_number(&text) {
            Some(_) => Ok(Some(text)),
            None => Err(self.error(field, Problem::BadDate)),
        }
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::String(_) => "a string",
        Value::Integer(_) | Value::Float(_) => "a number",
        Value::Boolean(_) => "a boolean",
        Value::Datetime(_) => "a date",
        Value::Array(_) => "an array",
        Value::Table(_) => "a table",
    }
}

fn string(value: &Value) -> Result<String, Problem> {
    match value {
        Value::String(s) => Ok(s.clone()),
        other => Err(Problem::NotAString { found: kind(other) }),
    }
}

/// A number times `scale`, as an exact integer no larger than `max`.
fn scaled(value: &Value, scale: f64, places: u8, max: u64) -> Result<u64, Problem> {
    // Casts between integers and floats are exact here: every bound is far below 2^53.
    let number = match value {
        Value::Float(f) if !f.is_nan() => *f,
        Value::Integer(i) => *i as f64,
        other => {
            return Err(Problem::NotANumber { found: if other.is_float() { "not a number" } else { kind(other) } })
        }
    };
    if number < 0.0 {
        return Err(Problem::Negative);
    }
    let exact = number * scale;
    if !exact.is_finite() || exact > max as f64 {
        return Err(Problem::TooLarge);
    }
    let rounded = exact.round();
    // Decimal prices such as 0.075 are not exact in binary: allow float noise, not a 7th decimal.
    if (exact - rounded).abs() > 1e-3 {
        return Err(Problem::TooPrecise { places });
    }
    Ok(rounded as u64) // 0 <= rounded <= max, checked above
}

/// USD per 1M tokens -> pico-dollars per token (six decimals kept).
fn price(value: &Value) -> Result<u64, Problem> {
    scaled(value, 1e6, 6, MAX_RATE)
}

/// A multiplier -> thousandths (three decimals kept); zero is refused.
fn multiplier(value: &Value) -> Result<u64, Problem> {
    match scaled(value, 1e3, 3, MAX_MULTIPLIER)? {
        0 => Err(Problem::BadTier { found: "zero" }),
        milli => Ok(milli),
    }
}

/// A tier's price: a multiplier or a table of rates (always), or a list of steps, each `{ from =
/// YYYY-MM-DD, price = <multiplier or table> }` in increasing order (`from` may be left out of the
/// first: from always), each applying from its UTC day until the next.
fn tier(value: &Value) -> Result<TierSchedule, Problem> {
    let Value::Array(steps) = value else { return tier_price(value).map(TierSchedule::always) };
    let steps = steps.iter().enumerate().map(|(i, step)| tier_step(step, i == 0)).collect::<Result<Vec<_>, _>>()?;
    TierSchedule::new(steps)
        .ok_or(Problem::BadTier { found: "an empty list, or steps whose `from` dates do not increase" })
}

fn tier_step(value: &Value, first: bool) -> Result<TierStep, Problem> {
    const BAD: Problem = Problem::BadTier { found: "a list whose steps are not { from = 2027-03-01, price = 6.0 }" };
    let Value::Table(table) = value else { return Err(BAD) };
    if table.keys().any(|k| k != "from" && k != "price") {
        return Err(BAD);
    }
    let from_day = match table.get("from") {
        None if first => 0,
        None => return Err(BAD),
        Some(Value::Datetime(d)) => day_number(&d.to_string()).ok_or(BAD)?,
        Some(Value::String(s)) => day_number(s).ok_or(BAD)?,
        Some(_) => return Err(BAD),
    };
    Ok(TierStep { from_day, price: tier_price(table.get("price").ok_or(BAD)?)? })
}

fn tier_price(value: &Value) -> Result<TierPrice, Problem> {
    match value {
        Value::Integer(_) | Value::Float(_) => multiplier(value).map(TierPrice::Multiplier),
        Value::Table(table) => {
            if table.keys().any(|k| !RATE_FIELDS.contains(&k.as_str())) {
                return Err(Problem::BadTier {
                    found:
                        "a table with other fields than input, cached_input, cache_write, cache_write_12h and output",
                });
            }
            let rate = |key: &str| table.get(key).map(price).transpose();
            let required = |key: &str| rate(key)?.ok_or(Problem::BadTier { found: "a table without input or output" });
            Ok(TierPrice::Rates(Rates {
                input: required("input")?,
                cached_input: rate("cached_input")?,
                cache_write: rate("cache_write")?,
                cache_write_12h: rate("cache_write_12h")?,
                output: required("output")?,
            }))
        }
        other => Err(Problem::BadTier { found: kind(other) }),
    }
}

/// A `YYYY-MM-DD` date as its UTC day number (days since 1970-01-01, as `clock::utc_day` counts);
/// `None` for another shape, an impossible date, or one before 1970.
pub(super) fn day_number(text: &str) -> Option<u32> {
    let b = text.as_bytes();
    let shaped = b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && b.iter().enumerate().all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit());
    if !shaped {
        return None;
    }
    let (y, m, d) = (text[..4].parse().ok()?, text[5..7].parse().ok()?, text[8..].parse().ok()?);
    let date = jiff::civil::Date::new(y, m, d).ok()?;
    let days = date.since(jiff::civil::date(1970, 1, 1)).ok()?.get_days();
    u32::try_from(days).ok()
}

fn long_context(value: &Value) -> Result<LongContext, Problem> {
    let Value::Table(table) = value else { return Err(Problem::BadLongContext) };
    if table.len() != MULTIPLIER_FIELDS.len() || table.keys().any(|k| !MULTIPLIER_FIELDS.contains(&k.as_str())) {
        return Err(Problem::BadLongContext);
    }
    let above = match table.get("above") {
        Some(Value::Integer(n)) if *n > 0 => n.unsigned_abs(),
        _ => return Err(Problem::BadLongContext),
    };
    let factor = |key: &str| table.get(key).ok_or(Problem::BadLongContext).and_then(multiplier);
    Ok(LongContext { above, input: factor("input")?, cached_input: factor("cached_input")?, output: factor("output")? })
}
