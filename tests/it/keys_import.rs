//! `keymux keys import` through the real binary and the real keychain: keys already in Codex's
//! `auth.json`, the environment or a pasted list join the pool only once the user says yes, a key in
//! the pool already is recognised by its fingerprint, a key the provider refuses is not counted as
//! imported, the plaintext copy goes (a backup kept) only when asked, and no secret is printed or
//! written anywhere but the keychain and that backup.
#![allow(clippy::unwrap_used, clippy::disallowed_methods, reason = "tests")]

use crate::support;

use std::path::Path;

use keymux::api::types::KeyInfo;
use keymux_sim::{Sim, SimConfig};
use support::disk::{contains, every_file};
use support::*;

const CODEX_KEY: &str = "sk-imp-codex-0001aaaa";
const ENV_KEY: &str = "sk-imp-env-0002bbbbbb";
const LISTED: &str = "sk-imp-listed-0003cccc";
const HELD: &str = "sk-imp-held-0004dddddd";
const UNKNOWN: &str = "sk-imp-unknown-0005eeee";
const ALL: [&str; 5] = [CODEX_KEY, ENV_KEY, LISTED, HELD, UNKNOWN];

fn require_secret_service() {
    assert!(
        std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_some(),
        "the keychain tests need a Secret Service in a D-Bus session: run them through `scripts/test`"
    );
}

/// A config with a keychain service of its own (per test and process), pointing at the simulator.
fn config(home: &Path, name: &str, upstream: &str) -> std::path::PathBuf {
    let path = home.join("config.toml");
    let service = format!("keymux-import-{name}-{}", std::process::id());
    std::fs::write(&path, format!("keychain_service = \"{service}\"\nupstream = \"{upstream}\"\n")).unwrap();
    path
}

async fn cli(cfg: &Path, env: &[(String, String)], args: &[&str], stdin: &str) -> (bool, String, String) {
    let mut all = vec!["--config", cfg.to_str().unwrap()];
    all.extend_from_slice(args);
    run_keymux(&all, env, stdin).await
}

/// Every file under `home` except `skip`, checked for every secret.
fn assert_no_secret_files(home: &Path, skip: &[&Path]) {
    let mut files = Vec::new();
    every_file(home, &mut files);
    for (name, bytes) in files.iter().filter(|(name, _)| !skip.iter().any(|s| Path::new(name) == *s)) {
        for secret in ALL {
            assert!(!contains(bytes, secret), "{name} holds a secret ({}…)", &secret[..8]);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_in_codex_and_the_environment_are_imported_only_on_yes_and_the_plaintext_goes_when_asked() {
    require_secret_service();
    let sim = Sim::start(SimConfig::new().org("org-i", &[CODEX_KEY, ENV_KEY])).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let cfg = config(home.path(), "codex", &sim.base_url());
    let auth = home.path().join(".codex/auth.json");
    std::fs::create_dir_all(auth.parent().unwrap()).unwrap();
    let original = format!("{{\n  \"auth_mode\": \"apikey\",\n  \"OPENAI_API_KEY\": \"{CODEX_KEY}\"\n}}\n");
    std::fs::write(&auth, &original).unwrap();
    let mut env = base_env(home.path());
    env.push(("OPENAI_API_KEY".into(), ENV_KEY.into()));
    let mut printed = String::new();

    // No terminal and no --yes: the plan, and nothing written.
    let (ok, out, err) = cli(&cfg, &env, &["keys", "import", "--remove-plaintext"], "").await;
    assert!(ok, "{err}");
    printed.push_str(&(out.clone() + &err));
    assert!(out.contains("sk-…aaaa") && out.contains("codex") && out.contains(&auth.display().to_string()), "{out}");
    assert!(out.contains("sk-…bbbb") && out.contains("environment variable OPENAI_API_KEY"), "{out}");
    assert!(err.contains("nothing imported"), "{err}");
    assert_eq!(std::fs::read_to_string(&auth).unwrap(), original, "auth.json untouched without a yes");
    let (_, list, _) = cli(&cfg, &env, &["keys", "list"], "").await;
    assert!(list.contains("no keys yet"), "nothing imported without a yes: {list}");

    let (ok, out, err) = cli(&cfg, &env, &["keys", "import", "--yes", "--remove-plaintext"], "").await;
    assert!(ok, "{err}");
    printed.push_str(&(out.clone() + &err));
    assert!(out.contains("added key 'env'") && out.contains("added key 'codex'"), "{out}");
    assert!(out.contains("delete the line `export OPENAI_API_KEY=…`"), "{out}");
    assert!(out.contains("`keymux setup codex` puts a Keymux client token in its place"), "{out}");
    let after = std::fs::read_to_string(&auth).unwrap();
    assert_eq!(after, original.replace(&format!("\"{CODEX_KEY}\""), "null"), "only the key's value went");
    let backup = std::fs::read_dir(auth.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("auth.json.keymux-backup-"))
        .expect("a backup next to auth.json");
    assert_eq!(std::fs::read_to_string(&backup).unwrap(), original, "the backup is the file as it was");

    // Again: both keys are recognised by their fingerprint, nothing is added twice.
    let (ok, out, err) = cli(&cfg, &env, &["keys", "import", "--yes"], "").await;
    assert!(ok, "{err}");
    printed.push_str(&(out.clone() + &err));
    assert!(out.contains("already in the pool as 'env'"), "{out}");
    assert!(!out.contains("env-2"), "a pooled key goes by its label in the pool: {out}");
    assert!(!out.contains("sk-…aaaa"), "the key is gone from auth.json: {out}");
    let (_, list, _) = cli(&cfg, &env, &["keys", "list"], "").await;
    assert_eq!(list.matches("in keychain").count(), 2, "{list}");

    // The imported keys serve.
    let keymux = Keymux::spawn(&["--config", cfg.to_str().unwrap()], &env).await;
    let keys: Vec<KeyInfo> = serde_json::from_value(Admin::new(&keymux.root).get_json("/keys").await).unwrap();
    assert_eq!(keys.len(), 2);
    printed.push_str(&keymux.stop().await);
    assert_no_secrets("the output", &printed, &ALL);
    assert_no_secret_files(home.path(), &[&backup]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pasted_list_through_the_running_gateway_recognises_a_duplicate_and_names_a_refused_key() {
    require_secret_service();
    let sim = Sim::start(SimConfig::new().org("org-p", &[LISTED, HELD])).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let cfg = config(home.path(), "pasted", &sim.base_url());
    let env = base_env(home.path());
    let (ok, _, err) = cli(&cfg, &env, &["keys", "add", "--label", "work"], &format!("{HELD}\n")).await;
    assert!(ok, "{err}");
    let keymux = Keymux::spawn(&["--config", cfg.to_str().unwrap()], &env).await;
    let mut printed = String::new();

    // A line that is not a key: the list is refused by its line, nothing imported.
    let (ok, out, err) =
        cli(&cfg, &env, &["keys", "import", "--from", "-", "--yes"], &format!("{LISTED}\nhello\n")).await;
    printed.push_str(&(out.clone() + &err));
    assert!(!ok, "a bad list fails");
    assert!(err.contains("stdin line 2"), "{err}");

    let list = format!("# my keys\n\nmine={LISTED}\n{HELD}\nbad={UNKNOWN}\n");
    let (ok, out, err) = cli(&cfg, &env, &["keys", "import", "--from", "-", "--yes"], &list).await;
    printed.push_str(&(out.clone() + &err));
    assert!(out.contains("already in the pool as 'work'"), "{out}");
    assert!(out.contains("added key 'mine'") && out.contains("organization: org-p"), "the probe's verdict: {out}");
    assert!(out.contains("bad (sk-…eeee): not imported: the provider refused this key"), "{out}");
    assert!(out.contains("taken out of the pool again"), "{out}");
    assert!(!ok, "a refused key makes the run fail: {err}");

    let keys: Vec<KeyInfo> = serde_json::from_value(Admin::new(&keymux.root).get_json("/keys").await).unwrap();
    let labels: Vec<&str> = keys.iter().map(|k| k.status.label.as_str()).collect();
    assert!(labels.contains(&"mine") && labels.contains(&"work"), "{labels:?}");
    assert_eq!(labels.iter().filter(|l| **l == "work").count(), 1, "the duplicate is not added twice");
    assert!(!labels.contains(&"bad"), "a refused key is not kept: {labels:?}");
    printed.push_str(&keymux.stop().await);
    assert_no_secrets("the output", &printed, &ALL);
    assert_no_secret_files(home.path(), &[]);
}

/// With a gateway running, `keys import` adds through it: a key found in Codex's own login keeps the
/// `imported` mark (which ranks the organizations a pre-Keymux session is looked for on) in the config
/// the running gateway writes, as it does offline; a pasted key is not marked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_imported_through_the_running_gateway_stays_marked_imported() {
    require_secret_service();
    let sim = Sim::start(SimConfig::new().org("org-m", &[CODEX_KEY, LISTED])).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let cfg = config(home.path(), "marked", &sim.base_url());
    let auth = home.path().join(".codex/auth.json");
    std::fs::create_dir_all(auth.parent().unwrap()).unwrap();
    std::fs::write(&auth, format!("{{\"auth_mode\": \"apikey\", \"OPENAI_API_KEY\": \"{CODEX_KEY}\"}}\n")).unwrap();
    let env = base_env(home.path());
    let keymux = Keymux::spawn(&["--config", cfg.to_str().unwrap()], &env).await;

    let (ok, out, err) = cli(&cfg, &env, &["keys", "import", "--yes"], "").await;
    assert!(ok, "{err}");
    assert!(out.contains("added key 'codex'") && out.contains("the running gateway"), "{out}");
    let (ok, out, err) =
        cli(&cfg, &env, &["keys", "import", "--from", "-", "--yes"], &format!("pasted={LISTED}\n")).await;
    assert!(ok, "{err}");
    assert!(out.contains("added key 'pasted'"), "{out}");

    let text = std::fs::read_to_string(&cfg).unwrap();
    let config = keymux::config::Config::parse(&text, &cfg).unwrap();
    let entry = |label: &str| config.keys.iter().find(|k| k.label == label).map(|k| k.imported);
    assert_eq!(entry("codex"), Some(true), "the config keeps the mark: {text}");
    assert_eq!(entry("pasted"), Some(false), "{text}");
    keymux.stop().await;
}
