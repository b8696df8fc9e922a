//! Server-sent event bodies: pumping a planned response or chat completion to the client event
//! by event, with the stream-shaping faults applied and the plan's effects committed only when
//! its last event goes out.

use std::sync::Arc;

use axum::body::Bytes;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::chat::{self, ChatPlan};
use crate::exchange::{cut_error, Chunk, Shaping, FLUSH_GRACE};
use crate::responses::{self, Plan};
use crate::state::State;

/// One SSE event: `event: <type>` and `data: <json>`.
pub(crate) fn sse_event(event: &Value) -> Bytes {
    let kind = event.get("type").and_then(Value::as_str).unwrap_or("message");
    Bytes::from(format!("event: {kind}\ndata: {event}\n\n"))
}

/// One Chat Completions chunk: `data: <json>`.
pub(crate) fn chat_frame(chunk: &Value) -> Bytes {
    Bytes::from(format!("data: {chunk}\n\n"))
}

/// Streams a `response.create` plan.
pub(crate) async fn pump_responses(state: Arc<State>, plan: Plan, shaping: Shaping, tx: mpsc::Sender<Chunk>) {
    responses::begin(&state, &plan);
    let frames = plan.events.iter().map(sse_event).collect();
    let commit = || {
        responses::commit(&state, &plan);
        state.stream_ends_now();
    };
    pump(frames, shaping, &tx, commit, || responses::fail(&state, &plan)).await;
}

/// Streams a chat completion plan, `data: {chunk}` … `data: [DONE]`.
pub(crate) async fn pump_chat(state: Arc<State>, plan: ChatPlan, shaping: Shaping, tx: mpsc::Sender<Chunk>) {
    let mut frames: Vec<Bytes> = plan.chunks.iter().map(chat_frame).collect();
    frames.push(Bytes::from_static(b"data: [DONE]\n\n"));
    pump(frames, shaping, &tx, || chat::commit(&state, &plan), || {}).await;
}

/// `Fault::StreamErrorQuotesKey`: the stream's first frame, then an error quoting `secret` in a shape
/// with no `type` (`event: error` on a Responses stream, a plain `data:` chunk on Chat Completions),
/// and the end. The plan's effects are never committed.
pub(crate) async fn pump_leak(first: Bytes, chat: bool, secret: String, tx: mpsc::Sender<Chunk>) {
    let error = serde_json::json!({"error": {"message": format!("Upstream trace for key={secret}"), "code": "trace"}});
    let frame = if chat { format!("data: {error}\n\n") } else { format!("event: error\ndata: {error}\n\n") };
    for frame in [first, Bytes::from(frame)] {
        if tx.send(Ok(frame)).await.is_err() {
            return;
        }
    }
}

/// Sends `frames` in order. `commit` runs just before the last frame goes out and `fail`
/// just before a `CutAfterEvents` fault breaks the stream off, so that a client that reacts
/// to what it received already finds the effects. A client that goes away does not stop
/// the plan: like OpenAI, the response still completes.
async fn pump(
    frames: Vec<Bytes>,
    shaping: Shaping,
    tx: &mpsc::Sender<Chunk>,
    commit: impl FnOnce(),
    fail: impl FnOnce(),
) {
    let total = frames.len();
    let mut commit = Some(commit);
    let mut open = true;
    for (i, frame) in frames.into_iter().enumerate() {
        if shaping.cut == Some(i) {
            fail();
            tokio::time::sleep(FLUSH_GRACE).await;
            let _ = tx.send(Err(cut_error())).await;
            return;
        }
        if i > 0 && open {
            if let Some(d) = shaping.deltas {
                tokio::time::sleep(d).await;
            }
        }
        if i + 1 == total {
            if let Some(commit) = commit.take() {
                commit();
            }
        }
        if open {
            open = tx.send(Ok(frame)).await.is_ok();
        }
    }
    // A slow stream also ends a moment after its last event, as a real one may: the end of the body
    // is then a write of its own.
    if let (true, Some(d)) = (open, shaping.deltas) {
        tokio::time::sleep(d).await;
    }
}
