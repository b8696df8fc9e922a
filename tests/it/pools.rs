//! Pools, black-box: a client token bound to a pool only ever reaches that pool's keys (then its
//! declared fallbacks), whatever the faults; state from another pool is refused; pools change at
//! runtime through the control API, and bad input gets the config check's words. The simulator's
//! request log is the judge of the boundary.
#![allow(clippy::unwrap_used, clippy::print_stdout, reason = "tests print the figures they measure")]

use crate::support;

use std::collections::BTreeMap;

use keymux_sim::{Fault, LogEntry, Sim};
use serde_json::{json, Value};
use support::*;

const WORK: [&str; 3] = ["sk-a1", "sk-a2", "sk-b1"];
const PERSONAL: [&str; 2] = ["sk-b2", "sk-c1"];

/// Creates the pools `work` (a1, a2, b1: organizations a and b) and `personal` (b2, c1: b and c), and
/// a token in each; returns (work token, personal token).
async fn two_pools(admin: &Admin) -> (String, String) {
    let (status, body) = admin.post_json("/pools", Some(json!({"name":"work","keys":["a1","a2","b1"]}))).await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = admin.post_json("/pools", Some(json!({"name":"personal","keys":["b2","c1"]}))).await;
    assert_eq!(status, 201, "{body}");
    (token_in(admin, "acme", "work").await, token_in(admin, "play", "personal").await)
}

/// A new client token named `name` in `pool`.
async fn token_in(admin: &Admin, name: &str, pool: &str) -> String {
    let (status, created) = admin.post_json("/tokens", Some(json!({"name": name, "pool": pool}))).await;
    assert_eq!((status, created["token"]["pool"].as_str()), (201, Some(pool)), "{created}");
    created["secret"].as_str().unwrap().to_owned()
}

/// A session of project `project` (its number shows in its `prompt_cache_key`), sending `token`.
fn session(shape: Shape, project: usize, n: usize, token: &str) -> Session {
    let mut s = Session::new(shape, project * 0x100 + n, true);
    s.token = token.to_owned();
    s
}

/// The project a simulator log entry's request came from, by its `prompt_cache_key`.
fn project_of(entry: &LogEntry) -> Option<usize> {
    let key = entry.body.as_ref()?["prompt_cache_key"].as_str()?;
    usize::from_str_radix(&key[key.len() - 12..], 16).ok().map(|n| n / 0x100)
}

/// Per project, the keys that received its requests, with counts (from the simulator's log).
fn keys_by_project(sim: &Sim) -> BTreeMap<usize, BTreeMap<String, usize>> {
    let mut out: BTreeMap<usize, BTreeMap<String, usize>> = BTreeMap::new();
    for entry in sim.log() {
        if let (Some(project), Some(key)) = (project_of(&entry), entry.key.clone()) {
            *out.entry(project).or_default().entry(key).or_default() += 1;
        }
    }
    out
}

fn assert_inside(sim: &Sim, project: usize, pool: &[&str]) {
    let seen = keys_by_project(sim).remove(&project).unwrap_or_default();
    println!("project {project}: requests per key {seen:?}");
    assert!(!seen.is_empty(), "project {project} sent traffic");
    for key in seen.keys() {
        assert!(pool.contains(&key.as_str()), "project {project} reached {key}, outside its pool {pool:?}");
    }
}

/// One round: a turn of every session, interleaved. Returns the statuses per project.
async fn round(c: &reqwest::Client, base: &str, sessions: &mut [Session]) -> Vec<(usize, u16, String)> {
    let mut out = Vec::new();
    for s in sessions.iter_mut() {
        let project = usize::from_str_radix(&s.id[s.id.len() - 12..], 16).unwrap() / 0x100;
        let r = s.turn(c, base, s.turn % 2 == 1).await;
        out.push((project, r.status, r.body));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_traffic_never_leaves_the_work_pool_under_faults() {
    let h = Harness::start(three_orgs(), &five_keys()).await;
    let admin = Admin::new(&h.root);
    let (work, personal) = two_pools(&admin).await;
    let c = client();
    let mut sessions: Vec<Session> = (0..4)
        .map(|n| session(Shape::Codex, 1, n, &work))
        .chain((0..3).map(|n| session(Shape::Pi, 2, n, &personal)))
        .chain((0..2).map(|n| session(Shape::Codex, 3, n, TOKEN)))
        .collect();
    for _ in 0..2 {
        for (project, status, body) in round(&c, &h.base, &mut sessions).await {
            assert_eq!(status, 200, "project {project}: {body}");
        }
    }
    // One key of each pool fails. Personal sessions on organization b lose their only personal key of
    // that organization: they must wait or be rescued inside the pool, never go to b1 (work).
    h.sim.set_standing("sk-a1", Fault::Status500, None);
    h.sim.set_standing("sk-b2", Fault::Status500, None);
    for _ in 0..2 {
        for (project, status, body) in round(&c, &h.base, &mut sessions).await {
            assert!(project != 1 || status == 200, "work has a2 and b1 left: {status} {body}");
            assert!([200, 429, 500, 502].contains(&status), "project {project}: {status} {body}");
        }
    }
    let (status, _) = admin.post_json("/keys/k_b2/disable", None).await;
    assert_eq!(status, 200);
    for (project, status, body) in round(&c, &h.base, &mut sessions).await {
        assert_eq!(status, 200, "project {project} (b2 off: rescued inside personal): {body}");
    }
    // Every work key cools: the work client gets the pool's 429, not a personal key.
    for key in WORK {
        h.sim.set_standing(key, Fault::RateLimited { retry_after_secs: 30 }, None);
    }
    let mut saw_pool_429 = 0;
    for (project, status, body) in round(&c, &h.base, &mut sessions).await {
        match project {
            1 => {
                assert_eq!(status, 429, "{body}");
                saw_pool_429 += usize::from(body.contains("pool 'work'"));
            }
            2 => assert_eq!(status, 200, "personal keeps serving on c1: {body}"),
            _ => assert!([200, 429].contains(&status), "{status} {body}"),
        }
    }
    assert!(saw_pool_429 > 0, "the 429 names the pool");
    let r = small_request_with_retry_after(&c, &h.base, &work).await;
    assert_eq!(r.0, 429);
    assert!(r.1.is_some_and(|secs| secs >= 1), "retry-after in whole seconds");
    assert_inside(&h.sim, 1, &WORK);
    assert_inside(&h.sim, 2, &PERSONAL);
    let all: Vec<&str> = WORK.iter().chain(&PERSONAL).copied().collect();
    assert_inside(&h.sim, 3, &all);
}

async fn small_request_with_retry_after(c: &reqwest::Client, base: &str, token: &str) -> (u16, Option<u64>) {
    let body = json!({"model":"gpt-5.5","input":"hello","store":false});
    let r = c.post(format!("{base}/responses")).bearer_auth(token).json(&body).send().await.unwrap();
    let retry = r.headers().get("retry-after").and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
    (r.status().as_u16(), retry)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sockets_of_a_pool_token_bind_only_to_its_keys() {
    let h = Harness::start(three_orgs(), &five_keys()).await;
    let admin = Admin::new(&h.root);
    let (_, personal) = two_pools(&admin).await;
    for n in 0..6 {
        let mut ws = WsClient::connect_as(&h.base, &format!("sock-{n}"), &personal).await.expect("socket opens");
        let mut s = session(Shape::Codex, 2, 0x10 + n, &personal);
        let answer = ws.create(&s.next_body(false)).await;
        assert!(answer.error.is_none() && !answer.closed, "turn served: {:?}", answer.error);
    }
    let sockets: Vec<String> = h.sim.log().into_iter().filter(|e| e.method == "WS").filter_map(|e| e.key).collect();
    assert_eq!(sockets.len(), 6);
    assert!(sockets.iter().all(|k| PERSONAL.contains(&k.as_str())), "{sockets:?}");
    // No key of the pool usable: the socket is declined (426, Codex falls back to HTTP), and HTTP says 429.
    for key in PERSONAL {
        h.sim.set_standing(key, Fault::RateLimited { retry_after_secs: 20 }, None);
    }
    let c = client();
    for _ in 0..4 {
        let _ = small_request_as(&c, &h.base, &personal).await;
    }
    let refused = WsClient::connect_as(&h.base, "sock-late", &personal).await;
    assert!(refused.is_err(), "the upgrade is declined while the pool has no usable key");
    let open = WsClient::connect_as(&h.base, "sock-all", TOKEN).await;
    assert!(open.is_ok(), "a token of `all` still opens one (work keys are fine)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_from_another_pool_is_refused_and_never_forwarded() {
    let h = Harness::start(three_orgs(), &five_keys()).await;
    let admin = Admin::new(&h.root);
    let (work, personal) = two_pools(&admin).await;
    let c = client();
    let mut s = session(Shape::Pi, 2, 1, &personal);
    assert_eq!(s.turn(&c, &h.base, false).await.status, 200);
    let before = h.sim.log().len();
    s.token = work.clone();
    let moved = s.turn(&c, &h.base, false).await;
    assert_eq!((moved.status, moved.error_code.as_deref()), (403, Some("pool_mismatch")), "{}", moved.body);
    let message = serde_json::from_str::<Value>(&moved.body).unwrap()["error"]["message"].as_str().unwrap().to_owned();
    assert!(message.contains("'personal'") && message.contains("'work'"), "{message}");
    // A stored response of a personal key, read with the work token.
    let body = json!({"model":"gpt-5.5","input":"remember this","store":true});
    let r = c.post(format!("{}/responses", h.base)).bearer_auth(&personal).json(&body).send().await.unwrap();
    let id = r.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned();
    let before_get = h.sim.log().len();
    let got = c.get(format!("{}/responses/{id}", h.base)).bearer_auth(&work).send().await.unwrap();
    assert_eq!(got.status(), 403);
    assert_eq!(h.sim.log().len(), before_get, "never forwarded");
    assert_eq!(h.sim.log().len(), before + 1, "only the stored response itself reached the upstream");
    let record = decisions_api(&h.root).await["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["error"] == "pool_mismatch")
        .cloned()
        .expect("the refusal is recorded");
    assert_eq!((record["pool"].as_str(), record["token"].as_str()), (Some("work"), Some("acme")));
    assert_eq!(record["decision"]["refusal"]["kind"], "pool_mismatch");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_pool_answers_503_naming_it() {
    let h = Harness::start(three_orgs(), &five_keys()).await;
    let admin = Admin::new(&h.root);
    let (status, body) = admin.post_json("/pools", Some(json!({"name":"empty","keys":[]}))).await;
    assert_eq!((status, body["usable"].as_u64()), (201, Some(0)), "{body}");
    let token = token_in(&admin, "lonely", "empty").await;
    let c = client();
    let r = c
        .post(format!("{}/responses", h.base))
        .bearer_auth(&token)
        .json(&json!({"model":"gpt-5.5","input":"hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "keymux_pool_empty");
    assert!(v["error"]["message"].as_str().unwrap().contains("keymux pool set empty --keys"), "{v}");
    assert_eq!(client_counts(&h.sim).values().sum::<usize>(), 0, "nothing was forwarded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pools_change_at_runtime_and_bad_changes_are_refused() {
    let h = Harness::start(three_orgs(), &five_keys()).await;
    let admin = Admin::new(&h.root);
    let (work, _) = two_pools(&admin).await;
    let refused = [
        (json!({"name":"x","keys":["zz"]}), "'zz', which does not exist"),
        (json!({"name":"Work","keys":[]}), "already exists"),
        (json!({"name":"all","keys":[]}), "built in"),
        (json!({"name":"x","keys":[],"fallback":["nowhere"]}), "no pool named 'nowhere'"),
        (json!({"name":"x","keys":[],"secret":"sk-x"}), "unknown field"),
    ];
    for (body, words) in refused {
        let (status, answer) = admin.post_json("/pools", Some(body.clone())).await;
        let message = answer["error"]["message"].as_str().unwrap_or_default().to_owned();
        assert!(status == 400 && message.contains(words), "{body}: {status} {message}");
    }
    let (status, _) = admin.post_json("/pools", Some(json!({"name":"a","keys":["c1"]}))).await;
    assert_eq!(status, 201);
    let (status, _) = admin.post_json("/pools", Some(json!({"name":"b","keys":[],"fallback":["a"]}))).await;
    assert_eq!(status, 201);
    let (status, answer) = admin.patch("/pools/a", json!({"fallback":["b"]})).await;
    assert!(status == 400 && answer.to_string().contains("lead back"), "{answer}");
    let (status, answer) = admin.post_json("/tokens", Some(json!({"name":"t","pool":"nope"}))).await;
    assert!(status == 400 && answer.to_string().contains("no pool named 'nope'"), "{answer}");
    let (status, answer) = admin.call(reqwest::Method::DELETE, "/pools/work", None).await;
    let message = answer["error"]["message"].as_str().unwrap_or_default().to_owned();
    assert!(status == 400 && message.contains("tokens (acme)"), "a pool with tokens stays, named once: {message}");
    let (status, answer) = admin.call(reqwest::Method::DELETE, "/pools/a", None).await;
    assert!(status == 400 && answer.to_string().contains("falls back"), "{answer}");

    // The boundary moves at once, and a fallback serves only when the pool cannot.
    let (status, _) = admin.patch("/pools/work", json!({"keys":["c1"],"fallback":["personal"]})).await;
    assert_eq!(status, 200);
    let c = client();
    assert_eq!(small_request_as(&c, &h.base, &work).await, 200);
    h.sim.set_standing("sk-c1", Fault::RateLimited { retry_after_secs: 30 }, None);
    // Failover stays inside the pool for the request in hand; once c1 cools, the fallback pool serves.
    assert_eq!(small_request_as(&c, &h.base, &work).await, 429, "c1 answered 429 and had no sibling in work");
    assert_eq!(small_request_as(&c, &h.base, &work).await, 200, "c1 cooling: the fallback pool serves");
    let decisions = decisions_api(&h.root).await;
    let served: Vec<&str> = decisions["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["token"] == "acme" && r["status"] == 200)
        .filter_map(|r| r["served_by"].as_str())
        .collect();
    assert_eq!(served, ["k_c1", "k_b2"], "oldest first: c1 in work, then b2 of the fallback pool");
    let fell_back = decisions["data"].as_array().unwrap().iter().any(|r| {
        r["decision"]["reasons"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["rule"] == "pool_fallback" && x["to"] == "personal")
    });
    assert!(fell_back, "the decision says it used the fallback pool");

    // Keys renamed or removed stay consistent with their pools.
    let (status, _) = admin.patch("/keys/k_c1", json!({"label":"charlie"})).await;
    assert_eq!(status, 200);
    let (status, _) = admin.call(reqwest::Method::DELETE, "/keys/k_b2", None).await;
    assert_eq!(status, 204);
    let pools = admin.get_json("/pools").await;
    let named = |name: &str| pools.as_array().unwrap().iter().find(|p| p["name"] == name).cloned().unwrap();
    assert_eq!(named("work")["keys"], json!(["charlie"]));
    assert_eq!(named("personal")["keys"], json!(["charlie"]), "b2 removed, c1 renamed");
    assert_eq!(named("all")["builtin"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_taken_out_of_a_pool_mid_session_is_rescued_inside_it() {
    let h = Harness::start(three_orgs(), &five_keys()).await;
    let admin = Admin::new(&h.root);
    let (work, _) = two_pools(&admin).await;
    let c = client();
    let mut sessions: Vec<Session> = (0..6).map(|n| session(Shape::Codex, 1, n, &work)).collect();
    for s in &mut sessions {
        assert_eq!(s.turn(&c, &h.base, false).await.status, 200);
    }
    // Take b1 (work's only key of organization b) out of the pool: sessions made on b1 are not
    // another pool's state, so they are rescued inside work (lost_org), not refused.
    let (status, _) = admin.patch("/pools/work", json!({"keys":["a1","a2"]})).await;
    assert_eq!(status, 200);
    for s in &mut sessions {
        let r = s.turn(&c, &h.base, false).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let after: Vec<String> = h.sim.log().into_iter().rev().take(6).filter_map(|e| e.key).collect();
    assert!(after.iter().all(|k| k == "sk-a1" || k == "sk-a2"), "{after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_one_pool_learns_never_steers_another() {
    let h = Harness::start(three_orgs(), &five_keys()).await;
    let admin = Admin::new(&h.root);
    for name in ["left", "right"] {
        let (status, _) = admin.post_json("/pools", Some(json!({"name": name, "keys":["a1","b1","c1"]}))).await;
        assert_eq!(status, 201);
    }
    let token = token_in(&admin, "mover", "left").await;
    let c = client();
    let send = || {
        let (c, base, token) = (c.clone(), h.base.clone(), token.clone());
        async move {
            let body = json!({"model":"gpt-5.5","input":"x ".repeat(3000),"prompt_cache_key":"shared","store":false});
            let r = c.post(format!("{base}/responses")).bearer_auth(token).json(&body).send().await.unwrap();
            assert_eq!(r.status(), 200);
            let _ = r.bytes().await;
        }
    };
    send().await;
    send().await;
    // The same token, the same session key, over the same keys: only the pool differs.
    let id = admin.get_json("/tokens").await.as_array().unwrap().iter().find(|t| t["name"] == "mover").unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, moved) = admin.patch(&format!("/tokens/{id}"), json!({"pool":"right"})).await;
    assert_eq!((status, moved["pool"].as_str()), (200, Some("right")), "{moved}");
    send().await;
    let decisions = decisions_api(&h.root).await;
    let states: Vec<(String, String)> = decisions["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["token"] == "mover")
        .map(|r| (r["pool"].as_str().unwrap().to_owned(), r["decision"]["affinity_state"].as_str().unwrap().to_owned()))
        .collect();
    let want =
        [("left", "cache_miss"), ("left", "hit"), ("right", "cache_miss")].map(|(a, b)| (a.to_owned(), b.to_owned()));
    assert_eq!(states, want);
}

/// `resp_` + the provider's id, from the id Keymux returned (`resp_` + marker + the provider's id; the
/// marker is `km1`, a 6-character install tag, the key id's length in 2 hex digits, the key id, an
/// 8-character organization tag and a 16-character MAC).
fn bare(marked: &str) -> String {
    let rest = marked.strip_prefix("resp_km1").expect("a marked response id");
    let len = usize::from_str_radix(&rest[6..8], 16).unwrap();
    format!("resp_{}", &rest[8 + len + 8 + 16..])
}

/// Pools `work` (organizations a and b) and `personal` (b and c) share organization b. A response the
/// personal pool stored on b2, named by its bare provider id with the work token, must not be read
/// through b1: bare ids go only to keys whose organization is their pool's alone, and a pool with
/// none refuses them. A bare id made before Keymux still reaches its pool's own organization.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bare_response_id_never_crosses_pools_that_share_an_organization() {
    let h = Harness::start(three_orgs(), &five_keys()).await;
    let admin = Admin::new(&h.root);
    let (work, personal) = two_pools(&admin).await;
    let c = client();
    assert_eq!(admin.post_json("/keys/k_c1/disable", None).await.0, 200);
    let body = json!({"model":"gpt-5.5","input":"personal notes","store":true});
    let r = c.post(format!("{}/responses", h.base)).bearer_auth(&personal).json(&body).send().await.unwrap();
    let created: Value = r.json().await.unwrap();
    assert_eq!(h.sim.log().last().unwrap().key.as_deref(), Some("sk-b2"), "stored on b2: {created}");
    let id = bare(created["id"].as_str().unwrap());
    // Only b1 is left to the work pool: before, it read the personal response through it.
    for k in ["k_a1", "k_a2"] {
        assert_eq!(admin.post_json(&format!("/keys/{k}/disable"), None).await.0, 200);
    }
    let before = h.sim.log().len();
    let got = c.get(format!("{}/responses/{id}/input_items", h.base)).bearer_auth(&work).send().await.unwrap();
    let status = got.status();
    assert_ne!(status, 200, "the work token read a personal response: {}", got.text().await.unwrap());
    let body = json!({"model":"gpt-5.5","input":"and then?","previous_response_id":id});
    let next = c.post(format!("{}/responses", h.base)).bearer_auth(&work).json(&body).send().await.unwrap();
    assert_ne!(next.status(), 200, "the work token continued a personal response");
    assert!(h.sim.log()[before..].iter().all(|e| e.key.as_deref() != Some("sk-b1")), "nothing went through b1");
    // A pool whose every key shares its organization with another pool refuses a bare id, saying why.
    let (status, _) = admin.post_json("/pools", Some(json!({"name":"shared","keys":["b1"]}))).await;
    assert_eq!(status, 201);
    let shared = token_in(&admin, "mixed", "shared").await;
    let refused = c.get(format!("{}/responses/{id}", h.base)).bearer_auth(&shared).send().await.unwrap();
    assert_eq!(refused.status(), 403);
    let refused: Value = refused.json().await.unwrap();
    assert_eq!(refused["error"]["code"], "pool_mismatch", "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("'shared'") && message.contains("marker"), "{message}");
    assert_eq!(h.sim.log().len() - before, 0, "no bare id was forwarded to a shared organization");
    // A response made before Keymux with c1 (organization c is personal's alone) is still reached.
    assert_eq!(admin.post_json("/keys/k_c1/enable", None).await.0, 200);
    let direct = json!({"model":"gpt-5.5","input":"before Keymux","store":true});
    let made =
        c.post(format!("{}/responses", h.sim.base_url())).bearer_auth("sk-c1").json(&direct).send().await.unwrap();
    let made: Value = made.json().await.unwrap();
    let old = made["id"].as_str().unwrap();
    let got = c.get(format!("{}/responses/{old}", h.base)).bearer_auth(&personal).send().await.unwrap();
    assert_eq!(got.status(), 200, "{}", got.text().await.unwrap());
    assert_eq!(h.sim.log().last().unwrap().key.as_deref(), Some("sk-c1"));
}
