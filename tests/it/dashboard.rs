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

use crate::support;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use keymux_sim::{Sim, SimConfig};
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
    let mut cmd = tokio::process::Command::new(keymux_bin());
    cmd.args(["serve", "--ephemeral", "--listen", "127.0.0.1:0", "--upstream", &sim.base_url()]);
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
    let _ = std::fs::remove_dir_all(&shots);
    std::fs::create_dir_all(&shots).unwrap();
    let sim_root = sim.base_url().trim_end_matches("/v1").to_owned();
    let started = Instant::now();
    let mut node = tokio::process::Command::new("node");
    node.arg("e2e/dashboard.mjs")
        .current_dir(ui_dir())
        .env("KEYMUX_ROOT", &served.root)
        .env("KEYMUX_LOGIN_LINK", &served.login)
        .env("KEYMUX_SIM", &sim_root)
        .env("KEYMUX_TOKEN", TOKEN)
        .env("KEYMUX_FIXTURES", Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures"))
        .env("KEYMUX_SHOTS", &shots)
        .env("KEYMUX_CODEX_HOME", &codex_home)
        .env("CHROMIUM", chromium())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(E2E_TIMEOUT, node.output())
        .await
        .expect("the browser test finished within 15 minutes")
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    // Straight to stderr, past the test harness's capture: a person looks at these screenshots.
    let _ = writeln!(
        std::io::stderr(),
        "dashboard browser test took {:.1} s; screenshots in {}",
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
    codex_accepts_the_connect_snippet(&shots.join("codex-snippet.toml"), home.path(), &sim).await;
    let _ = served.child.start_kill();
    sim.shutdown();
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
