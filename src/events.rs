//! What happened, for the dashboard, the tray and the CLI: every finished request becomes a
//! `RequestRecord` (the decision, the attempts, the result), and it, the routing of each request, and
//! every change of a key's or the gateway's state are events on one bounded, lossy stream.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use tokio::sync::broadcast;

use crate::facts::{ClientKind, Operation};
use crate::keys::KeyId;
use crate::router::Decision;
use crate::spend::Usage;
use crate::spend::{Cost, PriceTable, Unpriced, Usd};

/// How many finished requests are remembered (about 1 KiB each).
pub const RECENT_CAPACITY: usize = 1_000;
/// How many events a slow subscriber may lag before it skips ahead (and is told how many it missed).
pub const SUBSCRIBER_BACKLOG: usize = 1_024;

/// Why an attempt did not serve the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ts_rs::TS)]
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
    /// This key's organization cannot read the request's unmarked encrypted content: the next
    /// organization is tried (a 400 that costs no tokens).
    WrongOrganization,
    /// The client went away before an answer reached it.
    ClientCancelled,
}

/// One upstream attempt: small, fixed-size values only (the key id is a shared pointer).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct Attempt {
    /// The key tried.
    pub key: KeyId,
    /// The upstream status, if a response came back.
    pub status: Option<u16>,
    /// Why it failed over, if it did.
    pub failure: Option<FailureKind>,
    /// Milliseconds until response headers (or failure).
    pub duration_ms: u32,
    /// What went wrong, when it did: the provider's error message (shortened, anything key-like
    /// masked, at most `classify::MAX_MESSAGE_CHARS`) or Keymux's account of a connection failure.
    pub message: Option<Box<str>>,
}

/// How a request arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum Wire {
    /// An HTTP request.
    Http,
    /// A `response.create` frame on a Responses WebSocket.
    WebSocket,
}

/// A finished request: how it was routed, and everything that came of it.
#[derive(Clone, Debug, Serialize, ts_rs::TS)]
pub struct RequestRecord {
    /// What arrived and how it was decided: the very `routed` event the live stream showed, shared
    /// with it (`Trace` changes it through `Arc::make_mut`, which copies only once it is shared).
    #[serde(flatten)]
    // Declared in TypeScript as `Routed & { ... }` by `api::typescript::typescript()`.
    #[ts(skip)]
    pub routed: Arc<Routed>,
    /// Whether the client asked for a stream.
    pub stream: bool,
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
    /// What the answer cost, in US dollars, from its usage, its model and the service tier it was
    /// billed in (`None`: no usage was reported, or no price applies; then `unpriced` says why).
    #[ts(type = "number | null")]
    pub cost_usd: Option<Usd>,
    /// The answer reported usage, but the price table has no price for its model (or its service
    /// tier): what it cost is unknown, never $0.
    pub unpriced: Option<Unpriced>,
}

impl RequestRecord {
    /// A record of a request about which nothing is known yet but when and how it arrived.
    pub fn new(at_unix_ms: u64, operation: Operation, transport: Wire, decision: Decision) -> Self {
        Self::with(Arc::new(Routed {
            at_unix_ms,
            operation,
            transport,
            client: ClientKind::Other,
            token: String::new(),
            pool: crate::pools::ALL.to_owned(),
            session: None,
            parent_session: None,
            model: None,
            decision,
        }))
    }

    /// An empty record that allocates nothing: what a trace keeps once it has published its own.
    pub fn spent() -> Self {
        // Built once; every trace shares it.
        static NOTHING: std::sync::LazyLock<Arc<Routed>> =
            std::sync::LazyLock::new(|| RequestRecord::new(0, Operation::Other, Wire::Http, Decision::new(0)).routed);
        Self::with(NOTHING.clone())
    }

    fn with(routed: Arc<Routed>) -> Self {
        Self {
            routed,
            stream: false,
            attempts: Vec::new(),
            served_by: None,
            status: 0,
            error: None,
            upstream_code: None,
            rescued_items: 0,
            ttfb_ms: 0,
            duration_ms: 0,
            usage: None,
            cost_usd: None,
            unpriced: None,
        }
    }

    /// An answer a ChatGPT plan served: its subscription includes it, so it costs nothing more (and
    /// counts against no budget in money).
    pub fn included_in_plan(&mut self) {
        if self.usage.is_some() {
            self.cost_usd = Some(Usd::ZERO);
        }
    }

    /// Prices the answer's usage (once, when the request finished): its cost, or why it has none.
    pub fn price(&mut self, prices: &PriceTable) {
        let Some(usage) = self.usage else { return };
        // A request that named no model has no price (`""` is in no table).
        match prices.cost(self.routed.model.as_deref().unwrap_or_default(), &usage) {
            Cost::Priced(usd) => self.cost_usd = Some(usd),
            Cost::Unpriced(why) => self.unpriced = Some(why),
        }
    }
}

/// A key's state changed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct KeyEvent {
    /// The key.
    pub key: KeyId,
    /// Its label (when the event happened).
    pub label: String,
    /// What changed.
    pub change: KeyChange,
}

/// What changed about a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum KeyChange {
    /// Rate limited until then (Unix milliseconds).
    CoolingStarted {
        /// When it frees.
        until_unix_ms: u64,
    },
    /// A cooldown ended: the key is usable again.
    CoolingEnded,
    /// A ChatGPT plan is used up (its 429, or a window its answer reported at 100 %): new sessions go
    /// to the API keys until then (Unix milliseconds); sessions on it go on as `lost_org` says.
    PlanUsedUp {
        /// When its window resets.
        until_unix_ms: u64,
    },
    /// A used-up ChatGPT plan's window reset: new sessions go to it first again.
    PlanBack,
    /// The account is out of quota; it is tried again then (Unix milliseconds).
    QuotaExhausted {
        /// When it is tried again.
        until_unix_ms: u64,
    },
    /// Its base URL could not be reached; a background probe tries again then (Unix milliseconds).
    Unreachable {
        /// When it is tried again.
        retry_unix_ms: u64,
    },
    /// The provider rejected the key.
    Rejected,
    /// Usable again after a rejection or an exhausted quota.
    Recovered,
    /// Added to the pool.
    Added,
    /// Removed from the pool.
    Removed,
    /// Switched on by the user.
    Enabled,
    /// Switched off by the user.
    Disabled,
    /// Its settings changed (label, priority, budget, models).
    Updated,
}

/// Something that happened to the gateway as a whole.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum GatewayEvent {
    /// Routing paused: new requests get 503 with `retry-after`.
    Paused,
    /// Routing resumed.
    Resumed,
    /// The metrics store failed; counts are kept in memory.
    StoreFailed {
        /// What went wrong, and what to do.
        message: String,
    },
    /// The metrics store works again.
    StoreRecovered,
    /// A client token was created.
    TokenCreated {
        /// Its name.
        name: String,
    },
    /// A client token was revoked.
    TokenRevoked {
        /// Its name.
        name: String,
    },
    /// The config file was edited by hand and the edit applied: what changed, in words.
    ConfigApplied {
        /// Each change (bounded by the keys and tokens there are).
        changes: Vec<String>,
    },
    /// The config file was edited by hand but the edit is not valid: the running settings stay.
    ConfigRefused {
        /// The file, line and column, and what is wrong.
        message: String,
    },
    /// A pool was created, changed or removed, or a token moved to another pool.
    PoolsChanged {
        /// The pool.
        name: String,
    },
    /// A key's or a pool's budget in money changed state: reserved past its reserve threshold, stopped at its
    /// limit, or open again when its period ended. Told once per state and period.
    Budget {
        /// Whose budget.
        of: BudgetOf,
        /// The key's label, or the pool's name.
        label: String,
        /// Where it stands now.
        state: crate::budget::BudgetState,
    },
    /// An installed client (Codex, pi) was checked through Keymux because its version changed (or
    /// Keymux started): `keymux clients check` for that client.
    ClientChecked(ClientChecked),
}

/// One client's check, as the tray and the Connect view tell it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize, ts_rs::TS)]
pub struct ClientChecked {
    /// `codex` or `pi`.
    pub name: String,
    /// The version checked, when it printed one.
    pub version: Option<String>,
    /// Every transport it uses went through.
    pub ok: bool,
    /// In words: `pi 1.7.0 works through Keymux`, or `Codex 0.172.0: WebSocket turn failed: …`.
    pub summary: String,
}

/// Whose budget in money a budget event is about.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, ts_rs::TS)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum BudgetOf {
    /// One key's own budget.
    Key {
        /// The key.
        key: KeyId,
    },
    /// A user's pool's budget, its keys' spend together.
    Pool {
        /// The pool's name.
        pool: String,
    },
}

/// A request was routed (before any attempt): the dashboard shows it at once. A finished request's
/// record starts with the same fields.
#[derive(Clone, Debug, Serialize, ts_rs::TS)]
pub struct Routed {
    /// Wall-clock time of arrival, Unix milliseconds.
    pub at_unix_ms: u64,
    /// The operation.
    pub operation: Operation,
    /// HTTP or WebSocket.
    pub transport: Wire,
    /// The client that sent it.
    pub client: ClientKind,
    /// The name of the local token it came with (empty for `KEYMUX_CLIENT_TOKEN`).
    pub token: String,
    /// The pool that token is bound to (`all`: every key).
    pub pool: String,
    /// A short keyed digest of its session (for Codex, its thread).
    pub session: Option<String>,
    /// For a Codex subagent thread, the short keyed digest of the session it belongs to.
    pub parent_session: Option<String>,
    /// Model named in the body (capped).
    pub model: Option<String>,
    /// The decision.
    pub decision: Decision,
}

/// One thing on the live event stream.
#[derive(Clone, Debug, Serialize, ts_rs::TS)]
#[serde(tag = "type", content = "data", rename_all = "snake_case")]
pub enum Event {
    /// A request was routed.
    Routed(Arc<Routed>),
    /// A request finished.
    Finished(Arc<RequestRecord>),
    /// A key's state changed.
    Key(KeyEvent),
    /// Something happened to the gateway.
    Gateway(GatewayEvent),
    /// This subscriber was too slow, or resumed too late: it missed this many events.
    Lagged {
        /// Events it will never see.
        missed: u64,
    },
}

impl Event {
    /// The event's name on the SSE stream.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Routed(_) => "routed",
            Self::Finished(_) => "finished",
            Self::Key(_) => "key",
            Self::Gateway(_) => "gateway",
            Self::Lagged { .. } => "lagged",
        }
    }
}

/// An event with its place in the stream.
#[derive(Clone, Debug, Serialize, ts_rs::TS)]
pub struct Envelope {
    /// Increasing from 1; what `Last-Event-ID` and `?after=` name.
    pub id: u64,
    /// When it happened, Unix milliseconds.
    pub at_unix_ms: u64,
    /// The event.
    #[serde(flatten)]
    pub event: Event,
}

/// How many events are kept for subscribers that resume (`Last-Event-ID`).
pub const EVENT_CAPACITY: usize = 2_048;

/// What a resuming subscriber gets from the ring.
#[derive(Debug)]
pub struct Replay {
    /// Events after the one it named, oldest first.
    pub events: Vec<Arc<Envelope>>,
    /// Events it asked for that the ring no longer holds.
    pub missed: u64,
}

#[derive(Default)]
struct Rings {
    // Bounded by EVENT_CAPACITY; oldest dropped first.
    events: VecDeque<Arc<Envelope>>,
    // Bounded by RECENT_CAPACITY; oldest dropped first.
    records: VecDeque<Arc<RequestRecord>>,
    next_id: u64,
}

/// The event stream: a bounded ring for resuming subscribers, the recent records for the decisions
/// API, and a bounded broadcast for live ones. A slow subscriber loses events (and is told how many);
/// it never slows a request.
pub struct Events {
    rings: Mutex<Rings>,
    feed: broadcast::Sender<Arc<Envelope>>,
}

impl Default for Events {
    fn default() -> Self {
        Self { rings: Mutex::default(), feed: broadcast::channel(SUBSCRIBER_BACKLOG).0 }
    }
}

impl Events {
    fn lock(&self) -> std::sync::MutexGuard<'_, Rings> {
        self.rings.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Publishes an event that happened at `at_unix_ms`.
    pub fn publish(&self, at_unix_ms: u64, event: Event) {
        let mut rings = self.lock();
        if let Event::Finished(record) = &event {
            if rings.records.len() == RECENT_CAPACITY {
                rings.records.pop_front();
            }
            rings.records.push_back(record.clone());
        }
        rings.next_id += 1;
        let envelope = Arc::new(Envelope { id: rings.next_id, at_unix_ms, event });
        if rings.events.len() == EVENT_CAPACITY {
            rings.events.pop_front();
        }
        rings.events.push_back(envelope.clone());
        // Sent under the lock, so live order is ring order. No subscriber is fine.
        let _ = self.feed.send(envelope);
    }

    /// Publishes a finished request.
    pub fn publish_record(&self, record: RequestRecord) {
        let at = record.routed.at_unix_ms.saturating_add(u64::from(record.duration_ms));
        self.publish(at, Event::Finished(Arc::new(record)));
    }

    /// The newest `limit` records, oldest first.
    pub fn recent(&self, limit: usize) -> Vec<Arc<RequestRecord>> {
        let rings = self.lock();
        let skip = rings.records.len().saturating_sub(limit);
        rings.records.iter().skip(skip).cloned().collect()
    }

    /// A live feed from now on, and what the ring holds after event `after` (to resume without gaps:
    /// subscribe first, then replay, then skip live events already replayed).
    pub fn resume(&self, after: u64) -> (broadcast::Receiver<Arc<Envelope>>, Replay) {
        let rings = self.lock();
        let receiver = self.feed.subscribe();
        let oldest = rings.events.front().map_or(rings.next_id + 1, |e| e.id);
        let missed = oldest.saturating_sub(after.saturating_add(1)).min(rings.next_id.saturating_sub(after));
        let events = rings.events.iter().filter(|e| e.id > after).cloned().collect();
        (receiver, Replay { events, missed })
    }

    /// A live feed of events from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Envelope>> {
        self.feed.subscribe()
    }

    /// The id of the newest event.
    pub fn last_id(&self) -> u64 {
        self.lock().next_id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(seq: u64) -> RequestRecord {
        RequestRecord::new(0, Operation::ResponsesCreate, Wire::Http, Decision::new(seq))
    }

    #[test]
    fn rings_are_bounded_and_keep_the_newest() {
        let events = Events::default();
        for seq in 0..(EVENT_CAPACITY as u64 + 50) {
            events.publish_record(record(seq));
        }
        let all = events.recent(usize::MAX);
        assert_eq!(all.len(), RECENT_CAPACITY);
        assert_eq!(all[0].routed.decision.seq, EVENT_CAPACITY as u64 + 50 - RECENT_CAPACITY as u64);
        assert_eq!(events.recent(2)[1].routed.decision.seq, EVENT_CAPACITY as u64 + 49);
        let (_, replay) = events.resume(0);
        assert_eq!(replay.events.len(), EVENT_CAPACITY);
        assert_eq!(replay.missed, 50, "the 50 oldest are gone, and the subscriber is told");
        assert_eq!(replay.events[0].id, 51);
    }

    #[test]
    fn resuming_replays_exactly_what_came_after() {
        let events = Events::default();
        for seq in 0..10 {
            events.publish_record(record(seq));
        }
        let (mut live, replay) = events.resume(7);
        assert_eq!(replay.missed, 0);
        assert_eq!(replay.events.iter().map(|e| e.id).collect::<Vec<_>>(), [8, 9, 10]);
        events.publish(1, Event::Gateway(GatewayEvent::Paused));
        assert_eq!(live.try_recv().expect("live").id, 11);
        let (_, none) = events.resume(11);
        assert!(none.events.is_empty());
        assert_eq!(none.missed, 0);
        let json = serde_json::to_value(&*replay.events[0]).expect("json");
        assert_eq!(json["type"], "finished");
        assert_eq!(json["id"], 8);
        assert!(json["data"]["decision"].is_object());
    }

    #[test]
    fn a_subscriber_that_never_reads_is_left_behind_not_waited_for() {
        let events = Events::default();
        let mut stuck = events.subscribe();
        for seq in 0..(SUBSCRIBER_BACKLOG as u64 * 3) {
            events.publish_record(record(seq));
        }
        match stuck.try_recv() {
            Err(broadcast::error::TryRecvError::Lagged(missed)) => assert_eq!(missed, 2 * SUBSCRIBER_BACKLOG as u64),
            other => panic!("expected a lag, got {other:?}"),
        }
    }

    #[test]
    fn attempt_records_stay_small() {
        // An attempt is a key id, a few scalars and at most a short message, never a copy of the request.
        assert!(std::mem::size_of::<Attempt>() <= 48, "{}", std::mem::size_of::<Attempt>());
    }
}
