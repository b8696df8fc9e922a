//! New sessions spread evenly whatever the transport and the provider form: real Codex sessions in a
//! row, through the built-in `openai` provider pointed at Keymux (`openai_base_url`, WebSocket first)
//! and through a custom provider over HTTP, land their first turns within one of even over five keys.
#![allow(clippy::unwrap_used, clippy::print_stdout, reason = "tests print the figures they measure")]

mod support;

use std::collections::BTreeMap;

use support::*;

/// Per key, how many sessions' first request it served (the first record of each session digest).
async fn first_turns(root: &str) -> BTreeMap<String, usize> {
    let decisions = decisions_api(root).await;
    let mut seen = std::collections::BTreeSet::new();
    let mut counts = BTreeMap::new();
    for r in decisions["data"].as_array().unwrap() {
        let (Some(session), Some(key)) = (r["session"].as_str(), r["served_by"].as_str()) else { continue };
        if seen.insert(session.to_owned()) {
            *counts.entry(key.to_owned()).or_default() += 1;
        }
    }
    counts
}

async fn spread(config: &str, env: &[(&str, &str)], name: &str, transport: &str) {
    let h = Harness::start(three_orgs(), &five_keys()).await;
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("config.toml"), config.replace("BASE", &h.base)).unwrap();
    for n in 0..10 {
        let (ok, out) = run_codex_in(home.path(), env, &format!("Session {n}: say hello.")).await;
        assert!(ok, "{name} session {n}: {out}");
    }
    let decisions = decisions_api(&h.root).await;
    let records = decisions["data"].as_array().unwrap();
    assert!(records.iter().all(|r| r["transport"] == transport), "{name} went over {transport}");
    let counts = first_turns(&h.root).await;
    println!("{name}: first turns per key over 10 sessions: {counts:?}");
    assert_eq!(counts.values().sum::<usize>(), 10);
    assert_eq!(counts.len(), 5, "every key started sessions: {counts:?}");
    assert!(counts.values().all(|&c| (1..=3).contains(&c)), "within one of even (2 each): {counts:?}");
}

const SETTINGS: &str = "model = \"gpt-5.5\"\napproval_policy = \"never\"\nsandbox_mode = \"read-only\"\ncheck_for_update_on_startup = false\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn built_in_provider_sessions_spread_evenly() {
    let config = format!("{SETTINGS}openai_base_url = \"BASE\"\n\n[analytics]\nenabled = false\n");
    spread(&config, &[("CODEX_API_KEY", TOKEN)], "built-in provider over WebSocket", "web_socket").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_provider_sessions_spread_evenly() {
    let config = format!(
        "{SETTINGS}model_provider = \"keymux\"\n\n[analytics]\nenabled = false\n\n[model_providers.keymux]\nname = \"Keymux\"\nbase_url = \"BASE\"\nwire_api = \"responses\"\nenv_key = \"KEYMUX_TOKEN\"\n"
    );
    spread(&config, &[("KEYMUX_TOKEN", TOKEN)], "custom provider over HTTP", "http").await;
}
