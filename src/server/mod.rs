//! Serving the HTTP surface on a socket the caller bound, in the spirit of mini-redis's
//! `server::run(listener, shutdown)`.
//!
//! Every accepted connection gets `TCP_NODELAY` (the last small writes of a stream must not wait for a
//! delayed ACK). Connections have limits (their values are in `limits`), because any local process can
//! open them, token or not:
//! * request headers must arrive within `header_read_timeout` of a connection opening or of its last
//!   answer, so a silent socket, a slowloris and an idle keep-alive connection are all closed then;
//! * an answer's writes must make progress: one blocked for `write_stall_timeout` (a client that
//!   stopped reading) closes the connection (`write_deadline`), on every route and on WebSockets;
//! * a request body must arrive whole within `body_read_timeout` (408 otherwise), and one declared over
//!   the cap gets its 413 at once (`proxy`);
//! * at most `max_connections` are open. At the cap, a new connection is not refused: the oldest
//!   connection that is not serving a request (idle, still sending its headers, or still sending its
//!   body) is closed for it, so a flood of idle or slow sockets never locks a real client out. Only
//!   when every connection is busy serving is a new one closed at once. A connection closed this way
//!   gets `EVICTED_FLUSH` to send what it still holds of its last answer, then its descriptor is
//!   given back whether or not its client read it;
//! * a connection holding an event stream (`/keymux/api/events`) does not count against
//!   `max_connections`; at most `max_event_streams` are open, past that a new subscriber gets a 429;
//! * at most `max_websockets` WebSockets are open (past it the upgrade gets a 426 and Codex goes on over
//!   HTTP), and a WebSocket must send its first frame within `first_frame_timeout` (Codex sends its
//!   prewarm at once). An open WebSocket has no idle limit: Codex keeps one between a user's turns.
//!
//! At start, the soft limit on open descriptors is raised to the hard limit, and the caps are lowered
//! if the descriptors still cannot hold them. On shutdown, Keymux stops accepting, asks open
//! connections and WebSockets to finish, and waits for them for a bounded time before cutting the rest.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

mod write_deadline;

use crate::gateway::Gateway;
use crate::limits::StreamCap;
pub use crate::limits::{Connection, RequestLimits, ServeOptions};

/// How long a connection closed to make room may still spend sending what it holds of its last
/// answer. A client that reads gets it; one that stopped reading loses it, and its descriptor is free.
const EVICTED_FLUSH: Duration = Duration::from_secs(1);

/// How serving ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Drained {
    /// Whether every request, stream and WebSocket finished within the allowance.
    pub clean: bool,
    /// Connections still open when the allowance ran out (they were cut).
    pub connections_cut: usize,
}

/// Serves `gateway` on `listener` until `shutdown` completes, with the default limits. Requests in
/// flight get the default drain allowance to finish.
pub async fn serve(
    listener: TcpListener,
    gateway: Arc<Gateway>,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    serve_with(listener, gateway, shutdown, ServeOptions::default()).await.map(|_| ())
}

/// Serves `gateway` on `listener` until `shutdown` completes. The process's descriptor limit is raised
/// (and `options` fitted to it) when this is called, not when the returned future is first polled, so a
/// caller that spawns it has the limit in force at once.
pub fn serve_with(
    listener: TcpListener,
    gateway: Arc<Gateway>,
    shutdown: impl Future<Output = ()> + Send,
    options: ServeOptions,
) -> impl Future<Output = std::io::Result<Drained>> + Send {
    let options = options.fitted_to(crate::limits::raise_descriptor_limit());
    accept_until(listener, gateway, shutdown, options)
}

/// The accept loop behind [`serve_with`], with `options` already fitted to the descriptor limit.
async fn accept_until(
    listener: TcpListener,
    gateway: Arc<Gateway>,
    shutdown: impl Future<Output = ()> + Send,
    options: ServeOptions,
) -> std::io::Result<Drained> {
    let app = Arc::new(crate::http::App::new(gateway.clone(), options.request_limits()));
    let slots = Arc::new(Slots::new(options.max_connections));
    let streams = Arc::new(StreamCap::new(options.max_event_streams));
    let stopping = CancellationToken::new();
    let mut connections = JoinSet::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(options.header_read_timeout);
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        while connections.try_join_next().is_some() {}
        let (tcp, local) = match accepted.and_then(|(tcp, _peer)| Ok((tcp.local_addr()?, tcp))) {
            // On a dual-stack socket an IPv4 client is seen at `::ffff:127.0.0.1`: name it as it dialled.
            Ok((local, tcp)) => (tcp, SocketAddr::new(local.ip().to_canonical(), local.port())),
            Err(e) => {
                // Out of descriptors, usually: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(slot) = slots.admit() else {
            tracing::warn!(max = options.max_connections, "connection refused: every open connection is serving");
            continue;
        };
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "could not set TCP_NODELAY");
        }
        let connection = Connection::new(local, slot.streaming.clone(), streams.clone());
        let service = Tracked { app: app.clone(), slot: slot.clone(), connection };
        let io = write_deadline::WriteDeadline::new(tcp, options.write_stall_timeout);
        let connection = builder.serve_connection(TokioIo::new(io), service).with_upgrades();
        let (slots, stopping) = (slots.clone(), stopping.clone());
        connections.spawn(async move {
            tokio::pin!(connection);
            let evicted = tokio::select! {
                ended = connection.as_mut() => Some(ended),
                () = slot.evicted.notified() => None,
                () = stopping.cancelled() => None,
            };
            let ended = match evicted {
                Some(ended) => ended,
                // A body still arriving holds no answer anyone waits for: cut it, now.
                None if slot.reading.load(Ordering::Acquire) > 0 => Ok(()),
                // Shutting down: requests in flight finish within the drain allowance (`drain`).
                None if stopping.is_cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
                None => {
                    connection.as_mut().graceful_shutdown();
                    tokio::time::timeout(EVICTED_FLUSH, connection).await.unwrap_or(Ok(()))
                }
            };
            if let Err(e) = ended {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            slots.remove(slot.id);
        });
    }
    drop(listener);
    Ok(drain(&gateway, &stopping, connections, options.drain).await)
}

/// One open connection, as the cap sees it.
struct Slot {
    id: u64,
    /// Requests this connection is serving (from their headers to the end of their answers).
    busy: AtomicUsize,
    /// Of those, the ones whose bodies are still arriving: a connection doing nothing but that is as
    /// good as idle.
    reading: AtomicUsize,
    /// Event streams open on it: while there is one, the connection is not counted.
    streaming: Arc<AtomicUsize>,
    /// Notified when the connection is closed to make room for a new one.
    evicted: Notify,
}

impl Slot {
    fn new(id: u64) -> Self {
        Self {
            id,
            busy: AtomicUsize::new(0),
            reading: AtomicUsize::new(0),
            streaming: Arc::new(AtomicUsize::new(0)),
            evicted: Notify::new(),
        }
    }

    /// Whether it counts against the cap.
    fn counted(&self) -> bool {
        self.streaming.load(Ordering::Acquire) == 0
    }

    /// Whether it may be closed for a new connection: nothing it serves is past reading its body.
    fn evictable(&self) -> bool {
        self.counted() && self.busy.load(Ordering::Acquire) <= self.reading.load(Ordering::Acquire)
    }
}

/// The open connections, oldest first.
struct Slots {
    open: Mutex<BTreeMap<u64, Arc<Slot>>>,
    next: AtomicU64,
    max: usize,
}

impl Slots {
    fn new(max: usize) -> Self {
        Self { open: Mutex::new(BTreeMap::new()), next: AtomicU64::new(0), max: max.max(1) }
    }

    /// A slot for a new connection. At the cap, the oldest connection that is not serving a request is
    /// closed to make room; `None` when every one is serving.
    fn admit(&self) -> Option<Arc<Slot>> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if open.values().filter(|s| s.counted()).count() >= self.max {
            let victim = open.values().find(|s| s.evictable()).map(|s| s.id)?;
            if let Some(slot) = open.remove(&victim) {
                slot.evicted.notify_one();
                tracing::debug!("closed the oldest idle connection to make room for a new one");
            }
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let slot = Arc::new(Slot::new(id));
        open.insert(id, slot.clone());
        Some(slot)
    }

    fn remove(&self, id: u64) {
        self.open.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
    }
}

/// The app, as served on one connection: it counts the requests the connection is serving.
#[derive(Clone)]
struct Tracked {
    app: Arc<crate::http::App>,
    slot: Arc<Slot>,
    connection: Connection,
}

impl hyper::service::Service<http::Request<Incoming>> for Tracked {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn call(&self, mut request: http::Request<Incoming>) -> Self::Future {
        request.extensions_mut().insert(self.connection.clone());
        let serving = Serving::new(self.slot.clone());
        let reading = (!hyper::body::Body::is_end_stream(request.body())).then(|| Reading::new(self.slot.clone()));
        let request = request.map(|body| Body::new(Arriving { body, reading }));
        let answer = self.app.serve(request);
        Box::pin(async move {
            let response = answer.await;
            Ok(response.map(|body| Body::new(Counted { body, _serving: serving })))
        })
    }
}

/// A request being served on a slot's connection; dropped with the end of its answer.
struct Serving(Arc<Slot>);

impl Serving {
    fn new(slot: Arc<Slot>) -> Self {
        slot.busy.fetch_add(1, Ordering::AcqRel);
        Self(slot)
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A request whose body is still arriving; dropped when the body has arrived (or was dropped).
struct Reading(Arc<Slot>);

impl Reading {
    fn new(slot: Arc<Slot>) -> Self {
        slot.reading.fetch_add(1, Ordering::AcqRel);
        Self(slot)
    }
}

impl Drop for Reading {
    fn drop(&mut self) {
        self.0.reading.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A request's body, which marks its request as reading until the body has arrived whole.
struct Arriving {
    body: Incoming,
    reading: Option<Reading>,
}

impl hyper::body::Body for Arriving {
    type Data = bytes::Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        let over = matches!(polled, Poll::Ready(None | Some(Err(_))));
        if over || hyper::body::Body::is_end_stream(&self.body) {
            self.reading = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        hyper::body::Body::is_end_stream(&self.body)
    }

    fn size_hint(&self) -> SizeHint {
        hyper::body::Body::size_hint(&self.body)
    }
}

/// An answer's body that keeps its request counted until it has been sent (or dropped).
struct Counted {
    body: Body,
    _serving: Serving,
}

impl hyper::body::Body for Counted {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        hyper::body::Body::poll_frame(Pin::new(&mut self.body), cx)
    }

    fn is_end_stream(&self) -> bool {
        hyper::body::Body::is_end_stream(&self.body)
    }

    fn size_hint(&self) -> SizeHint {
        hyper::body::Body::size_hint(&self.body)
    }
}

/// Asks every connection and WebSocket to finish, waits up to `allowance`, then cuts what is left.
async fn drain(
    gateway: &Gateway,
    stopping: &CancellationToken,
    mut connections: JoinSet<()>,
    allowance: Duration,
) -> Drained {
    stopping.cancel();
    gateway.close_sockets();
    let finished = async {
        while connections.join_next().await.is_some() {}
        gateway.sockets().wait().await;
    };
    let clean = tokio::time::timeout(allowance, finished).await.is_ok();
    let connections_cut = connections.len();
    connections.abort_all();
    while connections.join_next().await.is_some() {}
    Drained { clean, connections_cut }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn at_the_cap_the_oldest_idle_connection_makes_room_and_busy_ones_are_kept() {
        let slots = Slots::new(3);
        let [a, b, c] = [slots.admit().unwrap(), slots.admit().unwrap(), slots.admit().unwrap()];
        let _serving_a = Serving::new(a.clone());
        let d = slots.admit().expect("b is idle, so it makes room");
        let open: Vec<u64> = slots.open.lock().unwrap().keys().copied().collect();
        assert_eq!(open, vec![a.id, c.id, d.id], "the oldest idle one, b, was closed; busy a was kept");
        // b was told to close: its notification is waiting for it.
        assert!(futures::FutureExt::now_or_never(b.evicted.notified()).is_some());
        let (_serving_c, _serving_d) = (Serving::new(c.clone()), Serving::new(d.clone()));
        assert!(slots.admit().is_none(), "every connection is serving: the new one is closed");
        drop(_serving_c);
        assert!(slots.admit().is_some(), "c finished its answer, so it is idle again and makes room");
    }

    #[test]
    fn a_connection_still_sending_its_body_makes_room_and_a_streaming_one_is_not_counted() {
        let slots = Slots::new(2);
        let [a, b] = [slots.admit().unwrap(), slots.admit().unwrap()];
        let (_serving_a, reading_a) = (Serving::new(a.clone()), Reading::new(a.clone()));
        let _serving_b = Serving::new(b.clone());
        let c = slots.admit().expect("a is only sending its body, so it makes room");
        assert!(futures::FutureExt::now_or_never(a.evicted.notified()).is_some());
        drop(reading_a);
        let _serving_c = Serving::new(c.clone());
        assert!(slots.admit().is_none(), "b and c are serving");
        c.streaming.fetch_add(1, Ordering::AcqRel);
        let d = slots.admit().expect("c holds an event stream, so it is not counted");
        let _serving_d = Serving::new(d);
        assert!(slots.admit().is_none(), "b and d are serving; c is never closed for room");
    }
}
