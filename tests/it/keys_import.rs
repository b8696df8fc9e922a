//! `keymux keys import` through the real binary and the real keychain: keys already in Codex's
//! `auth.json`, the environment or a pasted list join the pool only once the user says yes, a key in
//! the pool already is recognised by its fingerprint, a key the provider refuses is not counted as
//! imported, the plaintext copy goes (a backup kept) only when asked, and no secret is printed or
//! written anywhere but the keychain and that backup.
#![allow(clippy::unwrap_used, clippy::disallowed_methods, reason = "tests")]

use crate::support;

use std::path::Path;

use keymux::api::types::KeyInfo;
use keymux::keys_import::{self, Origin};
use keymux::secrets::Secret;
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
    assert!(ok, "{out}{err}");
    printed.push_str(&(out.clone() + &err));
    assert!(out.contains("sk-…aaaa") && out.contains("codex") && out.contains(&auth.display().to_string()), "{out}");
    assert!(out.contains("sk-…bbbb") && out.contains("environment variable OPENAI_API_KEY"), "{out}");
    assert!(err.contains("nothing imported"), "{err}");
    assert_eq!(std::fs::read_to_string(&auth).unwrap(), original, "auth.json untouched without a yes");
    let (_, list, _) = cli(&cfg, &env, &["keys", "list"], "").await;
    assert!(list.contains("no keys yet"), "nothing imported without a yes: {list}");

    let (ok, out, err) = cli(&cfg, &env, &["keys", "import", "--yes", "--remove-plaintext"], "").await;
    assert!(ok, "{out}{err}");
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
    assert!(ok, "{out}{err}");
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

/// Codex's `auth.json` and pi's `models.json` kept in a dotfiles repository and linked into place: the
/// key goes out of the file the link names, the links stay links, and the output names the file that
/// changed. A link replaced by a plain file would leave the key in the repository while the import
/// said it was removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_the_plaintext_behind_a_symlink_edits_the_linked_file_and_keeps_the_link() {
    const PI_KEY: &str = "sk-imp-pi-linked-0006ffff";
    require_secret_service();
    let sim = Sim::start(SimConfig::new().org("org-l", &[CODEX_KEY, PI_KEY])).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let cfg = config(home.path(), "linked", &sim.base_url());
    let dotfiles = home.path().join("dotfiles");
    std::fs::create_dir_all(&dotfiles).unwrap();
    let codex_target = dotfiles.join("codex-auth.json");
    let codex_original = format!("{{\n  \"auth_mode\": \"apikey\",\n  \"OPENAI_API_KEY\": \"{CODEX_KEY}\"\n}}\n");
    std::fs::write(&codex_target, &codex_original).unwrap();
    let pi_target = dotfiles.join("pi-models.json");
    let pi_original = format!(
        "{{\"providers\": {{\"openai\": {{\"baseUrl\": \"https://api.openai.com/v1\", \"apiKey\": \"{PI_KEY}\"}}}}}}\n"
    );
    std::fs::write(&pi_target, &pi_original).unwrap();
    let (auth, models) = (home.path().join(".codex/auth.json"), home.path().join(".pi/agent/models.json"));
    for (link, target) in [(&auth, &codex_target), (&models, &pi_target)] {
        std::fs::create_dir_all(link.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, link).unwrap();
    }
    let env = base_env(home.path());

    let (ok, out, err) = cli(&cfg, &env, &["keys", "import", "--yes", "--remove-plaintext"], "").await;
    assert!(ok, "{out}{err}");
    for (link, target, key) in [(&auth, &codex_target, CODEX_KEY), (&models, &pi_target, PI_KEY)] {
        let kind = std::fs::symlink_metadata(link).unwrap().file_type();
        assert!(kind.is_symlink(), "{} is still a link", link.display());
        assert_eq!(std::fs::read_link(link).unwrap(), *target, "and still names the same file");
        assert!(
            !std::fs::read_to_string(target).unwrap().contains(key),
            "{} no longer holds the key",
            target.display()
        );
        let real = std::fs::canonicalize(target).unwrap();
        assert!(out.contains(&format!("removed the key from {}", real.display())), "names the file: {out}");
    }
    assert_eq!(
        std::fs::read_to_string(&codex_target).unwrap(),
        codex_original.replace(&format!("\"{CODEX_KEY}\""), "null")
    );
    let models_now: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&pi_target).unwrap()).unwrap();
    assert_eq!(models_now, serde_json::json!({"providers": {"openai": {"baseUrl": "https://api.openai.com/v1"}}}));
    let mut files = Vec::new();
    every_file(&dotfiles, &mut files);
    for (name, bytes) in &files {
        assert!(!contains(bytes, CODEX_KEY) && !contains(bytes, PI_KEY), "{name} in the repository holds a key");
    }
    assert_no_secrets("the output", &format!("{out}{err}"), &[CODEX_KEY, PI_KEY]);
}

/// A file with a second name (a hard link) would go on holding the key under that name if a new file
/// took the first one's place: refused, saying why, and nothing is written.
#[test]
fn a_file_with_another_name_keeps_its_key_and_the_refusal_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let auth = dir.path().join("auth.json");
    let text = format!("{{\"auth_mode\": \"apikey\", \"OPENAI_API_KEY\": \"{CODEX_KEY}\"}}\n");
    std::fs::write(&auth, &text).unwrap();
    std::fs::hard_link(&auth, dir.path().join("auth-elsewhere.json")).unwrap();
    let origin = Origin::CodexAuth(auth.clone());
    let why = keys_import::remove_plaintext(&origin, &Secret::new(CODEX_KEY)).unwrap_err();
    assert!(why.contains("hard links") && why.contains("remove the key by hand"), "{why}");
    assert!(!why.contains(CODEX_KEY), "{why}");
    assert_eq!(std::fs::read_to_string(&auth).unwrap(), text, "the file is as it was");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2, "and no backup was made");
}

/// What `keys import --remove-plaintext` leaves in Codex's `auth.json` (`"OPENAI_API_KEY": null`) is
/// what `keymux setup codex` fills in with a client token, as the import tells the user: the token goes
/// where the key was and every other member stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_codex_fills_in_the_auth_json_an_import_left_without_a_key() {
    require_secret_service();
    let home = tempfile::tempdir().unwrap();
    let cfg = config(home.path(), "then-setup", "http://127.0.0.1:9/v1");
    // Nothing listens on port 1: both commands work offline.
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, format!("listen = \"127.0.0.1:1\"\n{text}")).unwrap();
    let mut env: Vec<(String, String)> =
        base_env(home.path()).into_iter().filter(|(k, _)| k != "XDG_DATA_HOME").collect();
    env.push(("XDG_DATA_HOME".into(), home.path().join("data").display().to_string()));
    let codex_home = home.path().join(".codex");
    std::fs::create_dir_all(&codex_home).unwrap();
    std::fs::write(codex_home.join("config.toml"), "model = \"gpt-5.5\"\n").unwrap();
    let auth = codex_home.join("auth.json");
    let original = format!(
        "{{\n  \"auth_mode\": \"apikey\",\n  \"OPENAI_API_KEY\": \"{CODEX_KEY}\",\n  \"last_refresh\": null\n}}\n"
    );
    std::fs::write(&auth, &original).unwrap();

    let (ok, out, err) = cli(&cfg, &env, &["keys", "import", "--yes", "--remove-plaintext"], "").await;
    assert!(ok && out.contains("`keymux setup codex` puts a Keymux client token in its place"), "{out}{err}");
    let emptied = original.replace(&format!("\"{CODEX_KEY}\""), "null");
    assert_eq!(std::fs::read_to_string(&auth).unwrap(), emptied, "the import left the key's member, null");

    let (ok, out, err) = cli(&cfg, &env, &["setup", "codex", "--yes"], "").await;
    assert!(ok, "setup accepts the file the import left: {out}{err}");
    let held: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&auth).unwrap()).unwrap();
    let token = held["OPENAI_API_KEY"].as_str().expect("a token in the key's place").to_owned();
    assert!(token.starts_with("km-"), "a Keymux client token");
    assert_eq!(std::fs::read_to_string(&auth).unwrap(), emptied.replace("null,", &format!("\"{token}\",")));
    let backups = std::fs::read_dir(&codex_home).unwrap().map(|e| e.unwrap().path());
    let kept = backups.filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("auth.json.keymux-backup-"));
    let kept: Vec<String> = kept.map(|p| std::fs::read_to_string(p).unwrap()).collect();
    assert!(kept.contains(&emptied), "setup backed the file up as the import left it");
    assert_no_secrets("the output", &format!("{out}{err}"), &[CODEX_KEY, &token]);
}

/// A removal the user asked for and that was refused (the file has another name) fails the command,
/// so a script does not take the plaintext for gone; the key it imported stays in the pool, and the
/// output says both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_removal_fails_the_import_and_keeps_the_imported_key() {
    require_secret_service();
    let sim = Sim::start(SimConfig::new().org("org-h", &[CODEX_KEY])).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let cfg = config(home.path(), "hard-linked", &sim.base_url());
    let codex_home = home.path().join(".codex");
    std::fs::create_dir_all(&codex_home).unwrap();
    let auth = codex_home.join("auth.json");
    let text = format!("{{\"auth_mode\": \"apikey\", \"OPENAI_API_KEY\": \"{CODEX_KEY}\"}}\n");
    std::fs::write(&auth, &text).unwrap();
    std::fs::hard_link(&auth, home.path().join("auth-elsewhere.json")).unwrap();
    let env = base_env(home.path());

    let (ok, out, err) = cli(&cfg, &env, &["keys", "import", "--yes", "--remove-plaintext"], "").await;
    assert!(!ok, "a refused removal fails the command: {out}{err}");
    assert!(err.contains("hard links"), "says why: {err}");
    assert!(err.contains("1 plaintext copy(ies) not removed (the keys imported stay in Keymux's pool)"), "{err}");
    assert!(out.contains("still holds the key") && out.contains("stays in Keymux's pool"), "{out}");
    assert_eq!(std::fs::read_to_string(&auth).unwrap(), text, "the file is as it was");
    let (ok, listed, lerr) = cli(&cfg, &env, &["keys", "list"], "").await;
    assert!(ok && listed.contains("codex"), "the key stays imported: {listed}{lerr}");
    assert_no_secrets("the output", &format!("{out}{err}{listed}"), &[CODEX_KEY]);
}

/// pi's `models.json` read by the rule of the pi on PATH: pi 1.6 (the real one the tests pin, linked
/// into a directory of PATH as npm links it) reads `$NAME` as a variable and a bare name as a literal;
/// with no pi on PATH, a value either version reads as a variable is passed over. Each run says which
/// rule it used; nothing is written without a yes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pi_values_are_read_by_the_rule_of_the_installed_pi() {
    const PI_LITERAL: &str = "sk-imp-pi-literal-0007gggg";
    require_secret_service();
    let home = tempfile::tempdir().unwrap();
    let cfg = config(home.path(), "pi-rule", "http://127.0.0.1:9");
    let models = home.path().join(".pi/agent/models.json");
    std::fs::create_dir_all(models.parent().unwrap()).unwrap();
    let text = serde_json::json!({"providers": {
        "literal": {"apiKey": PI_LITERAL},
        "dollar": {"apiKey": "$PI_VAR_KEY"},
        "bare": {"apiKey": "PI_VAR_KEY"},
    }});
    let text = text.to_string();
    std::fs::write(&models, &text).unwrap();
    let bin = home.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(pi_bin(), bin.join("pi")).unwrap();
    let with_path = |path: String| {
        let mut env: Vec<(String, String)> = base_env(home.path()).into_iter().filter(|(k, _)| k != "PATH").collect();
        env.push(("PATH".into(), path));
        env.push(("PI_VAR_KEY".into(), "sk-imp-pi-from-var-0008hhhh".into()));
        env
    };

    let env = with_path(format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default()));
    let (ok, out, err) = cli(&cfg, &env, &["keys", "import"], "").await;
    assert!(ok, "{out}{err}");
    assert!(out.contains("sk-…gggg") && out.contains("(provider literal, apiKey)"), "{out}");
    assert!(!out.contains("hhhh"), "a variable's key is not taken from pi's file: {out}");
    assert!(out.contains("note: pi's files are read as pi 1.6.0 reads them"), "{out}");
    assert!(out.contains("(provider dollar) passed over: it reads the environment variable PI_VAR_KEY"), "{out}");
    assert!(out.contains("(provider bare) passed over: it does not look like an OpenAI API key"), "{out}");

    let env = with_path(home.path().join("nothing").display().to_string());
    let (ok, out, err) = cli(&cfg, &env, &["keys", "import"], "").await;
    assert!(ok, "{out}{err}");
    assert!(out.contains("sk-…gggg") && out.contains("no pi found on PATH"), "{out}");
    assert!(out.contains("(provider dollar) passed over: it reads the environment variable PI_VAR_KEY"), "{out}");
    assert!(out.contains("(provider bare) passed over: it names the environment variable PI_VAR_KEY"), "{out}");
    assert!(err.contains("nothing imported"), "{err}");
    assert_eq!(std::fs::read_to_string(&models).unwrap(), text, "nothing written");
}
