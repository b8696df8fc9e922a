//! Codex's Responses-Lite header (`x-openai-internal-codex-responses-lite: true`) belongs to the
//! connection it comes on: over HTTP, Lite requests reach the provider on connections of their own,
//! never on one a standard request used; over a WebSocket, a turn whose own `client_metadata` says
//! Lite on a socket whose handshake did not (or the other way round) is not sent on it, and the client
//! is asked to reconnect.
#![allow(clippy::unwrap_used, reason = "tests")]

use crate::support;

use std::collections::BTreeSet;

use keymux_sim::SimConfig;
use serde_json::{json, Value};
use support::*;

const LITE: &str = "x-openai-internal-codex-responses-lite";

fn body(n: usize) -> Value {
    json!({"model": "gpt-5.5", "stream": true, "store": false, "input": format!("turn {n}")})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lite_requests_never_share_a_provider_connection_with_standard_ones() {
    let h = Harness::start(SimConfig::new().org("org-a", &["sk-a1"]), &[key("a1", "sk-a1")]).await;
    let client = client();
    // Alternating, one at a time: a single pool would reuse its one idle connection for every request.
    for n in 0..6 {
        let headers = if n % 2 == 0 { vec![(LITE.to_owned(), "true".to_owned())] } else { vec![] };
        let response = post(&client, &format!("{}/responses", h.base), &headers, &body(n)).send().await.unwrap();
        assert_eq!(response.status(), 200);
        let _ = response.bytes().await;
    }
    let log: Vec<_> = h.sim.log().into_iter().filter(|e| e.path == "/v1/responses").collect();
    assert_eq!(log.len(), 6);
    let is_lite = |e: &keymux_sim::LogEntry| e.headers.iter().any(|(k, v)| k == LITE && v == "true");
    let peers =
        |lite: bool| -> BTreeSet<_> { log.iter().filter(|e| is_lite(e) == lite).map(|e| e.peer.unwrap()).collect() };
    let (lite, standard) = (peers(true), peers(false));
    assert_eq!(log.iter().filter(|e| is_lite(e)).count(), 3, "the header reaches the provider");
    assert!(lite.is_disjoint(&standard), "Lite on {lite:?}, standard on {standard:?}");
}

/// A turn whose `client_metadata` says whether it is Lite, as Codex sends it over a WebSocket (the key
/// is there only for a Lite turn).
fn turn(lite: bool, n: usize) -> Value {
    let mut b = body(n);
    b.as_object_mut().unwrap().remove("stream");
    b["client_metadata"] = json!({"turn_id": format!("turn-{n}")});
    if lite {
        b["client_metadata"]["ws_request_header_x_openai_internal_codex_responses_lite"] = json!("true");
    }
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_turn_goes_only_on_a_socket_of_its_kind() {
    let h = Harness::start(SimConfig::new().org("org-a", &["sk-a1"]), &[key("a1", "sk-a1")]).await;
    // A standard socket: a standard turn is served, a Lite one is not sent and the client reconnects.
    let mut standard = WsClient::connect(&h.base, "s-standard").await.unwrap();
    assert!(standard.create(&turn(false, 1)).await.error.is_none());
    let refused = standard.create(&turn(true, 2)).await;
    let error = refused.error.expect("the Lite turn is refused on a standard socket");
    assert_eq!(error["error"]["code"], "previous_response_not_found", "{error}");
    // A Lite socket (its handshake says so): a Lite turn is served, a standard one is not sent.
    let mut lite = WsClient::connect_with(&h.base, "s-lite", &[(LITE, "true")]).await.unwrap();
    assert!(lite.create(&turn(true, 3)).await.error.is_none());
    assert!(lite.create(&turn(false, 4)).await.error.is_some(), "a standard turn is refused on a Lite socket");
    let frames: Vec<String> = h
        .sim
        .log()
        .iter()
        .filter(|e| e.method == "WS")
        .map(|e| e.body.as_ref().unwrap()["input"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(frames, ["turn 1", "turn 3"], "only the turns of the socket's kind reached the provider");
    let refused: Vec<Value> = decisions_api(&h.root).await["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["error"] == "responses_lite_mismatch")
        .cloned()
        .collect();
    assert_eq!(refused.len(), 2, "each refused turn is recorded as what it is");
}
