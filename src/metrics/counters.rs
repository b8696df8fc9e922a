//! What is counted per (hour, key fingerprint, operation): plain sums that merge by addition, so a row
//! read back from the store and a pending row combine exactly.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::events::RequestRecord;
use crate::spend::{Spent, Usd};

/// Upper bounds (milliseconds) of the latency histogram's buckets; the last bucket is everything above.
pub const LATENCY_BUCKETS_MS: [u32; 11] = [25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000];
/// Buckets of the histogram, the overflow included.
pub const LATENCY_SLOTS: usize = LATENCY_BUCKETS_MS.len() + 1;

/// Counters of one (hour, key, operation).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Counters {
    /// Requests finished.
    pub requests: u64,
    /// By status class (`2xx`, `4xx`, `429`, `5xx`, `499`…).
    pub by_status: BTreeMap<String, u64>,
    /// By `affinity_source/affinity_state`.
    pub by_affinity: BTreeMap<String, u64>,
    /// Requests bound by continuity.
    pub continuity_hits: u64,
    /// Requests pinned by encrypted content.
    pub pinned: u64,
    /// Requests rescued (unreadable items dropped).
    pub rescued: u64,
    /// Requests whose answer said the provider dropped reasoning from their input (`input_transformations`,
    /// turn boundaries left out): turns that lost part of their session's reasoning. A row written
    /// before Keymux read them reads as 0.
    pub reasoning_dropped: u64,
    /// Of those, the ones dropped for `organization_mismatch` (the turn reached an organization where
    /// its session's reasoning does not live).
    pub reasoning_misplaced: u64,
    /// Failed attempts by category.
    pub failures: BTreeMap<String, u64>,
    /// Prompt tokens of successful answers.
    pub input_tokens: u64,
    /// Of those, served from the provider's cache.
    pub cached_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Latency histogram to the answer's first byte (`LATENCY_BUCKETS_MS`, then above).
    pub latency_ms: Vec<u64>,
    /// What the priced requests cost, in billionths of a US dollar (exact, so sums never drift). A row
    /// written before Keymux priced requests reads as 0.
    pub spend_nanos: u64,
    /// Requests that reported usage but had no price (their model or tier is not in the price table).
    pub unpriced: u64,
}

impl Counters {
    /// The counts one finished request adds.
    #[cfg(test)]
    pub fn of(record: &RequestRecord) -> Self {
        let mut c = Counters::default();
        c.count(record);
        c
    }

    /// Adds one finished request's counts in place: what the request path calls, so a request that
    /// falls in a row already holding its status, affinity and failure names allocates nothing.
    pub fn count(&mut self, record: &RequestRecord) {
        self.requests += 1;
        bump(&mut self.by_status, status_class(record.status));
        let decision = &record.routed.decision;
        let (source, state) = (unit_name(&decision.affinity_source), unit_name(&decision.affinity_state));
        let mut affinity = [0u8; 64];
        match joined(&mut affinity, &source, &state) {
            Some(name) => bump(&mut self.by_affinity, name),
            None => bump(&mut self.by_affinity, &format!("{source}/{state}")),
        }
        self.continuity_hits += u64::from(decision.continuity_hit);
        self.pinned += u64::from(decision.pin.is_some());
        self.rescued += u64::from(!decision.rescued_orgs.is_empty());
        if let Some(dropped) = decision.reasoning_dropped {
            self.reasoning_dropped += 1;
            self.reasoning_misplaced += u64::from(dropped.wrong_organization());
        }
        for failure in record.attempts.iter().filter_map(|a| a.failure) {
            bump(&mut self.failures, &unit_name(&failure));
        }
        if self.latency_ms.len() < LATENCY_SLOTS {
            self.latency_ms.resize(LATENCY_SLOTS, 0);
        }
        let bucket = LATENCY_BUCKETS_MS.iter().position(|b| record.ttfb_ms < *b).unwrap_or(LATENCY_BUCKETS_MS.len());
        self.latency_ms[bucket] += 1;
        if let Some(usage) = record.usage {
            self.input_tokens += usage.input;
            self.cached_tokens += usage.cached;
            self.output_tokens += usage.output;
        }
        self.spend_nanos = self.spend_nanos.saturating_add(record.cost_usd.map_or(0, Usd::nanos));
        self.unpriced += u64::from(record.unpriced.is_some());
    }

    /// What one finished request spent: what `Counters::of(record).spent()` says.
    pub fn spent_by(record: &RequestRecord) -> Spent {
        Spent {
            usd: Usd::from_nanos(record.cost_usd.map_or(0, Usd::nanos)),
            unpriced: u64::from(record.unpriced.is_some()),
        }
    }

    /// What these requests spent.
    pub fn spent(&self) -> Spent {
        Spent { usd: Usd::from_nanos(self.spend_nanos), unpriced: self.unpriced }
    }

    /// Adds another row's counts.
    pub fn add(&mut self, other: &Counters) {
        self.requests += other.requests;
        merge(&mut self.by_status, &other.by_status);
        merge(&mut self.by_affinity, &other.by_affinity);
        self.continuity_hits += other.continuity_hits;
        self.pinned += other.pinned;
        self.rescued += other.rescued;
        self.reasoning_dropped += other.reasoning_dropped;
        self.reasoning_misplaced += other.reasoning_misplaced;
        merge(&mut self.failures, &other.failures);
        self.input_tokens += other.input_tokens;
        self.cached_tokens += other.cached_tokens;
        self.output_tokens += other.output_tokens;
        self.spend_nanos = self.spend_nanos.saturating_add(other.spend_nanos);
        self.unpriced += other.unpriced;
        if self.latency_ms.len() < other.latency_ms.len() {
            self.latency_ms.resize(other.latency_ms.len(), 0);
        }
        for (a, b) in self.latency_ms.iter_mut().zip(&other.latency_ms) {
            *a += b;
        }
    }

    /// The share of input tokens the provider served from its prompt cache.
    pub fn cached_ratio(&self) -> f64 {
        if self.input_tokens == 0 {
            0.0
        } else {
            self.cached_tokens as f64 / self.input_tokens as f64
        }
    }

    /// The `q`-quantile (0 to 1) of latency, as the upper bound of the bucket it falls in (milliseconds);
    /// `None` with no requests. Past the last bound it says the last bound.
    pub fn latency_quantile(&self, q: f64) -> Option<u32> {
        let total: u64 = self.latency_ms.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, n) in self.latency_ms.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(
                    LATENCY_BUCKETS_MS.get(i).copied().unwrap_or(LATENCY_BUCKETS_MS[LATENCY_BUCKETS_MS.len() - 1]),
                );
            }
        }
        LATENCY_BUCKETS_MS.last().copied()
    }

    /// Reads a row written by an earlier version: its eight latency buckets ([50, 100, 250, 500, 1000,
    /// 2500, 10000] ms, then above) go to the current buckets with the same bounds.
    pub fn upgrade(mut self) -> Self {
        if self.latency_ms.len() == 8 {
            const OLD_TO_NEW: [usize; 8] = [1, 2, 3, 4, 5, 6, 8, 9];
            let mut latency = vec![0; LATENCY_SLOTS];
            for (old, n) in self.latency_ms.iter().enumerate() {
                latency[OLD_TO_NEW[old]] += n;
            }
            self.latency_ms = latency;
        }
        self
    }
}

/// Adds one to `name`'s count, allocating its name only the first time the map sees it.
fn bump(map: &mut BTreeMap<String, u64>, name: &str) {
    match map.get_mut(name) {
        Some(n) => *n += 1,
        None => {
            map.insert(name.to_owned(), 1);
        }
    }
}

/// A status's class as the counters name it (`2xx`, `429`, `499`…).
fn status_class(status: u16) -> &'static str {
    const CLASSES: [&str; 10] = ["0xx", "1xx", "2xx", "3xx", "4xx", "5xx", "6xx", "7xx", "8xx", "9xx"];
    match status {
        429 => "429",
        499 => "499",
        s => CLASSES.get(usize::from(s / 100)).copied().unwrap_or("other"),
    }
}

/// `a/b` written into `buf`, when it fits.
fn joined<'b>(buf: &'b mut [u8; 64], a: &str, b: &str) -> Option<&'b str> {
    let len = a.len() + 1 + b.len();
    let out = buf.get_mut(..len)?;
    out[..a.len()].copy_from_slice(a.as_bytes());
    out[a.len()] = b'/';
    out[a.len() + 1..].copy_from_slice(b.as_bytes());
    std::str::from_utf8(out).ok()
}

fn merge(into: &mut BTreeMap<String, u64>, from: &BTreeMap<String, u64>) {
    for (k, v) in from {
        *into.entry(k.clone()).or_default() += v;
    }
}

/// The serde name of a unit enum value (`prompt_cache_key`, `upstream_5xx`…).
pub fn json_name<T: Serialize>(value: &T) -> String {
    unit_name(value).into_owned()
}

/// `json_name` borrowed when the value is a unit variant (its name is static), the one per-request
/// counters use: read off the serializer, no JSON value built.
fn unit_name<T: Serialize>(value: &T) -> std::borrow::Cow<'static, str> {
    if let Ok(name) = value.serialize(super::variant::VariantName) {
        return name.into();
    }
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s.into(),
        _ => "unknown".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_come_from_the_histogram() {
        let mut c = Counters { latency_ms: vec![0; LATENCY_SLOTS], ..Counters::default() };
        assert_eq!(c.latency_quantile(0.5), None);
        c.latency_ms[0] = 90; // under 25 ms
        c.latency_ms[5] = 9; // under 1 s
        c.latency_ms[LATENCY_SLOTS - 1] = 1; // over a minute
        assert_eq!(c.latency_quantile(0.5), Some(25));
        assert_eq!(c.latency_quantile(0.95), Some(1_000));
        assert_eq!(c.latency_quantile(1.0), Some(60_000));
    }

    #[test]
    fn rows_of_the_earlier_layout_keep_their_bounds() {
        let old = Counters { latency_ms: vec![1, 2, 3, 4, 5, 6, 7, 8], ..Counters::default() }.upgrade();
        assert_eq!(old.latency_ms.len(), LATENCY_SLOTS);
        assert_eq!(old.latency_ms[1], 1, "under 50 ms stays under 50 ms");
        assert_eq!(old.latency_ms[8], 7, "under 10 s stays under 10 s");
        assert_eq!(old.latency_ms.iter().sum::<u64>(), 36);
    }
}
