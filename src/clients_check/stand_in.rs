//! The gateway a check runs clients through: Keymux served in-process on `127.0.0.1:0` from a config
//! and a secret store held in memory, in front of the simulator (`keymux-sim`) as the provider, with a
//! throwaway key and client token made for this check alone. The user's config file, keychain, metrics
//! and run file are never read or written, and no request leaves loopback.

use std::sync::Arc;

use keymux_sim::{LogEntry, Sim, SimConfig};
use rand::Rng as _;

use crate::budget::MoneyBudget;
use crate::config::{Config, KeyConfig, TokenConfig};
use crate::events::RequestRecord;
use crate::key_settings::KeySettings;
use crate::keys::{KeyId, ProviderId};
use crate::limits::ServeOptions;
use crate::runtime::Runtime;
use crate::secrets::{account, MemoryStore, Secret, SecretStore as _};
use crate::startup::{ConfigSource, StartOptions};

/// The requests one stand-in remembers: a check makes a handful.
const RECORDS: usize = 1_000;

/// A gateway and its stand-in provider, for one check.
pub(super) struct StandIn {
    runtime: Option<Runtime>,
    sim: Sim,
    /// `http://127.0.0.1:PORT/v1`, the gateway's.
    pub(super) base: String,
    /// The client token the check's client sends.
    pub(super) token: String,
    /// The throwaway provider key, only for masking what a client printed.
    key: String,
}

impl StandIn {
    pub(super) async fn start() -> Result<Self, String> {
        let key = format!("sk-check-{}", random_hex());
        let token = format!("km-check-{}", random_hex());
        let sim = Sim::start(SimConfig::new().org("org-check", &[key.as_str()]))
            .await
            .map_err(|e| format!("the stand-in provider did not start: {e}"))?;
        let options = options(&sim, &key, &token).map_err(|e| format!("the check's key store: {e}"))?;
        let prepared = crate::startup::prepare(&options).await.map_err(|e| format!("Keymux did not start: {e}"))?;
        let listener = tokio::net::TcpListener::bind(prepared.listen)
            .await
            .map_err(|e| format!("Keymux could not listen on loopback: {e}"))?;
        // Served as `Runtime::start` would, but with no run file and no sweep of login pages: those
        // are the user's own gateway's.
        let runtime = Runtime::serve(listener, prepared.gateway, ServeOptions::default())
            .map_err(|e| format!("Keymux did not start: {e}"))?;
        runtime.probed().await;
        let base = format!("http://{}/v1", runtime.addr());
        Ok(Self { runtime: Some(runtime), sim, base, token, key })
    }

    /// The requests the gateway finished, oldest first.
    pub(super) fn records(&self) -> Vec<Arc<RequestRecord>> {
        self.runtime.as_ref().map(|r| r.gateway().events().recent(RECORDS)).unwrap_or_default()
    }

    /// What reached the stand-in provider (through the gateway: nothing else knows its address).
    pub(super) fn provider_log(&self) -> Vec<LogEntry> {
        self.sim.log()
    }

    /// `text` with the check's token and key, and any other key-shaped word, masked.
    pub(super) fn mask(&self, text: &str) -> String {
        let text = crate::secrets::mask_quoted(text, &self.token);
        crate::secrets::mask_quoted(&text, &self.key)
    }

    pub(super) async fn stop(mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown().await;
        }
        self.sim.shutdown();
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        if let Some(runtime) = &self.runtime {
            runtime.stopper().stop();
        }
        self.sim.shutdown();
    }
}

fn random_hex() -> String {
    hex::encode(rand::thread_rng().gen::<[u8; 16]>())
}

/// A config with the one key and the one token, both in a memory store with the install secret and
/// admin credential the gateway needs; ephemeral, so metrics stay in memory.
fn options(sim: &Sim, key: &str, token: &str) -> Result<StartOptions, crate::secrets::SecretsError> {
    let store = MemoryStore::default();
    let id = KeyId::new("k_check".to_owned());
    store.set(&account::key(id.as_str()), &Secret::new(key))?;
    store.set(&account::token("t_check"), &Secret::new(token))?;
    store.set(account::INSTALL_SECRET, &Secret::new(random_hex()))?;
    store.set(account::ADMIN_TOKEN, &Secret::new(format!("kma-check-{}", random_hex())))?;
    let mut config = Config { upstream: sim.base_url(), ..Config::default() };
    config.keys.push(KeyConfig {
        id,
        label: "check".into(),
        provider: ProviderId::Openai,
        base_url: None,
        org: None,
        disabled: false,
        imported: false,
        settings: KeySettings::default(),
        money: MoneyBudget::default(),
    });
    config.tokens.push(TokenConfig {
        id: "t_check".into(),
        name: "check".into(),
        created_unix: 0,
        pool: "all".into(),
        login: false,
    });
    Ok(StartOptions {
        config: ConfigSource::Value(Box::new(config)),
        store: Some(Arc::new(store)),
        listen: Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
        ephemeral: true,
        ..StartOptions::default()
    })
}
