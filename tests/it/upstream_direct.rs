//! Keys without a pool proxy go out direct (or as the environment's proxy says): a provider behind TLS is reached with
//! its certificate checked (here against the test's own root, given as `Config::extra_roots_pem`),
//! over HTTP/1.1, or over HTTP/2 when the provider's TLS offers only that, and every kind of answer
//! (JSON compressed by the provider, an SSE stream, a chat completion) reaches the client whole.
#![allow(clippy::unwrap_used, clippy::print_stdout, reason = "tests print what they saw")]

use crate::support;

use keymux_sim::SimConfig;
use serde_json::{json, Value};
use support::egress::TlsFront;
use support::*;

fn keys() -> Vec<TestKey> {
    vec![key("a1", "sk-a1"), key("b1", "sk-b1")]
}

fn sim_config() -> SimConfig {
    SimConfig::new().org("org-a", &["sk-a1"]).org("org-b", &["sk-b1"]).gzip_json(true)
}

/// Every key's base URL is the TLS front, and its certificate is trusted when `trusted`.
fn behind(front: &TlsFront, trusted: bool) -> impl FnOnce(&mut keymux::config::Config) {
    let (base, pem) = (front.base_url(), front.cert_pem.clone());
    move |config| {
        for key in &mut config.keys {
            key.base_url = Some(base.clone());
        }
        config.extra_roots_pem = if trusted { vec![pem] } else { Vec::new() };
    }
}

/// A JSON answer, a streamed one and a chat completion: each one's status and body.
async fn three_answers(h: &Harness) -> Vec<(u16, String)> {
    let c = client();
    let json = json!({"model": "gpt-5.5", "input": "hello", "store": false});
    let sse = json!({"model": "gpt-5.5", "input": "hello", "store": false, "stream": true});
    let chat = json!({"model": "gpt-5.5", "messages": [{"role": "user", "content": "hi"}]});
    let mut answers = Vec::new();
    for (path, body) in [("responses", json), ("responses", sse), ("chat/completions", chat)] {
        let r = c.post(format!("{}/{path}", h.base)).bearer_auth(TOKEN).json(&body).send().await.unwrap();
        let status = r.status().as_u16();
        answers.push((status, r.text().await.unwrap()));
    }
    answers
}

/// Starts the simulator, a TLS front for it (`h2`: offering only HTTP/2) and a gateway whose keys
/// all go to the front, direct.
async fn behind_a_front(h2: bool, trusted: bool) -> (Harness, TlsFront) {
    let sim = keymux_sim::Sim::start(sim_config()).await.unwrap();
    let front = if h2 { TlsFront::start_h2(&sim.base_url()).await } else { TlsFront::start(&sim.base_url()).await };
    let h = Harness::start_on(sim, &keys(), behind(&front, trusted)).await;
    (h, front)
}

async fn served_whole(h: &Harness) {
    for _ in 0..2 {
        let answers = three_answers(h).await;
        for (status, body) in &answers {
            assert_eq!(*status, 200, "{body}");
        }
        let json: Value = serde_json::from_str(&answers[0].1).expect("the compressed JSON answer arrives decoded");
        assert_eq!(json["status"], "completed", "{json}");
        assert!(answers[1].1.contains("event: response.completed"), "the stream arrives to its end: {}", answers[1].1);
        let chat: Value = serde_json::from_str(&answers[2].1).unwrap();
        assert!(chat["choices"][0]["message"]["content"].is_string(), "{chat}");
    }
    // The two probes and six requests, all through the front.
    assert!(h.sim.log().len() >= 8, "{}", h.sim.log().len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_behind_tls_is_reached_direct_over_http1() {
    let (h, front) = behind_a_front(false, true).await;
    served_whole(&h).await;
    let agreed = front.protocols();
    assert!(!agreed.is_empty() && agreed.iter().all(Option::is_none), "no ALPN, so HTTP/1.1: {agreed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_that_offers_only_http2_is_reached_direct_over_it() {
    let (h, front) = behind_a_front(true, true).await;
    served_whole(&h).await;
    let agreed = front.protocols();
    println!("the front's connections agreed on {agreed:?}");
    assert!(!agreed.is_empty() && agreed.iter().all(|p| p.as_deref() == Some("h2")), "{agreed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_whose_certificate_no_trusted_root_signed_is_never_sent_a_request() {
    let (h, _front) = behind_a_front(false, false).await;
    let body = json!({"model": "gpt-5.5", "input": "hello", "store": false});
    let r = client().post(format!("{}/responses", h.base)).bearer_auth(TOKEN).json(&body).send().await.unwrap();
    let status = r.status().as_u16();
    let answer: Value = r.json().await.unwrap();
    assert_eq!((status, answer["error"]["code"].as_str()), (503, Some("keymux_no_usable_key")), "{answer}");
    // A key's test says why: the certificate.
    let (status, test) = Admin::new(&h.root).post_json("/keys/k_a1/test", None).await;
    println!("{status}: {test}");
    let message = test["message"].as_str().unwrap_or_default();
    assert!(status >= 400 || test["ok"] == false, "{test}");
    assert!(message.contains("certificate"), "the test says why: {message}");
    assert!(h.sim.log().is_empty(), "nothing reached the provider: {}", h.sim.log().len());
}

/// The real binary with key `a1` from the environment, `HTTP_PROXY` set to `proxy` (and `NO_PROXY`
/// when given), in front of `sim`.
async fn behind_environment_proxy(
    sim: &keymux_sim::Sim,
    proxy: &support::egress::TestProxy,
    no_proxy: Option<&str>,
    home: &std::path::Path,
) -> Keymux {
    let mut env = base_env(home);
    env.extend([
        ("KEYMUX_KEY_A1".to_owned(), "sk-a1".to_owned()),
        ("KEYMUX_CLIENT_TOKEN".to_owned(), TOKEN.to_owned()),
        ("HTTP_PROXY".to_owned(), proxy.url()),
    ]);
    env.extend(no_proxy.map(|hosts| ("NO_PROXY".to_owned(), hosts.to_owned())));
    Keymux::spawn(&["--ephemeral", "--upstream", &sim.base_url()], &env).await
}

/// A proxy set in the environment (`HTTP_PROXY`, as a user's shell may export it) is still taken by
/// every key without a pool proxy, as `HTTP_PROXY` is read by curl and reqwest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_set_in_the_environment_carries_every_request() {
    let sim = keymux_sim::Sim::start(sim_config()).await.unwrap();
    let proxy = support::egress::TestProxy::start().await;
    let home = tempfile::tempdir().unwrap();
    let keymux = behind_environment_proxy(&sim, &proxy, None, home.path()).await;
    // Serving does not wait for the key's probe: let it reach the provider first.
    until("the key's probe at the provider", || async { sim.log() }, |log| log.iter().any(|e| e.path == "/v1/models"))
        .await;
    let body = json!({"model": "gpt-5.5", "input": "hello", "store": false});
    let r = client().post(format!("{}/responses", keymux.base)).bearer_auth(TOKEN).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let log = proxy.log();
    println!("the proxy saw {log:?}");
    let posts: Vec<_> = log.iter().filter(|p| p.method == "POST").collect();
    assert_eq!(posts.len(), 1, "{log:?}");
    assert_eq!(posts[0].target, format!("{}/responses", sim.base_url()));
    assert_eq!(sim.log().len(), log.len(), "everything the provider served came through the proxy");
    keymux.stop().await;
}

/// A Responses WebSocket takes the environment's proxy too (a `CONNECT` tunnel, as an HTTP proxy
/// carries a WebSocket), and a host `NO_PROXY` names goes direct: the same way out as HTTP requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_takes_the_environments_proxy_and_no_proxy_as_http_does() {
    let sim = keymux_sim::Sim::start(sim_config()).await.unwrap();
    let sim_host = sim.base_url().trim_start_matches("http://").trim_end_matches("/v1").to_owned();
    for no_proxy in [None, Some("127.0.0.1")] {
        let proxy = support::egress::TestProxy::start().await;
        let home = tempfile::tempdir().unwrap();
        let keymux = behind_environment_proxy(&sim, &proxy, no_proxy, home.path()).await;
        let before = sim.log().len();
        let mut socket = WsClient::connect(&keymux.base, "sess-env-proxy").await.unwrap();
        let answer = socket.create(&json!({"model": "gpt-5.5", "input": [], "store": false})).await;
        assert!(answer.response_id().is_some(), "{:?}", answer.error);
        drop(socket);
        let tunnels: Vec<_> = proxy.log().into_iter().filter(|p| p.method == "CONNECT").collect();
        println!("NO_PROXY={no_proxy:?}: the proxy saw {tunnels:?}");
        match no_proxy {
            None => assert!(tunnels.iter().any(|t| t.target == sim_host), "the socket went through the proxy"),
            Some(_) => assert!(tunnels.is_empty() && proxy.log().is_empty(), "NO_PROXY: direct"),
        }
        assert!(sim.log().len() > before, "the simulator served the socket");
        keymux.stop().await;
    }
}
