//! One request, end to end: read the body under the cap, extract facts, decide, walk the candidates
//! (failing over only before any byte reached the client), relay the answer as it arrives, and record
//! the outcome in the pool and the event stream.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::{request, HeaderMap, Response, StatusCode};
use axum::response::IntoResponse;
use bytes::Bytes;
use futures::StreamExt as _;
use tokio::time::Instant;

use crate::config::Config;
use crate::error::ApiError;
use crate::events::{Attempt, Events, FailureKind, RequestRecord};
use crate::facts::{self, Operation, RequestFacts};
use crate::keys::{KeyEntry, KeyId};
use crate::pool::{InFlight, Outcome, OutcomeKind, Pool};
use crate::router::{self, Decision, Refusal};
use crate::tokens::TokenSet;
use crate::upstream::{self, Upstream, UpstreamError};

/// Cooldown for a 429 that gave no hint at all.
const DEFAULT_COOLDOWN: Duration = Duration::from_secs(5);

/// The gateway: the pool, the upstream client, the accepted tokens and the event stream.
pub struct Gateway {
    pool: Pool,
    upstream: Upstream,
    tokens: TokenSet,
    events: Events,
    seq: AtomicU64,
    max_body_bytes: usize,
    max_attempts: usize,
}

impl Gateway {
    /// Builds a gateway from the config's settings, the keys (with their secrets) and the tokens.
    pub fn new(
        config: &Config,
        keys: Vec<KeyEntry>,
        tokens: TokenSet,
    ) -> Result<Self, UpstreamError> {
        Ok(Self {
            pool: Pool::new(keys),
            upstream: Upstream::new(&config.upstream, &config.timeouts)?,
            tokens,
            events: Events::default(),
            seq: AtomicU64::new(0),
            max_body_bytes: config.max_body_bytes,
            max_attempts: config.max_attempts.clamp(1, router::MAX_ATTEMPTS),
        })
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

    /// Proxies one authenticated `/v1/*` request.
    pub async fn forward(self: &Arc<Self>, parts: request::Parts, body: Body) -> Response<Body> {
        let started = Instant::now();
        let at_unix_ms = unix_ms();
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let operation = Operation::classify(&parts.method, parts.uri.path());

        let body = match axum::body::to_bytes(body, self.max_body_bytes).await {
            Ok(body) => body,
            Err(e) => {
                let err = if is_length_limit(&e) {
                    ApiError::BodyTooLarge {
                        limit: self.max_body_bytes,
                    }
                } else {
                    ApiError::BodyRead {
                        detail: e.to_string(),
                    }
                };
                return self.refuse(seq, operation, at_unix_ms, started, err);
            }
        };
        let facts = match facts::extract(seq, operation, &body) {
            Ok(facts) => facts,
            Err(e) => {
                return self.refuse(
                    seq,
                    operation,
                    at_unix_ms,
                    started,
                    ApiError::BadJson { detail: e.0 },
                )
            }
        };

        let decision = router::decide(&facts, &self.pool.view(), Instant::now(), self.max_attempts);
        if let Some(refusal) = decision.refusal {
            let err = refusal_error(refusal);
            return self.finish(
                &facts,
                decision,
                Vec::new(),
                at_unix_ms,
                started,
                None,
                err.into_response(),
            );
        }

        let path_and_query = parts
            .uri
            .path_and_query()
            .map(|pq| pq.as_str())
            .unwrap_or("/")
            .strip_prefix("/v1")
            .unwrap_or("/")
            .to_owned();
        let headers = upstream::forward_request_headers(&parts.headers);
        let mut attempts: Vec<Attempt> = Vec::with_capacity(self.max_attempts);
        let mut last_failure: Option<Response<Body>> = None;
        let candidates: Vec<KeyId> = decision.candidates().cloned().collect();

        for key in candidates {
            let Some(guard) = self.pool.begin(&key) else {
                continue;
            };
            let attempt_started = Instant::now();
            let sent = self
                .upstream
                .send(
                    guard.entry(),
                    parts.method.clone(),
                    &path_and_query,
                    headers.clone(),
                    body.clone(),
                )
                .await;
            let duration_ms = elapsed_ms(attempt_started);
            let now = Instant::now();
            match sent {
                Err(err) => {
                    let failure = match &err {
                        UpstreamError::Connect { .. } => FailureKind::Connect,
                        UpstreamError::FirstByteTimeout { .. } => FailureKind::Timeout,
                        UpstreamError::Transport { .. } | UpstreamError::BadBaseUrl { .. } => {
                            FailureKind::Transport
                        }
                    };
                    self.pool.apply(&Outcome {
                        key: key.clone(),
                        at: now,
                        kind: OutcomeKind::Failed,
                        org: None,
                    });
                    attempts.push(Attempt {
                        key,
                        status: None,
                        failure: Some(failure),
                        duration_ms,
                    });
                    last_failure = Some(ApiError::from(err).into_response());
                }
                Ok(response) => {
                    let status = response.status();
                    let org = header_text(response.headers(), "openai-organization");
                    self.pool.note_status(&key, status.as_u16());
                    let (kind, failure) = classify(status, response.headers());
                    self.pool.apply(&Outcome {
                        key: key.clone(),
                        at: now,
                        kind,
                        org,
                    });
                    attempts.push(Attempt {
                        key: key.clone(),
                        status: Some(status.as_u16()),
                        failure,
                        duration_ms,
                    });
                    match failure {
                        None => {
                            let relayed = self.relay(response, guard);
                            return self.finish(
                                &facts,
                                decision,
                                attempts,
                                at_unix_ms,
                                started,
                                Some(key),
                                relayed,
                            );
                        }
                        Some(FailureKind::InvalidKey) => {
                            // The provider's own 401 body names a masked key; it is replaced, never relayed.
                            let label = guard.entry().label.clone();
                            tracing::warn!(key = %key, label = %label, status = status.as_u16(), "provider rejected key");
                            last_failure = Some(
                                ApiError::KeyRejected {
                                    label,
                                    status: status.as_u16(),
                                }
                                .into_response(),
                            );
                        }
                        Some(_) => last_failure = Some(self.relay(response, guard)),
                    }
                }
            }
        }

        // Every candidate failed before anything reached the client.
        let response = match router::decide(&facts, &self.pool.view(), Instant::now(), 1).refusal {
            Some(refusal) => refusal_error(refusal).into_response(),
            None => last_failure
                .unwrap_or_else(|| ApiError::NoUsableKey { unusable: 0 }.into_response()),
        };
        let served_by = None;
        self.finish(
            &facts, decision, attempts, at_unix_ms, started, served_by, response,
        )
    }

    /// Turns an upstream response into the client's response, streaming the body as it arrives. The
    /// in-flight mark stays on the key until the body ends or the client goes away (which drops the
    /// upstream request).
    fn relay(&self, response: reqwest::Response, guard: InFlight) -> Response<Body> {
        let status = response.status();
        let headers = upstream::forward_response_headers(response.headers());
        let idle = self.upstream.idle_timeout();
        let chunks = response.bytes_stream();
        let state = Some((chunks, guard));
        let stream = futures::stream::unfold(state, move |state| async move {
            let (mut chunks, guard) = state?;
            match tokio::time::timeout(idle, chunks.next()).await {
                Ok(Some(Ok(bytes))) => {
                    Some((Ok::<Bytes, std::io::Error>(bytes), Some((chunks, guard))))
                }
                Ok(None) => None,
                Ok(Some(Err(e))) => Some((
                    Err(std::io::Error::other(format!(
                        "upstream stream failed: {e}"
                    ))),
                    None,
                )),
                Err(_) => Some((
                    Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "upstream stream went idle",
                    )),
                    None,
                )),
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
        let facts = RequestFacts {
            seq,
            operation,
            model: None,
            stream: false,
        };
        let decision = Decision {
            seq,
            choice: None,
            fallbacks: Vec::new(),
            reasons: Vec::new(),
            affinity_source: router::AffinitySource::None,
            affinity_state: router::AffinityState::NoSignal,
            continuity_hit: false,
            refusal: None,
        };
        self.finish(
            &facts,
            decision,
            Vec::new(),
            at_unix_ms,
            started,
            None,
            err.into_response(),
        )
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "one record is assembled from every part of the request"
    )]
    fn finish(
        &self,
        facts: &RequestFacts,
        decision: Decision,
        attempts: Vec<Attempt>,
        at_unix_ms: u64,
        started: Instant,
        served_by: Option<KeyId>,
        response: Response<Body>,
    ) -> Response<Body> {
        let status = response.status().as_u16();
        let error = response
            .extensions()
            .get::<crate::error::ErrorLabel>()
            .map(|l| l.0);
        let duration_ms = elapsed_ms(started);
        tracing::info!(
            seq = facts.seq,
            op = ?facts.operation,
            model = facts.model.as_deref().unwrap_or("-"),
            key = served_by.as_ref().map(KeyId::as_str).unwrap_or("-"),
            attempts = attempts.len(),
            status,
            error = error.unwrap_or("-"),
            ms = duration_ms,
            "request"
        );
        self.events.publish(RequestRecord {
            at_unix_ms,
            operation: facts.operation,
            model: facts.model.clone(),
            stream: facts.stream,
            decision,
            attempts,
            served_by,
            status,
            error,
            duration_ms,
        });
        response
    }
}

/// What an upstream status means for the key, and whether to fail over.
fn classify(status: StatusCode, headers: &HeaderMap) -> (OutcomeKind, Option<FailureKind>) {
    match status.as_u16() {
        200..=399 => (OutcomeKind::Served, None),
        401 | 403 => (OutcomeKind::Rejected, Some(FailureKind::InvalidKey)),
        429 => (
            OutcomeKind::RateLimited {
                cooldown: upstream::cooldown_hint(headers).unwrap_or(DEFAULT_COOLDOWN),
            },
            Some(FailureKind::RateLimited),
        ),
        500..=599 => (OutcomeKind::Failed, Some(FailureKind::Upstream5xx)),
        _ => (OutcomeKind::ClientError, None),
    }
}

fn refusal_error(refusal: Refusal) -> ApiError {
    match refusal {
        Refusal::NoKeys => ApiError::NoKeys,
        Refusal::AllCooling {
            retry_after_secs,
            cooling,
        } => ApiError::AllCooling {
            retry_after_secs,
            cooling,
        },
        Refusal::NoUsableKey { unusable } => ApiError::NoUsableKey { unusable },
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

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}
