//! Pool policies, black-box: a pool that does not allow the priority tier sends its requests in the
//! standard tier (HTTP JSON, SSE, chat completions, and the frames of a Responses WebSocket), while
//! another pool's keep theirs; the decision says the tier was changed, and the cost is booked in the
//! tier the answer reports. The simulator's request log is the judge of what went upstream.
#![allow(clippy::unwrap_used, clippy::print_stdout, reason = "tests print what the proxy saw")]

use crate::support;

use std::sync::Arc;

use keymux_sim::Sim;
use serde_json::{json, Value};
use support::*;

/// The pools `work` (a1, a2; `allow_priority = false`) and `personal` (b2, c1; the default), and a
/// token in each: (work token, personal token).
async fn tier_pools(admin: &Admin) -> (String, String) {
    let work = json!({"name": "work", "keys": ["a1", "a2"], "allow_priority": false});
    let (status, body) = admin.post_json("/pools", Some(work)).await;
    assert_eq!((status, body["allow_priority"].as_bool()), (201, Some(false)), "{body}");
    let (status, body) = admin.post_json("/pools", Some(json!({"name": "personal", "keys": ["b2", "c1"]}))).await;
    assert_eq!((status, body["allow_priority"].as_bool()), (201, Some(true)), "{body}");
    (token_in(admin, "acme", "work").await, token_in(admin, "play", "personal").await)
}

/// A new client token named `name` in `pool`.
async fn token_in(admin: &Admin, name: &str, pool: &str) -> String {
    let (status, created) = admin.post_json("/tokens", Some(json!({"name": name, "pool": pool}))).await;
    assert_eq!(status, 201, "{created}");
    created["secret"].as_str().unwrap().to_owned()
}

/// The `service_tier` of the newest request the simulator logged on `path` (WebSocket frames
/// included).
fn last_tier(sim: &Sim, path: &str) -> Option<String> {
    let log = sim.log();
    let entry = log.iter().rev().find(|e| e.path == path).expect("a request reached the simulator");
    entry.body.as_ref()?["service_tier"].as_str().map(str::to_owned)
}

/// The finished request's record as the API shows it.
fn shown(record: &Arc<keymux::events::RequestRecord>) -> Value {
    serde_json::to_value(&**record).unwrap()
}

/// The `tier_changed` line of a record's decision, if any.
fn tier_changed(record: &Value) -> Option<Value> {
    record["decision"]["reasons"].as_array()?.iter().find(|r| r["rule"] == "tier_changed").cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_without_priority_sends_the_standard_tier_and_another_pool_keeps_it() {
    let h = Harness::start(three_orgs(), &five_keys()).await;
    let admin = Admin::new(&h.root);
    let (work, personal) = tier_pools(&admin).await;
    let c = client();
    let mut feed = h.gateway.events().subscribe();
    let body = json!({"model": "gpt-5.5", "input": "hello", "store": false, "service_tier": "priority"});

    // HTTP JSON, work: sent as `default`, the decision says why, billed as standard.
    let r = c.post(format!("{}/responses", h.base)).bearer_auth(&work).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let answer: Value = r.json().await.unwrap();
    assert_eq!(last_tier(&h.sim, "/v1/responses").as_deref(), Some("default"), "work went upstream as standard");
    assert_eq!(answer["service_tier"], "default", "the client reads the tier it was served in");
    let work_record = shown(&next_record(&mut feed).await);
    let why = tier_changed(&work_record).expect("the decision says the tier was changed");
    assert_eq!(
        (why["pool"].as_str(), why["asked"].as_str(), why["sent"].as_str()),
        (Some("work"), Some("priority"), Some("default"))
    );
    assert_eq!(work_record["usage"]["tier"], "standard", "{work_record}");

    // The same request, personal: kept, billed as priority (more than the standard one).
    let r = c.post(format!("{}/responses", h.base)).bearer_auth(&personal).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let _ = r.bytes().await;
    assert_eq!(last_tier(&h.sim, "/v1/responses").as_deref(), Some("priority"), "personal keeps its tier");
    let personal_record = shown(&next_record(&mut feed).await);
    assert_eq!(tier_changed(&personal_record), None, "{personal_record}");
    assert_eq!(personal_record["usage"]["tier"], "priority", "{personal_record}");
    assert_eq!(personal_record["usage"]["input"], work_record["usage"]["input"], "the same request");
    let (standard, priority) =
        (work_record["cost_usd"].as_f64().unwrap(), personal_record["cost_usd"].as_f64().unwrap());
    assert!(priority > standard, "priced by the tier served: priority {priority} > standard {standard}");

    // SSE and chat completions, work: `fast` (the same tier) is changed too.
    let sse = json!({"model": "gpt-5.5", "input": "hello", "store": false, "stream": true, "service_tier": "fast"});
    let r = c.post(format!("{}/responses", h.base)).bearer_auth(&work).json(&sse).send().await.unwrap();
    let events = read_sse(r).await;
    assert!(events.iter().any(|e| e.data["type"] == "response.completed"));
    assert_eq!(last_tier(&h.sim, "/v1/responses").as_deref(), Some("default"));
    let record = shown(&next_record(&mut feed).await);
    assert_eq!(tier_changed(&record).map(|r| r["asked"].clone()), Some(json!("fast")));
    let chat = json!({"model": "gpt-5.5", "messages": [{"role": "user", "content": "hi"}], "service_tier": "priority"});
    for (token, expected) in [(&work, "default"), (&personal, "priority")] {
        let r = c.post(format!("{}/chat/completions", h.base)).bearer_auth(token).json(&chat).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let answer: Value = r.json().await.unwrap();
        assert_eq!(last_tier(&h.sim, "/v1/chat/completions").as_deref(), Some(expected));
        assert_eq!(answer["service_tier"], expected);
        let record = shown(&next_record(&mut feed).await);
        assert_eq!(tier_changed(&record).is_some(), expected == "default", "{record}");
    }

    // Tiers the pool allows go as they are.
    let flex = json!({"model": "gpt-5.5", "input": "hello", "store": false, "service_tier": "flex"});
    let r = c.post(format!("{}/responses", h.base)).bearer_auth(&work).json(&flex).send().await.unwrap();
    let _ = r.bytes().await;
    assert_eq!(last_tier(&h.sim, "/v1/responses").as_deref(), Some("flex"));
    assert_eq!(tier_changed(&shown(&next_record(&mut feed).await)), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_frames_of_a_pool_without_priority_go_in_the_standard_tier() {
    let h = Harness::start(three_orgs(), &five_keys()).await;
    let admin = Admin::new(&h.root);
    let (work, personal) = tier_pools(&admin).await;
    let body = json!({"model": "gpt-5.5", "input": [], "store": false, "service_tier": "priority"});
    let mut feed = h.gateway.events().subscribe();
    let mut socket = WsClient::connect_as(&h.base, "sess-work", &work).await.unwrap();
    // The first frame opens the socket (admit); the second goes on the bound socket.
    for turn in 0..2 {
        let answer = socket.create(&body).await;
        assert!(answer.response_id().is_some(), "turn {turn}: {:?}", answer.error);
        let frames: Vec<Value> = h.sim.log().into_iter().filter(|e| e.method == "WS").filter_map(|e| e.body).collect();
        assert_eq!(frames.len(), turn + 1);
        assert_eq!(frames[turn]["service_tier"], "default", "turn {turn} went upstream as standard");
        let record = shown(&next_record(&mut feed).await);
        assert_eq!(tier_changed(&record).map(|r| r["sent"].clone()), Some(json!("default")), "turn {turn}");
        assert_eq!(record["usage"]["tier"], "standard");
    }
    let mut socket = WsClient::connect_as(&h.base, "sess-play", &personal).await.unwrap();
    let answer = socket.create(&body).await;
    assert!(answer.response_id().is_some());
    let last = h.sim.log().into_iter().rev().find(|e| e.method == "WS").and_then(|e| e.body).unwrap();
    assert_eq!(last["service_tier"], "priority", "personal keeps its tier on a socket");
}

/// What a gpt-6.2-sol request with this record's usage costs at `multiple` times the standard rates,
/// by hand from the price table's numbers ($2 input, $0.10 cached, $10 output per 1M tokens), in
/// nano-dollars.
fn sol_nanos(record: &Value, multiple: u64) -> u64 {
    let count = |k: &str| record["usage"][k].as_u64().unwrap();
    let (input, cached, output) = (count("input"), count("cached"), count("output"));
    // Pico-dollars per token: 2_000_000, 100_000, 10_000_000; a nano is 1000 picos.
    let picos = (input - cached) * 2_000_000 + cached * 100_000 + output * 10_000_000;
    (picos * multiple + 500) / 1000
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_without_ultrafast_sends_it_as_priority_and_each_is_billed_by_its_tier() {
    let h = Harness::start(three_orgs(), &five_keys()).await;
    let admin = Admin::new(&h.root);
    let team = json!({"name": "team", "keys": ["a1", "a2"], "allow_ultrafast": false});
    let (status, body) = admin.post_json("/pools", Some(team)).await;
    assert_eq!(
        (status, body["allow_priority"].as_bool(), body["allow_ultrafast"].as_bool()),
        (201, Some(true), Some(false)),
        "{body}"
    );
    let (status, _) = admin.post_json("/pools", Some(json!({"name": "fastest", "keys": ["b2", "c1"]}))).await;
    assert_eq!(status, 201);
    let (team, fastest) = (token_in(&admin, "t", "team").await, token_in(&admin, "f", "fastest").await);
    let c = client();
    let mut feed = h.gateway.events().subscribe();
    let body = json!({"model": "gpt-6.2-sol", "input": "hello", "store": false, "service_tier": "ultrafast"});

    // team: sent and billed as priority (2x), the decision says so.
    let r = c.post(format!("{}/responses", h.base)).bearer_auth(&team).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let _ = r.bytes().await;
    assert_eq!(last_tier(&h.sim, "/v1/responses").as_deref(), Some("priority"), "team went upstream as priority");
    let record = shown(&next_record(&mut feed).await);
    let why = tier_changed(&record).expect("the decision says the tier was changed");
    assert_eq!((why["asked"].as_str(), why["sent"].as_str()), (Some("ultrafast"), Some("priority")), "{record}");
    assert_eq!(record["usage"]["tier"], "priority");
    let cost = (record["cost_usd"].as_f64().unwrap() * 1e9).round() as u64;
    assert_eq!(cost, sol_nanos(&record, 2), "usage x the priority rates: {record}");

    // fastest: kept, billed at ultrafast's 3x (the price until 2027-02-28; the tests' clock is today's).
    let r = c.post(format!("{}/responses", h.base)).bearer_auth(&fastest).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let _ = r.bytes().await;
    assert_eq!(last_tier(&h.sim, "/v1/responses").as_deref(), Some("ultrafast"));
    let record = shown(&next_record(&mut feed).await);
    assert_eq!(tier_changed(&record), None, "{record}");
    assert_eq!(record["usage"]["tier"], "ultrafast");
    let day = keymux::clock::utc_day(record["at_unix_ms"].as_u64().unwrap());
    let multiple = if day < 20_878 { 3 } else { 6 };
    let cost = (record["cost_usd"].as_f64().unwrap() * 1e9).round() as u64;
    assert_eq!(cost, sol_nanos(&record, multiple), "usage x the ultrafast rates: {record}");

    // Off for priority is off for ultrafast too, whatever allow_ultrafast says.
    let (status, _) = admin.patch("/pools/team", json!({"allow_priority": false, "allow_ultrafast": true})).await;
    assert_eq!(status, 200);
    let r = c.post(format!("{}/responses", h.base)).bearer_auth(&team).json(&body).send().await.unwrap();
    let _ = r.bytes().await;
    assert_eq!(last_tier(&h.sim, "/v1/responses").as_deref(), Some("default"));
}

/// The simulator's requests from `keys` (by secret), WebSocket frames left out (they ride on their
/// upgrade's connection).
fn sim_requests(sim: &Sim, keys: &[&str]) -> Vec<keymux_sim::LogEntry> {
    sim.log().into_iter().filter(|e| e.method != "WS" && e.key.as_deref().is_some_and(|k| keys.contains(&k))).collect()
}

const WORK_KEYS: [&str; 2] = ["sk-a1", "sk-a2"];
const PERSONAL_KEYS: [&str; 2] = ["sk-b2", "sk-c1"];

/// The pools `work` (a1, a2) through `proxy` and `personal` (b2, c1) direct, set in the config the
/// gateway starts with; every key at `base` (the simulator's own when `None`).
fn proxied_pools(
    proxy: &str,
    work_base: Option<String>,
    roots: Vec<String>,
) -> impl FnOnce(&mut keymux::config::Config) {
    let proxy = proxy.to_owned();
    move |config| {
        config.pools = vec![
            keymux::pools::PoolConfig {
                name: "work".into(),
                keys: vec!["a1".into(), "a2".into()],
                policies: keymux::pools::PoolPolicies { proxy: Some(proxy), ..Default::default() },
                ..Default::default()
            },
            keymux::pools::PoolConfig {
                name: "personal".into(),
                keys: vec!["b2".into(), "c1".into()],
                ..Default::default()
            },
        ];
        for key in config.keys.iter_mut().filter(|k| ["a1", "a2"].contains(&k.label.as_str())) {
            key.base_url.clone_from(&work_base);
        }
        config.extra_roots_pem = roots;
    }
}

/// One HTTP JSON request, one SSE request and one chat completion with `token`: their statuses.
async fn three_requests(c: &reqwest::Client, base: &str, token: &str) -> Vec<u16> {
    let mut statuses = Vec::new();
    let json = json!({"model": "gpt-5.5", "input": "hello", "store": false});
    let sse = json!({"model": "gpt-5.5", "input": "hello", "store": false, "stream": true});
    let chat = json!({"model": "gpt-5.5", "messages": [{"role": "user", "content": "hi"}]});
    for (path, body) in [("responses", json), ("responses", sse), ("chat/completions", chat)] {
        let r = c.post(format!("{base}/{path}")).bearer_auth(token).json(&body).send().await.unwrap();
        statuses.push(r.status().as_u16());
        let _ = r.bytes().await;
    }
    statuses
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_upstream_request_of_a_pool_with_a_proxy_goes_through_it_and_no_other_pools() {
    let proxy = TestProxy::start().await;
    let h = Harness::start_with(three_orgs(), &five_keys(), proxied_pools(&proxy.url(), None, Vec::new())).await;
    let admin = Admin::new(&h.root);
    let (work, personal) = (token_in(&admin, "acme", "work").await, token_in(&admin, "play", "personal").await);
    let c = client();
    for _ in 0..3 {
        assert_eq!(three_requests(&c, &h.base, &work).await, [200, 200, 200]);
        assert_eq!(three_requests(&c, &h.base, &personal).await, [200, 200, 200]);
    }
    // A Responses WebSocket of the work pool: its upgrade goes through a CONNECT tunnel.
    let mut socket = WsClient::connect_as(&h.base, "sess-work", &work).await.unwrap();
    for _ in 0..2 {
        assert!(socket.create(&json!({"model": "gpt-5.5", "input": [], "store": false})).await.response_id().is_some());
    }
    let log = proxy.log();
    let forwarded: Vec<&Proxied> = log.iter().filter(|p| p.method != "CONNECT").collect();
    let tunnels = log.len() - forwarded.len();
    println!("the proxy saw {} requests and {tunnels} tunnels", forwarded.len());
    // Absolute form for the plain-http simulator, with the work keys only; the start-up probes too.
    for p in &forwarded {
        assert!(p.target.starts_with(&h.sim.base_url()), "absolute form: {}", p.target);
        assert!(p.key.as_deref().is_some_and(|k| WORK_KEYS.contains(&k)), "only work keys: {p:?}");
    }
    let probes = forwarded.iter().filter(|p| p.method == "GET" && p.target.ends_with("/v1/models")).count();
    assert_eq!(probes, 2, "both work keys' probes went through the proxy");
    assert_eq!(tunnels, 1, "the work socket's upgrade went through a tunnel");
    // The simulator saw exactly what the proxy passed on for work, and personal only direct.
    assert_eq!(sim_requests(&h.sim, &WORK_KEYS).len(), forwarded.len() + tunnels, "no work request went direct");
    assert!(sim_requests(&h.sim, &PERSONAL_KEYS).len() >= 9 + 2, "personal traffic and probes reached the simulator");
    assert!(
        log.iter().all(|p| !p.key.as_deref().is_some_and(|k| PERSONAL_KEYS.contains(&k))),
        "no personal request passed the proxy"
    );
    // The API says which way each key goes out.
    let status = admin.get_json("/status").await;
    let way =
        |label: &str| status["keys"].as_array().unwrap().iter().find(|k| k["label"] == label).unwrap()["proxy"].clone();
    assert_eq!((way("a1"), way("b2")), (json!(proxy.url()), Value::Null));
    let pool = status["pools"].as_array().unwrap().iter().find(|p| p["name"] == "work").unwrap().clone();
    assert_eq!(pool["proxy"], json!(proxy.url()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_upstream_is_reached_through_the_proxy_by_connect() {
    let sim = keymux_sim::Sim::start(three_orgs()).await.unwrap();
    let front = TlsFront::start(&sim.base_url()).await;
    let proxy = TestProxy::start().await;
    let tweak = proxied_pools(&proxy.url(), Some(front.base_url()), vec![front.cert_pem.clone()]);
    let runtime = keymux::Runtime::start(options_for(&sim, &five_keys(), tweak)).await.unwrap();
    runtime.probed().await;
    let (root, base) = (format!("http://{}", runtime.addr()), format!("http://{}/v1", runtime.addr()));
    let admin = Admin::new(&root);
    let work = token_in(&admin, "acme", "work").await;
    assert_eq!(three_requests(&client(), &base, &work).await, [200, 200, 200]);
    let log = proxy.log();
    println!("the proxy saw {log:?}");
    assert!(!log.is_empty());
    for p in &log {
        assert_eq!(
            (p.method.as_str(), p.target.as_str()),
            ("CONNECT", front.addr.to_string().as_str()),
            "tunnels only"
        );
    }
    // Through the tunnel and the TLS front, the simulator served them (probes included).
    let served = sim_requests(&sim, &WORK_KEYS);
    assert!(served.iter().filter(|e| e.path == "/v1/models").count() >= 2 && served.len() >= 5, "{served:?}");
    runtime.stopper().stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_its_proxy_stopped_a_pools_requests_fail_naming_it_and_never_go_direct() {
    let proxy = TestProxy::start().await;
    let h = Harness::start_with(three_orgs(), &five_keys(), proxied_pools(&proxy.url(), None, Vec::new())).await;
    let admin = Admin::new(&h.root);
    let (work, personal) = (token_in(&admin, "acme", "work").await, token_in(&admin, "play", "personal").await);
    let c = client();
    assert_eq!(three_requests(&c, &h.base, &work).await, [200, 200, 200]);
    proxy.stop_and_wait().await;
    let before = sim_requests(&h.sim, &WORK_KEYS).len();
    let body = json!({"model": "gpt-5.5", "input": "hello", "store": false});
    for attempt in 0..3 {
        let r = c.post(format!("{}/responses", h.base)).bearer_auth(&work).json(&body).send().await.unwrap();
        let status = r.status().as_u16();
        let answer: Value = r.json().await.unwrap();
        let message = answer["error"]["message"].as_str().unwrap_or_default().to_owned();
        println!("request {attempt}: {status} {message}");
        assert!(status >= 500, "{status}: {answer}");
        assert!(message.contains(&proxy.host_port()), "the error names the proxy: {message}");
    }
    let mut socket = WsClient::connect_as(&h.base, "sess-work", &work).await;
    if let Ok(socket) = &mut socket {
        let answer = socket.create(&body).await;
        assert!(answer.response_id().is_none(), "no work socket is served without its proxy");
    }
    assert_eq!(sim_requests(&h.sim, &WORK_KEYS).len(), before, "no work request went direct");
    assert_eq!(three_requests(&c, &h.base, &personal).await, [200, 200, 200], "personal goes on direct");
    // Each work key's health says it cannot be reached, and through which proxy.
    let status = admin.get_json("/status").await;
    for label in ["a1", "a2"] {
        let key = status["keys"].as_array().unwrap().iter().find(|k| k["label"] == label).unwrap().clone();
        assert_eq!(
            (key["health"].as_str(), key["proxy"].as_str()),
            (Some("unreachable"), Some(proxy.url().as_str())),
            "{key}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxys_user_and_password_are_kept_in_the_keychain_and_never_shown() {
    let password = "pa55w0rd-xyz";
    let proxy = TestProxy::start_with_login(Some(&format!("alice:{password}"))).await;
    let h = Harness::start(three_orgs(), &five_keys()).await;
    let admin = Admin::new(&h.root);
    // Without its login the proxy refuses: the request fails naming it, and never goes direct.
    let (status, body) =
        admin.post_json("/pools", Some(json!({"name": "work", "keys": ["a1", "a2"], "proxy": proxy.url()}))).await;
    assert_eq!((status, body["proxy_login"].as_bool()), (201, Some(false)), "{body}");
    let work = token_in(&admin, "acme", "work").await;
    let c = client();
    // (The start-up probes went direct: the pool came after them.)
    let direct = sim_requests(&h.sim, &WORK_KEYS).len();
    let r = c
        .post(format!("{}/responses", h.base))
        .bearer_auth(&work)
        .json(&json!({"model": "gpt-5.5", "input": "hi"}))
        .send()
        .await
        .unwrap();
    let (status, answer) = (r.status().as_u16(), r.text().await.unwrap());
    assert!(status == 502 && answer.contains(&proxy.host_port()) && answer.contains("407"), "{status} {answer}");
    assert_eq!(sim_requests(&h.sim, &WORK_KEYS).len(), direct, "nothing went direct");
    assert!(proxy.log().iter().all(|p| !p.authorized));
    // Given with the URL, the login goes to the keychain; the config and the answers hold the URL alone.
    let with_login = format!("http://alice:{password}@{}", proxy.host_port());
    let (status, body) = admin.patch("/pools/work", json!({"proxy": with_login})).await;
    assert_eq!(
        (status, body["proxy"].as_str(), body["proxy_login"].as_bool()),
        (200, Some(proxy.url().as_str()), Some(true)),
        "{body}"
    );
    let store = h.gateway.settings().store().clone();
    let kept = store.get(&keymux::secrets::account::proxy("work")).unwrap().map(|s| s.expose().to_owned());
    assert_eq!(kept.as_deref(), Some(format!("alice:{password}").as_str()));
    let config = toml::to_string(&h.gateway.settings().config()).unwrap();
    assert!(
        config.contains("proxy_login = true") && !config.contains(password) && !config.contains("alice"),
        "{config}"
    );
    // The keys rested unreachable through the refusing proxy: a probe through it brings them back.
    for key in ["k_a1", "k_a2"] {
        let (status, body) = admin.post_json(&format!("/keys/{key}/test"), None).await;
        assert_eq!(status, 200, "{body}");
    }
    assert_eq!(three_requests(&c, &h.base, &work).await, [200, 200, 200]);
    let mut socket = WsClient::connect_as(&h.base, "sess-work", &work).await.unwrap();
    assert!(socket.create(&json!({"model": "gpt-5.5", "input": [], "store": false})).await.response_id().is_some());
    let passed: Vec<Proxied> = proxy.log().into_iter().filter(|p| p.authorized).collect();
    assert!(
        passed.iter().any(|p| p.method == "CONNECT") && passed.iter().filter(|p| p.method == "POST").count() == 3,
        "{passed:?}"
    );
    // Another change keeps the login; none of it shows anywhere.
    let (status, body) = admin.patch("/pools/work", json!({"allow_priority": false})).await;
    assert_eq!((status, body["proxy_login"].as_bool()), (200, Some(true)), "{body}");
    assert_eq!(three_requests(&c, &h.base, &work).await, [200, 200, 200]);
    for path in ["/status", "/pools", "/decisions?limit=1000"] {
        let text = admin.get_text(path).await;
        assert!(!text.contains(password) && !text.contains("alice:"), "{path} shows the proxy's login");
    }
    // A proxy removed forgets its login.
    let (status, body) = admin.patch("/pools/work", json!({"proxy": null})).await;
    assert_eq!((status, &body["proxy"], body["proxy_login"].as_bool()), (200, &Value::Null, Some(false)), "{body}");
    assert_eq!(store.get(&keymux::secrets::account::proxy("work")).unwrap(), None);
    // Bad proxies are refused without quoting what they carry.
    for bad in ["socks4://alice:hunter2@127.0.0.1:1080", "http://alice:hunter2@127.0.0.1:port", "ftp://127.0.0.1:21"] {
        let (status, body) = admin.patch("/pools/work", json!({"proxy": bad})).await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert!(!body.to_string().contains("hunter2"), "{body}");
    }
}

async fn cli(cfg: &std::path::Path, env: &[(String, String)], args: &[&str]) -> (bool, String, String) {
    let mut all = vec!["--config", cfg.to_str().unwrap()];
    all.extend_from_slice(args);
    run_keymux(&all, env, "").await
}

/// A `POST /v1/responses` asking for the priority tier; its status.
async fn ask_priority(base: &str, token: &str, prompt: &str) -> u16 {
    let body = json!({"model": "gpt-5.5", "input": prompt, "service_tier": "priority"});
    let r = client().post(format!("{base}/responses")).bearer_auth(token).json(&body).send().await.unwrap();
    r.status().as_u16()
}

/// The `service_tier` the simulator received with `prompt`.
fn tier_of(sim: &Sim, prompt: &str) -> Option<String> {
    let entry = sim.log().into_iter().find(|e| e.body.as_ref().is_some_and(|b| b["input"] == prompt))?;
    entry.body?["service_tier"].as_str().map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_and_the_environment_set_a_pools_policies() {
    let sim = Sim::start(keymux_sim::SimConfig::new().org("org-w", &["sk-pol-w1"]).org("org-h", &["sk-pol-h1"]))
        .await
        .unwrap();
    let proxy = TestProxy::start_with_login(Some("bob:hunter2")).await;
    let with_login = format!("http://bob:hunter2@{}", proxy.host_port());
    let home = tempfile::tempdir().unwrap();
    let cfg = home.path().join("config.toml");
    std::fs::write(&cfg, format!("keychain_service = \"keymux-pool-policies\"\nupstream = \"{}\"\n", sim.base_url()))
        .unwrap();
    let mut env = base_env(home.path());
    let (ok, _, err) =
        run_keymux(&["--config", cfg.to_str().unwrap(), "keys", "add", "--label", "w1"], &env, "sk-pol-w1\n").await;
    assert!(ok, "{err}");
    let (ok, out, err) =
        cli(&cfg, &env, &["pool", "create", "work", "--keys", "w1", "--allow-priority", "false"]).await;
    assert!(ok && out.contains("priority tier sent as standard, direct"), "{out}{err}");
    let (ok, _, err) = cli(&cfg, &env, &["pool", "set", "work", "--proxy", "socks4://bob:hunter2@127.0.0.1:9"]).await;
    assert!(!ok && !err.contains("hunter2") && err.contains("HTTP proxy"), "{err}");
    // The user and password go to the keychain; the file holds the URL without them.
    let (ok, out, err) = cli(&cfg, &env, &["pool", "set", "work", "--proxy", &with_login]).await;
    assert!(
        ok && out.contains(&format!("through the proxy {}", proxy.url())) && !out.contains("hunter2"),
        "{out}{err}"
    );
    let text = std::fs::read_to_string(&cfg).unwrap();
    assert!(
        text.contains("allow_priority = false") && text.contains(&format!("proxy = \"{}\"", proxy.url())),
        "{text}"
    );
    assert!(text.contains("proxy_login = true") && !text.contains("hunter2"), "{text}");
    let (ok, acme, err) = cli(&cfg, &env, &["token", "create", "--name", "acme", "--pool", "work"]).await;
    assert!(ok, "{err}");
    let acme = acme.trim().to_owned();
    // Headless: a pool of an environment key, with its policies from the environment too.
    let play = "km-env-play-token-3a7c9e1b5d2f4086";
    for (name, value) in [
        ("KEYMUX_KEY_H1", "sk-pol-h1"),
        ("KEYMUX_POOL_HOME", "h1"),
        ("KEYMUX_POOL_HOME_ALLOW_PRIORITY", "false"),
        ("KEYMUX_POOL_HOME_PROXY", with_login.as_str()),
        ("KEYMUX_TOKEN_PLAY", play),
        ("KEYMUX_TOKEN_PLAY_POOL", "home"),
    ] {
        env.push((name.into(), value.into()));
    }
    let keymux = Keymux::spawn(&["--config", cfg.to_str().unwrap()], &env).await;
    assert_eq!(ask_priority(&keymux.base, &acme, "work one").await, 200);
    assert_eq!(ask_priority(&keymux.base, play, "home one").await, 200);
    assert_eq!(
        (tier_of(&sim, "work one").as_deref(), tier_of(&sim, "home one").as_deref()),
        (Some("default"), Some("default"))
    );
    let through: Vec<(Option<String>, bool)> =
        proxy.log().into_iter().filter(|p| p.method == "POST").map(|p| (p.key, p.authorized)).collect();
    let expected = [(Some("sk-pol-w1".to_owned()), true), (Some("sk-pol-h1".to_owned()), true)];
    assert_eq!(
        through, expected,
        "both pools went through the proxy, with the login from the keychain and the environment"
    );
    // Changed on the running gateway: priority allowed again, and direct.
    let (ok, out, err) = cli(&cfg, &env, &["pool", "set", "work", "--allow-priority", "true", "--no-proxy"]).await;
    assert!(ok && out.contains("priority tier allowed, direct"), "{out}{err}");
    assert_eq!(ask_priority(&keymux.base, &acme, "work two").await, 200);
    assert_eq!(tier_of(&sim, "work two").as_deref(), Some("priority"));
    assert_eq!(proxy.log().iter().filter(|p| p.method == "POST").count(), 2, "work now goes direct");
    let (_, list, _) = cli(&cfg, &env, &["pool", "list"]).await;
    assert!(
        list.lines().any(|l| l.starts_with("home ") && l.contains("priority tier sent as standard, through the proxy")),
        "{list}"
    );
    let text = std::fs::read_to_string(&cfg).unwrap();
    assert!(!text.contains("proxy =") && !text.contains("hunter2"), "{text}");
    let out = keymux.stop().await;
    assert_no_secrets("the gateway's output", &out, &["sk-pol-w1", "sk-pol-h1", &acme, play, "hunter2"]);
}

/// A SOCKS5 proxy carries a pool's keys out too: HTTP requests and the WebSocket's tunnel (one
/// connector, hyper-util's SOCKS5 client), whether the proxy resolves names (`socks5h://`) or Keymux does
/// (`socks5://`). Judged by the simulator: every work request came from a connection the proxy
/// opened, and no personal one did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socks5_proxy_carries_every_request_of_its_pool_and_no_other() {
    for remote_names in [true, false] {
        let proxy = SocksProxy::start().await;
        let h =
            Harness::start_with(three_orgs(), &five_keys(), proxied_pools(&proxy.url(remote_names), None, Vec::new()))
                .await;
        let admin = Admin::new(&h.root);
        let (work, personal) = (token_in(&admin, "acme", "work").await, token_in(&admin, "play", "personal").await);
        let c = client();
        assert_eq!(three_requests(&c, &h.base, &work).await, [200, 200, 200]);
        assert_eq!(three_requests(&c, &h.base, &personal).await, [200, 200, 200]);
        let mut socket = WsClient::connect_as(&h.base, "sess-work", &work).await.unwrap();
        assert!(socket.create(&json!({"model": "gpt-5.5", "input": [], "store": false})).await.response_id().is_some());
        let tunnels = proxy.log();
        let through: Vec<std::net::SocketAddr> = tunnels.iter().map(|t| t.from).collect();
        let sim_addr = h.sim.base_url().trim_start_matches("http://").trim_end_matches("/v1").to_owned();
        assert!(tunnels.iter().all(|t| t.target == sim_addr), "every tunnel went to the simulator: {tunnels:?}");
        let (work_log, personal_log) = (h.sim.log(), h.sim.log());
        let work_seen: Vec<_> =
            work_log.iter().filter(|e| e.key.as_deref().is_some_and(|k| WORK_KEYS.contains(&k))).collect();
        let personal_seen: Vec<_> =
            personal_log.iter().filter(|e| e.key.as_deref().is_some_and(|k| PERSONAL_KEYS.contains(&k))).collect();
        assert!(work_seen.len() >= 3 + 1 + 2, "work traffic, its socket and probes reached the simulator");
        for entry in &work_seen {
            assert!(entry.peer.is_some_and(|p| through.contains(&p)), "work went through the proxy: {entry:?}");
        }
        assert!(!personal_seen.is_empty());
        for entry in &personal_seen {
            assert!(!entry.peer.is_some_and(|p| through.contains(&p)), "personal went direct: {entry:?}");
        }
        println!("{}: {} tunnels carried {} work requests", proxy.url(remote_names), tunnels.len(), work_seen.len());
    }
}
