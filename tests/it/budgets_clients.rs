//! Budgets in money with real Codex 0.171 (`codex exec`, then `codex exec resume --last`): once the key
//! a session is on is past `reserve_at`, that session's turns go on there while new sessions go to
//! another key; with `on_limit = "stop"` at 100 % the session's next turn is refused with a 429 (and
//! never sent to another organization), which the decision the dashboard shows explains.
#![allow(clippy::unwrap_used, clippy::disallowed_methods, reason = "tests")]

use crate::support;

use std::path::Path;

use keymux::budget::OnLimit;
use serde_json::{json, Value};
use support::admin::Admin;
use support::*;

/// Keymux's own provider with no retries of its own, so a refusal shows at once (a 429 carries a
/// `retry-after` of hours).
fn config(base: &str) -> String {
    format!(
        "{EXISTING_CODEX_CONFIG_HEAD}model_provider = \"keymux\"\n\n[model_providers.keymux]\nname = \"Keymux\"\nbase_url = \"{base}\"\nwire_api = \"responses\"\nenv_key = \"KEYMUX_TOKEN\"\nrequest_max_retries = 0\nstream_max_retries = 0\n{EXISTING_CODEX_CONFIG_TAIL}"
    )
}

/// `codex exec ARGS` in `work` with this Codex home: (succeeded, what it printed).
async fn codex(home: &Path, work: &Path, args: &[&str]) -> (bool, String) {
    let dir = home.to_str().unwrap();
    let mut all = vec!["exec", "--skip-git-repo-check"];
    all.extend_from_slice(args);
    run_client(codex_bin(), work, &[("HOME", dir), ("CODEX_HOME", dir), ("KEYMUX_TOKEN", TOKEN)], &all).await
}

async fn served_last(h: &Harness) -> Value {
    let decisions = decisions_api(&h.root).await;
    let records = decisions["data"].as_array().unwrap();
    records.iter().max_by_key(|r| r["decision"]["seq"].as_u64()).unwrap()["served_by"].clone()
}

async fn a1_state(h: &Harness) -> String {
    let keys = Admin::new(&h.root).get_json("/keys").await;
    let a1 = keys.as_array().unwrap().iter().find(|k| k["id"] == "k_a1").unwrap().clone();
    a1["budget"]["state"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_codex_session_on_a_reserved_key_goes_on_new_ones_go_elsewhere_and_stop_refuses_its_next_turn() {
    // a1 first for new sessions while it is open; a Codex turn costs a few cents at gpt-5.5's prices.
    let keys = [key("a1", "sk-a1").daily_usd(0.10, Some(50), OnLimit::Reserve), key("b1", "sk-b1").priority(1)];
    let sim = keymux_sim::SimConfig::new().org("org-a", &["sk-a1"]).org("org-b", &["sk-b1"]);
    let h = Harness::start_with(sim, &keys, |_| {}).await;
    clear_of_midnight(&h);
    let (home, work) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    std::fs::write(home.path().join("config.toml"), config(&h.base)).unwrap();

    let (ok, out) = codex(home.path(), work.path(), &["Session A."]).await;
    assert!(ok, "{out}");
    assert_eq!(served_last(&h).await, "k_a1");
    for turn in 0..6 {
        if a1_state(&h).await == "reserved" {
            break;
        }
        let (ok, out) = codex(home.path(), work.path(), &["resume", "--last", "Session A goes on."]).await;
        assert!(ok, "turn {turn}: {out}");
        assert_eq!(served_last(&h).await, "k_a1", "turn {turn}");
    }
    assert_eq!(a1_state(&h).await, "reserved", "past 50 % of $0.10");

    // A new session goes to b1; session A, resumed, stays on a1, which alone can read its reasoning.
    let (ok, out) = codex(home.path(), work.path(), &["Session B."]).await;
    assert!(ok, "{out}");
    assert_eq!(served_last(&h).await, "k_b1", "a new session goes elsewhere");
    let (ok, out) = codex(home.path(), work.path(), &["resume", "--last", "Session B goes on."]).await;
    assert!(ok, "{out}");
    assert_eq!(served_last(&h).await, "k_b1");

    // The user chooses money over continuity: stop at a limit already spent. B's next turn is on b1;
    // a session on a1 is refused with the budget named.
    let (status, _) =
        Admin::new(&h.root).patch("/keys/k_a1", json!({ "daily_budget_usd": 0.01, "on_limit": "stop" })).await;
    assert_eq!(status, 200);
    assert_eq!(a1_state(&h).await, "stopped");
    let (ok, out) = codex(home.path(), work.path(), &["Session C, a new one."]).await;
    assert!(ok && out.contains("SIM-REPLY"), "{out}");
    assert_eq!(served_last(&h).await, "k_b1");
    let sessions = session_files(&home.path().join("sessions"));
    let a = sessions.first().unwrap();
    let id = session_id_in(a);
    let (ok, out) = codex(home.path(), work.path(), &["resume", &id, "Session A once more."]).await;
    // Codex 0.171 prints only the status of a 429 ("exceeded retry limit, last status: 429"); Keymux's
    // words are in the answer's body and in the decision the dashboard shows.
    assert!(!ok && out.contains("429"), "refused: {out}");
    let decisions = decisions_api(&h.root).await;
    let last =
        decisions["data"].as_array().unwrap().iter().max_by_key(|r| r["decision"]["seq"].as_u64()).unwrap().clone();
    assert_eq!(last["decision"]["refusal"]["kind"], "budget_stopped", "{last}");
    assert_eq!(
        (last["status"].as_u64(), last["decision"]["refusal"]["key"].as_str()),
        (Some(429), Some("k_a1")),
        "{last}"
    );
    assert!(last["attempts"].as_array().unwrap().is_empty(), "never sent to another organization: {last}");
}

/// The session id a Codex session file records.
fn session_id_in(file: &Path) -> String {
    let first = std::fs::read_to_string(file).unwrap().lines().next().unwrap().to_owned();
    let meta: Value = serde_json::from_str(&first).unwrap();
    meta["payload"]["id"].as_str().unwrap().to_owned()
}
