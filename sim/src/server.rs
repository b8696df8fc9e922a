//! The HTTP front: routing, authentication, drawing faults, and the handlers of every `/v1`
//! endpoint; WebSocket upgrades go to [`crate::ws`] and `/__sim/` to [`crate::control`].

use std::sync::Arc;

use axum::extract::{Request, State as AxState};
use axum::http::{HeaderMap, Method};
use axum::response::Response;
use axum::Router;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

use crate::config::KeyAuth;
use crate::error::ApiError;
use crate::exchange::{fault_error, Ctx, Facts, Failure, Shaping};
use crate::models;
use crate::prompt::BYTES_PER_TOKEN;
use crate::responses;
use crate::sse::{chat_frame, pump_chat, pump_leak, pump_responses, sse_event};
use crate::state::{Caller, State};
use crate::store::CancelOutcome;
use crate::util::lock;
use crate::{chat, control, embeddings, ws};

/// Largest accepted request body.
const MAX_BODY: usize = 64 * 1024 * 1024;

pub(crate) fn router(state: Arc<State>) -> Router {
    Router::new().fallback(dispatch).with_state(state)
}

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

type Parsed = Option<Result<Value, serde_json::Error>>;

async fn dispatch(AxState(state): AxState<Arc<State>>, req: Request) -> Response {
    let path = req.uri().path().to_owned();
    if path == "/__sim" || path.starts_with("/__sim/") {
        return control::handle(&state, req).await;
    }
    if crate::chatgpt::owns(&path) {
        return crate::chatgpt::handle(state, req).await;
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

/// A request body, decoded (`decoded`) under the cap; `None` when it cannot be read.
pub(crate) async fn read_body(headers: &HeaderMap, body: axum::body::Body) -> Option<bytes::Bytes> {
    let bytes = axum::body::to_bytes(body, MAX_BODY).await.ok()?;
    decoded(headers, bytes)
}

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

/// The body with its `content-encoding` undone, as OpenAI reads it: gzip and zstd, which OpenAI's
/// backend is known to take (Codex sends zstd, and proxies in front of it send gzip), under the same
/// cap as a plain body. `None` for any other coding, several, or bytes that are not what the header
/// says: what OpenAI answers then is not known, so the simulator answers as it does to a body it cannot
/// parse, and never reads the bytes as if they were plain.
fn decoded(headers: &HeaderMap, bytes: bytes::Bytes) -> Option<bytes::Bytes> {
    use std::io::Read as _;
    let mut codings = headers
        .get_all("content-encoding")
        .iter()
        .map(|v| v.to_str().unwrap_or("?"))
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|c| !c.is_empty() && !c.eq_ignore_ascii_case("identity"));
    let Some(coding) = codings.next() else { return Some(bytes) };
    if codings.next().is_some() {
        return None;
    }
    let reader: Box<dyn std::io::Read + '_> = if coding.eq_ignore_ascii_case("gzip") {
        Box::new(flate2::bufread::MultiGzDecoder::new(&bytes[..]))
    } else if coding.eq_ignore_ascii_case("zstd") {
        Box::new(zstd::stream::read::Decoder::with_buffer(&bytes[..]).ok()?)
    } else {
        return None;
    };
    let mut out = Vec::new();
    reader.take(MAX_BODY as u64 + 1).read_to_end(&mut out).ok()?;
    (out.len() <= MAX_BODY).then(|| out.into())
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
            Ok(ctx.ok_json(&models::list(), shaping))
        }
        Route::Model(id) => {
            ctx.admit(0)?;
            if !models::is_known(&id) {
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
            let model = models::require(&body)?;
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
