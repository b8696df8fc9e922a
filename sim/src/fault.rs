//! Faults that tests set for a key: per-key FIFO queues of one-shot faults, and standing
//! faults of a key or a whole organization that last until cleared or until they expire.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::util::lock;

/// A misbehaviour the simulator shows on a key's request instead of (or while) serving it:
/// on the next request when queued, on every request while standing.
///
/// Over HTTP the control surface accepts the serde form, for example
/// `{"type":"status503","retry_after_secs":1}`, `{"type":"cut_after_events","events":3}` or
/// `{"type":"slow_deltas","ms":100}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "FaultRepr", into = "FaultRepr")]
pub enum Fault {
    /// 500 `server_error`.
    Status500,
    /// 503 overloaded, with an optional `retry-after`.
    Status503 {
        /// Seconds for the `retry-after` header, if any.
        retry_after_secs: Option<u64>,
    },
    /// 429 `rate_limit_exceeded` with `retry-after` / `retry-after-ms`.
    RateLimited {
        /// Seconds for the `retry-after` header.
        retry_after_secs: u64,
    },
    /// 401 `invalid_api_key`, as if the key had been revoked.
    InvalidKey,
    /// 429 `insufficient_quota`, without `retry-after`.
    InsufficientQuota,
    /// A 200 stream that ends abruptly after this many events (no `response.completed`);
    /// a non-streaming body is cut halfway.
    CutAfterEvents(usize),
    /// Sleep this long before the response headers (or the first WebSocket frame).
    SlowFirstByte(Duration),
    /// Sleep this long before every stream event after the first.
    SlowDeltas(Duration),
    /// 404 `model_not_found` for the requested model.
    ModelNotFound,
    /// A 400 whose message quotes the whole key in the shapes error texts use (`key:…`, `key=…`,
    /// quoted, inside JSON), and so do its `location`, `www-authenticate` and `x-debug-key` headers and
    /// the name of a member of its error object: what a careless provider or proxy might send back.
    QuotesKey,
    /// A 200 stream whose first event is followed by an error event quoting the key in a shape with
    /// no `type`, then the end: `event: error` with `{"error":{…}}` on a Responses stream, a
    /// `data: {"error":{…}}` chunk on a Chat Completions stream. What a careless provider or proxy
    /// might send; non-streaming requests are answered as usual.
    StreamErrorQuotesKey,
    /// Responses-over-WebSocket events sent as binary frames, the first quoting the key: a hostile
    /// or broken upstream (the Responses API sends text frames only). No effect over HTTP.
    BinaryFrames,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum FaultRepr {
    Status500,
    Status503 {
        #[serde(default)]
        retry_after_secs: Option<u64>,
    },
    RateLimited {
        retry_after_secs: u64,
    },
    InvalidKey,
    InsufficientQuota,
    CutAfterEvents {
        events: usize,
    },
    SlowFirstByte {
        ms: u64,
    },
    SlowDeltas {
        ms: u64,
    },
    ModelNotFound,
    QuotesKey,
    StreamErrorQuotesKey,
    BinaryFrames,
}

impl From<FaultRepr> for Fault {
    fn from(r: FaultRepr) -> Self {
        match r {
            FaultRepr::Status500 => Fault::Status500,
            FaultRepr::Status503 { retry_after_secs } => Fault::Status503 { retry_after_secs },
            FaultRepr::RateLimited { retry_after_secs } => Fault::RateLimited { retry_after_secs },
            FaultRepr::InvalidKey => Fault::InvalidKey,
            FaultRepr::InsufficientQuota => Fault::InsufficientQuota,
            FaultRepr::CutAfterEvents { events } => Fault::CutAfterEvents(events),
            FaultRepr::SlowFirstByte { ms } => Fault::SlowFirstByte(Duration::from_millis(ms)),
            FaultRepr::SlowDeltas { ms } => Fault::SlowDeltas(Duration::from_millis(ms)),
            FaultRepr::ModelNotFound => Fault::ModelNotFound,
            FaultRepr::QuotesKey => Fault::QuotesKey,
            FaultRepr::BinaryFrames => Fault::BinaryFrames,
            FaultRepr::StreamErrorQuotesKey => Fault::StreamErrorQuotesKey,
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl From<Fault> for FaultRepr {
    fn from(f: Fault) -> Self {
        match f {
            Fault::Status500 => FaultRepr::Status500,
            Fault::Status503 { retry_after_secs } => FaultRepr::Status503 { retry_after_secs },
            Fault::RateLimited { retry_after_secs } => FaultRepr::RateLimited { retry_after_secs },
            Fault::InvalidKey => FaultRepr::InvalidKey,
            Fault::InsufficientQuota => FaultRepr::InsufficientQuota,
            Fault::CutAfterEvents(events) => FaultRepr::CutAfterEvents { events },
            Fault::SlowFirstByte(d) => FaultRepr::SlowFirstByte { ms: millis(d) },
            Fault::SlowDeltas(d) => FaultRepr::SlowDeltas { ms: millis(d) },
            Fault::ModelNotFound => FaultRepr::ModelNotFound,
            Fault::QuotesKey => FaultRepr::QuotesKey,
            Fault::BinaryFrames => FaultRepr::BinaryFrames,
            Fault::StreamErrorQuotesKey => FaultRepr::StreamErrorQuotesKey,
        }
    }
}

/// Who a standing fault applies to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Scope {
    /// One key, by its secret.
    Key(String),
    /// Every key of one organization, by its id.
    Org(String),
}

#[derive(Debug, Clone)]
struct Standing {
    fault: Fault,
    /// `None` lasts until cleared.
    until: Option<Instant>,
}

/// The faults tests set: one-shot faults queued per key, and standing faults that every
/// request of a key or organization shows for a while.
#[derive(Debug, Default)]
pub(crate) struct FaultBook {
    /// Bound: one queue per key with faults waiting (empty queues are removed); each queue
    /// holds at most [`MAX_QUEUED_PER_KEY`] faults (older ones are dropped first).
    queues: Mutex<HashMap<String, VecDeque<Fault>>>,
    /// Bound: one entry per key or organization a test named; cleared and expired entries
    /// are removed.
    standing: Mutex<HashMap<Scope, Standing>>,
}

/// Upper bound on faults waiting for one key.
pub(crate) const MAX_QUEUED_PER_KEY: usize = 10_000;

impl FaultBook {
    pub(crate) fn push(&self, key: &str, fault: Fault) {
        let mut queues = lock(&self.queues);
        let q = queues.entry(key.to_owned()).or_default();
        if q.len() >= MAX_QUEUED_PER_KEY {
            q.pop_front();
        }
        q.push_back(fault);
    }

    pub(crate) fn pop(&self, key: &str) -> Option<Fault> {
        let mut queues = lock(&self.queues);
        let q = queues.get_mut(key)?;
        let fault = q.pop_front();
        if q.is_empty() {
            queues.remove(key);
        }
        fault
    }

    /// Drops every queued fault (standing faults stay).
    pub(crate) fn clear(&self) {
        lock(&self.queues).clear();
    }

    /// Sets the standing fault of `scope`, replacing any; `until: None` lasts until cleared.
    pub(crate) fn set_standing(&self, scope: Scope, fault: Fault, until: Option<Instant>) {
        lock(&self.standing).insert(scope, Standing { fault, until });
    }

    pub(crate) fn clear_standing(&self, scope: &Scope) {
        lock(&self.standing).remove(scope);
    }

    /// The standing fault a request of `key` (of organization `org`) shows at `now`: the
    /// key's own, else its organization's.
    pub(crate) fn standing(&self, key: &str, org: &str, now: Instant) -> Option<Fault> {
        let mut standing = lock(&self.standing);
        standing.retain(|_, s| s.until.is_none_or(|until| until > now));
        standing
            .get(&Scope::Key(key.to_owned()))
            .or_else(|| standing.get(&Scope::Org(org.to_owned())))
            .map(|s| s.fault.clone())
    }

    /// The fault the next request of `key` shows: a queued one first, then a standing one.
    pub(crate) fn draw(&self, key: &str, org: &str, now: Instant) -> Option<Fault> {
        self.pop(key).or_else(|| self.standing(key, org, now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Clock;

    #[test]
    fn serde_form_round_trips() -> Result<(), serde_json::Error> {
        let all = [
            Fault::Status500,
            Fault::Status503 { retry_after_secs: Some(2) },
            Fault::Status503 { retry_after_secs: None },
            Fault::RateLimited { retry_after_secs: 3 },
            Fault::InvalidKey,
            Fault::InsufficientQuota,
            Fault::CutAfterEvents(4),
            Fault::SlowFirstByte(Duration::from_millis(250)),
            Fault::SlowDeltas(Duration::from_millis(100)),
            Fault::ModelNotFound,
            Fault::QuotesKey,
        ];
        for fault in all {
            let text = serde_json::to_string(&fault)?;
            let back: Fault = serde_json::from_str(&text)?;
            assert_eq!(back, fault, "{text}");
        }
        let parsed: Fault = serde_json::from_str(r#"{"type":"cut_after_events","events":2}"#)?;
        assert_eq!(parsed, Fault::CutAfterEvents(2));
        Ok(())
    }

    #[test]
    fn queues_are_fifo_per_key() {
        let q = FaultBook::default();
        q.push("k1", Fault::Status500);
        q.push("k1", Fault::InvalidKey);
        q.push("k2", Fault::ModelNotFound);
        assert_eq!(q.pop("k1"), Some(Fault::Status500));
        assert_eq!(q.pop("k2"), Some(Fault::ModelNotFound));
        assert_eq!(q.pop("k1"), Some(Fault::InvalidKey));
        assert_eq!(q.pop("k1"), None);
    }

    #[test]
    fn standing_faults_last_until_cleared_or_expired() {
        let book = FaultBook::default();
        let t0 = Clock::default().now();
        let minute = Duration::from_secs(60);
        book.set_standing(Scope::Key("k1".into()), Fault::Status500, Some(t0 + minute));
        book.set_standing(Scope::Org("org-a".into()), Fault::InvalidKey, None);
        // A key's own standing fault wins over its organization's; queued faults win over both.
        book.push("k1", Fault::ModelNotFound);
        assert_eq!(book.draw("k1", "org-a", t0), Some(Fault::ModelNotFound));
        assert_eq!(book.draw("k1", "org-a", t0), Some(Fault::Status500));
        assert_eq!(book.draw("k1", "org-a", t0), Some(Fault::Status500));
        assert_eq!(book.draw("k2", "org-a", t0), Some(Fault::InvalidKey));
        assert_eq!(book.draw("k3", "org-b", t0), None);
        // At its deadline the key's fault has expired, and the organization's shows again.
        assert_eq!(book.draw("k1", "org-a", t0 + minute), Some(Fault::InvalidKey));
        book.clear_standing(&Scope::Org("org-a".into()));
        assert_eq!(book.draw("k1", "org-a", t0), None);
        assert_eq!(book.draw("k2", "org-a", t0), None);
        book.set_standing(Scope::Key("k1".into()), Fault::Status500, None);
        book.clear();
        assert_eq!(book.draw("k1", "org-a", t0), Some(Fault::Status500), "clear drops queued faults only");
        book.clear_standing(&Scope::Key("k1".into()));
        assert_eq!(book.draw("k1", "org-a", t0), None);
    }
}
