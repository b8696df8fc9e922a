//! Hashed metrics, persisted in sled: per UTC hour × key fingerprint × operation, request counts by
//! status, affinity source and state, continuity and pins, failure categories, token and cached-token
//! sums, spend (nano-dollars) and unpriced requests, and a latency histogram. Days are sums of hours;
//! what was spent lately is also kept in memory per hour and key (`tally`), for today's and this
//! month's figures.
//!
//! Nothing identifying is stored: a key appears only as its fingerprint (a keyed HMAC of its secret under
//! the install secret), and no prompt, `prompt_cache_key`, affinity digest or body is ever recorded.
//! Counts are aggregated in memory and merged into sled every few seconds, so a request costs a map
//! update, not a disk write. If the store cannot be opened or written (disk full, read-only), Keymux
//! keeps serving and keeps the counts in memory; writes resume, without counting anything twice, when
//! the store recovers (`store`).
//!
//! Bounds: the pending map holds at most `MAX_PENDING` rows (one per hour × key × operation since the
//! last flush); the spend tally at most `tally::MAX_ROWS` (hours of the last `tally::WINDOW_HOURS`);
//! on disk, hours older than the retention are deleted at each flush.

mod counters;
mod store;
mod tally;
mod variant;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::Serialize;

use counters::json_name;
pub use counters::{Counters, LATENCY_BUCKETS_MS};
use store::{Rows, Store};
use tally::Tally;
pub use tally::WINDOW_HOURS as SPEND_WINDOW_HOURS;

use crate::budget::SpendNow;
use crate::clock::LocalPeriods;
use crate::events::RequestRecord;
use crate::spend::Spent;

/// Most pending rows kept while the store is failing; beyond it new combinations are dropped (and
/// counted), never the process.
pub const MAX_PENDING: usize = 20_000;

const HOUR_MS: u64 = 3_600_000;

/// One row of the per-day metrics API.
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
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize, ts_rs::TS)]
pub struct StoreStatus {
    /// Whether counts reach disk.
    pub persisted: bool,
    /// The store's directory, if any.
    #[ts(type = "string | null")]
    pub path: Option<PathBuf>,
    /// The last problem, with what to do.
    pub error: Option<String>,
    /// Something the user should know that is not a failure (a corrupt store moved aside).
    pub notice: Option<String>,
    /// Combinations dropped because the store kept failing.
    pub dropped: u64,
    /// Rows waiting to be written.
    pub pending: usize,
}

/// What a flush changed about the store's health, for the event stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreHealth {
    /// Writing started failing (the message says why and what to do).
    Failed(String),
    /// Writing works again.
    Recovered,
}

#[derive(Default)]
struct Pending {
    rows: Rows,
    dropped: u64,
    /// Spend of the last hours: what the store held at open, plus every request counted since.
    spent: Tally,
    /// Today's and this month's spend per key, kept up to date as requests are counted (built from
    /// `spent` when a period begins): what budgets are checked against, without a walk per request.
    now: Option<Arc<SpendNow>>,
}

/// The metrics of one gateway.
pub struct Metrics {
    pending: Mutex<Pending>,
    store: Option<Mutex<Store>>,
    path: Option<PathBuf>,
    retention_days: u32,
    error: Mutex<Option<String>>,
    notice: Option<String>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Plain counters: a panic elsewhere leaves them valid.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Metrics {
    /// Metrics kept in memory only (ephemeral runs, tests that do not look at disk).
    pub fn in_memory() -> Self {
        Self {
            pending: Mutex::default(),
            store: None,
            path: None,
            retention_days: 0,
            error: Mutex::new(None),
            notice: None,
        }
    }

    /// Opens (or creates) the store in `dir`. A store that cannot be opened keeps metrics in memory,
    /// says why, and is tried again at each flush. Blocks (sled): call it off the async threads.
    pub fn open(dir: &Path, retention_days: u32) -> Self {
        let mut opened = Store::open(dir);
        opened.error = opened.error.as_deref().map(advise);
        let mut spent = Tally::default();
        // The wall clock, not a gateway's: this runs once, before any gateway reads the figures.
        let now = crate::clock::Clock::system().unix_ms();
        let since = hour_of(now).saturating_sub(tally::WINDOW_HOURS);
        // A store that cannot be opened now adds nothing here: today's and this month's spend then
        // begin at this start (the usage series, read from the store, has the rest once it opens).
        for ((hour, fingerprint, _), counters) in opened.store.read(since) {
            spent.add(hour, &fingerprint, counters.spent());
        }
        if let Some(error) = &opened.error {
            tracing::warn!("{error}");
        }
        if let Some(notice) = &opened.notice {
            tracing::warn!("{notice}");
        }
        Self {
            pending: Mutex::new(Pending { spent, ..Pending::default() }),
            store: Some(Mutex::new(opened.store)),
            path: Some(dir.to_owned()),
            retention_days: retention_days.max(1),
            error: Mutex::new(opened.error),
            notice: opened.notice,
        }
    }

    /// Counts a finished request under its key's fingerprint.
    pub fn record(&self, record: &RequestRecord, fingerprint: Option<String>) {
        let key = (
            hour_of(record.routed.at_unix_ms),
            fingerprint.unwrap_or_else(|| "none".into()),
            json_name(&record.routed.operation),
        );
        let mut pending = lock(&self.pending);
        // Spend counts even when the rows waiting for the store are full: budgets depend on it.
        let spent = Counters::spent_by(record);
        pending.spent.add(key.0, &key.1, spent);
        if let Some(now) = pending.now.as_mut() {
            Arc::make_mut(now).add(u64::from(key.0) * HOUR_MS, &key.1, spent);
        }
        if !pending.rows.contains_key(&key) && pending.rows.len() >= MAX_PENDING {
            pending.dropped += 1;
            return;
        }
        pending.rows.entry(key).or_default().count(record);
    }

    /// Today's and this month's spend per key at `now_unix_ms`: kept up to date as requests are
    /// counted, and made again from the hours in memory (for the local periods `periods` gives) only
    /// when `now_unix_ms` is past the local day the sums belong to. So the request path reads the
    /// zone's calendar once a day, not once a request; a change of the system's time zone is followed
    /// from the next local midnight.
    pub fn spend_now(&self, now_unix_ms: u64, periods: impl FnOnce() -> LocalPeriods) -> Arc<SpendNow> {
        let mut pending = lock(&self.pending);
        let today =
            |n: &&Arc<SpendNow>| (n.periods.day_start_unix_ms..n.periods.day_end_unix_ms).contains(&now_unix_ms);
        if let Some(now) = pending.now.as_ref().filter(today) {
            return now.clone();
        }
        let periods = periods();
        let (day, month) =
            (pending.spent.since(periods.day_start_unix_ms), pending.spent.since(periods.month_start_unix_ms));
        let mut by_key: HashMap<String, (Spent, Spent)> = HashMap::new();
        for (fingerprint, spent) in month {
            by_key.entry(fingerprint).or_default().1 = spent;
        }
        for (fingerprint, spent) in day {
            by_key.entry(fingerprint).or_default().0 = spent;
        }
        let now = Arc::new(SpendNow { periods, by_key });
        pending.now = Some(now.clone());
        now
    }

    /// What each key (by fingerprint, `none` for no key) spent in the hours that start at or after
    /// `since_unix_ms`, up to [`SPEND_WINDOW_HOURS`] back, from memory (the store is not read).
    pub fn spent_since(&self, since_unix_ms: u64) -> HashMap<String, Spent> {
        lock(&self.pending).spent.since(since_unix_ms)
    }

    /// Merges pending counts into the store and deletes hours past the retention. Without a store the
    /// counts stay in memory. Blocks (sled): call it off the async threads. Returns the result and, when
    /// the store's health changed, the change.
    pub fn flush(&self, now_unix_ms: u64) -> (Result<(), String>, Option<StoreHealth>) {
        lock(&self.pending).spent.prune(hour_of(now_unix_ms).saturating_sub(tally::WINDOW_HOURS));
        let Some(store) = &self.store else { return (Ok(()), None) };
        let rows = std::mem::take(&mut lock(&self.pending).rows);
        let oldest = hour_of(now_unix_ms).saturating_sub(self.retention_days.saturating_mul(24));
        let mut store = lock(store);
        let result = if rows.is_empty() && store.is_settled() { Ok(()) } else { store.write(rows, oldest) };
        drop(store);
        let result = result.map_err(|(message, back)| {
            let mut pending = lock(&self.pending);
            for (key, counters) in back {
                pending.rows.entry(key).or_default().add(&counters);
            }
            advise(&message)
        });
        let mut error = lock(&self.error);
        let change = match (&result, error.is_some()) {
            (Ok(()), true) => Some(StoreHealth::Recovered),
            (Err(e), false) => Some(StoreHealth::Failed(e.clone())),
            _ => None,
        };
        if let Some(change) = &change {
            tracing::warn!(?change, "metrics store");
        }
        *error = result.as_ref().err().cloned();
        (result, change)
    }

    /// Stored and pending rows from `since_hour` on. Blocks (sled).
    fn merged(&self, since_hour: u32) -> Rows {
        let mut rows = self.store.as_ref().map(|s| lock(s).read(since_hour)).unwrap_or_default();
        for (key, counters) in lock(&self.pending).rows.iter().filter(|(k, _)| k.0 >= since_hour) {
            rows.entry(key.clone()).or_default().add(counters);
        }
        rows
    }

    /// Per-day rows of the last `days` days up to `today` (a UTC day number), newest day first.
    pub fn rows(&self, days: u32, today: u32) -> Vec<Row> {
        let since_day = today.saturating_sub(days.saturating_sub(1));
        let mut by_day: BTreeMap<(u32, String, String), Counters> = BTreeMap::new();
        for ((hour, fp, op), counters) in self.merged(since_day.saturating_mul(24)) {
            by_day.entry((hour / 24, fp, op)).or_default().add(&counters);
        }
        let mut rows: Vec<Row> = by_day
            .into_iter()
            .map(|((day, fp, op), counters)| Row { day: day_name(day), key_fingerprint: fp, operation: op, counters })
            .collect();
        rows.sort_by(|a, b| {
            b.day.cmp(&a.day).then(a.key_fingerprint.cmp(&b.key_fingerprint)).then(a.operation.cmp(&b.operation))
        });
        rows
    }

    /// Counters summed per (bucket start, key fingerprint) from `since_unix_ms` on, buckets of
    /// `bucket_hours` hours (1 or 24), oldest first; `None` keys sum every key.
    pub fn series(&self, since_unix_ms: u64, bucket_hours: u32) -> Vec<(u64, String, Counters)> {
        let bucket_hours = bucket_hours.max(1);
        let mut out: BTreeMap<(u32, String), Counters> = BTreeMap::new();
        for ((hour, fp, _op), counters) in self.merged(hour_of(since_unix_ms)) {
            let start = hour - hour % bucket_hours;
            out.entry((start, fp)).or_default().add(&counters);
            out.entry((start, "total".into())).or_default().add(&counters);
        }
        out.into_iter().map(|((start, fp), c)| (u64::from(start) * HOUR_MS, fp, c)).collect()
    }

    /// Where the metrics live, and any problem.
    pub fn status(&self) -> StoreStatus {
        let error = lock(&self.error).clone();
        let pending = lock(&self.pending);
        StoreStatus {
            persisted: self.store.is_some() && error.is_none(),
            path: self.path.clone(),
            error,
            notice: self.notice.clone(),
            dropped: pending.dropped,
            pending: pending.rows.len(),
        }
    }
}

/// A store failure, with what it means and what to do.
fn advise(failure: &str) -> String {
    format!(
        "{failure}; counts are kept in memory and written once the store recovers. Free disk space, fix the \
         directory's permissions, or set metrics_dir"
    )
}

fn hour_of(unix_ms: u64) -> u32 {
    u32::try_from(unix_ms / HOUR_MS).unwrap_or(u32::MAX)
}

/// `YYYY-MM-DD` for a day number since 1970-01-01 (civil-from-days, proleptic Gregorian).
pub fn day_name(day: u32) -> String {
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

/// The key of a pending row, for tests that fill the map.
#[cfg(test)]
fn key(hour: u32, fp: &str) -> store::RowKey {
    (hour, fp.to_owned(), "responses_create".to_owned())
}

#[cfg(test)]
mod tests;
