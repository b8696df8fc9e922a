use super::*;

use base64::Engine as _;

fn jwt(claims: &Value) -> String {
    let part = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    format!("{}.{}.c2ln", part(&serde_json::json!({"alg": "RS256"})), part(claims))
}

fn login(exp: u64) -> Login {
    let auth = serde_json::json!({"chatgpt_account_id": "acct-1", "chatgpt_plan_type": "plus"});
    Login {
        id_token: jwt(&serde_json::json!({ AUTH_CLAIMS: auth })),
        access_token: jwt(&serde_json::json!({ "exp": exp, AUTH_CLAIMS: auth })),
        refresh_token: "rt_abc123".into(),
        account_id: "acct-1".into(),
    }
}

#[test]
fn a_codex_chatgpt_auth_json_gives_the_login_and_an_api_key_one_gives_none() {
    let l = login(2_000_000_000);
    let text = serde_json::json!({
        "auth_mode": "chatgpt",
        "OPENAI_API_KEY": null,
        "tokens": {"id_token": l.id_token, "access_token": l.access_token, "refresh_token": l.refresh_token,
                   "account_id": l.account_id},
        "last_refresh": "2026-11-01T00:00:00Z",
    });
    assert_eq!(from_codex_auth(&text.to_string()), Ok(Some(l.clone())));
    let api = r#"{"auth_mode":"apikey","OPENAI_API_KEY":"sk-x","tokens":null}"#;
    assert_eq!(from_codex_auth(api), Ok(None));
    let cut = r#"{"auth_mode":"chatgpt","tokens":{"access_token":"not-a-jwt","refresh_token":"r","id_token":"i"}}"#;
    let why = from_codex_auth(cut).expect_err("malformed");
    assert!(!why.contains("not-a-jwt"), "{why}");
}

#[test]
fn the_claims_name_the_plan_and_the_expiry_and_debug_shows_no_token() {
    let l = login(1_000);
    let info = l.info();
    assert_eq!(info.account_id, "acct-1");
    assert_eq!(info.plan_type.as_deref(), Some("plus"));
    assert_eq!(info.expires_unix, Some(1_000));
    assert!(!l.needs_refresh(1_000 - REFRESH_AHEAD_SECS - 1));
    assert!(l.needs_refresh(1_000 - REFRESH_AHEAD_SECS));
    let shown = format!("{l:?}");
    assert!(!shown.contains(&l.access_token) && !shown.contains("rt_abc123"), "{shown}");
    assert_eq!(Login::from_secret(&l.to_secret()), Ok(l));
}

#[test]
fn a_refresh_answer_replaces_the_tokens_and_keeps_what_it_leaves_out() {
    let l = login(1_000);
    let fresh = login(5_000);
    let answer = serde_json::json!({"access_token": fresh.access_token}).to_string();
    let next = l.refreshed(answer.as_bytes()).expect("refreshed");
    assert_eq!(next.access_token, fresh.access_token);
    assert_eq!(next.refresh_token, l.refresh_token);
    assert_eq!(next.expires_unix(), Some(5_000));
    assert!(l.refreshed(b"{\"error\":\"invalid_grant\"}").is_err());
    let body: Value = serde_json::from_slice(&l.refresh_body()).expect("json");
    assert_eq!(body["grant_type"], "refresh_token");
    assert_eq!(body["client_id"], CLIENT_ID);
}

#[test]
fn a_request_is_adapted_to_what_the_backend_takes() {
    let body = br#"{"model":"gpt-5.5","store":true,"max_output_tokens":64,"input":[]}"#;
    let adapted: Value = serde_json::from_slice(&adapt_request(body).expect("object")).expect("json");
    assert_eq!(adapted["store"], false);
    assert_eq!(adapted["stream"], true);
    assert_eq!(adapted["instructions"], "");
    assert!(adapted.get("max_output_tokens").is_none());
    let kept = br#"{"model":"m","instructions":"be brief"}"#;
    let kept: Value = serde_json::from_slice(&adapt_request(kept).expect("object")).expect("json");
    assert_eq!(kept["instructions"], "be brief");
    assert!(adapt_request(b"[1]").is_none());
}

#[test]
fn windows_are_read_from_the_headers_and_a_used_up_one_says_until_when() {
    let headers = [
        ("x-codex-primary-used-percent", "100.0"),
        ("x-codex-primary-window-minutes", "300"),
        ("x-codex-primary-reset-after-seconds", "600"),
        ("x-codex-secondary-used-percent", "42"),
        ("x-codex-secondary-window-minutes", "10080"),
        ("x-codex-secondary-reset-at", "9000"),
    ];
    let get = |name: &str| headers.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
    let w = PlanWindows::from_headers(get, Some(1_000));
    assert_eq!(
        w.primary,
        Some(UsageWindow { used_percent: 100.0, window_minutes: Some(300), resets_unix: Some(1_600) })
    );
    assert_eq!(w.secondary.map(|s| s.resets_unix), Some(Some(9_000)));
    assert_eq!(w.exhausted_until_unix(), Some(1_600));
    assert!(!PlanWindows::from_headers(|_| None, Some(0)).any());
    let at_only = PlanWindows::from_headers(get, None);
    assert_eq!(at_only.primary.map(|p| p.resets_unix), Some(None), "no clock: only reset-at is a time");
}

#[test]
fn usage_limit_reached_gives_its_wait() {
    let at = br#"{"error":{"type":"usage_limit_reached","plan_type":"plus","resets_at":5000,"resets_in_seconds":10}}"#;
    assert_eq!(usage_limit_wait(at), Some(10));
    assert_eq!(usage_limit_wait(br#"{"error":{"type":"usage_limit_reached"}}"#), Some(60));
    assert_eq!(usage_limit_wait(br#"{"error":{"type":"rate_limit_exceeded"}}"#), None);
}

#[test]
fn the_plan_is_its_account_an_organization_of_its_own() {
    let (a, b) = (login(2_000_000_000).to_secret(), login(2_000_000_100).to_secret());
    assert_eq!(Plan.identity(&a).expose(), "chatgpt-account:acct-1");
    assert_eq!(Plan.identity(&a).expose(), Plan.identity(&b).expose(), "a refreshed login is the same key");
    assert_eq!(Plan.org(&a, None, Some("org-set".into())), Some("chatgpt-acct-1".into()));
    assert_eq!(Plan.plan(&a).and_then(|p| p.plan_type), Some("plus".into()));
}

#[test]
fn a_request_goes_with_the_logins_token_and_account_and_only_a_create_is_adapted() {
    let secret = login(2_000_000_000).to_secret();
    let access = login(2_000_000_000).access_token;
    for (method, path, adapted) in [
        (Method::POST, "/responses", true),
        (Method::POST, "/responses?x=1", true),
        (Method::POST, "/responses/compact", false),
        (Method::GET, "/models", false),
    ] {
        let mut headers = http::HeaderMap::new();
        let body = bytes::Bytes::from_static(b"{\"input\":\"hi\",\"max_output_tokens\":9}");
        let mut out = Outgoing { method: &method, path_and_query: path, headers: &mut headers, body: body.clone() };
        Plan.prepare(&secret, &mut out).expect("prepared");
        assert_eq!(out.body != body, adapted, "{method} {path}");
        assert_eq!(headers[http::header::AUTHORIZATION].as_bytes(), format!("Bearer {access}").as_bytes());
        assert!(headers[http::header::AUTHORIZATION].is_sensitive());
        assert_eq!(headers[ACCOUNT_HEADER].as_bytes(), b"acct-1");
    }
    let mut headers = http::HeaderMap::new();
    let mut out =
        Outgoing { method: &Method::POST, path_and_query: "/responses", headers: &mut headers, body: "[1]".into() };
    assert!(Plan.prepare(&secret, &mut out).is_err(), "a body that is no object is refused");
    let mut out = Outgoing { method: &Method::GET, path_and_query: "/models", headers: &mut headers, body: "".into() };
    let error = Plan.prepare(&Secret::new("sk-not-a-login"), &mut out).expect_err("refused");
    assert!(!error.contains("sk-not"), "{error}");
}

#[test]
fn a_refresh_is_due_only_near_the_expiry_and_goes_to_the_auth_servers_token_endpoint() {
    let exp = 2_000_000_000;
    let secret = login(exp).to_secret();
    let endpoints = super::super::Endpoints::public();
    assert!(Plan.refresh_call(&secret, &endpoints, exp - REFRESH_AHEAD_SECS - 1).is_none());
    let call = Plan.refresh_call(&secret, &endpoints, exp - REFRESH_AHEAD_SECS).expect("due");
    assert_eq!(call.url, "https://auth.openai.com/oauth/token");
    let body: Value = serde_json::from_slice(&call.body).expect("json");
    assert_eq!((body["grant_type"].as_str(), body["client_id"].as_str()), (Some("refresh_token"), Some(CLIENT_ID)));
}

#[test]
fn only_a_newer_login_of_the_same_account_replaces_the_plans() {
    let (old, new) = (login(2_000_000_000).to_secret(), login(2_000_000_500).to_secret());
    assert!(Plan.check_replacement("plan", Some(&old), &new).is_ok());
    assert!(Plan.check_replacement("plan", None, &new).is_ok());
    assert!(Plan.check_replacement("plan", Some(&new), &old).expect_err("older").contains("nothing changed"));
    let mut other = login(2_000_000_900);
    other.account_id = "acct-2".into();
    let refused = Plan.check_replacement("plan", Some(&old), &other.to_secret()).expect_err("another account");
    assert!(refused.contains("another ChatGPT account"), "{refused}");
}
