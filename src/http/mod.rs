//! The HTTP surface: `/v1/*` for clients (local token), `/keymux/api/*` for the dashboard and tools
//! (local token, loopback host and origin only). Serving it on a socket is `server`'s job.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Query, Request, State};
use axum::http::{header, HeaderMap, Response};
use axum::response::IntoResponse;
use axum::routing::{any, get};
use axum::{Json, Router};
use serde::Deserialize;
use tower::ServiceExt as _;

mod oauth;

use crate::error::ApiError;
use crate::gateway::Gateway;
use crate::limits::RequestLimits;
use crate::tokens;

/// The path of Keymux's model catalog, the one `/v1` path the proxy does not serve.
const MODEL_CATALOG: &str = "/v1/keymux/model-catalog";

/// The HTTP surface of a gateway: every request a connection reads goes through [`App::serve`].
///
/// The clients' `/v1` calls (what [`is_proxied`] says) go straight to [`proxy`]; the router takes
/// the rest. `/v1` is nearly all the traffic, and the router's matching, its middleware's boxing and
/// its extractors came to about a tenth of a proxied request's CPU for nothing: `/v1` has one handler.
pub struct App {
    router: Router,
    gateway: Arc<Gateway>,
    limits: RequestLimits,
}

impl App {
    /// The surface of `gateway`, whose handlers apply `limits` (in every request's extensions).
    pub fn new(gateway: Arc<Gateway>, limits: RequestLimits) -> Self {
        Self { router: router(gateway.clone()), gateway, limits }
    }

    /// Answers one request. The handler's future is boxed where it is made, as the router would: it is
    /// large, and every move of it unboxed is a copy.
    pub fn serve(&self, mut request: Request) -> Pin<Box<dyn Future<Output = Response<Body>> + Send>> {
        request.extensions_mut().insert(self.limits);
        if is_proxied(request.uri().path()) {
            return Box::pin(proxy(self.gateway.clone(), request));
        }
        let router = self.router.clone();
        Box::pin(async move { router.oneshot(request).await.unwrap_or_else(|never| match never {}) })
    }
}

/// Whether [`proxy`] serves `path`: `/v1` and everything under it but the model catalog.
fn is_proxied(path: &str) -> bool {
    (path == "/v1" || path.starts_with("/v1/")) && path != MODEL_CATALOG
}

/// Everything but the proxied `/v1` calls: the model catalog, the control API, the login link, the
/// OAuth endpoints and the dashboard.
fn router(gateway: Arc<Gateway>) -> Router {
    Router::new()
        .route(MODEL_CATALOG, any(model_catalog))
        .route("/keymux/health", get(health))
        .route("/login", get(login))
        .nest("/keymux/api", crate::api::routes())
        .merge(oauth::routes())
        .fallback(not_found)
        .layer(axum::middleware::from_fn(outside_v1))
        .with_state(gateway)
}

/// What holds for everything outside `/v1` (whose answers are the provider's to set, and whose body
/// cap is the config's `max_body_bytes`, checked by `proxy`), in one layer:
/// * a body declared over [`crate::limits::CONTROL_MAX_BODY`] is refused before routing, before
///   anything reads it;
/// * no answer of Keymux's own may be read as another type than it says, and no answer of the control
///   API or the login link may be kept by a cache (they carry tokens, login links, keys' state).
async fn outside_v1(request: Request, next: axum::middleware::Next) -> Response<Body> {
    let path = request.uri().path();
    if path == "/v1" || path.starts_with("/v1/") {
        return next.run(request).await;
    }
    let private = path.starts_with("/keymux/") || path == "/login" || path.starts_with("/oauth/");
    let limit = crate::limits::CONTROL_MAX_BODY;
    let mut response = match crate::limits::declared_length(request.headers()) {
        Some(n) if n > limit as u64 => ApiError::BodyTooLarge { limit }.into_response(),
        _ => next.run(request).await,
    };
    let headers = response.headers_mut();
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, header::HeaderValue::from_static("nosniff"));
    if private {
        headers.insert(header::CACHE_CONTROL, header::HeaderValue::from_static("no-store"));
    }
    response
}

async fn proxy(gateway: Arc<Gateway>, request: Request) -> Response<Body> {
    let (mut parts, body) = request.into_parts();
    let client = match check_v1_origin(&parts.headers).and_then(|()| authenticate(&gateway, &parts.headers)) {
        Ok(client) => client,
        Err(err) => {
            crate::logging::refused(parts.uri.path(), err.label());
            return err.into_response();
        }
    };
    parts.extensions.insert(client);
    if gateway.paused() && !is_websocket_upgrade(&parts.headers) {
        return crate::proxy::refuse_paused(&gateway, &parts);
    }
    if is_websocket_upgrade(&parts.headers) {
        return upgrade(gateway, parts).await;
    }
    crate::proxy::forward(&gateway, parts, body).await
}

/// Keymux's model catalog for Codex (`catalog`), for the caller's pool; authenticated as every `/v1`
/// call is.
async fn model_catalog(State(gateway): State<Arc<Gateway>>, request: Request) -> Response<Body> {
    let (parts, _) = request.into_parts();
    let client = match check_v1_origin(&parts.headers).and_then(|()| authenticate(&gateway, &parts.headers)) {
        Ok(client) => client,
        Err(err) => {
            crate::logging::refused(parts.uri.path(), err.label());
            return err.into_response();
        }
    };
    crate::catalog::serve(&gateway, &parts.method, parts.uri.path(), &client.pool).await
}

/// Responses over WebSocket on `GET /v1/responses`. Anything else, or no usable key, gets a 426: Codex
/// then falls back to HTTP at once and silently (a 404 would cost it about 7 s and an error message).
async fn upgrade(gateway: Arc<Gateway>, mut parts: axum::http::request::Parts) -> Response<Body> {
    use axum::extract::FromRequestParts as _;
    if parts.method != axum::http::Method::GET || parts.uri.path().trim_end_matches('/') != "/v1/responses" {
        return ApiError::WebSocketUnavailable.into_response();
    }
    let pool = parts.extensions.get::<tokens::ClientScope>().map_or(crate::pools::ALL, |c| c.pool.as_str());
    if !crate::pipeline::can_open_socket(&gateway, pool) {
        tracing::warn!("websocket refused, no key its pool may reach is usable now (cooling, out of quota or held by a budget); the client falls back to HTTP");
        return ApiError::WebSocketUnavailable.into_response();
    }
    let limits = parts.extensions.get::<crate::limits::RequestLimits>().copied().unwrap_or_default();
    if gateway.sockets().len() >= limits.max_websockets {
        tracing::warn!(
            max = limits.max_websockets,
            "websocket refused, as many are open as allowed; the client falls back to HTTP"
        );
        return ApiError::TooManySockets { max: limits.max_websockets }.into_response();
    }
    let headers = parts.headers.clone();
    let client = parts.extensions.get::<tokens::ClientScope>().cloned().unwrap_or_default();
    match axum::extract::ws::WebSocketUpgrade::from_request_parts(&mut parts, &()).await {
        Ok(ws) => ws
            .read_buffer_size(crate::ws::SOCKET_BUFFER_BYTES)
            .write_buffer_size(crate::ws::SOCKET_BUFFER_BYTES)
            .max_message_size(crate::ws::MAX_FRAME_BYTES)
            .max_frame_size(crate::ws::MAX_FRAME_BYTES)
            .on_upgrade(move |socket| async move {
                // Counted, so a shutdown can wait for open sockets to close.
                let _open = gateway.sockets().token();
                crate::ws::serve_socket(gateway, socket, headers, client, limits.first_frame_timeout).await;
            }),
        Err(rejection) => rejection.into_response(),
    }
}

async fn health() -> Json<serde_json::Value> {
    Json(serde_json::json!({ "service": "keymux", "status": "ok", "version": env!("CARGO_PKG_VERSION") }))
}

/// `GET /login?code=…`: goes on to the dashboard with the one-time code in the fragment (`/#login=…`),
/// where the page exchanges it for its session (`POST /keymux/api/session`). No cookie is set: one
/// would reach every port of 127.0.0.1. A used or expired code gets a page that says how to get a
/// fresh one.
async fn login(State(gateway): State<Arc<Gateway>>, headers: HeaderMap, Query(q): Query<LoginQuery>) -> Response<Body> {
    if !crate::access::host_ok(&headers) {
        return ApiError::ForbiddenOrigin.into_response();
    }
    let code = q.code.filter(|code| gateway.access().code_waiting(code, gateway.clock().now()));
    let Some(code) = code.filter(|code| code.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'))
    else {
        let page = "<!doctype html><meta charset=utf-8><title>Keymux</title><p>This Keymux login link was already \
            used, or it has expired. Run <code>keymux dashboard</code> (or choose Open dashboard in the tray) for a \
            fresh one.</p>";
        return (axum::http::StatusCode::FORBIDDEN, [(header::CONTENT_TYPE, "text/html; charset=utf-8")], page)
            .into_response();
    };
    let mut response = axum::response::Redirect::to(&format!("/#login={code}")).into_response();
    response.headers_mut().insert(header::REFERRER_POLICY, header::HeaderValue::from_static("no-referrer"));
    response
}

#[derive(Deserialize)]
struct LoginQuery {
    code: Option<String>,
}

/// Everything else: the dashboard's files (and its own routes) for `GET` from a loopback host, else
/// a clear 404.
async fn not_found(request: Request) -> Response<Body> {
    let path = request.uri().path();
    let dashboard = request.method() == axum::http::Method::GET
        && !path.starts_with("/v1")
        && !path.starts_with("/keymux/")
        && crate::access::host_ok(request.headers());
    if dashboard {
        return crate::dashboard::serve(request.uri());
    }
    ApiError::NotFound { path: request.uri().path().chars().take(200).collect() }.into_response()
}

/// The client token a `/v1` request carries: in `x-keymux-token` (`oauth::TOKEN_HEADER`: a client's
/// login, which Codex sends beside the provider's own credential, with no `authorization` when the
/// provider has none), else in `authorization`. A login's token wins: whatever `authorization` then
/// holds is the client's own business and never goes upstream.
fn authenticate(gateway: &Gateway, headers: &HeaderMap) -> Result<tokens::ClientScope, ApiError> {
    if gateway.access().is_control_credential(headers) {
        return Err(ApiError::WrongCredential);
    }
    let bearer_in =
        |name: &str| headers.get(name).and_then(|v: &header::HeaderValue| v.to_str().ok()).and_then(tokens::bearer);
    let presented = bearer_in(crate::oauth::TOKEN_HEADER).or_else(|| bearer_in(header::AUTHORIZATION.as_str()));
    match presented {
        None => Err(ApiError::Unauthorized { missing: true }),
        Some(token) => {
            let now = gateway.clock().unix_ms();
            gateway.tokens().client_of(token, now).ok_or(ApiError::Unauthorized { missing: false })
        }
    }
}

/// A web page must never spend a key: a request from a browser (it carries an `Origin`) never reaches
/// `/v1`, whatever page it comes from. Codex and pi send no `Origin`.
fn check_v1_origin(headers: &HeaderMap) -> Result<(), ApiError> {
    if headers.contains_key(header::ORIGIN) {
        Err(ApiError::ForbiddenOrigin)
    } else {
        Ok(())
    }
}

fn is_websocket_upgrade(headers: &HeaderMap) -> bool {
    headers.get(header::UPGRADE).and_then(|v| v.to_str().ok()).is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}
