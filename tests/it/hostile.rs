//! Hostile and odd requests, each with the clear error it must get, and none may crash Keymux or keep
//! it from serving: after every case a real request still goes through.
#![allow(clippy::unwrap_used, clippy::disallowed_methods, reason = "tests")]

use crate::support;

use std::net::SocketAddr;
use std::time::Duration;

use futures::{SinkExt as _, StreamExt as _};
use keymux_sim::{Fault, SimConfig};
use serde_json::{json, Value};
use support::*;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;

const CAP: usize = 4 << 20;
const MIB: usize = 1 << 20;

/// How a case's body is sent.
enum Body {
    /// With a `content-length`.
    Sized(Vec<u8>),
    /// `content-length` declared, and this many bytes of it actually sent (the rest never comes).
    Declared {
        length: usize,
        sent: usize,
    },
    /// Chunked, `total` bytes in 64 KiB chunks, for as long as Keymux reads.
    Chunked {
        total: usize,
    },
    None,
}

struct Case {
    name: &'static str,
    method: &'static str,
    path: String,
    headers: Vec<(String, String)>,
    body: Body,
    status: u16,
    /// The error `code` the answer must carry (`None`: the status is enough, e.g. hyper's own 431).
    code: Option<&'static str>,
}

impl Case {
    fn post(name: &'static str, body: Body, status: u16, code: Option<&'static str>) -> Self {
        Self { name, method: "POST", path: "/v1/responses".into(), headers: Vec::new(), body, status, code }
    }
}

/// Sends one raw request on a fresh connection (`connection: close`) and reads the answer: its status
/// and body.
async fn exchange(addr: SocketAddr, case: &Case) -> (u16, String) {
    let socket = TcpStream::connect(addr).await.unwrap();
    let mut head =
        format!("{} {} HTTP/1.1\r\nconnection: close\r\ncontent-type: application/json\r\n", case.method, case.path);
    let given = |name: &str| case.headers.iter().any(|(n, _)| n == name);
    if !given("host") {
        head.push_str(&format!("host: 127.0.0.1:{}\r\n", addr.port()));
    }
    if !given("authorization") {
        head.push_str(&format!("authorization: Bearer {TOKEN}\r\n"));
    }
    for (name, value) in &case.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    match &case.body {
        Body::Sized(b) => head.push_str(&format!("content-length: {}\r\n", b.len())),
        Body::Declared { length, .. } => head.push_str(&format!("content-length: {length}\r\n")),
        Body::Chunked { .. } => head.push_str("transfer-encoding: chunked\r\n"),
        Body::None => {}
    }
    head.push_str("\r\n");
    let (mut read, mut write) = socket.into_split();
    let body = match &case.body {
        Body::Sized(b) => b.clone(),
        Body::Declared { sent, .. } => vec![b' '; *sent],
        _ => Vec::new(),
    };
    let chunked = match case.body {
        Body::Chunked { total } => total,
        _ => 0,
    };
    let writer = tokio::spawn(async move {
        write.write_all(head.as_bytes()).await?;
        write.write_all(&body).await?;
        let chunk = vec![b' '; 64 * 1024];
        let mut sent = 0;
        while sent < chunked {
            write.write_all(format!("{:x}\r\n", chunk.len()).as_bytes()).await?;
            write.write_all(&chunk).await?;
            write.write_all(b"\r\n").await?;
            sent += chunk.len();
        }
        if chunked > 0 {
            write.write_all(b"0\r\n\r\n").await?;
        }
        // Keep the write half open: a request whose body never finishes must still be answered.
        tokio::time::sleep(Duration::from_secs(60)).await;
        Ok::<_, std::io::Error>(write)
    });
    let mut answer = Vec::new();
    let mut buf = vec![0_u8; 64 * 1024];
    let read_all = async {
        loop {
            match read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
            if complete(&answer) {
                break;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), read_all).await.unwrap_or_else(|_| panic!("{}: answered", case.name));
    writer.abort();
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (status, body)
}

/// Whether a whole answer with a `content-length` has arrived.
fn complete(answer: &[u8]) -> bool {
    let text = String::from_utf8_lossy(answer);
    let Some((head, body)) = text.split_once("\r\n\r\n") else { return false };
    head.lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length: ").map(|v| v.trim().parse::<usize>()))
        .and_then(Result::ok)
        .is_some_and(|n| body.len() >= n)
}

async fn still_serving(h: &Harness) {
    let body = json!({"model":"gpt-5.5","input":"still there?","store":false});
    let r = post(&client(), &format!("{}/responses", h.base), &[], &body).send().await.unwrap();
    assert_eq!(r.status(), 200, "Keymux still serves");
}

/// A marker of a real answer, changed the way a forger or a truncating client would.
struct Markers {
    encrypted: String,
    item_id: String,
    response_id: String,
    history: Vec<Value>,
}

async fn real_markers(h: &Harness) -> Markers {
    let mut session = Session::new(Shape::Codex, 4242, false);
    let body = session.next_body(false);
    let r = post(&client(), &format!("{}/responses", h.base), &[], &body).send().await.unwrap();
    let answer: Value = r.json().await.unwrap();
    let reasoning = answer["output"].as_array().unwrap().iter().find(|i| i["type"] == "reasoning").unwrap().clone();
    session.absorb(answer["output"].as_array().unwrap().clone());
    Markers {
        encrypted: reasoning["encrypted_content"].as_str().unwrap().to_owned(),
        item_id: reasoning["id"].as_str().unwrap().to_owned(),
        response_id: answer["id"].as_str().unwrap().to_owned(),
        history: session.history,
    }
}

/// `value` with one character of its marker's MAC changed (the marker starts at `at`).
fn forge(value: &str, at: usize) -> String {
    let marker = &value[at..];
    assert!(marker.starts_with("km1"), "{value}");
    let id_len = usize::from_str_radix(&marker[9..11], 16).unwrap();
    let mac = at + 11 + id_len + 8;
    let mut bytes = value.as_bytes().to_vec();
    bytes[mac] = if bytes[mac] == b'A' { b'B' } else { b'A' };
    String::from_utf8(bytes).unwrap()
}

/// `value` cut inside its marker.
fn truncate(value: &str, at: usize) -> String {
    value[..at + 12].to_owned()
}

fn with_item(history: &[Value], change: impl Fn(&mut Value)) -> Vec<u8> {
    let mut input = history.to_vec();
    for item in &mut input {
        if item["type"] == "reasoning" {
            change(item);
        }
    }
    serde_json::to_vec(&json!({"model":"gpt-5.5","input":input,"store":false})).unwrap()
}

/// Bodies: broken, over the cap, deep, not UTF-8.
fn body_cases() -> Vec<Case> {
    let deep = format!("{{\"model\":\"gpt-5.5\",\"input\":{}{}}}", "[".repeat(100_000), "]".repeat(100_000));
    let mut invalid_utf8 = b"{\"model\":\"gpt-5.5\",\"input\":\"caf".to_vec();
    invalid_utf8.extend_from_slice(&[0xff, 0xfe, b'"', b'}']);
    let over_cap = |n: usize| {
        let mut v = b"{\"model\":\"gpt-5.5\",\"input\":\"".to_vec();
        v.resize(n - 2, b'x');
        v.extend_from_slice(b"\"}");
        v
    };
    vec![
        Case::post("truncated JSON", Body::Sized(b"{\"model\":\"gpt-5.5\",\"inp".to_vec()), 400, Some("invalid_json")),
        Case::post("not JSON at all", Body::Sized(b"model=gpt-5.5".to_vec()), 400, Some("invalid_json")),
        Case::post("a body one byte over the cap", Body::Sized(over_cap(CAP + 1)), 413, Some("request_too_large")),
        Case::post(
            "100 MiB with its length (refused before reading)",
            Body::Declared { length: 100 * MIB, sent: 0 },
            413,
            Some("request_too_large"),
        ),
        Case::post("100 MiB chunked", Body::Chunked { total: 100 * MIB }, 413, Some("request_too_large")),
        Case::post("JSON nested 100,000 deep", Body::Sized(deep.into_bytes()), 400, None),
        Case::post("invalid UTF-8", Body::Sized(invalid_utf8), 400, None),
    ]
}

/// Forged and cut markers in every place a marker can be, a wrong `Host`, an oversized header.
fn marker_and_header_cases(m: &Markers) -> Vec<Case> {
    let prefix = m.item_id.find("km1").unwrap();
    let resp_at = m.response_id.find("km1").unwrap();
    vec![
        Case::post(
            "forged encrypted_content",
            Body::Sized(with_item(&m.history, |i| i["encrypted_content"] = forge(&m.encrypted, 0).into())),
            400,
            Some("keymux_invalid_marker"),
        ),
        Case::post(
            "truncated encrypted_content",
            Body::Sized(with_item(&m.history, |i| i["encrypted_content"] = truncate(&m.encrypted, 0).into())),
            400,
            Some("keymux_invalid_marker"),
        ),
        Case::post(
            "forged item id",
            Body::Sized(with_item(&m.history, |i| i["id"] = forge(&m.item_id, prefix).into())),
            400,
            Some("keymux_invalid_marker"),
        ),
        Case::post(
            "truncated item id",
            Body::Sized(with_item(&m.history, |i| i["id"] = truncate(&m.item_id, prefix).into())),
            400,
            Some("keymux_invalid_marker"),
        ),
        Case::post(
            "forged previous_response_id",
            Body::Sized(
                serde_json::to_vec(&json!({"model":"gpt-5.5","input":"next",
                    "previous_response_id": forge(&m.response_id, resp_at)}))
                .unwrap(),
            ),
            400,
            Some("keymux_invalid_marker"),
        ),
        Case {
            name: "forged response id in the path",
            method: "GET",
            path: format!("/v1/responses/{}", forge(&m.response_id, resp_at)),
            headers: Vec::new(),
            body: Body::None,
            status: 400,
            code: Some("keymux_invalid_marker"),
        },
        Case {
            name: "truncated response id in the path",
            method: "DELETE",
            path: format!("/v1/responses/{}", truncate(&m.response_id, resp_at)),
            headers: Vec::new(),
            body: Body::None,
            status: 400,
            code: Some("keymux_invalid_marker"),
        },
        Case {
            name: "wrong Host on the control API",
            method: "GET",
            path: "/keymux/api/status".into(),
            headers: vec![("host".into(), "evil.example".into()), ("authorization".into(), format!("Bearer {ADMIN}"))],
            body: Body::None,
            status: 403,
            code: Some("forbidden_origin"),
        },
        Case {
            name: "a 1 MiB header",
            method: "GET",
            path: "/v1/models".into(),
            headers: vec![("x-padding".into(), "x".repeat(MIB))],
            body: Body::None,
            status: 431,
            code: None,
        },
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_and_odd_requests_get_clear_errors_and_keymux_keeps_serving() {
    let h = Harness::start_with(three_orgs(), &five_keys(), |c| c.max_body_bytes = CAP).await;
    let addr: SocketAddr = h.root.trim_start_matches("http://").parse().unwrap();
    let m = real_markers(&h).await;
    let mut cases = body_cases();
    cases.extend(marker_and_header_cases(&m));
    for case in &cases {
        let (status, body) = exchange(addr, case).await;
        assert_eq!(status, case.status, "{}: {body}", case.name);
        if let Some(code) = case.code {
            let error: Value =
                serde_json::from_str(&body).unwrap_or_else(|_| panic!("{}: JSON error: {body}", case.name));
            assert_eq!(error["error"]["code"], code, "{}: {body}", case.name);
            assert!(error["error"]["message"].as_str().is_some_and(|m| m.len() > 20), "{}: says what to do", case.name);
        }
        still_serving(&h).await;
    }
    // None of them reached a key with a marker still on it, or at all where it was refused.
    assert!(h
        .sim
        .log()
        .iter()
        .all(|e| e.status != 400 || e.error_code.as_deref() != Some("invalid_encrypted_content")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_frame_over_the_limit_or_forged_is_refused_and_the_socket_closed() {
    let h = Harness::start(three_orgs(), &five_keys()).await;
    let m = real_markers(&h).await;
    // A forged marker in the first frame: an error frame that says so, then the socket closes.
    let mut ws = WsClient::connect(&h.base, "ws-hostile").await.unwrap();
    let input: Vec<Value> = m
        .history
        .iter()
        .cloned()
        .map(|mut i| {
            if i["type"] == "reasoning" {
                i["encrypted_content"] = forge(&m.encrypted, 0).into();
            }
            i
        })
        .collect();
    let answer = ws.create(&json!({"model":"gpt-5.5","input":input,"store":false})).await;
    let error = answer.error.expect("an error frame");
    assert_eq!(error["error"]["code"], "keymux_invalid_marker", "{error}");

    // A frame over the 64 MiB limit: the socket is closed as too big, and Keymux goes on.
    let mut ws = WsClient::connect(&h.base, "ws-huge").await.unwrap();
    let huge = format!("{{\"type\":\"response.create\",\"input\":\"{}\"}}", "x".repeat(keymux::ws::MAX_FRAME_BYTES));
    let _ = ws.socket.send(Message::Text(huge.into())).await;
    let closed = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            match ws.socket.next().await {
                Some(Ok(Message::Close(frame))) => return frame.map(|f| u16::from(f.code)),
                None | Some(Err(_)) => return None,
                Some(Ok(_)) => {}
            }
        }
    })
    .await
    .expect("closed in time");
    assert!(closed.is_none() || closed == Some(1009), "closed as too big: {closed:?}");
    let forwarded = h.sim.log().iter().any(|e| e.headers.iter().any(|(n, v)| n == "session-id" && v == "ws-huge"));
    assert!(!forwarded, "the oversized frame never reached a key");
    still_serving(&h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_mid_stream_or_never_reads_costs_nothing_lasting() {
    let h =
        Harness::start(SimConfig::new().org("org-a", &["sk-a1", "sk-a2"]), &[key("a1", "sk-a1"), key("a2", "sk-a2")])
            .await;
    h.sim.inject("sk-a1", Fault::SlowDeltas(Duration::from_millis(20)));
    // Leaves after the first event.
    let body = json!({"model":"gpt-5.5","input":"a long story","stream":true,"store":false});
    let c = client();
    let response = post(&c, &format!("{}/responses", h.base), &[], &body).send().await.unwrap();
    let mut stream = response.bytes_stream();
    let _first = stream.next().await.unwrap().unwrap();
    drop(stream);
    // Never reads: a stream of several MiB (the provider echoes the instructions in three events).
    let addr: SocketAddr = h.root.trim_start_matches("http://").parse().unwrap();
    let big = json!({"model":"gpt-5.5","input":"echo","stream":true,"store":false,"instructions":"i".repeat(3 * MIB)});
    let body = serde_json::to_vec(&big).unwrap();
    let mut stalled = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /v1/responses HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {TOKEN}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    stalled.write_all(head.as_bytes()).await.unwrap();
    stalled.write_all(&body).await.unwrap();
    // Meanwhile everyone else is served.
    for _ in 0..5 {
        still_serving(&h).await;
    }
    drop(stalled);
    // Both requests end, and their keys are free again.
    let settled = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            if h.status().iter().all(|k| k.in_flight == 0) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(settled.is_ok(), "in flight: {:?}", h.status().iter().map(|k| k.in_flight).collect::<Vec<_>>());
    still_serving(&h).await;
}

/// A WebSocket client that sends turn after turn without waiting for answers: Keymux keeps at most
/// `MAX_PENDING_TURNS` of them open (the oldest closes unanswered), and relays every answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_client_that_never_waits_keeps_a_bounded_number_of_turns_open() {
    let h = Harness::start(SimConfig::new().org("org-a", &["sk-a1"]), &[key("a1", "sk-a1")]).await;
    h.sim.set_standing("sk-a1", Fault::SlowFirstByte(Duration::from_millis(100)), None);
    let mut ws = WsClient::connect(&h.base, "ws-impatient").await.unwrap();
    const TURNS: usize = 30;
    for n in 0..TURNS {
        let frame = json!({"type":"response.create","model":"gpt-5.5","input":format!("turn {n}"),"store":false});
        ws.socket.send(Message::Text(frame.to_string().into())).await.unwrap();
    }
    let mut completed = 0;
    while completed < TURNS {
        let frame = tokio::time::timeout(Duration::from_secs(30), ws.socket.next()).await.expect("answers keep coming");
        match frame {
            Some(Ok(Message::Text(text))) if text.contains("\"response.completed\"") => completed += 1,
            Some(Ok(_)) => {}
            other => panic!("socket ended after {completed} answers: {other:?}"),
        }
    }
    let decisions = decisions_api(&h.root).await;
    let records: Vec<&Value> = decisions["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["transport"] == "web_socket" || r["transport"] == "websocket")
        .collect();
    let unanswered = records.iter().filter(|r| r["error"] == "unanswered").count();
    assert_eq!(records.len(), TURNS, "every turn has its record");
    assert!(
        unanswered >= TURNS - 2 * keymux::ws::MAX_PENDING_TURNS,
        "the queue was bounded: {unanswered} closed early"
    );
}
