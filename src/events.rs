//! The live record of routing: every finished request becomes a `RequestRecord` (the decision, the
//! attempts, the result) kept in a bounded ring for the dashboard and published to subscribers.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use tokio::sync::broadcast;

use crate::facts::{ClientKind, Operation};
use crate::keys::KeyId;
use crate::relay::Usage;
use crate::router::Decision;

/// How many finished requests are remembered (about 1 KiB each).
pub const RECENT_CAPACITY: usize = 1_000;
/// How many records a slow subscriber may lag before it skips ahead.
pub const SUBSCRIBER_BACKLOG: usize = 256;

/// Why an attempt did not serve the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// 429 with a rate limit: the key cools down.
    RateLimited,
    /// 429 `insufficient_quota`: the account is out of credit.
    QuotaExhausted,
    /// 401/403: the key was rejected.
    InvalidKey,
    /// `model_not_found`: this key cannot use the model; it is skipped for it.
    ModelUnavailable,
    /// 5xx from the provider.
    #[serde(rename = "upstream_5xx")]
    Upstream5xx,
    /// No answer headers within the first-byte timeout.
    Timeout,
    /// The connection could not be made or broke before an answer.
    UpstreamUnreachable,
    /// The answer ended before its first byte.
    UpstreamCut,
    /// The client's own request was refused (relayed as it was, never failed over).
    ClientError,
    /// The client went away before an answer reached it.
    ClientCancelled,
}

/// One upstream attempt: small, fixed-size values only (the key id is a shared pointer).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Attempt {
    /// The key tried.
    pub key: KeyId,
    /// The upstream status, if a response came back.
    pub status: Option<u16>,
    /// Why it failed over, if it did.
    pub failure: Option<FailureKind>,
    /// Milliseconds until response headers (or failure).
    pub duration_ms: u32,
}

/// How a request arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    /// An HTTP request.
    Http,
    /// A `response.create` frame on a Responses WebSocket.
    WebSocket,
}

/// A finished request.
#[derive(Clone, Debug, Serialize)]
pub struct RequestRecord {
    /// Wall-clock time of arrival, Unix milliseconds.
    pub at_unix_ms: u64,
    /// The operation.
    pub operation: Operation,
    /// HTTP or WebSocket.
    pub transport: Transport,
    /// The client that sent it.
    pub client: ClientKind,
    /// A short keyed digest of its session (`prompt_cache_key`), never the raw value.
    pub session: Option<String>,
    /// Model named in the body (capped).
    pub model: Option<String>,
    /// Whether the client asked for a stream.
    pub stream: bool,
    /// The routing decision.
    pub decision: Decision,
    /// Attempts made, in order (at most `router::MAX_ATTEMPTS`).
    pub attempts: Vec<Attempt>,
    /// The key whose answer went back to the client.
    pub served_by: Option<KeyId>,
    /// The status the client got.
    pub status: u16,
    /// Keymux's error label when Keymux answered with an error.
    pub error: Option<&'static str>,
    /// A notable error code the provider answered with (`invalid_encrypted_content`…).
    pub upstream_code: Option<&'static str>,
    /// Items dropped by rescue because no usable key could read them.
    pub rescued_items: usize,
    /// Milliseconds from arrival to the answer's headers (for a WebSocket turn, its first frame).
    pub ttfb_ms: u32,
    /// Milliseconds from arrival to the end of the answer.
    pub duration_ms: u32,
    /// The tokens the answer reported, when it reached a successful end.
    pub usage: Option<Usage>,
}

impl RequestRecord {
    /// A record of a request about which nothing is known yet but when and how it arrived.
    pub fn new(at_unix_ms: u64, operation: Operation, transport: Transport, decision: Decision) -> Self {
        Self {
            at_unix_ms,
            operation,
            transport,
            client: ClientKind::Other,
            session: None,
            model: None,
            stream: false,
            decision,
            attempts: Vec::new(),
            served_by: None,
            status: 0,
            error: None,
            upstream_code: None,
            rescued_items: 0,
            ttfb_ms: 0,
            duration_ms: 0,
            usage: None,
        }
    }
}

/// The ring of recent records and the live feed.
pub struct Events {
    // Bounded by RECENT_CAPACITY; oldest dropped first.
    recent: Mutex<VecDeque<Arc<RequestRecord>>>,
    feed: broadcast::Sender<Arc<RequestRecord>>,
}

impl Default for Events {
    fn default() -> Self {
        Self {
            recent: Mutex::new(VecDeque::with_capacity(RECENT_CAPACITY)),
            feed: broadcast::channel(SUBSCRIBER_BACKLOG).0,
        }
    }
}

impl Events {
    /// Publishes a finished request.
    pub fn publish(&self, record: RequestRecord) {
        let record = Arc::new(record);
        {
            let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
            if recent.len() == RECENT_CAPACITY {
                recent.pop_front();
            }
            recent.push_back(record.clone());
        }
        // No subscriber is fine.
        let _ = self.feed.send(record);
    }

    /// The newest `limit` records, oldest first.
    pub fn recent(&self, limit: usize) -> Vec<Arc<RequestRecord>> {
        let recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        let skip = recent.len().saturating_sub(limit);
        recent.iter().skip(skip).cloned().collect()
    }

    /// A live feed of records published from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<RequestRecord>> {
        self.feed.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(seq: u64) -> RequestRecord {
        RequestRecord::new(0, Operation::ResponsesCreate, Transport::Http, Decision::new(seq))
    }

    #[test]
    fn ring_is_bounded_and_keeps_the_newest() {
        let events = Events::default();
        for seq in 0..(RECENT_CAPACITY as u64 + 50) {
            events.publish(record(seq));
        }
        let all = events.recent(usize::MAX);
        assert_eq!(all.len(), RECENT_CAPACITY);
        assert_eq!(all[0].decision.seq, 50);
        assert_eq!(events.recent(2)[1].decision.seq, RECENT_CAPACITY as u64 + 49);
    }

    #[test]
    fn attempt_records_stay_small() {
        // An attempt is a pointer-sized key id plus a few scalars, never a copy of the request.
        assert!(std::mem::size_of::<Attempt>() <= 40, "{}", std::mem::size_of::<Attempt>());
    }
}
