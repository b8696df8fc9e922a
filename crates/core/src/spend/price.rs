//! The price table: looking a model up, and pricing one request's usage.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use super::error::{PriceError, Problem};
use super::parse::{self, PriceOverrides};
use super::{Cost, ServiceTier, Unpriced, Usage, Usd};

/// The table compiled into the binary.
const EMBEDDED: &str = include_str!("prices.toml");

/// Multipliers are held in thousandths: 1000 is 1x.
pub(super) const MILLI: u64 = 1000;

/// One model's rates, in pico-dollars per token (= millionths of a USD per 1M tokens).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rates {
    /// Input tokens that are neither cached nor written to the cache.
    pub input: u64,
    /// Cached input tokens; `None` means no cache discount (priced as input).
    pub cached_input: Option<u64>,
    /// Input tokens written to the cache; `None` means priced as input.
    pub cache_write: Option<u64>,
    /// Output tokens, reasoning tokens included.
    pub output: u64,
}

/// The price in one `service_tier`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TierPrice {
    /// Every standard rate times this many thousandths.
    Multiplier(u64),
    /// Rates of its own, where the tier is not one multiple of the standard rates.
    Rates(Rates),
}

/// Long-context billing: past `above` input tokens, the whole request costs these multiples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LongContext {
    /// The request is long when its input tokens exceed this.
    pub above: u64,
    /// Multiplier on input and cache-write rates, in thousandths.
    pub input: u64,
    /// Multiplier on the cached-input rate, in thousandths.
    pub cached_input: u64,
    /// Multiplier on the output rate, in thousandths.
    pub output: u64,
}

/// Everything the table knows about one model's price.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelPrice {
    /// The standard-tier rates.
    pub standard: Rates,
    /// `service_tier: "flex"`, if the model offers it.
    pub flex: Option<TierPrice>,
    /// `service_tier: "priority"` / `"fast"`, if the model offers it.
    pub priority: Option<TierPrice>,
    /// `service_tier: "ultrafast"`, if the model offers it.
    pub ultrafast: Option<TierPrice>,
    /// Long-context billing, where OpenAI publishes it.
    pub long_context: Option<LongContext>,
    /// Where the numbers were read.
    pub source: Option<String>,
    /// The day they were compared (YYYY-MM-DD).
    pub checked: Option<String>,
}

/// A table entry: a price, or a user's alias to a priced entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Entry {
    Priced(Box<ModelPrice>),
    Alias(String),
}

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

    /// What a request to `model` with this usage, billed in `tier`, cost.
    pub fn cost(&self, model: &str, usage: &Usage, tier: ServiceTier) -> Cost {
        match self.resolve(model) {
            Some(resolved) => resolved.price.cost(usage, tier),
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

impl ModelPrice {
    /// The rates and the tier multiplier (thousandths) for `tier`, if the model is priced in it.
    fn tier_rates(&self, tier: ServiceTier) -> Option<(Rates, u64)> {
        let tier_price = match tier {
            ServiceTier::Standard => return Some((self.standard, MILLI)),
            ServiceTier::Flex => self.flex,
            ServiceTier::Priority => self.priority,
            ServiceTier::Ultrafast => self.ultrafast,
            ServiceTier::Other => None,
        }?;
        Some(match tier_price {
            TierPrice::Multiplier(milli) => (self.standard, milli),
            TierPrice::Rates(rates) => (rates, MILLI),
        })
    }

    /// What one request cost: input split into fresh, cached and cache-write tokens; reasoning is
    /// inside output; tier and long-context multiples applied; one rounding, half up.
    pub fn cost(&self, usage: &Usage, tier: ServiceTier) -> Cost {
        let Some((rates, tier_milli)) = self.tier_rates(tier) else {
            return Cost::Unpriced(Unpriced::Tier);
        };
        let long = self.long_context.filter(|lc| usage.input_tokens > lc.above);
        let (m_in, m_cached, m_out) = long.map_or((MILLI, MILLI, MILLI), |lc| (lc.input, lc.cached_input, lc.output));
        // Counts a provider reports inconsistently are clamped so that the parts never exceed the input.
        let cached = usage.cached_input_tokens.min(usage.input_tokens);
        let written = usage.cache_write_tokens.min(usage.input_tokens - cached);
        let fresh = usage.input_tokens - cached - written;
        let terms = [
            (fresh, rates.input, m_in),
            (cached, rates.cached_input.unwrap_or(rates.input), m_cached),
            (written, rates.cache_write.unwrap_or(rates.input), m_in),
            (usage.output_tokens, rates.output, m_out),
        ];
        // Units: pico-dollars x 1000 (long context) x 1000 (tier) = 1e-18 USD; 1e9 of them is a nano.
        let atto = terms
            .iter()
            .map(|&(tokens, rate, milli)| u128::from(tokens) * u128::from(rate) * u128::from(milli))
            .fold(0u128, u128::saturating_add)
            .saturating_mul(u128::from(tier_milli));
        let nanos = atto.saturating_add(500_000_000) / 1_000_000_000;
        Cost::Priced(Usd::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX)))
    }
}

/// Model names match trimmed and case-insensitively.
pub(super) fn normalize(name: &str) -> String {
    name.trim().to_ascii_lowercase()
}

/// `gpt-5.5-2026-03-05` -> `gpt-5.5`: the family of a dated snapshot name, if it is one.
pub(super) fn strip_date(name: &str) -> Option<&str> {
    let split = name.len().checked_sub(11)?;
    let (family, suffix) = (name.get(..split)?, name.get(split..)?.as_bytes());
    let digits = |range: std::ops::Range<usize>| suffix[range].iter().all(u8::is_ascii_digit);
    let dated = suffix[0] == b'-' && suffix[5] == b'-' && suffix[8] == b'-';
    (dated && digits(1..5) && digits(6..8) && digits(9..11) && !family.is_empty()).then_some(family)
}
