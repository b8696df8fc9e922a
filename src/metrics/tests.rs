//! The metrics' counting, reading and store protocol.

use super::*;
use crate::events::{Attempt, FailureKind, Wire};
use crate::facts::{AffinitySource, Operation};
use crate::keys::KeyId;
use crate::router::{AffinityState, Decision};

const NOW_MS: u64 = 1_780_000_000_000;

fn today() -> u32 {
    crate::clock::utc_day(NOW_MS)
}

fn record(status: u16, ms: u32) -> RequestRecord {
    let mut decision = Decision::new(1);
    decision.affinity_source = AffinitySource::PromptCacheKey;
    decision.affinity_state = AffinityState::Hit;
    let mut record = RequestRecord::new(NOW_MS, Operation::ResponsesCreate, Wire::Http, decision);
    std::sync::Arc::make_mut(&mut record.routed).model = Some("gpt-5.5".into());
    record.stream = true;
    record.attempts = vec![Attempt {
        key: KeyId::new("k_a"),
        status: Some(500),
        failure: Some(FailureKind::Upstream5xx),
        duration_ms: 3,
        message: None,
    }];
    record.status = status;
    record.ttfb_ms = ms;
    record.duration_ms = ms;
    record
}

/// The request path counts into the row in place; what it writes is what adding each request's own
/// counters writes, names included (`2xx`, `429`, `prompt_cache_key/hit`, `upstream_5xx`).
#[test]
fn counting_in_place_adds_what_each_request_counts() {
    let records = [record(200, 30), record(429, 700), record(499, 70_000), record(503, 3)];
    let (mut counted, mut added) = (Counters::default(), Counters::default());
    for r in &records {
        counted.count(r);
        added.add(&Counters::of(r));
    }
    assert_eq!(counted, added);
    let names = |m: &std::collections::BTreeMap<String, u64>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(names(&counted.by_status), ["2xx", "429", "499", "5xx"]);
    assert_eq!(names(&counted.by_affinity), ["prompt_cache_key/hit"]);
    assert_eq!(counted.failures.get("upstream_5xx"), Some(&4));
    assert_eq!(counted.latency_ms.iter().sum::<u64>(), 4);
    assert_eq!(counted.spent(), Counters::spent_by(&records[0]));
}

#[test]
fn counts_survive_a_restart_through_sled() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let m = Metrics::open(dir.path(), 90);
        m.record(&record(200, 30), Some("abcd1234".into()));
        let mut with_usage = record(200, 700);
        with_usage.usage = Some(crate::spend::Usage { input: 100, cached: 60, output: 7, ..Default::default() });
        let lost = br#"[{"type":"reasoning","id":"rs_1","action":"removed","reason":"organization_mismatch"}]"#;
        std::sync::Arc::make_mut(&mut with_usage.routed).decision.reasoning_dropped =
            crate::drops::ReasoningDropped::from_text(lost);
        m.record(&with_usage, Some("abcd1234".into()));
        assert_eq!(m.flush(NOW_MS).0, Ok(()));
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
    assert_eq!((c.reasoning_dropped, c.reasoning_misplaced), (1, 1), "the turn that lost its reasoning");
    assert_eq!(c.latency_ms.iter().sum::<u64>(), 3);
    // Flushing twice writes nothing twice.
    assert_eq!(m.flush(NOW_MS).0, Ok(()));
    assert_eq!(m.flush(NOW_MS).0, Ok(()));
    assert_eq!(m.rows(1, today())[0].counters.requests, 3);
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
    let (result, change) = m.flush(NOW_MS);
    assert!(result.is_err());
    assert_eq!(change, None, "it was failing already");
    assert_eq!(m.rows(1, today())[0].counters.requests, 1, "kept in memory");
    assert_eq!(m.status().pending, 1);
}

#[test]
fn a_store_that_comes_back_gets_the_counts_kept_meanwhile() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("metrics");
    // A file where the directory should be: the store cannot open.
    std::fs::write(&path, b"x").expect("file");
    let m = Metrics::open(&path, 90);
    m.record(&record(200, 1), Some("fp".into()));
    assert!(m.flush(NOW_MS).0.is_err());
    // The user fixes it; the next flush reopens and writes, once.
    std::fs::remove_file(&path).expect("rm");
    m.record(&record(200, 1), Some("fp".into()));
    let (result, change) = m.flush(NOW_MS);
    assert_eq!(result, Ok(()));
    assert_eq!(change, Some(StoreHealth::Recovered));
    assert!(m.status().persisted);
    drop(m);
    let again = Metrics::open(&path, 90);
    assert_eq!(again.rows(1, today())[0].counters.requests, 2);
}

#[test]
fn a_batch_in_doubt_counts_once_whether_or_not_it_landed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let m = Metrics::open(dir.path(), 90);
    m.record(&record(200, 1), Some("fp".into()));
    assert_eq!(m.flush(NOW_MS).0, Ok(()));
    let hour = hour_of(NOW_MS);
    let one = |n: u64| Counters { requests: n, ..Counters::default() };
    let store = m.store.as_ref().expect("store");
    // A batch that did land (its generation is stored) is not written again.
    {
        let mut s = lock(store);
        let landed = s_generation(&s);
        set_in_doubt(&mut s, landed, [(key(hour, "fp"), one(5))].into());
    }
    assert_eq!(m.flush(NOW_MS).0, Ok(()));
    assert_eq!(m.rows(1, today())[0].counters.requests, 1, "landed: not counted again");
    // A batch that did not land is written at the next flush.
    {
        let mut s = lock(store);
        let next = s_generation(&s) + 1;
        set_in_doubt(&mut s, next, [(key(hour, "fp"), one(5))].into());
    }
    assert_eq!(m.rows(1, today())[0].counters.requests, 6, "shown while in doubt");
    assert_eq!(m.flush(NOW_MS).0, Ok(()));
    assert_eq!(m.rows(1, today())[0].counters.requests, 6, "written once");
}

fn s_generation(store: &Store) -> u64 {
    store.generation_for_tests()
}

fn set_in_doubt(store: &mut Store, generation: u64, rows: Rows) {
    store.set_in_doubt_for_tests(generation, rows);
}

#[test]
fn the_pending_map_is_bounded() {
    let m = Metrics::in_memory();
    for n in 0..(MAX_PENDING + 10) {
        m.record(&record(200, 1), Some(format!("fp{n}")));
    }
    let status = m.status();
    assert_eq!(status.pending, MAX_PENDING);
    assert_eq!(status.dropped, 10);
}

#[test]
fn series_sum_hours_into_buckets_and_a_total() {
    let m = Metrics::in_memory();
    for (offset, fp) in [(0, "a"), (1, "a"), (HOUR_MS, "b"), (25 * HOUR_MS, "a")] {
        let mut r = record(200, 1);
        std::sync::Arc::make_mut(&mut r.routed).at_unix_ms = NOW_MS + offset;
        m.record(&r, Some(fp.into()));
    }
    let hourly = m.series(NOW_MS, 1);
    let total: Vec<u64> = hourly.iter().filter(|(_, k, _)| k == "total").map(|(_, _, c)| c.requests).collect();
    assert_eq!(total, [2, 1, 1]);
    let daily = m.series(NOW_MS - 2 * 24 * HOUR_MS, 24);
    let total: u64 = daily.iter().filter(|(_, k, _)| k == "total").map(|(_, _, c)| c.requests).sum();
    assert_eq!(total, 4);
    assert!(daily.iter().all(|(start, _, _)| start % (24 * HOUR_MS) == 0));
}

#[test]
fn day_names() {
    assert_eq!(day_name(0), "1970-01-01");
    assert_eq!(day_name(20_786), "2026-11-29");
    assert_eq!(day_name(11_016), "2000-02-29");
}

/// A served request of `model` with usage, priced by the embedded table.
fn priced(model: &str, at_unix_ms: u64) -> RequestRecord {
    let mut r = record(200, 40);
    std::sync::Arc::make_mut(&mut r.routed).at_unix_ms = at_unix_ms;
    std::sync::Arc::make_mut(&mut r.routed).model = Some(model.to_owned());
    r.usage = Some(crate::spend::Usage { input: 1_000, cached: 0, output: 100, ..Default::default() });
    r.price(crate::spend::PriceTable::builtin());
    r
}

/// gpt-5.5 at $5 in and $30 out per 1M: 1000 x 5 + 100 x 30 = 8000 micro-dollars.
const GPT55_NANOS: u64 = 8_000_000;

#[test]
fn a_row_stored_before_spend_was_counted_reads_as_no_spend() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hour = hour_of(NOW_MS);
    {
        // Exactly what the layout before spend wrote: no spend_nanos, no unpriced.
        let db = sled::open(dir.path()).expect("sled");
        let old = r#"{"requests":2,"by_status":{"2xx":2},"by_affinity":{"prompt_cache_key/hit":2},
            "continuity_hits":0,"pinned":0,"rescued":0,"failures":{},"input_tokens":100,"cached_tokens":60,
            "output_tokens":7,"latency_ms":[0,2,0,0,0,0,0,0,0,0,0,0]}"#;
        db.insert(format!("h|{hour:010}|fp|responses_create"), old.as_bytes()).expect("insert");
        db.flush().expect("flush");
    }
    let m = Metrics::open(dir.path(), 90);
    assert!(m.status().persisted, "{:?}", m.status());
    let c = &m.rows(1, today())[0].counters;
    assert_eq!((c.requests, c.input_tokens, c.spend_nanos, c.unpriced), (2, 100, 0, 0));
    m.record(&priced("gpt-5.5", NOW_MS), Some("fp".into()));
    m.record(&priced("no-such-model", NOW_MS), Some("fp".into()));
    assert_eq!(m.flush(NOW_MS).0, Ok(()));
    drop(m);
    let m = Metrics::open(dir.path(), 90);
    let c = &m.rows(1, today())[0].counters;
    assert_eq!((c.requests, c.spend_nanos, c.unpriced), (4, GPT55_NANOS, 1), "old and new rows add up");
}

#[test]
fn spend_since_a_moment_is_read_from_memory_and_survives_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The tally keeps the last weeks of the real clock: these requests are of the last hours.
    let now = crate::clock::Clock::system().unix_ms();
    let start_of_hour = now - now % HOUR_MS;
    {
        let m = Metrics::open(dir.path(), 90);
        m.record(&priced("gpt-5.5", start_of_hour - 2 * HOUR_MS), Some("fp".into()));
        m.record(&priced("gpt-5.5", start_of_hour), Some("fp".into()));
        m.record(&priced("no-such-model", start_of_hour), Some("other".into()));
        assert_eq!(m.flush(now).0, Ok(()));
    }
    let m = Metrics::open(dir.path(), 90);
    m.record(&priced("gpt-5.5", start_of_hour), Some("fp".into()));
    let this_hour = m.spent_since(start_of_hour);
    assert_eq!(
        this_hour["fp"],
        crate::spend::Spent { usd: crate::spend::Usd::from_nanos(2 * GPT55_NANOS), unpriced: 0 }
    );
    assert_eq!(this_hour["other"].unpriced, 1);
    assert_eq!(m.spent_since(start_of_hour - 3 * HOUR_MS)["fp"].usd.nanos(), 3 * GPT55_NANOS);
    // An hour that began before the moment is not counted in it (a zone offset of half an hour).
    assert_eq!(m.spent_since(start_of_hour - HOUR_MS / 2)["fp"].usd.nanos(), 2 * GPT55_NANOS);
}

#[test]
fn the_spend_tally_forgets_hours_past_its_window() {
    let m = Metrics::in_memory();
    let old = NOW_MS - u64::from(SPEND_WINDOW_HOURS + 1) * HOUR_MS;
    m.record(&priced("gpt-5.5", old), Some("fp".into()));
    m.record(&priced("gpt-5.5", NOW_MS), Some("fp".into()));
    assert_eq!(lock(&m.pending).spent.len(), 2);
    let _ = m.flush(NOW_MS);
    assert_eq!(lock(&m.pending).spent.len(), 1, "the hour past the window is gone");
    assert_eq!(m.spent_since(0)["fp"].usd.nanos(), GPT55_NANOS);
}

#[test]
fn todays_and_this_months_spend_roll_over_at_the_local_boundaries_and_a_stopped_budget_opens_again() {
    use crate::budget::{BudgetState, MoneyBudget, OnLimit};
    use crate::clock::local_periods;
    let zone = jiff::tz::TimeZone::UTC;
    let today = local_periods(NOW_MS, &zone);
    let m = Metrics::in_memory();
    assert!(m.spend_now(NOW_MS, || today.clone()).by_key.is_empty());
    // Counted as it comes, into the sums already made for these periods.
    m.record(&priced("gpt-5.5", NOW_MS), Some("fp".into()));
    m.record(&priced("gpt-5.5", today.day_start_unix_ms - HOUR_MS), Some("fp".into()));
    let one = crate::spend::Usd::from_nanos(GPT55_NANOS);
    let two = crate::spend::Usd::from_nanos(2 * GPT55_NANOS);
    let spent = |usd| crate::spend::Spent { usd, unpriced: 0 };
    assert_eq!(
        m.spend_now(NOW_MS, || unreachable!("today's sums are kept")).by_key["fp"],
        (spent(one), spent(two)),
        "yesterday's request counts for the month only"
    );
    let stop = MoneyBudget { daily: Some(one), on_limit: OnLimit::Stop, ..MoneyBudget::default() };
    assert!(matches!(
        m.spend_now(NOW_MS, || unreachable!("today's sums are kept")).state_of("fp", &stop),
        BudgetState::Stopped { .. }
    ));

    // The next local day: made again from the hours, today's sum starts at zero, the month's stays.
    let tomorrow = local_periods(today.day_end_unix_ms, &zone);
    assert_eq!(tomorrow.day_start_unix_ms, today.day_end_unix_ms);
    assert_eq!(
        m.spend_now(today.day_end_unix_ms, || tomorrow.clone()).by_key["fp"],
        (spent(crate::spend::Usd::ZERO), spent(two))
    );
    assert_eq!(
        m.spend_now(today.day_end_unix_ms, || tomorrow.clone()).state_of("fp", &stop),
        BudgetState::Open,
        "it opens again by itself"
    );
    // The next month: nothing spent in it yet.
    let next_month = local_periods(today.month_end_unix_ms, &zone);
    assert!(!m.spend_now(today.month_end_unix_ms, || next_month.clone()).by_key.contains_key("fp"));
}
