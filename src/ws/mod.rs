//! The WebSocket transport: Responses over WebSocket (Codex with `supports_websockets = true`). The
//! upstream keeps connection-local state (`previous_response_id` with `store:false`), so a client socket
//! is bound to one upstream socket, and so to one key, for its whole life.
//!
//! The first `response.create` frame goes through the shared pipeline (`pipeline`): facts, decision,
//! rescue, one handshake attempt per candidate judged by the one classifier, and a record. What lives
//! here is only what is particular to sockets: frames, the two pumps, close codes, and the per-turn
//! records (a turn ends at its `response.completed`). Each pump awaits the other side's send, so at
//! most one frame per direction is in Keymux at a time.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::ws::{CloseFrame as AxumClose, Message as AxumMessage, Utf8Bytes, WebSocket};
use bytes::Bytes;
use futures::{FutureExt as _, SinkExt as _, StreamExt as _};
use http::HeaderMap;
use serde_json::json;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame as UpClose;
use tokio_tungstenite::tungstenite::Message as UpMessage;

use crate::error::ApiError;
use crate::events::Transport as Wire;
use crate::facts::{self, Incoming, Operation};
use crate::gateway::Gateway;
use crate::keys::KeyId;
use crate::pipeline::classify::{error_code, Heard};
use crate::pipeline::record::End;
use crate::pipeline::{Admitted, Ending, Entry, Last, Learn, Reply, Trace, Transport};
use crate::pool::InFlight;
use crate::relay::{Tagger, Usage};
use crate::router::Decision;
use crate::tokens::ClientScope;
use crate::upstream::UpstreamError;

/// Request headers that belong to the client's own WebSocket handshake and are never forwarded.
const HANDSHAKE_HEADERS: &[&str] = &[
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-extensions",
    "sec-websocket-protocol",
    "sec-websocket-accept",
];

/// Largest client frame Keymux accepts.
pub const MAX_FRAME_BYTES: usize = 64 * 1024 * 1024;

/// Read and write buffers of each WebSocket (client and upstream side). tungstenite's default of
/// 128 KiB each made a relayed connection cost half a megabyte; frames larger than this still pass,
/// read in more than one go. Writes are flushed per batch of ready frames anyway.
pub const SOCKET_BUFFER_BYTES: usize = 16 * 1024;

/// The upstream socket's settings: the same limits the client side has.
fn upstream_config() -> tokio_tungstenite::tungstenite::protocol::WebSocketConfig {
    tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
        .read_buffer_size(SOCKET_BUFFER_BYTES)
        .write_buffer_size(SOCKET_BUFFER_BYTES)
        .max_message_size(Some(MAX_FRAME_BYTES))
        .max_frame_size(Some(MAX_FRAME_BYTES))
}
/// Most turns sent on a socket and not yet answered (Codex sends one at a time).
pub const MAX_PENDING_TURNS: usize = 8;

type Upstream = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// An error frame in the shape OpenAI sends over the Responses WebSocket.
fn error_frame(status: u16, code: &str, message: &str, retry_after: Option<u64>) -> AxumMessage {
    let mut frame = json!({
        "type": "error",
        "status": status,
        "error": {"type": "invalid_request_error", "code": code, "message": message, "param": null},
    });
    if let Some(secs) = retry_after {
        frame["headers"] = json!({"retry-after": secs.to_string()});
    }
    AxumMessage::Text(Utf8Bytes::from(frame.to_string()))
}

/// Keymux's own error as a frame.
fn api_error_frame(error: &ApiError) -> AxumMessage {
    let retry_after = match error {
        ApiError::AllCooling { retry_after_secs, .. } => Some(*retry_after_secs),
        _ => None,
    };
    let json = error.to_json();
    let message = json["error"]["message"].as_str().unwrap_or("refused");
    let code = json["error"]["code"].as_str().unwrap_or("keymux_refused");
    error_frame(error.status().as_u16(), code, message, retry_after)
}

/// The frame OpenAI uses for lost connection state: Codex reconnects and resends the full history.
fn lost_state_frame() -> AxumMessage {
    error_frame(
        400,
        "previous_response_not_found",
        "The upstream WebSocket connection was lost, and with it the state of this conversation. Resend the full history without previous_response_id.",
        None,
    )
}

/// A handshake the upstream refused: its status and error, to tell the client.
pub struct Refused {
    status: u16,
    code: String,
    message: String,
}

/// How a socket reaches the upstream: a handshake with the key.
struct Handshake<'a> {
    gateway: &'a Gateway,
    headers: &'a HeaderMap,
}

impl Transport for Handshake<'_> {
    type Accepted = Upstream;
    type Refused = Refused;

    async fn attempt(&mut self, guard: &InFlight, _admitted: &Admitted) -> Reply<Upstream, Refused> {
        let now = || self.gateway.clock().now();
        let request = match handshake_request(self.gateway, guard, self.headers) {
            Ok(request) => request,
            Err(error) => return Reply::Failed(error),
        };
        let base = self.gateway.upstream().base_for(guard.entry()).to_owned();
        let connecting = tokio_tungstenite::connect_async_with_config(request, Some(upstream_config()), false);
        match tokio::time::timeout(self.gateway.upstream().connect_timeout(), connecting).await {
            Err(_) => Reply::Failed(UpstreamError::FirstByteTimeout {
                base,
                secs: self.gateway.upstream().connect_timeout().as_secs(),
            }),
            Ok(Ok((socket, response))) => Reply::Accepted(Heard::from_headers(101, response.headers(), now()), socket),
            Ok(Err(tokio_tungstenite::tungstenite::Error::Http(response))) => {
                let status = response.status().as_u16();
                let body = response.body().clone().unwrap_or_default();
                let heard = Heard::from_headers(status, response.headers(), now()).with_body(&body);
                let code = error_code(&body).unwrap_or_else(|| "upstream_error".to_owned());
                let message = serde_json::from_slice::<serde_json::Value>(&body)
                    .ok()
                    .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
                    .unwrap_or_else(|| format!("The provider refused the WebSocket with status {status}."));
                Reply::Refused(heard, Refused { status, code, message })
            }
            Ok(Err(e)) => Reply::Failed(UpstreamError::Connect { base, detail: e.to_string() }),
        }
    }
}

/// The upstream handshake request for a key: its URL, the client's headers that may go, its auth.
fn handshake_request(
    gateway: &Gateway,
    guard: &InFlight,
    client_headers: &HeaderMap,
) -> Result<http::Request<()>, UpstreamError> {
    let entry = guard.entry();
    let base = gateway.upstream().base_for(entry);
    let url = match base.split_once("://") {
        Some(("https", rest)) => format!("wss://{rest}/responses"),
        Some((_, rest)) => format!("ws://{rest}/responses"),
        None => format!("ws://{base}/responses"),
    };
    let bad = |e: tokio_tungstenite::tungstenite::Error| UpstreamError::BadBaseUrl {
        base: base.to_owned(),
        detail: e.to_string(),
    };
    let mut request = url.into_client_request().map_err(bad)?;
    for (name, value) in crate::upstream::forward_request_headers(client_headers).iter() {
        if !HANDSHAKE_HEADERS.contains(&name.as_str()) {
            request.headers_mut().append(name.clone(), value.clone());
        }
    }
    let (name, value) = crate::upstream::auth_header(entry);
    request.headers_mut().insert(name, value);
    Ok(request)
}

/// Serves one client socket until either side closes (or the gateway shuts down).
pub async fn serve_socket(
    gateway: Arc<Gateway>,
    mut client: WebSocket,
    headers: HeaderMap,
    scope: ClientScope,
    first_frame_timeout: Duration,
) {
    let Ok(first) = tokio::time::timeout(first_frame_timeout, first_frame(&mut client)).await else {
        tracing::debug!("a websocket sent no frame in time and was closed");
        let _ = client.send(AxumMessage::Close(None)).await;
        return;
    };
    let Some(first) = first else { return };
    let mut trace = Trace::new(&gateway, gateway.next_seq(), Operation::ResponsesCreate, Wire::WebSocket);
    let raw = Bytes::copy_from_slice(first.as_bytes());
    let incoming = Incoming {
        seq: trace.seq(),
        operation: Operation::ResponsesCreate,
        scope: &scope.0,
        path: "/v1/responses",
        headers: &headers,
        body: &raw,
    };
    let admitted = match gateway.admit(&incoming, Entry::SocketOpen, &mut trace) {
        Ok(admitted) => admitted,
        Err(error) => return refuse(client, trace, &error).await,
    };
    let mut handshake = Handshake { gateway: &gateway, headers: &headers };
    match gateway.attempt_all(&admitted, &mut handshake, &mut trace).await {
        Ending::Served { key, guard, accepted } => {
            let learn = gateway.learn_for(&admitted, &key);
            let Some(bound) = bind(&gateway, accepted, guard, key, &admitted, &mut client, learn, trace).await else {
                return;
            };
            relay(gateway, client, bound, headers, scope).await;
        }
        Ending::Relayed { key, refused } => {
            let end = End { served_by: Some(key), status: refused.status, ..End::default() };
            let _ = client.send(error_frame(refused.status, &refused.code, &refused.message, None)).await;
            trace.finish(end);
            let _ = client.send(AxumMessage::Close(None)).await;
        }
        Ending::Failed(Last::Upstream(refused)) => {
            let _ = client.send(error_frame(refused.status, &refused.code, &refused.message, None)).await;
            trace.finish(End { status: refused.status, ..End::default() });
            let _ = client.send(AxumMessage::Close(None)).await;
        }
        Ending::Failed(Last::Keymux(error)) => refuse(client, trace, &error).await,
    }
}

/// The first text frame; `None` when the client closed or sent something else.
async fn first_frame(client: &mut WebSocket) -> Option<Utf8Bytes> {
    loop {
        match client.recv().await {
            Some(Ok(AxumMessage::Text(text))) => return Some(text),
            Some(Ok(AxumMessage::Binary(_))) => {
                let _ =
                    client.send(error_frame(400, "invalid_request", "Keymux expects JSON text frames.", None)).await;
                return None;
            }
            Some(Ok(AxumMessage::Ping(_) | AxumMessage::Pong(_))) => continue,
            Some(Ok(AxumMessage::Close(_))) | Some(Err(_)) | None => return None,
        }
    }
}

/// Tells the client why its socket cannot be served, records it, and closes.
async fn refuse(mut client: WebSocket, trace: Trace, error: &ApiError) {
    let _ = client.send(api_error_frame(error)).await;
    trace.finish(End { status: error.status().as_u16(), error: Some(error.label()), ..End::default() });
    let _ = client.send(AxumMessage::Close(None)).await;
}

/// A turn sent upstream and not yet answered to its end.
struct Turn {
    trace: Trace,
    learn: Learn,
}

/// A client socket's upstream side: the socket, the key it is bound to, what to tag with, and the turns
/// waiting for their answers.
struct Bound {
    upstream: Upstream,
    /// The key stays in flight for the connection's life.
    guard: InFlight,
    tagger: Option<Tagger>,
    key: KeyId,
    turns: Arc<Mutex<VecDeque<Turn>>>,
}

/// Sends the first frame on the freshly opened upstream socket; its answer finishes the first turn.
#[expect(clippy::too_many_arguments, reason = "everything the first turn hands to the bound socket")]
async fn bind(
    gateway: &Gateway,
    mut upstream: Upstream,
    guard: InFlight,
    key: KeyId,
    admitted: &Admitted,
    client: &mut WebSocket,
    learn: Learn,
    mut trace: Trace,
) -> Option<Bound> {
    trace.serving(&key);
    let text = String::from_utf8_lossy(&admitted.body).into_owned();
    if upstream.send(UpMessage::Text(text.into())).await.is_err() {
        let _ = client.send(lost_state_frame()).await;
        trace.finish(End { served_by: Some(key), status: 502, error: Some("upstream_cut"), usage: None });
        return None;
    }
    let tagger = gateway.tagger_for(Operation::ResponsesCreate, &guard);
    let turns = Arc::new(Mutex::new(VecDeque::from([Turn { trace, learn }])));
    Some(Bound { upstream, guard, tagger, key, turns })
}

/// Why the inbound pump stopped early.
enum Stop {
    /// The session's state lives with another organization (or socket): the client must reconnect.
    Misbound(KeyId),
    /// The frame carries a marker that must not be used.
    Refused(String),
}

/// The two pumps, until either side closes or the gateway shuts down.
async fn relay(gateway: Arc<Gateway>, client: WebSocket, bound: Bound, headers: HeaderMap, scope: ClientScope) {
    let Bound { upstream, guard, tagger, key, turns } = bound;
    let (client_tx, client_rx) = client.split();
    let (up_tx, up_rx) = upstream.split();
    let (notice_tx, notice_rx) = tokio::sync::mpsc::channel::<AxumMessage>(1);
    let inbound = Inbound { gateway: gateway.clone(), key: key.clone(), turns: turns.clone(), headers, scope };
    let outbound = Outbound { gateway: gateway.clone(), key: key.clone(), tagger, turns };
    let inbound = inbound.pump(client_rx, up_tx);
    let outbound = outbound.pump(up_rx, client_tx, notice_rx);
    tokio::pin!(inbound);
    tokio::pin!(outbound);
    let closing = gateway.closing();
    tokio::select! {
        result = &mut inbound => {
            let notice = match result {
                Ok(()) => None,
                Err(Stop::Misbound(other)) => {
                    tracing::info!(key = %key, other = %other, "session belongs to another organization; asking the client to reconnect");
                    Some(lost_state_frame())
                }
                Err(Stop::Refused(message)) => {
                    tracing::warn!(key = %key, "closing websocket: {message}");
                    Some(error_frame(400, "keymux_invalid_marker", &message, None))
                }
            };
            if let Some(notice) = notice {
                let _ = notice_tx.send(notice).await;
            }
            // Let the upstream's answer to a close (or the notice) reach the client, briefly.
            let _ = tokio::time::timeout(std::time::Duration::from_secs(2), outbound).await;
        }
        () = &mut outbound => {}
        () = closing.cancelled() => {
            let close = AxumClose { code: 1001, reason: "Keymux is shutting down".into() };
            let _ = notice_tx.send(AxumMessage::Close(Some(close))).await;
            let _ = tokio::time::timeout(std::time::Duration::from_secs(2), outbound).await;
        }
    }
    drop(guard);
}

type ClientRx = futures::stream::SplitStream<WebSocket>;
type ClientTx = futures::stream::SplitSink<WebSocket, AxumMessage>;
type UpRx = futures::stream::SplitStream<Upstream>;
type UpTx = futures::stream::SplitSink<Upstream, UpMessage>;

/// Client → upstream: markers stripped, each `response.create` a turn with its own record.
struct Inbound {
    gateway: Arc<Gateway>,
    key: KeyId,
    turns: Arc<Mutex<VecDeque<Turn>>>,
    headers: HeaderMap,
    scope: ClientScope,
}

impl Inbound {
    async fn pump(self, mut client_rx: ClientRx, mut up_tx: UpTx) -> Result<(), Stop> {
        while let Some(message) = client_rx.next().await {
            let forwarded = match message {
                Ok(AxumMessage::Text(text)) => self.turn(&text)?,
                Ok(AxumMessage::Binary(bytes)) => UpMessage::Binary(bytes),
                Ok(AxumMessage::Ping(p)) => UpMessage::Ping(p),
                Ok(AxumMessage::Pong(p)) => UpMessage::Pong(p),
                Ok(AxumMessage::Close(frame)) => {
                    let close =
                        frame.map(|f| UpClose { code: CloseCode::from(f.code), reason: f.reason.as_str().into() });
                    let _ = up_tx.send(UpMessage::Close(close)).await;
                    return Ok(());
                }
                Err(_) => return Ok(()),
            };
            if up_tx.send(forwarded).await.is_err() {
                return Ok(());
            }
        }
        let _ = up_tx.close().await;
        Ok(())
    }

    /// One frame on the bound socket: its facts, a check that this socket's key can serve it, and its
    /// record (finished when its answer ends).
    fn turn(&self, text: &str) -> Result<UpMessage, Stop> {
        let gateway = &self.gateway;
        let raw = Bytes::copy_from_slice(text.as_bytes());
        let mut trace = Trace::new(gateway, gateway.next_seq(), Operation::ResponsesCreate, Wire::WebSocket);
        let incoming = Incoming {
            seq: trace.seq(),
            operation: Operation::ResponsesCreate,
            scope: &self.scope.0,
            path: "/v1/responses",
            headers: &self.headers,
            body: &raw,
        };
        let extracted =
            facts::extract(&incoming, gateway.markers()).map_err(|e| Stop::Refused(format!("Keymux: {e}.")))?;
        let facts = &extracted.facts;
        let now = gateway.clock().now();
        // Bound to this socket: markers of another organization cannot be read here, and a response made
        // on another socket's key cannot be continued here. Remember where the session belongs and make
        // the client reconnect (on `previous_response_not_found` Codex reconnects and resends all).
        let org = gateway.pool().org_tag(&self.key);
        let misbound = facts
            .pins
            .iter()
            .find(|p| Some(p.org) != org && p.key != self.key)
            .or(facts.continuity.as_ref().filter(|c| c.key != self.key));
        if let Some(pin) = misbound {
            if let Some(session) = facts.session {
                gateway.hints().insert(session, pin.key.clone(), now);
            }
            return Err(Stop::Misbound(pin.key.clone()));
        }
        if let Some(session) = facts.session {
            gateway.hints().insert(session, self.key.clone(), now);
        }
        trace.facts(facts);
        trace.decided(Decision::bound_to_socket(trace.seq(), &self.key));
        trace.serving(&self.key);
        let learn = Learn { key: self.key.clone(), operation: Operation::ResponsesCreate, signal: None };
        self.push(Turn { trace, learn });
        Ok(UpMessage::Text(String::from_utf8_lossy(&extracted.body).into_owned().into()))
    }

    fn push(&self, turn: Turn) {
        let mut turns = self.turns.lock().unwrap_or_else(|p| p.into_inner());
        if turns.len() == MAX_PENDING_TURNS {
            // A client that never waits for answers: the oldest turn's record closes unanswered.
            if let Some(old) = turns.pop_front() {
                old.trace.finish(End {
                    served_by: Some(self.key.clone()),
                    status: 200,
                    error: Some("unanswered"),
                    usage: None,
                });
            }
        }
        turns.push_back(turn);
    }
}

/// Upstream → client: frames tagged with the key's markers; a turn's record finishes at its end.
struct Outbound {
    gateway: Arc<Gateway>,
    key: KeyId,
    tagger: Option<Tagger>,
    turns: Arc<Mutex<VecDeque<Turn>>>,
}

impl Outbound {
    async fn pump(
        self,
        mut up_rx: UpRx,
        mut client_tx: ClientTx,
        mut notice_rx: tokio::sync::mpsc::Receiver<AxumMessage>,
    ) {
        loop {
            let message = tokio::select! {
                notice = notice_rx.recv() => {
                    if let Some(notice) = notice {
                        let closing = matches!(notice, AxumMessage::Close(_));
                        let _ = client_tx.send(notice).await;
                        if !closing {
                            let _ = client_tx.send(AxumMessage::Close(None)).await;
                        }
                    }
                    self.close_turns("client_gone");
                    return;
                }
                message = up_rx.next() => match message {
                    Some(message) => message,
                    None => break,
                },
            };
            // Frames that are already here go out in one write: feed them all, flush once.
            let mut lost = false;
            let mut next = Some(message);
            while let Some(message) = next.take() {
                match self.forward(message) {
                    Forward::Frame(frame) => {
                        if client_tx.feed(frame).await.is_err() {
                            self.close_turns("client_gone");
                            return;
                        }
                    }
                    Forward::Skip => {}
                    Forward::Closed(close) => {
                        let _ = client_tx.send(AxumMessage::Close(close)).await;
                        self.close_turns("upstream_closed");
                        return;
                    }
                    Forward::Lost => {
                        lost = true;
                        break;
                    }
                }
                next = up_rx.next().now_or_never().flatten();
            }
            if client_tx.flush().await.is_err() {
                self.close_turns("client_gone");
                return;
            }
            if lost {
                break;
            }
        }
        // The upstream went away without a close: its state is gone.
        let _ = client_tx.send(lost_state_frame()).await;
        let _ = client_tx.send(AxumMessage::Close(None)).await;
        self.close_turns("upstream_cut");
    }

    /// What one upstream message becomes for the client.
    fn forward(&self, message: Result<UpMessage, tokio_tungstenite::tungstenite::Error>) -> Forward {
        match message {
            Ok(UpMessage::Text(text)) => Forward::Frame(AxumMessage::Text(self.frame(text.as_str()).into())),
            Ok(UpMessage::Binary(bytes)) => Forward::Frame(AxumMessage::Binary(bytes)),
            Ok(UpMessage::Ping(p)) => Forward::Frame(AxumMessage::Ping(p)),
            Ok(UpMessage::Pong(p)) => Forward::Frame(AxumMessage::Pong(p)),
            Ok(UpMessage::Close(frame)) => {
                Forward::Closed(frame.map(|f| AxumClose { code: u16::from(f.code), reason: f.reason.as_str().into() }))
            }
            Ok(UpMessage::Frame(_)) => Forward::Skip,
            Err(_) => Forward::Lost,
        }
    }

    /// One upstream text frame: noted against the current turn, tagged for the client.
    fn frame(&self, text: &str) -> String {
        self.observe(text);
        match self.tagger.as_ref().and_then(|t| t.tag_json(text.as_bytes())) {
            Some(tagged) => String::from_utf8_lossy(&tagged).into_owned(),
            None => text.to_owned(),
        }
    }

    /// The current turn's first frame is its time to first byte; `response.completed` ends it with its
    /// usage, an `error` or `response.failed` ends it as failed.
    fn observe(&self, text: &str) {
        let mut turns = self.turns.lock().unwrap_or_else(|p| p.into_inner());
        let Some(turn) = turns.front_mut() else { return };
        turn.trace.answered();
        let kind = turn_end(text);
        if kind == TurnEnd::Open {
            return;
        }
        let Some(turn) = turns.pop_front() else { return };
        drop(turns);
        let (error, usage) = match kind {
            TurnEnd::Completed(usage) => {
                self.gateway.completed(&turn.learn, usage);
                (None, usage)
            }
            _ => (Some("upstream_error"), None),
        };
        turn.trace.finish(End { served_by: Some(self.key.clone()), status: 200, error, usage });
    }

    /// Closes the records of turns that will get no answer now.
    fn close_turns(&self, why: &'static str) {
        let mut turns = self.turns.lock().unwrap_or_else(|p| p.into_inner());
        for turn in turns.drain(..) {
            turn.trace.finish(End { served_by: Some(self.key.clone()), status: 200, error: Some(why), usage: None });
        }
    }
}

/// What an upstream message becomes.
enum Forward {
    /// A frame for the client.
    Frame(AxumMessage),
    /// Nothing (a raw frame tungstenite hands up only when asked to).
    Skip,
    /// The upstream closed the socket.
    Closed(Option<AxumClose>),
    /// The upstream socket failed: its state is gone.
    Lost,
}

/// Whether a frame ends its turn.
#[derive(Debug, PartialEq)]
enum TurnEnd {
    Open,
    Completed(Option<Usage>),
    Failed,
}

fn turn_end(text: &str) -> TurnEnd {
    let has = |needle: &[u8]| memchr::memmem::find(text.as_bytes(), needle).is_some();
    if !has(b"response.completed") && !has(b"\"error\"") && !has(b"response.failed") {
        return TurnEnd::Open;
    }
    let Some(event) = crate::relay::EndEvent::read(text.as_bytes()) else { return TurnEnd::Open };
    match event.kind() {
        Some("response.completed") => TurnEnd::Completed(event.response_usage()),
        Some("error" | "response.failed") => TurnEnd::Failed,
        _ => TurnEnd::Open,
    }
}
