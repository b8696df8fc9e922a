//! The fake upstream's answers and the load generator's prompts, built once as bytes so that serving
//! or sending them costs no JSON work. Shapes follow `/work/shared/clients/FACTS.md` (§2.4 prompt
//! bodies, §4 event sequence).

use base64::Engine as _;
use bytes::Bytes;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Utf8Bytes;

use crate::args::Mode;

/// The SSE answer is spread over this many milliseconds, one batch of events per millisecond, like a
/// fast model that has its reasoning done and streams a short reply.
pub const SSE_SPAN_MS: u64 = 13;
/// `output_text.delta` events per streamed answer: with the 10 fixed events, 43 in all.
const DELTAS: usize = 33;
/// Characters per delta: the streamed reply is `DELTAS × DELTA_CHARS` long, and appears five times
/// in the stream (deltas, text done, part done, item done, completed), for about 23 KB in all.
const DELTA_CHARS: usize = 48;
/// Reply length in the non-streamed answer, chosen so that the answer is about 4 KB.
const JSON_TEXT_CHARS: usize = 1000;
/// Reply length in the chat completion, chosen so that the answer is about 2 KB.
const CHAT_TEXT_CHARS: usize = 1500;
/// Target size of every prompt body.
const PROMPT_BYTES: usize = 2048;

const RESP_ID: &str = "resp_0b7c2f9a6d1e4c3b8a5f0e9d7c6b5a4f3e2d1c0b9a8f7e6d";
const RS_ID: &str = "rs_0b7c2f9a6d1e4c3b8a5f0e9d7c6b5a4f3e2d1c0b9a8f7e6d5c";
const MSG_ID: &str = "msg_0b7c2f9a6d1e4c3b8a5f0e9d7c6b5a4f3e2d1c0b9a8f7e6d5";
const ORG: &str = "org-bench";

/// Everything the fake upstream sends. `'static` (leaked once) so that cloning a `Bytes` or a
/// `Utf8Bytes` per answer is a pointer copy, without the atomic reference counts of shared buffers.
pub struct Canned {
    /// `POST /v1/responses` without streaming.
    pub json: Bytes,
    /// `POST /v1/responses` streamed: the SSE bytes in `SSE_SPAN_MS + 1` batches, one per millisecond.
    pub sse_batches: Vec<Bytes>,
    /// The same events as WebSocket text frames, one event object per frame.
    pub ws_frames: Vec<Utf8Bytes>,
    /// `POST /v1/chat/completions`.
    pub chat: Bytes,
    /// `GET /v1/models`, which Keymux calls once per key at start.
    pub models: Bytes,
    /// Events in the streamed answer.
    pub events: usize,
    /// Bytes in the streamed answer.
    pub sse_bytes: usize,
}

/// The organization header value every answer carries.
pub fn org() -> &'static str {
    ORG
}

/// Builds the answers once.
pub fn answers() -> &'static Canned {
    let events = sse_events();
    let sse: Vec<String> =
        events.iter().map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or("message"))).collect();
    let batches = (SSE_SPAN_MS + 1) as usize;
    let mut sse_batches = vec![String::new(); batches];
    for (i, event) in sse.iter().enumerate() {
        sse_batches[i * batches / sse.len()].push_str(event);
    }
    let canned = Canned {
        json: leak(response("completed", vec![reasoning(true), message(&text(JSON_TEXT_CHARS), "completed")], true)),
        sse_batches: sse_batches.into_iter().map(leak_str).collect(),
        ws_frames: events.iter().map(|e| Utf8Bytes::from_static(Box::leak(e.to_string().into_boxed_str()))).collect(),
        chat: leak(chat_completion()),
        models: leak(json!({"object":"list","data":[
            {"id":"gpt-5.5","object":"model","created":1767225600,"owned_by":"system"},
            {"id":"gpt-5.5-mini","object":"model","created":1767225600,"owned_by":"system"}]})),
        events: events.len(),
        sse_bytes: sse.iter().map(String::len).sum(),
    };
    Box::leak(Box::new(canned))
}

fn leak(value: Value) -> Bytes {
    leak_str(value.to_string())
}

fn leak_str(text: String) -> Bytes {
    Bytes::from_static(Box::leak(text.into_boxed_str()).as_bytes())
}

/// Opaque bytes that look like OpenAI's sealed reasoning: `gAAAAA` and about 2 KB of base64.
fn encrypted_content() -> String {
    // A fixed xorshift stream: the same bytes every run, with no rand state to carry.
    let mut x: u32 = 0x9e37_79b9;
    let sealed: Vec<u8> = (0..1530)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x.to_le_bytes()[0]
        })
        .collect();
    format!("gAAAAA{}", base64::engine::general_purpose::URL_SAFE.encode(sealed))
}

/// Plain words, no characters JSON must escape, exactly `chars` long.
fn text(chars: usize) -> String {
    "The gateway relays this reply byte for byte while it counts tokens and tags org-bound values. "
        .chars()
        .cycle()
        .take(chars)
        .collect()
}

fn reasoning(sealed: bool) -> Value {
    if sealed {
        json!({"id": RS_ID, "type": "reasoning", "summary": [], "encrypted_content": encrypted_content()})
    } else {
        json!({"id": RS_ID, "type": "reasoning", "summary": []})
    }
}

fn message(reply: &str, status: &str) -> Value {
    let content = if status == "completed" {
        json!([{"type": "output_text", "text": reply, "annotations": [], "logprobs": []}])
    } else {
        json!([])
    };
    json!({"id": MSG_ID, "type": "message", "status": status, "role": "assistant", "content": content})
}

fn usage() -> Value {
    json!({"input_tokens": 1536, "input_tokens_details": {"cached_tokens": 1024}, "output_tokens": 420,
        "output_tokens_details": {"reasoning_tokens": 128}, "total_tokens": 1956})
}

/// A Responses object with the fields the API returns, so that its size and shape are realistic.
fn response(status: &str, output: Vec<Value>, with_usage: bool) -> Value {
    json!({
        "id": RESP_ID, "object": "response", "created_at": 1_767_225_600, "status": status, "background": false,
        "error": null, "incomplete_details": null, "instructions": null, "max_output_tokens": null,
        "model": "gpt-5.5-2026-01-01", "output": output, "parallel_tool_calls": true,
        "previous_response_id": null, "reasoning": {"effort": "medium", "summary": null},
        "service_tier": "default", "store": false, "temperature": 1.0,
        "text": {"format": {"type": "text"}, "verbosity": "low"}, "tool_choice": "auto", "tools": [],
        "top_p": 1.0, "truncation": "disabled", "usage": if with_usage { usage() } else { Value::Null },
        "user": null, "metadata": {}
    })
}

/// The 43 events of FACTS.md §4, with `sequence_number` as the API sends it.
fn sse_events() -> Vec<Value> {
    let reply = text(DELTAS * DELTA_CHARS);
    let part = json!({"type": "output_text", "text": reply, "annotations": [], "logprobs": []});
    let mut events = vec![
        json!({"type": "response.created", "response": response("in_progress", vec![], false)}),
        json!({"type": "response.in_progress", "response": response("in_progress", vec![], false)}),
        json!({"type": "response.output_item.added", "output_index": 0, "item": reasoning(false)}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": reasoning(true)}),
        json!({"type": "response.output_item.added", "output_index": 1, "item": message("", "in_progress")}),
        json!({"type": "response.content_part.added", "item_id": MSG_ID, "output_index": 1, "content_index": 0,
            "part": {"type": "output_text", "text": "", "annotations": []}}),
    ];
    for delta in reply.as_bytes().chunks(DELTA_CHARS) {
        let delta = String::from_utf8_lossy(delta);
        events.push(json!({"type": "response.output_text.delta", "item_id": MSG_ID, "output_index": 1,
            "content_index": 0, "delta": delta, "logprobs": []}));
    }
    events.extend([
        json!({"type": "response.output_text.done", "item_id": MSG_ID, "output_index": 1, "content_index": 0,
            "text": reply, "logprobs": []}),
        json!({"type": "response.content_part.done", "item_id": MSG_ID, "output_index": 1, "content_index": 0,
            "part": part}),
        json!({"type": "response.output_item.done", "output_index": 1, "item": message(&reply, "completed")}),
        json!({"type": "response.completed",
            "response": response("completed", vec![reasoning(true), message(&reply, "completed")], true)}),
    ]);
    for (n, event) in events.iter_mut().enumerate() {
        if let Some(object) = event.as_object_mut() {
            object.insert("sequence_number".into(), n.into());
        }
    }
    events
}

fn chat_completion() -> Value {
    json!({
        "id": "chatcmpl-0b7c2f9a6d1e4c3b8a5f0e9d7c6b5a", "object": "chat.completion", "created": 1_767_225_600,
        "model": "gpt-5.5-2026-01-01",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text(CHAT_TEXT_CHARS),
            "refusal": null, "annotations": []}, "logprobs": null, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 512, "completion_tokens": 380, "total_tokens": 892,
            "prompt_tokens_details": {"cached_tokens": 384, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 64, "audio_tokens": 0,
                "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}},
        "service_tier": "default", "system_fingerprint": null
    })
}

/// One worker's request body (or WebSocket `response.create` frame), about 2 KB, with its own
/// `prompt_cache_key` so that each worker is one session, as each Codex thread is.
pub fn prompt(mode: Mode, session: &str) -> Bytes {
    let shape = |instructions: &str| match mode {
        Mode::Chat => chat_body(instructions),
        Mode::Json | Mode::Sse | Mode::Ws => responses_body(mode, session, instructions),
    };
    // Pad the developer message so that the whole body is `PROMPT_BYTES` long.
    let bare = shape("").to_string().len();
    Bytes::from(shape(&text(PROMPT_BYTES.saturating_sub(bare))).to_string())
}

/// The body shape of FACTS.md §2.4 (Codex over HTTP), reduced to a developer and a user message.
fn responses_body(mode: Mode, session: &str, instructions: &str) -> Value {
    let mut body = serde_json::Map::new();
    if mode == Mode::Ws {
        // Over WebSocket the same fields travel in a `response.create` frame (FACTS.md §2.6).
        body.insert("type".into(), "response.create".into());
    }
    let fields = json!({
        "model": "gpt-5.5", "stream": mode != Mode::Json,
        "input": [
            {"type": "message", "role": "developer", "id": "msg_01a227d7ed087e529dfa0ea02ef63150",
                "content": [{"type": "input_text", "text": instructions}]},
            {"type": "message", "role": "user", "id": "msg_01a227d7ed5a7e529dfa0ea02ef63151",
                "content": [{"type": "input_text", "text": "Say hello. This is turn one."}]}],
        "tools": [], "tool_choice": "auto", "parallel_tool_calls": true,
        "reasoning": {"effort": "medium"}, "store": false,
        "include": ["reasoning.encrypted_content"], "prompt_cache_key": session,
        "text": {"verbosity": "low"}
    });
    if let Value::Object(fields) = fields {
        body.extend(fields);
    }
    Value::Object(body)
}

/// The body shape of FACTS.md §3.7 (pi over Chat Completions), not streamed.
fn chat_body(instructions: &str) -> Value {
    json!({
        "model": "gpt-5.5",
        "messages": [{"role": "developer", "content": instructions},
            {"role": "user", "content": [{"type": "text", "text": "Say hello. This is turn one."}]}],
        "stream": false, "store": false, "max_completion_tokens": 32000, "reasoning_effort": "medium"
    })
}
