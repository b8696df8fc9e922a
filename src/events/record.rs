//! A finished request's record: how it was routed (the `Routed` event it started as), the attempts made,
//! and what came of it, priced once when it finished.

use std::sync::Arc;

use serde::Serialize;

use crate::facts::{ClientKind, Operation};
use crate::keys::KeyId;
use crate::router::Decision;
use crate::spend::Usage;
use crate::spend::{Cost, PriceTable, Unpriced, Usd};

/// Why an attempt did not serve the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// 429 with a rate limit: the key cools down.
    RateLimited,
    /// 429 `insufficient_quota`: the account is out of credit.
    QuotaExhausted,
    /// 401/403: the key was rejected.
    InvalidKey,
    /// `model_not_found`: this key cannot use the model; it is skipped for it.
    ModelUnavailable,
    /// 5xx from the provider.
    #[serde(rename = "upstream_5xx")]
    Upstream5xx,
    /// No answer headers within the first-byte timeout.
    Timeout,
    /// The connection could not be made or broke before an answer.
    UpstreamUnreachable,
    /// The answer ended before its first byte.
    UpstreamCut,
    /// The client's own request was refused (relayed as it was, never failed over).
    ClientError,
    /// This key's organization cannot read the request's unmarked encrypted content: the next
    /// organization is tried (a 400 that costs no tokens).
    WrongOrganization,
    /// The client went away before an answer reached it.
    ClientCancelled,
}

/// One upstream attempt: small, fixed-size values only (the key id is a shared pointer).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct Attempt {
    /// The key tried.
    pub key: KeyId,
    /// The upstream status, if a response came back.
    pub status: Option<u16>,
    /// Why it failed over, if it did.
    pub failure: Option<FailureKind>,
    /// Milliseconds until response headers (or failure).
    pub duration_ms: u32,
    /// What went wrong, when it did: the provider's error message (shortened, anything key-like
    /// masked, at most `classify::MAX_MESSAGE_CHARS`) or Keymux's account of a connection failure.
    pub message: Option<Box<str>>,
}

/// How a request arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum Wire {
    /// An HTTP request.
    Http,
    /// A `response.create` frame on a Responses WebSocket.
    WebSocket,
}

/// A finished request: how it was routed, and everything that came of it.
#[derive(Clone, Debug, Serialize, ts_rs::TS)]
pub struct RequestRecord {
    /// What arrived and how it was decided: the very `routed` event the live stream showed, shared
    /// with it (`Trace` changes it through `Arc::make_mut`, which copies only once it is shared).
    #[serde(flatten)]
    // Declared in TypeScript as `Routed & { ... }` by `api::typescript::typescript()`.
    #[ts(skip)]
    pub routed: Arc<Routed>,
    /// Whether the client asked for a stream.
    pub stream: bool,
    /// Attempts made, in order (at most `router::MAX_ATTEMPTS`).
    pub attempts: Vec<Attempt>,
    /// The key whose answer went back to the client.
    pub served_by: Option<KeyId>,
    /// The status the client got.
    pub status: u16,
    /// Keymux's error label when Keymux answered with an error.
    pub error: Option<&'static str>,
    /// A notable error code the provider answered with (`invalid_encrypted_content`…).
    pub upstream_code: Option<&'static str>,
    /// Items dropped by rescue because no usable key could read them.
    pub rescued_items: usize,
    /// Milliseconds from arrival to the answer's headers (for a WebSocket turn, its first frame).
    pub ttfb_ms: u32,
    /// Milliseconds from arrival to the end of the answer.
    pub duration_ms: u32,
    /// The tokens the answer reported, when it reached a successful end.
    pub usage: Option<Usage>,
    /// What the answer cost, in US dollars, from its usage, its model and the service tier it was
    /// billed in (`None`: no usage was reported, or no price applies; then `unpriced` says why).
    #[ts(type = "number | null")]
    pub cost_usd: Option<Usd>,
    /// The answer reported usage, but the price table has no price for its model (or its service
    /// tier): what it cost is unknown, never $0.
    pub unpriced: Option<Unpriced>,
}

impl RequestRecord {
    /// A record of a request about which nothing is known yet but when and how it arrived.
    pub fn new(at_unix_ms: u64, operation: Operation, transport: Wire, decision: Decision) -> Self {
        Self::with(Arc::new(Routed {
            at_unix_ms,
            operation,
            transport,
            client: ClientKind::Other,
            token: String::new(),
            pool: crate::pools::ALL.to_owned(),
            session: None,
            parent_session: None,
            model: None,
            decision,
        }))
    }

    /// An empty record that allocates nothing: what a trace keeps once it has published its own.
    pub fn spent() -> Self {
        // Built once; every trace shares it.
        static NOTHING: std::sync::LazyLock<Arc<Routed>> =
            std::sync::LazyLock::new(|| RequestRecord::new(0, Operation::Other, Wire::Http, Decision::new(0)).routed);
        Self::with(NOTHING.clone())
    }

    fn with(routed: Arc<Routed>) -> Self {
        Self {
            routed,
            stream: false,
            attempts: Vec::new(),
            served_by: None,
            status: 0,
            error: None,
            upstream_code: None,
            rescued_items: 0,
            ttfb_ms: 0,
            duration_ms: 0,
            usage: None,
            cost_usd: None,
            unpriced: None,
        }
    }

    /// An answer a ChatGPT plan served: its subscription includes it, so it costs nothing more (and
    /// counts against no budget in money).
    pub fn included_in_plan(&mut self) {
        if self.usage.is_some() {
            self.cost_usd = Some(Usd::ZERO);
        }
    }

    /// Prices the answer's usage (once, when the request finished): its cost, or why it has none.
    pub fn price(&mut self, prices: &PriceTable) {
        let Some(usage) = self.usage else { return };
        // A request that named no model has no price (`""` is in no table).
        let day = crate::clock::utc_day(self.routed.at_unix_ms);
        match prices.cost(self.routed.model.as_deref().unwrap_or_default(), &usage, day) {
            Cost::Priced(usd) => self.cost_usd = Some(usd),
            Cost::Unpriced(why) => self.unpriced = Some(why),
        }
    }
}

/// A request was routed (before any attempt): the dashboard shows it at once. A finished request's
/// record starts with the same fields.
#[derive(Clone, Debug, Serialize, ts_rs::TS)]
pub struct Routed {
    /// Wall-clock time of arrival, Unix milliseconds.
    pub at_unix_ms: u64,
    /// The operation.
    pub operation: Operation,
    /// HTTP or WebSocket.
    pub transport: Wire,
    /// The client that sent it.
    pub client: ClientKind,
    /// The name of the local token it came with (empty for `KEYMUX_CLIENT_TOKEN`).
    pub token: String,
    /// The pool that token is bound to (`all`: every key).
    pub pool: String,
    /// A short keyed digest of its session (for Codex, its thread).
    pub session: Option<String>,
    /// For a Codex subagent thread, the short keyed digest of the session it belongs to.
    pub parent_session: Option<String>,
    /// Model named in the body (capped).
    pub model: Option<String>,
    /// The decision.
    pub decision: Decision,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempt_records_stay_small() {
        // An attempt is a key id, a few scalars and at most a short message, never a copy of the request.
        assert!(std::mem::size_of::<Attempt>() <= 48, "{}", std::mem::size_of::<Attempt>());
    }
}
