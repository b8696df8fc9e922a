//! The Responses API over HTTP: organization binding of encrypted content, the store,
//! the prompt cache, rate limits, the SSE sequence and every fault.

mod common;

use std::time::{Duration, Instant};

use common::*;
use keymux_sim::{Fault, Limits, Sim, Transport};
use serde_json::{json, Value};

const WRONG_ORG: &str = "Encrypted content organization_id did not match the target organization_id.";

/// Turn 1 on `key`; returns its input and the items the client keeps.
async fn turn_one(sim: &Sim, key: &str) -> anyhow::Result<(Vec<Value>, Vec<Value>)> {
    let input = vec![developer("You are a helpful assistant."), user("Say hello. This is turn one.")];
    let events = stream(sim, key, "/responses", &codex_body(input.clone())).await?;
    let items = done_items(&events);
    assert_eq!(items.len(), 2, "reasoning + message: {items:?}");
    Ok((input, items))
}

fn expected_invalid(id: &str, reason: &str) -> Value {
    json!({"error": {
        "message": format!("The encrypted content for item {id} could not be verified. Reason: {reason}"),
        "type": "invalid_request_error",
        "param": null,
        "code": "invalid_encrypted_content",
    }})
}

#[tokio::test]
async fn reasoning_is_bound_to_the_organization() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs()).await?;
    let (mut input, items) = turn_one(&sim, "sk-a1").await?;
    let reasoning = items[0].clone();
    let rs_id = reasoning["id"].as_str().unwrap_or_default().to_owned();
    assert!(rs_id.starts_with("rs_") && rs_id.len() == 3 + 48, "{rs_id}");
    let token = reasoning["encrypted_content"].as_str().unwrap_or_default();
    assert!(token.starts_with("gAAAAA"), "{token}");

    // Codex shape.
    let mut codex_input = input.clone();
    codex_input.extend(items.iter().map(codex_replay));
    codex_input.push(user("Now say goodbye. This is turn two."));
    let body = codex_body(codex_input);
    let b = post(&sim, "sk-b1", "/responses", &body).await?;
    assert_eq!(b.status, 400);
    assert_eq!(b.body, expected_invalid(&rs_id, WRONG_ORG));
    assert_eq!(b.header("openai-organization"), Some("org-b"));
    let events = stream(&sim, "sk-a2", "/responses", &body).await?;
    assert_eq!(completed(&events)?["status"], "completed");

    // pi shape: the exact item of output_item.done, replayed verbatim.
    input.extend(items.iter().cloned());
    input.push(user("Now say goodbye. This is turn two."));
    let mut pi_body = codex_body(input);
    pi_body["reasoning"] = json!({"effort": "medium", "summary": "auto"});
    let b = post(&sim, "sk-b1", "/responses", &pi_body).await?;
    assert_eq!(b.status, 400);
    assert_eq!(b.body, expected_invalid(&rs_id, WRONG_ORG));
    let mut non_stream = pi_body.clone();
    non_stream["stream"] = json!(false);
    let a = post(&sim, "sk-a2", "/responses", &non_stream).await?;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.body["object"], "response");

    let log = sim.log();
    let rejected =
        log.iter().find(|e| e.key.as_deref() == Some("sk-b1")).map(|e| (e.status, e.error_code.clone(), e.org.clone()));
    assert_eq!(rejected, Some((400, Some("invalid_encrypted_content".into()), Some("org-b".into()))));
    Ok(())
}

#[tokio::test]
async fn tampered_or_truncated_content_is_rejected() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs()).await?;
    let (input, items) = turn_one(&sim, "sk-a1").await?;
    let reasoning = items[0].clone();
    let rs_id = reasoning["id"].as_str().unwrap_or_default().to_owned();
    let token = reasoning["encrypted_content"].as_str().unwrap_or_default().to_owned();

    let mut bytes = token.clone().into_bytes();
    let i = bytes.len() - 10;
    bytes[i] = if bytes[i] == b'x' { b'y' } else { b'x' };
    let tampered = String::from_utf8(bytes)?;
    let truncated = token[..token.len() / 2].to_owned();
    for bad in [tampered, truncated, "gAAAAA!!!not-base64!!!".to_owned()] {
        let mut item = reasoning.clone();
        item["encrypted_content"] = json!(bad);
        let mut turn2 = input.clone();
        turn2.push(item);
        turn2.push(user("again"));
        for key in ["sk-a1", "sk-b1"] {
            let r = post(&sim, key, "/responses", &codex_body(turn2.clone())).await?;
            assert_eq!(r.status, 400);
            assert_eq!(r.body, expected_invalid(&rs_id, "Could not decrypt encrypted content."));
        }
    }
    Ok(())
}

#[tokio::test]
async fn compaction_items_are_bound_to_the_organization() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs()).await?;
    let (mut input, items) = turn_one(&sim, "sk-a1").await?;
    input.extend(items.iter().map(codex_replay));
    input.push(user("Second request"));
    let compact_body = json!({"model": "gpt-5.5", "input": input, "instructions": "Compact."});
    let c = post(&sim, "sk-a1", "/responses/compact", &compact_body).await?;
    assert_eq!(c.status, 200, "{}", c.body);
    assert_eq!(c.body["object"], "response.compaction");
    let output = c.body["output"].as_array().cloned().unwrap_or_default();
    let users: Vec<&Value> = output.iter().filter(|i| i["role"] == "user").collect();
    assert_eq!(users.len(), 2, "kept user messages: {output:?}");
    let compaction = output.last().cloned().unwrap_or_default();
    assert_eq!(compaction["type"], "compaction");
    let cmp_id = compaction["id"].as_str().unwrap_or_default().to_owned();
    assert!(cmp_id.starts_with("cmp_") && cmp_id.len() == 4 + 48);
    assert!(compaction["encrypted_content"].as_str().is_some_and(|t| t.starts_with("gAAAAA")));
    assert!(c.body["usage"]["input_tokens"].as_u64().unwrap_or(0) > 0);

    // Compacting with another organization's reasoning fails like a create does.
    let foreign = post(&sim, "sk-b1", "/responses/compact", &compact_body).await?;
    assert_eq!(foreign.status, 400);
    assert_eq!(foreign.body["error"]["code"], "invalid_encrypted_content");

    let mut next = output.clone();
    next.push(user("After compaction"));
    let b = post(&sim, "sk-b1", "/responses", &codex_body(next.clone())).await?;
    assert_eq!(b.status, 400);
    assert_eq!(b.body, expected_invalid(&cmp_id, WRONG_ORG));
    let events = stream(&sim, "sk-a2", "/responses", &codex_body(next)).await?;
    assert_eq!(completed(&events)?["status"], "completed");
    Ok(())
}

#[tokio::test]
async fn stored_responses_are_scoped_to_the_organization() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs()).await?;
    let first = post(
        &sim,
        "sk-a1",
        "/responses",
        &json!({"model": "gpt-5.5", "input": "Remember the number 7.", "store": true}),
    )
    .await?;
    assert_eq!(first.status, 200);
    let id = first.body["id"].as_str().unwrap_or_default().to_owned();
    assert!(id.starts_with("resp_") && id.len() == 5 + 48);
    assert_eq!(first.body["store"], true);

    let follow = json!({"model": "gpt-5.5", "input": "What number?", "previous_response_id": id});
    let same_org = post(&sim, "sk-a2", "/responses", &follow).await?;
    assert_eq!(same_org.status, 200, "{}", same_org.body);
    assert_eq!(same_org.body["previous_response_id"], json!(id));
    assert!(
        same_org.body["usage"]["input_tokens"].as_u64() > first.body["usage"]["input_tokens"].as_u64(),
        "the previous response counts as input"
    );
    let other_org = post(&sim, "sk-b1", "/responses", &follow).await?;
    assert_eq!(other_org.status, 400);
    assert_eq!(
        other_org.body,
        json!({"error": {
            "message": format!("Previous response with id '{id}' not found."),
            "type": "invalid_request_error",
            "param": "previous_response_id",
            "code": "previous_response_not_found",
        }})
    );

    let not_found = json!({"error": {
        "message": format!("No response found with id '{id}'."),
        "type": "invalid_request_error",
        "param": null,
        "code": null,
    }});
    let path = format!("/responses/{id}");
    let got = get(&sim, "sk-a2", &path).await?;
    assert_eq!(got.status, 200);
    assert_eq!(got.body["id"], json!(id));
    assert_eq!(got.body["status"], "completed");
    assert_eq!(got.body["output"], first.body["output"]);
    let foreign = get(&sim, "sk-b1", &path).await?;
    assert_eq!((foreign.status, &foreign.body), (404, &not_found));

    let items = get(&sim, "sk-a2", &format!("{path}/input_items")).await?;
    assert_eq!(items.status, 200);
    assert_eq!(items.body["object"], "list");
    assert_eq!(items.body["has_more"], false);
    let data = items.body["data"].as_array().cloned().unwrap_or_default();
    assert_eq!(data.len(), 1);
    assert_eq!(data[0]["content"][0]["text"], "Remember the number 7.");
    assert_eq!(items.body["first_id"], data[0]["id"]);
    let foreign = get(&sim, "sk-b1", &format!("{path}/input_items")).await?;
    assert_eq!((foreign.status, &foreign.body), (404, &not_found));

    let cancel = format!("{path}/cancel");
    let c = post(&sim, "sk-a2", &cancel, &json!({})).await?;
    assert_eq!(c.status, 400);
    assert_eq!(c.body["error"]["message"], "Cannot cancel a completed response.");
    let foreign = post(&sim, "sk-b1", &cancel, &json!({})).await?;
    assert_eq!((foreign.status, &foreign.body), (404, &not_found));

    let foreign = send(&sim, reqwest::Method::DELETE, Some("sk-b1"), &path, None).await?;
    assert_eq!((foreign.status, &foreign.body), (404, &not_found));
    let deleted = send(&sim, reqwest::Method::DELETE, Some("sk-a2"), &path, None).await?;
    assert_eq!((deleted.status, deleted.body), (200, json!({"id": id, "object": "response.deleted", "deleted": true})));
    let gone = get(&sim, "sk-a1", &path).await?;
    assert_eq!((gone.status, &gone.body), (404, &not_found));
    Ok(())
}

#[tokio::test]
async fn unstored_responses_cannot_be_chained() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs()).await?;
    let unstored =
        post(&sim, "sk-a1", "/responses", &json!({"model": "gpt-5.5", "input": "hi", "store": false})).await?;
    let uid = unstored.body["id"].as_str().unwrap_or_default();
    let r = post(&sim, "sk-a1", "/responses", &json!({"model": "gpt-5.5", "input": "hi", "previous_response_id": uid}))
        .await?;
    assert_eq!(r.status, 400);
    assert_eq!(r.body["error"]["code"], "previous_response_not_found");
    Ok(())
}

#[tokio::test]
async fn cancel_works_while_a_stored_stream_is_in_progress() -> anyhow::Result<()> {
    use futures::StreamExt;
    let sim = Sim::start(two_orgs()).await?;
    sim.inject("sk-a1", Fault::SlowDeltas(Duration::from_millis(100)));
    let mut body = codex_body(vec![user("slow")]);
    body["store"] = json!(true);
    let resp = client().post(format!("{}/responses", sim.base_url())).bearer_auth("sk-a1").json(&body).send().await?;
    let mut bytes = resp.bytes_stream();
    let mut buf = String::new();
    while !buf.contains("\n\n") {
        let Some(chunk) = bytes.next().await else {
            anyhow::bail!("stream ended early");
        };
        buf.push_str(std::str::from_utf8(&chunk?)?);
    }
    let data = buf.lines().find_map(|l| l.strip_prefix("data: ")).unwrap_or("{}");
    let created: Value = serde_json::from_str(data)?;
    let id = created["response"]["id"].as_str().unwrap_or_default().to_owned();
    let path = format!("/responses/{id}");
    let during = get(&sim, "sk-a2", &path).await?;
    assert_eq!(during.body["status"], "in_progress");
    let foreign = post(&sim, "sk-b1", &format!("{path}/cancel"), &json!({})).await?;
    assert_eq!(foreign.status, 404);
    let cancelled = post(&sim, "sk-a2", &format!("{path}/cancel"), &json!({})).await?;
    assert_eq!(cancelled.status, 200, "{}", cancelled.body);
    assert_eq!(cancelled.body["status"], "cancelled");
    while let Some(chunk) = bytes.next().await {
        chunk?;
    }
    let after = get(&sim, "sk-a1", &path).await?;
    assert_eq!(after.body["status"], "cancelled");
    Ok(())
}

#[tokio::test]
async fn prompt_cache_is_shared_within_an_organization_only() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs()).await?;
    let prompt = big_prompt(30_000);
    let input = vec![developer(&prompt), user("Say hello. This is turn one.")];
    let events = stream(&sim, "sk-a1", "/responses", &codex_body(input.clone())).await?;
    let r1 = completed(&events)?;
    let t1 = r1["usage"]["input_tokens"].as_u64().unwrap_or(0);
    assert!(t1 > 7000, "about 30 KB / 4: {t1}");
    assert_eq!(r1["usage"]["input_tokens_details"]["cached_tokens"], 0);

    let mut turn2 = input.clone();
    turn2.extend(done_items(&events).iter().map(codex_replay));
    turn2.push(user("Now say goodbye. This is turn two."));
    let floor = t1 / 128 * 128;

    let same_key = stream(&sim, "sk-a1", "/responses", &codex_body(turn2.clone())).await?;
    let cached = completed(&same_key)?["usage"]["input_tokens_details"]["cached_tokens"].as_u64().unwrap_or(0);
    assert!(cached >= floor, "cached {cached} < {floor}");
    assert_eq!(cached % 128, 0);

    let other_key = stream(&sim, "sk-a2", "/responses", &codex_body(turn2.clone())).await?;
    let r = completed(&other_key)?;
    let cached = r["usage"]["input_tokens_details"]["cached_tokens"].as_u64().unwrap_or(0);
    assert!(cached >= floor, "same org, other key: {cached} < {floor}");
    assert!(cached <= r["usage"]["input_tokens"].as_u64().unwrap_or(0));

    let other_org = stream(&sim, "sk-b1", "/responses", &codex_body(input.clone())).await?;
    assert_eq!(completed(&other_org)?["usage"]["input_tokens_details"]["cached_tokens"], 0);

    // A different prompt_cache_key does not share entries.
    let mut other_key_body = codex_body(input);
    other_key_body["prompt_cache_key"] = json!("another-session");
    let e = stream(&sim, "sk-a1", "/responses", &other_key_body).await?;
    assert_eq!(completed(&e)?["usage"]["input_tokens_details"]["cached_tokens"], 0);

    // Below 1024 tokens nothing is cached.
    let short = codex_body(vec![developer(&big_prompt(2000)), user("hi")]);
    for _ in 0..2 {
        let e = stream(&sim, "sk-a1", "/responses", &short).await?;
        let r = completed(&e)?;
        assert!(r["usage"]["input_tokens"].as_u64().unwrap_or(0) < 1024);
        assert_eq!(r["usage"]["input_tokens_details"]["cached_tokens"], 0);
    }
    let log = sim.log();
    assert!(log.iter().any(|e| e.cached_tokens >= floor));
    Ok(())
}

#[tokio::test]
async fn rate_limits_apply_per_key_and_window() -> anyhow::Result<()> {
    let limits = Limits { requests: 2, tokens: 1_000_000, window: Duration::from_secs(1) };
    let sim = Sim::start(two_orgs().limits(limits)).await?;
    let body = json!({"model": "gpt-5.5", "input": "hi", "store": false});
    let first = post(&sim, "sk-a1", "/responses", &body).await?;
    assert_eq!(first.status, 200);
    assert_eq!(first.header("x-ratelimit-limit-requests"), Some("2"));
    assert_eq!(first.header("x-ratelimit-remaining-requests"), Some("1"));
    assert_eq!(first.header("x-ratelimit-limit-tokens"), Some("1000000"));
    let second = post(&sim, "sk-a1", "/responses", &body).await?;
    assert_eq!(second.status, 200);
    assert_eq!(second.header("x-ratelimit-remaining-requests"), Some("0"));
    let third = post(&sim, "sk-a1", "/responses", &body).await?;
    assert_eq!(third.status, 429);
    let retry: u64 = third.header("retry-after").unwrap_or("").parse()?;
    assert!((1..=1).contains(&retry), "retry-after {retry}");
    let retry_ms: u64 = third.header("retry-after-ms").unwrap_or("").parse()?;
    assert!(retry_ms > 0 && retry_ms <= 1000, "{retry_ms}");
    assert_eq!(third.header("x-ratelimit-remaining-requests"), Some("0"));
    let remaining_tokens: u64 = third.header("x-ratelimit-remaining-tokens").unwrap_or("").parse()?;
    assert!(remaining_tokens < 1_000_000 && remaining_tokens > 999_000);
    let reset = third.header("x-ratelimit-reset-requests").unwrap_or("");
    assert!(reset.ends_with("ms") || reset.ends_with('s'), "{reset}");
    assert!(third.header("x-ratelimit-reset-tokens").is_some());
    assert_eq!(third.header("openai-organization"), Some("org-a"));
    assert_eq!(third.body["error"]["type"], "requests");
    assert_eq!(third.body["error"]["code"], "rate_limit_exceeded");
    let msg = third.body["error"]["message"].as_str().unwrap_or("");
    assert!(
        msg.starts_with(
            "Rate limit reached for gpt-5.5 in organization org-a on requests per min (RPM): Limit 2, Used 2, Requested 1. Please try again in "
        ),
        "{msg}"
    );

    // Another key has its own window.
    assert_eq!(post(&sim, "sk-a2", "/responses", &body).await?.status, 200);
    sim.advance(Duration::from_millis(retry_ms));
    let again = post(&sim, "sk-a1", "/responses", &body).await?;
    assert_eq!(again.status, 200);
    assert_eq!(again.header("x-ratelimit-remaining-requests"), Some("1"));

    assert_eq!(sim.count_by_key().get("sk-a1"), Some(&3));
    assert_eq!(sim.log().iter().filter(|e| e.status == 429).count(), 1);
    Ok(())
}

#[tokio::test]
async fn token_limits_refuse_with_type_tokens() -> anyhow::Result<()> {
    let limits = Limits { requests: 100, tokens: 50, window: Duration::from_secs(30) };
    let sim = Sim::start(two_orgs().limits(limits)).await?;
    let body = json!({"model": "gpt-5.5", "input": "x".repeat(120)});
    assert_eq!(post(&sim, "sk-a1", "/responses", &body).await?.status, 200);
    let r = post(&sim, "sk-a1", "/responses", &body).await?;
    assert_eq!(r.status, 429);
    assert_eq!(r.body["error"]["type"], "tokens");
    let retry: u64 = r.header("retry-after").unwrap_or("").parse()?;
    assert!((29..=30).contains(&retry), "{retry}");
    Ok(())
}

#[tokio::test]
async fn sse_sequence_is_complete_and_ordered() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs()).await?;
    let events = stream(&sim, "sk-a1", "/responses", &codex_body(vec![user("Say hello. This is turn one.")])).await?;
    let kinds: Vec<&str> = events.iter().map(Event::kind).collect();
    let mut expected = vec![
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
    ];
    expected.extend(std::iter::repeat_n("response.output_text.delta", 4));
    expected.extend([
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]);
    assert_eq!(kinds, expected);
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e.data["sequence_number"], json!(i));
        assert_eq!(e.name.as_deref(), Some(e.kind()));
    }
    let created = &events[0].data["response"];
    assert_eq!(created["status"], "in_progress");
    assert_eq!(created["object"], "response");
    let rs_added = &events[2].data["item"];
    assert_eq!(rs_added["type"], "reasoning");
    assert!(rs_added.get("encrypted_content").is_none());
    assert!(events[3].data["item"]["encrypted_content"].is_string());
    let deltas: String = events
        .iter()
        .filter(|e| e.kind() == "response.output_text.delta")
        .filter_map(|e| e.data["delta"].as_str())
        .collect();
    assert!(deltas.starts_with("SIM-REPLY #1 from org-a: Say hello. This is turn one."), "{deltas}");
    let r = completed(&events)?;
    assert_eq!(r["status"], "completed");
    assert_eq!(r["model"], "gpt-5.5");
    assert_eq!(r["store"], false);
    assert_eq!(r["previous_response_id"], Value::Null);
    assert_eq!(r["output"][1]["content"][0]["text"], json!(deltas));
    assert_eq!(r["output"], json!(done_items(&events)));
    let usage = &r["usage"];
    let total = usage["input_tokens"].as_u64().unwrap_or(0) + usage["output_tokens"].as_u64().unwrap_or(0);
    assert_eq!(usage["total_tokens"], json!(total));
    assert!(usage["output_tokens_details"]["reasoning_tokens"].as_u64().unwrap_or(0) > 0);

    // Without include there is no encrypted_content; with effort none there is no reasoning.
    let mut body = codex_body(vec![user("plain")]);
    body.as_object_mut().map(|m| m.remove("include"));
    let items = done_items(&stream(&sim, "sk-a1", "/responses", &body).await?);
    assert!(items[0].get("encrypted_content").is_none());
    body["reasoning"] = json!({"effort": "none"});
    let items = done_items(&stream(&sim, "sk-a1", "/responses", &body).await?);
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["type"], "message");
    assert_eq!(items[0]["id"].as_str().map(str::len), Some(4 + 48));

    // The JSON form is the completed response.
    let mut json_body = codex_body(vec![user("json please")]);
    json_body["stream"] = json!(false);
    let j = post(&sim, "sk-a1", "/responses", &json_body).await?;
    assert_eq!(j.status, 200);
    assert_eq!(j.body["status"], "completed");
    assert_eq!(j.body["output"].as_array().map(Vec::len), Some(2));
    assert!(j.header("content-type").is_some_and(|c| c.starts_with("application/json")));
    Ok(())
}

#[tokio::test]
async fn slow_deltas_spread_events_over_time() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs()).await?;
    sim.inject("sk-a1", Fault::SlowDeltas(Duration::from_millis(100)));
    let events = stream(&sim, "sk-a1", "/responses", &codex_body(vec![user("slow")])).await?;
    assert_eq!(events.len(), 14);
    let spread = events[events.len() - 1].at.duration_since(events[0].at);
    assert!(spread >= Duration::from_millis(300), "{spread:?}");
    // Events arrive one by one, not in a burst at the end.
    let first_half = events[6].at.duration_since(events[0].at);
    assert!(first_half >= Duration::from_millis(300), "{first_half:?}");
    Ok(())
}

#[tokio::test]
async fn error_faults_answer_with_openai_errors() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs()).await?;
    let body = json!({"model": "gpt-5.5", "input": "hi"});

    sim.inject("sk-a1", Fault::Status500);
    let r = post(&sim, "sk-a1", "/responses", &body).await?;
    assert_eq!(r.status, 500);
    assert_eq!(
        r.body,
        json!({"error": {"message": "The server had an error while processing your request. Sorry about that!",
                         "type": "server_error", "param": null, "code": null}})
    );
    assert_eq!(r.header("openai-organization"), Some("org-a"));

    sim.inject("sk-a1", Fault::Status503 { retry_after_secs: Some(2) });
    sim.inject("sk-a1", Fault::Status503 { retry_after_secs: None });
    let r = post(&sim, "sk-a1", "/responses", &body).await?;
    assert_eq!((r.status, r.header("retry-after")), (503, Some("2")));
    let r = post(&sim, "sk-a1", "/responses", &body).await?;
    assert_eq!((r.status, r.header("retry-after")), (503, None));

    sim.inject("sk-a1", Fault::RateLimited { retry_after_secs: 3 });
    let r = post(&sim, "sk-a1", "/responses", &body).await?;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("3"));
    assert_eq!(r.header("retry-after-ms"), Some("3000"));
    assert_eq!(r.body["error"]["code"], "rate_limit_exceeded");

    sim.inject("sk-a1", Fault::InvalidKey);
    let r = post(&sim, "sk-a1", "/responses", &body).await?;
    assert_eq!(r.status, 401);
    assert_eq!(r.body["error"]["code"], "invalid_api_key");
    let msg = r.body["error"]["message"].as_str().unwrap_or("");
    assert!(msg.starts_with("Incorrect API key provided: sk***."), "{msg}");

    sim.inject("sk-a1", Fault::InsufficientQuota);
    let r = post(&sim, "sk-a1", "/responses", &body).await?;
    assert_eq!(r.status, 429);
    assert_eq!(r.body["error"]["type"], "insufficient_quota");
    assert_eq!(r.body["error"]["code"], "insufficient_quota");
    assert!(r.header("retry-after").is_none());
    assert!(
        r.body["error"]["message"].as_str().is_some_and(
            |m| m.starts_with("You exceeded your current quota, please check your plan and billing details.")
        )
    );

    sim.inject("sk-a1", Fault::ModelNotFound);
    let r = post(&sim, "sk-a1", "/responses", &body).await?;
    assert_eq!(r.status, 404);
    assert_eq!(r.body["error"]["code"], "model_not_found");
    assert_eq!(r.body["error"]["message"], "The model `gpt-5.5` does not exist or you do not have access to it.");

    // Faults are per key, and a queue drains: the next request is served.
    sim.inject("sk-a2", Fault::Status500);
    assert_eq!(post(&sim, "sk-a1", "/responses", &body).await?.status, 200);
    sim.clear_faults();
    assert_eq!(post(&sim, "sk-a2", "/responses", &body).await?.status, 200);

    let codes: Vec<Option<String>> = sim.log().iter().map(|e| e.error_code.clone()).collect();
    assert_eq!(codes[0].as_deref(), Some("server_error"));
    assert_eq!(sim.count_by_key().get("sk-a1"), Some(&8));
    Ok(())
}

#[tokio::test]
async fn cut_after_events_ends_the_stream_abruptly() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs()).await?;
    sim.inject("sk-a1", Fault::CutAfterEvents(3));
    let resp = client()
        .post(format!("{}/responses", sim.base_url()))
        .bearer_auth("sk-a1")
        .json(&codex_body(vec![user("cut")]))
        .send()
        .await?;
    assert_eq!(resp.status(), 200);
    let (events, clean) = read_sse(resp).await?;
    assert!(!clean, "the body must end with an error");
    assert_eq!(events.len(), 3);
    assert!(events.iter().all(|e| e.kind() != "response.completed"));

    // A non-streaming body is cut too.
    sim.inject("sk-a1", Fault::CutAfterEvents(0));
    let resp = client()
        .post(format!("{}/responses", sim.base_url()))
        .bearer_auth("sk-a1")
        .json(&json!({"model": "gpt-5.5", "input": "cut"}))
        .send()
        .await?;
    assert_eq!(resp.status(), 200);
    assert!(resp.bytes().await.is_err());

    // The next request is whole again.
    let events = stream(&sim, "sk-a1", "/responses", &codex_body(vec![user("whole")])).await?;
    assert!(completed(&events).is_ok());
    Ok(())
}

#[tokio::test]
#[expect(clippy::disallowed_methods, reason = "a slow first byte is slow in real time")]
async fn slow_first_byte_delays_the_headers() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs()).await?;
    sim.inject("sk-a1", Fault::SlowFirstByte(Duration::from_millis(400)));
    let t = Instant::now();
    let resp = client()
        .post(format!("{}/responses", sim.base_url()))
        .bearer_auth("sk-a1")
        .json(&codex_body(vec![user("slow start")]))
        .send()
        .await?;
    assert!(t.elapsed() >= Duration::from_millis(400), "{:?}", t.elapsed());
    let (events, clean) = read_sse(resp).await?;
    assert!(clean && completed(&events).is_ok());
    let t = Instant::now();
    stream(&sim, "sk-a1", "/responses", &codex_body(vec![user("fast")])).await?;
    assert!(t.elapsed() < Duration::from_millis(400));
    Ok(())
}

#[tokio::test]
async fn every_answer_carries_the_openai_headers() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs()).await?;
    let ok = post(&sim, "sk-a1", "/responses", &json!({"model": "gpt-5.5", "input": "hi"})).await?;
    let bad = post(&sim, "sk-b1", "/responses", &json!({"model": "nope", "input": "hi"})).await?;
    assert_eq!(bad.status, 404);
    assert_eq!(bad.body["error"]["code"], "model_not_found");
    for a in [&ok, &bad] {
        let rid = a.header("x-request-id").unwrap_or("");
        assert!(rid.starts_with("req_") && rid.len() == 36, "{rid}");
        assert!(a.header("openai-processing-ms").is_some_and(|v| v.parse::<u64>().is_ok()));
        for h in [
            "x-ratelimit-limit-requests",
            "x-ratelimit-limit-tokens",
            "x-ratelimit-remaining-requests",
            "x-ratelimit-remaining-tokens",
            "x-ratelimit-reset-requests",
            "x-ratelimit-reset-tokens",
        ] {
            assert!(a.header(h).is_some(), "{h} missing");
        }
    }
    assert_eq!(ok.header("openai-organization"), Some("org-a"));
    assert_eq!(bad.header("openai-organization"), Some("org-b"));

    let missing = send(&sim, reqwest::Method::POST, None, "/responses", Some(&json!({}))).await?;
    assert_eq!(missing.status, 401);
    assert!(missing.header("openai-organization").is_none());
    assert!(missing.header("x-ratelimit-limit-requests").is_some());
    assert!(missing.body["error"]["message"].as_str().is_some_and(|m| m.starts_with("You didn't provide an API key.")));

    let wrong = post(&sim, "sk-wrong-key-123", "/responses", &json!({})).await?;
    assert_eq!(wrong.status, 401);
    assert_eq!(
        wrong.body,
        json!({"error": {
            "message": "Incorrect API key provided: sk-wr***. You can find your API key at https://platform.openai.com/account/api-keys.",
            "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}})
    );

    let resp = client()
        .post(format!("{}/responses", sim.base_url()))
        .bearer_auth("sk-a1")
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await?;
    assert_eq!(resp.status(), 400);
    let v: Value = resp.json().await?;
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert!(v["error"]["message"].as_str().is_some_and(|m| m.contains("could not parse the JSON body")));

    let log = sim.log();
    assert!(log.windows(2).all(|w| w[0].seq < w[1].seq));
    let first = &log[0];
    assert_eq!(first.transport, Transport::Http);
    assert_eq!((first.method.as_str(), first.path.as_str()), ("POST", "/v1/responses"));
    assert_eq!(first.key.as_deref(), Some("sk-a1"));
    assert_eq!(first.model.as_deref(), Some("gpt-5.5"));
    assert_eq!(first.body.as_ref().map(|b| b["input"].clone()), Some(json!("hi")));
    assert!(first.headers.iter().any(|(k, v)| k == "authorization" && v == "<redacted>"));
    assert!(log.iter().all(|e| e.headers.iter().all(|(_, v)| !v.contains("sk-a1"))));
    let unknown = log.iter().find(|e| e.status == 401).map(|e| e.key.clone());
    assert_eq!(unknown, Some(None));
    Ok(())
}
