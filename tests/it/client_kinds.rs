//! Which client sent a request, as the decisions API records it, from the exact headers each client
//! sends (captured on loopback): pi 1.x names itself in `user-agent`, pi 0.73 sent the OpenAI JS SDK's
//! with pi's `session_id` header.
#![allow(clippy::unwrap_used, reason = "tests")]

use crate::support;

use keymux_sim::SimConfig;
use support::*;

#[tokio::test]
async fn pi_1_6_requests_are_recorded_as_pi() {
    let h = Harness::start(SimConfig::new().org("org-a", &["sk-a1"]), &[key("a1", "sk-a1")]).await;
    let captured = [
        "pi/v1.6-responses-turn1.json",
        "pi/v1.6-chat-completions-turn1.json",
        // pi 0.73 still counts as pi.
        "pi/responses-turn1.json",
    ];
    let mut sent = Vec::new();
    for name in captured {
        let path = fixture(name)["path"].as_str().unwrap().to_owned();
        let url = format!("{}{}", h.base, path.strip_prefix("/v1").unwrap());
        let response = post(&client(), &url, &captured_headers(name), &captured_body(name)).send().await.unwrap();
        assert_eq!(response.status(), 200, "{name}");
        let _ = response.bytes().await;
        sent.push((name, "pi"));
    }
    let decisions = decisions_api(&h.root).await;
    let mut records: Vec<&serde_json::Value> = decisions["data"].as_array().unwrap().iter().collect();
    records.sort_by_key(|r| r["decision"]["seq"].as_u64());
    let seen: Vec<(&str, &str)> =
        captured.iter().zip(&records).map(|(name, r)| (*name, r["client"].as_str().unwrap())).collect();
    assert_eq!(seen, sent, "{decisions}");
}
