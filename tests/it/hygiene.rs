//! Secret hygiene: the real binary at `KEYMUX_LOG=trace` (the most a user can set) serves HTTP, SSE and
//! WebSocket sessions over three organizations, refuses bad input, has a key added and removed, and is
//! read through every control API a dashboard fetches. Then every byte the run produced (its logs, every
//! file it wrote, every API and event-stream answer, every error body) is searched for each API key,
//! the client token, the admin credential, the install secret, every raw `prompt_cache_key`, and every
//! token (and each part of each JWT) of a ChatGPT plan's login, before and after Keymux refreshed it.
#![allow(clippy::unwrap_used, clippy::disallowed_methods, reason = "tests")]

use crate::support;

use serde_json::{json, Value};
use support::*;

const INSTALL_SECRET: &str = "install-secret-9c41e07b2d5f";
const ADDED_KEY: &str = "sk-a2";
/// A key the provider does not know: its 401 must not carry it back out.
const REJECTED_KEY: &str = "sk-zz-rejected-5b8e1f";

/// Streamed and whole Codex sessions, pi sessions, and WebSocket turns; returns their cache keys.
async fn traffic(c: &reqwest::Client, base: &str) -> Vec<String> {
    let mut cache_keys = Vec::new();
    for n in 0..6 {
        let shape = if n % 2 == 0 { Shape::Codex } else { Shape::Pi };
        let mut session = Session::new(shape, 7000 + n, n % 3 != 0);
        cache_keys.push(session.id.clone());
        for turn in 0..3 {
            let result = session.turn(c, base, turn == 2).await;
            assert_eq!(result.status, 200, "{}", result.body);
        }
    }
    // (The answers relayed to the client are left out of the search: the provider echoes the client's own
    // `prompt_cache_key` in its response objects.)
    let mut socket = WsClient::connect(base, "ws-hygiene-session-3f9a").await.unwrap();
    cache_keys.push("ws-hygiene-session-3f9a".into());
    let mut ws_session = Session::new(Shape::Codex, 7100, true);
    ws_session.id = "ws-hygiene-session-3f9a".into();
    for _ in 0..3 {
        let body = ws_session.next_body(false);
        let answer = socket.create(&body).await;
        assert!(answer.error.is_none(), "{:?}", answer.error);
        ws_session.absorb(answer.output_items());
    }
    drop(socket);

    cache_keys
}

/// A wrong token, a forged marker, broken JSON: their error bodies are searched too. Returns the cache
/// keys they carried.
async fn bad_input(c: &reqwest::Client, base: &str, answers: &mut Vec<(String, Vec<u8>)>) -> Vec<String> {
    let mut cache_keys = Vec::new();
    let wrong = c
        .post(format!("{base}/responses"))
        .bearer_auth("km-not-the-token-but-long-enough-00")
        .json(&json!({"model":"gpt-5.5","input":"x","prompt_cache_key":"pck-wrong-token-77e1"}))
        .send()
        .await
        .unwrap();
    cache_keys.push("pck-wrong-token-77e1".into());
    answers.push(("wrong token".into(), wrong.bytes().await.unwrap().to_vec()));
    let forged = json!({"model":"gpt-5.5","prompt_cache_key":"pck-forged-19c2","input":[
        {"type":"reasoning","id":"rs_x","summary":[],"encrypted_content":"km1.AAAAAAAAAAAA.forged.gAAAA"}]});
    cache_keys.push("pck-forged-19c2".into());
    let r = post(c, &format!("{base}/responses"), &[], &forged).send().await.unwrap();
    answers.push(("forged marker".into(), r.bytes().await.unwrap().to_vec()));
    let r = c
        .post(format!("{base}/responses"))
        .bearer_auth(TOKEN)
        .body("{\"prompt_cache_key\":\"pck-broken-json-4d0a\",\"input\":")
        .send()
        .await
        .unwrap();
    cache_keys.push("pck-broken-json-4d0a".into());
    answers.push(("broken JSON".into(), r.bytes().await.unwrap().to_vec()));

    cache_keys
}

/// A ChatGPT plan added through the control API, a turn on it (its token refreshed first: it lives
/// less than the five minutes Keymux refreshes ahead), then removed. Returns every part of every token
/// the login held, before and after the refresh.
async fn plan_turn(sim: &keymux_sim::Sim, root: &str, base: &str, answers: &mut Vec<(String, Vec<u8>)>) -> Vec<String> {
    let first = sim.chatgpt_tokens().unwrap();
    let login = json!({"id_token": first.id_token, "access_token": first.access_token,
                       "refresh_token": first.refresh_token, "account_id": first.account_id});
    let api = Admin::new(root);
    let added = api.request(reqwest::Method::POST, "/keys");
    let added = added.json(&json!({"label": "plan", "provider": "chatgpt", "secret": login.to_string()})).send();
    let added = added.await.unwrap();
    assert_eq!(added.status(), 201);
    let added: Value = added.json().await.unwrap();
    answers.push(("plan added".into(), added.to_string().into_bytes()));
    let turn = json!({"model": "gpt-5.5", "input": "hi", "stream": true, "max_output_tokens": 64});
    let r = post(&client(), &format!("{base}/responses"), &[], &turn).send().await.unwrap();
    assert_eq!(r.status(), 200);
    answers.push(("plan turn".into(), r.bytes().await.unwrap().to_vec()));
    // Its tokens live less than the margin: the probe of the added key and the turn each refreshed it.
    assert!(sim.chatgpt_refreshes() >= 2, "the login was refreshed");
    answers.push(("/keys with the plan".into(), api.get("/keys").await.bytes().await.unwrap().to_vec()));
    let id = added["id"].as_str().unwrap();
    api.request(reqwest::Method::DELETE, &format!("/keys/{id}")).send().await.unwrap();
    let mut parts = Vec::new();
    assert!(sim.chatgpt_issued().iter().any(|t| t.access_token == first.access_token));
    for tokens in sim.chatgpt_issued() {
        parts.push(tokens.refresh_token);
        for jwt in [tokens.access_token, tokens.id_token] {
            parts.extend(jwt.split('.').skip(1).map(str::to_owned));
            parts.push(jwt);
        }
    }
    parts
}

/// A key added and removed, and every view the dashboard reads.
async fn control_plane(root: &str, answers: &mut Vec<(String, Vec<u8>)>) {
    let api = Admin::new(root);
    let added = api
        .request(reqwest::Method::POST, "/keys")
        .json(&json!({"label":"a2","secret":ADDED_KEY}))
        .send()
        .await
        .unwrap();
    assert_eq!(added.status(), 201);
    let added: Value = added.json().await.unwrap();
    answers.push(("key added".into(), added.to_string().into_bytes()));
    let id = added["id"].as_str().unwrap().to_owned();
    for path in ["/status", "/keys", "/tokens", "/decisions?limit=1000", "/sessions", "/usage", "/metrics"] {
        let r = api.get(path).await;
        assert!(r.status().is_success(), "{path}");
        answers.push((path.into(), r.bytes().await.unwrap().to_vec()));
    }
    let r = api.request(reqwest::Method::DELETE, &format!("/keys/{id}")).send().await.unwrap();
    answers.push(("key removed".into(), r.bytes().await.unwrap().to_vec()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_appears_in_anything_a_trace_level_run_produced() {
    let plan = keymux_sim::PlanSpec::new("acct-hygiene").token_lifetime(std::time::Duration::from_secs(240));
    let sim = keymux_sim::Sim::start(three_orgs().chatgpt_plan(plan)).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join("config.toml");
    let store = home.path().join("metrics");
    std::fs::write(&config, format!("metrics_dir = \"{}\"\n", store.display())).unwrap();
    let mut env = base_env(home.path());
    env.retain(|(k, _)| k != "KEYMUX_LOG");
    env.push(("KEYMUX_LOG".into(), "trace".into()));
    for (name, secret) in [("A1", "sk-a1"), ("B1", "sk-b1"), ("B2", "sk-b2"), ("C1", "sk-c1"), ("ZZ", REJECTED_KEY)] {
        env.push((format!("KEYMUX_KEY_{name}"), secret.into()));
    }
    env.push(("KEYMUX_CLIENT_TOKEN".into(), TOKEN.into()));
    env.push(("KEYMUX_INSTALL_SECRET".into(), INSTALL_SECRET.into()));
    env.push(("KEYMUX_CHATGPT_BASE_URL".into(), sim.chatgpt_base_url()));
    env.push(("KEYMUX_CHATGPT_AUTH_URL".into(), sim.chatgpt_auth_url()));
    let gateway =
        Keymux::spawn(&["--ephemeral", "--config", config.to_str().unwrap(), "--upstream", &sim.base_url()], &env)
            .await;
    let c = client();
    let mut answers: Vec<(String, Vec<u8>)> = Vec::new();
    let events = collect_events(Admin::new(&gateway.root).get("/events?after=0").await);

    let mut cache_keys = traffic(&c, &gateway.base).await;
    cache_keys.extend(bad_input(&c, &gateway.base, &mut answers).await);
    control_plane(&gateway.root, &mut answers).await;
    let plan_tokens = plan_turn(&sim, &gateway.root, &gateway.base, &mut answers).await;
    let last = Admin::new(&gateway.root).get_json("/status").await["gateway"]["last_event_id"].as_u64().unwrap();
    support::events_reach(&events, last).await;
    answers.push(("event stream".into(), serde_json::to_vec(&*events.lock().unwrap()).unwrap()));

    let log = gateway.stop().await;
    let request_lines = log.lines().filter(|l| l.contains("DEBUG") && l.contains(" request seq=")).count();
    assert!(request_lines >= 20, "the run really logged below info, a line per request:\n{log}");
    answers.push(("the gateway's logs".into(), log.into_bytes()));
    let mut files = Vec::new();
    support::disk::every_file(home.path(), &mut files);
    assert!(files.iter().any(|(p, _)| p.contains("metrics")), "sled wrote its files");
    answers.extend(files);

    let mut secrets: Vec<&str> = vec!["sk-a1", "sk-b1", "sk-b2", "sk-c1", ADDED_KEY, REJECTED_KEY, TOKEN, ADMIN];
    secrets.push(INSTALL_SECRET);
    secrets.extend(cache_keys.iter().map(String::as_str));
    secrets.extend(plan_tokens.iter().map(String::as_str));
    let mut hits = Vec::new();
    for (what, bytes) in &answers {
        for secret in &secrets {
            if support::disk::contains(bytes, secret) {
                hits.push(format!("{what}: {}…", &secret[..secret.len().min(8)]));
            }
        }
    }
    assert!(hits.is_empty(), "secrets found: {hits:#?}");
}
