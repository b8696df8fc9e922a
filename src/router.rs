//! The routing decision: a pure function of the request's facts, a snapshot of the pool and the time.
//! No I/O, no clock reads, no randomness, no logging. The `Decision` it returns is exactly what the
//! dashboard and the event stream show.

use serde::Serialize;
use tokio::time::Instant;

use crate::facts::RequestFacts;
use crate::keys::KeyId;

/// Most keys a pool may hold; keeps every per-decision list small.
pub const MAX_KEYS: usize = 64;
/// Most upstream attempts for one request, whatever the config says.
pub const MAX_ATTEMPTS: usize = 4;

/// A key's health as the router sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    /// Usable.
    Ready,
    /// Rate limited until then.
    Cooling {
        /// When the cooldown ends.
        until: Instant,
    },
    /// The provider rejected the key (401/403).
    Invalid,
    /// Switched off by the user.
    Disabled,
}

/// One key in a pool snapshot.
#[derive(Clone, Debug)]
pub struct KeyView {
    /// Stable id.
    pub id: KeyId,
    /// Organization, set or learned.
    pub org: Option<String>,
    /// Requests currently being served by this key.
    pub in_flight: u32,
    /// Health.
    pub health: Health,
}

/// A snapshot of the pool, in the pool's stable key order.
#[derive(Clone, Debug, Default)]
pub struct PoolView {
    /// The keys.
    pub keys: Vec<KeyView>,
}

/// Where an affinity signal came from. Affinities arrive in later capabilities; today there is none.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AffinitySource {
    /// No affinity signal was used.
    None,
    /// The request's `prompt_cache_key`.
    PromptCacheKey,
    /// A digest of the prompt prefix.
    PromptPrefix,
}

/// What became of the affinity signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AffinityState {
    /// The request carried no signal.
    NoSignal,
    /// A signal, but nothing remembered for it.
    CacheMiss,
    /// The remembered key was chosen.
    Hit,
    /// The remembered key could not take the request.
    TargetUnavailable,
    /// Affinity is switched off.
    Disabled,
    /// The affinity table could not be consulted.
    CacheUnavailable,
}

/// Why a key was skipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SkipWhy {
    /// Rate limited; frees in that many milliseconds.
    Cooling {
        /// Milliseconds left.
        remaining_ms: u64,
    },
    /// Rejected by the provider.
    Invalid,
    /// Switched off by the user.
    Disabled,
}

/// One line of a decision's explanation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "rule", rename_all = "snake_case")]
pub enum Reason {
    /// The chosen key had the fewest requests in flight.
    LeastInFlight {
        /// Its in-flight count.
        in_flight: u32,
        /// How many usable keys were compared.
        candidates: usize,
    },
    /// Several keys had the same load; a stable hash of the request picked one.
    TieBrokenByHash {
        /// How many keys were tied.
        tied: usize,
    },
    /// A key was left out.
    Skipped {
        /// Which.
        key: KeyId,
        /// Why.
        why: SkipWhy,
    },
}

/// Why no key can take the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Refusal {
    /// The pool is empty.
    NoKeys,
    /// Every usable key is cooling; the first frees after that many whole seconds (at least 1).
    AllCooling {
        /// Seconds until the first key frees.
        retry_after_secs: u64,
        /// Keys cooling.
        cooling: usize,
    },
    /// No key is usable at all.
    NoUsableKey {
        /// Keys that are invalid or disabled.
        unusable: usize,
    },
}

/// The routing decision for one request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Decision {
    /// The request's gateway-local number.
    pub seq: u64,
    /// The key to try first.
    pub choice: Option<KeyId>,
    /// Keys to try next, in order, if the choice fails before any byte reached the client.
    pub fallbacks: Vec<KeyId>,
    /// The explanation, one line per rule applied (bounded by `MAX_KEYS + 2`).
    pub reasons: Vec<Reason>,
    /// Where the affinity signal came from.
    pub affinity_source: AffinitySource,
    /// What became of it.
    pub affinity_state: AffinityState,
    /// Whether a hard binding (previous response, WebSocket) was found and used.
    pub continuity_hit: bool,
    /// Set when no key can take the request.
    pub refusal: Option<Refusal>,
}

impl Decision {
    /// The choice followed by the fallbacks.
    pub fn candidates(&self) -> impl Iterator<Item = &KeyId> {
        self.choice.iter().chain(self.fallbacks.iter())
    }
}

/// Chooses the keys for a request: the usable key with the fewest requests in flight, ties broken by a
/// stable hash of (request number, key id) so equal keys share the load evenly and a given request
/// always ranks them the same way. At most `max_attempts` candidates are returned.
pub fn decide(
    facts: &RequestFacts,
    view: &PoolView,
    now: Instant,
    max_attempts: usize,
) -> Decision {
    let max_attempts = max_attempts.clamp(1, MAX_ATTEMPTS);
    let mut reasons = Vec::new();
    let mut usable: Vec<&KeyView> = Vec::new();
    let mut earliest_free: Option<Instant> = None;
    let mut cooling = 0usize;
    let mut unusable = 0usize;

    for key in view.keys.iter().take(MAX_KEYS) {
        let why = match key.health {
            Health::Ready => None,
            Health::Cooling { until } if until <= now => None,
            Health::Cooling { until } => {
                cooling += 1;
                earliest_free = Some(earliest_free.map_or(until, |e| e.min(until)));
                Some(SkipWhy::Cooling {
                    remaining_ms: millis(until - now),
                })
            }
            Health::Invalid => {
                unusable += 1;
                Some(SkipWhy::Invalid)
            }
            Health::Disabled => {
                unusable += 1;
                Some(SkipWhy::Disabled)
            }
        };
        match why {
            None => usable.push(key),
            Some(why) => reasons.push(Reason::Skipped {
                key: key.id.clone(),
                why,
            }),
        }
    }

    let mut decision = Decision {
        seq: facts.seq,
        choice: None,
        fallbacks: Vec::new(),
        reasons: Vec::new(),
        affinity_source: AffinitySource::None,
        affinity_state: AffinityState::NoSignal,
        continuity_hit: false,
        refusal: None,
    };

    if usable.is_empty() {
        decision.refusal = Some(match (view.keys.is_empty(), earliest_free) {
            (true, _) => Refusal::NoKeys,
            (false, Some(first)) => Refusal::AllCooling {
                retry_after_secs: whole_seconds_ceil(first - now),
                cooling,
            },
            (false, None) => Refusal::NoUsableKey { unusable },
        });
        decision.reasons = reasons;
        return decision;
    }

    let candidates = usable.len();
    usable.sort_by_key(|k| (k.in_flight, std::cmp::Reverse(tie_hash(facts.seq, &k.id))));
    let best = usable[0].in_flight;
    let tied = usable.iter().take_while(|k| k.in_flight == best).count();

    let mut ranked = usable.into_iter().take(max_attempts).map(|k| k.id.clone());
    decision.choice = ranked.next();
    decision.fallbacks = ranked.collect();
    let mut explained = vec![Reason::LeastInFlight {
        in_flight: best,
        candidates,
    }];
    if tied > 1 {
        explained.push(Reason::TieBrokenByHash { tied });
    }
    explained.extend(reasons);
    decision.reasons = explained;
    decision
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn whole_seconds_ceil(d: std::time::Duration) -> u64 {
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    secs.max(1)
}

/// A stable 64-bit hash of (request number, key id): FNV-1a folded through a SplitMix64 finaliser.
/// Stable across runs and platforms, unlike `std`'s hasher, so a decision can be replayed.
pub fn tie_hash(seq: u64, key: &KeyId) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in seq.to_le_bytes().iter().chain(key.as_str().as_bytes()) {
        h ^= u64::from(*byte);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::Operation;
    use std::collections::BTreeMap;
    use std::time::Duration;

    fn facts(seq: u64) -> RequestFacts {
        RequestFacts {
            seq,
            operation: Operation::ResponsesCreate,
            model: Some("gpt-5.5".into()),
            stream: true,
        }
    }

    fn key(id: &str, in_flight: u32, health: Health) -> KeyView {
        KeyView {
            id: KeyId::new(id),
            org: None,
            in_flight,
            health,
        }
    }

    fn ids(d: &Decision) -> Vec<&str> {
        d.candidates().map(KeyId::as_str).collect()
    }

    #[test]
    fn table_of_decisions() {
        let now = Instant::now();
        let later = now + Duration::from_millis(2_500);
        struct Case {
            name: &'static str,
            keys: Vec<KeyView>,
            want_choice: Option<&'static str>,
            want_refusal: Option<Refusal>,
        }
        let cases = vec![
            Case {
                name: "least in flight wins",
                keys: vec![
                    key("a", 3, Health::Ready),
                    key("b", 1, Health::Ready),
                    key("c", 2, Health::Ready),
                ],
                want_choice: Some("b"),
                want_refusal: None,
            },
            Case {
                name: "cooling key is skipped even when idle",
                keys: vec![
                    key("a", 0, Health::Cooling { until: later }),
                    key("b", 5, Health::Ready),
                ],
                want_choice: Some("b"),
                want_refusal: None,
            },
            Case {
                name: "expired cooldown is usable",
                keys: vec![
                    key("a", 0, Health::Cooling { until: now }),
                    key("b", 5, Health::Ready),
                ],
                want_choice: Some("a"),
                want_refusal: None,
            },
            Case {
                name: "invalid and disabled keys are skipped",
                keys: vec![
                    key("a", 0, Health::Invalid),
                    key("b", 0, Health::Disabled),
                    key("c", 9, Health::Ready),
                ],
                want_choice: Some("c"),
                want_refusal: None,
            },
            Case {
                name: "empty pool",
                keys: vec![],
                want_choice: None,
                want_refusal: Some(Refusal::NoKeys),
            },
            Case {
                name: "all cooling gives whole seconds, rounded up",
                keys: vec![
                    key("a", 0, Health::Cooling { until: later }),
                    key(
                        "b",
                        0,
                        Health::Cooling {
                            until: later + Duration::from_secs(5),
                        },
                    ),
                    key("c", 0, Health::Invalid),
                ],
                want_choice: None,
                want_refusal: Some(Refusal::AllCooling {
                    retry_after_secs: 3,
                    cooling: 2,
                }),
            },
            Case {
                name: "nothing usable",
                keys: vec![key("a", 0, Health::Invalid), key("b", 0, Health::Disabled)],
                want_choice: None,
                want_refusal: Some(Refusal::NoUsableKey { unusable: 2 }),
            },
        ];
        for case in cases {
            let d = decide(&facts(7), &PoolView { keys: case.keys }, now, 3);
            assert_eq!(
                d.choice.as_ref().map(KeyId::as_str),
                case.want_choice,
                "{}",
                case.name
            );
            assert_eq!(d.refusal, case.want_refusal, "{}", case.name);
            assert!(!d.continuity_hit, "{}", case.name);
            assert_eq!(d.affinity_source, AffinitySource::None, "{}", case.name);
        }
    }

    #[test]
    fn fallbacks_are_ranked_and_capped() {
        let now = Instant::now();
        let view = PoolView {
            keys: vec![
                key("a", 4, Health::Ready),
                key("b", 1, Health::Ready),
                key("c", 2, Health::Ready),
                key("d", 3, Health::Ready),
                key("e", 0, Health::Invalid),
            ],
        };
        let d = decide(&facts(1), &view, now, 3);
        assert_eq!(ids(&d), ["b", "c", "d"]);
        assert!(d.reasons.contains(&Reason::Skipped {
            key: KeyId::new("e"),
            why: SkipWhy::Invalid
        }));
        let d = decide(&facts(1), &view, now, 99);
        assert_eq!(d.candidates().count(), MAX_ATTEMPTS);
    }

    #[test]
    fn ties_spread_evenly_and_replay_identically() {
        let now = Instant::now();
        let view = PoolView {
            keys: vec![
                key("k_a", 0, Health::Ready),
                key("k_b", 0, Health::Ready),
                key("k_c", 0, Health::Ready),
            ],
        };
        let mut counts: BTreeMap<String, u32> = BTreeMap::new();
        for seq in 0..3000 {
            let d = decide(&facts(seq), &view, now, 3);
            assert_eq!(d, decide(&facts(seq), &view, now, 3), "deterministic");
            assert!(d.reasons.contains(&Reason::TieBrokenByHash { tied: 3 }));
            *counts
                .entry(d.choice.expect("chosen").to_string())
                .or_default() += 1;
        }
        for (k, n) in &counts {
            assert!((900..=1100).contains(n), "{k} got {n} of 3000");
        }
    }

    #[test]
    fn decision_serializes_without_secrets() {
        let now = Instant::now();
        let view = PoolView {
            keys: vec![
                key(
                    "k_a",
                    0,
                    Health::Cooling {
                        until: now + Duration::from_secs(1),
                    },
                ),
                key("k_b", 0, Health::Ready),
            ],
        };
        let json = serde_json::to_value(decide(&facts(3), &view, now, 3)).expect("json");
        assert_eq!(json["choice"], "k_b");
        assert_eq!(json["affinity_source"], "none");
        assert_eq!(json["affinity_state"], "no_signal");
        assert_eq!(json["continuity_hit"], false);
        assert_eq!(json["reasons"][1]["rule"], "skipped");
        assert_eq!(json["reasons"][1]["why"]["kind"], "cooling");
    }
}
