//! The gateway: the state every request shares (the pool, the affinity tables, the upstream client,
//! the accepted tokens, the clock, the metrics, the sessions and the event stream), and publishing
//! (`publish.rs`): records, events, and the health changes what the provider taught makes.
//!
//! What acts on this state lives elsewhere, and imports it (never the reverse):
//! * `pipeline`: one request's way through (admit, attempt, record) and key probes, as functions over
//!   `&Gateway`;
//! * `control`: the changes a user makes (keys, tokens, pause), as `impl Gateway` in `control.rs`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;

use crate::access::Access;
use crate::affinity::Table;
use crate::clock::Clock;
use crate::config::Config;
use crate::events::{Events, GatewayEvent};
use crate::keys::{KeyEntry, KeyId};
use crate::markers::Markers;
use crate::metrics::Metrics;
use crate::notices::Notices;
use crate::pool::Pool;
use crate::pools::{PoolConfig, Pools};
use crate::router::{self, Policy};
use crate::sessions::Sessions;
use crate::settings::Settings;
use crate::tokens::TokenSet;
use crate::upstream::{Upstream, UpstreamError};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

mod publish;

/// The gateway.
pub struct Gateway {
    pool: Pool,
    metrics: Metrics,
    /// Per session: the key that last served one of its Responses requests (WebSocket resumes).
    hints: Table,
    /// Per session: the organizations whose items were dropped to rescue it (they stay dropped).
    rescued: Table<Vec<crate::markers::OrgTag>>,
    /// Per session: the organizations that dropped its reasoning as another organization's (where it
    /// does not live).
    misplaced: Table<Vec<crate::markers::OrgTag>>,
    /// Per soft-affinity signal: the key that last served it to a successful end.
    soft: Table,
    upstream: Upstream,
    tokens: ArcSwap<TokenSet>,
    /// The user's pools, resolved to key ids; replaced whole when a pool or a key changes.
    pools: ArcSwap<Pools>,
    /// Pools from `KEYMUX_POOL_*`: kept beside the config's, never written to it.
    env_pools: Vec<PoolConfig>,
    /// The user and password of each pool's proxy that has one (`proxy_login`), by pool: read from
    /// the keychain at start, changed with the pool, from the environment for its pools. At most one
    /// per pool.
    proxy_logins: Mutex<HashMap<String, crate::secrets::Secret>>,
    events: Events,
    sessions: Sessions,
    access: Access,
    /// Clients' logins (`oauth`): those under way and the issued ones' refresh tokens.
    logins: crate::oauth::Logins,
    settings: Settings,
    paused: AtomicBool,
    /// Where the gateway listens, once it does.
    addr: std::sync::OnceLock<std::net::SocketAddr>,
    started_unix_ms: u64,
    keychain_ok: AtomicBool,
    /// What has been told, so each change is told once.
    notices: Notices,
    clock: Clock,
    seq: AtomicU64,
    max_body_bytes: usize,
    policy: Policy,
    quota_recheck: Duration,
    /// Open WebSockets, so a shutdown can wait for them.
    sockets: TaskTracker,
    /// Cancelled when the gateway shuts down: open WebSockets close with 1001.
    closing: CancellationToken,
    /// The latest check of each installed client (bounded by the clients Keymux knows: two).
    clients_checked: Mutex<Vec<crate::events::ClientChecked>>,
    /// One refresh of a key's credential at a time (`refresh::fresh`).
    refreshing: tokio::sync::Mutex<()>,
}

impl Gateway {
    /// Builds a gateway from the config's settings, the keys (with their secrets), the tokens and the
    /// markers keyed by the install secret.
    pub fn new(
        config: &Config,
        keys: Vec<KeyEntry>,
        tokens: TokenSet,
        markers: Markers,
    ) -> Result<Self, UpstreamError> {
        let affinity = &config.affinity;
        let labels: Vec<(KeyId, String)> = keys.iter().map(|k| (k.id.clone(), k.label.clone())).collect();
        let pools = Pools::resolve(config.pools.clone(), &labels, &Pools::default());
        let upstream = Upstream::new(config.endpoints(), &config.timeouts, &config.extra_roots_pem)?;
        upstream.set_proxies(&pools.proxies().into_iter().map(|(key, url, _)| (key, url, None)).collect::<Vec<_>>());
        let pool = Pool::new(keys, markers);
        // A key the user switched off stays off across restarts.
        for key in config.keys.iter().filter(|k| k.disabled) {
            pool.set_disabled(&key.id, true);
        }
        Ok(Self {
            pools: ArcSwap::from_pointee(pools),
            env_pools: Vec::new(),
            proxy_logins: Mutex::default(),
            pool,
            metrics: Metrics::in_memory(),
            hints: Table::new(crate::affinity::HINT_CAPACITY, crate::affinity::DEFAULT_TTL),
            rescued: Table::new(crate::affinity::RESCUED_CAPACITY, crate::affinity::RESCUED_TTL),
            misplaced: Table::new(crate::affinity::RESCUED_CAPACITY, crate::affinity::RESCUED_TTL),
            soft: Table::new(affinity.table_capacity, Duration::from_secs(affinity.table_ttl_secs)),
            upstream,
            tokens: ArcSwap::from_pointee(tokens),
            events: Events::default(),
            sessions: Sessions::default(),
            access: Access::default(),
            logins: crate::oauth::Logins::default(),
            settings: Settings::new(Arc::new(crate::secrets::MemoryStore::default()), None, config.clone()),
            paused: AtomicBool::new(false),
            addr: std::sync::OnceLock::new(),
            started_unix_ms: Clock::system().unix_ms(),
            keychain_ok: AtomicBool::new(true),
            notices: Notices::default(),
            clock: Clock::system(),
            seq: AtomicU64::new(0),
            max_body_bytes: config.max_body_bytes,
            quota_recheck: Duration::from_secs(config.quota_recheck_secs),
            policy: Policy {
                max_attempts: config.max_attempts.clamp(1, router::MAX_ATTEMPTS),
                encrypted_affinity: affinity.encrypted_content,
                continuity: affinity.continuity,
                soft_affinity: affinity.prompt_cache,
                max_in_flight_per_key: affinity.max_in_flight_per_key,
                lost_org: affinity.lost_org,
            },
            sockets: TaskTracker::new(),
            closing: CancellationToken::new(),
            clients_checked: Mutex::default(),
            refreshing: tokio::sync::Mutex::new(()),
        })
    }

    /// Held while a key's credential is refreshed: one refresh at a time (`refresh::fresh`).
    pub fn refreshing(&self) -> &tokio::sync::Mutex<()> {
        &self.refreshing
    }

    /// What has been told, so each change is told once.
    pub fn notices(&self) -> &Notices {
        &self.notices
    }

    /// Keeps metrics in `metrics` (by default they stay in memory).
    pub fn with_metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Keeps runtime changes (keys, tokens, pools) in these settings.
    pub fn with_settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
        self.refresh_pools();
        self
    }

    /// Adds pools from the environment (`KEYMUX_POOL_*`), kept beside the config's.
    pub fn with_env_pools(mut self, pools: Vec<PoolConfig>) -> Self {
        self.env_pools = pools;
        self.refresh_pools();
        self
    }

    /// Reads time from `clock` (tests pass one they can advance).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// The metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The pool.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The event stream.
    pub fn events(&self) -> &Events {
        &self.events
    }

    /// The accepted local tokens (a snapshot).
    pub fn tokens(&self) -> Arc<TokenSet> {
        self.tokens.load_full()
    }

    /// The user's pools (a snapshot).
    pub fn pools(&self) -> arc_swap::Guard<Arc<Pools>> {
        self.pools.load()
    }

    /// Pools from the environment (`KEYMUX_POOL_*`).
    pub fn env_pools(&self) -> &[PoolConfig] {
        &self.env_pools
    }

    /// Resolves the pools again from the config and the keys there are now (after a pool or a key
    /// changed). Keys taken out of a pool are remembered as its former keys.
    pub(crate) fn refresh_pools(&self) {
        let mut defs = self.settings.config().pools;
        defs.extend(self.env_pools.iter().cloned());
        let labels: Vec<(KeyId, String)> =
            self.pool.ids().into_iter().map(|id| (id.clone(), self.pool.label(&id))).collect();
        self.pools.rcu(|old| Pools::resolve(defs.clone(), &labels, old));
        let logins = self.proxy_logins.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let login_of = |pool: &str| logins.get(&pool.to_ascii_lowercase()).cloned();
        let proxies = self.pools.load().proxies();
        let wanted: Vec<_> =
            proxies.into_iter().map(|(key, url, pool)| (key, url, pool.as_deref().and_then(login_of))).collect();
        self.upstream.set_proxies(&wanted);
    }

    /// Keeps (or with `None` forgets) the user and password of pool `pool`'s proxy, and goes out with
    /// them from now on.
    pub(crate) fn set_proxy_login(&self, pool: &str, login: Option<crate::secrets::Secret>) {
        {
            let mut logins = self.proxy_logins.lock().unwrap_or_else(|p| p.into_inner());
            match login {
                Some(login) => logins.insert(pool.to_ascii_lowercase(), login),
                None => logins.remove(&pool.to_ascii_lowercase()),
            };
        }
        self.refresh_pools();
    }

    /// The user and password of the pools' proxies (from the keychain and the environment), by pool.
    pub fn with_proxy_logins(self, logins: Vec<(String, crate::secrets::Secret)>) -> Self {
        {
            let mut held = self.proxy_logins.lock().unwrap_or_else(|p| p.into_inner());
            held.extend(logins.into_iter().map(|(pool, login)| (pool.to_ascii_lowercase(), login)));
        }
        self.refresh_pools();
        self
    }

    /// Replaces the accepted tokens.
    pub(crate) fn swap_tokens(&self, change: impl Fn(&TokenSet) -> TokenSet) {
        self.tokens.rcu(|set| change(set));
    }

    /// The recent sessions.
    pub fn sessions(&self) -> &Sessions {
        &self.sessions
    }

    /// Who may call the control API.
    pub fn access(&self) -> &Access {
        &self.access
    }

    /// Clients' logins (`oauth`).
    pub fn logins(&self) -> &crate::oauth::Logins {
        &self.logins
    }

    /// Where runtime changes are kept.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Records where the gateway listens (the runtime does, once it has bound).
    pub fn set_addr(&self, addr: std::net::SocketAddr) {
        let _ = self.addr.set(addr);
    }

    /// The base URL clients use.
    pub fn base_url(&self) -> String {
        self.addr.get().map_or_else(|| "http://127.0.0.1:8787/v1".into(), |a| format!("http://{a}/v1"))
    }

    /// A fresh one-time link that logs a browser (or the tray window) into the dashboard.
    pub fn login_link(&self) -> String {
        let code = self.access.issue_login(self.clock.now());
        let root = self.base_url();
        let root = root.trim_end_matches("/v1");
        format!("{root}/login?code={}", code.expose())
    }

    /// When the gateway started, Unix milliseconds.
    pub fn started_unix_ms(&self) -> u64 {
        self.started_unix_ms
    }

    /// Whether the secret store answered the last time it was asked.
    pub fn keychain_ok(&self) -> bool {
        self.keychain_ok.load(Ordering::Relaxed)
    }

    /// Records whether the secret store answers.
    pub fn set_keychain_ok(&self, ok: bool) {
        self.keychain_ok.store(ok, Ordering::Relaxed);
    }

    /// Whether routing is paused.
    pub fn paused(&self) -> bool {
        self.paused.load(Ordering::Relaxed)
    }

    /// Sets the pause; returns what it was.
    pub(crate) fn set_paused(&self, paused: bool) -> bool {
        self.paused.swap(paused, Ordering::Relaxed)
    }

    /// The clock every part of the gateway reads.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The markers (keyed by the install secret).
    pub fn markers(&self) -> &Markers {
        self.pool.markers()
    }

    /// Which key served each session's requests (WebSocket resumes).
    pub fn hints(&self) -> &Table {
        &self.hints
    }

    /// The organizations dropped from each rescued session.
    pub fn rescued(&self) -> &Table<Vec<crate::markers::OrgTag>> {
        &self.rescued
    }

    /// The organizations that dropped each session's reasoning as another organization's
    /// (`pipeline::dropped`): where its reasoning does not live.
    pub fn misplaced(&self) -> &Table<Vec<crate::markers::OrgTag>> {
        &self.misplaced
    }

    /// The soft-affinity table.
    pub fn soft(&self) -> &Table {
        &self.soft
    }

    /// The routing policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The upstream client.
    pub fn upstream(&self) -> &Upstream {
        &self.upstream
    }

    /// The request body cap.
    pub fn max_body_bytes(&self) -> usize {
        self.max_body_bytes
    }

    /// How long an out-of-quota key rests.
    pub fn quota_recheck(&self) -> Duration {
        self.quota_recheck
    }

    /// The open WebSockets.
    pub fn sockets(&self) -> &TaskTracker {
        &self.sockets
    }

    /// Cancelled when the gateway shuts down.
    pub fn closing(&self) -> CancellationToken {
        self.closing.clone()
    }

    /// Asks every open WebSocket to close (the gateway is shutting down).
    pub fn close_sockets(&self) {
        self.closing.cancel();
        self.sockets.close();
    }

    /// Today's and this month's spend per key (local periods), for the budgets in money.
    pub fn spend_now(&self) -> std::sync::Arc<crate::budget::SpendNow> {
        self.metrics.spend_now(self.clock.unix_ms(), || self.clock.periods())
    }

    /// The UTC day number now.
    pub fn today(&self) -> u32 {
        crate::clock::utc_day(self.clock.unix_ms())
    }

    /// The next request number.
    pub fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The latest check of each installed client (at most one per client Keymux checks).
    pub fn clients_checked(&self) -> Vec<crate::events::ClientChecked> {
        self.clients_checked.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Keeps a client's check (in place of its last) and tells the event stream.
    pub fn client_checked(&self, checked: crate::events::ClientChecked) {
        self.remember_client_check(checked.clone());
        self.notify(GatewayEvent::ClientChecked(checked));
    }

    /// Keeps a client's check made by an earlier run (in place of its last), without telling anyone
    /// again: the Connect view shows it, no notification repeats it.
    pub fn remember_client_check(&self, checked: crate::events::ClientChecked) {
        let mut all = self.clients_checked.lock().unwrap_or_else(|p| p.into_inner());
        all.retain(|c| c.name != checked.name);
        all.push(checked);
    }
}
