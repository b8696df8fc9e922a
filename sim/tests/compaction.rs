//! Remote compaction (Codex's `responses_compaction_v2`): a `response.create` whose last input
//! item is `{"type":"compaction_trigger"}` is answered with exactly one organization-bound
//! compaction item, which then stands in for the history before it.

mod common;

use common::*;
use keymux_sim::Sim;
use serde_json::{json, Value};

const WRONG_ORG: &str = "Encrypted content organization_id did not match the target organization_id.";

/// About 3,000 tokens of instructions, so that a prompt without them is visibly smaller.
fn system() -> Value {
    developer(&big_prompt(12_000))
}

fn trigger() -> Value {
    json!({"type": "compaction_trigger"})
}

/// Prompt tokens a request reported.
fn input_tokens(response: &Value) -> u64 {
    response["usage"]["input_tokens"].as_u64().unwrap_or(0)
}

/// Checks the shape of a compaction item: `cmp_` id, sealed content, nothing else.
fn check_item(item: &Value) {
    let keys: Vec<&str> = item.as_object().map(|m| m.keys().map(String::as_str).collect()).unwrap_or_default();
    assert_eq!(keys, ["id", "type", "encrypted_content"], "{item}");
    assert_eq!(item["type"], "compaction");
    assert!(item["id"].as_str().is_some_and(|id| id.starts_with("cmp_") && id.len() == 4 + 48), "{item}");
    assert!(item["encrypted_content"].as_str().is_some_and(|t| t.starts_with("gAAAAA")), "{item}");
}

/// Checks a compaction's events (SSE or WebSocket frames, as JSON) and returns its item and
/// completed response.
fn check_compaction_events(events: &[Value]) -> (Value, Value) {
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(
        kinds,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.output_item.done",
            "response.completed"
        ]
    );
    let item = events[3]["item"].clone();
    check_item(&item);
    assert_eq!(events[2]["item"], json!({"id": item["id"], "type": "compaction"}));
    let response = events[4]["response"].clone();
    assert_eq!(response["status"], "completed");
    assert_eq!(response["output"], json!([item]), "exactly one output item, no message, no reasoning");
    assert!(response["usage"]["output_tokens"].as_u64().unwrap_or(0) > 0);
    assert_eq!(response["usage"]["output_tokens_details"]["reasoning_tokens"], 0);
    (item, response)
}

/// The reply items of a completed turn, as Codex replays them.
fn replayed(events: &[Value]) -> Vec<Value> {
    events.iter().filter(|e| e["type"] == "response.output_item.done").map(|e| codex_replay(&e["item"])).collect()
}

/// The error a replay of `item` to another organization gets.
fn check_foreign(error: &Value, item: &Value) {
    assert_eq!(error["code"], "invalid_encrypted_content", "{error}");
    let subject = match item["id"].as_str() {
        Some(id) => format!("The encrypted content for item {id}"),
        None => "The encrypted content".to_owned(),
    };
    assert_eq!(error["message"], format!("{subject} could not be verified. Reason: {WRONG_ORG}"));
}

#[tokio::test]
async fn http_compaction_on_every_turn_stays_in_its_organization() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs()).await?;
    let mut history = vec![system(), user("Turn 1")];
    let events = stream(&sim, "sk-a1", "/responses", &codex_body(history.clone())).await?;
    history.extend(done_items(&events).iter().map(codex_replay));
    for turn in 2..=5 {
        let mut input = history.clone();
        input.push(trigger());
        let events = stream(&sim, "sk-a1", "/responses", &codex_body(input)).await?;
        let events: Vec<Value> = events.iter().map(|e| e.data.clone()).collect();
        let (item, response) = check_compaction_events(&events);
        let before = input_tokens(&response);
        // The first compaction sees the whole history; later ones start at the previous one.
        assert_eq!(before > 3000, turn == 2, "{before}");

        // Codex replays the item from now on; every other turn without its id.
        let mut cmp = item.clone();
        if turn % 2 == 1 {
            cmp.as_object_mut().map(|m| m.remove("id"));
        }
        history = vec![system(), cmp.clone(), user(&format!("Turn {turn}"))];
        let foreign = post(&sim, "sk-b1", "/responses", &codex_body(history.clone())).await?;
        assert_eq!(foreign.status, 400);
        check_foreign(&foreign.body["error"], &cmp);

        let events = stream(&sim, "sk-a2", "/responses", &codex_body(history.clone())).await?;
        let r = completed(&events)?;
        assert_eq!(r["status"], "completed");
        assert!(r["output"][1]["content"][0]["text"].as_str().is_some_and(|t| t.ends_with(&format!("Turn {turn}"))));
        // The compaction item stands in for everything before it, instructions included.
        assert!(input_tokens(&r) < 1000, "{} after compacting {before}", input_tokens(&r));
        history.extend(done_items(&events).iter().map(codex_replay));
    }
    Ok(())
}

#[tokio::test]
async fn websocket_compaction_on_every_turn_stays_in_its_organization() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs()).await?;
    let mut a1 = connect_key(&sim, "sk-a1").await?;
    let mut a2 = connect_key(&sim, "sk-a2").await?;
    let mut b1 = connect_key(&sim, "sk-b1").await?;
    let frames = exchange(&mut a1, &codex_body(vec![system(), user("Turn 1")])).await?;
    let mut last_id = last_response(&frames)["id"].clone();
    let mut kept = replayed(&frames);
    for turn in 2..=5 {
        // Incremental, as Codex does on one connection: only the trigger, chained to the
        // connection's last response (store:false).
        let mut body = codex_body(vec![trigger()]);
        body["previous_response_id"] = last_id.clone();
        let frames = exchange(&mut a1, &body).await?;
        let (item, response) = check_compaction_events(&frames);
        // The first compaction's chain reaches back to the instructions; later ones start at
        // the previous compaction.
        assert_eq!(input_tokens(&response) > 3000, turn == 2, "{}", input_tokens(&response));

        // Chained to the compaction, the history before it is gone.
        let next = user(&format!("Turn {turn}"));
        let mut body = codex_body(vec![next.clone()]);
        body["previous_response_id"] = response["id"].clone();
        let frames = exchange(&mut a1, &body).await?;
        let r = last_response(&frames);
        assert_eq!(r["status"], "completed", "{frames:?}");
        assert!(input_tokens(&r) < 1000, "{}", input_tokens(&r));
        last_id = r["id"].clone();

        // Replayed on other connections: another organization refuses it, with or without its
        // id (here with what came before it dropped, as OpenAI allows, so that it is the only
        // sealed item); the same organization accepts it after the full history.
        let mut cmp = item.clone();
        if turn % 2 == 1 {
            cmp.as_object_mut().map(|m| m.remove("id"));
        }
        let pruned = vec![system(), cmp.clone(), next.clone()];
        let frames = exchange(&mut b1, &codex_body(pruned)).await?;
        assert_eq!(
            (frames.len(), frames[0]["type"].clone(), frames[0]["status"].clone()),
            (1, json!("error"), json!(400))
        );
        check_foreign(&frames[0]["error"], &cmp);
        let mut full = vec![system()];
        full.extend(kept.iter().cloned());
        full.push(cmp.clone());
        full.push(next);
        let frames = exchange(&mut a2, &codex_body(full)).await?;
        let r = last_response(&frames);
        assert_eq!(r["status"], "completed", "{frames:?}");
        assert!(input_tokens(&r) < 1000, "{}", input_tokens(&r));
        kept = vec![cmp];
        kept.extend(replayed(&frames));
    }
    Ok(())
}

#[tokio::test]
async fn a_stored_compaction_chains_and_answers_without_streaming() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs()).await?;
    let body = json!({"model": "gpt-5.5", "input": [system(), user("Turn 1"), trigger()], "store": true,
                      "reasoning": {"effort": "high"}, "include": ["reasoning.encrypted_content"]});
    let c = post(&sim, "sk-a1", "/responses", &body).await?;
    assert_eq!(c.status, 200, "{}", c.body);
    let output = c.body["output"].as_array().cloned().unwrap_or_default();
    assert_eq!(output.len(), 1, "{output:?}");
    check_item(&output[0]);
    assert!(input_tokens(&c.body) > 3000);

    let next = json!({"model": "gpt-5.5", "input": "Turn 2", "previous_response_id": c.body["id"]});
    let r = post(&sim, "sk-a2", "/responses", &next).await?;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(input_tokens(&r.body) < 1000, "{}", input_tokens(&r.body));
    let foreign = post(&sim, "sk-b1", "/responses", &next).await?;
    assert_eq!(foreign.body["error"]["code"], "previous_response_not_found");
    Ok(())
}

#[tokio::test]
async fn a_trigger_must_be_the_last_input_item() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs()).await?;
    let r = post(&sim, "sk-a1", "/responses", &codex_body(vec![user("hi"), trigger(), user("more")])).await?;
    assert_eq!(r.status, 400);
    assert_eq!(r.body["error"]["param"], "input");
    assert_eq!(r.body["error"]["message"], "The 'compaction_trigger' item must be the final input item.");
    // Without a trigger, a request is an ordinary reply.
    let events = stream(&sim, "sk-a1", "/responses", &codex_body(vec![user("hi")])).await?;
    let types: Vec<Value> = done_items(&events).iter().map(|i| i["type"].clone()).collect();
    assert_eq!(types, [json!("reasoning"), json!("message")]);
    Ok(())
}
