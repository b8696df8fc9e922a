//! Encrypted-content affinity, black-box: the real gateway in front of the simulator with 3
//! organizations and 5 keys, driven by sessions shaped like captured Codex and pi traffic.
#![allow(clippy::unwrap_used, clippy::print_stdout, reason = "tests print the figures they measure")]

use crate::support;

use keymux::pool::HealthState;
use std::collections::{BTreeMap, BTreeSet};

use futures::StreamExt as _;
use keymux::keys::KeyId;
use keymux::router::LostOrgPolicy;
use keymux_sim::{Fault, SimConfig};
use serde_json::{json, Value};
use support::*;

struct RunReport {
    sessions_ok: usize,
    invalid_encrypted: usize,
    other_failures: Vec<String>,
}

/// 200 sessions of 2 to 10 turns, at concurrency 16, in every client shape.
async fn run_sessions(h: &Harness, sessions: usize) -> RunReport {
    let client = client();
    let results: Vec<Result<(), TurnResult>> = futures::stream::iter(0..sessions)
        .map(|n| {
            let client = client.clone();
            let base = h.base.clone();
            async move {
                let shape = [Shape::Codex, Shape::Pi, Shape::NoIds][n % 3];
                let mut session = Session::new(shape, n, n % 4 != 3);
                let turns = 2 + (n * 7) % 9;
                for t in 0..turns {
                    let r = session.turn(&client, &base, t % 3 == 2).await;
                    if r.status != 200 {
                        return Err(r);
                    }
                }
                Ok(())
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let mut report = RunReport { sessions_ok: 0, invalid_encrypted: 0, other_failures: Vec::new() };
    for r in results {
        match r {
            Ok(()) => report.sessions_ok += 1,
            Err(t) if t.error_code.as_deref() == Some("invalid_encrypted_content") => report.invalid_encrypted += 1,
            Err(t) => report.other_failures.push(format!("{} {}", t.status, t.body)),
        }
    }
    report
}

fn turn_of(entry: &keymux_sim::LogEntry) -> Option<(String, usize)> {
    let v = entry.headers.iter().find(|(k, _)| k == "x-test-turn")?.1.clone();
    let (session, turn) = v.rsplit_once(':')?;
    Some((session.to_owned(), turn.parse().ok()?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_sessions_never_lose_their_reasoning() {
    let h = Harness::start(three_orgs(), &five_keys()).await;
    let report = run_sessions(&h, 200).await;
    assert!(report.other_failures.is_empty(), "{:?}", &report.other_failures[..report.other_failures.len().min(3)]);
    assert_eq!(report.invalid_encrypted, 0);
    assert_eq!(report.sessions_ok, 200);

    let log = h.sim.log();
    // The upstream never saw a marker.
    let mut leaked = Vec::new();
    for entry in &log {
        if let Some(body) = &entry.body {
            marker_like_values(body, &mut leaked);
        }
    }
    assert!(leaked.is_empty(), "markers reached the upstream: {:?}", &leaked[..leaked.len().min(3)]);

    // First turns spread over all five keys.
    let mut first: BTreeMap<String, usize> = BTreeMap::new();
    let mut session_first_key: BTreeMap<String, String> = BTreeMap::new();
    let mut follow_ups: BTreeMap<String, usize> = BTreeMap::new();
    let mut moved_within_org = 0;
    let mut entries: Vec<_> = log.iter().filter_map(|e| Some((turn_of(e)?, e.key.clone()?))).collect();
    entries.sort_by_key(|((s, t), _)| (s.clone(), *t));
    for ((session, turn), key) in entries {
        if turn == 1 {
            *first.entry(key.clone()).or_default() += 1;
            session_first_key.insert(session, key);
        } else {
            *follow_ups.entry(key.clone()).or_default() += 1;
            let first_key = &session_first_key[&session];
            assert_eq!(org_of(first_key), org_of(&key), "a follow-up left its organization");
            if first_key != &key {
                moved_within_org += 1;
            }
        }
    }
    let mean = 200.0 / 5.0;
    for secret in ["sk-a1", "sk-a2", "sk-b1", "sk-b2", "sk-c1"] {
        let n = first.get(secret).copied().unwrap_or(0) as f64;
        assert!((n - mean).abs() <= 0.3 * mean, "first turns unevenly spread: {first:?}");
        assert!(
            follow_ups.get(secret).copied().unwrap_or(0) > 0,
            "pinned follow-ups never used {secret}: {follow_ups:?}"
        );
    }
    assert!(moved_within_org > 0, "pinned follow-ups only ever used the producing key");
    println!("first turns per key: {first:?}; follow-ups per key: {follow_ups:?}; follow-ups served by another key of the org: {moved_within_org}");

    // Every pinned decision is visible as such.
    let records = h.gateway.events().recent(1000);
    assert!(records.iter().any(|r| r.routed.decision.pin.as_ref().is_some_and(|p| !p.exact)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_affinity_the_same_sessions_break() {
    // Soft prompt-cache affinity would also keep these sessions together while nothing goes wrong, so it
    // is switched off too: this shows what the encrypted-content pin alone guards against.
    let h = Harness::start_with(three_orgs(), &five_keys(), |c| {
        c.affinity.encrypted_content = false;
        c.affinity.prompt_cache = false;
    })
    .await;
    let report = run_sessions(&h, 200).await;
    println!("affinity off: {} of 200 sessions died of invalid_encrypted_content", report.invalid_encrypted);
    assert!(report.invalid_encrypted > 100, "the test guards against real failures: {}", report.invalid_encrypted);
}

#[tokio::test]
async fn removing_keys_mid_session_moves_within_the_org_then_rescues() {
    let h = Harness::start(three_orgs(), &five_keys()).await;
    let c = client();
    // Find a session that starts on org-a.
    let mut n = 1000;
    let mut session = loop {
        let mut s = Session::new(Shape::Codex, n, true);
        assert_eq!(s.turn(&c, &h.base, false).await.status, 200);
        if org_of(h.sim.log().last().unwrap().key.as_deref().unwrap()) == "org-a" {
            break s;
        }
        n += 1;
    };
    let first = h.sim.log().last().unwrap().key.clone().unwrap();
    let (first_id, other) = if first == "sk-a1" { ("k_a1", "sk-a2") } else { ("k_a2", "sk-a1") };

    assert!(h.gateway.pool().remove(&KeyId::new(first_id)));
    let r = session.turn(&c, &h.base, false).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let record = h.gateway.events().recent(1).pop().unwrap();
    assert_eq!(
        h.sim.log().last().unwrap().key.as_deref(),
        Some(other),
        "continued on the org's other key: {:?}",
        record.routed.decision
    );

    let other_id = if other == "sk-a1" { "k_a1" } else { "k_a2" };
    assert!(h.gateway.pool().remove(&KeyId::new(other_id)));
    let r = session.turn(&c, &h.base, true).await;
    assert_eq!(r.status, 200, "rescue continues the session: {}", r.body);
    let entry = h.sim.log().last().unwrap().clone();
    assert_ne!(org_of(entry.key.as_deref().unwrap()), "org-a");
    let sent = entry.body.clone().unwrap();
    let reasoning = sent["input"].as_array().unwrap().iter().filter(|i| i["type"] == "reasoning").count();
    assert_eq!(reasoning, 0, "the unreadable org-a reasoning was dropped");
    let record = h.gateway.events().recent(1).pop().unwrap();
    assert_eq!(record.routed.decision.rescued_orgs.len(), 1);
    assert_eq!(record.rescued_items, 2);

    // The session keeps going: org-a items are dropped again, the new org's items pin.
    for _ in 0..2 {
        let r = session.turn(&c, &h.base, false).await;
        assert_eq!(r.status, 200, "{}", r.body);
        let record = h.gateway.events().recent(1).pop().unwrap();
        assert!(record.routed.decision.pin.is_some(), "pinned to the new organization");
        assert_eq!(record.routed.decision.rescued_orgs.len(), 1);
    }
}

#[tokio::test]
async fn fail_policy_answers_409_naming_the_key() {
    let h = Harness::start_with(
        SimConfig::new().org("org-a", &["sk-a1"]).org("org-b", &["sk-b1"]),
        &[key("work", "sk-a1"), key("home", "sk-b1")],
        |c| c.affinity.lost_org = LostOrgPolicy::Fail,
    )
    .await;
    let c = client();
    let mut session = Session::new(Shape::Pi, 1, true);
    loop {
        assert_eq!(session.turn(&c, &h.base, false).await.status, 200);
        if h.sim.log().last().unwrap().key.as_deref() == Some("sk-a1") {
            break;
        }
        session = Session::new(Shape::Pi, session.turn + 100, true);
    }
    h.gateway.pool().set_disabled(&KeyId::new("k_work"), true);
    let r = session.turn(&c, &h.base, false).await;
    assert_eq!(r.status, 409);
    assert_eq!(r.error_code.as_deref(), Some("keymux_organization_unavailable"));
    assert!(r.body.contains("'work'"), "{}", r.body);
    assert!(r.body.contains("rescue"), "says how to continue: {}", r.body);
    h.gateway.pool().set_disabled(&KeyId::new("k_work"), false);
    session.history.pop();
    session.turn -= 1;
    assert_eq!(session.turn(&c, &h.base, false).await.status, 200, "re-enabling the key continues the session");
}

#[tokio::test]
async fn a_cooling_org_answers_429_with_its_own_retry_after() {
    let h = Harness::start(three_orgs(), &five_keys()).await;
    let c = client();
    let mut n = 0;
    let mut session = loop {
        let mut s = Session::new(Shape::Pi, n, false);
        assert_eq!(s.turn(&c, &h.base, false).await.status, 200);
        if org_of(h.sim.log().last().unwrap().key.as_deref().unwrap()) == "org-b" {
            break s;
        }
        n += 1;
    };
    h.sim.inject("sk-b1", Fault::RateLimited { retry_after_secs: 9 });
    h.sim.inject("sk-b2", Fault::RateLimited { retry_after_secs: 7 });
    let r = session.turn(&c, &h.base, false).await;
    assert_eq!(r.status, 429, "{}", r.body);
    let after_429: Vec<_> = h.sim.log().iter().rev().take(2).map(|e| e.key.clone().unwrap()).collect();
    assert!(after_429.iter().all(|k| org_of(k) == "org-b"), "never tried another org: {after_429:?}");
    let record = h.gateway.events().recent(1).pop().unwrap();
    assert_eq!(record.attempts.len(), 2, "both org-b keys tried");
    // The other orgs still serve new sessions meanwhile.
    let mut fresh = Session::new(Shape::Codex, 999, true);
    assert_eq!(fresh.turn(&c, &h.base, false).await.status, 200);
}

#[tokio::test]
async fn mixed_forged_and_foreign_markers() {
    let h = Harness::start(
        SimConfig::new().org("org-a", &["sk-a1"]).org("org-b", &["sk-b1"]),
        &[key("work", "sk-a1"), key("home", "sk-b1")],
    )
    .await;
    let c = client();
    let mut sessions = Vec::new();
    let mut n = 0;
    while sessions.len() < 2 {
        let mut s = Session::new(Shape::Pi, n, true);
        assert_eq!(s.turn(&c, &h.base, false).await.status, 200);
        let key = h.sim.log().last().unwrap().key.clone().unwrap();
        if !sessions.iter().any(|(k, _): &(String, Session)| *k == key) {
            sessions.push((key, s));
        }
        n += 1;
    }
    let reasoning = |s: &Session| s.history.iter().find(|i| i["type"] == "reasoning").cloned().unwrap();

    // Reasoning from two organizations in one request.
    let (_, mut a) = sessions.remove(0);
    let (_, b) = sessions.remove(0);
    a.history.push(reasoning(&b));
    let before = h.sim.log().len();
    let r = a.turn(&c, &h.base, false).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.error_code.as_deref(), Some("keymux_mixed_organizations"));
    assert!(r.body.contains("'work'") && r.body.contains("'home'"), "{}", r.body);
    assert_eq!(h.sim.log().len(), before, "nothing went upstream");

    // An altered marker.
    let mut forged = Session::new(Shape::Pi, 500, true);
    let mut item = reasoning(&b);
    let content = item["encrypted_content"].as_str().unwrap().to_owned();
    // One character changed (to one it is not already, or the "forgery" would be the original).
    let changed = if &content[60..61] == "X" { "Y" } else { "X" };
    item["encrypted_content"] = Value::String(format!("{}{changed}{}", &content[..60], &content[61..]));
    forged.history.push(item);
    let r = forged.turn(&c, &h.base, false).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.error_code.as_deref(), Some("keymux_invalid_marker"));
    assert!(r.body.contains("authenticity"), "{}", r.body);
    // A truncated one.
    let mut truncated = Session::new(Shape::Pi, 501, true);
    let mut item = reasoning(&b);
    item["encrypted_content"] = Value::String(content[..20].to_owned());
    truncated.history.push(item);
    let r = truncated.turn(&c, &h.base, false).await;
    assert_eq!(r.error_code.as_deref(), Some("keymux_invalid_marker"));
    assert!(r.body.contains("truncated"), "{}", r.body);

    // Another install's marker: stripped and routed unpinned (here, on a single-org gateway, it works).
    let other = keymux::markers::Markers::new(&keymux::secrets::Secret::new("some-other-install-secret"));
    let original = content[content.find("gAAAAA").unwrap()..].to_owned();
    let foreign_key = KeyId::new("k_elsewhere");
    let wrapped = other.wrap_content(&foreign_key, other.org_tag(Some("org-b"), &foreign_key), &original).unwrap();
    let mut foreign = Session::new(Shape::NoIds, 502, false);
    foreign.history.push(json!({"type":"reasoning","summary":[],"encrypted_content": wrapped}));
    let r = foreign.turn(&c, &h.base, false).await;
    let entry = h.sim.log().last().unwrap().clone();
    let mut leaked = Vec::new();
    marker_like_values(entry.body.as_ref().unwrap(), &mut leaked);
    assert!(leaked.is_empty(), "foreign marker stripped before upstream");
    let record = h.gateway.events().recent(1).pop().unwrap();
    assert!(record.routed.decision.pin.is_none());
    assert!(record
        .routed
        .decision
        .reasons
        .iter()
        .any(|r| matches!(r, keymux::router::Reason::ForeignMarkersStripped { count: 1 })));
    // Whether it succeeded depends on which org the unpinned request reached; both outcomes are honest.
    assert!(r.status == 200 || r.error_code.as_deref() == Some("invalid_encrypted_content"));
}

#[tokio::test]
async fn provider_rejecting_a_correctly_pinned_request_is_not_the_keys_fault() {
    // The user told Keymux that key `b` is in org-a; the provider disagrees. Keymux pins correctly by what
    // it knows, relays the provider's 400, counts it, and does not cool or flag the key.
    let sim = SimConfig::new().org("org-a", &["sk-a1"]).org("org-x", &["sk-x1"]);
    let h = Harness::start(sim, &[key("a", "sk-a1")]).await;
    let c = client();
    let mut s = Session::new(Shape::Codex, 7, true);
    assert_eq!(s.turn(&c, &h.base, false).await.status, 200);
    let org_a = h.gateway.pool().org_tag(&KeyId::new("k_a")).unwrap();
    let mut entry = keymux::keys::KeyEntry {
        org: Some("org-a".into()),
        ..keymux::keys::KeyEntry::new(
            KeyId::new("k_b"),
            "b",
            keymux::keys::ProviderId::Openai,
            keymux::secrets::Secret::new("sk-x1"),
            keymux::keys::KeySource::Embedded,
        )
    };
    assert!(h.gateway.pool().add(entry.clone()));
    // The configured org wins over the learned one, so `b` now looks like org-a.
    h.gateway.pool().set_disabled(&KeyId::new("k_a"), true);
    let r = s.turn(&c, &h.base, false).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.error_code.as_deref(), Some("invalid_encrypted_content"), "relayed as the provider said it");
    let status = h.status();
    let b = status.iter().find(|k| k.label == "b").unwrap();
    assert_eq!(b.invalid_encrypted_content, 1);
    assert_eq!(b.health, HealthState::Ready, "not blamed");
    let record = h.gateway.events().recent(1).pop().unwrap();
    assert_eq!(record.upstream_code, Some("invalid_encrypted_content"));
    assert_eq!(record.routed.decision.pin.as_ref().map(|p| p.org), Some(org_a));
    entry.org = None;
}

#[tokio::test]
async fn chat_completions_reasoning_items_are_pinned_too() {
    let h = Harness::start(three_orgs(), &five_keys()).await;
    let c = client();
    let mut orgs_used = BTreeSet::new();
    for n in 0..24 {
        let stream = n % 2 == 0;
        let mut messages = vec![json!({"role":"developer","content":"You are pi. ".repeat(40)})];
        let mut first_org = None;
        for turn in 0..3 {
            messages.push(json!({"role":"user","content":[{"type":"text","text":format!("chat {n} turn {turn}")}]}));
            let mut body = json!({"model":"gpt-5.5","messages":messages,"stream":stream,"store":false,"max_completion_tokens":32000,"reasoning_effort":"medium"});
            if stream {
                body["stream_options"] = json!({"include_usage": true});
            }
            let r = post(&c, &format!("{}/chat/completions", h.base), &[], &body).send().await.unwrap();
            assert_eq!(r.status(), 200, "chat {n} turn {turn}: {}", r.text().await.unwrap());
            let (content, reasoning_items) = if stream {
                let events = read_sse(r).await;
                let content: String =
                    events.iter().filter_map(|e| e.data["choices"][0]["delta"]["content"].as_str()).collect();
                let items =
                    events.iter().find_map(|e| e.data["choices"][0]["delta"].get("reasoning_items").cloned()).unwrap();
                (content, items)
            } else {
                let v: Value = r.json().await.unwrap();
                (
                    v["choices"][0]["message"]["content"].as_str().unwrap().to_owned(),
                    v["choices"][0]["message"]["reasoning_items"].clone(),
                )
            };
            assert!(
                reasoning_items[0]["encrypted_content"].as_str().unwrap().starts_with("km1"),
                "tagged for the client"
            );
            assert!(reasoning_items[0]["id"].as_str().unwrap().starts_with("rs_km1"));
            messages.push(json!({"role":"assistant","content":content,"reasoning_items":reasoning_items}));
            let served = h.sim.log().last().unwrap().key.clone().unwrap();
            let org = org_of(&served);
            assert_eq!(*first_org.get_or_insert(org), org, "chat session {n} left its organization");
            orgs_used.insert(org);
        }
    }
    assert_eq!(orgs_used.len(), 3, "chat sessions still spread over organizations");
}
