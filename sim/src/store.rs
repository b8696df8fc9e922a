//! Stored responses of one organization (`store: true`), oldest evicted first.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use serde_json::{json, Value};

use crate::prompt::Transcript;

/// Upper bound on stored responses per organization.
pub(crate) const STORE_CAPACITY: usize = 10_000;
/// Upper bound on the serialized size of one organization's stored responses and input items.
pub(crate) const STORE_BYTES: usize = 256 * 1024 * 1024;

#[derive(Debug, Clone)]
pub(crate) struct Stored {
    /// The response object as `GET /v1/responses/{id}` returns it.
    pub response: Value,
    /// This request's own input items, with ids.
    pub input_items: Vec<Value>,
    /// The rendered conversation up to and including this response's output.
    pub transcript: Arc<Transcript>,
}

#[derive(Debug, Default)]
pub(crate) struct ResponseStore {
    /// Bound: [`STORE_CAPACITY`] responses and [`STORE_BYTES`] bytes; each with its size.
    map: HashMap<String, (Stored, usize)>,
    bytes: usize,
    /// Insertion order. Bound: [`STORE_CAPACITY`] ids (deleted ids are skipped).
    order: VecDeque<String>,
}

/// What a cancel request found.
pub(crate) enum CancelOutcome {
    Cancelled(Value),
    NotCancellable(String),
    Missing,
}

impl ResponseStore {
    pub(crate) fn insert(&mut self, id: String, stored: Stored) {
        let size =
            stored.response.to_string().len() + stored.input_items.iter().map(|i| i.to_string().len()).sum::<usize>();
        self.bytes += size;
        match self.map.insert(id.clone(), (stored, size)) {
            Some((_, old)) => self.bytes -= old,
            None => self.order.push_back(id),
        }
        while self.map.len() > STORE_CAPACITY || (self.bytes > STORE_BYTES && self.map.len() > 1) {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some((_, size)) = self.map.remove(&old) {
                self.bytes -= size;
            }
        }
        if self.order.len() > STORE_CAPACITY.saturating_mul(2) {
            let map = &self.map;
            self.order.retain(|id| map.contains_key(id));
        }
    }

    pub(crate) fn get(&self, id: &str) -> Option<&Stored> {
        self.map.get(id).map(|(s, _)| s)
    }

    pub(crate) fn transcript(&self, id: &str) -> Option<Arc<Transcript>> {
        self.map.get(id).map(|(s, _)| s.transcript.clone())
    }

    /// Replaces the stored object unless the response was cancelled meanwhile.
    pub(crate) fn finish(&mut self, id: &str, response: Value) {
        if let Some((s, _)) = self.map.get_mut(id) {
            if s.response["status"] != json!("cancelled") {
                s.response = response;
            }
        }
    }

    pub(crate) fn remove(&mut self, id: &str) -> bool {
        match self.map.remove(id) {
            Some((_, size)) => {
                self.bytes -= size;
                true
            }
            None => false,
        }
    }

    pub(crate) fn cancel(&mut self, id: &str) -> CancelOutcome {
        let Some((s, _)) = self.map.get_mut(id) else {
            return CancelOutcome::Missing;
        };
        let status = s.response["status"].as_str().unwrap_or("completed").to_owned();
        if status == "in_progress" || status == "queued" {
            s.response["status"] = json!("cancelled");
            CancelOutcome::Cancelled(s.response.clone())
        } else {
            CancelOutcome::NotCancellable(status)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(n: usize) -> Stored {
        Stored {
            response: json!({"id": format!("resp_{n}"), "status": "completed"}),
            input_items: vec![json!({"id": "msg_1", "role": "user", "content": "x"})],
            transcript: Transcript::extend(None, vec!["x\n".into()]),
        }
    }

    #[test]
    fn oldest_responses_are_evicted_at_capacity() {
        let mut store = ResponseStore::default();
        for n in 0..STORE_CAPACITY + 5 {
            store.insert(format!("resp_{n}"), stored(n));
        }
        assert!(store.get("resp_0").is_none());
        assert!(store.get("resp_4").is_none());
        assert!(store.get("resp_5").is_some());
        assert!(store.get(&format!("resp_{}", STORE_CAPACITY + 4)).is_some());
        assert!(store.remove("resp_5"));
        assert!(!store.remove("resp_5"));
    }

    #[test]
    fn cancel_only_in_progress_responses() {
        let mut store = ResponseStore::default();
        let mut s = stored(1);
        s.response["status"] = json!("in_progress");
        store.insert("resp_1".into(), s);
        store.insert("resp_2".into(), stored(2));
        assert!(matches!(store.cancel("resp_1"), CancelOutcome::Cancelled(v) if v["status"] == "cancelled"));
        store.finish("resp_1", json!({"status": "completed"}));
        assert_eq!(store.get("resp_1").map(|s| s.response["status"].clone()), Some(json!("cancelled")));
        assert!(matches!(store.cancel("resp_2"), CancelOutcome::NotCancellable(s) if s == "completed"));
        assert!(matches!(store.cancel("resp_3"), CancelOutcome::Missing));
    }
}
