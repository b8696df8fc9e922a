//! The mode in which a replay of another organization's reasoning is dropped and reported in
//! `input_transformations` (as newer OpenAI models do) instead of answered 400: over JSON, SSE and
//! WebSocket, with the id each item was made with, and the items unused (no tokens, no cache).

mod common;

use common::*;
use keymux_sim::{ForeignReasoning, Sim};
use serde_json::{json, Value};

fn dropping() -> keymux_sim::SimConfig {
    two_orgs().foreign_reasoning(ForeignReasoning::Drop)
}

/// Turn one on org-a's `sk-a1` (a large prompt, so the cache counts), and turn two's body replaying its
/// items; with the reasoning item's id.
async fn turn_two(sim: &Sim) -> anyhow::Result<(Value, String)> {
    let input = vec![developer(&big_prompt(8_000)), user("Say hello. This is turn one.")];
    let events = stream(sim, "sk-a1", "/responses", &codex_body(input.clone())).await?;
    let items = done_items(&events);
    let rs_id = items[0]["id"].as_str().unwrap_or_default().to_owned();
    let mut next = input;
    next.extend(items.iter().map(codex_replay));
    next.push(user("Now say goodbye. This is turn two."));
    Ok((codex_body(next), rs_id))
}

fn removed(id: &str) -> Value {
    json!([{"type": "reasoning", "id": id, "action": "removed", "reason": "organization_mismatch"}])
}

#[tokio::test]
async fn another_organizations_reasoning_is_dropped_and_reported_over_json_and_sse() -> anyhow::Result<()> {
    let sim = Sim::start(dropping()).await?;
    let (body, rs_id) = turn_two(&sim).await?;
    // Where it was made: read, nothing reported.
    let home = completed(&stream(&sim, "sk-a2", "/responses", &body).await?)?;
    assert!(home.get("input_transformations").is_none(), "{home}");

    let mut json_body = body.clone();
    json_body["stream"] = json!(false);
    let b = post(&sim, "sk-b1", "/responses", &json_body).await?;
    assert_eq!(b.status, 200, "{}", b.body);
    assert_eq!(b.body["input_transformations"], removed(&rs_id));
    let used = |r: &Value| r["usage"]["input_tokens"].as_u64().unwrap_or(0);
    assert!(used(&b.body) < used(&home), "the dropped item is not in the prompt: {} vs {}", used(&b.body), used(&home));
    assert_eq!(b.body["usage"]["input_tokens_details"]["cached_tokens"], 0);

    let events = stream(&sim, "sk-b1", "/responses", &body).await?;
    let created = events.iter().find(|e| e.kind() == "response.created").map(|e| e.data["response"].clone());
    assert!(created.is_some_and(|c| c.get("input_transformations").is_none()), "only the terminal response says it");
    let answer = completed(&events)?;
    assert_eq!(answer["input_transformations"], removed(&rs_id));
    // The same prompt again on org-b: what is cached is the prompt without the item.
    let cached = answer["usage"]["input_tokens_details"]["cached_tokens"].as_u64().unwrap_or(0);
    assert!(cached > 0 && cached <= used(&answer), "{cached}");

    // An item replayed without its id is reported under the id it was made with.
    let mut bare = body.clone();
    bare["input"].as_array_mut().into_iter().flatten().filter(|i| i["type"] == "reasoning").for_each(|i| {
        i.as_object_mut().map(|m| m.remove("id"));
    });
    let events = stream(&sim, "sk-b1", "/responses", &bare).await?;
    assert_eq!(completed(&events)?["input_transformations"], removed(&rs_id));

    // Content no organization can open still fails loudly.
    let mut broken = body;
    let items = broken["input"].as_array_mut().into_iter().flatten();
    items.filter(|i| i["type"] == "reasoning").for_each(|i| i["encrypted_content"] = json!("gAAAAAbroken"));
    let r = post(&sim, "sk-b1", "/responses", &broken).await?;
    assert_eq!(r.status, 400);
    assert_eq!(r.body["error"]["code"], "invalid_encrypted_content");
    Ok(())
}

#[tokio::test]
async fn the_default_mode_still_answers_400() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs()).await?;
    let (body, _) = turn_two(&sim).await?;
    let r = post(&sim, "sk-b1", "/responses", &body).await?;
    assert_eq!(r.status, 400);
    assert_eq!(r.body["error"]["code"], "invalid_encrypted_content");
    Ok(())
}

#[tokio::test]
async fn a_websocket_turn_reports_the_drop_on_its_completed_event() -> anyhow::Result<()> {
    let sim = Sim::start(dropping()).await?;
    let (body, rs_id) = turn_two(&sim).await?;
    let mut ws = connect_key(&sim, "sk-b1").await?;
    let frames = exchange(&mut ws, &body).await?;
    let last = frames.last().cloned().unwrap_or_default();
    assert_eq!(last["type"], "response.completed", "{frames:?}");
    assert_eq!(last_response(&frames)["input_transformations"], removed(&rs_id));
    Ok(())
}
