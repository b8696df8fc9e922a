//! One request, end to end: read the body under the cap, extract facts and strip markers, decide, walk
//! the candidates (failing over only before any byte reached the client), relay the answer as it
//! arrives with the serving key's markers on org-bound values, and record the outcome in the pool and
//! the event stream.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, request, HeaderMap, Response, StatusCode};
use axum::response::IntoResponse;
use bytes::{Bytes, BytesMut};
use futures::StreamExt as _;
use tokio::time::Instant;

use crate::config::Config;
use crate::error::ApiError;
use crate::events::{Attempt, Events, FailureKind, RequestRecord};
use crate::facts::{self, FactsError, Operation, RequestFacts};
use crate::keys::{KeyEntry, KeyId};
use crate::markers::Markers;
use crate::pool::{InFlight, Outcome, OutcomeKind, Pool};
use crate::relay::{SseRewriter, Tagger, MAX_EVENT_BYTES};
use crate::router::{self, Decision, Policy, Refusal};
use crate::tokens::TokenSet;
use crate::upstream::{self, Upstream, UpstreamError};

/// Cooldown for a 429 that gave no hint at all.
const DEFAULT_COOLDOWN: Duration = Duration::from_secs(5);
/// Largest upstream error body Keymux reads to classify it (error bodies are small JSON).
const MAX_ERROR_BODY: usize = 256 * 1024;

/// The gateway: the pool, the upstream client, the accepted tokens and the event stream.
pub struct Gateway {
    pool: Pool,
    metrics: crate::metrics::Metrics,
    hints: crate::affinity::Table,
    soft: crate::affinity::Table,
    upstream: Upstream,
    tokens: TokenSet,
    events: Events,
    seq: AtomicU64,
    /// Turns of equally loaded keys for requests routed by load alone.
    rotation: AtomicU64,
    max_body_bytes: usize,
    policy: Policy,
    quota_recheck: Duration,
}

/// What one request produced, for its record.
#[derive(Default)]
struct Notes {
    rescued_items: usize,
    upstream_code: Option<&'static str>,
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
        Ok(Self {
            pool: Pool::new(keys, markers),
            metrics: crate::metrics::Metrics::in_memory(),
            hints: crate::affinity::Table::new(crate::affinity::HINT_CAPACITY, crate::affinity::DEFAULT_TTL),
            soft: crate::affinity::Table::new(
                config.affinity.table_capacity,
                std::time::Duration::from_secs(config.affinity.table_ttl_secs),
            ),
            upstream: Upstream::new(&config.upstream, &config.timeouts)?,
            tokens,
            events: Events::default(),
            seq: AtomicU64::new(0),
            rotation: AtomicU64::new(0),
            max_body_bytes: config.max_body_bytes,
            quota_recheck: Duration::from_secs(config.quota_recheck_secs),
            policy: Policy {
                max_attempts: config.max_attempts.clamp(1, router::MAX_ATTEMPTS),
                encrypted_affinity: config.affinity.encrypted_content,
                continuity: config.affinity.continuity,
                soft_affinity: config.affinity.prompt_cache,
                max_in_flight_per_key: config.affinity.max_in_flight_per_key,
                lost_org: config.affinity.lost_org,
            },
        })
    }

    /// Keeps metrics in `metrics` (by default they stay in memory).
    pub fn with_metrics(mut self, metrics: crate::metrics::Metrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// The metrics.
    pub fn metrics(&self) -> &crate::metrics::Metrics {
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

    fn markers(&self) -> &Markers {
        self.pool.markers()
    }

    /// Which key served each session's pinned requests.
    pub fn hints(&self) -> &crate::affinity::Table {
        &self.hints
    }

    /// What the soft-affinity table remembers for a request's signal.
    pub(crate) fn remembered(&self, facts: &RequestFacts) -> crate::facts::Remembered {
        match (facts.signal, self.policy.soft_affinity) {
            (Some(signal), true) => match self.soft.get(&signal.key, Instant::now()) {
                Some(key) => crate::facts::Remembered::Key(key),
                None => crate::facts::Remembered::Miss,
            },
            _ => crate::facts::Remembered::NotAsked,
        }
    }

    /// Advances the turn of equally loaded keys, but only for requests that will be routed by load alone
    /// (no pin, no continuity, nothing remembered), so new sessions take turns over the keys.
    pub(crate) fn next_turn(&self, facts: &RequestFacts) -> u64 {
        if routed_by_load(facts) {
            self.rotation.fetch_add(1, Ordering::Relaxed)
        } else {
            self.rotation.load(Ordering::Relaxed)
        }
    }

    /// The next request number.
    pub fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The routing policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The upstream client.
    pub fn upstream(&self) -> &Upstream {
        &self.upstream
    }

    /// Whether a new WebSocket could be served at all right now (some key is usable).
    pub fn can_open_socket(&self) -> Option<ApiError> {
        let facts = RequestFacts { stream: true, ..RequestFacts::new(0, Operation::ResponsesCreate) };
        router::decide(&facts, &self.pool.view(), Instant::now(), &self.policy).refusal.map(|r| self.refusal_error(r))
    }

    /// Asks every key whose organization is not known yet for `GET /models`: a free call that teaches
    /// the pool each key's organization (so pinned sessions can use all of an organization's keys from
    /// the first request) and flags keys the provider rejects before a client meets them. Run at start.
    pub async fn probe_keys(&self) {
        let unknown: Vec<KeyId> = self.pool.view().keys.into_iter().filter(|k| k.org.is_none()).map(|k| k.id).collect();
        let probes = unknown.into_iter().map(|key| async move {
            let guard = self.pool.begin(&key)?;
            let sent = self
                .upstream
                .send(guard.entry(), http::Method::GET, "/models", HeaderMap::new(), Bytes::new())
                .await;
            let label = guard.entry().label.clone();
            drop(guard);
            let now = Instant::now();
            match sent {
                Ok(response) => {
                    let status = response.status();
                    let org = header_text(response.headers(), "openai-organization");
                    let (kind, _) = classify(status, response.headers());
                    tracing::info!(key = %key, label = %label, status = status.as_u16(), org = org.as_deref().unwrap_or("-"), "probed key");
                    self.pool.apply(&Outcome { key, at: now, kind, org });
                }
                Err(e) => tracing::warn!(key = %key, label = %label, error = %e, "could not probe key"),
            }
            Some(())
        });
        futures::future::join_all(probes).await;
    }

    /// Proxies one authenticated `/v1/*` request.
    pub async fn forward(self: &Arc<Self>, parts: request::Parts, body: Body) -> Response<Body> {
        let mut watch = Watch {
            gateway: self,
            seq: self.next_seq(),
            operation: Operation::classify(&parts.method, parts.uri.path()),
            at_unix_ms: crate::events::unix_ms(),
            started: Instant::now(),
            trying: None,
            answered: false,
        };
        let response = self.forward_watched(parts, body, &mut watch).await;
        watch.answered = true;
        response
    }

    async fn forward_watched(
        self: &Arc<Self>,
        parts: request::Parts,
        body: Body,
        watch: &mut Watch<'_>,
    ) -> Response<Body> {
        let (started, at_unix_ms, seq, operation) = (watch.started, watch.at_unix_ms, watch.seq, watch.operation);
        let mut notes = Notes::default();
        let client = parts.extensions.get::<crate::tokens::ClientScope>().cloned().unwrap_or_default();

        let raw = match axum::body::to_bytes(body, self.max_body_bytes).await {
            Ok(body) => body,
            Err(e) => {
                let err = if is_length_limit(&e) {
                    ApiError::BodyTooLarge { limit: self.max_body_bytes }
                } else {
                    ApiError::BodyRead { detail: e.to_string() }
                };
                return self.refuse(seq, operation, at_unix_ms, started, err);
            }
        };
        let extracted = match facts::extract(seq, operation, &client.0, parts.uri.path(), &raw, self.markers()) {
            Ok(extracted) => extracted,
            Err(FactsError::Body(detail)) => {
                return self.refuse(seq, operation, at_unix_ms, started, ApiError::BadJson { detail })
            }
            Err(FactsError::Marker(e)) => return self.refuse(seq, operation, at_unix_ms, started, e.into()),
        };
        let mut facts = extracted.facts;
        facts.remembered = self.remembered(&facts);
        facts.rotation = self.next_turn(&facts);
        let mut body = extracted.body;
        let forward_path = extracted.path;

        let est_tokens = crate::quota::estimate_tokens(body.len());
        let now = Instant::now();
        let decision =
            router::decide(&facts, &self.pool.view_for(facts.model.as_deref(), est_tokens, now), now, &self.policy);
        if let Some(refusal) = decision.refusal.clone() {
            let err = self.refusal_error(refusal);
            return self.finish(&facts, decision, Vec::new(), at_unix_ms, started, None, notes, err.into_response());
        }
        if !decision.rescued_orgs.is_empty() {
            // The owning organization is gone: drop what no remaining key can read, then strip the rest.
            match self.markers().drop_org_items(&raw, &decision.rescued_orgs) {
                Some((rescued, dropped)) => {
                    notes.rescued_items = dropped;
                    body = match self.markers().strip(&rescued) {
                        Ok(stripped) => Bytes::from(stripped.body.into_owned()),
                        Err(e) => return self.refuse(seq, operation, at_unix_ms, started, e.into()),
                    };
                }
                None => {
                    let err = ApiError::BadJson { detail: "the body could not be re-read for rescue".into() };
                    return self.refuse(seq, operation, at_unix_ms, started, err);
                }
            }
        }

        let mut path_and_query = forward_path.strip_prefix("/v1").unwrap_or("/").to_owned();
        if let Some(query) = parts.uri.query() {
            path_and_query.push('?');
            path_and_query.push_str(query);
        }
        let headers = upstream::forward_request_headers(&parts.headers);
        let mut attempts: Vec<Attempt> = Vec::with_capacity(self.policy.max_attempts);
        let mut last_failure: Option<Response<Body>> = None;
        let candidates: Vec<KeyId> = decision.candidates().cloned().collect();
        let pinned = decision.pin.is_some();

        for key in candidates {
            let Some(guard) = self.pool.begin_spending(&key, est_tokens) else {
                continue;
            };
            let attempt_started = Instant::now();
            watch.trying = Some((key.clone(), attempt_started));
            let sent = self
                .upstream
                .send(guard.entry(), parts.method.clone(), &path_and_query, headers.clone(), body.clone())
                .await;
            let now = Instant::now();
            let response = match sent {
                Err(err) => {
                    let failure = match &err {
                        UpstreamError::FirstByteTimeout { .. } => FailureKind::Timeout,
                        UpstreamError::Connect { .. }
                        | UpstreamError::Transport { .. }
                        | UpstreamError::BadBaseUrl { .. } => FailureKind::UpstreamUnreachable,
                    };
                    self.pool.apply(&Outcome { key: key.clone(), at: now, kind: OutcomeKind::Failed, org: None });
                    attempts.push(Attempt {
                        key,
                        status: None,
                        failure: Some(failure),
                        duration_ms: elapsed_ms(attempt_started),
                    });
                    last_failure = Some(ApiError::from(err).into_response());
                    continue;
                }
                Ok(response) => response,
            };
            let status = response.status();
            let org = header_text(response.headers(), "openai-organization");
            self.pool.note_status(&key, status.as_u16());
            self.pool.observe_limits(&key, response.headers(), now);
            let answer = self.classify_answer(response, guard, facts.model.as_deref()).await;
            let duration_ms = elapsed_ms(attempt_started);
            self.pool.apply(&Outcome { key: key.clone(), at: now, kind: answer.outcome, org });
            attempts.push(Attempt {
                key: key.clone(),
                status: Some(status.as_u16()),
                failure: answer.failure,
                duration_ms,
            });
            match answer.body {
                Classified::FailOver(response) => {
                    if answer.failure == Some(FailureKind::ModelUnavailable) {
                        if let Some(model) = facts.model.as_deref() {
                            self.pool.note_model_missing(&key, model);
                        }
                    }
                    last_failure = Some(response);
                }
                Classified::Rejected(label) => {
                    // The provider's own 401 body names a masked key; it is replaced, never relayed.
                    tracing::warn!(key = %key, label = %label, status = status.as_u16(), "provider rejected key");
                    last_failure = Some(ApiError::KeyRejected { label, status: status.as_u16() }.into_response());
                }
                Classified::Final(response, code) => {
                    if code == Some("invalid_encrypted_content") && pinned {
                        // Keymux routed this correctly; the provider could still not read it (it has had
                        // incidents). Never the key's fault: counted, not cooled.
                        self.pool.note_invalid_encrypted(&key);
                    }
                    notes.upstream_code = code;
                    return self.finish(&facts, decision, attempts, at_unix_ms, started, Some(key), notes, response);
                }
                Classified::Success(stream, guard) => {
                    if routed_by_load(&facts) {
                        self.pool.note_start(&key);
                    }
                    // The session's newest org-bound state now lives with this key's organization.
                    if let (Some(session), Operation::ResponsesCreate) = (facts.session, operation) {
                        self.hints.insert(session, key.clone(), now);
                    }
                    let tagger = self.tagger_for(operation, status, &key);
                    // Failed, cancelled, incomplete and hard-continuity requests never teach the
                    // soft-affinity table; the relay fires this only on a successful end.
                    let learn = Learn {
                        key: key.clone(),
                        operation,
                        signal: facts.signal.filter(|_| !decision.continuity_hit).map(|s| s.key),
                    };
                    let relayed = self.relay(stream, guard, tagger, Some(learn));
                    return self.finish(&facts, decision, attempts, at_unix_ms, started, Some(key), notes, relayed);
                }
            }
        }

        // Every candidate failed before anything reached the client.
        let retry_policy = Policy { max_attempts: 1, ..self.policy };
        let now = Instant::now();
        let view = self.pool.view_for(facts.model.as_deref(), est_tokens, now);
        let response = match router::decide(&facts, &view, now, &retry_policy).refusal {
            Some(refusal @ Refusal::AllCooling { .. }) => self.refusal_error(refusal).into_response(),
            _ => last_failure.unwrap_or_else(|| ApiError::NoUsableKey { unusable: 0 }.into_response()),
        };
        self.finish(&facts, decision, attempts, at_unix_ms, started, None, notes, response)
    }

    fn label_of(&self, key: &KeyId) -> String {
        self.pool
            .status(Instant::now())
            .into_iter()
            .find(|k| &k.id == key)
            .map_or_else(|| format!("{key} (removed)"), |k| k.label)
    }

    pub(crate) fn refusal_error(&self, refusal: Refusal) -> ApiError {
        match refusal {
            Refusal::NoKeys => ApiError::NoKeys,
            Refusal::AllCooling { retry_after_secs, cooling } => ApiError::AllCooling { retry_after_secs, cooling },
            Refusal::NoUsableKey { unusable } => ApiError::NoUsableKey { unusable },
            Refusal::MixedOrgs { keys } => {
                ApiError::MixedOrgs { labels: keys.iter().map(|k| self.label_of(k)).collect() }
            }
            Refusal::LostOrg { key } => ApiError::LostOrg { label: self.label_of(&key) },
            Refusal::ContinuityLost { key } => ApiError::ContinuityLost { label: self.label_of(&key) },
        }
    }

    /// Responses that may carry org-bound values get the serving key's markers.
    fn tagger_for(&self, operation: Operation, status: StatusCode, key: &KeyId) -> Option<Tagger> {
        let tags = match operation {
            Operation::ResponsesCreate
            | Operation::ResponsesCompact
            | Operation::ResponsesGet
            | Operation::ResponsesCancel
            | Operation::ResponsesInputItems
            | Operation::ChatCompletions => true,
            Operation::ResponsesDelete | Operation::Embeddings | Operation::Models | Operation::Other => false,
        };
        if !tags || !status.is_success() {
            return None;
        }
        let org = self.pool.org_tag(key)?;
        Some(Tagger::new(self.markers().clone(), key.clone(), org))
    }

    /// Reads as much of an answer as classifying it needs: the body of small error answers (to tell
    /// `insufficient_quota` from a rate limit, `model_not_found`, `invalid_encrypted_content`), and the
    /// first chunk of a success, so a stream cut before its first byte can still fail over.
    async fn classify_answer(
        self: &Arc<Self>,
        response: reqwest::Response,
        guard: InFlight,
        model: Option<&str>,
    ) -> Answer {
        let status = response.status();
        let headers = upstream::forward_response_headers(response.headers());
        let label = guard.entry().label.clone();
        let code = status.as_u16();
        let empty_by_design = status == StatusCode::NO_CONTENT
            || status == StatusCode::RESET_CONTENT
            || response.headers().get(header::CONTENT_LENGTH).is_some_and(|v| v.as_bytes() == b"0");
        if status.is_success() && empty_by_design {
            let chunks: Chunks = Box::pin(response.bytes_stream());
            return Answer {
                outcome: OutcomeKind::Served,
                failure: None,
                body: Classified::Success(UpstreamAnswer { status, headers, chunks }, guard),
            };
        }
        if status.is_success() {
            let mut chunks: Chunks = Box::pin(response.bytes_stream());
            // Headers came within the first-byte timeout; the first chunk gets the idle allowance.
            return match tokio::time::timeout(self.upstream.idle_timeout(), chunks.next()).await {
                Ok(Some(Ok(first))) => {
                    let rest: Chunks = Box::pin(futures::stream::once(async move { Ok(first) }).chain(chunks));
                    Answer {
                        outcome: OutcomeKind::Served,
                        failure: None,
                        body: Classified::Success(UpstreamAnswer { status, headers, chunks: rest }, guard),
                    }
                }
                Ok(None) | Ok(Some(Err(_))) | Err(_) => Answer {
                    outcome: OutcomeKind::Failed,
                    failure: Some(FailureKind::UpstreamCut),
                    body: Classified::FailOver(
                        ApiError::from(UpstreamError::Transport {
                            base: label,
                            detail: "the answer ended before its first byte".into(),
                        })
                        .into_response(),
                    ),
                },
            };
        }
        match code {
            401 | 403 => {
                return Answer {
                    outcome: OutcomeKind::Rejected,
                    failure: Some(FailureKind::InvalidKey),
                    body: Classified::Rejected(label),
                }
            }
            500..=599 => {
                let chunks: Chunks = Box::pin(response.bytes_stream());
                let relayed = self.relay(UpstreamAnswer { status, headers, chunks }, guard, None, None);
                return Answer {
                    outcome: OutcomeKind::Failed,
                    failure: Some(FailureKind::Upstream5xx),
                    body: Classified::FailOver(relayed),
                };
            }
            _ => {}
        }
        let cooldown = upstream::cooldown_hint(response.headers());
        let (bytes, error_code) = read_error(response, self.upstream.idle_timeout()).await;
        drop(guard);
        let mut out = Response::new(Body::from(bytes));
        *out.status_mut() = status;
        *out.headers_mut() = headers;
        match (code, error_code.as_deref()) {
            (429, Some("insufficient_quota")) => Answer {
                outcome: OutcomeKind::QuotaExhausted { recheck: self.quota_recheck },
                failure: Some(FailureKind::QuotaExhausted),
                body: Classified::FailOver(out),
            },
            (429, _) => Answer {
                outcome: OutcomeKind::RateLimited { cooldown: cooldown.unwrap_or(DEFAULT_COOLDOWN) },
                failure: Some(FailureKind::RateLimited),
                body: Classified::FailOver(out),
            },
            (404, Some("model_not_found")) if model.is_some() => Answer {
                outcome: OutcomeKind::ClientError,
                failure: Some(FailureKind::ModelUnavailable),
                body: Classified::FailOver(out),
            },
            (_, code) => {
                let known = match code {
                    Some("invalid_encrypted_content") => Some("invalid_encrypted_content"),
                    Some("previous_response_not_found") => Some("previous_response_not_found"),
                    Some("model_not_found") => Some("model_not_found"),
                    _ => None,
                };
                Answer {
                    outcome: OutcomeKind::ClientError,
                    failure: Some(FailureKind::ClientError),
                    body: Classified::Final(out, known),
                }
            }
        }
    }

    /// Turns an upstream response into the client's response, streaming the body as it arrives and
    /// tagging org-bound values when a tagger is given. The in-flight mark stays on the key until the
    /// body ends or the client goes away (which drops the upstream request).
    fn relay(
        self: &Arc<Self>,
        answer: UpstreamAnswer,
        guard: InFlight,
        tagger: Option<Tagger>,
        learn: Option<Learn>,
    ) -> Response<Body> {
        let UpstreamAnswer { status, headers, chunks } = answer;
        let content_type =
            headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_ascii_lowercase();
        let mode = match tagger {
            Some(t) if content_type.starts_with("text/event-stream") => Mode::Sse(SseRewriter::new(t)),
            Some(t) if content_type.contains("json") => Mode::Json(t, BytesMut::new()),
            _ => Mode::Pass,
        };
        let state = RelayState {
            chunks,
            idle: self.upstream.idle_timeout(),
            mode,
            done: learn.map(|learn| (self.clone(), learn)),
            _guard: guard,
        };
        let stream = futures::stream::unfold(Some(state), |state| async move {
            let mut state = state?;
            match state.next().await {
                Some(Ok(bytes)) => Some((Ok::<Bytes, std::io::Error>(bytes), Some(state))),
                Some(Err(e)) => Some((Err(e), None)),
                None => None,
            }
        });
        let mut out = Response::new(Body::from_stream(stream));
        *out.status_mut() = status;
        *out.headers_mut() = headers;
        out
    }

    fn refuse(
        &self,
        seq: u64,
        operation: Operation,
        at_unix_ms: u64,
        started: Instant,
        err: ApiError,
    ) -> Response<Body> {
        let facts = RequestFacts::new(seq, operation);
        let decision = empty_decision(seq);
        self.finish(&facts, decision, Vec::new(), at_unix_ms, started, None, Notes::default(), err.into_response())
    }

    #[expect(clippy::too_many_arguments, reason = "one record is assembled from every part of the request")]
    fn finish(
        &self,
        facts: &RequestFacts,
        decision: Decision,
        attempts: Vec<Attempt>,
        at_unix_ms: u64,
        started: Instant,
        served_by: Option<KeyId>,
        notes: Notes,
        response: Response<Body>,
    ) -> Response<Body> {
        let status = response.status().as_u16();
        let error = response.extensions().get::<crate::error::ErrorLabel>().map(|l| l.0);
        self.publish(RequestRecord {
            at_unix_ms,
            operation: facts.operation,
            transport: crate::events::Transport::Http,
            model: facts.model.clone(),
            stream: facts.stream,
            decision,
            attempts,
            served_by,
            status,
            error,
            upstream_code: notes.upstream_code,
            rescued_items: notes.rescued_items,
            duration_ms: elapsed_ms(started),
        });
        response
    }
}

impl Gateway {
    /// The one way a finished request (HTTP, or a WebSocket frame) is reported: a log line, the hashed
    /// metrics under the key's fingerprint, and the event stream.
    pub(crate) fn publish(&self, record: RequestRecord) {
        tracing::info!(
            seq = record.decision.seq,
            op = ?record.operation,
            transport = ?record.transport,
            model = record.model.as_deref().unwrap_or("-"),
            key = record.served_by.as_ref().map(KeyId::as_str).unwrap_or("-"),
            pinned = record.decision.pin.is_some(),
            attempts = record.attempts.len(),
            status = record.status,
            error = record.error.or(record.upstream_code).unwrap_or("-"),
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

/// An answer being relayed: its status, the headers that go back, and its body chunks.
struct UpstreamAnswer {
    status: StatusCode,
    headers: HeaderMap,
    chunks: Chunks,
}

/// Records a request whose client went away before Keymux answered: axum drops the handler's future,
/// and this guard's `Drop` publishes what was happening (`client_cancelled`).
struct Watch<'a> {
    gateway: &'a Gateway,
    seq: u64,
    operation: Operation,
    at_unix_ms: u64,
    started: Instant,
    /// The key being tried, and since when.
    trying: Option<(KeyId, Instant)>,
    answered: bool,
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        if self.answered {
            return;
        }
        let attempts = self
            .trying
            .take()
            .map(|(key, since)| Attempt {
                key,
                status: None,
                failure: Some(FailureKind::ClientCancelled),
                duration_ms: elapsed_ms(since),
            })
            .into_iter()
            .collect();
        let facts = RequestFacts::new(self.seq, self.operation);
        let mut response = Response::new(Body::empty());
        // 499: the client closed the request (nginx's convention); nobody receives it.
        *response.status_mut() = StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST);
        response.extensions_mut().insert(crate::error::ErrorLabel("client_cancelled"));
        let decision = empty_decision(self.seq);
        self.gateway.finish(
            &facts,
            decision,
            attempts,
            self.at_unix_ms,
            self.started,
            None,
            Notes::default(),
            response,
        );
    }
}

fn empty_decision(seq: u64) -> Decision {
    Decision {
        seq,
        choice: None,
        fallbacks: Vec::new(),
        reasons: Vec::new(),
        affinity_source: router::AffinitySource::None,
        affinity_state: router::AffinityState::NoSignal,
        continuity_hit: false,
        pin: None,
        rescued_orgs: Vec::new(),
        refusal: None,
    }
}

/// What one upstream answer means for the request.
enum Classified {
    /// Relay it: a success, with its first chunk already read.
    Success(UpstreamAnswer, InFlight),
    /// Relay it as the final answer (a client error, with a notable code if any).
    Final(Response<Body>, Option<&'static str>),
    /// Try the next candidate; this is the answer if none is left.
    FailOver(Response<Body>),
    /// The key was rejected (its label); the next candidate is tried.
    Rejected(String),
}

struct Answer {
    outcome: OutcomeKind,
    failure: Option<FailureKind>,
    body: Classified,
}

/// Reads a small error body and its `error.code`.
async fn read_error(response: reqwest::Response, idle: Duration) -> (Bytes, Option<String>) {
    let mut bytes = BytesMut::new();
    let mut chunks = response.bytes_stream();
    while let Ok(Some(Ok(chunk))) = tokio::time::timeout(idle, chunks.next()).await {
        bytes.extend_from_slice(&chunk);
        if bytes.len() > MAX_ERROR_BODY {
            break;
        }
    }
    let code = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|v| v["error"]["code"].as_str().map(str::to_owned));
    (bytes.freeze(), code)
}

enum Mode {
    Pass,
    Sse(SseRewriter),
    Json(Tagger, BytesMut),
}

type Chunks = std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<Bytes>> + Send>>;

/// What a successful end of a relayed answer teaches.
pub(crate) struct Learn {
    pub(crate) key: KeyId,
    pub(crate) operation: Operation,
    /// The soft-affinity signal to remember, unless the request was a hard binding.
    pub(crate) signal: Option<crate::markers::SessionKey>,
}

impl Gateway {
    /// A relayed answer reached a successful terminal state: remember which key served its signal,
    /// and count its tokens.
    pub(crate) fn completed(&self, learn: Learn, usage: Option<crate::relay::Usage>) {
        if let Some(signal) = learn.signal {
            self.soft.insert(signal, learn.key.clone(), Instant::now());
        }
        if let Some(usage) = usage {
            self.pool.add_usage(&learn.key, usage);
            self.metrics.record_usage(self.pool.fingerprint(&learn.key), learn.operation, usage);
        }
    }
}

struct RelayState {
    chunks: Chunks,
    idle: Duration,
    mode: Mode,
    /// Fired once, on a successful end.
    done: Option<(Arc<Gateway>, Learn)>,
    _guard: InFlight,
}

impl RelayState {
    /// The next piece for the client: `None` at the end, an error to abort the response.
    async fn next(&mut self) -> Option<Result<Bytes, std::io::Error>> {
        loop {
            let next = match tokio::time::timeout(self.idle, self.chunks.next()).await {
                Err(_) => {
                    return Some(Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "upstream stream went idle")))
                }
                Ok(Some(Err(e))) => return Some(Err(std::io::Error::other(format!("upstream stream failed: {e}")))),
                Ok(Some(Ok(bytes))) => Some(bytes),
                Ok(None) => None,
            };
            match (&mut self.mode, next) {
                (Mode::Pass, Some(bytes)) => return Some(Ok(bytes)),
                (Mode::Pass, None) => return None,
                (Mode::Sse(rw), Some(bytes)) => {
                    let pushed = rw.push(&bytes);
                    let ending = rw.ending();
                    if ending.completed {
                        if let Some((gateway, learn)) = self.done.take() {
                            gateway.completed(learn, ending.usage);
                        }
                    }
                    match pushed {
                        Ok(out) if out.is_empty() => continue,
                        Ok(out) => return Some(Ok(out)),
                        Err(e) => return Some(Err(std::io::Error::other(e))),
                    }
                }
                (Mode::Sse(rw), None) => {
                    let tail = rw.finish();
                    self.mode = Mode::Pass;
                    if tail.is_empty() {
                        return None;
                    }
                    return Some(Ok(tail));
                }
                (Mode::Json(_, buf), Some(bytes)) => {
                    buf.extend_from_slice(&bytes);
                    if buf.len() > MAX_EVENT_BYTES {
                        return Some(Err(std::io::Error::other("upstream JSON body too large to relay")));
                    }
                }
                (Mode::Json(tagger, buf), None) => {
                    let body = std::mem::take(buf).freeze();
                    // A complete 2xx JSON answer is a successful terminal state.
                    if let Some((gateway, learn)) = self.done.take() {
                        gateway.completed(learn, crate::relay::Usage::from_body(&body));
                    }
                    let out = tagger.tag_json(&body).map_or(body, Bytes::from);
                    self.mode = Mode::Pass;
                    return Some(Ok(out));
                }
            }
        }
    }
}

/// Whether a request is placed by load alone (no pin, no continuity, no hint, nothing remembered): a new
/// session, as far as Keymux can tell.
pub(crate) fn routed_by_load(facts: &RequestFacts) -> bool {
    facts.pins.is_empty()
        && facts.continuity.is_none()
        && facts.session_hint.is_none()
        && !matches!(facts.remembered, crate::facts::Remembered::Key(_))
}

/// What an upstream status means for the key, and whether to fail over.
pub(crate) fn classify(status: StatusCode, headers: &HeaderMap) -> (OutcomeKind, Option<FailureKind>) {
    match status.as_u16() {
        200..=399 => (OutcomeKind::Served, None),
        401 | 403 => (OutcomeKind::Rejected, Some(FailureKind::InvalidKey)),
        429 => (
            OutcomeKind::RateLimited { cooldown: upstream::cooldown_hint(headers).unwrap_or(DEFAULT_COOLDOWN) },
            Some(FailureKind::RateLimited),
        ),
        500..=599 => (OutcomeKind::Failed, Some(FailureKind::Upstream5xx)),
        _ => (OutcomeKind::ClientError, None),
    }
}

fn is_length_limit(e: &axum::Error) -> bool {
    use std::error::Error as _;
    let mut source: Option<&(dyn std::error::Error + 'static)> = e.source();
    while let Some(s) = source {
        if s.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = s.source();
    }
    false
}

fn header_text(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty() && v.len() <= 128)
        .map(str::to_owned)
}

fn elapsed_ms(since: Instant) -> u32 {
    u32::try_from(since.elapsed().as_millis()).unwrap_or(u32::MAX)
}
