//! One request pipeline for both transports. An HTTP request and the first frame of a Responses
//! WebSocket go through the same steps, in the same code:
//!
//! 1. **admit**: read the facts (markers stripped), look up what Keymux remembers, decide, and rescue
//!    the items of a lost organization;
//! 2. **attempt**: walk the candidates, one attempt per key, failing over only before anything reached
//!    the client; every answer is judged by the one classifier (`classify`) and applied to the pool;
//! 3. **record**: one `RequestRecord` per request (`record`), published to the log, the metrics and the
//!    event stream, including for clients that go away.
//!
//! What differs between the transports (how an attempt is made, what a refusal looks like to the
//! client) is behind the `Transport` trait; `proxy` and `ws` implement it.

pub mod classify;
pub mod record;

use std::future::Future;

use bytes::Bytes;
use tokio::time::Instant;

use crate::error::ApiError;
use crate::events::Attempt;
use crate::facts::{self, FactsError, Incoming, Operation, RequestFacts};
use crate::gateway::Gateway;
use crate::keys::KeyId;
use crate::markers::SessionKey;
use crate::pool::{Begin, InFlight, Learned, Outcome, ViewFor};
use crate::relay::{Tagger, Usage};
use crate::router::{self, Decision, Memory, Refusal, Remembered};
use crate::upstream::UpstreamError;

use classify::{Context, Heard, Next, Verdict};
pub use record::Trace;

/// Where a request enters: what Keymux remembers applies differently.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// An HTTP request (its body carries the whole history, markers included).
    Request,
    /// The first frame of a Responses WebSocket (a resumed Codex session's prewarm carries no markers:
    /// the session hint stands in for them).
    SocketOpen,
}

/// A request that may go upstream: its facts, its decision and the body to send.
#[derive(Debug)]
pub struct Admitted {
    /// The facts.
    pub facts: RequestFacts,
    /// The decision (never a refusal).
    pub decision: Decision,
    /// The body to send: markers removed, and rescued items dropped.
    pub body: Bytes,
    /// The path to send (a marked response id restored to the provider's id).
    pub path: String,
}

/// One way of reaching the upstream with a key: an HTTP request, or a WebSocket handshake.
pub trait Transport {
    /// What an accepted attempt hands on (an answer to relay, or an open socket).
    type Accepted: Send;
    /// What a refused attempt leaves for the client, if nothing better comes (an error answer to relay).
    type Refused: Send;
    /// Makes one attempt with the key `guard` holds.
    fn attempt(
        &mut self,
        guard: &InFlight,
        admitted: &Admitted,
    ) -> impl Future<Output = Reply<Self::Accepted, Self::Refused>> + Send;
}

/// What one attempt produced.
pub enum Reply<A, R> {
    /// A 2xx (with as much read as the transport needs to be sure it is not cut).
    Accepted(Heard, A),
    /// An error status, its body read for its code.
    Refused(Heard, R),
    /// No usable answer: no connection, no headers in time, or cut before the first byte.
    Failed(UpstreamError),
}

/// How the attempts ended.
pub enum Ending<A, R> {
    /// A key served: relay its answer.
    Served {
        /// The key.
        key: KeyId,
        /// Keeps the key in flight while the answer is relayed.
        guard: InFlight,
        /// What the transport accepted.
        accepted: A,
    },
    /// The client's own request was refused by the provider: relay that as it is.
    Relayed {
        /// The key that answered.
        key: KeyId,
        /// The answer.
        refused: R,
    },
    /// Nothing served; what the client gets instead.
    Failed(Last<R>),
}

/// The answer for a request no key served.
pub enum Last<R> {
    /// The last upstream answer, relayed.
    Upstream(R),
    /// Keymux's own explanation.
    Keymux(ApiError),
}

/// What a successful end of a relayed answer teaches.
#[derive(Clone, Debug)]
pub struct Learn {
    /// The key that served.
    pub key: KeyId,
    /// The operation.
    pub operation: Operation,
    /// The soft-affinity signal to remember, unless the request was bound or too short to cache.
    pub signal: Option<SessionKey>,
}

impl Gateway {
    /// Step 1: facts, memory, decision, rescue. A refusal comes back as the error to answer with (the
    /// trace already holds the decision that explains it).
    pub fn admit(&self, incoming: &Incoming<'_>, entry: Entry, trace: &mut Trace) -> Result<Admitted, ApiError> {
        let extracted = facts::extract(incoming, self.markers()).map_err(|e| match e {
            FactsError::Body(detail) => ApiError::BadJson { detail },
            FactsError::Marker(e) => e.into(),
        })?;
        trace.facts(&extracted.facts);
        let facts = extracted.facts;
        let now = self.clock().now();
        let memory = self.memory(&facts, entry, now);
        let view = self.pool().view(self.view_for(&facts, now));
        let decision = router::decide(&facts, &view, &memory, now, self.policy());
        let refusal = decision.refusal.clone();
        let rescued = decision.rescued_orgs.clone();
        trace.decided(decision.clone());
        if let Some(refusal) = refusal {
            return Err(self.refusal_error(refusal));
        }
        let body = if rescued.is_empty() { extracted.body } else { self.rescue(incoming.body, &rescued, trace)? };
        Ok(Admitted { facts, decision, body, path: extracted.path })
    }

    /// What Keymux remembers about a request: the soft-affinity table (only for prompts long enough to
    /// cache), and for a new socket the session hint.
    fn memory(&self, facts: &RequestFacts, entry: Entry, now: Instant) -> Memory {
        let remembered = match (facts.signal, self.policy().soft_affinity && facts.cache_eligible()) {
            (Some(signal), true) => self.soft().get(&signal.key, now).map_or(Remembered::Miss, Remembered::Key),
            _ => Remembered::NotAsked,
        };
        let session_hint = match (entry, facts.pins.is_empty(), facts.session) {
            (Entry::SocketOpen, true, Some(session)) => self.hints().get(&session, now),
            _ => None,
        };
        Memory { remembered, session_hint }
    }

    fn view_for<'a>(&self, facts: &'a RequestFacts, now: Instant) -> ViewFor<'a> {
        ViewFor { model: facts.model.as_deref(), tokens: facts.prompt_tokens, now, day: self.today() }
    }

    /// Rescue: drops what no remaining key can read, then strips the rest of the markers. The same for
    /// both transports: a body that cannot be re-read is refused, never forwarded un-rescued.
    fn rescue(&self, raw: &Bytes, orgs: &[crate::markers::OrgTag], trace: &mut Trace) -> Result<Bytes, ApiError> {
        let reread = || ApiError::BadJson { detail: "the body could not be re-read to drop unreadable items".into() };
        let (rescued, dropped) = self.markers().drop_org_items(raw, orgs).ok_or_else(reread)?;
        trace.rescued(dropped);
        let stripped = self.markers().strip(&rescued)?;
        Ok(Bytes::from(stripped.body.into_owned()))
    }

    /// Step 2: one attempt per candidate until one serves, the provider refuses the client's own request,
    /// or none is left.
    pub async fn attempt_all<T: Transport>(
        &self,
        admitted: &Admitted,
        transport: &mut T,
        trace: &mut Trace,
    ) -> Ending<T::Accepted, T::Refused> {
        let mut last: Option<Last<T::Refused>> = None;
        let begin = Begin { tokens: admitted.facts.prompt_tokens, start: admitted.decision.balanced() };
        for key in admitted.decision.candidates() {
            let started = self.clock().now();
            let Some(guard) = self.pool().begin(key, begin, started) else {
                continue;
            };
            trace.trying(key.clone(), started);
            let reply = transport.attempt(&guard, admitted).await;
            let (heard, verdict, body) = self.judge(&admitted.facts, reply);
            self.learn_answer(key, heard.as_ref(), verdict, admitted);
            let message = match (&heard, &body) {
                (Some(h), _) => h.message.as_deref().map(Box::from),
                (None, Answer::Failed(error)) => Some(classify::safe_message(&error.to_string()).into()),
                (None, _) => None,
            };
            trace.attempted(Attempt {
                key: key.clone(),
                status: heard.as_ref().map(|h| h.status),
                failure: verdict.failure,
                duration_ms: self.clock().elapsed_ms(started),
                message,
            });
            let code = heard.as_ref().and_then(|h| h.code);
            match (verdict.next, body) {
                (Next::Relay | Next::Final, Answer::Accepted(accepted)) => {
                    self.served(&admitted.facts, key);
                    return Ending::Served { key: key.clone(), guard, accepted };
                }
                (Next::Relay | Next::Final, Answer::Refused(refused)) => {
                    trace.upstream_code(code.and_then(classify::Code::notable));
                    return Ending::Relayed { key: key.clone(), refused };
                }
                (Next::Rejected, _) => {
                    let label = guard.entry().label.clone();
                    tracing::warn!(key = %key, label = %label, "provider rejected key");
                    let status = heard.map_or(401, |h| h.status);
                    last = Some(Last::Keymux(ApiError::KeyRejected { label, status }));
                }
                (Next::FailOver, Answer::Refused(refused)) => last = Some(Last::Upstream(refused)),
                (Next::FailOver, Answer::Failed(error)) => last = Some(Last::Keymux(error.into())),
                // The classifier never fails over a success; nothing to keep from one.
                (Next::FailOver, Answer::Accepted(_)) => {}
                (Next::Relay | Next::Final, Answer::Failed(error)) => last = Some(Last::Keymux(error.into())),
            }
        }
        Ending::Failed(self.after_failover(&admitted.facts, last))
    }

    /// Classifies a reply with the one classifier.
    fn judge<A, R>(&self, facts: &RequestFacts, reply: Reply<A, R>) -> (Option<Heard>, Verdict, Answer<A, R>) {
        let ctx = Context { model_named: facts.model.is_some(), quota_recheck: self.quota_recheck() };
        match reply {
            Reply::Accepted(heard, a) => {
                let verdict = classify::judge(&heard, ctx);
                (Some(heard), verdict, Answer::Accepted(a))
            }
            Reply::Refused(heard, r) => {
                let verdict = classify::judge(&heard, ctx);
                (Some(heard), verdict, Answer::Refused(r))
            }
            Reply::Failed(error) => (None, classify::judge_failure(&error), Answer::Failed(error)),
        }
    }

    /// Applies what one attempt taught to the pool, and tells the event stream about a health change.
    fn learn_answer(&self, key: &KeyId, heard: Option<&Heard>, verdict: Verdict, admitted: &Admitted) {
        let mut outcome = Outcome::new(key.clone(), self.clock().now(), verdict.outcome);
        if let Some(heard) = heard {
            outcome.status = Some(heard.status);
            outcome.org = heard.org.clone();
            outcome.limits = heard.limits;
            // Keymux routed this correctly; the provider could still not read it (it has had incidents).
            // Never the key's fault: counted, not cooled.
            outcome.invalid_encrypted =
                heard.code == Some(classify::Code::InvalidEncryptedContent) && admitted.decision.pin.is_some();
        }
        if verdict.failure == Some(crate::events::FailureKind::ModelUnavailable) {
            outcome.model_missing = admitted.facts.model.clone();
        }
        self.apply(Learned::Answer(outcome));
    }

    /// A key served a request: the session's newest org-bound state now lives with its organization.
    fn served(&self, facts: &RequestFacts, key: &KeyId) {
        if let (Some(session), Operation::ResponsesCreate) = (facts.session, facts.operation) {
            self.hints().insert(session, key.clone(), self.clock().now());
        }
    }

    /// After every candidate failed before anything reached the client: a 429 with `retry-after` if
    /// every usable key is now cooling (Codex retries only that), else the last failure.
    fn after_failover<R>(&self, facts: &RequestFacts, last: Option<Last<R>>) -> Last<R> {
        let now = self.clock().now();
        let view = self.pool().view(self.view_for(facts, now));
        let policy = router::Policy { max_attempts: 1, ..*self.policy() };
        match router::decide(facts, &view, &Memory::default(), now, &policy).refusal {
            Some(refusal @ Refusal::AllCooling { .. }) => Last::Keymux(self.refusal_error(refusal)),
            _ => last.unwrap_or(Last::Keymux(ApiError::NoUsableKey { unusable: 0 })),
        }
    }

    /// The error a refusal is answered with, naming keys by their labels.
    pub fn refusal_error(&self, refusal: Refusal) -> ApiError {
        let label = |key: &KeyId| self.pool().label(key);
        match refusal {
            Refusal::NoKeys => ApiError::NoKeys,
            Refusal::AllCooling { retry_after_secs, cooling } => ApiError::AllCooling { retry_after_secs, cooling },
            Refusal::NoUsableKey { unusable } => ApiError::NoUsableKey { unusable },
            Refusal::MixedOrgs { keys } => ApiError::MixedOrgs { labels: keys.iter().map(label).collect() },
            Refusal::LostOrg { key } => ApiError::LostOrg { label: label(&key) },
            Refusal::ContinuityLost { key } => ApiError::ContinuityLost { label: label(&key) },
        }
    }

    /// What a successful end teaches: only requests placed by the rules that may learn (not bound,
    /// long enough to cache) teach the soft-affinity table.
    pub fn learn_for(&self, admitted: &Admitted, key: &KeyId) -> Learn {
        let teaches = admitted.facts.cache_eligible() && !admitted.decision.continuity_hit;
        Learn {
            key: key.clone(),
            operation: admitted.facts.operation,
            signal: admitted.facts.signal.filter(|_| teaches).map(|s| s.key),
        }
    }

    /// A relayed answer reached a successful end: remember which key served its signal, and count its
    /// tokens.
    pub fn completed(&self, learn: &Learn, usage: Option<Usage>) {
        if let Some(signal) = learn.signal {
            self.soft().insert(signal, learn.key.clone(), self.clock().now());
        }
        if let Some(usage) = usage {
            self.apply(Learned::Usage { key: learn.key.clone(), usage, day: self.today() });
        }
    }

    /// The tagger for answers of `operation` served on `guard`, if they may carry org-bound values.
    pub fn tagger_for(&self, operation: Operation, guard: &InFlight) -> Option<Tagger> {
        // From the guard, not the pool: a key removed while its answer was on the way is no longer in
        // the pool, and an answer relayed untagged would send the session's next turn to any
        // organization (and its replayed items would be unreadable there).
        operation
            .carries_org_state()
            .then(|| Tagger::new(self.markers().clone(), guard.entry().id.clone(), guard.org_tag()))
    }
}

/// A reply's payload, once its heard part is taken apart for the classifier.
enum Answer<A, R> {
    Accepted(A),
    Refused(R),
    Failed(UpstreamError),
}
