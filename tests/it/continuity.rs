//! Continuity, black-box: `previous_response_id` and `/v1/responses/{id}` calls go to exactly the key
//! that holds the response, with clear refusals when it cannot serve.
#![allow(clippy::unwrap_used, clippy::print_stdout, reason = "tests print the figures they measure")]

use crate::support;

use std::collections::{BTreeMap, BTreeSet};

use futures::StreamExt as _;
use keymux::keys::KeyId;
use keymux_sim::{Fault, SimConfig};
use serde_json::{json, Value};
use support::*;

/// One `store:true` turn; returns (status, response id as the client saw it, error code).
async fn stored_turn(
    c: &reqwest::Client,
    base: &str,
    chain: usize,
    turn: usize,
    previous: Option<&str>,
) -> (u16, Option<String>, Option<String>) {
    let stream = turn % 2 == 0;
    let mut input =
        vec![json!({"role":"user","content":[{"type":"input_text","text":format!("chain {chain} turn {turn}")}]})];
    if previous.is_none() {
        input.insert(0, json!({"role":"developer","content":"You keep a running tally. ".repeat(30)}));
    }
    let mut body = json!({"model":"gpt-5.5","input":input,"store":true,"stream":stream,"reasoning":{"effort":"low"}});
    if let Some(p) = previous {
        body["previous_response_id"] = json!(p);
    }
    let headers = vec![("x-test-turn".to_owned(), format!("{chain}:{turn}"))];
    let r = post(c, &format!("{base}/responses"), &headers, &body).send().await.unwrap();
    let status = r.status().as_u16();
    if status != 200 {
        let v: Value = r.json().await.unwrap_or(Value::Null);
        return (status, None, v["error"]["code"].as_str().map(str::to_owned));
    }
    let id = if stream {
        let events = read_sse(r).await;
        events
            .iter()
            .find(|e| e.data["type"] == "response.completed")
            .and_then(|e| e.data["response"]["id"].as_str().map(str::to_owned))
    } else {
        r.json::<Value>().await.unwrap()["id"].as_str().map(str::to_owned)
    };
    (status, id, None)
}

/// 24 chains of 20 stored turns at concurrency 8; returns (turns ok, first failure codes).
async fn run_chains(h: &Harness) -> (usize, Vec<String>) {
    let c = client();
    let results: Vec<(usize, Option<String>)> = futures::stream::iter(0..24)
        .map(|chain| {
            let c = c.clone();
            let base = h.base.clone();
            async move {
                let mut previous: Option<String> = None;
                for turn in 0..20 {
                    let (status, id, code) = stored_turn(&c, &base, chain, turn, previous.as_deref()).await;
                    if status != 200 {
                        return (turn, Some(format!("{status} {}", code.unwrap_or_default())));
                    }
                    previous = id;
                }
                (20, None)
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    (results.iter().map(|(n, _)| n).sum(), results.into_iter().filter_map(|(_, e)| e).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_chains_of_twenty_turns_stay_on_their_key() {
    let h = Harness::start(three_orgs(), &five_keys()).await;
    let (ok, failures) = run_chains(&h).await;
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(ok, 24 * 20);
    let mut keys_by_chain: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for e in h.sim.log() {
        if let Some((_, v)) = e.headers.iter().find(|(k, _)| k == "x-test-turn") {
            let chain = v.split(':').next().unwrap().to_owned();
            keys_by_chain.entry(chain).or_default().insert(e.key.clone().unwrap());
            assert!(!e.previous_response_id.as_deref().unwrap_or("").contains("km1"), "upstream saw a marker");
        }
    }
    assert_eq!(keys_by_chain.len(), 24);
    for (chain, keys) in &keys_by_chain {
        assert_eq!(keys.len(), 1, "chain {chain} moved between keys: {keys:?}");
    }
    let used: BTreeSet<&String> = keys_by_chain.values().flatten().collect();
    assert!(used.len() >= 4, "chains spread over the keys: {used:?}");
    let records = h.gateway.events().recent(1000);
    let bound = records.iter().filter(|r| r.routed.decision.continuity_hit).count();
    assert_eq!(bound, 24 * 19, "every follow-up reported as a continuity hit");
    assert!(records.iter().all(|r| r.routed.decision.continuity_hit
        == r.routed.decision.reasons.iter().any(|x| matches!(x, keymux::router::Reason::ContinuityBinding { .. }))));
    println!("continuity on: {ok} of 480 stored turns succeeded, {} follow-ups bound to their key", bound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_continuity_the_same_chains_break() {
    let h = Harness::start_with(three_orgs(), &five_keys(), |c| c.affinity.continuity = false).await;
    let (ok, failures) = run_chains(&h).await;
    println!(
        "continuity off: {ok} of 480 stored turns succeeded; {} of 24 chains died ({:?})",
        failures.len(),
        failures.first()
    );
    assert!(failures.len() >= 20, "{failures:?}");
    assert!(failures.iter().all(|f| f.contains("previous_response_not_found")));
}

#[tokio::test]
async fn response_resources_reach_the_key_that_holds_them() {
    let h = Harness::start(three_orgs(), &five_keys()).await;
    let c = client();
    let mut made = Vec::new();
    for chain in 0..10 {
        let (status, id, _) = stored_turn(&c, &h.base, chain, 1, None).await;
        assert_eq!(status, 200);
        let key = h.sim.log().last().unwrap().key.clone().unwrap();
        made.push((id.unwrap(), key));
    }
    assert!(made.iter().map(|(_, k)| k).collect::<BTreeSet<_>>().len() >= 3);
    for (id, key) in &made {
        assert!(id.starts_with("resp_km1"), "clients get tagged ids: {id}");
        let get = c.get(format!("{}/responses/{id}", h.base)).bearer_auth(TOKEN).send().await.unwrap();
        assert_eq!(get.status(), 200);
        assert_eq!(get.json::<Value>().await.unwrap()["id"], json!(id), "the id reads back as the client knows it");
        assert_eq!(h.sim.log().last().unwrap().key.as_ref(), Some(key));
        let items =
            c.get(format!("{}/responses/{id}/input_items?limit=5", h.base)).bearer_auth(TOKEN).send().await.unwrap();
        assert_eq!(items.status(), 200);
        assert_eq!(h.sim.log().last().unwrap().key.as_ref(), Some(key));
        let cancel = c.post(format!("{}/responses/{id}/cancel", h.base)).bearer_auth(TOKEN).send().await.unwrap();
        // A completed response cannot be cancelled: the key that holds it says so. Any other key would
        // not know the response at all (`previous_response_not_found`).
        assert_eq!(cancel.status(), 400);
        assert_eq!(h.sim.log().last().unwrap().key.as_ref(), Some(key));
        let refused: Value = cancel.json().await.unwrap();
        assert!(
            refused["error"]["message"].as_str().unwrap().contains("Cannot cancel a completed response"),
            "{refused}"
        );
        let del = c.delete(format!("{}/responses/{id}", h.base)).bearer_auth(TOKEN).send().await.unwrap();
        assert_eq!(del.json::<Value>().await.unwrap()["deleted"], true);
        let entry = h.sim.log().last().unwrap().clone();
        assert_eq!(entry.key.as_ref(), Some(key));
        assert!(!entry.path.contains("km1"), "the upstream sees its own id: {}", entry.path);
    }
    let records = h.gateway.events().recent(40);
    assert!(records
        .iter()
        .filter(|r| r.routed.operation != keymux::facts::Operation::ResponsesCreate)
        .all(|r| r.routed.decision.continuity_hit));
}

#[tokio::test]
async fn an_unusable_key_refuses_clearly_and_never_moves_the_chain() {
    let h = Harness::start(three_orgs(), &five_keys()).await;
    let c = client();
    let (_, id, _) = stored_turn(&c, &h.base, 1, 0, None).await;
    let id = id.unwrap();
    let key = h.sim.log().last().unwrap().key.clone().unwrap();
    let key_id = KeyId::new(format!("k_{}", &key[3..]));
    let label = &key[3..];

    // Cooling: 429 with that key's own retry-after, though four other keys are idle.
    h.sim.inject(&key, Fault::RateLimited { retry_after_secs: 6 });
    let (status, _, _) = stored_turn(&c, &h.base, 1, 1, Some(&id)).await;
    assert_eq!(status, 429, "the rate-limited answer itself");
    let before = h.sim.log().len();
    let r = post(
        &c,
        &format!("{}/responses", h.base),
        &[],
        &json!({"model":"gpt-5.5","input":"next","previous_response_id":id}),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(r.status(), 429);
    let secs: u64 = r.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((5..=6).contains(&secs), "{secs}");
    assert_eq!(h.sim.log().len(), before, "no other key was tried");

    // Disabled: 409 naming the key and saying what to do.
    h.gateway.pool().set_disabled(&key_id, true);
    let r = post(
        &c,
        &format!("{}/responses", h.base),
        &[],
        &json!({"model":"gpt-5.5","input":"next","previous_response_id":id}),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(r.status(), 409);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "keymux_continuity_unavailable");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains(&format!("'{label}'")) && message.contains("full conversation history"), "{message}");
    let get = c.get(format!("{}/responses/{id}", h.base)).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(get.status(), 409);
    assert_eq!(h.sim.log().len(), before, "nothing went upstream");
}

#[tokio::test]
async fn unmarked_response_ids_are_routed_normally_and_say_so() {
    let h = Harness::start(SimConfig::new().org("org-a", &["sk-a1"]), &[key("a1", "sk-a1")]).await;
    let c = client();
    let r = c.get(format!("{}/responses/resp_0123456789abcdef", h.base)).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(r.status(), 404, "the upstream's own answer");
    let record = h.gateway.events().recent(1).pop().unwrap();
    assert!(!record.routed.decision.continuity_hit);
    assert!(record.routed.decision.reasons.contains(&keymux::router::Reason::UnmarkedResponseId));
    let r = post(
        &c,
        &format!("{}/responses", h.base),
        &[],
        &json!({"model":"gpt-5.5","input":"x","previous_response_id":"resp_made_elsewhere"}),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(r.status(), 400);
    let record = h.gateway.events().recent(1).pop().unwrap();
    assert!(record.routed.decision.reasons.contains(&keymux::router::Reason::UnmarkedResponseId));
    // A forged response id is refused before anything goes upstream.
    let (_, id, _) = stored_turn(&c, &h.base, 1, 0, None).await;
    let id = id.unwrap();
    let changed = if &id[20..21] == "x" { "y" } else { "x" };
    let forged = format!("{}{changed}{}", &id[..20], &id[21..]);
    let r = c.get(format!("{}/responses/{forged}", h.base)).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["code"], "keymux_invalid_marker");
}
