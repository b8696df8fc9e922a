//! New sessions spread evenly whatever the transport, the provider form and the client: real Codex
//! sessions in a row, through the built-in `openai` provider pointed at Keymux (`openai_base_url`,
//! WebSocket first), through a custom provider over HTTP, and the interactive TUI (which opens each
//! session with a prewarm frame that has no input) taking turns with `codex exec`, land their first turns
//! within one of even over five keys.
//!
//! The TUI runs inside tmux (`support::tui`), a real terminal emulator: it answers the terminal queries
//! the TUI waits on at start (cursor position, colours, keyboard modes), which a bare pseudo-terminal
//! does not.
#![allow(clippy::unwrap_used, clippy::print_stdout, reason = "tests print the figures they measure")]

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;

use support::tui::Tui;
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
    assert_even(&h.root, name, 10).await;
}

/// The first turns of `sessions` sessions (a multiple of five) are spread over all five keys, each
/// within one of even.
async fn assert_even(root: &str, name: &str, sessions: usize) {
    let counts = first_turns(root).await;
    println!("{name}: first turns per key over {sessions} sessions: {counts:?}");
    assert_eq!(counts.values().sum::<usize>(), sessions, "one first turn per session: {counts:?}");
    assert_eq!(counts.len(), 5, "every key started sessions: {counts:?}");
    let even = sessions / 5;
    assert!(
        counts.values().all(|&c| (even - 1..=even + 1).contains(&c)),
        "within one of even ({even} each): {counts:?}"
    );
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

/// The built-in provider's settings for both the TUI and `codex exec`, with the notices a first run of
/// the TUI would stop on (model migration, screen reader) already answered, and `work` trusted.
fn tui_config(base: &str, work: &Path) -> String {
    format!(
        "{SETTINGS}openai_base_url = \"{base}\"\n\n[analytics]\nenabled = false\n\n[projects.\"{}\"]\ntrust_level = \"trusted\"\n\n[tui]\nscreen_reader_detection_done = true\n\n[notice.model_migrations]\n\"gpt-5.5\" = \"gpt-6-sol\"\n",
        work.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tui_and_exec_sessions_spread_evenly() {
    let h = Harness::start(three_orgs(), &five_keys()).await;
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let work = work.path().canonicalize().unwrap();
    std::fs::write(home.path().join("config.toml"), tui_config(&h.base, &work)).unwrap();
    // The TUI signs in with what auth.json holds: here the Keymux client token, as an API key.
    std::fs::write(home.path().join("auth.json"), format!("{{\"OPENAI_API_KEY\":\"{TOKEN}\"}}")).unwrap();
    for n in 0..10 {
        let prompt = format!("Session {n}: say hello.");
        if n % 2 == 0 {
            let tui = Tui::start(home.path(), &work, &[&prompt]);
            // The simulator's answer, then the TUI's note that the turn is over.
            tui.wait_for(&["SIM-REPLY #", &prompt]).await;
            tui.wait_for(&["Worked for"]).await;
        } else {
            let (ok, out) = run_codex_in(home.path(), &[("CODEX_API_KEY", TOKEN)], &prompt).await;
            assert!(ok, "exec session {n}: {out}");
        }
    }
    let decisions = decisions_api(&h.root).await;
    let records = decisions["data"].as_array().unwrap();
    assert!(records.iter().all(|r| r["transport"] == "web_socket"), "every session went over WebSocket");
    // Each TUI start opens two conversations (the session, and a shorter one of its own with another
    // `prompt_cache_key`), each with a prewarm frame and a turn on one socket: 5 × 2 + 5 exec sessions.
    // A prewarm counted apart from its turn would make more.
    assert_even(&h.root, "TUI and exec in turn", 15).await;
}
