//! `GET /keymux/api/events`: the live event stream as Server-Sent Events. A subscriber resumes with
//! `Last-Event-ID` (or `?after=`) from the bounded ring; one that fell too far behind, or resumed too
//! late, gets a `lagged` event saying how many events it missed. A heartbeat comment keeps an idle
//! connection open through proxies, and the stream ends when the gateway shuts down, and, opened with a
//! dashboard session, when that session ends (logout, expiry, pushed out): nothing is delivered after
//! it, whatever was already waiting. Subscribers have
//! a cap of their own (`max_event_streams`), and their connections never count against `/v1`'s.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, Response};
use axum::response::IntoResponse;
use axum::Extension;
use bytes::Bytes;
use serde::Deserialize;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::access::{Caller, Refused, SessionWatch};
use crate::error::ApiError;
use crate::events::{Envelope, Event};
use crate::gateway::Gateway;
use crate::limits::{Connection, StreamSeat};

/// How often an idle stream gets a heartbeat comment.
pub const HEARTBEAT: Duration = Duration::from_secs(15);

#[derive(Deserialize)]
pub(super) struct After {
    after: Option<u64>,
}

/// One SSE frame for an event.
fn frame(envelope: &Envelope) -> Bytes {
    let data = serde_json::to_string(envelope).unwrap_or_else(|_| "{}".into());
    Bytes::from(format!("id: {}\nevent: {}\ndata: {data}\n\n", envelope.id, envelope.event.name()))
}

/// The `lagged` frame (it has no place in the stream, so no id).
fn lagged(missed: u64, at_unix_ms: u64) -> Bytes {
    let envelope = Envelope { id: 0, at_unix_ms, event: Event::Lagged { missed } };
    let data = serde_json::to_string(&envelope).unwrap_or_else(|_| "{}".into());
    Bytes::from(format!("event: lagged\ndata: {data}\n\n"))
}

/// The session a dashboard's stream ends with; one that ended since the guard let it through is
/// refused, never served as if it had none.
fn watch(gw: &Gateway, headers: &HeaderMap, caller: Caller) -> Result<Option<SessionWatch>, ApiError> {
    match caller {
        Caller::Admin => Ok(None),
        Caller::Dashboard => gw
            .access()
            .watch_session(headers, gw.clock().now())
            .map(Some)
            .ok_or(ApiError::ControlDenied { reason: Refused::Invalid }),
    }
}

/// The answer's body: what the pump sent, until it ends or `cut` (its session ended) drops the rest.
/// The seat goes with it: the stream counts until the subscriber is gone.
fn body(rx: mpsc::Receiver<Result<Bytes, std::io::Error>>, seat: Option<StreamSeat>, cut: CancellationToken) -> Body {
    let stream = futures::stream::unfold((rx, seat, cut), |(mut rx, seat, cut)| async move {
        let item = tokio::select! {
            biased;
            () = cut.cancelled() => None,
            item = rx.recv() => item,
        };
        item.map(|item| (item, (rx, seat, cut)))
    });
    Body::from_stream(stream)
}

pub(super) async fn events(
    State(gw): State<Arc<Gateway>>,
    connection: Option<Extension<Connection>>,
    headers: HeaderMap,
    Query(q): Query<After>,
) -> Response<Body> {
    let session = match super::guard(&gw, &headers).and_then(|caller| watch(&gw, &headers, caller)) {
        Ok(session) => session,
        Err(e) => return e.into_response(),
    };
    // Served outside `server` (as in unit tests), a stream has no connection to count.
    let seat = match connection.map(|Extension(c)| (c.open_stream(), c)) {
        Some((None, c)) => return ApiError::TooManyStreams { max: c.max_streams() }.into_response(),
        Some((seat, _)) => seat,
        None => None,
    };
    let resume = headers.get("last-event-id").and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse().ok());
    // A subscriber that names no place starts from now.
    let after = q.after.or(resume).unwrap_or_else(|| gw.events().last_id());
    let (mut live, replay) = gw.events().resume(after);
    tracing::debug!(after, "an event stream subscriber connected");
    let closing = gw.closing();
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(64);
    // Cut when the session ends: what the body had not yet sent is dropped, not delivered.
    let cut = CancellationToken::new();
    let cutting = cut.clone();
    tokio::spawn(async move {
        let mut last = after;
        let send = |bytes: Bytes| tx.send(Ok(bytes));
        if send(Bytes::from_static(b"retry: 2000\n\n")).await.is_err() {
            return;
        }
        if replay.missed > 0 && send(lagged(replay.missed, gw.clock().unix_ms())).await.is_err() {
            return;
        }
        for envelope in replay.events {
            last = envelope.id;
            if send(frame(&envelope)).await.is_err() {
                return;
            }
        }
        let mut beat = tokio::time::interval(HEARTBEAT);
        beat.tick().await;
        let session_over = async {
            match &session {
                Some(session) => session.over(gw.access(), gw.clock()).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(session_over);
        loop {
            // Biased: an ended session or a closing gateway is seen before any event waiting beside it.
            let bytes = tokio::select! {
                biased;
                () = closing.cancelled() => return,
                () = &mut session_over => {
                    cutting.cancel();
                    return;
                }
                _ = beat.tick() => Bytes::from_static(b": keepalive\n\n"),
                received = live.recv() => match received {
                    Ok(envelope) if envelope.id <= last => continue,
                    Ok(envelope) => {
                        last = envelope.id;
                        frame(&envelope)
                    }
                    Err(RecvError::Lagged(missed)) => lagged(missed, gw.clock().unix_ms()),
                    Err(RecvError::Closed) => return,
                },
            };
            if send(bytes).await.is_err() {
                return;
            }
        }
    });
    let mut response = Response::new(body(rx, seat, cut));
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}
