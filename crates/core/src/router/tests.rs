//! Table tests of every routing rule: facts, pool view and memory in, decision out.

use super::*;
use crate::budget::{BudgetState, Period};

fn clock_now() -> Instant {
    #[expect(clippy::disallowed_methods, reason = "a test's starting point; every later time is derived")]
    Instant::now()
}
use crate::facts::Operation;
use crate::markers::{Field, Markers, Pin};
use crate::secrets::Secret;
use std::collections::BTreeMap;
use std::time::Duration;

fn facts(seq: u64) -> RequestFacts {
    RequestFacts { model: Some("gpt-5.5".into()), stream: true, ..RequestFacts::new(seq, Operation::ResponsesCreate) }
}

fn markers() -> Markers {
    Markers::new(&Secret::new("router-tests"))
}

fn key(id: &str, in_flight: u32, health: Health) -> KeyView {
    let id = KeyId::new(id);
    KeyView {
        org_tag: markers().org_tag(None, &id),
        id,
        org: None,
        imported: false,
        plan: false,
        serves: true,
        budget: BudgetState::Open,
        budget_resets: None,
        in_flight,
        health,
        priority: 0,
        headroom: 1.0,
        exhausted_until: None,
        window_reserve: None,
        over_budget: false,
        model_ok: true,
        recent_starts: 0.0,
    }
}

/// A key of organization `org`.
fn org_key(id: &str, org: &str, in_flight: u32, health: Health) -> KeyView {
    let id = KeyId::new(id);
    KeyView { org_tag: markers().org_tag(Some(org), &id), org: Some(org.into()), ..key(id.as_str(), in_flight, health) }
}

fn pinned(seq: u64, key: &str, org: &str) -> RequestFacts {
    let id = KeyId::new(key);
    let mut f = facts(seq);
    f.pins.push(Pin { org: markers().org_tag(Some(org), &id), key: id, field: Field::EncryptedContent });
    f
}

fn policy(max_attempts: usize) -> Policy {
    Policy { max_attempts, ..Policy::default() }
}

fn ids(d: &Decision) -> Vec<&str> {
    d.candidates().map(KeyId::as_str).collect()
}

#[test]
fn table_of_decisions() {
    let now = clock_now();
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
            keys: vec![key("a", 3, Health::Ready), key("b", 1, Health::Ready), key("c", 2, Health::Ready)],
            want_choice: Some("b"),
            want_refusal: None,
        },
        Case {
            name: "cooling key is skipped even when idle",
            keys: vec![key("a", 0, Health::Cooling { until: later }), key("b", 5, Health::Ready)],
            want_choice: Some("b"),
            want_refusal: None,
        },
        Case {
            name: "expired cooldown is usable",
            keys: vec![key("a", 0, Health::Cooling { until: now }), key("b", 5, Health::Ready)],
            want_choice: Some("a"),
            want_refusal: None,
        },
        Case {
            name: "invalid and disabled keys are skipped",
            keys: vec![key("a", 0, Health::Rejected), key("b", 0, Health::Disabled), key("c", 9, Health::Ready)],
            want_choice: Some("c"),
            want_refusal: None,
        },
        Case { name: "empty pool", keys: vec![], want_choice: None, want_refusal: Some(Refusal::NoKeys) },
        Case {
            name: "all cooling gives whole seconds, rounded up",
            keys: vec![
                key("a", 0, Health::Cooling { until: later }),
                key("b", 0, Health::Cooling { until: later + Duration::from_secs(5) }),
                key("c", 0, Health::Rejected),
            ],
            want_choice: None,
            want_refusal: Some(Refusal::AllCooling { retry_after_secs: 3, cooling: 2 }),
        },
        Case {
            name: "nothing usable",
            keys: vec![key("a", 0, Health::Rejected), key("b", 0, Health::Disabled)],
            want_choice: None,
            want_refusal: Some(Refusal::NoUsableKey { unusable: 2 }),
        },
    ];
    for case in cases {
        let d = decide(&facts(7), &PoolView { keys: case.keys }, &Memory::default(), now, &policy(3));
        assert_eq!(d.choice.as_ref().map(KeyId::as_str), case.want_choice, "{}", case.name);
        assert_eq!(d.refusal, case.want_refusal, "{}", case.name);
        assert!(!d.continuity_hit, "{}", case.name);
        assert_eq!(d.affinity_source, AffinitySource::None, "{}", case.name);
    }
}

/// `any_open` (what a new WebSocket checks) says yes exactly when `decide` would place a request that
/// carries nothing but its operation.
#[test]
fn any_open_agrees_with_decide_for_a_plain_request() {
    let now = clock_now();
    let later = now + Duration::from_secs(3);
    let exhausted = KeyView { exhausted_until: Some(later), ..key("x", 0, Health::Ready) };
    let over_budget = KeyView { over_budget: true, ..key("o", 0, Health::Ready) };
    let pools = vec![
        vec![],
        vec![key("a", 0, Health::Ready)],
        vec![key("a", 0, Health::Cooling { until: later })],
        vec![key("a", 0, Health::Cooling { until: now })],
        vec![key("a", 0, Health::QuotaExhausted { until: later }), key("b", 0, Health::Disabled)],
        vec![key("a", 0, Health::Rejected), key("b", 3, Health::Ready)],
        vec![exhausted.clone()],
        vec![exhausted, over_budget.clone()],
        vec![over_budget],
    ];
    let plain = RequestFacts { stream: true, ..RequestFacts::new(1, Operation::ResponsesCreate) };
    for keys in pools {
        let view = PoolView { keys };
        let placed = decide(&plain, &view, &Memory::default(), now, &Policy::default()).refusal.is_none();
        assert_eq!(any_open(&view, now), placed, "{:?}", view.keys.iter().map(|k| k.health).collect::<Vec<_>>());
    }
}

#[test]
fn fallbacks_are_ranked_and_capped() {
    let now = clock_now();
    let view = PoolView {
        keys: vec![
            // Load counts in steps of two requests in flight: one step apart each.
            key("a", 6, Health::Ready),
            key("b", 1, Health::Ready),
            key("c", 2, Health::Ready),
            key("d", 4, Health::Ready),
            key("e", 0, Health::Rejected),
        ],
    };
    let d = decide(&facts(1), &view, &Memory::default(), now, &policy(3));
    assert_eq!(ids(&d), ["b", "c", "d"]);
    assert!(d.reasons.contains(&Reason::Skipped { key: KeyId::new("e"), why: SkipWhy::Invalid }));
    let d = decide(&facts(1), &view, &Memory::default(), now, &policy(99));
    assert_eq!(d.candidates().count(), MAX_ATTEMPTS);
}

#[test]
fn new_sessions_spread_by_recent_starts_and_replay_identically() {
    let now = clock_now();
    let mut view = PoolView {
        keys: vec![key("k_a", 0, Health::Ready), key("k_b", 0, Health::Ready), key("k_c", 0, Health::Ready)],
    };
    let mut counts: BTreeMap<String, u32> = BTreeMap::new();
    for seq in 0..3000 {
        let d = decide(&facts(seq), &view, &Memory::default(), now, &policy(3));
        assert_eq!(d, decide(&facts(seq), &view, &Memory::default(), now, &policy(3)), "deterministic");
        assert!(d.reasons.contains(&Reason::FewestRecentStarts { tied: 3 }));
        assert_eq!(d.route, Route::Balanced);
        let chosen = d.choice.expect("chosen");
        // What the pool does when the attempt begins: the chosen key started one more session.
        view.keys.iter_mut().filter(|k| k.id == chosen).for_each(|k| k.recent_starts += 1.0);
        *counts.entry(chosen.to_string()).or_default() += 1;
    }
    for (k, n) in &counts {
        assert_eq!(*n, 1000, "{k}: equal keys share new sessions exactly");
    }
    // A key back from a long absence has few recent starts: it takes the next sessions until it has
    // caught up, never more than the gap.
    view.keys[2].recent_starts = 997.0;
    let mut run = 0;
    while decide(&facts(run), &view, &Memory::default(), now, &policy(3)).choice == Some(KeyId::new("k_c")) {
        view.keys[2].recent_starts += 1.0;
        run += 1;
    }
    assert!((3..=4).contains(&run), "took {run} sessions to catch up a gap of 3");
}

#[test]
fn decision_serializes_without_secrets() {
    let now = clock_now();
    // Inputs that hold secrets and raw session values: a prompt_cache_key, a prompt, a key's secret in
    // the pool the view was taken from. None of them may reach the serialized decision.
    let install = crate::digest::InstallKey::new(&Secret::new("install-secret-never-shown"));
    let raw_cache_key = "raw-cache-key-01a227d7-ed08";
    let mut f = facts(3);
    f.prompt_tokens = 5_000;
    f.signal = Some(crate::facts::Signal {
        source: AffinitySource::PromptCacheKey,
        key: install.affinity("prompt_cache_key", &["scope"], raw_cache_key.as_bytes()),
    });
    let secret = Secret::new("sk-live-secret-never-shown");
    let fingerprint = install.fingerprint(&secret);
    let view = PoolView {
        keys: vec![
            key("k_a", 0, Health::Cooling { until: now + Duration::from_secs(1) }),
            key("k_b", 0, Health::Ready),
        ],
    };
    let memory = Memory { remembered: Remembered::Key(KeyId::new("k_b")), session_hint: None };
    let decision = decide(&f, &view, &memory, now, &policy(3));
    let text = serde_json::to_string(&decision).expect("json");
    for secret in [raw_cache_key, "sk-live-secret-never-shown", "install-secret-never-shown", fingerprint.as_str()] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }
    assert!(!format!("{decision:?}").contains(raw_cache_key));
    assert_eq!(decision.affinity_state, AffinityState::Hit);
    let view = PoolView {
        keys: vec![
            key("k_a", 0, Health::Cooling { until: now + Duration::from_secs(1) }),
            key("k_b", 0, Health::Ready),
        ],
    };
    let json = serde_json::to_value(decide(&facts(3), &view, &Memory::default(), now, &policy(3))).expect("json");
    assert_eq!(json["choice"], "k_b");
    assert_eq!(json["affinity_source"], "none");
    assert_eq!(json["affinity_state"], "no_signal");
    assert_eq!(json["continuity_hit"], false);
    assert_eq!(json["reasons"][1]["rule"], "skipped");
    assert_eq!(json["reasons"][1]["why"]["kind"], "cooling");
}

#[test]
fn encrypted_content_pins_to_the_organization() {
    let now = clock_now();
    let later = now + Duration::from_secs(4);
    let org = |o: &str, k: &str| markers().org_tag(Some(o), &KeyId::new(k));
    let two_orgs = |a1: u32, a2: u32, a1_health: Health, a2_health: Health| PoolView {
        keys: vec![
            org_key("a1", "org-a", a1, a1_health),
            org_key("a2", "org-a", a2, a2_health),
            org_key("b1", "org-b", 0, Health::Ready),
        ],
    };

    // The org's least-loaded key serves; the other org is never a candidate.
    let d = decide(
        &pinned(1, "a1", "org-a"),
        &two_orgs(3, 0, Health::Ready, Health::Ready),
        &Memory::default(),
        now,
        &policy(3),
    );
    assert_eq!(ids(&d), ["a2", "a1"]);
    assert_eq!(d.pin.as_ref().map(|p| p.exact), Some(false));
    // Equal load: the producing key first.
    let d = decide(
        &pinned(1, "a1", "org-a"),
        &two_orgs(0, 0, Health::Ready, Health::Ready),
        &Memory::default(),
        now,
        &policy(3),
    );
    assert_eq!(ids(&d), ["a1", "a2"]);
    assert_eq!(d.pin.as_ref().map(|p| p.exact), Some(true));
    // The whole org cooling: a 429 for the org, though another org is idle.
    let cooling = Health::Cooling { until: later };
    let d = decide(&pinned(1, "a1", "org-a"), &two_orgs(0, 0, cooling, cooling), &Memory::default(), now, &policy(3));
    assert_eq!(d.refusal, Some(Refusal::AllCooling { retry_after_secs: 4, cooling: 2 }));
    // One key of the org rejected: the other serves.
    let d = decide(
        &pinned(1, "a1", "org-a"),
        &two_orgs(0, 0, Health::Rejected, Health::Ready),
        &Memory::default(),
        now,
        &policy(3),
    );
    assert_eq!(ids(&d), ["a2"]);

    // The org is gone: rescue routes unpinned and names the org to drop; fail refuses.
    let only_b = PoolView { keys: vec![org_key("b1", "org-b", 0, Health::Ready)] };
    let d = decide(&pinned(1, "a1", "org-a"), &only_b, &Memory::default(), now, &policy(3));
    assert_eq!(ids(&d), ["b1"]);
    assert_eq!(d.rescued_orgs, vec![org("org-a", "a1")]);
    assert!(d.pin.is_none());
    let fail = Policy { lost_org: LostOrgPolicy::Fail, ..policy(3) };
    let d = decide(&pinned(1, "a1", "org-a"), &only_b, &Memory::default(), now, &fail);
    assert_eq!(d.refusal, Some(Refusal::LostOrg { key: KeyId::new("a1") }));

    // Items of a lost org beside items of a live org: drop the lost, pin to the live.
    let mut f = pinned(1, "a1", "org-a");
    f.pins.push(Pin { key: KeyId::new("b1"), org: org("org-b", "b1"), field: Field::ItemId });
    let d = decide(&f, &only_b, &Memory::default(), now, &policy(3));
    assert_eq!(ids(&d), ["b1"]);
    assert_eq!(d.rescued_orgs.len(), 1);
    assert!(d.pin.is_some());
    // Two live orgs: nobody can read both.
    let d = decide(&f, &two_orgs(0, 0, Health::Ready, Health::Ready), &Memory::default(), now, &policy(3));
    assert_eq!(d.refusal, Some(Refusal::MixedOrgs { keys: vec![KeyId::new("a1"), KeyId::new("b1")] }));

    // Affinity switched off: markers are ignored for routing, and the decision says so.
    let off = Policy { encrypted_affinity: false, ..policy(3) };
    let d =
        decide(&pinned(1, "a1", "org-a"), &two_orgs(3, 3, Health::Ready, Health::Ready), &Memory::default(), now, &off);
    assert_eq!(d.choice.as_ref().map(KeyId::as_str), Some("b1"));
    assert!(d.reasons.contains(&Reason::AffinityOff));
}

#[test]
fn continuity_binds_to_exactly_one_key() {
    let now = clock_now();
    let bound = |seq: u64, key: &str| {
        let id = KeyId::new(key);
        let mut f = facts(seq);
        f.continuity = Some(Pin { org: markers().org_tag(Some("org-a"), &id), key: id, field: Field::ResponseId });
        f
    };
    let view = |a1: Health| PoolView {
        keys: vec![
            org_key("a1", "org-a", 9, a1),
            org_key("a2", "org-a", 0, Health::Ready),
            org_key("b1", "org-b", 0, Health::Ready),
        ],
    };
    // Busy or not, only the key holding the response serves; no fallbacks (they would only answer
    // previous_response_not_found).
    let d = decide(&bound(1, "a1"), &view(Health::Ready), &Memory::default(), now, &policy(3));
    assert_eq!(ids(&d), ["a1"]);
    assert!(d.continuity_hit);
    assert!(d.reasons.contains(&Reason::ContinuityBinding { key: KeyId::new("a1") }));
    // Cooling: wait for it.
    let cooling = Health::Cooling { until: now + Duration::from_millis(1500) };
    let d = decide(&bound(1, "a1"), &view(cooling), &Memory::default(), now, &policy(3));
    assert_eq!(d.refusal, Some(Refusal::AllCooling { retry_after_secs: 2, cooling: 1 }));
    // Rejected, disabled or removed: a clear refusal, never a silent move.
    for health in [Health::Rejected, Health::Disabled] {
        let d = decide(&bound(1, "a1"), &view(health), &Memory::default(), now, &policy(3));
        assert_eq!(d.refusal, Some(Refusal::ContinuityLost { key: KeyId::new("a1") }));
        assert!(!d.continuity_hit);
    }
    let d = decide(&bound(1, "gone"), &view(Health::Ready), &Memory::default(), now, &policy(3));
    assert_eq!(d.refusal, Some(Refusal::ContinuityLost { key: KeyId::new("gone") }));
    // Switched off: routed like any request.
    let off = Policy { continuity: false, ..policy(3) };
    let d = decide(&bound(1, "a1"), &view(Health::Ready), &Memory::default(), now, &off);
    assert_ne!(d.choice, Some(KeyId::new("a1")));
    assert!(!d.continuity_hit);
    // An id without a marker is routed normally, and the decision says so.
    let mut f = facts(2);
    f.unmarked_response_id = true;
    let d = decide(&f, &view(Health::Ready), &Memory::default(), now, &policy(3));
    assert!(d.reasons.contains(&Reason::UnmarkedResponseId));
    assert!(!d.continuity_hit);
}

/// A cache-eligible request with a `prompt_cache_key` signal.
fn with_signal(seq: u64) -> RequestFacts {
    let install = crate::digest::InstallKey::new(&Secret::new("router-tests"));
    RequestFacts {
        prompt_tokens: 4_000,
        signal: Some(crate::facts::Signal {
            source: AffinitySource::PromptCacheKey,
            key: install.affinity("prompt_cache_key", &[], b"session"),
        }),
        ..facts(seq)
    }
}

fn remembers(key: &str) -> Memory {
    Memory { remembered: Remembered::Key(KeyId::new(key)), session_hint: None }
}

#[test]
#[expect(clippy::too_many_lines, reason = "a table test: one case per rule")]
fn table_of_soft_affinity() {
    let now = clock_now();
    struct Case {
        name: &'static str,
        facts: RequestFacts,
        keys: Vec<KeyView>,
        memory: Memory,
        policy: Policy,
        want_choice: &'static str,
        want_state: AffinityState,
        want_route: Route,
    }
    let three = |b_in_flight: u32, b_headroom: f32| {
        vec![
            org_key("a", "org-a", 0, Health::Ready),
            KeyView { headroom: b_headroom, ..org_key("b", "org-b", b_in_flight, Health::Ready) },
            org_key("b2", "org-b", 3, Health::Ready),
        ]
    };
    let short = RequestFacts { prompt_tokens: 20, ..with_signal(1) };
    let cases = vec![
        Case {
            name: "the remembered key wins over an idler key",
            facts: with_signal(1),
            keys: three(4, 1.0),
            memory: remembers("b"),
            policy: policy(3),
            want_choice: "b",
            want_state: AffinityState::Hit,
            want_route: Route::Affinity,
        },
        Case {
            name: "nothing remembered: balanced, a miss",
            facts: with_signal(1),
            keys: three(4, 1.0),
            memory: Memory { remembered: Remembered::Miss, session_hint: None },
            policy: policy(3),
            want_choice: "a",
            want_state: AffinityState::CacheMiss,
            want_route: Route::Balanced,
        },
        Case {
            name: "a remembered key that is too busy yields to its warm organization",
            facts: with_signal(1),
            keys: three(8, 1.0),
            memory: remembers("b"),
            policy: policy(3),
            want_choice: "b2",
            want_state: AffinityState::TargetUnavailable,
            want_route: Route::Affinity,
        },
        Case {
            name: "a remembered key near the end of its window yields",
            facts: with_signal(1),
            keys: vec![
                org_key("a", "org-a", 0, Health::Ready),
                KeyView { headroom: 0.05, ..org_key("b", "org-b", 0, Health::Ready) },
            ],
            memory: remembers("b"),
            policy: policy(3),
            want_choice: "a",
            want_state: AffinityState::TargetUnavailable,
            want_route: Route::Balanced,
        },
        Case {
            name: "a cooling remembered key is never chosen",
            facts: with_signal(1),
            keys: vec![
                org_key("a", "org-a", 0, Health::Ready),
                org_key("b", "org-b", 0, Health::Cooling { until: now + Duration::from_secs(5) }),
            ],
            memory: remembers("b"),
            policy: policy(3),
            want_choice: "a",
            want_state: AffinityState::TargetUnavailable,
            want_route: Route::Balanced,
        },
        Case {
            name: "a prompt too short to cache is balanced, and says so",
            facts: short,
            keys: three(4, 1.0),
            memory: remembers("b"),
            policy: policy(3),
            want_choice: "a",
            want_state: AffinityState::ShortPrompt,
            want_route: Route::Balanced,
        },
        Case {
            name: "affinity switched off",
            facts: with_signal(1),
            keys: three(4, 1.0),
            memory: remembers("b"),
            policy: Policy { soft_affinity: false, ..policy(3) },
            want_choice: "a",
            want_state: AffinityState::Disabled,
            want_route: Route::Balanced,
        },
        Case {
            name: "the table could not be read",
            facts: with_signal(1),
            keys: three(4, 1.0),
            memory: Memory { remembered: Remembered::Unavailable, session_hint: None },
            policy: policy(3),
            want_choice: "a",
            want_state: AffinityState::CacheUnavailable,
            want_route: Route::Balanced,
        },
    ];
    for case in cases {
        let d = decide(&case.facts, &PoolView { keys: case.keys }, &case.memory, now, &case.policy);
        assert_eq!(d.choice.as_ref().map(KeyId::as_str), Some(case.want_choice), "{}", case.name);
        assert_eq!(d.affinity_state, case.want_state, "{}", case.name);
        assert_eq!(d.route, case.want_route, "{}", case.name);
        assert_eq!(d.affinity_source, AffinitySource::PromptCacheKey, "{}", case.name);
    }
}

#[test]
#[expect(clippy::too_many_lines, reason = "a table test: one case per rule")]
fn table_of_limits_tiers_and_budgets() {
    let now = clock_now();
    let soon = now + Duration::from_millis(1_500);
    struct Case {
        name: &'static str,
        keys: Vec<KeyView>,
        want_choice: Option<&'static str>,
        want_refusal: Option<Refusal>,
        want_reason: Option<Reason>,
    }
    let tier = |id: &str, priority: u8| KeyView { priority, ..key(id, 0, Health::Ready) };
    let cases = vec![
        Case {
            name: "the lowest tier with a usable key takes unpinned traffic",
            keys: vec![tier("personal", 1), tier("work", 0)],
            want_choice: Some("work"),
            want_refusal: None,
            want_reason: Some(Reason::PriorityTier { tier: 0 }),
        },
        Case {
            name: "a higher tier serves when the lower one cools",
            keys: vec![tier("personal", 1), KeyView { health: Health::Cooling { until: soon }, ..tier("work", 0) }],
            want_choice: Some("personal"),
            want_refusal: None,
            want_reason: None,
        },
        Case {
            name: "more headroom wins at equal load",
            keys: vec![
                KeyView { headroom: 0.3, ..key("a", 0, Health::Ready) },
                KeyView { headroom: 0.9, ..key("b", 0, Health::Ready) },
            ],
            want_choice: Some("b"),
            want_refusal: None,
            want_reason: None,
        },
        Case {
            name: "a used-up window is skipped until it refills",
            keys: vec![
                KeyView { exhausted_until: Some(soon), ..key("a", 0, Health::Ready) },
                key("b", 5, Health::Ready),
            ],
            want_choice: Some("b"),
            want_refusal: None,
            want_reason: Some(Reason::Skipped {
                key: KeyId::new("a"),
                why: SkipWhy::NearExhaustion { reset_ms: 1_500 },
            }),
        },
        Case {
            name: "every window used up: a 429 for the first refill",
            keys: vec![KeyView { exhausted_until: Some(soon), ..key("a", 0, Health::Ready) }],
            want_choice: None,
            want_refusal: Some(Refusal::AllCooling { retry_after_secs: 2, cooling: 1 }),
            want_reason: None,
        },
        Case {
            name: "over budget: avoided while another key serves",
            keys: vec![KeyView { over_budget: true, ..key("a", 0, Health::Ready) }, key("b", 6, Health::Ready)],
            want_choice: Some("b"),
            want_refusal: None,
            want_reason: Some(Reason::Skipped { key: KeyId::new("a"), why: SkipWhy::OverBudget }),
        },
        Case {
            name: "budgets are soft: all over budget still serve",
            keys: vec![KeyView { over_budget: true, ..key("a", 0, Health::Ready) }],
            want_choice: Some("a"),
            want_refusal: None,
            want_reason: Some(Reason::BudgetOverrun),
        },
        Case {
            name: "a key without the model is skipped",
            keys: vec![KeyView { model_ok: false, ..key("a", 0, Health::Ready) }, key("b", 9, Health::Ready)],
            want_choice: Some("b"),
            want_refusal: None,
            want_reason: Some(Reason::Skipped { key: KeyId::new("a"), why: SkipWhy::ModelUnavailable }),
        },
    ];
    for case in cases {
        let d = decide(&facts(1), &PoolView { keys: case.keys }, &Memory::default(), now, &policy(3));
        assert_eq!(d.choice.as_ref().map(KeyId::as_str), case.want_choice, "{}", case.name);
        assert_eq!(d.refusal, case.want_refusal, "{}", case.name);
        if let Some(reason) = case.want_reason {
            assert!(d.reasons.contains(&reason), "{}: {:?}", case.name, d.reasons);
        }
        assert_eq!(d.route == Route::Refused, d.refusal.is_some(), "{}", case.name);
    }
}

#[test]
fn session_hints_send_a_new_socket_to_its_organization() {
    let now = clock_now();
    let view = PoolView {
        keys: vec![
            org_key("a1", "org-a", 0, Health::Ready),
            org_key("b1", "org-b", 5, Health::Ready),
            org_key("b2", "org-b", 1, Health::Ready),
        ],
    };
    let hinted = Memory { remembered: Remembered::NotAsked, session_hint: Some(KeyId::new("b1")) };
    let d = decide(&facts(1), &view, &hinted, now, &policy(3));
    assert_eq!(ids(&d), ["b2", "b1"], "the organization's least busy key, never org-a");
    assert_eq!(d.route, Route::SessionHint);
    assert!(d.reasons.contains(&Reason::SessionHint { key: KeyId::new("b1"), usable: 2 }));
    // The hinted organization has no usable key: balanced instead.
    let cooling = Health::Cooling { until: now + Duration::from_secs(3) };
    let view = PoolView { keys: vec![org_key("a1", "org-a", 0, Health::Ready), org_key("b1", "org-b", 0, cooling)] };
    let d = decide(&facts(1), &view, &hinted, now, &policy(3));
    assert_eq!(ids(&d), ["a1"]);
    assert_eq!(d.route, Route::Balanced);
    // Markers beat hints.
    let view =
        PoolView { keys: vec![org_key("a1", "org-a", 0, Health::Ready), org_key("b1", "org-b", 0, Health::Ready)] };
    let d = decide(&pinned(1, "a1", "org-a"), &view, &hinted, now, &policy(3));
    assert_eq!(ids(&d), ["a1"]);
    assert_eq!(d.route, Route::Pinned);
}

/// A property over many pools and health mixes: whatever the rule that places a request (balance,
/// soft affinity, a pin, a continuity binding, a session hint), no candidate is ever outside the
/// request's pool and its fallbacks.
#[test]
fn no_rule_reaches_a_key_outside_the_pool() {
    let now = clock_now();
    let cooling = Health::Cooling { until: now + Duration::from_secs(9) };
    let healths = [Health::Ready, cooling, Health::Disabled];
    let names = ["w1", "w2", "p1", "p2"];
    let (work, personal) = (ids_of(&["w1", "w2"]), ids_of(&["p1", "p2"]));
    for mix in 0..81usize {
        let keys: Vec<KeyView> = names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                org_key(
                    n,
                    if n.starts_with('w') { "org-w" } else { "org-p" },
                    0,
                    healths[mix / 3usize.pow(i as u32) % 3],
                )
            })
            .collect();
        let view = PoolView { keys };
        let requests = [
            (facts(mix as u64), Memory { remembered: Remembered::Key(KeyId::new("p1")), session_hint: None }),
            (pinned(mix as u64, "p1", "org-p"), Memory::default()),
            (facts(mix as u64), Memory { remembered: Remembered::NotAsked, session_hint: Some(KeyId::new("p2")) }),
        ];
        for (f, memory) in &requests {
            let tiers = [Tier { pool: "work", keys: &work }];
            let d = decide_within(f, view.clone(), &tiers, memory, now, &policy(4));
            assert!(d.candidates().all(|k| work.contains(k)), "mix {mix}: {:?}", ids(&d));
            let with_fallback = [Tier { pool: "work", keys: &work }, Tier { pool: "personal", keys: &personal }];
            let d = decide_within(f, view.clone(), &with_fallback, memory, now, &policy(4));
            let used_fallback = d.reasons.iter().any(|r| matches!(r, Reason::PoolFallback { .. }));
            let allowed = if used_fallback { &personal } else { &work };
            assert!(d.candidates().all(|k| allowed.contains(k)), "mix {mix}: {:?}", ids(&d));
        }
    }
}

fn ids_of(names: &[&str]) -> Vec<KeyId> {
    names.iter().map(|n| KeyId::new(*n)).collect()
}

#[test]
fn a_fallback_pool_serves_only_when_the_pool_cannot() {
    let now = clock_now();
    let later = now + Duration::from_millis(4_200);
    let (work, personal) = (ids_of(&["w1"]), ids_of(&["p1"]));
    let tiers = [Tier { pool: "work", keys: &work }, Tier { pool: "personal", keys: &personal }];
    let ready = PoolView { keys: vec![org_key("w1", "ow", 5, Health::Ready), org_key("p1", "op", 0, Health::Ready)] };
    let d = decide_within(&facts(1), ready, &tiers, &Memory::default(), now, &policy(3));
    assert_eq!(ids(&d), ["w1"], "a busy pool key still beats an idle fallback key");
    let cooling = PoolView {
        keys: vec![org_key("w1", "ow", 0, Health::Cooling { until: later }), org_key("p1", "op", 0, Health::Ready)],
    };
    let d = decide_within(&facts(2), cooling.clone(), &tiers, &Memory::default(), now, &policy(3));
    assert_eq!(ids(&d), ["p1"]);
    assert_eq!(d.reasons[0], Reason::PoolFallback { from: "work".into(), to: "personal".into() });
    let alone = decide_within(&facts(3), cooling, &tiers[..1], &Memory::default(), now, &policy(3));
    assert_eq!(
        alone.refusal,
        Some(Refusal::AllCooling { retry_after_secs: 5, cooling: 1 }),
        "no fallback: the pool's 429"
    );
}

#[test]
fn a_fallback_that_can_read_a_session_beats_rescuing_it() {
    let now = clock_now();
    let (work, personal) = (ids_of(&["w1"]), ids_of(&["p1"]));
    let tiers = [Tier { pool: "work", keys: &work }, Tier { pool: "personal", keys: &personal }];
    let view = PoolView { keys: vec![org_key("w1", "ow", 0, Health::Ready), org_key("p1", "op", 0, Health::Ready)] };
    let d = decide_within(&pinned(1, "p1", "op"), view.clone(), &tiers, &Memory::default(), now, &policy(3));
    assert_eq!((ids(&d), d.rescued_orgs.len()), (vec!["p1"], 0), "read where it was made, nothing dropped");
    let d = decide_within(&pinned(2, "p1", "op"), view, &tiers[..1], &Memory::default(), now, &policy(3));
    assert_eq!((ids(&d), d.rescued_orgs.len()), (vec!["w1"], 1), "inside the pool alone: rescued there");
}

#[test]
fn unmarked_encrypted_content_tries_one_key_per_organization_the_sessions_own_first() {
    let now = clock_now();
    let keys = vec![
        org_key("a1", "org-a", 0, Health::Ready),
        org_key("a2", "org-a", 0, Health::Ready),
        org_key("b1", "org-b", 0, Health::Ready),
        org_key("c1", "org-c", 0, Health::Rejected),
        org_key("d1", "org-d", 0, Health::Ready),
    ];
    let view = PoolView { keys };
    let mut f = facts(7);
    f.unmarked_encrypted = true;
    let d = decide(&f, &view, &Memory::default(), now, &policy(2));
    assert_eq!(d.route, Route::FindingOrg);
    let tried = ids(&d);
    assert_eq!(
        tried.len(),
        3,
        "one open key of each of a, b and d (c's only key is rejected), whatever max_attempts: {tried:?}"
    );
    let orgs: std::collections::BTreeSet<&str> = tried.iter().map(|k| &k[..1]).collect();
    assert_eq!(orgs.len(), 3, "{tried:?}");
    assert!(!d.balanced(), "not counted as a new session's start");
    // The organization that served the session last goes first.
    let memory = Memory { session_hint: Some(KeyId::new("b1")), ..Memory::default() };
    let d = decide(&f, &view, &memory, now, &policy(2));
    assert_eq!(ids(&d)[0], "b1");
    assert!(d.reasons.contains(&Reason::FindingOrg { orgs: 3, known: Some(KeyId::new("b1")) }));
    // An imported key's organization comes next: second behind the session's own, first without it.
    let mut keys = view.keys.clone();
    keys[4].imported = true;
    let imported = PoolView { keys };
    let d = decide(&f, &imported, &memory, now, &policy(2));
    assert_eq!(ids(&d)[..2], ["b1", "d1"], "{:?}", ids(&d));
    let d = decide(&f, &imported, &Memory::default(), now, &policy(2));
    assert_eq!((ids(&d)[0], ids(&d).len()), ("d1", 3), "{:?}", ids(&d));
    // Marked content decides by its marker; encrypted-content affinity off means no search either.
    let mut marked = pinned(8, "a1", "org-a");
    marked.unmarked_encrypted = true;
    assert_eq!(decide(&marked, &view, &memory, now, &policy(2)).route, Route::Pinned);
    let off = Policy { encrypted_affinity: false, ..policy(2) };
    assert_eq!(decide(&f, &view, &Memory::default(), now, &off).route, Route::Balanced);
}

/// A key of `org` at `state` against a budget of $5 a day that resets at `resets`.
fn budgeted(id: &str, org: &str, state: BudgetState, resets: Instant) -> KeyView {
    KeyView { budget: state, budget_resets: Some(resets), ..org_key(id, org, 0, Health::Ready) }
}

const FIVE: crate::spend::Usd = crate::spend::Usd::from_nanos(5_000_000_000);

#[test]
fn a_key_past_reserve_at_takes_no_new_sessions_but_keeps_its_pinned_ones() {
    let now = clock_now();
    let state = BudgetState::Reserved { period: Period::Day, limit: FIVE, used_permille: 850, resets_unix_ms: 0 };
    let a1 = budgeted("a1", "org-a", state, now + Duration::from_secs(3600));
    let view = PoolView { keys: vec![a1.clone(), org_key("b1", "org-b", 5, Health::Ready)] };
    let d = decide(&facts(1), &view, &Memory::default(), now, &policy(2));
    assert_eq!(ids(&d), ["b1"], "a new session goes elsewhere, however busy b1 is");
    let why = SkipWhy::BudgetReserved { period: Period::Day, limit: FIVE, used_permille: 850 };
    assert!(d.reasons.contains(&Reason::Skipped { key: KeyId::new("a1"), why }), "{:?}", d.reasons);
    let d = decide(&pinned(2, "a1", "org-a"), &view, &Memory::default(), now, &policy(2));
    assert_eq!((d.route, ids(&d)), (Route::Pinned, vec!["a1"]), "its pinned session goes on");
    // Every key reserved: the budgets the user set are kept; new sessions wait for the reset.
    let only = PoolView { keys: vec![a1] };
    let d = decide(&facts(3), &only, &Memory::default(), now, &policy(2));
    assert_eq!(d.refusal, Some(Refusal::BudgetReached { retry_after_secs: 3600, keys: 1 }));
    assert!(!any_open(&only, now), "no new WebSocket either");
}

#[test]
fn a_stopped_key_refuses_even_its_pinned_sessions_naming_the_budget_and_its_reset() {
    let now = clock_now();
    let state = BudgetState::Stopped { period: Period::Day, limit: FIVE, resets_unix_ms: 0 };
    let a1 = budgeted("a1", "org-a", state, now + Duration::from_secs(7200));
    let view = PoolView { keys: vec![a1.clone(), org_key("b1", "org-b", 0, Health::Ready)] };
    let stopped =
        Refusal::BudgetStopped { key: KeyId::new("a1"), period: Period::Day, limit: FIVE, retry_after_secs: 7200 };
    let d = decide(&pinned(1, "a1", "org-a"), &view, &Memory::default(), now, &policy(2));
    assert_eq!(d.refusal, Some(stopped.clone()), "{d:?}");
    assert!(d.rescued_orgs.is_empty(), "not rescued onto another organization: the user chose money");
    let id = KeyId::new("a1");
    let mut bound = facts(2);
    bound.continuity = Some(Pin { org: markers().org_tag(Some("org-a"), &id), key: id, field: Field::ResponseId });
    assert_eq!(decide(&bound, &view, &Memory::default(), now, &policy(2)).refusal, Some(stopped));
    assert_eq!(ids(&decide(&facts(3), &view, &Memory::default(), now, &policy(2))), ["b1"]);
    // Another key of the organization that is open serves the session instead.
    let with_a2 = PoolView { keys: vec![a1, org_key("a2", "org-a", 0, Health::Ready)] };
    let d = decide(&pinned(4, "a1", "org-a"), &with_a2, &Memory::default(), now, &policy(2));
    assert_eq!((d.route, ids(&d)), (Route::Pinned, vec!["a2"]));
}

#[test]
fn a_key_down_to_its_window_reserve_keeps_it_for_its_pinned_sessions_until_the_window_refills() {
    let now = clock_now();
    let kept = crate::quota::WindowReserve { left_permille: 150, keep_pct: 20, frees: now + Duration::from_secs(30) };
    let a1 = KeyView { window_reserve: Some(kept), ..org_key("a1", "org-a", 0, Health::Ready) };
    let view = PoolView { keys: vec![a1.clone(), org_key("b1", "org-b", 6, Health::Ready)] };
    let d = decide(&facts(1), &view, &Memory::default(), now, &policy(2));
    assert_eq!(ids(&d), ["b1"], "a new session goes elsewhere, however busy b1 is");
    let why = SkipWhy::WindowReserved { left_permille: 150, keep_pct: 20, reset_ms: 30_000 };
    assert!(d.reasons.contains(&Reason::Skipped { key: KeyId::new("a1"), why }), "{:?}", d.reasons);
    let d = decide(&pinned(2, "a1", "org-a"), &view, &Memory::default(), now, &policy(2));
    assert_eq!((d.route, ids(&d)), (Route::Pinned, vec!["a1"]), "its pinned session goes on");
    // Alone, it is kept for its sessions: a new one waits for the refill, told when.
    let only = PoolView { keys: vec![a1] };
    let d = decide(&facts(3), &only, &Memory::default(), now, &policy(2));
    assert_eq!(d.refusal, Some(Refusal::AllCooling { retry_after_secs: 30, cooling: 1 }), "{d:?}");
    // Once the window refilled, it takes new sessions again.
    let later = now + Duration::from_secs(30);
    assert_eq!(ids(&decide(&facts(4), &only, &Memory::default(), later, &policy(2))), ["a1"]);
}

/// A ChatGPT plan key (an organization of its own).
fn plan_key(health: Health) -> KeyView {
    KeyView { plan: true, ..org_key("plan", "chatgpt-acct", 0, health) }
}

#[test]
fn a_new_session_goes_to_the_plan_first_and_overflows_to_the_api_keys_while_it_is_used_up() {
    let now = clock_now();
    let keys = || vec![org_key("a1", "org-a", 0, Health::Ready), plan_key(Health::Ready)];
    let d = decide(&facts(1), &PoolView { keys: keys() }, &Memory::default(), now, &policy(3));
    assert_eq!(ids(&d), ["plan", "a1"], "the plan first, the API key its fallback");
    assert!(d.reasons.contains(&Reason::PlanFirst { key: KeyId::new("plan") }), "{:?}", d.reasons);

    let resets = now + Duration::from_secs(3_600);
    let used_up = vec![org_key("a1", "org-a", 0, Health::Ready), plan_key(Health::Cooling { until: resets })];
    let d = decide(&facts(2), &PoolView { keys: used_up }, &Memory::default(), now, &policy(3));
    assert_eq!(ids(&d), ["a1"]);
    let said = Reason::PlanExhausted { key: KeyId::new("plan"), resets_ms: 3_600_000 };
    assert!(d.reasons.contains(&said), "{:?}", d.reasons);

    // Closed by a window its answer reported used up (still ready): skipped as a used-up plan.
    let reported = KeyView { exhausted_until: Some(resets), ..plan_key(Health::Ready) };
    let d =
        decide(&facts(4), &PoolView { keys: vec![keys().remove(0), reported] }, &Memory::default(), now, &policy(3));
    assert_eq!(ids(&d), ["a1"]);
    let skipped = Reason::Skipped { key: KeyId::new("plan"), why: SkipWhy::PlanUsedUp { reset_ms: 3_600_000 } };
    assert!(d.reasons.contains(&skipped) && d.reasons.contains(&said), "{:?}", d.reasons);

    // Back once its window resets.
    let d = decide(&facts(3), &PoolView { keys: keys() }, &Memory::default(), resets, &policy(3));
    assert_eq!(d.choice.as_ref().map(KeyId::as_str), Some("plan"));
}

#[test]
fn a_session_on_an_api_key_never_moves_to_the_plan() {
    let now = clock_now();
    let keys = || vec![org_key("a1", "org-a", 0, Health::Ready), plan_key(Health::Ready)];
    let pinned_to_api =
        decide(&pinned(1, "a1", "org-a"), &PoolView { keys: keys() }, &Memory::default(), now, &policy(3));
    assert_eq!(ids(&pinned_to_api), ["a1"]);
    let d = decide(&with_signal(2), &PoolView { keys: keys() }, &remembers("a1"), now, &policy(3));
    assert_eq!(d.choice.as_ref().map(KeyId::as_str), Some("a1"), "its warm API key keeps it: {:?}", d.reasons);
    // Rescued off an API key's organization, it goes to another API key, not the plan.
    let lost = vec![
        org_key("a1", "org-a", 0, Health::Rejected),
        org_key("b1", "org-b", 3, Health::Ready),
        plan_key(Health::Ready),
    ];
    let d = decide(&pinned(3, "a1", "org-a"), &PoolView { keys: lost }, &Memory::default(), now, &policy(3));
    assert_eq!(ids(&d), ["b1"], "{:?}", d.reasons);
}

#[test]
fn a_plan_session_used_up_mid_way_is_rescued_onto_an_api_key_or_refused_with_the_reset() {
    let now = clock_now();
    let resets = now + Duration::from_secs(1_800);
    let keys = || vec![org_key("a1", "org-a", 0, Health::Ready), plan_key(Health::Cooling { until: resets })];
    let on_plan = pinned(1, "plan", "chatgpt-acct");
    let d = decide(&on_plan, &PoolView { keys: keys() }, &Memory::default(), now, &policy(3));
    assert_eq!(ids(&d), ["a1"], "{:?}", d.reasons);
    assert!(d.reasons.contains(&Reason::Rescued { key: KeyId::new("plan") }), "{:?}", d.reasons);
    assert_eq!(d.rescued_orgs.len(), 1);

    let fail = Policy { lost_org: LostOrgPolicy::Fail, ..policy(3) };
    let d = decide(&on_plan, &PoolView { keys: keys() }, &Memory::default(), now, &fail);
    assert_eq!(d.refusal, Some(Refusal::AllCooling { retry_after_secs: 1_800, cooling: 1 }));
}
