//! A rescued session stays rescued, with the real Codex CLI over HTTP and over WebSocket: remove the
//! key serving a session, then its organization's last key, then add both back, one turn between each
//! (`codex exec resume --last`); every turn succeeds and the provider never answers
//! `invalid_encrypted_content`.
#![allow(clippy::unwrap_used, clippy::print_stdout, reason = "tests print the figures they measure")]

mod support;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

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
async fn codex_turn(home: &Path, work: &Path, resume: bool, prompt: &str) -> (bool, String) {
    let mut args = vec!["exec", "--skip-git-repo-check"];
    if resume {
        args.extend(["resume", "--last"]);
    }
    args.push(prompt);
    let out = tokio::process::Command::new(codex_bin())
        .args(&args)
        .current_dir(work)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("CODEX_HOME", home)
        .env("KEYMUX_TOKEN", TOKEN)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(180), out).await.expect("codex finished").expect("codex runs");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

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

async fn session_survives_its_organization_coming_back(websockets: bool) {
    let h = Harness::start(three_orgs(), &five_keys()).await;
    let admin = Admin::new(&h.root);
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("config.toml"), codex_config(&h.base, websockets)).unwrap();
    // The session starts on organization a.
    switch(&admin, &["k_b1", "k_b2", "k_c1"], false).await;
    let (ok, out) = codex_turn(home.path(), work.path(), false, "Say hello.").await;
    assert!(ok, "turn 1: {out}");
    switch(&admin, &["k_b1", "k_b2", "k_c1"], true).await;
    let serving = last_served(&h.root).await;
    let sibling = if serving == "k_a1" { "k_a2" } else { "k_a1" };
    let steps = [("serving key removed", serving.clone()), ("organization's last key removed", sibling.to_owned())];
    for (n, (step, key)) in steps.iter().enumerate() {
        assert_eq!(admin.call(Method::DELETE, &format!("/keys/{key}"), None).await.0, 204);
        let (ok, out) = codex_turn(home.path(), work.path(), true, &format!("Step {n}: continue.")).await;
        assert!(ok, "{step}: {out}");
    }
    for (label, secret) in [("a1", "sk-a1"), ("a2", "sk-a2")] {
        let (status, body) = admin.post_json("/keys", Some(json!({"label": label, "secret": secret}))).await;
        assert_eq!(status, 201, "{body}");
    }
    for step in ["keys back", "and after"] {
        let (ok, out) = codex_turn(home.path(), work.path(), true, &format!("{step}: continue.")).await;
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
    println!("codex (websockets: {websockets}): turns that dropped the old organization again: {kept}");
    assert!(kept >= 1, "the decision says the session stays rescued");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_over_http_keeps_a_rescued_session() {
    session_survives_its_organization_coming_back(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_over_websocket_keeps_a_rescued_session() {
    session_survives_its_organization_coming_back(true).await;
}
