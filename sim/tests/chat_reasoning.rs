//! Chat Completions carrying organization-bound encrypted reasoning in `reasoning_items`,
//! as bridges over the Responses API expose it.

mod common;

use common::*;
use keymux_sim::Sim;
use serde_json::{json, Value};

const WRONG_ORG: &str = "Encrypted content organization_id did not match the target organization_id.";
const UNDECRYPTABLE: &str = "Could not decrypt encrypted content.";

fn expected_invalid(id: &str, reason: &str) -> Value {
    json!({"error": {
        "message": format!("The encrypted content for item {id} could not be verified. Reason: {reason}"),
        "type": "invalid_request_error",
        "param": null,
        "code": "invalid_encrypted_content",
    }})
}

/// A pi-shaped request body.
fn chat_body(messages: Vec<Value>, stream: bool) -> Value {
    json!({
        "model": "gpt-5.5",
        "messages": messages,
        "stream": stream,
        "store": false,
        "max_completion_tokens": 32000,
        "reasoning_effort": "medium",
    })
}

fn turn_one_messages() -> Vec<Value> {
    vec![
        json!({"role": "developer", "content": "You are a helpful assistant."}),
        json!({"role": "user", "content": [{"type": "text", "text": "Say hello. This is turn one."}]}),
    ]
}

/// Checks the shape of a `reasoning_items` array and returns the item's id.
fn check_items(items: &Value) -> String {
    let list = items.as_array().cloned().unwrap_or_default();
    assert_eq!(list.len(), 1, "{items}");
    let item = &list[0];
    assert_eq!(item["type"], "reasoning");
    assert_eq!(item["summary"], json!([]));
    let id = item["id"].as_str().unwrap_or_default().to_owned();
    assert!(id.starts_with("rs_") && id.len() == 3 + 48 && id[3..].bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
    let token = item["encrypted_content"].as_str().unwrap_or_default();
    assert!(token.starts_with("gAAAAA"), "{token}");
    let keys: Vec<&str> = item.as_object().map(|m| m.keys().map(String::as_str).collect()).unwrap_or_default();
    assert_eq!(keys, ["type", "id", "encrypted_content", "summary"]);
    id
}

/// Turn two: turn one, the replayed assistant message and a new user message.
fn turn_two(assistant: Value, stream: bool) -> Value {
    let mut messages = turn_one_messages();
    messages.push(assistant);
    messages.push(json!({"role": "user", "content": "Now say goodbye."}));
    chat_body(messages, stream)
}

#[tokio::test]
async fn chat_reasoning_items_are_bound_to_the_organization() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs()).await?;
    let r = post(&sim, "sk-a1", "/chat/completions", &chat_body(turn_one_messages(), false)).await?;
    assert_eq!(r.status, 200);
    let message = r.body["choices"][0]["message"].clone();
    assert!(message["reasoning_content"].is_string());
    let rs_id = check_items(&message["reasoning_items"]);

    // The assistant message comes back byte-identical.
    let turn2 = turn_two(message.clone(), false);
    let a2 = post(&sim, "sk-a2", "/chat/completions", &turn2).await?;
    assert_eq!(a2.status, 200, "{}", a2.body);
    assert_eq!(a2.body["object"], "chat.completion");
    // Its own reasoning is fresh and still bound to org-a.
    let next_id = check_items(&a2.body["choices"][0]["message"]["reasoning_items"]);
    assert_ne!(next_id, rs_id);
    let a1 = post(&sim, "sk-a1", "/chat/completions", &turn2).await?;
    assert_eq!(a1.status, 200, "{}", a1.body);

    let b = post(&sim, "sk-b1", "/chat/completions", &turn2).await?;
    assert_eq!(b.status, 400);
    assert_eq!(b.body, expected_invalid(&rs_id, WRONG_ORG));
    assert_eq!(b.header("openai-organization"), Some("org-b"));
    let rejected = sim
        .log()
        .into_iter()
        .rev()
        .find(|e| e.key.as_deref() == Some("sk-b1"))
        .map(|e| (e.status, e.error_code.clone()));
    assert_eq!(rejected, Some((400, Some("invalid_encrypted_content".into()))));

    // A tampered token fails on the owning organization too.
    let mut tampered = message.clone();
    let token = message["reasoning_items"][0]["encrypted_content"].as_str().unwrap_or_default().to_owned();
    let mut bytes = token.into_bytes();
    let i = bytes.len() - 10;
    bytes[i] = if bytes[i] == b'x' { b'y' } else { b'x' };
    tampered["reasoning_items"][0]["encrypted_content"] = json!(String::from_utf8(bytes)?);
    let t = post(&sim, "sk-a1", "/chat/completions", &turn_two(tampered, false)).await?;
    assert_eq!(t.status, 400);
    assert_eq!(t.body, expected_invalid(&rs_id, UNDECRYPTABLE));

    // A non-string token cannot be decrypted either.
    let mut numeric = message.clone();
    numeric["reasoning_items"][0]["encrypted_content"] = json!(42);
    let n = post(&sim, "sk-a1", "/chat/completions", &turn_two(numeric, false)).await?;
    assert_eq!(n.status, 400);
    assert_eq!(n.body, expected_invalid(&rs_id, UNDECRYPTABLE));
    Ok(())
}

#[tokio::test]
async fn chat_encrypted_content_is_checked_anywhere_in_messages() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs()).await?;
    let r = post(&sim, "sk-a1", "/chat/completions", &chat_body(turn_one_messages(), false)).await?;
    let item = r.body["choices"][0]["message"]["reasoning_items"][0].clone();
    let rs_id = check_items(&r.body["choices"][0]["message"]["reasoning_items"]);

    // Nested in a content part of a user message, not under reasoning_items.
    let mut messages = turn_one_messages();
    messages.push(json!({"role": "user", "content": [
        {"type": "text", "text": "carry this"},
        {"type": "opaque", "payload": {"nested": [item]}},
    ]}));
    let body = chat_body(messages, false);
    let a2 = post(&sim, "sk-a2", "/chat/completions", &body).await?;
    assert_eq!(a2.status, 200, "{}", a2.body);
    let b = post(&sim, "sk-b1", "/chat/completions", &body).await?;
    assert_eq!(b.status, 400);
    assert_eq!(b.body, expected_invalid(&rs_id, WRONG_ORG));
    Ok(())
}

#[tokio::test]
async fn chat_stream_puts_reasoning_items_on_the_finish_chunk() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs()).await?;
    let mut body = chat_body(turn_one_messages(), true);
    body["stream_options"] = json!({"include_usage": true});
    let events = stream(&sim, "sk-a1", "/chat/completions", &body).await?;
    assert_eq!(events.last().map(|e| e.data.clone()), Some(json!("[DONE]")));
    let chunks: Vec<&Value> = events[..events.len() - 1].iter().map(|e| &e.data).collect();

    let finish_at = chunks.iter().position(|c| c["choices"][0]["finish_reason"].is_string());
    let Some(finish_at) = finish_at else { anyhow::bail!("no finish chunk") };
    assert_eq!(chunks[finish_at]["choices"][0]["finish_reason"], "stop");
    let carrying: Vec<usize> = chunks
        .iter()
        .enumerate()
        .filter(|(_, c)| {
            c.get("reasoning_items").is_some()
                || c["choices"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|ch| ch["delta"].get("reasoning_items").is_some()))
        })
        .map(|(i, _)| i)
        .collect();
    assert_eq!(carrying, [finish_at]);
    let items = chunks[finish_at]["choices"][0]["delta"]["reasoning_items"].clone();
    let rs_id = check_items(&items);
    // The usage chunk follows the finish chunk.
    assert_eq!(finish_at + 2, chunks.len());
    assert_eq!(chunks[finish_at + 1]["choices"], json!([]));
    assert!(chunks[finish_at + 1]["usage"]["prompt_tokens"].is_u64());

    // The reasoning text is still streamed as before.
    let reasoning: String =
        chunks.iter().filter_map(|c| c["choices"][0]["delta"]["reasoning_content"].as_str()).collect();
    assert!(reasoning.starts_with("SIM-REASONING"), "{reasoning}");
    let text: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();

    // Rebuilt the way a client accumulates deltas.
    let assistant = json!({
        "role": "assistant",
        "content": text,
        "reasoning_content": reasoning,
        "reasoning_items": items,
    });
    let mut turn2 = turn_two(assistant, true);
    turn2["stream_options"] = json!({"include_usage": true});
    let events = stream(&sim, "sk-a2", "/chat/completions", &turn2).await?;
    assert_eq!(events.last().map(|e| e.data.clone()), Some(json!("[DONE]")));

    // Another organization is refused before any stream starts.
    let b = post(&sim, "sk-b1", "/chat/completions", &turn2).await?;
    assert_eq!(b.status, 400);
    assert_eq!(b.body, expected_invalid(&rs_id, WRONG_ORG));
    Ok(())
}

#[tokio::test]
async fn chat_without_effort_has_no_reasoning_items() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs()).await?;
    for effort in [Some(json!("none")), None, Some(Value::Null)] {
        let mut body = chat_body(turn_one_messages(), false);
        match &effort {
            Some(e) => body["reasoning_effort"] = e.clone(),
            None => {
                body.as_object_mut().map(|m| m.remove("reasoning_effort"));
            }
        }
        let r = post(&sim, "sk-a1", "/chat/completions", &body).await?;
        assert_eq!(r.status, 200);
        let message = &r.body["choices"][0]["message"];
        assert!(message.get("reasoning_items").is_none(), "{effort:?}");
        // reasoning_content is unchanged: present unless the effort is "none".
        assert_eq!(message.get("reasoning_content").is_some(), effort != Some(json!("none")), "{effort:?}");

        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
        let events = stream(&sim, "sk-a1", "/chat/completions", &body).await?;
        assert!(events.iter().all(|e| !e.data.to_string().contains("reasoning_items")), "{effort:?}");
    }
    Ok(())
}
