//! Request bodies sent compressed, as Codex with a ChatGPT login and pi's Codex fallback send them
//! (`content-encoding: zstd`; gzip and br are legal too): Keymux decodes them before it reads markers
//! and affinity, forwards the body it read (decoded, without `content-encoding`), holds the decoded
//! size to its cap, and refuses what it cannot read with an error that says what to do.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::io::Write as _;

use crate::support;

use keymux_sim::SimConfig;
use serde_json::Value;
use support::*;

/// Two organizations, one key each: a turn that lands in the wrong one is refused by the provider.
/// Unpinned requests go to org-a's key (priority 0) first.
async fn harness(tweak: impl FnOnce(&mut keymux::config::Config)) -> Harness {
    let sim = SimConfig::new().org("org-a", &["sk-a1"]).org("org-b", &["sk-b1"]);
    Harness::start_with(sim, &[key("a1", "sk-a1"), key("b1", "sk-b1").priority(1)], tweak).await
}

fn zstd(bytes: &[u8]) -> Vec<u8> {
    zstd::encode_all(bytes, 3).unwrap()
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

/// A `POST /v1/responses` of `body` as it is, sent with `content-encoding: coding` (and Codex's originator).
async fn send_encoded(h: &Harness, coding: &str, body: Vec<u8>) -> (u16, Value) {
    let response = client()
        .post(format!("{}/responses", h.base))
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .header("content-encoding", coding)
        .header("originator", "codex_exec")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// Responses the upstream was asked for (the start-up probes of `/v1/models` left out).
fn upstream_turns(h: &Harness) -> Vec<keymux_sim::LogEntry> {
    h.sim.log().into_iter().filter(|e| e.path == "/v1/responses").collect()
}

/// A first turn through Keymux, then a second that replays its marked reasoning with its body
/// compressed by `encode` and labelled `coding`: it must reach the organization that made the
/// reasoning, which reads it (anywhere else the provider answers `invalid_encrypted_content`).
async fn a_compressed_turn_is_pinned_by_its_markers(coding: &str, encode: fn(&[u8]) -> Vec<u8>) {
    let h = harness(|_| {}).await;
    let mut session = Session::new(Shape::Codex, 1, false);
    assert_eq!(session.turn(&client(), &h.base, false).await.status, 200);
    let owner = upstream_turns(&h).last().unwrap().org.clone().unwrap();
    assert_eq!(owner, "org-a");
    // From now on an unpinned request goes to org-b: only the markers can bring the next turn to org-a.
    let (status, _) = Admin::new(&h.root).patch("/keys/k_a1", serde_json::json!({"priority": 2})).await;
    assert_eq!(status, 200);
    let replayed = session.history.iter().filter(|i| i["type"] == "reasoning").count();
    assert!(replayed > 0, "the first turn made reasoning to replay");
    assert!(session.history.iter().any(|i| i["encrypted_content"].as_str().is_some_and(|c| c.starts_with("km1"))));

    let plain = serde_json::to_vec(&session.next_body(false)).unwrap();
    let (status, answer) = send_encoded(&h, coding, encode(&plain)).await;
    assert_eq!(status, 200, "a {coding} body replaying org {owner}'s reasoning: {answer}");

    let upstream = upstream_turns(&h).pop().unwrap();
    assert_eq!(upstream.org.as_deref(), Some(owner.as_str()), "served by the organization of its markers");
    assert_eq!(upstream.status, 200);
    let header = |name: &str| upstream.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    assert_eq!(header("content-encoding"), None, "the decoded body goes upstream, labelled as such");
    // The upstream read the body Keymux forwarded, whole: its length was the decoded body's.
    let body = upstream.body.clone().expect("the upstream read a JSON body");
    assert_eq!(body["input"].as_array().map(Vec::len), Some(session.history.len()));
    let sent: usize = header("content-length").and_then(|v| v.parse().ok()).unwrap();
    assert!(sent < plain.len() && sent > plain.len() / 2, "{sent} bytes: the markers were stripped, no more");
    let mut leaked = Vec::new();
    marker_like_values(&body, &mut leaked);
    assert!(leaked.is_empty(), "markers reached the upstream: {leaked:?}");

    let decisions = decisions_api(&h.root).await;
    let record = &decisions["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["status"] == 200 && r["decision"]["route"] == "pinned");
    assert!(record.is_some(), "the compressed turn was pinned: {decisions}");
}

#[tokio::test]
async fn a_zstd_body_replaying_marked_reasoning_is_routed_to_its_organization() {
    a_compressed_turn_is_pinned_by_its_markers("zstd", zstd).await;
}

#[tokio::test]
async fn a_gzip_body_replaying_marked_reasoning_is_routed_to_its_organization() {
    a_compressed_turn_is_pinned_by_its_markers("gzip", gzip).await;
}

#[tokio::test]
async fn a_body_that_decodes_past_the_cap_gets_413_and_never_goes_upstream() {
    let cap = 64 * 1024;
    let h = harness(|c| c.max_body_bytes = cap).await;
    // A few kilobytes on the wire, 8 MiB decoded.
    let huge = serde_json::json!({"model": "gpt-5.5", "input": "a".repeat(8 << 20)});
    let bomb = zstd(&serde_json::to_vec(&huge).unwrap());
    assert!(bomb.len() < cap / 4, "{} bytes compressed", bomb.len());

    let (status, answer) = send_encoded(&h, "zstd", bomb).await;
    assert_eq!(status, 413, "{answer}");
    let error = &answer["error"];
    assert_eq!(error["code"], "request_too_large", "{answer}");
    assert_eq!(error["type"], "invalid_request_error");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("decodes to more than") && message.contains(&format!("{cap} bytes")), "{message}");
    assert!(message.contains("max_body_bytes"), "says what to do: {message}");
    assert!(upstream_turns(&h).is_empty(), "nothing went upstream");
}

#[tokio::test]
async fn a_body_that_is_not_what_its_content_encoding_says_gets_a_400_that_says_what_to_do() {
    let h = harness(|_| {}).await;
    let plain = serde_json::to_vec(&serde_json::json!({"model": "gpt-5.5", "input": "hello"})).unwrap();
    let mut truncated = zstd(&plain);
    truncated.truncate(truncated.len() - 4);
    let cases = [
        ("zstd", plain.clone(), "plain JSON labelled zstd"),
        ("zstd", truncated, "a zstd frame cut short"),
        ("gzip", b"\x1f\x8b not really gzip".to_vec(), "garbage labelled gzip"),
        ("br", vec![0xff; 64], "garbage labelled br"),
    ];
    for (coding, body, what) in cases {
        let (status, answer) = send_encoded(&h, coding, body).await;
        assert_eq!(status, 400, "{what}: {answer}");
        assert_eq!(answer["error"]["code"], "invalid_content_encoding", "{what}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(&format!("not valid {coding}")), "{what}: {message}");
        assert!(message.contains("Send the body uncompressed"), "{what}: says what to do: {message}");
    }

    let (status, answer) = send_encoded(&h, "compress", plain).await;
    assert_eq!(status, 415, "{answer}");
    assert_eq!(answer["error"]["code"], "unsupported_content_encoding", "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("'compress'") && message.contains("zstd, gzip or br"), "{message}");
    assert!(upstream_turns(&h).is_empty(), "nothing it could not read went upstream");
}
