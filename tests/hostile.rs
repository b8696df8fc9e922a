//! Hostile and odd input, from clients and from upstreams: each gets a clear, well-formed answer, and
//! the gateway keeps serving.
#![allow(clippy::unwrap_used, clippy::disallowed_methods, reason = "tests")]

mod support;

use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use keymux_sim::SimConfig;
use serde_json::{json, Value};
use support::*;

/// A tiny upstream that answers each key its own way (by the bearer it is sent).
async fn upstream(answer: impl Fn(&str) -> Response + Send + Sync + 'static) -> String {
    let answer = Arc::new(answer);
    let app = axum::Router::new()
        .route("/v1/models", axum::routing::get(|| async { axum::Json(json!({"object":"list","data":[]})) }))
        .fallback(move |headers: HeaderMap| {
            let answer = answer.clone();
            async move {
                let bearer = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
                answer(bearer.trim_start_matches("Bearer "))
            }
        });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    base
}

fn ok_answer() -> Response {
    axum::Json(json!({"id":"resp_1","object":"response","status":"completed","output":[],"usage":{"input_tokens":1,"output_tokens":1}}))
        .into_response()
}

async fn gateway_before(base: String) -> Harness {
    Harness::start_with(
        SimConfig::new().org("org-a", &["sk-a1"]),
        &[key("a1", "sk-a1"), key("b1", "sk-b1").priority(1)],
        |c| c.upstream = base,
    )
    .await
}

#[tokio::test]
async fn absurd_rate_limit_headers_never_lose_an_answer() {
    for (name, value) in
        [("retry-after", "1e30"), ("retry-after-ms", "1e300"), ("x-ratelimit-reset-tokens", "3000000000000000h")]
    {
        let base = upstream(move |key| match key {
            "sk-a1" => (
                StatusCode::TOO_MANY_REQUESTS,
                [(name, value)],
                axum::Json(json!({"error":{"code":"rate_limit_exceeded","message":"slow down"}})),
            )
                .into_response(),
            _ => {
                let mut ok = ok_answer();
                ok.headers_mut().insert(name, value.parse().unwrap());
                ok.headers_mut().insert("x-ratelimit-limit-tokens", "1000".parse().unwrap());
                ok.headers_mut().insert("x-ratelimit-remaining-tokens", "900".parse().unwrap());
                ok
            }
        })
        .await;
        let h = gateway_before(base).await;
        let r = post(&client(), &format!("{}/responses", h.base), &[], &json!({"model":"gpt-5.5","input":"x"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{name}: {value}: the other key's answer reached the client");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["status"], "completed");
        let a1 = h.status().into_iter().find(|k| k.label == "a1").unwrap();
        assert_eq!(a1.health, "cooling", "{name}");
        assert!(a1.cooldown_ms <= 24 * 3_600_000, "{name}: clamped to a day, got {} ms", a1.cooldown_ms);
        // Still serving.
        let r = post(&client(), &format!("{}/responses", h.base), &[], &json!({"model":"gpt-5.5","input":"y"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
}

#[tokio::test]
async fn dot_segments_never_reach_the_provider() {
    let h = Harness::start(SimConfig::new().org("org-a", &["sk-a1"]), &[key("a1", "sk-a1")]).await;
    // Sent as raw bytes: an HTTP client library would resolve the dot segments before sending.
    let addr = h.root.trim_start_matches("http://").to_owned();
    for path in ["/v1/x/%2e%2e/%2e%2e/other/collect", "/v1/x/../../other", "/v1/./models", "/v1/x/%2E%2e/y"] {
        let (status, body) = raw_get(&addr, path).await;
        assert_eq!(status, 400, "{path}: {body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["error"]["code"], "invalid_path", "{path}");
    }
    assert!(client_counts(&h.sim).is_empty(), "no credential went anywhere");
}

#[tokio::test]
async fn an_oversized_upstream_error_is_replaced_by_a_well_formed_one() {
    let base = upstream(|_| {
        let huge = format!("{{\"error\":{{\"message\":\"{}\",\"code\":\"bad\"}}}}", "x".repeat(600 * 1024));
        (StatusCode::BAD_REQUEST, [("content-type", "application/json")], huge).into_response()
    })
    .await;
    let h = gateway_before(base).await;
    let r = post(&client(), &format!("{}/responses", h.base), &[], &json!({"model":"gpt-5.5","input":"x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400, "the provider's status is kept");
    let v: Value = serde_json::from_slice(&r.bytes().await.unwrap()).expect("well-formed JSON, never cut in half");
    assert_eq!(v["error"]["code"], "keymux_upstream_answer_too_large");
}

#[tokio::test]
async fn a_json_answer_cut_before_its_end_fails_over() {
    let base = upstream(|key| match key {
        // The body breaks off after its first chunk (the pause lets the headers and that chunk go out
        // first, as a real cut does).
        "sk-a1" => {
            use futures::StreamExt as _;
            let first = futures::stream::once(async { Ok::<_, std::io::Error>("{\"id\":\"resp_1\",\"output\":[") });
            let cut = futures::stream::once(async {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                Err(std::io::Error::other("cut"))
            });
            Response::builder()
                .status(200)
                .header("content-type", "application/json")
                .body(axum::body::Body::from_stream(first.chain(cut)))
                .unwrap()
        }
        _ => ok_answer(),
    })
    .await;
    let h = gateway_before(base).await;
    let r = post(&client(), &format!("{}/responses", h.base), &[], &json!({"model":"gpt-5.5","input":"x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["status"], "completed", "a whole answer from the other key");
    let record = h.gateway.events().recent(1).pop().unwrap();
    assert_eq!(record.attempts[0].failure, Some(keymux::events::FailureKind::UpstreamCut));
}

#[tokio::test]
async fn duplicate_and_mistyped_models_are_named_in_the_error() {
    let h = Harness::start(SimConfig::new().org("org-a", &["sk-a1"]), &[key("a1", "sk-a1")]).await;
    for (body, want) in [
        (r#"{"model":"gpt-5.5","model":"gpt-4o","input":"x"}"#, "`model` more than once"),
        (r#"{"model":42,"input":"x"}"#, "`model` must be a string"),
    ] {
        let r = client().post(format!("{}/responses", h.base)).bearer_auth(TOKEN).body(body).send().await.unwrap();
        assert_eq!(r.status(), 400);
        let v: Value = r.json().await.unwrap();
        assert!(v["error"]["message"].as_str().unwrap().contains(want), "{v}");
    }
    assert!(client_counts(&h.sim).is_empty());
}

/// A GET sent byte for byte (no URL normalisation); the status and the body.
async fn raw_get(addr: &str, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request =
        format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {TOKEN}\r\nconnection: close\r\n\r\n");
    socket.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    socket.read_to_string(&mut answer).await.unwrap();
    let status = answer.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (status, body)
}
