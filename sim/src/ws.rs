//! Responses over WebSocket: the upgrade, one sequential session per connection with its
//! connection-local last response, the connection age limit, and the registry of open
//! connections that tests can kill abruptly.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};
use tokio::sync::Notify;

use crate::error::ApiError;
use crate::log::Transport;
use crate::models;
use crate::responses::{self, ConnectionLast};
use crate::server::{fault_error, record, Ctx, Facts, Shaping};
use crate::state::{Caller, State};
use crate::util::lock;

/// Open connections by id.
#[derive(Debug, Default)]
pub(crate) struct WsRegistry {
    next: AtomicU64,
    /// Bound: one entry per open connection (each holds a socket, so the OS bounds them).
    open: Mutex<HashMap<u64, (String, Arc<Notify>)>>,
}

impl WsRegistry {
    fn register(&self, key: &str) -> (u64, Arc<Notify>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let kill = Arc::new(Notify::new());
        lock(&self.open).insert(id, (key.to_owned(), kill.clone()));
        (id, kill)
    }

    fn deregister(&self, id: u64) {
        lock(&self.open).remove(&id);
    }

    /// Drops every open connection of `key` without a close frame.
    pub(crate) fn kill(&self, key: &str) -> usize {
        let mut open = lock(&self.open);
        let ids: Vec<u64> = open.iter().filter(|(_, (k, _))| k == key).map(|(id, _)| *id).collect();
        for id in &ids {
            if let Some((_, kill)) = open.remove(id) {
                kill.notify_one();
            }
        }
        ids.len()
    }

    pub(crate) fn kill_all(&self) -> usize {
        let drained: Vec<_> = lock(&self.open).drain().collect();
        for (_, (_, kill)) in &drained {
            kill.notify_one();
        }
        drained.len()
    }

    pub(crate) fn count(&self) -> usize {
        lock(&self.open).len()
    }
}

struct Registration {
    state: Arc<State>,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.state.ws.deregister(self.id);
    }
}

/// Answers an authenticated upgrade request.
pub(crate) async fn upgrade(mut ctx: Ctx, mut parts: Parts) -> Response {
    let upgrade = match WebSocketUpgrade::from_request_parts(&mut parts, &()).await {
        Ok(u) => u,
        Err(rejection) => {
            let resp = rejection.into_response();
            ctx.log(resp.status().as_u16(), Some("websocket_upgrade_failed".into()), true);
            return ctx.decorate(resp, false);
        }
    };
    let Some(caller) = ctx.caller.clone() else {
        let err = ApiError::missing_key();
        ctx.log(err.status.as_u16(), Some(err.log_code()), false);
        return ctx.decorate(err.status.into_response(), true);
    };
    let state = ctx.state.clone();
    let headers = ctx.headers.clone();
    let resp = upgrade.on_upgrade(move |socket| session(state, caller, headers, socket));
    ctx.log(101, None, true);
    ctx.decorate(resp, false)
}

enum Wake {
    Killed,
    Expired,
    Frame(Option<Result<Message, axum::Error>>),
}

enum Outcome {
    Continue,
    Drop,
}

async fn session(state: Arc<State>, caller: Caller, headers: Vec<(String, String)>, mut socket: WebSocket) {
    let (id, kill) = state.ws.register(&caller.secret);
    let _registration = Registration { state: state.clone(), id };
    let deadline = tokio::time::Instant::now() + state.ws_connection_limit;
    let mut last: Option<ConnectionLast> = None;
    loop {
        let wake = tokio::select! {
            _ = kill.notified() => Wake::Killed,
            _ = tokio::time::sleep_until(deadline) => Wake::Expired,
            msg = socket.recv() => Wake::Frame(msg),
        };
        match wake {
            Wake::Killed => return,
            Wake::Expired => {
                let err = ApiError::ws_connection_limit(state.ws_connection_limit);
                let frame = err.ws_frame(&[]).to_string();
                let _ = socket.send(Message::text(frame)).await;
                let _ = socket
                    .send(Message::Close(Some(CloseFrame { code: 1000, reason: "connection limit reached".into() })))
                    .await;
                return;
            }
            Wake::Frame(None) | Wake::Frame(Some(Err(_))) => return,
            Wake::Frame(Some(Ok(Message::Close(_)))) => return,
            Wake::Frame(Some(Ok(Message::Text(text)))) => {
                let outcome = tokio::select! {
                    _ = kill.notified() => Outcome::Drop,
                    o = handle_frame(&state, &caller, &headers, &mut socket, &mut last, text.as_str()) => o,
                };
                if matches!(outcome, Outcome::Drop) {
                    return;
                }
            }
            Wake::Frame(Some(Ok(Message::Binary(bytes)))) => {
                let text = String::from_utf8_lossy(&bytes).into_owned();
                let outcome = tokio::select! {
                    _ = kill.notified() => Outcome::Drop,
                    o = handle_frame(&state, &caller, &headers, &mut socket, &mut last, &text) => o,
                };
                if matches!(outcome, Outcome::Drop) {
                    return;
                }
            }
            // Pings are answered by the WebSocket layer itself.
            Wake::Frame(Some(Ok(Message::Ping(_) | Message::Pong(_)))) => {}
        }
    }
}

/// Logs one frame.
#[expect(clippy::too_many_arguments, reason = "mirrors the log entry fields")]
fn log_frame(
    state: &State,
    seq: u64,
    caller: &Caller,
    headers: &[(String, String)],
    facts: Facts,
    status: u16,
    error_code: Option<String>,
    served: bool,
) {
    record(
        state,
        seq,
        "WS",
        "/v1/responses",
        Some(caller),
        status,
        Transport::WebSocket,
        facts,
        error_code,
        headers.to_vec(),
        served,
    );
}

async fn send_json(socket: &mut WebSocket, v: &Value) -> bool {
    socket.send(Message::text(v.to_string())).await.is_ok()
}

async fn handle_frame(
    state: &Arc<State>,
    caller: &Caller,
    headers: &[(String, String)],
    socket: &mut WebSocket,
    last: &mut Option<ConnectionLast>,
    text: &str,
) -> Outcome {
    let seq = state.log.next_seq();
    let parsed: Result<Value, _> = serde_json::from_str(text);
    let mut facts = Facts::from_body(parsed.as_ref().ok().cloned(), false);
    facts.stream = true;
    facts.body_bytes = text.len();

    let fault = state.faults.pop(&caller.secret);
    let shaping = Shaping::from_fault(fault.as_ref());
    if let Some(d) = shaping.first_byte {
        tokio::time::sleep(d).await;
    }
    let result = match fault.as_ref().and_then(|f| fault_error(state, caller, f, facts.model.as_deref())) {
        Some(err) => Err((err, true, Vec::new())),
        None => prepare(state, caller, parsed, text.len(), last.as_ref(), &mut facts),
    };
    let plan = match result {
        Ok(plan) => plan,
        Err((err, served, rate_headers)) => {
            let mut frame_headers: Vec<(String, String)> =
                err.headers.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect();
            if err.status.as_u16() == 429 && err.code.as_deref() == Some("rate_limit_exceeded") {
                frame_headers.extend(rate_headers);
            }
            log_frame(state, seq, caller, headers, facts, err.status.as_u16(), Some(err.log_code()), served);
            if !send_json(socket, &err.ws_frame(&frame_headers)).await {
                return Outcome::Drop;
            }
            return Outcome::Continue;
        }
    };
    facts.input_tokens = plan.input_tokens;
    facts.cached_tokens = plan.cached_tokens;
    log_frame(state, seq, caller, headers, facts, 200, None, true);

    responses::begin(state, &plan);
    let total = plan.events.len();
    for (i, event) in plan.events.iter().enumerate() {
        if shaping.cut == Some(i) {
            responses::fail(state, &plan);
            return Outcome::Drop;
        }
        if i > 0 {
            if let Some(d) = shaping.deltas {
                tokio::time::sleep(d).await;
            }
        }
        if i + 1 == total {
            responses::commit(state, &plan);
            *last = Some(plan.connection_last());
        }
        if !send_json(socket, event).await {
            return Outcome::Drop;
        }
    }
    Outcome::Continue
}

type FrameError = (ApiError, bool, Vec<(String, String)>);

fn prepare(
    state: &Arc<State>,
    caller: &Caller,
    parsed: Result<Value, serde_json::Error>,
    frame_len: usize,
    last: Option<&ConnectionLast>,
    facts: &mut Facts,
) -> Result<responses::Plan, FrameError> {
    let body: Map<String, Value> = match parsed {
        Ok(Value::Object(m)) => m,
        _ => return Err((ApiError::bad_json(), true, Vec::new())),
    };
    match body.get("type").and_then(Value::as_str) {
        Some("response.create") => {}
        other => {
            let err = ApiError::invalid_value(
                "type",
                format!("Invalid value: '{}'. Supported values are: 'response.create'.", other.unwrap_or("")),
            );
            return Err((err, true, Vec::new()));
        }
    }
    let model = models::require(&body).map_err(|e| (e, true, Vec::new()))?;
    let tokens = (frame_len / crate::prompt::BYTES_PER_TOKEN) as u64;
    let now = Instant::now();
    if let Err((r, snapshot)) = state.limiter.admit(&caller.secret, tokens, now) {
        facts.input_tokens = tokens;
        let err = ApiError::rate_limited(
            r.dimension,
            &model,
            &state.org(caller.org).id,
            r.limit,
            r.used,
            r.requested,
            r.wait,
        );
        let headers = snapshot.headers().into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        return Err((err, false, headers));
    }
    responses::plan(state, caller, &model, &body, last).map_err(|e| (e, true, Vec::new()))
}
