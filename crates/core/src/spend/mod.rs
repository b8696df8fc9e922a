//! Spend in money: the price table and what one request cost.
//!
//! The table is `prices.toml` beside this file, embedded in the binary, with the user's
//! `[prices."name"]` entries from the config laid over it ([`PriceTable::with_overrides`]). A
//! request's [`Cost`] comes from its [`Usage`] and `service_tier`, in exact integer arithmetic:
//! rates are held as pico-dollars per token and multipliers as thousandths, and the sum is rounded
//! once, half up, to the nano-dollar. A model the table does not know is [`Cost::Unpriced`], never $0.
//!
//! Everything here is pure: no clock, no I/O, no logging.

mod error;
mod parse;
mod price;
mod rates;
mod read;
mod usage;

#[cfg(test)]
mod tests;

pub use error::{PriceError, Problem};
pub use parse::PriceOverrides;
pub use price::{PriceTable, Resolved};
pub use rates::{LongContext, ModelPrice, Rates, TierPrice, TierSchedule, TierStep};
pub use usage::{CacheRetention, Usage};

use std::fmt;

/// An amount of US dollars, exact to the nano-dollar (saturating at about $18.4 billion).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Usd {
    nanos: u64,
}

impl Usd {
    /// Nothing.
    pub const ZERO: Self = Self { nanos: 0 };

    /// The amount of `nanos` billionths of a dollar.
    pub const fn from_nanos(nanos: u64) -> Self {
        Self { nanos }
    }

    /// The amount in billionths of a dollar: the unit to store and add up.
    pub const fn nanos(self) -> u64 {
        self.nanos
    }

    /// The sum, held at the largest amount rather than wrapping.
    #[must_use]
    pub const fn saturating_add(self, other: Self) -> Self {
        Self { nanos: self.nanos.saturating_add(other.nanos) }
    }

    /// To the cent, for a short line (a menu): `$1.24`, `<$0.01` for a little more than nothing.
    pub fn cents(self) -> String {
        match self.nanos {
            0 => "$0.00".to_owned(),
            1..5_000_000 => "<$0.01".to_owned(),
            n => {
                let cents = (n + 5_000_000) / 10_000_000;
                format!("${}.{:02}", cents / 100, cents % 100)
            }
        }
    }

    /// Dollars as a float, for JSON and charts only: sums stay in [`Usd::nanos`].
    pub fn as_f64(self) -> f64 {
        self.nanos as f64 / 1e9
    }
}

impl serde::Serialize for Usd {
    /// A JSON number of dollars (`0.000123`), as the API shows amounts.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_f64(self.as_f64())
    }
}

impl<'de> serde::Deserialize<'de> for Usd {
    /// A JSON number of dollars, rounded to the nano-dollar (the CLI reads the API's amounts back).
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let dollars = f64::deserialize(deserializer)?;
        if !(dollars.is_finite() && dollars >= 0.0) {
            return Err(serde::de::Error::custom("an amount of US dollars is a number, zero or more"));
        }
        // Saturates at u64::MAX for an absurd amount; the check above keeps it non-negative.
        Ok(Self::from_nanos((dollars * 1e9).round() as u64))
    }
}

impl std::iter::Sum for Usd {
    fn sum<I: Iterator<Item = Self>>(iter: I) -> Self {
        iter.fold(Self::ZERO, Self::saturating_add)
    }
}

impl fmt::Display for Usd {
    /// `$1.5`, `$0.000123`: every significant digit, at least two decimals.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whole = self.nanos / 1_000_000_000;
        let frac = format!("{:09}", self.nanos % 1_000_000_000);
        let trimmed = frac.trim_end_matches('0');
        let shown = if trimmed.len() < 2 { &frac[..2] } else { trimmed };
        write!(f, "${whole}.{shown}")
    }
}

/// Money spent over some requests: what the priced ones cost, and how many had no price.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Spent {
    /// The priced requests' sum.
    pub usd: Usd,
    /// Requests that reported usage but have no price.
    pub unpriced: u64,
}

impl Spent {
    /// Adds another sum.
    pub fn add(&mut self, other: Spent) {
        self.usd = self.usd.saturating_add(other.usd);
        self.unpriced = self.unpriced.saturating_add(other.unpriced);
    }

    /// Whether nothing was spent and nothing went unpriced.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// What one request cost, or that no price applies to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cost {
    /// The table priced it.
    Priced(Usd),
    /// No price applies: shown as "unpriced" and counted apart, never as $0.
    Unpriced(Unpriced),
}

impl Cost {
    /// The amount, if priced.
    pub fn priced(self) -> Option<Usd> {
        match self {
            Self::Priced(usd) => Some(usd),
            Self::Unpriced(_) => None,
        }
    }
}

/// Why a request has no price.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum Unpriced {
    /// Neither the table nor the user's config has the model (nor its family, for a dated name).
    Model,
    /// The model is priced, but not in the `service_tier` the provider says it used (or not yet on
    /// the day of the request).
    Tier,
    /// The request wrote to the prompt cache with the extended (12-hour) retention, and the model has
    /// no price for such writes.
    CacheRetention,
}

impl Unpriced {
    /// A short static label for metrics and the UI.
    pub fn label(self) -> &'static str {
        match self {
            Self::Model => "unpriced_model",
            Self::Tier => "unpriced_tier",
            Self::CacheRetention => "unpriced_cache_retention",
        }
    }
}

/// The processing tier a request was billed in: pass the `service_tier` of the *response*.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum ServiceTier {
    /// `default`, `auto`, or no tier reported.
    #[default]
    Standard,
    /// `flex`: slower, cheaper on the models that offer it.
    Flex,
    /// `priority`, or `fast` (OpenAI's name for it since 2026-07-30).
    Priority,
    /// `ultrafast` (GPT-6.2 Astra and Sol, GPT-6 Astra, GPT-6.1 Sol): a tier of its own, above
    /// priority.
    Ultrafast,
    /// A tier this table has no notion of (such as `scale`): such requests are unpriced.
    Other,
}

impl ServiceTier {
    /// Reads the provider's `service_tier` string (case-insensitive; absent = standard).
    pub fn from_response(tier: Option<&str>) -> Self {
        let Some(tier) = tier else { return Self::Standard };
        match tier.trim().to_ascii_lowercase().as_str() {
            "" | "default" | "auto" | "standard" => Self::Standard,
            "flex" => Self::Flex,
            "priority" | "fast" => Self::Priority,
            "ultrafast" => Self::Ultrafast,
            _ => Self::Other,
        }
    }
}
