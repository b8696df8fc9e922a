//! Responses over WebSocket through the gateway: one client socket bound to one upstream socket and key,
//! markers tagged and stripped per frame, organizations kept across reconnects and resumes.
#![allow(clippy::unwrap_used, clippy::print_stdout, reason = "tests print the figures they measure")]

use crate::support;

use std::collections::{BTreeMap, BTreeSet};

use futures::StreamExt as _;
use keymux_sim::{Fault, SimConfig};
use serde_json::{json, Value};
use support::*;

/// A Codex WebSocket session: the captured frame shapes (prewarm with `generate:false`, incremental input
/// with `previous_response_id`, a tool-call follow-up, a second turn on the same socket), then a resume on
/// a new socket that replays the whole history.
struct CodexWs {
    id: String,
    developer: Value,
    history: Vec<Value>,
}

impl CodexWs {
    fn new(n: usize) -> Self {
        let id = format!("01a227d7-ed08-7e52-9dfa-{n:012x}");
        let developer = json!({"type":"message","id":format!("msg_{id}-dev"),"role":"developer","content":[{"type":"input_text","text":"You are Codex. ".repeat(80)}]});
        Self { id, developer, history: Vec::new() }
    }

    fn frame(&self, input: Vec<Value>, previous: Option<&str>, generate: bool) -> Value {
        let mut body = json!({
            "model": "gpt-5.5", "stream": true, "input": input, "tools": [], "tool_choice": "auto",
            "parallel_tool_calls": true, "reasoning": {"effort": "medium"}, "store": false,
            "include": ["reasoning.encrypted_content"], "prompt_cache_key": self.id, "text": {"verbosity": "low"},
            "client_metadata": {"thread_id": self.id, "x-codex-ws-stream-request-start-ms": "1"},
        });
        if let Some(p) = previous {
            body["previous_response_id"] = json!(p);
        }
        if !generate {
            body["generate"] = json!(false);
        }
        body
    }

    fn user(&self, text: &str) -> Value {
        json!({"type":"message","id":format!("msg_{}-{}", self.id, self.history.len()),"role":"user","content":[{"type":"input_text","text":text}]})
    }

    fn keep(&mut self, answer: &WsAnswer) {
        for mut item in answer.output_items() {
            if item["type"] == "reasoning" {
                item["content"] = Value::Null;
            }
            self.history.push(item);
        }
    }

    /// Prewarm, turn 1, a tool follow-up and turn 2 on one socket.
    async fn first_connection(&mut self, base: &str) -> Result<(), String> {
        let mut ws = WsClient::connect(base, &self.id).await.map_err(|e| e.to_string())?;
        let prewarm = ws.create(&self.frame(vec![self.developer.clone()], None, false)).await;
        let mut previous = prewarm.response_id().ok_or_else(|| format!("prewarm: {:?}", prewarm.error))?;
        let user = self.user("Say hello. This is turn one.");
        self.history.push(user.clone());
        for step in 0..3 {
            let input = match step {
                0 => vec![user.clone()],
                1 => {
                    let out = json!({"type":"function_call_output","id":format!("fco_{}", self.id),"call_id":"call_1","output":"README.md"});
                    self.history.push(out.clone());
                    vec![out]
                }
                _ => {
                    let u = self.user("Now say goodbye. This is turn two.");
                    self.history.push(u.clone());
                    vec![u]
                }
            };
            let answer = ws.create(&self.frame(input, Some(&previous), true)).await;
            if let Some(err) = answer.error {
                return Err(format!("step {step}: {err}"));
            }
            self.keep(&answer);
            previous = answer.response_id().ok_or("no response.completed")?;
            if !previous.starts_with("resp_km1") {
                return Err(format!("the client saw an untagged response id: {previous}"));
            }
        }
        Ok(())
    }

    /// `codex exec resume`: a new socket, a prewarm, then the whole history after the prewarm's item.
    /// Codex reconnects on `previous_response_not_found`, so this retries like it does.
    async fn resume(&mut self, base: &str) -> Result<usize, String> {
        for attempt in 0..5 {
            let mut ws = WsClient::connect(base, &self.id).await.map_err(|e| e.to_string())?;
            let prewarm = ws.create(&self.frame(vec![self.developer.clone()], None, false)).await;
            let previous = prewarm.response_id().ok_or("prewarm failed")?;
            let mut input = self.history.clone();
            input.push(self.user("Resumed: one more thing."));
            let answer = ws.create(&self.frame(input, Some(&previous), true)).await;
            match answer.error {
                None if !answer.closed => return Ok(attempt),
                Some(err) if err["error"]["code"] == "previous_response_not_found" => continue,
                other => return Err(format!("resume: {other:?} closed={}", answer.closed)),
            }
        }
        Err("resume never succeeded".into())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_codex_websocket_sessions_stay_bound_and_keep_their_organization() {
    let h = Harness::start(three_orgs(), &five_keys()).await;
    let results: Vec<Result<usize, String>> = futures::stream::iter(0..50)
        .map(|n| {
            let base = h.base.clone();
            async move {
                let mut s = CodexWs::new(n);
                s.first_connection(&base).await?;
                s.resume(&base).await
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let failures: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(failures.is_empty(), "{} failed: {:?}", failures.len(), &failures[..failures.len().min(3)]);
    let reconnects: usize = results.iter().map(|r| *r.as_ref().unwrap()).sum();
    println!("50 websocket sessions: all succeeded; resumes needing a reconnect: {reconnects}");
    assert_eq!(reconnects, 0, "the prewarm of every resume found its organization");

    let log = h.sim.log();
    assert!(log.iter().all(|e| e.error_code.as_deref() != Some("invalid_encrypted_content")));
    // Frames never carried a marker upstream.
    let mut leaked = Vec::new();
    for e in &log {
        if let Some(body) = &e.body {
            marker_like_values(body, &mut leaked);
        }
    }
    assert!(leaked.is_empty(), "{leaked:?}");
    // One upstream socket per client socket: 50 first connections and 50 resumes, and nothing else.
    let upgrades = log.iter().filter(|e| e.status == 101).count();
    assert_eq!(upgrades, 100, "one upstream socket per client socket");
    // previous_response_id reached the upstream as its own id (connection-local state resolved, too:
    // every frame succeeded with store:false).
    assert!(log.iter().filter(|e| e.method == "WS").all(|e| !e
        .previous_response_id
        .as_deref()
        .unwrap_or("")
        .contains("km1")));
    // Every session's frames went to one organization.
    let mut keys_by_session: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for e in log.iter().filter(|e| e.method == "WS") {
        let session = e.body.as_ref().unwrap()["prompt_cache_key"].as_str().unwrap().to_owned();
        keys_by_session.entry(session).or_default().insert(e.key.clone().unwrap());
    }
    assert_eq!(keys_by_session.len(), 50);
    let orgs: BTreeSet<&str> = keys_by_session
        .values()
        .map(|keys| {
            let orgs: BTreeSet<&str> = keys.iter().map(|k| org_of(k)).collect();
            assert_eq!(orgs.len(), 1, "a session crossed organizations: {keys:?}");
            orgs.into_iter().next().unwrap()
        })
        .collect();
    assert_eq!(orgs.len(), 3, "sessions spread over the organizations");
    // The gateway reports the socket binding as continuity.
    let records = h.gateway.events().recent(1000);
    let ws_frames: Vec<_> = records.iter().filter(|r| r.routed.transport == keymux::events::Wire::WebSocket).collect();
    assert!(ws_frames.iter().any(|r| r.routed.decision.continuity_hit));
    assert!(ws_frames.iter().filter(|r| r.routed.decision.continuity_hit).all(|r| r
        .routed
        .decision
        .reasons
        .iter()
        .any(|x| matches!(x, keymux::router::Reason::WebSocketBound { .. }))));
}

#[tokio::test]
async fn frames_are_tagged_for_the_client_and_untagged_for_the_upstream() {
    let h = Harness::start(SimConfig::new().org("org-a", &["sk-a1"]), &[key("a1", "sk-a1")]).await;
    let mut s = CodexWs::new(1);
    s.first_connection(&h.base).await.unwrap();
    let reasoning: Vec<&Value> = s.history.iter().filter(|i| i["type"] == "reasoning").collect();
    assert_eq!(reasoning.len(), 3);
    for r in &reasoning {
        assert!(r["encrypted_content"].as_str().unwrap().starts_with("km1"), "client sees markers");
        assert!(r["id"].as_str().unwrap().starts_with("rs_km1"));
    }
    s.resume(&h.base).await.unwrap();
    // Every frame is reported like an HTTP request: in the event stream and in the metrics.
    let frames =
        h.gateway.events().recent(100).iter().filter(|r| r.routed.transport == keymux::events::Wire::WebSocket).count();
    assert_eq!(frames, 6, "prewarm and three frames, then a prewarm and a resend");
    let counted: u64 = h.gateway.metrics().rows(1, h.gateway.today()).iter().map(|r| r.counters.requests).sum();
    assert_eq!(counted, 6);
    let last = h.sim.log().into_iter().rfind(|e| e.method == "WS").unwrap();
    let sent = last.body.unwrap();
    let upstream_reasoning: Vec<&Value> =
        sent["input"].as_array().unwrap().iter().filter(|i| i["type"] == "reasoning").collect();
    assert_eq!(upstream_reasoning.len(), 3);
    for r in upstream_reasoning {
        assert!(r["encrypted_content"].as_str().unwrap().starts_with("gAAAAA"), "upstream sees its own value");
        assert!(!r["id"].as_str().unwrap().contains("km1"));
    }
}

#[tokio::test]
async fn a_lost_upstream_socket_gives_previous_response_not_found_and_a_full_resend_works() {
    let h = Harness::start(SimConfig::new().org("org-a", &["sk-a1"]), &[key("a1", "sk-a1")]).await;
    let mut s = CodexWs::new(2);
    let mut ws = WsClient::connect(&h.base, &s.id).await.unwrap();
    let prewarm = ws.create(&s.frame(vec![s.developer.clone()], None, false)).await;
    let user = s.user("hello");
    s.history.push(user.clone());
    let answer = ws.create(&s.frame(vec![user], prewarm.response_id().as_deref(), true)).await;
    s.keep(&answer);
    assert_eq!(h.sim.open_ws_connections(), 1);
    assert_eq!(h.sim.kill_ws_connections("sk-a1"), 1);
    // The next frame finds the state gone: the client gets OpenAI's lost-state error frame.
    let next = s.user("are you there?");
    let answer = ws.create(&s.frame(vec![next], answer.response_id().as_deref(), true)).await;
    let err = answer.error.expect("an error frame");
    assert_eq!(err["error"]["code"], "previous_response_not_found");
    assert_eq!(err["status"], 400);
    // Codex then reconnects and resends the full history.
    assert_eq!(s.resume(&h.base).await, Ok(0));
}

#[tokio::test]
async fn websocket_refusals_use_426_so_codex_falls_back_to_http() {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
    let h = Harness::start(SimConfig::new().org("org-a", &["sk-a1"]), &[key("a1", "sk-a1")]).await;
    let status_of = |path: &str| {
        let url = format!("{}{path}", h.base.replace("http://", "ws://"));
        async move {
            let mut request = url.into_client_request().unwrap();
            request.headers_mut().insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
            match tokio_tungstenite::connect_async(request).await {
                Err(tokio_tungstenite::tungstenite::Error::Http(response)) => response.status().as_u16(),
                Ok(_) => 101,
                Err(e) => panic!("{e}"),
            }
        }
    };
    assert_eq!(status_of("/realtime").await, 426, "only the Responses socket is relayed");
    assert_eq!(status_of("/responses").await, 101);
    // Every key cooling: no new socket.
    h.sim.inject("sk-a1", Fault::RateLimited { retry_after_secs: 30 });
    let r =
        post(&client(), &format!("{}/embeddings", h.base), &[], &json!({"model":"text-embedding-3-small","input":"x"}))
            .send()
            .await
            .unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(status_of("/responses").await, 426);
    // Without a token the upgrade is refused outright.
    let url = format!("{}/responses", h.base.replace("http://", "ws://"));
    match tokio_tungstenite::connect_async(url).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 401)
        }
        other => panic!("expected 401, got {:?}", other.map(|(_, r)| r.status())),
    }
}

#[tokio::test]
async fn a_prewarm_for_a_resumed_session_goes_to_its_organization() {
    // Over HTTP first (as `codex exec` without websockets), then resumed over WebSocket: the marker-free
    // prewarm of the new socket is routed by the session's hint, so no reconnect is needed.
    let h = Harness::start(three_orgs(), &five_keys()).await;
    let c = client();
    let mut http = Session::new(Shape::Codex, 77, true);
    for _ in 0..2 {
        assert_eq!(http.turn(&c, &h.base, false).await.status, 200);
    }
    let org = org_of(h.sim.log().last().unwrap().key.as_deref().unwrap());
    let mut ws = CodexWs::new(0);
    ws.id = http.id.clone();
    ws.history = http.history[1..].to_vec();
    assert_eq!(ws.resume(&h.base).await, Ok(0), "no reconnect needed");
    let frames: Vec<_> = h.sim.log().into_iter().filter(|e| e.method == "WS").collect();
    assert!(frames.iter().all(|e| org_of(e.key.as_deref().unwrap()) == org));
    let record = h
        .gateway
        .events()
        .recent(10)
        .into_iter()
        .find(|r| r.routed.transport == keymux::events::Wire::WebSocket && !r.routed.decision.continuity_hit)
        .unwrap();
    assert!(
        record.routed.decision.reasons.iter().any(|r| matches!(r, keymux::router::Reason::SessionHint { .. })),
        "{:?}",
        record.routed.decision.reasons
    );
}

#[tokio::test]
async fn a_socket_bound_to_the_wrong_organization_makes_the_client_reconnect_once() {
    // After a restart (or a stale hint) the prewarm may land on another organization. The first frame
    // with markers then proves where the session belongs: the client gets `previous_response_not_found`,
    // reconnects (as Codex does), and the new socket goes to the right organization.
    let h = Harness::start(three_orgs(), &five_keys()).await;
    let c = client();
    let mut http = Session::new(Shape::Codex, 78, true);
    for _ in 0..2 {
        assert_eq!(http.turn(&c, &h.base, false).await.status, 200);
    }
    let served = h.sim.log().last().unwrap().key.clone().unwrap();
    let wrong = if org_of(&served) == "org-c" { "k_a1" } else { "k_c1" };
    let digest = h.gateway.markers().digest().session("responses", &http.id);
    h.gateway.hints().insert(digest, keymux::keys::KeyId::new(wrong), h.gateway.clock().now());
    let mut ws = CodexWs::new(0);
    ws.id = http.id.clone();
    ws.history = http.history[1..].to_vec();
    assert_eq!(ws.resume(&h.base).await, Ok(1), "exactly one reconnect");
    let last = h.sim.log().into_iter().rfind(|e| e.method == "WS").unwrap();
    assert_eq!(org_of(last.key.as_deref().unwrap()), org_of(&served));
}

/// A binary frame would pass every per-frame check unread (markers, pool, budget, the turn's record):
/// on a bound socket it is refused with an error frame and never reaches the provider.
#[tokio::test]
async fn a_binary_frame_from_the_client_is_refused_and_never_reaches_the_provider() {
    let h = Harness::start(SimConfig::new().org("org-a", &["sk-a1"]), &[key("a1", "sk-a1")]).await;
    let s = CodexWs::new(3);
    let mut ws = WsClient::connect(&h.base, &s.id).await.unwrap();
    let prewarm = ws.create(&s.frame(vec![s.developer.clone()], None, false)).await;
    let previous = prewarm.response_id().expect("the prewarm is answered");
    let answer = ws.create_binary(&s.frame(vec![s.user("hello")], Some(&previous), true)).await;
    let error = answer.error.expect("an error frame for the binary frame");
    assert_eq!(error["error"]["code"], "invalid_request", "{error}");
    assert!(error["error"]["message"].as_str().unwrap().contains("text frame"), "{error}");
    assert!(answer.events.is_empty(), "no events answered the binary frame: {:?}", answer.events);
    let frames = h.sim.log().into_iter().filter(|e| e.method == "WS").count();
    assert_eq!(frames, 1, "only the prewarm reached the provider");
}

/// A provider that answers with binary frames (here quoting the key) would have them passed on
/// unmasked and untagged: Keymux passes none on, tells the client, closes, and records why.
#[tokio::test]
async fn a_binary_frame_from_the_provider_is_not_passed_on() {
    let h = Harness::start(SimConfig::new().org("org-a", &["sk-a1"]), &[key("a1", "sk-a1")]).await;
    let s = CodexWs::new(4);
    let mut ws = WsClient::connect(&h.base, &s.id).await.unwrap();
    h.sim.inject("sk-a1", Fault::BinaryFrames);
    let answer = ws.create(&s.frame(vec![s.user("hello")], None, true)).await;
    assert!(answer.binary.is_empty(), "binary frames reached the client: {:?}", answer.binary);
    let error = answer.error.expect("an error frame");
    assert_eq!(error["error"]["code"], "upstream_binary_frame", "{error}");
    assert!(!error.to_string().contains("sk-a1"));
    let next = tokio::time::timeout(std::time::Duration::from_secs(20), ws.socket.next()).await.expect("a close");
    assert!(
        matches!(next, None | Some(Ok(tokio_tungstenite::tungstenite::Message::Close(_))) | Some(Err(_))),
        "the socket closes after the notice: {next:?}"
    );
    let record =
        h.gateway.events().recent(10).into_iter().find(|r| r.routed.transport == keymux::events::Wire::WebSocket);
    assert_eq!(record.expect("the turn is recorded").error, Some("upstream_binary_frame"));
}
