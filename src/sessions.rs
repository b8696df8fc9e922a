//! The sessions seen recently, for the dashboard's first question: is my session safe? Each session is
//! known only by a short keyed digest of its `prompt_cache_key` (for Codex, of its thread id; a
//! subagent thread names the session it belongs to, `parent`); the table is bounded and lives in memory
//! only.

use std::collections::HashMap;
use std::sync::Mutex;

use serde::Serialize;

use crate::events::RequestRecord;
use crate::facts::ClientKind;
use crate::keys::KeyId;
use crate::recency::Recency;
use crate::router::{Refusal, Route};
use crate::spend::Usd;

/// Most sessions remembered; the least recently seen is forgotten first.
pub const SESSIONS_CAPACITY: usize = 1_000;

/// What holds a session to its key or organization.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum Binding {
    /// Its encrypted reasoning can be read only by its organization.
    EncryptedContent,
    /// It continues a stored response (`previous_response_id`): one key.
    Continuity,
    /// A Responses WebSocket bound to one upstream socket: one key.
    WebSocket,
    /// Nothing: any key may serve it (soft affinity only prefers one).
    None,
}

/// One session as the dashboard shows it.
#[derive(Clone, Debug, Serialize, ts_rs::TS)]
pub struct SessionInfo {
    /// The short keyed digest that names it.
    pub session: String,
    /// For a Codex subagent thread, the session it belongs to (its root thread's digest), under which
    /// the dashboard shows it.
    pub parent: Option<String>,
    /// The client that drives it.
    pub client: ClientKind,
    /// The key that served its last turn.
    pub key: Option<KeyId>,
    /// That key's organization, when known.
    pub org: Option<String>,
    /// What held its last turn.
    pub binding: Binding,
    /// Turns seen (requests and WebSocket turns).
    pub turns: u64,
    /// First and last turn, Unix milliseconds.
    pub first_seen_unix_ms: u64,
    /// Last turn, Unix milliseconds.
    pub last_seen_unix_ms: u64,
    /// Prompt tokens of its successful turns.
    pub input_tokens: u64,
    /// Of those, served from the provider's prompt cache.
    pub cached_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// What its priced turns cost, in US dollars.
    #[ts(type = "number")]
    pub cost_usd: Usd,
    /// Turns that reported usage but have no price (their model is not in the price table): not
    /// counted in `cost_usd`, and not $0.
    pub unpriced_requests: u64,
    /// Items dropped over its life because their organization had no usable key left.
    pub rescued_items: u64,
    /// Turns refused (lost organization under `fail`, mixed organizations, continuity lost).
    pub refused: u64,
    /// The last refusal's kind, when there was one.
    pub last_refusal: Option<&'static str>,
    /// Turns that failed otherwise (errors, cut streams).
    pub failed: u64,
}

struct Inner {
    by_digest: HashMap<String, SessionInfo>,
    recency: Recency<String>,
}

/// The recent sessions.
pub struct Sessions {
    inner: Mutex<Inner>,
}

impl Default for Sessions {
    fn default() -> Self {
        Self { inner: Mutex::new(Inner { by_digest: HashMap::new(), recency: Recency::new(SESSIONS_CAPACITY) }) }
    }
}

impl Sessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a finished request of a session (requests without one are ignored).
    pub fn observe(&self, record: &RequestRecord, org: Option<String>) {
        let Some(digest) = record.routed.session.clone() else { return };
        let mut inner = self.lock();
        let entry = inner.by_digest.entry(digest.clone()).or_insert_with(|| SessionInfo {
            session: digest.clone(),
            parent: None,
            client: record.routed.client,
            key: None,
            org: None,
            binding: Binding::None,
            turns: 0,
            first_seen_unix_ms: record.routed.at_unix_ms,
            last_seen_unix_ms: record.routed.at_unix_ms,
            input_tokens: 0,
            cached_tokens: 0,
            output_tokens: 0,
            cost_usd: Usd::ZERO,
            unpriced_requests: 0,
            rescued_items: 0,
            refused: 0,
            last_refusal: None,
            failed: 0,
        });
        update(entry, record, org);
        for gone in inner.recency.touch(digest) {
            inner.by_digest.remove(&gone);
        }
    }

    /// The most recently seen sessions first, at most `limit`.
    pub fn recent(&self, limit: usize) -> Vec<SessionInfo> {
        let inner = self.lock();
        let mut all: Vec<SessionInfo> = inner.by_digest.values().cloned().collect();
        all.sort_by(|a, b| b.last_seen_unix_ms.cmp(&a.last_seen_unix_ms).then(a.session.cmp(&b.session)));
        all.truncate(limit);
        all
    }

    /// How many sessions are remembered.
    pub fn len(&self) -> usize {
        self.lock().by_digest.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn update(entry: &mut SessionInfo, record: &RequestRecord, org: Option<String>) {
    let decision = &record.routed.decision;
    entry.turns += 1;
    entry.client = record.routed.client;
    if record.routed.parent_session.is_some() {
        entry.parent.clone_from(&record.routed.parent_session);
    }
    entry.last_seen_unix_ms = entry.last_seen_unix_ms.max(record.routed.at_unix_ms);
    entry.rescued_items += record.rescued_items as u64;
    if let Some(refusal) = &decision.refusal {
        entry.refused += u64::from(matches!(
            refusal,
            Refusal::LostOrg { .. } | Refusal::MixedOrgs { .. } | Refusal::ContinuityLost { .. }
        ));
        entry.last_refusal = Some(refusal_name(refusal));
        return;
    }
    if record.served_by.is_some() {
        entry.key = record.served_by.clone();
        entry.org = org;
    }
    entry.binding = match decision.route {
        Route::WebSocketBound => Binding::WebSocket,
        Route::Continuity => Binding::Continuity,
        _ if decision.pin.is_some() => Binding::EncryptedContent,
        _ => Binding::None,
    };
    if record.error.is_some() || record.status >= 400 {
        entry.failed += 1;
    }
    if let Some(usage) = record.usage {
        entry.input_tokens += usage.input;
        entry.cached_tokens += usage.cached;
        entry.output_tokens += usage.output;
    }
    if let Some(cost) = record.cost_usd {
        entry.cost_usd = entry.cost_usd.saturating_add(cost);
    }
    entry.unpriced_requests += u64::from(record.unpriced.is_some());
}

fn refusal_name(refusal: &Refusal) -> &'static str {
    match refusal {
        Refusal::MixedOrgs { .. } => "mixed_orgs",
        Refusal::ContinuityLost { .. } => "continuity_lost",
        Refusal::LostOrg { .. } => "lost_org",
        Refusal::NoKeys => "no_keys",
        Refusal::AllCooling { .. } => "all_cooling",
        Refusal::NoUsableKey { .. } => "no_usable_key",
        Refusal::PoolMismatch { .. } => "pool_mismatch",
        Refusal::BareResponseId { .. } => "bare_response_id",
        Refusal::BudgetReached { .. } => "budget_reached",
        Refusal::BudgetStopped { .. } => "budget_stopped",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::Wire;
    use crate::facts::Operation;
    use crate::router::Decision;

    fn turn(session: &str, at: u64) -> RequestRecord {
        let mut r = RequestRecord::new(at, Operation::ResponsesCreate, Wire::Http, Decision::new(at));
        std::sync::Arc::make_mut(&mut r.routed).session = Some(session.to_owned());
        r.served_by = Some(KeyId::new("k_a"));
        r.status = 200;
        r.usage = Some(crate::spend::Usage { input: 100, cached: 40, output: 5, ..Default::default() });
        r
    }

    #[test]
    fn sessions_accumulate_their_turns() {
        let sessions = Sessions::default();
        sessions.observe(&turn("aaaa1111", 1), Some("org-a".into()));
        let mut refused = turn("aaaa1111", 2);
        std::sync::Arc::make_mut(&mut refused.routed).decision.refusal =
            Some(Refusal::LostOrg { key: KeyId::new("k_gone") });
        sessions.observe(&refused, None);
        let mut rescued = turn("aaaa1111", 3);
        rescued.rescued_items = 2;
        sessions.observe(&rescued, Some("org-b".into()));
        let s = &sessions.recent(10)[0];
        assert_eq!((s.turns, s.refused, s.rescued_items), (3, 1, 2));
        assert_eq!(s.last_refusal, Some("lost_org"));
        assert_eq!((s.input_tokens, s.cached_tokens), (200, 80));
        assert_eq!((s.cost_usd, s.unpriced_requests), (Usd::ZERO, 0), "turns without a price add nothing");
        assert_eq!(s.org.as_deref(), Some("org-b"));
        assert_eq!((s.first_seen_unix_ms, s.last_seen_unix_ms), (1, 3));
    }

    #[test]
    fn a_session_sums_what_its_turns_cost_and_counts_the_unpriced_apart() {
        let sessions = Sessions::default();
        let prices = crate::spend::PriceTable::builtin();
        for model in ["gpt-5.5", "gpt-5.5", "not-a-priced-model"] {
            let mut t = turn("cccc3333", 1);
            std::sync::Arc::make_mut(&mut t.routed).model = Some(model.to_owned());
            t.price(prices);
            sessions.observe(&t, None);
        }
        let s = &sessions.recent(1)[0];
        // gpt-5.5: 60 fresh x $5 + 40 cached x $0.50 + 5 out x $30, per 1M = 0.0003 + 0.00002 + 0.00015
        assert_eq!(s.cost_usd, Usd::from_nanos(2 * 470_000));
        assert_eq!(s.unpriced_requests, 1);
        let json = serde_json::to_value(s).expect("json");
        assert_eq!(json["cost_usd"], serde_json::json!(0.00094));
    }

    #[test]
    fn a_thread_names_the_session_it_belongs_to() {
        let sessions = Sessions::default();
        sessions.observe(&turn("root0000", 1), None);
        let mut thread = turn("thrd1111", 2);
        std::sync::Arc::make_mut(&mut thread.routed).parent_session = Some("root0000".into());
        sessions.observe(&thread, None);
        let recent = sessions.recent(2);
        assert_eq!(recent[0].parent.as_deref(), Some("root0000"));
        assert_eq!(recent[1].parent, None);
    }

    #[test]
    fn the_table_is_bounded_and_keeps_the_recent() {
        let sessions = Sessions::default();
        for n in 0..(SESSIONS_CAPACITY as u64 + 200) {
            sessions.observe(&turn(&format!("s{n}"), n), None);
        }
        // One session seen again and again never grows the bookkeeping.
        for n in 0..(3 * SESSIONS_CAPACITY as u64) {
            sessions.observe(&turn("busy", 10_000 + n), None);
        }
        assert_eq!(sessions.len(), SESSIONS_CAPACITY);
        assert!(sessions.lock().recency.places() <= 2 * SESSIONS_CAPACITY);
        let recent = sessions.recent(SESSIONS_CAPACITY);
        assert_eq!(recent[0].session, "busy");
        assert!(!recent.iter().any(|s| s.session == "s0"), "the oldest was forgotten");
    }
}
