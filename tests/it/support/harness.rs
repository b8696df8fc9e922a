//! The gateway served in-process in front of the simulator, and the keys it is given.

use std::sync::Arc;
use std::time::Duration;

use keymux::budget::MoneyBudget;
use keymux::config::{Config, KeyConfig, TokenConfig};
use keymux::key_settings::KeySettings;
use keymux::keys::{KeyId, ProviderId};
use keymux::secrets::{MemoryStore, Secret, SecretStore as _};
use keymux::startup::{ConfigSource, StartOptions};
use keymux::{Gateway, Runtime};
use keymux_sim::{Sim, SimConfig};

use super::*;

/// A gateway served in-process on a loopback port through the same runtime `keymux serve` uses, in
/// front of a simulator.
pub struct Harness {
    pub sim: Sim,
    pub gateway: Arc<Gateway>,
    /// `http://127.0.0.1:PORT/v1`
    pub base: String,
    pub root: String,
    runtime: Option<Runtime>,
}

/// A key for the harness.
#[derive(Clone, Debug)]
pub struct TestKey {
    pub label: String,
    pub secret: String,
    pub provider: ProviderId,
    pub priority: u8,
    pub budget: Option<u64>,
    pub imported: bool,
    pub daily_usd: Option<keymux::spend::Usd>,
    pub reserve_at: Option<u8>,
    pub on_limit: keymux::budget::OnLimit,
}

impl TestKey {
    pub fn priority(mut self, tier: u8) -> Self {
        self.priority = tier;
        self
    }

    pub fn budget(mut self, tokens: u64) -> Self {
        self.budget = Some(tokens);
        self
    }

    /// A daily budget in US dollars, reserved past `reserve_at` percent, and what happens at 100 %.
    pub fn daily_usd(mut self, dollars: f64, reserve_at: Option<u8>, on_limit: keymux::budget::OnLimit) -> Self {
        self.daily_usd = Some(keymux::spend::Usd::from_nanos((dollars * 1e9).round() as u64));
        self.reserve_at = reserve_at;
        self.on_limit = on_limit;
        self
    }

    /// Imported from a client's own login, as `keymux setup codex --import-key` adds one.
    pub fn imported(mut self) -> Self {
        self.imported = true;
        self
    }
}

/// An OpenAI key with id `k_<label>`.
pub fn key(label: &str, secret: &str) -> TestKey {
    TestKey {
        label: label.to_owned(),
        secret: secret.to_owned(),
        provider: ProviderId::Openai,
        priority: 0,
        budget: None,
        imported: false,
        daily_usd: None,
        reserve_at: None,
        on_limit: keymux::budget::OnLimit::Reserve,
    }
}

pub fn azure_key(label: &str, secret: &str) -> TestKey {
    TestKey { provider: ProviderId::Azure, ..key(label, secret) }
}

/// The install secret every harness keys its markers with.
pub const INSTALL_SECRET: &str = "install-secret-of-the-test-harness";

/// A config naming `keys` (secrets go to the store), the harness token, and the simulator upstream.
fn harness_config(sim: &Sim, keys: &[TestKey], store: &MemoryStore) -> Config {
    let mut config = Config { upstream: sim.base_url(), ..Config::default() };
    for k in keys {
        let id = KeyId::new(format!("k_{}", k.label));
        store.set(&keymux::secrets::account::key(id.as_str()), &Secret::new(k.secret.as_str())).unwrap();
        config.keys.push(KeyConfig {
            id,
            label: k.label.clone(),
            provider: k.provider,
            base_url: (k.provider == ProviderId::Azure).then(|| sim.base_url()),
            org: None,
            disabled: false,
            imported: k.imported,
            settings: KeySettings { priority: k.priority, daily_token_budget: k.budget, ..KeySettings::default() },
            money: MoneyBudget { daily: k.daily_usd, reserve_at: k.reserve_at, on_limit: k.on_limit, monthly: None },
        });
    }
    config.tokens.push(TokenConfig {
        id: "t_test".into(),
        name: "test".into(),
        created_unix: 0,
        pool: "all".into(),
        login: false,
    });
    store.set(&keymux::secrets::account::token("t_test"), &Secret::new(TOKEN)).unwrap();
    store.set(keymux::secrets::account::INSTALL_SECRET, &Secret::new(INSTALL_SECRET)).unwrap();
    store.set(keymux::secrets::account::ADMIN_TOKEN, &Secret::new(ADMIN)).unwrap();
    config
}

/// Start options for a gateway on a free loopback port in front of `sim`, with `keys` and the harness
/// token in a memory store. Ephemeral: metrics stay in memory unless the test names a `metrics_dir`, so
/// no test ever writes to the user's data directory.
pub fn options_for(sim: &Sim, keys: &[TestKey], tweak: impl FnOnce(&mut Config)) -> StartOptions {
    let store = MemoryStore::default();
    let mut config = harness_config(sim, keys, &store);
    tweak(&mut config);
    StartOptions {
        config: ConfigSource::Value(Box::new(config)),
        store: Some(Arc::new(store)),
        listen: Some("127.0.0.1:0".parse().unwrap()),
        ephemeral: true,
        ..StartOptions::default()
    }
}

impl Harness {
    pub async fn start(sim_config: SimConfig, keys: &[TestKey]) -> Self {
        Self::start_with(sim_config, keys, |_| {}).await
    }

    pub async fn start_with(sim_config: SimConfig, keys: &[TestKey], tweak: impl FnOnce(&mut Config)) -> Self {
        let sim = Sim::start(sim_config).await.expect("simulator starts");
        Self::start_on(sim, keys, tweak).await
    }

    /// A gateway in front of a simulator the test started (and read addresses of) itself.
    pub async fn start_on(sim: Sim, keys: &[TestKey], tweak: impl FnOnce(&mut Config)) -> Self {
        let runtime = Runtime::start(options_for(&sim, keys, tweak)).await.expect("gateway starts");
        // As with `keymux serve`, every key's organization is learned before clients arrive.
        runtime.probed().await;
        let addr = runtime.addr();
        Self {
            sim,
            gateway: runtime.gateway().clone(),
            base: format!("http://{addr}/v1"),
            root: format!("http://{addr}"),
            runtime: Some(runtime),
        }
    }

    /// Moves the gateway's and the simulator's clocks on together.
    pub fn advance(&self, by: Duration) {
        self.gateway.clock().advance(by);
        self.sim.advance(by);
    }

    /// Every key's status, as the status API shows it.
    pub fn status(&self) -> Vec<keymux::pool::KeyStatus> {
        self.gateway.pool().status(self.gateway.clock().now(), self.gateway.today())
    }

    /// Stops the gateway the way `keymux serve` does on SIGTERM.
    pub async fn shutdown(mut self) -> keymux::runtime::Stopped {
        self.runtime.take().expect("running").shutdown().await
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        if let Some(runtime) = &self.runtime {
            runtime.stopper().stop();
        }
        self.sim.shutdown();
    }
}

/// Requests a client made (the start-up probes of `GET /v1/models` left out), per key.
pub fn client_counts(sim: &Sim) -> std::collections::BTreeMap<String, usize> {
    let mut counts = std::collections::BTreeMap::new();
    for e in sim.log() {
        if let (Some(key), false) = (e.key, e.path == "/v1/models" && e.method == "GET") {
            *counts.entry(key).or_default() += 1;
        }
    }
    counts
}

/// Moves the gateway's and the simulator's clocks past the next local midnight when it is under a
/// quarter of an hour away, so that the requests and the figures read after them share one local day
/// and month whenever the test runs. Returns how far the clocks moved.
pub fn clear_of_midnight(h: &Harness) -> Duration {
    let clock = h.gateway.clock();
    let (zone, now) = (clock.zone(), clock.unix_ms());
    let today = keymux::clock::local_day_start(now, &zone, 0);
    // 25 hours after a local midnight is always within the next local day (days last 23 to 25 hours).
    let tomorrow = keymux::clock::local_day_start(today + 25 * 3_600_000, &zone, 0);
    if tomorrow - now > 15 * 60_000 {
        return Duration::ZERO;
    }
    let by = Duration::from_millis(tomorrow - now + 60_000);
    h.advance(by);
    by
}

/// The simulator most affinity tests use: three organizations, five keys.
pub fn three_orgs() -> SimConfig {
    SimConfig::new().org("org-a", &["sk-a1", "sk-a2"]).org("org-b", &["sk-b1", "sk-b2"]).org("org-c", &["sk-c1"])
}

/// The five keys of `three_orgs`, with ids `k_a1` … `k_c1`.
pub fn five_keys() -> Vec<TestKey> {
    vec![key("a1", "sk-a1"), key("a2", "sk-a2"), key("b1", "sk-b1"), key("b2", "sk-b2"), key("c1", "sk-c1")]
}

/// The organization of a `three_orgs` key.
pub fn org_of(secret: &str) -> &'static str {
    match &secret[3..4] {
        "a" => "org-a",
        "b" => "org-b",
        _ => "org-c",
    }
}
