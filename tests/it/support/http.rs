//! Requests as the clients send them (captured Codex and pi bodies), answers read back (SSE, the
//! decisions API, the live events).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use serde_json::Value;
use tokio::time::Instant;

use super::*;

/// A small `POST /v1/responses` through `client`; its status, once the whole answer is read.
pub async fn small_request(client: &reqwest::Client, base: &str) -> u16 {
    small_request_as(client, base, TOKEN).await
}

/// A small `POST /v1/responses` with the client token `token`; its status, once the whole answer is read.
pub async fn small_request_as(client: &reqwest::Client, base: &str, token: &str) -> u16 {
    let body = serde_json::json!({"model":"gpt-5.5","input":"hello","store":false});
    let r = client.post(format!("{base}/responses")).bearer_auth(token).json(&body).send().await.unwrap();
    let status = r.status().as_u16();
    let _ = r.bytes().await;
    status
}

/// A test HTTP client that does not decode compressed bodies, so tests see exactly what Keymux sent.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder().no_gzip().no_zstd().pool_max_idle_per_host(32).build().expect("client")
}

pub fn fixture(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name);
    serde_json::from_slice(&std::fs::read(&path).expect("fixture exists")).expect("fixture is JSON")
}

/// The body of a captured request.
pub fn captured_body(name: &str) -> Value {
    fixture(name)["body"].clone()
}

/// The headers of a captured request, without the ones a client library sets itself.
pub fn captured_headers(name: &str) -> Vec<(String, String)> {
    fixture(name)["headers"]
        .as_array()
        .expect("headers")
        .iter()
        .map(|h| (h[0].as_str().unwrap().to_owned(), h[1].as_str().unwrap().to_owned()))
        .filter(|(k, _)| {
            !matches!(k.to_ascii_lowercase().as_str(), "authorization" | "host" | "content-length" | "connection")
        })
        .collect()
}

/// A POST with the local token and the captured client headers.
pub fn post(
    client: &reqwest::Client,
    url: &str,
    headers: &[(String, String)],
    body: &Value,
) -> reqwest::RequestBuilder {
    post_as(client, url, TOKEN, headers, body)
}

/// A POST with the client token `token` and the captured client headers.
pub fn post_as(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    headers: &[(String, String)],
    body: &Value,
) -> reqwest::RequestBuilder {
    let mut rb = client.post(url).bearer_auth(token).header("content-type", "application/json");
    for (k, v) in headers {
        if !k.eq_ignore_ascii_case("content-type") {
            rb = rb.header(k.as_str(), v.as_str());
        }
    }
    rb.body(serde_json::to_vec(body).unwrap())
}

/// One SSE event and when it reached the client.
pub struct SseEvent {
    pub at: Instant,
    pub data: Value,
}

/// Reads an SSE body event by event, recording arrival times.
pub async fn read_sse(response: reqwest::Response) -> Vec<SseEvent> {
    let mut events = Vec::new();
    let mut buf = Vec::<u8>::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.expect("stream chunk");
        buf.extend_from_slice(&chunk);
        while let Some(pos) = find(&buf, b"\n\n") {
            let frame: Vec<u8> = buf.drain(..pos + 2).collect();
            let text = String::from_utf8_lossy(&frame);
            for line in text.lines() {
                if let Some(data) = line.strip_prefix("data:") {
                    let data = data.trim();
                    if data == "[DONE]" {
                        events.push(SseEvent { at: Instant::now(), data: Value::String("[DONE]".into()) });
                    } else if let Ok(v) = serde_json::from_str(data) {
                        events.push(SseEvent { at: Instant::now(), data: v });
                    }
                }
            }
        }
    }
    events
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The gateway's recent decisions, through its API.
pub async fn decisions_api(root: &str) -> Value {
    Admin::new(root).get_json("/decisions?limit=1000").await
}

/// The next finished request on an event feed (skipping routing and key events), waiting at most a
/// generous 30 s that only a hung gateway exceeds.
pub async fn next_record(
    feed: &mut tokio::sync::broadcast::Receiver<Arc<keymux::events::Envelope>>,
) -> Arc<keymux::events::RequestRecord> {
    let wait = async {
        loop {
            match feed.recv().await {
                Ok(envelope) => {
                    if let keymux::events::Event::Finished(record) = &envelope.event {
                        return record.clone();
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(e) => panic!("event feed closed: {e}"),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), wait).await.expect("a finished request within 30 s")
}

/// Waits until the events collected by [`collect_events`] reach event `id` (the gateway's
/// `last_event_id` when the caller looked), so nothing announced before then is still on its way.
pub async fn events_reach(events: &std::sync::Arc<std::sync::Mutex<Vec<Value>>>, id: u64) {
    let newest = || events.lock().unwrap().iter().filter_map(|e| e["id"].as_u64()).max().unwrap_or(0);
    until(&format!("event {id}"), || async { newest() }, |n| *n >= id).await;
}

/// Collects SSE events into a shared list until the stream ends.
pub fn collect_events(response: reqwest::Response) -> std::sync::Arc<std::sync::Mutex<Vec<Value>>> {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = seen.clone();
    tokio::spawn(async move {
        let mut buf = String::new();
        let mut stream = response.bytes_stream();
        while let Some(Ok(chunk)) = futures::StreamExt::next(&mut stream).await {
            buf.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = buf.find("\n\n") {
                let frame: String = buf.drain(..end + 2).collect();
                if let Some(data) = frame.lines().find_map(|l| l.strip_prefix("data: ")) {
                    if let Ok(v) = serde_json::from_str::<Value>(data) {
                        sink.lock().unwrap().push(v);
                    }
                }
            }
        }
    });
    seen
}
