//! The spend report (`GET /keymux/api/spend`, and `keymux usage`): requests, tokens and money per key,
//! pool, token or model since a local midnight, with the totals.
//!
//! Per key and per pool it reads the stored hourly metrics, so it survives restarts and needs no
//! running gateway (the CLI builds it from the store when none runs). The metrics keep numbers per
//! hashed key and nothing else, so per token and per model come from the requests the gateway still
//! remembers (`events::RECENT_CAPACITY`, since it started), and the report says so (`recent_only`).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::types::{SpendBy, SpendReport, SpendRow};
use crate::events::RequestRecord;
use crate::gateway::Gateway;
use crate::metrics::Counters;

/// How the stored metrics' rows (named by key fingerprint) are grouped.
pub enum Grouping<'a> {
    /// One row per key: (fingerprint, label) of the keys known now.
    Keys(&'a [(String, String)]),
    /// One row per pool: (name, its keys' fingerprints).
    Pools(&'a [(String, Vec<String>)]),
}

impl SpendRow {
    fn named(name: impl Into<String>) -> Self {
        Self { name: name.into(), ..Self::default() }
    }

    fn add(&mut self, other: &SpendRow) {
        self.requests += other.requests;
        self.input_tokens += other.input_tokens;
        self.cached_tokens += other.cached_tokens;
        self.output_tokens += other.output_tokens;
        self.spend_usd = self.spend_usd.saturating_add(other.spend_usd);
        self.unpriced_requests += other.unpriced_requests;
    }

    fn add_counters(&mut self, c: &Counters) {
        let spent = c.spent();
        self.add(&SpendRow {
            name: String::new(),
            requests: c.requests,
            input_tokens: c.input_tokens,
            cached_tokens: c.cached_tokens,
            output_tokens: c.output_tokens,
            spend_usd: spent.usd,
            unpriced_requests: spent.unpriced,
        });
    }

    fn add_record(&mut self, r: &RequestRecord) {
        let usage = r.usage.unwrap_or_default();
        self.add(&SpendRow {
            name: String::new(),
            requests: 1,
            input_tokens: usage.input,
            cached_tokens: usage.cached,
            output_tokens: usage.output,
            spend_usd: r.cost_usd.unwrap_or_default(),
            unpriced_requests: u64::from(r.unpriced.is_some()),
        });
    }
}

/// Rows and total from hourly metric `points` (bucket start, fingerprint, counters) of the buckets
/// that start at or after `since_unix_ms` (`total` points are left out: the total is summed here).
fn from_metrics(
    points: &[(u64, String, Counters)],
    since_unix_ms: u64,
    grouping: &Grouping<'_>,
) -> (Vec<SpendRow>, SpendRow) {
    let mut per_key: BTreeMap<&str, SpendRow> = BTreeMap::new();
    for (start, fingerprint, counters) in points {
        if *start >= since_unix_ms && fingerprint != "total" {
            per_key.entry(fingerprint).or_default().add_counters(counters);
        }
    }
    let mut total = SpendRow::named("TOTAL");
    per_key.values().for_each(|row| total.add(row));
    let rows = match grouping {
        Grouping::Keys(keys) => per_key
            .into_iter()
            .map(|(fingerprint, row)| {
                let label = keys.iter().find(|(fp, _)| fp == fingerprint).map(|(_, label)| label.clone());
                let name = match (label, fingerprint) {
                    (Some(label), _) => label,
                    (None, "none") => "(no key)".to_owned(),
                    (None, _) => format!("removed key {fingerprint}"),
                };
                SpendRow { name, ..row }
            })
            .collect(),
        Grouping::Pools(pools) => pools
            .iter()
            .map(|(name, fingerprints)| {
                let mut row = SpendRow::named(name.clone());
                fingerprints.iter().filter_map(|fp| per_key.get(fp.as_str())).for_each(|r| row.add(r));
                row
            })
            .collect(),
    };
    (sorted(rows), total)
}

/// Rows and total per token or per model from the remembered `records` that arrived at or after
/// `since_unix_ms`.
pub fn from_records(records: &[Arc<RequestRecord>], since_unix_ms: u64, by_model: bool) -> (Vec<SpendRow>, SpendRow) {
    let mut groups: BTreeMap<String, SpendRow> = BTreeMap::new();
    let mut total = SpendRow::named("TOTAL");
    for record in records.iter().filter(|r| r.routed.at_unix_ms >= since_unix_ms) {
        let name = match (by_model, &record.routed.model, record.routed.token.as_str()) {
            (true, Some(model), _) => model.clone(),
            (true, None, _) => "(no model)".to_owned(),
            (false, _, "") => "KEYMUX_CLIENT_TOKEN".to_owned(),
            (false, _, token) => token.to_owned(),
        };
        groups.entry(name.clone()).or_insert_with(|| SpendRow::named(name)).add_record(record);
        total.add_record(record);
    }
    (sorted(groups.into_values().collect()), total)
}

/// The most spent first, then the most requests, then by name.
fn sorted(mut rows: Vec<SpendRow>) -> Vec<SpendRow> {
    rows.sort_by(|a, b| {
        b.spend_usd.cmp(&a.spend_usd).then(b.requests.cmp(&a.requests)).then_with(|| a.name.cmp(&b.name))
    });
    rows
}

/// The report per key or per pool from hourly metric `points`, since `since_unix_ms` (a local
/// midnight in `zone`): what the gateway answers, and what the CLI builds from the store.
pub fn stored(
    points: &[(u64, String, Counters)],
    since_unix_ms: u64,
    zone: String,
    grouping: &Grouping<'_>,
) -> SpendReport {
    let (rows, total) = from_metrics(points, since_unix_ms, grouping);
    let by = match grouping {
        Grouping::Keys(_) => SpendBy::Key,
        Grouping::Pools(_) => SpendBy::Pool,
    };
    SpendReport { by, zone, since_unix_ms, recent_only: false, complete_since_unix_ms: since_unix_ms, rows, total }
}

/// The running gateway's report of the last `days` local days (today is the first). Blocks: per key
/// and per pool it reads the store.
pub fn report(gw: &Gateway, by: SpendBy, days: u32) -> SpendReport {
    let zone = gw.clock().zone();
    let now = gw.clock().unix_ms();
    let since = crate::clock::local_day_start(now, &zone, days.saturating_sub(1));
    let zone_name = crate::clock::local_periods(now, &zone).zone;
    let keys = super::views::keys(gw);
    match by {
        SpendBy::Key => {
            let named: Vec<(String, String)> =
                keys.iter().map(|k| (k.status.fingerprint.clone(), k.status.label.clone())).collect();
            stored(&gw.metrics().series(since, 1), since, zone_name, &Grouping::Keys(&named))
        }
        SpendBy::Pool => {
            let pools = super::views::pool_fingerprints(gw, &keys);
            stored(&gw.metrics().series(since, 1), since, zone_name, &Grouping::Pools(&pools))
        }
        SpendBy::Token | SpendBy::Model => {
            let records = gw.events().recent(crate::events::RECENT_CAPACITY);
            let (rows, total) = from_records(&records, since, by == SpendBy::Model);
            // Complete from the gateway's start, or from the oldest request still remembered once the
            // ring is full and has forgotten older ones.
            let full = records.len() >= crate::events::RECENT_CAPACITY;
            let remembered = match (full, records.first()) {
                (true, Some(oldest)) => oldest.routed.at_unix_ms,
                (true, None) | (false, _) => gw.started_unix_ms(),
            };
            SpendReport {
                by,
                zone: zone_name,
                since_unix_ms: since,
                recent_only: true,
                complete_since_unix_ms: since.max(remembered),
                rows,
                total,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::Wire;
    use crate::facts::Operation;
    use crate::router::Decision;
    use crate::spend::Usd;

    fn counters(requests: u64, nanos: u64, unpriced: u64) -> Counters {
        Counters { requests, input_tokens: 10 * requests, spend_nanos: nanos, unpriced, ..Counters::default() }
    }

    #[test]
    fn keys_and_pools_sum_the_buckets_of_the_period_only() {
        let points = vec![
            (0, "fa".to_owned(), counters(9, 9_000, 0)),
            (3_600_000, "fa".to_owned(), counters(1, 1_000, 0)),
            (3_600_000, "fb".to_owned(), counters(2, 5_000, 1)),
            (3_600_000, "gone".to_owned(), counters(1, 0, 1)),
            (3_600_000, "none".to_owned(), counters(1, 0, 0)),
            (3_600_000, "total".to_owned(), counters(5, 6_000, 2)),
        ];
        let keys = [("fa".to_owned(), "work".to_owned()), ("fb".to_owned(), "personal".to_owned())];
        let (rows, total) = from_metrics(&points, 3_600_000, &Grouping::Keys(&keys));
        let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["personal", "work", "(no key)", "removed key gone"], "the most spent first, then by name");
        assert_eq!((total.requests, total.spend_usd, total.unpriced_requests), (5, Usd::from_nanos(6_000), 2));
        assert_eq!(rows[1].input_tokens, 10, "the hour before the period is left out");
        let pools = [("both".to_owned(), vec!["fa".to_owned(), "fb".to_owned()]), ("empty".to_owned(), vec![])];
        let (rows, total) = from_metrics(&points, 0, &Grouping::Pools(&pools));
        assert_eq!((rows[0].name.as_str(), rows[0].requests, rows[0].spend_usd), ("both", 12, Usd::from_nanos(15_000)));
        assert_eq!((rows[1].requests, total.requests), (0, 14));
    }

    #[test]
    fn tokens_and_models_group_the_remembered_requests() {
        let record = |at: u64, token: &str, model: Option<&str>, nanos: Option<u64>| {
            let mut r = RequestRecord::new(at, Operation::ResponsesCreate, Wire::Http, Decision::new(at));
            Arc::make_mut(&mut r.routed).token = token.to_owned();
            Arc::make_mut(&mut r.routed).model = model.map(str::to_owned);
            r.cost_usd = nanos.map(Usd::from_nanos);
            r.unpriced = nanos.is_none().then_some(crate::spend::Unpriced::Model);
            Arc::new(r)
        };
        let records = [
            record(5, "codex", Some("gpt-5.5"), Some(100)),
            record(10, "codex", Some("gpt-5.5"), Some(300)),
            record(11, "pi", Some("mystery"), None),
            record(12, "", None, Some(7)),
        ];
        let (rows, total) = from_records(&records, 10, false);
        let got: Vec<(&str, u64)> = rows.iter().map(|r| (r.name.as_str(), r.requests)).collect();
        assert_eq!(got, [("codex", 1), ("KEYMUX_CLIENT_TOKEN", 1), ("pi", 1)]);
        assert_eq!((total.requests, total.spend_usd, total.unpriced_requests), (3, Usd::from_nanos(307), 1));
        let (rows, _) = from_records(&records, 0, true);
        let got: Vec<(&str, u64)> = rows.iter().map(|r| (r.name.as_str(), r.spend_usd.nanos())).collect();
        assert_eq!(got, [("gpt-5.5", 400), ("(no model)", 7), ("mystery", 0)]);
    }
}
