//! The price table: looking a model up, and pricing one request's usage.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use super::error::{PriceError, Problem};
use super::parse::{self, PriceOverrides};
use super::rates::{normalize, Entry, ModelPrice};
use super::{Cost, Unpriced, Usage};

/// The table compiled into the binary.
const EMBEDDED: &str = include_str!("prices.toml");

/// A model name resolved to the entry that prices it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resolved<'a> {
    /// The name of the priced entry (an alias and a dated name resolve to their target).
    pub name: &'a str,
    /// Its price.
    pub price: &'a ModelPrice,
}

/// The embedded table with the user's entries over it. Names are kept trimmed and lower-case.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PriceTable {
    entries: BTreeMap<String, Entry>,
}

static BUILTIN: LazyLock<PriceTable> =
    LazyLock::new(|| PriceTable::parse_embedded(EMBEDDED).expect("prices.toml is checked by the spend unit tests"));

impl PriceTable {
    /// The table embedded in the binary.
    pub fn builtin() -> &'static Self {
        &BUILTIN
    }

    /// Parses a table in the embedded file's shape, where every entry needs `source` and `checked`.
    pub(super) fn parse_embedded(text: &str) -> Result<Self, PriceError> {
        let file: parse::EmbeddedFile = toml::from_str(text).map_err(|e| PriceError::syntax(&e))?;
        Self::from_entries(BTreeMap::new(), &file.prices, true)
    }

    /// This table with the user's `[prices]` entries laid over it: a user entry replaces the entry
    /// of the same name whole, and aliases may point at any priced entry of the result.
    pub fn with_overrides(&self, overrides: &PriceOverrides) -> Result<Self, PriceError> {
        Self::from_entries(self.entries.clone(), overrides, false)
    }

    fn from_entries(
        mut entries: BTreeMap<String, Entry>,
        raw: &PriceOverrides,
        embedded: bool,
    ) -> Result<Self, PriceError> {
        let parsed = parse::entries(raw, embedded)?;
        let aliases: Vec<_> = parsed.iter().filter(|p| matches!(p.entry, Entry::Alias(_))).collect();
        for item in &parsed {
            entries.insert(item.name.clone(), item.entry.clone());
        }
        let mut table = Self { entries };
        for item in aliases {
            let Entry::Alias(target) = &item.entry else { continue };
            let resolved = table.resolve_alias_target(target).map_err(|problem| item.error(problem))?;
            table.entries.insert(item.name.clone(), Entry::Alias(resolved));
        }
        Ok(table)
    }

    /// An alias must name a priced entry (directly or by a dated name), not another alias.
    fn resolve_alias_target(&self, target: &str) -> Result<String, Problem> {
        let key = normalize(target);
        for candidate in [Some(key.as_str()), strip_date(&key)].into_iter().flatten() {
            match self.entries.get(candidate) {
                Some(Entry::Priced(_)) => return Ok(candidate.to_owned()),
                Some(Entry::Alias(_)) => return Err(Problem::AliasToAlias { target: target.to_owned() }),
                None => {}
            }
        }
        Err(Problem::AliasToUnknown { target: target.to_owned() })
    }

    /// Finds the entry pricing `model`: the exact name (or alias), else its family for a dated name
    /// such as `gpt-4o-2024-08-06`. `None` means the model is unpriced.
    pub fn resolve(&self, model: &str) -> Option<Resolved<'_>> {
        let key = normalize(model);
        self.lookup(&key).or_else(|| strip_date(&key).and_then(|family| self.lookup(family)))
    }

    fn lookup(&self, key: &str) -> Option<Resolved<'_>> {
        let (name, entry) = self.entries.get_key_value(key)?;
        match entry {
            Entry::Priced(price) => Some(Resolved { name, price: price.as_ref() }),
            Entry::Alias(target) => match self.entries.get_key_value(target.as_str())? {
                (name, Entry::Priced(price)) => Some(Resolved { name, price: price.as_ref() }),
                (_, Entry::Alias(_)) => None,
            },
        }
    }

    /// What a request to `model` with this usage, billed in its tier, made on UTC day `day`
    /// (`clock::utc_day`: a tier's price may change on a date), cost.
    pub fn cost(&self, model: &str, usage: &Usage, day: u32) -> Cost {
        match self.resolve(model) {
            Some(resolved) => resolved.price.cost(usage, day),
            None => Cost::Unpriced(Unpriced::Model),
        }
    }

    /// Every priced entry, by name (aliases left out).
    pub fn priced(&self) -> impl Iterator<Item = (&str, &ModelPrice)> {
        self.entries.iter().filter_map(|(name, entry)| match entry {
            Entry::Priced(price) => Some((name.as_str(), price.as_ref())),
            Entry::Alias(_) => None,
        })
    }
}

/// `gpt-5.5-2026-03-05` -> `gpt-5.5`: the family of a dated snapshot name, if it is one.
pub(super) fn strip_date(name: &str) -> Option<&str> {
    let split = name.len().checked_sub(11)?;
    let (family, suffix) = (name.get(..split)?, name.get(split..)?.as_bytes());
    let digits = |range: std::ops::Range<usize>| suffix[range].iter().all(u8::is_ascii_digit);
    let dated = suffix[0] == b'-' && suffix[5] == b'-' && suffix[8] == b'-';
    (dated && digits(1..5) && digits(6..8) && digits(9..11) && !family.is_empty()).then_some(family)
}
