//! Pools through the real `keymux` binary: made offline with the CLI (config file and keychain), kept
//! across a restart, changed on the running gateway, and defined headless from the environment. The
//! simulator's log judges which keys a token reached.
#![allow(clippy::unwrap_used, reason = "tests")]

use crate::support;

use std::collections::BTreeSet;
use std::path::Path;

use keymux_sim::{Sim, SimConfig};
use support::*;

fn sim_config() -> SimConfig {
    SimConfig::new().org("org-w", &["sk-pool-w1", "sk-pool-w2"]).org("org-p", &["sk-pool-p1"])
}

/// The keys of the simulator that received `POST /v1/responses` with `prompt`.
fn keys_for(sim: &Sim, prompt: &str) -> BTreeSet<String> {
    sim.log()
        .into_iter()
        .filter(|e| e.body.as_ref().is_some_and(|b| b["input"] == prompt))
        .filter_map(|e| e.key)
        .collect()
}

async fn ask(base: &str, token: &str, prompt: &str) -> u16 {
    let body = serde_json::json!({"model":"gpt-5.5","input":prompt});
    let r = client().post(format!("{base}/responses")).bearer_auth(token).json(&body).send().await.unwrap();
    r.status().as_u16()
}

async fn cli(cfg: &Path, env: &[(String, String)], args: &[&str], stdin: &str) -> (bool, String, String) {
    let mut all = vec!["--config", cfg.to_str().unwrap()];
    all.extend_from_slice(args);
    run_keymux(&all, env, stdin).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pools_made_with_the_cli_survive_a_restart_and_change_the_running_gateway() {
    let sim = Sim::start(sim_config()).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let cfg = home.path().join("config.toml");
    std::fs::write(&cfg, format!("keychain_service = \"keymux-pools-cli\"\nupstream = \"{}\"\n", sim.base_url()))
        .unwrap();
    let env = base_env(home.path());
    for (label, secret) in [("w1", "sk-pool-w1"), ("w2", "sk-pool-w2"), ("p1", "sk-pool-p1")] {
        let (ok, _, err) = cli(&cfg, &env, &["keys", "add", "--label", label], &format!("{secret}\n")).await;
        assert!(ok, "{err}");
    }
    let (ok, out, err) = cli(&cfg, &env, &["pool", "create", "work", "--keys", "w1,w2"], "").await;
    assert!(ok && out.contains("created pool 'work'"), "{out}{err}");
    let (ok, _, err) = cli(&cfg, &env, &["pool", "create", "personal", "--keys", "p1"], "").await;
    assert!(ok, "{err}");
    let (ok, _, err) = cli(&cfg, &env, &["pool", "create", "typo", "--keys", "w3"], "").await;
    assert!(!ok && err.contains("'w3', which does not exist"), "{err}");
    let (ok, acme, err) = cli(&cfg, &env, &["token", "create", "--name", "acme", "--pool", "work"], "").await;
    assert!(ok && err.contains("only the keys of the pool 'work'"), "{err}");
    let acme = acme.trim().to_owned();
    let (ok, play, _) = cli(&cfg, &env, &["token", "create", "--name", "play", "--pool", "personal"], "").await;
    assert!(ok);
    let play = play.trim().to_owned();
    let (_, list, _) = cli(&cfg, &env, &["pool", "list"], "").await;
    assert!(list.lines().any(|l| l.starts_with("work ") && l.contains("w1,w2") && l.contains("acme")), "{list}");
    let text = std::fs::read_to_string(&cfg).unwrap();
    assert!(text.contains("[[pools]]") && text.contains("pool = \"work\""), "{text}");

    let keymux = Keymux::spawn(&["--config", cfg.to_str().unwrap()], &env).await;
    for n in 0..6 {
        assert_eq!(ask(&keymux.base, &acme, &format!("work {n}")).await, 200);
        assert_eq!(ask(&keymux.base, &play, &format!("play {n}")).await, 200);
    }
    let work_keys: BTreeSet<String> = (0..6).flat_map(|n| keys_for(&sim, &format!("work {n}"))).collect();
    let play_keys: BTreeSet<String> = (0..6).flat_map(|n| keys_for(&sim, &format!("play {n}"))).collect();
    assert_eq!(work_keys, ["sk-pool-w1", "sk-pool-w2"].map(String::from).into());
    assert_eq!(play_keys, ["sk-pool-p1"].map(String::from).into());

    // Changed on the running gateway: the next request already sees it.
    let (ok, out, err) = cli(&cfg, &env, &["pool", "set", "work", "--keys", "w2"], "").await;
    assert!(ok && out.contains("running gateway"), "{out}{err}");
    for n in 0..4 {
        assert_eq!(ask(&keymux.base, &acme, &format!("later {n}")).await, 200);
    }
    let later: BTreeSet<String> = (0..4).flat_map(|n| keys_for(&sim, &format!("later {n}"))).collect();
    assert_eq!(later, ["sk-pool-w2"].map(String::from).into());
    let (_, keys, _) = cli(&cfg, &env, &["keys", "list"], "").await;
    assert!(keys.lines().any(|l| l.starts_with("w1 ") && l.contains(" all ")), "{keys}");
    assert!(keys.lines().any(|l| l.starts_with("w2 ") && l.contains(" work ")), "{keys}");
    let (_, tokens, _) = cli(&cfg, &env, &["token", "list"], "").await;
    assert!(tokens.lines().any(|l| l.starts_with("acme ") && l.ends_with("work")), "{tokens}");
    let (ok, _, err) = cli(&cfg, &env, &["pool", "remove", "work"], "").await;
    assert!(!ok && err.contains("acme"), "a pool with a token stays: {err}");
    keymux.stop().await;

    // After a restart the boundary is what the user set.
    let keymux = Keymux::spawn(&["--config", cfg.to_str().unwrap()], &env).await;
    assert_eq!(ask(&keymux.base, &acme, "after restart").await, 200);
    assert_eq!(keys_for(&sim, "after restart"), ["sk-pool-w2"].map(String::from).into());
    let out = keymux.stop().await;
    assert_no_secrets("the gateway's output", &out, &["sk-pool-w1", "sk-pool-w2", "sk-pool-p1", &acme, &play]);
}

#[tokio::test]
async fn a_hand_written_pool_mistake_names_the_line() {
    let home = tempfile::tempdir().unwrap();
    let cfg = home.path().join("config.toml");
    let text = "listen = \"127.0.0.1:0\"\n\n[[pools]]\nname = \"work\"\nkeys = [\"nope\"]\n";
    std::fs::write(&cfg, text).unwrap();
    let env = base_env(home.path());
    let (ok, _, err) = cli(&cfg, &env, &["serve", "--ephemeral"], "").await;
    assert!(!ok);
    assert!(err.contains("config.toml (line 5, column 9)") && err.contains("'nope'"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headless_pools_and_tokens_come_from_the_environment() {
    let sim = Sim::start(sim_config()).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let mut env = base_env(home.path());
    let acme = "km-env-acme-token-5f1b8c2e9d7a4036";
    for (name, value) in [
        ("KEYMUX_KEY_W1", "sk-pool-w1"),
        ("KEYMUX_KEY_P1", "sk-pool-p1"),
        ("KEYMUX_POOL_WORK", "w1"),
        ("KEYMUX_TOKEN_ACME", acme),
        ("KEYMUX_TOKEN_ACME_POOL", "work"),
        ("KEYMUX_CLIENT_TOKEN", TOKEN),
    ] {
        env.push((name.into(), value.into()));
    }
    let keymux = Keymux::spawn(&["--ephemeral", "--upstream", &sim.base_url()], &env).await;
    for n in 0..4 {
        assert_eq!(ask(&keymux.base, acme, &format!("env {n}")).await, 200);
    }
    let reached: BTreeSet<String> = (0..4).flat_map(|n| keys_for(&sim, &format!("env {n}"))).collect();
    assert_eq!(reached, ["sk-pool-w1"].map(String::from).into());
    // A pool saved in the config file cannot name a key that lives only in the environment: the next
    // start would refuse that file.
    let body = serde_json::json!({"name":"saved","keys":["p1"]});
    let (status, answer) = Admin::new(&keymux.root).post_json("/pools", Some(body)).await;
    let message = answer["error"]["message"].as_str().unwrap_or_default().to_owned();
    assert!(status == 400 && message.contains("KEYMUX_POOL_<NAME>=p1"), "{status} {message}");
    // The CLI, run without those variables, lists what the headless gateway holds.
    let plain = base_env(home.path());
    let (ok, list, err) = run_keymux(&["keys", "list"], &plain, "").await;
    assert!(ok, "{err}");
    let w1 = list.lines().find(|l| l.starts_with("w1 ")).unwrap_or_else(|| panic!("w1 listed: {list}"));
    assert!(w1.contains(" work ") && w1.contains("running gateway only"), "{list}");
    // A key added to a headless gateway lives where its secrets live: in memory, and says so.
    let (ok, out, err) = run_keymux(&["keys", "add", "--label", "w2"], &plain, "sk-pool-w2\n").await;
    assert!(ok && out.contains("memory") && !out.contains("keychain"), "{out}{err}");
    let config = home.path().join(".config/keymux/config.toml");
    let written = std::fs::read_to_string(&config).unwrap_or_default();
    assert!(!written.contains("w2"), "no config entry for a secret stored nowhere:\n{written}");
    keymux.stop().await;
    env.push(("KEYMUX_TOKEN_BAD".into(), "km-env-bad-token-0a9b8c7d6e5f4a3b".into()));
    env.push(("KEYMUX_TOKEN_BAD_POOL".into(), "nowhere".into()));
    let (ok, _, err) = run_keymux(&["serve", "--ephemeral", "--listen", "127.0.0.1:0"], &env, "").await;
    assert!(!ok && err.contains("KEYMUX_TOKEN_BAD_POOL") && err.contains("'nowhere'"), "{err}");
}
