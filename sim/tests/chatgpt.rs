//! The ChatGPT Codex backend of one plan: its login (expiry, refresh with a rotating refresh token),
//! the body it requires and the fields it refuses, its usage windows in headers and the 429 once one
//! is used up, and the plan's organization, which no API key's can read.

mod common;

use std::time::Duration;

use keymux_sim::{ChatgptTokens, PlanSpec, Sim, SimConfig};
use serde_json::{json, Value};

const ACCOUNT: &str = "acct-plan-1";

async fn start(spec: PlanSpec) -> Sim {
    Sim::start(SimConfig::new().org("org-a", &["sk-a1"]).chatgpt_plan(spec)).await.expect("sim starts")
}

fn turn() -> Value {
    json!({"model": "gpt-5.5", "instructions": "be brief", "input": "hi", "stream": true, "store": false,
           "include": ["reasoning.encrypted_content"]})
}

/// Posts `body` to the backend's `path` with the plan's token; the status, headers and body text.
async fn backend(sim: &Sim, token: &str, path: &str, body: &Value) -> (u16, reqwest::header::HeaderMap, String) {
    let resp = common::client()
        .post(format!("{}{path}", sim.chatgpt_base_url()))
        .bearer_auth(token)
        .header("chatgpt-account-id", ACCOUNT)
        .json(body)
        .send()
        .await
        .expect("sent");
    let (status, headers) = (resp.status().as_u16(), resp.headers().clone());
    (status, headers, resp.text().await.expect("body"))
}

async fn refresh(sim: &Sim, refresh_token: &str) -> (u16, Value) {
    let body = json!({"client_id": "app_EMoamEEZ73f0CkXaXp7hrann", "grant_type": "refresh_token",
                      "refresh_token": refresh_token, "scope": "openid profile email"});
    let resp = common::client().post(format!("{}/oauth/token", sim.chatgpt_auth_url())).json(&body).send().await;
    let resp = resp.expect("sent");
    (resp.status().as_u16(), resp.json().await.unwrap_or_default())
}

fn tokens(sim: &Sim) -> ChatgptTokens {
    sim.chatgpt_tokens().expect("a plan")
}

#[tokio::test]
async fn the_plan_lists_its_models_in_codexs_catalog_shape() {
    let sim = start(PlanSpec::new(ACCOUNT).models(&["gpt-6.2-sol", "gpt-5.5"])).await;
    let resp = common::client()
        .get(format!("{}/models?client_version=0.171.0", sim.chatgpt_base_url()))
        .bearer_auth(&tokens(&sim).access_token)
        .header("chatgpt-account-id", ACCOUNT)
        .send()
        .await
        .expect("sent");
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.expect("json");
    let slugs: Vec<&str> =
        body["models"].as_array().expect("models").iter().filter_map(|m| m["slug"].as_str()).collect();
    assert_eq!(slugs, ["gpt-5.5", "gpt-6.2-sol"], "in the simulator's order");
    let (status, _, text) = backend(
        &sim,
        &tokens(&sim).access_token,
        "/responses",
        &json!({"model": "gpt-4.1",
        "instructions": "x", "input": "hi", "stream": true, "store": false}),
    )
    .await;
    assert_eq!(status, 400, "a model the plan does not have: {text}");
    assert!(text.contains("not supported when using Codex with a ChatGPT account"), "{text}");
}

#[tokio::test]
async fn a_turn_on_the_plan_streams_with_its_windows_and_no_organization_header() {
    let sim = start(PlanSpec::new(ACCOUNT)).await;
    let (status, headers, body) = backend(&sim, &tokens(&sim).access_token, "/responses", &turn()).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("response.completed"), "{body}");
    assert!(headers.get("openai-organization").is_none());
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    assert_eq!(header("x-codex-primary-window-minutes").as_deref(), Some("300"));
    assert_eq!(header("x-codex-secondary-window-minutes").as_deref(), Some("10080"));
    assert!(header("x-codex-primary-used-percent").is_some());
}

#[tokio::test]
async fn what_the_backend_requires_and_refuses_is_said_in_its_own_words() {
    let sim = start(PlanSpec::new(ACCOUNT)).await;
    let token = tokens(&sim).access_token;
    let cases = [
        ("stream", json!(false), "Stream must be set to true"),
        ("store", json!(true), "Store must be set to false"),
        ("max_output_tokens", json!(64), "Unsupported parameter: max_output_tokens"),
    ];
    for (field, value, said) in cases {
        let mut body = turn();
        body[field] = value;
        let (status, _, text) = backend(&sim, &token, "/responses", &body).await;
        assert_eq!((status, serde_json::from_str::<Value>(&text).ok()), (400, Some(json!({"detail": said}))));
    }
    let mut bare = turn();
    bare.as_object_mut().map(|b| b.remove("instructions"));
    let (status, _, text) = backend(&sim, &token, "/responses", &bare).await;
    assert_eq!((status, text.contains("Instructions are required")), (400, true), "{text}");
    let resp = common::client().post(format!("{}/responses", sim.chatgpt_base_url())).bearer_auth(&token);
    let resp = resp.json(&turn()).send().await.expect("sent");
    assert_eq!(resp.status().as_u16(), 403, "no chatgpt-account-id header");
}

#[tokio::test]
async fn an_expired_token_is_refused_and_a_refresh_rotates_the_refresh_token() {
    let sim = start(PlanSpec::new(ACCOUNT).token_lifetime(Duration::from_secs(600))).await;
    let first = tokens(&sim);
    sim.advance(Duration::from_secs(601));
    let (status, _, body) = backend(&sim, &first.access_token, "/responses", &turn()).await;
    assert_eq!(status, 401);
    assert!(body.contains("token_expired"), "{body}");
    let (status, answer) = refresh(&sim, &first.refresh_token).await;
    assert_eq!(status, 200, "{answer}");
    let next = answer["access_token"].as_str().expect("a new access token").to_owned();
    assert_ne!(next, first.access_token);
    assert_eq!(backend(&sim, &next, "/responses", &turn()).await.0, 200);
    let (status, reused) = refresh(&sim, &first.refresh_token).await;
    assert_eq!((status, reused["error"]["code"].as_str()), (401, Some("refresh_token_reused")));
    assert_eq!(sim.chatgpt_refreshes(), 1);
}

#[tokio::test]
async fn a_used_up_window_answers_usage_limit_reached_until_it_resets() {
    let sim = start(PlanSpec::new(ACCOUNT).windows(2, 100).token_lifetime(Duration::from_secs(86_400))).await;
    let token = tokens(&sim).access_token;
    for _ in 0..2 {
        assert_eq!(backend(&sim, &token, "/responses", &turn()).await.0, 200);
    }
    let (status, headers, body) = backend(&sim, &token, "/responses", &turn()).await;
    assert_eq!(status, 429);
    let error: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(error["error"]["type"], "usage_limit_reached");
    assert_eq!(error["error"]["plan_type"], "plus");
    let wait = error["error"]["resets_in_seconds"].as_u64().expect("a reset");
    assert!((1..=5 * 3600).contains(&wait), "{wait}");
    assert_eq!(headers.get("x-codex-primary-used-percent").and_then(|v| v.to_str().ok()), Some("100.0"));
    sim.advance(Duration::from_secs(wait));
    assert_eq!(backend(&sim, &token, "/responses", &turn()).await.0, 200, "the window reset");
}

#[tokio::test]
async fn the_plans_reasoning_is_unreadable_to_an_api_keys_organization() {
    let sim = start(PlanSpec::new(ACCOUNT)).await;
    let (status, _, body) = backend(&sim, &tokens(&sim).access_token, "/responses", &turn()).await;
    assert_eq!(status, 200);
    let done =
        body.lines().filter_map(|l| l.strip_prefix("data: ")).filter_map(|l| serde_json::from_str::<Value>(l).ok());
    let completed = done.into_iter().find(|e| e["type"] == "response.completed").expect("completed");
    let reasoning: Vec<Value> = completed["response"]["output"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["type"] == "reasoning")
        .cloned()
        .collect();
    assert!(!reasoning.is_empty(), "{completed}");
    let mut replay = json!({"model": "gpt-5.5", "input": reasoning, "store": false});
    replay["input"].as_array_mut().expect("items").push(json!({"role": "user", "content": "again"}));
    let answer = common::post(&sim, "sk-a1", "/responses", &replay).await.expect("sent");
    assert_eq!(answer.status, 400);
    assert_eq!(answer.body["error"]["code"], "invalid_encrypted_content");
}
