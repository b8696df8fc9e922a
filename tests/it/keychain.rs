//! The keychain path against a real Secret Service (gnome-keyring in a D-Bus session, started by
//! `scripts/test`): secrets persist across processes, never reach the config file or any output, and a
//! gateway started from them serves requests.
#![allow(clippy::unwrap_used, clippy::disallowed_methods, reason = "tests")]

use crate::support;

use keymux_sim::SimConfig;
use serde_json::json;
use support::*;

fn require_secret_service() {
    assert!(
        std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_some(),
        "the keychain tests need a Secret Service in a D-Bus session: run them through `scripts/test`"
    );
}

/// A config file in a temp dir with a keychain service name of its own, so parallel runs never share
/// entries.
fn isolated_config(home: &std::path::Path, upstream: &str) -> std::path::PathBuf {
    let path = home.join("config.toml");
    let service = format!("keymux-test-{}", std::process::id());
    // No `listen`: the gateway runs on a port chosen at start, and the CLI finds it by its run file.
    std::fs::write(
        &path,
        format!("# keymux test config\nkeychain_service = \"{service}\"\nupstream = \"{upstream}\"\n"),
    )
    .unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(clippy::too_many_lines, reason = "one scenario across four processes, checked at every step")]
async fn keys_and_tokens_live_in_the_os_keychain_across_processes() {
    require_secret_service();
    let sim = keymux_sim::Sim::start(
        SimConfig::new().org("org-a", &["sk-kc-work-1", "sk-kc-spare-3"]).org("org-b", &["sk-kc-home-2"]),
    )
    .await
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let config = isolated_config(home.path(), &sim.base_url());
    let cfg = config.to_str().unwrap();
    // The CLI reaches the running gateway with the admin credential the first `serve` put in the
    // keychain, not one from the environment.
    let mut env = base_env(home.path());
    env.retain(|(k, _)| k != "KEYMUX_ADMIN_TOKEN");
    let mut produced = String::new();

    // Process 1 and 2: add two keys; the secrets come from stdin.
    let (ok, out, err) = run_keymux(&["--config", cfg, "keys", "add", "--label", "work"], &env, "sk-kc-work-1\n").await;
    assert!(ok, "{err}");
    assert!(out.contains("added key 'work'"), "{out}");
    produced += &(out + &err);
    let (ok, out, err) =
        run_keymux(&["--config", cfg, "keys", "add", "--label", "home", "--org", "org-b"], &env, "sk-kc-home-2").await;
    assert!(ok, "{err}");
    produced += &(out + &err);

    // The config holds ids and labels only.
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(text.contains("label = \"work\"") && text.contains("label = \"home\""), "{text}");
    assert_no_secrets("config file", &text, &["sk-kc-work-1", "sk-kc-home-2"]);

    // Process 3: list shows both keys with fingerprints read back from the keychain.
    let (ok, out, err) = run_keymux(&["--config", cfg, "keys", "list"], &env, "").await;
    assert!(ok, "{err}");
    let rows: Vec<&str> = out.lines().filter(|l| l.starts_with("work") || l.starts_with("home")).collect();
    assert_eq!(rows.len(), 2, "{out}");
    assert!(rows.iter().all(|r| r.ends_with("in keychain")), "secrets found in the keychain: {out}");
    assert!(rows.iter().any(|r| r.contains("org-b")));
    produced += &(out + &err);

    // The secret really is in the Secret Service, where another tool can see it.
    let service = format!("keymux-test-{}", std::process::id());
    let ids: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("id = \"k_").map(|r| format!("k_{}", r.trim_end_matches('"'))))
        .collect();
    assert_eq!(ids.len(), 2);
    let lookup = std::process::Command::new("secret-tool")
        .args(["lookup", "service", &service, "username", &format!("key:{}", ids[0])])
        .output();
    let out = lookup.expect("secret-tool (libsecret-tools) is installed");
    assert!(out.status.success(), "secret-tool finds the entry under our service and account");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "sk-kc-work-1");

    // Process 4: a token, printed once on creation and again on request.
    let (ok, token, err) = run_keymux(&["--config", cfg, "token", "create", "--name", "codex"], &env, "").await;
    assert!(ok, "{err}");
    let token = token.trim().to_owned();
    assert!(token.starts_with("km-"));
    let (ok, shown, _) = run_keymux(&["--config", cfg, "token", "show", "codex"], &env, "").await;
    assert!(ok);
    assert_eq!(shown.trim(), token);
    assert_no_secrets("config file", &std::fs::read_to_string(&config).unwrap(), &[&token]);

    // Process 5: the gateway reads everything from the keychain and serves with both keys.
    let keymux = Keymux::spawn(&["--config", cfg], &env).await;
    let c = client();
    for i in 0..6 {
        let body = json!({"model": "text-embedding-3-small", "input": format!("hello {i}")});
        let r = c.post(format!("{}/embeddings", keymux.base)).bearer_auth(&token).json(&body).send().await.unwrap();
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    }
    // `keys list` in another process shows what the running gateway learned.
    let (ok, out, err) = run_keymux(&["--config", cfg, "keys", "list"], &env, "").await;
    assert!(ok, "{err}");
    let work = out.lines().find(|l| l.starts_with("work")).unwrap();
    assert!(work.contains("org-a (learned)") && work.contains("ready"), "{out}");
    let home_row = out.lines().find(|l| l.starts_with("home")).unwrap();
    assert!(
        home_row.contains("org-b") && !home_row.contains("(learned)"),
        "a configured org is shown as configured: {out}"
    );
    produced += &(out + &err);
    let counts = client_counts(&sim);
    assert!(counts.get("sk-kc-work-1").is_some_and(|n| *n > 0), "{counts:?}");
    assert!(counts.get("sk-kc-home-2").is_some_and(|n| *n > 0), "{counts:?}");
    let (printed, shown_once) = changes_reach_the_running_gateway(&sim, cfg, &env, &keymux).await;
    produced += &printed;
    let gateway_output = keymux.stop().await;
    let shown_once: Vec<&str> = shown_once.iter().map(String::as_str).collect();
    assert_no_secrets("gateway output", &gateway_output, &shown_once);
    produced += &gateway_output;

    // With no gateway running, a change goes to the config for the next start, comments kept.
    let (ok, out, err) = run_keymux(&["--config", cfg, "keys", "set", "home", "--priority", "2"], &env, "").await;
    assert!(ok && out.contains("next start"), "{out}{err}");
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(text.starts_with("# keymux test config") && text.contains("priority = 2"), "{text}");
    let (ok, out, err) = run_keymux(&["--config", cfg, "keys", "remove", "spare"], &env, "").await;
    assert!(ok, "{out}{err}");

    // Remove one key: gone from the config and the keychain.
    let (ok, out, err) = run_keymux(&["--config", cfg, "keys", "remove", "work"], &env, "").await;
    assert!(ok, "{err}");
    produced += &(out + &err);
    let (_, out, _) = run_keymux(&["--config", cfg, "keys", "list"], &env, "").await;
    assert!(!out.lines().any(|l| l.starts_with("work")), "{out}");
    let gone = std::process::Command::new("secret-tool")
        .args(["lookup", "service", &service, "username", &format!("key:{}", ids[0])])
        .output();
    let out = gone.expect("secret-tool runs");
    assert!(out.stdout.is_empty(), "secret deleted from the keychain");

    // Clean up the rest, then check nothing this run printed carries a secret.
    for args in [["keys", "remove", "home"], ["token", "revoke", "codex"]] {
        let (ok, out, err) = run_keymux(&[&["--config", cfg][..], &args[..]].concat(), &env, "").await;
        assert!(ok, "{err}");
        produced += &(out + &err);
    }
    let config_text = std::fs::read_to_string(&config).unwrap();
    assert!(!config_text.contains("[[keys]]") && !config_text.contains("[[tokens]]"), "{config_text}");
    assert_no_secrets("command output", &produced, &["sk-kc-work-1", "sk-kc-home-2", &token]);
}

/// Keys, tokens, the dashboard link and pausing, changed from other processes while the gateway runs:
/// each takes effect at once. Returns what the commands printed (but the secrets they exist to print),
/// and those secrets: the gateway must never log them.
async fn changes_reach_the_running_gateway(
    sim: &keymux_sim::Sim,
    cfg: &str,
    env: &[(String, String)],
    keymux: &Keymux,
) -> (String, Vec<String>) {
    let mut produced = String::new();
    let c = client();
    let token = run_keymux(&["--config", cfg, "token", "show", "codex"], env, "").await.1.trim().to_owned();
    let embed = |token: String| {
        let c = c.clone();
        let url = format!("{}/embeddings", keymux.base);
        async move {
            let body = json!({"model": "text-embedding-3-small", "input": "hi"});
            c.post(url).bearer_auth(token).json(&body).send().await.unwrap().status().as_u16()
        }
    };

    // A key added now joins the pool: the next unpinned requests reach it.
    let (ok, out, err) =
        run_keymux(&["--config", cfg, "keys", "add", "--label", "spare"], env, "sk-kc-spare-3\n").await;
    assert!(ok && out.contains("running gateway"), "{out}{err}");
    produced += &(out + &err);
    for _ in 0..3 {
        assert_eq!(embed(token.clone()).await, 200);
    }
    assert!(client_counts(sim).get("sk-kc-spare-3").is_some_and(|n| *n > 0), "the added key serves");
    let (ok, out, err) = run_keymux(&["--config", cfg, "keys", "set", "spare", "--priority", "1"], env, "").await;
    assert!(ok && out.contains("running gateway"), "{out}{err}");
    produced += &(out + &err);

    // A token made now is accepted at once, and refused at once when revoked.
    let (ok, second, err) = run_keymux(&["--config", cfg, "token", "create", "--name", "second"], env, "").await;
    assert!(ok, "{err}");
    let second = second.trim().to_owned();
    assert_eq!(embed(second.clone()).await, 200);
    let (ok, out, err) = run_keymux(&["--config", cfg, "token", "revoke", "second"], env, "").await;
    assert!(ok, "{out}{err}");
    assert_eq!(embed(second.clone()).await, 401, "a revoked token is refused at once");

    // A fresh one-time dashboard link, good once.
    let (ok, link, err) = run_keymux(&["--config", cfg, "dashboard"], env, "").await;
    assert!(ok && link.trim().starts_with(&format!("{}/login?code=", keymux.root)), "{link}{err}");
    let no_redirects = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let first = no_redirects.get(link.trim()).send().await.unwrap();
    assert_eq!(first.status(), 303);
    let location = first.headers()["location"].to_str().unwrap().to_owned();
    let code = location.strip_prefix("/#login=").unwrap_or_else(|| panic!("went to {location}"));
    let session = |code: String| {
        let url = format!("{}/keymux/api/session", keymux.root);
        async move { client().post(url).json(&json!({ "code": code })).send().await.unwrap().status().as_u16() }
    };
    assert_eq!(session(code.to_owned()).await, 200, "the page exchanges the code for its session");
    assert_eq!(session(code.to_owned()).await, 401, "the code works once");
    assert_eq!(no_redirects.get(link.trim()).send().await.unwrap().status(), 403, "so does the link");

    // Pause and resume from the CLI.
    assert!(run_keymux(&["--config", cfg, "pause"], env, "").await.0);
    assert_eq!(embed(token.clone()).await, 503);
    assert!(run_keymux(&["--config", cfg, "resume"], env, "").await.0);
    assert_eq!(embed(token.clone()).await, 200);
    let code = link.trim().rsplit('=').next().unwrap_or_default().to_owned();
    (produced, vec![second, code])
}

/// `keymux setup` with no gateway running: the client token is made in the keychain (and listed in the
/// config), the base URL comes from the config's `listen`, and a second run reuses the token, so it
/// finds nothing to change instead of minting `codex-2`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_without_a_gateway_makes_the_token_in_the_keychain_and_reuses_it() {
    require_secret_service();
    let home = tempfile::tempdir().unwrap();
    let config = isolated_config(home.path(), "http://127.0.0.1:9/v1");
    // Nothing listens on port 1: the CLI works offline.
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("listen = \"127.0.0.1:1\"\n{text}")).unwrap();
    let cfg = config.to_str().unwrap();
    let mut env: Vec<(String, String)> =
        base_env(home.path()).into_iter().filter(|(k, _)| k != "XDG_DATA_HOME").collect();
    env.push(("XDG_DATA_HOME".into(), home.path().join("data").display().to_string()));
    let file = home.path().join("codex/config.toml");
    let original = format!("{EXISTING_CODEX_CONFIG_HEAD}{EXISTING_CODEX_CONFIG_TAIL}");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, &original).unwrap();
    let setup = ["--config", cfg, "setup", "codex", "--file", file.to_str().unwrap(), "--yes"];

    let (ok, out, err) = run_keymux(&setup, &env, "").await;
    assert!(ok && out.contains("client token 'codex'"), "{out}{err}");
    let mut produced = out + &err;
    let written: toml::Value = toml::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(written["openai_base_url"].as_str(), Some("http://127.0.0.1:1/v1"), "the config's listen address");
    let auth = file.with_file_name("auth.json");
    let held: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&auth).unwrap()).unwrap();
    let token = held["OPENAI_API_KEY"].as_str().unwrap().to_owned();
    let (ok, shown, err) = run_keymux(&["--config", cfg, "token", "show", "codex"], &env, "").await;
    assert!(ok && shown.trim() == token, "the file holds the keychain's token 'codex': {err}");

    let (ok, out, err) = run_keymux(&setup, &env, "").await;
    assert!(ok && out.contains("nothing to change"), "{out}{err}");
    produced += &(out + &err);
    assert!(!std::fs::read_to_string(&config).unwrap().contains("codex-2"), "no second token");

    let undo = ["--config", cfg, "setup", "codex", "--undo"];
    let (ok, out, err) = run_keymux(&undo, &env, "").await;
    assert!(ok, "{out}{err}");
    produced += &(out + &err);
    assert_eq!(std::fs::read(&file).unwrap(), original.as_bytes());
    assert!(!auth.exists(), "the auth.json Keymux created is gone");
    assert!(run_keymux(&["--config", cfg, "token", "revoke", "codex"], &env, "").await.0);
    assert_no_secrets("keymux setup's output", &produced, &[&token]);
}
