//! `keymux clients check`: the real binary runs each installed client (found on its PATH) for one turn
//! per transport through a gateway of its own, in front of a stand-in provider. With the pinned Codex
//! CLI 0.171.0 and pi 1.6.0 every check passes; a stand-in `codex` that sends a request Keymux cannot
//! read fails each of its transports, saying which and why, and the check exits non-zero. The user's
//! HOME gets no Keymux file, and the throwaway client token never shows unmasked.
#![allow(clippy::unwrap_used, reason = "tests")]

use crate::support;

use std::path::Path;

use serde_json::Value;
use support::*;

/// Runs `keymux clients check --json` with `path` as PATH and `home` as HOME: (exit 0, the JSON, all
/// it printed).
async fn clients_check(path: &str, home: &Path) -> (bool, Value, String) {
    let out = tokio::process::Command::new(keymux_bin())
        .args(["clients", "check", "--json"])
        .env_clear()
        .env("PATH", path)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    // Generous: the check's own deadline per client run ends a hung client long before.
    let out = tokio::time::timeout(std::time::Duration::from_secs(900), out).await.unwrap().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let all = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let report = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("JSON on stdout ({e}):\n{all}"));
    (out.status.success(), report, all)
}

/// Nothing the check made for itself shows unmasked, and the user's HOME has no Keymux config, data or
/// keychain entry: everything it ran on was held in memory.
fn left_nothing(home: &Path, all: &str) {
    for prefix in ["km-check-", "sk-check-", "kma-check-"] {
        for (at, _) in all.match_indices(prefix) {
            let word: String = all[at + prefix.len()..].chars().take_while(char::is_ascii_hexdigit).collect();
            assert!(word.len() < 8, "an unmasked {prefix}… in the output:\n{all}");
        }
    }
    let made: Vec<_> = std::fs::read_dir(home).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(made.is_empty(), "the check wrote into HOME: {made:?}");
}

fn checks(client: &Value) -> Vec<(String, bool)> {
    client["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["transport"].as_str().unwrap().to_owned(), c["ok"] == true))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pinned_codex_and_pi_pass_every_transport() {
    // The tests' clients, with the Node.js 22 pi needs on the same PATH (`node` is among the links).
    let bins = codex_bin().parent().unwrap().to_owned();
    assert_eq!(pi_bin().parent().unwrap(), bins);
    let path = format!("{}:{}:{}", bins.display(), node22_dir().display(), std::env::var("PATH").unwrap());
    let home = tempfile::tempdir().unwrap();
    let (ok, report, all) = clients_check(&path, home.path()).await;
    assert!(ok, "the check passes:\n{all}");
    let clients = report["clients"].as_array().unwrap();
    let names: Vec<(&str, &str)> =
        clients.iter().map(|c| (c["name"].as_str().unwrap(), c["version"].as_str().unwrap())).collect();
    assert_eq!(names, [("codex", "0.171.0"), ("pi", "1.6.0")], "{report}");
    let each = |transports: &[&str]| transports.iter().map(|t| ((*t).to_owned(), true)).collect::<Vec<_>>();
    assert_eq!(checks(&clients[0]), each(&["http", "websocket", "compaction"]), "{report}");
    assert_eq!(checks(&clients[1]), each(&["http"]), "{report}");
    assert!(clients.iter().all(|c| c["ok"] == true), "{report}");
    assert!(!all.contains("\"error\""), "a passing check says no error: {report}");
    left_nothing(home.path(), &all);
}

/// A `codex` that says it is 0.999.0 and sends a request body that is not JSON (printing its token on
/// the way, as a careless client might).
const MALFORMED_CODEX: &str = r#"#!/bin/sh
if [ "$1" = "--version" ]; then echo "codex-cli 0.999.0"; exit 0; fi
token="${KEYMUX_TOKEN:-$CODEX_API_KEY}"
echo "sending with $token" >&2
base=$(grep -o 'http://127\.0\.0\.1:[0-9]*/v1' "$CODEX_HOME/config.toml" | head -1)
exec curl -sS --fail-with-body -H "authorization: Bearer $token" -H 'content-type: application/json' \
  -d '{"model": "gpt-5.5", "input": [' "$base/responses"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_codex_that_sends_a_malformed_request_fails_each_transport_saying_why() {
    let bins = tempfile::tempdir().unwrap();
    let codex = bins.path().join("codex");
    std::fs::write(&codex, MALFORMED_CODEX).unwrap();
    std::fs::set_permissions(&codex, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    // Only the system's tools beside it (sh, grep, curl): no other client is found.
    let path = format!("{}:/usr/bin:/bin", bins.path().display());
    let home = tempfile::tempdir().unwrap();
    let (ok, report, all) = clients_check(&path, home.path()).await;
    assert!(!ok, "the check exits non-zero:\n{all}");
    let clients = report["clients"].as_array().unwrap();
    assert_eq!(clients.len(), 1, "{report}");
    let codex = &clients[0];
    assert_eq!(
        (codex["name"].as_str(), codex["version"].as_str(), codex["ok"].as_bool()),
        (Some("codex"), Some("0.999.0"), Some(false))
    );
    let transports: Vec<String> = checks(codex)
        .into_iter()
        .map(|(t, ok)| {
            assert!(!ok, "{t} fails: {report}");
            t
        })
        .collect();
    assert_eq!(transports, ["http", "websocket", "compaction"]);
    for check in codex["checks"].as_array().unwrap() {
        let error = check["error"].as_str().unwrap_or_else(|| panic!("a failed check says why: {check}"));
        assert!(error.starts_with("codex exited with status 22"), "the client's exit: {error}");
        assert!(
            error.contains("invalid_json") && error.contains("This endpoint takes a JSON object"),
            "Keymux's answer: {error}"
        );
        assert!(error.contains("Keymux recorded 1 request(s): HTTP 400"), "what Keymux recorded: {error}");
        assert!(error.contains("sending with [key masked]"), "the client's own words, its token masked: {error}");
    }
    assert!(all.contains("codex does not work through Keymux"), "{all}");
    left_nothing(home.path(), &all);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_client_installed_is_said_and_fails() {
    let empty = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let (ok, report, all) = clients_check(&empty.path().display().to_string(), home.path()).await;
    assert!(!ok, "nothing checked is no pass:\n{all}");
    assert_eq!(report["clients"], serde_json::json!([]));
    assert!(all.contains("neither `codex` nor `pi` is on PATH"), "{all}");
}

/// `keymux serve` checks the clients on its PATH when it starts, by itself: the Connect view's
/// `GET /keymux/api/clients` and the event stream say what it found, here that the stand-in `codex`
/// does not work, with the first failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_gateway_checks_its_clients_on_start_and_says_so() {
    let bins = tempfile::tempdir().unwrap();
    let codex = bins.path().join("codex");
    std::fs::write(&codex, MALFORMED_CODEX).unwrap();
    std::fs::set_permissions(&codex, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let sim = keymux_sim::Sim::start(keymux_sim::SimConfig::new().org("org-a", &["sk-a1"])).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let mut env = base_env(home.path());
    env.retain(|(k, _)| k != "PATH");
    env.push(("PATH".to_owned(), format!("{}:/usr/bin:/bin", bins.path().display())));
    env.push(("KEYMUX_KEY_A1".to_owned(), "sk-a1".to_owned()));
    env.push(("KEYMUX_CLIENT_TOKEN".to_owned(), TOKEN.to_owned()));
    let keymux = Keymux::spawn(&["--ephemeral", "--upstream", &sim.base_url()], &env).await;
    let admin = Admin::new(&keymux.root);
    let read = || async { admin.get_json("/clients").await["clients"].as_array().unwrap().clone() };
    let clients = until("the client check", read, |c| !c.is_empty()).await;
    assert_eq!(clients.len(), 1, "{clients:?}");
    let codex = &clients[0];
    assert_eq!(
        (codex["name"].as_str(), codex["version"].as_str(), codex["ok"].as_bool()),
        (Some("codex"), Some("0.999.0"), Some(false))
    );
    let summary = codex["summary"].as_str().unwrap();
    assert!(summary.starts_with("Codex 0.999.0: HTTP turn failed: codex exited with status 22"), "{summary}");
    assert!(summary.contains("invalid_json") && summary.contains("[key masked]"), "{summary}");
    let log = keymux.stop().await;
    assert!(log.contains("Codex 0.999.0: HTTP turn failed"), "the check is logged: {log}");
}

/// A check runs each client for real turns, so a gateway checks a client once per version: the
/// check is kept in Keymux's data directory, and a restart with the same version shows the kept
/// check and does not run the client again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_shows_the_kept_check_and_runs_a_client_only_when_its_version_changed() {
    let bins = tempfile::tempdir().unwrap();
    let codex = bins.path().join("codex");
    let runs = bins.path().join("runs.log");
    // The malformed Codex, noting each run that is not `--version`.
    let noting = MALFORMED_CODEX.replacen("token=", &format!("echo run >> {}\ntoken=", runs.display()), 1);
    std::fs::write(&codex, &noting).unwrap();
    std::fs::set_permissions(&codex, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let sim = keymux_sim::Sim::start(keymux_sim::SimConfig::new().org("org-a", &["sk-a1"])).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let mut env = base_env(home.path());
    env.retain(|(k, _)| k != "PATH" && k != "XDG_DATA_HOME");
    env.push(("PATH".to_owned(), format!("{}:/usr/bin:/bin", bins.path().display())));
    // Keymux's data directory, this test's own.
    env.push(("XDG_DATA_HOME".to_owned(), home.path().join(".local/share").display().to_string()));
    env.push(("KEYMUX_KEY_A1".to_owned(), "sk-a1".to_owned()));
    env.push(("KEYMUX_CLIENT_TOKEN".to_owned(), TOKEN.to_owned()));
    let ran = || std::fs::read_to_string(&runs).unwrap_or_default().lines().count();

    let first = Keymux::spawn(&["--upstream", &sim.base_url()], &env).await;
    first.wait_for_log("the installed clients were looked at: codex 0.999.0, checked now").await;
    let checked_runs = ran();
    assert!(checked_runs > 0, "the first start ran the client");
    let kept = home.path().join(".local/share/keymux/client-checks.json");
    let text = std::fs::read_to_string(&kept).unwrap();
    assert!(text.contains("0.999.0") && !text.contains(TOKEN), "the check is kept, masked: {text}");
    first.stop().await;

    let second = Keymux::spawn(&["--upstream", &sim.base_url()], &env).await;
    second.wait_for_log("the installed clients were looked at: codex 0.999.0, checked before").await;
    assert_eq!(ran(), checked_runs, "the same version is not run again");
    let admin = Admin::new(&second.root);
    let clients = admin.get_json("/clients").await["clients"].as_array().unwrap().clone();
    assert_eq!(clients.len(), 1, "the kept check is shown: {clients:?}");
    assert_eq!(clients[0]["version"].as_str(), Some("0.999.0"));
    second.stop().await;

    // A new version is checked again.
    std::fs::write(&codex, noting.replace("0.999.0", "0.999.1")).unwrap();
    let third = Keymux::spawn(&["--upstream", &sim.base_url()], &env).await;
    third.wait_for_log("the installed clients were looked at: codex 0.999.1, checked now").await;
    assert!(ran() > checked_runs, "the new version ran");
    third.stop().await;
}
