//! Codex's remote compaction (the built-in `openai` provider pointed at Keymux): before sampling, a
//! `response.create` whose last input item is `{"type":"compaction_trigger"}` gets exactly one
//! organization-bound `compaction` item, and every later request replays it. Sessions here compact on
//! every turn, over HTTP and over WebSocket (a new socket per turn, as `codex exec resume` opens one),
//! across three organizations, with many sessions at once so balancing would like to move them.
#![allow(clippy::unwrap_used, clippy::disallowed_methods, reason = "tests")]

use crate::support;

use std::collections::BTreeSet;

use serde_json::{json, Value};
use support::*;

const SESSIONS: usize = 9;
const TURNS: usize = 4;

/// Codex's `x-codex-turn-metadata` for a compaction request.
fn compaction_metadata(session: &str) -> String {
    json!({"session_id": session, "thread_id": session, "request_kind": "compaction",
           "compaction": {"implementation": "responses_compaction_v2", "phase": "pre_turn"}})
    .to_string()
}

/// After compacting, Codex keeps its instructions, the one compaction item and the newest user message.
fn compacted(session: &mut Session, item: Value) {
    let developer = session.history[0].clone();
    let newest_user = session.history.iter().rev().find(|i| i["role"] == "user").cloned().unwrap();
    session.history = vec![developer, item, newest_user];
}

/// The single compaction item of an answer's output, checked to be the only item.
fn the_compaction_item(output: &[Value], what: &str) -> Value {
    assert_eq!(output.len(), 1, "{what}: exactly one output item, got {output:?}");
    assert_eq!(output[0]["type"], "compaction", "{what}");
    assert!(output[0]["encrypted_content"].as_str().is_some_and(|s| !s.is_empty()), "{what}");
    output[0].clone()
}

async fn http_turn(client: &reqwest::Client, base: &str, session: &mut Session) {
    let mut body = session.next_body(false);
    let what = format!("{} turn {}", session.id, session.turn);
    body["input"].as_array_mut().unwrap().push(json!({"type": "compaction_trigger"}));
    body["stream"] = false.into();
    let headers = [
        ("session-id".to_owned(), session.id.clone()),
        ("x-codex-turn-metadata".to_owned(), compaction_metadata(&session.id)),
    ];
    let response = post(client, &format!("{base}/responses"), &headers, &body).send().await.unwrap();
    let status = response.status().as_u16();
    let answer: Value = response.json().await.unwrap();
    assert_eq!(status, 200, "{what} compaction: {answer}");
    let item = the_compaction_item(answer["output"].as_array().unwrap(), &what);
    compacted(session, item);
    // The sampling request that follows replays the compaction item.
    session.turn -= 1;
    let sampled = session.turn(client, base, false).await;
    assert_eq!(sampled.status, 200, "{what} sampling: {}", sampled.body);
}

async fn ws_turn(base: &str, session: &mut Session) {
    let mut socket = WsClient::connect(base, &session.id).await.unwrap();
    let mut body = session.next_body(false);
    let what = format!("{} turn {} (websocket)", session.id, session.turn);
    body["input"].as_array_mut().unwrap().push(json!({"type": "compaction_trigger"}));
    let answer = socket.create(&body).await;
    assert!(answer.error.is_none(), "{what} compaction: {:?}", answer.error);
    let item = the_compaction_item(&answer.output_items(), &what);
    compacted(session, item);
    session.turn -= 1;
    let body = session.next_body(false);
    let answer = socket.create(&body).await;
    assert!(answer.error.is_none(), "{what} sampling: {:?}", answer.error);
    assert!(answer.response_id().is_some(), "{what}");
    session.absorb(answer.output_items());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_that_compact_every_turn_stay_with_their_organization_over_http_and_websocket() {
    let h = Harness::start(three_orgs(), &five_keys()).await;
    let client = client();
    let mut runs = Vec::new();
    for n in 0..SESSIONS {
        let (client, base) = (client.clone(), h.base.clone());
        runs.push(tokio::spawn(async move {
            let mut session = Session::new(Shape::Codex, 900 + n, true);
            for turn in 0..TURNS {
                // Alternate transports within one session, as a user who switches Codex's setting does.
                if (n + turn) % 2 == 0 {
                    http_turn(&client, &base, &mut session).await;
                } else {
                    ws_turn(&base, &mut session).await;
                }
            }
            session
        }));
    }
    for run in runs {
        let session = run.await.unwrap();
        assert!(session.history.iter().any(|i| i["type"] == "compaction"));
    }
    // The sessions were spread over the organizations, and none was answered by the wrong one.
    let counts = client_counts(&h.sim);
    let orgs: BTreeSet<&str> = counts.keys().map(|k| org_of(k)).collect();
    assert!(orgs.len() >= 2, "balancing spread the sessions: {counts:?}");
    let log = h.sim.log();
    assert!(!log.is_empty());
    let refused: Vec<_> = log.iter().filter(|r| r.status == 400).collect();
    assert!(refused.is_empty(), "no request reached a key of the wrong organization: {refused:?}");
}
