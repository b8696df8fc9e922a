//! The HTTP transport: one `/v1/*` request through the pipeline, and its answer relayed back.
//!
//! Only what is particular to HTTP lives here: reading the body under the cap (and decoding it when it
//! came compressed, `encoding`), how an attempt is sent
//! and read (a success is held until its first chunk, or whole for a JSON answer that needs markers, so
//! a cut answer can still fail over), and how the answer goes back (streamed event by event, with
//! markers spliced in, the record finished when the stream ends).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, request, HeaderMap, Method, Response, StatusCode};
use axum::response::IntoResponse;
use bytes::{Bytes, BytesMut};
use futures::{FutureExt as _, StreamExt as _};

use crate::classify::Heard;
use crate::error::ApiError;
use crate::events::Wire;
use crate::facts::{Incoming, Operation};
use crate::gateway::Gateway;
use crate::limits::RequestLimits;
use crate::pipeline::record::End;
use crate::pipeline::{self, Admitted, Completion, Entry, Fallback, Reply, Settled, Trace, Transport};
use crate::pool::InFlight;
use crate::relay::{JsonTail, SseRewriter, Tagger, MAX_EVENT_BYTES};
use crate::spend::Usage;
use crate::tokens::ClientScope;
use crate::upstream::{self, Upstream, UpstreamError};

/// Largest upstream error body Keymux relays (error bodies are small JSON); a larger one is replaced
/// by a well-formed error that says so.
pub const MAX_ERROR_BODY: usize = 256 * 1024;

use crate::upstream::{Answer, BodyError, Chunks};

/// An accepted answer: held whole (a JSON answer to tag), or with its first chunk read (a stream).
pub struct Accepted {
    status: StatusCode,
    headers: HeaderMap,
    body: AcceptedBody,
}

enum AcceptedBody {
    Whole(Bytes),
    Stream(Chunks),
}

/// An error answer, read whole (bounded), to relay if nothing better comes.
pub struct ErrorAnswer {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl ErrorAnswer {
    fn into_response(self) -> Response<Body> {
        let mut out = Response::new(Body::from(self.body));
        *out.status_mut() = self.status;
        *out.headers_mut() = self.headers;
        out
    }
}

/// How one request reaches the upstream.
struct Http<'a> {
    gateway: &'a Gateway,
    upstream: &'a Upstream,
    method: Method,
    path_and_query: String,
    headers: HeaderMap,
    /// The body to send (cheap to clone for each attempt).
    body: Bytes,
    /// The answer will get markers, so a JSON answer is read whole before it is accepted.
    tagged: bool,
    clock: &'a crate::clock::Clock,
}

impl Transport for Http<'_> {
    type Accepted = Accepted;
    type Declined = ErrorAnswer;

    fn rescue(&mut self, body: Bytes) {
        self.body = body;
    }

    async fn attempt(&mut self, guard: &InFlight) -> Reply<Accepted, ErrorAnswer> {
        // A plan key's login refreshed first when its token is about to expire.
        let fresh = crate::chatgpt::fresh(self.gateway, guard.entry()).await;
        let entry = fresh.as_ref().unwrap_or(guard.entry());
        let sent = self
            .upstream
            .send(entry, self.method.clone(), &self.path_and_query, self.headers.clone(), self.body.clone())
            .await;
        let mut response = match sent {
            Ok(response) => response,
            Err(error) => return Reply::Failed(error),
        };
        let status = response.status();
        let heard = Heard::from_headers(status.as_u16(), response.headers(), self.clock);
        let mut headers = upstream::forward_response_headers(response.headers_mut());
        let base = guard.entry().label.as_str();
        if !status.is_success() {
            let body = read_error(response, self.upstream.idle_timeout()).await;
            // A provider may quote the key it was sent: the client never holds one, so it never sees one.
            let body = crate::secrets::mask_error_body(&body, guard.entry().secret.expose());
            upstream::mask_error_headers(&mut headers, guard.entry().secret.expose());
            let heard = heard.with_body(&body);
            return Reply::Declined(heard, ErrorAnswer { status, headers, body });
        }
        let is_json = content_type(&headers).contains("json");
        let body = if self.tagged && is_json {
            read_whole(response, self.upstream.idle_timeout(), base).await.map(AcceptedBody::Whole)
        } else {
            first_chunk(response, self.upstream.idle_timeout(), base).await.map(AcceptedBody::Stream)
        };
        match body {
            Ok(body) => Reply::Accepted(heard, Accepted { status, headers, body }),
            Err(error) => Reply::Failed(error),
        }
    }
}

/// Proxies one authenticated `/v1/*` request.
pub async fn forward(gateway: &Arc<Gateway>, parts: request::Parts, body: Body) -> Response<Body> {
    let operation = Operation::classify(&parts.method, parts.uri.path());
    let mut trace = Trace::new(gateway, gateway.next_seq(), operation, Wire::Http);
    match admit(gateway, &parts, body, operation, &mut trace).await {
        Ok(admitted) => attempt(gateway, &parts, admitted, trace).await,
        Err(error) => refuse(trace, error),
    }
}

/// Answers a request while routing is paused (503 with `retry-after`), and records it.
pub fn refuse_paused(gateway: &Arc<Gateway>, parts: &request::Parts) -> Response<Body> {
    let operation = Operation::classify(&parts.method, parts.uri.path());
    let trace = Trace::new(gateway, gateway.next_seq(), operation, Wire::Http);
    refuse(trace, ApiError::Paused)
}

/// Reads the body under the cap, decodes it if it came compressed, and admits the request.
async fn admit(
    gateway: &Gateway,
    parts: &request::Parts,
    body: Body,
    operation: Operation,
    trace: &mut Trace,
) -> Result<Admitted, ApiError> {
    if has_dot_segments(parts.uri.path()) {
        return Err(ApiError::BadPath);
    }
    let deadline = parts.extensions.get::<RequestLimits>().copied().unwrap_or_default().body_read_timeout;
    let raw = crate::limits::read_body(&parts.headers, body, gateway.max_body_bytes(), deadline).await?;
    // Everything below reads the body, and what goes upstream is what was read: decoded.
    let raw = crate::encoding::decoded(&parts.headers, raw, gateway.max_body_bytes()).await?;
    let scope = parts.extensions.get::<ClientScope>().cloned().unwrap_or_default();
    trace.client(&scope);
    let incoming = Incoming {
        seq: trace.seq(),
        operation,
        scope: &scope.tag,
        pool: &scope.pool,
        path: parts.uri.path(),
        headers: &parts.headers,
        body: &raw,
    };
    pipeline::admit(gateway, &incoming, Entry::Request, trace)
}

/// Walks the candidates and relays what came of it.
async fn attempt(
    gateway: &Arc<Gateway>,
    parts: &request::Parts,
    admitted: Admitted,
    mut trace: Trace,
) -> Response<Body> {
    let operation = admitted.facts.operation;
    let mut path_and_query = admitted.path.strip_prefix("/v1").unwrap_or("/").to_owned();
    if let Some(query) = parts.uri.query() {
        path_and_query.push('?');
        path_and_query.push_str(query);
    }
    let mut http = Http {
        gateway,
        upstream: gateway.upstream(),
        method: parts.method.clone(),
        path_and_query,
        headers: upstream::forward_request_headers(&parts.headers),
        body: admitted.body.clone(),
        tagged: operation.carries_org_state(),
        clock: gateway.clock(),
    };
    match pipeline::attempt_all(gateway, &admitted, &mut http, &mut trace).await {
        Settled::Served { key, guard, accepted } => {
            let completion = pipeline::completion(&admitted, &key);
            let tagger = pipeline::tagger_for(gateway, operation, &guard);
            relay(gateway, accepted, guard, tagger, completion, trace)
        }
        Settled::Relayed { key, declined } => {
            let status = declined.status.as_u16();
            trace.finish(End { served_by: Some(key), status, error: None, usage: None });
            declined.into_response()
        }
        Settled::Failed(Fallback::Upstream(declined)) => {
            trace.finish(End { status: declined.status.as_u16(), ..End::default() });
            declined.into_response()
        }
        Settled::Failed(Fallback::Keymux(error)) => refuse(trace, error),
    }
}

/// Answers with Keymux's own error, and records it.
fn refuse(trace: Trace, error: ApiError) -> Response<Body> {
    trace.finish(End { status: error.status().as_u16(), error: Some(error.label()), ..End::default() });
    error.into_response()
}

/// Relays an accepted answer: whole (tagged) at once, or as a stream whose record is finished when it
/// ends.
fn relay(
    gateway: &Arc<Gateway>,
    accepted: Accepted,
    guard: InFlight,
    tagger: Option<Tagger>,
    completion: Completion,
    mut trace: Trace,
) -> Response<Body> {
    let Accepted { status, headers, body } = accepted;
    trace.serving(&completion.key);
    trace.answered();
    let body = match body {
        AcceptedBody::Whole(bytes) => {
            // A complete 2xx JSON answer is a successful terminal state.
            let usage = Usage::from_body(&bytes);
            pipeline::completed(gateway, &completion, usage);
            let tagged = tagger.and_then(|t| t.tag_json(&bytes)).map_or(bytes, Bytes::from);
            drop(guard);
            trace.finish(End { served_by: Some(completion.key), status: status.as_u16(), error: None, usage });
            Body::from(tagged)
        }
        AcceptedBody::Stream(chunks) => {
            let mode = match tagger {
                Some(t) if content_type(&headers).starts_with("text/event-stream") => {
                    Mode::Sse(Box::new(SseRewriter::new(t)))
                }
                None if content_type(&headers).contains("json") => Mode::Json(Box::default()),
                _ => Mode::Pass,
            };
            let ended = Arc::new(AtomicBool::new(false));
            let state = RelayState {
                chunks,
                idle: gateway.upstream().idle_timeout(),
                mode,
                gateway: gateway.clone(),
                completion,
                status: status.as_u16(),
                trace: Some(trace),
                usage: None,
                over: false,
                idle_timer: Box::pin(tokio::time::sleep(gateway.upstream().idle_timeout())),
                held: None,
                ended: ended.clone(),
                started: false,
                _guard: guard,
            };
            let pieces = futures::stream::unfold(state, |mut state| async move {
                let next = state.next().await?;
                Some((next, state))
            });
            Body::new(Relayed { pieces: Box::pin(pieces), ended })
        }
    };
    let mut out = Response::new(body);
    *out.status_mut() = status;
    *out.headers_mut() = headers;
    out
}

enum Mode {
    Pass,
    /// A JSON answer passed through as it arrives; its tail is kept for the usage it ends with.
    Json(Box<JsonTail>),
    Sse(Box<SseRewriter>),
}

/// A streamed answer on its way to the client. The key stays in flight until the stream ends or the
/// client goes away (which drops this, the upstream request with it, and publishes the record as
/// cancelled).
struct RelayState {
    // Dropped first: the key's in-flight count falls before the record is published.
    _guard: InFlight,
    chunks: Chunks,
    idle: Duration,
    mode: Mode,
    gateway: Arc<Gateway>,
    completion: Completion,
    status: u16,
    /// Finished once, when the stream ends (successfully or not).
    trace: Option<Trace>,
    usage: Option<Usage>,
    /// The stream has ended or broken: nothing more is read.
    over: bool,
    /// The idle timer, moved on at every chunk rather than made anew (one timer per stream).
    idle_timer: std::pin::Pin<Box<tokio::time::Sleep>>,
    /// The end (or break) found while gathering chunks, for the call after the piece gathered.
    held: Option<Option<Result<Bytes, std::io::Error>>>,
    /// Set when the provider's stream ended whole: the piece handed on then is the last.
    ended: Arc<AtomicBool>,
    /// A piece has been handed on (the first is never held back to gather more).
    started: bool,
}

/// A relayed stream as the client's answer body. It says it has ended as soon as its last piece is
/// out, so the end of the chunked answer goes in the same write as the last events, not one of its own.
struct Relayed {
    pieces: std::pin::Pin<Box<dyn futures::Stream<Item = Result<Bytes, std::io::Error>> + Send>>,
    ended: Arc<AtomicBool>,
}

impl hyper::body::Body for Relayed {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, std::io::Error>>> {
        self.pieces.poll_next_unpin(cx).map(|piece| piece.map(|piece| piece.map(hyper::body::Frame::data)))
    }

    fn is_end_stream(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }
}

/// Most bytes gathered into one piece for the client before it is handed on.
const GATHER_LIMIT: usize = 64 * 1024;

/// How many times the relay gives way for the provider's next chunk to come through (`arrived`): two
/// turns are what a chunk read together with the one before takes through reqwest and hyper.
const GATHER_TURNS: usize = 2;

/// One item of the provider's stream, settled (`RelayState::settle`).
enum Item {
    Piece(Bytes),
    Over(Option<Result<Bytes, std::io::Error>>),
}

/// The stream's next item if it has already arrived. The provider's connection hands its chunks on
/// one at a time, each once the relay took the one before, through a few tasks' turns: the relay gives
/// way up to `GATHER_TURNS` times for a chunk already read to come through, and never waits for the
/// network.
async fn arrived<S: futures::Stream + Unpin>(chunks: &mut S) -> Option<Option<S::Item>> {
    for turn in 0..=GATHER_TURNS {
        if let Some(next) = chunks.next().now_or_never() {
            return Some(next);
        }
        if turn < GATHER_TURNS {
            tokio::task::yield_now().await;
        }
    }
    None
}

/// Pieces gathered into one (a write to the client, or a whole answer): the first kept as it came, the
/// later ones copied after it once each (never the whole gathered run again for every chunk).
#[derive(Default)]
struct Gathered {
    first: Bytes,
    more: Option<BytesMut>,
}

impl Gathered {
    fn push(&mut self, piece: Bytes) {
        if piece.is_empty() {
            return;
        }
        if self.first.is_empty() {
            self.first = piece;
            return;
        }
        let first = &self.first;
        let more = self.more.get_or_insert_with(|| {
            let mut more = BytesMut::with_capacity(first.len() + piece.len());
            more.extend_from_slice(first);
            more
        });
        more.extend_from_slice(&piece);
    }

    fn len(&self) -> usize {
        self.more.as_ref().map_or(self.first.len(), BytesMut::len)
    }

    fn into_bytes(self) -> Bytes {
        self.more.map_or(self.first, BytesMut::freeze)
    }
}

impl RelayState {
    /// The next piece for the client: `None` at the end, an error to abort the response.
    ///
    /// Everything that has already arrived goes out as one piece: one read from the provider often
    /// holds several chunks (events written together), and each piece handed on is a write to the
    /// client, so gathering them saves a system call and a wake-up of the client per chunk without
    /// waiting for anything. An end or a break found while gathering is held for the next call, after
    /// what came before it.
    async fn next(&mut self) -> Option<Result<Bytes, std::io::Error>> {
        if let Some(held) = self.held.take() {
            return held;
        }
        if self.over {
            return None;
        }
        loop {
            self.idle_timer.as_mut().reset(crate::clock::timer_deadline(self.idle));
            let next = tokio::select! {
                biased;
                next = self.chunks.next() => next,
                () = self.idle_timer.as_mut() => return self.broke("upstream_idle", "upstream stream went idle"),
            };
            let mut out = Gathered::default();
            match self.settle(next) {
                Item::Piece(piece) => out.push(piece),
                Item::Over(end) => return end,
            }
            // The first piece goes at once: the answer's head waits in the same write for it, and giving
            // way now would send the head on its own.
            let gather = std::mem::replace(&mut self.started, true);
            while gather && out.len() < GATHER_LIMIT {
                let Some(next) = arrived(&mut self.chunks).await else { break };
                match self.settle(next) {
                    Item::Piece(more) => out.push(more),
                    Item::Over(end) => {
                        match end {
                            Some(Ok(tail)) => out.push(tail),
                            end => self.held = Some(end),
                        }
                        break;
                    }
                }
            }
            if out.len() > 0 {
                return Some(Ok(out.into_bytes()));
            }
            if let Some(held) = self.held.take() {
                return held;
            }
            if self.over {
                return None;
            }
        }
    }

    /// What one item of the provider's stream comes to: a piece for the client (maybe empty), or the
    /// end of the stream (its last piece, or the error it broke with).
    fn settle(&mut self, next: Option<Result<Bytes, BodyError>>) -> Item {
        let bytes = match next {
            Some(Err(e)) => return Item::Over(self.broke("upstream_cut", &format!("upstream stream failed: {e}"))),
            Some(Ok(bytes)) => bytes,
            None => return Item::Over(self.ended()),
        };
        let rw = match &mut self.mode {
            Mode::Sse(rw) => rw,
            Mode::Json(tail) => {
                tail.push(&bytes);
                return Item::Piece(bytes);
            }
            Mode::Pass => return Item::Piece(bytes),
        };
        let pushed = rw.push(&bytes);
        let ending = rw.end();
        if ending.completed {
            self.usage = ending.usage;
            pipeline::completed(&self.gateway, &self.completion, ending.usage);
            // Learn once: a stream has one terminal event.
            self.completion.signal = None;
        }
        match pushed {
            Ok(out) => Item::Piece(out),
            Err(e) => Item::Over(self.broke("event_too_large", &e.to_string())),
        }
    }

    /// The upstream stream ended: flush what is left and finish the record.
    fn ended(&mut self) -> Option<Result<Bytes, std::io::Error>> {
        self.over = true;
        self.ended.store(true, Ordering::Release);
        let tail = match &mut self.mode {
            Mode::Sse(rw) => rw.finish(),
            Mode::Json(tail) => {
                self.usage = tail.usage();
                pipeline::completed(&self.gateway, &self.completion, self.usage);
                Bytes::new()
            }
            Mode::Pass => Bytes::new(),
        };
        self.mode = Mode::Pass;
        if let Some(trace) = self.trace.take() {
            let end = End {
                served_by: Some(self.completion.key.clone()),
                status: self.status,
                error: None,
                usage: self.usage,
            };
            trace.finish(end);
        }
        (!tail.is_empty()).then_some(Ok(tail))
    }

    /// The stream broke after its start: nothing can be retried now, so the client's stream is aborted
    /// and the record says why.
    fn broke(&mut self, label: &'static str, detail: &str) -> Option<Result<Bytes, std::io::Error>> {
        self.over = true;
        let trace = self.trace.take()?;
        let end =
            End { served_by: Some(self.completion.key.clone()), status: self.status, error: Some(label), usage: None };
        trace.finish(end);
        Some(Err(std::io::Error::other(detail.to_owned())))
    }
}

/// Whether a path has `.` or `..` segments, plain or percent-encoded. URL parsing would resolve them,
/// and a key's credentials could then reach a path outside its base URL.
pub fn has_dot_segments(path: &str) -> bool {
    path.split('/').any(|segment| is_dot_segment(segment.as_bytes()))
}

/// Whether a segment is `.` or `..`, each dot plain or as `%2e`/`%2E` (read in place: every request's
/// path goes through this).
fn is_dot_segment(mut segment: &[u8]) -> bool {
    let mut dots = 0;
    while !segment.is_empty() {
        segment = match segment {
            [b'.', rest @ ..] | [b'%', b'2', b'e' | b'E', rest @ ..] => rest,
            _ => return false,
        };
        dots += 1;
    }
    matches!(dots, 1 | 2)
}

/// Reads a small error body. One over `MAX_ERROR_BODY` is replaced by a well-formed error that says
/// so, so the client never gets JSON cut in half.
async fn read_error(response: Answer, idle: Duration) -> Bytes {
    let status = response.status().as_u16();
    let mut bytes = BytesMut::new();
    let mut chunks = response.chunks();
    while let Ok(Some(Ok(chunk))) = tokio::time::timeout(idle, chunks.next()).await {
        bytes.extend_from_slice(&chunk);
        if bytes.len() > MAX_ERROR_BODY {
            let error = ApiError::UpstreamAnswerTooLarge { status, limit: MAX_ERROR_BODY };
            return Bytes::from(error.to_json().to_string());
        }
    }
    bytes.freeze()
}

/// Reads a JSON answer whole, so it can be tagged and, if it is cut, another key tried.
async fn read_whole(response: Answer, idle: Duration, key: &str) -> Result<Bytes, UpstreamError> {
    let cut = |detail: String| UpstreamError::Cut { base: format!("key '{key}'"), detail };
    // An answer that arrives in one piece (most do) is kept as it came, not copied.
    let mut bytes = Gathered::default();
    let mut chunks = response.chunks();
    loop {
        match tokio::time::timeout(idle, chunks.next()).await {
            Err(_) => return Err(cut("the answer went idle before its end".into())),
            Ok(Some(Err(e))) => return Err(cut(format!("the answer broke off: {e}"))),
            Ok(Some(Ok(chunk))) => bytes.push(chunk),
            Ok(None) => return Ok(bytes.into_bytes()),
        }
        if bytes.len() > MAX_EVENT_BYTES {
            return Err(cut(format!("the answer is larger than {MAX_EVENT_BYTES} bytes")));
        }
    }
}

/// Reads a streamed answer's first chunk, so a stream cut before its first byte can still fail over.
/// An answer that is empty by design (204, `content-length: 0`) has none to wait for.
async fn first_chunk(response: Answer, idle: Duration, key: &str) -> Result<Chunks, UpstreamError> {
    let empty = response.status() == StatusCode::NO_CONTENT
        || response.status() == StatusCode::RESET_CONTENT
        || response.content_length() == Some(0);
    let mut chunks = response.chunks();
    if empty {
        return Ok(chunks);
    }
    match tokio::time::timeout(idle, chunks.next()).await {
        Ok(Some(Ok(first))) => Ok(crate::upstream::put_back(first, chunks)),
        Ok(None) | Ok(Some(Err(_))) | Err(_) => Err(UpstreamError::Cut {
            base: format!("key '{key}'"),
            detail: "the answer ended before its first byte".into(),
        }),
    }
}

fn content_type(headers: &HeaderMap) -> String {
    headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gathered_pieces_come_out_in_order_as_one() {
        let mut out = Gathered::default();
        for piece in ["", "a", "", "bc", "d"] {
            out.push(Bytes::from_static(piece.as_bytes()));
        }
        assert_eq!(out.len(), 4);
        assert_eq!(out.into_bytes(), Bytes::from_static(b"abcd"));
        let mut one = Gathered::default();
        one.push(Bytes::from_static(b"only"));
        assert_eq!(one.into_bytes(), Bytes::from_static(b"only"), "a single piece goes out as it came");
    }

    /// A chunk that the provider's side hands on within the turns given is gathered; one that is
    /// not there yet is not waited for.
    #[tokio::test(flavor = "current_thread")]
    async fn chunks_already_read_are_gathered_and_nothing_is_waited_for() {
        let (tx, rx) = futures::channel::mpsc::unbounded::<u32>();
        let mut rx = rx;
        // Hands its item on after `GATHER_TURNS - 1` turns of its own, as hyper's connection does.
        let handed = tokio::spawn(async move {
            for _ in 1..GATHER_TURNS {
                tokio::task::yield_now().await;
            }
            tx.unbounded_send(7).expect("the receiver is open");
            tx
        });
        assert_eq!(arrived(&mut rx).await, Some(Some(7)), "the chunk handed on within the turns is gathered");
        let _tx = handed.await.expect("the handing task ends");
        assert_eq!(arrived(&mut rx).await, None, "nothing more has arrived: the relay goes on without waiting");
    }

    #[test]
    fn dot_segments_are_found_however_spelled() {
        for bad in [
            "/v1/x/../other",
            "/v1/x/%2e%2e/%2e%2e/other/collect",
            "/v1/./models",
            "/v1/%2E%2e/x",
            "/v1/..",
            "/%2e/x",
            "/v1/.%2E",
        ] {
            assert!(has_dot_segments(bad), "{bad}");
        }
        for ok in [
            "/v1/responses",
            "/v1/files/file-1.jsonl",
            "/v1/x..y/z",
            "/v1/.well",
            "/v1/...",
            "/v1/%2e%2",
            "/v1//x",
            "/v1/%2f",
        ] {
            assert!(!has_dot_segments(ok), "{ok}");
        }
    }
}
