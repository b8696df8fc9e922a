//! Responses over WebSocket: the upgrade, one sequential session per connection with its
//! connection-local last response, and the connection age limit.

use std::sync::Arc;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::exchange::{admit, fault_error, record, Ctx, Facts, Origin, Shaping};
use crate::log::Transport;
use crate::models;
use crate::prompt::BYTES_PER_TOKEN;
use crate::responses::{self, ConnectionLast, Plan};
use crate::state::{Caller, State};

/// Answers an authenticated upgrade request. A standing error fault of the key refuses the
/// handshake; queued faults wait for the connection's frames.
pub(crate) async fn upgrade(mut ctx: Ctx, caller: Caller, mut parts: Parts) -> Response {
    let upgrade = match WebSocketUpgrade::from_request_parts(&mut parts, &()).await {
        Ok(u) => u,
        Err(rejection) => {
            let resp = rejection.into_response();
            ctx.log(resp.status().as_u16(), Some("websocket_upgrade_failed".into()), true);
            return ctx.decorate(resp, false);
        }
    };
    let state = ctx.state.clone();
    let standing = state.standing_fault(&caller);
    if let Some(err) = standing.and_then(|f| fault_error(&state, &caller, &f, None)) {
        return ctx.fail(err.into());
    }
    let (headers, peer) = (ctx.headers.clone(), ctx.peer);
    let resp = upgrade.on_upgrade(move |socket| session(state, caller, headers, peer, socket));
    ctx.log(101, None, true);
    ctx.decorate(resp, false)
}

/// Removes a connection from the registry however its session ends.
struct Registration {
    state: Arc<State>,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.state.ws.deregister(self.id);
    }
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

/// One connection of `caller`, as the upgrade request's `headers` describe it.
struct Conn {
    state: Arc<State>,
    caller: Caller,
    headers: Vec<(String, String)>,
    peer: Option<std::net::SocketAddr>,
    socket: WebSocket,
    /// The connection's last response, which `previous_response_id` may name unstored.
    last: Option<ConnectionLast>,
}

async fn session(
    state: Arc<State>,
    caller: Caller,
    headers: Vec<(String, String)>,
    peer: Option<std::net::SocketAddr>,
    socket: WebSocket,
) {
    let (id, kill) = state.ws.register(&caller.secret);
    let _registration = Registration { state: state.clone(), id };
    let deadline = state.clock.now() + state.ws_connection_limit;
    let mut conn = Conn { state, caller, headers, peer, socket, last: None };
    loop {
        let wake = tokio::select! {
            _ = kill.notified() => Wake::Killed,
            _ = conn.state.clock.sleep_until(deadline) => Wake::Expired,
            msg = conn.socket.recv() => Wake::Frame(msg),
        };
        let text = match wake {
            Wake::Killed => return,
            Wake::Expired => return conn.expire().await,
            Wake::Frame(None | Some(Err(_)) | Some(Ok(Message::Close(_)))) => return,
            Wake::Frame(Some(Ok(Message::Text(text)))) => text.as_str().to_owned(),
            Wake::Frame(Some(Ok(Message::Binary(bytes)))) => String::from_utf8_lossy(&bytes).into_owned(),
            // Pings are answered by the WebSocket layer itself.
            Wake::Frame(Some(Ok(Message::Ping(_) | Message::Pong(_)))) => continue,
        };
        let outcome = tokio::select! {
            _ = kill.notified() => Outcome::Drop,
            o = conn.handle_frame(&text) => o,
        };
        if matches!(outcome, Outcome::Drop) {
            return;
        }
    }
}

/// Why a frame got an error frame instead of events: the error, whether it counts as served,
/// and the rate-limit headers a 429 carries.
type FrameError = (ApiError, bool, Vec<(String, String)>);

impl Conn {
    /// Ends a connection that reached its age limit, as OpenAI does: an error frame, then a
    /// normal close.
    async fn expire(mut self) {
        let err = ApiError::ws_connection_limit(self.state.ws_connection_limit);
        let frame = err.ws_frame(&[]).to_string();
        let _ = self.socket.send(Message::text(frame)).await;
        let close = CloseFrame { code: 1000, reason: "connection limit reached".into() };
        let _ = self.socket.send(Message::Close(Some(close))).await;
    }

    fn log_frame(&self, seq: u64, facts: Facts, status: u16, error_code: Option<String>, served: bool) {
        let origin = Origin {
            seq,
            method: "WS",
            path: "/v1/responses",
            transport: Transport::WebSocket,
            headers: self.headers.clone(),
            peer: self.peer,
        };
        record(&self.state, origin, Some(&self.caller), status, facts, error_code, served);
    }

    async fn send_json(&mut self, v: &Value) -> bool {
        self.socket.send(Message::text(v.to_string())).await.is_ok()
    }

    async fn handle_frame(&mut self, text: &str) -> Outcome {
        let seq = self.state.log.next_seq();
        let parsed: Result<Value, _> = serde_json::from_str(text);
        let mut facts = Facts::from_body(parsed.as_ref().ok().cloned(), false);
        facts.stream = true;
        facts.body_bytes = text.len();

        let fault = self.state.draw_fault(&self.caller);
        let shaping = Shaping::from_fault(fault.as_ref());
        if let Some(d) = shaping.first_byte {
            tokio::time::sleep(d).await;
        }
        let result =
            match fault.as_ref().and_then(|f| fault_error(&self.state, &self.caller, f, facts.model.as_deref())) {
                Some(err) => Err((err, true, Vec::new())),
                None => self.prepare(parsed, text.len(), &mut facts),
            };
        match result {
            Ok(plan) => {
                facts.input_tokens = plan.input_tokens;
                facts.cached_tokens = plan.cached_tokens;
                self.log_frame(seq, facts, 200, None, true);
                self.stream(&plan, shaping).await
            }
            Err((err, served, rate_headers)) => {
                self.log_frame(seq, facts, err.status.as_u16(), Some(err.log_code()), served);
                let mut frame_headers: Vec<(String, String)> =
                    err.headers.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect();
                if err.status.as_u16() == 429 && err.code.as_deref() == Some("rate_limit_exceeded") {
                    frame_headers.extend(rate_headers);
                }
                if self.send_json(&err.ws_frame(&frame_headers)).await {
                    Outcome::Continue
                } else {
                    Outcome::Drop
                }
            }
        }
    }

    /// Sends a plan's events; a `CutAfterEvents` fault drops the connection mid-stream.
    async fn stream(&mut self, plan: &Plan, shaping: Shaping) -> Outcome {
        responses::begin(&self.state, plan);
        let total = plan.events.len();
        for (i, event) in plan.events.iter().enumerate() {
            if shaping.cut == Some(i) {
                responses::fail(&self.state, plan);
                return Outcome::Drop;
            }
            if i > 0 {
                if let Some(d) = shaping.deltas {
                    tokio::time::sleep(d).await;
                }
            }
            if i + 1 == total {
                responses::commit(&self.state, plan);
                self.last = Some(plan.connection_last());
            }
            let sent = if shaping.binary {
                let quoted = if i == 0 { format!(" key={}", self.caller.secret) } else { String::new() };
                self.socket.send(Message::Binary(format!("{event}{quoted}").into())).await.is_ok()
            } else {
                self.send_json(event).await
            };
            if !sent {
                return Outcome::Drop;
            }
        }
        Outcome::Continue
    }

    /// Checks a `response.create` frame, admits it against the rate limits and plans it.
    fn prepare(
        &self,
        parsed: Result<Value, serde_json::Error>,
        frame_len: usize,
        facts: &mut Facts,
    ) -> Result<Plan, FrameError> {
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
        let model =
            models::require(&body, &self.state.org(self.caller.org).models).map_err(|e| (e, true, Vec::new()))?;
        let tokens = (frame_len / BYTES_PER_TOKEN) as u64;
        if let Err((err, snapshot)) = admit(&self.state, &self.caller, &model, tokens) {
            facts.input_tokens = tokens;
            let headers = snapshot.headers().into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
            return Err((err, false, headers));
        }
        let last = self.last.as_ref();
        responses::plan(&self.state, &self.caller, &model, &body, last).map_err(|e| (e, true, Vec::new()))
    }
}
