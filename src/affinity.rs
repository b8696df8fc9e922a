//! Affinity tables: what Keymux remembers about sessions, in memory only, bounded in size and age.
//!
//! `SessionHints` remembers, per session (a keyed digest of its `prompt_cache_key`), the key that last
//! served one of its Responses requests, which is where its newest org-bound state was made (or, when a
//! frame's markers prove otherwise, the key they name). Codex opens a resumed session's WebSocket with a
//! prewarm frame that carries no markers; the hint sends that socket to the organization that holds the
//! session's state. It is used for nothing else.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::keys::KeyId;
use crate::markers::SessionKey;

/// Most sessions remembered; the oldest entry goes first.
pub const HINT_CAPACITY: usize = 10_000;
/// How long a hint lives without being refreshed (OpenAI's longest prompt-cache retention is about an hour).
pub const HINT_TTL: Duration = Duration::from_secs(60 * 60);

struct Entry {
    key: KeyId,
    at: Instant,
    generation: u64,
}

/// Session → key, bounded by `HINT_CAPACITY` entries and `HINT_TTL`.
#[derive(Default)]
pub struct SessionHints {
    inner: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    map: HashMap<SessionKey, Entry>,
    // Insertion order, for eviction: (session, generation). A refreshed session leaves a stale pair
    // behind, skipped on eviction; bounded at twice the capacity.
    order: VecDeque<(SessionKey, u64)>,
    generation: u64,
}

impl SessionHints {
    /// The key that last served this session, if remembered and fresh.
    pub fn get(&self, session: &SessionKey, now: Instant) -> Option<KeyId> {
        let table = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        table
            .map
            .get(session)
            .filter(|e| now.saturating_duration_since(e.at) < HINT_TTL)
            .map(|e| e.key.clone())
    }

    /// Remembers that `key` served this session.
    pub fn insert(&self, session: SessionKey, key: KeyId, now: Instant) {
        let mut table = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        table.generation += 1;
        let generation = table.generation;
        table.map.insert(
            session,
            Entry {
                key,
                at: now,
                generation,
            },
        );
        table.order.push_back((session, generation));
        while table.map.len() > HINT_CAPACITY || table.order.len() > 2 * HINT_CAPACITY {
            let Some((oldest, generation)) = table.order.pop_front() else {
                break;
            };
            // Drop it only if this is its latest insertion (otherwise a newer one is further back).
            if table
                .map
                .get(&oldest)
                .is_some_and(|e| e.generation == generation)
            {
                table.map.remove(&oldest);
            }
        }
    }

    /// How many sessions are remembered.
    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .map
            .len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::markers::Markers;
    use crate::secrets::Secret;

    #[tokio::test(start_paused = true)]
    async fn hints_expire_and_stay_bounded() {
        let m = Markers::new(&Secret::new("t"));
        let hints = SessionHints::default();
        let s = m.session_digest("responses", "sess-1");
        hints.insert(s, KeyId::new("k_a"), Instant::now());
        assert_eq!(hints.get(&s, Instant::now()), Some(KeyId::new("k_a")));
        tokio::time::advance(HINT_TTL + Duration::from_secs(1)).await;
        assert_eq!(hints.get(&s, Instant::now()), None);

        for i in 0..(HINT_CAPACITY + 500) {
            hints.insert(
                m.session_digest("responses", &format!("s{i}")),
                KeyId::new("k_a"),
                Instant::now(),
            );
        }
        assert_eq!(hints.len(), HINT_CAPACITY);
        assert!(
            hints
                .get(&m.session_digest("responses", "s0"), Instant::now())
                .is_none(),
            "oldest evicted"
        );
        assert!(hints
            .get(
                &m.session_digest("responses", &format!("s{}", HINT_CAPACITY + 499)),
                Instant::now()
            )
            .is_some());
    }
}
