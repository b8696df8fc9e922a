//! The control plane against an attacker on the same machine: another local process, a server on
//! another loopback port, a web page the user opens. Each test reproduces one way in and shows it shut.
#![allow(clippy::unwrap_used, clippy::disallowed_methods, reason = "tests")]

use crate::support;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use keymux::server::ServeOptions;
use keymux_sim::SimConfig;
use serde_json::{json, Value};
use support::*;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// Long enough that only a connection Keymux really keeps open reaches it on a slow machine.
const NEVER: Duration = Duration::from_secs(20);
/// A connection cap for the tests that fill it: the smallest Keymux keeps (it never goes below 4).
const CAP: usize = 4;

fn addr_of(h: &Harness) -> SocketAddr {
    h.root.trim_start_matches("http://").parse().unwrap()
}

async fn gateway_with(serve: ServeOptions) -> (keymux_sim::Sim, keymux::Runtime) {
    let sim = keymux_sim::Sim::start(SimConfig::new().org("org-a", &["sk-a1"])).await.unwrap();
    let runtime = keymux::Runtime::start_with(options_for(&sim, &[key("a1", "sk-a1")], |_| {}), serve).await.unwrap();
    runtime.probed().await;
    (sim, runtime)
}

/// Reads from `socket` until `done` says the text so far is enough, or the peer closes.
async fn read_until(socket: &mut TcpStream, done: impl Fn(&str) -> bool) -> String {
    let mut seen = Vec::new();
    let mut buf = [0_u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&seen).into_owned();
        if done(&text) {
            return text;
        }
        match tokio::time::timeout(NEVER, socket.read(&mut buf)).await.expect("Keymux answered in time") {
            Ok(0) | Err(_) => return String::from_utf8_lossy(&seen).into_owned(),
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
}

fn has_head(text: &str) -> bool {
    text.contains("\r\n\r\n")
}

/// A connection that sent `head` (and `body`), and reads the first answer's head.
async fn send(addr: SocketAddr, head: &str, body: &[u8]) -> TcpStream {
    let mut socket = TcpStream::connect(addr).await.unwrap();
    socket.write_all(head.as_bytes()).await.unwrap();
    socket.write_all(body).await.unwrap();
    socket
}

fn post_head(addr: SocketAddr, path: &str, extra: &str, length: u64) -> String {
    head("POST", addr, path, extra, length)
}

fn head(method: &str, addr: SocketAddr, path: &str, extra: &str, length: u64) -> String {
    format!(
        "{method} {path} HTTP/1.1\r\nhost: 127.0.0.1:{}\r\ncontent-type: application/json\r\n{extra}\
         content-length: {length}\r\n\r\n",
        addr.port()
    )
}

/// A squatter on a loopback port that relays every byte to `target` and keeps what clients sent it.
struct Squatter {
    addr: SocketAddr,
    heard: Arc<Mutex<Vec<u8>>>,
}

impl Squatter {
    async fn relaying_to(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let heard = Arc::new(Mutex::new(Vec::new()));
        let sink = heard.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let sink = sink.clone();
                tokio::spawn(async move {
                    let Ok(upstream) = TcpStream::connect(target).await else { return };
                    let (mut from_client, mut to_client) = client.into_split();
                    let (mut from_upstream, mut to_upstream) = upstream.into_split();
                    tokio::spawn(async move {
                        let _ = tokio::io::copy(&mut from_upstream, &mut to_client).await;
                    });
                    let mut buf = [0_u8; 4096];
                    while let Ok(n) = from_client.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        sink.lock().unwrap().extend_from_slice(&buf[..n]);
                        if to_upstream.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        Self { addr, heard }
    }

    fn heard(&self) -> String {
        String::from_utf8_lossy(&self.heard.lock().unwrap()).into_owned()
    }
}

/// Point 1: a relay on the port the CLI tries (the run file's, else the config's `listen`) forwards
/// the challenge to the real gateway. The gateway's proof names the address it was reached at, so
/// the CLI sees a proof for another address and sends nothing: no admin credential, no key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_where_the_cli_looks_gets_a_proof_the_cli_rejects_and_no_credential() {
    let h = Harness::start(SimConfig::new().org("org-a", &["sk-a1"]), &[key("a1", "sk-a1")]).await;
    let squatter = Squatter::relaying_to(addr_of(&h)).await;
    let home = tempfile::tempdir().unwrap();
    let runtime_dir = home.path().join("run");
    std::fs::create_dir_all(&runtime_dir).unwrap();
    let config = home.path().join("config.toml");
    std::fs::write(&config, "keychain_service = \"keymux-relay-test\"\n").unwrap();
    // A forged run file in the user's runtime directory names the squatter.
    let run_file = keymux::runfile::path_in(&runtime_dir, &config);
    std::fs::create_dir_all(run_file.parent().unwrap()).unwrap();
    std::fs::write(&run_file, json!({"addr": squatter.addr, "pid": 1}).to_string()).unwrap();
    let mut env: Vec<(String, String)> = base_env(home.path())
        .into_iter()
        .filter(|(k, _)| k != "XDG_RUNTIME_DIR" && k != "DBUS_SESSION_BUS_ADDRESS")
        .collect();
    env.push(("XDG_RUNTIME_DIR".into(), runtime_dir.display().to_string()));
    // No keychain either: nothing may fall back to storing the key offline.
    env.push(("DBUS_SESSION_BUS_ADDRESS".into(), format!("unix:path={}/no-bus", home.path().display())));
    let secret = "sk-relayed-secret-0123456789abcdef";
    let cfg = config.to_str().unwrap();
    let (ok, out, err) = run_keymux(&["--config", cfg, "keys", "add", "--label", "relayed"], &env, secret).await;
    assert!(!ok, "the CLI went on through the relay: {out}{err}");
    assert!(err.contains("could not prove"), "{err}");
    assert!(squatter.heard().contains("/keymux/api/challenge"), "the squatter relayed the challenge");

    // The same squatter where the config's `listen` points, with no run file.
    std::fs::remove_file(&run_file).unwrap();
    std::fs::write(&config, format!("keychain_service = \"keymux-relay-test\"\nlisten = \"{}\"\n", squatter.addr))
        .unwrap();
    let (ok, out, err) = run_keymux(&["--config", cfg, "keys", "add", "--label", "relayed"], &env, secret).await;
    assert!(!ok, "the CLI went on through the relay: {out}{err}");
    assert!(err.contains("could not prove"), "{err}");

    let heard = squatter.heard();
    assert_no_secrets("what the squatter heard", &heard, &[ADMIN, secret]);
    assert!(h.status().iter().all(|k| k.label != "relayed"), "no key was added through the relay");
}

/// Point 2: the control API asks who calls before it reads a body. A caller with no credential gets
/// its 401 before Keymux asks for the body (no `100 Continue`), and a declared body over the cap gets
/// its 413 at once, on every route.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_api_refuses_before_reading_a_body_and_over_the_cap_at_once() {
    let (_sim, runtime) = gateway_with(ServeOptions { body_read_timeout: NEVER * 3, ..ServeOptions::default() }).await;
    let addr = runtime.addr();
    let calls = [
        ("POST", "/keymux/api/keys"),
        ("POST", "/keymux/api/tokens"),
        ("PATCH", "/keymux/api/keys/k_a1"),
        ("POST", "/keymux/api/pause"),
    ];
    for (method, path) in calls {
        let mut socket = send(addr, &head(method, addr, path, "expect: 100-continue\r\n", 1000), b"").await;
        let answer = read_until(&mut socket, has_head).await;
        assert!(answer.starts_with("HTTP/1.1 401"), "{path} without a credential: {answer}");
    }
    let admin = format!("authorization: Bearer {ADMIN}\r\n");
    for path in ["/keymux/api/keys", "/keymux/api/tokens", "/keymux/api/challenge", "/keymux/health", "/login"] {
        let mut socket = send(addr, &post_head(addr, path, &admin, 500 << 20), b"").await;
        let answer = read_until(&mut socket, has_head).await;
        assert!(answer.starts_with("HTTP/1.1 413"), "{path} with 500 MB declared: {answer}");
    }
    runtime.shutdown().await;
}

/// Point 2: a body to the control API must arrive within the body deadline, like one to `/v1`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_body_that_stops_arriving_gets_a_408() {
    let serve = ServeOptions { body_read_timeout: Duration::from_millis(300), ..ServeOptions::default() };
    let (_sim, runtime) = gateway_with(serve).await;
    let addr = runtime.addr();
    let admin = format!("authorization: Bearer {ADMIN}\r\n");
    for (path, extra) in [("/keymux/api/challenge", ""), ("/keymux/api/tokens", admin.as_str())] {
        let mut socket = send(addr, &post_head(addr, path, extra, 100), b"{").await;
        let answer = read_until(&mut socket, has_head).await;
        assert!(answer.starts_with("HTTP/1.1 408"), "{path}: {answer}");
    }
    runtime.shutdown().await;
}

/// Point 2: connections still sending a body are closed to make room at the cap, like idle ones, so
/// slow bodies with no credential never lock a client out. Keymux asking for the body (`100
/// Continue`) shows the connection is reading it before the real client comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_still_sending_a_body_make_room_for_real_clients() {
    let serve = ServeOptions { max_connections: CAP, body_read_timeout: NEVER * 3, ..ServeOptions::default() };
    let (_sim, runtime) = gateway_with(serve).await;
    let addr = runtime.addr();
    let base = format!("http://{addr}/v1");
    let mut slow = Vec::new();
    for _ in 0..CAP {
        let head = post_head(addr, "/keymux/api/challenge", "expect: 100-continue\r\n", 100);
        let mut socket = send(addr, &head, b"").await;
        let asked = read_until(&mut socket, has_head).await;
        assert!(asked.starts_with("HTTP/1.1 100"), "Keymux reads the challenge's body: {asked}");
        socket.write_all(b"{").await.unwrap();
        slow.push(socket);
    }
    let fresh = reqwest::Client::builder().pool_max_idle_per_host(0).timeout(NEVER).build().unwrap();
    for n in 0..3 {
        assert_eq!(small_request(&fresh, &base).await, 200, "request {n} got through the slow bodies");
    }
    runtime.shutdown().await;
}

/// Point 7: event-stream subscribers have a cap of their own and never take `/v1`'s connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_stream_subscribers_never_take_the_connections_clients_need() {
    let serve = ServeOptions { max_connections: CAP, max_event_streams: CAP, ..ServeOptions::default() };
    let (_sim, runtime) = gateway_with(serve).await;
    let root = format!("http://{}", runtime.addr());
    let watcher = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
    let mut streams = Vec::new();
    for _ in 0..CAP {
        let r = watcher.get(format!("{root}/keymux/api/events")).bearer_auth(ADMIN).send().await.unwrap();
        assert_eq!(r.status(), 200);
        streams.push(r);
    }
    let fresh = reqwest::Client::builder().pool_max_idle_per_host(0).timeout(NEVER).build().unwrap();
    for n in 0..3 {
        assert_eq!(small_request(&fresh, &format!("{root}/v1")).await, 200, "request {n} beside {CAP} streams");
    }
    let third = watcher.get(format!("{root}/keymux/api/events")).bearer_auth(ADMIN).send().await.unwrap();
    assert_eq!(third.status(), 429, "past its own cap, a subscriber is refused");
    let error: Value = third.json().await.unwrap();
    assert_eq!(error["error"]["code"], "keymux_too_many_event_streams");
    // A subscriber that leaves makes room for another.
    drop(streams.pop());
    let again = tokio::time::timeout(NEVER, async {
        loop {
            let r = watcher.get(format!("{root}/keymux/api/events")).bearer_auth(ADMIN).send().await.unwrap();
            if r.status() == 200 {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(again.is_ok(), "a seat came free");
    drop(streams);
    runtime.shutdown().await;
}

/// Point 3: the dashboard session is a token the page holds and sends in a header. Another origin
/// on this machine (a dev server on another port) gets no cookie to ride on, cannot exchange a code
/// from a foreign origin, and a session works only in its header.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dashboard_session_is_useless_to_other_local_origins() {
    let h = Harness::start(SimConfig::new().org("org-a", &["sk-a1"]), &[key("a1", "sk-a1")]).await;
    let c = plain();
    let token = dashboard_login(&h).await;
    let status = format!("{}/keymux/api/status", h.root);
    let tokens = format!("{}/keymux/api/tokens", h.root);
    let with = |rb: reqwest::RequestBuilder| rb.header("x-keymux-session", &token);
    assert_eq!(with(c.get(&status)).send().await.unwrap().status(), 200);
    let made = with(c.post(&tokens)).json(&json!({"name": "from-page"})).send().await.unwrap();
    assert_eq!(made.status(), 201, "a change needs nothing but the session header");
    // The same value as a cookie (what a browser would send to any port) is no credential.
    let cookie = format!("keymux_session={token}");
    assert_eq!(c.get(&status).header("cookie", &cookie).send().await.unwrap().status(), 401);
    // A page on another port cannot call with it, nor exchange a login code.
    let foreign = "http://127.0.0.1:3000";
    assert_eq!(with(c.get(&status)).header("origin", foreign).send().await.unwrap().status(), 403);
    let code = h.gateway.login_link().rsplit('=').next().unwrap().to_owned();
    let r = c.post(format!("{}/keymux/api/session", h.root)).header("origin", foreign).json(&json!({"code": code}));
    assert_eq!(r.send().await.unwrap().status(), 403);
    // A used code is spent.
    let r = c.post(format!("{}/keymux/api/session", h.root)).json(&json!({"code": code})).send().await.unwrap();
    assert_eq!(r.status(), 200, "the page's own origin may exchange it");
    let again = c.post(format!("{}/keymux/api/session", h.root)).json(&json!({"code": code})).send().await.unwrap();
    assert_eq!(again.status(), 401, "a code works once");
}

/// Point 3: logging out ends the session at once, and a session ends 24 h after login however busy
/// it was (the gateway's clock is moved on, not waited for).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dashboard_session_ends_at_logout_and_after_a_day_of_use() {
    let h = Harness::start(SimConfig::new().org("org-a", &["sk-a1"]), &[key("a1", "sk-a1")]).await;
    let c = plain();
    let status = format!("{}/keymux/api/status", h.root);
    let token = dashboard_login(&h).await;
    let r = c.post(format!("{}/keymux/api/logout", h.root)).header("x-keymux-session", &token).send().await.unwrap();
    assert_eq!(r.status(), 204);
    assert_eq!(c.get(&status).header("x-keymux-session", &token).send().await.unwrap().status(), 401);

    let token = dashboard_login(&h).await;
    for hour in 1..24 {
        h.advance(Duration::from_secs(3600));
        let r = c.get(&status).header("x-keymux-session", &token).send().await.unwrap();
        assert_eq!(r.status(), 200, "used every hour: still valid after {hour} h");
    }
    h.advance(Duration::from_secs(3600));
    let r = c.get(&status).header("x-keymux-session", &token).send().await.unwrap();
    assert_eq!(r.status(), 401, "24 h after login the session is over, however busy");
}

/// Points 3 and 8: no API answer may be cached or sniffed, secrets or not, errors included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_api_answer_is_cached_or_sniffed() {
    let h = Harness::start(SimConfig::new().org("org-a", &["sk-a1"]), &[key("a1", "sk-a1")]).await;
    let c = plain();
    let api = |path: &str| format!("{}/keymux/api/{path}", h.root);
    let answers = [
        ("status", c.get(api("status")).bearer_auth(ADMIN).send().await.unwrap()),
        ("tokens", c.post(api("tokens")).bearer_auth(ADMIN).json(&json!({"name": "cached"})).send().await.unwrap()),
        ("login-link", c.post(api("login-link")).bearer_auth(ADMIN).send().await.unwrap()),
        ("refused", c.get(api("status")).send().await.unwrap()),
        ("events", c.get(api("events")).bearer_auth(ADMIN).send().await.unwrap()),
        ("login", c.get(h.gateway.login_link()).send().await.unwrap()),
    ];
    for (what, r) in &answers {
        let header = |name: &str| r.headers().get(name).map(|v| v.to_str().unwrap().to_owned());
        assert_eq!(header("cache-control").as_deref(), Some("no-store"), "{what}");
        assert_eq!(header("x-content-type-options").as_deref(), Some("nosniff"), "{what}");
    }
}

/// Point 8: what a user (or a page with a session) may send is bounded: a key's models lists in
/// count and length, its org printable and short. Each refusal says what is wrong.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fields_a_user_sends_are_bounded_and_printable() {
    let h = Harness::start(SimConfig::new().org("org-a", &["sk-a1"]), &[key("a1", "sk-a1")]).await;
    let c = plain();
    // Over the bounds, yet well under the body cap: the fields themselves are refused.
    let many: Vec<String> = (0..100).map(|n| format!("model-{n}")).collect();
    let long = vec!["m".repeat(1_000)];
    let new = |extra: Value| {
        let mut body = json!({"label": "bounded", "secret": "sk-bounded-0123456789"});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        body
    };
    let cases = [
        ("many models", new(json!({"models": many}))),
        ("a long model", new(json!({"models": long}))),
        ("many excluded models", new(json!({"exclude_models": many}))),
        ("a control character in a model", new(json!({"models": ["gpt\u{1b}[31m"]}))),
        ("a control character in org", new(json!({"org": "org-\u{1b}[2J"}))),
        ("a long org", new(json!({"org": "o".repeat(1_000)}))),
    ];
    for (what, body) in cases {
        let r = c.post(format!("{}/keymux/api/keys", h.root)).bearer_auth(ADMIN).json(&body).send().await.unwrap();
        assert_eq!(r.status(), 400, "{what}");
        let error: Value = r.json().await.unwrap();
        assert!(error["error"]["message"].as_str().unwrap().len() < 400, "{what}: the message does not echo it");
    }
    for (what, body) in [("many models", json!({"models": many})), ("a long model", json!({"exclude_models": long}))] {
        let url = format!("{}/keymux/api/keys/k_a1", h.root);
        let r = c.patch(url).bearer_auth(ADMIN).json(&body).send().await.unwrap();
        assert_eq!(r.status(), 400, "changing {what}");
    }
    assert!(h.status().iter().all(|k| k.label != "bounded"));
}

/// Point 4: plain `http://` reaches a provider only on this machine; a key or an upstream off it must
/// use https. Checked before any connection is made, so nothing here leaves loopback (the URLs are
/// refused by validation, never dialled).
#[test]
fn plain_http_base_urls_are_refused_off_this_machine() {
    use keymux::control::{check_new_key, NewKey};
    use keymux::keys::ProviderId;
    let config = keymux::config::Config::default();
    let new = |url: &str| NewKey {
        provider: ProviderId::Azure,
        base_url: Some(url.into()),
        ..NewKey::openai("remote".into(), keymux::secrets::Secret::new("sk-remote-0123456789"))
    };
    for bad in ["http://api.example.com/v1", "http://10.0.0.7:8080/v1", "http://127.0.0.1.example.com/v1", "ftp://x/v1"]
    {
        let err = check_new_key(&config, &[], &new(bad)).expect_err(bad).to_string();
        assert!(err.contains("https://"), "{bad}: {err}");
    }
    for ok in [
        "https://r.openai.azure.com/openai/v1",
        "http://127.0.0.1:9000/v1",
        "http://localhost:1/v1",
        "http://[::1]:2/v1",
    ] {
        assert!(check_new_key(&config, &[], &new(ok)).is_ok(), "{ok}");
    }
    let path = std::path::Path::new("config.toml");
    for text in [
        "upstream = \"http://10.1.2.3/v1\"\n",
        "[[keys]]\nid = \"k_1\"\nlabel = \"w\"\nprovider = \"azure\"\nbase_url = \"http://r.example.com/v1\"\n",
    ] {
        let err = keymux::config::Config::parse(text, path).expect_err(text).to_string();
        assert!(err.contains("https://"), "{text}: {err}");
    }
    assert!(keymux::config::Config::parse("upstream = \"http://127.0.0.1:7/v1\"\n", path).is_ok());
}

/// Point 5: a provider that quotes a whole key (`key:sk-…`, `key=sk-…`, in quotes, in JSON, in its
/// headers, as a JSON member's name) has it masked in what the client gets, in the decision records
/// and on the event stream; the rest of its words still get through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_a_provider_quotes_is_masked_everywhere_it_could_show() {
    let secret = "sk-proj-Quoted0123456789abcdefXYZ";
    let h = Harness::start(SimConfig::new().org("org-a", &[secret]), &[key("a1", secret)]).await;
    let c = client();
    let stream = c.get(format!("{}/keymux/api/events", h.root)).bearer_auth(ADMIN).send().await.unwrap();
    let seen = collect_events(stream);
    h.sim.inject(secret, keymux_sim::Fault::QuotesKey);
    let body = json!({"model":"gpt-5.5","input":"hi","store":false});
    let r = post(&c, &format!("{}/responses", h.base), &[], &body).send().await.unwrap();
    assert_eq!(r.status(), 400);
    let headers = format!("{:?}", r.headers());
    let request_id = r.headers().get("x-request-id").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let answer = r.text().await.unwrap();
    let fragments = [secret, &secret[8..28]];
    assert!(headers.contains("www-authenticate"), "the provider's headers still reach the client: {headers}");
    assert!(request_id.starts_with("req_") && request_id.len() > 20, "its request id is kept: {headers}");
    assert_no_secrets("the client's answer headers", &headers, &fragments);
    assert!(answer.contains("Request refused for key"), "the provider's words reach the client: {answer}");
    assert!(serde_json::from_str::<Value>(&answer).is_ok(), "still JSON: {answer}");
    assert_no_secrets("the client's answer", &answer, &fragments);
    let decisions = decisions_api(&h.root).await.to_string();
    assert!(decisions.contains("Request refused"), "{decisions}");
    assert_no_secrets("the decision records", &decisions, &fragments);
    let streamed = tokio::time::timeout(NEVER, async {
        loop {
            let text = Value::Array(seen.lock().unwrap().clone()).to_string();
            if text.contains("Request refused") {
                return text;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the finished request reached the event stream");
    assert_no_secrets("the event stream", &streamed, &fragments);
}

/// Point 6: requests refused before any credential is known cannot fill the log: each line's path is
/// cut short, and past a few lines the rest are counted, not written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_requests_cannot_flood_the_log() {
    let sim = keymux_sim::Sim::start(SimConfig::new().org("org-a", &["sk-a1"])).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let mut env = base_env(home.path());
    env.extend([
        ("KEYMUX_KEY_A1".to_owned(), "sk-a1".to_owned()),
        ("KEYMUX_CLIENT_TOKEN".to_owned(), TOKEN.to_owned()),
    ]);
    let keymux = Keymux::spawn(&["--ephemeral", "--upstream", &sim.base_url()], &env).await;
    let before = keymux.output_text().len();
    let c = client();
    let long = "x".repeat(65_000);
    let statuses: Vec<u16> = futures::StreamExt::collect(futures::StreamExt::buffer_unordered(
        futures::stream::iter((0..500).map(|_| {
            let request = c.get(format!("{}/{long}", keymux.base));
            async move { request.send().await.map(|r| r.status().as_u16()).unwrap_or(0) }
        })),
        16,
    ))
    .await;
    assert!(statuses.iter().all(|s| *s == 401), "every one refused, none dropped: {statuses:?}");
    assert_eq!(small_request(&c, &keymux.base).await, 200, "Keymux still serves");
    let output = keymux.stop().await;
    let logged = output.len() - before;
    assert!(logged < 256 * 1024, "{logged} bytes of log for 500 refused requests");
    assert!(output.contains("suppressed"), "the log says that lines were left out");
}

/// A connection that asks for `path` 32 times in a row (more than the kernel's buffers on both
/// sides hold, loopback's included) with a tiny receive window, and never reads the answers.
async fn slow_reader(addr: SocketAddr, path: &str) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(2048).unwrap();
    let mut stream = socket.connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nhost: 127.0.0.1:{}\r\n\r\n", addr.port());
    stream.write_all(request.repeat(32).as_bytes()).await.unwrap();
    stream
}

/// The largest file the dashboard's page names (its script bundle), found from the page itself.
async fn dashboard_bundle(addr: SocketAddr) -> String {
    let mut socket = send(addr, &head("GET", addr, "/", "", 0), b"").await;
    let page = read_until(&mut socket, |t| t.contains("</html>")).await;
    let start = page.find("/assets/").expect("the page names its bundle (build the dashboard: cd ui && npm ci)");
    let end = start + page[start..].find('"').unwrap();
    page[start..end].to_owned()
}

/// Without any credential, a crowd of connections that each ask for a large dashboard file and
/// never read it: the connections closed to make room for new ones give their descriptors back, so
/// with the gateway held to 160 open files a client is still served after 250 of them.
#[tokio::test]
async fn slow_readers_give_their_descriptors_back_and_never_lock_a_client_out() {
    let home = tempfile::tempdir().unwrap();
    let sim = keymux_sim::Sim::start(SimConfig::new().org("org-a", &["sk-a1"])).await.unwrap();
    let mut env = base_env(home.path());
    env.push(("KEYMUX_KEY_A1".to_owned(), "sk-a1".to_owned()));
    env.push(("KEYMUX_CLIENT_TOKEN".to_owned(), TOKEN.to_owned()));
    env.push(("KEYMUX_LOG".to_owned(), "info".to_owned()));
    let args = ["--ephemeral", "--upstream", &sim.base_url()];
    let keymux = Keymux::spawn_under(&["prlimit", "--nofile=160:160", "--"], &args, &env).await;
    let addr: SocketAddr = keymux.root.trim_start_matches("http://").parse().unwrap();
    let bundle = dashboard_bundle(addr).await;
    let mut readers = Vec::new();
    for _ in 0..250 {
        readers.push(slow_reader(addr, &bundle).await);
    }
    let mut client = send(addr, &head("GET", addr, "/keymux/health", "", 0), b"").await;
    let answer = read_until(&mut client, has_head).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "a client is served after the slow readers: {answer:?}");
    drop(readers);
    keymux.stop().await;
}

/// A provider that quotes the key in a stream's error event, in shapes that carry no `type`
/// (`event: error` on a Responses stream, a `{"error":…}` chunk on Chat Completions): the client
/// gets the error with the key masked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_quoted_in_a_stream_error_is_masked() {
    let secret = "sk-proj-Streamed0123456789abcdefXYZ";
    let h = Harness::start(SimConfig::new().org("org-a", &[secret]), &[key("a1", secret)]).await;
    let c = client();
    let fragments = [secret, &secret[8..28]];
    let streams = [
        ("responses", json!({"model":"gpt-5.5","input":"hi","store":false,"stream":true})),
        ("chat/completions", json!({"model":"gpt-5.5","messages":[{"role":"user","content":"hi"}],"stream":true})),
    ];
    for (path, body) in streams {
        h.sim.inject(secret, keymux_sim::Fault::StreamErrorQuotesKey);
        let r = post(&c, &format!("{}/{path}", h.base), &[], &body).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        let text = r.text().await.unwrap();
        assert!(text.contains("Upstream trace for key="), "{path}: the error reaches the client: {text}");
        assert_no_secrets(path, &text, &fragments);
    }
}
