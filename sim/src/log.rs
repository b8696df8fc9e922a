//! The request log: one entry per HTTP request or WebSocket frame, plus per-key counters.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use serde::Serialize;

use crate::util::lock;

/// Upper bound on retained log entries; the oldest are dropped first.
pub const LOG_CAPACITY: usize = 100_000;

/// Upper bound on the request-body bytes the retained entries hold; the oldest entries are
/// dropped first.
pub const LOG_BODY_BYTES: usize = 256 * 1024 * 1024;

/// How a request reached the simulator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Transport {
    /// A plain HTTP request (including the WebSocket upgrade request itself).
    Http,
    /// One `response.create` frame on a WebSocket connection.
    WebSocket,
}

/// One handled request.
///
/// HTTP requests carry their method; WebSocket frames are logged with method `WS` and the
/// path of the upgrade (`/v1/responses`), and carry the upgrade request's headers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LogEntry {
    /// Arrival order, starting at 1.
    pub seq: u64,
    /// HTTP method, or `WS` for a WebSocket frame.
    pub method: String,
    /// Request path without the query.
    pub path: String,
    /// The secret that authenticated, `None` if no known key was presented.
    pub key: Option<String>,
    /// The organization of that key.
    pub org: Option<String>,
    /// HTTP status (or the `status` of a WebSocket error frame; 200 when served).
    pub status: u16,
    /// HTTP or WebSocket.
    pub transport: Transport,
    /// The `model` of the request body, if any.
    pub model: Option<String>,
    /// Whether the answer was a stream (SSE or WebSocket events).
    pub stream: bool,
    /// Input tokens reported (or estimated, for a rejected request).
    pub input_tokens: u64,
    /// Cached input tokens reported.
    pub cached_tokens: u64,
    /// The `previous_response_id` of the request body, if any.
    pub previous_response_id: Option<String>,
    /// The error `code` (or `type` when the code is null) of an error answer.
    pub error_code: Option<String>,
    /// Request headers with lowercase names; credentials replaced by `<redacted>`.
    pub headers: Vec<(String, String)>,
    /// The parsed JSON body or frame, when it was JSON.
    pub body: Option<serde_json::Value>,
    /// The address of the connection it came on (a WebSocket frame: its socket's), which tells the
    /// client's connections apart.
    pub peer: Option<std::net::SocketAddr>,
}

#[derive(Debug, Default)]
struct Ring {
    /// Each entry with the size of its body.
    entries: VecDeque<(LogEntry, usize)>,
    body_bytes: usize,
}

#[derive(Debug, Default)]
pub(crate) struct LogBook {
    next_seq: AtomicU64,
    /// Bound: [`LOG_CAPACITY`] entries and [`LOG_BODY_BYTES`] body bytes.
    ring: Mutex<Ring>,
    /// Bound: one counter per configured key.
    counts: Mutex<BTreeMap<String, usize>>,
}

impl LogBook {
    /// Reserves the next arrival number.
    pub(crate) fn next_seq(&self) -> u64 {
        self.next_seq.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Records an entry whose body was `body_bytes` long; `served` says whether it counts
    /// in [`LogBook::counts`].
    pub(crate) fn record(&self, entry: LogEntry, body_bytes: usize, served: bool) {
        if served {
            if let Some(key) = &entry.key {
                *lock(&self.counts).entry(key.clone()).or_default() += 1;
            }
        }
        let mut ring = lock(&self.ring);
        ring.body_bytes += body_bytes;
        ring.entries.push_back((entry, body_bytes));
        while ring.entries.len() > LOG_CAPACITY || (ring.body_bytes > LOG_BODY_BYTES && ring.entries.len() > 1) {
            match ring.entries.pop_front() {
                Some((_, size)) => ring.body_bytes -= size,
                None => break,
            }
        }
    }

    /// All retained entries in arrival order.
    pub(crate) fn entries(&self) -> Vec<LogEntry> {
        let mut all: Vec<LogEntry> = lock(&self.ring).entries.iter().map(|(e, _)| e.clone()).collect();
        all.sort_by_key(|e| e.seq);
        all
    }

    pub(crate) fn counts(&self) -> BTreeMap<String, usize> {
        lock(&self.counts).clone()
    }
}
