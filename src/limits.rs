//! The limits Keymux puts on what clients can hold: connections, WebSockets, event-stream subscribers,
//! how long headers, bodies and first frames may take, how large a control call's body may be, and the
//! open-descriptor limit they all fit in. `server` applies them to connections; request handlers
//! (`proxy`, `http`, `api`) read theirs from the request's extensions and read bodies through
//! [`read_body`].

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderMap};
use bytes::Bytes;

use crate::error::ApiError;

/// Largest body any route but `/v1` reads (a key, a token name, a challenge): what the control API
/// takes is small, so a larger declared body is refused before a byte of it is read.
pub const CONTROL_MAX_BODY: usize = 64 * 1024;

/// Connection limits and the shutdown allowance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServeOptions {
    /// Most connections open at once, not counting WebSockets.
    pub max_connections: usize,
    /// Most WebSockets open at once.
    pub max_websockets: usize,
    /// Most event-stream subscribers at once. They hold their connections for long, so they do not
    /// count against `max_connections`: a crowd of them never locks out a `/v1` client.
    pub max_event_streams: usize,
    /// Longest wait for a request's headers, from a connection's opening or its last answer (so also
    /// how long an idle keep-alive connection stays open).
    pub header_read_timeout: Duration,
    /// Longest wait for a whole request body once its headers are in.
    pub body_read_timeout: Duration,
    /// Longest wait for a new WebSocket's first frame.
    pub first_frame_timeout: Duration,
    /// Longest a write to a client may stay blocked (the client reads nothing) before its connection
    /// is closed. Generous: a client that reads at all never meets it.
    pub write_stall_timeout: Duration,
    /// Longest wait, at shutdown, for requests and streams in flight to finish.
    pub drain: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            max_connections: 512,
            max_websockets: 256,
            max_event_streams: 64,
            header_read_timeout: Duration::from_secs(30),
            body_read_timeout: Duration::from_secs(60),
            first_frame_timeout: Duration::from_secs(30),
            write_stall_timeout: Duration::from_secs(30),
            drain: Duration::from_secs(10),
        }
    }
}

/// The limits a request handler applies, handed to it in the request's extensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestLimits {
    /// See `ServeOptions::body_read_timeout`.
    pub body_read_timeout: Duration,
    /// See `ServeOptions::max_websockets`.
    pub max_websockets: usize,
    /// See `ServeOptions::first_frame_timeout`.
    pub first_frame_timeout: Duration,
}

impl Default for RequestLimits {
    fn default() -> Self {
        ServeOptions::default().request_limits()
    }
}

impl ServeOptions {
    /// What request handlers need to know of these options.
    pub fn request_limits(&self) -> RequestLimits {
        RequestLimits {
            body_read_timeout: self.body_read_timeout,
            max_websockets: self.max_websockets,
            first_frame_timeout: self.first_frame_timeout,
        }
    }

    /// These options with the caps lowered to what `descriptors` open files can hold: each connection
    /// takes one, each WebSocket two (client and upstream), and a margin stays for the upstream pool,
    /// the store and the logs.
    pub fn fitted_to(mut self, descriptors: u64) -> Self {
        let usable = usize::try_from(descriptors.saturating_sub(128)).unwrap_or(usize::MAX).max(16);
        self.max_connections = self.max_connections.min(usable / 2).max(4);
        self.max_websockets = self.max_websockets.min(usable / 8).max(2);
        self.max_event_streams = self.max_event_streams.min(usable / 8).max(2);
        self
    }
}

/// The connection a request came on, as its handler sees it (in the request's extensions).
#[derive(Clone, Debug)]
pub struct Connection {
    local: SocketAddr,
    /// Event streams open on this connection: while there is one, the connection is not counted
    /// against `max_connections` (and is never closed to make room).
    streaming: Arc<AtomicUsize>,
    streams: Arc<StreamCap>,
}

/// The event streams open on all connections, and their cap.
#[derive(Debug)]
pub struct StreamCap {
    open: AtomicUsize,
    max: usize,
}

impl StreamCap {
    /// A cap of `max` event streams.
    pub fn new(max: usize) -> Self {
        Self { open: AtomicUsize::new(0), max }
    }
}

/// An open event stream's place under the cap; dropped when the stream ends.
#[derive(Debug)]
pub struct StreamSeat {
    streaming: Arc<AtomicUsize>,
    streams: Arc<StreamCap>,
}

impl Drop for StreamSeat {
    fn drop(&mut self) {
        self.streaming.fetch_sub(1, Ordering::AcqRel);
        self.streams.open.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Connection {
    /// A connection accepted on `local`; `streaming` counts its open event streams.
    pub fn new(local: SocketAddr, streaming: Arc<AtomicUsize>, streams: Arc<StreamCap>) -> Self {
        Self { local, streaming, streams }
    }

    /// The address the connection was accepted on: this gateway's own, as the client dialled it.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The most event streams open at once.
    pub fn max_streams(&self) -> usize {
        self.streams.max
    }

    /// A seat for an event stream on this connection, unless as many are open as allowed.
    pub fn open_stream(&self) -> Option<StreamSeat> {
        let cap = &self.streams;
        cap.open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < cap.max).then_some(n + 1)).ok()?;
        self.streaming.fetch_add(1, Ordering::AcqRel);
        Some(StreamSeat { streaming: self.streaming.clone(), streams: self.streams.clone() })
    }
}

/// Reads a request body under `limit` and within `deadline`. A `content-length` over the limit is
/// refused at once, without reading the body; a chunked body is cut off at the limit.
pub async fn read_body(headers: &HeaderMap, body: Body, limit: usize, deadline: Duration) -> Result<Bytes, ApiError> {
    if declared_length(headers).is_some_and(|n| n > limit as u64) {
        return Err(ApiError::BodyTooLarge { limit });
    }
    let read = tokio::time::timeout(deadline, axum::body::to_bytes(body, limit));
    let Ok(read) = read.await else {
        return Err(ApiError::BodyTimeout { secs: deadline.as_secs().max(1) });
    };
    read.map_err(|e| {
        if is_length_limit(&e) {
            ApiError::BodyTooLarge { limit }
        } else {
            ApiError::BodyRead { detail: e.to_string() }
        }
    })
}

/// The body length a request declares.
pub fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok())
}

fn is_length_limit(e: &axum::Error) -> bool {
    use std::error::Error as _;
    let mut source: Option<&(dyn std::error::Error + 'static)> = e.source();
    while let Some(s) = source {
        if s.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = s.source();
    }
    false
}

/// Raises the soft limit on open descriptors to the hard limit (once is enough; raising it again
/// changes nothing), and returns the soft limit in force.
pub fn raise_descriptor_limit() -> u64 {
    #[cfg(unix)]
    {
        use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
        let limit = getrlimit(Resource::Nofile);
        let current = limit.current.unwrap_or(u64::MAX);
        if limit.current.is_none() || limit.current == limit.maximum {
            return current;
        }
        // macOS refuses more than its `OPEN_MAX` (10,240) when the hard limit is unlimited.
        let wanted = [limit.maximum.unwrap_or(u64::MAX), limit.maximum.unwrap_or(u64::MAX).min(10_240)];
        for to in wanted.into_iter().filter(|to| *to > current) {
            let raised = Rlimit { current: Some(to), maximum: limit.maximum };
            if setrlimit(Resource::Nofile, raised).is_ok() {
                tracing::debug!(from = current, to, "raised the open-file limit");
                return to;
            }
        }
        current
    }
    #[cfg(not(unix))]
    {
        u64::MAX
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_caps_fit_the_descriptors_there_are() {
        let options = ServeOptions::default();
        assert_eq!(options.fitted_to(20_000), options, "plenty of room: the defaults stand");
        let tight = options.fitted_to(1024);
        assert_eq!((tight.max_connections, tight.max_websockets, tight.max_event_streams), (448, 112, 64));
        let tighter = options.fitted_to(512);
        assert_eq!((tighter.max_connections, tighter.max_websockets, tighter.max_event_streams), (192, 48, 48));
        for (fitted, descriptors) in [(tight, 1024), (tighter, 512)] {
            let used = fitted.max_connections + 2 * fitted.max_websockets + fitted.max_event_streams + 128;
            assert!(used <= descriptors, "{fitted:?}");
        }
    }
}
