//! The ChatGPT Codex backend of one plan (one login), beside the API: `POST /backend-api/codex/responses`
//! and `/responses/compact`, `GET /backend-api/codex/models`, and the auth server's token endpoint
//! `POST /oauth/token`.
//!
//! What it checks and answers as that backend does: the access token (a JWT it issued, refused with
//! 401 `token_expired` once its `exp` has passed on the simulator's clock) and the
//! `chatgpt-account-id` header; the Responses body it requires (`stream: true`, `store: false`,
//! `instructions`) and the fields it refuses, each with a `{"detail": …}` 400; the plan's two usage
//! windows (5 hours and a week, counted in requests), reported in `x-codex-{primary,secondary}-*`
//! headers and, once either is used up, a 429 `usage_limit_reached` with its reset. A refresh
//! rotates the refresh token: an old one is refused (`refresh_token_reused`). The plan is an
//! organization of its own (its encrypted content is readable only there); requests that pass are
//! served by the same engine as the API's.

use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use base64::Engine as _;
use serde_json::{json, Value};

use crate::config::PlanSpec;
use crate::exchange::Ctx;
use crate::server;
use crate::state::{Caller, State};
use crate::util::{lock, random_hex};

/// Where the backend's paths begin.
pub(crate) const BASE_PATH: &str = "/backend-api/codex";
/// The auth server's token endpoint.
pub(crate) const TOKEN_PATH: &str = "/oauth/token";
/// The OAuth client a refresh must name (Codex's).
const CLIENT_ID: &str = "app_EMoamEEZ73f0CkXaXp7hrann";
/// Where a token's ChatGPT claims are.
const AUTH_CLAIMS: &str = "https://api.openai.com/auth";
/// Fields the backend refuses.
const REFUSED: &[&str] = &["max_output_tokens", "max_completion_tokens"];
/// Access tokens still accepted after a refresh issued newer ones (they live until their `exp`).
const KEPT_TOKENS: usize = 4;
/// Logins remembered for [`PlanState::issued`].
const KEPT_LOGINS: usize = 64;
/// The windows' lengths, minutes.
const PRIMARY_MINUTES: u64 = 300;
const SECONDARY_MINUTES: u64 = 7 * 24 * 60;

/// A login the plan issued.
#[derive(Clone, Debug)]
pub struct Tokens {
    /// The OpenID token.
    pub id_token: String,
    /// The bearer token.
    pub access_token: String,
    /// The token that gets new ones.
    pub refresh_token: String,
    /// The account.
    pub account_id: String,
}

/// One usage window, counted in requests from its start.
#[derive(Debug, Clone, Copy)]
struct Window {
    minutes: u64,
    limit: u64,
    used: u64,
    start_unix: u64,
}

impl Window {
    fn new(minutes: u64, limit: u64) -> Self {
        Window { minutes, limit, used: 0, start_unix: 0 }
    }

    /// Starts it again when its time is up (a window starts at its first use).
    fn roll(&mut self, now: u64) {
        if self.used == 0 || now >= self.resets_at() {
            self.used = 0;
            self.start_unix = now;
        }
    }

    fn resets_at(&self) -> u64 {
        self.start_unix + self.minutes * 60
    }

    fn exhausted(&self) -> bool {
        self.used >= self.limit
    }

    fn percent(&self) -> f64 {
        (self.used as f64 * 100.0 / self.limit.max(1) as f64).min(100.0)
    }
}

/// The plan's live state: its login and its windows.
#[derive(Debug)]
pub(crate) struct PlanState {
    pub spec: PlanSpec,
    /// The organization its requests are served in.
    pub org: usize,
    login: Mutex<Login>,
    windows: Mutex<[Window; 2]>,
}

#[derive(Debug)]
struct Login {
    current: Tokens,
    /// Issued access tokens and their expiry (the newest last), bounded.
    access: Vec<(String, u64)>,
    /// Refreshes granted, and refresh requests made (granted or not).
    refreshes: u64,
    asked: u64,
    /// Every login issued, the first included (bounded: the latest `KEPT_LOGINS`).
    issued: Vec<Tokens>,
}

impl PlanState {
    pub(crate) fn new(spec: PlanSpec, org: usize, now_unix: u64) -> Self {
        let (tokens, exp) = issue(&spec, now_unix);
        let windows = [
            Window::new(PRIMARY_MINUTES, spec.primary_requests),
            Window::new(SECONDARY_MINUTES, spec.secondary_requests),
        ];
        let login = Login {
            access: vec![(tokens.access_token.clone(), exp)],
            issued: vec![tokens.clone()],
            current: tokens,
            refreshes: 0,
            asked: 0,
        };
        PlanState { spec, org, login: Mutex::new(login), windows: Mutex::new(windows) }
    }

    /// The login as it stands (what a test writes into Codex's `auth.json`).
    pub(crate) fn tokens(&self) -> Tokens {
        lock(&self.login).current.clone()
    }

    /// Every login issued (the latest 64), so a test can look for each of their tokens.
    pub(crate) fn issued(&self) -> Vec<Tokens> {
        lock(&self.login).issued.clone()
    }

    /// How many refreshes were granted, and how many were asked for.
    pub(crate) fn refreshes(&self) -> (u64, u64) {
        let login = lock(&self.login);
        (login.refreshes, login.asked)
    }

    /// The caller its requests are served as: a key named by the account.
    fn caller(&self) -> Caller {
        Caller { secret: format!("chatgpt-{}", self.spec.account_id), org: self.org }
    }

    /// Uses up the short window now (a test's shortcut to an exhausted plan).
    pub(crate) fn exhaust(&self, now: u64) {
        let mut windows = lock(&self.windows);
        windows[0].roll(now);
        windows[0].used = windows[0].limit;
    }
}

/// A JWT with these claims (signed with nothing a client checks).
fn jwt(claims: &Value) -> String {
    let part = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    format!("{}.{}.{}", part(&json!({"alg": "RS256", "typ": "JWT"})), part(claims), random_hex(16))
}

/// A new login, and its access token's expiry.
fn issue(spec: &PlanSpec, now_unix: u64) -> (Tokens, u64) {
    let exp = now_unix + spec.token_lifetime.as_secs();
    let auth = json!({"chatgpt_account_id": spec.account_id, "chatgpt_plan_type": spec.plan_type});
    let tokens = Tokens {
        id_token: jwt(&json!({"exp": exp, "email": "plan@example.com", AUTH_CLAIMS: auth, "jti": random_hex(8)})),
        access_token: jwt(&json!({"exp": exp, AUTH_CLAIMS: auth, "jti": random_hex(8)})),
        refresh_token: format!("rt_{}", random_hex(24)),
        account_id: spec.account_id.clone(),
    };
    (tokens, exp)
}

/// Whether the path is this backend's or the token endpoint's.
pub(crate) fn owns(path: &str) -> bool {
    path == TOKEN_PATH || path.starts_with(&format!("{BASE_PATH}/"))
}

/// Answers a request to the backend or the token endpoint.
pub(crate) async fn handle(state: Arc<State>, req: Request) -> Response {
    let Some(plan) = state.plan.as_ref() else {
        return detail(StatusCode::NOT_FOUND, "Not Found");
    };
    let (parts, body) = req.into_parts();
    let Some(bytes) = server::read_body(&parts.headers, body).await else {
        return detail(StatusCode::BAD_REQUEST, "Invalid request body");
    };
    if parts.uri.path() == TOKEN_PATH {
        return refresh(&state, plan, &bytes);
    }
    let mut ctx = Ctx::new(state.clone(), &parts, Some(plan.caller()));
    let now = state.clock.unix_secs();
    if let Err((status, code, message)) = authenticate(plan, &parts.headers, now) {
        ctx.log(status.as_u16(), Some(code.to_owned()), false);
        return error(status, json!({"error": {"message": message, "type": "invalid_request_error", "code": code}}));
    }
    let rest = parts.uri.path().strip_prefix(BASE_PATH).unwrap_or_default();
    let Some(route) = server::route(&parts.method, &format!("/v1{rest}"), false) else {
        ctx.log(404, None, false);
        return detail(StatusCode::NOT_FOUND, "Not Found");
    };
    let creates = rest == "/responses";
    if creates {
        if let Err(why) = required_fields(&bytes) {
            ctx.log(400, Some("detail".into()), false);
            return detail(StatusCode::BAD_REQUEST, &why);
        }
    }
    let generates = creates || rest == "/responses/compact";
    let windows = if generates { take_use(plan, now) } else { Ok(*lock(&plan.windows)) };
    let windows = match windows {
        Ok(windows) => windows,
        Err(windows) => {
            ctx.log(429, Some("usage_limit_reached".into()), false);
            return with_windows(usage_limit(plan, &windows, now), &windows, now);
        }
    };
    let mut resp = server::run(ctx, plan.caller(), route, bytes).await;
    resp.headers_mut().remove("openai-organization");
    with_windows(resp, &windows, now)
}

/// The access token must be one the plan issued and still live, for the account the header names.
fn authenticate(plan: &PlanState, headers: &HeaderMap, now: u64) -> Result<(), (StatusCode, &'static str, String)> {
    let bearer = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default();
    let token = bearer.strip_prefix("Bearer ").unwrap_or_default().trim();
    let login = lock(&plan.login);
    let Some((_, exp)) = login.access.iter().find(|(t, _)| t == token) else {
        return Err((StatusCode::UNAUTHORIZED, "invalid_token", "Could not validate your credentials".into()));
    };
    if *exp <= now {
        let message = "Provided authentication token is expired. Please try signing in again.";
        return Err((StatusCode::UNAUTHORIZED, "token_expired", message.into()));
    }
    let account = headers.get("chatgpt-account-id").and_then(|v| v.to_str().ok());
    if account != Some(plan.spec.account_id.as_str()) {
        return Err((StatusCode::FORBIDDEN, "account_mismatch", "The chatgpt-account-id header does not match".into()));
    }
    Ok(())
}

/// What the backend requires of a Responses body, and what it refuses, in its own words.
fn required_fields(bytes: &[u8]) -> Result<(), String> {
    let Ok(Value::Object(body)) = serde_json::from_slice::<Value>(bytes) else {
        return Err("Invalid request body".into());
    };
    if body.get("stream") != Some(&Value::Bool(true)) {
        return Err("Stream must be set to true".into());
    }
    if body.get("store") != Some(&Value::Bool(false)) {
        return Err("Store must be set to false".into());
    }
    if !body.get("instructions").is_some_and(Value::is_string) {
        return Err("Instructions are required".into());
    }
    match REFUSED.iter().find(|f| body.contains_key(**f)) {
        Some(field) => Err(format!("Unsupported parameter: {field}")),
        None => Ok(()),
    }
}

/// Counts one request in both windows, or says they are used up (nothing counted).
fn take_use(plan: &PlanState, now: u64) -> Result<[Window; 2], [Window; 2]> {
    let mut windows = lock(&plan.windows);
    windows.iter_mut().for_each(|w| w.roll(now));
    if windows.iter().any(Window::exhausted) {
        return Err(*windows);
    }
    windows.iter_mut().for_each(|w| w.used += 1);
    Ok(*windows)
}

/// The 429 of a used-up plan: the latest reset of its used-up windows.
fn usage_limit(plan: &PlanState, windows: &[Window; 2], now: u64) -> Response {
    let resets_at = windows.iter().filter(|w| w.exhausted()).map(Window::resets_at).max().unwrap_or(now);
    let body = json!({"error": {
        "type": "usage_limit_reached",
        "message": "The usage limit has been reached",
        "plan_type": plan.spec.plan_type,
        "resets_at": resets_at,
        "resets_in_seconds": resets_at.saturating_sub(now),
    }});
    error(StatusCode::TOO_MANY_REQUESTS, body)
}

/// The answer with the windows' headers.
fn with_windows(mut resp: Response, windows: &[Window; 2], now: u64) -> Response {
    let h = resp.headers_mut();
    for (which, w) in ["primary", "secondary"].iter().zip(windows) {
        let mut set = |what: &str, value: String| {
            if let (Ok(n), Ok(v)) =
                (HeaderName::from_bytes(format!("x-codex-{which}-{what}").as_bytes()), HeaderValue::from_str(&value))
            {
                h.insert(n, v);
            }
        };
        set("used-percent", format!("{:.1}", w.percent()));
        set("window-minutes", w.minutes.to_string());
        // A window not yet begun begins with its first use: its whole length is still ahead.
        let resets = if w.used == 0 { now + w.minutes * 60 } else { w.resets_at().max(now) };
        set("reset-at", resets.to_string());
        set("reset-after-seconds", resets.saturating_sub(now).to_string());
    }
    resp
}

/// `POST /oauth/token`: new tokens for the current refresh token; an old one is refused.
fn refresh(state: &State, plan: &PlanState, bytes: &[u8]) -> Response {
    let body: Value = serde_json::from_slice(bytes).unwrap_or_default();
    let field = |name: &str| body.get(name).and_then(Value::as_str).unwrap_or_default();
    if field("client_id") != CLIENT_ID {
        return error(StatusCode::UNAUTHORIZED, json!({"error": "invalid_client"}));
    }
    if field("grant_type") != "refresh_token" {
        return error(StatusCode::BAD_REQUEST, json!({"error": "unsupported_grant_type"}));
    }
    let now = state.clock.unix_secs();
    let mut login = lock(&plan.login);
    login.asked += 1;
    if field("refresh_token") != login.current.refresh_token {
        let message =
            "Your refresh token has already been used to generate a new access token. Please try signing in again.";
        return error(
            StatusCode::UNAUTHORIZED,
            json!({"error": {"message": message, "type": "invalid_request_error", "code": "refresh_token_reused"}}),
        );
    }
    let (tokens, exp) = issue(&plan.spec, now);
    login.access.push((tokens.access_token.clone(), exp));
    if login.access.len() > KEPT_TOKENS {
        login.access.remove(0);
    }
    login.current = tokens.clone();
    login.refreshes += 1;
    if login.issued.len() == KEPT_LOGINS {
        login.issued.remove(0);
    }
    login.issued.push(tokens.clone());
    let answer = json!({
        "id_token": tokens.id_token,
        "access_token": tokens.access_token,
        "refresh_token": tokens.refresh_token,
        "expires_in": plan.spec.token_lifetime.as_secs(),
    });
    error(StatusCode::OK, answer)
}

/// A FastAPI-style `{"detail": …}` answer, as the backend gives for a request it will not take.
fn detail(status: StatusCode, message: &str) -> Response {
    error(status, json!({ "detail": message }))
}

/// A JSON answer.
fn error(status: StatusCode, body: Value) -> Response {
    let mut resp = Response::new(Body::from(body.to_string()));
    *resp.status_mut() = status;
    resp.headers_mut().insert("content-type", HeaderValue::from_static("application/json"));
    resp
}
