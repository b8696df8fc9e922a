//! The prompt cache of one organization: prefix block hashes with a TTL, least recently used
//! entries evicted first.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use crate::prompt::{CACHE_STEP_TOKENS, MIN_CACHE_TOKENS};

/// Upper bound on cached prefixes per organization.
pub(crate) const CACHE_CAPACITY: usize = 200_000;

/// Index of the first block hash that names a cacheable prefix.
const FIRST_CACHEABLE: usize = (MIN_CACHE_TOKENS / CACHE_STEP_TOKENS) as usize - 1;

#[derive(Debug)]
pub(crate) struct PromptCache {
    ttl: Duration,
    capacity: usize,
    /// Bound: `capacity` entries.
    entries: HashMap<[u8; 32], Entry>,
    /// Use order, oldest first; stale positions are skipped. Bound: 4 × `capacity`, compacted.
    order: VecDeque<([u8; 32], u64)>,
    next_use: u64,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    expires: Instant,
    last_use: u64,
}

impl PromptCache {
    pub(crate) fn new(ttl: Duration) -> Self {
        Self::with_capacity(ttl, CACHE_CAPACITY)
    }

    pub(crate) fn with_capacity(ttl: Duration, capacity: usize) -> Self {
        PromptCache { ttl, capacity: capacity.max(1), entries: HashMap::new(), order: VecDeque::new(), next_use: 0 }
    }

    /// Tokens of the longest cached prefix among `hashes` (see
    /// [`crate::prompt::Prompt::block_hashes`]); a hit refreshes that entry.
    pub(crate) fn lookup(&mut self, hashes: &[[u8; 32]], now: Instant) -> u64 {
        for k in (FIRST_CACHEABLE..hashes.len()).rev() {
            let h = hashes[k];
            match self.entries.get(&h) {
                Some(e) if e.expires > now => {
                    self.touch(h, now);
                    return (k as u64 + 1) * CACHE_STEP_TOKENS;
                }
                Some(_) => {
                    self.entries.remove(&h);
                }
                None => {}
            }
        }
        0
    }

    /// Caches every cacheable prefix of a served prompt.
    pub(crate) fn insert(&mut self, hashes: &[[u8; 32]], now: Instant) {
        for &h in hashes.iter().skip(FIRST_CACHEABLE) {
            self.touch(h, now);
        }
        while self.entries.len() > self.capacity {
            let Some((h, used)) = self.order.pop_front() else {
                break;
            };
            if self.entries.get(&h).is_some_and(|e| e.last_use == used) {
                self.entries.remove(&h);
            }
        }
        if self.order.len() > self.capacity.saturating_mul(4) {
            let entries = &self.entries;
            self.order.retain(|(h, used)| entries.get(h).is_some_and(|e| e.last_use == *used));
        }
    }

    fn touch(&mut self, h: [u8; 32], now: Instant) {
        self.next_use += 1;
        let use_no = self.next_use;
        self.entries.insert(h, Entry { expires: now + self.ttl, last_use: use_no });
        self.order.push_back((h, use_no));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Clock;

    fn hashes(n: usize, salt: u8) -> Vec<[u8; 32]> {
        (0..n)
            .map(|i| {
                let mut h = [salt; 32];
                h[0] = u8::try_from(i % 256).unwrap_or(0);
                h[1] = u8::try_from(i / 256).unwrap_or(0);
                h
            })
            .collect()
    }

    #[test]
    fn short_prefixes_are_never_cached() {
        let mut c = PromptCache::new(Duration::from_secs(60));
        let now = Clock::default().now();
        let h = hashes(7, 1);
        c.insert(&h, now);
        assert_eq!(c.lookup(&h, now), 0);
        let h = hashes(8, 1);
        c.insert(&h, now);
        assert_eq!(c.lookup(&h, now), 1024);
    }

    #[test]
    fn longest_match_and_expiry() {
        let mut c = PromptCache::new(Duration::from_secs(10));
        let now = Clock::default().now();
        c.insert(&hashes(12, 1), now);
        assert_eq!(c.lookup(&hashes(20, 1), now), 12 * 128);
        assert_eq!(c.lookup(&hashes(20, 2), now), 0);
        assert_eq!(c.lookup(&hashes(20, 1), now + Duration::from_secs(11)), 0);
    }

    #[test]
    fn capacity_evicts_least_recently_used() {
        let mut c = PromptCache::with_capacity(Duration::from_secs(60), 10);
        let now = Clock::default().now();
        c.insert(&hashes(18, 1), now);
        assert!(c.len() <= 10);
        c.insert(&hashes(18, 2), now);
        assert!(c.len() <= 10);
        assert_eq!(c.lookup(&hashes(18, 2), now), 18 * 128);
    }
}
