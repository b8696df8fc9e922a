//! One record per request, for both transports: what arrived, how it was decided, every attempt, and
//! how it ended. A trace that is dropped unfinished (the client went away, and with it the handler's
//! future or the relayed stream) still publishes, as `client_cancelled`.

use std::sync::Arc;

use std::time::Instant;

use crate::events::{Attempt, FailureKind, RequestRecord, Wire};
use crate::facts::{Operation, RequestFacts};
use crate::gateway::Gateway;
use crate::keys::KeyId;
use crate::router::Decision;
use crate::spend::Usage;

/// 499: the client closed the request (nginx's convention); nobody receives it.
pub const CLIENT_CLOSED: u16 = 499;

/// How a request ended.
#[derive(Clone, Debug, Default)]
pub struct End {
    /// The key whose answer the client got.
    pub served_by: Option<KeyId>,
    /// The status the client got.
    pub status: u16,
    /// Keymux's error label, when Keymux answered with an error or the answer broke off.
    pub error: Option<&'static str>,
    /// The tokens the answer reported.
    pub usage: Option<Usage>,
}

/// A request's record in the making.
pub struct Trace {
    gateway: Arc<Gateway>,
    record: RequestRecord,
    started: Instant,
    /// The key being tried, and since when.
    trying: Option<(KeyId, Instant)>,
    finished: bool,
}

impl Trace {
    /// Starts the record of request `seq`.
    pub fn new(gateway: &Arc<Gateway>, seq: u64, operation: Operation, transport: Wire) -> Self {
        let clock = gateway.clock();
        let record = RequestRecord::new(clock.unix_ms(), operation, transport, Decision::new(seq));
        Self { started: clock.now(), gateway: gateway.clone(), record, trying: None, finished: false }
    }

    /// The request's number.
    pub fn seq(&self) -> u64 {
        self.record.routed.decision.seq
    }

    /// Takes what the record shows of the request's facts.
    pub fn facts(&mut self, facts: &RequestFacts) {
        let routed = Arc::make_mut(&mut self.record.routed);
        routed.client = facts.client;
        routed.session = facts.session.map(|s| s.short());
        routed.parent_session = facts.parent.map(|s| s.short());
        routed.model = facts.model.clone();
        self.record.stream = facts.stream;
    }

    /// Notes which token the request came with and the pool it is bound to.
    pub fn client(&mut self, scope: &crate::tokens::ClientScope) {
        let routed = Arc::make_mut(&mut self.record.routed);
        routed.token.clone_from(&scope.token);
        routed.pool.clone_from(&scope.pool);
    }

    /// Takes the decision, and tells the event stream the request was routed (the event and the
    /// record share it).
    pub fn decided(&mut self, decision: Decision) {
        Arc::make_mut(&mut self.record.routed).decision = decision;
        self.gateway.routed(self.record.routed.clone());
    }

    /// Adds what happened after the decision to its reasons (the decision was already published: the
    /// record's copy changes, the event's stays as it was shown).
    pub fn reason(&mut self, reason: crate::router::Reason) {
        Arc::make_mut(&mut self.record.routed).decision.reasons.push(reason);
    }

    /// The provider says it dropped reasoning from the request's input: the record's decision says so
    /// (the decision event already published stays as it was shown; the finished record carries it).
    pub fn reasoning_dropped(&mut self, dropped: crate::drops::ReasoningDropped) {
        Arc::make_mut(&mut self.record.routed).decision.reasoning_dropped = Some(dropped);
    }

    /// Items dropped by rescue.
    pub fn rescued(&mut self, items: usize) {
        self.record.rescued_items = items;
    }

    /// An attempt on `key` begins.
    pub fn trying(&mut self, key: KeyId, since: Instant) {
        self.trying = Some((key, since));
    }

    /// An attempt ended.
    pub fn attempted(&mut self, attempt: Attempt) {
        self.trying = None;
        if self.record.attempts.len() < crate::router::MAX_ATTEMPTS {
            self.record.attempts.push(attempt);
        }
    }

    /// A notable provider error code the client got.
    pub fn upstream_code(&mut self, code: Option<&'static str>) {
        self.record.upstream_code = code;
    }

    /// `key`'s answer is being relayed (so a client that leaves mid-answer is recorded against it).
    pub fn serving(&mut self, key: &KeyId) {
        self.record.served_by = Some(key.clone());
    }

    /// The answer's headers (or first frame) are going to the client now (the first call counts).
    pub fn answered(&mut self) {
        if self.record.ttfb_ms == 0 {
            self.record.ttfb_ms = self.gateway.clock().elapsed_ms(self.started).max(1);
        }
    }

    /// Publishes the record.
    pub fn finish(mut self, end: End) {
        self.close(end);
    }

    fn close(&mut self, end: End) {
        if self.finished {
            return;
        }
        self.finished = true;
        let elapsed = self.gateway.clock().elapsed_ms(self.started);
        let record = &mut self.record;
        if record.ttfb_ms == 0 {
            record.ttfb_ms = elapsed;
        }
        record.duration_ms = elapsed;
        record.served_by = end.served_by;
        record.status = end.status;
        record.error = end.error;
        record.usage = end.usage;
        if record.served_by.as_ref().is_some_and(|k| self.gateway.pool().is_plan(k)) {
            record.included_in_plan();
        } else {
            record.price(&self.gateway.settings().prices());
        }
        let record = std::mem::replace(record, RequestRecord::spent());
        self.gateway.publish(record);
    }
}

impl Drop for Trace {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        if let Some((key, since)) = self.trying.take() {
            let duration_ms = self.gateway.clock().elapsed_ms(since);
            self.attempted(Attempt {
                key,
                status: None,
                failure: Some(FailureKind::ClientCancelled),
                duration_ms,
                message: None,
            });
        }
        let served_by = self.record.served_by.clone();
        self.close(End { served_by, status: CLIENT_CLOSED, error: Some("client_cancelled"), usage: None });
    }
}
