//! The gateway: the state every request shares (the pool, the affinity tables, the upstream client,
//! the accepted tokens, the clock, the metrics and the event stream) and the few operations on it that
//! are not part of one request's way through (`pipeline`): probing keys, publishing records, applying
//! what the provider taught.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::http::HeaderMap;
use bytes::Bytes;

use crate::affinity::Table;
use crate::clock::Clock;
use crate::config::Config;
use crate::events::{Events, RequestRecord};
use crate::keys::{KeyEntry, KeyId};
use crate::markers::Markers;
use crate::metrics::Metrics;
use crate::pipeline::classify::{self, Context, Heard};
use crate::pool::{Begin, Learned, Outcome, Pool};
use crate::router::{self, Policy};
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
    tokens: TokenSet,
    events: Events,
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
            tokens,
            events: Events::default(),
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

    /// The accepted local tokens.
    pub fn tokens(&self) -> &TokenSet {
        &self.tokens
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

    /// Applies what the provider taught to the pool, and logs a change of a key's health.
    pub fn apply(&self, learned: Learned) {
        if let Some((key, change)) = self.pool.apply(&learned) {
            tracing::info!(key = %key, change = ?change, "key health changed");
        }
    }

    /// Whether a new WebSocket could be served at all right now (some key is usable).
    pub fn can_open_socket(&self) -> bool {
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

    async fn probe(&self, key: KeyId) {
        let Some(guard) = self.pool.begin(&key, Begin::default(), self.clock.now()) else { return };
        let sent =
            self.upstream.send(guard.entry(), http::Method::GET, "/models", HeaderMap::new(), Bytes::new()).await;
        let label = guard.entry().label.clone();
        drop(guard);
        let now = self.clock.now();
        let (heard, verdict) = match sent {
            Ok(response) => {
                let heard = Heard::from_headers(response.status().as_u16(), response.headers(), now);
                let heard = if response.status().is_success() {
                    heard
                } else {
                    let body = response.bytes().await.unwrap_or_default();
                    heard.with_body(&body)
                };
                let verdict =
                    classify::judge(&heard, Context { model_named: false, quota_recheck: self.quota_recheck });
                (Some(heard), verdict)
            }
            Err(e) => {
                tracing::warn!(key = %key, label = %label, error = %e, "could not probe key");
                (None, classify::judge_failure(&e))
            }
        };
        let mut outcome = Outcome::new(key.clone(), now, verdict.outcome);
        if let Some(heard) = heard {
            tracing::info!(key = %key, label = %label, status = heard.status, org = heard.org.as_deref().unwrap_or("-"), "probed key");
            outcome.status = Some(heard.status);
            outcome.org = heard.org;
            outcome.limits = heard.limits;
        }
        self.apply(Learned::Answer(outcome));
    }

    /// The one way a finished request (HTTP, or a WebSocket turn) is reported: a log line, the hashed
    /// metrics under the key's fingerprint, and the event stream.
    pub fn publish(&self, record: RequestRecord) {
        tracing::info!(
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
        self.events.publish(record);
    }
}
