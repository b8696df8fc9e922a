//! The gateway: the state every request shares (the pool, the affinity tables, the upstream client,
//! the accepted tokens, the clock, the metrics, the sessions and the event stream), and publishing:
//! records, events, and the health changes what the provider taught makes.
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
use crate::budget::BudgetState;
use crate::clock::Clock;
use crate::config::Config;
use crate::events::{BudgetOf, Event, Events, GatewayEvent, KeyChange, KeyEvent, RequestRecord, Routed};
use crate::keys::{KeyEntry, KeyId};
use crate::markers::Markers;
use crate::metrics::Metrics;
use crate::pool::{HealthChange, HealthState, Learned, Pool};
use crate::pools::{PoolConfig, Pools};
use crate::router::{self, Policy};
use crate::sessions::Sessions;
use crate::settings::Settings;
use crate::tokens::TokenSet;
use crate::upstream::{Upstream, UpstreamError};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The gateway.
pub struct Gateway {
    pool: Pool,
    metrics: Metrics,
    /// Per session: the key that last served one of its Responses requests (WebSocket resumes).
    hints: Table,
    /// Per session: the organizations whose items were dropped to rescue it (they stay dropped).
    rescued: Table<Vec<crate::markers::OrgTag>>,
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
    settings: Settings,
    paused: AtomicBool,
    /// Where the gateway listens, once it does.
    addr: std::sync::OnceLock<std::net::SocketAddr>,
    started_unix_ms: u64,
    keychain_ok: AtomicBool,
    /// The health state last announced per key (bounded by the pool), so a change is told once.
    announced: Mutex<HashMap<KeyId, HealthState>>,
    /// The ChatGPT plans last announced used up (at most the pool's keys), so each running out and
    /// coming back is told once.
    plans_used_up: Mutex<std::collections::HashSet<KeyId>>,
    clock: Clock,
    seq: AtomicU64,
    max_body_bytes: usize,
    policy: Policy,
    quota_recheck: Duration,
    /// The last config-file problem said, so one bad edit is said once.
    refused: Mutex<Option<String>>,
    /// Open WebSockets, so a shutdown can wait for them.
    sockets: TaskTracker,
    /// Cancelled when the gateway shuts down: open WebSockets close with 1001.
    closing: CancellationToken,
    /// Client setups previewed through the control API, waiting for a yes (bounded).
    setup_pending: crate::setup::Pending,
    /// The budget state last told per key and per pool (bounded by the keys and pools there are), so
    /// each change is told once.
    budget_said: Mutex<HashMap<BudgetOf, BudgetState>>,
    /// The latest check of each installed client (bounded by the clients Keymux knows: two).
    clients_checked: Mutex<Vec<crate::events::ClientChecked>>,
    /// One refresh of a ChatGPT plan's login at a time.
    refresher: crate::chatgpt::Refresher,
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
        let upstream = Upstream::new(&config.upstream, &config.timeouts, &config.extra_roots_pem)?
            .with_chatgpt(&config.chatgpt_base_url, &config.chatgpt_auth_url);
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
            soft: Table::new(affinity.table_capacity, Duration::from_secs(affinity.table_ttl_secs)),
            upstream,
            tokens: ArcSwap::from_pointee(tokens),
            events: Events::default(),
            sessions: Sessions::default(),
            access: Access::default(),
            settings: Settings::new(Arc::new(crate::secrets::MemoryStore::default()), None, config.clone()),
            paused: AtomicBool::new(false),
            addr: std::sync::OnceLock::new(),
            started_unix_ms: Clock::system().unix_ms(),
            keychain_ok: AtomicBool::new(true),
            announced: Mutex::default(),
            plans_used_up: Mutex::default(),
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
            refused: Mutex::new(None),
            sockets: TaskTracker::new(),
            closing: CancellationToken::new(),
            setup_pending: crate::setup::Pending::default(),
            budget_said: Mutex::default(),
            clients_checked: Mutex::default(),
            refresher: crate::chatgpt::Refresher::default(),
        })
    }

    /// The one refresh of a ChatGPT plan's login at a time (`chatgpt::fresh`).
    pub fn refresher(&self) -> &crate::chatgpt::Refresher {
        &self.refresher
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

    /// Remembers a config-file problem; whether it is new (and so worth saying).
    pub(crate) fn note_refused(&self, message: &str) -> bool {
        let mut last = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        let new = last.as_deref() != Some(message);
        *last = Some(message.to_owned());
        new
    }

    /// A valid config again: the next problem is news.
    pub(crate) fn forget_refused(&self) {
        *self.refused.lock().unwrap_or_else(|p| p.into_inner()) = None;
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

    /// Client setups previewed through the control API, waiting for a yes.
    pub fn setup_pending(&self) -> &crate::setup::Pending {
        &self.setup_pending
    }

    /// Who may call the control API.
    pub fn access(&self) -> &Access {
        &self.access
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

    /// Applies what the provider taught to the pool, and tells the event stream when a key's health
    /// changed.
    pub fn apply(&self, learned: Learned) {
        let plan_reported = matches!(&learned, Learned::Outcome(o) if o.plan.is_some());
        let changed = self.pool.apply(&learned);
        if plan_reported || changed.is_some() {
            self.tell_plans(&self.pool.status(self.clock.now(), self.today()));
        }
        if let Some((key, change)) = changed {
            let now = self.clock.now();
            let unix = |until: std::time::Instant| {
                self.clock.unix_ms() + u64::try_from(until.saturating_duration_since(now).as_millis()).unwrap_or(0)
            };
            let change = match change {
                HealthChange::Cooling { until } => KeyChange::CoolingStarted { until_unix_ms: unix(until) },
                HealthChange::QuotaExhausted { until } => KeyChange::QuotaExhausted { until_unix_ms: unix(until) },
                HealthChange::Rejected => KeyChange::Rejected,
                HealthChange::Unreachable { retry } => KeyChange::Unreachable { retry_unix_ms: unix(retry) },
                HealthChange::Recovered => KeyChange::Recovered,
            };
            self.announce(&key, change);
        }
    }

    /// Tells the event stream that a key changed (once per change of its health state).
    pub(crate) fn announce(&self, key: &KeyId, change: KeyChange) {
        self.announce_as(key, self.pool.label(key), change);
    }

    /// Like `announce`, with the label given (a removed key's is no longer in the pool).
    pub(crate) fn announce_as(&self, key: &KeyId, label: String, change: KeyChange) {
        let state = match change {
            KeyChange::CoolingStarted { .. } => Some(HealthState::Cooling),
            KeyChange::QuotaExhausted { .. } => Some(HealthState::QuotaExhausted),
            KeyChange::Rejected => Some(HealthState::Rejected),
            KeyChange::Unreachable { .. } => Some(HealthState::Unreachable),
            KeyChange::Disabled => Some(HealthState::Disabled),
            KeyChange::CoolingEnded | KeyChange::Recovered | KeyChange::Enabled | KeyChange::Added => {
                Some(HealthState::Ready)
            }
            KeyChange::Removed | KeyChange::Updated | KeyChange::PlanUsedUp { .. } | KeyChange::PlanBack => None,
        };
        {
            let mut announced = self.announced.lock().unwrap_or_else(|p| p.into_inner());
            match (state, change) {
                (_, KeyChange::Removed) => {
                    announced.remove(key);
                }
                // A cooldown that grew is news; any other repeat is not.
                (Some(state), _)
                    if announced.get(key) == Some(&state) && !matches!(change, KeyChange::CoolingStarted { .. }) =>
                {
                    return
                }
                (Some(state), _) => {
                    announced.insert(key.clone(), state);
                }
                (None, _) => {}
            }
        }
        tracing::info!(key = %key, label = %label, change = ?change, "key changed");
        self.events.publish(self.clock.unix_ms(), Event::Key(KeyEvent { key: key.clone(), label, change }));
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

    /// Tells the event stream something about the gateway as a whole.
    pub(crate) fn notify(&self, event: GatewayEvent) {
        tracing::info!(event = ?event, "gateway");
        self.events.publish(self.clock.unix_ms(), Event::Gateway(event));
    }

    /// Tells the event stream the metrics store failed (with why) or recovered.
    pub(crate) fn notify_store(&self, failure: Option<String>) {
        self.notify(match failure {
            Some(message) => GatewayEvent::StoreFailed { message },
            None => GatewayEvent::StoreRecovered,
        });
    }

    /// Notices what time alone changed (cooldowns that ended, out-of-quota keys due to be tried again,
    /// login codes that expired, whose pages go) and tells the event stream. The runtime calls it every
    /// second, with `budgets::tell`.
    pub fn tick(&self) {
        crate::login_page::remove_spent(&self.access, self.clock.now());
        let statuses = self.pool.status(self.clock.now(), self.today());
        let changes: Vec<(KeyId, HealthState)> = {
            let announced = self.announced.lock().unwrap_or_else(|p| p.into_inner());
            statuses
                .iter()
                .filter(|k| k.health == HealthState::Ready)
                .filter_map(|k| {
                    let was = announced
                        .get(&k.id)
                        .filter(|s| matches!(s, HealthState::Cooling | HealthState::QuotaExhausted));
                    was.map(|s| (k.id.clone(), *s))
                })
                .collect()
        };
        for (key, was) in changes {
            self.announce(
                &key,
                if was == HealthState::Cooling { KeyChange::CoolingEnded } else { KeyChange::Recovered },
            );
        }
        self.tell_plans(&statuses);
    }

    /// Tells the event stream when a ChatGPT plan runs out (by its 429, or by a window its answer
    /// reported used up) and when it is back, once each, from the keys' `statuses` now.
    fn tell_plans(&self, statuses: &[crate::pool::KeyStatus]) {
        let now_unix_ms = self.clock.unix_ms();
        let plans: Vec<(&KeyId, Option<u64>)> = statuses
            .iter()
            .filter(|k| k.plan.is_some())
            .map(|k| (&k.id, k.plan_used_up_until_unix_ms(now_unix_ms)))
            .collect();
        let changes: Vec<(KeyId, KeyChange)> = {
            let mut told = self.plans_used_up.lock().unwrap_or_else(|p| p.into_inner());
            told.retain(|id| plans.iter().any(|(plan, _)| *plan == id));
            plans
                .into_iter()
                .filter_map(|(id, until)| match until {
                    Some(until_unix_ms) if told.insert(id.clone()) => {
                        Some((id.clone(), KeyChange::PlanUsedUp { until_unix_ms }))
                    }
                    None if told.remove(id) => Some((id.clone(), KeyChange::PlanBack)),
                    _ => None,
                })
                .collect()
        };
        for (key, change) in changes {
            self.announce(&key, change);
        }
    }

    /// The last budget state told for each key and pool (`budgets::tell` keeps it).
    pub(crate) fn budgets_told(&self) -> std::sync::MutexGuard<'_, HashMap<BudgetOf, BudgetState>> {
        self.budget_said.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Tells the event stream that a request was routed.
    pub(crate) fn routed(&self, routed: Arc<Routed>) {
        self.events.publish(routed.at_unix_ms, Event::Routed(routed));
    }

    /// The one way a finished request (HTTP, or a WebSocket turn) is reported: a log line, the hashed
    /// metrics under the key's fingerprint, the sessions, and the event stream.
    pub fn publish(&self, record: RequestRecord) {
        // Per request, so `debug`: see `logging`.
        tracing::debug!(
            seq = record.routed.decision.seq,
            op = ?record.routed.operation,
            transport = ?record.routed.transport,
            client = ?record.routed.client,
            model = record.routed.model.as_deref().unwrap_or("-"),
            key = record.served_by.as_ref().map(KeyId::as_str).unwrap_or("-"),
            route = ?record.routed.decision.route,
            attempts = record.attempts.len(),
            status = record.status,
            error = record.error.or(record.upstream_code).unwrap_or("-"),
            ttfb_ms = record.ttfb_ms,
            ms = record.duration_ms,
            "request"
        );
        let fingerprint = record
            .served_by
            .as_ref()
            .or_else(|| record.attempts.last().map(|a| &a.key))
            .and_then(|k| self.pool.fingerprint(k));
        self.metrics.record(&record, fingerprint);
        let org = record.served_by.as_ref().and_then(|k| self.pool.org_of(k));
        self.sessions.observe(&record, org);
        self.events.publish_record(record);
    }
}
