//! Least-recently-used bookkeeping for the bounded tables (soft affinity, session hints, sessions):
//! which entry to forget when a table is full. A refreshed entry leaves a stale place behind in the
//! queue; the queue is compacted when stale places make it twice the capacity, so a few hot entries
//! never push out the rest, and the bookkeeping stays bounded.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

/// The recency of up to `capacity` entries.
#[derive(Debug)]
pub struct Recency<K> {
    capacity: usize,
    order: VecDeque<(K, u64)>,
    latest: HashMap<K, u64>,
    generation: u64,
}

impl<K: Clone + Eq + Hash> Recency<K> {
    /// Bookkeeping for at most `capacity` entries.
    pub fn new(capacity: usize) -> Self {
        Self { capacity: capacity.max(1), order: VecDeque::new(), latest: HashMap::new(), generation: 0 }
    }

    /// Marks `key` as just used; returns the entries to forget to stay within the capacity.
    pub fn touch(&mut self, key: K) -> Vec<K> {
        self.generation += 1;
        self.latest.insert(key.clone(), self.generation);
        self.order.push_back((key, self.generation));
        if self.order.len() > 2 * self.capacity {
            let latest = &self.latest;
            self.order.retain(|(k, g)| latest.get(k) == Some(g));
        }
        let mut evicted = Vec::new();
        while self.latest.len() > self.capacity {
            let Some((oldest, generation)) = self.order.pop_front() else { break };
            if self.latest.get(&oldest) == Some(&generation) {
                self.latest.remove(&oldest);
                evicted.push(oldest);
            }
        }
        evicted
    }

    /// Places in the queue (at most twice the capacity).
    pub fn places(&self) -> usize {
        self.order.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hot_entries_never_push_out_the_rest() {
        let mut r = Recency::new(100);
        for n in 0..100 {
            assert!(r.touch(n).is_empty());
        }
        for _ in 0..10_000 {
            assert!(r.touch(7).is_empty(), "the table is not over its capacity");
        }
        assert!(r.places() <= 200);
        assert_eq!(r.touch(1_000), vec![0], "the least recently used goes first");
        assert_eq!(r.touch(1_001), vec![1]);
    }
}
