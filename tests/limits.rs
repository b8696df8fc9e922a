//! Connection limits: any local process can open sockets to Keymux, token or not, so silent, slow and
//! idle connections are closed after stated times, connections and WebSockets are capped, and a flood
//! of idle or slow sockets never locks a real client out.
#![allow(clippy::unwrap_used, clippy::disallowed_methods, reason = "tests")]

#[path = "it/support/mod.rs"]
mod support;

use std::time::Duration;

use futures::StreamExt as _;
use keymux::server::ServeOptions;
use keymux_sim::{Sim, SimConfig};
use serde_json::{json, Value};
use support::*;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// Long enough that only a connection Keymux really keeps open reaches it on a slow machine.
const NEVER: Duration = Duration::from_secs(20);

async fn gateway(serve: ServeOptions) -> (Sim, keymux::Runtime) {
    let sim = Sim::start(SimConfig::new().org("org-a", &["sk-a1"])).await.unwrap();
    let runtime = keymux::Runtime::start_with(options_for(&sim, &[key("a1", "sk-a1")], |_| {}), serve).await.unwrap();
    runtime.probed().await;
    (sim, runtime)
}

/// Reads until the peer closes; what it sent on the way. Panics if it stays open past `NEVER`.
async fn read_until_closed(socket: &mut TcpStream) -> String {
    let mut seen = Vec::new();
    let mut buf = [0_u8; 4096];
    loop {
        match tokio::time::timeout(NEVER, socket.read(&mut buf)).await.expect("Keymux closed the connection") {
            Ok(0) | Err(_) => return String::from_utf8_lossy(&seen).into_owned(),
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
}

/// A fresh connection for every request, the way a new client process arrives.
fn fresh_client() -> reqwest::Client {
    reqwest::Client::builder().pool_max_idle_per_host(0).timeout(NEVER).build().unwrap()
}

async fn real_request(base: &str) -> u16 {
    small_request(&fresh_client(), base).await
}

#[cfg(unix)]
fn descriptor_limits() -> (u64, u64) {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    (limit.current.unwrap_or(u64::MAX), limit.maximum.unwrap_or(u64::MAX))
}

#[cfg(unix)]
fn set_soft_descriptor_limit(soft: u64) {
    use rustix::process::{setrlimit, Resource, Rlimit};
    let (_, hard) = descriptor_limits();
    setrlimit(Resource::Nofile, Rlimit { current: Some(soft), maximum: Some(hard) }).unwrap();
}

/// The reported lock-out: 1,100 idle sockets against a 1,024-descriptor limit. Keymux raises the
/// limit at start, and at its connection cap it closes the oldest idle socket for each new one.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_idle_and_slow_sockets_never_locks_out_a_real_client() {
    let (_, hard) = descriptor_limits();
    // With room, reproduce the report exactly; on a machine whose hard limit is low, flood what fits.
    let flood = if hard >= 4096 {
        set_soft_descriptor_limit(1024);
        1100
    } else {
        usize::try_from(hard / 2).unwrap_or(usize::MAX).saturating_sub(200)
    };
    let (_sim, runtime) = gateway(ServeOptions::default()).await;
    let base = format!("http://{}/v1", runtime.addr());
    if hard >= 4096 {
        assert_eq!(descriptor_limits().0, hard, "the soft limit was raised to the hard one at start");
    }
    let mut sockets = Vec::new();
    for n in 0..flood {
        let mut socket = TcpStream::connect(runtime.addr()).await.unwrap();
        if n % 10 == 0 {
            // A slowloris: headers begun and never finished.
            socket.write_all(b"POST /v1/responses HTTP/1.1\r\nhost: 127.0.0.1\r\n").await.unwrap();
        }
        sockets.push(socket);
    }
    for n in 0..20 {
        assert_eq!(real_request(&base).await, 200, "request {n} got through the flood");
    }
    // The flood's oldest sockets were closed to make room; the gateway is still serving.
    let mut closed = 0;
    for socket in sockets.iter_mut().take(50) {
        let mut buf = [0_u8; 64];
        if let Ok(Ok(0)) = tokio::time::timeout(Duration::from_millis(200), socket.read(&mut buf)).await {
            closed += 1;
        }
    }
    assert!(closed > 0, "the oldest idle sockets were closed at the cap");
    drop(sockets);
    assert_eq!(real_request(&base).await, 200);
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_slow_and_idle_connections_are_closed_after_the_header_timeout() {
    let serve = ServeOptions { header_read_timeout: Duration::from_millis(300), ..ServeOptions::default() };
    let (_sim, runtime) = gateway(serve).await;
    let mut silent = TcpStream::connect(runtime.addr()).await.unwrap();
    let mut slow = TcpStream::connect(runtime.addr()).await.unwrap();
    slow.write_all(b"GET /keymux/health HTTP/1.1\r\nhost: 127.0.0.1\r\n").await.unwrap();
    let mut idle = TcpStream::connect(runtime.addr()).await.unwrap();
    idle.write_all(b"GET /keymux/health HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n").await.unwrap();
    assert!(read_until_closed(&mut silent).await.is_empty());
    assert!(!read_until_closed(&mut slow).await.contains("200 OK"), "a request never finished is never served");
    let answered = read_until_closed(&mut idle).await;
    assert!(answered.starts_with("HTTP/1.1 200 OK"), "served once, then closed when idle: {answered}");
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_stops_arriving_gets_a_408_and_one_over_the_cap_a_413_at_once() {
    let serve = ServeOptions { body_read_timeout: Duration::from_millis(300), ..ServeOptions::default() };
    let (_sim, runtime) = gateway(serve).await;
    let head = |length: u64| {
        format!(
            "POST /v1/responses HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {TOKEN}\r\n\
             content-type: application/json\r\ncontent-length: {length}\r\n\r\n"
        )
    };
    let mut stalled = TcpStream::connect(runtime.addr()).await.unwrap();
    stalled.write_all(format!("{}{{\"model\":", head(1000)).as_bytes()).await.unwrap();
    let answer = read_until_closed(&mut stalled).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    let error: Value = serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(error["error"]["code"], "request_timeout");
    assert!(error["error"]["message"].as_str().unwrap().contains("Send the request again"));

    // 100 MiB declared, nothing sent: refused before a byte of the body is read (well within the
    // deadline, which here would also end it, as a 408).
    let serve = ServeOptions { body_read_timeout: NEVER * 3, ..ServeOptions::default() };
    let (_sim2, runtime2) = gateway(serve).await;
    let mut huge = TcpStream::connect(runtime2.addr()).await.unwrap();
    huge.write_all(head(100 << 20).as_bytes()).await.unwrap();
    let answer = read_until_closed(&mut huge).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("request_too_large"));
    runtime.shutdown().await;
    runtime2.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_that_never_sends_its_first_frame_is_closed() {
    let serve = ServeOptions { first_frame_timeout: Duration::from_millis(300), ..ServeOptions::default() };
    let (_sim, runtime) = gateway(serve).await;
    let base = format!("http://{}/v1", runtime.addr());
    let mut silent = WsClient::connect(&base, "s-silent").await.unwrap();
    let ended = tokio::time::timeout(NEVER, async {
        loop {
            match silent.socket.next().await {
                Some(Ok(tokio_tungstenite::tungstenite::Message::Close(_))) | None | Some(Err(_)) => return,
                Some(Ok(_)) => {}
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "Keymux closed the silent socket");
    // A socket that sends its first frame at once is served as ever.
    let mut prompt = WsClient::connect(&base, "s-prompt").await.unwrap();
    let answer = prompt.create(&json!({"model":"gpt-5.5","input":[],"store":false})).await;
    assert!(answer.response_id().is_some(), "{:?}", answer.error);
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websockets_past_the_cap_get_a_426_so_codex_goes_on_over_http() {
    let serve = ServeOptions { max_websockets: 2, ..ServeOptions::default() };
    let (_sim, runtime) = gateway(serve).await;
    let base = format!("http://{}/v1", runtime.addr());
    let mut open = Vec::new();
    for n in 0..2 {
        let mut ws = WsClient::connect(&base, &format!("s-{n}")).await.unwrap();
        let answer = ws.create(&json!({"model":"gpt-5.5","input":[],"store":false})).await;
        assert!(answer.response_id().is_some());
        open.push(ws);
    }
    match WsClient::connect(&base, "s-third").await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 426);
            let body: Value = serde_json::from_slice(response.body().as_deref().unwrap()).unwrap();
            assert_eq!(body["error"]["code"], "websocket_connection_limit_reached");
        }
        other => panic!("expected a 426, got {:?}", other.map(|_| ())),
    }
    // HTTP still serves, and a closed socket makes room again.
    assert_eq!(real_request(&base).await, 200);
    let mut first = open.remove(0);
    first.socket.close(None).await.unwrap();
    while first.socket.next().await.is_some() {}
    let reopened = tokio::time::timeout(NEVER, async {
        loop {
            if let Ok(ws) = WsClient::connect(&base, "s-again").await {
                return ws;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(reopened.is_ok(), "a socket closed, so a new one is let in");
    runtime.shutdown().await;
}
