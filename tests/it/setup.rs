//! Setting up clients: Keymux edits a real Codex config a user already has, real Codex then reaches the
//! provider through Keymux with nothing exported, and Undo gives the user their file back byte for
//! byte. The `keymux setup` command does the same against a running gateway, never printing a secret.
#![allow(clippy::unwrap_used, reason = "tests")]

use crate::support;

use std::path::Path;

use keymux::secrets::Secret;
use keymux::setup::{self, Client, SetupError};
use keymux_sim::{Sim, SimConfig};
use support::*;

/// The Codex config of a user who has another provider chosen, with a comment on that line.
fn existing_codex_config() -> String {
    format!("{EXISTING_CODEX_CONFIG_HEAD}model_provider = \"other\"   # the one I use\n{EXISTING_CODEX_CONFIG_TAIL}")
}

/// A pi models.json a user already has: a provider of their own whose key is a literal.
const EXISTING_PI_MODELS: &str = r#"{"providers": {"work": {"baseUrl": "https://llm.example.test/v1", "api": "openai-responses",
  "apiKey": "sk-work-literal-key-0a1b2c3d4e5f", "models": [{"id": "gpt-5.5"}]}}}
"#;

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// Asserts that real Codex, with only `codex_home` and no token in its environment, got an answer from
/// the simulator through Keymux.
async fn codex_reaches_the_provider(codex_home: &Path, sim: &Sim) {
    let before = sim.log().last().map_or(0, |e| e.seq);
    let (ok, output) = run_codex_in(codex_home, &[], "Say hi").await;
    let config = std::fs::read_to_string(codex_home.join("config.toml")).unwrap_or_default();
    assert!(ok, "Codex failed with the file Keymux set up:\n{output}");
    // Over HTTP (a custom provider) or WebSocket (the built-in one, which opens with `GET`).
    let reached = sim.log().iter().any(|e| e.seq > before && e.path == "/v1/responses");
    assert!(reached, "Codex's request reached the provider through Keymux:\n{output}");
    assert!(output.contains("SIM-REPLY"), "Codex printed the provider's answer:\n{output}");
    assert!(config.contains("[model_providers.keymux]") || config.contains("openai_base_url"), "the setup stays");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_codex_runs_on_the_config_keymux_set_up_and_undo_gives_the_file_back() {
    let h = Harness::start(SimConfig::new().org("org-a", &["sk-a1"]), &[key("a1", "sk-a1")]).await;
    let dir = tempfile::tempdir().unwrap();
    let codex_home = dir.path().join("codex");
    let path = codex_home.join("config.toml");
    let original = existing_codex_config();
    write(&path, &original);
    let state = dir.path().join("state");

    let plan = setup::plan(Client::Codex, &path, &h.base, &Secret::new(TOKEN)).unwrap();
    assert!(plan.preview().contains("model_provider was \"other\""), "{}", plan.preview());
    assert_no_secrets("the preview", plan.preview(), &[TOKEN]);
    let applied = setup::apply(&plan, &state).unwrap();
    assert!(applied.backup.is_some());

    // The token reaches Codex only through the file: KEYMUX_TOKEN is not in its environment.
    codex_reaches_the_provider(&codex_home, &h.sim).await;

    setup::undo(Client::Codex, &state, false).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), original.as_bytes(), "the user's file, byte for byte");
    assert!(setup::status(Client::Codex, &state).unwrap().is_none(), "nothing left to undo");
}

#[test]
fn a_config_edited_after_setup_is_only_undone_with_force() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("codex/config.toml");
    let original = existing_codex_config();
    write(&path, &original);
    let state = dir.path().join("state");
    let plan = setup::plan(Client::Codex, &path, "http://127.0.0.1:8787/v1", &Secret::new(TOKEN)).unwrap();
    setup::apply(&plan, &state).unwrap();
    let edited = std::fs::read_to_string(&path).unwrap().replace("\"gpt-5.5\"", "\"gpt-5.5-codex\"");
    std::fs::write(&path, &edited).unwrap();

    let refused = setup::undo(Client::Codex, &state, false).unwrap_err();
    assert!(matches!(refused, SetupError::EditedSince { .. }), "{refused}");
    assert!(refused.to_string().contains("was changed after Keymux set up Codex"), "{refused}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), edited, "the user's edit is untouched");
    assert!(setup::status(Client::Codex, &state).unwrap().is_some_and(|s| s.edited_since));

    let undone = setup::undo(Client::Codex, &state, true).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), original.as_bytes());
    assert_eq!(std::fs::read_to_string(undone.kept.unwrap()).unwrap(), edited, "and still kept");
}

/// pi 0.73 reads a Responses provider as `{baseUrl, api: "openai-responses", apiKey, models: [{id, name,
/// reasoning, input, contextWindow, maxTokens}]}` (the client facts, §3.1); `apiKey` may be the token
/// itself. There is no pi binary here, so the shape is checked against that, and undone.
#[test]
fn the_pi_models_file_has_the_shape_pi_reads_and_undo_gives_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pi/agent/models.json");
    write(&path, EXISTING_PI_MODELS);
    let state = dir.path().join("state");
    let plan = setup::plan(Client::Pi, &path, "http://127.0.0.1:8787/v1", &Secret::new(TOKEN)).unwrap();
    assert_no_secrets("the preview", plan.preview(), &[TOKEN, "sk-work-literal-key-0a1b2c3d4e5f"]);
    setup::apply(&plan, &state).unwrap();

    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.ends_with("}\n") && text.contains("\n  \"providers\": {\n    \"work\": {\n      \"baseUrl\""));
    let models: serde_json::Value = serde_json::from_str(&text).unwrap();
    let providers: Vec<&String> = models["providers"].as_object().unwrap().keys().collect();
    assert_eq!(providers, ["work", "keymux"], "the user's provider first, as it was");
    assert_eq!(models["providers"]["work"]["apiKey"], "sk-work-literal-key-0a1b2c3d4e5f");
    let keymux = &models["providers"]["keymux"];
    let keys: Vec<&String> = keymux.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["baseUrl", "api", "apiKey", "models"]);
    assert_eq!(
        (&keymux["baseUrl"], &keymux["api"], &keymux["apiKey"]),
        (&"http://127.0.0.1:8787/v1".into(), &"openai-responses".into(), &TOKEN.into())
    );
    let model = keymux["models"][0].as_object().unwrap();
    let fields: Vec<&String> = model.keys().collect();
    assert_eq!(fields, ["id", "name", "reasoning", "input", "contextWindow", "maxTokens"]);
    assert_eq!(model["input"], serde_json::json!(["text", "image"]));
    // Round trip: what Keymux wrote is what it reads back as already set up.
    assert!(!setup::plan(Client::Pi, &path, "http://127.0.0.1:8787/v1", &Secret::new(TOKEN))
        .unwrap()
        .changes_anything());

    setup::undo(Client::Pi, &state, false).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), EXISTING_PI_MODELS);
}

/// A gateway run by the `keymux` binary in front of a simulator organization with two keys (one of
/// them the gateway's), its setup records in the test's own data directory: the simulator, the home
/// directory, the environment and config path for `keymux` commands, the gateway.
async fn cli_gateway() -> (Sim, tempfile::TempDir, Vec<(String, String)>, String, Keymux) {
    let sim = Sim::start(SimConfig::new().org("org-a", &["sk-cli-a1", "sk-cli-a2"])).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let cfg = home.path().join("keymux.toml").display().to_string();
    let mut env: Vec<(String, String)> =
        base_env(home.path()).into_iter().filter(|(k, _)| k != "XDG_DATA_HOME").collect();
    env.push(("XDG_DATA_HOME".into(), home.path().join("data").display().to_string()));
    env.push(("KEYMUX_KEY_A1".into(), "sk-cli-a1".into()));
    env.push(("KEYMUX_CLIENT_TOKEN".into(), TOKEN.into()));
    let keymux = Keymux::spawn(&["--ephemeral", "--upstream", &sim.base_url(), "--config", &cfg], &env).await;
    (sim, home, env, cfg, keymux)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_setup_command_works_through_a_running_gateway_and_prints_no_secret() {
    let (sim, home, env, cfg, keymux) = cli_gateway().await;
    let cfg = cfg.as_str();
    let codex_home = home.path().join("codex");
    let path = codex_home.join("config.toml");
    let file = path.to_str().unwrap();
    let mut printed = String::new();

    // A config that chooses another provider would bypass the built-in one: refused, nothing written.
    write(&path, &existing_codex_config());
    let (ok, out, err) = run_keymux(&["--config", cfg, "setup", "codex", "--file", file, "--yes"], &env, "").await;
    assert!(!ok && err.contains("model_provider = \"other\"") && err.contains("--custom-provider"), "{out}{err}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), existing_codex_config());

    let original = format!("{EXISTING_CODEX_CONFIG_HEAD}{EXISTING_CODEX_CONFIG_TAIL}");
    write(&path, &original);
    let auth_path = codex_home.join("auth.json");
    let auth = "{\n  \"auth_mode\": \"apikey\",\n  \"OPENAI_API_KEY\": \"sk-cli-a2\"\n}";
    write(&auth_path, auth);

    // Not on a terminal and no --yes: the preview, and nothing written.
    let (ok, out, err) = run_keymux(&["--config", cfg, "setup", "codex", "--file", file], &env, "").await;
    printed.push_str(&format!("{out}{err}"));
    assert!(ok, "{out}{err}");
    assert!(out.contains(&format!("+openai_base_url = \"{}\"", keymux.base)), "{out}");
    assert!(out.contains("auth.json holds an OpenAI API key") && out.contains("--import-key"), "{out}");
    assert!(err.contains("--yes"), "says how to apply: {err}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), original);

    let setup = ["--config", cfg, "setup", "codex", "--file", file, "--import-key", "--yes"];
    let (ok, out, err) = run_keymux(&setup, &env, "").await;
    printed.push_str(&format!("{out}{err}"));
    assert!(ok, "{out}{err}");
    assert!(out.contains("added key 'codex'"), "the key in auth.json joined the pool: {out}");
    let written = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        written,
        original.replace(
            "check_for_update_on_startup = false\n",
            &format!("check_for_update_on_startup = false\nopenai_base_url = \"{}\"\n", keymux.base)
        )
    );
    let held: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&auth_path).unwrap()).unwrap();
    let token = held["OPENAI_API_KEY"].as_str().unwrap().to_owned();
    assert!(token.starts_with("km-") && token != TOKEN, "a token of Codex's own");
    assert!(out.contains("client token 'codex'") && out.contains("codex resume` lists the ones from before"), "{out}");
    assert!(out.contains("keymux setup codex --undo"), "{out}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(std::fs::metadata(&auth_path).unwrap().permissions().mode() & 0o777, 0o600);
    }
    let (ok, out, err) = run_keymux(&["--config", cfg, "keys", "list"], &env, "").await;
    assert!(ok && out.contains("codex"), "{out}{err}");

    // The token the gateway made is accepted at once.
    codex_reaches_the_provider(&codex_home, &sim).await;

    let (ok, out, err) = run_keymux(&["--config", cfg, "setup", "codex", "--file", file, "--undo"], &env, "").await;
    printed.push_str(&format!("{out}{err}"));
    assert!(ok, "{out}{err}");
    assert!(out.contains("takes out Keymux's line") && out.contains("auth.json is back as it was"), "{out}");
    assert_eq!(std::fs::read(&path).unwrap(), original.as_bytes());
    assert_eq!(std::fs::read_to_string(&auth_path).unwrap(), auth, "the user's key is back in auth.json");

    // pi the same way, into a file that does not exist yet.
    let models = home.path().join("pi/agent/models.json");
    let pi_file = models.to_str().unwrap();
    let (ok, out, err) = run_keymux(&["--config", cfg, "setup", "pi", "--file", pi_file, "--yes"], &env, "").await;
    printed.push_str(&format!("{out}{err}"));
    assert!(ok && out.contains("client token 'pi'") && out.contains("Undo deletes it"), "{out}{err}");
    let written: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&models).unwrap()).unwrap();
    let pi_token = written["providers"]["keymux"]["apiKey"].as_str().unwrap().to_owned();
    assert!(pi_token.starts_with("km-") && pi_token != token);
    let (ok, out, err) = run_keymux(&["--config", cfg, "setup", "pi", "--undo"], &env, "").await;
    printed.push_str(&format!("{out}{err}"));
    assert!(ok && !models.exists(), "{out}{err}");

    printed.push_str(&keymux.stop().await);
    assert_no_secrets("what keymux printed", &printed, &[&token, &pi_token, TOKEN, "sk-cli-a1", "sk-cli-a2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_old_codex_setup_is_moved_over_printing_how_to_resume_its_sessions_and_a_chatgpt_login_is_refused() {
    let (_sim, home, env, cfg, keymux) = cli_gateway().await;
    let path = home.path().join("codex/config.toml");
    let original = format!("{EXISTING_CODEX_CONFIG_HEAD}{EXISTING_CODEX_CONFIG_TAIL}");
    write(&path, &original);
    let file = path.to_str().unwrap();
    let setup = |extra: &'static [&'static str]| {
        let mut args = vec!["--config", cfg.as_str(), "setup", "codex", "--file", file, "--yes"];
        args.extend_from_slice(extra);
        args
    };

    // A ChatGPT login is not an API key: refused, and the other form offered.
    let auth = path.with_file_name("auth.json");
    let login = "{\"OPENAI_API_KEY\": null, \"tokens\": {\"access_token\": \"eyJ-chatgpt-access-0123456789\"}}";
    write(&auth, login);
    let (ok, out, err) = run_keymux(&setup(&[]), &env, "").await;
    assert!(!ok && err.contains("ChatGPT login") && err.contains("--custom-provider"), "{out}{err}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), original, "nothing written");

    let (ok, out, err) = run_keymux(&setup(&["--custom-provider"]), &env, "").await;
    assert!(ok && out.contains("+model_provider = \"keymux\""), "{out}{err}");
    assert_eq!(std::fs::read_to_string(&auth).unwrap(), login, "the login is left alone");

    // The user logs in with a key Keymux pools already; setup again moves the config over.
    write(&auth, "{\"auth_mode\": \"apikey\", \"OPENAI_API_KEY\": \"sk-cli-a1\"}");
    let (ok, out, err) = run_keymux(&setup(&["--import-key"]), &env, "").await;
    assert!(ok && out.contains("in Keymux's pool already: not added again"), "{out}{err}");
    assert_no_secrets("the preview of a key's replacement", &format!("{out}{err}"), &["sk-cli-a1", TOKEN]);
    assert!(out.contains("-model_provider = \"keymux\"") && out.contains("+openai_base_url = "), "{out}");
    assert!(out.contains("codex resume -c model_provider=keymux <SESSION_ID>"), "the resume command: {out}");
    let moved = std::fs::read_to_string(&path).unwrap();
    assert!(!moved.contains("model_provider = ") && moved.contains("[model_providers.keymux]"), "{moved}");

    let undo = ["--config", cfg.as_str(), "setup", "codex", "--undo"];
    let (ok, out, err) = run_keymux(&undo, &env, "").await;
    assert!(ok && out.contains("model_provider=keymux"), "the table stays, and why: {out}{err}");
    let undone = std::fs::read_to_string(&path).unwrap();
    assert_eq!(undone, moved.replace(&format!("openai_base_url = \"{}\"\n", keymux.base), ""));
    assert!(std::fs::read_to_string(&auth).unwrap().contains("sk-cli-a1"), "the user's key is back");
    keymux.stop().await;
}

/// A key inside another value (a `notify` command's `Authorization: Bearer` header, a URL's query
/// string, a comment) is masked wherever the preview shows it, as any key or token is: the preview's
/// diff shows those lines, not the keys.
#[test]
fn the_preview_masks_keys_inside_other_values() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("codex/config.toml");
    write(&path, &codex_config_with_keys_in_values());
    let state = dir.path().join("state");
    let base = "http://127.0.0.1:8787/v1";
    let shown = setup::preview_with(Client::Codex, &path, base, None, setup::Choices::default(), Some(&state)).unwrap();
    let text = shown.text();
    for context in ["Authorization: Bearer sk-", "?api_key=sk-", "for later: sk-", "Keymux's: kma-", "?token=km-"] {
        assert!(text.contains(context), "the preview shows the line around {context}…:\n{text}");
    }
    assert_no_secrets("the preview", &text, &KEYS_IN_VALUES);
}

/// A Codex `auth.json` kept in a dotfiles repository and linked into Codex's home: setup writes through
/// the link and keeps it, and the backup (the file from before, holding the API key) goes next to the
/// link, never into the repository; Undo gives the linked file back byte for byte.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_on_a_linked_auth_json_keeps_its_backup_beside_the_link_out_of_the_linked_directory() {
    let (_sim, home, env, cfg, keymux) = cli_gateway().await;
    let codex_home = home.path().join("codex");
    let path = codex_home.join("config.toml");
    let original = format!("{EXISTING_CODEX_CONFIG_HEAD}{EXISTING_CODEX_CONFIG_TAIL}");
    write(&path, &original);
    let dotfiles = home.path().join("dotfiles");
    let target = dotfiles.join("auth.json");
    let auth = "{\n  \"auth_mode\": \"apikey\",\n  \"OPENAI_API_KEY\": \"sk-cli-a2\"\n}";
    write(&target, auth);
    let link = codex_home.join("auth.json");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let file = path.to_str().unwrap();

    let (ok, out, err) = run_keymux(&["--config", &cfg, "setup", "codex", "--file", file, "--yes"], &env, "").await;
    assert!(ok, "{out}{err}");
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "the link stays");
    assert!(std::fs::read_to_string(&target).unwrap().contains("km-"), "written through the link");
    for entry in std::fs::read_dir(&dotfiles).unwrap() {
        let entry = entry.unwrap().path();
        let text = std::fs::read_to_string(&entry).unwrap_or_default();
        assert!(!text.contains("sk-cli-a2"), "{} holds the key", entry.display());
    }
    let beside: Vec<_> = std::fs::read_dir(&codex_home)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("auth.json.keymux-backup-"))
        .collect();
    assert_eq!(beside.len(), 1, "one backup beside the link: {beside:?}");
    assert_eq!(std::fs::read_to_string(&beside[0]).unwrap(), auth);

    let (ok, out, err) = run_keymux(&["--config", &cfg, "setup", "codex", "--undo"], &env, "").await;
    assert!(ok, "{out}{err}");
    assert_eq!(std::fs::read(&target).unwrap(), auth.as_bytes(), "the linked file is back byte for byte");
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "and is still linked");
    assert_eq!(std::fs::read(&path).unwrap(), original.as_bytes());
    keymux.stop().await;
}

/// A refusal quotes what the file says; a key in it (a base URL with `?api_key=sk-…`) is masked in
/// what the command prints, as in the preview.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_quoting_a_value_with_a_key_in_it_prints_no_key() {
    let (_sim, home, env, cfg, keymux) = cli_gateway().await;
    let path = home.path().join("codex/config.toml");
    let key = "sk-proj-refused0123456789abcdefXYZ";
    let config = format!("openai_base_url = \"https://proxy.example.test/v1?api_key={key}\"\nmodel = \"gpt-5.5\"\n");
    write(&path, &config);
    let file = path.to_str().unwrap();
    let (ok, out, err) = run_keymux(&["--config", &cfg, "setup", "codex", "--file", file, "--yes"], &env, "").await;
    assert!(!ok && err.contains("openai_base_url") && err.contains("--force"), "refused: {out}{err}");
    assert!(err.contains("https://proxy.example.test/v1?api_key=sk-"), "names the URL: {err}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), config, "nothing written");
    let printed = format!("{out}{err}{}", keymux.stop().await);
    assert_no_secrets("what keymux printed", &printed, &[key, "refused0123456789abcdef"]);
}
