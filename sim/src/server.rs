//! The HTTP front, at the top of the simulator: authentication, and dispatch of each request to the
//! `/v1` endpoints (`endpoints`), WebSocket upgrades (`ws`), the ChatGPT backend (`chatgpt`) or the
//! `/__sim/` control surface (`control`).

use std::sync::Arc;

use axum::extract::{Request, State as AxState};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::Router;

use crate::body::read_body;
use crate::config::KeyAuth;
use crate::endpoints::{route, run, Route};
use crate::error::ApiError;
use crate::exchange::Ctx;
use crate::state::{Caller, State};
use crate::{chatgpt, control, ws};

/// The simulator's whole HTTP surface.
pub(crate) fn router(state: Arc<State>) -> Router {
    Router::new().fallback(dispatch).with_state(state)
}

fn is_upgrade(headers: &HeaderMap) -> bool {
    headers.get("upgrade").and_then(|v| v.to_str().ok()).is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

/// Finds the key a request presents. A Bearer token must be a Bearer key and an `api-key`
/// header must be an Azure key.
fn authenticate(state: &State, headers: &HeaderMap) -> Result<Caller, ApiError> {
    let bearer = headers.get("authorization").map(|v| String::from_utf8_lossy(v.as_bytes()).trim().to_owned());
    let api_key = headers
        .get("api-key")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).trim().to_owned())
        .filter(|k| !k.is_empty());
    let token = bearer.as_deref().and_then(|b| {
        let (scheme, rest) = b.split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim().to_owned()).filter(|t| !t.is_empty())
    });
    let lookup = |secret: &str, auth: KeyAuth| {
        state
            .keys
            .get(secret)
            .filter(|info| info.auth == auth)
            .map(|info| Caller { secret: secret.to_owned(), org: info.org })
    };
    if let Some(caller) = token.as_deref().and_then(|t| lookup(t, KeyAuth::Bearer)) {
        return Ok(caller);
    }
    if let Some(caller) = api_key.as_deref().and_then(|k| lookup(k, KeyAuth::AzureApiKey)) {
        return Ok(caller);
    }
    match (token, api_key) {
        (Some(t), _) => Err(ApiError::invalid_key(&t)),
        (None, Some(k)) => Err(ApiError::invalid_key(&k)),
        (None, None) => Err(ApiError::missing_key()),
    }
}

async fn dispatch(AxState(state): AxState<Arc<State>>, req: Request) -> Response {
    let path = req.uri().path().to_owned();
    if path == "/__sim" || path.starts_with("/__sim/") {
        return control::handle(&state, req).await;
    }
    if chatgpt::owns(&path) {
        return chatgpt::handle(state, req).await;
    }
    let (parts, body) = req.into_parts();
    let auth = authenticate(&state, &parts.headers);
    let ctx = Ctx::new(state.clone(), &parts, auth.as_ref().ok().cloned());
    let Some(route) = route(&parts.method, &path, is_upgrade(&parts.headers)) else {
        let err = ApiError::invalid_url(parts.method.as_str(), &path);
        return fail(ctx, err);
    };
    let caller = match auth {
        Ok(caller) => caller,
        Err(err) => return fail(ctx, err),
    };
    if matches!(route, Route::Socket) {
        return ws::upgrade(ctx, caller, parts).await;
    }
    let Some(bytes) = read_body(&parts.headers, body).await else {
        return fail(ctx, ApiError::bad_json());
    };
    run(ctx, caller, route, bytes).await
}

fn fail(mut ctx: Ctx, err: ApiError) -> Response {
    ctx.fail(err.into())
}
