//! What Codex 0.171 sends that Keymux has no business with passes through untouched: its December
//! 2026 request headers (`x-codex-routing-hint`, `x-codex-parent-thread-id`, `x-codex-root-turn-id`,
//! `x-codex-window-id`) and body fields (`prompt_cache_options`, `client_metadata`,
//! `reasoning_summary_delivery`), and a header and a field no client sends yet, reach the simulator
//! exactly as sent, over HTTP JSON, SSE and a Responses WebSocket. The simulator's request log is the
//! judge.
#![allow(clippy::unwrap_used, reason = "tests")]

use crate::support;

use std::collections::BTreeMap;

use keymux_sim::SimConfig;
use serde_json::{json, Value};
use support::*;

/// The headers, each with a value no other test uses.
const HEADERS: [(&str, &str); 5] = [
    ("x-codex-routing-hint", "subagent"),
    ("x-codex-parent-thread-id", "019b0f6e-parent-thread"),
    ("x-codex-root-turn-id", "019b0f6e-root-turn"),
    ("x-codex-window-id", "window-7"),
    ("x-future-client-header", "some value, with; punctuation"),
];

/// A captured Codex body with the new fields, an unknown one, and `stream` as given.
fn body(stream: bool) -> Value {
    let mut body = captured_body("codex/http-turn1.json");
    body["stream"] = json!(stream);
    body["prompt_cache_options"] = json!({"retention": "in_memory", "scope": "thread"});
    body["client_metadata"] =
        json!({"x-codex-window-id": "window-7", "thread_source": "subagent", "nested": [1, {"a": null}]});
    body["reasoning_summary_delivery"] = json!("deferred");
    body["a_field_from_2027"] = json!({"keep": ["exactly", 1.5, true, null], "as": "it is"});
    body
}

/// Asserts the simulator's newest entry on `method` carries `sent` and every header of [`HEADERS`].
fn arrived(h: &Harness, method: &str, sent: &Value, what: &str) {
    let entry = h.sim.log().into_iter().rev().find(|e| e.method == method).expect("a request reached the simulator");
    let mut expected = sent.clone();
    if method == "WS" {
        expected["type"] = json!("response.create");
    }
    assert_eq!(entry.body.as_ref(), Some(&expected), "{what}: the body arrived as sent");
    let headers: BTreeMap<_, _> = entry.headers.into_iter().collect();
    for (name, value) in HEADERS {
        assert_eq!(headers.get(name).map(String::as_str), Some(value), "{what}: {name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codexs_new_headers_and_fields_and_unknown_ones_reach_the_upstream_unchanged() {
    let h = Harness::start(SimConfig::new().org("org-a", &["sk-a1"]), &[key("a1", "sk-a1")]).await;
    let c = client();
    let mut headers = captured_headers("codex/http-turn1.json");
    headers.extend(HEADERS.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));

    let json_body = body(false);
    let r = post(&c, &format!("{}/responses", h.base), &headers, &json_body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let _ = r.bytes().await;
    arrived(&h, "POST", &json_body, "HTTP JSON");

    let sse_body = body(true);
    let r = post(&c, &format!("{}/responses", h.base), &headers, &sse_body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(read_sse(r).await.iter().any(|e| e.data["type"] == "response.completed"));
    arrived(&h, "POST", &sse_body, "SSE");

    let mut socket = WsClient::connect_with(&h.base, "sess-passthrough", &HEADERS).await.unwrap();
    let mut ws_body = body(false);
    ws_body.as_object_mut().unwrap().remove("stream");
    let answer = socket.create(&ws_body).await;
    assert!(answer.response_id().is_some(), "{:?}", answer.error);
    arrived(&h, "WS", &ws_body, "WebSocket");
}
