//! The dashboard's login and its sessions against another user or process on the same machine: the
//! one-time login code reaches the browser through a private page, never on a command line another
//! user can read; a session's live event stream ends when the session does.
#![allow(clippy::unwrap_used, reason = "tests")]

use crate::support;

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use keymux_sim::{Sim, SimConfig};
use support::*;

async fn one_key() -> Harness {
    Harness::start(SimConfig::new().org("org-a", &["sk-a1"]), &[key("a1", "sk-a1")]).await
}

/// Pauses or resumes routing with the admin credential: an event on every stream still open.
async fn announce(h: &Harness, paused: bool) {
    let (status, _) = Admin::new(&h.root).post_json(if paused { "/pause" } else { "/resume" }, None).await;
    assert_eq!(status, 200);
}

/// Reads `events` to its end: an event it still delivers is one too many.
async fn assert_ends(events: &mut EventFrames, why: &str) {
    if let Some(frame) = events.next_event().await {
        panic!("the event stream outlived its session ({why}) and delivered: {frame}");
    }
}

/// Logging out ends the session's event stream at once: an event announced after the logout never
/// reaches it, and the stream ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_stream_ends_at_logout() {
    let h = one_key().await;
    let session = dashboard_login(&h).await;
    let mut events = EventFrames::open(&h.root, &session).await;
    announce(&h, true).await;
    let frame = events.next_event().await.expect("the stream is open while the session lasts");
    assert!(frame.contains("event: gateway"), "{frame}");
    let r = plain().post(format!("{}/keymux/api/logout", h.root)).header("x-keymux-session", &session);
    assert_eq!(r.send().await.unwrap().status(), 204);
    announce(&h, false).await;
    assert_ends(&mut events, "logged out").await;
}

/// A stream ends when its session expires, on the gateway's clock (moved on, not waited for): after
/// 8 h unused, and 24 h after login however busy. Used every hour, a session's stream still delivers
/// after 23 h, when that of a session left unused has ended; an hour later it has ended too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_stream_ends_when_its_session_expires() {
    let h = one_key().await;
    let session = dashboard_login(&h).await;
    let mut events = EventFrames::open(&h.root, &session).await;
    let mut unused = EventFrames::open(&h.root, &dashboard_login(&h).await).await;
    let status = format!("{}/keymux/api/status", h.root);
    for _ in 1..24 {
        h.advance(Duration::from_secs(3600));
        let r = plain().get(&status).header("x-keymux-session", &session).send().await.unwrap();
        assert_eq!(r.status(), 200, "used every hour, the session lasts");
    }
    announce(&h, true).await;
    let frame = events.next_event().await.expect("the stream is open while the session lasts");
    assert!(frame.contains("event: gateway"), "{frame}");
    assert_ends(&mut unused, "unused for 8 hours").await;
    h.advance(Duration::from_secs(3600));
    announce(&h, false).await;
    assert_ends(&mut events, "expired").await;
}

/// An opener named `xdg-open` in a directory of its own, to be put first on PATH: it writes the
/// arguments it was given, one a line, to `argv` in the returned record directory, and reads the page
/// it was given (a `file://` URL) as a browser would, into `page.html` there.
fn recording_opener(home: &Path) -> (PathBuf, PathBuf) {
    let (bin, record) = (home.join("bin"), home.join("opened"));
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&record).unwrap();
    let r = record.display();
    let script = format!("#!/bin/sh\nprintf '%s\\n' \"$@\" > '{r}/argv'\ncat \"${{1#file://}}\" > '{r}/page.html'\n");
    let opener = bin.join("xdg-open");
    std::fs::write(&opener, script).unwrap();
    std::fs::set_permissions(&opener, std::fs::Permissions::from_mode(0o755)).unwrap();
    (bin, record)
}

/// Asserts that `path` is this user's, no link, and has exactly `mode`.
fn assert_private(path: &Path, mode: u32) {
    let meta = std::fs::symlink_metadata(path).unwrap();
    assert!(!meta.file_type().is_symlink(), "{} is a link", path.display());
    assert_eq!(meta.uid(), rustix::process::getuid().as_raw(), "{} is this user's", path.display());
    assert_eq!(meta.mode() & 0o7777, mode, "{} has mode {mode:o}", path.display());
}

/// Where a login page sends the browser: its script's `location.replace` and its `meta refresh` (for a
/// browser without scripts) name the same address.
fn redirect_target(page: &str) -> String {
    let script = page.split("location.replace(").nth(1).and_then(|rest| rest.split(')').next()).expect("a script");
    let target: String = serde_json::from_str(script).expect("a JSON string in the script");
    let refresh = page.split("url=").nth(1).and_then(|rest| rest.split('"').next()).expect("a meta refresh");
    assert_eq!(refresh.replace("&amp;", "&"), target, "the refresh and the script go to the same place");
    target
}

/// `keymux dashboard --open` hands the browser a page, never the login code: the opener's arguments
/// (its /proc/PID/cmdline, which every local user can read) are one `file://` URL of a page that is
/// this user's alone (0600, in a 0700 directory), whose redirect logs in exactly once and which is
/// gone once its code is used. The code is printed nowhere when a browser was opened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_open_hands_the_browser_a_private_page_never_the_code() {
    let sim = Sim::start(SimConfig::new().org("org-a", &["sk-login-one"])).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let cfg = home.path().join("config.toml");
    std::fs::write(&cfg, "keychain_service = \"keymux-login-page\"\n").unwrap();
    let config = cfg.to_str().unwrap();
    let mut env = base_env(home.path());
    env.push(("KEYMUX_CLIENT_TOKEN".into(), TOKEN.into()));
    env.push(("KEYMUX_KEY_ONE".into(), "sk-login-one".into()));
    let keymux = Keymux::spawn(&["--config", config, "--ephemeral", "--upstream", &sim.base_url()], &env).await;
    let (bin, record) = recording_opener(home.path());
    let env: Vec<(String, String)> = env
        .into_iter()
        .map(|(k, v)| if k == "PATH" { (k, format!("{}:{v}", bin.display())) } else { (k, v) })
        .collect();
    let (ok, out, err) = run_keymux(&["--config", config, "dashboard", "--open"], &env, "").await;
    assert!(ok, "{err}");
    let argv = std::fs::read_to_string(record.join("argv")).expect("the opener ran");
    let shown = argv.split("code=").next().unwrap_or_default();
    assert!(!argv.contains("code="), "the opener's command line carries the login code: {shown}code=…");
    let args: Vec<&str> = argv.lines().collect();
    assert_eq!(args.len(), 1, "one argument: {argv}");
    let page = PathBuf::from(args[0].strip_prefix("file://").expect("a file URL"));
    assert_private(&page, 0o600);
    assert_private(page.parent().unwrap(), 0o700);
    let text = std::fs::read_to_string(&page).unwrap();
    assert_eq!(std::fs::read_to_string(record.join("page.html")).unwrap(), text, "the opener read the page");
    let link = redirect_target(&text);
    assert!(link.starts_with(&format!("{}/login?code=", keymux.root)), "{link}");
    let code = link.rsplit('=').next().unwrap().to_owned();
    assert_no_secrets("what the CLI printed", &format!("{out}{err}"), &[&code]);
    let session = redeem_login_link(&keymux.root, &link).await.expect("the page's link logs in");
    let status = plain().get(format!("{}/keymux/api/status", keymux.root)).header("x-keymux-session", session);
    assert_eq!(status.send().await.unwrap().status(), 200, "a dashboard session");
    assert!(!page.exists(), "the page is gone once its code is used");
    assert_eq!(redeem_login_link(&keymux.root, &link).await, Err(403), "the code logs in once");
    assert_no_secrets("the gateway's output", &keymux.stop().await, &[&code]);
}

/// A login page goes when its code expires, within a tick on the gateway's clock (moved on, not
/// waited for), and a gateway that starts removes the pages older than a code lives that a stopped
/// one left behind, never a fresh one another gateway's code may still need.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_pages_go_when_their_codes_expire_and_stale_ones_at_the_next_start() {
    use keymux::access::LOGIN_CODE_TTL;
    let h = one_key().await;
    let page = keymux::login_page::write(&h.gateway.login_link()).unwrap();
    assert!(page.exists());
    h.advance(LOGIN_CODE_TTL);
    until("the expired code's page removed", || async { page.exists() }, |there| !there).await;
    let stale = keymux::login_page::write("http://127.0.0.1:1/login?code=left-by-a-stopped-gateway").unwrap();
    let written = h.gateway.clock().unix_ms() - u64::try_from((LOGIN_CODE_TTL * 2).as_millis()).unwrap();
    let file = std::fs::File::options().write(true).open(&stale).unwrap();
    file.set_modified(std::time::UNIX_EPOCH + Duration::from_millis(written)).unwrap();
    let fresh = keymux::login_page::write("http://127.0.0.1:1/login?code=of-another-running-gateway").unwrap();
    let _next = one_key().await;
    assert!(!stale.exists(), "a stale page is removed at the next start");
    assert!(fresh.exists(), "a fresh page stays");
    std::fs::remove_file(fresh).unwrap();
}
