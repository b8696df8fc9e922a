//! The dashboard's "Set up Codex / pi": `GET /setup` (each client's setup now), `POST
//! /setup/{client}/preview` (what would change, held for the yes), `POST /setup/{client}/confirm/{id}`
//! (the yes: exactly what was shown, or 409 `setup_changed_since_preview`) and `POST
//! /setup/{client}/undo`. The work is `control::setup`'s, the same flow as `keymux setup` and the tray.
//! And the first-run import: `GET /import` (the keys found on this machine, masked) and `POST /import`
//! (the picked ones), `control::import`'s work.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, Response};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;

use super::types::{ImportRequest, SetupRequest};
use super::{control_error, guard, guarded, guarded_json};
use crate::control::ControlError;
use crate::gateway::Gateway;
use crate::setup::{Client, Pending};

/// The setup routes (mounted under `/keymux/api`).
pub fn routes() -> Router<Arc<Gateway>> {
    Router::new()
        .route("/setup", get(status))
        .route("/setup/{client}/preview", post(preview))
        .route("/setup/{client}/confirm/{id}", post(confirm))
        .route("/setup/{client}/undo", post(undo))
        .route("/import", get(import_offer).post(import))
        // The previews waiting for the person's yes: held by these routes, the only ones that use them.
        .layer(axum::Extension(Arc::new(Pending::default())))
}

async fn import_offer(State(gw): State<Arc<Gateway>>, headers: HeaderMap) -> Response<Body> {
    guarded(&gw, &headers, || Json(gw.import_offer()).into_response())
}

async fn import(State(gw): State<Arc<Gateway>>, request: Request) -> Response<Body> {
    let body: ImportRequest = match guarded_json(&gw, request).await {
        Ok(body) => body,
        Err(e) => return e.into_response(),
    };
    match gw.import_keys(body).await {
        Ok(done) => Json(done).into_response(),
        Err(e) => control_error(e),
    }
}

/// `POST /setup/{client}/undo`'s body.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct UndoBody {
    /// Put the old file back even though it changed since Keymux wrote it.
    force: bool,
}

fn client(name: &str) -> Result<Client, ControlError> {
    Client::ALL
        .into_iter()
        .find(|c| c.id() == name)
        .ok_or_else(|| ControlError::NotFound(format!("Keymux sets up 'codex' and 'pi', not '{name}'")))
}

async fn status(State(gw): State<Arc<Gateway>>, headers: HeaderMap) -> Response<Body> {
    guarded(&gw, &headers, || Json(gw.setup_status()).into_response())
}

async fn preview(
    State(gw): State<Arc<Gateway>>,
    axum::Extension(pending): axum::Extension<Arc<Pending>>,
    Path(name): Path<String>,
    request: Request,
) -> Response<Body> {
    let body: SetupRequest = match guarded_json(&gw, request).await {
        Ok(body) => body,
        Err(e) => return e.into_response(),
    };
    let client = match client(&name) {
        Ok(client) => client,
        Err(e) => return control_error(e),
    };
    match gw.setup_preview(&pending, client, body).await {
        Ok(shown) => Json(shown).into_response(),
        Err(e) => control_error(e),
    }
}

async fn confirm(
    State(gw): State<Arc<Gateway>>,
    axum::Extension(pending): axum::Extension<Arc<Pending>>,
    headers: HeaderMap,
    Path((name, id)): Path<(String, String)>,
) -> Response<Body> {
    if let Err(e) = guard(&gw, &headers) {
        return e.into_response();
    }
    let client = match client(&name) {
        Ok(client) => client,
        Err(e) => return control_error(e),
    };
    match gw.setup_confirm(&pending, client, &id).await {
        Ok(done) => Json(done).into_response(),
        Err(e) => control_error(e),
    }
}

async fn undo(State(gw): State<Arc<Gateway>>, Path(name): Path<String>, request: Request) -> Response<Body> {
    let body: UndoBody = match guarded_json(&gw, request).await {
        Ok(body) => body,
        Err(e) => return e.into_response(),
    };
    match client(&name).and_then(|client| gw.setup_undo(client, body.force)) {
        Ok(undone) => Json(undone).into_response(),
        Err(e) => control_error(e),
    }
}
