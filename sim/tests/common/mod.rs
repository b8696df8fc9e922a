//! Helpers shared by the simulator's integration tests.

#![allow(dead_code, reason = "each test binary uses a different subset")]
#![expect(clippy::disallowed_methods, reason = "clients see real time: event arrival and polling bounds")]

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use futures::{SinkExt, StreamExt};
use keymux_sim::{Sim, SimConfig};
use reqwest::header::HeaderMap;
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{connect_async, MaybeTlsStream, WebSocketStream};

/// Two organizations: org-a with two keys, org-b with one.
pub fn two_orgs() -> SimConfig {
    SimConfig::new().org("org-a", &["sk-a1", "sk-a2"]).org("org-b", &["sk-b1"])
}

pub fn client() -> reqwest::Client {
    reqwest::Client::new()
}

/// A JSON answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Value,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

pub async fn send(
    sim: &Sim,
    method: reqwest::Method,
    key: Option<&str>,
    path: &str,
    body: Option<&Value>,
) -> anyhow::Result<Answer> {
    let url = format!("{}{}", sim.base_url(), path);
    let mut req = client().request(method, url);
    if let Some(key) = key {
        req = req.bearer_auth(key);
    }
    if let Some(body) = body {
        req = req.json(body);
    }
    let resp = req.send().await?;
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let text = resp.text().await?;
    let body = serde_json::from_str(&text).with_context(|| format!("not JSON: {text}"))?;
    Ok(Answer { status, headers, body })
}

pub async fn post(sim: &Sim, key: &str, path: &str, body: &Value) -> anyhow::Result<Answer> {
    send(sim, reqwest::Method::POST, Some(key), path, Some(body)).await
}

pub async fn get(sim: &Sim, key: &str, path: &str) -> anyhow::Result<Answer> {
    send(sim, reqwest::Method::GET, Some(key), path, None).await
}

/// One received SSE event.
#[derive(Debug, Clone)]
pub struct Event {
    pub name: Option<String>,
    pub data: Value,
    pub at: Instant,
}

impl Event {
    pub fn kind(&self) -> &str {
        self.data["type"].as_str().unwrap_or("")
    }
}

/// Reads an SSE body event by event. Returns the events and whether the body ended cleanly.
pub async fn read_sse(resp: reqwest::Response) -> anyhow::Result<(Vec<Event>, bool)> {
    let mut stream = resp.bytes_stream();
    let mut buf = String::new();
    let mut events = Vec::new();
    let mut clean = true;
    while let Some(chunk) = stream.next().await {
        let chunk = match chunk {
            Ok(c) => c,
            Err(_) => {
                clean = false;
                break;
            }
        };
        let at = Instant::now();
        buf.push_str(std::str::from_utf8(&chunk)?);
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let mut name = None;
            let mut data = None;
            for line in block.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = Some(n.to_owned());
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data = Some(d.to_owned());
                }
            }
            let Some(data) = data else { continue };
            let data = if data == "[DONE]" { json!("[DONE]") } else { serde_json::from_str(&data)? };
            events.push(Event { name, data, at });
        }
    }
    Ok((events, clean))
}

/// Posts a streaming request and reads all its events.
pub async fn stream(sim: &Sim, key: &str, path: &str, body: &Value) -> anyhow::Result<Vec<Event>> {
    let resp = client().post(format!("{}{}", sim.base_url(), path)).bearer_auth(key).json(body).send().await?;
    if resp.status() != 200 {
        bail!("status {}: {}", resp.status(), resp.text().await?);
    }
    let (events, clean) = read_sse(resp).await?;
    if !clean {
        bail!("stream broke off");
    }
    Ok(events)
}

/// The `response` object of `response.completed`.
pub fn completed(events: &[Event]) -> anyhow::Result<Value> {
    events
        .iter()
        .find(|e| e.kind() == "response.completed")
        .map(|e| e.data["response"].clone())
        .context("no response.completed")
}

/// The items of every `response.output_item.done`, as clients keep them.
pub fn done_items(events: &[Event]) -> Vec<Value> {
    events.iter().filter(|e| e.kind() == "response.output_item.done").map(|e| e.data["item"].clone()).collect()
}

pub fn developer(text: &str) -> Value {
    json!({"type": "message", "role": "developer", "content": [{"type": "input_text", "text": text}]})
}

pub fn user(text: &str) -> Value {
    json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
}

/// A Codex-shaped streaming request body.
pub fn codex_body(input: Vec<Value>) -> Value {
    json!({
        "model": "gpt-5.5",
        "stream": true,
        "input": input,
        "tools": [{"type": "function", "name": "exec_command", "description": "Runs a command.", "strict": false,
                   "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}],
        "tool_choice": "auto",
        "parallel_tool_calls": true,
        "reasoning": {"effort": "medium"},
        "store": false,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "01a227d7-ed08-7e52-9dfa-0ea02ef63150",
        "text": {"verbosity": "low"},
    })
}

/// Codex replays a reasoning item with `"content": null` and its own key order.
pub fn codex_replay(item: &Value) -> Value {
    if item["type"] == "reasoning" {
        json!({
            "type": "reasoning",
            "id": item["id"],
            "summary": item["summary"],
            "content": null,
            "encrypted_content": item["encrypted_content"],
        })
    } else {
        let mut m = item.clone();
        if let Some(parts) = m["content"].as_array_mut() {
            for p in parts {
                p["logprobs"] = json!([]);
            }
        }
        m
    }
}

/// About `bytes` bytes of developer prompt text.
pub fn big_prompt(bytes: usize) -> String {
    let words = ["route", "plan", "file", "item", "build", "node", "cache", "token"];
    let mut s = String::with_capacity(bytes + 8);
    let mut i = 0usize;
    while s.len() < bytes {
        s.push_str(words[i % words.len()]);
        s.push(' ');
        i = i.wrapping_mul(31).wrapping_add(7) % 1009;
    }
    s
}

/// A client WebSocket to the simulator.
pub type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// `ws://…/v1/responses` of the simulator.
pub fn ws_url(sim: &Sim) -> String {
    format!("ws://{}/v1/responses", sim.addr())
}

/// Upgrades with `header: value` as the credential; the upgrade must succeed.
pub async fn connect(sim: &Sim, header: &str, value: &str) -> anyhow::Result<Ws> {
    let mut req = ws_url(sim).into_client_request()?;
    req.headers_mut()
        .insert(reqwest::header::HeaderName::from_bytes(header.as_bytes())?, HeaderValue::from_str(value)?);
    req.headers_mut().insert("openai-beta", HeaderValue::from_static("responses_websockets=2026-02-06"));
    let (ws, resp) = connect_async(req).await?;
    assert_eq!(resp.status(), 101);
    assert!(resp.headers().get("x-request-id").is_some());
    Ok(ws)
}

/// Upgrades with a Bearer key.
pub async fn connect_key(sim: &Sim, key: &str) -> anyhow::Result<Ws> {
    connect(sim, "authorization", &format!("Bearer {key}")).await
}

/// The next text frame as JSON, skipping pings.
pub async fn next_json(ws: &mut Ws) -> anyhow::Result<Value> {
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .context("timed out")?
            .context("connection ended")??;
        match msg {
            Message::Text(t) => return Ok(serde_json::from_str(t.as_str())?),
            Message::Ping(_) | Message::Pong(_) => continue,
            other => bail!("unexpected frame {other:?}"),
        }
    }
}

/// Sends one `response.create` and reads frames up to `response.completed` or an error.
pub async fn exchange(ws: &mut Ws, body: &Value) -> anyhow::Result<Vec<Value>> {
    let mut frame = body.clone();
    frame["type"] = json!("response.create");
    ws.send(Message::text(frame.to_string())).await?;
    let mut frames = Vec::new();
    loop {
        let v = next_json(ws).await?;
        let kind = v["type"].as_str().unwrap_or("").to_owned();
        frames.push(v);
        if kind == "response.completed" || kind == "error" {
            return Ok(frames);
        }
    }
}

/// The `response` of the last frame (`response.completed`).
pub fn last_response(frames: &[Value]) -> Value {
    frames.last().map(|f| f["response"].clone()).unwrap_or_default()
}

/// Polls `cond` until it holds, for at most ten seconds (a generous bound, not a timing).
pub async fn eventually(mut cond: impl FnMut() -> bool) -> bool {
    let give_up = Instant::now() + Duration::from_secs(10);
    while !cond() {
        if Instant::now() > give_up {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    true
}
