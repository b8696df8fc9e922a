//! Budgets in money, end to end, driven by the simulator's usage: past `reserve_at` a key keeps
//! serving the sessions already on it while new sessions go elsewhere (and that holds across a
//! restart, since spend is kept); with `on_limit = "stop"` at 100 % the next turn of a session pinned
//! to the key, over HTTP or on its bound WebSocket, gets a 429 that names the budget and when it
//! resets, and is never moved to another organization.
#![allow(clippy::unwrap_used, clippy::disallowed_methods, reason = "tests")]

use crate::support;

use keymux::budget::OnLimit;
use keymux::config::Config;
use serde_json::Value;
use support::admin::Admin;
use support::*;

/// a1 (org-a) in the first tier, so new sessions go there while it is open, with a small daily budget;
/// b1 (org-b) in the second tier, with none.
fn keys(reserve_at: Option<u8>, on_limit: OnLimit) -> Vec<TestKey> {
    vec![key("a1", "sk-a1").daily_usd(0.02, reserve_at, on_limit), key("b1", "sk-b1").priority(1)]
}

fn two_orgs() -> keymux_sim::SimConfig {
    keymux_sim::SimConfig::new().org("org-a", &["sk-a1"]).org("org-b", &["sk-b1"])
}

/// Where key `id` stands against its budget now (`open`, `reserved`, `stopped`).
async fn budget_state(h: &Harness, id: &str) -> String {
    let keys = Admin::new(&h.root).get_json("/keys").await;
    let key = keys.as_array().unwrap().iter().find(|k| k["id"] == id).unwrap().clone();
    key["budget"]["state"].as_str().unwrap().to_owned()
}

/// The newest request's record.
async fn last_record(h: &Harness) -> Value {
    let decisions = decisions_api(&h.root).await;
    let records = decisions["data"].as_array().unwrap();
    records.iter().max_by_key(|r| r["decision"]["seq"].as_u64()).unwrap().clone()
}

/// Turns of `s` until key a1 is in `state`: each must be served by a1. At most ten (a turn costs
/// about half a cent, the budget is two cents).
async fn spend_on_a1_until(h: &Harness, s: &mut Session, state: &str) {
    for turn in 0..10 {
        if budget_state(h, "k_a1").await == state {
            return;
        }
        let r = s.turn(&client(), &h.base, false).await;
        assert_eq!(r.status, 200, "turn {turn}: {}", r.body);
        assert_eq!(last_record(h).await["served_by"], "k_a1", "turn {turn} stays on a1");
    }
    panic!("a1 never became {state}");
}

/// Waits (on the event stream, checked on every step of a ticker) for the event telling that the
/// budget of `of` (`"key":"k_a1"`, `"pool":"work"`) is now `state`; a minute at most, which only a
/// gateway that never tells exceeds.
async fn budget_event(events: &std::sync::Arc<std::sync::Mutex<Vec<Value>>>, of: &str, state: &str) {
    let wanted = format!("\"state\":\"{state}\"");
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(100));
    for _ in 0..600 {
        tick.tick().await;
        let seen = events.lock().unwrap().iter().any(|e| {
            let text = e.to_string();
            text.contains("\"kind\":\"budget\"") && text.contains(of) && text.contains(&wanted)
        });
        if seen {
            return;
        }
    }
    panic!(
        "no budget event with {state} for {of}: {:?}",
        events.lock().unwrap().iter().rev().take(5).collect::<Vec<_>>()
    );
}

fn with_store(dir: &std::path::Path) -> impl Fn(&mut Config) + '_ {
    move |c: &mut Config| c.metrics_dir = Some(dir.join("metrics"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_reserve_at_a_keys_sessions_go_on_new_ones_go_elsewhere_and_that_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let keys = keys(Some(50), OnLimit::Reserve);
    let h = Harness::start_with(two_orgs(), &keys, with_store(dir.path())).await;
    let skew = clear_of_midnight(&h);
    let mut on_a1 = Session::new(Shape::Codex, 1, false);
    spend_on_a1_until(&h, &mut on_a1, "reserved").await;

    let mut fresh = Session::new(Shape::Codex, 2, false);
    assert_eq!(fresh.turn(&client(), &h.base, false).await.status, 200);
    let record = last_record(&h).await;
    assert_eq!(record["served_by"], "k_b1", "a new session goes elsewhere: {record}");
    let skipped = record["decision"]["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["rule"] == "skipped" && r["key"] == "k_a1" && r["why"]["kind"] == "budget_reserved");
    assert!(skipped, "the decision says a1 was reserved: {record}");
    let r = on_a1.turn(&client(), &h.base, false).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(last_record(&h).await["served_by"], "k_a1", "the session already on a1 goes on there");

    assert_eq!(h.shutdown().await.metrics, Ok(()), "the spend was written");
    let again = Harness::start_with(two_orgs(), &keys, with_store(dir.path())).await;
    again.advance(skew);
    assert_eq!(budget_state(&again, "k_a1").await, "reserved", "the spend, and so the reserve, survive a restart");
    let mut after = Session::new(Shape::Codex, 3, false);
    assert_eq!(after.turn(&client(), &again.base, false).await.status, 200);
    assert_eq!(last_record(&again).await["served_by"], "k_b1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_on_limit_stop_a_pinned_turn_gets_a_429_naming_the_budget_over_http_and_websocket() {
    let h = Harness::start_with(two_orgs(), &keys(None, OnLimit::Stop), |_| {}).await;
    clear_of_midnight(&h);
    let events = collect_events(Admin::new(&h.root).get("/events?after=0").await);
    // A WebSocket session that starts on a1 while it is open, then an HTTP session that spends it.
    let mut on_socket = Session::new(Shape::Codex, 10, true);
    let mut ws = WsClient::connect(&h.base, &on_socket.id).await.unwrap();
    let answer = ws.create(&on_socket.next_body(false)).await;
    assert!(answer.error.is_none(), "{:?}", answer.error);
    on_socket.absorb(answer.output_items());
    assert_eq!(last_record(&h).await["served_by"], "k_a1");
    let mut on_a1 = Session::new(Shape::Codex, 11, false);
    spend_on_a1_until(&h, &mut on_a1, "stopped").await;
    budget_event(&events, "\"key\":\"k_a1\"", "stopped").await;

    let body = on_a1.next_body(false);
    let refused = post(&client(), &format!("{}/responses", h.base), &[], &body).send().await.unwrap();
    assert_eq!(refused.status(), 429);
    let retry_after: u64 = refused.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(retry_after > 0 && retry_after <= 25 * 3600, "waits for the local midnight: {retry_after}");
    let error: Value = refused.json().await.unwrap();
    let message = error["error"]["message"].as_str().unwrap();
    assert_eq!(error["error"]["code"], "keymux_budget_reached", "{error}");
    assert!(message.contains("'a1'") && message.contains("$0.02 daily budget") && message.contains("resets in"));
    let record = last_record(&h).await;
    assert!(record["served_by"].is_null() && record["attempts"].as_array().unwrap().is_empty(), "never sent: {record}");

    let answer = ws.create(&on_socket.next_body(false)).await;
    let error = answer.error.expect("the bound socket's next turn is refused");
    assert_eq!((error["status"].as_u64(), error["error"]["code"].as_str()), (Some(429), Some("keymux_budget_reached")));
    let mut fresh = Session::new(Shape::Codex, 12, false);
    assert_eq!(fresh.turn(&client(), &h.base, false).await.status, 200);
    assert_eq!(last_record(&h).await["served_by"], "k_b1", "new sessions still go to b1");

    // Just past the next local midnight (the gateway's clock moved, no waiting) the budget is open
    // again by itself, and the session on a1 goes on there.
    let clock = h.gateway.clock();
    let to_midnight = clock.periods().day_end_unix_ms - clock.unix_ms();
    h.advance(std::time::Duration::from_millis(to_midnight + 60_000));
    assert_eq!(budget_state(&h, "k_a1").await, "open");
    budget_event(&events, "\"key\":\"k_a1\"", "open").await;
    let told = events.lock().unwrap().iter().filter(|e| e.to_string().contains("\"state\":\"stopped\"")).count();
    assert_eq!(told, 1, "each state is told once per period");
    let r = on_a1.turn(&client(), &h.base, false).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(last_record(&h).await["served_by"], "k_a1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budgets_are_set_through_the_api_and_bad_values_are_refused_in_words() {
    let h = Harness::start_with(two_orgs(), &keys(None, OnLimit::Reserve), |_| {}).await;
    let api = Admin::new(&h.root);
    for (bad, words) in [
        (serde_json::json!({ "daily_budget_usd": -1 }), "zero or more"),
        (serde_json::json!({ "reserve_at": 0 }), "percent from 1 to 100"),
        (serde_json::json!({ "on_limit": "sometimes" }), "`reserve` or `stop`"),
    ] {
        let (status, answer) = api.patch("/keys/k_b1", bad.clone()).await;
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert_eq!(status, 400, "{bad}: {answer}");
        assert!(message.contains(words), "{bad}: {message}");
    }
    let set = serde_json::json!({ "monthly_budget_usd": 12.5, "reserve_at": 80, "on_limit": "stop" });
    let (status, key) = api.patch("/keys/k_b1", set).await;
    assert_eq!(status, 200, "{key}");
    assert_eq!((key["monthly_budget_usd"].as_f64(), key["reserve_at"].as_u64()), (Some(12.5), Some(80)), "{key}");
    assert_eq!((key["on_limit"].as_str(), key["budget"]["state"].as_str()), (Some("stop"), Some("open")), "{key}");
    let (status, key) = api.patch("/keys/k_b1", serde_json::json!({ "monthly_budget_usd": null })).await;
    assert_eq!((status, key["monthly_budget_usd"].is_null()), (200, true), "null removes it: {key}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pools_budget_holds_its_tokens_requests_and_no_others() {
    let keys = [key("a1", "sk-a1"), key("a2", "sk-a2"), key("b1", "sk-b1")];
    let sim = keymux_sim::SimConfig::new().org("org-a", &["sk-a1", "sk-a2"]).org("org-b", &["sk-b1"]);
    let h = Harness::start_with(sim, &keys, |_| {}).await;
    clear_of_midnight(&h);
    let api = Admin::new(&h.root);
    let events = collect_events(api.get("/events?after=0").await);
    let work = serde_json::json!({
        "name": "work", "keys": ["a1", "b1"], "daily_budget_usd": 0.02, "reserve_at": 50, "on_limit": "stop"
    });
    let (status, body) = api.post_json("/pools", Some(work)).await;
    assert_eq!(status, 201, "{body}");
    let (status, created) = api.post_json("/tokens", Some(serde_json::json!({"name": "acme", "pool": "work"}))).await;
    assert_eq!(status, 201, "{created}");
    let acme = created["secret"].as_str().unwrap().to_owned();
    let pool_state = || async {
        let pools = Admin::new(&h.root).get_json("/pools").await;
        let work = pools.as_array().unwrap().iter().find(|p| p["name"] == "work").unwrap().clone();
        work["budget"]["state"].as_str().unwrap().to_owned()
    };

    let mut s = Session::new(Shape::Codex, 20, false);
    s.token.clone_from(&acme);
    let mut turns = 0;
    while pool_state().await != "reserved" {
        assert!(turns < 10, "the pool never became reserved");
        assert_eq!(s.turn(&client(), &h.base, false).await.status, 200);
        turns += 1;
    }
    // A new session of the pool waits for the reset; one of a token of `all` is served (a1 and b1
    // have no budget of their own).
    let mut fresh = Session::new(Shape::Codex, 21, false);
    fresh.token.clone_from(&acme);
    let refused = fresh.turn(&client(), &h.base, false).await;
    assert_eq!(
        (refused.status, refused.error_code.as_deref()),
        (429, Some("keymux_budget_reached")),
        "{}",
        refused.body
    );
    assert!(refused.body.contains("pool 'work'"), "{}", refused.body);
    let mut other = Session::new(Shape::Codex, 22, false);
    assert_eq!(other.turn(&client(), &h.base, false).await.status, 200);
    budget_event(&events, "\"pool\":\"work\"", "reserved").await;

    // Its session goes on until the pool's limit, then stops there, named as the pool's.
    while pool_state().await != "stopped" {
        assert!(turns < 20, "the pool never stopped");
        assert_eq!(s.turn(&client(), &h.base, false).await.status, 200, "pinned turns go on while reserved");
        turns += 1;
    }
    let stopped = s.turn(&client(), &h.base, false).await;
    assert_eq!(stopped.status, 429, "{}", stopped.body);
    assert!(stopped.body.contains("Keymux pool 'work' reached its $0.02 daily budget"), "{}", stopped.body);
    assert!(stopped.body.contains("keymux pool set work --daily-budget-usd"), "{}", stopped.body);
    budget_event(&events, "\"pool\":\"work\"", "stopped").await;

    // A WebSocket's handshake follows the same rule as a request: the stopped pool's token gets none
    // (426: Codex falls back to HTTP, where the 429 above says why), while a token of `all` opens one
    // (a1 and b1 have no budget of their own).
    let refused = WsClient::connect_as(&h.base, "sock-stopped", &acme).await;
    assert!(refused.is_err(), "no socket for a token whose pool stopped at its budget");
    let open = WsClient::connect_as(&h.base, "sock-all", TOKEN).await;
    assert!(open.is_ok(), "a token of `all` still opens one");
}
