//! The config file is live: a hand edit while Keymux runs is applied like the equivalent command, an
//! invalid one is refused with the file, line and column while the running settings stay. Real
//! binary, real keychain; the test waits on the gateway's state, never on a fixed delay.
#![allow(clippy::unwrap_used, reason = "tests")]

use crate::support;

use std::path::Path;

use keymux::api::types::{KeyInfo, TokenInfo};
use keymux_sim::{Sim, SimConfig};
use support::*;

async fn cli(cfg: &Path, env: &[(String, String)], args: &[&str], stdin: &str) -> (bool, String, String) {
    let mut all = vec!["--config", cfg.to_str().unwrap()];
    all.extend_from_slice(args);
    run_keymux(&all, env, stdin).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_edits_apply_while_it_runs_and_bad_ones_are_refused() {
    let sim = Sim::start(SimConfig::new().org("org-l", &["sk-live-1", "sk-live-2"])).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let cfg = home.path().join("config.toml");
    std::fs::write(&cfg, format!("keychain_service = \"keymux-live\"\nupstream = \"{}\"\n", sim.base_url())).unwrap();
    let env = base_env(home.path());
    for (label, secret) in [("main", "sk-live-1"), ("spare", "sk-live-2")] {
        assert!(cli(&cfg, &env, &["keys", "add", "--label", label], &format!("{secret}\n")).await.0);
    }
    assert!(cli(&cfg, &env, &["token", "create", "--name", "editor"], "").await.0);
    let keymux = Keymux::spawn(&["--config", cfg.to_str().unwrap()], &env).await;
    let admin = Admin::new(&keymux.root);
    let keys = || async { serde_json::from_value::<Vec<KeyInfo>>(admin.get_json("/keys").await).unwrap() };
    let main =
        |keys: &Vec<KeyInfo>| keys.iter().find(|k| k.status.id.as_str().len() > 2 && k.status.label == "main").cloned();

    // A valid edit: main gets priority 3 and is switched off; a pool appears and the token moves into it.
    let text = std::fs::read_to_string(&cfg).unwrap();
    let edited = text.replacen("label = \"main\"", "label = \"main\"\npriority = 3\ndisabled = true", 1).replacen(
        "name = \"editor\"",
        "name = \"editor\"\npool = \"team\"",
        1,
    ) + "\n[[pools]]\nname = \"team\"\nkeys = [\"spare\"]\n";
    std::fs::write(&cfg, edited).unwrap();
    let seen = until("the edit applied", keys, |k| main(k).is_some_and(|m| m.status.settings.priority == 3)).await;
    assert_eq!(format!("{:?}", main(&seen).unwrap().status.health), "Disabled");
    let tokens = || async { serde_json::from_value::<Vec<TokenInfo>>(admin.get_json("/tokens").await).unwrap() };
    until("the token moved", tokens, |t| t.iter().any(|t| t.name == "editor" && t.pool == "team")).await;

    // An invalid edit: refused with the line, and the running settings stay.
    let good = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, good.replacen("priority = 3", "priority = \"high\"", 1)).unwrap();
    let line = good.lines().position(|l| l == "priority = 3").unwrap() + 1;
    let output = || async { keymux.output_text() };
    let said = until("the refusal logged", output, |o| o.contains("the running settings stay")).await;
    assert!(said.contains(&format!("config.toml (line {line}, column 12)")), "{said}");
    assert_eq!(main(&keys().await).unwrap().status.settings.priority, 3, "still what the last valid file said");

    // Fixed again: applied.
    std::fs::write(&cfg, good.replacen("priority = 3", "priority = 1", 1)).unwrap();
    until("the fix applied", keys, |k| main(k).is_some_and(|m| m.status.settings.priority == 1)).await;
    let output = keymux.stop().await;
    assert_eq!(output.matches("the running settings stay").count(), 1, "said once, not every few seconds");
}
