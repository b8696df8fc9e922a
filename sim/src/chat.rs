//! Chat Completions: JSON and SSE (`data: {chunk}` … `data: [DONE]`), with a
//! `reasoning_content` field and the organization's prompt cache.
//!
//! Like OpenAI-compatible bridges over the Responses API, a request with a
//! `reasoning_effort` other than `"none"` also gets a non-standard `reasoning_items` array
//! on the assistant message (on the finish chunk when streaming): one reasoning item whose
//! `encrypted_content` is sealed under the serving organization. Replayed assistant
//! messages carrying such items, and any `encrypted_content` elsewhere in `messages`, must
//! decrypt under the serving organization or the request fails with
//! `invalid_encrypted_content`.

use serde_json::{json, Map, Value};

use crate::crypto::validate_input;
use crate::error::ApiError;
use crate::prompt::{header, message_line, tokens_of, Prompt, Transcript};
use crate::state::{Caller, State};
use crate::util::{lock, object_id, random_hex, split_deltas, truncate_chars};

const DELTAS: usize = 4;

/// Everything needed to answer one chat completion.
#[derive(Debug)]
pub(crate) struct ChatPlan {
    pub org: usize,
    pub hashes: Vec<[u8; 32]>,
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    /// The non-streaming body.
    pub completion: Value,
    /// The streaming chunks, without the final `[DONE]`.
    pub chunks: Vec<Value>,
}

fn last_user_text(messages: &[Value]) -> String {
    messages
        .iter()
        .rev()
        .find_map(|m| {
            if m.get("role").and_then(Value::as_str) != Some("user") {
                return None;
            }
            match m.get("content") {
                Some(Value::String(s)) => Some(s.clone()),
                Some(Value::Array(parts)) => {
                    parts.iter().rev().find_map(|p| p.get("text").and_then(Value::as_str).map(str::to_owned))
                }
                _ => None,
            }
        })
        .unwrap_or_default()
}

/// Rejects a `reasoning_items` entry of an assistant message whose `encrypted_content` is
/// present but not a string: it cannot be decrypted. String tokens are checked by
/// [`validate_input`], which sees every `encrypted_content` under `messages`.
fn check_reasoning_item_types(messages: &[Value]) -> Result<(), ApiError> {
    let items = messages
        .iter()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
        .filter_map(|m| m.get("reasoning_items").and_then(Value::as_array))
        .flatten();
    for item in items {
        match item.get("encrypted_content") {
            None | Some(Value::Null) | Some(Value::String(_)) => {}
            Some(_) => {
                let id = item.get("id").and_then(Value::as_str);
                return Err(ApiError::invalid_encrypted_content(id, "Could not decrypt encrypted content."));
            }
        }
    }
    Ok(())
}

/// The request's `messages`, checked: present, an array, and with encrypted content that
/// decrypts under the serving organization.
fn messages(state: &State, caller: &Caller, body: &Map<String, Value>) -> Result<Vec<Value>, ApiError> {
    let messages = match body.get("messages") {
        None | Some(Value::Null) => return Err(ApiError::missing_param("messages")),
        Some(Value::Array(m)) => m.clone(),
        Some(_) => {
            return Err(ApiError::invalid_type(
                "messages",
                "Invalid type for 'messages': expected an array.".to_owned(),
            ))
        }
    };
    check_reasoning_item_types(&messages)?;
    if let Some(all) = body.get("messages") {
        validate_input(&state.org(caller.org).cipher, &state.other_ciphers(caller.org), all)?;
    }
    Ok(messages)
}

/// What one completion says, shared by its JSON and SSE forms.
struct Reply {
    id: String,
    created: u64,
    text: String,
    /// `reasoning_content`; empty when the effort is `none`.
    reasoning: Option<String>,
    /// The non-standard `reasoning_items`, when an effort was asked for.
    reasoning_items: Option<Value>,
    usage: Value,
}

fn reply(
    state: &State,
    caller: &Caller,
    body: &Map<String, Value>,
    messages: &[Value],
    prompt: &Prompt,
    cached_tokens: u64,
) -> Reply {
    let org = state.org(caller.org);
    let n = org.next_reply();
    let text = format!("SIM-REPLY #{n} from {}: {}", org.id, truncate_chars(&last_user_text(messages), 60));
    let effort = body.get("reasoning_effort").filter(|e| !e.is_null());
    let with_reasoning = effort.and_then(Value::as_str) != Some("none");
    let reasoning = with_reasoning.then(|| format!("SIM-REASONING #{n} from {}", org.id));
    let reasoning_tokens = reasoning.as_ref().map_or(0, |r| tokens_of(r.len()).max(1));
    let completion_tokens = tokens_of(text.len()).max(1) + reasoning_tokens;
    let prompt_tokens = prompt.tokens();
    let id = format!("chatcmpl-{}", random_hex(15));
    // Encrypted reasoning only when an effort is asked for, as bridges do.
    let reasoning_items = (effort.is_some() && with_reasoning).then(|| {
        let rs_id = object_id("rs");
        let sealed = org.cipher.seal(&json!({
            "kind": "reasoning",
            "organization_id": org.id,
            "response_id": id,
            "item_id": rs_id,
            "input_items": messages.len(),
            "input_digest": prompt.digest(),
        }));
        json!([{"type": "reasoning", "id": rs_id, "encrypted_content": sealed, "summary": []}])
    });
    let usage = json!({
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": reasoning_tokens,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0
        },
    });
    Reply { id, created: state.clock.unix_secs(), text, reasoning, reasoning_items, usage }
}

/// The `service_tier` an answer reports, as OpenAI's do: the tier the request asked for (`priority`,
/// `flex`), and `default` when it asked for none or for `auto`.
fn served_tier(body: &Map<String, Value>) -> Value {
    match body.get("service_tier").and_then(Value::as_str) {
        None | Some("auto") => json!("default"),
        Some(tier) => json!(tier),
    }
}

/// The non-streaming body.
fn completion(reply: &Reply, model: &str, tier: Value) -> Value {
    let mut message = json!({
        "role": "assistant",
        "content": reply.text,
        "refusal": null,
        "annotations": [],
    });
    if let Some(reasoning) = &reply.reasoning {
        message["reasoning_content"] = json!(reasoning);
    }
    if let Some(items) = &reply.reasoning_items {
        message["reasoning_items"] = items.clone();
    }
    json!({
        "id": reply.id,
        "object": "chat.completion",
        "created": reply.created,
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": "stop"}],
        "usage": reply.usage,
        "service_tier": tier,
        "system_fingerprint": null,
    })
}

/// The streaming chunks, without the final `[DONE]`.
fn chunks(reply: &Reply, model: &str, body: &Map<String, Value>) -> Vec<Value> {
    let include_usage =
        body.get("stream_options").and_then(|o| o.get("include_usage")).and_then(Value::as_bool).unwrap_or(false);
    let shell = |choices: Value| {
        json!({
            "id": reply.id,
            "object": "chat.completion.chunk",
            "created": reply.created,
            "model": model,
            "service_tier": served_tier(body),
            "system_fingerprint": null,
            "choices": choices,
        })
    };
    let chunk = |delta: Value, finish: Value| {
        let mut c = shell(json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]));
        if include_usage {
            c["usage"] = Value::Null;
        }
        c
    };
    let mut chunks = vec![chunk(json!({"role": "assistant", "content": "", "refusal": null}), Value::Null)];
    if let Some(reasoning) = &reply.reasoning {
        chunks.push(chunk(json!({"reasoning_content": reasoning}), Value::Null));
    }
    for delta in split_deltas(&reply.text, DELTAS) {
        chunks.push(chunk(json!({"content": delta}), Value::Null));
    }
    let mut last = json!({});
    if let Some(items) = &reply.reasoning_items {
        last["reasoning_items"] = items.clone();
    }
    chunks.push(chunk(last, json!("stop")));
    if include_usage {
        let mut c = shell(json!([]));
        c["usage"] = reply.usage.clone();
        chunks.push(c);
    }
    chunks
}

pub(crate) fn plan(
    state: &State,
    caller: &Caller,
    model: &str,
    body: &Map<String, Value>,
) -> Result<ChatPlan, ApiError> {
    let messages = messages(state, caller, body)?;
    let lines: Vec<String> = messages.iter().map(message_line).collect();
    let prompt = Prompt { header: header(body.get("tools"), None), conversation: Transcript::extend(None, lines) };
    let cache_key = body.get("prompt_cache_key").and_then(Value::as_str).unwrap_or("");
    let hashes = prompt.block_hashes(cache_key);
    let cached_tokens = lock(&state.org(caller.org).cache).lookup(&hashes, state.clock.now());
    let reply = reply(state, caller, body, &messages, &prompt, cached_tokens);
    Ok(ChatPlan {
        org: caller.org,
        hashes,
        prompt_tokens: prompt.tokens(),
        cached_tokens,
        completion: completion(&reply, model, served_tier(body)),
        chunks: chunks(&reply, model, body),
    })
}

/// Caches the prompt of a served completion.
pub(crate) fn commit(state: &State, plan: &ChatPlan) {
    lock(&state.org(plan.org).cache).insert(&plan.hashes, state.clock.now());
}
