//! The Responses API engine: turns a `response.create` body into a plan (ids, output items,
//! usage, the full event sequence) and applies its effects on the store and the prompt cache.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::crypto::validate_input;
use crate::error::ApiError;
use crate::prompt::{header, input_items, item_line, tokens_of, Prompt, Transcript};
use crate::state::{Caller, State};
use crate::store::Stored;
use crate::util::{lock, object_id, truncate_chars, unix_now};

/// Reasoning tokens reported for a response with a reasoning item.
const REASONING_TOKENS: u64 = 64;
/// How many text deltas a reply is streamed in.
const DELTAS: usize = 4;

/// The last response of a WebSocket connection, which resolves as `previous_response_id`
/// even when it was not stored.
#[derive(Debug, Clone)]
pub(crate) struct ConnectionLast {
    pub id: String,
    pub transcript: Arc<Transcript>,
}

/// Everything needed to answer one `response.create`.
#[derive(Debug)]
pub(crate) struct Plan {
    pub id: String,
    pub org: usize,
    pub store: bool,
    pub input_items: Vec<Value>,
    pub transcript: Arc<Transcript>,
    pub hashes: Vec<[u8; 32]>,
    pub input_tokens: u64,
    pub cached_tokens: u64,
    pub events: Vec<Value>,
    pub in_progress: Value,
    pub completed: Value,
}

impl Plan {
    pub(crate) fn connection_last(&self) -> ConnectionLast {
        ConnectionLast { id: self.id.clone(), transcript: self.transcript.clone() }
    }
}

/// Resolves `previous_response_id` against the connection's last response, then the store.
fn resolve_previous(
    state: &State,
    caller: &Caller,
    body: &Map<String, Value>,
    connection: Option<&ConnectionLast>,
) -> Result<Option<(String, Arc<Transcript>)>, ApiError> {
    let id = match body.get("previous_response_id") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(id)) => id.clone(),
        Some(_) => {
            return Err(ApiError::invalid_type(
                "previous_response_id",
                "Invalid type for 'previous_response_id': expected a string.".to_owned(),
            ))
        }
    };
    if let Some(last) = connection.filter(|l| l.id == id) {
        return Ok(Some((id, last.transcript.clone())));
    }
    let stored = lock(&state.org(caller.org).store).transcript(&id);
    match stored {
        Some(t) => Ok(Some((id, t))),
        None => Err(ApiError::previous_response_not_found(&id)),
    }
}

/// The text of the last user message among `items`.
pub(crate) fn last_user_text(items: &[Value]) -> Option<String> {
    items.iter().rev().find_map(|item| {
        if item.get("role").and_then(Value::as_str) != Some("user") {
            return None;
        }
        match item.get("content") {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Array(parts)) => parts.iter().rev().find_map(|p| {
                let kind = p.get("type").and_then(Value::as_str);
                match kind {
                    Some("input_text") | Some("text") | None => {
                        p.get("text").and_then(Value::as_str).map(str::to_owned)
                    }
                    _ => None,
                }
            }),
            _ => None,
        }
    })
}

/// The deterministic assistant text.
pub(crate) fn reply_text(n: u64, org: &str, items: &[Value]) -> String {
    let echo = last_user_text(items).unwrap_or_default();
    format!("SIM-REPLY #{n} from {org}: {}", truncate_chars(&echo, 60))
}

/// Splits `text` into `parts` pieces of nearly equal character counts (none empty unless
/// the text is).
pub(crate) fn split_deltas(text: &str, parts: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return vec![String::new()];
    }
    let parts = parts.clamp(1, chars.len());
    let size = chars.len().div_ceil(parts);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

fn text_tokens(text: &str) -> u64 {
    tokens_of(text.len()).max(1)
}

fn id_prefix_for(item: &Value) -> &'static str {
    match item.get("type").and_then(Value::as_str) {
        Some("function_call_output") => "fco",
        Some("function_call") => "fc",
        Some("reasoning") => "rs",
        _ => "msg",
    }
}

/// Copies of the input items with an id on every object item, as the store keeps them.
fn with_ids(items: &[Value]) -> Vec<Value> {
    items
        .iter()
        .map(|item| {
            let mut item = item.clone();
            if let Value::Object(map) = &mut item {
                if !map.contains_key("id") || map["id"].is_null() {
                    let id = object_id(id_prefix_for(&Value::Object(map.clone())));
                    map.insert("id".into(), Value::String(id));
                }
            }
            item
        })
        .collect()
}

/// A short digest of a prompt, sealed into encrypted items.
pub(crate) fn digest(prompt: &Prompt) -> String {
    let mut h = Sha256::new();
    h.update(prompt.header.as_bytes());
    h.update(prompt.conversation.total_bytes().to_le_bytes());
    hex::encode(&h.finalize()[..8])
}

fn usage(input: u64, cached: u64, output: u64, reasoning: u64) -> Value {
    json!({
        "input_tokens": input,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": input + output,
    })
}

struct Echo<'a> {
    body: &'a Map<String, Value>,
}

impl Echo<'_> {
    fn or(&self, key: &str, default: Value) -> Value {
        match self.body.get(key) {
            Some(v) if !v.is_null() => v.clone(),
            _ => default,
        }
    }
}

#[expect(clippy::too_many_arguments, reason = "one place assembles the response object")]
fn response_object(
    body: &Map<String, Value>,
    id: &str,
    created_at: u64,
    model: &str,
    status: &str,
    store: bool,
    output: &[Value],
    usage: Value,
) -> Value {
    let e = Echo { body };
    let reasoning = body.get("reasoning").cloned().unwrap_or(Value::Null);
    let effort = reasoning.get("effort").cloned().unwrap_or_else(|| json!("medium"));
    let summary = reasoning.get("summary").cloned().unwrap_or(Value::Null);
    json!({
        "id": id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "background": false,
        "error": null,
        "incomplete_details": null,
        "instructions": e.or("instructions", Value::Null),
        "max_output_tokens": e.or("max_output_tokens", Value::Null),
        "max_tool_calls": null,
        "model": model,
        "output": output,
        "parallel_tool_calls": e.or("parallel_tool_calls", json!(true)),
        "previous_response_id": e.or("previous_response_id", Value::Null),
        "prompt_cache_key": e.or("prompt_cache_key", Value::Null),
        "reasoning": {"effort": effort, "summary": summary},
        "safety_identifier": null,
        "service_tier": e.or("service_tier", json!("default")),
        "store": store,
        "temperature": e.or("temperature", json!(1.0)),
        "text": e.or("text", json!({"format": {"type": "text"}, "verbosity": "medium"})),
        "tool_choice": e.or("tool_choice", json!("auto")),
        "tools": e.or("tools", json!([])),
        "top_logprobs": 0,
        "top_p": e.or("top_p", json!(1.0)),
        "truncation": e.or("truncation", json!("disabled")),
        "usage": usage,
        "user": null,
        "metadata": e.or("metadata", json!({})),
    })
}

struct Events {
    list: Vec<Value>,
}

impl Events {
    fn push(&mut self, kind: &str, fields: Value) {
        let mut m = Map::new();
        m.insert("type".into(), json!(kind));
        m.insert("sequence_number".into(), json!(self.list.len()));
        if let Value::Object(f) = fields {
            m.extend(f);
        }
        self.list.push(Value::Object(m));
    }
}

/// Plans a `response.create`. `connection` is the WebSocket connection's last response.
pub(crate) fn plan(
    state: &State,
    caller: &Caller,
    model: &str,
    body: &Map<String, Value>,
    connection: Option<&ConnectionLast>,
) -> Result<Plan, ApiError> {
    let org = state.org(caller.org);
    let items = input_items(body.get("input"))?;
    let previous = resolve_previous(state, caller, body, connection)?;
    if let Some(input) = body.get("input") {
        validate_input(&org.cipher, &state.other_ciphers(caller.org), input)?;
    }
    let store = body.get("store").and_then(Value::as_bool).unwrap_or(true);
    let generate = body.get("generate").and_then(Value::as_bool).unwrap_or(true);
    let effort = body.get("reasoning").and_then(|r| r.get("effort")).and_then(Value::as_str);
    let with_reasoning = generate && effort != Some("none");
    let include_encrypted = body
        .get("include")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|v| v == "reasoning.encrypted_content"));

    let lines: Vec<String> = items.iter().map(item_line).collect();
    let prompt = Prompt {
        header: header(body.get("tools"), body.get("instructions")),
        conversation: Transcript::extend(previous.as_ref().map(|(_, t)| t.clone()), lines),
    };
    let cache_key = body.get("prompt_cache_key").and_then(Value::as_str).unwrap_or("");
    let hashes = prompt.block_hashes(cache_key);
    let input_tokens = prompt.tokens();
    let cached_tokens = lock(&org.cache).lookup(&hashes, Instant::now());

    let id = object_id("resp");
    let created_at = unix_now();
    let mut output: Vec<Value> = Vec::new();
    let mut reasoning_added = None;
    let mut message_id = None;
    let mut text = String::new();
    if with_reasoning {
        let rs_id = object_id("rs");
        let added = json!({"id": rs_id, "type": "reasoning", "summary": []});
        let mut done = added.clone();
        if include_encrypted {
            let sealed = org.cipher.seal(&json!({
                "kind": "reasoning",
                "organization_id": org.id,
                "response_id": id,
                "item_id": rs_id,
                "input_items": items.len(),
                "input_digest": digest(&prompt),
            }));
            done["encrypted_content"] = json!(sealed);
        }
        reasoning_added = Some(added);
        output.push(done);
    }
    if generate {
        let msg_id = object_id("msg");
        text = reply_text(org.next_reply(), &org.id, &items);
        output.push(json!({
            "id": msg_id,
            "type": "message",
            "status": "completed",
            "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": text}],
            "role": "assistant",
        }));
        message_id = Some(msg_id);
    }
    let reasoning_tokens = if with_reasoning { REASONING_TOKENS } else { 0 };
    let output_tokens = if generate { text_tokens(&text) + reasoning_tokens } else { 0 };
    let final_usage = usage(input_tokens, cached_tokens, output_tokens, reasoning_tokens);
    let in_progress = response_object(body, &id, created_at, model, "in_progress", store, &[], Value::Null);
    let completed = response_object(body, &id, created_at, model, "completed", store, &output, final_usage);

    let mut ev = Events { list: Vec::new() };
    ev.push("response.created", json!({"response": in_progress}));
    if generate {
        ev.push("response.in_progress", json!({"response": in_progress}));
    }
    let mut index = 0;
    if let Some(added) = reasoning_added {
        ev.push("response.output_item.added", json!({"output_index": index, "item": added}));
        ev.push("response.output_item.done", json!({"output_index": index, "item": output[index]}));
        index += 1;
    }
    if let Some(msg_id) = &message_id {
        ev.push(
            "response.output_item.added",
            json!({"output_index": index, "item": {
                "id": msg_id, "type": "message", "status": "in_progress", "content": [], "role": "assistant"
            }}),
        );
        let at = json!({"item_id": msg_id, "output_index": index, "content_index": 0});
        let with = |extra: Value| {
            let mut m = at.clone();
            if let (Value::Object(m), Value::Object(x)) = (&mut m, extra) {
                m.extend(x);
            }
            m
        };
        ev.push(
            "response.content_part.added",
            with(json!({"part": {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}})),
        );
        for delta in split_deltas(&text, DELTAS) {
            ev.push("response.output_text.delta", with(json!({"delta": delta, "logprobs": []})));
        }
        ev.push("response.output_text.done", with(json!({"text": text, "logprobs": []})));
        ev.push(
            "response.content_part.done",
            with(json!({"part": {"type": "output_text", "annotations": [], "logprobs": [], "text": text}})),
        );
        ev.push("response.output_item.done", json!({"output_index": index, "item": output[index]}));
    }
    ev.push("response.completed", json!({"response": completed}));

    let out_lines: Vec<String> = output.iter().map(item_line).collect();
    let transcript = Transcript::extend(Some(prompt.conversation.clone()), out_lines);
    Ok(Plan {
        id,
        org: caller.org,
        store,
        input_items: if store { with_ids(&items) } else { Vec::new() },
        transcript,
        hashes,
        input_tokens,
        cached_tokens,
        events: ev.list,
        in_progress,
        completed,
    })
}

/// Stores the response as in progress (streams only).
pub(crate) fn begin(state: &State, plan: &Plan) {
    if plan.store {
        lock(&state.org(plan.org).store).insert(
            plan.id.clone(),
            Stored {
                response: plan.in_progress.clone(),
                input_items: plan.input_items.clone(),
                transcript: plan.transcript.clone(),
            },
        );
    }
}

/// Applies a successful response: cache its prompt, store it as completed.
pub(crate) fn commit(state: &State, plan: &Plan) {
    let org = state.org(plan.org);
    lock(&org.cache).insert(&plan.hashes, Instant::now());
    if plan.store {
        let mut store = lock(&org.store);
        if store.get(&plan.id).is_some() {
            store.finish(&plan.id, plan.completed.clone());
        } else {
            store.insert(
                plan.id.clone(),
                Stored {
                    response: plan.completed.clone(),
                    input_items: plan.input_items.clone(),
                    transcript: plan.transcript.clone(),
                },
            );
        }
    }
}

/// Marks a stored response whose stream broke off as failed.
pub(crate) fn fail(state: &State, plan: &Plan) {
    if plan.store {
        let mut failed = plan.in_progress.clone();
        failed["status"] = json!("failed");
        failed["error"] = json!({
            "code": "server_error",
            "message": "The server had an error while processing your request. Sorry about that!",
        });
        lock(&state.org(plan.org).store).finish(&plan.id, failed);
    }
}

/// `POST /v1/responses/compact`: keeps the user messages and replaces the rest of the
/// conversation with one organization-bound compaction item.
pub(crate) fn compact(
    state: &State,
    caller: &Caller,
    model: &str,
    body: &Map<String, Value>,
) -> Result<(Value, u64, u64), ApiError> {
    let org = state.org(caller.org);
    let items = input_items(body.get("input"))?;
    let previous = resolve_previous(state, caller, body, None)?;
    if let Some(input) = body.get("input") {
        validate_input(&org.cipher, &state.other_ciphers(caller.org), input)?;
    }
    let lines: Vec<String> = items.iter().map(item_line).collect();
    let prompt = Prompt {
        header: header(body.get("tools"), body.get("instructions")),
        conversation: Transcript::extend(previous.map(|(_, t)| t), lines),
    };
    let cache_key = body.get("prompt_cache_key").and_then(Value::as_str).unwrap_or("");
    let hashes = prompt.block_hashes(cache_key);
    let input_tokens = prompt.tokens();
    let cached_tokens = {
        let mut cache = lock(&org.cache);
        let hit = cache.lookup(&hashes, Instant::now());
        cache.insert(&hashes, Instant::now());
        hit
    };
    let id = object_id("resp");
    let cmp_id = object_id("cmp");
    let sealed = org.cipher.seal(&json!({
        "kind": "compaction",
        "organization_id": org.id,
        "response_id": id,
        "item_id": cmp_id,
        "input_items": items.len(),
        "input_digest": digest(&prompt),
    }));
    let mut output: Vec<Value> =
        items.iter().filter(|i| i.get("role").and_then(Value::as_str) == Some("user")).cloned().collect();
    let output_tokens = text_tokens(&sealed);
    output.push(json!({"type": "compaction", "id": cmp_id, "encrypted_content": sealed}));
    let body = json!({
        "id": id,
        "object": "response.compaction",
        "created_at": unix_now(),
        "model": model,
        "output": output,
        "usage": usage(input_tokens, cached_tokens, output_tokens, 0),
    });
    Ok((body, input_tokens, cached_tokens))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_rebuild_the_text() {
        let text = "SIM-REPLY #1 from org-a: hello";
        let parts = split_deltas(text, 4);
        assert_eq!(parts.len(), 4);
        assert_eq!(parts.concat(), text);
        assert_eq!(split_deltas("ab", 4).len(), 2);
    }

    #[test]
    fn echo_uses_the_last_user_text() {
        let items = vec![
            json!({"role": "developer", "content": "sys"}),
            json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "first"}]}),
            json!({"role": "user", "content": "second"}),
            json!({"type": "function_call_output", "call_id": "c", "output": "x"}),
        ];
        assert_eq!(last_user_text(&items).as_deref(), Some("second"));
        let long = vec![json!({"role": "user", "content": "x".repeat(100)})];
        assert_eq!(reply_text(3, "org-a", &long), format!("SIM-REPLY #3 from org-a: {}", "x".repeat(60)));
    }
}
