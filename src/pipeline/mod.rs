//! One request pipeline for both transports. An HTTP request and the first frame of a Responses
//! WebSocket go through the same steps, in the same code:
//!
//! 1. **admit** (`admit`): read the facts (markers stripped), look up what Keymux remembers, decide, and
//!    rescue the items of a lost organization;
//! 2. **attempt** (`attempt`): walk the candidates, one attempt per key, failing over only before
//!    anything reached the client; every reply is judged by the one classifier (`crate::classify`) and
//!    taught to the pool, in one step that the key probe (`probe`) shares;
//! 3. **record** (`record`): one `RequestRecord` per request, published to the log, the metrics and the
//!    event stream, including for clients that go away.
//!
//! The steps are functions over `&Gateway` (the shared state); what differs between the transports (how
//! an attempt is made, what a declined attempt looks like to the client) is behind the `Transport`
//! trait, which `proxy`, `ws` and `probe` implement.
//!
//! # Glossary
//!
//! * `Admitted`: a request that may go upstream (facts, decision, body to send).
//! * `Reply`: what one attempt produced: `Accepted`, `Declined` (an error status) or `Failed`.
//! * `Heard` (classify): what Keymux read from an upstream answer's status, headers and error body.
//! * `Verdict` (classify): the classifier's judgement of a reply: its effect on the key, why it
//!   failed, and what to do next.
//! * `Outcome` (pool): what one reply taught about its key; `Learned` is an outcome or a finished
//!   answer's token usage, the pool's one input.
//! * `Settled`: how the attempts ended: served, relayed as the client's own error, or `Failed` with a
//!   `Fallback` (the last upstream answer, or Keymux's own error).
//! * `Completion`: what a served answer teaches once it reaches a successful end (`dropped`: and what
//!   an answer that says the provider dropped reasoning from its input teaches).

mod admit;
mod attempt;
mod dropped;
mod probe;
pub mod record;

use std::future::Future;

use bytes::Bytes;

use crate::classify::Heard;
use crate::error::ApiError;
use crate::facts::{Operation, RequestFacts};
use crate::keys::KeyId;
use crate::markers::SessionKey;
use crate::pool::InFlight;
use crate::router::Decision;
use crate::upstream::UpstreamError;

pub use admit::{
    admit, bare_id_refusal, can_open_socket, pool_mismatch, refusal_error, rescued_from, tier_change, with_tier,
};
pub use attempt::{attempt_all, completion, tagger_for};
pub use dropped::{completed, dropped, incomplete};
pub use probe::{probe, probe_keys};
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
    /// The pool its token is bound to (what failover may still reach).
    pub pool: String,
    /// Where it entered (what its keys' providers must serve).
    pub entry: Entry,
}

impl Admitted {
    /// What judging and learning need to know about this request.
    pub fn attempt_for(&self) -> AttemptFor<'_> {
        AttemptFor { model: self.facts.model.as_deref(), pinned: self.decision.pin.is_some() }
    }
}

/// What judging a reply and learning from it need to know about the request it answers.
#[derive(Clone, Copy, Debug, Default)]
pub struct AttemptFor<'a> {
    /// The model the request names (a "model not found" then means this key lacks it).
    pub model: Option<&'a str>,
    /// Keymux pinned the request to the organization that can read its encrypted content.
    pub pinned: bool,
}

/// One way of reaching the upstream with a key: an HTTP request, a WebSocket handshake, or a probe.
pub trait Transport {
    /// What an accepted attempt hands on (an answer to relay, or an open socket).
    type Accepted: Send;
    /// What a declined attempt leaves for the client, if nothing better comes (an error answer to relay).
    type Declined: Send;
    /// Makes one attempt with the key `guard` holds.
    fn attempt(&mut self, guard: &InFlight) -> impl Future<Output = Reply<Self::Accepted, Self::Declined>> + Send;
    /// The attempts from now on send `body` instead (the request with the items no organization could
    /// read dropped).
    fn rescue(&mut self, body: Bytes);
}

/// What one attempt produced.
pub enum Reply<A, D> {
    /// A 2xx (with as much read as the transport needs to be sure it is not cut).
    Accepted(Heard, A),
    /// An error status, its body read for its code.
    Declined(Heard, D),
    /// No usable answer: no connection, no headers in time, or cut before the first byte.
    Failed(UpstreamError),
}

impl<A, D> Reply<A, D> {
    /// What was heard from the upstream, if an answer came back.
    pub fn heard(&self) -> Option<&Heard> {
        match self {
            Self::Accepted(heard, _) | Self::Declined(heard, _) => Some(heard),
            Self::Failed(_) => None,
        }
    }
}

/// How the attempts ended.
pub enum Settled<A, D> {
    /// A key served: relay its answer.
    Served {
        /// The key.
        key: KeyId,
        /// Keeps the key in flight while the answer is relayed.
        guard: InFlight,
        /// What the transport accepted.
        accepted: A,
    },
    /// The client's own request was declined by the provider: relay that as it is.
    Relayed {
        /// The key that answered.
        key: KeyId,
        /// The answer.
        declined: D,
    },
    /// Nothing served; what the client gets instead.
    Failed(Fallback<D>),
}

/// The answer for a request no key served.
pub enum Fallback<D> {
    /// The last upstream answer, relayed.
    Upstream(D),
    /// Keymux's own explanation.
    Keymux(ApiError),
}

/// What a served answer teaches when it reaches a successful end.
#[derive(Clone, Debug)]
pub struct Completion {
    /// The key that served.
    pub key: KeyId,
    /// The operation.
    pub operation: Operation,
    /// The soft-affinity signal to remember, unless the request was bound or too short to cache.
    pub signal: Option<SessionKey>,
    /// The request's session, for what a lost turn teaches about where its reasoning lives.
    pub session: Option<SessionKey>,
    /// The request was pinned by its markers to the serving key's organization: a provider that still
    /// cannot read its reasoning disagrees with Keymux's markers, which nothing learned can correct.
    pub pinned: bool,
}
