//! Sessions begun before Keymux keep working. A session started directly against one organization
//! replays reasoning that organization encrypted, with no Keymux marker. Keymux finds the organization
//! that can read it: one key of each organization in turn, moving on only on
//! `invalid_encrypted_content` (a 400 that costs no tokens), each organization at most once. It
//! remembers the answer for the session and tags the output, so later turns are pinned as usual. When
//! no organization can read it, `lost_org` applies: rescue drops the unreadable items, fail refuses
//! with what to do. HTTP and WebSocket alike.
#![allow(clippy::unwrap_used, clippy::print_stdout, reason = "tests print the figures they measure")]

use crate::support;

use keymux::router::LostOrgPolicy;
use keymux_sim::SimConfig;
use serde_json::Value;
use support::*;

/// The three organizations Keymux has keys for, and a fourth (`org-d`) it has none of: a session begun
/// there can be read by no key in the pool.
fn four_orgs() -> SimConfig {
    three_orgs().org("org-d", &["sk-d1"])
}

/// A session begun directly on the simulator with `secret` (as a client used before Keymux): two turns,
/// whose reasoning only that key's organization can read. It then talks to Keymux with its token.
async fn begun_directly(h: &Harness, shape: Shape, n: usize, stream: bool, secret: &str) -> Session {
    let mut s = Session::new(shape, n, stream);
    s.token = secret.to_owned();
    for _ in 0..2 {
        let r = s.turn(&client(), &h.sim.base_url(), false).await;
        assert_eq!(r.status, 200, "the direct turn: {}", r.body);
    }
    let encrypted = s.history.iter().filter(|i| i["encrypted_content"].as_str().is_some_and(|c| !c.is_empty()));
    assert!(encrypted.count() >= 2, "the session carries encrypted reasoning to replay");
    s.token = TOKEN.to_owned();
    s
}

/// The records of one session through Keymux, oldest first.
async fn records_of(h: &Harness, n_records_at_least: usize) -> Vec<Value> {
    let decisions = decisions_api(&h.root).await;
    let mut records = decisions["data"].as_array().unwrap().clone();
    records.sort_by_key(|r| r["decision"]["seq"].as_u64());
    assert!(records.len() >= n_records_at_least, "{} records", records.len());
    records
}

fn org_of_key(key: &str) -> &'static str {
    match &key[2..3] {
        "a" => "org-a",
        "b" => "org-b",
        _ => "org-c",
    }
}

fn wrong_org_attempts(record: &Value) -> usize {
    record["attempts"].as_array().unwrap().iter().filter(|a| a["failure"] == "wrong_organization").count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_sessions_begun_before_keymux_continue_on_their_organization() {
    let h = Harness::start(four_orgs(), &five_keys()).await;
    let c = client();
    let begun = [("sk-a1", Shape::Codex, true), ("sk-b2", Shape::Pi, false), ("sk-c1", Shape::Codex, false)];
    let begun =
        begun.iter().chain(&[("sk-b1", Shape::Pi, true), ("sk-a2", Shape::Codex, true), ("sk-c1", Shape::Pi, true)]);
    let mut invalid = 0;
    for (n, (secret, shape, stream)) in begun.enumerate() {
        let mut s = begun_directly(&h, *shape, n + 1, *stream, secret).await;
        for turn in 0..3 {
            let r = s.turn(&c, &h.base, turn == 1).await;
            invalid += usize::from(r.error_code.as_deref() == Some("invalid_encrypted_content"));
            assert_eq!(r.status, 200, "session {n} begun with {secret}, turn {turn} through Keymux: {}", r.body);
        }
    }
    assert_eq!(invalid, 0, "no client saw invalid_encrypted_content");
    let records = records_of(&h, 18).await;
    for (n, secret) in ["sk-a1", "sk-b2", "sk-c1", "sk-b1", "sk-a2", "sk-c1"].iter().enumerate() {
        let session = &records[n * 3..n * 3 + 3];
        let first = &session[0];
        assert_eq!(first["decision"]["route"], "finding_org", "session {n}: {first}");
        let served = first["served_by"].as_str().unwrap();
        assert_eq!(org_of_key(served), org_of(secret), "session {n} found its organization: {first}");
        assert!(wrong_org_attempts(first) <= 2, "each other organization at most once: {first}");
        for later in &session[1..] {
            // The first answer through Keymux was tagged: later turns are pinned like any session's.
            assert_eq!(later["decision"]["route"], "pinned", "session {n}: {later}");
            assert_eq!(org_of_key(later["served_by"].as_str().unwrap()), org_of(secret));
        }
    }
    let tried: usize = records.iter().map(wrong_org_attempts).sum();
    println!("6 sessions begun before Keymux: 0 failed turns, {tried} organizations answered they could not read");
}

/// How many answers the simulator gave with `invalid_encrypted_content`, from the request numbered
/// `after` on.
fn unreadable_at_the_provider(h: &Harness, after: u64) -> usize {
    let log = h.sim.log();
    log.iter().filter(|e| e.seq > after && e.error_code.as_deref() == Some("invalid_encrypted_content")).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_users_own_key_imported_its_sessions_are_found_at_the_first_try_over_http_and_websocket() {
    // b1 is the key the user had in Codex's auth.json, imported by setup; their sessions began on org-b.
    // org-b's keys are in the second tier, so the balancer alone would try org-b last.
    let keys = five_keys().into_iter().map(|k| match k.label.as_str() {
        "b1" => k.priority(1).imported(),
        "b2" => k.priority(1),
        _ => k,
    });
    let keys: Vec<TestKey> = keys.collect();
    let h = Harness::start(four_orgs(), &keys).await;
    let c = client();
    let mut http = begun_directly(&h, Shape::Codex, 31, true, "sk-b1").await;
    let mut socket = begun_directly(&h, Shape::Codex, 32, true, "sk-b2").await;
    let after = h.sim.log().last().map_or(0, |e| e.seq);
    for turn in 0..3 {
        let r = http.turn(&c, &h.base, turn == 1).await;
        assert_eq!(r.status, 200, "HTTP turn {turn}: {}", r.body);
    }
    let mut ws = WsClient::connect(&h.base, &socket.id).await.unwrap();
    for turn in 0..2 {
        let answer = ws.create(&socket.next_body(false)).await;
        assert!(answer.error.is_none() && !answer.closed, "WebSocket turn {turn}: {:?}", answer.error);
        socket.absorb(answer.output_items());
    }
    let records = records_of(&h, 5).await;
    for first in [&records[0], &records[3]] {
        assert_eq!(first["decision"]["route"], "finding_org", "{first}");
        assert_eq!(wrong_org_attempts(first), 0, "the imported key's organization first: {first}");
        assert_eq!(org_of_key(first["served_by"].as_str().unwrap()), "org-b", "{first}");
    }
    assert_eq!(unreadable_at_the_provider(&h, after), 0, "not one invalid_encrypted_content, at the provider either");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_organization_found_is_tried_first_on_the_sessions_next_turn() {
    let h = Harness::start(four_orgs(), &five_keys()).await;
    let c = client();
    let mut s = begun_directly(&h, Shape::Codex, 7, false, "sk-c1").await;
    let before = s.history.clone();
    assert_eq!(s.turn(&c, &h.base, false).await.status, 200);
    // The next turn replays only what was made before Keymux (nothing marked): no marker says where
    // it belongs, but Keymux remembers which organization read it for this session.
    s.history = before;
    assert_eq!(s.turn(&c, &h.base, false).await.status, 200);
    let records = records_of(&h, 2).await;
    let (first, second) = (&records[0], &records[1]);
    let found = first["served_by"].as_str().unwrap();
    assert_eq!(org_of_key(found), "org-c");
    let reason = second["decision"]["reasons"].as_array().unwrap().iter().find(|r| r["rule"] == "finding_org").cloned();
    assert_eq!(reason.unwrap()["known"], found, "the session's organization is remembered: {second}");
    assert_eq!(second["attempts"].as_array().unwrap().len(), 1, "served at the first try: {second}");
    assert_eq!(second["served_by"], found);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_no_organization_can_read_is_rescued_by_default() {
    let h = Harness::start(four_orgs(), &five_keys()).await;
    let mut s = begun_directly(&h, Shape::Pi, 8, true, "sk-d1").await;
    let r = s.turn(&client(), &h.base, false).await;
    assert_eq!(r.status, 200, "rescued: {}", r.body);
    let records = records_of(&h, 1).await;
    let record = &records[0];
    assert_eq!(wrong_org_attempts(record), 3, "each of the three organizations tried once: {record}");
    assert!(record["rescued_items"].as_u64().unwrap() >= 2, "the unreadable reasoning was dropped: {record}");
    let reasons = record["decision"]["reasons"].as_array().unwrap();
    assert!(reasons.iter().any(|r| r["rule"] == "unreadable_everywhere" && r["tried"] == 3), "{record}");
    // The next turn carries Keymux's markers now: pinned, no more searching.
    assert_eq!(s.turn(&client(), &h.base, false).await.status, 200);
    let records = records_of(&h, 2).await;
    assert_eq!(records[1]["decision"]["route"], "pinned", "{}", records[1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_no_organization_can_read_is_refused_when_the_policy_is_fail() {
    let h = Harness::start_with(four_orgs(), &five_keys(), |c| c.affinity.lost_org = LostOrgPolicy::Fail).await;
    let mut s = begun_directly(&h, Shape::Codex, 9, false, "sk-d1").await;
    let r = s.turn(&client(), &h.base, false).await;
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(r.error_code.as_deref(), Some("keymux_organization_unknown"), "{}", r.body);
    assert!(r.body.contains("keymux keys add") && r.body.contains("lost_org"), "says what to do: {}", r.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_sessions_begun_before_keymux_continue_on_their_organization() {
    let h = Harness::start(four_orgs(), &five_keys()).await;
    for (n, secret) in ["sk-b1", "sk-c1", "sk-a2", "sk-b2"].iter().enumerate() {
        let mut s = begun_directly(&h, Shape::Codex, 20 + n, true, secret).await;
        let mut ws = WsClient::connect(&h.base, &s.id).await.unwrap();
        for turn in 0..2 {
            let body = s.next_body(false);
            let answer = ws.create(&body).await;
            assert!(answer.error.is_none() && !answer.closed, "session {n} turn {turn}: {:?}", answer.error);
            s.absorb(answer.output_items());
        }
    }
    let records = records_of(&h, 8).await;
    for (n, secret) in ["sk-b1", "sk-c1", "sk-a2", "sk-b2"].iter().enumerate() {
        let (first, second) = (&records[n * 2], &records[n * 2 + 1]);
        assert_eq!(first["transport"], "web_socket");
        assert_eq!(first["decision"]["route"], "finding_org", "{first}");
        assert_eq!(org_of_key(first["served_by"].as_str().unwrap()), org_of(secret), "{first}");
        assert_eq!(first["status"], 200, "{first}");
        assert_eq!(second["decision"]["route"], "web_socket_bound", "{second}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_session_no_organization_can_read_is_rescued() {
    let h = Harness::start(four_orgs(), &five_keys()).await;
    let mut s = begun_directly(&h, Shape::Codex, 30, true, "sk-d1").await;
    let mut ws = WsClient::connect(&h.base, &s.id).await.unwrap();
    let answer = ws.create(&s.next_body(false)).await;
    assert!(answer.error.is_none() && !answer.closed, "rescued: {:?}", answer.error);
    let records = records_of(&h, 1).await;
    let record = &records[0];
    assert_eq!(record["transport"], "web_socket");
    assert_eq!(wrong_org_attempts(record), 3, "each of the three organizations tried once: {record}");
    assert!(record["rescued_items"].as_u64().unwrap() >= 2, "the unreadable reasoning was dropped: {record}");
    // A new socket replaying the whole history (as Codex does after a reconnect) drops it again.
    s.absorb(answer.output_items());
    let mut again = WsClient::connect(&h.base, &s.id).await.unwrap();
    let answer = again.create(&s.next_body(false)).await;
    assert!(answer.error.is_none() && !answer.closed, "the next socket: {:?}", answer.error);
}

/// Codex opens a resumed session's socket with a prewarm frame that replays nothing, so the socket is
/// bound before Keymux sees the old reasoning. The first frame that replays it there is answered with
/// the lost-state error (never sent to an organization that cannot read it); Codex reconnects and sends
/// the whole history first, and Keymux finds the organization.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_bound_by_a_prewarm_is_reconnected_to_find_the_organization() {
    let h = Harness::start(four_orgs(), &five_keys()).await;
    let mut s = begun_directly(&h, Shape::Codex, 40, true, "sk-c1").await;
    let body = s.next_body(false);
    let mut prewarm = body.clone();
    prewarm["input"] = serde_json::json!([]);
    prewarm["generate"] = false.into();
    let mut ws = WsClient::connect(&h.base, &s.id).await.unwrap();
    let answer = ws.create(&prewarm).await;
    assert!(answer.error.is_none(), "the prewarm is served: {:?}", answer.error);
    let answer = ws.create(&body).await;
    let error = answer.error.expect("the old reasoning is not sent on the bound socket");
    assert_eq!(error["error"]["code"], "previous_response_not_found", "{error}");
    let upstream_400s =
        h.sim.log().iter().filter(|e| e.error_code.as_deref() == Some("invalid_encrypted_content")).count();
    let mut again = WsClient::connect(&h.base, &s.id).await.unwrap();
    let answer = again.create(&body).await;
    assert!(answer.error.is_none() && !answer.closed, "found on the new socket: {:?}", answer.error);
    let records = records_of(&h, 3).await;
    let found = records.iter().find(|r| r["decision"]["route"] == "finding_org").expect("found on reconnect");
    assert_eq!(org_of_key(found["served_by"].as_str().unwrap()), "org-c", "{found}");
    assert!(records.iter().any(|r| r["error"] == "reconnect_to_find_org"), "the bounced frame is recorded as such");
    assert_eq!(upstream_400s, 0, "the bound socket never sent the old reasoning to its organization");
}
