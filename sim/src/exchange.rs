//! One exchange with a client, shared by the HTTP and WebSocket fronts: the facts the log
//! records, the fault the exchange draws and how it shapes a stream, and, for HTTP, the
//! request context that admits against the rate limiter and renders answers with the common
//! OpenAI headers.

use std::io;
use std::io::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::header::{HeaderName, HeaderValue};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use flate2::write::GzEncoder;
use flate2::Compression;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::error::ApiError;
use crate::fault::Fault;
use crate::log::{LogEntry, Transport};
use crate::ratelimit::Snapshot;
use crate::state::{Caller, State};
use crate::util::request_id;

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

/// Where and how a logged exchange arrived.
pub(crate) struct Origin<'a> {
    pub seq: u64,
    pub method: &'a str,
    pub path: &'a str,
    pub transport: Transport,
    pub headers: Vec<(String, String)>,
    pub peer: Option<std::net::SocketAddr>,
}

/// Adds one log entry; `served` says whether it counts for the key.
pub(crate) fn record(
    state: &State,
    origin: Origin<'_>,
    caller: Option<&Caller>,
    status: u16,
    facts: Facts,
    error_code: Option<String>,
    served: bool,
) {
    let body_bytes = facts.body_bytes;
    let entry = LogEntry {
        seq: origin.seq,
        method: origin.method.to_owned(),
        path: origin.path.to_owned(),
        key: caller.map(|c| c.secret.clone()),
        org: caller.map(|c| state.org(c.org).id.clone()),
        status,
        transport: origin.transport,
        model: facts.model,
        stream: facts.stream,
        input_tokens: facts.input_tokens,
        cached_tokens: facts.cached_tokens,
        previous_response_id: facts.previous_response_id,
        error_code,
        headers: origin.headers,
        body: facts.body,
        peer: origin.peer,
    };
    state.log.record(entry, body_bytes, served && caller.is_some());
}

/// The error a fault answers with; `None` for the faults that shape a stream instead.
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
        Fault::QuotesKey => ApiError::quotes_key(&caller.secret),
        Fault::CutAfterEvents(_)
        | Fault::SlowFirstByte(_)
        | Fault::SlowDeltas(_)
        | Fault::BinaryFrames
        | Fault::StreamErrorQuotesKey => return None,
    };
    Some(e)
}

/// Stream-shaping faults of one request. Their sleeps are real time, not the simulator's
/// clock: they model what the client's own timers see.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Shaping {
    pub first_byte: Option<Duration>,
    pub deltas: Option<Duration>,
    pub cut: Option<usize>,
    /// WebSocket events go out as binary frames, the first quoting the key (`Fault::BinaryFrames`).
    pub binary: bool,
    /// A stream's first event is followed by an error quoting the key (`Fault::StreamErrorQuotesKey`).
    pub leak: bool,
}

impl Shaping {
    pub(crate) fn from_fault(fault: Option<&Fault>) -> Self {
        match fault {
            Some(Fault::SlowFirstByte(d)) => Shaping { first_byte: Some(*d), ..Shaping::default() },
            Some(Fault::SlowDeltas(d)) => Shaping { deltas: Some(*d), ..Shaping::default() },
            Some(Fault::CutAfterEvents(n)) => Shaping { cut: Some(*n), ..Shaping::default() },
            Some(Fault::BinaryFrames) => Shaping { binary: true, ..Shaping::default() },
            Some(Fault::StreamErrorQuotesKey) => Shaping { leak: true, ..Shaping::default() },
            _ => Shaping::default(),
        }
    }
}

/// An error answer and whether it counts as served for the key.
pub(crate) struct Failure {
    pub err: ApiError,
    pub served: bool,
}

impl From<ApiError> for Failure {
    fn from(err: ApiError) -> Self {
        Failure { err, served: true }
    }
}

/// One piece of a streamed body.
pub(crate) type Chunk = Result<Bytes, io::Error>;

/// How long a cut body waits so that what was sent reaches the client before the abort.
pub(crate) const FLUSH_GRACE: Duration = Duration::from_millis(50);

pub(crate) fn receiver_stream(rx: mpsc::Receiver<Chunk>) -> impl futures::Stream<Item = Chunk> + Send + 'static {
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) })
}

/// The error that aborts a body mid-way.
pub(crate) fn cut_error() -> io::Error {
    io::Error::other("stream cut by an injected fault")
}

fn set_header(h: &mut HeaderMap, name: &str, value: &str) {
    if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(value)) {
        h.insert(n, v);
    }
}

/// One HTTP request in flight.
pub(crate) struct Ctx {
    pub state: Arc<State>,
    seq: u64,
    started: Instant,
    method: String,
    path: String,
    pub query: String,
    pub headers: Vec<(String, String)>,
    /// The address of the connection the request came on.
    pub peer: Option<std::net::SocketAddr>,
    request_id: String,
    accepts_gzip: bool,
    pub caller: Option<Caller>,
    pub facts: Facts,
    snapshot: Option<Snapshot>,
}

impl Ctx {
    /// Starts the exchange of a request that `caller` (if any) authenticated.
    pub(crate) fn new(state: Arc<State>, parts: &Parts, caller: Option<Caller>) -> Self {
        let accepts_gzip = parts
            .headers
            .get_all("accept-encoding")
            .iter()
            .any(|v| String::from_utf8_lossy(v.as_bytes()).contains("gzip"));
        Ctx {
            seq: state.log.next_seq(),
            started: state.clock.now(),
            state,
            method: parts.method.as_str().to_owned(),
            path: parts.uri.path().to_owned(),
            query: parts.uri.query().unwrap_or("").to_owned(),
            headers: loggable_headers(&parts.headers),
            peer: parts.extensions.get::<axum::extract::ConnectInfo<std::net::SocketAddr>>().map(|c| c.0),
            request_id: request_id(),
            accepts_gzip,
            caller,
            facts: Facts::default(),
            snapshot: None,
        }
    }

    fn current_snapshot(&self) -> Snapshot {
        if let Some(s) = self.snapshot {
            return s;
        }
        let key = self.caller.as_ref().map_or("", |c| c.secret.as_str());
        self.state.limiter.snapshot(key, self.state.clock.now())
    }

    /// Logs this request.
    pub(crate) fn log(&mut self, status: u16, error_code: Option<String>, served: bool) {
        let origin = Origin {
            seq: self.seq,
            method: &self.method,
            path: &self.path,
            transport: Transport::Http,
            headers: self.headers.clone(),
            peer: self.peer,
        };
        let facts = std::mem::take(&mut self.facts);
        record(&self.state, origin, self.caller.as_ref(), status, facts, error_code, served);
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
        let ms = self.state.clock.now().saturating_duration_since(self.started).as_millis().to_string();
        set_header(h, "openai-processing-ms", &ms);
        for (name, value) in snapshot.headers() {
            set_header(h, name, &value);
        }
        resp
    }

    /// The JSON bytes, gzipped when enabled and accepted; the flag says whether they are.
    fn encode(&self, value: &Value) -> (Vec<u8>, bool) {
        let bytes = value.to_string().into_bytes();
        if self.state.gzip_json && self.accepts_gzip {
            let mut enc = GzEncoder::new(Vec::new(), Compression::default());
            if enc.write_all(&bytes).is_ok() {
                if let Ok(z) = enc.finish() {
                    return (z, true);
                }
            }
        }
        (bytes, false)
    }

    fn json_response(
        &self,
        status: StatusCode,
        value: &Value,
        extra: &[(&'static str, String)],
        hide_org: bool,
        cut: bool,
    ) -> Response {
        let (bytes, gzip) = self.encode(value);
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
    pub(crate) fn fail(&mut self, failure: Failure) -> Response {
        let err = failure.err;
        self.log(err.status.as_u16(), Some(err.log_code()), failure.served);
        self.json_response(err.status, &err.body(), &err.headers, err.hide_org, false)
    }

    /// Logs and renders a 200 JSON body (cut in half by `CutAfterEvents`).
    pub(crate) fn ok_json(&mut self, value: &Value, shaping: Shaping) -> Response {
        self.log(200, None, true);
        self.json_response(StatusCode::OK, value, &[], false, shaping.cut.is_some())
    }

    /// Logs and renders a 200 event stream fed by `rx`.
    pub(crate) fn sse(&mut self, rx: mpsc::Receiver<Chunk>) -> Response {
        self.log(200, None, true);
        let mut resp = Response::new(Body::from_stream(receiver_stream(rx)));
        let h = resp.headers_mut();
        set_header(h, "content-type", "text/event-stream; charset=utf-8");
        set_header(h, "cache-control", "no-cache");
        self.decorate(resp, false)
    }

    /// Consumes one request and `tokens` estimated tokens from the caller's window.
    pub(crate) fn admit(&mut self, tokens: u64) -> Result<(), Failure> {
        let Some(caller) = &self.caller else {
            return Ok(());
        };
        match admit(&self.state, caller, self.facts.model.as_deref().unwrap_or("default"), tokens) {
            Ok(s) => {
                self.snapshot = Some(s);
                Ok(())
            }
            Err((err, s)) => {
                self.snapshot = Some(s);
                self.facts.input_tokens = tokens;
                Err(Failure { err, served: false })
            }
        }
    }
}

/// Admits one request of `caller` against its window now, or says why not (429) together
/// with the window the refusal's headers describe.
pub(crate) fn admit(
    state: &State,
    caller: &Caller,
    model: &str,
    tokens: u64,
) -> Result<Snapshot, (ApiError, Snapshot)> {
    state.limiter.admit(&caller.secret, tokens, state.clock.now()).map_err(|(r, snapshot)| {
        let org = &state.org(caller.org).id;
        let err = ApiError::rate_limited(r.dimension, model, org, r.limit, r.used, r.requested, r.wait);
        (err, snapshot)
    })
}
