//! prompt_cache_key soft affinity, black-box against the simulator's per-organization prompt cache.
#![allow(clippy::unwrap_used, clippy::print_stdout, reason = "tests print the figures they measure")]

use crate::support;

use std::collections::BTreeMap;

use futures::StreamExt as _;
use keymux_sim::Sim;
use serde_json::{json, Value};
use support::*;

const SECRETS: [&str; 5] = ["sk-a1", "sk-a2", "sk-b1", "sk-b2", "sk-c1"];

/// A system prompt long enough for the provider's prompt cache (1024 tokens and more): shorter prompts
/// gain nothing from soft affinity, and Keymux balances them instead.
fn long_system() -> String {
    "You are a coding agent. Follow the repository's conventions. ".repeat(80)
}

fn session_id(n: usize) -> String {
    format!("01a227d7-ed08-7e52-9dfa-{n:012x}")
}

/// A Codex-shaped session of `turns` turns with no encrypted content (reasoning off), so only the soft
/// affinity acts: the full history is replayed every turn behind a 20–40 KB system prompt.
async fn codex_session(
    client: &reqwest::Client,
    url: &str,
    bearer: &str,
    n: usize,
    turns: usize,
) -> Result<(), String> {
    let id = session_id(n);
    let system = "You are Codex, a coding agent. Follow the repository's conventions. ".repeat(300 + (n % 5) * 75);
    let mut history = vec![
        json!({"type":"message","id":format!("msg_{id}-dev"),"role":"developer","content":[{"type":"input_text","text":system}]}),
    ];
    for turn in 0..turns {
        history.push(json!({"type":"message","id":format!("msg_{id}-{turn}"),"role":"user","content":[{"type":"input_text","text":format!("Turn {turn}: continue the task.")}]}));
        let body = json!({"model":"gpt-5.5","stream":true,"input":history,"store":false,"prompt_cache_key":id,"reasoning":{"effort":"none"},"tool_choice":"auto","parallel_tool_calls":true});
        let r = client
            .post(format!("{url}/responses"))
            .bearer_auth(bearer)
            .header("x-test-turn", format!("{n}:{turn}"))
            .json(&body)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if r.status() != 200 {
            return Err(format!("{} {}", r.status(), r.text().await.unwrap_or_default()));
        }
        for e in read_sse(r).await {
            if e.data["type"] == "response.output_item.done" {
                history.push(e.data["item"].clone());
            }
        }
    }
    Ok(())
}

/// Runs 100 sessions of 8 turns at concurrency 16; `route(n)` gives (base URL, bearer) per session.
async fn run(route: impl Fn(usize) -> (String, String)) {
    let client = client();
    let results: Vec<Result<(), String>> = futures::stream::iter(0..100)
        .map(|n| {
            let client = client.clone();
            let (url, bearer) = route(n);
            async move { codex_session(&client, &url, &bearer, n, 8).await }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let failures: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(failures.is_empty(), "{failures:?}");
}

/// Sum of cached tokens over sum of input tokens, for the sessions' requests the simulator saw.
fn cached_ratio(sim: &Sim) -> f64 {
    let (mut input, mut cached) = (0u64, 0u64);
    for e in sim.log().iter().filter(|e| e.headers.iter().any(|(k, _)| k == "x-test-turn")) {
        input += e.input_tokens;
        cached += e.cached_tokens;
    }
    cached as f64 / input as f64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soft_affinity_keeps_sessions_on_a_warm_cache() {
    // Keymux with soft affinity.
    let keymux = Harness::start(three_orgs(), &five_keys()).await;
    run(|_| (keymux.base.clone(), TOKEN.to_owned())).await;
    let with_affinity = cached_ratio(&keymux.sim);

    // The ideal: every session pinned to one key, straight at the upstream.
    let pinned_sim = Sim::start(three_orgs()).await.unwrap();
    let base = pinned_sim.base_url();
    run(|n| (base.clone(), SECRETS[n % 5].to_owned())).await;
    let pinned = cached_ratio(&pinned_sim);

    // Plain least-loaded routing.
    let plain = Harness::start_with(three_orgs(), &five_keys(), |c| c.affinity.prompt_cache = false).await;
    run(|_| (plain.base.clone(), TOKEN.to_owned())).await;
    let least_loaded = cached_ratio(&plain.sim);

    // What the user pays full price for: the uncached share of input tokens.
    let (uncached_k, uncached_p, uncached_ll) = (1.0 - with_affinity, 1.0 - pinned, 1.0 - least_loaded);
    println!(
        "cached-token ratio over 100 sessions x 8 turns: keymux soft affinity {with_affinity:.3}, pinned per session {pinned:.3}, plain least-loaded {least_loaded:.3}; uncached input: {:.1}% / {:.1}% / {:.1}% (least-loaded pays full price for {:.1}x the tokens keymux does)",
        100.0 * uncached_k,
        100.0 * uncached_p,
        100.0 * uncached_ll,
        uncached_ll / uncached_k
    );
    assert!(with_affinity >= 0.8 * pinned, "{with_affinity} vs pinned {pinned}");
    // Each organization caches a session after its first visit there, so least-loaded loses the first
    // turn in every organization a session touches: well below pinned, and a multiple of the uncached
    // tokens.
    assert!(least_loaded < 0.85 * pinned, "least-loaded should be well below pinned: {least_loaded} vs {pinned}");
    assert!(uncached_ll >= 2.0 * uncached_k, "least-loaded pays for {uncached_ll} uncached vs {uncached_k}");

    // First turns still spread over all keys.
    let mut first: BTreeMap<String, usize> = BTreeMap::new();
    for e in keymux.sim.log() {
        if e.headers.iter().any(|(k, v)| k == "x-test-turn" && v.ends_with(":0")) {
            *first.entry(e.key.unwrap()).or_default() += 1;
        }
    }
    println!("first turns per key: {first:?}");
    for secret in SECRETS {
        let n = first.get(secret).copied().unwrap_or(0) as f64;
        assert!((n - 20.0).abs() <= 6.0, "first turns unevenly spread: {first:?}");
    }

    // Decisions say where the preference came from and what happened to it.
    let records = keymux.gateway.events().recent(1000);
    let hits =
        records.iter().filter(|r| r.routed.decision.affinity_state == keymux::router::AffinityState::Hit).count();
    assert!(records.iter().all(|r| r.routed.decision.affinity_source == keymux::facts::AffinitySource::PromptCacheKey));
    assert!(hits >= 600, "follow-ups chose the remembered key: {hits} of {}", records.len());
    let status = keymux.status();
    let cached: u64 = status.iter().map(|k| k.cached_tokens).sum();
    assert!(cached > 0, "the provider's own cache result is reported separately");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_cache_keys_never_appear_in_anything_keymux_writes() {
    let sim = Sim::start(three_orgs()).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let mut env = base_env(home.path());
    for (label, secret) in [("a1", "sk-a1"), ("b1", "sk-b1"), ("c1", "sk-c1")] {
        env.push((format!("KEYMUX_KEY_{}", label.to_uppercase()), secret.to_owned()));
    }
    env.push(("KEYMUX_CLIENT_TOKEN".into(), TOKEN.into()));
    // Metrics are written to disk here too, so the sled files are part of what is searched below.
    let metrics_dir = home.path().join("metrics");
    let config = home.path().join("config.toml");
    std::fs::write(&config, format!("metrics_dir = \"{}\"\n", metrics_dir.display())).unwrap();
    let gateway =
        Keymux::spawn(&["--ephemeral", "--config", config.to_str().unwrap(), "--upstream", &sim.base_url()], &env)
            .await;
    let c = client();
    let raw_keys: Vec<String> = (0..12).map(|n| format!("pck-secret-{n:04}-5d1f8a")).collect();
    for (n, raw) in raw_keys.iter().enumerate() {
        for turn in 0..2 {
            let body = json!({"model":"gpt-5.5","stream":n % 2 == 0,"store":false,"prompt_cache_key":raw,
                "input":[{"role":"developer","content":long_system()},{"role":"user","content":format!("t{turn}")}]});
            let r = c.post(format!("{}/responses", gateway.base)).bearer_auth(TOKEN).json(&body).send().await.unwrap();
            assert_eq!(r.status(), 200);
            let _ = r.bytes().await.unwrap();
        }
    }
    let api = Admin::new(&gateway.root);
    let decisions = api.get_text("/decisions?limit=1000").await;
    let status = api.get_text("/status").await;
    let v: Value = serde_json::from_str(&decisions).unwrap();
    assert!(v["data"].as_array().unwrap().iter().any(|r| r["decision"]["affinity_state"] == "hit"));
    let metrics = api.get_text("/metrics").await;
    assert!(metrics.contains("prompt_cache_key/hit"), "metrics count the affinity states: {metrics}");
    let output = gateway.stop().await;
    let files = walk(&metrics_dir);
    assert!(!files.is_empty(), "the sled store was written");
    let on_disk: usize = files.iter().map(|f| std::fs::metadata(f).map_or(0, |m| m.len() as usize)).sum();
    assert!(on_disk > 0);
    for raw in &raw_keys {
        for (what, text) in
            [("logs", &output), ("decisions API", &decisions), ("status API", &status), ("metrics API", &metrics)]
        {
            assert!(!text.contains(raw.as_str()), "{what} contains a raw prompt_cache_key");
        }
    }
    // Nothing on disk either: the metrics store and everything else under the home dir hold no raw
    // cache key, API key or token.
    for entry in walk(home.path()) {
        let bytes = std::fs::read(&entry).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        assert!(raw_keys.iter().all(|raw| !text.contains(raw.as_str())), "{} contains a raw key", entry.display());
        assert_no_secrets(&entry.display().to_string(), &text, &["sk-a1", "sk-b1", "sk-c1", TOKEN]);
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

#[tokio::test]
async fn invalid_cache_keys_are_ignored_and_the_prefix_stands_in() {
    let h = Harness::start(three_orgs(), &five_keys()).await;
    let c = client();
    let cases =
        [json!(" leading-space"), json!("control\u{7}char"), json!("x".repeat(257)), json!(42), json!({"k": 1})];
    for (i, bad) in cases.iter().enumerate() {
        let body = json!({"model":"gpt-5.5","stream":false,"prompt_cache_key":bad,"input":[{"role":"developer","content":"sys"},{"role":"user","content":format!("case {i}")}]});
        let r = post(&c, &format!("{}/responses", h.base), &[], &body).send().await.unwrap();
        assert_eq!(r.status(), 200, "{bad}");
        let record = h.gateway.events().recent(1).pop().unwrap();
        assert_eq!(record.routed.decision.affinity_source, keymux::facts::AffinitySource::PromptPrefix, "{bad}");
        // Forwarded unchanged.
        assert_eq!(h.sim.log().last().unwrap().body.as_ref().unwrap()["prompt_cache_key"], *bad);
    }
    // No key and nothing to digest: no signal.
    let r =
        post(&c, &format!("{}/responses", h.base), &[], &json!({"model":"gpt-5.5","input":[]})).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let record = h.gateway.events().recent(1).pop().unwrap();
    assert_eq!(record.routed.decision.affinity_source, keymux::facts::AffinitySource::None);
    assert_eq!(record.routed.decision.affinity_state, keymux::router::AffinityState::NoSignal);
    // The prefix signal remembers too: the same prompt comes back to the same key.
    let body = json!({"model":"gpt-5.5","stream":false,"input":[{"role":"developer","content":long_system()},{"role":"user","content":"same question"}]});
    let _ = post(&c, &format!("{}/responses", h.base), &[], &body).send().await.unwrap();
    let first = h.sim.log().last().unwrap().key.clone();
    let _ = post(&c, &format!("{}/responses", h.base), &[], &body).send().await.unwrap();
    assert_eq!(h.sim.log().last().unwrap().key, first);
    let record = h.gateway.events().recent(1).pop().unwrap();
    assert_eq!(record.routed.decision.affinity_state, keymux::router::AffinityState::Hit);
}

#[tokio::test]
async fn a_cooling_target_moves_to_its_warm_organization_and_failures_never_teach() {
    let h = Harness::start(three_orgs(), &five_keys()).await;
    let c = client();
    let send = |t: usize| {
        let body = json!({"model":"gpt-5.5","stream":true,"prompt_cache_key":"sess-warm","input":[{"role":"developer","content":long_system()},{"role":"user","content":format!("t{t}")}]});
        post(&c, &format!("{}/responses", h.base), &[], &body).send()
    };
    let _ = read_sse(send(0).await.unwrap()).await;
    let remembered = h.sim.log().last().unwrap().key.clone().unwrap();
    let _ = read_sse(send(1).await.unwrap()).await;
    assert_eq!(h.sim.log().last().unwrap().key.as_deref(), Some(remembered.as_str()), "a hit");

    // The remembered key is cooling for a second; every other key cuts its stream before the end. The
    // request fails over to another key, whose broken stream must not teach the table.
    h.sim.inject(&remembered, keymux_sim::Fault::RateLimited { retry_after_secs: 1 });
    for other in SECRETS.iter().filter(|s| **s != remembered) {
        h.sim.inject(other, keymux_sim::Fault::CutAfterEvents(2));
    }
    let r = send(2).await.unwrap();
    let _ = r.bytes().await;
    let record = h.gateway.events().recent(1).pop().unwrap();
    assert_eq!(
        record.routed.decision.affinity_state,
        keymux::router::AffinityState::Hit,
        "chosen first, then failed over"
    );
    let moved_to = h.sim.log().last().unwrap().key.clone().unwrap();
    assert_ne!(moved_to, remembered);
    if remembered.starts_with("sk-a") || remembered.starts_with("sk-b") {
        assert_eq!(&moved_to[..4], &remembered[..4], "the warm organization's other key came next");
    }
    h.sim.clear_faults();

    // While it cools, a new request goes to the warm organization and says why.
    let _ = read_sse(send(3).await.unwrap()).await;
    let record = h.gateway.events().recent(1).pop().unwrap();
    assert_eq!(record.routed.decision.affinity_state, keymux::router::AffinityState::TargetUnavailable);
    assert!(record
        .routed
        .decision
        .reasons
        .iter()
        .any(|r| matches!(r, keymux::router::Reason::SoftTargetUnavailable { .. })));
    let during = h.sim.log().last().unwrap().key.clone().unwrap();

    // That success taught the table; the cut stream before it did not. Once the original key is back,
    // the session stays where it last succeeded.
    h.advance(std::time::Duration::from_secs(2));
    let _ = read_sse(send(4).await.unwrap()).await;
    assert_eq!(h.sim.log().last().unwrap().key.as_deref(), Some(during.as_str()));
}

#[tokio::test]
async fn short_prompts_are_balanced_not_concentrated() {
    // 300 small identical requests ("hi"), Responses and Chat, JSON and SSE, at concurrency 16 over three
    // keys of one upstream: OpenAI does not cache prompts this short, so nothing is gained by keeping
    // them on one key; they are balanced by headroom and say why.
    let h = Harness::start(
        keymux_sim::SimConfig::new().org("org-a", &["sk-a1", "sk-a2", "sk-a3"]),
        &[key("a1", "sk-a1"), key("a2", "sk-a2"), key("a3", "sk-a3")],
    )
    .await;
    let c = client();
    let results: Vec<u16> = futures::stream::iter(0..300)
        .map(|i| {
            let (c, base) = (c.clone(), h.base.clone());
            async move {
                let stream = i % 2 == 0;
                let (path, body) = if i % 4 < 2 {
                    (
                        "responses",
                        json!({"model":"gpt-5.5","stream":stream,"prompt_cache_key":"same-session","input":"hi"}),
                    )
                } else {
                    (
                        "chat/completions",
                        json!({"model":"gpt-5.5","stream":stream,"messages":[{"role":"user","content":"hi"}]}),
                    )
                };
                let r = post(&c, &format!("{base}/{path}"), &[], &body).send().await.unwrap();
                let status = r.status().as_u16();
                let _ = r.bytes().await;
                status
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    assert!(results.iter().all(|s| *s == 200));
    let counts = client_counts(&h.sim);
    println!("300 short requests over three keys: {counts:?}");
    for secret in ["sk-a1", "sk-a2", "sk-a3"] {
        let n = counts.get(secret).copied().unwrap_or(0);
        assert!((70..=130).contains(&n), "short prompts concentrated on some key: {counts:?}");
    }
    let records = h.gateway.events().recent(300);
    assert!(records.iter().all(|r| r.routed.decision.affinity_state == keymux::router::AffinityState::ShortPrompt));
    assert!(records.iter().all(|r| r.routed.decision.route == keymux::router::Route::Balanced));
}
