//! Affinity tables: what Keymux remembers about sessions, in process memory only, bounded in size and
//! age, never persisted. Entries are keyed by `SessionKey`s (keyed HMACs), never by raw client values.
//!
//! Four tables use this type:
//! * the soft-affinity table: per signal (`prompt_cache_key`, or a prompt-prefix digest), the key that
//!   last served it to a successful end. It keeps a session on a warm prompt cache.
//! * the session hints: per session, the key that last served one of its Responses requests. Codex
//!   opens a resumed session's WebSocket with a prewarm frame that carries no markers, and the hint sends
//!   that socket to the organization that holds the session's state. A request replaying encrypted
//!   content without a marker (a session begun before Keymux) tries the hint's organization first.
//!   The rescued table also remembers `OrgTag::UNMARKED` for a session whose unmarked content no
//!   organization could read, so it is dropped again rather than searched for again.
//! * the rescued sessions: per session, the organizations whose items Keymux dropped to keep it alive
//!   (rescue). Their items stay dropped on later turns, even once the organization has a usable key
//!   again: the session lives on where it was moved instead of dying on a mix Keymux caused.
//! * the misplaced sessions: per session, the organizations whose answer said they dropped its
//!   reasoning as another organization's (`pipeline::dropped`). The session is also moved off them
//!   (rescued table), but unlike a lost organization they never held its unmarked reasoning, so that is
//!   not dropped with them; finding the session's organization leaves them out. Same bounds as the
//!   rescued sessions.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use std::time::Instant;

use crate::keys::KeyId;
use crate::markers::SessionKey;
use crate::recency::Recency;

/// Default capacity of the session hints.
pub const HINT_CAPACITY: usize = 10_000;
/// Most rescued sessions remembered (each entry holds at most `markers::MAX_PINS` organization tags,
/// about 200 bytes: 2 MB at most).
pub const RESCUED_CAPACITY: usize = 10_000;
/// How long a rescued session is remembered without a turn: long enough for a session resumed the next
/// day to keep working.
pub const RESCUED_TTL: Duration = Duration::from_secs(48 * 60 * 60);
/// How long an entry lives without being refreshed by default (OpenAI's longest in-memory prompt-cache
/// retention is about an hour).
pub const DEFAULT_TTL: Duration = Duration::from_secs(60 * 60);

struct Entry<V> {
    value: V,
    at: Instant,
}

struct Inner<V> {
    map: HashMap<SessionKey, Entry<V>>,
    recency: Recency<SessionKey>,
}

/// Session → value (a key, by default), bounded by `capacity` entries and `ttl`.
pub struct Table<V = KeyId> {
    ttl: Duration,
    inner: Mutex<Inner<V>>,
}

impl<V: Clone> Table<V> {
    /// A table of at most `capacity` entries, each forgotten `ttl` after its last refresh.
    pub fn new(capacity: usize, ttl: Duration) -> Self {
        Self { ttl, inner: Mutex::new(Inner { map: HashMap::new(), recency: Recency::new(capacity) }) }
    }

    /// The value remembered for this session, if fresh.
    pub fn get(&self, session: &SessionKey, now: Instant) -> Option<V> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.map.get(session).filter(|e| now.saturating_duration_since(e.at) < self.ttl).map(|e| e.value.clone())
    }

    /// Remembers `value` for this session (for the hints: that key served it).
    pub fn insert(&self, session: SessionKey, value: V, now: Instant) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.map.insert(session, Entry { value, at: now });
        for gone in inner.recency.touch(session) {
            inner.map.remove(&gone);
        }
    }

    /// Forgets this session (its place in the recency bookkeeping goes when it is next pushed out).
    pub fn remove(&self, session: &SessionKey) {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).map.remove(session);
    }

    /// How many sessions are remembered.
    pub fn len(&self) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).map.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock_now() -> Instant {
        crate::clock::Clock::system().now()
    }
    use crate::digest::InstallKey;
    use crate::secrets::Secret;

    #[tokio::test(start_paused = true)]
    async fn entries_expire_and_the_table_stays_bounded() {
        let m = InstallKey::new(&Secret::new("t"));
        let table = Table::new(HINT_CAPACITY, DEFAULT_TTL);
        let s = m.session("responses", "sess-1");
        table.insert(s, KeyId::new("k_a"), clock_now());
        assert_eq!(table.get(&s, clock_now()), Some(KeyId::new("k_a")));
        tokio::time::advance(DEFAULT_TTL + Duration::from_secs(1)).await;
        assert_eq!(table.get(&s, clock_now()), None);

        for i in 0..(HINT_CAPACITY + 500) {
            table.insert(m.session("responses", &format!("s{i}")), KeyId::new("k_a"), clock_now());
        }
        assert_eq!(table.len(), HINT_CAPACITY);
        assert!(table.get(&m.session("responses", "s0"), clock_now()).is_none(), "oldest evicted");
        let newest = m.session("responses", &format!("s{}", HINT_CAPACITY + 499));
        assert!(table.get(&newest, clock_now()).is_some());
        // Refreshing an entry many times never grows the bookkeeping past its bound.
        for _ in 0..(3 * HINT_CAPACITY) {
            table.insert(newest, KeyId::new("k_b"), clock_now());
        }
        assert_eq!(table.get(&newest, clock_now()), Some(KeyId::new("k_b")));
        assert!(table.inner.lock().expect("lock").recency.places() <= 2 * HINT_CAPACITY);
        assert_eq!(table.len(), HINT_CAPACITY, "one hot session pushed out no other");
    }

    #[tokio::test(start_paused = true)]
    async fn the_rescued_sessions_stay_bounded() {
        let m = InstallKey::new(&Secret::new("t"));
        let table: Table<Vec<crate::markers::OrgTag>> = Table::new(RESCUED_CAPACITY, RESCUED_TTL);
        let org = m.org_tag(Some("org-a"), &KeyId::new("k_a"));
        for i in 0..(RESCUED_CAPACITY + 100) {
            table.insert(m.session("responses", &format!("s{i}")), vec![org], clock_now());
        }
        assert_eq!(table.len(), RESCUED_CAPACITY);
        let newest = m.session("responses", &format!("s{}", RESCUED_CAPACITY + 99));
        assert_eq!(table.get(&newest, clock_now()), Some(vec![org]));
        tokio::time::advance(RESCUED_TTL).await;
        assert_eq!(table.get(&newest, clock_now()), None, "forgotten after two days without a turn");
    }
}
