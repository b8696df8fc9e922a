//! A client's login instead of a token file (`oauth`): the browser flow approved in the dashboard's API
//! with PKCE and a loopback redirect, the device flow, refresh rotation, revocation, the bounded table
//! of logins under way, and real Codex 0.171 logging in through its `gateway_oauth` as `keymux setup
//! codex --login` writes it, then running a turn in the pool the person picked.

#![allow(clippy::unwrap_used, clippy::disallowed_methods, reason = "tests")]

use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::support::*;

const VERIFIER: &str = "a-code-verifier-of-forty-three-or-more-characters-0123456789";
const REDIRECT: &str = "http://127.0.0.1:45123/callback";

fn challenge(verifier: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// A client that does not follow redirects, as Codex's does not and as a test must see them.
fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

/// A gateway with the pool `work` (keys a1 and b1).
async fn gateway() -> Harness {
    let h = Harness::start(three_orgs(), &five_keys()).await;
    let (status, body) =
        Admin::new(&h.root).post_json("/pools", Some(json!({"name": "work", "keys": ["a1", "b1"]}))).await;
    assert_eq!(status, 201, "{body}");
    h
}

/// `GET /oauth/authorize` as Codex opens it: the dashboard link's request id.
async fn authorize(h: &Harness, client_id: &str, redirect: &str) -> Result<String, (u16, Value)> {
    let query = [
        ("response_type", "code"),
        ("client_id", client_id),
        ("redirect_uri", redirect),
        ("code_challenge", &challenge(VERIFIER)),
        ("code_challenge_method", "S256"),
        ("state", "st4te"),
    ];
    let answer = no_redirects().get(format!("{}/oauth/authorize", h.root)).query(&query).send().await.unwrap();
    let status = answer.status().as_u16();
    if status != 303 && status != 302 && status != 307 {
        return Err((status, answer.json().await.unwrap_or(Value::Null)));
    }
    let location = answer.headers()["location"].to_str().unwrap().to_owned();
    Ok(location.strip_prefix("/#authorize=").unwrap_or_else(|| panic!("to the dashboard: {location}")).to_owned())
}

/// The person's yes in the dashboard for `pool`: the client's redirect with the code.
async fn approve(h: &Harness, id: &str, pool: &str) -> url::Url {
    let (status, body) = Admin::new(&h.root)
        .post_json(&format!("/oauth/requests/{id}"), Some(json!({"approve": true, "pool": pool})))
        .await;
    assert_eq!(status, 200, "{body}");
    url::Url::parse(body["redirect"].as_str().unwrap()).unwrap()
}

fn query_value(url: &url::Url, name: &str) -> Option<String> {
    url.query_pairs().find(|(k, _)| k == name).map(|(_, v)| v.into_owned())
}

/// `POST /oauth/token` with `form`: the status and the JSON answer.
async fn token(h: &Harness, form: &[(&str, &str)]) -> (u16, Value) {
    let answer = client().post(format!("{}/oauth/token", h.root)).form(form).send().await.unwrap();
    (answer.status().as_u16(), answer.json().await.unwrap())
}

async fn exchange(h: &Harness, code: &str, redirect: &str, verifier: &str) -> (u16, Value) {
    let form = [
        ("grant_type", "authorization_code"),
        ("client_id", "codex"),
        ("code", code),
        ("redirect_uri", redirect),
        ("code_verifier", verifier),
    ];
    token(h, &form).await
}

async fn refresh(h: &Harness, refresh_token: &str) -> (u16, Value) {
    token(h, &[("grant_type", "refresh_token"), ("client_id", "codex"), ("refresh_token", refresh_token)]).await
}

/// A browser login approved for `pool`, exchanged: the token answer.
async fn login(h: &Harness, pool: &str) -> Value {
    let id = authorize(h, "codex", REDIRECT).await.expect("a valid request");
    let redirect = approve(h, &id, pool).await;
    assert_eq!(query_value(&redirect, "state").as_deref(), Some("st4te"), "the client's state comes back");
    let code = query_value(&redirect, "code").expect("a code");
    let (status, issued) = exchange(h, &code, REDIRECT, VERIFIER).await;
    assert_eq!(status, 200, "{issued}");
    issued
}

/// A small Responses call with a login's token in Codex's header (no `authorization`): its status.
async fn call_with(h: &Harness, access: &str) -> u16 {
    let body = json!({"model": "gpt-5.5", "input": "hello", "store": false});
    let answer = client()
        .post(format!("{}/responses", h.base))
        .header("x-keymux-token", format!("Bearer {access}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = answer.status().as_u16();
    let _ = answer.bytes().await;
    status
}

#[tokio::test]
async fn a_browser_login_issues_a_token_of_the_picked_pool_and_the_code_works_once() {
    let h = gateway().await;
    let issued = login(&h, "work").await;
    assert_eq!(issued["token_type"], "Bearer");
    assert!(issued["expires_in"].as_u64().unwrap() > 60, "{issued}");
    let access = issued["access_token"].as_str().unwrap();
    assert_eq!(call_with(&h, access).await, 200);
    let last = decisions_api(&h.root).await["data"].as_array().unwrap().last().cloned().unwrap();
    assert_eq!(last["pool"], "work", "the request ran in the pool the person picked");
    assert!(last["token"].as_str().unwrap().starts_with("codex-login"), "{}", last["token"]);
    let tokens = Admin::new(&h.root).get_json("/tokens").await;
    let listed = tokens.as_array().unwrap().iter().find(|t| t["login"] == true).expect("listed with the tokens");
    assert_eq!(listed["pool"], "work");

    // A second exchange of the same code is refused, whatever the verifier.
    let id = authorize(&h, "codex", REDIRECT).await.unwrap();
    let code = query_value(&approve(&h, &id, "work").await, "code").unwrap();
    assert_eq!(exchange(&h, &code, REDIRECT, VERIFIER).await.0, 200);
    let (status, again) = exchange(&h, &code, REDIRECT, VERIFIER).await;
    assert_eq!((status, again["error"].as_str()), (400, Some("invalid_grant")), "{again}");
}

#[tokio::test]
async fn a_wrong_verifier_or_redirect_is_refused_and_burns_the_code() {
    let h = gateway().await;
    let id = authorize(&h, "codex", REDIRECT).await.unwrap();
    let code = query_value(&approve(&h, &id, "all").await, "code").unwrap();
    let (status, refused) = exchange(&h, &code, REDIRECT, "another-verifier-another-verifier-another-verifier").await;
    assert_eq!((status, refused["error"].as_str()), (400, Some("invalid_grant")), "{refused}");
    assert!(refused["error_description"].as_str().unwrap().contains("code_verifier"), "{refused}");
    assert_eq!(exchange(&h, &code, REDIRECT, VERIFIER).await.0, 400, "a refused try used the code up");

    let id = authorize(&h, "codex", REDIRECT).await.unwrap();
    let code = query_value(&approve(&h, &id, "all").await, "code").unwrap();
    let (status, refused) = exchange(&h, &code, "http://127.0.0.1:9/callback", VERIFIER).await;
    assert_eq!((status, refused["error"].as_str()), (400, Some("invalid_grant")), "{refused}");

    // Requests that never reach the dashboard: an unknown client, a redirect off this machine or off
    // its callback path, no PKCE.
    let (status, refused) = authorize(&h, "someone", REDIRECT).await.unwrap_err();
    assert_eq!((status, refused["error"].as_str()), (401, Some("invalid_client")), "{refused}");
    for redirect in ["https://127.0.0.1:45123/callback", "http://evil.test:45123/callback", "http://127.0.0.1:45123/x"]
    {
        let (status, refused) = authorize(&h, "codex", redirect).await.unwrap_err();
        assert_eq!((status, refused["error"].as_str()), (400, Some("invalid_request")), "{redirect}: {refused}");
    }
    let plain = no_redirects()
        .get(format!("{}/oauth/authorize", h.root))
        .query(&[("response_type", "code"), ("client_id", "codex"), ("redirect_uri", REDIRECT), ("state", "s")])
        .send()
        .await
        .unwrap();
    assert_eq!(plain.status().as_u16(), 400, "PKCE is required");

    // A refusal in the dashboard goes back to the client as `access_denied`.
    let id = authorize(&h, "codex", REDIRECT).await.unwrap();
    let (status, body) =
        Admin::new(&h.root).post_json(&format!("/oauth/requests/{id}"), Some(json!({"approve": false}))).await;
    assert_eq!(status, 200, "{body}");
    let back = url::Url::parse(body["redirect"].as_str().unwrap()).unwrap();
    assert_eq!(query_value(&back, "error").as_deref(), Some("access_denied"));
    assert!(query_value(&back, "code").is_none());
}

#[tokio::test]
async fn refresh_rotates_and_revoking_the_token_stops_access_and_refresh() {
    let h = gateway().await;
    let first = login(&h, "work").await;
    let (status, second) = refresh(&h, first["refresh_token"].as_str().unwrap()).await;
    assert_eq!(status, 200, "{second}");
    assert_ne!(second["refresh_token"], first["refresh_token"], "rotated");
    let (status, reused) = refresh(&h, first["refresh_token"].as_str().unwrap()).await;
    assert_eq!((status, reused["error"].as_str()), (400, Some("invalid_grant")), "an old refresh token is spent");
    assert_eq!(call_with(&h, first["access_token"].as_str().unwrap()).await, 401, "the old access token went");
    let access = second["access_token"].as_str().unwrap();
    assert_eq!(call_with(&h, access).await, 200);

    // An access token expires: refused once its hour is up, until the client refreshes.
    h.advance(Duration::from_secs(3601));
    assert_eq!(call_with(&h, access).await, 401, "expired");
    let (status, third) = refresh(&h, second["refresh_token"].as_str().unwrap()).await;
    assert_eq!(status, 200, "{third}");
    assert_eq!(call_with(&h, third["access_token"].as_str().unwrap()).await, 200);

    let api = Admin::new(&h.root);
    let tokens = api.get_json("/tokens").await;
    let id = tokens.as_array().unwrap().iter().find(|t| t["login"] == true).unwrap()["id"].as_str().unwrap().to_owned();
    assert_eq!(api.delete(&format!("/tokens/{id}")).await, 204);
    assert_eq!(call_with(&h, third["access_token"].as_str().unwrap()).await, 401, "revoked: no access");
    let (status, refused) = refresh(&h, third["refresh_token"].as_str().unwrap()).await;
    assert_eq!((status, refused["error"].as_str()), (400, Some("invalid_grant")), "revoked: no refresh");
}

async fn poll(h: &Harness, device_code: &str) -> (u16, Value) {
    let form = [
        ("grant_type", "urn:ietf:params:oauth:grant-type:device_code"),
        ("client_id", "codex"),
        ("device_code", device_code),
    ];
    token(h, &form).await
}

async fn device(h: &Harness) -> Value {
    let answer =
        client().post(format!("{}/oauth/device", h.root)).form(&[("client_id", "codex")]).send().await.unwrap();
    assert_eq!(answer.status().as_u16(), 200);
    answer.json().await.unwrap()
}

#[tokio::test]
async fn the_device_flow_waits_for_the_code_entered_in_the_dashboard() {
    let h = gateway().await;
    let started = device(&h).await;
    assert!(started["verification_uri"].as_str().unwrap().starts_with(&h.root), "{started}");
    let (device_code, user_code) = (started["device_code"].as_str().unwrap(), started["user_code"].as_str().unwrap());
    assert_eq!(poll(&h, device_code).await.1["error"], "authorization_pending");
    assert_eq!(poll(&h, device_code).await.1["error"], "slow_down", "polled again within the interval");

    let api = Admin::new(&h.root);
    let wrong = api.post_json("/oauth/device", Some(json!({"approve": true, "user_code": "BCDF-GHJK"}))).await;
    assert_eq!(wrong.0, 404, "{}", wrong.1);
    let typed = user_code.to_lowercase().replace('-', " ");
    let (status, body) =
        api.post_json("/oauth/device", Some(json!({"approve": true, "pool": "work", "user_code": typed}))).await;
    assert_eq!((status, body["client"].as_str()), (200, Some("Codex")), "{body}");
    h.advance(Duration::from_secs(6));
    let (status, issued) = poll(&h, device_code).await;
    assert_eq!(status, 200, "{issued}");
    assert_eq!(call_with(&h, issued["access_token"].as_str().unwrap()).await, 200);
    assert_eq!(poll(&h, device_code).await.1["error"], "expired_token", "a device code works once");

    let refused = device(&h).await;
    let code = refused["user_code"].as_str().unwrap();
    assert_eq!(api.post_json("/oauth/device", Some(json!({"approve": false, "user_code": code}))).await.0, 200);
    assert_eq!(poll(&h, refused["device_code"].as_str().unwrap()).await.1["error"], "access_denied");

    let late = device(&h).await;
    h.advance(Duration::from_secs(11 * 60));
    assert_eq!(poll(&h, late["device_code"].as_str().unwrap()).await.1["error"], "expired_token");
}

#[tokio::test]
async fn logins_under_way_are_bounded_and_the_oldest_goes() {
    let h = gateway().await;
    let first = authorize(&h, "codex", REDIRECT).await.unwrap();
    for _ in 0..keymux::oauth::MAX_PENDING {
        authorize(&h, "codex", REDIRECT).await.unwrap();
    }
    let api = Admin::new(&h.root);
    assert_eq!(api.get(&format!("/oauth/requests/{first}")).await.status().as_u16(), 404, "pushed out");
    let last = authorize(&h, "codex", REDIRECT).await.unwrap();
    let shown = api.get_json(&format!("/oauth/requests/{last}")).await;
    assert_eq!((shown["client"].as_str(), shown["callback"].as_str()), (Some("Codex"), Some("127.0.0.1:45123")));
}

/// Every file under `dir`, read whole.
fn files_under(dir: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(files_under(&path));
        } else if let Ok(bytes) = std::fs::read(&path) {
            found.push((path, bytes));
        }
    }
    found
}

#[tokio::test]
async fn real_codex_logs_in_through_the_dashboard_and_runs_a_turn_in_the_picked_pool() {
    use keymux::setup::{Choices, Client};
    let h = gateway().await;
    let codex_home = tempfile::tempdir().unwrap();
    let (home, state) = (codex_home.path(), tempfile::tempdir().unwrap());
    let config = home.join("config.toml");
    std::fs::write(&config, EXISTING_CODEX_CONFIG_HEAD).unwrap();
    let choices = Choices { login: true, custom_provider: true, ..Choices::default() };
    let shown =
        keymux::setup::preview_with(Client::Codex, &config, &h.base, None, choices, Some(state.path())).unwrap();
    assert!(!shown.makes_token(), "a login makes no token at setup");
    let never = || async { Err::<keymux::secrets::Secret, String>("no token at setup".into()) };
    shown.confirm(state.path(), never).await.expect("set up");
    assert!(!home.join("auth.json").exists(), "no token file");

    let output = home.join("codex-output.txt");
    let log = std::fs::File::create(&output).unwrap();
    let work = tempfile::tempdir().unwrap();
    let home_str = home.to_str().unwrap();
    let mut codex = tokio::process::Command::new(codex_bin())
        .args(["exec", "--skip-git-repo-check", "Say hello"])
        .current_dir(work.path())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs([("HOME", home_str), ("CODEX_HOME", home_str), ("BROWSER", "true")])
        // Codex keeps the key of its encrypted store (`secrets/gateway_oauth.age`) in the keychain: the
        // test's own session keyring (scripts/test runs one).
        .envs(
            ["DBUS_SESSION_BUS_ADDRESS", "XDG_RUNTIME_DIR"]
                .into_iter()
                .filter_map(|v| Some((v, std::env::var(v).ok()?))),
        )
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // Codex prints the authorization URL (it cannot open a browser here), as a user would see it.
    let prefix = format!("{}/oauth/authorize?", h.root);
    let printed = until(
        "Codex asks to log in",
        || async { std::fs::read_to_string(&output).unwrap_or_default() },
        |text| text.contains(&prefix),
    )
    .await;
    let url = printed.split_whitespace().find(|w| w.starts_with(&prefix)).unwrap().to_owned();
    // The browser opens it and lands on the dashboard's approval; the person picks `work` and approves.
    let opened = no_redirects().get(&url).send().await.unwrap();
    let location = opened.headers()["location"].to_str().unwrap().to_owned();
    let id = location.strip_prefix("/#authorize=").unwrap();
    let back = approve(&h, id, "work").await;
    assert_eq!(back.host_str(), Some("127.0.0.1"));
    let callback = client().get(back.as_str()).send().await.unwrap();
    assert!(callback.status().is_success(), "Codex took the code: {}", callback.status());

    let status = tokio::time::timeout(Duration::from_secs(180), codex.wait()).await.expect("Codex finished").unwrap();
    let printed = std::fs::read_to_string(&output).unwrap_or_default();
    assert!(status.success(), "Codex ran its turn through Keymux:\n{printed}");
    let records = decisions_api(&h.root).await;
    let turn = records["data"].as_array().unwrap().iter().rev().find(|r| r["operation"] == "responses_create").cloned();
    let turn = turn.unwrap_or_else(|| panic!("a Responses turn was recorded: {records}"));
    assert_eq!(turn["pool"], "work", "{turn}");
    assert!(turn["token"].as_str().unwrap().starts_with("codex-login"), "{turn}");

    assert!(home.join("secrets/gateway_oauth.age").exists(), "Codex keeps its login in its encrypted store");
    std::fs::remove_file(&output).unwrap();
    for (path, bytes) in files_under(home) {
        let text = String::from_utf8_lossy(&bytes);
        let leaked = text.contains(TOKEN) || text.contains("kmr-") || keymux_token_in(&text);
        assert!(!leaked, "a Keymux token is in {}", path.display());
    }
}

/// Whether `text` holds a token Keymux issues: `km-` and 43 base64url characters.
fn keymux_token_in(text: &str) -> bool {
    text.match_indices("km-").any(|(at, _)| {
        let rest = &text[at + 3..];
        rest.len() >= 43 && rest.bytes().take(43).all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    })
}
