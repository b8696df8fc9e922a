//! Spend in money, end to end: the simulator's usage priced on every record, and summed on keys,
//! pools, sessions, usage points and the spend report; an unknown model or tier counted as unpriced,
//! not $0; the config's `[prices]` (overrides and aliases) applied, also when written by hand while
//! Keymux runs (the config file is live); spend kept across a restart; a bad price refused with its line; and `keymux usage`.
#![allow(clippy::unwrap_used, clippy::disallowed_methods, clippy::print_stdout, reason = "tests")]

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use keymux::config::Config;
use keymux::pools::PoolConfig;
use keymux_sim::{Sim, SimConfig};
use serde_json::{json, Value};
use support::*;

/// The user's prices: gpt-5.5 at $1 / $0.10 cached / $10 per 1M tokens (the table says $5 / $0.50 /
/// $30), priority at 2x; gpt-5.5-mini, which the table does not know, priced like it.
const PRICES: &str = r#"
[prices."gpt-5.5"]
input = 1.0
cached_input = 0.1
output = 10.0
priority = 2.0

[prices."gpt-5.5-mini"]
alias = "gpt-5.5"
"#;

fn two_orgs() -> SimConfig {
    SimConfig::new().org("org-a", &["sk-a1"]).org("org-b", &["sk-b1"])
}

/// The harness config with `PRICES` and a pool `work` holding `a1`.
fn priced(config: &mut Config) {
    config.prices = Config::parse(PRICES, Path::new("prices.toml")).unwrap().prices;
    config.pools.push(PoolConfig { name: "work".into(), keys: vec!["a1".into()], ..PoolConfig::default() });
}

/// What a request cost under `PRICES`, in nano-dollars, from the usage the gateway recorded for it
/// (every gpt-5.5-mini request of these tests asks for the priority tier); `None`: no price.
fn expected_nanos(record: &Value) -> Option<u64> {
    let usage = &record["usage"];
    let (input, cached, output) =
        (usage["input"].as_u64().unwrap(), usage["cached"].as_u64().unwrap(), usage["output"].as_u64().unwrap());
    // $1 per 1M tokens is 1,000 nano-dollars a token.
    let standard = (input - cached) * 1_000 + cached * 100 + output * 10_000;
    match record["model"].as_str() {
        Some("gpt-5.5") => Some(standard),
        Some("gpt-5.5-mini") => Some(2 * standard),
        // The table's $0.02 per 1M tokens.
        Some("text-embedding-3-small") => Some(input * 20),
        _ => None,
    }
}

/// An amount the API sent (US dollars as a JSON number), in nano-dollars.
fn nanos(amount: &Value) -> u64 {
    (amount.as_f64().unwrap_or_else(|| panic!("an amount, got {amount}")) * 1e9).round() as u64
}

/// A non-streamed request of `model` (with `extra` fields) to the gateway at `base`; its status.
async fn ask(base: &str, model: &str, extra: Value) -> u16 {
    let mut body = json!({"model": model, "input": "hello there", "store": false});
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    let r = post(&client(), &format!("{base}/responses"), &[], &body).send().await.unwrap();
    let status = r.status().as_u16();
    let _ = r.bytes().await;
    status
}

/// A simulator with the organization of `sk-a1`, and a home holding a config file (`config` gets the
/// metrics directory to name) and the environment of a gateway with the key `a1`.
async fn home_with_key_a1(config: impl FnOnce(&Path) -> String) -> (Sim, tempfile::TempDir, PathBuf, Env) {
    let sim = Sim::start(SimConfig::new().org("org-a", &["sk-a1"])).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let cfg = home.path().join("config.toml");
    std::fs::write(&cfg, config(&home.path().join("metrics"))).unwrap();
    let mut env = base_env(home.path());
    env.push(("KEYMUX_KEY_A1".into(), "sk-a1".into()));
    env.push(("KEYMUX_CLIENT_TOKEN".into(), TOKEN.into()));
    (sim, home, cfg, env)
}

type Env = Vec<(String, String)>;

async fn records(api: &Admin) -> Vec<Value> {
    api.get_json("/decisions?limit=1000").await["data"].as_array().unwrap().clone()
}

/// Mixed traffic through every transport: two Codex sessions (one streamed), the alias in the priority
/// tier, a streamed chat completion, embeddings and a WebSocket turn.
async fn traffic(h: &Harness) {
    let c = client();
    for (n, stream) in [(1, true), (2, false)] {
        let mut session = Session::new(Shape::Codex, n, stream);
        for turn in 0..3 {
            assert_eq!(session.turn(&c, &h.base, turn == 2).await.status, 200);
        }
    }
    assert_eq!(
        ask(&h.base, "gpt-5.5-mini", json!({"service_tier": "priority", "prompt_cache_key": "mini-1"})).await,
        200
    );
    let chat = json!({"model":"gpt-5.5","messages":[{"role":"user","content":"hi"}],"stream":true,
        "stream_options":{"include_usage":true}});
    let r = post(&c, &format!("{}/chat/completions", h.base), &[], &chat).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let _ = r.bytes().await;
    let embed = json!({"model":"text-embedding-3-small","input":["alpha","beta"]});
    let r = post(&c, &format!("{}/embeddings", h.base), &[], &embed).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let _ = r.bytes().await;
    let mut ws = WsClient::connect(&h.base, "01a227d7-0000-7000-8000-000000000777").await.unwrap();
    let answer = ws.create(&json!({"model":"gpt-5.5","store":false,"input":[{"role":"user","content":"ws"}]})).await;
    assert!(answer.response_id().is_some(), "{:?}", answer.error);
}

/// Sums of expected nano-dollars per key id, per session digest, and in total.
struct Expected {
    per_key: BTreeMap<String, u64>,
    per_session: BTreeMap<String, u64>,
    total: u64,
}

fn expected(records: &[Value]) -> Expected {
    let mut e = Expected { per_key: BTreeMap::new(), per_session: BTreeMap::new(), total: 0 };
    for r in records {
        let cost = expected_nanos(r).unwrap_or_else(|| panic!("every model of this traffic is priced: {r}"));
        assert_eq!(nanos(&r["cost_usd"]), cost, "the record's cost is its usage at the user's prices: {r}");
        assert_eq!(r["unpriced"], Value::Null);
        *e.per_key.entry(r["served_by"].as_str().unwrap().to_owned()).or_default() += cost;
        if let Some(session) = r["session"].as_str() {
            *e.per_session.entry(session.to_owned()).or_default() += cost;
        }
        e.total += cost;
    }
    e
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulators_usage_drives_spend_on_records_keys_pools_sessions_and_usage_points() {
    let h = Harness::start_with(two_orgs(), &[key("a1", "sk-a1"), key("b1", "sk-b1")], priced).await;
    clear_of_midnight(&h);
    traffic(&h).await;
    let api = Admin::new(&h.root);
    let records = records(&api).await;
    assert_eq!(records.len(), 10);
    assert!(records.iter().all(|r| r["status"] == 200 && r["usage"].is_object()), "{records:?}");
    let want = expected(&records);
    assert!(want.per_key.len() == 2 && want.per_key.values().all(|n| *n > 0), "both keys served: {:?}", want.per_key);

    let keys = api.get_json("/keys").await;
    let mut fingerprints = BTreeMap::new();
    for k in keys.as_array().unwrap() {
        let id = k["id"].as_str().unwrap();
        let spent = want.per_key.get(id).copied().unwrap_or_default();
        assert_eq!(nanos(&k["spend_today_usd"]), spent, "{id} today");
        assert_eq!(nanos(&k["spend_month_usd"]), spent, "{id} this month");
        assert_eq!((k["unpriced_requests_today"].as_u64(), k["unpriced_requests_month"].as_u64()), (Some(0), Some(0)));
        fingerprints.insert(k["fingerprint"].as_str().unwrap().to_owned(), spent);
    }

    let pools = api.get_json("/pools").await;
    let pool = |name: &str| pools.as_array().unwrap().iter().find(|p| p["name"] == name).unwrap().clone();
    assert_eq!(nanos(&pool("all")["spend_today_usd"]), want.total);
    assert_eq!(nanos(&pool("work")["spend_today_usd"]), want.per_key["k_a1"], "work is a1's spend");
    assert_eq!(nanos(&pool("work")["spend_month_usd"]), want.per_key["k_a1"]);

    let sessions = api.get_json("/sessions").await["sessions"].as_array().unwrap().clone();
    assert_eq!(sessions.len(), want.per_session.len());
    assert!(want.per_session.len() >= 3, "two Codex sessions and the cache-keyed request: {:?}", want.per_session);
    for s in &sessions {
        let digest = s["session"].as_str().unwrap();
        assert_eq!(nanos(&s["cost_usd"]), want.per_session[digest], "session {digest}");
        assert_eq!(s["unpriced_requests"], 0);
    }

    let usage = api.get_json("/usage?bucket=hour&days=2").await;
    let mut per_point_key: BTreeMap<String, u64> = BTreeMap::new();
    for p in usage["points"].as_array().unwrap() {
        *per_point_key.entry(p["key"].as_str().unwrap().to_owned()).or_default() += nanos(&p["spend_usd"]);
        assert_eq!(p["unpriced_requests"], 0);
    }
    assert_eq!(per_point_key.remove("total"), Some(want.total));
    fingerprints.retain(|_, spent| *spent > 0);
    assert_eq!(per_point_key, fingerprints, "each key's points sum to its spend");

    let by_token = api.get_json("/spend?by=token").await;
    assert_eq!(by_token["recent_only"], true);
    assert_eq!(by_token["rows"][0]["name"], "test");
    assert_eq!(nanos(&by_token["total"]["spend_usd"]), want.total);
    let by_pool = api.get_json("/spend?by=pool").await;
    assert_eq!(by_pool["recent_only"], false);
    assert_eq!(nanos(&by_pool["rows"][0]["spend_usd"]), want.per_key["k_a1"]);
    assert_eq!(nanos(&by_pool["total"]["spend_usd"]), want.total);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_model_or_tier_is_counted_unpriced_not_as_zero() {
    let h = Harness::start(SimConfig::new().org("org-a", &["sk-a1"]), &[key("a1", "sk-a1")]).await;
    clear_of_midnight(&h);
    // gpt-5.5-codex is in no price table; gpt-5 has no flex price.
    assert_eq!(ask(&h.base, "gpt-5.5-codex", json!({})).await, 200);
    assert_eq!(ask(&h.base, "gpt-5", json!({"service_tier": "flex"})).await, 200);
    assert_eq!(ask(&h.base, "gpt-5", json!({})).await, 200);
    let api = Admin::new(&h.root);
    let records = records(&api).await;
    let find = |model: &str, tier: Option<&str>| {
        let wanted = |r: &&Value| r["model"] == model && tier.is_none_or(|t| r["unpriced"] == t);
        records.iter().find(wanted).unwrap_or_else(|| panic!("{model} {tier:?}: {records:?}")).clone()
    };
    let codex = find("gpt-5.5-codex", Some("model"));
    assert_eq!(codex["cost_usd"], Value::Null, "no price is not $0: {codex}");
    assert!(codex["usage"]["input"].as_u64() > Some(0), "it did use tokens: {codex}");
    assert_eq!(find("gpt-5", Some("tier"))["cost_usd"], Value::Null);
    let standard = records.iter().find(|r| r["model"] == "gpt-5" && r["unpriced"].is_null()).unwrap();
    let priced = nanos(&standard["cost_usd"]);
    assert!(priced > 0, "{standard}");

    let key = api.get_json("/keys").await[0].clone();
    assert_eq!(nanos(&key["spend_today_usd"]), priced, "only the priced request is in the spend");
    assert_eq!(key["unpriced_requests_today"], 2);
    let all = api.get_json("/pools").await[0].clone();
    assert_eq!((all["name"].as_str(), all["unpriced_requests_today"].as_u64()), (Some("all"), Some(2)));
    let usage = api.get_json("/usage?bucket=hour&days=2").await;
    let total: Vec<&Value> = usage["points"].as_array().unwrap().iter().filter(|p| p["key"] == "total").collect();
    assert_eq!(total.iter().map(|p| p["unpriced_requests"].as_u64().unwrap()).sum::<u64>(), 2);
    assert_eq!(total.iter().map(|p| nanos(&p["spend_usd"])).sum::<u64>(), priced);
    let by_model = api.get_json("/spend?by=model").await;
    let row = by_model["rows"].as_array().unwrap().iter().find(|r| r["name"] == "gpt-5.5-codex").unwrap().clone();
    assert_eq!((row["requests"].as_u64(), row["unpriced_requests"].as_u64()), (Some(1), Some(1)));
    assert_eq!(row["spend_usd"], 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prices_from_the_config_replace_the_table_and_an_alias_prices_like_its_target() {
    let h = Harness::start_with(SimConfig::new().org("org-a", &["sk-a1"]), &[key("a1", "sk-a1")], priced).await;
    assert_eq!(ask(&h.base, "gpt-5.5", json!({})).await, 200);
    assert_eq!(ask(&h.base, "gpt-5.5-mini", json!({"service_tier": "priority"})).await, 200);
    assert_eq!(ask(&h.base, "gpt-5.5", json!({"service_tier": "flex"})).await, 200);
    let records = records(&Admin::new(&h.root)).await;
    let table = keymux::spend::PriceTable::builtin();
    for r in &records[..2] {
        let cost = nanos(&r["cost_usd"]);
        assert_eq!(Some(cost), expected_nanos(r), "{r}");
        let usage = keymux::spend::Usage {
            input: r["usage"]["input"].as_u64().unwrap(),
            cached: r["usage"]["cached"].as_u64().unwrap(),
            output: r["usage"]["output"].as_u64().unwrap(),
            ..keymux::spend::Usage::default()
        };
        let day = keymux::clock::utc_day(r["at_unix_ms"].as_u64().unwrap());
        let embedded = table.cost("gpt-5.5", &usage, day).priced().unwrap();
        assert_ne!(cost, embedded.nanos(), "not the embedded price: {r}");
    }
    // The user's entry replaces the table's whole: it names no flex price, so flex is unpriced.
    assert_eq!((records[2]["cost_usd"].clone(), records[2]["unpriced"].clone()), (Value::Null, json!("tier")));
}

/// Waits, on the event stream and for a minute at most, for a `config_applied` event naming a change
/// of prices.
async fn prices_applied(events: reqwest::Response) {
    use futures::StreamExt as _;
    let mut stream = events.bytes_stream();
    let mut buf = String::new();
    let wait = async {
        while let Some(Ok(chunk)) = stream.next().await {
            buf.push_str(&String::from_utf8_lossy(&chunk));
            let applied = buf.lines().filter_map(|l| l.strip_prefix("data: ")).any(|data| {
                let event: Value = serde_json::from_str(data).unwrap_or_default();
                event["data"]["kind"] == "config_applied"
                    && event["data"]["changes"].as_array().is_some_and(|c| c.contains(&json!("prices changed")))
            });
            if applied {
                return;
            }
        }
        panic!("the event stream ended: {buf}");
    };
    tokio::time::timeout(Duration::from_secs(60), wait).await.expect("the price edit applied within a minute");
}

/// A `[prices]` entry written into the config by hand while Keymux runs applies to the requests that
/// finish once the live config has taken it. The config file is live when Keymux keeps its settings
/// (not `--ephemeral`), so this gateway has a keychain (the test session's Secret Service).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_price_written_by_hand_applies_while_keymux_runs() {
    let (sim, _home, cfg, env) = home_with_key_a1(|metrics| {
        format!("# my config\nkeychain_service = \"keymux-spend-live\"\nmetrics_dir = \"{}\"\n", metrics.display())
    })
    .await;
    let gateway = Keymux::spawn(&["--config", cfg.to_str().unwrap(), "--upstream", &sim.base_url()], &env).await;
    let api = Admin::new(&gateway.root);
    let ask = || async { assert_eq!(ask(&gateway.base, "gpt-5.5-codex", json!({})).await, 200) };
    ask().await;
    let events = api.get("/events").await;
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    text.push_str("\n[prices.\"gpt-5.5-codex\"]\nalias = \"gpt-5.5\"\n");
    std::fs::write(&cfg, text).unwrap();
    prices_applied(events).await;
    ask().await;
    let records = records(&api).await;
    let unpriced: Vec<&Value> = records.iter().map(|r| &r["unpriced"]).collect();
    assert_eq!(unpriced, [&json!("model"), &Value::Null], "priced once the edit applied");
    // Priced as gpt-5.5 in the embedded table: $5 in, $0.50 cached, $30 out per 1M tokens.
    let usage = &records[1]["usage"];
    let (input, cached) = (usage["input"].as_u64().unwrap(), usage["cached"].as_u64().unwrap());
    let want = (input - cached) * 5_000 + cached * 500 + usage["output"].as_u64().unwrap() * 30_000;
    assert_eq!(nanos(&records[1]["cost_usd"]), want);
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spend_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("metrics");
    let keys = [key("a1", "sk-a1"), key("b1", "sk-b1")];
    let with_store = |c: &mut Config| {
        priced(c);
        c.metrics_dir = Some(store.clone());
    };
    let h = Harness::start_with(two_orgs(), &keys, with_store).await;
    let skew = clear_of_midnight(&h);
    traffic(&h).await;
    let want = expected(&records(&Admin::new(&h.root)).await);
    let read = |root: String| async move {
        let api = Admin::new(&root);
        let keys = api.get_json("/keys").await;
        let keys: BTreeMap<String, (u64, u64)> = keys
            .as_array()
            .unwrap()
            .iter()
            .map(|k| {
                (k["id"].as_str().unwrap().to_owned(), (nanos(&k["spend_today_usd"]), nanos(&k["spend_month_usd"])))
            })
            .collect();
        let all = nanos(&api.get_json("/pools").await[0]["spend_month_usd"]);
        let usage = api.get_json("/usage?bucket=day&days=3").await;
        let points: u64 = usage["points"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["key"] == "total")
            .map(|p| nanos(&p["spend_usd"]))
            .sum();
        (keys, all, points)
    };
    let before = read(h.root.clone()).await;
    assert_eq!(before.1, want.total);
    assert_eq!(before.2, want.total);
    assert_eq!(before.0["k_a1"].0, want.per_key["k_a1"]);
    let stopped = h.shutdown().await;
    assert_eq!(stopped.metrics, Ok(()), "the last flush wrote the spend");

    let again = Harness::start_with(two_orgs(), &keys, with_store).await;
    again.advance(skew);
    assert_eq!(Admin::new(&again.root).get_json("/decisions").await["data"], json!([]), "a fresh process");
    assert_eq!(read(again.root.clone()).await, before, "keys, pools and usage points read the same after a restart");
}

#[tokio::test]
async fn a_bad_price_in_the_config_names_the_file_the_line_and_the_fix() {
    let home = tempfile::tempdir().unwrap();
    let cfg = home.path().join("config.toml");
    let mut env = base_env(home.path());
    env.push(("KEYMUX_CLIENT_TOKEN".into(), TOKEN.into()));
    let cases = [
        ("[prices.\"gpt-5.5\"]\ninput = -5.0\noutput = 30.0\n", "line 4, column 9", "is negative"),
        ("[prices.\"gpt-5.5\"]\ninput = \"5\"\noutput = 30.0\n", "line 4, column 9", "without quotes"),
        ("[prices.\"my-azure\"]\nalias = \"gpt-99\"\n", "line 4, column 9", "\"gpt-99\", which has no price"),
    ];
    for (prices, at, fix) in cases {
        std::fs::write(&cfg, format!("listen = \"127.0.0.1:0\"\n\n{prices}")).unwrap();
        let (ok, _out, err) = run_keymux(&["--config", cfg.to_str().unwrap(), "serve", "--ephemeral"], &env, "").await;
        assert!(!ok, "{prices}");
        assert!(err.contains(cfg.to_str().unwrap()) && err.contains(at) && err.contains(fix), "{err}");
    }
}

/// `$0.001234`, as `keymux usage` prints an amount.
fn dollars(nanos: u64) -> String {
    let micros = (nanos + 500) / 1000;
    format!("${}.{:06}", micros / 1_000_000, micros % 1_000_000)
}

/// The line of `output` that begins with `name`.
fn line<'a>(output: &'a str, name: &str) -> &'a str {
    output.lines().find(|l| l.split_whitespace().next() == Some(name)).unwrap_or_else(|| panic!("{name}: {output}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keymux_usage_prints_spend_from_the_gateway_and_from_the_store_without_it() {
    let (sim, _home, cfg, mut env) =
        home_with_key_a1(|metrics| format!("metrics_dir = \"{}\"\n{PRICES}", metrics.display())).await;
    // Fingerprints stay the same across runs, so the store's rows are named after the restart.
    env.push(("KEYMUX_INSTALL_SECRET".into(), "install-secret-of-the-usage-test".into()));
    let config = cfg.to_str().unwrap();
    let gateway = Keymux::spawn(&["--config", config, "--ephemeral", "--upstream", &sim.base_url()], &env).await;
    for model in ["gpt-5.5", "gpt-5.5", "gpt-5.5-codex"] {
        assert_eq!(ask(&gateway.base, model, json!({})).await, 200);
    }
    let records = records(&Admin::new(&gateway.root)).await;
    let spent: u64 = records.iter().filter_map(expected_nanos).sum();
    assert!(spent > 0);
    // Two local days: the figures cannot fall apart at a midnight between the requests and the reading.
    let (ok, out, err) = run_keymux(&["--config", config, "usage", "--days", "2", "--by", "model"], &env, "").await;
    assert!(ok, "{err}");
    println!("{out}");
    assert!(line(&out, "gpt-5.5").contains(&dollars(spent)), "{out}");
    let codex: Vec<&str> = line(&out, "gpt-5.5-codex").split_whitespace().collect();
    assert_eq!((codex[1], codex[5], codex[6]), ("1", "unpriced", "1"), "requests, spend, unpriced: {out}");
    assert!(line(&out, "TOTAL").contains(&dollars(spent)), "{out}");
    assert!(out.contains("recent requests only"), "{out}");
    assert!(out.contains("UNPRICED:") && out.contains("[prices."), "says what unpriced means and the fix: {out}");
    let (ok, live, err) = run_keymux(&["--config", config, "usage", "--days", "2"], &env, "").await;
    assert!(ok, "{err}");
    let a1: Vec<&str> = line(&live, "a1").split_whitespace().collect();
    assert_eq!((a1[1], a1[5], a1[6]), ("3", dollars(spent).as_str(), "1"), "{live}");
    assert!(!live.contains("recent requests only"), "per key is read from the stored metrics: {live}");
    gateway.stop().await;

    let (ok, offline, err) = run_keymux(&["--config", config, "usage", "--days", "2"], &env, "").await;
    assert!(ok, "{err}");
    println!("{offline}");
    assert_eq!(line(&offline, "a1"), line(&live, "a1"), "the same figures from the store");
    assert!(offline.contains("no gateway running: read from the metrics store"), "{offline}");
    let (ok, _, err) = run_keymux(&["--config", config, "usage", "--by", "token"], &env, "").await;
    assert!(!ok);
    assert!(err.contains("keymux serve") && err.contains("--by key"), "says it needs the gateway: {err}");
}
