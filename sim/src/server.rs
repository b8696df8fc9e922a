//! The HTTP front: routing, authentication, faults, rate limits, logging, the common
//! OpenAI response headers, and the handlers of every `/v1` endpoint.

use std::io;
use std::io::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State as AxState};
use axum::http::header::{HeaderName, HeaderValue};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::Response;
use axum::Router;
use flate2::write::GzEncoder;
use flate2::Compression;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

use crate::config::KeyAuth;
use crate::error::ApiError;
use crate::fault::Fault;
use crate::log::{LogEntry, Transport};
use crate::models;
use crate::ratelimit::Snapshot;
use crate::responses::{self, Plan};
use crate::state::{Caller, State};
use crate::store::CancelOutcome;
use crate::util::{lock, request_id};
use crate::{chat, control, embeddings, ws};

/// Largest accepted request body.
const MAX_BODY: usize = 64 * 1024 * 1024;

pub(crate) fn router(state: Arc<State>) -> Router {
    Router::new().fallback(dispatch).with_state(state)
}

#[derive(Debug, Clone)]
enum Route {
    Create,
    Socket,
    Compact,
    Get(String),
    Delete(String),
    Cancel(String),
    InputItems(String),
    Chat,
    Embeddings,
    Models,
    Model(String),
}

fn route(method: &Method, path: &str, upgrade: bool) -> Option<Route> {
    let rest = path.strip_prefix("/v1/")?.trim_end_matches('/');
    let segs: Vec<&str> = rest.split('/').collect();
    let r = match (method.as_str(), segs.as_slice()) {
        ("POST", ["responses"]) => Route::Create,
        ("GET", ["responses"]) if upgrade => Route::Socket,
        ("POST", ["responses", "compact"]) => Route::Compact,
        ("GET", ["responses", id]) if !id.is_empty() => Route::Get((*id).to_owned()),
        ("DELETE", ["responses", id]) if !id.is_empty() => Route::Delete((*id).to_owned()),
        ("POST", ["responses", id, "cancel"]) => Route::Cancel((*id).to_owned()),
        ("GET", ["responses", id, "input_items"]) => Route::InputItems((*id).to_owned()),
        ("POST", ["chat", "completions"]) => Route::Chat,
        ("POST", ["embeddings"]) => Route::Embeddings,
        ("GET", ["models"]) => Route::Models,
        ("GET", ["models", id]) if !id.is_empty() => Route::Model((*id).to_owned()),
        _ => return None,
    };
    Some(r)
}

fn is_upgrade(headers: &HeaderMap) -> bool {
    headers.get("upgrade").and_then(|v| v.to_str().ok()).is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

/// Request headers for the log: lowercase names, credentials redacted.
pub(crate) fn loggable_headers(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(name, value)| {
            let name = name.as_str().to_ascii_lowercase();
            let value = if name == "authorization" || name == "api-key" {
                "<redacted>".to_owned()
            } else {
                String::from_utf8_lossy(value.as_bytes()).into_owned()
            };
            (name, value)
        })
        .collect()
}

/// Finds the key a request presents. A Bearer token must be a Bearer key and an `api-key`
/// header must be an Azure key.
pub(crate) fn authenticate(state: &State, headers: &HeaderMap) -> Result<Caller, ApiError> {
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

/// What the log records about a request besides its status.
#[derive(Debug, Default, Clone)]
pub(crate) struct Facts {
    pub model: Option<String>,
    pub stream: bool,
    pub input_tokens: u64,
    pub cached_tokens: u64,
    pub previous_response_id: Option<String>,
    pub body: Option<Value>,
    /// Length of the raw body or frame.
    pub body_bytes: usize,
}

impl Facts {
    pub(crate) fn from_body(body: Option<Value>, stream_field: bool) -> Self {
        let get_str = |k: &str| body.as_ref().and_then(|b| b.get(k)).and_then(Value::as_str).map(str::to_owned);
        Facts {
            model: get_str("model"),
            stream: stream_field
                && body.as_ref().and_then(|b| b.get("stream")).and_then(Value::as_bool).unwrap_or(false),
            input_tokens: 0,
            cached_tokens: 0,
            previous_response_id: get_str("previous_response_id"),
            body,
            body_bytes: 0,
        }
    }
}

/// Adds one log entry.
#[expect(clippy::too_many_arguments, reason = "mirrors the log entry fields")]
pub(crate) fn record(
    state: &State,
    seq: u64,
    method: &str,
    path: &str,
    caller: Option<&Caller>,
    status: u16,
    transport: Transport,
    facts: Facts,
    error_code: Option<String>,
    headers: Vec<(String, String)>,
    served: bool,
) {
    let body_bytes = facts.body_bytes;
    let entry = LogEntry {
        seq,
        method: method.to_owned(),
        path: path.to_owned(),
        key: caller.map(|c| c.secret.clone()),
        org: caller.map(|c| state.org(c.org).id.clone()),
        status,
        transport,
        model: facts.model,
        stream: facts.stream,
        input_tokens: facts.input_tokens,
        cached_tokens: facts.cached_tokens,
        previous_response_id: facts.previous_response_id,
        error_code,
        headers,
        body: facts.body,
    };
    state.log.record(entry, body_bytes, served && caller.is_some());
}

/// The error a queued fault answers with.
pub(crate) fn fault_error(state: &State, caller: &Caller, fault: &Fault, model: Option<&str>) -> Option<ApiError> {
    let e = match fault {
        Fault::Status500 => ApiError::server_error(),
        Fault::Status503 { retry_after_secs } => ApiError::overloaded(*retry_after_secs),
        Fault::RateLimited { retry_after_secs } => {
            let limits = state.limiter.limits();
            let mut e = ApiError::rate_limited(
                "requests",
                model.unwrap_or("default"),
                &state.org(caller.org).id,
                limits.requests,
                limits.requests,
                1,
                Duration::from_secs(*retry_after_secs),
            );
            e.headers = vec![
                ("retry-after", retry_after_secs.to_string()),
                ("retry-after-ms", retry_after_secs.saturating_mul(1000).to_string()),
            ];
            e
        }
        Fault::InvalidKey => ApiError::invalid_key(&caller.secret),
        Fault::InsufficientQuota => ApiError::insufficient_quota(),
        Fault::ModelNotFound => ApiError::model_not_found(model.unwrap_or("unknown")),
        Fault::CutAfterEvents(_) | Fault::SlowFirstByte(_) | Fault::SlowDeltas(_) => return None,
    };
    Some(e)
}

/// Stream-shaping faults of one request.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Shaping {
    pub first_byte: Option<Duration>,
    pub deltas: Option<Duration>,
    pub cut: Option<usize>,
}

impl Shaping {
    pub(crate) fn from_fault(fault: Option<&Fault>) -> Self {
        match fault {
            Some(Fault::SlowFirstByte(d)) => Shaping { first_byte: Some(*d), ..Shaping::default() },
            Some(Fault::SlowDeltas(d)) => Shaping { deltas: Some(*d), ..Shaping::default() },
            Some(Fault::CutAfterEvents(n)) => Shaping { cut: Some(*n), ..Shaping::default() },
            _ => Shaping::default(),
        }
    }
}

/// An error answer and whether it counts as served for the key.
pub(crate) struct Failure {
    err: ApiError,
    served: bool,
}

impl From<ApiError> for Failure {
    fn from(err: ApiError) -> Self {
        Failure { err, served: true }
    }
}

/// One HTTP request in flight.
pub(crate) struct Ctx {
    pub state: Arc<State>,
    seq: u64,
    started: Instant,
    method: String,
    path: String,
    query: String,
    pub headers: Vec<(String, String)>,
    request_id: String,
    accepts_gzip: bool,
    pub caller: Option<Caller>,
    pub facts: Facts,
    snapshot: Option<Snapshot>,
}

fn set_header(h: &mut HeaderMap, name: &str, value: &str) {
    if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(value)) {
        h.insert(n, v);
    }
}

impl Ctx {
    fn current_snapshot(&self) -> Snapshot {
        if let Some(s) = self.snapshot {
            return s;
        }
        let key = self.caller.as_ref().map_or("", |c| c.secret.as_str());
        self.state.limiter.snapshot(key, Instant::now())
    }

    /// Logs this request.
    pub(crate) fn log(&mut self, status: u16, error_code: Option<String>, served: bool) {
        record(
            &self.state,
            self.seq,
            &self.method,
            &self.path,
            self.caller.as_ref(),
            status,
            Transport::Http,
            std::mem::take(&mut self.facts),
            error_code,
            self.headers.clone(),
            served,
        );
    }

    /// Adds the headers every OpenAI answer carries.
    pub(crate) fn decorate(&self, mut resp: Response, hide_org: bool) -> Response {
        let snapshot = self.current_snapshot();
        let h = resp.headers_mut();
        if let (Some(caller), false) = (&self.caller, hide_org) {
            set_header(h, "openai-organization", &self.state.org(caller.org).id);
        }
        set_header(h, "openai-version", "2020-10-01");
        set_header(h, "x-request-id", &self.request_id);
        let ms = self.started.elapsed().as_millis().to_string();
        set_header(h, "openai-processing-ms", &ms);
        for (name, value) in snapshot.headers() {
            set_header(h, name, &value);
        }
        resp
    }

    fn json_response(
        &self,
        status: StatusCode,
        value: &Value,
        extra: &[(&'static str, String)],
        hide_org: bool,
        cut: bool,
    ) -> Response {
        let mut bytes = value.to_string().into_bytes();
        let mut gzip = false;
        if self.state.gzip_json && self.accepts_gzip {
            let mut enc = GzEncoder::new(Vec::new(), Compression::default());
            if enc.write_all(&bytes).is_ok() {
                if let Ok(z) = enc.finish() {
                    bytes = z;
                    gzip = true;
                }
            }
        }
        let body = if cut {
            let half = Bytes::from(bytes[..bytes.len() / 2].to_vec());
            let (tx, rx) = mpsc::channel(1);
            tokio::spawn(async move {
                if tx.send(Ok(half)).await.is_ok() {
                    tokio::time::sleep(FLUSH_GRACE).await;
                    let _ = tx.send(Err(cut_error())).await;
                }
            });
            Body::from_stream(receiver_stream(rx))
        } else {
            Body::from(bytes)
        };
        let mut resp = Response::new(body);
        *resp.status_mut() = status;
        let h = resp.headers_mut();
        set_header(h, "content-type", "application/json");
        if gzip {
            set_header(h, "content-encoding", "gzip");
            set_header(h, "vary", "Accept-Encoding");
        }
        for (name, value) in extra {
            set_header(h, name, value);
        }
        self.decorate(resp, hide_org)
    }

    /// Logs and renders an error.
    fn fail(&mut self, failure: Failure) -> Response {
        let err = failure.err;
        self.log(err.status.as_u16(), Some(err.log_code()), failure.served);
        self.json_response(err.status, &err.body(), &err.headers, err.hide_org, false)
    }

    /// Logs and renders a 200 JSON body (cut in half by `CutAfterEvents`).
    fn ok_json(&mut self, value: &Value, shaping: Shaping) -> Response {
        self.log(200, None, true);
        self.json_response(StatusCode::OK, value, &[], false, shaping.cut.is_some())
    }

    fn sse(&mut self, rx: mpsc::Receiver<Chunk>) -> Response {
        self.log(200, None, true);
        let mut resp = Response::new(Body::from_stream(receiver_stream(rx)));
        let h = resp.headers_mut();
        set_header(h, "content-type", "text/event-stream; charset=utf-8");
        set_header(h, "cache-control", "no-cache");
        self.decorate(resp, false)
    }

    fn admit(&mut self, tokens: u64) -> Result<(), Failure> {
        let Some(caller) = &self.caller else {
            return Ok(());
        };
        match self.state.limiter.admit(&caller.secret, tokens, Instant::now()) {
            Ok(s) => {
                self.snapshot = Some(s);
                Ok(())
            }
            Err((r, s)) => {
                self.snapshot = Some(s);
                self.facts.input_tokens = tokens;
                let err = ApiError::rate_limited(
                    r.dimension,
                    self.facts.model.as_deref().unwrap_or("default"),
                    &self.state.org(caller.org).id,
                    r.limit,
                    r.used,
                    r.requested,
                    r.wait,
                );
                Err(Failure { err, served: false })
            }
        }
    }
}

async fn dispatch(AxState(state): AxState<Arc<State>>, req: Request) -> Response {
    let path = req.uri().path().to_owned();
    if path == "/__sim" || path.starts_with("/__sim/") {
        return control::handle(&state, req).await;
    }
    let started = Instant::now();
    let (parts, body) = req.into_parts();
    let accepts_gzip =
        parts.headers.get_all("accept-encoding").iter().any(|v| String::from_utf8_lossy(v.as_bytes()).contains("gzip"));
    let auth = authenticate(&state, &parts.headers);
    let mut ctx = Ctx {
        seq: state.log.next_seq(),
        state: state.clone(),
        started,
        method: parts.method.as_str().to_owned(),
        path: path.clone(),
        query: parts.uri.query().unwrap_or("").to_owned(),
        headers: loggable_headers(&parts.headers),
        request_id: request_id(),
        accepts_gzip,
        caller: auth.as_ref().ok().cloned(),
        facts: Facts::default(),
        snapshot: None,
    };
    let Some(route) = route(&parts.method, &path, is_upgrade(&parts.headers)) else {
        let err = ApiError::invalid_url(parts.method.as_str(), &path);
        return ctx.fail(err.into());
    };
    if let Err(err) = auth {
        return ctx.fail(err.into());
    }
    if matches!(route, Route::Socket) {
        return ws::upgrade(ctx, parts).await;
    }
    let bytes = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(b) => b,
        Err(_) => return ctx.fail(ApiError::bad_json().into()),
    };
    let parsed: Option<Result<Value, serde_json::Error>> =
        if bytes.is_empty() && parts.method != Method::POST { None } else { Some(serde_json::from_slice(&bytes)) };
    let body_value = parsed.as_ref().and_then(|p| p.as_ref().ok()).cloned();
    ctx.facts = Facts::from_body(body_value, true);
    ctx.facts.body_bytes = bytes.len();

    let Some(caller) = ctx.caller.clone() else {
        return ctx.fail(ApiError::missing_key().into());
    };
    let fault = state.faults.pop(&caller.secret);
    let shaping = Shaping::from_fault(fault.as_ref());
    let resp = match fault.as_ref().and_then(|f| fault_error(&state, &caller, f, ctx.facts.model.as_deref())) {
        Some(err) => ctx.fail(err.into()),
        None => match serve(&mut ctx, &caller, route, parsed, bytes.len(), shaping).await {
            Ok(resp) => resp,
            Err(failure) => ctx.fail(failure),
        },
    };
    if let Some(d) = shaping.first_byte {
        tokio::time::sleep(d).await;
    }
    resp
}

fn object_body(parsed: Option<Result<Value, serde_json::Error>>) -> Result<Map<String, Value>, Failure> {
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

async fn serve(
    ctx: &mut Ctx,
    caller: &Caller,
    route: Route,
    parsed: Option<Result<Value, serde_json::Error>>,
    body_len: usize,
    shaping: Shaping,
) -> Result<Response, Failure> {
    let state = ctx.state.clone();
    let org = state.org(caller.org);
    let estimate = (body_len / crate::prompt::BYTES_PER_TOKEN) as u64;
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
        Route::Get(id) => {
            ctx.admit(0)?;
            let found = lock(&org.store).get(&id).map(|s| s.response.clone());
            match found {
                Some(v) => Ok(ctx.ok_json(&v, shaping)),
                None => Err(ApiError::response_not_found(&id).into()),
            }
        }
        Route::Delete(id) => {
            ctx.admit(0)?;
            if lock(&org.store).remove(&id) {
                let v = json!({"id": id, "object": "response.deleted", "deleted": true});
                Ok(ctx.ok_json(&v, shaping))
            } else {
                Err(ApiError::response_not_found(&id).into())
            }
        }
        Route::Cancel(id) => {
            ctx.admit(0)?;
            let outcome = lock(&org.store).cancel(&id);
            match outcome {
                CancelOutcome::Cancelled(v) => Ok(ctx.ok_json(&v, shaping)),
                CancelOutcome::NotCancellable(status) => Err(ApiError::cannot_cancel(&status).into()),
                CancelOutcome::Missing => Err(ApiError::response_not_found(&id).into()),
            }
        }
        Route::InputItems(id) => {
            ctx.admit(0)?;
            let items = lock(&org.store).get(&id).map(|s| s.input_items.clone());
            let Some(mut items) = items else {
                return Err(ApiError::response_not_found(&id).into());
            };
            if query_param(&ctx.query, "order") != Some("asc") {
                items.reverse();
            }
            if let Some(after) = query_param(&ctx.query, "after") {
                if let Some(pos) = items.iter().position(|i| i["id"] == after) {
                    items.drain(..=pos);
                }
            }
            let limit =
                query_param(&ctx.query, "limit").and_then(|l| l.parse::<usize>().ok()).unwrap_or(20).clamp(1, 100);
            let has_more = items.len() > limit;
            items.truncate(limit);
            let v = json!({
                "object": "list",
                "data": items,
                "first_id": items.first().map(|i| i["id"].clone()),
                "last_id": items.last().map(|i| i["id"].clone()),
                "has_more": has_more,
            });
            Ok(ctx.ok_json(&v, shaping))
        }
        Route::Create | Route::Compact | Route::Chat | Route::Embeddings => {
            let body = object_body(parsed)?;
            let model = models::require(&body)?;
            ctx.admit(estimate)?;
            match route {
                Route::Create => {
                    let plan = responses::plan(&state, caller, &model, &body, None)?;
                    ctx.facts.input_tokens = plan.input_tokens;
                    ctx.facts.cached_tokens = plan.cached_tokens;
                    if ctx.facts.stream {
                        let (tx, rx) = mpsc::channel(1);
                        tokio::spawn(pump_responses(state.clone(), plan, shaping, tx));
                        Ok(ctx.sse(rx))
                    } else {
                        if shaping.cut.is_none() {
                            responses::commit(&state, &plan);
                        }
                        Ok(ctx.ok_json(&plan.completed, shaping))
                    }
                }
                Route::Compact => {
                    let (v, input, cached) = responses::compact(&state, caller, &model, &body)?;
                    ctx.facts.input_tokens = input;
                    ctx.facts.cached_tokens = cached;
                    Ok(ctx.ok_json(&v, shaping))
                }
                Route::Chat => {
                    let plan = chat::plan(&state, caller, &model, &body)?;
                    ctx.facts.input_tokens = plan.prompt_tokens;
                    ctx.facts.cached_tokens = plan.cached_tokens;
                    if ctx.facts.stream {
                        let (tx, rx) = mpsc::channel(1);
                        tokio::spawn(pump_chat(state.clone(), plan, shaping, tx));
                        Ok(ctx.sse(rx))
                    } else {
                        if shaping.cut.is_none() {
                            chat::commit(&state, &plan);
                        }
                        Ok(ctx.ok_json(&plan.completion, shaping))
                    }
                }
                _ => {
                    let (v, tokens) = embeddings::create(&model, &body)?;
                    ctx.facts.input_tokens = tokens;
                    Ok(ctx.ok_json(&v, shaping))
                }
            }
        }
        Route::Socket => Err(ApiError::invalid_url("GET", "/v1/responses").into()),
    }
}

type Chunk = Result<Bytes, io::Error>;

/// How long a cut body waits so that what was sent reaches the client before the abort.
pub(crate) const FLUSH_GRACE: Duration = Duration::from_millis(50);

fn receiver_stream(rx: mpsc::Receiver<Chunk>) -> impl futures::Stream<Item = Chunk> + Send + 'static {
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) })
}

/// One SSE event: `event: <type>` and `data: <json>`.
pub(crate) fn sse_event(event: &Value) -> Bytes {
    let kind = event.get("type").and_then(Value::as_str).unwrap_or("message");
    Bytes::from(format!("event: {kind}\ndata: {event}\n\n"))
}

fn cut_error() -> io::Error {
    io::Error::other("stream cut by an injected fault")
}

async fn pump_responses(state: Arc<State>, plan: Plan, shaping: Shaping, tx: mpsc::Sender<Chunk>) {
    responses::begin(&state, &plan);
    let total = plan.events.len();
    let mut open = true;
    for (i, event) in plan.events.iter().enumerate() {
        if shaping.cut == Some(i) {
            responses::fail(&state, &plan);
            tokio::time::sleep(FLUSH_GRACE).await;
            let _ = tx.send(Err(cut_error())).await;
            return;
        }
        if i > 0 && open {
            if let Some(d) = shaping.deltas {
                tokio::time::sleep(d).await;
            }
        }
        if i + 1 == total {
            responses::commit(&state, &plan);
        }
        if open {
            open = tx.send(Ok(sse_event(event))).await.is_ok();
        }
    }
}

async fn pump_chat(state: Arc<State>, plan: chat::ChatPlan, shaping: Shaping, tx: mpsc::Sender<Chunk>) {
    let mut frames: Vec<Bytes> = plan.chunks.iter().map(|c| Bytes::from(format!("data: {c}\n\n"))).collect();
    frames.push(Bytes::from_static(b"data: [DONE]\n\n"));
    let total = frames.len();
    let mut open = true;
    for (i, frame) in frames.into_iter().enumerate() {
        if shaping.cut == Some(i) {
            tokio::time::sleep(FLUSH_GRACE).await;
            let _ = tx.send(Err(cut_error())).await;
            return;
        }
        if i > 0 && open {
            if let Some(d) = shaping.deltas {
                tokio::time::sleep(d).await;
            }
        }
        if i + 1 == total {
            chat::commit(&state, &plan);
        }
        if open {
            open = tx.send(Ok(frame)).await.is_ok();
        }
    }
}
