//! What ties a request to the ones before it: its session and Codex thread (from the request's own
//! `client_metadata`, its headers or its `prompt_cache_key`), the scope their digests are kept under
//! (per protocol and per pool), and the soft-affinity signal (the cache key, or the prompt's prefix).
//! Only digests leave here: a raw id or prompt is never kept.

use http::HeaderMap;
use serde::Deserialize;

use super::body::Peek;
use super::{AffinitySource, Operation, RequestFacts, Signal};
use crate::markers::Markers;

/// Most bytes of a `prompt_cache_key` Keymux uses.
pub const MAX_CACHE_KEY_BYTES: usize = 256;

/// A usable `prompt_cache_key`: a non-empty string of at most 256 bytes, with no leading or trailing
/// whitespace and no control characters. Anything else is ignored (never an error, never changed).
pub fn valid_cache_key(value: &serde_json::Value) -> Option<&str> {
    valid_id(value.as_str()?)
}

/// A usable session, thread or cache id: by the same rules as [`valid_cache_key`].
fn valid_id(s: &str) -> Option<&str> {
    let ok = !s.is_empty() && s.len() <= MAX_CACHE_KEY_BYTES && s.trim() == s && !s.chars().any(char::is_control);
    ok.then_some(s)
}

/// The ids Codex puts in a request's `client_metadata` (each `response.create` on a WebSocket has its
/// own): the thread it belongs to, and its session (the root thread).
#[derive(Deserialize, Default)]
struct ClientMetadata<'a> {
    #[serde(borrow, default)]
    thread_id: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default)]
    session_id: Option<std::borrow::Cow<'a, str>>,
    /// Over a WebSocket, the turn's Responses-Lite header as Codex projects it (`"true"`).
    #[serde(borrow, default, rename = "ws_request_header_x_openai_internal_codex_responses_lite")]
    responses_lite: Option<std::borrow::Cow<'a, str>>,
}

/// Who sent a request, as its session digests are scoped: the client token's tag and the pool that
/// token is bound to.
pub(super) struct Sender<'a> {
    /// The client token's tag.
    pub scope: &'a str,
    /// The pool its token is bound to.
    pub pool: &'a str,
    /// The request's headers (a WebSocket frame carries its handshake's).
    pub headers: &'a HeaderMap,
}

/// Sets the request's session, its parent session (a Codex thread's root), whether it is a Lite turn,
/// and its soft-affinity signal.
pub(super) fn read(
    peek: &Peek<'_>,
    operation: Operation,
    sender: &Sender<'_>,
    markers: &Markers,
    facts: &mut RequestFacts,
) {
    let digest = markers.digest();
    // Session digests are per pool, so what one pool learned never steers another; the built-in pool
    // keeps the protocol alone, as before pools existed.
    let session_scope = match sender.pool {
        crate::tokens::ALL_POOL => std::borrow::Cow::Borrowed(operation_scope(operation)),
        pool => std::borrow::Cow::Owned(format!("{}@{pool}", operation_scope(operation))),
    };
    let sent_metadata = client_metadata(peek);
    // Codex's WebSocket turns say whether they are Lite in their own client_metadata (the key is there
    // only when one is).
    facts.lite_turn =
        sent_metadata.as_ref().map(|own| own.responses_lite.as_deref().is_some_and(|v| v.eq_ignore_ascii_case("true")));
    let metadata = sent_metadata.unwrap_or_default();
    let [thread, root] = codex_ids(&metadata, sender.headers);
    // A thread is a session of its own (subagents of one session may share its `prompt_cache_key`,
    // but not its encrypted state); for a root thread the id is its `prompt_cache_key`, so the
    // digest is the same either way.
    let session = thread.or_else(|| peek.prompt_cache_key.as_ref().and_then(valid_cache_key));
    facts.session = session.map(|k| digest.session(&session_scope, k));
    facts.parent = match (thread, root) {
        (Some(thread), Some(root)) if thread != root => Some(digest.session(&session_scope, root)),
        _ => None,
    };
    facts.signal = signal(peek, operation, [sender.scope, sender.pool], facts.model.as_deref(), markers);
}

/// The request's `client_metadata`, when it is an object with string ids (anything else is ignored,
/// never an error: the body goes on as it is).
fn client_metadata<'a>(peek: &Peek<'a>) -> Option<ClientMetadata<'a>> {
    peek.client_metadata.and_then(|raw| serde_json::from_str(raw.get()).ok())
}

/// Codex's thread id and session id (the root thread's): each from the request's own
/// `client_metadata` (read per request, so a WebSocket's turns each say theirs), else from the
/// `thread-id` and `session-id` headers (an HTTP request's, or a WebSocket's handshake).
fn codex_ids<'a>(metadata: &'a ClientMetadata<'_>, headers: &'a HeaderMap) -> [Option<&'a str>; 2] {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).and_then(valid_id);
    let pick = |own: &'a Option<std::borrow::Cow<'_, str>>, name: &str| {
        own.as_deref().and_then(valid_id).or_else(|| header(name))
    };
    [pick(&metadata.thread_id, "thread-id"), pick(&metadata.session_id, "session-id")]
}

/// The soft-affinity signal of a create request: its valid `prompt_cache_key`, or else a digest of the
/// prompt prefix (instructions, then system and developer content, then the first user message).
fn signal(
    peek: &Peek<'_>,
    operation: Operation,
    [client, pool]: [&str; 2],
    model: Option<&str>,
    markers: &Markers,
) -> Option<Signal> {
    if !matches!(operation, Operation::ResponsesCreate | Operation::ChatCompletions) {
        return None;
    }
    let scope = [client, pool, operation_scope(operation), model.unwrap_or(""), "create"];
    if let Some(key) = peek.prompt_cache_key.as_ref().and_then(valid_cache_key) {
        return Some(Signal {
            source: AffinitySource::PromptCacheKey,
            key: markers.digest().affinity("prompt_cache_key", &scope, key.as_bytes()),
        });
    }
    let prefix = prompt_prefix(peek)?;
    Some(Signal {
        source: AffinitySource::PromptPrefix,
        key: markers.digest().affinity("prompt_prefix", &scope, &prefix),
    })
}

/// Most items read from the start of `input` / `messages` looking for the first user message.
const PREFIX_ITEMS: usize = 16;

fn prompt_prefix(peek: &Peek<'_>) -> Option<Vec<u8>> {
    let mut canon = Vec::new();
    let mut push = |label: &str, text: &str| {
        canon.extend_from_slice(&(label.len() as u32).to_le_bytes());
        canon.extend_from_slice(label.as_bytes());
        canon.extend_from_slice(&(text.len() as u64).to_le_bytes());
        canon.extend_from_slice(text.as_bytes());
    };
    if let Some(Ok(instructions)) = peek.instructions.map(|raw| serde_json::from_str::<String>(raw.get())) {
        push("instructions", &instructions);
    }
    let raw = peek.input.or(peek.messages);
    if let Some(raw) = raw {
        let text = raw.get();
        if text.starts_with('"') {
            if let Ok(s) = serde_json::from_str::<String>(text) {
                push("user", &s);
            }
        } else if let Ok(items) = serde_json::from_str::<Vec<&serde_json::value::RawValue>>(text) {
            for item in items.into_iter().take(PREFIX_ITEMS) {
                let Ok(item) = serde_json::from_str::<serde_json::Value>(item.get()) else { continue };
                let role = item["role"].as_str().unwrap_or("");
                let content = content_text(&item["content"]);
                match role {
                    "system" | "developer" => push(role, &content),
                    "user" => {
                        push("user", &content);
                        break;
                    }
                    _ if item["type"] == "input_text" => {
                        push("user", item["text"].as_str().unwrap_or(""));
                        break;
                    }
                    _ => {}
                }
            }
        }
    }
    (!canon.is_empty()).then_some(canon)
}

/// The text of a message's content: a string, or the `text` of each part.
fn content_text(content: &serde_json::Value) -> String {
    match content {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Array(parts) => {
            parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join("\n")
        }
        _ => String::new(),
    }
}

/// Sessions of different protocols never share a digest.
fn operation_scope(operation: Operation) -> &'static str {
    match operation {
        Operation::ChatCompletions => "chat",
        _ => "responses",
    }
}
