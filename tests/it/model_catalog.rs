//! Keymux's model catalog for Codex (`GET /v1/keymux/model-catalog`): the union of the models the
//! caller's pool can reach, learned from each key's `GET /models` in a simulator whose organizations
//! have access to different models, with the tiers each pool's policies allow; a pool that cannot
//! reach a model does not list it; bad calls get OpenAI-shaped errors. Then real Codex 0.171, set up
//! by `keymux setup codex --custom-provider` with a token of one pool, loads the catalog (its model
//! list is exactly what the pool serves) and runs a turn with a model from it.
#![allow(clippy::unwrap_used, reason = "tests")]

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use keymux_sim::{Sim, SimConfig};
use serde_json::{json, Value};
use support::*;

/// Three organizations with access to different models (embeddings too, which no Codex turn uses).
fn orgs() -> SimConfig {
    SimConfig::new()
        .org("org-a", &["sk-a1", "sk-a2"])
        .org_models("org-a", &["gpt-6.2-sol", "gpt-5.5", "gpt-4.1", "text-embedding-3-small"])
        .org("org-b", &["sk-b1"])
        .org_models("org-b", &["gpt-6-sol", "gpt-5.5", "gpt-4o"])
        .org("org-c", &["sk-c1"])
        .org_models("org-c", &["gpt-5-mini"])
}

/// A new client token named `name` in `pool`.
async fn token_in(admin: &Admin, name: &str, pool: &str) -> String {
    let (status, created) = admin.post_json("/tokens", Some(json!({"name": name, "pool": pool}))).await;
    assert_eq!(status, 201, "{created}");
    created["secret"].as_str().unwrap().to_owned()
}

/// A pool made through the control API.
async fn pool(admin: &Admin, body: Value) {
    let (status, answer) = admin.post_json("/pools", Some(body)).await;
    assert_eq!(status, 201, "{answer}");
}

/// The catalog as `token` gets it: its entries by slug, in order.
async fn catalog(base: &str, token: &str) -> Vec<Value> {
    let r = client().get(format!("{base}/keymux/model-catalog?client_version=0.171.0")).bearer_auth(token);
    let r = r.send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/json");
    let body: Value = r.json().await.unwrap();
    body["models"].as_array().unwrap().clone()
}

fn slugs(entries: &[Value]) -> Vec<&str> {
    entries.iter().map(|e| e["slug"].as_str().unwrap()).collect()
}

/// An entry's tiers: `service_tiers` ids, `additional_speed_tiers`, `default_service_tier`.
fn tiers<'a>(entries: &'a [Value], slug: &str) -> (Vec<&'a str>, Vec<&'a str>, Option<&'a str>) {
    let entry = entries.iter().find(|e| e["slug"] == slug).unwrap();
    let ids = entry["service_tiers"].as_array().unwrap().iter().map(|t| t["id"].as_str().unwrap()).collect();
    let speed = entry["additional_speed_tiers"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    (ids, speed, entry["default_service_tier"].as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_catalog_is_the_union_of_what_the_pool_reaches_with_the_tiers_its_policies_allow() {
    let keys = [key("a1", "sk-a1"), key("a2", "sk-a2"), key("b1", "sk-b1"), key("c1", "sk-c1")];
    let h = Harness::start(orgs(), &keys).await;
    let admin = Admin::new(&h.root);
    pool(&admin, json!({"name": "work", "keys": ["a1", "b1"], "allow_ultrafast": false})).await;
    pool(&admin, json!({"name": "fast", "keys": ["a2"]})).await;
    pool(&admin, json!({"name": "slow", "keys": ["b1"], "allow_priority": false})).await;
    pool(&admin, json!({"name": "mini", "keys": ["c1"], "fallback": ["slow"]})).await;

    // `all`: every organization's models, the ones Codex bundles first in Codex's order, then the
    // others by name; no embedding model.
    let all = catalog(&h.base, TOKEN).await;
    assert_eq!(slugs(&all), ["gpt-6.2-sol", "gpt-6-sol", "gpt-5.5", "gpt-4.1", "gpt-4o", "gpt-5-mini"]);
    assert_eq!(tiers(&all, "gpt-6.2-sol"), (vec!["priority", "ultrafast"], vec!["fast", "ultrafast"], None));
    assert_eq!(tiers(&all, "gpt-6-sol"), (vec!["priority"], vec!["fast"], Some("priority")));
    assert_eq!(tiers(&all, "gpt-4.1"), (vec![], vec![], None), "nothing says an unbundled model has Fast");
    for entry in &all {
        assert!(entry["base_instructions"].as_str().is_some_and(|p| p.len() > 1000), "{}", entry["slug"]);
    }

    // work (org-a and org-b, no ultrafast): the union of its two keys, Fast kept, ultrafast gone;
    // gpt-5-mini, which only org-c has, is not there.
    let work = catalog(&h.base, &token_in(&admin, "w", "work").await).await;
    assert_eq!(slugs(&work), ["gpt-6.2-sol", "gpt-6-sol", "gpt-5.5", "gpt-4.1", "gpt-4o"]);
    assert_eq!(tiers(&work, "gpt-6.2-sol"), (vec!["priority"], vec!["fast"], None));

    // fast (one org-a key): org-a's models only, every tier.
    let fast = catalog(&h.base, &token_in(&admin, "f", "fast").await).await;
    assert_eq!(slugs(&fast), ["gpt-6.2-sol", "gpt-5.5", "gpt-4.1"]);
    assert_eq!(tiers(&fast, "gpt-6.2-sol").0, ["priority", "ultrafast"]);

    // slow (no tier above standard): no Fast, no default tier it cannot serve.
    let slow = catalog(&h.base, &token_in(&admin, "s", "slow").await).await;
    assert_eq!(slugs(&slow), ["gpt-6-sol", "gpt-5.5", "gpt-4o"]);
    assert_eq!(tiers(&slow, "gpt-6-sol"), (vec![], vec![], None));

    // mini falls back to slow: it reaches both, so it lists both, under its own policies.
    let mini = catalog(&h.base, &token_in(&admin, "m", "mini").await).await;
    assert_eq!(slugs(&mini), ["gpt-6-sol", "gpt-5.5", "gpt-4o", "gpt-5-mini"]);
    assert_eq!(tiers(&mini, "gpt-6-sol"), (vec!["priority"], vec!["fast"], Some("priority")));
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_switched_off_or_limited_to_some_models_takes_its_models_out() {
    let keys = [key("a1", "sk-a1"), key("b1", "sk-b1")];
    let h = Harness::start(orgs(), &keys).await;
    let admin = Admin::new(&h.root);
    let (status, answer) = admin.patch("/keys/k_a1", json!({"exclude_models": ["gpt-4.1"]})).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(slugs(&catalog(&h.base, TOKEN).await), ["gpt-6.2-sol", "gpt-6-sol", "gpt-5.5", "gpt-4o"]);
    assert_eq!(admin.post_json("/keys/k_b1/disable", None).await.0, 200);
    assert_eq!(slugs(&catalog(&h.base, TOKEN).await), ["gpt-6.2-sol", "gpt-5.5"]);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_calls_get_openai_shaped_errors() {
    let h = Harness::start(orgs(), &[key("a1", "sk-a1")]).await;
    let url = format!("{}/keymux/model-catalog", h.base);
    let c = client();
    let cases = [
        ("no token", c.get(&url), 401, "invalid_api_key"),
        ("a wrong token", c.get(&url).bearer_auth("km-not-a-token"), 401, "invalid_api_key"),
        ("the admin credential", c.get(&url).bearer_auth(ADMIN), 401, "invalid_api_key"),
        ("a web page", c.get(&url).bearer_auth(TOKEN).header("origin", "https://evil.example"), 403, ""),
        ("POST", c.post(&url).bearer_auth(TOKEN), 404, "not_found"),
    ];
    for (what, request, status, code) in cases {
        let r = request.send().await.unwrap();
        assert_eq!(r.status(), status, "{what}");
        let body: Value = r.json().await.unwrap();
        let error = &body["error"];
        assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()), "{what}: {body}");
        assert!(error["type"].is_string(), "{what}: {body}");
        if !code.is_empty() {
            assert_eq!(error["code"], code, "{what}: {body}");
        }
    }
    h.shutdown().await;
}

/// The work organization's models, and the home organization's.
const WORK_MODELS: [&str; 2] = ["gpt-6-sol", "gpt-4.1"];
const HOME_MODELS: [&str; 2] = ["gpt-6.2-sol", "gpt-5.5"];

/// `codex ARGS` in `dir` with only PATH, HOME and CODEX_HOME: (succeeded, stdout, stderr).
async fn codex(home: &Path, dir: &Path, args: &[&str]) -> (bool, String, String) {
    let out = tokio::process::Command::new(codex_bin())
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("CODEX_HOME", home.join(".codex"))
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(180), out).await.expect("codex finished").expect("it runs");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_codex_lists_what_its_pool_serves_and_runs_a_turn_with_it() {
    let sim = Sim::start(
        SimConfig::new()
            .org("org-work", &["sk-mc-work"])
            .org_models("org-work", &WORK_MODELS)
            .org("org-home", &["sk-mc-home"])
            .org_models("org-home", &HOME_MODELS),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let home: PathBuf = dir.path().to_owned();
    let config = home.join("keymux.toml");
    let service = format!("keymux-model-catalog-{}", std::process::id());
    std::fs::write(&config, format!("keychain_service = \"{service}\"\nupstream = \"{}\"\n", sim.base_url())).unwrap();
    std::fs::create_dir_all(home.join(".codex")).unwrap();
    let mine = "# mine\nmodel = \"gpt-6-sol\"\napproval_policy = \"never\"\nsandbox_mode = \"read-only\"\n";
    std::fs::write(home.join(".codex/config.toml"), mine).unwrap();
    let mut env: Vec<(String, String)> = base_env(&home).into_iter().filter(|(k, _)| k != "XDG_DATA_HOME").collect();
    env.push(("XDG_DATA_HOME".into(), home.join("data").display().to_string()));
    env.push(("CODEX_HOME".into(), home.join(".codex").display().to_string()));
    let config = config.display().to_string();
    let keymux = |args: &'static [&'static str], stdin: &'static str| {
        let (config, env) = (config.clone(), env.clone());
        async move {
            let mut all = vec!["--config", config.as_str()];
            all.extend_from_slice(args);
            let (ok, out, err) = run_keymux(&all, &env, stdin).await;
            assert!(ok, "keymux {args:?} failed:\n{out}{err}");
        }
    };
    keymux(&["keys", "add", "--label", "work"], "sk-mc-work\n").await;
    keymux(&["keys", "add", "--label", "home"], "sk-mc-home\n").await;
    keymux(&["pool", "create", "work", "--keys", "work"], "").await;
    let gateway = Keymux::spawn(&["--config", &config], &env).await;
    keymux(&["setup", "codex", "--custom-provider", "--yes"], "").await;
    keymux(&["token", "set", "codex", "--pool", "work"], "").await;
    let written = std::fs::read_to_string(home.join(".codex/config.toml")).unwrap();
    assert!(written.contains("/v1/keymux/model-catalog\"") && written.contains("api_key_model_discovery = true"));
    assert!(written.starts_with("# mine\n"), "the user's settings stay:\n{written}");

    // Codex's model list is the catalog: exactly the work organization's models.
    let work = tempfile::tempdir().unwrap();
    let (ok, out, err) = codex(&home, work.path(), &["debug", "models"]).await;
    assert!(ok, "codex debug models failed:\n{out}{err}");
    let listed: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let listed = slugs(listed["models"].as_array().unwrap()).into_iter().map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(listed, WORK_MODELS, "{err}");
    let fetched = sim.log().iter().filter(|e| e.path == "/v1/models").count();
    assert!(fetched >= 2, "each key's list came from the provider");

    // A turn with a catalog model that Codex does not bundle, served by the work key.
    let (ok, out, err) =
        codex(&home, work.path(), &["exec", "--skip-git-repo-check", "-m", "gpt-4.1", "Say hello."]).await;
    assert!(ok && format!("{out}{err}").contains("SIM-REPLY"), "the turn was served:\n{out}{err}");
    let turn = sim.log().into_iter().rev().find(|e| e.path == "/v1/responses").expect("the turn went upstream");
    assert_eq!((turn.key.as_deref(), turn.status), (Some("sk-mc-work"), 200));
    let prompt = turn.body.as_ref().map(ToString::to_string).unwrap_or_default();
    assert!(prompt.contains("You are a coding agent running in the Codex CLI"), "the catalog's prompt was sent");
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chatgpt_plans_models_come_from_its_own_list() {
    let spec = keymux_sim::PlanSpec::new(crate::chatgpt::ACCOUNT).models(&["gpt-6.2-sol", "gpt-5-mini"]);
    let (h, _) = crate::chatgpt::harness_with_plan(spec).await;
    let admin = Admin::new(&h.root);
    pool(&admin, json!({"name": "plan", "keys": ["plan"], "allow_ultrafast": false})).await;
    let plan = catalog(&h.base, &token_in(&admin, "p", "plan").await).await;
    assert_eq!(slugs(&plan), ["gpt-6.2-sol", "gpt-5-mini"]);
    assert_eq!(tiers(&plan, "gpt-6.2-sol"), (vec!["priority"], vec!["fast"], None));
    let listed = h.sim.log().into_iter().filter(|e| e.path == "/backend-api/codex/models").count();
    assert!(listed >= 1, "the plan's list came from its backend");
    h.shutdown().await;
}
