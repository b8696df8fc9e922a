//! Silent drops with the real clients: a Codex (HTTP) or pi session begun directly on org-a, before
//! Keymux, then continued through Keymux against a provider that drops reasoning it cannot read
//! (`ForeignReasoning::Drop`). org-a's key is in the second tier, so the first turn through Keymux
//! reaches org-b, which drops the session's reasoning: that turn's decision says so, and the next turn
//! goes back to org-a, where nothing is dropped. Every turn succeeds for the client.
#![allow(clippy::unwrap_used, reason = "tests")]

use crate::support;

use std::path::Path;

use keymux_sim::{ForeignReasoning, SimConfig};
use serde_json::Value;
use support::*;

fn codex_config(base: &str) -> String {
    format!(
        "model = \"gpt-5.5\"\napproval_policy = \"never\"\nsandbox_mode = \"read-only\"\n\
         check_for_update_on_startup = false\nmodel_provider = \"keymux\"\n\n[analytics]\nenabled = false\n\n\
         [model_providers.keymux]\nname = \"Keymux\"\nbase_url = \"{base}\"\nwire_api = \"responses\"\n\
         env_key = \"KEYMUX_TOKEN\"\nsupports_websockets = false\n"
    )
}

#[derive(Clone, Copy)]
enum Client {
    Codex,
    Pi,
}

impl Client {
    /// Points the client at `base` with `token` (the simulator with org-a's key, or Keymux).
    fn point_at(self, home: &Path, base: &str, token: &str) {
        match self {
            Self::Codex => std::fs::write(home.join("config.toml"), codex_config(base)).unwrap(),
            Self::Pi => {
                pi_agent(home, base);
                let path = home.join(".pi/agent/models.json");
                let mut models: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
                models["providers"]["keymux"]["apiKey"] = token.into();
                std::fs::write(path, models.to_string()).unwrap();
            }
        }
    }

    /// One turn in `work` with `token`: a new session, or the last one continued.
    async fn turn(self, home: &Path, work: &Path, token: &str, resume: bool, prompt: &str) -> (bool, String) {
        match self {
            Self::Codex => codex_turn(home, work, token, resume, prompt).await,
            Self::Pi => pi_turn(home, work, resume, prompt).await,
        }
    }
}

async fn a_session_that_lost_its_reasoning_goes_back_where_it_lives(client: Client) {
    let sim = SimConfig::new().org("org-a", &["sk-a1"]).org("org-b", &["sk-b1"]);
    let keys = [key("a1", "sk-a1").priority(1), key("b1", "sk-b1")];
    let h = Harness::start(sim.foreign_reasoning(ForeignReasoning::Drop), &keys).await;
    let (home, work) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    client.point_at(home.path(), &h.sim.base_url(), "sk-a1");
    for (n, prompt) in ["Say hello.", "Say it again."].iter().enumerate() {
        let (ok, out) = client.turn(home.path(), work.path(), "sk-a1", n > 0, prompt).await;
        assert!(ok, "direct turn {n}: {out}");
    }
    client.point_at(home.path(), &h.base, TOKEN);
    for (n, prompt) in ["Now through Keymux.", "And once more."].iter().enumerate() {
        let (ok, out) = client.turn(home.path(), work.path(), TOKEN, true, prompt).await;
        assert!(ok, "turn {n} through Keymux: {out}");
    }
    let mut records: Vec<Value> = decisions_api(&h.root).await["data"].as_array().unwrap().clone();
    records.retain(|r| r["operation"] == "responses_create" && r["status"] == 200);
    records.sort_by_key(|r| r["decision"]["seq"].as_u64());
    let (first, last) = (records.first().unwrap(), records.last().unwrap());
    assert_eq!(first["served_by"], "k_b1", "org-b was tried first: {first}");
    let dropped = &first["decision"]["reasoning_dropped"];
    assert_eq!(dropped["reasons"], serde_json::json!(["organization_mismatch"]), "{first}");
    assert!(dropped["count"].as_u64().unwrap() >= 1, "{first}");
    assert_eq!(last["served_by"], "k_a1", "back where the session's reasoning lives: {last}");
    assert!(last["decision"]["reasoning_dropped"].is_null(), "{last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_goes_back_where_its_reasoning_lives_after_a_silent_drop() {
    a_session_that_lost_its_reasoning_goes_back_where_it_lives(Client::Codex).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pi_goes_back_where_its_reasoning_lives_after_a_silent_drop() {
    a_session_that_lost_its_reasoning_goes_back_where_it_lives(Client::Pi).await;
}
