//! A rescued session stays rescued, with the real Codex CLI over HTTP and over WebSocket and with the
//! real pi: remove the key serving a session, then its organization's last key, then add both back, one
//! turn between each (`codex exec resume --last`, `pi -c`); every turn succeeds and the provider never
//! answers `invalid_encrypted_content`. The same runs against a provider that drops reasoning it cannot
//! read instead of answering 400 (`ForeignReasoning::Drop`): it never has to, and no turn's decision
//! says reasoning was dropped.
#![allow(clippy::unwrap_used, clippy::print_stdout, reason = "tests print the figures they measure")]

use crate::support;

use std::path::Path;

use keymux_sim::ForeignReasoning;
use reqwest::Method;
use serde_json::{json, Value};
use support::*;

fn codex_config(base: &str, websockets: bool) -> String {
    format!(
        "model = \"gpt-5.5\"\napproval_policy = \"never\"\nsandbox_mode = \"read-only\"\n\
         check_for_update_on_startup = false\nmodel_provider = \"keymux\"\n\n[analytics]\nenabled = false\n\n\
         [model_providers.keymux]\nname = \"Keymux\"\nbase_url = \"{base}\"\nwire_api = \"responses\"\n\
         env_key = \"KEYMUX_TOKEN\"\nsupports_websockets = {websockets}\n"
    )
}

/// One `codex exec` turn in `work` (`resume --last` after the first): whether it succeeded, and what it
/// printed.
async fn switch(admin: &Admin, keys: &[&str], on: bool) {
    for key in keys {
        let action = if on { "enable" } else { "disable" };
        assert_eq!(admin.post_json(&format!("/keys/{key}/{action}"), None).await.0, 200);
    }
}

/// The key that served the newest request of the `codex` client that reached the provider.
async fn last_served(root: &str) -> String {
    let decisions = decisions_api(root).await;
    let records: Vec<Value> = decisions["data"].as_array().unwrap().clone();
    records.iter().rev().find_map(|r| r["served_by"].as_str().map(str::to_owned)).unwrap()
}

/// How a test drives one client: its first turn, and a turn that continues the last session.
#[derive(Clone, Copy)]
enum Client {
    Codex { websockets: bool },
    Pi,
}

impl Client {
    /// Writes the client's own config, pointed at `base`.
    fn set_up(self, home: &Path, base: &str) {
        match self {
            Self::Codex { websockets } => {
                std::fs::write(home.join("config.toml"), codex_config(base, websockets)).unwrap()
            }
            Self::Pi => pi_agent(home, base),
        }
    }

    async fn turn(self, home: &Path, work: &Path, resume: bool, prompt: &str) -> (bool, String) {
        match self {
            Self::Codex { .. } => codex_turn(home, work, TOKEN, resume, prompt).await,
            Self::Pi => pi_turn(home, work, resume, prompt).await,
        }
    }
}

async fn session_survives_its_organization_coming_back(client: Client, mode: ForeignReasoning) {
    let h = Harness::start(three_orgs().foreign_reasoning(mode), &five_keys()).await;
    let admin = Admin::new(&h.root);
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    client.set_up(home.path(), &h.base);
    // The session starts on organization a.
    switch(&admin, &["k_b1", "k_b2", "k_c1"], false).await;
    let (ok, out) = client.turn(home.path(), work.path(), false, "Say hello.").await;
    assert!(ok, "turn 1: {out}");
    switch(&admin, &["k_b1", "k_b2", "k_c1"], true).await;
    let serving = last_served(&h.root).await;
    let sibling = if serving == "k_a1" { "k_a2" } else { "k_a1" };
    let steps = [("serving key removed", serving.clone()), ("organization's last key removed", sibling.to_owned())];
    for (n, (step, key)) in steps.iter().enumerate() {
        assert_eq!(admin.call(Method::DELETE, &format!("/keys/{key}"), None).await.0, 204);
        let (ok, out) = client.turn(home.path(), work.path(), true, &format!("Step {n}: continue.")).await;
        assert!(ok, "{step}: {out}");
    }
    for (label, secret) in [("a1", "sk-a1"), ("a2", "sk-a2")] {
        let (status, body) = admin.post_json("/keys", Some(json!({"label": label, "secret": secret}))).await;
        assert_eq!(status, 201, "{body}");
    }
    for step in ["keys back", "and after"] {
        let (ok, out) = client.turn(home.path(), work.path(), true, &format!("{step}: continue.")).await;
        assert!(ok, "{step}: {out}");
    }
    let invalid = h.sim.log().iter().filter(|e| e.error_code.as_deref() == Some("invalid_encrypted_content")).count();
    assert_eq!(invalid, 0, "the provider never got state it could not read");
    let kept = decisions_api(&h.root).await["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["decision"]["reasons"].as_array().unwrap().iter().any(|x| x["rule"] == "still_rescued"))
        .count();
    println!("turns that dropped the old organization again: {kept}");
    assert!(kept >= 1, "the decision says the session stays rescued");
    let records = decisions_api(&h.root).await;
    let lost = records["data"].as_array().unwrap().iter().filter(|r| !r["decision"]["reasoning_dropped"].is_null());
    assert_eq!(lost.count(), 0, "no turn lost reasoning at the provider");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_over_http_keeps_a_rescued_session() {
    session_survives_its_organization_coming_back(Client::Codex { websockets: false }, ForeignReasoning::Reject).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_over_websocket_keeps_a_rescued_session() {
    session_survives_its_organization_coming_back(Client::Codex { websockets: true }, ForeignReasoning::Reject).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pi_keeps_a_rescued_session() {
    session_survives_its_organization_coming_back(Client::Pi, ForeignReasoning::Reject).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_keeps_a_rescued_session_with_a_provider_that_drops_reasoning() {
    session_survives_its_organization_coming_back(Client::Codex { websockets: true }, ForeignReasoning::Drop).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pi_keeps_a_rescued_session_with_a_provider_that_drops_reasoning() {
    session_survives_its_organization_coming_back(Client::Pi, ForeignReasoning::Drop).await;
}
