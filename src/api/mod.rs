//! The control API under `/keymux/api`: what the dashboard, the tray and the CLI read and change, all
//! through named types (`types`) and one live event stream (`stream`).
//!
//! Every call passes one guard: a loopback `Host`, no foreign browser `Origin`, and a control
//! credential (the dashboard session's header, or the admin credential). A
//! `/v1` client token is refused here, as a control credential is refused on `/v1`. A body is read
//! only after the guard let the call through, under [`CONTROL_MAX_BODY`] and within the body deadline.

pub mod login;
#[cfg(test)]
mod round_trip;
pub mod setup;
pub mod spend;
pub mod stream;
pub mod types;
pub mod typescript;
pub mod views;

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, Response, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use serde::Deserialize;

use crate::access::{Caller, Refused};
use crate::control::{ControlError, KeyChanges, NewKey};
use crate::error::ApiError;
use crate::gateway::Gateway;
use crate::keys::KeyId;
use crate::limits::{Connection, RequestLimits, CONTROL_MAX_BODY};
use types::{
    ChallengeAnswer, ClientsBody, CreatedToken, DecisionsBody, KeyTestBody, LoginLink, SessionToken, SessionsBody,
};

/// The control API's routes (mounted under `/keymux/api`).
pub fn routes() -> Router<Arc<Gateway>> {
    Router::new()
        .route("/status", get(status))
        .route("/keys", get(keys).post(add_key))
        .route("/keys/{id}", axum::routing::patch(update_key).delete(remove_key))
        .route("/keys/{id}/test", post(test_key))
        .route("/keys/{id}/secret", axum::routing::put(replace_secret))
        .route("/keys/{id}/{action}", post(switch_key))
        .route("/tokens", get(tokens).post(create_token))
        .route("/tokens/{id}", axum::routing::delete(revoke_token).patch(update_token))
        .route("/pools", get(pools).post(create_pool))
        .route("/pools/{name}", axum::routing::patch(update_pool).delete(remove_pool))
        .route("/pause", post(pause))
        .route("/resume", post(resume))
        .route("/decisions", get(decisions))
        .route("/sessions", get(sessions))
        .route("/clients", get(clients))
        .route("/usage", get(usage))
        .route("/spend", get(spend))
        .route("/metrics", get(metrics))
        .route("/events", get(stream::events))
        .route("/session", post(session))
        .route("/logout", post(logout))
        .route("/login-link", post(login_link))
        .route("/challenge", post(challenge))
        .merge(setup::routes())
        .merge(login::routes())
}

/// Lets a call through, or says why not.
pub fn guard(gateway: &Gateway, headers: &HeaderMap) -> Result<Caller, ApiError> {
    if !crate::access::host_ok(headers) || !crate::access::origin_ok(headers) {
        return Err(ApiError::ForbiddenOrigin);
    }
    gateway
        .access()
        .caller(headers, &gateway.tokens(), gateway.clock().now())
        .map_err(|refused| ApiError::ControlDenied { reason: refused })
}

/// Runs `handler` if the guard lets the call through.
fn guarded(gateway: &Gateway, headers: &HeaderMap, handler: impl FnOnce() -> Response<Body>) -> Response<Body> {
    match guard(gateway, headers) {
        Ok(_) => handler(),
        Err(e) => e.into_response(),
    }
}

/// Reads a call's JSON body, once the guard has let the call through, under `limit` and within the
/// body deadline.
async fn json_body<T: serde::de::DeserializeOwned>(request: Request, limit: usize) -> Result<T, ApiError> {
    let (parts, body) = request.into_parts();
    let deadline = parts.extensions.get::<RequestLimits>().copied().unwrap_or_default().body_read_timeout;
    let bytes = crate::limits::read_body(&parts.headers, body, limit, deadline).await?;
    serde_json::from_slice(&bytes).map_err(|e| ApiError::BadJson { detail: e.to_string() })
}

/// The guard, then the JSON body: a caller that may not call never has its body read.
async fn guarded_json<T: serde::de::DeserializeOwned>(gw: &Gateway, request: Request) -> Result<T, ApiError> {
    guard(gw, request.headers())?;
    json_body(request, CONTROL_MAX_BODY).await
}

fn control_error(e: ControlError) -> Response<Body> {
    ApiError::from(e).into_response()
}

async fn status(State(gw): State<Arc<Gateway>>, headers: HeaderMap) -> Response<Body> {
    guarded(&gw, &headers, || Json(views::status(&gw)).into_response())
}

async fn keys(State(gw): State<Arc<Gateway>>, headers: HeaderMap) -> Response<Body> {
    guarded(&gw, &headers, || Json(views::keys(&gw)).into_response())
}

async fn add_key(State(gw): State<Arc<Gateway>>, request: Request) -> Response<Body> {
    let new: NewKey = match guarded_json(&gw, request).await {
        Ok(new) => new,
        Err(e) => return e.into_response(),
    };
    match gw.add_key(new).await {
        Ok(id) => (StatusCode::CREATED, Json(views::key(&gw, &id))).into_response(),
        Err(e) => control_error(e),
    }
}

async fn update_key(State(gw): State<Arc<Gateway>>, Path(id): Path<String>, request: Request) -> Response<Body> {
    let changes = match guarded_json(&gw, request).await.map(KeyChanges::read) {
        Ok(Ok(changes)) => changes,
        Ok(Err(e)) => return control_error(e),
        Err(e) => return e.into_response(),
    };
    let id = KeyId::new(id.as_str());
    match gw.update_key(&id, changes) {
        Ok(()) => Json(views::key(&gw, &id)).into_response(),
        Err(e) => control_error(e),
    }
}

async fn remove_key(State(gw): State<Arc<Gateway>>, headers: HeaderMap, Path(id): Path<String>) -> Response<Body> {
    if let Err(e) = guard(&gw, &headers) {
        return e.into_response();
    }
    match gw.remove_key(&KeyId::new(id.as_str())).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => control_error(e),
    }
}

async fn test_key(State(gw): State<Arc<Gateway>>, headers: HeaderMap, Path(id): Path<String>) -> Response<Body> {
    if let Err(e) = guard(&gw, &headers) {
        return e.into_response();
    }
    match gw.test_key(&KeyId::new(id.as_str())).await {
        Ok(test) => Json(KeyTestBody::from(test)).into_response(),
        Err(e) => control_error(e),
    }
}

/// `PUT /keymux/api/keys/{id}/secret` with `{"secret"}`: a new secret for the key, in place, then a probe.
async fn replace_secret(State(gw): State<Arc<Gateway>>, Path(id): Path<String>, request: Request) -> Response<Body> {
    let new: types::NewSecret = match guarded_json(&gw, request).await {
        Ok(new) => new,
        Err(e) => return e.into_response(),
    };
    match gw.replace_secret(&KeyId::new(id.as_str()), new.secret).await {
        Ok(test) => Json(KeyTestBody::from(test)).into_response(),
        Err(e) => control_error(e),
    }
}

/// `POST /keymux/api/keys/{id}/enable` or `/disable`.
async fn switch_key(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    Path((id, action)): Path<(String, String)>,
) -> Response<Body> {
    guarded(&gw, &headers, || {
        let enabled = match action.as_str() {
            "enable" => true,
            "disable" => false,
            _ => return ApiError::NotFound { path: format!("/keymux/api/keys/{{id}}/{action}") }.into_response(),
        };
        let id = KeyId::new(id.as_str());
        match gw.set_enabled(&id, enabled) {
            Ok(()) => Json(types::KeyBody { key: views::key(&gw, &id) }).into_response(),
            Err(e) => control_error(e),
        }
    })
}

async fn tokens(State(gw): State<Arc<Gateway>>, headers: HeaderMap) -> Response<Body> {
    guarded(&gw, &headers, || Json(views::tokens(&gw)).into_response())
}

async fn create_token(State(gw): State<Arc<Gateway>>, request: Request) -> Response<Body> {
    let new: types::NewToken = match guarded_json(&gw, request).await {
        Ok(new) => new,
        Err(e) => return e.into_response(),
    };
    match gw.create_token(&new.name, new.pool.as_deref().unwrap_or(crate::pools::ALL)).await {
        Ok((listed, secret)) => {
            let token = types::TokenInfo {
                id: listed.id,
                name: listed.name,
                created_unix: listed.created_unix,
                pool: listed.pool,
                login: false,
            };
            (StatusCode::CREATED, Json(CreatedToken { token, secret: secret.expose().to_owned() })).into_response()
        }
        Err(e) => control_error(e),
    }
}

/// `PATCH /keymux/api/tokens/{id}`: moves a token to another pool.
async fn update_token(State(gw): State<Arc<Gateway>>, Path(id): Path<String>, request: Request) -> Response<Body> {
    let changes: types::TokenChanges = match guarded_json(&gw, request).await {
        Ok(changes) => changes,
        Err(e) => return e.into_response(),
    };
    match gw.move_token(&id, &changes.pool) {
        Ok(moved) => Json(views::tokens(&gw).into_iter().find(|t| t.id == moved.id)).into_response(),
        Err(e) => control_error(e),
    }
}

async fn pools(State(gw): State<Arc<Gateway>>, headers: HeaderMap) -> Response<Body> {
    guarded(&gw, &headers, || Json(views::pools(&gw, &views::keys(&gw))).into_response())
}

async fn create_pool(State(gw): State<Arc<Gateway>>, request: Request) -> Response<Body> {
    let new: types::NewPool = match guarded_json(&gw, request).await {
        Ok(new) => new,
        Err(e) => return e.into_response(),
    };
    // The keychain may block (a proxy's login): off the async workers.
    let made = {
        let gw = gw.clone();
        tokio::task::spawn_blocking(move || gw.create_pool(new)).await
    };
    match made.unwrap_or_else(|e| Err(ControlError::Invalid(format!("the change did not finish: {e}")))) {
        Ok(made) => (StatusCode::CREATED, Json(views::pool(&gw, &made.name))).into_response(),
        Err(e) => control_error(e),
    }
}

async fn update_pool(State(gw): State<Arc<Gateway>>, Path(name): Path<String>, request: Request) -> Response<Body> {
    let changes = match guarded_json(&gw, request).await.map(crate::control::pools::PoolChanges::read) {
        Ok(Ok(changes)) => changes,
        Ok(Err(e)) => return control_error(e),
        Err(e) => return e.into_response(),
    };
    let changed = {
        let gw = gw.clone();
        tokio::task::spawn_blocking(move || gw.change_pool(&name, &changes)).await
    };
    match changed.unwrap_or_else(|e| Err(ControlError::Invalid(format!("the change did not finish: {e}")))) {
        Ok(changed) => Json(views::pool(&gw, &changed.name)).into_response(),
        Err(e) => control_error(e),
    }
}

async fn remove_pool(State(gw): State<Arc<Gateway>>, headers: HeaderMap, Path(name): Path<String>) -> Response<Body> {
    if let Err(e) = guard(&gw, &headers) {
        return e.into_response();
    }
    let removed = {
        let gw = gw.clone();
        tokio::task::spawn_blocking(move || gw.remove_pool(&name)).await
    };
    match removed.unwrap_or_else(|e| Err(ControlError::Invalid(format!("the change did not finish: {e}")))) {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => control_error(e),
    }
}

async fn revoke_token(State(gw): State<Arc<Gateway>>, headers: HeaderMap, Path(id): Path<String>) -> Response<Body> {
    if let Err(e) = guard(&gw, &headers) {
        return e.into_response();
    }
    match gw.revoke_token(&id).await {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => control_error(e),
    }
}

async fn pause(State(gw): State<Arc<Gateway>>, headers: HeaderMap) -> Response<Body> {
    guarded(&gw, &headers, || {
        gw.pause();
        Json(views::status(&gw).gateway).into_response()
    })
}

async fn resume(State(gw): State<Arc<Gateway>>, headers: HeaderMap) -> Response<Body> {
    guarded(&gw, &headers, || {
        gw.resume();
        Json(views::status(&gw).gateway).into_response()
    })
}

#[derive(Deserialize)]
struct Limit {
    limit: Option<usize>,
}

async fn decisions(State(gw): State<Arc<Gateway>>, headers: HeaderMap, Query(q): Query<Limit>) -> Response<Body> {
    guarded(&gw, &headers, || {
        let limit = q.limit.unwrap_or(100).min(crate::events::RECENT_CAPACITY);
        tracing::debug!(limit, "the recent decisions were read");
        let data = gw.events().recent(limit).into_iter().map(|r| (*r).clone()).collect();
        Json(DecisionsBody { data }).into_response()
    })
}

async fn clients(State(gw): State<Arc<Gateway>>, headers: HeaderMap) -> Response<Body> {
    guarded(&gw, &headers, || Json(ClientsBody { clients: gw.clients_checked() }).into_response())
}

async fn sessions(State(gw): State<Arc<Gateway>>, headers: HeaderMap, Query(q): Query<Limit>) -> Response<Body> {
    guarded(&gw, &headers, || {
        let limit = q.limit.unwrap_or(200).min(crate::sessions::SESSIONS_CAPACITY);
        Json(SessionsBody { sessions: gw.sessions().recent(limit) }).into_response()
    })
}

#[derive(Deserialize)]
struct UsageQuery {
    /// `hour` (default) or `day`.
    bucket: Option<String>,
    /// How far back, in days (default 2 for hours, 30 for days; at most 400).
    days: Option<u32>,
}

async fn usage(State(gw): State<Arc<Gateway>>, headers: HeaderMap, Query(q): Query<UsageQuery>) -> Response<Body> {
    if let Err(e) = guard(&gw, &headers) {
        return e.into_response();
    }
    let hours = match q.bucket.as_deref() {
        None | Some("hour") => 1,
        Some("day") => 24,
        Some(other) => {
            return ApiError::BadJson { detail: format!("bucket {other:?}: expected hour or day") }.into_response()
        }
    };
    let days = q.days.unwrap_or(if hours == 1 { 2 } else { 30 }).clamp(1, 400);
    let since = gw.clock().unix_ms().saturating_sub(u64::from(days) * 86_400_000);
    let read = tokio::task::spawn_blocking(move || views::usage(&gw, since, hours)).await;
    match read {
        Ok(body) => Json(body).into_response(),
        Err(e) => ApiError::Internal { detail: format!("usage could not be read: {e}") }.into_response(),
    }
}

#[derive(Deserialize)]
struct SpendQuery {
    /// How many local days, today first (default 1: today; at most 400).
    days: Option<u32>,
    /// `key` (default), `pool`, `token` or `model`.
    by: Option<String>,
}

/// `GET /keymux/api/spend?days=N&by=key|pool|token|model`: requests, tokens and spend per group.
async fn spend(State(gw): State<Arc<Gateway>>, headers: HeaderMap, Query(q): Query<SpendQuery>) -> Response<Body> {
    if let Err(e) = guard(&gw, &headers) {
        return e.into_response();
    }
    let by = match q.by.as_deref() {
        None | Some("key") => types::SpendBy::Key,
        Some("pool") => types::SpendBy::Pool,
        Some("token") => types::SpendBy::Token,
        Some("model") => types::SpendBy::Model,
        Some(other) => {
            return ApiError::BadJson { detail: format!("by {other:?}: expected key, pool, token or model") }
                .into_response()
        }
    };
    let days = q.days.unwrap_or(1).clamp(1, 400);
    match tokio::task::spawn_blocking(move || spend::report(&gw, by, days)).await {
        Ok(report) => Json(report).into_response(),
        Err(e) => ApiError::Internal { detail: format!("spend could not be read: {e}") }.into_response(),
    }
}

#[derive(Deserialize)]
struct Days {
    days: Option<u32>,
}

/// `GET /keymux/api/metrics?days=N`: hashed per-day counters (keys appear as fingerprints only).
async fn metrics(State(gw): State<Arc<Gateway>>, headers: HeaderMap, Query(q): Query<Days>) -> Response<Body> {
    if let Err(e) = guard(&gw, &headers) {
        return e.into_response();
    }
    let days = q.days.unwrap_or(7).clamp(1, 366);
    let today = gw.today();
    let read = tokio::task::spawn_blocking(move || (gw.metrics().rows(days, today), gw.metrics().status())).await;
    match read {
        Ok((rows, store)) => Json(serde_json::json!({ "store": store, "rows": rows })).into_response(),
        Err(e) => ApiError::Internal { detail: format!("metrics could not be read: {e}") }.into_response(),
    }
}

#[derive(Deserialize)]
struct LoginCode {
    code: String,
}

/// `POST /keymux/api/session {"code"}`: the dashboard page exchanges a login link's one-time code for
/// its session token. Needs no credential (the code is one), but only the gateway's own page may ask.
async fn session(State(gw): State<Arc<Gateway>>, request: Request) -> Response<Body> {
    if !crate::access::host_ok(request.headers()) || !crate::access::origin_ok(request.headers()) {
        return ApiError::ForbiddenOrigin.into_response();
    }
    let asked: LoginCode = match json_body(request, CHALLENGE_MAX_BODY).await {
        Ok(asked) => asked,
        Err(e) => return e.into_response(),
    };
    let redeemed = gw.access().redeem(&asked.code, gw.clock().now());
    // The code is spent, used or not: its login page goes now, not at the next tick.
    crate::login_page::remove_spent(gw.access(), gw.clock().now());
    match redeemed {
        Some(token) => {
            // Worth a line at info: a new dashboard session is rare, and the user may want to know of one.
            tracing::info!("a dashboard session began (one-time login link used)");
            Json(SessionToken { token: token.expose().to_owned() }).into_response()
        }
        None => ApiError::ControlDenied { reason: Refused::Invalid }.into_response(),
    }
}

/// `POST /keymux/api/logout`: ends the dashboard session the call carries.
async fn logout(State(gw): State<Arc<Gateway>>, headers: HeaderMap) -> Response<Body> {
    if let Err(e) = guard(&gw, &headers) {
        return e.into_response();
    }
    gw.access().end_session(&headers);
    StatusCode::NO_CONTENT.into_response()
}

/// A fresh one-time login link (`keymux dashboard`, the tray).
async fn login_link(State(gw): State<Arc<Gateway>>, headers: HeaderMap) -> Response<Body> {
    guarded(&gw, &headers, || Json(LoginLink { url: gw.login_link() }).into_response())
}

#[derive(Deserialize)]
struct Challenge {
    nonce: String,
}

/// Largest challenge body: a nonce of at most 256 characters, in JSON.
const CHALLENGE_MAX_BODY: usize = 1024;

/// Proves to the CLI that this is the gateway that knows the admin credential, listening where the CLI
/// dialled, before the CLI sends it. Needs no credential; answers only when the `Host` names the very
/// address the connection reached (so not through a relay on another port), and to no browser origin.
async fn challenge(
    State(gw): State<Arc<Gateway>>,
    connection: Option<Extension<Connection>>,
    request: Request,
) -> Response<Body> {
    let Some(Extension(connection)) = connection else {
        return ApiError::ForbiddenOrigin.into_response();
    };
    let reached = connection.local_addr();
    let headers = request.headers();
    if !crate::access::host_is(headers, reached) || headers.contains_key(axum::http::header::ORIGIN) {
        return ApiError::ForbiddenOrigin.into_response();
    }
    let asked = match json_body::<Challenge>(request, CHALLENGE_MAX_BODY).await {
        Ok(asked) => asked,
        Err(ApiError::BadJson { .. }) => {
            return ApiError::BadJson { detail: "expected {\"nonce\": \"...\"}".into() }.into_response()
        }
        Err(e) => return e.into_response(),
    };
    if asked.nonce.len() < 16 || asked.nonce.len() > 256 {
        return ApiError::BadJson { detail: "the nonce must be 16 to 256 characters".into() }.into_response();
    }
    match gw.access().answer_challenge(&asked.nonce, reached) {
        Some((server_nonce, mac)) => Json(ChallengeAnswer { server_nonce, mac }).into_response(),
        None => ApiError::ControlDenied { reason: Refused::NoCredential }.into_response(),
    }
}
