//! The bodies of the control API: every one a named type, from which the dashboard's TypeScript types
//! are generated (`ui/src/api/types.ts`; a test fails when the committed file is out of date).

use std::collections::BTreeMap;

use serde::Serialize;
use ts_rs::TS;

use crate::events::RequestRecord;
use crate::keys::KeyTest;
use crate::keys::{KeyId, KeySource, Provider};
use crate::metrics::StoreStatus;
use crate::sessions::SessionInfo;

/// The gateway at a glance, and every key: what the status bar and the tray show.
#[derive(Clone, Debug, Serialize, TS)]
pub struct StatusBody {
    /// The gateway.
    pub gateway: GatewayInfo,
    /// Every key.
    pub keys: Vec<KeyInfo>,
}

/// The gateway as a whole.
#[derive(Clone, Debug, Serialize, TS)]
pub struct GatewayInfo {
    /// Keymux's version.
    pub version: String,
    /// The base URL clients use (`http://127.0.0.1:8787/v1`).
    pub base_url: String,
    /// Routing is paused: new requests get 503.
    pub paused: bool,
    /// Keys in the pool.
    pub keys_total: usize,
    /// Of those, usable now.
    pub keys_healthy: usize,
    /// When the first cooling key frees, Unix milliseconds, if any key is cooling.
    pub next_reset_unix_ms: Option<u64>,
    /// Requests finished in the last minute.
    pub requests_last_minute: u64,
    /// Where the metrics live, and any problem.
    pub store: StoreStatus,
    /// The secret store.
    pub keychain: KeychainInfo,
    /// When the gateway started, Unix milliseconds.
    pub started_unix_ms: u64,
    /// The gateway's clock now, Unix milliseconds (countdowns are computed against it).
    pub now_unix_ms: u64,
    /// The newest event id: subscribe to `/keymux/api/events?after=` it to miss nothing.
    pub last_event_id: u64,
}

/// Where secrets live.
#[derive(Clone, Debug, Serialize, TS)]
pub struct KeychainInfo {
    /// `OS keychain` or `memory`.
    pub kind: String,
    /// Whether it answered the last time it was asked.
    pub ok: bool,
}

/// A key's health.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, TS)]
#[serde(rename_all = "snake_case")]
pub enum HealthState {
    /// Usable.
    Ready,
    /// Rate limited until `until_unix_ms`.
    Cooling,
    /// Out of quota; tried again at `until_unix_ms`.
    QuotaExhausted,
    /// Rejected by the provider (401/403).
    Rejected,
    /// Switched off by the user.
    Disabled,
}

/// One rate-limit window, as the provider last reported it and counted down locally since.
#[derive(Clone, Debug, Serialize, TS)]
pub struct WindowInfo {
    /// The limit per window.
    pub limit: u64,
    /// What is left now.
    pub remaining: u64,
    /// When it refills fully, Unix milliseconds.
    pub resets_at_unix_ms: u64,
    /// How long the window is, milliseconds (for a pace figure: used share against elapsed share).
    pub span_ms: u64,
    /// Used share divided by elapsed share: above 1, the window runs out before it refills.
    pub pace: Option<f32>,
}

/// One key, with everything a card or a gauge needs. Never the secret.
#[derive(Clone, Debug, Serialize, TS)]
pub struct KeyInfo {
    /// Stable id.
    pub id: KeyId,
    /// Label.
    pub label: String,
    /// Short keyed fingerprint of the secret.
    pub fingerprint: String,
    /// Provider.
    pub provider: Provider,
    /// Where the key came from.
    pub source: KeySource,
    /// Its organization: configured, else learned.
    pub org: Option<String>,
    /// Whether the organization was learned from the provider (not configured).
    pub org_learned: bool,
    /// Health.
    pub health: HealthState,
    /// When a cooldown or quota rest ends, Unix milliseconds.
    pub until_unix_ms: Option<u64>,
    /// Requests in flight.
    pub in_flight: u32,
    /// Priority tier (lower first).
    pub priority: u8,
    /// Daily token budget, if any.
    pub daily_token_budget: Option<u64>,
    /// Tokens used today (UTC).
    pub tokens_today: u64,
    /// The request window.
    pub requests_window: Option<WindowInfo>,
    /// The token window.
    pub tokens_window: Option<WindowInfo>,
    /// Share of the tighter window left, 0 to 1.
    pub headroom: f32,
    /// Requests served since start.
    pub served: u64,
    /// Upstream failures since start.
    pub failed: u64,
    /// The last upstream status.
    pub last_status: Option<u16>,
    /// `invalid_encrypted_content` on requests Keymux pinned correctly (a provider incident).
    pub invalid_encrypted_content: u64,
    /// Prompt tokens since start.
    pub input_tokens: u64,
    /// Of those, from the provider's prompt cache.
    pub cached_tokens: u64,
    /// Output tokens since start.
    pub output_tokens: u64,
    /// Cached share of prompt tokens.
    pub cached_ratio: f32,
    /// If not empty, the only models it serves.
    pub models: Vec<String>,
    /// Models it never serves.
    pub exclude_models: Vec<String>,
    /// Models the provider said it cannot use.
    pub unavailable_models: Vec<String>,
    /// Its base URL, when it has its own.
    pub base_url: Option<String>,
}

/// A client token as listed (never the token itself).
#[derive(Clone, Debug, Serialize, TS)]
pub struct TokenInfo {
    /// Stable id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// When it was created, Unix seconds (0 when not known).
    pub created_unix: u64,
}

/// A token just created: the only time its value is shown.
#[derive(Clone, Debug, Serialize, TS)]
pub struct CreatedToken {
    /// The token as listed.
    pub token: TokenInfo,
    /// The value to give the client (Codex `env_key`, pi `apiKey`).
    pub secret: String,
}

/// The recent decisions, oldest first.
#[derive(Clone, Debug, Serialize, TS)]
pub struct DecisionsBody {
    /// The records.
    pub data: Vec<RequestRecord>,
}

/// The recent sessions, most recently seen first.
#[derive(Clone, Debug, Serialize, TS)]
pub struct SessionsBody {
    /// The sessions.
    pub sessions: Vec<SessionInfo>,
}

/// Usage per bucket, per key and in total.
#[derive(Clone, Debug, Serialize, TS)]
pub struct UsageBody {
    /// The bucket length, milliseconds (an hour or a day).
    pub bucket_ms: u64,
    /// The points, oldest first.
    pub points: Vec<UsagePoint>,
}

/// What one bucket holds, for one key (by fingerprint) or `total`.
#[derive(Clone, Debug, Serialize, TS)]
pub struct UsagePoint {
    /// Start of the bucket, Unix milliseconds.
    pub start_unix_ms: u64,
    /// A key's fingerprint, `none` for requests no key served, or `total`.
    pub key: String,
    /// Requests finished.
    pub requests: u64,
    /// Of those, by status class (`2xx`, `4xx`, `429`, `5xx`, `499`).
    pub by_status: BTreeMap<String, u64>,
    /// By `affinity_source/affinity_state`.
    pub by_affinity: BTreeMap<String, u64>,
    /// Failed attempts by category.
    pub failures: BTreeMap<String, u64>,
    /// Requests pinned by encrypted content.
    pub pinned: u64,
    /// Requests bound by continuity.
    pub continuity: u64,
    /// Requests rescued.
    pub rescued: u64,
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Of those, cached.
    pub cached_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Cached share of prompt tokens.
    pub cached_ratio: f32,
    /// Median time to the first byte, milliseconds (the bucket's upper bound).
    pub latency_p50_ms: Option<u32>,
    /// 90th percentile.
    pub latency_p90_ms: Option<u32>,
    /// 99th percentile.
    pub latency_p99_ms: Option<u32>,
}

/// A fresh one-time login link for the dashboard.
#[derive(Clone, Debug, Serialize, TS)]
pub struct LoginLink {
    /// Open it in a browser (it works once, for ten minutes).
    pub url: String,
}

/// A dashboard session, for the page that exchanged a login code: it keeps the token in its tab's
/// `sessionStorage` and sends it in `x-keymux-session` on every call.
#[derive(Clone, Debug, Serialize, TS)]
pub struct SessionToken {
    /// The session token (secret).
    pub token: String,
}

/// The gateway's answer to the CLI's challenge.
#[derive(Clone, Debug, Serialize, serde::Deserialize, TS)]
pub struct ChallengeAnswer {
    /// The gateway's own nonce.
    pub server_nonce: String,
    /// HMAC of both nonces under the admin credential.
    pub mac: String,
}

/// The result of testing a key.
#[derive(Clone, Debug, Serialize, TS)]
pub struct KeyTestBody {
    /// The provider accepted the key.
    pub ok: bool,
    /// The status it answered.
    pub status: Option<u16>,
    /// The organization it reported.
    pub org: Option<String>,
    /// What happened.
    pub message: String,
    /// How long it took.
    pub duration_ms: u32,
}

impl From<KeyTest> for KeyTestBody {
    fn from(t: KeyTest) -> Self {
        Self { ok: t.ok, status: t.status, org: t.org, message: t.message, duration_ms: t.duration_ms }
    }
}

/// An OpenAI-shaped error, as every failed call answers.
#[derive(Clone, Debug, Serialize, TS)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// What went wrong and what to do.
#[derive(Clone, Debug, Serialize, TS)]
pub struct ErrorDetail {
    /// What happened and what to do next.
    pub message: String,
    /// OpenAI's error type.
    #[serde(rename = "type")]
    #[ts(rename = "type")]
    pub kind: String,
    /// A stable code.
    pub code: Option<String>,
    /// Always null.
    pub param: Option<String>,
}

/// The TypeScript of every type the dashboard reads or sends, in one file.
pub fn typescript() -> String {
    use crate::control::{KeyChanges, NewKey};
    use crate::events::{Attempt, Envelope, Event, FailureKind, GatewayEvent, KeyChange, KeyEvent, Routed, Transport};
    use crate::facts::{AffinitySource, ClientKind, Operation};
    use crate::relay::Usage;
    use crate::router::{AffinityState, Decision, PinDecision, Reason, Refusal, Route, SkipWhy};
    use crate::sessions::{Binding, SessionInfo};
    let decls = [
        KeyId::decl(),
        Provider::decl(),
        KeySource::decl(),
        Operation::decl(),
        ClientKind::decl(),
        AffinitySource::decl(),
        AffinityState::decl(),
        Route::decl(),
        SkipWhy::decl(),
        Reason::decl(),
        Refusal::decl(),
        PinDecision::decl(),
        Decision::decl(),
        FailureKind::decl(),
        Attempt::decl(),
        Transport::decl(),
        Usage::decl(),
        RequestRecord::decl(),
        Routed::decl(),
        KeyChange::decl(),
        KeyEvent::decl(),
        GatewayEvent::decl(),
        Event::decl(),
        Envelope::decl(),
        Binding::decl(),
        SessionInfo::decl(),
        StoreStatus::decl(),
        KeychainInfo::decl(),
        GatewayInfo::decl(),
        HealthState::decl(),
        WindowInfo::decl(),
        KeyInfo::decl(),
        StatusBody::decl(),
        TokenInfo::decl(),
        CreatedToken::decl(),
        DecisionsBody::decl(),
        SessionsBody::decl(),
        UsagePoint::decl(),
        UsageBody::decl(),
        LoginLink::decl(),
        SessionToken::decl(),
        KeyTestBody::decl(),
        ErrorDetail::decl(),
        ErrorBody::decl(),
        NewKey::decl(),
        KeyChanges::decl(),
    ];
    let mut out = String::from(
        "// Generated from Keymux's Rust types by `api::types::typescript()`; do not edit.\n\
         // Regenerate: KEYMUX_WRITE_TYPES=1 cargo test -p keymux --lib typescript_types\n\n",
    );
    for decl in decls {
        out.push_str("export ");
        // JSON numbers arrive as JavaScript numbers; every integer Keymux sends (counts, milliseconds)
        // stays far below 2^53.
        out.push_str(&decl.replace("bigint", "number"));
        out.push_str("\n\n");
    }
    out
}

#[cfg(test)]
mod tests {
    /// The committed `ui/src/api/types.ts` is what the Rust types say. Run with `KEYMUX_WRITE_TYPES=1`
    /// to rewrite it after changing a type.
    #[test]
    fn typescript_types_are_up_to_date() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("ui/src/api/types.ts");
        let want = super::typescript();
        if std::env::var_os("KEYMUX_WRITE_TYPES").is_some() {
            std::fs::create_dir_all(path.parent().expect("parent")).expect("ui/src/api");
            std::fs::write(&path, &want).expect("written");
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "ui/src/api/types.ts is out of date with the Rust types: run `KEYMUX_WRITE_TYPES=1 cargo test -p keymux --lib typescript_types`"
        );
    }
}
