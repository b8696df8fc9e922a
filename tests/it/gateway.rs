//! Black-box tests of the pass-through gateway: real HTTP on loopback, the real gateway (in-process or
//! the `keymux` binary), and the multi-organization simulator as the upstream.
#![allow(clippy::unwrap_used, clippy::disallowed_methods, reason = "tests")]

use crate::support;

use keymux::pool::HealthState;
use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt as _;
use keymux_sim::{Fault, Limits, SimConfig};
use serde_json::{json, Value};
use support::*;

/// Nothing but the start-up probes reached the upstream.
fn no_client_traffic(h: &Harness) -> bool {
    client_counts(&h.sim).is_empty()
}

fn two_orgs() -> SimConfig {
    SimConfig::new().org("org-a", &["sk-a1", "sk-a2"]).org("org-b", &["sk-b1"])
}

fn three_keys() -> Vec<TestKey> {
    vec![key("a1", "sk-a1"), key("a2", "sk-a2"), key("b1", "sk-b1")]
}

fn codex_body(stream: bool) -> Value {
    let mut body = captured_body("codex/http-turn1.json");
    body["stream"] = json!(stream);
    body
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    ResponsesJson,
    ResponsesSse,
    PiResponsesSse,
    ChatSse,
    ChatJson,
    Embeddings,
}

/// Makes a captured first turn the first turn of a new session: its own `prompt_cache_key` (when it has
/// one) and its own first user message. Replaying one captured body unchanged would be a single session,
/// which soft affinity rightly keeps on one key.
fn as_new_session(mut body: Value) -> Value {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if body.get("prompt_cache_key").is_some() {
        body["prompt_cache_key"] = json!(format!("01a227d7-ed08-7e52-9dfa-{n:012x}"));
    }
    let field = if body.get("input").is_some() { "input" } else { "messages" };
    let items = body.get_mut(field).and_then(Value::as_array_mut);
    if let Some(user) = items.and_then(|items| items.iter_mut().find(|i| i["role"] == "user")) {
        match &mut user["content"] {
            Value::String(text) => text.push_str(&format!(" (session {n})")),
            Value::Array(parts) => parts.push(json!({"type": "input_text", "text": format!("session {n}")})),
            _ => {}
        }
    }
    body
}

/// Sends one request of `kind` and checks that the client got a complete, well-formed answer.
async fn one_request(client: &reqwest::Client, base: &str, kind: Kind) -> Result<(), String> {
    let (path, headers, body) = match kind {
        Kind::ResponsesJson => ("/responses", captured_headers("codex/http-turn1.json"), codex_body(false)),
        Kind::ResponsesSse => ("/responses", captured_headers("codex/http-turn1.json"), codex_body(true)),
        Kind::PiResponsesSse => {
            ("/responses", captured_headers("pi/responses-turn1.json"), captured_body("pi/responses-turn1.json"))
        }
        Kind::ChatSse => (
            "/chat/completions",
            captured_headers("pi/chat-completions-turn1.json"),
            captured_body("pi/chat-completions-turn1.json"),
        ),
        Kind::ChatJson => {
            let mut body = captured_body("pi/chat-completions-turn1.json");
            body["stream"] = json!(false);
            body.as_object_mut().unwrap().remove("stream_options");
            ("/chat/completions", captured_headers("pi/chat-completions-turn1.json"), body)
        }
        Kind::Embeddings => {
            ("/embeddings", vec![], json!({"model": "text-embedding-3-small", "input": ["alpha", "beta"]}))
        }
    };
    let body = as_new_session(body);
    let response =
        post(client, &format!("{base}{path}"), &headers, &body).send().await.map_err(|e| format!("{kind:?}: {e}"))?;
    let status = response.status();
    if status != 200 {
        return Err(format!("{kind:?}: status {status}: {}", response.text().await.unwrap_or_default()));
    }
    match kind {
        Kind::ResponsesJson => {
            let v: Value = response.json().await.map_err(|e| e.to_string())?;
            let ok = v["status"] == "completed" && v["output"].as_array().is_some_and(|o| !o.is_empty());
            ok.then_some(()).ok_or_else(|| format!("incomplete response object: {v}"))
        }
        Kind::ResponsesSse | Kind::PiResponsesSse => {
            let events = read_sse(response).await;
            let last = events.last().map(|e| e.data["type"].clone());
            let has_items = events.iter().any(|e| e.data["type"] == "response.output_item.done");
            (last == Some(json!("response.completed")) && has_items)
                .then_some(())
                .ok_or_else(|| format!("{kind:?}: stream ended with {last:?}"))
        }
        Kind::ChatSse => {
            let events = read_sse(response).await;
            let done = events.last().is_some_and(|e| e.data == json!("[DONE]"));
            let usage = events.iter().any(|e| e.data.get("usage").is_some_and(|u| !u.is_null()));
            (done && usage).then_some(()).ok_or_else(|| "chat stream incomplete".to_owned())
        }
        Kind::ChatJson => {
            let v: Value = response.json().await.map_err(|e| e.to_string())?;
            v["choices"][0]["message"]["content"].as_str().map(|_| ()).ok_or_else(|| format!("no chat content: {v}"))
        }
        Kind::Embeddings => {
            let v: Value = response.json().await.map_err(|e| e.to_string())?;
            (v["data"].as_array().map(Vec::len) == Some(2)).then_some(()).ok_or_else(|| format!("embeddings: {v}"))
        }
    }
}

/// The acceptance run: the real `keymux` binary on port 0, 3 keys in 2 orgs, 300 mixed requests at
/// concurrency 16. Every request succeeds and every key gets a fair share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_serves_300_mixed_requests_fairly() {
    let output = serves_300_mixed_requests(&[]).await;
    assert!(output.contains("runtime_threads="), "{output}");
}

/// The same run with the binary pinned to one CPU, as `taskset -c 0 keymux serve` runs it: one
/// runtime thread (the single-threaded scheduler) serves everything, key probes and the metrics
/// flusher included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_on_one_cpu_serves_300_mixed_requests_fairly() {
    let cpu = first_allowed_cpu();
    let output = serves_300_mixed_requests(&["taskset", "-c", &cpu]).await;
    assert!(output.contains("runtime_threads=1 "), "{output}");
}

/// The first CPU this test process may run on (`Cpus_allowed_list`), so pinning works where CPU 0 is
/// not ours (a container given CPUs 2-3).
fn first_allowed_cpu() -> String {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let list = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).expect("Cpus_allowed_list");
    list.trim().split([',', '-']).next().expect("a CPU").to_owned()
}

/// Runs the acceptance run with the binary started under `wrapper`; returns its output.
async fn serves_300_mixed_requests(wrapper: &[&str]) -> String {
    let sim = keymux_sim::Sim::start(two_orgs()).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let mut env = base_env(home.path());
    env.extend([
        ("KEYMUX_KEY_A1".to_owned(), "sk-a1".to_owned()),
        ("KEYMUX_KEY_A2".to_owned(), "sk-a2".to_owned()),
        ("KEYMUX_KEY_B1".to_owned(), "sk-b1".to_owned()),
        ("KEYMUX_CLIENT_TOKEN".to_owned(), TOKEN.to_owned()),
    ]);
    let keymux = Keymux::spawn_under(wrapper, &["--ephemeral", "--upstream", &sim.base_url()], &env).await;
    let client = client();
    let kinds = [
        Kind::ResponsesJson,
        Kind::ResponsesSse,
        Kind::PiResponsesSse,
        Kind::ChatSse,
        Kind::ChatJson,
        Kind::Embeddings,
    ];
    let results: Vec<Result<(), String>> = futures::stream::iter(0..300)
        .map(|i| {
            let client = client.clone();
            let base = keymux.base.clone();
            async move { one_request(&client, &base, kinds[i % kinds.len()]).await }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let failures: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(failures.is_empty(), "{} of 300 failed, first: {}", failures.len(), failures[0]);

    let counts = client_counts(&sim);
    let total: usize = counts.values().sum();
    assert_eq!(total, 300, "every request reached the upstream exactly once: {counts:?}");
    let mean = total as f64 / 3.0;
    for secret in ["sk-a1", "sk-a2", "sk-b1"] {
        let n = counts.get(secret).copied().unwrap_or(0) as f64;
        assert!((n - mean).abs() <= 0.3 * mean, "unfair share for a key: {counts:?}");
    }

    // The decisions the gateway reports match what the upstream saw.
    let decisions: Value = decisions_api(&keymux.root).await;
    let mut by_key: BTreeMap<String, usize> = BTreeMap::new();
    for record in decisions["data"].as_array().unwrap() {
        assert_eq!(record["status"], 200);
        assert_eq!(record["decision"]["continuity_hit"], false);
        let source = record["decision"]["affinity_source"].as_str().unwrap();
        let expected: &[&str] = match record["operation"].as_str().unwrap() {
            "embeddings" => &["none"],
            _ => &["prompt_cache_key", "prompt_prefix"],
        };
        assert!(expected.contains(&source), "{source} for {}", record["operation"]);
        *by_key.entry(record["served_by"].as_str().unwrap().to_owned()).or_default() += 1;
    }
    assert_eq!(by_key.get("env-a1").copied(), counts.get("sk-a1").copied());
    assert_eq!(by_key.get("env-b1").copied(), counts.get("sk-b1").copied());

    let output = keymux.stop().await;
    assert!(output.contains("listening on http://127.0.0.1:"), "{output}");
    assert_no_secrets("keymux output", &output, &["sk-a1", "sk-a2", "sk-b1", TOKEN]);
    assert_no_secrets("decisions API", &decisions.to_string(), &["sk-a1", "sk-a2", "sk-b1", TOKEN]);
    output
}

#[tokio::test]
async fn streams_arrive_event_by_event() {
    let h = Harness::start(SimConfig::new().org("org-a", &["sk-a1"]), &[key("a1", "sk-a1")]).await;
    h.sim.inject("sk-a1", Fault::SlowDeltas(Duration::from_millis(150)));
    let sent = tokio::time::Instant::now();
    let response = post(
        &client(),
        &format!("{}/responses", h.base),
        &captured_headers("codex/http-turn1.json"),
        &codex_body(true),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers().get("content-type").unwrap().to_str().unwrap().starts_with("text/event-stream"));
    let events = read_sse(response).await;
    assert!(events.len() >= 8, "full event sequence: {}", events.len());
    let first = events.first().unwrap().at - sent;
    let last = events.last().unwrap().at - sent;
    // Buffering would deliver everything at once at the end.
    assert!(last - first >= Duration::from_millis(600), "events bunched: first {first:?}, last {last:?}");
    let seqs: Vec<u64> = events.iter().filter_map(|e| e.data["sequence_number"].as_u64()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "order kept");
}

#[tokio::test]
async fn bodies_and_client_headers_pass_through_unchanged() {
    let h = Harness::start(SimConfig::new().org("org-a", &["sk-a1"]), &[key("a1", "sk-a1")]).await;
    // A Codex body with fields no schema knows (client_metadata, additional_tools, service_tier…).
    let mut body = codex_body(true);
    body["service_tier"] = json!("priority");
    body["generate"] = json!(true);
    body["reasoning"]["context"] = json!("all_turns");
    let mut headers = captured_headers("codex/http-turn1.json");
    headers.push(("x-codex-turn-state".into(), "turn-state-token-1".into()));
    headers.push(("openai-organization".into(), "org-client-chosen".into()));
    let response = post(&client(), &format!("{}/responses", h.base), &headers, &body).send().await.unwrap();
    assert_eq!(response.status(), 200);
    // Upstream headers come back (organization, rate limits, request id).
    assert_eq!(response.headers().get("openai-organization").unwrap(), "org-a");
    assert!(response.headers().get("x-ratelimit-remaining-requests").is_some());
    assert!(response.headers().get("x-request-id").is_some());
    let _ = read_sse(response).await;

    let entry = h.sim.log().into_iter().last().unwrap();
    assert_eq!(entry.body.as_ref(), Some(&body), "body forwarded byte-for-byte as JSON");
    assert_eq!(entry.key.as_deref(), Some("sk-a1"), "the pooled key authenticated, not the local token");
    let sent: BTreeMap<_, _> = entry.headers.iter().cloned().collect();
    assert_eq!(sent.get("x-codex-turn-state").map(String::as_str), Some("turn-state-token-1"));
    assert_eq!(sent.get("session-id"), headers.iter().find(|(k, _)| k == "session-id").map(|(_, v)| v));
    assert_eq!(sent.get("originator").map(String::as_str), Some("codex_exec"));
    assert!(!sent.contains_key("openai-organization"), "a key's organization is the key's business");
    assert!(!entry.headers.iter().any(|(_, v)| v.contains(TOKEN)), "local token never forwarded");
}

#[tokio::test]
async fn compressed_upstream_answers_reach_the_client_decoded() {
    let h = Harness::start(SimConfig::new().org("org-a", &["sk-a1"]).gzip_json(true), &[key("a1", "sk-a1")]).await;
    let response = post(
        &client(),
        &format!("{}/responses", h.base),
        &captured_headers("codex/http-turn1.json"),
        &codex_body(false),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers().get("content-encoding").is_none(), "no stale content-encoding");
    let v: Value = serde_json::from_slice(&response.bytes().await.unwrap()).expect("plain JSON");
    assert_eq!(v["object"], "response");
    // The upstream really did compress it.
    let entry = h.sim.log().into_iter().last().unwrap();
    let accept = entry.headers.iter().find(|(k, _)| k == "accept-encoding").map(|(_, v)| v.clone());
    assert!(accept.is_some_and(|a| a.contains("gzip")), "Keymux asks upstream for compression");
}

#[tokio::test]
async fn local_token_is_required() {
    let h = Harness::start(two_orgs(), &three_keys()).await;
    let c = client();
    let url = format!("{}/responses", h.base);
    let missing = c.post(&url).json(&codex_body(false)).send().await.unwrap();
    assert_eq!(missing.status(), 401);
    let v: Value = missing.json().await.unwrap();
    assert_eq!(v["error"]["code"], "invalid_api_key");
    assert!(v["error"]["message"].as_str().unwrap().contains("keymux token"));
    let wrong = c.post(&url).bearer_auth("sk-a1").json(&codex_body(false)).send().await.unwrap();
    assert_eq!(wrong.status(), 401);
    let text = wrong.text().await.unwrap();
    assert!(!text.contains("sk-a1"), "the presented value is never echoed");
    assert!(no_client_traffic(&h), "nothing reached the upstream");
}

#[tokio::test]
async fn oversized_and_malformed_bodies_get_clear_errors_and_serving_continues() {
    let h = Harness::start_with(two_orgs(), &three_keys(), |c| c.max_body_bytes = 64 * 1024).await;
    let c = client();
    let url = format!("{}/responses", h.base);
    let big = "x".repeat(100 * 1024);
    let r = c
        .post(&url)
        .bearer_auth(TOKEN)
        .body(format!("{{\"model\":\"gpt-5.5\",\"input\":\"{big}\"}}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "request_too_large");
    assert!(v["error"]["message"].as_str().unwrap().contains("max_body_bytes"));

    // A chunked body over the cap is cut off too (no content-length to trust).
    let chunks = futures::stream::iter((0..100).map(|_| Ok::<_, std::io::Error>(bytes::Bytes::from(vec![b' '; 1024]))));
    let r = c.post(&url).bearer_auth(TOKEN).body(reqwest::Body::wrap_stream(chunks)).send().await.unwrap();
    assert_eq!(r.status(), 413);

    for bad in ["{\"model\": ", "[1,2,3]", ""] {
        let r = c.post(&url).bearer_auth(TOKEN).body(bad).send().await.unwrap();
        assert_eq!(r.status(), 400, "{bad:?}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["type"], "invalid_request_error");
    }
    assert!(no_client_traffic(&h), "bad input never reaches the upstream");
    one_request(&c, &h.base, Kind::ResponsesJson).await.expect("still serving");
}

#[tokio::test]
async fn every_route_reaches_the_upstream() {
    let h = Harness::start(SimConfig::new().org("org-a", &["sk-a1"]), &[key("a1", "sk-a1")]).await;
    let c = client();
    // A stored response, then the resource calls on it.
    let mut body = captured_body("pi/responses-turn1.json");
    body["stream"] = json!(false);
    body["store"] = json!(true);
    let created: Value =
        post(&c, &format!("{}/responses", h.base), &[], &body).send().await.unwrap().json().await.unwrap();
    let id = created["id"].as_str().unwrap();
    let get = c.get(format!("{}/responses/{id}", h.base)).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(get.status(), 200);
    assert_eq!(get.json::<Value>().await.unwrap()["id"], id);
    let items =
        c.get(format!("{}/responses/{id}/input_items?limit=5", h.base)).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(items.status(), 200);
    assert_eq!(items.json::<Value>().await.unwrap()["object"], "list");
    let cancel = c.post(format!("{}/responses/{id}/cancel", h.base)).bearer_auth(TOKEN).send().await.unwrap();
    // The response completed, so the provider refuses to cancel it, and that answer is relayed.
    assert_eq!(cancel.status(), 400);
    assert!(cancel.text().await.unwrap().contains("Cannot cancel a completed response"));
    let del = c.delete(format!("{}/responses/{id}", h.base)).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(del.json::<Value>().await.unwrap()["deleted"], true);
    let gone = c.get(format!("{}/responses/{id}", h.base)).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(gone.status(), 404, "upstream errors pass through");

    // (The captured turn-2 bodies replay the capture server's fake encrypted_content, which the
    // simulator rightly refuses; compact a fresh conversation instead.)
    let mut compact_body = captured_body("pi/responses-turn1.json");
    compact_body.as_object_mut().unwrap().remove("stream");
    let compact = post(&c, &format!("{}/responses/compact", h.base), &[], &compact_body).send().await.unwrap();
    assert_eq!(compact.status(), 200, "{}", compact.text().await.unwrap());
    let models: Value =
        c.get(format!("{}/models", h.base)).bearer_auth(TOKEN).send().await.unwrap().json().await.unwrap();
    assert!(models["data"].as_array().unwrap().iter().any(|m| m["id"] == "gpt-5.5"));
    let other = c.post(format!("{}/audio/speech", h.base)).bearer_auth(TOKEN).json(&json!({})).send().await.unwrap();
    assert_eq!(other.status(), 404, "unknown paths are forwarded and the upstream's answer relayed");
    let paths: Vec<String> = h.sim.log().iter().map(|e| format!("{} {}", e.method, e.path)).collect();
    // The client holds a tagged id; the upstream only ever sees its own (`resp_` and 48 hex digits).
    assert!(id.starts_with("resp_km1"));
    let id = format!("resp_{}", &id[id.len() - 48..]);
    for want in [
        format!("GET /v1/responses/{id}"),
        format!("GET /v1/responses/{id}/input_items"),
        format!("POST /v1/responses/{id}/cancel"),
        format!("DELETE /v1/responses/{id}"),
        "POST /v1/responses/compact".to_owned(),
        "GET /v1/models".to_owned(),
        "POST /v1/audio/speech".to_owned(),
    ] {
        assert!(paths.contains(&want), "{want} missing from {paths:?}");
    }
}

#[tokio::test]
async fn failover_before_the_first_byte() {
    // The personal key (tier 1) is tried only after both work keys.
    let keys = [key("a1", "sk-a1"), key("a2", "sk-a2"), key("b1", "sk-b1").priority(1)];
    let h = Harness::start(two_orgs(), &keys).await;
    let c = client();
    // Every key fails once: three attempts, and the client gets the provider's own 500, never a hang.
    for secret in ["sk-a1", "sk-a2", "sk-b1"] {
        h.sim.inject(secret, Fault::Status500);
    }
    let r = post(&c, &format!("{}/responses", h.base), &[], &codex_body(false)).send().await.unwrap();
    assert_eq!(r.status(), 500);
    let record = h.gateway.events().recent(1).pop().unwrap();
    assert_eq!(record.attempts.len(), 3);
    assert!(record.attempts.iter().all(|a| a.failure == Some(keymux::events::FailureKind::Upstream5xx)));

    // The work keys keep failing (500 and 503); the personal key is healthy. Every request fails over to
    // it before anything reaches the client, and the client never notices.
    h.sim.set_standing("sk-a1", Fault::Status500, None);
    h.sim.set_standing("sk-a2", Fault::Status503 { retry_after_secs: None }, None);
    for _ in 0..6 {
        one_request(&c, &h.base, Kind::ResponsesSse).await.expect("absorbed by failover");
    }
    for r in h.gateway.events().recent(6) {
        assert_eq!(r.status, 200);
        assert_eq!(r.served_by.as_ref().map(|k| k.as_str()), Some("k_b1"));
        let tried: Vec<(&str, Option<u16>)> = r.attempts.iter().map(|a| (a.key.as_str(), a.status)).collect();
        assert_eq!(tried.len(), 3, "{tried:?}");
        let mut failed: Vec<_> = tried[..2].to_vec();
        failed.sort();
        assert_eq!(failed, [("k_a1", Some(500)), ("k_a2", Some(503))], "both work keys tried first");
        assert_eq!(tried[2], ("k_b1", Some(200)));
        assert_eq!(r.attempts[2].failure, None);
    }
    assert_eq!(client_counts(&h.sim).get("sk-b1"), Some(&7), "the personal key served each once (and failed once)");
}

#[tokio::test]
async fn rate_limited_keys_cool_down_and_all_cooling_gives_retry_after() {
    let h = Harness::start(two_orgs(), &three_keys()).await;
    let c = client();
    h.sim.inject("sk-a1", Fault::RateLimited { retry_after_secs: 30 });
    for _ in 0..4 {
        one_request(&c, &h.base, Kind::Embeddings).await.expect("served by another key");
    }
    let status = h.status();
    let a1 = status.iter().find(|k| k.label == "a1").unwrap();
    assert_eq!(a1.health, HealthState::Cooling);
    assert!(a1.cooldown_ms > 25_000);

    h.sim.inject("sk-a2", Fault::RateLimited { retry_after_secs: 12 });
    h.sim.inject("sk-b1", Fault::RateLimited { retry_after_secs: 20 });
    let mut last = None;
    for _ in 0..3 {
        let r =
            post(&c, &format!("{}/embeddings", h.base), &[], &json!({"model":"text-embedding-3-small","input":"x"}))
                .send()
                .await
                .unwrap();
        if r.status() == 429 {
            last = Some(r);
            break;
        }
    }
    let r = last.expect("all keys cooling gives 429");
    let retry_after: u64 = r.headers().get("retry-after").unwrap().to_str().unwrap().parse().expect("integer seconds");
    assert!((10..=12).contains(&retry_after), "{retry_after}");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "rate_limit_exceeded");
    assert!(v["error"]["message"].as_str().unwrap().contains("3 Keymux key(s)"));
}

#[tokio::test]
async fn rejected_key_is_flagged_and_skipped() {
    let h = Harness::start(two_orgs(), &three_keys()).await;
    let c = client();
    h.sim.inject("sk-b1", Fault::InvalidKey);
    for _ in 0..6 {
        one_request(&c, &h.base, Kind::ChatJson).await.expect("served");
    }
    let status = h.status();
    assert_eq!(status.iter().find(|k| k.label == "b1").unwrap().health, HealthState::Rejected);
    let served_after = client_counts(&h.sim).get("sk-b1").copied().unwrap_or(0);
    assert_eq!(served_after, 1, "an invalid key gets no more traffic");
}

#[tokio::test]
async fn azure_keys_use_the_api_key_header() {
    let h = Harness::start(
        SimConfig::new().org("org-a", &["sk-a1"]).azure_org("azure-east", &["az-key-1"]),
        &[azure_key("east", "az-key-1")],
    )
    .await;
    one_request(&client(), &h.base, Kind::ResponsesJson).await.expect("azure serves");
    let entry = h.sim.log().into_iter().last().unwrap();
    assert_eq!(entry.key.as_deref(), Some("az-key-1"));
    assert!(entry.headers.iter().any(|(k, _)| k == "api-key"));
    assert!(!entry.headers.iter().any(|(k, _)| k == "authorization"));
}

#[tokio::test]
async fn client_going_away_cancels_the_upstream_stream() {
    let h = Harness::start(SimConfig::new().org("org-a", &["sk-a1"]), &[key("a1", "sk-a1")]).await;
    h.sim.inject("sk-a1", Fault::SlowDeltas(Duration::from_millis(500)));
    let response = post(&client(), &format!("{}/responses", h.base), &[], &codex_body(true)).send().await.unwrap();
    let mut stream = response.bytes_stream();
    let _first = stream.next().await.unwrap().unwrap();
    let in_flight = || h.status()[0].in_flight;
    assert_eq!(in_flight(), 1);
    let mut feed = h.gateway.events().subscribe();
    drop(stream);
    // The whole stream would take several seconds more; the key is released as soon as the client
    // leaves, and the record says so (a generous bound that only catches a stream held to its end).
    let record = next_record(&mut feed).await;
    assert_eq!(record.error, Some("client_cancelled"));
    assert_eq!(record.served_by.as_ref().map(|k| k.as_str()), Some("k_a1"));
    assert_eq!(in_flight(), 0, "the key was released before the record was published");
    assert!(record.duration_ms < 5_000, "cut when the client left, not at the stream's end");
}

#[tokio::test]
async fn no_keys_gives_a_clear_503_without_rate_limit_headers() {
    let h = Harness::start(SimConfig::new().org("org-a", &["sk-a1"]), &[]).await;
    let r = post(&client(), &format!("{}/responses", h.base), &[], &codex_body(false)).send().await.unwrap();
    assert_eq!(r.status(), 503);
    // Nothing is rate limited: a retry-after would make Codex wait and retry for nothing.
    assert!(r.headers().get("retry-after").is_none());
    assert!(!r.headers().keys().any(|k| k.as_str().starts_with("x-ratelimit-")), "{:?}", r.headers());
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "keymux_no_keys");
    assert!(v["error"]["message"].as_str().unwrap().contains("keymux keys add"));
}

#[tokio::test]
async fn control_api_refuses_browsers_and_foreign_hosts() {
    let h = Harness::start(two_orgs(), &three_keys()).await;
    let c = client();
    let url = format!("{}/keymux/api/status", h.root);
    let api = Admin::new(&h.root);
    let ok = api.get_json("/status").await;
    assert_eq!(ok["keys"].as_array().unwrap().len(), 3);
    // The start-up probe taught the pool every key's organization before any client request.
    let orgs: Vec<&str> = ok["keys"].as_array().unwrap().iter().map(|k| k["org"].as_str().unwrap()).collect();
    assert_eq!(orgs, ["org-a", "org-a", "org-b"]);
    assert_no_secrets("status API", &ok.to_string(), &["sk-a1", "sk-a2", "sk-b1"]);
    let cross_site =
        api.request(reqwest::Method::GET, "/status").header("origin", "https://evil.example").send().await.unwrap();
    assert_eq!(cross_site.status(), 403);
    let rebound =
        api.request(reqwest::Method::GET, "/status").header("host", "evil.example:8787").send().await.unwrap();
    assert_eq!(rebound.status(), 403);
    let no_token = c.get(&url).send().await.unwrap();
    assert_eq!(no_token.status(), 401);
    // A page cannot spend a key either.
    let r = post(&c, &format!("{}/responses", h.base), &[], &codex_body(false))
        .header("origin", "https://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
}

#[tokio::test]
async fn rate_limits_from_the_upstream_are_visible_to_the_client() {
    let limits = Limits {
        // One request of the window goes to the start-up probe.
        requests: 3,
        tokens: 10_000_000,
        window: Duration::from_secs(60),
    };
    let h = Harness::start(SimConfig::new().org("org-a", &["sk-a1"]).limits(limits), &[key("a1", "sk-a1")]).await;
    let c = client();
    one_request(&c, &h.base, Kind::Embeddings).await.unwrap();
    one_request(&c, &h.base, Kind::Embeddings).await.unwrap();
    let r = post(&c, &format!("{}/embeddings", h.base), &[], &json!({"model":"text-embedding-3-small","input":"x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    let secs: u64 = r.headers().get("retry-after").unwrap().to_str().unwrap().parse().unwrap();
    assert!(secs >= 1);
}

#[tokio::test]
async fn metrics_count_by_key_fingerprint_and_survive_a_broken_store() {
    let dir = tempfile::tempdir().unwrap();
    let metrics_dir = dir.path().join("metrics");
    let h = Harness::start_with(two_orgs(), &three_keys(), |c| c.metrics_dir = Some(metrics_dir.clone())).await;
    let c = client();
    for kind in [Kind::ResponsesSse, Kind::ResponsesJson, Kind::ChatSse, Kind::Embeddings] {
        one_request(&c, &h.base, kind).await.unwrap();
    }
    h.gateway.metrics().flush(h.gateway.clock().unix_ms()).0.unwrap();
    let api = Admin::new(&h.root);
    let v = api.get_json("/metrics?days=1").await;
    assert_eq!(v["store"]["persisted"], true, "{v}");
    let rows = v["rows"].as_array().unwrap();
    let total: u64 = rows.iter().map(|r| r["counters"]["requests"].as_u64().unwrap()).sum();
    assert_eq!(total, 4);
    let tokens: u64 = rows.iter().map(|r| r["counters"]["input_tokens"].as_u64().unwrap()).sum();
    assert!(tokens > 0, "usage is counted");
    let status = api.get_json("/status").await;
    let fingerprints: Vec<&str> =
        status["keys"].as_array().unwrap().iter().map(|k| k["fingerprint"].as_str().unwrap()).collect();
    for r in rows {
        assert!(
            fingerprints.contains(&r["key_fingerprint"].as_str().unwrap()),
            "keys appear only as fingerprints: {r}"
        );
    }
    assert_no_secrets("metrics", &v.to_string(), &["sk-a1", "sk-a2", "sk-b1"]);
    assert!(
        !v.to_string().contains("k_a1") && !v.to_string().contains("\"label\""),
        "no ids or labels, only fingerprints"
    );

    // A store that cannot be used: serving goes on, counts stay in memory, and the status says why.
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let h = Harness::start_with(two_orgs(), &three_keys(), |c| c.metrics_dir = Some(file.clone())).await;
    one_request(&c, &h.base, Kind::ResponsesJson).await.expect("still serving");
    let status = Admin::new(&h.root).get_json("/status").await;
    assert_eq!(status["gateway"]["store"]["persisted"], false);
    assert!(status["gateway"]["store"]["error"].as_str().unwrap().contains("could not be opened"));
    assert_eq!(h.gateway.metrics().rows(1, h.gateway.today())[0].counters.requests, 1);
}

#[tokio::test]
async fn empty_answers_are_relayed_not_mistaken_for_cut_streams() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    // A tiny upstream that answers 204 with no body (as some endpoints do).
    let hits = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let app = axum::Router::new()
        .route("/v1/models", axum::routing::get(|| async { axum::Json(json!({"object":"list","data":[]})) }))
        .route(
            "/v1/things/1",
            axum::routing::delete(move || {
                let counter = counter.clone();
                async move {
                    counter.fetch_add(1, Ordering::SeqCst);
                    axum::http::StatusCode::NO_CONTENT
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let h = Harness::start_with(
        SimConfig::new().org("org-a", &["sk-a1"]),
        &[key("a1", "sk-a1"), key("a2", "sk-a2")],
        |c| c.upstream = upstream.clone(),
    )
    .await;
    let r = client().delete(format!("{}/things/1", h.base)).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(r.status(), 204);
    assert_eq!(hits.load(Ordering::SeqCst), 1, "served once, no failover");
    let record = h.gateway.events().recent(1).pop().unwrap();
    assert_eq!(record.attempts.len(), 1);
    assert_eq!(record.attempts[0].failure, None);
}
