//! The control plane: what the dashboard, the tray and the CLI read and change on a running gateway,
//! without a restart, and who may do it.
#![allow(clippy::unwrap_used, clippy::disallowed_methods, reason = "tests")]

use crate::support;

use std::time::Duration;

use futures::StreamExt as _;
use keymux_sim::SimConfig;
use serde_json::{json, Value};
use support::*;

/// A browser page logged in through a one-time link: the session token it keeps in its tab.
struct Browser {
    session: String,
}

async fn log_in(h: &Harness) -> Browser {
    let link = h.gateway.login_link();
    let path = link.trim_start_matches(h.root.as_str()).to_owned();
    let r = client_no_redirects().get(format!("{}{path}", h.root)).send().await.unwrap();
    assert_eq!(r.status(), 303, "the link goes on to the dashboard, its code in the fragment");
    assert!(r.headers().get("set-cookie").is_none());
    let location = r.headers()["location"].to_str().unwrap().to_owned();
    let code = location.strip_prefix("/#login=").unwrap().to_owned();
    let session: Value = client()
        .post(format!("{}/keymux/api/session", h.root))
        .header("origin", &h.root)
        .json(&json!({ "code": code }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    Browser { session: session["token"].as_str().unwrap().to_owned() }
}

fn client_no_redirects() -> reqwest::Client {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

#[tokio::test]
async fn every_wrong_way_in_is_refused_without_leaking_a_secret() {
    let h = Harness::start(SimConfig::new().org("org-a", &["sk-a1"]), &[key("a1", "sk-a1")]).await;
    let api = Admin::new(&h.root);
    let browser = log_in(&h).await;
    let status = format!("{}/keymux/api/status", h.root);
    let pause = format!("{}/keymux/api/pause", h.root);
    let c = client();
    let mut answers = Vec::new();
    let mut check = |what: &str, r: reqwest::Response, want: u16| {
        assert_eq!(r.status().as_u16(), want, "{what}");
        answers.push(r);
    };
    check("no credential", c.get(&status).send().await.unwrap(), 401);
    let reused = h.gateway.login_link();
    let reused_path = reused.trim_start_matches(h.root.as_str()).to_owned();
    let first = client_no_redirects().get(format!("{}{reused_path}", h.root)).send().await.unwrap();
    assert_eq!(first.status(), 303);
    let code = reused.rsplit('=').next().unwrap();
    let exchanged = c.post(format!("{}/keymux/api/session", h.root)).json(&json!({ "code": code })).send().await;
    assert_eq!(exchanged.unwrap().status(), 200, "the page exchanged the code");
    check(
        "a reused login code",
        client_no_redirects().get(format!("{}{reused_path}", h.root)).send().await.unwrap(),
        403,
    );
    let expired = h.gateway.login_link();
    h.advance(keymux::access::LOGIN_CODE_TTL + Duration::from_secs(1));
    let expired_path = expired.trim_start_matches(h.root.as_str()).to_owned();
    check(
        "an expired login code",
        client_no_redirects().get(format!("{}{expired_path}", h.root)).send().await.unwrap(),
        403,
    );
    check(
        "a wrong Host",
        api.request(reqwest::Method::GET, "/status").header("host", "evil.example:8787").send().await.unwrap(),
        403,
    );
    check(
        "an evil Origin",
        c.get(&status)
            .header("x-keymux-session", &browser.session)
            .header("origin", "https://evil.example")
            .send()
            .await
            .unwrap(),
        403,
    );
    check(
        "the session as a cookie, as a foreign page on 127.0.0.1 would send it",
        c.post(&pause).header("cookie", format!("keymux_session={}", browser.session)).send().await.unwrap(),
        401,
    );
    check("a /v1 client token on the control API", c.get(&status).bearer_auth(TOKEN).send().await.unwrap(), 401);
    check(
        "the admin credential on /v1",
        client()
            .post(format!("{}/responses", h.base))
            .bearer_auth(ADMIN)
            .json(&json!({"model":"m","input":"x"}))
            .send()
            .await
            .unwrap(),
        401,
    );
    check("a forged session", c.get(&status).header("x-keymux-session", "forged").send().await.unwrap(), 401);
    // And the right ways in work.
    let ok = c.post(&pause).header("x-keymux-session", &browser.session).header("origin", &h.root);
    assert_eq!(ok.send().await.unwrap().status(), 200, "the dashboard, from its own page, with its session header");
    assert_eq!(api.post_json("/resume", None).await.0, 200, "the CLI's admin credential");
    assert!(!h.gateway.paused());
    for r in answers {
        let text = r.text().await.unwrap_or_default();
        assert_no_secrets("a refusal", &text, &["sk-a1", TOKEN, ADMIN, &browser.session]);
    }
    assert!(client_counts(&h.sim).is_empty(), "nothing reached the provider");
}

#[tokio::test]
async fn keys_and_tokens_change_without_a_restart() {
    let sim = SimConfig::new().org("org-a", &["sk-a1"]).org("org-b", &["sk-b1"]);
    let h = Harness::start(sim, &[key("a1", "sk-a1")]).await;
    let api = Admin::new(&h.root);
    // A key added through the API: probed, in the pool, and serving the next unpinned request.
    let (status, added) = api.post_json("/keys", Some(json!({"label":"b1","secret":"sk-b1","priority":0}))).await;
    assert_eq!(status, 201, "{added}");
    assert_eq!(added["org"], "org-b", "probed before the answer");
    assert_no_secrets("the added key", &added.to_string(), &["sk-b1"]);
    h.gateway.set_enabled(&keymux::keys::KeyId::new("k_a1"), false).unwrap();
    assert_eq!(small_request(&client(), &h.base).await, 200);
    assert_eq!(h.sim.log().last().unwrap().key.as_deref(), Some("sk-b1"), "the new key served");
    h.gateway.set_enabled(&keymux::keys::KeyId::new("k_a1"), true).unwrap();
    // Renamed, then removed: its pinned session is rescued onto the organization that is left.
    let id = added["id"].as_str().unwrap().to_owned();
    let (status, renamed) = api.patch(&format!("/keys/{id}"), json!({"label":"home","priority":2})).await;
    assert_eq!((status, renamed["label"].as_str(), renamed["priority"].as_u64()), (200, Some("home"), Some(2)));
    let c = client();
    let mut session = Session::new(Shape::Pi, 1, false);
    h.gateway.set_enabled(&keymux::keys::KeyId::new("k_a1"), false).unwrap();
    assert_eq!(session.turn(&c, &h.base, false).await.status, 200);
    h.gateway.set_enabled(&keymux::keys::KeyId::new("k_a1"), true).unwrap();
    assert_eq!(api.delete(&format!("/keys/{id}")).await, 204);
    assert_eq!(session.turn(&c, &h.base, false).await.status, 200, "rescued");
    let record = h.gateway.events().recent(1).pop().unwrap();
    assert!(record.rescued_items >= 1);
    assert_eq!(record.served_by.as_ref().map(|k| k.as_str()), Some("k_a1"));
    // A token created through the API works at once; revoked, it is refused at the next request.
    let (status, created) = api.post_json("/tokens", Some(json!({"name":"pi"}))).await;
    assert_eq!(status, 201);
    let secret = created["secret"].as_str().unwrap().to_owned();
    assert_eq!(small_request_as(&client(), &h.base, &secret).await, 200);
    let listed = api.get_json("/tokens").await;
    assert!(!listed.to_string().contains(&secret), "a listing never shows a token");
    let token_id = created["token"]["id"].as_str().unwrap().to_owned();
    assert_eq!(api.delete(&format!("/tokens/{token_id}")).await, 204);
    assert_eq!(small_request_as(&client(), &h.base, &secret).await, 401);
    assert_eq!(small_request(&client(), &h.base).await, 200, "other tokens still work");
}

#[tokio::test]
async fn pause_answers_503_with_retry_after_and_resume_serves_again() {
    let h = Harness::start(SimConfig::new().org("org-a", &["sk-a1"]), &[key("a1", "sk-a1")]).await;
    let api = Admin::new(&h.root);
    let (status, gateway) = api.post_json("/pause", None).await;
    assert_eq!((status, &gateway["paused"]), (200, &json!(true)));
    let r = client()
        .post(format!("{}/responses", h.base))
        .bearer_auth(TOKEN)
        .json(&json!({"model":"m","input":"x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "30");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "keymux_paused");
    assert!(client_counts(&h.sim).is_empty());
    assert_eq!(api.post_json("/resume", None).await.0, 200);
    assert_eq!(small_request(&client(), &h.base).await, 200);
}

/// Reads SSE frames from a response into (event, data) pairs until `done` says enough, the stream ends,
/// or a generous minute passes (heartbeats alone keep an idle stream open forever).
async fn frames(response: reqwest::Response, done: impl Fn(&[(String, Value)]) -> bool) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let mut buf = String::new();
    let mut stream = response.bytes_stream();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !done(&out) {
        let Ok(Some(Ok(chunk))) = tokio::time::timeout_at(deadline, stream.next()).await else { break };
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find("\n\n") {
            let frame: String = buf.drain(..end + 2).collect();
            let event = frame.lines().find_map(|l| l.strip_prefix("event: ")).unwrap_or("").to_owned();
            let data = frame.lines().find_map(|l| l.strip_prefix("data: ")).unwrap_or("null");
            if !event.is_empty() {
                out.push((event, serde_json::from_str(data).unwrap_or(Value::Null)));
            }
        }
    }
    out
}

/// Subscribes with a tiny receive buffer and reads nothing: a subscriber that is stuck.
async fn stuck_subscriber(h: &Harness) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt as _;
    let addr: std::net::SocketAddr = h.root.trim_start_matches("http://").parse().unwrap();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(addr).await.unwrap();
    let request = format!("GET /keymux/api/events HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {ADMIN}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    stream
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_subscriber_slows_nothing_and_is_told_what_it_missed() {
    use tokio::io::AsyncReadExt as _;
    let h = Harness::start(SimConfig::new().org("org-a", &["sk-a1"]), &[key("a1", "sk-a1")]).await;
    let mut stuck = stuck_subscriber(&h).await;
    // While it reads nothing, 4,000 requests (8,000 events: more than the socket buffers between it and
    // the gateway hold) go through, all served.
    let results: Vec<u16> = futures::stream::iter(0..4_000)
        .map(|_| async { small_request(&client(), &h.base).await })
        .buffer_unordered(16)
        .collect()
        .await;
    assert!(results.iter().all(|s| *s == 200), "every request served");
    // Now it reads: what it got, and the lag it is told of, account for every event.
    let mut text = String::new();
    let mut buf = vec![0u8; 64 * 1024];
    let (mut delivered, mut missed) = (0u64, 0u64);
    // The stream's heartbeat comes every 15 s: reading stops once a read brings nothing but heartbeats
    // (all that was sent has been read), so a shortfall fails with its counts rather than waiting on.
    while delivered + missed < 8_000 {
        let Ok(Ok(n)) = tokio::time::timeout(Duration::from_secs(30), stuck.read(&mut buf)).await else { break };
        if n == 0 {
            break;
        }
        let read = String::from_utf8_lossy(&buf[..n]);
        let heartbeat = |frame: &str| frame.trim().is_empty() || frame.trim() == ": keepalive";
        if read.contains(": keepalive") && read.split("\n\n").all(heartbeat) {
            break;
        }
        text.push_str(&read);
        delivered = (text.matches("event: routed").count() + text.matches("event: finished").count()) as u64;
        missed = text
            .split("event: lagged\ndata: ")
            .skip(1)
            .filter_map(|rest| serde_json::from_str::<Value>(rest.lines().next().unwrap_or("")).ok())
            .map(|v| v["data"]["missed"].as_u64().unwrap_or(0))
            .sum();
    }
    assert!(missed > 0, "told it lagged ({delivered} delivered)");
    let lagged = text.matches("event: lagged").count();
    let other = text.matches("event: ").count() as u64 - delivered - lagged as u64;
    assert!(
        delivered + missed >= 8_000,
        "{delivered} delivered + {missed} missed in {lagged} lagged notices, {other} other events"
    );
}

#[tokio::test]
async fn a_subscriber_resumes_where_it_left_off() {
    let h = Harness::start(SimConfig::new().org("org-a", &["sk-a1"]), &[key("a1", "sk-a1")]).await;
    let api = Admin::new(&h.root);
    assert_eq!(small_request(&client(), &h.base).await, 200);
    let status = api.get_json("/status").await;
    let mark = status["gateway"]["last_event_id"].as_u64().unwrap();
    assert_eq!(small_request(&client(), &h.base).await, 200);
    let events = api.request(reqwest::Method::GET, "/events").header("last-event-id", mark.to_string()).send();
    let events = events.await.unwrap();
    let seen = frames(events, |seen| seen.len() >= 2).await;
    assert_eq!(seen.iter().map(|(e, _)| e.as_str()).collect::<Vec<_>>(), ["routed", "finished"]);
    assert_eq!(seen[0].1["id"].as_u64(), Some(mark + 1));
    assert_eq!(seen[1].1["data"]["status"], 200);
    assert_eq!(seen[1].1["data"]["client"], "other");
}

/// A session a key served, after that key is removed: its organization's other keys go on with it,
/// whether the key served it before or after its organization was learned.
async fn removed_key_case(slow_probe: bool) {
    let sim = SimConfig::new().org("org-a", &["sk-a1", "sk-a3"]).org("org-b", &["sk-b1"]);
    let h = Harness::start(sim, &[key("a1", "sk-a1"), key("b1", "sk-b1")]).await;
    let api = Admin::new(&h.root);
    // Only the new key may serve the first turns.
    for id in ["k_a1", "k_b1"] {
        assert_eq!(api.post_json(&format!("/keys/{id}/disable"), None).await.0, 200);
    }
    if slow_probe {
        h.sim.inject("sk-a3", keymux_sim::Fault::SlowFirstByte(Duration::from_millis(1500)));
    }
    let (status, added) = api.post_json("/keys", Some(json!({"label":"a3","secret":"sk-a3"}))).await;
    assert_eq!(status, 201, "{added}");
    let a3 = added["id"].as_str().unwrap().to_owned();
    let mut session = Session::new(Shape::Codex, 77, true);
    for _ in 0..2 {
        let turn = session.turn(&client(), &h.base, false).await;
        assert_eq!(turn.status, 200, "{}", turn.body);
    }
    assert_eq!(client_counts(&h.sim).get("sk-a3"), Some(&2));
    // The probe has taught the pool a3's organization before the other keys come back.
    let org_known =
        |keys: &Value| keys.as_array().unwrap().iter().any(|k| k["id"] == a3.as_str() && k["org"] == "org-a");
    until("a3's organization in GET /keys", || api.get_json("/keys"), org_known).await;
    for id in ["k_a1", "k_b1"] {
        assert_eq!(api.post_json(&format!("/keys/{id}/enable"), None).await.0, 200);
    }
    let turn = session.turn(&client(), &h.base, false).await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    assert_eq!(api.delete(&format!("/keys/{a3}")).await, 204);
    for _ in 0..3 {
        let turn = session.turn(&client(), &h.base, false).await;
        assert_eq!(turn.status, 200, "{}", turn.body);
    }
    let counts = client_counts(&h.sim);
    assert_eq!(counts.get("sk-b1"), None, "never sent to the other organization: {counts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_keys_sessions_stay_in_its_organization() {
    removed_key_case(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_keys_sessions_stay_in_its_organization_even_if_it_served_them_before_its_probe() {
    removed_key_case(true).await;
}

/// A key removed while its answer is on the way: the answer is still tagged, so the session's next turn
/// knows its organization (here lost, so its items are dropped rather than sent where they are
/// unreadable).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_in_flight_when_its_key_is_removed_is_still_tagged() {
    let sim = SimConfig::new().org("org-a", &["sk-a1"]).org("org-b", &["sk-b1"]);
    let h = Harness::start(sim, &[key("a1", "sk-a1"), key("b1", "sk-b1")]).await;
    let api = Admin::new(&h.root);
    assert_eq!(api.post_json("/keys/k_b1/disable", None).await.0, 200);
    h.sim.inject("sk-a1", keymux_sim::Fault::SlowFirstByte(Duration::from_secs(2)));
    let mut session = Session::new(Shape::Codex, 78, false);
    let body = session.next_body(false);
    let answer = {
        let request = post(&client(), &format!("{}/responses", h.base), &[], &body).send();
        let remove = async {
            // The simulator logs the request as it starts its slow first byte: the answer is on its way.
            until("a1's request at the simulator", || async { client_counts(&h.sim) }, |n| n.get("sk-a1") == Some(&1))
                .await;
            assert_eq!(api.delete("/keys/k_a1").await, 204);
            assert_eq!(api.post_json("/keys/k_b1/enable", None).await.0, 200);
        };
        let (response, ()) = tokio::join!(request, remove);
        response.unwrap().json::<Value>().await.unwrap()
    };
    let output = answer["output"].as_array().unwrap().clone();
    let reasoning = output.iter().find(|i| i["type"] == "reasoning").unwrap();
    assert!(reasoning["encrypted_content"].as_str().unwrap().starts_with("km1"), "tagged: {reasoning}");
    session.absorb(output);
    let turn = session.turn(&client(), &h.base, false).await;
    assert_eq!(turn.status, 200, "org-a's items were dropped, not sent to org-b: {}", turn.body);
}
