//! What happened, for the dashboard, the tray and the CLI: every finished request becomes a
//! `RequestRecord` (the decision, the attempts, the result), and it, the routing of each request, and
//! every change of a key's or the gateway's state are events on one bounded, lossy stream.
//!
//! This file is the stream (`Events`: the rings, the live feed, resuming) and the `Event` it carries;
//! `record` is what a request's record holds (`RequestRecord`, its `Routed` start, its `Attempt`s), and
//! `changes` what a key's or the gateway's change says.

mod changes;
mod record;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use tokio::sync::broadcast;

pub use changes::{BudgetOf, ClientChecked, GatewayEvent, KeyChange, KeyEvent};
pub use record::{Attempt, FailureKind, RequestRecord, Routed, Wire};

/// How many finished requests are remembered (about 1 KiB each).
pub const RECENT_CAPACITY: usize = 1_000;
/// How many events a slow subscriber may lag before it skips ahead (and is told how many it missed).
pub const SUBSCRIBER_BACKLOG: usize = 1_024;

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
    use crate::facts::Operation;
    use crate::router::Decision;

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
}
