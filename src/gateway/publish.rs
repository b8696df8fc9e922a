//! Publishing: what the provider taught applied to the pool, each change told once (the gateway's
//! `Notices` say what is news), finished requests recorded (a log line, the hashed metrics, the
//! sessions, the event stream), and what time alone changed.

use std::sync::Arc;

use super::Gateway;
use crate::events::{Event, GatewayEvent, KeyChange, KeyEvent, RequestRecord, Routed};
use crate::keys::KeyId;
use crate::pool::{HealthChange, Learned};

impl Gateway {
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
        if !self.notices.key_change(key, change) {
            return;
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

    /// Notices what time alone changed (cooldowns that ended, out-of-quota keys due to be tried again,
    /// plans whose windows reset) and tells the event stream. The runtime calls it every second, with
    /// `budgets::tell`.
    pub fn tick(&self) {
        let statuses = self.pool.status(self.clock.now(), self.today());
        for (key, change) in self.notices.back_by_time(&statuses) {
            self.announce(&key, change);
        }
        self.tell_plans(&statuses);
    }

    /// Tells the event stream when a plan runs out and when it is back, once each, from the keys'
    /// `statuses` now.
    fn tell_plans(&self, statuses: &[crate::pool::KeyStatus]) {
        for (key, change) in self.notices.plans(statuses, self.clock.unix_ms()) {
            self.announce(&key, change);
        }
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
