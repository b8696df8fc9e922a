//! Silent drops are affinity failures, seen and counted. Newer OpenAI models answer a replay of
//! another organization's reasoning with a 200 that reports the items it dropped
//! (`input_transformations`, reason `organization_mismatch`) instead of a 400. With the simulator in
//! that mode, a session begun on org-a before Keymux (its reasoning unmarked) whose first turn through
//! Keymux reaches org-b (org-a's key is in the second tier, so org-b is tried first) shows
//! `reasoning_dropped` on its decision, is counted on the key, and its next turn goes back to org-a,
//! where its reasoning lives: over JSON, SSE and WebSocket.
#![allow(clippy::unwrap_used, reason = "tests")]

use crate::support;

use keymux_sim::{ForeignReasoning, SimConfig};
use serde_json::Value;
use support::*;

/// org-a, where the session began, and org-b, which Keymux tries first; the simulator drops.
async fn dropping() -> Harness {
    let sim = SimConfig::new().org("org-a", &["sk-a1"]).org("org-b", &["sk-b1"]);
    let keys = [key("a1", "sk-a1").priority(1), key("b1", "sk-b1")];
    Harness::start(sim.foreign_reasoning(ForeignReasoning::Drop), &keys).await
}

/// A session begun directly on org-a (two turns whose reasoning only org-a can read), then talking to
/// Keymux.
async fn begun_on_org_a(h: &Harness, n: usize, stream: bool) -> Session {
    let mut s = Session::new(Shape::Codex, n, stream);
    s.token = "sk-a1".to_owned();
    for _ in 0..2 {
        let r = s.turn(&client(), &h.sim.base_url(), false).await;
        assert_eq!(r.status, 200, "the direct turn: {}", r.body);
    }
    s.token = TOKEN.to_owned();
    s
}

/// The records of Keymux's requests, oldest first.
async fn records(h: &Harness) -> Vec<Value> {
    let mut records = decisions_api(&h.root).await["data"].as_array().unwrap().clone();
    records.sort_by_key(|r| r["decision"]["seq"].as_u64());
    records
}

/// The turn that reached org-b: served, and its decision says the provider dropped the session's
/// reasoning, for the organization.
fn assert_dropped_on_org_b(record: &Value) {
    assert_eq!(record["served_by"], "k_b1", "org-b was tried first: {record}");
    assert_eq!(record["status"], 200, "{record}");
    let dropped = &record["decision"]["reasoning_dropped"];
    assert_eq!(dropped["reasons"], serde_json::json!(["organization_mismatch"]), "{record}");
    assert_eq!(dropped["count"], 2, "both turns' reasoning items: {record}");
}

/// The turn after: back on org-a, where nothing is dropped.
fn assert_back_on_org_a(record: &Value) {
    assert_eq!(record["served_by"], "k_a1", "the session's organization, learned again: {record}");
    assert_eq!(record["status"], 200, "{record}");
    assert!(record["decision"]["reasoning_dropped"].is_null(), "nothing dropped where it lives: {record}");
}

async fn http_turns_go_back_where_the_reasoning_lives(stream: bool) {
    let h = dropping().await;
    let mut s = begun_on_org_a(&h, if stream { 2 } else { 1 }, stream).await;
    for turn in 0..3 {
        let r = s.turn(&client(), &h.base, false).await;
        assert_eq!(r.status, 200, "turn {turn}: {}", r.body);
    }
    let records = records(&h).await;
    assert_eq!(records.len(), 3, "{records:?}");
    assert_dropped_on_org_b(&records[0]);
    assert_back_on_org_a(&records[1]);
    // org-b's one answer is dropped by Keymux (the session was moved off org-b), not replayed there.
    assert!(!records[1]["decision"]["rescued_orgs"].as_array().unwrap().is_empty(), "{}", records[1]);
    assert_back_on_org_a(&records[2]);
    assert_eq!(records[2]["decision"]["route"], "pinned", "marked by org-a's answer: {}", records[2]);
    let status = h.status();
    let count = |label: &str| status.iter().find(|k| k.label == label).unwrap().reasoning_dropped;
    assert_eq!((count("b1"), count("a1")), (1, 0), "counted on the key that served the lost turn");
    let dropped_upstream = h.sim.log().iter().filter(|e| e.key.as_deref() == Some("sk-a1")).count();
    assert!(dropped_upstream >= 4, "org-a served the direct turns and the two after");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_turn_that_lost_its_reasoning_is_seen_and_the_next_goes_back() {
    http_turns_go_back_where_the_reasoning_lives(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sse_turn_that_lost_its_reasoning_is_seen_and_the_next_goes_back() {
    http_turns_go_back_where_the_reasoning_lives(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_turn_that_lost_its_reasoning_is_seen_and_the_next_socket_goes_back() {
    let h = dropping().await;
    let mut s = begun_on_org_a(&h, 3, true).await;
    let mut ws = WsClient::connect(&h.base, &s.id).await.unwrap();
    let answer = ws.create(&s.next_body(false)).await;
    assert!(answer.error.is_none() && !answer.closed, "served on org-b: {:?}", answer.error);
    s.absorb(answer.output_items());
    // The socket is bound to org-b, where the session's reasoning is not: the next frame is not sent
    // there; the client is asked to reconnect (as Codex does on this error, resending all).
    let body = s.next_body(false);
    let answer = ws.create(&body).await;
    let error = answer.error.expect("not sent to org-b again");
    assert_eq!(error["error"]["code"], "previous_response_not_found", "{error}");
    let mut again = WsClient::connect(&h.base, &s.id).await.unwrap();
    let answer = again.create(&body).await;
    assert!(answer.error.is_none() && !answer.closed, "the new socket: {:?}", answer.error);
    let records = records(&h).await;
    assert_eq!(records.len(), 3, "{records:?}");
    assert_eq!(records[0]["transport"], "web_socket");
    assert_dropped_on_org_b(&records[0]);
    assert_eq!(records[1]["error"], "reconnect_to_find_org", "{}", records[1]);
    assert_back_on_org_a(&records[2]);
}
