//! Keys keep what the user set: through the real `keymux` binary, with the real keychain, a setting
//! changed (with a gateway running, and without one) reads back exactly after a restart. "None" is not
//! zero, and a key switched off stays off.
#![allow(clippy::unwrap_used, reason = "tests")]

use crate::support;

use std::path::Path;

use keymux::api::types::KeyInfo;
use keymux_sim::{Sim, SimConfig};
use support::*;

async fn cli(cfg: &Path, env: &[(String, String)], args: &[&str], stdin: &str) -> (bool, String, String) {
    let mut all = vec!["--config", cfg.to_str().unwrap()];
    all.extend_from_slice(args);
    run_keymux(&all, env, stdin).await
}

async fn keys_of(keymux: &Keymux) -> Vec<KeyInfo> {
    let answer = Admin::new(&keymux.root).get_json("/keys").await;
    serde_json::from_value(answer).unwrap()
}

fn find<'a>(keys: &'a [KeyInfo], label: &str) -> &'a KeyInfo {
    keys.iter().find(|k| k.status.label == label).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_read_back_exactly_after_a_restart() {
    let sim = Sim::start(SimConfig::new().org("org-s", &["sk-set-1", "sk-set-2"])).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let cfg = home.path().join("config.toml");
    std::fs::write(&cfg, format!("keychain_service = \"keymux-settings\"\nupstream = \"{}\"\n", sim.base_url()))
        .unwrap();
    let env = base_env(home.path());
    for (label, secret) in [("main", "sk-set-1"), ("backup", "sk-set-2")] {
        let (ok, _, err) = cli(&cfg, &env, &["keys", "add", "--label", label], &format!("{secret}\n")).await;
        assert!(ok, "{err}");
    }
    let set = ["keys", "set", "backup", "--daily-token-budget", "5000", "--models", "gpt-5.5", "--priority", "2"];
    assert!(cli(&cfg, &env, &set, "").await.0);
    let (_, list, _) = cli(&cfg, &env, &["keys", "list"], "").await;
    assert!(list.contains("priority 2, budget 5000/day, only gpt-5.5"), "keys list shows what was set: {list}");
    let keymux = Keymux::spawn(&["--config", cfg.to_str().unwrap()], &env).await;
    // Changed while it runs: the budget taken away, the models cleared, one key switched off.
    let (ok, _, err) = cli(&cfg, &env, &["keys", "set", "backup", "--no-budget", "--models", ""], "").await;
    assert!(ok, "{err}");
    let (ok, _, err) = cli(&cfg, &env, &["keys", "disable", "main"], "").await;
    assert!(ok, "{err}");
    let text = std::fs::read_to_string(&cfg).unwrap();
    assert!(!text.contains("daily_token_budget = 0"), "no budget is not a budget of 0:\n{text}");

    // Budgets in money, from the command line, while it runs; a bad amount is refused in words.
    let money = ["keys", "set", "main", "--daily-budget-usd", "5", "--reserve-at", "80%", "--on-limit", "stop"];
    let (ok, _, err) = cli(&cfg, &env, &money, "").await;
    assert!(ok, "{err}");
    let (ok, _, err) = cli(&cfg, &env, &["keys", "set", "main", "--reserve-window-pct", "25"], "").await;
    assert!(ok, "{err}");
    let (ok, _, err) = cli(&cfg, &env, &["keys", "set", "main", "--reserve-window-pct", "95"], "").await;
    assert!(!ok && err.contains("reserve_window_pct = 95") && err.contains("1 to 90"), "{err}");
    let (ok, _, err) = cli(&cfg, &env, &["keys", "set", "main", "--monthly-budget-usd", "-3"], "").await;
    assert!(!ok && err.contains("zero or more US dollars"), "{err}");
    let (ok, _, err) = cli(&cfg, &env, &["keys", "set", "main", "--on-limit", "later"], "").await;
    assert!(!ok && err.contains("`reserve`"), "{err}");
    keymux.stop().await;
    let text = std::fs::read_to_string(&cfg).unwrap();
    assert!(text.contains("daily_budget_usd = 5.0") && text.contains("on_limit = \"stop\""), "{text}");
    assert!(text.contains("reserve_window_pct = 25"), "{text}");

    let keymux = Keymux::spawn(&["--config", cfg.to_str().unwrap()], &env).await;
    let keys = keys_of(&keymux).await;
    let main = &find(&keys, "main").status;
    assert_eq!((main.money.daily.map(|u| u.nanos()), main.money.reserve_at), (Some(5_000_000_000), Some(80)));
    assert_eq!(main.money.on_limit, keymux::budget::OnLimit::Stop);
    assert_eq!(main.settings.reserve_window_pct, Some(25), "kept across a restart");
    assert_eq!(find(&keys, "backup").status.settings.daily_token_budget, None);
    assert!(find(&keys, "backup").status.settings.models.is_empty());
    assert_eq!(format!("{:?}", find(&keys, "main").status.health), "Disabled", "still off after a restart");
    keymux.stop().await;

    // Without a gateway: switched back on, from the next start.
    let (ok, out, err) = cli(&cfg, &env, &["keys", "enable", "main"], "").await;
    assert!(ok && out.contains("next start"), "{out}{err}");
    let keymux = Keymux::spawn(&["--config", cfg.to_str().unwrap()], &env).await;
    let keys = keys_of(&keymux).await;
    assert_eq!(format!("{:?}", find(&keys, "main").status.health), "Ready");
    keymux.stop().await;
}

/// A secret is pooled once; a secret the provider refuses is said to be refused; a secret is replaced
/// in place, keeping the key's id, label and pools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_checked_and_replaced_in_place() {
    let sim = Sim::start(SimConfig::new().org("org-s", &["sk-sec-1", "sk-sec-2"])).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let cfg = home.path().join("config.toml");
    std::fs::write(&cfg, format!("keychain_service = \"keymux-secrets\"\nupstream = \"{}\"\n", sim.base_url()))
        .unwrap();
    let env = base_env(home.path());
    assert!(cli(&cfg, &env, &["keys", "add", "--label", "one"], "sk-sec-1\n").await.0);
    let (ok, _, err) = cli(&cfg, &env, &["keys", "add", "--label", "twin"], "sk-sec-1\n").await;
    assert!(!ok && err.contains("already in the pool as key 'one'"), "offline: {err}");
    assert!(cli(&cfg, &env, &["pool", "create", "team", "--keys", "one"], "").await.0);
    let keymux = Keymux::spawn(&["--config", cfg.to_str().unwrap()], &env).await;
    let (ok, _, err) = cli(&cfg, &env, &["keys", "add", "--label", "twin"], "sk-sec-1\n").await;
    assert!(!ok && err.contains("already in the pool as key 'one'"), "online: {err}");
    assert!(!err.contains("sk-sec-1"));
    let (ok, _, err) = cli(&cfg, &env, &["keys", "add", "--label", "typo"], "sk-sec-typo\n").await;
    assert!(!ok && err.contains("the provider refused this key") && err.contains("keys set typo --secret"), "{err}");
    let (ok, out, err) = cli(&cfg, &env, &["keys", "set", "typo", "--secret"], "sk-sec-2\n").await;
    assert!(ok && out.contains("the provider says"), "{out}{err}");
    let keys = keys_of(&keymux).await;
    assert_eq!(format!("{:?}", find(&keys, "typo").status.health), "Ready", "the fixed key serves");
    let (ok, out, err) = cli(&cfg, &env, &["keys", "set", "one", "--secret"], "sk-sec-2\n").await;
    assert!(!ok && err.contains("already in the pool as key 'typo'"), "{out}{err}");
    let before = find(&keys, "one").status.id.clone();
    assert_eq!(find(&keys_of(&keymux).await, "one").status.id, before);
    let pools = Admin::new(&keymux.root).get_json("/pools").await;
    assert!(pools.to_string().contains("\"keys\":[\"one\"]"), "{pools}");
    let out = keymux.stop().await;
    assert_no_secrets("the gateway's output", &out, &["sk-sec-1", "sk-sec-2", "sk-sec-typo"]);
}
