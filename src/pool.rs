//! Live state of every pooled key: health, cooldowns, in-flight counts, learned organization and simple
//! counters. Readers take a lock-free snapshot (`view`); state changes only through `apply(Outcome)`.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use serde::Serialize;
use tokio::time::Instant;

use crate::keys::{KeyEntry, KeyId, KeySource, Provider};
use crate::router::{Health, KeyView, PoolView};

/// What happened when a key was used; the only way pool state changes.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The key.
    pub key: KeyId,
    /// When it was observed.
    pub at: Instant,
    /// What happened.
    pub kind: OutcomeKind,
    /// The `openai-organization` the upstream reported, if any.
    pub org: Option<String>,
}

/// The effect of one upstream attempt on the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutcomeKind {
    /// The key served the request (any 2xx).
    Served,
    /// The client's request was refused for its own reasons (4xx other than auth and rate limits).
    ClientError,
    /// Rate limited: cool the key for this long.
    RateLimited {
        /// How long.
        cooldown: Duration,
    },
    /// The provider rejected the key.
    Rejected,
    /// The upstream failed (5xx, connection, timeout).
    Failed,
}

/// Live state of one key (replaced whole on every change).
#[derive(Clone, Debug)]
struct Live {
    health: Health,
    learned_org: Option<String>,
    last_status: Option<u16>,
}

struct Slot {
    entry: KeyEntry,
    in_flight: AtomicU32,
    served: AtomicU64,
    failed: AtomicU64,
    live: ArcSwap<Live>,
}

/// The pool of keys.
pub struct Pool {
    // Replaced only when keys are added or removed; bounded by `router::MAX_KEYS`.
    slots: ArcSwap<Vec<Arc<Slot>>>,
}

/// A key currently serving a request; the in-flight count drops when this is dropped.
pub struct InFlight {
    slot: Arc<Slot>,
}

impl InFlight {
    /// The key being used.
    pub fn entry(&self) -> &KeyEntry {
        &self.slot.entry
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.slot.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A key's state as shown by the status API and `keymux keys list`. Never holds the secret.
#[derive(Clone, Debug, Serialize)]
pub struct KeyStatus {
    /// Stable id.
    pub id: KeyId,
    /// Label.
    pub label: String,
    /// Provider.
    pub provider: Provider,
    /// Where the key came from.
    pub source: KeySource,
    /// Organization set by the user.
    pub org: Option<String>,
    /// Organization learned from upstream.
    pub learned_org: Option<String>,
    /// `ready`, `cooling`, `invalid` or `disabled`.
    pub health: &'static str,
    /// Milliseconds of cooldown left.
    pub cooldown_ms: u64,
    /// Requests in flight.
    pub in_flight: u32,
    /// Requests served since start.
    pub served: u64,
    /// Upstream failures since start.
    pub failed: u64,
    /// Last upstream status.
    pub last_status: Option<u16>,
}

impl Pool {
    /// A pool of these keys (at most `router::MAX_KEYS`; extra keys are refused by the caller).
    pub fn new(entries: Vec<KeyEntry>) -> Self {
        let slots = entries
            .into_iter()
            .take(crate::router::MAX_KEYS)
            .map(|entry| {
                Arc::new(Slot {
                    entry,
                    in_flight: AtomicU32::new(0),
                    served: AtomicU64::new(0),
                    failed: AtomicU64::new(0),
                    live: ArcSwap::from_pointee(Live {
                        health: Health::Ready,
                        learned_org: None,
                        last_status: None,
                    }),
                })
            })
            .collect();
        Self {
            slots: ArcSwap::from_pointee(slots),
        }
    }

    /// How many keys.
    pub fn len(&self) -> usize {
        self.slots.load().len()
    }

    /// Whether the pool is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A snapshot for the router.
    pub fn view(&self) -> PoolView {
        let slots = self.slots.load();
        PoolView {
            keys: slots
                .iter()
                .map(|s| {
                    let live = s.live.load();
                    KeyView {
                        id: s.entry.id.clone(),
                        org: s.entry.org.clone().or_else(|| live.learned_org.clone()),
                        in_flight: s.in_flight.load(Ordering::Acquire),
                        health: live.health,
                    }
                })
                .collect(),
        }
    }

    /// Marks a key as serving one more request. `None` if the key left the pool.
    pub fn begin(&self, key: &KeyId) -> Option<InFlight> {
        let slot = self.slot(key)?;
        slot.in_flight.fetch_add(1, Ordering::AcqRel);
        Some(InFlight { slot })
    }

    fn slot(&self, key: &KeyId) -> Option<Arc<Slot>> {
        self.slots
            .load()
            .iter()
            .find(|s| &s.entry.id == key)
            .cloned()
    }

    /// Records what happened on a key.
    pub fn apply(&self, outcome: &Outcome) {
        let Some(slot) = self.slot(&outcome.key) else {
            return;
        };
        match outcome.kind {
            OutcomeKind::Served | OutcomeKind::ClientError => {
                slot.served.fetch_add(1, Ordering::Relaxed);
            }
            OutcomeKind::RateLimited { .. } | OutcomeKind::Rejected | OutcomeKind::Failed => {
                slot.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
        slot.live.rcu(|live| {
            let mut next = Live::clone(live);
            match outcome.kind {
                OutcomeKind::Served | OutcomeKind::ClientError => {
                    // A success proves the key works: lift an expired cooldown or an earlier rejection
                    // (a transient 401 during key rotation must not stick).
                    if !matches!(next.health, Health::Cooling { until } if until > outcome.at)
                        && next.health != Health::Disabled
                    {
                        next.health = Health::Ready;
                    }
                }
                OutcomeKind::RateLimited { cooldown } => {
                    let until = outcome.at + cooldown;
                    next.health = match next.health {
                        Health::Cooling { until: old } if old > until => {
                            Health::Cooling { until: old }
                        }
                        Health::Disabled => Health::Disabled,
                        _ => Health::Cooling { until },
                    };
                }
                OutcomeKind::Rejected => {
                    if next.health != Health::Disabled {
                        next.health = Health::Invalid;
                    }
                }
                OutcomeKind::Failed => {}
            }
            if let Some(org) = &outcome.org {
                if next.learned_org.as_deref() != Some(org) {
                    next.learned_org = Some(org.clone());
                }
            }
            next
        });
    }

    /// Status of every key, for the API and the CLI.
    pub fn status(&self, now: Instant) -> Vec<KeyStatus> {
        self.slots
            .load()
            .iter()
            .map(|s| {
                let live = s.live.load();
                let (health, cooldown_ms) = match live.health {
                    Health::Ready => ("ready", 0),
                    Health::Cooling { until } if until <= now => ("ready", 0),
                    Health::Cooling { until } => (
                        "cooling",
                        u64::try_from((until - now).as_millis()).unwrap_or(u64::MAX),
                    ),
                    Health::Invalid => ("invalid", 0),
                    Health::Disabled => ("disabled", 0),
                };
                KeyStatus {
                    id: s.entry.id.clone(),
                    label: s.entry.label.clone(),
                    provider: s.entry.provider,
                    source: s.entry.source,
                    org: s.entry.org.clone(),
                    learned_org: live.learned_org.clone(),
                    health,
                    cooldown_ms,
                    in_flight: s.in_flight.load(Ordering::Acquire),
                    served: s.served.load(Ordering::Relaxed),
                    failed: s.failed.load(Ordering::Relaxed),
                    last_status: live.last_status,
                }
            })
            .collect()
    }

    /// Records the last upstream status of a key (display only).
    pub fn note_status(&self, key: &KeyId, status: u16) {
        if let Some(slot) = self.slot(key) {
            slot.live.rcu(|live| {
                let mut next = Live::clone(live);
                next.last_status = Some(status);
                next
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secrets::Secret;

    fn entry(id: &str) -> KeyEntry {
        KeyEntry {
            id: KeyId::new(id),
            label: id.into(),
            provider: Provider::Openai,
            base_url: None,
            org: None,
            secret: Secret::new(format!("sk-{id}")),
            source: KeySource::Embedded,
        }
    }

    fn outcome(key: &str, at: Instant, kind: OutcomeKind) -> Outcome {
        Outcome {
            key: KeyId::new(key),
            at,
            kind,
            org: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn cooldown_expires_with_time() {
        let pool = Pool::new(vec![entry("a")]);
        let now = Instant::now();
        pool.apply(&outcome(
            "a",
            now,
            OutcomeKind::RateLimited {
                cooldown: Duration::from_secs(2),
            },
        ));
        assert_eq!(pool.status(Instant::now())[0].health, "cooling");
        tokio::time::advance(Duration::from_millis(2_001)).await;
        assert_eq!(pool.status(Instant::now())[0].health, "ready");
        // A shorter later cooldown never shortens a longer one.
        let now = Instant::now();
        pool.apply(&outcome(
            "a",
            now,
            OutcomeKind::RateLimited {
                cooldown: Duration::from_secs(10),
            },
        ));
        pool.apply(&outcome(
            "a",
            now,
            OutcomeKind::RateLimited {
                cooldown: Duration::from_secs(1),
            },
        ));
        assert!(pool.status(now)[0].cooldown_ms >= 9_000);
    }

    #[tokio::test(start_paused = true)]
    async fn in_flight_follows_guards_and_orgs_are_learned() {
        let pool = Pool::new(vec![entry("a"), entry("b")]);
        let g1 = pool.begin(&KeyId::new("a")).expect("a");
        let g2 = pool.begin(&KeyId::new("a")).expect("a");
        assert_eq!(pool.view().keys[0].in_flight, 2);
        drop(g1);
        assert_eq!(pool.view().keys[0].in_flight, 1);
        drop(g2);
        assert_eq!(pool.view().keys[0].in_flight, 0);
        assert!(pool.begin(&KeyId::new("zzz")).is_none());

        let mut o = outcome("b", Instant::now(), OutcomeKind::Served);
        o.org = Some("org-b".into());
        pool.apply(&o);
        assert_eq!(pool.view().keys[1].org.as_deref(), Some("org-b"));
    }

    #[tokio::test(start_paused = true)]
    async fn rejection_sticks_until_a_success() {
        let pool = Pool::new(vec![entry("a")]);
        pool.apply(&outcome("a", Instant::now(), OutcomeKind::Rejected));
        assert_eq!(pool.view().keys[0].health, Health::Invalid);
        pool.apply(&outcome("a", Instant::now(), OutcomeKind::Failed));
        assert_eq!(pool.view().keys[0].health, Health::Invalid);
        pool.apply(&outcome("a", Instant::now(), OutcomeKind::Served));
        assert_eq!(pool.view().keys[0].health, Health::Ready);
    }
}
