//! What the control plane reports agrees exactly with what the provider served: the events a subscriber
//! saw, the usage series and the per-key token sums, after mixed traffic through the real binary.
#![allow(clippy::unwrap_used, clippy::disallowed_methods, clippy::print_stdout, reason = "tests")]

use crate::support;

use std::collections::BTreeMap;

use keymux_sim::Sim;
use serde_json::{json, Value};
use support::*;

/// What the provider served, per key secret: (requests, input tokens, cached tokens). WebSocket frames
/// count as requests; their upgrades and the start-up probes do not.
fn served_by_provider(sim: &Sim) -> BTreeMap<String, (u64, u64, u64)> {
    let mut out = BTreeMap::new();
    for e in sim.log() {
        let upgrade_or_probe = e.method == "GET" && (e.path == "/v1/responses" || e.path == "/v1/models");
        if upgrade_or_probe || e.status != 200 {
            continue;
        }
        let entry: &mut (u64, u64, u64) = out.entry(e.key.unwrap_or_default()).or_default();
        entry.0 += 1;
        entry.1 += e.input_tokens;
        entry.2 += e.cached_tokens;
    }
    out
}

async fn traffic(base: &str) -> usize {
    let c = client();
    let mut made = 0;
    for n in 0..6 {
        let shape = if n % 2 == 0 { Shape::Codex } else { Shape::Pi };
        let mut session = Session::new(shape, 100 + n, n % 3 != 0);
        for turn in 0..3 {
            assert_eq!(session.turn(&c, base, turn == 2).await.status, 200);
            made += 1;
        }
    }
    for n in 0..3 {
        let mut ws = WsClient::connect(base, &format!("01a227d7-0000-7000-8000-00000000010{n}")).await.unwrap();
        let mut previous: Option<String> = None;
        for turn in 0..3 {
            let mut body = json!({"model":"gpt-5.5","store":false,"input":[{"role":"user","content":format!("ws {n} turn {turn}")}]});
            if let Some(id) = &previous {
                body["previous_response_id"] = json!(id);
            }
            let answer = ws.create(&body).await;
            previous = answer.response_id();
            assert!(previous.is_some(), "{:?}", answer.error);
            made += 1;
        }
    }
    for body in [
        json!({"model":"gpt-5.5","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}),
        json!({"model":"gpt-5.5","messages":[{"role":"user","content":"hi"}]}),
        json!({"model":"text-embedding-3-small","input":["alpha","beta"]}),
    ] {
        let path = if body.get("messages").is_some() { "chat/completions" } else { "embeddings" };
        let r = post(&c, &format!("{base}/{path}"), &[], &body).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let _ = r.bytes().await;
        made += 1;
    }
    made
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_usage_and_token_sums_agree_exactly_with_what_the_provider_served() {
    let sim = Sim::start(three_orgs()).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let mut env = base_env(home.path());
    for (label, secret) in [("a1", "sk-a1"), ("a2", "sk-a2"), ("b1", "sk-b1"), ("b2", "sk-b2"), ("c1", "sk-c1")] {
        env.push((format!("KEYMUX_KEY_{}", label.to_uppercase()), secret.to_owned()));
    }
    env.push(("KEYMUX_CLIENT_TOKEN".into(), TOKEN.into()));
    let gateway = Keymux::spawn(&["--ephemeral", "--upstream", &sim.base_url()], &env).await;
    let api = Admin::new(&gateway.root);
    let seen = collect_events(api.get("/events?after=0").await);
    let made = traffic(&gateway.base).await;

    // Wait (on the events themselves) until every finished request has been seen.
    let finished = || seen.lock().unwrap().iter().filter(|e| e["type"] == "finished").count();
    until("every request's finished event", || async { finished() }, |n| *n >= made).await;
    let events = seen.lock().unwrap().clone();
    let finished: Vec<&Value> = events.iter().filter(|e| e["type"] == "finished").map(|e| &e["data"]).collect();
    assert_eq!(finished.len(), made, "one finished event per request and WebSocket turn");
    assert_eq!(events.iter().filter(|e| e["type"] == "routed").count(), made);
    let provider = served_by_provider(&sim);
    let keys = api.get_json("/keys").await;
    let usage = api.get_json("/usage?bucket=hour&days=1").await;
    println!("provider served {provider:?}");
    for key in keys.as_array().unwrap() {
        let secret = format!("sk-{}", key["label"].as_str().unwrap());
        let (requests, input, cached) = provider.get(&secret).copied().unwrap_or_default();
        let by_events = finished.iter().filter(|r| r["served_by"] == key["id"]).count() as u64;
        assert_eq!(by_events, requests, "{secret}: events");
        assert_eq!(
            (key["input_tokens"].as_u64().unwrap(), key["cached_tokens"].as_u64().unwrap()),
            (input, cached),
            "{secret}: key sums"
        );
        let points: Vec<&Value> =
            usage["points"].as_array().unwrap().iter().filter(|p| p["key"] == key["fingerprint"]).collect();
        let sum = |f: &str| points.iter().map(|p| p[f].as_u64().unwrap()).sum::<u64>();
        assert_eq!(
            (sum("requests"), sum("input_tokens"), sum("cached_tokens")),
            (requests, input, cached),
            "{secret}: usage"
        );
    }
    let total: u64 = usage["points"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["key"] == "total")
        .map(|p| p["requests"].as_u64().unwrap())
        .sum();
    assert_eq!(total, made as u64);
    let event_tokens: u64 = finished.iter().filter_map(|r| r["usage"]["input"].as_u64()).sum();
    assert_eq!(event_tokens, provider.values().map(|v| v.1).sum::<u64>(), "the events carry the same tokens");
    let output = gateway.stop().await;
    assert_no_secrets("keymux output", &output, &["sk-a1", "sk-a2", "sk-b1", "sk-b2", "sk-c1", TOKEN, ADMIN]);
}
