//! The tray as a user sees and clicks it: the real app under Xvfb with a real tray host (tint2, an
//! XEmbed system tray). The icon docks; its pixels, read back from the screen, are matched to each
//! state's icon (healthy, degraded, blocked, paused, down). A click on the icon opens the menu, and
//! each item is chosen from the keyboard as a user would; what it did is checked through the gateway's
//! API and the files it writes: pause, a key switched off and on, "Test now" on a cooling key, the
//! dashboard window, Set up Codex
//! through its dialog and back with Undo, a notification switch, start at login, and Quit. The
//! window's size and place survive a restart.
//!
//! Needs Xvfb, tint2, xdotool and xwininfo (scripts/test installs them) and a D-Bus session bus.
//! Every wait is on a state the app reaches (a window, a pixel, an API answer, a file), bounded only
//! to fail a broken build.
#![allow(clippy::unwrap_used, clippy::print_stdout, clippy::disallowed_methods, reason = "tests")]

mod desktop;

use std::path::Path;

use desktop::desk::{shots, Desk, WAIT};
use desktop::x11::{self, Rect, TrayHost};
use desktop::{App, Xvfb};
use keymux::api::types::StatusBody;
use keymux::desktop::menu::{self, Action, IconState};
use keymux::desktop::notices::NoticeKind;
use keymux::keys::KeyId;
use keymux::pool::HealthState;
use keymux_sim::{Fault, Sim, SimConfig};

const TOKEN: &str = "km-tray-click-token-0123456789abcdef";
const ADMIN: &str = "kma-tray-click-admin-0123456789abcdef";
/// How the dashboard window shows in `xwininfo`: its title, then the app's class.
const DASHBOARD: &str = "\"Keymux\": (\"keymux-window\"";

fn health_of(s: &StatusBody, label: &str) -> HealthState {
    s.keys.iter().find(|k| k.status.label == label).unwrap().status.health
}

fn key_id(s: &StatusBody, label: &str) -> KeyId {
    s.keys.iter().find(|k| k.status.label == label).unwrap().status.id.clone()
}

/// The app's environment: the shared one, plus the Codex home Set up Codex writes to.
fn app_env(home: &Path, xvfb: &Xvfb) -> Vec<(String, String)> {
    let mut env = desktop::env(home, xvfb, &[("KEYMUX_KEY_A1", "sk-a1"), ("KEYMUX_KEY_B1", "sk-b1")], TOKEN, ADMIN);
    env.push(("CODEX_HOME".into(), home.join("codex").display().to_string()));
    // A pool with a token bound to it, so the status line and the key items show pools.
    env.push(("KEYMUX_POOL_WORK".into(), "a1".into()));
    env.push(("KEYMUX_TOKEN_ACME".into(), "km-tray-acme-token-5f1b8c2e9d7a4036".into()));
    env.push(("KEYMUX_TOKEN_ACME_POOL".into(), "work".into()));
    env
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tray_state_and_menu_action_as_a_user_sees_and_clicks_them() {
    let xvfb = Xvfb::start().await.expect("the tray test needs Xvfb (scripts/test installs it)");
    assert!(std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_some(), "run it through scripts/test");
    let _host = TrayHost::start(&xvfb);
    let notifications = desktop::Notifications::serve().await;
    let sim = Sim::start(SimConfig::new().org("org-a", &["sk-a1"]).org("org-b", &["sk-b1"])).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join("config.toml");
    let metrics = home.path().join("metrics");
    std::fs::write(&config, format!("metrics_dir = \"{}\"\n", metrics.display())).unwrap();
    // The user's own Codex config, which Set up and Undo must give back byte for byte.
    let codex = home.path().join("codex/config.toml");
    std::fs::create_dir_all(codex.parent().unwrap()).unwrap();
    let original = "# my settings\nmodel = \"gpt-5.5\"\n\n[tui]\nnotifications = true\n";
    std::fs::write(&codex, original).unwrap();
    let env = app_env(home.path(), &xvfb);
    let args = desktop::desk::hidden_app_args(&config, &sim.base_url());

    let mut app = App::spawn(&args, &env).await;
    let base = app.base_url(WAIT).await;
    let mut desk = Desk::new(&xvfb, &base, ADMIN).await;

    states(&desk).await;
    test_a_cooling_key_now(&desk, &sim, &base, &notifications).await;
    set_up_codex_and_undo(&mut desk, &codex, original, &base).await;
    preferences(&mut desk, home.path()).await;
    window_quit_and_restart(&mut desk, &mut app, &args, &env, home.path()).await;
    // Down: the port is taken, the app stays up and the icon says so.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut down_args = args.clone();
    let listen = down_args.iter().position(|a| a == "--listen").unwrap() + 1;
    down_args[listen] = taken.local_addr().unwrap().to_string();
    let mut down = App::spawn(&down_args, &env).await;
    down.wait_for_line("the gateway did not start", WAIT).await;
    desk.icon = x11::docked_icon(&xvfb.display, WAIT).await;
    desk.expect_icon(IconState::Down).await;
    assert!(down.terminate(WAIT).await.success());
    for secret in ["sk-a1", "sk-b1", TOKEN, ADMIN] {
        assert!(!down.output().contains(secret) && !app.output().contains(secret), "the app's output shows a secret");
    }
}

/// Each state's icon, driven through the menu: healthy, paused, degraded, blocked and back.
async fn states(desk: &Desk<'_>) {
    // Healthy after a normal start: the first status rebuilt the menu, and the icon left "down".
    desk.wait_status("both keys ready", |s| s.keys.iter().all(|k| k.status.health == HealthState::Ready)).await;
    desk.expect_icon(IconState::Healthy).await;

    // The status line and the key items show the pool (the menu model is what the tray draws).
    let status = desk.status().await;
    let line = keymux::desktop::menu::status_line(&keymux::desktop::menu::MenuInput {
        status: Some(&status),
        ..Default::default()
    });
    assert!(line.ends_with(" · work 1/1"), "{line}");
    // A click opens the menu, status line first.
    desk.picture_of_menu("menu.png").await;

    // Pause and resume.
    desk.choose(Action::TogglePause).await;
    desk.wait_status("paused", |s| s.gateway.paused).await;
    desk.expect_icon(IconState::Paused).await;
    desk.choose(Action::TogglePause).await;
    desk.wait_status("resumed", |s| !s.gateway.paused).await;
    desk.expect_icon(IconState::Healthy).await;

    // A key's item switches it off: degraded; both off: blocked; both on again: healthy.
    let status = desk.status().await;
    let (a1, b1) = (key_id(&status, "a1"), key_id(&status, "b1"));
    desk.choose(Action::ToggleKey(b1.clone())).await;
    desk.wait_status("b1 off", |s| health_of(s, "b1") == HealthState::Disabled).await;
    desk.expect_icon(IconState::Degraded).await;
    desk.choose(Action::ToggleKey(a1.clone())).await;
    desk.wait_status("a1 off", |s| health_of(s, "a1") == HealthState::Disabled).await;
    desk.expect_icon(IconState::Blocked).await;
    desk.choose(Action::ToggleKey(a1)).await;
    desk.choose(Action::ToggleKey(b1)).await;
    desk.wait_status("both on", |s| s.keys.iter().all(|k| k.status.health == HealthState::Ready)).await;
    desk.expect_icon(IconState::Healthy).await;
}

/// A key cooling for an hour after a 429; the provider answers again, and "Test now" under its item
/// ends the cooldown at once and says so.
async fn test_a_cooling_key_now(desk: &Desk<'_>, sim: &Sim, base: &str, notices: &desktop::Notifications) {
    sim.set_standing("sk-a1", Fault::RateLimited { retry_after_secs: 3600 }, None);
    // New sessions until one is tried on a1 (the spread sends one there soon): its 429 cools it for
    // an hour, and the request itself fails over to b1.
    for n in 0..20 {
        if health_of(&desk.status().await, "a1") == HealthState::Cooling {
            break;
        }
        let body = serde_json::json!({"model": "gpt-5.5", "input": format!("cool a1 {n}"), "store": false});
        let r = desk.http.post(format!("{base}/responses")).bearer_auth(TOKEN).json(&body).send().await.unwrap();
        assert_eq!(r.status(), 200, "failed over to b1");
    }
    desk.wait_status("a1 cooling", |s| health_of(s, "a1") == HealthState::Cooling).await;
    desk.expect_icon(IconState::Degraded).await;
    sim.clear_standing("sk-a1");
    let a1 = key_id(&desk.status().await, "a1");
    let test = Action::TestKey(a1);
    assert!(menu::entries(&desk.menu().await.items)
        .iter()
        .any(|i| matches!(i, menu::Item::Entry { action, .. } if *action == test)));
    desk.picture_of_menu("menu-test-now.png").await;
    desk.choose(test).await;
    desk.wait_status("a1 ready again", |s| health_of(s, "a1") == HealthState::Ready).await;
    notices.wait_for("'a1' answered", WAIT).await;
    desk.expect_icon(IconState::Healthy).await;
}

/// Set up Codex through its dialog, and Undo back to the user's own file.
async fn set_up_codex_and_undo(desk: &mut Desk<'_>, codex: &Path, original: &str, base: &str) {
    // Set up Codex: the dialog shows the change; Apply writes it; Undo gives the file back.
    desk.choose(Action::SetUpCodex).await;
    desk.answer_dialog("Set up Codex", Some("dialog-setup-codex.png")).await;
    desk.answer_dialog("Set up Codex", None).await;
    let written = std::fs::read_to_string(codex).unwrap();
    assert!(written.contains(base), "the Codex config points at this gateway:\n{written}");
    assert!(written.contains("# my settings"), "the user's own lines stay:\n{written}");
    desk.codex_undo = true;
    desk.choose(Action::UndoCodex).await;
    desk.answer_dialog("Undo Codex setup", None).await;
    assert_eq!(std::fs::read_to_string(codex).unwrap(), original, "Undo gives the file back byte for byte");
    desk.codex_undo = false;
}

/// A notification switch and Start at login, through the files they write.
async fn preferences(desk: &mut Desk<'_>, home: &Path) {
    // A notification switch: kept in desktop.json.
    let prefs = home.join(".config/keymux/desktop.json");
    desk.choose(Action::ToggleNotice(NoticeKind::KeyRejected)).await;
    x11::until("the notification choice is saved", WAIT, || {
        let text = std::fs::read_to_string(&prefs).ok()?;
        text.contains("key_rejected").then_some(())
    })
    .await;

    // Start at login: an autostart entry that launches this binary, hidden.
    desk.choose(Action::ToggleAutostart).await;
    let entry = x11::until("an autostart entry is written", WAIT, || {
        let dir = home.join(".config/autostart");
        let file =
            std::fs::read_dir(dir).ok()?.flatten().find(|e| e.path().extension().is_some_and(|x| x == "desktop"))?;
        std::fs::read_to_string(file.path()).ok()
    })
    .await;
    assert!(entry.contains(env!("CARGO_BIN_EXE_keymux-tray")) && entry.contains("--hidden"), "{entry}");
    desk.autostart = true;
    desk.choose(Action::ToggleAutostart).await;
    x11::until("the autostart entry is removed", WAIT, || {
        let dir = home.join(".config/autostart");
        let any = std::fs::read_dir(dir).ok().is_some_and(|d| d.flatten().next().is_some());
        (!any).then_some(())
    })
    .await;
    desk.autostart = false;
}

/// Open dashboard, move and resize it, Quit, start again: the window comes back where it was left.
async fn window_quit_and_restart(
    desk: &mut Desk<'_>,
    app: &mut App,
    args: &[String],
    env: &[(String, String)],
    home: &Path,
) {
    // Open dashboard: the window shows the live dashboard; move and resize it for the restart below.
    desk.choose(Action::OpenDashboard).await;
    app.wait_for_line("dashboard window opened", WAIT).await;
    let window = x11::until("the dashboard window is on screen", WAIT, || {
        x11::shown(&desk.xvfb.display, DASHBOARD).into_iter().next()
    })
    .await;
    desk.xvfb.screenshot_when_drawn(&shots().join("window-from-menu.png"), WAIT).await;
    x11::xdotool(&desk.xvfb.display, &["windowsize", "--sync", &window.id, "900", "640"]);
    x11::xdotool(&desk.xvfb.display, &["windowmove", "--sync", &window.id, "120", "90"]);
    let left_at = Rect { x: 120, y: 90, w: 900, h: 640 };
    x11::until("the window takes its new size and place", WAIT, || {
        x11::windows(&desk.xvfb.display).into_iter().find(|w| w.id == window.id && w.rect == left_at)
    })
    .await;

    // Quit: drained, flushed, exit 0.
    desk.choose(Action::Quit).await;
    let status = app.wait_exit(WAIT).await;
    assert!(status.success(), "Quit exits 0\n{}", app.output());
    assert!(app.output().contains("metrics flushed"), "{}", app.output());

    let kept = home.join(".config/dev.keymux.tray/.window-state.json");
    let kept = std::fs::read_to_string(kept).unwrap_or_default();
    assert!(kept.contains("\"width\": 900"), "the size and place are kept at Quit: {kept}");
    // Started again: the window opens where and as large as the user left it (the window-state plugin
    // applies it just after the window appears, so wait for that state).
    let mut again = App::spawn(args, env).await;
    let base = again.base_url(WAIT).await;
    desk.api = format!("{}/keymux/api", base.trim_end_matches("/v1"));
    desk.icon = x11::docked_icon(&desk.xvfb.display, WAIT).await;
    desk.choose(Action::OpenDashboard).await;
    x11::until("the window opens at the size and place it was left", WAIT, || {
        x11::shown(&desk.xvfb.display, DASHBOARD).into_iter().find(|w| w.rect == left_at)
    })
    .await;
    assert!(again.terminate(WAIT).await.success());
}
