//! The load generator: `c` workers in a closed loop, each on its own keep-alive connection (a raw
//! hyper HTTP/1 client connection, or a WebSocket), recording per-request latency while the window
//! is open. Every answer is checked for its last event or field, so that a broken answer counts as
//! an error rather than as a fast request.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use futures::{SinkExt as _, StreamExt as _};
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{self, HeaderValue};
use hyper::Request;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};
use tokio_tungstenite::WebSocketStream;

use crate::args::Mode;
use crate::canned;

/// Workers send but do not record.
pub const WARMUP: u8 = 0;
/// Workers record every request that completes.
pub const MEASURE: u8 = 1;
/// Workers finish the request in flight and return.
pub const STOP: u8 = 2;

/// After a failure, wait this long before retrying, so that a dead target does not turn the
/// generator into a busy loop that starves the fake upstream on the same core.
const BACKOFF: Duration = Duration::from_millis(20);

/// Where the workers connect, and the client token they present.
#[derive(Clone)]
pub struct Endpoint {
    /// The target's address.
    pub addr: SocketAddr,
    /// `Host` (nginx refuses HTTP/1.1 requests without one).
    pub host: HeaderValue,
    /// `Authorization: Bearer <client token>`, sent to every target so the generator's work is the same.
    pub auth: HeaderValue,
}

/// What one worker (or, merged, all workers) saw.
#[derive(Default)]
pub struct Tally {
    /// Latency of each request completed in the window: the whole answer, or a WebSocket turn.
    pub latency_us: Vec<u32>,
    /// Time to the first body byte of each streamed answer completed in the window.
    pub ttfb_us: Vec<u32>,
    /// Failed requests, in the warm-up or the window.
    pub errors: u64,
    /// The first failure, to show what went wrong.
    pub first_error: Option<String>,
    /// Keep-alive connections the target closed between requests (not failures).
    pub reconnects: u64,
}

/// Requests completed by every worker since the start, in any phase (the soak's throughput).
pub static COMPLETED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl Tally {
    fn ok(&mut self, phase: &AtomicU8, started: Instant, first_byte: Option<Instant>) {
        COMPLETED.fetch_add(1, Ordering::Relaxed);
        if phase.load(Ordering::Relaxed) != MEASURE {
            return;
        }
        let micros = |at: Instant| u32::try_from(at.duration_since(started).as_micros()).unwrap_or(u32::MAX);
        self.latency_us.push(micros(crate::now()));
        if let Some(at) = first_byte {
            self.ttfb_us.push(micros(at));
        }
    }

    fn error(&mut self, what: String) {
        self.errors += 1;
        self.first_error.get_or_insert(what);
    }

    /// A tally of one failure (a worker that crashed or hung).
    pub fn failed(what: String) -> Self {
        let mut tally = Self::default();
        tally.error(what);
        tally
    }

    /// Adds another worker's figures.
    pub fn merge(&mut self, other: Tally) {
        self.latency_us.extend(other.latency_us);
        self.ttfb_us.extend(other.ttfb_us);
        self.errors += other.errors;
        self.reconnects += other.reconnects;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }
}

/// Starts `conc` workers; they run until `phase` is `STOP`.
pub fn spawn(endpoint: &Endpoint, mode: Mode, conc: usize, phase: &Arc<AtomicU8>) -> Vec<JoinHandle<Tally>> {
    (0..conc)
        .map(|worker| {
            let body = canned::prompt(mode, &format!("bench-{mode}-c{conc}-w{worker}"));
            let (endpoint, phase) = (endpoint.clone(), phase.clone());
            match mode {
                Mode::Ws => tokio::spawn(ws_worker(endpoint, body, phase)),
                Mode::Json | Mode::Sse | Mode::Chat => {
                    tokio::spawn(http_worker(endpoint, mode, Bodies::Same(body), phase))
                }
            }
        })
        .collect()
}

/// Starts `conc` HTTP workers whose every request is a new session, out of `sessions` in turn, so
/// that the gateway's session tables fill past their bounds (the soak).
pub fn spawn_rotating(
    endpoint: &Endpoint,
    mode: Mode,
    conc: usize,
    sessions: u64,
    phase: &Arc<AtomicU8>,
) -> Vec<JoinHandle<Tally>> {
    (0..conc)
        .map(|worker| {
            let bodies = Bodies::Rotating { mode, worker: worker as u64, conc: conc as u64, sessions, next: 0 };
            tokio::spawn(http_worker(endpoint.clone(), mode, bodies, phase.clone()))
        })
        .collect()
}

/// What a worker sends: one body every time, or a new session's each time.
enum Bodies {
    Same(Bytes),
    Rotating { mode: Mode, worker: u64, conc: u64, sessions: u64, next: u64 },
}

impl Bodies {
    fn next(&mut self) -> Bytes {
        match self {
            Self::Same(body) => body.clone(),
            Self::Rotating { mode, worker, conc, sessions, next } => {
                let session = (*next * *conc + *worker) % *sessions;
                *next += 1;
                canned::prompt(*mode, &format!("soak-{mode}-{session}"))
            }
        }
    }
}

type Sender = SendRequest<Full<Bytes>>;

async fn http_worker(endpoint: Endpoint, mode: Mode, mut bodies: Bodies, phase: Arc<AtomicU8>) -> Tally {
    let mut tally = Tally::default();
    let mut connection: Option<Sender> = None;
    while phase.load(Ordering::Relaxed) != STOP {
        let sender = match &mut connection {
            Some(sender) => sender,
            None => match connect_http(endpoint.addr).await {
                Ok(sender) => connection.insert(sender),
                Err(e) => {
                    tally.error(e);
                    tokio::time::sleep(BACKOFF).await;
                    continue;
                }
            },
        };
        // A target may close a keep-alive connection between requests (nginx does after
        // `keepalive_requests`). Nothing was sent on it yet, so like any client, open another.
        if sender.ready().await.is_err() {
            tally.reconnects += 1;
            connection = None;
            continue;
        }
        let started = crate::now();
        match exchange(sender, &endpoint, mode, bodies.next()).await {
            Ok(first_byte) => tally.ok(&phase, started, first_byte.filter(|_| mode == Mode::Sse)),
            Err(e) => {
                tally.error(e);
                // The connection may be in any state now: start over on a fresh one.
                connection = None;
                tokio::time::sleep(BACKOFF).await;
            }
        }
    }
    tally
}

async fn connect_http(addr: SocketAddr) -> Result<Sender, String> {
    let tcp = TcpStream::connect(addr).await.map_err(|e| format!("connect {addr}: {e}"))?;
    tcp.set_nodelay(true).map_err(|e| format!("nodelay: {e}"))?;
    let (sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await.map_err(|e| format!("handshake: {e}"))?;
    // The connection task ends with the socket; its errors reach the sender.
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

/// Sends one request on a ready connection and reads the whole answer. Returns when the first body
/// byte arrived.
async fn exchange(
    sender: &mut Sender,
    endpoint: &Endpoint,
    mode: Mode,
    body: Bytes,
) -> Result<Option<Instant>, String> {
    let (path, accept, needle): (_, _, &'static [u8]) = match mode {
        Mode::Sse => ("/v1/responses", "text/event-stream", b"response.completed"),
        Mode::Chat => ("/v1/chat/completions", "application/json", b"\"choices\""),
        Mode::Json | Mode::Ws => ("/v1/responses", "application/json", b"\"usage\""),
    };
    let request = Request::post(path)
        .header(header::HOST, endpoint.host.clone())
        .header(header::AUTHORIZATION, endpoint.auth.clone())
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, accept)
        .body(Full::new(body))
        .map_err(|e| format!("request: {e}"))?;
    let response = sender.send_request(request).await.map_err(|e| format!("send: {e}"))?;
    let status = response.status();
    let mut answer = response.into_body();
    let mut check = Check::new(needle);
    let mut first_byte = None;
    while let Some(frame) = answer.frame().await {
        let frame = frame.map_err(|e| format!("answer body: {e}"))?;
        if let Some(data) = frame.data_ref().filter(|d| !d.is_empty()) {
            first_byte.get_or_insert_with(crate::now);
            check.feed(data);
        }
    }
    if !status.is_success() {
        return Err(format!("HTTP {status}: {}", check.head()));
    }
    if !check.found {
        return Err(format!("answer without {}: {}", String::from_utf8_lossy(needle), check.head()));
    }
    Ok(first_byte)
}

/// Looks for a needle across the chunks of an answer (it may straddle two), and keeps the answer's
/// first bytes for the error message.
struct Check {
    needle: &'static [u8],
    found: bool,
    tail: Vec<u8>,
    head: Vec<u8>,
}

impl Check {
    const HEAD: usize = 300;

    fn new(needle: &'static [u8]) -> Self {
        Self { needle, found: false, tail: Vec::with_capacity(2 * needle.len()), head: Vec::new() }
    }

    fn feed(&mut self, data: &[u8]) {
        if self.head.len() < Self::HEAD {
            self.head.extend_from_slice(&data[..data.len().min(Self::HEAD - self.head.len())]);
        }
        if self.found {
            return;
        }
        let keep = self.needle.len() - 1;
        // The end of the previous chunk joined to the start of this one covers a straddling needle.
        self.tail.extend_from_slice(&data[..data.len().min(keep)]);
        if memchr::memmem::find(&self.tail, self.needle).is_some() || memchr::memmem::find(data, self.needle).is_some()
        {
            self.found = true;
            return;
        }
        if data.len() >= keep {
            self.tail.clear();
            self.tail.extend_from_slice(&data[data.len() - keep..]);
        } else {
            let excess = self.tail.len().saturating_sub(keep);
            self.tail.drain(..excess);
        }
    }

    fn head(&self) -> String {
        String::from_utf8_lossy(&self.head).into_owned()
    }
}

type Socket = WebSocketStream<TcpStream>;

async fn ws_worker(endpoint: Endpoint, frame: Bytes, phase: Arc<AtomicU8>) -> Tally {
    let mut tally = Tally::default();
    let Ok(frame) = Utf8Bytes::try_from(frame) else {
        tally.error("the prompt frame is not UTF-8".into());
        return tally;
    };
    let mut connection: Option<Socket> = None;
    while phase.load(Ordering::Relaxed) != STOP {
        let socket = match &mut connection {
            Some(socket) => socket,
            None => match connect_ws(&endpoint).await {
                Ok(socket) => connection.insert(socket),
                Err(e) => {
                    tally.error(e);
                    tokio::time::sleep(BACKOFF).await;
                    continue;
                }
            },
        };
        let started = crate::now();
        match turn(socket, frame.clone()).await {
            Ok(()) => tally.ok(&phase, started, None),
            Err(e) => {
                tally.error(e);
                connection = None;
                tokio::time::sleep(BACKOFF).await;
            }
        }
    }
    if let Some(mut socket) = connection {
        // A clean close, so that the gateway sees a client leaving rather than a reset.
        let _ = socket.close(None).await;
    }
    tally
}

async fn connect_ws(endpoint: &Endpoint) -> Result<Socket, String> {
    let url = format!("ws://{}/v1/responses", endpoint.addr);
    let mut request = url.into_client_request().map_err(|e| format!("ws request: {e}"))?;
    request.headers_mut().insert(header::AUTHORIZATION, endpoint.auth.clone());
    request.headers_mut().insert("openai-beta", HeaderValue::from_static("responses_websockets=2026-02-06"));
    let tcp = TcpStream::connect(endpoint.addr).await.map_err(|e| format!("connect {}: {e}", endpoint.addr))?;
    tcp.set_nodelay(true).map_err(|e| format!("nodelay: {e}"))?;
    let (socket, _) = tokio_tungstenite::client_async(request, tcp).await.map_err(|e| format!("ws handshake: {e}"))?;
    Ok(socket)
}

/// One turn: a `response.create` frame out, frames in until `response.completed`.
async fn turn(socket: &mut Socket, frame: Utf8Bytes) -> Result<(), String> {
    socket.send(Message::Text(frame)).await.map_err(|e| format!("ws send: {e}"))?;
    while let Some(message) = socket.next().await {
        match message.map_err(|e| format!("ws receive: {e}"))? {
            Message::Text(text) => {
                // Only the last event names `response.completed`; only an error frame has this type.
                if memchr::memmem::find(text.as_bytes(), b"\"response.completed\"").is_some() {
                    return Ok(());
                }
                if memchr::memmem::find(text.as_bytes(), b"\"type\":\"error\"").is_some() {
                    return Err(format!("ws error frame: {}", text.as_str().chars().take(300).collect::<String>()));
                }
            }
            Message::Close(close) => return Err(format!("ws closed by the target: {close:?}")),
            _ => {}
        }
    }
    Err("ws ended without response.completed".into())
}

/// One client on one connection that sends requests one after another, for a fixed number of them
/// (the instruction count's workload: the same requests in the same order on every run).
pub enum Sequential {
    /// A keep-alive HTTP/1 connection.
    Http(Sender),
    /// A Responses WebSocket.
    Ws(Box<Socket>),
}

impl Sequential {
    /// Connects the way `mode`'s workers do.
    pub async fn connect(endpoint: &Endpoint, mode: Mode) -> Result<Self, String> {
        match mode {
            Mode::Ws => Ok(Self::Ws(Box::new(connect_ws(endpoint).await?))),
            Mode::Json | Mode::Sse | Mode::Chat => Ok(Self::Http(connect_http(endpoint.addr).await?)),
        }
    }

    /// Sends `n` requests (or turns) with `body`, each after the last one's whole answer; the first
    /// failure ends it.
    pub async fn send(&mut self, endpoint: &Endpoint, mode: Mode, body: &Bytes, n: usize) -> Result<(), String> {
        for _ in 0..n {
            match self {
                Self::Http(sender) => {
                    sender.ready().await.map_err(|e| format!("the connection closed: {e}"))?;
                    exchange(sender, endpoint, mode, body.clone()).await?;
                }
                Self::Ws(socket) => {
                    let frame = Utf8Bytes::try_from(body.clone()).map_err(|_| "the prompt is not UTF-8".to_owned())?;
                    turn(socket, frame).await?;
                }
            }
        }
        Ok(())
    }

    /// Closes the connection the way a client leaving does.
    pub async fn close(self) {
        if let Self::Ws(mut socket) = self {
            let _ = WebSocketStream::close(&mut *socket, None).await;
        }
    }
}
