//! The simulator's clock: tests advance it instead of waiting, and rate-limit windows, their
//! headers, the prompt cache and WebSocket connection ages all follow it.

mod common;

use std::time::Duration;

use common::*;
use keymux_sim::{Limits, Sim};
use serde_json::{json, Value};

fn one_a_minute() -> Limits {
    Limits { requests: 1, tokens: 1_000_000, window: Duration::from_secs(60) }
}

fn header_u64(a: &Answer, name: &str) -> u64 {
    a.header(name).and_then(|v| v.parse().ok()).unwrap_or(u64::MAX)
}

#[tokio::test]
async fn advancing_by_the_window_serves_a_rate_limited_key_again() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs().limits(one_a_minute())).await?;
    let body = json!({"model": "gpt-5.5", "input": "hi", "store": false});
    assert_eq!(post(&sim, "sk-a1", "/responses", &body).await?.status, 200);

    // A third of the window later, the refusal counts down from the advanced clock.
    sim.advance(Duration::from_secs(20));
    let refused = post(&sim, "sk-a1", "/responses", &body).await?;
    assert_eq!(refused.status, 429);
    assert!((39..=40).contains(&header_u64(&refused, "retry-after")), "{:?}", refused.header("retry-after"));
    assert!((39_000..=40_000).contains(&header_u64(&refused, "retry-after-ms")));
    let reset = refused.header("x-ratelimit-reset-requests").unwrap_or("");
    assert!(reset.starts_with("39") || reset == "40s", "{reset}");
    let message = refused.body["error"]["message"].as_str().unwrap_or("");
    assert!(message.contains("Please try again in 39") || message.contains("in 40s"), "{message}");

    // The rest of the window: served at once, in a fresh window.
    sim.advance(Duration::from_secs(40));
    let again = post(&sim, "sk-a1", "/responses", &body).await?;
    assert_eq!(again.status, 200);
    assert_eq!(again.header("x-ratelimit-remaining-requests"), Some("0"));

    // A whole window in one step works too, and WebSocket frames share the same window.
    let mut ws = connect_key(&sim, "sk-a1").await?;
    let frames = exchange(&mut ws, &codex_body(vec![user("over ws")])).await?;
    assert_eq!((frames[0]["type"].clone(), frames[0]["status"].clone()), (json!("error"), json!(429)));
    assert!(frames[0]["headers"]["retry-after"].as_str().is_some_and(|s| s == "60" || s == "59"), "{}", frames[0]);
    sim.advance(Duration::from_secs(60));
    let frames = exchange(&mut ws, &codex_body(vec![user("over ws")])).await?;
    assert_eq!(last_response(&frames)["status"], "completed");
    Ok(())
}

#[tokio::test]
async fn advance_over_the_control_surface() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs().limits(one_a_minute())).await?;
    let root = sim.base_url().trim_end_matches("/v1").to_owned();
    let body = json!({"model": "gpt-5.5", "input": "hi"});
    assert_eq!(post(&sim, "sk-a1", "/responses", &body).await?.status, 200);
    assert_eq!(post(&sim, "sk-a1", "/responses", &body).await?.status, 429);
    let r = client().post(format!("{root}/__sim/advance")).json(&json!({"ms": 60_000})).send().await?;
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await?, json!({"skew_ms": 60_000}));
    assert_eq!(post(&sim, "sk-a1", "/responses", &body).await?.status, 200);
    let bad = client().post(format!("{root}/__sim/advance")).json(&json!({"seconds": 1})).send().await?;
    assert_eq!(bad.status(), 400);
    Ok(())
}

#[tokio::test]
async fn prompt_cache_entries_expire_with_the_clock() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs().cache_ttl(Duration::from_secs(300))).await?;
    let body = codex_body(vec![developer(&big_prompt(8_000)), user("cache me")]);
    let cached = |events: &[Event]| -> anyhow::Result<u64> {
        Ok(completed(events)?["usage"]["input_tokens_details"]["cached_tokens"].as_u64().unwrap_or(0))
    };
    assert_eq!(cached(&stream(&sim, "sk-a1", "/responses", &body).await?)?, 0);
    sim.advance(Duration::from_secs(299));
    assert!(cached(&stream(&sim, "sk-a1", "/responses", &body).await?)? >= 1024, "still within the TTL");
    sim.advance(Duration::from_secs(300));
    assert_eq!(cached(&stream(&sim, "sk-a1", "/responses", &body).await?)?, 0, "expired");
    Ok(())
}
