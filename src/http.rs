//! The HTTP surface: `/v1/*` for clients (local token), `/keymux/api/*` for the dashboard and tools
//! (local token, loopback host and origin only). Serving it on a socket is `server`'s job.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Query, Request, State};
use axum::http::{header, HeaderMap, Response};
use axum::response::IntoResponse;
use axum::routing::{any, get};
use axum::{Json, Router};
use serde::Deserialize;

use crate::error::ApiError;
use crate::gateway::Gateway;
use crate::tokens;

/// The axum application for a gateway.
pub fn app(gateway: Arc<Gateway>) -> Router {
    Router::new()
        .route("/v1", any(proxy))
        .route("/v1/{*rest}", any(proxy))
        .route("/keymux/health", get(health))
        .route("/keymux/api/status", get(status))
        .route("/keymux/api/decisions", get(decisions))
        .route("/keymux/api/metrics", get(metrics))
        .route("/keymux/api/keys/{id}/{action}", axum::routing::post(key_action))
        .fallback(not_found)
        .with_state(gateway)
}

async fn proxy(State(gateway): State<Arc<Gateway>>, request: Request) -> Response<Body> {
    let (mut parts, body) = request.into_parts();
    let client = match check_origin(&parts.headers).and_then(|()| authenticate(&gateway, &parts.headers)) {
        Ok(client) => client,
        Err(err) => {
            tracing::warn!(path = parts.uri.path(), error = err.label(), "refused");
            return err.into_response();
        }
    };
    parts.extensions.insert(client);
    if is_websocket_upgrade(&parts.headers) {
        return upgrade(gateway, parts).await;
    }
    crate::proxy::forward(&gateway, parts, body).await
}

/// Responses over WebSocket on `GET /v1/responses`. Anything else, or no usable key, gets a 426: Codex
/// then falls back to HTTP at once and silently (a 404 would cost it about 7 s and an error message).
async fn upgrade(gateway: Arc<Gateway>, mut parts: axum::http::request::Parts) -> Response<Body> {
    use axum::extract::FromRequestParts as _;
    if parts.method != axum::http::Method::GET || parts.uri.path().trim_end_matches('/') != "/v1/responses" {
        return ApiError::WebSocketUnavailable.into_response();
    }
    if !gateway.can_open_socket() {
        tracing::warn!("websocket refused, no key is usable; the client falls back to HTTP");
        return ApiError::WebSocketUnavailable.into_response();
    }
    let headers = parts.headers.clone();
    let client = parts.extensions.get::<tokens::ClientScope>().cloned().unwrap_or_default();
    match axum::extract::ws::WebSocketUpgrade::from_request_parts(&mut parts, &()).await {
        Ok(ws) => ws
            .max_message_size(crate::ws::MAX_FRAME_BYTES)
            .max_frame_size(crate::ws::MAX_FRAME_BYTES)
            .on_upgrade(move |socket| async move {
                // Counted, so a shutdown can wait for open sockets to close.
                let _open = gateway.sockets().token();
                crate::ws::serve_socket(gateway, socket, headers, client).await;
            }),
        Err(rejection) => rejection.into_response(),
    }
}

async fn health() -> Json<serde_json::Value> {
    Json(serde_json::json!({ "service": "keymux", "status": "ok", "version": env!("CARGO_PKG_VERSION") }))
}

async fn status(State(gateway): State<Arc<Gateway>>, headers: HeaderMap) -> Response<Body> {
    if let Err(err) = check_local(&gateway, &headers) {
        return err.into_response();
    }
    Json(serde_json::json!({
        "keys": gateway.pool().status(gateway.clock().now(), gateway.today()),
        "metrics": gateway.metrics().status(),
    }))
    .into_response()
}

#[derive(Deserialize)]
struct DecisionsQuery {
    limit: Option<usize>,
}

async fn decisions(
    State(gateway): State<Arc<Gateway>>,
    headers: HeaderMap,
    Query(q): Query<DecisionsQuery>,
) -> Response<Body> {
    if let Err(err) = check_local(&gateway, &headers) {
        return err.into_response();
    }
    let limit = q.limit.unwrap_or(100).min(crate::events::RECENT_CAPACITY);
    Json(serde_json::json!({ "data": gateway.events().recent(limit) })).into_response()
}

/// `POST /keymux/api/keys/{id}/enable` or `/disable`: switch a key off, or back on (which also clears a
/// rejection or an exhausted quota, once the user has fixed the key).
async fn key_action(
    State(gateway): State<Arc<Gateway>>,
    headers: HeaderMap,
    axum::extract::Path((id, action)): axum::extract::Path<(String, String)>,
) -> Response<Body> {
    if let Err(err) = check_local(&gateway, &headers) {
        return err.into_response();
    }
    let disabled = match action.as_str() {
        "enable" => false,
        "disable" => true,
        _ => return ApiError::NotFound { path: format!("/keymux/api/keys/{{id}}/{action}") }.into_response(),
    };
    let key = crate::keys::KeyId::new(id.as_str());
    if !gateway.pool().set_disabled(&key, disabled) {
        return ApiError::NotFound { path: format!("/keymux/api/keys/{id}") }.into_response();
    }
    tracing::info!(key = %key, action = %action, "key switched");
    let status = gateway.pool().status(gateway.clock().now(), gateway.today()).into_iter().find(|k| k.id == key);
    Json(serde_json::json!({ "key": status })).into_response()
}

#[derive(Deserialize)]
struct MetricsQuery {
    days: Option<u32>,
}

/// `GET /keymux/api/metrics?days=N`: hashed per-day counters (keys appear as fingerprints only).
async fn metrics(
    State(gateway): State<Arc<Gateway>>,
    headers: HeaderMap,
    Query(q): Query<MetricsQuery>,
) -> Response<Body> {
    if let Err(err) = check_local(&gateway, &headers) {
        return err.into_response();
    }
    let days = q.days.unwrap_or(7).clamp(1, 366);
    let today = gateway.today();
    let read =
        tokio::task::spawn_blocking(move || (gateway.metrics().rows(days, today), gateway.metrics().status())).await;
    match read {
        Ok((rows, store)) => Json(serde_json::json!({ "store": store, "rows": rows })).into_response(),
        Err(e) => ApiError::Internal { detail: format!("metrics could not be read: {e}") }.into_response(),
    }
}

async fn not_found(request: Request) -> Response<Body> {
    ApiError::NotFound { path: request.uri().path().chars().take(200).collect() }.into_response()
}

fn authenticate(gateway: &Gateway, headers: &HeaderMap) -> Result<tokens::ClientScope, ApiError> {
    let presented = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(tokens::bearer);
    match presented {
        None => Err(ApiError::Unauthorized { missing: true }),
        Some(token) => gateway.tokens().client_of(token).ok_or(ApiError::Unauthorized { missing: false }),
    }
}

fn check_local(gateway: &Gateway, headers: &HeaderMap) -> Result<(), ApiError> {
    check_host(headers)?;
    check_origin(headers)?;
    authenticate(gateway, headers).map(|_| ())
}

/// The control API answers only to loopback host names, so a DNS-rebound page cannot reach it.
fn check_host(headers: &HeaderMap) -> Result<(), ApiError> {
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("");
    if is_loopback_authority(host) {
        Ok(())
    } else {
        Err(ApiError::ForbiddenOrigin)
    }
}

/// A request that carries an `Origin` came from a browser; only loopback origins may call Keymux.
/// Codex and pi send no `Origin`.
fn check_origin(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    let origin = origin.to_str().unwrap_or("");
    let authority = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .or_else(|| origin.strip_prefix("tauri://"));
    match authority {
        Some(a) if is_loopback_authority(a) => Ok(()),
        _ => Err(ApiError::ForbiddenOrigin),
    }
}

fn is_loopback_authority(authority: &str) -> bool {
    let host = if let Some(rest) = authority.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        authority.rsplit_once(':').map_or(authority, |(h, _)| h)
    };
    host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

fn is_websocket_upgrade(headers: &HeaderMap) -> bool {
    headers.get(header::UPGRADE).and_then(|v| v.to_str().ok()).is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_authorities() {
        for ok in ["127.0.0.1:8787", "localhost:1", "[::1]:8787", "127.9.9.9", "LOCALHOST"] {
            assert!(is_loopback_authority(ok), "{ok}");
        }
        for bad in ["evil.example:8787", "10.0.0.1:8787", "127.0.0.1.evil.example", "", "[::2]:1"] {
            assert!(!is_loopback_authority(bad), "{bad}");
        }
    }

    #[test]
    fn browser_origins_are_refused() {
        let mut h = HeaderMap::new();
        assert!(check_origin(&h).is_ok());
        h.insert(header::ORIGIN, "https://evil.example".parse().expect("header"));
        assert!(check_origin(&h).is_err());
        h.insert(header::ORIGIN, "http://127.0.0.1:8787".parse().expect("header"));
        assert!(check_origin(&h).is_ok());
        h.insert(header::ORIGIN, "null".parse().expect("header"));
        assert!(check_origin(&h).is_err());
    }
}
