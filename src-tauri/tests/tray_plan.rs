//! The ChatGPT plan in the tray, as a user sees it: the real app under Xvfb with a real tray host
//! (tint2), the plan imported from Codex's login through the first-run offer (the control API the
//! dashboard uses), and an API key beside it. The menu's status line says where new sessions go
//! ("ChatGPT plan first"), the plan's item shows its 5-hour and weekly windows; once its answer reports
//! the 5-hour window used up, a desktop notification says so and the line says "ChatGPT plan used up,
//! API keys for …". Pictures of the menu in both states are kept under `tray-shots/`.
//!
//! Needs what `tray_clicks` needs (scripts/test installs it). A binary of its own: it owns the
//! session bus's notification name while it runs.
#![allow(clippy::unwrap_used, clippy::print_stdout, clippy::disallowed_methods, reason = "tests")]

mod desktop;

use std::path::Path;
use std::time::Duration;

use desktop::desk::{Desk, WAIT};
use desktop::x11::TrayHost;
use desktop::{App, Xvfb};
use keymux::api::types::StatusBody;
use keymux::desktop::menu::{self, MenuInput};
use keymux_sim::{PlanSpec, Sim, SimConfig};
use serde_json::{json, Value};

const TOKEN: &str = "km-tray-plan-token-0123456789abcdef";
const ADMIN: &str = "kma-tray-plan-admin-0123456789abcdef";
const ACCOUNT: &str = "acct-tray-plan-41c2";

fn status_line(status: &StatusBody) -> String {
    menu::status_line(&MenuInput {
        status: Some(status),
        problem: None,
        notifications: true,
        notices_off: Vec::new(),
        autostart: false,
        codex_undo: false,
        pi_undo: false,
    })
}

/// A streamed Responses turn as Codex sends one.
async fn turn(desk: &Desk<'_>, base: &str, input: &str) {
    let body = json!({"model": "gpt-5.5", "input": input, "stream": true, "store": false,
                      "include": ["reasoning.encrypted_content"], "prompt_cache_key": input});
    let r = desk.http.post(format!("{base}/responses")).bearer_auth(TOKEN).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    assert!(text.contains("response.completed"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tray_says_where_new_sessions_go_and_tells_when_the_plan_is_used_up() {
    let xvfb = Xvfb::start().await.expect("the tray test needs Xvfb (scripts/test installs it)");
    assert!(std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_some(), "run it through scripts/test");
    let _host = TrayHost::start(&xvfb);
    let notifications = desktop::Notifications::serve().await;
    // Two requests fill the plan's 5-hour window.
    let spec = PlanSpec::new(ACCOUNT).windows(2, 40).token_lifetime(Duration::from_secs(30 * 86_400));
    let sim = Sim::start(SimConfig::new().org("org-a", &["sk-tray-a1"]).chatgpt_plan(spec)).await.unwrap();
    let tokens = sim.chatgpt_tokens().unwrap();
    let home = tempfile::tempdir().unwrap();
    let (args, env) = app_with_login(home.path(), &xvfb, &sim);
    let mut app = App::spawn(&args, &env).await;
    let base = app.base_url(WAIT).await;
    let desk = Desk::new(&xvfb, &base, ADMIN).await;

    import_the_plan(&desk).await;

    turn(&desk, &base, "the first session").await;
    let first = desk
        .wait_status("the plan's windows reported", |s| plan_of(s).is_some_and(|p| p.status.plan_windows.is_some()))
        .await;
    assert!(status_line(&first).contains(" · ChatGPT plan first"), "{}", status_line(&first));
    let item = menu::key_label(plan_of(&first).unwrap(), first.gateway.now_unix_ms);
    assert!(
        item.contains("(ChatGPT plus plan) · takes new sessions first")
            && item.contains("5h 50% used")
            && item.contains("week"),
        "{item}"
    );
    desk.picture_of_menu("menu-plan-first.png").await;

    // The window's last request: its answer reports the 5-hour window at 100 %.
    turn(&desk, &base, "the second session").await;
    let told = notifications.wait_for("Your ChatGPT plan is used up", WAIT).await;
    assert!(
        told.contains("New sessions go to your API keys")
            && (told.contains("resets in 4h") || told.contains("resets in 5h 0m")),
        "{told}"
    );
    let used_up = desk
        .wait_status("the plan used up", |s| plan_of(s).is_some_and(|p| p.plan_used_up_until_unix_ms.is_some()))
        .await;
    assert!(status_line(&used_up).contains(" · ChatGPT plan used up, API keys for "), "{}", status_line(&used_up));
    desk.picture_of_menu("menu-plan-used-up.png").await;
    let told = notifications.received().iter().filter(|n| n.contains("ChatGPT plan is used up")).count();
    assert_eq!(told, 1, "told once: {:?}", notifications.received());

    assert!(app.terminate(WAIT).await.success());
    let output = app.output();
    for secret in [tokens.access_token.as_str(), tokens.refresh_token.as_str(), tokens.id_token.as_str(), TOKEN, ADMIN]
    {
        assert!(!output.contains(secret), "the app's output shows a secret");
    }
}

/// The app's arguments and environment: a home whose Codex is logged in to the plan, the API key in
/// the environment, the simulator as the provider and as the plan's backend.
fn app_with_login(home: &Path, xvfb: &Xvfb, sim: &Sim) -> (Vec<String>, Vec<(String, String)>) {
    let tokens = sim.chatgpt_tokens().unwrap();
    let codex = home.join("codex");
    std::fs::create_dir_all(&codex).unwrap();
    let login = json!({"auth_mode": "chatgpt", "OPENAI_API_KEY": null,
        "tokens": {"id_token": tokens.id_token, "access_token": tokens.access_token,
                   "refresh_token": tokens.refresh_token, "account_id": tokens.account_id}});
    std::fs::write(codex.join("auth.json"), login.to_string()).unwrap();
    let config = home.join("config.toml");
    std::fs::write(&config, format!("metrics_dir = \"{}\"\n", home.join("metrics").display())).unwrap();
    let mut env = desktop::env(home, xvfb, &[("KEYMUX_KEY_A1", "sk-tray-a1")], TOKEN, ADMIN);
    env.push(("CODEX_HOME".into(), codex.display().to_string()));
    env.push(("KEYMUX_CHATGPT_BASE_URL".into(), sim.chatgpt_base_url()));
    env.push(("KEYMUX_CHATGPT_AUTH_URL".into(), sim.chatgpt_auth_url()));
    let args = desktop::desk::hidden_app_args(&config, &sim.base_url());
    (args, env)
}

/// The plan Codex is logged in to, imported as the first-run offer imports it.
async fn import_the_plan(desk: &Desk<'_>) {
    let offer: Value =
        desk.http.get(format!("{}/import", desk.api)).bearer_auth(ADMIN).send().await.unwrap().json().await.unwrap();
    let plan =
        offer["keys"].as_array().unwrap().iter().find(|k| k["provider"] == "chatgpt").expect("the plan is offered");
    let done = desk
        .http
        .post(format!("{}/import", desk.api))
        .bearer_auth(ADMIN)
        .json(&json!({ "fingerprints": [plan["fingerprint"]] }))
        .send()
        .await
        .unwrap();
    assert_eq!(done.status(), 200, "{}", done.text().await.unwrap());
}

fn plan_of(s: &StatusBody) -> Option<&keymux::api::types::KeyInfo> {
    s.keys.iter().find(|k| k.status.plan.is_some())
}
