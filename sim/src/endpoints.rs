//! The `/v1` endpoints: which one a method and path name (`route`, shared with the ChatGPT backend,
//! which serves its requests through the same endpoints), and serving an authenticated request on one
//! (`run`): faults drawn, then the models, stored responses, and the endpoints that run the model.

use axum::http::Method;
use axum::response::Response;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

use crate::error::ApiError;
use crate::exchange::{fault_error, Ctx, Facts, Failure, Shaping};
use crate::models;
use crate::prompt::BYTES_PER_TOKEN;
use crate::responses;
use crate::sse::{chat_frame, pump_chat, pump_leak, pump_responses, sse_event};
use crate::state::Caller;
use crate::store::CancelOutcome;
use crate::util::lock;
use crate::{chat, embeddings};

/// An endpoint, as a method and a path name it.
#[derive(Debug, Clone)]
pub(crate) enum Route {
    Socket,
    Models,
    Model(String),
    Stored(StoredOp, String),
    Generate(Generation),
}

/// What to do with a stored response.
#[derive(Debug, Clone, Copy)]
pub(crate) enum StoredOp {
    Get,
    Delete,
    Cancel,
    InputItems,
}

/// The endpoints that run the model.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Generation {
    Create,
    Compact,
    Chat,
    Embeddings,
}

pub(crate) fn route(method: &Method, path: &str, upgrade: bool) -> Option<Route> {
    let rest = path.strip_prefix("/v1/")?.trim_end_matches('/');
    let segs: Vec<&str> = rest.split('/').collect();
    let r = match (method.as_str(), segs.as_slice()) {
        ("POST", ["responses"]) => Route::Generate(Generation::Create),
        ("GET", ["responses"]) if upgrade => Route::Socket,
        ("POST", ["responses", "compact"]) => Route::Generate(Generation::Compact),
        ("GET", ["responses", id]) if !id.is_empty() => Route::Stored(StoredOp::Get, (*id).to_owned()),
        ("DELETE", ["responses", id]) if !id.is_empty() => Route::Stored(StoredOp::Delete, (*id).to_owned()),
        ("POST", ["responses", id, "cancel"]) => Route::Stored(StoredOp::Cancel, (*id).to_owned()),
        ("GET", ["responses", id, "input_items"]) => Route::Stored(StoredOp::InputItems, (*id).to_owned()),
        ("POST", ["chat", "completions"]) => Route::Generate(Generation::Chat),
        ("POST", ["embeddings"]) => Route::Generate(Generation::Embeddings),
        ("GET", ["models"]) => Route::Models,
        ("GET", ["models", id]) if !id.is_empty() => Route::Model((*id).to_owned()),
        _ => return None,
    };
    Some(r)
}

type Parsed = Option<Result<Value, serde_json::Error>>;

/// Serves an authenticated request of `caller` on `route` with its (decoded) body: faults drawn,
/// then the endpoint.
pub(crate) async fn run(mut ctx: Ctx, caller: Caller, route: Route, bytes: bytes::Bytes) -> Response {
    let state = ctx.state.clone();
    let parsed: Parsed = if bytes.is_empty() && !matches!(route, Route::Generate(_)) {
        None
    } else {
        Some(serde_json::from_slice(&bytes))
    };
    ctx.facts = Facts::from_body(parsed.as_ref().and_then(|p| p.as_ref().ok()).cloned(), true);
    ctx.facts.body_bytes = bytes.len();

    let fault = state.draw_fault(&caller);
    let shaping = Shaping::from_fault(fault.as_ref());
    let resp = match fault.as_ref().and_then(|f| fault_error(&state, &caller, f, ctx.facts.model.as_deref())) {
        Some(err) => ctx.fail(err.into()),
        None => serve(&mut ctx, &caller, route, parsed, bytes.len(), shaping).unwrap_or_else(|f| ctx.fail(f)),
    };
    if let Some(d) = shaping.first_byte {
        tokio::time::sleep(d).await;
    }
    resp
}

fn object_body(parsed: Parsed) -> Result<Map<String, Value>, Failure> {
    match parsed {
        Some(Ok(Value::Object(map))) => Ok(map),
        Some(Ok(_)) => {
            Err(ApiError::invalid_type("body", "Invalid type for request body: expected an object.".to_owned()).into())
        }
        _ => Err(ApiError::bad_json().into()),
    }
}

fn query_param<'q>(query: &'q str, name: &str) -> Option<&'q str> {
    query.split('&').filter_map(|kv| kv.split_once('=')).find(|(k, _)| *k == name).map(|(_, v)| v)
}

fn serve(
    ctx: &mut Ctx,
    caller: &Caller,
    route: Route,
    parsed: Parsed,
    body_len: usize,
    shaping: Shaping,
) -> Result<Response, Failure> {
    match route {
        Route::Models => {
            ctx.admit(0)?;
            let list = models::list(&ctx.state.org(caller.org).models);
            Ok(ctx.ok_json(&list, shaping))
        }
        Route::Model(id) => {
            ctx.admit(0)?;
            if !ctx.state.org(caller.org).models.contains(&id.as_str()) {
                return Err(ApiError::model_not_found(&id).into());
            }
            Ok(ctx.ok_json(&models::model_object(&id), shaping))
        }
        Route::Stored(op, id) => {
            ctx.admit(0)?;
            let v = stored(ctx, caller, op, &id)?;
            Ok(ctx.ok_json(&v, shaping))
        }
        Route::Generate(generation) => {
            let body = object_body(parsed)?;
            let model = models::require(&body, &ctx.state.org(caller.org).models)?;
            ctx.admit((body_len / BYTES_PER_TOKEN) as u64)?;
            generate(ctx, caller, generation, &model, &body, shaping)
        }
        Route::Socket => Err(ApiError::invalid_url("GET", "/v1/responses").into()),
    }
}

/// The endpoints over the organization's stored responses.
fn stored(ctx: &Ctx, caller: &Caller, op: StoredOp, id: &str) -> Result<Value, Failure> {
    let mut store = lock(&ctx.state.org(caller.org).store);
    let missing = || Failure::from(ApiError::response_not_found(id));
    match op {
        StoredOp::Get => store.get(id).map(|s| s.response.clone()).ok_or_else(missing),
        StoredOp::Delete if store.remove(id) => Ok(json!({"id": id, "object": "response.deleted", "deleted": true})),
        StoredOp::Delete => Err(missing()),
        StoredOp::Cancel => match store.cancel(id) {
            CancelOutcome::Cancelled(v) => Ok(v),
            CancelOutcome::NotCancellable(status) => Err(ApiError::cannot_cancel(&status).into()),
            CancelOutcome::Missing => Err(missing()),
        },
        StoredOp::InputItems => {
            store.get(id).map(|s| input_items_page(s.input_items.clone(), &ctx.query)).ok_or_else(missing)
        }
    }
}

/// One page of `GET /v1/responses/{id}/input_items` (`order`, `after`, `limit`).
fn input_items_page(mut items: Vec<Value>, query: &str) -> Value {
    if query_param(query, "order") != Some("asc") {
        items.reverse();
    }
    if let Some(after) = query_param(query, "after") {
        if let Some(pos) = items.iter().position(|i| i["id"] == after) {
            items.drain(..=pos);
        }
    }
    let limit = query_param(query, "limit").and_then(|l| l.parse::<usize>().ok()).unwrap_or(20).clamp(1, 100);
    let has_more = items.len() > limit;
    items.truncate(limit);
    json!({
        "object": "list",
        "data": items,
        "first_id": items.first().map(|i| i["id"].clone()),
        "last_id": items.last().map(|i| i["id"].clone()),
        "has_more": has_more,
    })
}

/// The endpoints that run the model: responses, compaction, chat and embeddings.
fn generate(
    ctx: &mut Ctx,
    caller: &Caller,
    generation: Generation,
    model: &str,
    body: &Map<String, Value>,
    shaping: Shaping,
) -> Result<Response, Failure> {
    let state = ctx.state.clone();
    match generation {
        Generation::Create => {
            let plan = responses::plan(&state, caller, model, body, None)?;
            ctx.facts.input_tokens = plan.input_tokens;
            ctx.facts.cached_tokens = plan.cached_tokens;
            if ctx.facts.stream {
                let (tx, rx) = mpsc::channel(1);
                if shaping.leak {
                    let first = plan.events.first().map(sse_event).unwrap_or_default();
                    tokio::spawn(pump_leak(first, false, caller.secret.clone(), tx));
                } else {
                    tokio::spawn(pump_responses(state, plan, shaping, tx));
                }
                return Ok(ctx.sse(rx));
            }
            if shaping.cut.is_none() {
                responses::commit(&state, &plan);
            }
            Ok(ctx.ok_json(&plan.completed, shaping))
        }
        Generation::Compact => {
            let (v, input, cached) = responses::compact(&state, caller, model, body)?;
            ctx.facts.input_tokens = input;
            ctx.facts.cached_tokens = cached;
            Ok(ctx.ok_json(&v, shaping))
        }
        Generation::Chat => {
            let plan = chat::plan(&state, caller, model, body)?;
            ctx.facts.input_tokens = plan.prompt_tokens;
            ctx.facts.cached_tokens = plan.cached_tokens;
            if ctx.facts.stream {
                let (tx, rx) = mpsc::channel(1);
                if shaping.leak {
                    let first = plan.chunks.first().map(chat_frame).unwrap_or_default();
                    tokio::spawn(pump_leak(first, true, caller.secret.clone(), tx));
                } else {
                    tokio::spawn(pump_chat(state, plan, shaping, tx));
                }
                return Ok(ctx.sse(rx));
            }
            if shaping.cut.is_none() {
                chat::commit(&state, &plan);
            }
            Ok(ctx.ok_json(&plan.completion, shaping))
        }
        Generation::Embeddings => {
            let (v, tokens) = embeddings::create(model, body)?;
            ctx.facts.input_tokens = tokens;
            Ok(ctx.ok_json(&v, shaping))
        }
    }
}
