//! The dashboard's "Set up Codex" through the control API of the real binary, with the real keychain:
//! the preview names both files and offers the API key Codex's `auth.json` holds, a refusal names the
//! choice that makes it (`setup_needs_force`), the yes imports the key (probed: its organization is
//! known) and writes exactly what was shown, a file edited after the preview is never overwritten
//! (409 `setup_changed_since_preview`), a preview is confirmed once, and Undo puts `auth.json` back
//! byte for byte. The first-run import lists the keys found (masked) and imports only the picked ones.
//! No secret is in any answer or in the output.
#![allow(clippy::unwrap_used, clippy::disallowed_methods, reason = "tests")]

use crate::support;

use std::path::{Path, PathBuf};

use keymux_sim::{Sim, SimConfig};
use serde_json::{json, Value};
use support::admin::Admin;
use support::*;

const CODEX_KEY: &str = "sk-setup-api-codex-0001aaaa";
const SETTINGS: &str = "# my Codex settings\nmodel = \"gpt-5.5\"\n";

struct Setup {
    home: tempfile::TempDir,
    keymux: Keymux,
    admin: Admin,
}

impl Setup {
    fn codex(&self, file: &str) -> PathBuf {
        self.home.path().join(".codex").join(file)
    }

    async fn preview(&self, body: Value) -> (u16, Value) {
        self.admin.post_json("/setup/codex/preview", Some(body)).await
    }

    async fn confirm(&self, id: &Value) -> (u16, Value) {
        self.admin.post_json(&format!("/setup/codex/confirm/{}", id.as_str().unwrap()), None).await
    }

    async fn codex_set_up(&self) -> bool {
        let all = self.admin.get_json("/setup").await;
        let codex = all.as_array().unwrap().iter().find(|c| c["client"] == "codex").unwrap().clone();
        assert_eq!(codex["file"].as_str().map(PathBuf::from), Some(self.codex("config.toml")), "{codex}");
        codex["set_up"].as_bool().unwrap()
    }
}

/// A gateway whose home holds a Codex config and an `auth.json` with an API key of `org-s`, the one
/// organization the simulator has; no keys in the pool yet.
async fn start(sim: &Sim) -> Setup {
    start_with(sim, &[]).await
}

/// [`start`] with more variables in the gateway's environment.
async fn start_with(sim: &Sim, vars: &[(&str, &str)]) -> Setup {
    assert!(
        std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_some(),
        "the keychain tests need a Secret Service in a D-Bus session: run them through `scripts/test`"
    );
    let home = tempfile::tempdir().unwrap();
    let cfg = home.path().join("config.toml");
    let service = format!("keymux-setup-api-{}", std::process::id());
    std::fs::write(&cfg, format!("keychain_service = \"{service}\"\nupstream = \"{}\"\n", sim.base_url())).unwrap();
    std::fs::create_dir_all(home.path().join(".codex")).unwrap();
    std::fs::write(home.path().join(".codex/config.toml"), SETTINGS).unwrap();
    let auth = format!("{{\n  \"auth_mode\": \"apikey\",\n  \"OPENAI_API_KEY\": \"{CODEX_KEY}\"\n}}\n");
    std::fs::write(home.path().join(".codex/auth.json"), auth).unwrap();
    let mut env = base_env(home.path());
    env.push(("XDG_DATA_HOME".into(), home.path().join("data").display().to_string()));
    env.extend(vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    let keymux = Keymux::spawn(&["--config", cfg.to_str().unwrap()], &env).await;
    let admin = Admin::new(&keymux.root);
    Setup { home, keymux, admin }
}

fn file_paths(answer: &Value) -> Vec<PathBuf> {
    answer["files"].as_array().unwrap().iter().map(|f| PathBuf::from(f["path"].as_str().unwrap())).collect()
}

/// The client token Codex's `auth.json` holds now.
fn token_in(auth: &Path) -> String {
    let held: Value = serde_json::from_slice(&std::fs::read(auth).unwrap()).unwrap();
    held["OPENAI_API_KEY"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboards_setup_imports_the_key_writes_what_it_showed_and_undoes_byte_for_byte() {
    let sim = Sim::start(SimConfig::new().org("org-s", &[CODEX_KEY])).await.unwrap();
    let s = start(&sim).await;
    let auth_before = std::fs::read(s.codex("auth.json")).unwrap();
    let mut answers = String::new();
    assert!(!s.codex_set_up().await);

    // The plain preview: both files, the key found and offered, a stand-in for the token to make.
    let (status, plain) = s.preview(json!({})).await;
    answers.push_str(&plain.to_string());
    assert_eq!(status, 200, "{plain}");
    assert_eq!(file_paths(&plain), [s.codex("config.toml"), s.codex("auth.json")]);
    assert!(plain["files"][0]["diff"].as_str().unwrap().contains("+openai_base_url = "), "{plain}");
    assert_eq!((plain["finds_api_key"].as_bool(), plain["makes_token"].as_bool()), (Some(true), Some(true)));

    // The person chooses to import it; the yes applies exactly that preview, once.
    let (status, shown) = s.preview(json!({ "import_label": "codex-own" })).await;
    assert_eq!(status, 200, "{shown}");
    let (status, done) = s.confirm(&shown["id"]).await;
    answers.push_str(&done.to_string());
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["imported"], "codex-own", "{done}");
    assert_eq!(s.confirm(&shown["id"]).await.0, 404, "a preview is confirmed once");
    let keys = s.admin.get_json("/keys").await;
    let key = keys.as_array().unwrap().iter().find(|k| k["label"] == "codex-own").expect("the key joined");
    assert_eq!(key["org"], "org-s", "probed, so its organization is known: {key}");
    let config = std::fs::read_to_string(s.codex("config.toml")).unwrap();
    assert!(config.starts_with(SETTINGS) && config.contains(&format!("openai_base_url = \"{}\"", s.keymux.base)));
    let token = token_in(&s.codex("auth.json"));
    assert!(token.starts_with("km-") && s.codex_set_up().await, "the client's own token in auth.json");
    assert_eq!(small_request_as(&client(), &s.keymux.base, &token).await, 200, "the token it wrote works");

    // The plain preview's id is still held, but it showed the file as it was: refused, nothing written.
    let (status, refused) = s.confirm(&plain["id"]).await;
    assert_eq!((status, refused["error"]["code"].as_str()), (409, Some("setup_changed_since_preview")), "{refused}");

    let (status, undone) = s.admin.post_json("/setup/codex/undo", Some(json!({}))).await;
    assert_eq!(status, 200, "{undone}");
    assert_eq!(std::fs::read(s.codex("auth.json")).unwrap(), auth_before, "auth.json back byte for byte");
    assert_eq!(std::fs::read_to_string(s.codex("config.toml")).unwrap(), SETTINGS);
    assert!(!s.codex_set_up().await);

    let output = s.keymux.stop().await;
    assert_no_secrets("the control API's answers", &answers, &[CODEX_KEY, &token]);
    assert_no_secrets("keymux's output", &output, &[CODEX_KEY, &token]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_edited_after_the_preview_is_kept_and_a_refusal_names_its_choice() {
    let sim = Sim::start(SimConfig::new().org("org-s", &[CODEX_KEY])).await.unwrap();
    let s = start(&sim).await;

    let (status, shown) = s.preview(json!({})).await;
    assert_eq!(status, 200, "{shown}");
    let edited = format!("{SETTINGS}[tui]\nscreen_reader_detection_done = true\n");
    std::fs::write(s.codex("config.toml"), &edited).unwrap();
    let (status, refused) = s.confirm(&shown["id"]).await;
    assert_eq!((status, refused["error"]["code"].as_str()), (409, Some("setup_changed_since_preview")), "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("changed after the preview"), "{refused}");
    assert_eq!(std::fs::read_to_string(s.codex("config.toml")).unwrap(), edited, "the edit stays");
    assert!(!s.codex_set_up().await, "nothing to undo");
    let tokens = s.admin.get_json("/tokens").await;
    let codex_token = tokens.as_array().unwrap().iter().any(|t| t["name"] == "codex");
    assert!(!codex_token, "no token made for a refused setup: {tokens}");

    // Someone else's base URL: refused, naming it and the choice; with that choice, it goes through.
    let theirs = "http://10.9.8.7:4000/v1";
    std::fs::write(s.codex("config.toml"), format!("openai_base_url = \"{theirs}\"\n{SETTINGS}")).unwrap();
    let (status, refused) = s.preview(json!({})).await;
    assert_eq!((status, refused["error"]["code"].as_str()), (409, Some("setup_needs_force")), "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains(theirs), "{refused}");
    let (status, forced) = s.preview(json!({ "force": true })).await;
    assert_eq!(status, 200, "{forced}");
    assert!(forced["files"][0]["notes"].to_string().contains(theirs), "the note says what Undo puts back: {forced}");
    assert_eq!(s.confirm(&forced["id"]).await.0, 200);
    let (status, bad) = s.admin.post_json("/setup/vim/preview", Some(json!({}))).await;
    assert_eq!((status, bad["error"]["code"].as_str()), (404, Some("not_found")), "{bad}");
    s.keymux.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_run_offer_lists_the_keys_found_masked_and_imports_only_the_picked_ones() {
    const ENV_KEY: &str = "sk-setup-api-env-0002bbbb";
    let sim = Sim::start(SimConfig::new().org("org-s", &[CODEX_KEY, ENV_KEY])).await.unwrap();
    let s = start_with(&sim, &[("OPENAI_API_KEY", ENV_KEY)]).await;
    let auth = s.codex("auth.json");
    let offer = s.admin.get_json("/import").await;
    let text = offer.to_string();
    assert_no_secrets("the offer", &text, &[CODEX_KEY, ENV_KEY]);
    let keys = offer["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 2, "{offer}");
    let from_codex = keys.iter().find(|k| k["file"].as_str().is_some_and(|f| Path::new(f) == auth)).unwrap();
    assert_eq!((from_codex["masked"].as_str(), from_codex["label"].as_str()), (Some("sk-…aaaa"), Some("codex")));
    assert!(keys.iter().any(|k| k["source"] == "environment variable OPENAI_API_KEY" && k["masked"] == "sk-…bbbb"));
    assert!(s.admin.get_json("/keys").await.as_array().unwrap().is_empty(), "nothing imported by looking");

    // Only the picked key joins, probed and marked imported; its file loses the plaintext (backup kept).
    let pick = json!({ "fingerprints": [from_codex["fingerprint"]], "remove_plaintext": true });
    let (status, done) = s.admin.post_json("/import", Some(pick.clone())).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["imported"], json!(["codex"]), "{done}");
    let pooled = s.admin.get_json("/keys").await;
    assert_eq!(pooled.as_array().unwrap().len(), 1, "only the picked key: {pooled}");
    assert_eq!(pooled[0]["org"], "org-s", "{pooled}");
    let config = std::fs::read_to_string(s.home.path().join("config.toml")).unwrap();
    assert!(config.contains("imported = true"), "marked imported, so old sessions are looked for there: {config}");
    assert!(!std::fs::read_to_string(&auth).unwrap().contains(CODEX_KEY), "the plaintext copy is gone");
    let backups = std::fs::read_dir(auth.parent().unwrap()).unwrap().filter_map(Result::ok);
    assert!(backups.into_iter().any(|e| e.file_name().to_string_lossy().contains("keymux-backup")), "a backup is kept");
    let again = s.admin.get_json("/import").await;
    assert!(again["keys"].as_array().unwrap().iter().all(|k| k["source"] != from_codex["source"]), "{again}");
    let (status, done) = s.admin.post_json("/import", Some(json!({ "fingerprints": [] }))).await;
    assert_eq!((status, done["error"]["code"].as_str()), (400, Some("invalid_value")), "{done}");
    let output = s.keymux.stop().await;
    assert_no_secrets("keymux's output", &output, &[CODEX_KEY, ENV_KEY]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_the_provider_refuses_stops_the_setup_before_anything_is_written() {
    // The simulator knows another key: the one in auth.json is refused when it is probed.
    let sim = Sim::start(SimConfig::new().org("org-s", &["sk-setup-api-someone-else-9999"])).await.unwrap();
    let s = start(&sim).await;
    let files = || [std::fs::read(s.codex("config.toml")).unwrap(), std::fs::read(s.codex("auth.json")).unwrap()];
    let before = files();
    let (status, shown) = s.preview(json!({ "import_label": "codex" })).await;
    assert_eq!(status, 200, "{shown}");
    let (status, refused) = s.confirm(&shown["id"]).await;
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert_eq!(status, 400, "{refused}");
    assert!(message.contains(&s.codex("auth.json").display().to_string()), "names the file: {message}");
    assert!(message.contains("refused") && message.contains("Nothing was written"), "{message}");
    assert_eq!(files(), before, "neither file was touched");
    assert!(s.admin.get_json("/keys").await.as_array().unwrap().is_empty(), "the refused key was taken out");
    assert!(!s.codex_set_up().await);
    let output = s.keymux.stop().await;
    assert_no_secrets("keymux's output", &output, &[CODEX_KEY]);
}

/// The dashboard's preview is the library's: a key inside another value of Codex's config (a `notify`
/// header, a URL's query string, a comment) is masked in the diff the control API answers with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboards_preview_masks_keys_inside_other_values() {
    let sim = Sim::start(SimConfig::new().org("org-s", &[CODEX_KEY])).await.unwrap();
    let s = start(&sim).await;
    std::fs::write(s.codex("config.toml"), codex_config_with_keys_in_values()).unwrap();
    let (status, shown) = s.preview(json!({})).await;
    assert_eq!(status, 200, "{shown}");
    let diff = shown["files"][0]["diff"].as_str().unwrap();
    assert!(diff.contains("Authorization: Bearer sk-") && diff.contains("?api_key=sk-"), "the lines are shown: {diff}");
    assert_no_secrets("the preview's answer", &shown.to_string(), &KEYS_IN_VALUES);
    let output = s.keymux.stop().await;
    assert_no_secrets("keymux's output", &output, &KEYS_IN_VALUES);
}

/// A refusal the dashboard shows (409) quotes the value that made it, with a key in it masked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_quoting_a_value_with_a_key_in_it_answers_no_key() {
    let sim = Sim::start(SimConfig::new().org("org-s", &[CODEX_KEY])).await.unwrap();
    let s = start(&sim).await;
    let key = "sk-proj-refused0123456789abcdefXYZ";
    let theirs = format!("https://proxy.example.test/v1?api_key={key}");
    std::fs::write(s.codex("config.toml"), format!("openai_base_url = \"{theirs}\"\n{SETTINGS}")).unwrap();
    let (status, refused) = s.preview(json!({})).await;
    assert_eq!((status, refused["error"]["code"].as_str()), (409, Some("setup_needs_force")), "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("https://proxy.example.test/v1?api_key=sk-"), "names the URL: {refused}");
    assert_no_secrets("the refusal", &refused.to_string(), &[key, "refused0123456789abcdef"]);
    let output = s.keymux.stop().await;
    assert_no_secrets("keymux's output", &output, &[key, "refused0123456789abcdef"]);
}
