//! The pool's three doors, tested through their effects on views and status.

use super::*;
use crate::budget::SpendNow;

fn clock_now() -> Instant {
    crate::clock::Clock::system().now()
}
use crate::keys::{KeySource, ProviderId};
use crate::secrets::Secret;

fn pool(entries: Vec<KeyEntry>) -> Pool {
    Pool::new(entries, Markers::new(&Secret::new("pool-tests")))
}

fn entry(id: &str) -> KeyEntry {
    KeyEntry::new(KeyId::new(id), id, ProviderId::Openai, Secret::new(format!("sk-{id}")), KeySource::Embedded)
}

fn answer(key: &str, at: Instant, kind: OutcomeKind) -> Learned {
    Learned::Outcome(Outcome::new(KeyId::new(key), at, kind))
}

/// A streamed Responses request over HTTP, which every provider serves.
const ASK: crate::provider::Ask = crate::provider::Ask {
    operation: crate::facts::Operation::ResponsesCreate,
    stream: true,
    transport: crate::provider::Transport::Http,
};

fn view(pool: &Pool, now: Instant) -> PoolView {
    pool.view(ViewFor { model: None, tokens: 0, now, day: 0, now_unix_ms: 0, spend: &SpendNow::default(), ask: ASK })
}

fn health(pool: &Pool) -> HealthState {
    pool.status(clock_now(), 0)[0].health
}

#[tokio::test(start_paused = true)]
async fn cooldown_expires_with_time() {
    let pool = pool(vec![entry("a")]);
    let now = clock_now();
    let change = pool.apply(&answer("a", now, OutcomeKind::RateLimited { cooldown: Duration::from_secs(2) }));
    assert_eq!(change, Some((KeyId::new("a"), HealthChange::Cooling { until: now + Duration::from_secs(2) })));
    assert_eq!(health(&pool), HealthState::Cooling);
    tokio::time::advance(Duration::from_millis(2_001)).await;
    assert_eq!(health(&pool), HealthState::Ready);
    // A shorter later cooldown never shortens a longer one.
    let now = clock_now();
    pool.apply(&answer("a", now, OutcomeKind::RateLimited { cooldown: Duration::from_secs(10) }));
    pool.apply(&answer("a", now, OutcomeKind::RateLimited { cooldown: Duration::from_secs(1) }));
    assert!(pool.status(now, 0)[0].cooldown_ms >= 9_000);
    // An absurd cooldown is clamped, never a panic.
    pool.apply(&answer("a", now, OutcomeKind::RateLimited { cooldown: Duration::MAX }));
    assert!(pool.status(now, 0)[0].cooldown_ms <= crate::clock::MAX_WAIT.as_millis() as u64);
}

#[tokio::test(start_paused = true)]
async fn in_flight_follows_guards_and_orgs_are_learned() {
    let pool = pool(vec![entry("a"), entry("b")]);
    let now = clock_now();
    let g1 = pool.begin(&KeyId::new("a"), Begin::default(), now).expect("a");
    let g2 = pool.begin(&KeyId::new("a"), Begin::default(), now).expect("a");
    assert_eq!(view(&pool, now).keys[0].in_flight, 2);
    drop(g1);
    assert_eq!(view(&pool, now).keys[0].in_flight, 1);
    drop(g2);
    assert_eq!(view(&pool, now).keys[0].in_flight, 0);
    assert!(pool.begin(&KeyId::new("zzz"), Begin::default(), now).is_none());

    let mut o = Outcome::new(KeyId::new("b"), now, OutcomeKind::Served);
    o.org = Some("org-b".into());
    let before = view(&pool, now).keys[1].org_tag;
    pool.apply(&Learned::Outcome(o));
    assert_eq!(view(&pool, now).keys[1].org.as_deref(), Some("org-b"));
    assert_ne!(view(&pool, now).keys[1].org_tag, before, "learning the org changes the tag");
    assert!(pool.remove(&KeyId::new("a")));
    assert_eq!(pool.len(), 1);
    assert!(pool.add(entry("a")));
    assert!(!pool.add(entry("a")), "no duplicate ids");
}

#[test]
fn azure_keys_of_one_resource_share_an_organization() {
    let az = |id: &str, url: &str| KeyEntry { provider: ProviderId::Azure, base_url: Some(url.into()), ..entry(id) };
    let pool = pool(vec![
        az("x", "https://east.openai.azure.com/openai/v1"),
        az("y", "https://EAST.openai.azure.com/openai/v1/"),
        az("z", "https://west.openai.azure.com/openai/v1"),
    ]);
    let view = view(&pool, clock_now());
    assert_eq!(view.keys[0].org_tag, view.keys[1].org_tag);
    assert_ne!(view.keys[0].org_tag, view.keys[2].org_tag);
    assert_eq!(view.keys[0].org.as_deref(), Some("azure:east.openai.azure.com"));
    // A settings change that names no organization keeps the resource's (a hand edit of the config
    // hands over the entry the file describes, whose `org` is empty).
    let before = view.keys[0].org_tag;
    assert!(pool.update(&KeyId::new("x"), |e| {
        e.org = None;
        e.label = "renamed".into();
    }));
    let after = self::view(&pool, clock_now());
    assert_eq!((after.keys[0].org.as_deref(), after.keys[0].org_tag), (Some("azure:east.openai.azure.com"), before));
}

#[tokio::test(start_paused = true)]
async fn rejection_sticks_until_a_success() {
    let pool = pool(vec![entry("a")]);
    let change = pool.apply(&answer("a", clock_now(), OutcomeKind::Rejected));
    assert_eq!(change.map(|c| c.1), Some(HealthChange::Rejected));
    assert_eq!(view(&pool, clock_now()).keys[0].health, Health::Rejected);
    assert_eq!(pool.apply(&answer("a", clock_now(), OutcomeKind::Failed)), None);
    assert_eq!(view(&pool, clock_now()).keys[0].health, Health::Rejected);
    let change = pool.apply(&answer("a", clock_now(), OutcomeKind::Served));
    assert_eq!(change.map(|c| c.1), Some(HealthChange::Recovered));
    assert_eq!(view(&pool, clock_now()).keys[0].health, Health::Ready);
}

#[tokio::test(start_paused = true)]
async fn recent_starts_decay_so_a_returning_key_is_not_flooded() {
    let pool = pool(vec![entry("a"), entry("b")]);
    let start = Begin { tokens: 0, start: true };
    let now = clock_now();
    for _ in 0..20 {
        drop(pool.begin(&KeyId::new("a"), start, now));
    }
    let starts = |pool: &Pool| view(pool, clock_now()).keys[0].recent_starts;
    assert!((starts(&pool) - 20.0).abs() < 1e-3);
    tokio::time::advance(STARTS_HALF_LIFE).await;
    assert!((starts(&pool) - 10.0).abs() < 1e-3, "{}", starts(&pool));
    tokio::time::advance(STARTS_HALF_LIFE * 10).await;
    assert!(starts(&pool) < 0.02, "an hour-old burst no longer counts: {}", starts(&pool));
    // A request that is not a session start does not count.
    drop(pool.begin(&KeyId::new("b"), Begin { tokens: 5, start: false }, clock_now()));
    assert_eq!(view(&pool, clock_now()).keys[1].recent_starts, 0.0);
}

#[tokio::test(start_paused = true)]
async fn usage_counts_against_the_budget_of_its_day_only() {
    let mut a = entry("a");
    a.settings.daily_token_budget = Some(100);
    let pool = pool(vec![a]);
    let usage = Usage { input: 80, cached: 40, output: 30, ..Usage::default() };
    pool.apply(&Learned::Usage { key: KeyId::new("a"), usage, day: 7 });
    let spend = SpendNow::default();
    let view_for =
        |day: u32| ViewFor { model: None, tokens: 0, now: clock_now(), day, now_unix_ms: 0, spend: &spend, ask: ASK };
    let on = |day: u32| pool.view(view_for(day)).keys[0].over_budget;
    assert!(on(7), "110 of 100 tokens used on day 7");
    assert!(!on(8), "a new day starts afresh");
    let status = &pool.status(clock_now(), 7)[0];
    assert_eq!((status.tokens_today, status.input_tokens, status.cached_tokens), (110, 80, 40));
}

#[tokio::test(start_paused = true)]
async fn settings_change_without_losing_live_state() {
    let pool = pool(vec![entry("a")]);
    pool.apply(&answer("a", clock_now(), OutcomeKind::Rejected));
    assert!(pool.update(&KeyId::new("a"), |e| {
        e.label = "renamed".into();
        e.settings.priority = 2;
    }));
    let status = &pool.status(clock_now(), 0)[0];
    assert_eq!((status.label.as_str(), status.settings.priority, status.health), ("renamed", 2, HealthState::Rejected));
    assert!(!pool.update(&KeyId::new("nope"), |_| {}));
}
