//! The words of a price: a model's rates per token, its tier and long-context multiples, a table
//! entry, and what one request cost at them. A leaf the table (`price`), its parser (`parse`) and its
//! errors (`error`) all read.

use super::{CacheRetention, Cost, ServiceTier, Unpriced, Usage, Usd};

/// Multipliers are held in thousandths: 1000 is 1x.
pub(super) const MILLI: u64 = 1000;

/// One model's rates, in pico-dollars per token (= millionths of a USD per 1M tokens).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rates {
    /// Input tokens that are neither cached nor written to the cache.
    pub input: u64,
    /// Cached input tokens; `None` means no cache discount (priced as input).
    pub cached_input: Option<u64>,
    /// Input tokens written to the cache for the default (30-minute) retention; `None` means priced
    /// as input.
    pub cache_write: Option<u64>,
    /// Input tokens written to the cache by a request that asked for the extended (12-hour)
    /// retention; `None`: such writes are unpriced (never guessed at the 30-minute rate).
    pub cache_write_12h: Option<u64>,
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

/// A tier's price over time: each step applies from its UTC day (days since 1970-01-01) until the
/// next step's. Before the first step's day the tier is unpriced. Most tiers have one step from day 0;
/// `ultrafast` changes its multiplier on a date OpenAI published (3x until 2027-02-28, then 6x).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TierSchedule {
    steps: Vec<TierStep>,
}

/// One step of a [`TierSchedule`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TierStep {
    /// The UTC day it applies from (days since 1970-01-01).
    pub from_day: u32,
    /// The price from that day.
    pub price: TierPrice,
}

impl TierSchedule {
    /// One price, always.
    pub fn always(price: TierPrice) -> Self {
        Self { steps: vec![TierStep { from_day: 0, price }] }
    }

    /// Steps in the order they apply; `None` unless their days strictly increase and there is one.
    pub fn new(steps: Vec<TierStep>) -> Option<Self> {
        let increasing = steps.windows(2).all(|w| w[0].from_day < w[1].from_day);
        (increasing && !steps.is_empty()).then_some(Self { steps })
    }

    /// The price on UTC day `day`, if the tier is priced then.
    pub fn on(&self, day: u32) -> Option<TierPrice> {
        self.steps.iter().rev().find(|s| s.from_day <= day).map(|s| s.price)
    }

    /// Its steps, in the order they apply.
    pub fn steps(&self) -> &[TierStep] {
        &self.steps
    }
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
    pub flex: Option<TierSchedule>,
    /// `service_tier: "priority"` / `"fast"` (one tier), if the model offers it.
    pub priority: Option<TierSchedule>,
    /// `service_tier: "ultrafast"`, if the model offers it.
    pub ultrafast: Option<TierSchedule>,
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

/// The fields a price entry may have besides `alias`, `source` and `checked`.
pub(super) const PRICE_FIELDS: [&str; 9] = [
    "input",
    "cached_input",
    "cache_write",
    "cache_write_12h",
    "output",
    "flex",
    "priority",
    "ultrafast",
    "long_context",
];

impl ModelPrice {
    /// The rates and the tier multiplier (thousandths) for `tier` on UTC day `day`, if the model is
    /// priced in it then.
    fn tier_rates(&self, tier: ServiceTier, day: u32) -> Option<(Rates, u64)> {
        let schedule = match tier {
            ServiceTier::Standard => return Some((self.standard, MILLI)),
            ServiceTier::Flex => self.flex.as_ref(),
            ServiceTier::Priority => self.priority.as_ref(),
            ServiceTier::Ultrafast => self.ultrafast.as_ref(),
            ServiceTier::Other => None,
        }?;
        let tier_price = schedule.on(day)?;
        Some(match tier_price {
            TierPrice::Multiplier(milli) => (self.standard, milli),
            TierPrice::Rates(rates) => (rates, MILLI),
        })
    }

    /// What one request made on UTC day `day` cost: input split into fresh, cached and cache-write
    /// tokens (at the rate of the retention it asked for); reasoning is inside output; the multiples
    /// of its tier (as priced that day) and of a long context applied; one rounding, half up.
    pub fn cost(&self, usage: &Usage, day: u32) -> Cost {
        let Some((rates, tier_milli)) = self.tier_rates(usage.tier, day) else {
            return Cost::Unpriced(Unpriced::Tier);
        };
        let write_rate = match usage.retention {
            CacheRetention::Default => rates.cache_write.unwrap_or(rates.input),
            CacheRetention::Extended if usage.cache_write == 0 => rates.input,
            CacheRetention::Extended => match rates.cache_write_12h {
                Some(rate) => rate,
                None => return Cost::Unpriced(Unpriced::CacheRetention),
            },
        };
        let long = self.long_context.filter(|lc| usage.input > lc.above);
        let (m_in, m_cached, m_out) = long.map_or((MILLI, MILLI, MILLI), |lc| (lc.input, lc.cached_input, lc.output));
        // Counts a provider reports inconsistently are clamped so that the parts never exceed the input.
        let cached = usage.cached.min(usage.input);
        let written = usage.cache_write.min(usage.input - cached);
        let fresh = usage.input - cached - written;
        let terms = [
            (fresh, rates.input, m_in),
            (cached, rates.cached_input.unwrap_or(rates.input), m_cached),
            (written, write_rate, m_in),
            (usage.output, rates.output, m_out),
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
