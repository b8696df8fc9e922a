//! The fake provider: a raw hyper HTTP/1 server on its own thread and single-threaded runtime, so
//! that its CPU time can be read apart from the load generator's (`/proc/self/task/<tid>/stat`). It
//! answers canned bytes and decides "streamed or not" by a byte search, never by parsing.

use std::convert::Infallible;
use std::future::Future as _;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::{SinkExt as _, StreamExt as _};
use http_body_util::BodyExt as _;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::time::{Duration, Instant, Sleep};
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use crate::canned::{self, Canned};

/// A running fake upstream.
pub struct Upstream {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its thread, for reading that thread's CPU time.
    pub tid: i32,
    /// How many `GET /v1/models` it answered (Keymux probes each key once at start).
    pub models_seen: Arc<AtomicU64>,
}

/// Starts the upstream on its own thread; it runs until the process exits.
pub fn start(canned: &'static Canned) -> Result<Upstream, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("fake upstream cannot bind: {e}"))?;
    listener.set_nonblocking(true).map_err(|e| format!("fake upstream socket: {e}"))?;
    let addr = listener.local_addr().map_err(|e| format!("fake upstream address: {e}"))?;
    let models_seen = Arc::new(AtomicU64::new(0));
    let seen = models_seen.clone();
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("fake-upstream".into())
        .spawn(move || {
            let _ = tid_tx.send(rustix::thread::gettid().as_raw_nonzero().get());
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
            match runtime {
                Ok(runtime) => runtime.block_on(accept_loop(listener, canned, seen)),
                Err(e) => eprintln!("fake upstream: cannot start its runtime: {e}"),
            }
        })
        .map_err(|e| format!("cannot start the fake upstream thread: {e}"))?;
    let tid = tid_rx.recv().map_err(|_| "the fake upstream thread died at start".to_owned())?;
    Ok(Upstream { addr, tid, models_seen })
}

async fn accept_loop(listener: std::net::TcpListener, canned: &'static Canned, seen: Arc<AtomicU64>) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(e) => return eprintln!("fake upstream: {e}"),
    };
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors and the like: say so, then keep serving.
                eprintln!("fake upstream: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let seen = seen.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| answer(req, canned, seen.clone()));
            // Connection errors are the client's business (e.g. a worker stopping mid-answer).
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades()
                .await;
        });
    }
}

async fn answer(
    mut req: Request<Incoming>,
    canned: &'static Canned,
    seen: Arc<AtomicU64>,
) -> Result<Response<Answer>, Infallible> {
    let response = match (req.method(), req.uri().path()) {
        (&Method::GET, "/v1/models") => {
            seen.fetch_add(1, Ordering::Relaxed);
            json(canned.models.clone())
        }
        (&Method::GET, "/v1/responses") => websocket(&mut req, canned),
        (&Method::POST, "/v1/responses") => {
            let Ok(body) = req.into_body().collect().await.map(|b| b.to_bytes()) else {
                return Ok(plain(StatusCode::BAD_REQUEST));
            };
            if memchr::memmem::find(&body, b"\"stream\":true").is_some() {
                sse(canned)
            } else {
                json(canned.json.clone())
            }
        }
        (&Method::POST, "/v1/chat/completions") => {
            // Read the body so that the connection stays usable for the next request.
            if req.into_body().collect().await.is_err() {
                return Ok(plain(StatusCode::BAD_REQUEST));
            }
            json(canned.chat.clone())
        }
        _ => plain(StatusCode::NOT_FOUND),
    };
    Ok(response)
}

/// Headers every provider answer carries: the organization (Keymux learns it) and rate-limit windows
/// far from exhaustion (Keymux reads them on every answer).
fn provider_headers(content_type: &'static str) -> http::response::Builder {
    Response::builder()
        .header(header::CONTENT_TYPE, content_type)
        .header("openai-organization", canned::org())
        .header("x-ratelimit-limit-requests", "1000000")
        .header("x-ratelimit-remaining-requests", "999999")
        .header("x-ratelimit-reset-requests", "6ms")
        .header("x-ratelimit-limit-tokens", "1000000000")
        .header("x-ratelimit-remaining-tokens", "999990000")
        .header("x-ratelimit-reset-tokens", "1ms")
}

fn json(body: Bytes) -> Response<Answer> {
    provider_headers("application/json")
        .body(Answer::Full(Some(body)))
        .unwrap_or_else(|_| plain(StatusCode::INTERNAL_SERVER_ERROR))
}

fn sse(canned: &'static Canned) -> Response<Answer> {
    let paced = Paced { batches: &canned.sse_batches, next: 0, start: crate::now(), sleep: None };
    provider_headers("text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Answer::Paced(paced))
        .unwrap_or_else(|_| plain(StatusCode::INTERNAL_SERVER_ERROR))
}

fn plain(status: StatusCode) -> Response<Answer> {
    let mut response = Response::new(Answer::Full(None));
    *response.status_mut() = status;
    response
}

/// Accepts a Responses WebSocket (hand-checked handshake over hyper's upgrade), then serves turns.
fn websocket(req: &mut Request<Incoming>, canned: &'static Canned) -> Response<Answer> {
    let upgrade = req.headers().get(header::UPGRADE).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"websocket"));
    let Some(key) = req.headers().get(header::SEC_WEBSOCKET_KEY).filter(|_| upgrade) else {
        return plain(StatusCode::BAD_REQUEST);
    };
    let Ok(accept) = HeaderValue::from_str(&derive_accept_key(key.as_bytes())) else {
        return plain(StatusCode::BAD_REQUEST);
    };
    let on_upgrade = hyper::upgrade::on(req);
    tokio::spawn(async move {
        if let Ok(upgraded) = on_upgrade.await {
            let socket = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
            serve_turns(socket, canned).await;
        }
    });
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(header::CONNECTION, "upgrade")
        .header(header::UPGRADE, "websocket")
        .header(header::SEC_WEBSOCKET_ACCEPT, accept)
        .header("openai-organization", canned::org())
        .body(Answer::Full(None))
        .unwrap_or_else(|_| plain(StatusCode::INTERNAL_SERVER_ERROR))
}

/// Answers every `response.create` frame with the 43 events, unpaced, flushed once per turn.
async fn serve_turns<S>(mut socket: WebSocketStream<S>, canned: &'static Canned)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    while let Some(Ok(message)) = socket.next().await {
        match message {
            Message::Text(text) if memchr::memmem::find(text.as_bytes(), b"response.create").is_some() => {
                for frame in &canned.ws_frames {
                    if socket.feed(Message::Text(frame.clone())).await.is_err() {
                        return;
                    }
                }
                if socket.flush().await.is_err() {
                    return;
                }
            }
            Message::Close(_) => return,
            // Pings are answered by tungstenite itself; nothing else is expected.
            _ => {}
        }
    }
}

/// An answer body: canned bytes at once, or SSE batches released one per millisecond. A hand-written
/// body rather than a channel and a task, so that pacing costs one timer per answer and no allocation
/// per event.
pub enum Answer {
    /// The whole body (or none).
    Full(Option<Bytes>),
    /// The streamed answer.
    Paced(Paced),
}

/// SSE batch `n` is due `n` milliseconds after the answer started: deadlines, not sleeps between
/// batches, so that timer rounding does not add up over the 13 ms.
pub struct Paced {
    batches: &'static [Bytes],
    next: usize,
    start: Instant,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl Body for Answer {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            Answer::Full(body) => Poll::Ready(body.take().map(|b| Ok(Frame::data(b)))),
            Answer::Paced(paced) => paced.poll_batch(cx).map(|b| b.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Answer::Full(body) => body.is_none(),
            Answer::Paced(paced) => paced.next >= paced.batches.len(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            // An exact size lets hyper send `content-length` instead of chunks, as the API does for JSON.
            Answer::Full(body) => SizeHint::with_exact(body.as_ref().map_or(0, |b| b.len() as u64)),
            Answer::Paced(_) => SizeHint::default(),
        }
    }
}

impl Paced {
    fn poll_batch(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        let Some(batch) = self.batches.get(self.next) else {
            return Poll::Ready(None);
        };
        let due = self.start + Duration::from_millis(self.next as u64);
        if crate::now() < due {
            let sleep = self.sleep.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
            if sleep.deadline() != due {
                sleep.as_mut().reset(due);
            }
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
        self.next += 1;
        Poll::Ready(Some(batch.clone()))
    }
}
