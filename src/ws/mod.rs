//! The WebSocket transport: Responses over WebSocket (Codex with `supports_websockets = true`). The
//! upstream keeps connection-local state (`previous_response_id` with `store:false`), so a client socket
//! is bound to one upstream socket, and so to one key, for its whole life.
//!
//! The first `response.create` frame goes through the shared pipeline (`pipeline`): facts, decision,
//! rescue, one handshake attempt per candidate judged by the one classifier, and a record. What lives
//! here is only what is particular to sockets: frames, the two pumps, close codes, and the per-turn
//! records (a turn ends at its `response.completed`). Each pump awaits the other side's send, so at
//! most one frame per direction is in Keymux at a time.

mod pumps;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::ws::{Message as AxumMessage, Utf8Bytes, WebSocket};
use bytes::Bytes;
use futures::{SinkExt as _, StreamExt as _};
use http::HeaderMap;
use serde_json::json;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
use tokio_tungstenite::tungstenite::Message as UpMessage;

use crate::classify::{error_detail, Heard};
use crate::error::ApiError;
use crate::events::Wire;
use crate::facts::{Incoming, Operation};
use crate::gateway::Gateway;
use crate::keys::KeyId;
use crate::pipeline::record::End;
use crate::pipeline::{self, Admitted, Completion, Entry, Fallback, Reply, Settled, Trace, Transport};
use crate::pool::InFlight;
use crate::relay::Tagger;
use crate::tokens::ClientScope;
use crate::upstream::{egress, UpstreamError};
use hyper_util::rt::TokioIo;

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

type Upstream = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<TokioIo<egress::Conn>>>;

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
        ApiError::AllCooling { retry_after_secs, .. }
        | ApiError::BudgetReached { retry_after_secs, .. }
        | ApiError::BudgetStopped { retry_after_secs, .. } => Some(*retry_after_secs),
        _ => None,
    };
    let json = error.to_json();
    let message = json["error"]["message"].as_str().unwrap_or("refused");
    let code = json["error"]["code"].as_str().unwrap_or("keymux_refused");
    error_frame(error.status().as_u16(), code, message, retry_after)
}

/// The answer to a binary frame from the client, on the first frame or any later one: the Responses
/// WebSocket carries JSON text frames only, and a binary frame would pass every per-frame check
/// (markers, pool, budget, the turn's record) unread, so it is refused and the socket closed.
fn binary_refused_frame() -> AxumMessage {
    error_frame(
        400,
        "invalid_request",
        "Keymux: the Responses WebSocket takes JSON text frames; a binary frame was refused and the socket closed. Send each request as a text frame.",
        None,
    )
}

/// The answer when the provider sends a binary frame, which the Responses API never does: it is not
/// passed on (Keymux could neither mask nor tag it) and the socket is closed; the client reconnects.
fn upstream_binary_frame() -> AxumMessage {
    error_frame(
        502,
        "upstream_binary_frame",
        "Keymux: the provider sent a binary WebSocket frame, which the Responses API never sends; it was not passed on and this socket was closed. Reconnect to continue.",
        None,
    )
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

/// A handshake the upstream declined: its status and error, to tell the client.
pub struct Declined {
    status: u16,
    code: String,
    message: String,
}

impl Declined {
    /// A refusal as the provider worded it (`error.code` and `error.message`), with `fallback` for a
    /// body that says nothing: a declined handshake's body, or an `error` event on a fresh socket.
    fn from_body(status: u16, body: &[u8], fallback: impl FnOnce() -> String) -> Self {
        let (code, message) = error_detail(body);
        Self {
            status,
            code: code.unwrap_or_else(|| "upstream_error".to_owned()),
            message: message.unwrap_or_else(fallback),
        }
    }
}

/// How a socket reaches the upstream: a handshake with the key.
struct Handshake<'a> {
    gateway: &'a Gateway,
    headers: &'a HeaderMap,
    /// While finding the organization of unmarked encrypted content: the first frame, sent as part of
    /// each attempt, so that an organization that cannot read it is a declined attempt.
    first: Option<Bytes>,
}

/// An upstream socket a handshake opened.
struct Opened {
    socket: Upstream,
    /// The first frame went with the attempt, and this is the upstream's first answer to it.
    answer: Option<UpMessage>,
}

impl Transport for Handshake<'_> {
    type Accepted = Opened;
    type Declined = Declined;

    fn rescue(&mut self, body: Bytes) {
        self.first = Some(body);
    }

    async fn attempt(&mut self, guard: &InFlight) -> Reply<Opened, Declined> {
        match (self.connect(guard).await, self.first.clone()) {
            (Reply::Accepted(heard, socket), Some(first)) => self.try_first(guard, heard, socket, first).await,
            (Reply::Accepted(heard, socket), None) => Reply::Accepted(heard, Opened { socket, answer: None }),
            (Reply::Declined(heard, declined), _) => Reply::Declined(heard, declined),
            (Reply::Failed(error), _) => Reply::Failed(error),
        }
    }
}

impl Handshake<'_> {
    /// Sends the first frame on a fresh upstream socket and reads the first answer: an `error` event
    /// (the organization cannot read the frame's encrypted content, say) declines the attempt like an
    /// HTTP error status would, anything else accepts it with that answer still to relay.
    async fn try_first(
        &self,
        guard: &InFlight,
        heard: Heard,
        mut socket: Upstream,
        first: Bytes,
    ) -> Reply<Opened, Declined> {
        let base = || self.gateway.upstream().base_for(guard.entry()).to_owned();
        let cut = |detail: &str| Reply::Failed(UpstreamError::Cut { base: base(), detail: detail.to_owned() });
        if socket.send(UpMessage::Text(String::from_utf8_lossy(&first).into_owned().into())).await.is_err() {
            return cut("the socket closed before the first frame");
        }
        let answer = loop {
            match tokio::time::timeout(self.gateway.upstream().idle_timeout(), socket.next()).await {
                Ok(Some(Ok(UpMessage::Ping(_) | UpMessage::Pong(_) | UpMessage::Frame(_)))) => {}
                Ok(Some(Ok(message))) => break message,
                Ok(_) => return cut("the socket closed before its first answer"),
                Err(_) => return cut("no first answer in time"),
            }
        };
        let error = match &answer {
            UpMessage::Text(text)
                if crate::relay::EndEvent::read(text.as_bytes()).is_some_and(|e| e.kind() == Some("error")) =>
            {
                text.as_bytes().to_vec()
            }
            _ => return Reply::Accepted(heard, Opened { socket, answer: Some(answer) }),
        };
        let _ = socket.close(None).await;
        // OpenAI's error events carry the status an HTTP answer would have had.
        let status = serde_json::from_slice::<serde_json::Value>(&error)
            .ok()
            .and_then(|v| v["status"].as_u64())
            .and_then(|s| u16::try_from(s).ok())
            .unwrap_or(400);
        let provider = guard.entry().provider;
        let heard = Heard::from_headers(status, &HeaderMap::new(), self.gateway.clock(), provider).with_body(&error);
        Reply::Declined(heard, Declined::from_body(status, &error, || "The provider refused the frame.".to_owned()))
    }

    /// The handshake alone: an open socket, the provider's refusal, or no answer. The connection is
    /// opened on the key's way out (`upstream::egress`), TLS on it for `wss://`.
    async fn connect(&self, guard: &InFlight) -> Reply<Upstream, Declined> {
        let clock = self.gateway.clock();
        let request = match handshake_request(self.gateway, guard, self.headers) {
            Ok(request) => request,
            Err(error) => return Reply::Failed(error),
        };
        let upstream = self.gateway.upstream();
        let base = upstream.base_for(guard.entry()).to_owned();
        let route = upstream.route(&guard.entry().id);
        let tls = tokio_tungstenite::Connector::Rustls(Arc::new(upstream.tls().clone()));
        let connecting = async {
            let stream = route.open_socket(request.uri()).await?;
            let config = Some(upstream_config());
            Ok(tokio_tungstenite::client_async_tls_with_config(request, TokioIo::new(stream), config, Some(tls)).await)
        };
        let failed = |detail: String| match route.shown() {
            Some(proxy) => UpstreamError::Proxy { proxy: proxy.to_owned(), base: base.clone(), detail },
            None => UpstreamError::Connect { base: base.clone(), detail },
        };
        let connected = match tokio::time::timeout(upstream.connect_timeout(), connecting).await {
            Err(_) => {
                let secs = upstream.connect_timeout().as_secs();
                return Reply::Failed(UpstreamError::FirstByteTimeout { base, secs });
            }
            Ok(Err(detail)) => return Reply::Failed(failed(detail)),
            Ok(Ok(connected)) => connected,
        };
        let provider = guard.entry().provider;
        match connected {
            Ok((socket, response)) => {
                Reply::Accepted(Heard::from_headers(101, response.headers(), clock, provider), socket)
            }
            Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
                let status = response.status().as_u16();
                let body = response.body().clone().unwrap_or_default();
                let heard = Heard::from_headers(status, response.headers(), clock, provider).with_body(&body);
                let fallback = || format!("The provider refused the WebSocket with status {status}.");
                Reply::Declined(heard, Declined::from_body(status, &body, fallback))
            }
            Err(e) => Reply::Failed(failed(e.to_string())),
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
    let upstream = gateway.upstream();
    let base = upstream.base_for(entry);
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
    // The handshake is authenticated as the provider authenticates a request (a provider that serves no
    // WebSocket never gets one: `Provider::serves`).
    let mut outgoing = crate::provider::Outgoing {
        method: &http::Method::GET,
        path_and_query: "/responses",
        headers: request.headers_mut(),
        body: Bytes::new(),
    };
    entry
        .provider
        .get()
        .prepare(&entry.secret, &mut outgoing)
        .map_err(|detail| UpstreamError::Credential { base: base.to_owned(), detail })?;
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
    trace.client(&scope);
    let raw = Bytes::copy_from_slice(first.as_bytes());
    let incoming = Incoming {
        seq: trace.seq(),
        operation: Operation::ResponsesCreate,
        scope: &scope.tag,
        pool: &scope.pool,
        path: "/v1/responses",
        headers: &headers,
        body: &raw,
    };
    let admitted = match pipeline::admit(&gateway, &incoming, Entry::SocketOpen, &mut trace) {
        Ok(admitted) => admitted,
        Err(error) => return refuse(client, trace, &error).await,
    };
    let finding = admitted.decision.finding_org();
    let mut handshake =
        Handshake { gateway: &gateway, headers: &headers, first: finding.then(|| admitted.body.clone()) };
    match pipeline::attempt_all(&gateway, &admitted, &mut handshake, &mut trace).await {
        Settled::Served { key, guard, accepted } => {
            let completion = pipeline::completion(&admitted, &key);
            let Some(bound) = bind(&gateway, accepted, guard, key, &admitted, &mut client, completion, trace).await
            else {
                return;
            };
            pumps::relay(gateway, client, bound, headers, scope).await;
        }
        Settled::Relayed { key, declined } => {
            let end = End { served_by: Some(key), status: declined.status, ..End::default() };
            let _ = client.send(error_frame(declined.status, &declined.code, &declined.message, None)).await;
            trace.finish(end);
            let _ = client.send(AxumMessage::Close(None)).await;
        }
        Settled::Failed(Fallback::Upstream(declined)) => {
            let _ = client.send(error_frame(declined.status, &declined.code, &declined.message, None)).await;
            trace.finish(End { status: declined.status, ..End::default() });
            let _ = client.send(AxumMessage::Close(None)).await;
        }
        Settled::Failed(Fallback::Keymux(error)) => refuse(client, trace, &error).await,
    }
}

/// The first text frame; `None` when the client closed or sent something else.
async fn first_frame(client: &mut WebSocket) -> Option<Utf8Bytes> {
    loop {
        match client.recv().await {
            Some(Ok(AxumMessage::Text(text))) => return Some(text),
            Some(Ok(AxumMessage::Binary(_))) => {
                let _ = client.send(binary_refused_frame()).await;
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
    completion: Completion,
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
    /// The upstream's first answer, when it was read while finding the session's organization.
    answer: Option<UpMessage>,
    /// The first frame replayed encrypted content without a marker, and this key's organization read it.
    found: bool,
}

/// Sends the first frame on the freshly opened upstream socket (unless it went with the attempt); its
/// answer finishes the first turn.
#[expect(clippy::too_many_arguments, reason = "everything the first turn hands to the bound socket")]
async fn bind(
    gateway: &Gateway,
    opened: Opened,
    guard: InFlight,
    key: KeyId,
    admitted: &Admitted,
    client: &mut WebSocket,
    completion: Completion,
    mut trace: Trace,
) -> Option<Bound> {
    trace.serving(&key);
    let Opened { socket: mut upstream, answer } = opened;
    let text = String::from_utf8_lossy(&admitted.body).into_owned();
    // While finding the organization, the first frame went with the attempt that was answered.
    if answer.is_none() && upstream.send(UpMessage::Text(text.into())).await.is_err() {
        let _ = client.send(lost_state_frame()).await;
        trace.finish(End { served_by: Some(key), status: 502, error: Some("upstream_cut"), usage: None });
        return None;
    }
    let tagger = pipeline::tagger_for(gateway, Operation::ResponsesCreate, &guard);
    let turns = Arc::new(Mutex::new(VecDeque::from([Turn { trace, completion }])));
    let found = admitted.facts.unmarked_encrypted;
    Some(Bound { upstream, guard, tagger, key, turns, answer, found })
}

/// Whether a frame ends its turn.
#[derive(Debug, PartialEq)]
pub(super) enum TurnEnd {
    Open,
    Completed(crate::relay::AnswerEnd),
    /// `response.incomplete`, with the usage it is billed for and the reasoning its response says the
    /// provider dropped.
    Incomplete(crate::relay::AnswerEnd),
    Failed,
}

pub(super) fn turn_end(text: &str) -> TurnEnd {
    // Built once: a searcher costs more to build than to run over one frame.
    static ENDS: std::sync::LazyLock<[memchr::memmem::Finder<'static>; 4]> = std::sync::LazyLock::new(|| {
        [b"response.completed".as_slice(), b"\"error\"", b"response.failed", b"response.incomplete"]
            .map(memchr::memmem::Finder::new)
    });
    if ENDS.iter().all(|end| end.find(text.as_bytes()).is_none()) {
        return TurnEnd::Open;
    }
    let Some(event) = crate::relay::EndEvent::read(text.as_bytes()) else { return TurnEnd::Open };
    match event.kind() {
        Some("response.completed") => TurnEnd::Completed(event.response_end()),
        Some("response.incomplete") => TurnEnd::Incomplete(event.response_end()),
        Some("error" | "response.failed") => TurnEnd::Failed,
        _ => TurnEnd::Open,
    }
}
