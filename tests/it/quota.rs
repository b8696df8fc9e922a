//! The quota-aware pool, black-box against the simulator's per-key rate limits and faults.
#![allow(clippy::disallowed_methods, reason = "tests")]
#![allow(clippy::unwrap_used, clippy::print_stdout, reason = "tests print the figures they measure")]

use crate::support;

use keymux::pool::HealthState;
use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt as _;
use keymux::events::FailureKind;
use keymux_sim::{Fault, Limits, SimConfig};
use serde_json::{json, Value};
use support::*;

static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A small non-stream request of its own session (no affinity pulls it anywhere).
async fn small(c: &reqwest::Client, base: &str) -> (u16, Value) {
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let body = json!({"model":"gpt-5.5","input":format!("request {n}"),"store":false,"reasoning":{"effort":"none"}});
    let r = post(c, &format!("{base}/responses"), &[], &body).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// A small streamed request; the status, and whether the stream reached `response.completed`.
async fn small_stream(c: &reqwest::Client, base: &str) -> (u16, bool) {
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let body = json!({"model":"gpt-5.5","input":format!("request {n}"),"stream":true,"store":false,"reasoning":{"effort":"none"}});
    let r = post(c, &format!("{base}/responses"), &[], &body).send().await.unwrap();
    let status = r.status().as_u16();
    let completed = read_sse(r).await.iter().any(|e| e.data["type"] == "response.completed");
    (status, completed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sustained_load_above_one_key_stays_under_every_limit() {
    // Each key: 6 requests per 2 s window. Load: 13 requests per window, above any one key, under the sum
    // (18). Time moves on by whole windows on both clocks, so the run does not depend on this machine's
    // speed.
    let window = Duration::from_secs(2);
    let limits = Limits { requests: 6, tokens: 10_000_000, window };
    let sim =
        SimConfig::new().org("org-a", &["sk-a1"]).org("org-b", &["sk-b1"]).org("org-c", &["sk-c1"]).limits(limits);
    let h = Harness::start(sim, &[key("a1", "sk-a1"), key("b1", "sk-b1"), key("c1", "sk-c1")]).await;
    // The start-up probes used one request of each window; start with fresh windows.
    h.advance(window);
    let c = client();
    let windows = 4;
    let mut results = Vec::new();
    for _ in 0..windows {
        let batch: Vec<(u16, Value)> = futures::stream::iter(0..13)
            .map(|_| {
                let (c, base) = (c.clone(), h.base.clone());
                async move { small(&c, &base).await }
            })
            .buffer_unordered(4)
            .collect()
            .await;
        results.extend(batch);
        h.advance(window);
    }
    let errors: Vec<_> = results.iter().filter(|(s, _)| *s != 200).collect();
    let mut upstream_429: BTreeMap<String, usize> = BTreeMap::new();
    let mut served: BTreeMap<String, usize> = BTreeMap::new();
    for e in &h.sim.log() {
        let key = e.key.clone().unwrap_or_default();
        if e.status == 429 {
            *upstream_429.entry(key).or_default() += 1;
        } else if e.status == 200 && e.path == "/v1/responses" {
            *served.entry(key).or_default() += 1;
        }
    }
    println!(
        "{} requests in {windows} windows (3 keys x 6 per window): {} client errors; served per key {served:?}; upstream 429s per key {upstream_429:?}",
        results.len(),
        errors.len()
    );
    assert!(errors.is_empty(), "{errors:?}");
    assert!(upstream_429.is_empty(), "a key was sent past its limit: {upstream_429:?}");
    assert_eq!(served.len(), 3, "all keys carried the load");
    assert!(served.values().all(|n| *n <= 6 * windows), "{served:?}");
}

#[tokio::test]
async fn faults_are_absorbed_while_healthy_keys_remain() {
    let keys = ["sk-f1", "sk-f2", "sk-f3", "sk-f4", "sk-f5", "sk-ok"];
    let sim = keys.iter().enumerate().fold(SimConfig::new(), |s, (i, k)| s.org(&format!("org-{i}"), &[k]));
    let test_keys: Vec<TestKey> = keys.iter().map(|k| key(&k[3..], k)).collect();
    let h = Harness::start_with(sim, &test_keys, |c| {
        c.timeouts.first_byte_ms = 3_000;
        c.max_attempts = 4;
    })
    .await;
    let c = client();
    // One fault at a time, each on its own key, while the other keys are healthy: every request
    // succeeds, and each fault is met (and absorbed) by failover.
    let faults = [
        ("sk-f1", Fault::Status500),
        ("sk-f2", Fault::CutAfterEvents(0)),
        ("sk-f3", Fault::SlowFirstByte(Duration::from_secs(60))),
        ("sk-f4", Fault::InvalidKey),
        ("sk-f5", Fault::InsufficientQuota),
    ];
    let mut failures_seen: BTreeMap<String, FailureKind> = BTreeMap::new();
    for (secret, fault) in faults {
        h.sim.inject(secret, fault);
        let key = format!("k_{}", &secret[3..]);
        for _ in 0..30 {
            let (status, completed) = small_stream(&c, &h.base).await;
            assert_eq!(status, 200);
            assert!(completed, "the client got a whole stream");
            let record = h.gateway.events().recent(1).pop().unwrap();
            for a in &record.attempts {
                if let Some(f) = a.failure {
                    failures_seen.insert(a.key.to_string(), f);
                }
            }
            if failures_seen.contains_key(&key) {
                break;
            }
        }
    }
    println!("failures absorbed: {failures_seen:?}");
    let expect = [
        ("k_f1", FailureKind::Upstream5xx),
        ("k_f2", FailureKind::UpstreamCut),
        ("k_f3", FailureKind::Timeout),
        ("k_f4", FailureKind::InvalidKey),
        ("k_f5", FailureKind::QuotaExhausted),
    ];
    for (key, kind) in expect {
        assert_eq!(failures_seen.get(key), Some(&kind), "{failures_seen:?}");
    }
    let status = h.status();
    let health = |label: &str| status.iter().find(|k| k.label == label).unwrap().health;
    assert_eq!(health("f4"), HealthState::Rejected);
    assert_eq!(health("f5"), HealthState::QuotaExhausted);
    assert_eq!(health("f1"), HealthState::Ready, "one 500 does not sideline a key");
    // Everything cooling at once: a 429 with an integer retry-after.
    for k in ["sk-f1", "sk-f2", "sk-f3", "sk-ok"] {
        h.sim.inject(k, Fault::RateLimited { retry_after_secs: 9 });
    }
    let mut last = 200;
    for _ in 0..3 {
        let r = post(&c, &format!("{}/responses", h.base), &[], &json!({"model":"gpt-5.5","input":"x"}))
            .send()
            .await
            .unwrap();
        last = r.status().as_u16();
        if last == 429 {
            let secs: u64 = r.headers()["retry-after"].to_str().unwrap().parse().expect("integer seconds");
            assert!((1..=9).contains(&secs));
            break;
        }
    }
    assert_eq!(last, 429);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_triple_failovers_keep_attempt_records_small() {
    let sim = keymux_sim::Sim::start(
        SimConfig::new()
            .org("org-a", &["sk-a"])
            .org("org-b", &["sk-b"])
            .org("org-c", &["sk-c"])
            .org("org-d", &["sk-d"]),
    )
    .await
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join("config.toml");
    std::fs::write(&config, "max_attempts = 4\n").unwrap();
    let mut env = base_env(home.path());
    env.retain(|(k, _)| k != "KEYMUX_LOG");
    env.push(("KEYMUX_LOG".into(), "warn".into()));
    // a, b and c (tier 0) are tried first and fail; d (tier 1) serves.
    for (label, secret) in [("A", "sk-a"), ("B", "sk-b"), ("C", "sk-c"), ("D", "sk-d")] {
        env.push((format!("KEYMUX_KEY_{label}"), secret.to_owned()));
    }
    env.push(("KEYMUX_KEY_D_PRIORITY".into(), "1".into()));
    env.push(("KEYMUX_CLIENT_TOKEN".into(), TOKEN.into()));
    let gateway =
        Keymux::spawn(&["--ephemeral", "--config", config.to_str().unwrap(), "--upstream", &sim.base_url()], &env)
            .await;
    let c = client();
    let round = |n: usize| {
        for k in ["sk-a", "sk-b", "sk-c"] {
            for _ in 0..n {
                sim.inject(k, Fault::Status500);
            }
        }
        let (c, base) = (c.clone(), gateway.base.clone());
        async move {
            futures::stream::iter(0..n)
                .map(|_| {
                    let (c, base) = (c.clone(), base.clone());
                    async move { small(&c, &base).await.0 }
                })
                .buffer_unordered(16)
                .collect::<Vec<u16>>()
                .await
        }
    };
    let first = round(1000).await;
    let second = round(1000).await;
    assert!(first.iter().chain(&second).all(|s| *s == 200));

    let decisions: Value = decisions_api(&gateway.root).await;
    let records = decisions["data"].as_array().unwrap();
    assert_eq!(records.len(), 1000, "the ring keeps the newest 1000");
    let mut sizes = Vec::new();
    for r in records {
        let attempts = r["attempts"].as_array().unwrap();
        assert_eq!(attempts.len(), 4, "three failovers each");
        assert!(attempts[..3].iter().all(|a| a["failure"] == "upstream_5xx"), "{r}");
        sizes.push(serde_json::to_vec(attempts).unwrap().len());
    }
    let (min, max) = (*sizes.iter().min().unwrap(), *sizes.iter().max().unwrap());
    // Memory over time is a benchmark's figure (`cargo bench --bench gateway`), not a test's.
    println!(
        "2 x 1000 requests x 3 failovers: attempt record {min}..{max} bytes encoded ({} bytes in memory per attempt)",
        std::mem::size_of::<keymux::events::Attempt>()
    );
    let _ = gateway.stop().await;
    // A fixed bound, whatever the retry count: at most MAX_ATTEMPTS entries of small values, each with
    // at most a capped message.
    let per_attempt = 128 + 2 * keymux::classify::MAX_MESSAGE_CHARS;
    assert!(max <= 4 * per_attempt, "{max}");
    assert!(max - min <= 16, "no record grows with the history of others: {min}..{max}");
}

#[tokio::test]
async fn priority_tiers_keep_personal_keys_idle_until_work_keys_cool() {
    let sim = SimConfig::new().org("org-work", &["sk-w1", "sk-w2"]).org("org-home", &["sk-p1"]);
    let keys = [key("w1", "sk-w1"), key("w2", "sk-w2"), key("p1", "sk-p1").priority(1)];
    let h = Harness::start(sim, &keys).await;
    let c = client();
    for _ in 0..20 {
        assert_eq!(small(&c, &h.base).await.0, 200);
    }
    let counts = client_counts(&h.sim);
    assert_eq!(counts.get("sk-p1"), None, "personal key idle: {counts:?}");
    assert!(counts.contains_key("sk-w1") && counts.contains_key("sk-w2"));
    let record = h.gateway.events().recent(1).pop().unwrap();
    assert!(record.routed.decision.reasons.contains(&keymux::router::Reason::PriorityTier { tier: 0 }));

    h.sim.inject("sk-w1", Fault::RateLimited { retry_after_secs: 30 });
    h.sim.inject("sk-w2", Fault::RateLimited { retry_after_secs: 30 });
    for _ in 0..10 {
        assert_eq!(small(&c, &h.base).await.0, 200);
    }
    let after = client_counts(&h.sim);
    assert!(after.get("sk-p1").copied().unwrap_or(0) >= 10, "personal key takes the load: {after:?}");
}

#[tokio::test]
async fn budgets_are_soft_and_overruns_are_shown() {
    let sim = SimConfig::new().org("org-a", &["sk-a1"]).org("org-b", &["sk-b1"]);
    let keys = [key("a1", "sk-a1").budget(10), key("b1", "sk-b1")];
    let h = Harness::start(sim, &keys).await;
    let c = client();
    // A session that starts on a1 (with reasoning, so its follow-ups are pinned there).
    let mut session = loop {
        let mut s = Session::new(Shape::Pi, NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) as usize, false);
        assert_eq!(s.turn(&c, &h.base, false).await.status, 200);
        if h.sim.log().last().unwrap().key.as_deref() == Some("sk-a1") {
            break s;
        }
    };
    let over = |h: &Harness| {
        let status = h.status();
        let a1 = status.iter().find(|k| k.label == "a1").unwrap().clone();
        a1.tokens_today > a1.settings.daily_token_budget.unwrap()
    };
    assert!(over(&h), "a1 spent more than its 10-token budget");
    // Unpinned traffic avoids it now.
    for _ in 0..6 {
        assert_eq!(small(&c, &h.base).await.0, 200);
        assert_eq!(h.sim.log().last().unwrap().key.as_deref(), Some("sk-b1"));
    }
    let record = h.gateway.events().recent(1).pop().unwrap();
    assert!(record
        .routed
        .decision
        .reasons
        .iter()
        .any(|r| matches!(r, keymux::router::Reason::Skipped { why: keymux::router::SkipWhy::OverBudget, .. })));
    // The pinned session still goes to a1: only its organization can read it.
    assert_eq!(session.turn(&c, &h.base, false).await.status, 200);
    assert_eq!(h.sim.log().last().unwrap().key.as_deref(), Some("sk-a1"));
}

#[tokio::test]
async fn a_key_without_the_model_is_skipped_for_that_model_only() {
    let sim = SimConfig::new().org("org-a", &["sk-a1"]).org("org-b", &["sk-b1"]);
    let h = Harness::start(sim, &[key("a1", "sk-a1"), key("b1", "sk-b1")]).await;
    let c = client();
    h.sim.inject("sk-a1", Fault::ModelNotFound);
    h.sim.inject("sk-b1", Fault::ModelNotFound);
    // Whichever key answers model_not_found first, the request fails over to the other... which also
    // lacks it here: the client gets the provider's 404.
    let (status, body) = small(&c, &h.base).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["code"], "model_not_found");
    // Both are now skipped for gpt-5.5, and the UI shows it; other models still use them.
    let status = h.status();
    assert!(status.iter().all(|k| k.unavailable_models == ["gpt-5.5"]));
    let (status, _) = small(&c, &h.base).await;
    assert_eq!(status, 503, "no key serves gpt-5.5 any more");
    let r = post(&c, &format!("{}/embeddings", h.base), &[], &json!({"model":"text-embedding-3-small","input":"x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let record = h.gateway.events().recent(1).pop().unwrap();
    assert!(record.routed.decision.refusal.is_none());
}

#[tokio::test]
async fn an_exhausted_key_comes_back_when_the_user_enables_it() {
    let sim = SimConfig::new().org("org-a", &["sk-a1"]).org("org-b", &["sk-b1"]);
    let h = Harness::start(sim, &[key("a1", "sk-a1"), key("b1", "sk-b1")]).await;
    let c = client();
    h.sim.inject("sk-a1", Fault::InsufficientQuota);
    h.sim.inject("sk-b1", Fault::InsufficientQuota);
    let (status, body) = small(&c, &h.base).await;
    assert_eq!(status, 429, "both out of quota: {body}");
    assert_eq!(
        body["error"]["code"], "insufficient_quota",
        "the provider's own answer, with no retry-after to wait on"
    );
    let (status, body) = small(&c, &h.base).await;
    assert_eq!(status, 503, "{body}");
    let api = Admin::new(&h.root);
    let r = c.post(format!("{}/keymux/api/keys/k_a1/enable", h.root)).send().await.unwrap();
    assert_eq!(r.status(), 401, "the control API needs a control credential");
    let r = api
        .request(reqwest::Method::POST, "/keys/k_a1/enable")
        .header("origin", "https://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403, "and no web page may call it");
    let (_, r) = api.post_json("/keys/k_a1/enable", None).await;
    assert_eq!(r["key"]["health"], "ready");
    assert_eq!(small(&c, &h.base).await.0, 200);
    assert_eq!(h.sim.log().last().unwrap().key.as_deref(), Some("sk-a1"));
    let (_, r) = api.post_json("/keys/k_a1/disable", None).await;
    assert_eq!(r["key"]["health"], "disabled");
    assert_eq!(api.post_json("/keys/k_nope/enable", None).await.0, 404);
}

#[tokio::test]
async fn test_now_lifts_a_cooldown_the_provider_no_longer_holds_and_keeps_one_it_does() {
    let sim = SimConfig::new().org("org-a", &["sk-a1"]).org("org-b", &["sk-b1"]);
    let h = Harness::start(sim, &[key("a1", "sk-a1"), key("b1", "sk-b1")]).await;
    let c = client();
    for secret in ["sk-a1", "sk-b1"] {
        h.sim.inject(secret, Fault::RateLimited { retry_after_secs: 600 });
    }
    let (status, body) = small(&c, &h.base).await;
    assert_eq!(status, 429, "both keys met their 429 and cool for ten minutes: {body}");
    let cooling = |label: &str| h.status().iter().any(|k| k.label == label && k.health == HealthState::Cooling);
    assert!(cooling("a1") && cooling("b1"));
    // a1's quota reset early; b1's provider still says 429.
    h.sim.inject("sk-b1", Fault::RateLimited { retry_after_secs: 600 });
    let api = Admin::new(&h.root);
    let (status, a1) = api.post_json("/keys/k_a1/test", None).await;
    assert_eq!((status, a1["ok"].as_bool()), (200, Some(true)), "{a1}");
    assert!(a1["message"].as_str().unwrap().contains("cooldown is lifted"), "{a1}");
    let (_, b1) = api.post_json("/keys/k_b1/test", None).await;
    assert_eq!(b1["ok"], false, "{b1}");
    assert!(!cooling("a1") && cooling("b1"), "only the key the provider accepts takes requests again");
    assert_eq!(small(&c, &h.base).await.0, 200);
    assert_eq!(h.sim.log().last().unwrap().key.as_deref(), Some("sk-a1"));
}

#[tokio::test]
async fn a_client_that_leaves_early_is_recorded_as_cancelled() {
    let h = Harness::start(SimConfig::new().org("org-a", &["sk-a1"]), &[key("a1", "sk-a1")]).await;
    h.sim.inject("sk-a1", Fault::SlowFirstByte(Duration::from_millis(1500)));
    let c = client();
    let mut feed = h.gateway.events().subscribe();
    let request = post(&c, &format!("{}/responses", h.base), &[], &json!({"model":"gpt-5.5","input":"slow"})).send();
    assert!(tokio::time::timeout(Duration::from_millis(300), request).await.is_err(), "gave up before the answer");
    let record = next_record(&mut feed).await;
    assert_eq!(record.error, Some("client_cancelled"));
    assert_eq!(record.status, 499);
    assert_eq!(record.attempts.len(), 1);
    assert_eq!(record.attempts[0].failure, Some(FailureKind::ClientCancelled));
    assert_eq!(h.status()[0].in_flight, 0, "the key was released");
}

/// Sends `n` new sessions one after another; how many each key's first turn served.
async fn sequential_sessions(h: &Harness, n: usize) -> BTreeMap<String, usize> {
    let mut served = BTreeMap::new();
    for _ in 0..n {
        assert_eq!(small(&client(), &h.base).await.0, 200);
        let record = h.gateway.events().recent(1).pop().unwrap();
        let key = record.served_by.as_ref().unwrap().as_str().replacen("k_", "sk-", 1);
        *served.entry(key).or_default() += 1;
    }
    served
}

#[tokio::test]
async fn a_key_back_from_an_outage_gets_its_share_of_new_sessions_not_all_of_them() {
    let sim = SimConfig::new().org("org-a", &["sk-a1"]).org("org-b", &["sk-b1"]).org("org-c", &["sk-c1"]);
    let h = Harness::start(sim, &[key("a1", "sk-a1"), key("b1", "sk-b1"), key("c1", "sk-c1")]).await;
    // A key that answers 500 for a while is still tried (and fails over), so it is not owed sessions later.
    h.sim.set_standing("sk-a1", Fault::Status500, None);
    let _ = sequential_sessions(&h, 30).await;
    h.sim.clear_standing("sk-a1");
    let after_errors = sequential_sessions(&h, 30).await;
    println!("30 new sessions after a key's run of 500s: {after_errors:?}");
    for secret in ["sk-a1", "sk-b1", "sk-c1"] {
        let n = after_errors.get(secret).copied().unwrap_or(0);
        assert!((6..=14).contains(&n), "uneven after errors: {after_errors:?}");
    }
    // A key rate limited for ten minutes is skipped meanwhile; when it is back, the others' starts have
    // decayed, and it takes about a third of new sessions, not every one until it has caught up.
    h.sim.inject("sk-a1", Fault::RateLimited { retry_after_secs: 600 });
    let _ = sequential_sessions(&h, 31).await;
    assert_eq!(h.status().iter().find(|k| k.label == "a1").unwrap().health, HealthState::Cooling);
    h.advance(Duration::from_secs(660));
    let after_cooling = sequential_sessions(&h, 30).await;
    println!("30 new sessions after a key's ten-minute cooldown: {after_cooling:?}");
    for secret in ["sk-a1", "sk-b1", "sk-c1"] {
        let n = after_cooling.get(secret).copied().unwrap_or(0);
        assert!((6..=14).contains(&n), "uneven after a cooldown: {after_cooling:?}");
    }
}

/// The key `id` as the control API lists it.
async fn key_info(h: &Harness, id: &str) -> Value {
    let keys = support::admin::Admin::new(&h.root).get_json("/keys").await;
    keys.as_array().unwrap().iter().find(|k| k["id"] == id).unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_keeps_the_last_of_its_window_for_its_sessions_and_new_ones_go_elsewhere_until_it_refills() {
    // a1 first for new sessions (tier 0), b1 in the second tier; 10 requests per minute each.
    let window = Duration::from_secs(60);
    let limits = Limits { requests: 10, tokens: 10_000_000, window };
    let sim = SimConfig::new().org("org-a", &["sk-a1"]).org("org-b", &["sk-b1"]).limits(limits);
    let h = Harness::start(sim, &[key("a1", "sk-a1"), key("b1", "sk-b1").priority(1)]).await;
    let api = support::admin::Admin::new(&h.root);
    let (status, body) = api.patch("/keys/k_a1", json!({"reserve_window_pct": 95})).await;
    assert_eq!(status, 400, "more than 90 % is refused: {body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("1 to 90"), "{body}");
    let (status, a1) = api.patch("/keys/k_a1", json!({"reserve_window_pct": 30})).await;
    assert_eq!((status, a1["reserve_window_pct"].as_u64()), (200, Some(30)), "{a1}");
    // The start-up probes used one request of each window; start with fresh windows.
    h.advance(window);
    let c = client();
    let last = || h.gateway.events().recent(1).pop().unwrap();

    // One session on a1 until less than 30 % of a1's window is left: every turn stays on a1.
    let mut s = Session::new(Shape::Codex, 40, false);
    for turn in 0..8 {
        let r = s.turn(&c, &h.base, false).await;
        assert_eq!(r.status, 200, "turn {turn}: {}", r.body);
        assert_eq!(last().served_by.as_ref().map(ToString::to_string).as_deref(), Some("k_a1"), "turn {turn}");
    }
    assert_eq!(key_info(&h, "k_a1").await["window_reserved"], true, "2 of 10 left, under 30 %");

    // A new session goes to b1, the decision saying why; a1's own session goes on there.
    let mut fresh = Session::new(Shape::Codex, 41, false);
    assert_eq!(fresh.turn(&c, &h.base, false).await.status, 200);
    let record = serde_json::to_value(last()).unwrap();
    assert_eq!(record["served_by"], "k_b1", "{record}");
    let skipped = record["decision"]["reasons"].as_array().unwrap().iter().find(|r| r["key"] == "k_a1").cloned();
    let why = skipped.map(|r| r["why"].clone()).unwrap_or_default();
    assert_eq!((why["kind"].as_str(), why["keep_pct"].as_u64()), (Some("window_reserved"), Some(30)), "{record}");
    assert_eq!(why["left_permille"].as_u64(), Some(200), "{record}");
    let r = s.turn(&c, &h.base, false).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(last().served_by.as_ref().map(ToString::to_string).as_deref(), Some("k_a1"), "the pinned turn");

    // Once the window refilled, a1 takes new sessions again.
    h.advance(window);
    assert_eq!(key_info(&h, "k_a1").await["window_reserved"], false);
    let mut later = Session::new(Shape::Codex, 42, false);
    assert_eq!(later.turn(&c, &h.base, false).await.status, 200);
    assert_eq!(last().served_by.as_ref().map(ToString::to_string).as_deref(), Some("k_a1"));
}
