//! Hashed metrics, persisted in sled: per UTC day × key fingerprint × operation, request counts by status,
//! affinity source and state, continuity and pins, failure categories, token and cached-token sums, and a
//! latency histogram.
//!
//! Nothing identifying is stored: a key appears only as its fingerprint (a keyed HMAC of its secret under
//! the install secret), and no prompt, `prompt_cache_key`, affinity digest or body is ever recorded.
//! Counts are aggregated in memory and merged into sled every few seconds, so a request costs a map
//! update, not a disk write. If the store cannot be opened or written (disk full, read-only), Keymux
//! keeps serving and keeps the counts in memory, and the status API says what is wrong.
//!
//! Bounds: the pending map holds at most one entry per (day, key, operation) since the last flush
//! (days × 64 keys × 10 operations); on disk, days older than the retention are deleted at each flush.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::events::RequestRecord;

/// Upper bounds (milliseconds) of the latency histogram's buckets; the last bucket is everything above.
pub const LATENCY_BUCKETS_MS: [u32; 7] = [50, 100, 250, 500, 1_000, 2_500, 10_000];
/// Most pending entries kept while the store is failing; beyond it new combinations are dropped (and
/// counted), never the process.
pub const MAX_PENDING: usize = 20_000;

/// Counters of one (day, key, operation).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
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
    /// Failed attempts by category.
    pub failures: BTreeMap<String, u64>,
    /// Prompt tokens of successful answers.
    pub input_tokens: u64,
    /// Of those, served from the provider's cache.
    pub cached_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Latency histogram to response headers (`LATENCY_BUCKETS_MS`, then above).
    pub latency_ms: [u64; 8],
}

impl Counters {
    fn add(&mut self, other: &Counters) {
        self.requests += other.requests;
        merge(&mut self.by_status, &other.by_status);
        merge(&mut self.by_affinity, &other.by_affinity);
        self.continuity_hits += other.continuity_hits;
        self.pinned += other.pinned;
        self.rescued += other.rescued;
        merge(&mut self.failures, &other.failures);
        self.input_tokens += other.input_tokens;
        self.cached_tokens += other.cached_tokens;
        self.output_tokens += other.output_tokens;
        for (a, b) in self.latency_ms.iter_mut().zip(other.latency_ms) {
            *a += b;
        }
    }
}

fn merge(into: &mut BTreeMap<String, u64>, from: &BTreeMap<String, u64>) {
    for (k, v) in from {
        *into.entry(k.clone()).or_default() += v;
    }
}

/// One row of the metrics API.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Row {
    /// UTC day as `YYYY-MM-DD`.
    pub day: String,
    /// Key fingerprint (`none` for requests no key served).
    pub key_fingerprint: String,
    /// Operation.
    pub operation: String,
    /// The counters.
    pub counters: Counters,
}

/// Where the metrics live now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StoreStatus {
    /// Whether counts reach disk.
    pub persisted: bool,
    /// The store's directory, if any.
    pub path: Option<PathBuf>,
    /// The last problem, with what to do.
    pub error: Option<String>,
    /// Combinations dropped because the store kept failing.
    pub dropped: u64,
}

#[derive(Default)]
struct Pending {
    rows: BTreeMap<(u32, String, String), Counters>,
    dropped: u64,
}

/// The metrics of one gateway.
pub struct Metrics {
    pending: Mutex<Pending>,
    db: Option<sled::Db>,
    path: Option<PathBuf>,
    retention_days: u32,
    error: Mutex<Option<String>>,
}

impl Metrics {
    /// Metrics kept in memory only (ephemeral runs, tests that do not look at disk).
    pub fn in_memory() -> Self {
        Self { pending: Mutex::default(), db: None, path: None, retention_days: 0, error: Mutex::new(None) }
    }

    /// Opens (or creates) the store in `dir`. A store that cannot be opened leaves metrics in memory and
    /// reports why.
    pub fn open(dir: &Path, retention_days: u32) -> Self {
        let mut metrics = Self::in_memory();
        metrics.path = Some(dir.to_owned());
        metrics.retention_days = retention_days.max(1);
        match std::fs::create_dir_all(dir)
            .map_err(|e| e.to_string())
            .and_then(|()| sled::open(dir).map_err(|e| e.to_string()))
        {
            Ok(db) => metrics.db = Some(db),
            Err(e) => {
                let message = format!(
                    "metrics store {} could not be opened ({e}); counts stay in memory until restart. Check the disk \
                     and the directory's permissions, or set metrics_dir",
                    dir.display()
                );
                tracing::warn!("{message}");
                *lock(&metrics.error) = Some(message);
            }
        }
        metrics
    }

    /// Counts a finished request under its key's fingerprint.
    pub fn record(&self, record: &RequestRecord, fingerprint: Option<String>) {
        let mut c = Counters { requests: 1, ..Counters::default() };
        let class = match record.status {
            429 => "429".to_owned(),
            499 => "499".to_owned(),
            s => format!("{}xx", s / 100),
        };
        c.by_status.insert(class, 1);
        let affinity =
            format!("{}/{}", json_name(&record.decision.affinity_source), json_name(&record.decision.affinity_state));
        c.by_affinity.insert(affinity, 1);
        c.continuity_hits = u64::from(record.decision.continuity_hit);
        c.pinned = u64::from(record.decision.pin.is_some());
        c.rescued = u64::from(!record.decision.rescued_orgs.is_empty());
        for failure in record.attempts.iter().filter_map(|a| a.failure) {
            *c.failures.entry(json_name(&failure)).or_default() += 1;
        }
        let bucket = LATENCY_BUCKETS_MS.iter().position(|b| record.ttfb_ms < *b).unwrap_or(LATENCY_BUCKETS_MS.len());
        c.latency_ms[bucket] = 1;
        if let Some(usage) = record.usage {
            c.input_tokens = usage.input;
            c.cached_tokens = usage.cached;
            c.output_tokens = usage.output;
        }
        self.add(day_of(record.at_unix_ms), fingerprint, json_name(&record.operation), &c);
    }

    fn add(&self, day: u32, fingerprint: Option<String>, operation: String, c: &Counters) {
        let mut pending = lock(&self.pending);
        let key = (day, fingerprint.unwrap_or_else(|| "none".into()), operation);
        if !pending.rows.contains_key(&key) && pending.rows.len() >= MAX_PENDING {
            pending.dropped += 1;
            return;
        }
        pending.rows.entry(key).or_default().add(c);
    }

    /// Merges pending counts into the store and prunes days past the retention (`today` is the UTC day
    /// number). Without a store, or when the store fails, the counts stay pending (and the error is
    /// reported).
    pub fn flush(&self, today: u32) -> Result<(), String> {
        let Some(db) = &self.db else { return Ok(()) };
        let rows = std::mem::take(&mut lock(&self.pending).rows);
        if rows.is_empty() {
            return Ok(());
        }
        let result = (|| -> Result<(), String> {
            for ((day, fp, op), counters) in &rows {
                let key = row_key(*day, fp, op);
                let mut total: Counters = match db.get(&key).map_err(|e| e.to_string())? {
                    Some(bytes) => serde_json::from_slice(&bytes).unwrap_or_default(),
                    None => Counters::default(),
                };
                total.add(counters);
                let bytes = serde_json::to_vec(&total).map_err(|e| e.to_string())?;
                db.insert(key, bytes).map_err(|e| e.to_string())?;
            }
            let oldest = today.saturating_sub(self.retention_days);
            for entry in db.range(..day_prefix(oldest)) {
                let (key, _) = entry.map_err(|e| e.to_string())?;
                db.remove(key).map_err(|e| e.to_string())?;
            }
            db.flush().map_err(|e| e.to_string())?;
            Ok(())
        })();
        match result {
            Ok(()) => {
                *lock(&self.error) = None;
                Ok(())
            }
            Err(e) => {
                // Put the counts back: nothing is lost while the process lives.
                let mut pending = lock(&self.pending);
                for (key, counters) in rows {
                    pending.rows.entry(key).or_default().add(&counters);
                }
                let message = format!("metrics could not be written ({e}); counts are kept in memory. Free disk space or fix the directory");
                let mut error = lock(&self.error);
                if error.as_deref() != Some(message.as_str()) {
                    tracing::warn!("{message}");
                }
                *error = Some(message.clone());
                Err(message)
            }
        }
    }

    /// Rows of the last `days` days up to `today` (stored and pending together), newest day first.
    pub fn rows(&self, days: u32, today: u32) -> Vec<Row> {
        let since = today.saturating_sub(days.saturating_sub(1));
        let mut merged: BTreeMap<(u32, String, String), Counters> = BTreeMap::new();
        if let Some(db) = &self.db {
            for (key, value) in db.range(day_prefix(since)..).flatten() {
                if let (Some(k), Ok(c)) = (parse_key(&key), serde_json::from_slice::<Counters>(&value)) {
                    merged.entry(k).or_default().add(&c);
                }
            }
        }
        for (k, c) in lock(&self.pending).rows.iter().filter(|((d, _, _), _)| *d >= since) {
            merged.entry(k.clone()).or_default().add(c);
        }
        let mut rows: Vec<Row> = merged
            .into_iter()
            .map(|((day, fp, op), counters)| Row { day: day_name(day), key_fingerprint: fp, operation: op, counters })
            .collect();
        rows.sort_by(|a, b| {
            b.day.cmp(&a.day).then(a.key_fingerprint.cmp(&b.key_fingerprint)).then(a.operation.cmp(&b.operation))
        });
        rows
    }

    /// Where the metrics live, and any problem.
    pub fn status(&self) -> StoreStatus {
        StoreStatus {
            persisted: self.db.is_some() && lock(&self.error).is_none(),
            path: self.path.clone(),
            error: lock(&self.error).clone(),
            dropped: lock(&self.pending).dropped,
        }
    }
}

fn row_key(day: u32, fp: &str, op: &str) -> Vec<u8> {
    format!("{day:08}|{fp}|{op}").into_bytes()
}

/// Sorts before every row of `day` and after every row of earlier days.
fn day_prefix(day: u32) -> Vec<u8> {
    format!("{day:08}|").into_bytes()
}

fn parse_key(key: &[u8]) -> Option<(u32, String, String)> {
    let text = std::str::from_utf8(key).ok()?;
    let mut parts = text.splitn(3, '|');
    Some((parts.next()?.parse().ok()?, parts.next()?.to_owned(), parts.next()?.to_owned()))
}

/// The serde name of a unit enum value (`prompt_cache_key`, `upstream_5xx`…).
fn json_name<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        _ => "unknown".into(),
    }
}

fn day_of(unix_ms: u64) -> u32 {
    crate::clock::utc_day(unix_ms)
}

/// `YYYY-MM-DD` for a day number since 1970-01-01 (civil-from-days, proleptic Gregorian).
fn day_name(day: u32) -> String {
    let z = i64::from(day) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Plain counters: a panic elsewhere leaves them valid.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{Attempt, FailureKind, Transport};
    use crate::facts::AffinitySource;
    use crate::facts::Operation;
    use crate::keys::KeyId;
    use crate::router::{AffinityState, Decision};

    const NOW_MS: u64 = 1_780_000_000_000;

    fn today() -> u32 {
        day_of(NOW_MS)
    }

    fn record(status: u16, ms: u32) -> RequestRecord {
        let mut decision = Decision::new(1);
        decision.affinity_source = AffinitySource::PromptCacheKey;
        decision.affinity_state = AffinityState::Hit;
        let mut record = RequestRecord::new(NOW_MS, Operation::ResponsesCreate, Transport::Http, decision);
        record.model = Some("gpt-5.5".into());
        record.stream = true;
        record.attempts = vec![Attempt {
            key: KeyId::new("k_a"),
            status: Some(500),
            failure: Some(FailureKind::Upstream5xx),
            duration_ms: 3,
        }];
        record.status = status;
        record.ttfb_ms = ms;
        record.duration_ms = ms;
        record
    }

    #[test]
    fn counts_survive_a_restart_through_sled() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let m = Metrics::open(dir.path(), 90);
            m.record(&record(200, 30), Some("abcd1234".into()));
            let mut with_usage = record(200, 700);
            with_usage.usage = Some(crate::relay::Usage { input: 100, cached: 60, output: 7 });
            m.record(&with_usage, Some("abcd1234".into()));
            m.flush(today()).expect("flushed");
            assert!(m.status().persisted);
        }
        let m = Metrics::open(dir.path(), 90);
        assert!(m.status().persisted, "{:?}", m.status());
        m.record(&record(429, 5), Some("abcd1234".into()));
        let rows = m.rows(1, today());
        assert_eq!(rows.len(), 1);
        let c = &rows[0].counters;
        assert_eq!(rows[0].key_fingerprint, "abcd1234");
        assert_eq!(rows[0].operation, "responses_create");
        assert_eq!(c.requests, 3, "two from before the restart, one pending");
        assert_eq!(c.by_status.get("2xx"), Some(&2));
        assert_eq!(c.by_status.get("429"), Some(&1));
        assert_eq!(c.by_affinity.get("prompt_cache_key/hit"), Some(&3));
        assert_eq!(c.failures.get("upstream_5xx"), Some(&3));
        assert_eq!((c.input_tokens, c.cached_tokens, c.output_tokens), (100, 60, 7));
        assert_eq!(c.latency_ms[0] + c.latency_ms[4], 3);
    }

    #[test]
    fn an_unusable_store_reports_and_keeps_counting() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("not-a-dir");
        std::fs::write(&file, b"x").expect("file");
        let m = Metrics::open(&file, 90);
        let status = m.status();
        assert!(!status.persisted);
        assert!(status.error.as_deref().is_some_and(|e| e.contains("could not be opened")), "{status:?}");
        m.record(&record(200, 1), None);
        assert!(m.flush(today()).is_ok(), "nothing to write to");
        assert_eq!(m.rows(1, today())[0].counters.requests, 1, "kept in memory");
    }

    #[test]
    fn day_names() {
        assert_eq!(day_name(0), "1970-01-01");
        assert_eq!(day_name(20_786), "2026-11-29");
        assert_eq!(day_name(11_016), "2000-02-29");
    }
}
