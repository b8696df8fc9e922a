//! The unauthenticated control surface under `/__sim/` used by the binary's callers, one
//! endpoint per [`crate::Sim`] method:
//! - `GET /__sim/log`, `GET /__sim/counts`;
//! - `POST /__sim/faults {"key","fault"}` queues a fault, `POST /__sim/faults/clear`;
//! - `POST /__sim/standing {"key" or "org","fault","ms"?}` sets a standing fault (without
//!   `ms`, until cleared), `POST /__sim/standing/clear {"key" or "org"}`;
//! - `POST /__sim/advance {"ms"}` moves the clock forward;
//! - `GET /__sim/ws` counts open WebSockets, `POST /__sim/ws/kill {"key"}` drops them.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::fault::{Fault, Scope};
use crate::state::State;

/// Largest accepted control body.
const MAX_BODY: usize = 1024 * 1024;

#[derive(Deserialize)]
struct InjectBody {
    key: String,
    fault: Fault,
}

#[derive(Deserialize)]
struct KeyBody {
    key: String,
}

/// Names a key (`"key"`) or a whole organization (`"org"`), exactly one of them.
#[derive(Deserialize)]
struct ScopeBody {
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    org: Option<String>,
}

impl ScopeBody {
    fn scope(self) -> Result<Scope, String> {
        match (self.key, self.org) {
            (Some(key), None) => Ok(Scope::Key(key)),
            (None, Some(org)) => Ok(Scope::Org(org)),
            _ => Err("name exactly one of \"key\" and \"org\"".to_owned()),
        }
    }
}

#[derive(Deserialize)]
struct StandingBody {
    #[serde(flatten)]
    scope: ScopeBody,
    fault: Fault,
    /// How long the fault stands; absent, until cleared.
    #[serde(default)]
    ms: Option<u64>,
}

#[derive(Deserialize)]
struct AdvanceBody {
    ms: u64,
}

fn reply(status: StatusCode, v: &Value) -> Response {
    let mut resp = Response::new(Body::from(v.to_string()));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(axum::http::header::CONTENT_TYPE, axum::http::HeaderValue::from_static("application/json"));
    resp
}

fn bad(message: String) -> Response {
    reply(StatusCode::BAD_REQUEST, &json!({"error": {"message": message}}))
}

/// Parses `body` and answers with what `act` returns, or 400.
fn with_body<T: DeserializeOwned>(body: &Bytes, act: impl FnOnce(T) -> Result<Value, String>) -> Response {
    match serde_json::from_slice::<T>(body).map_err(|e| e.to_string()).and_then(act) {
        Ok(v) => reply(StatusCode::OK, &v),
        Err(message) => bad(message),
    }
}

pub(crate) async fn handle(state: &Arc<State>, req: Request) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let body = match axum::body::to_bytes(req.into_body(), MAX_BODY).await {
        Ok(b) => b,
        Err(e) => return bad(e.to_string()),
    };
    match (method, path.as_str()) {
        (Method::GET, "/__sim/log") => match serde_json::to_value(state.log.entries()) {
            Ok(v) => reply(StatusCode::OK, &v),
            Err(e) => bad(e.to_string()),
        },
        (Method::GET, "/__sim/counts") => reply(StatusCode::OK, &json!(state.log.counts())),
        (Method::POST, "/__sim/faults") => with_body(&body, |b: InjectBody| {
            state.faults.push(&b.key, b.fault);
            Ok(json!({"queued": true}))
        }),
        (Method::POST, "/__sim/faults/clear") => {
            state.faults.clear();
            reply(StatusCode::OK, &json!({"cleared": true}))
        }
        (Method::POST, "/__sim/standing") => with_body(&body, |b: StandingBody| {
            let until = b.ms.map(|ms| state.clock.now() + Duration::from_millis(ms));
            state.faults.set_standing(b.scope.scope()?, b.fault, until);
            Ok(json!({"standing": true}))
        }),
        (Method::POST, "/__sim/standing/clear") => with_body(&body, |b: ScopeBody| {
            state.faults.clear_standing(&b.scope()?);
            Ok(json!({"cleared": true}))
        }),
        (Method::POST, "/__sim/advance") => with_body(&body, |b: AdvanceBody| {
            let skew = state.clock.advance(Duration::from_millis(b.ms));
            Ok(json!({"skew_ms": u64::try_from(skew.as_millis()).unwrap_or(u64::MAX)}))
        }),
        (Method::GET, "/__sim/ws") => reply(StatusCode::OK, &json!({"open": state.ws.count()})),
        (Method::POST, "/__sim/ws/kill") => with_body(&body, |b: KeyBody| Ok(json!({"killed": state.ws.kill(&b.key)}))),
        (m, p) => {
            reply(StatusCode::NOT_FOUND, &json!({"error": {"message": format!("Unknown control path ({m} {p})")}}))
        }
    }
}
