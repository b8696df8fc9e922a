//! The gateway: the state every request shares (the pool, the affinity tables, the upstream client,
//! the accepted tokens, the clock, the metrics, the sessions and the event stream) and the few
//! operations on it that are not part of one request's way through (`pipeline`) or a change the user
//! makes (`control`): probing keys, publishing records and events, applying what the provider taught.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use axum::http::HeaderMap;
use bytes::Bytes;

use crate::access::Access;
use crate::affinity::Table;
use crate::clock::Clock;
use crate::config::Config;
use crate::events::{Event, Events, GatewayEvent, KeyChange, KeyEvent, RequestRecord, Routed};
use crate::keys::KeyTest;
use crate::keys::{KeyEntry, KeyId};
use crate::markers::Markers;
use crate::metrics::Metrics;
use crate::pipeline::classify::{self, Context, Heard};
use crate::pool::{Begin, HealthChange, Learned, Outcome, Pool};
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
    /// Per soft-affinity signal: the key that last served it to a successful end.
    soft: Table,
    upstream: Upstream,
    tokens: ArcSwap<TokenSet>,
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
    announced: Mutex<HashMap<KeyId, &'static str>>,
    clock: Clock,
    seq: AtomicU64,
    max_body_bytes: usize,
    policy: Policy,
    quota_recheck: Duration,
    /// Open WebSockets, so a shutdown can wait for them.
    sockets: TaskTracker,
    /// Cancelled when the gateway shuts down: open WebSockets close with 1001.
    closing: CancellationToken,
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
        Ok(Self {
            pool: Pool::new(keys, markers),
            metrics: Metrics::in_memory(),
            hints: Table::new(crate::affinity::HINT_CAPACITY, crate::affinity::DEFAULT_TTL),
            soft: Table::new(affinity.table_capacity, Duration::from_secs(affinity.table_ttl_secs)),
            upstream: Upstream::new(&config.upstream, &config.timeouts)?,
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
        })
    }

    /// Keeps metrics in `metrics` (by default they stay in memory).
    pub fn with_metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Keeps runtime changes (keys, tokens) in these settings.
    pub fn with_settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
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

    /// Today's UTC day number.
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
        if let Some((key, change)) = self.pool.apply(&learned) {
            let now = self.clock.now();
            let unix = |until: tokio::time::Instant| {
                self.clock.unix_ms() + u64::try_from(until.saturating_duration_since(now).as_millis()).unwrap_or(0)
            };
            let change = match change {
                HealthChange::Cooling { until } => KeyChange::CoolingStarted { until_unix_ms: unix(until) },
                HealthChange::QuotaExhausted { until } => KeyChange::QuotaExhausted { until_unix_ms: unix(until) },
                HealthChange::Rejected => KeyChange::Rejected,
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
            KeyChange::CoolingStarted { .. } => Some("cooling"),
            KeyChange::QuotaExhausted { .. } => Some("quota_exhausted"),
            KeyChange::Rejected => Some("invalid"),
            KeyChange::Disabled => Some("disabled"),
            KeyChange::CoolingEnded | KeyChange::Recovered | KeyChange::Enabled | KeyChange::Added => Some("ready"),
            KeyChange::Removed | KeyChange::Updated => None,
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

    /// Notices what time alone changed (cooldowns that ended, out-of-quota keys due to be tried again)
    /// and tells the event stream. The runtime calls it every second.
    pub fn tick(&self) {
        let changes: Vec<(KeyId, &'static str)> = {
            let announced = self.announced.lock().unwrap_or_else(|p| p.into_inner());
            self.pool
                .status(self.clock.now(), self.today())
                .into_iter()
                .filter(|k| k.health == "ready")
                .filter_map(|k| {
                    announced.get(&k.id).filter(|s| matches!(**s, "cooling" | "quota_exhausted")).map(|s| (k.id, *s))
                })
                .collect()
        };
        for (key, was) in changes {
            self.announce(&key, if was == "cooling" { KeyChange::CoolingEnded } else { KeyChange::Recovered });
        }
    }

    /// Tells the event stream that a request was routed.
    pub(crate) fn routed(&self, routed: Routed) {
        self.events.publish(routed.at_unix_ms, Event::Routed(Box::new(routed)));
    }

    /// Whether a new WebSocket could be served at all right now (some key is usable).
    pub fn can_open_socket(&self) -> bool {
        if self.paused() {
            return false;
        }
        let facts = crate::facts::RequestFacts {
            stream: true,
            ..crate::facts::RequestFacts::new(0, crate::facts::Operation::ResponsesCreate)
        };
        let now = self.clock.now();
        let view = self.pool.view(crate::pool::ViewFor { model: None, tokens: 0, now, day: self.today() });
        router::decide(&facts, &view, &router::Memory::default(), now, &self.policy).refusal.is_none()
    }

    /// Asks every key for `GET /models`: a free call that teaches the pool each key's organization (so
    /// pinned sessions can use all of an organization's keys from the first request) and flags keys the
    /// provider rejects before a client meets them. The answer goes through the one classifier.
    pub async fn probe_keys(&self) {
        let probes = self.pool.ids().into_iter().map(|key| self.probe(key));
        futures::future::join_all(probes).await;
    }

    /// Probes one key (`GET /models`, judged by the one classifier, applied to the pool); `None` when it
    /// is not in the pool.
    pub(crate) async fn probe(&self, key: KeyId) -> Option<KeyTest> {
        let started = self.clock.now();
        let guard = self.pool.begin(&key, Begin::default(), started)?;
        let sent =
            self.upstream.send(guard.entry(), http::Method::GET, "/models", HeaderMap::new(), Bytes::new()).await;
        let label = guard.entry().label.clone();
        drop(guard);
        let now = self.clock.now();
        let heard = match sent {
            Ok(response) => {
                let heard = Heard::from_headers(response.status().as_u16(), response.headers(), now);
                if response.status().is_success() {
                    heard
                } else {
                    heard.with_body(&response.bytes().await.unwrap_or_default())
                }
            }
            Err(e) => {
                tracing::warn!(key = %key, label = %label, error = %e, "could not probe key");
                self.apply(Learned::Answer(Outcome::new(key, now, classify::judge_failure(&e).outcome)));
                let message = format!("key '{label}' could not be tested: {e}");
                return Some(KeyTest {
                    ok: false,
                    status: None,
                    org: None,
                    message,
                    duration_ms: self.clock.elapsed_ms(started),
                });
            }
        };
        let verdict = classify::judge(&heard, Context { model_named: false, quota_recheck: self.quota_recheck });
        tracing::info!(key = %key, label = %label, status = heard.status, org = heard.org.as_deref().unwrap_or("-"), "probed key");
        let ok = verdict.failure.is_none();
        let message = match ok {
            true => format!("the provider accepted key '{label}'"),
            false => format!("the provider answered {} to key '{label}'", heard.status),
        };
        let test = KeyTest {
            ok,
            status: Some(heard.status),
            org: heard.org.clone(),
            message,
            duration_ms: self.clock.elapsed_ms(started),
        };
        let mut outcome = Outcome::new(key, now, verdict.outcome);
        outcome.status = Some(heard.status);
        outcome.org = heard.org;
        outcome.limits = heard.limits;
        self.apply(Learned::Answer(outcome));
        Some(test)
    }

    /// The one way a finished request (HTTP, or a WebSocket turn) is reported: a log line, the hashed
    /// metrics under the key's fingerprint, the sessions, and the event stream.
    pub fn publish(&self, record: RequestRecord) {
        // Per request, so `debug`: see `logging`.
        tracing::debug!(
            seq = record.decision.seq,
            op = ?record.operation,
            transport = ?record.transport,
            client = ?record.client,
            model = record.model.as_deref().unwrap_or("-"),
            key = record.served_by.as_ref().map(KeyId::as_str).unwrap_or("-"),
            route = ?record.decision.route,
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
