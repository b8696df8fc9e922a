//! The unauthenticated control surface under `/__sim/` used by the binary's callers:
//! the log, per-key counts, fault injection and WebSocket kills.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::fault::Fault;
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
        (Method::POST, "/__sim/faults") => match serde_json::from_slice::<InjectBody>(&body) {
            Ok(b) => {
                state.faults.push(&b.key, b.fault);
                reply(StatusCode::OK, &json!({"queued": true}))
            }
            Err(e) => bad(e.to_string()),
        },
        (Method::POST, "/__sim/faults/clear") => {
            state.faults.clear();
            reply(StatusCode::OK, &json!({"cleared": true}))
        }
        (Method::GET, "/__sim/ws") => reply(StatusCode::OK, &json!({"open": state.ws.count()})),
        (Method::POST, "/__sim/ws/kill") => match serde_json::from_slice::<KeyBody>(&body) {
            Ok(b) => reply(StatusCode::OK, &json!({"killed": state.ws.kill(&b.key)})),
            Err(e) => bad(e.to_string()),
        },
        (m, p) => {
            reply(StatusCode::NOT_FOUND, &json!({"error": {"message": format!("Unknown control path ({m} {p})")}}))
        }
    }
}
