//! Responses over WebSocket: prewarm and incremental input, connection-local state, error
//! frames, faults, the connection age limit and abrupt kills.

mod common;

use std::time::Duration;

use anyhow::{bail, Context};
use common::*;
use futures::{SinkExt, StreamExt};
use keymux_sim::{Fault, Limits, Sim, Transport};
use serde_json::{json, Value};
use tokio_tungstenite::connect_async;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message;

#[tokio::test]
async fn prewarm_then_incremental_input_over_one_connection() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs()).await?;
    let mut ws = connect_key(&sim, "sk-a1").await?;
    assert_eq!(sim.open_ws_connections(), 1);
    let prompt = big_prompt(21_600);

    let mut prewarm = codex_body(vec![developer(&prompt)]);
    prewarm["generate"] = json!(false);
    let frames = exchange(&mut ws, &prewarm).await?;
    let kinds: Vec<&str> = frames.iter().filter_map(|f| f["type"].as_str()).collect();
    assert_eq!(kinds, ["response.created", "response.completed"]);
    let warm = last_response(&frames);
    assert_eq!(warm["output"], json!([]));
    assert_eq!(warm["usage"]["output_tokens"], 0);
    let warm_tokens = warm["usage"]["input_tokens"].as_u64().unwrap_or(0);
    let warm_id = warm["id"].as_str().unwrap_or_default().to_owned();

    let mut turn = codex_body(vec![user("<environment_context/>"), user("Say hello. This is turn one.")]);
    turn["previous_response_id"] = json!(warm_id);
    let frames = exchange(&mut ws, &turn).await?;
    assert_eq!(frames.len(), 14, "{frames:?}");
    for (i, f) in frames.iter().enumerate() {
        assert_eq!(f["sequence_number"], json!(i));
    }
    let r1 = last_response(&frames);
    assert_eq!(r1["status"], "completed");
    assert_eq!(r1["previous_response_id"], json!(warm_id));
    let cached = r1["usage"]["input_tokens_details"]["cached_tokens"].as_u64().unwrap_or(0);
    assert!(cached >= warm_tokens / 128 * 128, "{cached} vs {warm_tokens}");
    assert!(r1["usage"]["input_tokens"].as_u64().unwrap_or(0) > warm_tokens);

    // Turn 2 on the same connection: only the new item, chained to turn 1 (store:false).
    let mut turn2 = codex_body(vec![json!({"type": "function_call_output", "call_id": "call_1", "output": "ok"})]);
    turn2["previous_response_id"] = r1["id"].clone();
    let r2 = last_response(&exchange(&mut ws, &turn2).await?);
    assert_eq!(r2["status"], "completed");

    // The prewarm is no longer the connection's last response and was never stored.
    let mut stale = codex_body(vec![user("again")]);
    stale["previous_response_id"] = json!(warm_id);
    let frames = exchange(&mut ws, &stale).await?;
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0]["type"], "error");

    // HTTP does not see connection-local responses.
    let mut http = turn2.clone();
    http["previous_response_id"] = r2["id"].clone();
    http["stream"] = json!(false);
    let r = post(&sim, "sk-a1", "/responses", &http).await?;
    assert_eq!(r.body["error"]["code"], "previous_response_not_found");

    let ws_entries: Vec<_> = sim.log().into_iter().filter(|e| e.transport == Transport::WebSocket).collect();
    assert_eq!(ws_entries.len(), 4);
    assert!(ws_entries.iter().all(|e| e.key.as_deref() == Some("sk-a1") && e.method == "WS"));
    assert_eq!(ws_entries[1].previous_response_id.as_deref(), Some(warm_id.as_str()));
    assert_eq!(ws_entries[1].body.as_ref().map(|b| b["type"].clone()), Some(json!("response.create")));
    assert_eq!(ws_entries[3].status, 400);
    ws.close(None).await?;
    Ok(())
}

#[tokio::test]
async fn unknown_previous_response_gives_an_error_frame() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs()).await?;
    // A stored response of org-a resolves on a connection of org-a only.
    let stored =
        post(&sim, "sk-a2", "/responses", &json!({"model": "gpt-5.5", "input": "store me", "store": true})).await?;
    let stored_id = stored.body["id"].as_str().unwrap_or_default().to_owned();

    let mut ws = connect_key(&sim, "sk-a1").await?;
    let mut body = codex_body(vec![user("hello")]);
    body["previous_response_id"] = json!("resp_missing");
    let frames = exchange(&mut ws, &body).await?;
    assert_eq!(
        frames,
        vec![json!({"type": "error", "status": 400, "error": {
            "type": "invalid_request_error",
            "code": "previous_response_not_found",
            "message": "Previous response with id 'resp_missing' not found.",
            "param": "previous_response_id",
        }})]
    );
    // The connection stays usable.
    body["previous_response_id"] = json!(stored_id);
    let r = last_response(&exchange(&mut ws, &body).await?);
    assert_eq!(r["status"], "completed");

    let mut other = connect_key(&sim, "sk-b1").await?;
    let frames = exchange(&mut other, &body).await?;
    assert_eq!(frames[0]["error"]["code"], "previous_response_not_found");
    Ok(())
}

#[tokio::test]
async fn encrypted_content_is_validated_over_websocket() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs()).await?;
    let mut a = connect_key(&sim, "sk-a1").await?;
    let frames = exchange(&mut a, &codex_body(vec![user("turn one")])).await?;
    let items: Vec<Value> =
        frames.iter().filter(|f| f["type"] == "response.output_item.done").map(|f| f["item"].clone()).collect();
    let mut input = vec![user("turn one")];
    input.extend(items.iter().map(codex_replay));
    input.push(user("turn two"));

    let mut b = connect_key(&sim, "sk-b1").await?;
    let frames = exchange(&mut b, &codex_body(input.clone())).await?;
    assert_eq!(frames[0]["type"], "error");
    assert_eq!(frames[0]["status"], 400);
    assert_eq!(frames[0]["error"]["code"], "invalid_encrypted_content");
    let rs_id = items[0]["id"].as_str().unwrap_or_default();
    assert!(frames[0]["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains(rs_id) && m.contains("organization_id did not match")));

    let mut a2 = connect_key(&sim, "sk-a2").await?;
    let r = last_response(&exchange(&mut a2, &codex_body(input)).await?);
    assert_eq!(r["status"], "completed");
    Ok(())
}

#[tokio::test]
async fn kill_drops_the_socket_without_a_close_frame() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs()).await?;
    let mut a = connect_key(&sim, "sk-a1").await?;
    let mut a_again = connect_key(&sim, "sk-a1").await?;
    let mut b = connect_key(&sim, "sk-b1").await?;
    exchange(&mut a, &codex_body(vec![user("hi")])).await?;
    assert_eq!(sim.open_ws_connections(), 3);
    assert_eq!(sim.kill_ws_connections("sk-a1"), 2);
    for ws in [&mut a, &mut a_again] {
        let next = tokio::time::timeout(Duration::from_secs(5), ws.next()).await?;
        match next {
            None | Some(Err(_)) => {}
            Some(Ok(msg)) => bail!("expected an abrupt end, got {msg:?}"),
        }
    }
    assert!(eventually(|| sim.open_ws_connections() == 1).await);
    assert_eq!(sim.kill_ws_connections("sk-a1"), 0);
    let r = last_response(&exchange(&mut b, &codex_body(vec![user("still here")])).await?);
    assert_eq!(r["status"], "completed");
    Ok(())
}

#[tokio::test]
async fn upgrade_requires_a_valid_key() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs()).await?;
    let mut req = ws_url(&sim).into_client_request()?;
    req.headers_mut().insert("authorization", HeaderValue::from_static("Bearer sk-nope-nope"));
    match connect_async(req).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
            assert_eq!(resp.status(), 401);
            let body: Value = serde_json::from_slice(resp.body().as_deref().unwrap_or(b"{}"))?;
            assert_eq!(body["error"]["code"], "invalid_api_key");
        }
        other => bail!("expected a 401, got {other:?}"),
    }
    let upgrade = sim.log().last().map(|e| (e.status, e.key.clone()));
    assert_eq!(upgrade, Some((401, None)));
    Ok(())
}

#[tokio::test]
#[expect(clippy::disallowed_methods, reason = "slow deltas are slow in real time")]
async fn faults_and_rate_limits_become_error_frames() -> anyhow::Result<()> {
    let limits = Limits { requests: 3, tokens: 1_000_000, window: Duration::from_secs(30) };
    let sim = Sim::start(two_orgs().limits(limits)).await?;
    let mut ws = connect_key(&sim, "sk-a1").await?;
    let body = codex_body(vec![user("hi")]);

    sim.inject("sk-a1", Fault::Status500);
    let frames = exchange(&mut ws, &body).await?;
    assert_eq!(frames[0]["status"], 500);
    assert_eq!(frames[0]["error"]["type"], "server_error");

    sim.inject("sk-a1", Fault::RateLimited { retry_after_secs: 2 });
    let frames = exchange(&mut ws, &body).await?;
    assert_eq!(frames[0]["status"], 429);
    assert_eq!(frames[0]["headers"]["retry-after"], "2");

    sim.inject("sk-a1", Fault::SlowDeltas(Duration::from_millis(60)));
    let t = std::time::Instant::now();
    let frames = exchange(&mut ws, &body).await?;
    assert_eq!(frames.len(), 14);
    assert!(t.elapsed() >= Duration::from_millis(60 * 13));

    // Real limits: three requests per window.
    exchange(&mut ws, &body).await?;
    exchange(&mut ws, &body).await?;
    let frames = exchange(&mut ws, &body).await?;
    assert_eq!(frames[0]["type"], "error");
    assert_eq!(frames[0]["status"], 429);
    assert_eq!(frames[0]["error"]["code"], "rate_limit_exceeded");
    let retry: u64 = frames[0]["headers"]["retry-after"].as_str().unwrap_or("").parse()?;
    assert!((1..=30).contains(&retry));
    assert_eq!(frames[0]["headers"]["x-ratelimit-remaining-requests"], "0");

    // A cut drops the connection mid-stream.
    let mut other = connect_key(&sim, "sk-a2").await?;
    sim.inject("sk-a2", Fault::CutAfterEvents(2));
    let mut frame = body.clone();
    frame["type"] = json!("response.create");
    other.send(Message::text(frame.to_string())).await?;
    assert_eq!(next_json(&mut other).await?["type"], "response.created");
    assert_eq!(next_json(&mut other).await?["type"], "response.in_progress");
    assert!(next_json(&mut other).await.is_err());
    Ok(())
}

#[tokio::test]
async fn connection_limit_ends_the_connection() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs().ws_connection_limit(Duration::from_secs(3600))).await?;
    let mut ws = connect_key(&sim, "sk-a1").await?;
    let r = last_response(&exchange(&mut ws, &codex_body(vec![user("young")])).await?);
    assert_eq!(r["status"], "completed");
    // The age limit follows the simulator's clock.
    sim.advance(Duration::from_secs(3590));
    let r = last_response(&exchange(&mut ws, &codex_body(vec![user("old")])).await?);
    assert_eq!(r["status"], "completed");
    sim.advance(Duration::from_secs(10));
    let frame = next_json(&mut ws).await?;
    assert_eq!(frame["type"], "error");
    assert_eq!(frame["status"], 400);
    assert_eq!(frame["error"]["code"], "websocket_connection_limit_reached");
    let next = tokio::time::timeout(Duration::from_secs(5), ws.next()).await?;
    assert!(matches!(next, Some(Ok(Message::Close(_))) | None), "{next:?}");
    assert!(eventually(|| sim.open_ws_connections() == 0).await);
    Ok(())
}

#[tokio::test]
async fn pings_are_answered() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs()).await?;
    let mut ws = connect_key(&sim, "sk-a1").await?;
    ws.send(Message::Ping(b"are you there".to_vec().into())).await?;
    let msg = tokio::time::timeout(Duration::from_secs(5), ws.next()).await?.context("ended")??;
    assert_eq!(msg, Message::Pong(b"are you there".to_vec().into()));
    Ok(())
}

#[tokio::test]
async fn azure_keys_upgrade_with_the_api_key_header() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs().azure_org("org-c", &["azkey1"])).await?;
    let mut ws = connect(&sim, "api-key", "azkey1").await?;
    let r = last_response(&exchange(&mut ws, &codex_body(vec![user("azure")])).await?);
    assert!(r["output"][1]["content"][0]["text"].as_str().is_some_and(|t| t.contains("from org-c")));
    Ok(())
}
