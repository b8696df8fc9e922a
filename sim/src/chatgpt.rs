//! The ChatGPT Codex backend of one plan (one login), beside the API: `POST /backend-api/codex/responses`
//! and `/responses/compact`, `GET /backend-api/codex/models` (the plan's models, in Codex's catalog
//! shape), and the auth server's token endpoint
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
//! served by the same engine as the API's (`endpoints`). The plan's login and windows are `plan`'s.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};

use crate::body::read_body;
use crate::endpoints::{self, route};
use crate::exchange::Ctx;
use crate::plan::{PlanState, Window};
use crate::state::{Caller, State};

/// Where the backend's paths begin.
pub(crate) const BASE_PATH: &str = "/backend-api/codex";
/// The auth server's token endpoint.
pub(crate) const TOKEN_PATH: &str = "/oauth/token";
/// The OAuth client a refresh must name (Codex's).
const CLIENT_ID: &str = "app_EMoamEEZ73f0CkXaXp7hrann";
/// Fields the backend refuses.
const REFUSED: &[&str] = &["max_output_tokens", "max_completion_tokens"];

/// The caller the plan's requests are served as: a key named by the account.
fn caller(plan: &PlanState) -> Caller {
    Caller { secret: format!("chatgpt-{}", plan.spec.account_id), org: plan.org }
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
    let Some(bytes) = read_body(&parts.headers, body).await else {
        return detail(StatusCode::BAD_REQUEST, "Invalid request body");
    };
    if parts.uri.path() == TOKEN_PATH {
        return refresh(&state, plan, &bytes);
    }
    let mut ctx = Ctx::new(state.clone(), &parts, Some(caller(plan)));
    let now = state.clock.unix_secs();
    if let Err((status, code, message)) = authenticate(plan, &parts.headers, now) {
        ctx.log(status.as_u16(), Some(code.to_owned()), false);
        return error(status, json!({"error": {"message": message, "type": "invalid_request_error", "code": code}}));
    }
    let rest = parts.uri.path().strip_prefix(BASE_PATH).unwrap_or_default();
    let Some(route) = route(&parts.method, &format!("/v1{rest}"), false) else {
        ctx.log(404, None, false);
        return detail(StatusCode::NOT_FOUND, "Not Found");
    };
    if parts.method == axum::http::Method::GET && rest == "/models" {
        ctx.log(200, None, true);
        let list = crate::models::plan_list(&state.org(plan.org).models);
        return with_windows(error(StatusCode::OK, list), &plan.windows(), now);
    }
    let creates = rest == "/responses";
    if creates {
        if let Err(why) = required_fields(&bytes) {
            ctx.log(400, Some("detail".into()), false);
            return detail(StatusCode::BAD_REQUEST, &why);
        }
    }
    let generates = creates || rest == "/responses/compact";
    if let Some(model) = generates.then(|| unsupported_model(&state, plan, &bytes)).flatten() {
        ctx.log(400, Some("detail".into()), false);
        let message = format!("The '{model}' model is not supported when using Codex with a ChatGPT account.");
        return detail(StatusCode::BAD_REQUEST, &message);
    }
    let windows = if generates { plan.take_use(now) } else { Ok(plan.windows()) };
    let windows = match windows {
        Ok(windows) => windows,
        Err(windows) => {
            ctx.log(429, Some("usage_limit_reached".into()), false);
            return with_windows(usage_limit(plan, &windows, now), &windows, now);
        }
    };
    let mut resp = endpoints::run(ctx, caller(plan), route, bytes).await;
    resp.headers_mut().remove("openai-organization");
    with_windows(resp, &windows, now)
}

/// The access token must be one the plan issued and still live, for the account the header names.
fn authenticate(plan: &PlanState, headers: &HeaderMap, now: u64) -> Result<(), (StatusCode, &'static str, String)> {
    let bearer = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default();
    let token = bearer.strip_prefix("Bearer ").unwrap_or_default().trim();
    let Some(exp) = plan.expiry(token) else {
        return Err((StatusCode::UNAUTHORIZED, "invalid_token", "Could not validate your credentials".into()));
    };
    if exp <= now {
        let message = "Provided authentication token is expired. Please try signing in again.";
        return Err((StatusCode::UNAUTHORIZED, "token_expired", message.into()));
    }
    let account = headers.get("chatgpt-account-id").and_then(|v| v.to_str().ok());
    if account != Some(plan.spec.account_id.as_str()) {
        return Err((StatusCode::FORBIDDEN, "account_mismatch", "The chatgpt-account-id header does not match".into()));
    }
    Ok(())
}

/// The body's model, when it is a string the plan does not serve (the backend's own 400, not the
/// API's `model_not_found`).
fn unsupported_model(state: &State, plan: &PlanState, bytes: &[u8]) -> Option<String> {
    let body: Value = serde_json::from_slice(bytes).ok()?;
    let model = body.get("model")?.as_str()?;
    (!state.org(plan.org).models.contains(&model)).then(|| model.to_owned())
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
    let Some(tokens) = plan.rotate(field("refresh_token"), state.clock.unix_secs()) else {
        let message =
            "Your refresh token has already been used to generate a new access token. Please try signing in again.";
        return error(
            StatusCode::UNAUTHORIZED,
            json!({"error": {"message": message, "type": "invalid_request_error", "code": "refresh_token_reused"}}),
        );
    };
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
