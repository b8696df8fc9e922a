//! What one answer used: its token counts and the tier they were billed in, read from the provider's
//! `usage` object (as a tree, as text, or walked out of a whole answer).

use super::{read, ServiceTier};
use crate::scan;

/// The token counts a successful answer reported, and the service tier they were billed in: one type
/// from the answer to the bill. The relay finds it in an answer, records and events carry it, the live
/// pool and the metrics add it up, and the price table prices it. It lives in `spend` because what it
/// holds is exactly what a request is billed for (every count the price reads, the tier it is priced
/// in); the relay only knows where in an answer it is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, ts_rs::TS)]
pub struct Usage {
    /// Prompt tokens (`input_tokens`, or `prompt_tokens` on Chat Completions), cached and cache
    /// writes included.
    pub input: u64,
    /// Of those, served from the provider's prompt cache (`cached_tokens`).
    pub cached: u64,
    /// Output tokens (`output_tokens`, or `completion_tokens`), reasoning tokens included.
    pub output: u64,
    /// Of the input, tokens written to the prompt cache (`cache_write_tokens`, GPT-5.6 and later, on
    /// the models that bill them apart; 0 elsewhere). Only the price reads it.
    #[serde(skip)]
    pub cache_write: u64,
    /// The `service_tier` the answer says it was processed in (what the price is in; the Live view
    /// shows it).
    pub tier: ServiceTier,
    /// The prompt-cache retention the answer says was used (`prompt_cache_retention`): which rate its
    /// cache writes are billed at. Only the price reads it.
    #[serde(skip)]
    pub retention: CacheRetention,
}

/// How long a request asked the provider to keep what it wrote to the prompt cache, as the answer
/// echoes it in `prompt_cache_retention`: cache writes are billed at a rate per retention.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CacheRetention {
    /// Absent, `in_memory`, or any value Keymux does not know: the default (30-minute) retention.
    #[default]
    Default,
    /// `12h` or `24h` (the older name of the same extended retention).
    Extended,
}

impl CacheRetention {
    /// Reads an answer's `prompt_cache_retention` (case-insensitive).
    pub fn from_response(retention: Option<&str>) -> Self {
        match retention.map(|r| r.trim().to_ascii_lowercase()).as_deref() {
            Some("12h" | "24h") => Self::Extended,
            _ => Self::Default,
        }
    }
}

impl Usage {
    /// Reads OpenAI's `usage` object in the Responses, Chat Completions or Embeddings shape (billed in
    /// the standard tier until [`Usage::billed_in`]); `None` when it holds no token counts.
    pub fn from_json(usage: &serde_json::Value) -> Option<Self> {
        let count = |v: &serde_json::Value, key: &str| v.get(key).and_then(serde_json::Value::as_u64);
        let input = count(usage, "input_tokens").or_else(|| count(usage, "prompt_tokens"));
        let output = count(usage, "output_tokens").or_else(|| count(usage, "completion_tokens"));
        let details = usage.get("input_tokens_details").or_else(|| usage.get("prompt_tokens_details"));
        let detail = |key: &str| details.and_then(|d| count(d, key));
        Self::from_counts(input, output, detail("cached_tokens"), detail("cache_write_tokens"))
    }

    /// `from_json` over the object's text, read straight into the counts without building a tree
    /// (every answer has one; a tree of it cost as much as reading the rest of a 4 KB answer). The
    /// same counts as `from_json` for any object that names each member once.
    pub fn from_text(text: &[u8]) -> Option<Self> {
        // A struct would also be read from an array, by position.
        if text.trim_ascii_start().first() != Some(&b'{') {
            return None;
        }
        let read: read::Counts = serde_json::from_slice(text).ok()?;
        let input = read.input_tokens.0.or(read.prompt_tokens.0);
        let output = read.output_tokens.0.or(read.completion_tokens.0);
        let details =
            if read.input_tokens_details.present { read.input_tokens_details } else { read.prompt_tokens_details };
        Self::from_counts(input, output, details.cached_tokens.0, details.cache_write_tokens.0)
    }

    /// The counts a `usage` object held (each absent when it is missing or not a count); `None` when
    /// it holds neither an input nor an output count.
    fn from_counts(input: Option<u64>, output: Option<u64>, cached: Option<u64>, written: Option<u64>) -> Option<Self> {
        if input.is_none() && output.is_none() {
            return None;
        }
        Some(Self {
            input: input.unwrap_or(0),
            cached: cached.unwrap_or(0),
            output: output.unwrap_or(0),
            cache_write: written.unwrap_or(0),
            tier: ServiceTier::Standard,
            retention: CacheRetention::Default,
        })
    }

    /// The same counts, billed in the answer's `service_tier`.
    #[must_use]
    pub fn billed_in(self, service_tier: Option<&str>) -> Self {
        Self { tier: ServiceTier::from_response(service_tier), ..self }
    }

    /// The same counts, their cache writes made under the answer's `prompt_cache_retention`.
    #[must_use]
    pub fn retained(self, retention: Option<&str>) -> Self {
        Self { retention: CacheRetention::from_response(retention), ..self }
    }

    /// The usage of an answer from the raw text of its top-level `usage`, `service_tier` and
    /// `prompt_cache_retention` (as `scan::top_level_values` found them, for a walk that reads more
    /// of the answer at once: `relay::AnswerEnd`).
    pub(crate) fn from_walked(usage: Option<&[u8]>, tier: Option<&[u8]>, retention: Option<&[u8]>) -> Option<Self> {
        let (tier, retention) = (scan::string_value(tier)?, scan::string_value(retention)?);
        Some(Self::from_text(usage?)?.billed_in(tier.as_deref()).retained(retention.as_deref()))
    }

    /// The usage of an answer from its top-level `usage`, `service_tier` and `prompt_cache_retention`
    /// as a parser read them (for a parse that reads more of the answer at once: `relay::AnswerEnd`).
    pub(crate) fn from_parsed(
        usage: Option<&serde_json::Value>,
        tier: Option<&str>,
        retention: Option<&str>,
    ) -> Option<Self> {
        Some(Self::from_json(usage?)?.billed_in(tier).retained(retention))
    }
}
