//! The dashboard, end to end: the real `keymux` binary with its embedded dashboard, in front of the
//! simulator, driven by a real Chromium through `ui/e2e/dashboard.mjs` (playwright-core). The script
//! logs in with the link `keymux serve` prints, sends Codex- and pi-shaped traffic, checks what the
//! Live, Keys, Pools and Connect views show (a pool and a pool-bound token made through the page, the
//! pool filters, a fallback), fails on any console error or failed request, and saves screenshots of
//! every view under `$CARGO_TARGET_TMPDIR/dashboard-shots/`.
//!
//! Needs Node.js 20+, `npm ci` in `ui/` and Chromium (`/usr/bin/chromium`, or `CHROMIUM=path`). With
//! `KEYMUX_SKIP_UI` set the binary has no dashboard, and the test says it skipped.
#![allow(clippy::unwrap_used, clippy::disallowed_methods, clippy::print_stdout, reason = "tests")]

use crate::{chatgpt, support};

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use keymux_sim::{PlanSpec, Sim, SimConfig};
use support::{base_env, keymux_bin, run_codex, EXISTING_CODEX_CONFIG_HEAD, EXISTING_CODEX_CONFIG_TAIL, TOKEN};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, BufReader};

/// The whole browser run, including Chromium's start on a slow, shared machine.
const E2E_TIMEOUT: Duration = Duration::from_secs(15 * 60);

fn ui_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("ui")
}

fn chromium() -> PathBuf {
    std::env::var_os("CHROMIUM").map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from)
}

/// What is missing to run the browser test, said as what to install.
fn missing_tools() -> Vec<String> {
    let mut missing = Vec::new();
    let node = std::process::Command::new("node").arg("--version").output();
    match node {
        Ok(out) if out.status.success() => {}
        _ => missing.push("Node.js 20 or later on the PATH (Debian: apt-get install nodejs npm)".to_owned()),
    }
    if !ui_dir().join("node_modules/playwright-core").exists() {
        missing.push("the dashboard's packages: run `npm ci` in ui/".to_owned());
    }
    if !chromium().exists() {
        missing.push(format!(
            "Chromium at {} (Debian: apt-get install chromium; or set CHROMIUM to its path)",
            chromium().display()
        ));
    }
    missing
}

/// `keymux serve`, with the two lines it prints first: the address and the login link.
struct Served {
    child: tokio::process::Child,
    root: String,
    login: String,
    log: std::sync::Arc<std::sync::Mutex<String>>,
}

async fn serve(sim: &Sim, home: &Path) -> Served {
    let mut env = base_env(home);
    for (label, secret) in [("A1", "sk-a1"), ("A2", "sk-a2"), ("B1", "sk-b1"), ("C1", "sk-c1")] {
        env.push((format!("KEYMUX_KEY_{label}"), secret.to_owned()));
        // The pool starts in tier 1, so a key added through the dashboard in tier 0 takes the next
        // unpinned request: the test can tell it joined the pool.
        env.push((format!("KEYMUX_KEY_{label}_PRIORITY"), "1".to_owned()));
    }
    env.push(("KEYMUX_CLIENT_TOKEN".to_owned(), TOKEN.to_owned()));
    env.push(("KEYMUX_LOG".to_owned(), "info".to_owned()));
    // Setup records go under this home, never the user's.
    env.push(("XDG_DATA_HOME".to_owned(), home.join("data").display().to_string()));
    let args = ["serve", "--ephemeral", "--listen", "127.0.0.1:0", "--upstream", &sim.base_url()];
    serve_with(&args, &env).await
}

/// `keymux ARGS` with only `env`, and the address and login link it prints first.
async fn serve_with(args: &[&str], env: &[(String, String)]) -> Served {
    let mut cmd = tokio::process::Command::new(keymux_bin());
    cmd.args(args);
    // Only what is given: in particular no KEYMUX_UI_DIR, so the embedded dashboard is served.
    cmd.env_clear().envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
    let mut child = cmd.spawn().expect("keymux starts");
    let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let mut stderr = child.stderr.take().expect("stderr");
    let sink = log.clone();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 8192];
        while let Ok(n) = stderr.read(&mut buf).await {
            if n == 0 {
                break;
            }
            sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut first = Vec::new();
    while first.len() < 2 {
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .expect("keymux printed its address and login link in time")
            .expect("stdout readable");
        match line {
            Some(line) => first.push(line),
            None => panic!("keymux exited early: {}", log.lock().unwrap()),
        }
    }
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let word = |line: &str, pred: &dyn Fn(&str) -> bool| {
        line.split_whitespace().find(|w| pred(w)).map(str::to_owned).unwrap_or_else(|| panic!("no URL in {line:?}"))
    };
    let base = word(&first[0], &|w| w.starts_with("http://") && w.ends_with("/v1"));
    let login = word(&first[1], &|w| w.starts_with("http://") && w.contains("/login?code="));
    Served { child, root: base.trim_end_matches("/v1").to_owned(), login, log }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_what_the_gateway_does() {
    if std::env::var_os("KEYMUX_SKIP_UI").is_some() {
        println!("skipped: KEYMUX_SKIP_UI is set, so this build has no dashboard to test");
        return;
    }
    let missing = missing_tools();
    assert!(missing.is_empty(), "the dashboard's browser test needs:\n  - {}", missing.join("\n  - "));

    // Three organizations the gateway starts with, and org-d and org-e, whose keys are added through
    // the page (the pool the page creates holds those two).
    let config = SimConfig::new()
        .org("org-a", &["sk-a1", "sk-a2"])
        .org("org-b", &["sk-b1"])
        .org("org-c", &["sk-c1"])
        .org("org-d", &["sk-d1"])
        .org("org-e", &["sk-e1"])
        .org("org-f", &["sk-f1"]);
    let sim = Sim::start(config).await.expect("simulator starts");
    let home = tempfile::tempdir().unwrap();
    // The user's Codex, logged in with an API key of org-f: the page sets it up and imports that key.
    let codex_home = home.path().join(".codex");
    std::fs::create_dir_all(&codex_home).unwrap();
    std::fs::write(codex_home.join("config.toml"), "# my settings\nmodel = \"gpt-5.5\"\n").unwrap();
    std::fs::write(
        codex_home.join("auth.json"),
        "{\n  \"auth_mode\": \"apikey\",\n  \"OPENAI_API_KEY\": \"sk-f1\"\n}\n",
    )
    .unwrap();
    let mut served = serve(&sim, home.path()).await;

    let page = support::client().get(format!("{}/", served.root)).send().await.unwrap();
    let kind = page.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    let status = page.status();
    let body = page.text().await.unwrap_or_default();
    assert!(
        status == 200 && kind.starts_with("text/html") && body.contains("/assets/"),
        "the binary serves no built dashboard at / ({status}, {kind}): {}",
        body.chars().take(400).collect::<String>()
    );

    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard-shots");
    browse("dashboard.mjs", &served, &sim, &shots, &[("KEYMUX_CODEX_HOME", codex_home.as_os_str())]).await;
    codex_accepts_the_connect_snippet(&shots.join("codex-snippet.toml"), home.path(), &sim).await;
    let _ = served.child.start_kill();
    sim.shutdown();
}

/// The ChatGPT plan in the dashboard, end to end (`ui/e2e/plan.mjs`): the first-run offer finds the
/// plan Codex is logged in to and an API key in the environment, the page imports both, the plan's
/// card shows its 5-hour and weekly windows as the backend reports them, new sessions start on it
/// ("plan first"), and once its 5-hour window is used up a new session goes to the API key with the
/// reason and the plan's reset said in the row, the drawer, the card and the status bar. Nothing the
/// page or the gateway shows holds a token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plan_card_shows_its_windows_and_new_sessions_go_to_the_api_key_once_it_is_used_up() {
    if std::env::var_os("KEYMUX_SKIP_UI").is_some() {
        println!("skipped: KEYMUX_SKIP_UI is set, so this build has no dashboard to test");
        return;
    }
    let missing = missing_tools();
    assert!(missing.is_empty(), "the dashboard's browser test needs:\n  - {}", missing.join("\n  - "));
    assert!(
        std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_some(),
        "the plan lives in the keychain: run this test through `scripts/test`"
    );
    // Three requests fill the plan's 5-hour window; forty its weekly one.
    let spec = PlanSpec::new(chatgpt::ACCOUNT).windows(3, 40).token_lifetime(Duration::from_secs(30 * 86_400));
    let sim = Sim::start(chatgpt::sim_config(spec)).await.expect("simulator starts");
    let tokens = sim.chatgpt_tokens().unwrap();
    let home = tempfile::tempdir().unwrap();
    chatgpt::codex_auth(&home.path().join(".codex"), &tokens);
    let cfg = home.path().join("config.toml");
    let service = format!("keymux-dashboard-plan-{}", std::process::id());
    std::fs::write(&cfg, format!("keychain_service = \"{service}\"\nupstream = \"{}\"\n", sim.base_url())).unwrap();
    let mut env = base_env(home.path());
    env.push(("KEYMUX_CHATGPT_BASE_URL".into(), sim.chatgpt_base_url()));
    env.push(("KEYMUX_CHATGPT_AUTH_URL".into(), sim.chatgpt_auth_url()));
    env.push(("KEYMUX_CLIENT_TOKEN".into(), TOKEN.into()));
    env.push(("OPENAI_API_KEY".into(), chatgpt::API_KEY.into()));
    env.push(("KEYMUX_LOG".into(), "info".into()));
    env.push(("XDG_DATA_HOME".into(), home.path().join("data").display().to_string()));
    let cfg_arg = cfg.display().to_string();
    let served = serve_with(&["--config", &cfg_arg, "serve", "--listen", "127.0.0.1:0"], &env).await;

    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard-plan-shots");
    let said = browse("plan.mjs", &served, &sim, &shots, &[]).await;
    let served_by: Vec<_> =
        sim.log().into_iter().filter(|e| e.path.ends_with("/responses")).filter_map(|e| e.key).collect();
    let unreadable = sim.log().iter().filter(|e| e.error_code.as_deref() == Some("invalid_encrypted_content")).count();
    assert_eq!(unreadable, 0, "no request reached an organization that could not read it");
    assert!(served_by.iter().any(|k| k.starts_with("chatgpt-")), "the plan served: {served_by:?}");
    assert!(served_by.iter().any(|k| k == chatgpt::API_KEY), "the API key served: {served_by:?}");

    let (ok, _, err) = support::run_keymux(&["--config", &cfg_arg, "keys", "remove", "chatgpt"], &env, "").await;
    assert!(ok, "{err}");
    let mut printed = said.into_bytes();
    printed.extend_from_slice(served.log.lock().unwrap().as_bytes());
    chatgpt::assert_no_token("what the page and the gateway said", &printed, &chatgpt::token_parts(&tokens));
    sim.shutdown();
}

/// Runs `ui/e2e/SCRIPT` against `served` in front of `sim`, its screenshots in `shots` (emptied
/// first), and fails the test with the script's output and Keymux's last log lines when it fails.
async fn browse(script: &str, served: &Served, sim: &Sim, shots: &Path, extra: &[(&str, &std::ffi::OsStr)]) -> String {
    let _ = std::fs::remove_dir_all(shots);
    std::fs::create_dir_all(shots).unwrap();
    let sim_root = sim.base_url().trim_end_matches("/v1").to_owned();
    let started = Instant::now();
    let mut node = tokio::process::Command::new("node");
    node.arg(Path::new("e2e").join(script))
        .current_dir(ui_dir())
        .env("KEYMUX_ROOT", &served.root)
        .env("KEYMUX_LOGIN_LINK", &served.login)
        .env("KEYMUX_SIM", &sim_root)
        .env("KEYMUX_TOKEN", TOKEN)
        .env("KEYMUX_FIXTURES", Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures"))
        .env("KEYMUX_SHOTS", shots)
        .env("CHROMIUM", chromium())
        .envs(extra.iter().copied())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(E2E_TIMEOUT, node.output())
        .await
        .expect("the browser test finished within 15 minutes")
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    // Straight to stderr, past the test harness's capture: a person looks at these screenshots.
    let _ = writeln!(
        std::io::stderr(),
        "browser test {script} took {:.1} s; screenshots in {}",
        started.elapsed().as_secs_f64(),
        shots.display()
    );
    if !out.status.success() {
        let tail: String = {
            let log = served.log.lock().unwrap();
            log.lines().rev().take(40).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n")
        };
        panic!("the browser test failed:\n{stdout}\n{stderr}\n--- keymux's last log lines ---\n{tail}");
    }
    stdout
}

/// The Codex block the Connect view showed, pasted into a config a user already has (its first line at
/// the top, its section at the end, as the view says), is accepted by real Codex, which then talks to
/// the provider through Keymux.
async fn codex_accepts_the_connect_snippet(snippet: &Path, home: &Path, sim: &Sim) {
    let snippet = std::fs::read_to_string(snippet).expect("the browser test saved the Codex snippet");
    let (top, section) = snippet.split_once("\n\n").expect("a top line, then the provider section");
    let config = format!("{top}\n{EXISTING_CODEX_CONFIG_HEAD}{EXISTING_CODEX_CONFIG_TAIL}\n{section}");
    let before = sim.log().last().map_or(0, |e| e.seq);
    let (ok, output) = run_codex(&home.join("codex"), &config, TOKEN, "Say hi").await;
    assert!(ok, "Codex refused the pasted config or failed:\n{config}\n---\n{output}");
    let reached = sim.log().iter().any(|e| e.seq > before && e.method == "POST" && e.path == "/v1/responses");
    assert!(reached, "Codex's request reached the provider through Keymux:\n{output}");
    assert!(output.contains("SIM-REPLY"), "Codex printed the provider's answer:\n{output}");
}
