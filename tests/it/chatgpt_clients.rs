//! The ChatGPT plan first, with the real Codex CLI (over HTTP, as `keymux setup codex` sets it up) and
//! the real pi: new sessions start on the plan; once its window is used up, the session on it goes on
//! with an API key and new sessions start there; after the reset, new sessions start on the plan again.
//! Every turn succeeds, the provider never answers `invalid_encrypted_content`, and the plan's access
//! token, refreshed on the way, never fails a request.
#![allow(clippy::unwrap_used, reason = "tests")]

use crate::support;

use std::path::Path;
use std::time::Duration;

use keymux_sim::PlanSpec;
use serde_json::Value;
use support::*;

/// A client pointed at Keymux in its own config, as setup writes it.
#[derive(Clone, Copy)]
enum Client {
    Codex,
    Pi,
}

impl Client {
    fn set_up(self, home: &Path, base: &str) {
        match self {
            Self::Codex => {
                let config = format!(
                    "model = \"gpt-5.5\"\napproval_policy = \"never\"\nsandbox_mode = \"read-only\"\n\
                     check_for_update_on_startup = false\nmodel_provider = \"keymux\"\n\n[analytics]\nenabled = false\n\n\
                     [model_providers.keymux]\nname = \"Keymux\"\nbase_url = \"{base}\"\nwire_api = \"responses\"\n\
                     env_key = \"KEYMUX_TOKEN\"\n"
                );
                std::fs::write(home.join("config.toml"), config).unwrap();
            }
            Self::Pi => pi_agent(home, base),
        }
    }

    /// One turn in `work`: a new session, or the last one continued.
    async fn turn(self, home: &Path, work: &Path, resume: bool, prompt: &str) -> (bool, String) {
        match self {
            Self::Codex => codex_turn(home, work, TOKEN, resume, prompt).await,
            Self::Pi => pi_turn(home, work, resume, prompt).await,
        }
    }
}

/// The key that served the newest request that reached the provider.
async fn last_served(root: &str) -> String {
    let decisions = decisions_api(root).await;
    let records: Vec<Value> = decisions["data"].as_array().unwrap().clone();
    records.iter().rev().find_map(|r| r["served_by"].as_str().map(str::to_owned)).unwrap()
}

/// Whether the newest served request's decision names `rule`.
async fn last_says(root: &str, rule: &str) -> bool {
    let decisions = decisions_api(root).await;
    let records = decisions["data"].as_array().unwrap();
    let last = records.iter().rev().find(|r| r["served_by"].is_string()).unwrap();
    last["decision"]["reasons"].as_array().unwrap().iter().any(|r| r["rule"] == rule)
}

/// One conversation: a home of its own (its client's config and sessions) and a working directory, so
/// "continue the last session" can only mean this one.
struct Conversation {
    home: tempfile::TempDir,
    work: tempfile::TempDir,
    turns: usize,
}

impl Conversation {
    fn new(client: Client, base: &str) -> Self {
        let home = tempfile::tempdir().unwrap();
        client.set_up(home.path(), base);
        Self { home, work: tempfile::tempdir().unwrap(), turns: 0 }
    }

    /// One turn (the first starts the session, the others continue it); what the client printed.
    async fn turn(&mut self, client: Client, prompt: &str) -> String {
        let (ok, out) = client.turn(self.home.path(), self.work.path(), self.turns > 0, prompt).await;
        assert!(ok, "{prompt}: {out}");
        self.turns += 1;
        out
    }
}

async fn plan_first_overflow_and_back(client: Client) {
    let spec = PlanSpec::new(crate::chatgpt::ACCOUNT).token_lifetime(Duration::from_secs(3600));
    let (h, _) = crate::chatgpt::harness_with_plan(spec).await;
    let mut printed = String::new();

    let mut on_plan = Conversation::new(client, &h.base);
    printed.push_str(&on_plan.turn(client, "Say hello.").await);
    assert_eq!(last_served(&h.root).await, "k_plan", "a new session starts on the plan");
    assert!(last_says(&h.root, "plan_first").await);
    // Near its token's expiry: refreshed before the turn, which goes on on the plan.
    h.advance(Duration::from_secs(3600 - 120));
    printed.push_str(&on_plan.turn(client, "Continue.").await);
    assert_eq!(last_served(&h.root).await, "k_plan", "the session stays on the plan");
    assert_eq!(h.sim.chatgpt_refreshes(), 1, "the token was refreshed ahead of its expiry");

    h.sim.exhaust_plan();
    printed.push_str(&on_plan.turn(client, "Continue after the plan ran out.").await);
    assert_eq!(last_served(&h.root).await, "k_a1", "the plan's session is rescued onto the API key");
    let mut on_api = Conversation::new(client, &h.base);
    printed.push_str(&on_api.turn(client, "A new session while the plan is used up.").await);
    assert_eq!(last_served(&h.root).await, "k_a1", "new sessions overflow to the API keys");
    assert!(last_says(&h.root, "plan_exhausted").await);

    h.advance(Duration::from_secs(5 * 3600));
    let mut back = Conversation::new(client, &h.base);
    printed.push_str(&back.turn(client, "A new session after the reset.").await);
    assert_eq!(last_served(&h.root).await, "k_plan", "back on the plan after its reset");
    printed.push_str(&on_api.turn(client, "The API key's session continues.").await);
    assert_eq!(last_served(&h.root).await, "k_a1", "a session begun on an API key never moves to the plan");

    let unreadable =
        h.sim.log().iter().filter(|e| e.error_code.as_deref() == Some("invalid_encrypted_content")).count();
    assert_eq!(unreadable, 0, "the provider never got reasoning it could not read");
    assert!(!printed.contains("invalid_encrypted_content"), "{printed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_starts_on_the_plan_overflows_to_api_keys_and_comes_back() {
    plan_first_overflow_and_back(Client::Codex).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pi_starts_on_the_plan_overflows_to_api_keys_and_comes_back() {
    plan_first_overflow_and_back(Client::Pi).await;
}
