//! The `keymux` command line: startup checks, the listening line, and clear errors.
#![allow(clippy::unwrap_used, reason = "tests")]

use crate::support;

use support::*;

#[tokio::test]
async fn non_loopback_listen_needs_allow_remote() {
    let home = tempfile::tempdir().unwrap();
    let mut env = base_env(home.path());
    env.push(("KEYMUX_CLIENT_TOKEN".into(), TOKEN.into()));
    let (ok, _out, err) = run_keymux(&["serve", "--ephemeral", "--listen", "0.0.0.0:0"], &env, "").await;
    assert!(!ok);
    assert!(err.contains("--allow-remote"), "{err}");
}

#[tokio::test]
async fn unknown_config_fields_are_named() {
    let home = tempfile::tempdir().unwrap();
    let path = home.path().join("config.toml");
    std::fs::write(&path, "listen = \"127.0.0.1:0\"\nmax_attempt = 2\n").unwrap();
    let env = base_env(home.path());
    let (ok, _out, err) = run_keymux(&["--config", path.to_str().unwrap(), "serve", "--ephemeral"], &env, "").await;
    assert!(!ok);
    assert!(err.contains("max_attempt") && err.contains("config.toml"), "{err}");
}

#[tokio::test]
async fn ephemeral_without_a_token_says_what_to_set() {
    let home = tempfile::tempdir().unwrap();
    let env = base_env(home.path());
    let (ok, _out, err) = run_keymux(&["serve", "--ephemeral", "--listen", "127.0.0.1:0"], &env, "").await;
    assert!(!ok);
    assert!(err.contains("KEYMUX_CLIENT_TOKEN"), "{err}");
}

#[tokio::test]
async fn keychain_unreachable_is_reported_plainly() {
    let home = tempfile::tempdir().unwrap();
    // A session bus address that leads nowhere: no Secret Service can answer.
    let mut env: Vec<(String, String)> =
        base_env(home.path()).into_iter().filter(|(k, _)| k != "DBUS_SESSION_BUS_ADDRESS").collect();
    env.push(("DBUS_SESSION_BUS_ADDRESS".into(), format!("unix:path={}/no-bus", home.path().display())));
    let (ok, _out, err) = run_keymux(&["keys", "add", "--label", "work"], &env, "sk-test-unreachable\n").await;
    assert!(!ok);
    assert!(err.contains("keychain is not reachable"), "{err}");
    assert!(err.contains("gnome-keyring") && err.contains("--ephemeral"), "{err}");
    assert!(!err.contains("sk-test-unreachable"));
    // Nothing half-written: the config has no key.
    let config = home.path().join(".config/keymux/config.toml");
    assert!(!config.exists() || !std::fs::read_to_string(config).unwrap().contains("work"));
}

#[tokio::test]
async fn secrets_are_never_taken_from_argv() {
    let home = tempfile::tempdir().unwrap();
    let env = base_env(home.path());
    let (ok, _out, err) = run_keymux(&["keys", "add", "--label", "work", "--secret", "sk-x"], &env, "").await;
    assert!(!ok);
    assert!(err.contains("--secret"), "clap names the unknown flag: {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn environment_keys_serve_when_the_keychain_is_unreachable() {
    let sim = keymux_sim::Sim::start(keymux_sim::SimConfig::new().org("org-a", &["sk-env-a1"])).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    // Not --ephemeral, and a session bus address that leads nowhere: the keychain cannot answer.
    let mut env: Vec<(String, String)> =
        base_env(home.path()).into_iter().filter(|(k, _)| k != "DBUS_SESSION_BUS_ADDRESS").collect();
    env.push(("DBUS_SESSION_BUS_ADDRESS".into(), format!("unix:path={}/no-bus", home.path().display())));
    env.push(("KEYMUX_KEY_A1".into(), "sk-env-a1".into()));
    env.push(("KEYMUX_CLIENT_TOKEN".into(), TOKEN.into()));
    let keymux = Keymux::spawn(&["--upstream", &sim.base_url()], &env).await;
    let r = post(
        &client(),
        &format!("{}/responses", keymux.base),
        &[],
        &serde_json::json!({"model":"gpt-5.5","input":"x"}),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(r.status(), 200, "served with the environment's key");
    let output = keymux.stop().await;
    assert!(output.contains("keychain is not reachable"), "says what is missing: {output}");
    assert!(output.contains("KEYMUX_INSTALL_SECRET"), "and how to keep pins across restarts: {output}");
    assert!(output.contains("Token: KEYMUX_CLIENT_TOKEN"), "the banner names the token in use: {output}");
    assert!(!output.contains('\u{1b}'), "no colour codes in logs written to a pipe");
    assert_no_secrets("keymux output", &output, &["sk-env-a1", TOKEN]);
}

/// Diagnostics that point the right way: a second `serve` says where Keymux already runs (not a
/// metrics-store or port error first), the banner ends with the next step, and `dashboard --open`
/// without a browser prints the link and says so in one line, without the opener's noise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diagnostics_point_the_right_way() {
    let home = tempfile::tempdir().unwrap();
    let cfg = home.path().join("config.toml");
    std::fs::write(&cfg, "keychain_service = \"keymux-diagnostics\"\n").unwrap();
    let mut env = base_env(home.path());
    env.push(("KEYMUX_CLIENT_TOKEN".into(), TOKEN.into()));
    env.push(("KEYMUX_KEY_ONE".into(), "sk-diag-one".into()));
    let config = cfg.to_str().unwrap();
    let first = Keymux::spawn(&["--config", config, "--ephemeral"], &env).await;
    let (ok, _out, err) =
        run_keymux(&["--config", config, "serve", "--ephemeral", "--listen", "127.0.0.1:0"], &env, "").await;
    assert!(!ok);
    let pid = first.child.id().unwrap();
    assert!(
        err.contains(&format!("already running at {} (pid {pid})", first.root.trim_start_matches("http://"))),
        "{err}"
    );
    assert!(!err.contains("metrics") && !err.contains("Address already in use"), "{err}");

    // A PATH whose xdg-open finds no browser, as on a server, and complains the way it does.
    let bin = home.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let opener = bin.join("xdg-open");
    std::fs::write(&opener, "#!/bin/sh\necho 'xdg-open: no method available for opening' >&2\nexit 3\n").unwrap();
    std::fs::set_permissions(&opener, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let env: Vec<(String, String)> =
        env.into_iter().map(|(k, v)| if k == "PATH" { (k, bin.display().to_string()) } else { (k, v) }).collect();
    let (ok, out, err) = run_keymux(&["--config", config, "dashboard", "--open"], &env, "").await;
    assert!(ok, "the link was printed: {err}");
    assert!(out.contains("/login?code="), "{out}");
    assert!(err.contains("no browser could be opened") && !err.contains("no method available"), "{err}");
    let banner = first.stop().await;
    assert!(banner.contains("Next: `keymux setup codex`"), "the banner ends with the next step: {banner}");
}
