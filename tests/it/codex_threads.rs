//! Codex's threads: every request names its thread (`thread-id`) and the session it belongs to
//! (`session-id`, the root thread's id); a subagent thread has its own thread id under its session's,
//! and may share the session's `prompt_cache_key`. Each thread is a session of its own to Keymux (its
//! affinity, its hints, its row), shown under the session it belongs to. Over a WebSocket the ids are
//! read from each `response.create`'s `client_metadata`, not fixed at the handshake.
#![allow(clippy::unwrap_used, reason = "tests")]

use crate::support;

use serde_json::{json, Value};
use support::*;

const ROOT: &str = "01a227d7-ed08-7e52-9dfa-0ea02ef63150";
const SUBAGENT: &str = "01a227d8-1111-7e52-9dfa-0ea02ef6aaaa";

/// A Codex-shaped body of thread `thread` in session `ROOT`, with the session's `prompt_cache_key`.
fn body(thread: &str, text: &str) -> Value {
    json!({"model": "gpt-5.5", "stream": true, "store": false, "prompt_cache_key": ROOT,
           "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}],
           "client_metadata": {"thread_id": thread, "session_id": ROOT, "turn_id": format!("turn-{text}")}})
}

/// The recent sessions, once `n` are shown.
async fn sessions(root: &str, n: usize) -> Vec<Value> {
    let admin = Admin::new(root);
    let read = || async { admin.get_json("/sessions").await["sessions"].as_array().unwrap().clone() };
    until(&format!("{n} sessions"), read, |s| s.len() >= n).await
}

/// The digest the dashboard names each finished request's session by, in order.
async fn recorded_sessions(root: &str) -> Vec<(String, Option<String>)> {
    let decisions = decisions_api(root).await;
    decisions["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["session"].as_str().unwrap().to_owned(), r["parent_session"].as_str().map(str::to_owned)))
        .collect()
}

/// The root thread, and a subagent thread under it.
fn assert_subagent_under_root(shown: &[Value], recorded: &[(String, Option<String>)]) {
    let [(root, None), (thread, Some(parent))] = recorded else {
        panic!("two turns, a root and a thread: {recorded:?}")
    };
    assert_ne!(root, thread, "the subagent thread is a session of its own, though it shares the cache key");
    assert_eq!(parent, root, "the subagent thread belongs to the root session");
    let row =
        |name: &str| shown.iter().find(|s| s["session"] == name).unwrap_or_else(|| panic!("{name} shown: {shown:?}"));
    assert_eq!(row(root)["parent"], Value::Null);
    assert_eq!(row(thread)["parent"].as_str(), Some(root.as_str()), "shown under its session: {shown:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subagent_thread_shows_under_its_session_over_http() {
    let h = Harness::start(three_orgs(), &five_keys()).await;
    let client = client();
    for (thread, text) in [(ROOT, "root turn"), (SUBAGENT, "subagent turn")] {
        // As Codex 0.171 sends them: the ids in headers and in client_metadata alike.
        let headers = [
            ("session-id".to_owned(), ROOT.to_owned()),
            ("thread-id".to_owned(), thread.to_owned()),
            ("originator".to_owned(), "codex_exec".to_owned()),
        ];
        let response =
            post(&client, &format!("{}/responses", h.base), &headers, &body(thread, text)).send().await.unwrap();
        assert_eq!(response.status(), 200);
        let _ = response.bytes().await;
    }
    let shown = sessions(&h.root, 2).await;
    assert_subagent_under_root(&shown, &recorded_sessions(&h.root).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_websocket_turn_says_its_own_thread() {
    let h = Harness::start(three_orgs(), &five_keys()).await;
    // The handshake names the root thread; the socket's second turn is a subagent's, which only its
    // frame's client_metadata says.
    let mut ws = WsClient::connect(&h.base, ROOT).await.unwrap();
    for (thread, text) in [(ROOT, "root turn"), (SUBAGENT, "subagent turn")] {
        let answer = ws.create(&body(thread, text)).await;
        assert!(answer.error.is_none() && !answer.closed, "{thread}: {:?}", answer.error);
    }
    let shown = sessions(&h.root, 2).await;
    assert_subagent_under_root(&shown, &recorded_sessions(&h.root).await);
}
