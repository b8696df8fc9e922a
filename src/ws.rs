//! Responses over WebSocket (Codex with `supports_websockets = true`). The upstream keeps connection-local
//! state (`previous_response_id` with `store:false`), so a client socket is bound to one upstream socket,
//! and so to one key, for its whole life.
//!
//! The first `response.create` frame picks the key (pinned by its markers, balanced otherwise). Then two
//! pumps relay frames 1:1; each awaits the other side's send, so at most one frame per direction is in
//! Keymux at a time. Frames are rewritten like SSE events: markers stripped on the way in, tagged on the
//! way out. If the upstream socket is lost, the client gets the error frame OpenAI uses for lost state
//! (`previous_response_not_found`), on which Codex reconnects and resends the full history.

use std::sync::Arc;

use axum::extract::ws::{CloseFrame as AxumClose, Message as AxumMessage, Utf8Bytes, WebSocket};
use bytes::Bytes;
use futures::{SinkExt as _, StreamExt as _};
use http::HeaderMap;
use serde_json::json;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame as UpClose;
use tokio_tungstenite::tungstenite::Message as UpMessage;

use crate::events::{Attempt, FailureKind, RequestRecord, Transport};
use crate::facts::{self, FactsError, Operation};
use crate::gateway::Gateway;
use crate::keys::KeyId;
use crate::pool::{InFlight, Outcome};
use crate::relay::Tagger;
use crate::router::{self, Decision, Reason};

/// Request headers that belong to the client's own WebSocket handshake and are never forwarded.
const HANDSHAKE_HEADERS: &[&str] = &[
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-extensions",
    "sec-websocket-protocol",
    "sec-websocket-accept",
];

/// Largest client frame Keymux accepts (the same cap as HTTP bodies is applied by the caller's config).
pub const MAX_FRAME_BYTES: usize = 64 * 1024 * 1024;

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

/// Serves one client socket until either side closes.
pub async fn serve_socket(
    gateway: Arc<Gateway>,
    mut client: WebSocket,
    headers: HeaderMap,
    scope: crate::tokens::ClientScope,
) {
    // The first frame decides the key.
    let first = loop {
        match client.recv().await {
            Some(Ok(AxumMessage::Text(text))) => break text,
            Some(Ok(AxumMessage::Binary(_))) => {
                let _ =
                    client.send(error_frame(400, "invalid_request", "Keymux expects JSON text frames.", None)).await;
                return;
            }
            Some(Ok(AxumMessage::Ping(_) | AxumMessage::Pong(_))) => continue,
            Some(Ok(AxumMessage::Close(_))) | Some(Err(_)) | None => return,
        }
    };
    let Some(bound) = open_upstream(&gateway, &mut client, &headers, first, &scope).await else {
        let _ = client.send(AxumMessage::Close(None)).await;
        return;
    };
    relay(gateway, client, bound, scope).await;
}

/// Routes the first frame, opens the upstream socket on the chosen key (trying the next candidate when
/// the handshake fails), and sends the frame. `None` when the client got an error frame instead.
async fn open_upstream(
    gateway: &Arc<Gateway>,
    client: &mut WebSocket,
    headers: &HeaderMap,
    first: Utf8Bytes,
    scope: &crate::tokens::ClientScope,
) -> Option<Bound> {
    let started = Instant::now();
    let seq = gateway.next_seq();
    let raw = Bytes::copy_from_slice(first.as_bytes());
    let extracted = match read_frame(gateway, seq, scope, &raw) {
        Ok(e) => e,
        Err(FactsError::Body(detail)) => {
            let _ = client
                .send(error_frame(400, "invalid_json", &format!("The frame is not valid JSON ({detail})."), None))
                .await;
            return None;
        }
        Err(FactsError::Marker(e)) => {
            let _ = client.send(error_frame(400, "keymux_invalid_marker", &format!("Keymux: {e}."), None)).await;
            return None;
        }
    };
    let mut facts = extracted.facts;
    let mut body = extracted.body;
    if facts.pins.is_empty() {
        facts.session_hint = facts.session.and_then(|s| gateway.hints().get(&s, Instant::now()));
    }
    facts.remembered = gateway.remembered(&facts);
    facts.rotation = gateway.next_turn(&facts);
    let decision = router::decide(&facts, &gateway.pool().view(), Instant::now(), gateway.policy());
    if let Some(refusal) = decision.refusal.clone() {
        let err = gateway.refusal_error(refusal);
        let retry_after = match &err {
            crate::error::ApiError::AllCooling { retry_after_secs, .. } => Some(*retry_after_secs),
            _ => None,
        };
        let json = err.to_json();
        let message = json["error"]["message"].as_str().unwrap_or("refused");
        let code = json["error"]["code"].as_str().unwrap_or("keymux_refused");
        let _ = client.send(error_frame(err.status().as_u16(), code, message, retry_after)).await;
        publish(gateway, &facts, decision, Vec::new(), None, err.status().as_u16(), started, 0);
        return None;
    }
    let mut rescued_items = 0;
    if !decision.rescued_orgs.is_empty() {
        if let Some((rescued, dropped)) = gateway.pool().markers().drop_org_items(&raw, &decision.rescued_orgs) {
            rescued_items = dropped;
            if let Ok(stripped) = gateway.pool().markers().strip(&rescued) {
                body = Bytes::from(stripped.body.into_owned());
            }
        }
    }

    let mut attempts = Vec::new();
    for key in decision.candidates().cloned().collect::<Vec<_>>() {
        let Some(guard) = gateway.pool().begin(&key) else {
            continue;
        };
        let attempt_started = Instant::now();
        let result = connect(gateway, &guard, headers).await;
        let duration_ms = u32::try_from(attempt_started.elapsed().as_millis()).unwrap_or(u32::MAX);
        let now = Instant::now();
        match result {
            Ok((mut upstream, org)) => {
                gateway.pool().apply(&Outcome {
                    key: key.clone(),
                    at: now,
                    kind: crate::pool::OutcomeKind::Served,
                    org,
                });
                attempts.push(Attempt { key: key.clone(), status: Some(101), failure: None, duration_ms });
                let text = String::from_utf8_lossy(&body).into_owned();
                if upstream.send(UpMessage::Text(text.into())).await.is_err() {
                    let _ = client.send(lost_state_frame()).await;
                    return None;
                }
                if let Some(session) = facts.session {
                    gateway.hints().insert(session, key.clone(), now);
                }
                let org = gateway.pool().org_tag(&key)?;
                let tagger = Tagger::new(gateway.pool().markers().clone(), key.clone(), org);
                let signal = facts.signal.filter(|_| !decision.continuity_hit).map(|s| s.key);
                publish(gateway, &facts, decision, attempts, Some(key.clone()), 101, started, rescued_items);
                return Some(Bound { upstream, guard, tagger, key, first_signal: signal });
            }
            Err(HandshakeFailure { status, headers: upstream_headers }) => {
                let (kind, failure) = match status {
                    Some(s) => crate::gateway::classify(s, &upstream_headers),
                    None => (crate::pool::OutcomeKind::Failed, Some(FailureKind::UpstreamUnreachable)),
                };
                let org = upstream_headers.get("openai-organization").and_then(|v| v.to_str().ok()).map(str::to_owned);
                gateway.pool().apply(&Outcome { key: key.clone(), at: now, kind, org });
                attempts.push(Attempt {
                    key,
                    status: status.map(|s| s.as_u16()),
                    failure: failure.or(Some(FailureKind::UpstreamUnreachable)),
                    duration_ms,
                });
            }
        }
    }
    // No candidate could open a socket: tell the client the way OpenAI would, so Codex retries.
    let retry_policy = router::Policy { max_attempts: 1, ..*gateway.policy() };
    let frame = match router::decide(&facts, &gateway.pool().view(), Instant::now(), &retry_policy).refusal {
        Some(router::Refusal::AllCooling { retry_after_secs, cooling }) => error_frame(
            429,
            "rate_limit_exceeded",
            &format!("All {cooling} Keymux key(s) are cooling down after rate limits; the first one frees in {retry_after_secs}s."),
            Some(retry_after_secs),
        ),
        _ => error_frame(502, "keymux_upstream_unavailable", "Keymux could not open an upstream WebSocket with any usable key.", None),
    };
    let _ = client.send(frame).await;
    publish(gateway, &facts, decision, attempts, None, 502, started, rescued_items);
    None
}

/// Reads a `response.create` frame like a Responses create body: facts, markers stripped.
fn read_frame(
    gateway: &Gateway,
    seq: u64,
    scope: &crate::tokens::ClientScope,
    raw: &Bytes,
) -> Result<facts::Extracted, FactsError> {
    facts::extract(seq, Operation::ResponsesCreate, &scope.0, "/v1/responses", raw, gateway.pool().markers())
}

/// A client socket's upstream side: the socket, the key it is bound to, and what to tag with.
struct Bound {
    upstream: Upstream,
    /// The key stays in flight for the connection's life.
    guard: InFlight,
    tagger: Tagger,
    key: KeyId,
    /// The first frame's soft-affinity signal (later frames are bound and never teach).
    first_signal: Option<crate::markers::SessionKey>,
}

struct HandshakeFailure {
    status: Option<http::StatusCode>,
    headers: HeaderMap,
}

async fn connect(
    gateway: &Gateway,
    guard: &InFlight,
    client_headers: &HeaderMap,
) -> Result<(Upstream, Option<String>), HandshakeFailure> {
    let entry = guard.entry();
    let base = gateway.upstream().base_for(entry);
    let url = match base.split_once("://") {
        Some(("https", rest)) => format!("wss://{rest}/responses"),
        Some((_, rest)) => format!("ws://{rest}/responses"),
        None => format!("ws://{base}/responses"),
    };
    let fail = || HandshakeFailure { status: None, headers: HeaderMap::new() };
    let mut request = url.into_client_request().map_err(|_| fail())?;
    for (name, value) in crate::upstream::forward_request_headers(client_headers).iter() {
        if !HANDSHAKE_HEADERS.contains(&name.as_str()) {
            request.headers_mut().append(name.clone(), value.clone());
        }
    }
    let (name, value) = crate::upstream::auth_header(entry);
    request.headers_mut().insert(name, value);
    let connecting = tokio_tungstenite::connect_async(request);
    match tokio::time::timeout(gateway.upstream().connect_timeout(), connecting).await {
        Err(_) => Err(fail()),
        Ok(Ok((socket, response))) => {
            let org = response.headers().get("openai-organization").and_then(|v| v.to_str().ok()).map(str::to_owned);
            Ok((socket, org))
        }
        Ok(Err(tokio_tungstenite::tungstenite::Error::Http(response))) => {
            Err(HandshakeFailure { status: Some(response.status()), headers: response.headers().clone() })
        }
        Ok(Err(_)) => Err(fail()),
    }
}

fn lost_state_frame() -> AxumMessage {
    error_frame(
        400,
        "previous_response_not_found",
        "The upstream WebSocket connection was lost, and with it the state of this conversation. Resend the full history without previous_response_id.",
        None,
    )
}

/// The two pumps, until either side closes.
async fn relay(gateway: Arc<Gateway>, client: WebSocket, bound: Bound, scope: crate::tokens::ClientScope) {
    let Bound { upstream, guard, tagger, key, first_signal } = bound;
    let (mut client_tx, mut client_rx) = client.split();
    let (mut up_tx, mut up_rx) = upstream.split();
    let org = gateway.pool().org_tag(&key);

    enum Stop {
        Misbound(KeyId),
        Refused(String),
    }
    use Stop::{Misbound, Refused};
    let (notice_tx, mut notice_rx) = tokio::sync::mpsc::channel::<AxumMessage>(1);

    let inbound = {
        let gateway = gateway.clone();
        let key = key.clone();
        async move {
            while let Some(message) = client_rx.next().await {
                let forwarded = match message {
                    Ok(AxumMessage::Text(text)) => {
                        let started = Instant::now();
                        let raw = Bytes::copy_from_slice(text.as_bytes());
                        let seq = gateway.next_seq();
                        match read_frame(&gateway, seq, &scope, &raw) {
                            Ok(extracted) => {
                                // Bound to this socket: markers of another organization cannot be read
                                // here. Remember where the session belongs and make the client reconnect
                                // (on `previous_response_not_found` Codex reconnects and resends all).
                                if let Some(pin) = extracted
                                    .facts
                                    .pins
                                    .iter()
                                    .find(|p| Some(p.org) != org && p.key != key)
                                    // A response made on another socket's key cannot be continued here.
                                    .or(extracted.facts.continuity.as_ref().filter(|c| c.key != key))
                                {
                                    if let Some(session) = extracted.facts.session {
                                        gateway.hints().insert(session, pin.key.clone(), Instant::now());
                                    }
                                    return Err(Misbound(pin.key.clone()));
                                }
                                if let Some(session) = extracted.facts.session {
                                    gateway.hints().insert(session, key.clone(), Instant::now());
                                }
                                let decision = bound_decision(seq, &key);
                                publish(
                                    &gateway,
                                    &extracted.facts,
                                    decision,
                                    Vec::new(),
                                    Some(key.clone()),
                                    101,
                                    started,
                                    0,
                                );
                                UpMessage::Text(String::from_utf8_lossy(&extracted.body).into_owned().into())
                            }
                            Err(e) => return Err(Refused(format!("Keymux: {e}."))),
                        }
                    }
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
    };

    let outbound_gateway = gateway.clone();
    let outbound_key = key.clone();
    let outbound = async move {
        // Only the first frame's answer teaches the soft-affinity table: later frames are bound.
        let mut first_signal = first_signal;
        loop {
            let message = tokio::select! {
                notice = notice_rx.recv() => {
                    if let Some(notice) = notice {
                        let _ = client_tx.send(notice).await;
                        let _ = client_tx.send(AxumMessage::Close(None)).await;
                    }
                    return;
                }
                message = up_rx.next() => match message {
                    Some(message) => message,
                    None => break,
                },
            };
            let forwarded = match message {
                Ok(UpMessage::Text(text)) if memchr::memmem::find(text.as_bytes(), b"response.completed").is_some() => {
                    if let Ok(event) = serde_json::from_str::<serde_json::Value>(&text) {
                        if event["type"] == "response.completed" {
                            let usage = crate::relay::Usage::from_json(&event["response"]["usage"]);
                            let learn = crate::gateway::Learn {
                                key: outbound_key.clone(),
                                operation: Operation::ResponsesCreate,
                                signal: first_signal.take(),
                            };
                            outbound_gateway.completed(learn, usage);
                        }
                    }
                    match tagger.tag_json(text.as_bytes()) {
                        Some(tagged) => AxumMessage::Text(String::from_utf8_lossy(&tagged).into_owned().into()),
                        None => AxumMessage::Text(text.as_str().into()),
                    }
                }
                Ok(UpMessage::Text(text)) => match tagger.tag_json(text.as_bytes()) {
                    Some(tagged) => AxumMessage::Text(String::from_utf8_lossy(&tagged).into_owned().into()),
                    None => AxumMessage::Text(text.as_str().into()),
                },
                Ok(UpMessage::Binary(bytes)) => AxumMessage::Binary(bytes),
                Ok(UpMessage::Ping(p)) => AxumMessage::Ping(p),
                Ok(UpMessage::Pong(p)) => AxumMessage::Pong(p),
                Ok(UpMessage::Close(frame)) => {
                    let close = frame.map(|f| AxumClose { code: u16::from(f.code), reason: f.reason.as_str().into() });
                    let _ = client_tx.send(AxumMessage::Close(close)).await;
                    return;
                }
                Ok(UpMessage::Frame(_)) => continue,
                Err(_) => break,
            };
            if client_tx.send(forwarded).await.is_err() {
                return;
            }
        }
        // The upstream went away without a close: its state is gone.
        let _ = client_tx.send(lost_state_frame()).await;
        let _ = client_tx.send(AxumMessage::Close(None)).await;
    };

    tokio::pin!(inbound);
    tokio::pin!(outbound);
    tokio::select! {
        result = &mut inbound => {
            match result {
                Ok(()) => {}
                Err(Misbound(other)) => {
                    tracing::info!(key = %key, other = %other, "session belongs to another organization; asking the client to reconnect");
                    let _ = notice_tx.send(lost_state_frame()).await;
                }
                Err(Refused(message)) => {
                    tracing::warn!(key = %key, "closing websocket: {message}");
                    let _ = notice_tx.send(error_frame(400, "keymux_invalid_marker", &message, None)).await;
                }
            }
            // Let the upstream's answer to a close (or the notice) reach the client, briefly.
            let _ = tokio::time::timeout(std::time::Duration::from_secs(2), outbound).await;
        }
        () = &mut outbound => {}
    }
    drop(guard);
}

fn bound_decision(seq: u64, key: &KeyId) -> Decision {
    Decision {
        seq,
        choice: Some(key.clone()),
        fallbacks: Vec::new(),
        reasons: vec![Reason::WebSocketBound { key: key.clone() }],
        affinity_source: router::AffinitySource::None,
        affinity_state: router::AffinityState::NoSignal,
        continuity_hit: true,
        pin: None,
        rescued_orgs: Vec::new(),
        refusal: None,
    }
}

#[expect(clippy::too_many_arguments, reason = "one record is assembled from every part of the frame")]
fn publish(
    gateway: &Gateway,
    facts: &facts::RequestFacts,
    decision: Decision,
    attempts: Vec<Attempt>,
    served_by: Option<KeyId>,
    status: u16,
    started: Instant,
    rescued_items: usize,
) {
    gateway.publish(RequestRecord {
        at_unix_ms: crate::events::unix_ms(),
        operation: facts.operation,
        transport: Transport::WebSocket,
        model: facts.model.clone(),
        stream: true,
        decision,
        attempts,
        served_by,
        status,
        error: None,
        upstream_code: None,
        rescued_items,
        duration_ms: u32::try_from(started.elapsed().as_millis()).unwrap_or(u32::MAX),
    });
}
