//! The Responses API engine: turns a `response.create` body into a plan (ids, output items,
//! usage, the full event sequence) and applies its effects on the store and the prompt cache.
//!
//! A request whose last input item is `{"type":"compaction_trigger"}` (Codex's remote
//! compaction) is answered with exactly one organization-bound compaction item instead of a
//! reply; `POST /v1/responses/compact` seals its compaction item the same way.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use crate::config::ForeignReasoning;
use crate::crypto::validate_items;
use crate::error::ApiError;
use crate::prompt::{conversation, header, input_items, tokens_of, Prompt, Transcript};
use crate::state::{Caller, OrgState, State};
use crate::store::Stored;
use crate::util::{lock, object_id, split_deltas, truncate_chars};

/// Reasoning another organization sealed, dropped and reported.
mod drops;
/// Reasoning tokens reported for a response with a reasoning item.
mod items;

use items::{usage, with_ids};

const REASONING_TOKENS: u64 = 64;
/// How many text deltas a reply is streamed in.
const DELTAS: usize = 4;
/// The `type` of the input item that asks for a remote compaction.
const COMPACTION_TRIGGER: &str = "compaction_trigger";

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
) -> Result<Option<Arc<Transcript>>, ApiError> {
    let id = match body.get("previous_response_id") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(id)) => id,
        Some(_) => {
            return Err(ApiError::invalid_type(
                "previous_response_id",
                "Invalid type for 'previous_response_id': expected a string.".to_owned(),
            ))
        }
    };
    if let Some(last) = connection.filter(|l| &l.id == id) {
        return Ok(Some(last.transcript.clone()));
    }
    let stored = lock(&state.org(caller.org).store).transcript(id);
    match stored {
        Some(t) => Ok(Some(t)),
        None => Err(ApiError::previous_response_not_found(id)),
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

fn text_tokens(text: &str) -> u64 {
    tokens_of(text.len()).max(1)
}

fn is_trigger(item: &Value) -> bool {
    item.get("type").and_then(Value::as_str) == Some(COMPACTION_TRIGGER)
}

/// A compaction trigger anywhere but last is refused, as OpenAI does.
fn check_trigger_is_last(items: &[Value]) -> Result<(), ApiError> {
    let before_last = items.len().saturating_sub(1);
    if items[..before_last].iter().any(is_trigger) {
        return Err(ApiError::invalid_value(
            "input",
            "The 'compaction_trigger' item must be the final input item.".to_owned(),
        ));
    }
    Ok(())
}

/// A request's input resolved into the prompt the model sees.
struct Rendered {
    items: Vec<Value>,
    prompt: Prompt,
    hashes: Vec<[u8; 32]>,
    input_tokens: u64,
    cached_tokens: u64,
    /// The `input_transformations` entries of the items taken out of the input.
    removed: Vec<Value>,
}

/// Checks the input (ids, the trigger's place, encrypted content) and renders the prompt,
/// looking its prefix up in the organization's cache.
fn render(
    state: &State,
    caller: &Caller,
    body: &Map<String, Value>,
    connection: Option<&ConnectionLast>,
) -> Result<Rendered, ApiError> {
    let org = state.org(caller.org);
    let items = input_items(body.get("input"))?;
    check_trigger_is_last(&items)?;
    let previous = resolve_previous(state, caller, body, connection)?;
    let (items, removed) = match state.foreign_reasoning {
        ForeignReasoning::Drop => drops::drop_foreign(state, caller, items),
        ForeignReasoning::Reject => (items, Vec::new()),
    };
    validate_items(&org.cipher, &state.other_ciphers(caller.org), &items)?;
    let prompt = Prompt {
        header: header(body.get("tools"), body.get("instructions")),
        conversation: conversation(previous, &items),
    };
    let cache_key = body.get("prompt_cache_key").and_then(Value::as_str).unwrap_or("");
    let hashes = prompt.block_hashes(cache_key);
    let input_tokens = prompt.tokens();
    let cached_tokens = lock(&org.cache).lookup(&hashes, state.clock.now());
    Ok(Rendered { items, prompt, hashes, input_tokens, cached_tokens, removed })
}

/// Seals a compaction item's `encrypted_content`: a summary of the whole rendered prompt it
/// stands in for, readable by its organization only.
fn seal_compaction(org: &OrgState, response_id: &str, item_id: &str, rendered: &Rendered) -> String {
    org.cipher.seal(&json!({
        "kind": "compaction",
        "organization_id": org.id,
        "response_id": response_id,
        "item_id": item_id,
        "input_items": rendered.items.len(),
        "input_digest": rendered.prompt.digest(),
        "summarised_tokens": rendered.input_tokens,
    }))
}

/// The output items of a response and what they cost.
#[derive(Default)]
struct Output {
    /// Each item as `response.output_item.done` and `response.completed` show it.
    items: Vec<Value>,
    /// Each item as `response.output_item.added` shows it.
    added: Vec<Value>,
    output_tokens: u64,
    reasoning_tokens: u64,
}

/// A reasoning item (unless `reasoning.effort` is `none`) and a message, or nothing at all
/// for `generate: false`.
fn reply_output(org: &OrgState, body: &Map<String, Value>, response_id: &str, rendered: &Rendered) -> Output {
    let generate = body.get("generate").and_then(Value::as_bool).unwrap_or(true);
    let effort = body.get("reasoning").and_then(|r| r.get("effort")).and_then(Value::as_str);
    let include_encrypted = body
        .get("include")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|v| v == "reasoning.encrypted_content"));
    let mut out = Output::default();
    if !generate {
        return out;
    }
    if effort != Some("none") {
        let rs_id = object_id("rs");
        let added = json!({"id": rs_id, "type": "reasoning", "summary": []});
        let mut done = added.clone();
        if include_encrypted {
            done["encrypted_content"] = json!(org.cipher.seal(&json!({
                "kind": "reasoning",
                "organization_id": org.id,
                "response_id": response_id,
                "item_id": rs_id,
                "input_items": rendered.items.len(),
                "input_digest": rendered.prompt.digest(),
            })));
        }
        out.added.push(added);
        out.items.push(done);
        out.reasoning_tokens = REASONING_TOKENS;
    }
    let msg_id = object_id("msg");
    let text = reply_text(org.next_reply(), &org.id, &rendered.items);
    out.output_tokens = text_tokens(&text) + out.reasoning_tokens;
    out.added
        .push(json!({"id": msg_id, "type": "message", "status": "in_progress", "content": [], "role": "assistant"}));
    out.items.push(json!({
        "id": msg_id,
        "type": "message",
        "status": "completed",
        "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": text}],
        "role": "assistant",
    }));
    out
}

/// Exactly one compaction item: no reasoning, no message.
fn compaction_output(org: &OrgState, response_id: &str, rendered: &Rendered) -> Output {
    let cmp_id = object_id("cmp");
    let sealed = seal_compaction(org, response_id, &cmp_id, rendered);
    Output {
        added: vec![json!({"id": cmp_id, "type": "compaction"})],
        output_tokens: text_tokens(&sealed),
        items: vec![json!({"id": cmp_id, "type": "compaction", "encrypted_content": sealed})],
        reasoning_tokens: 0,
    }
}

/// The fields every response object of one request shares.
struct Shell<'a> {
    body: &'a Map<String, Value>,
    id: &'a str,
    created_at: u64,
    model: &'a str,
    store: bool,
}

impl Shell<'_> {
    /// The request's value of `key`, or `default` when absent or null.
    fn echo(&self, key: &str, default: Value) -> Value {
        match self.body.get(key) {
            Some(v) if !v.is_null() => v.clone(),
            _ => default,
        }
    }

    fn object(&self, status: &str, output: &[Value], usage: Value) -> Value {
        let reasoning = self.body.get("reasoning").cloned().unwrap_or(Value::Null);
        let effort = reasoning.get("effort").cloned().unwrap_or_else(|| json!("medium"));
        let summary = reasoning.get("summary").cloned().unwrap_or(Value::Null);
        json!({
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "background": false,
            "error": null,
            "incomplete_details": null,
            "instructions": self.echo("instructions", Value::Null),
            "max_output_tokens": self.echo("max_output_tokens", Value::Null),
            "max_tool_calls": null,
            "model": self.model,
            "output": output,
            "parallel_tool_calls": self.echo("parallel_tool_calls", json!(true)),
            "previous_response_id": self.echo("previous_response_id", Value::Null),
            "prompt_cache_key": self.echo("prompt_cache_key", Value::Null),
            "reasoning": {"effort": effort, "summary": summary},
            "safety_identifier": null,
            "service_tier": self.echo("service_tier", json!("default")),
            "store": self.store,
            "temperature": self.echo("temperature", json!(1.0)),
            "text": self.echo("text", json!({"format": {"type": "text"}, "verbosity": "medium"})),
            "tool_choice": self.echo("tool_choice", json!("auto")),
            "tools": self.echo("tools", json!([])),
            "top_logprobs": 0,
            "top_p": self.echo("top_p", json!(1.0)),
            "truncation": self.echo("truncation", json!("disabled")),
            "usage": usage,
            "user": null,
            "metadata": self.echo("metadata", json!({})),
        })
    }
}

#[derive(Default)]
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

    /// A message's events from `added` to `done`, with its text in deltas.
    fn message(&mut self, index: usize, added: &Value, done: &Value) {
        let text = done["content"][0]["text"].as_str().unwrap_or_default();
        let msg_id = &done["id"];
        self.push("response.output_item.added", json!({"output_index": index, "item": added}));
        let at = |extra: Value| {
            let mut m = json!({"item_id": msg_id, "output_index": index, "content_index": 0});
            if let (Value::Object(m), Value::Object(x)) = (&mut m, extra) {
                m.extend(x);
            }
            m
        };
        let part = |text: &str| json!({"type": "output_text", "annotations": [], "logprobs": [], "text": text});
        self.push("response.content_part.added", at(json!({"part": part("")})));
        for delta in split_deltas(text, DELTAS) {
            self.push("response.output_text.delta", at(json!({"delta": delta, "logprobs": []})));
        }
        self.push("response.output_text.done", at(json!({"text": text, "logprobs": []})));
        self.push("response.content_part.done", at(json!({"part": part(text)})));
        self.push("response.output_item.done", json!({"output_index": index, "item": done}));
    }

    /// The whole sequence from `response.created` to `response.completed`.
    fn sequence(in_progress: &Value, completed: &Value, out: &Output) -> Vec<Value> {
        let mut ev = Events::default();
        ev.push("response.created", json!({"response": in_progress}));
        if !out.items.is_empty() {
            ev.push("response.in_progress", json!({"response": in_progress}));
        }
        for (index, (added, done)) in out.added.iter().zip(&out.items).enumerate() {
            if done["type"] == "message" {
                ev.message(index, added, done);
            } else {
                ev.push("response.output_item.added", json!({"output_index": index, "item": added}));
                ev.push("response.output_item.done", json!({"output_index": index, "item": done}));
            }
        }
        ev.push("response.completed", json!({"response": completed}));
        ev.list
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
    let rendered = render(state, caller, body, connection)?;
    let id = object_id("resp");
    let out = if rendered.items.last().is_some_and(is_trigger) {
        compaction_output(org, &id, &rendered)
    } else {
        reply_output(org, body, &id, &rendered)
    };
    let store = body.get("store").and_then(Value::as_bool).unwrap_or(true);
    let shell = Shell { body, id: &id, created_at: state.clock.unix_secs(), model, store };
    let final_usage = usage(rendered.input_tokens, rendered.cached_tokens, out.output_tokens, out.reasoning_tokens);
    let in_progress = shell.object("in_progress", &[], Value::Null);
    let mut completed = shell.object("completed", &out.items, final_usage);
    if !rendered.removed.is_empty() {
        completed["input_transformations"] = Value::Array(rendered.removed.clone());
    }
    let events = Events::sequence(&in_progress, &completed, &out);
    Ok(Plan {
        transcript: conversation(Some(rendered.prompt.conversation.clone()), &out.items),
        input_items: if store { with_ids(&rendered.items) } else { Vec::new() },
        id,
        org: caller.org,
        store,
        hashes: rendered.hashes,
        input_tokens: rendered.input_tokens,
        cached_tokens: rendered.cached_tokens,
        events,
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
    lock(&org.cache).insert(&plan.hashes, state.clock.now());
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
    let rendered = render(state, caller, body, None)?;
    lock(&org.cache).insert(&rendered.hashes, state.clock.now());
    let id = object_id("resp");
    let cmp_id = object_id("cmp");
    let sealed = seal_compaction(org, &id, &cmp_id, &rendered);
    let mut output: Vec<Value> =
        rendered.items.iter().filter(|i| i.get("role").and_then(Value::as_str) == Some("user")).cloned().collect();
    let output_tokens = text_tokens(&sealed);
    output.push(json!({"type": "compaction", "id": cmp_id, "encrypted_content": sealed}));
    let body = json!({
        "id": id,
        "object": "response.compaction",
        "created_at": state.clock.unix_secs(),
        "model": model,
        "output": output,
        "usage": usage(rendered.input_tokens, rendered.cached_tokens, output_tokens, 0),
    });
    Ok((body, rendered.input_tokens, rendered.cached_tokens))
}

#[cfg(test)]
mod tests;
