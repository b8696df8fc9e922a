//! The person's yes (or no) to a client's login (`oauth`), on the control API (so only a dashboard session or
//! the admin credential gives it): `GET /oauth/requests/{id}` shows who asks, `POST
//! /oauth/requests/{id}` decides a browser login and answers with where the browser goes, `POST
//! /oauth/device` decides the device login whose user code the person entered.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, Response};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};

use serde::{Deserialize, Serialize};
use ts_rs::TS;

use super::{control_error, guard, guarded_json};
use crate::control::ControlError;
use crate::gateway::Gateway;
use crate::oauth::client_name;
use crate::oauth::pending::Decided;

/// A client's login waiting for the person's yes in the dashboard:
/// `GET /keymux/api/oauth/requests/{id}`.
#[derive(Clone, Debug, Serialize, Deserialize, TS)]
pub struct LoginRequest {
    /// The request's id (from the dashboard's `#authorize=` link).
    pub id: String,
    /// The client's name (`Codex`).
    pub client: String,
    /// Where the client waits for the answer (`127.0.0.1:<port>`).
    pub callback: String,
}

/// The person's decision on a login: `POST /keymux/api/oauth/requests/{id}` (browser) or, with
/// `user_code`, `POST /keymux/api/oauth/device`.
#[derive(Clone, Debug, Serialize, Deserialize, TS)]
#[serde(deny_unknown_fields)]
pub struct LoginDecision {
    /// Approve (`true`) or refuse.
    pub approve: bool,
    /// The pool the client's token is bound to (default `all`).
    #[serde(default)]
    #[ts(optional)]
    pub pool: Option<String>,
    /// The code the client shows (device flow only).
    #[serde(default)]
    #[ts(optional)]
    pub user_code: Option<String>,
}

/// What the dashboard does after a decision: go to `redirect` (browser flow: the client's loopback
/// address with the code, or the refusal) and name the client.
#[derive(Clone, Debug, Serialize, Deserialize, TS)]
pub struct LoginDecided {
    /// The client's name (`Codex`).
    pub client: String,
    /// Where the browser goes next (browser flow only).
    pub redirect: Option<String>,
}

/// The approval routes (mounted under `/keymux/api`).
pub fn routes() -> Router<Arc<Gateway>> {
    Router::new()
        .route("/oauth/requests/{id}", get(request).post(decide_request))
        .route("/oauth/device", post(decide_device))
}

fn gone() -> ControlError {
    ControlError::NotFound(
        "no login waits under this link: it was decided already or expired; start the login in the client again".into(),
    )
}

/// The pool a yes binds the client to, checked against the user's pools.
fn chosen_pool(gw: &Gateway, decision: &LoginDecision) -> Result<String, ControlError> {
    let pool = decision.pool.as_deref().unwrap_or(crate::pools::ALL);
    let pools = gw.settings().config().pools;
    if crate::pools::exists(&pools, pool) {
        Ok(crate::control::pools::canonical(&pools, pool))
    } else {
        Err(ControlError::Invalid(crate::pools::unknown_pool(pool)))
    }
}

async fn request(State(gw): State<Arc<Gateway>>, headers: HeaderMap, Path(id): Path<String>) -> Response<Body> {
    if let Err(e) = guard(&gw, &headers) {
        return e.into_response();
    }
    let shown = gw.logins().pending().requested(&id, gw.clock().now()).map(|asked| LoginRequest {
        id: id.clone(),
        client: client_name(&asked.client).unwrap_or("a client").to_owned(),
        callback: url::Url::parse(&asked.redirect)
            .ok()
            .and_then(|u| Some(format!("{}:{}", u.host_str()?, u.port()?)))
            .unwrap_or_default(),
    });
    match shown {
        Some(shown) => Json(shown).into_response(),
        None => control_error(gone()),
    }
}

async fn decide_request(State(gw): State<Arc<Gateway>>, Path(id): Path<String>, request: Request) -> Response<Body> {
    let decision: LoginDecision = match guarded_json(&gw, request).await {
        Ok(decision) => decision,
        Err(e) => return e.into_response(),
    };
    let pool = match decision.approve.then(|| chosen_pool(&gw, &decision)).transpose() {
        Ok(pool) => pool,
        Err(e) => return control_error(e),
    };
    let now = gw.clock().now();
    let Some((asked, state)) = gw.logins().pending().take_request(&id, now) else {
        return control_error(gone());
    };
    let Ok(mut redirect) = url::Url::parse(&asked.redirect) else { return control_error(gone()) };
    let client = client_name(&asked.client).unwrap_or("a client").to_owned();
    match &pool {
        Some(pool) => {
            let code = crate::secrets::generate("");
            redirect.query_pairs_mut().append_pair("code", code.expose()).append_pair("state", &state);
            gw.logins().pending().code(code.expose(), asked, pool, now);
            tracing::info!(%client, %pool, "a client's login was approved");
        }
        None => {
            redirect.query_pairs_mut().append_pair("error", "access_denied").append_pair("state", &state);
        }
    }
    Json(LoginDecided { client, redirect: Some(redirect.to_string()) }).into_response()
}

async fn decide_device(State(gw): State<Arc<Gateway>>, request: Request) -> Response<Body> {
    let decision: LoginDecision = match guarded_json(&gw, request).await {
        Ok(decision) => decision,
        Err(e) => return e.into_response(),
    };
    let Some(user_code) = decision.user_code.clone() else {
        return control_error(ControlError::Invalid("enter the code the client shows (`user_code`)".into()));
    };
    let decided = match decision.approve.then(|| chosen_pool(&gw, &decision)).transpose() {
        Ok(Some(pool)) => Decided::Approved(pool),
        Ok(None) => Decided::Denied,
        Err(e) => return control_error(e),
    };
    match gw.logins().pending().decide(&user_code, decided, gw.clock().now()) {
        Some(client) => {
            let client = client_name(&client).unwrap_or("a client").to_owned();
            Json(LoginDecided { client, redirect: None }).into_response()
        }
        None => control_error(ControlError::NotFound(
            "no login waits for this code: check it against the one the client shows, or start the login again".into(),
        )),
    }
}
