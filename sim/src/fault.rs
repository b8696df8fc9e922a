//! Faults that tests queue for a key, and the per-key FIFO queues that hold them.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::util::lock;

/// A misbehaviour the simulator shows on a key's next request instead of (or while) serving it.
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
        }
    }
}

/// Queued faults per key secret.
#[derive(Debug, Default)]
pub(crate) struct FaultQueues {
    /// Bound: one queue per key that ever had a fault; each queue holds at most
    /// [`MAX_QUEUED_PER_KEY`] faults (older ones are dropped first).
    queues: Mutex<HashMap<String, VecDeque<Fault>>>,
}

/// Upper bound on faults waiting for one key.
pub(crate) const MAX_QUEUED_PER_KEY: usize = 10_000;

impl FaultQueues {
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

    pub(crate) fn clear(&self) {
        lock(&self.queues).clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let q = FaultQueues::default();
        q.push("k1", Fault::Status500);
        q.push("k1", Fault::InvalidKey);
        q.push("k2", Fault::ModelNotFound);
        assert_eq!(q.pop("k1"), Some(Fault::Status500));
        assert_eq!(q.pop("k2"), Some(Fault::ModelNotFound));
        assert_eq!(q.pop("k1"), Some(Fault::InvalidKey));
        assert_eq!(q.pop("k1"), None);
    }
}
