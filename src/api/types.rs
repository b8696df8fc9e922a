//! The bodies of the control API: every one a named type, from which the dashboard's TypeScript types
//! are generated (`ui/src/api/types.ts`; a test fails when the committed file is out of date).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::clock::LocalPeriods;
use crate::events::RequestRecord;
use crate::keys::KeyId;
use crate::keys::KeyTest;
use crate::metrics::StoreStatus;
use crate::pool::KeyStatus;
use crate::sessions::SessionInfo;
use crate::spend::Usd;

pub use crate::control::bodies::{
    ClientSetup, FoundKey, ImportDone, ImportOffer, ImportRequest, NotImported, SetupDone, SetupFile, SetupPreview,
    SetupRequest, SetupUndone,
};

/// The gateway at a glance, and every key: what the status bar and the tray show.
#[derive(Clone, Debug, Serialize, Deserialize, TS)]
pub struct StatusBody {
    /// The gateway as a whole: version, address, pause, key counts, store and keychain state.
    pub gateway: GatewayInfo,
    /// Every pooled key, whatever its health, in the pool's order.
    pub keys: Vec<KeyInfo>,
    /// The pools: the built-in `all` first, then the user's, in their order.
    pub pools: Vec<PoolInfo>,
}

/// A pool as the dashboard, the tray and the CLI show it.
#[derive(Clone, Debug, Serialize, Deserialize, TS)]
pub struct PoolInfo {
    /// Its name.
    pub name: String,
    /// The built-in `all` (every key; it cannot be changed).
    pub builtin: bool,
    /// Defined by `KEYMUX_POOL_*` (change the environment to change it).
    pub from_env: bool,
    /// Its keys as the user named them (labels or ids).
    pub keys: Vec<String>,
    /// The keys they resolve to, in the pool's order.
    pub key_ids: Vec<KeyId>,
    /// Its fallback pools, in order.
    pub fallback: Vec<String>,
    /// Its policies: whether its requests may ask for a tier above the standard one (`priority`, Fast
    /// mode), the proxy its keys go out through (`None`: direct; never with a user or password), and its
    /// budget in money, its keys' together.
    #[serde(flatten)]
    pub policies: crate::pools::PoolPolicies,
    /// The proxy's user and password are kept in the keychain (never shown).
    pub proxy_login: bool,
    /// The tokens bound to it, by name.
    pub tokens: Vec<String>,
    /// Its keys that can take a request now.
    pub usable: usize,
    /// Mean rate-limit headroom of its usable keys, 0 to 1 (0 when none is usable).
    pub headroom: f32,
    /// What its keys spent today and this month (`all`: every request, keys removed since included).
    #[serde(flatten)]
    pub spend: PeriodSpend,
    /// Where it stands against its budget now.
    pub budget: crate::budget::BudgetState,
    /// When its budget runs out at the last hour's pace of its keys together, Unix milliseconds, if
    /// before its period ends (now: spent already).
    pub budget_runs_out_unix_ms: Option<u64>,
    /// When the last of its usable keys runs out of its rate-limit window at its pace, Unix
    /// milliseconds, if all do before they refill (`None`: some key keeps room).
    pub window_runs_out_unix_ms: Option<u64>,
}

impl PoolInfo {
    /// A pool as its definition says, before anything live (keys, tokens, spend) is known.
    pub fn defined(def: &crate::pools::PoolConfig) -> Self {
        Self {
            name: def.name.clone(),
            builtin: def.name == crate::pools::ALL,
            from_env: false,
            keys: def.keys.clone(),
            key_ids: Vec::new(),
            fallback: def.fallback.clone(),
            policies: def.policies.clone(),
            proxy_login: def.proxy_login,
            tokens: Vec::new(),
            usable: 0,
            headroom: 0.0,
            spend: PeriodSpend::default(),
            budget: crate::budget::BudgetState::Open,
            budget_runs_out_unix_ms: None,
            window_runs_out_unix_ms: None,
        }
    }
}

/// What a key or a pool spent in the local day and month (`GatewayInfo.periods`), from the stored
/// metrics (so it survives restarts).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, TS)]
pub struct PeriodSpend {
    /// Spent today, in US dollars.
    #[ts(type = "number")]
    pub spend_today_usd: Usd,
    /// Spent this month, in US dollars.
    #[ts(type = "number")]
    pub spend_month_usd: Usd,
    /// Requests today that had no price (not counted in the spend, and not $0).
    pub unpriced_requests_today: u64,
    /// Requests this month that had no price.
    pub unpriced_requests_month: u64,
}

/// A pool to create: `POST /keymux/api/pools`.
pub type NewPool = crate::pools::PoolConfig;

/// The gateway as a whole.
#[derive(Clone, Debug, Serialize, Deserialize, TS)]
pub struct GatewayInfo {
    /// Keymux's version.
    pub version: String,
    /// The base URL clients use (`http://127.0.0.1:8787/v1`).
    pub base_url: String,
    /// Routing is paused: new requests get 503.
    pub paused: bool,
    /// `lost_org = "rescue"` (the default): a session whose organization (or ChatGPT plan) has no usable
    /// key left goes on with another key, its unreadable items dropped; `false`: it is refused.
    pub rescues_lost_sessions: bool,
    /// How many keys the pool holds, in any health.
    pub keys_total: usize,
    /// Of those, usable now.
    pub keys_healthy: usize,
    /// When the first cooling key frees, Unix milliseconds, if any key is cooling.
    pub next_reset_unix_ms: Option<u64>,
    /// Requests finished in the last minute.
    pub requests_last_minute: u64,
    /// Where the metrics live, and any problem.
    pub store: StoreStatus,
    /// Which secret store holds the keys and tokens, and whether it answers.
    pub keychain: KeychainInfo,
    /// When the gateway started, Unix milliseconds.
    pub started_unix_ms: u64,
    /// The gateway's clock now, Unix milliseconds (countdowns are computed against it).
    pub now_unix_ms: u64,
    /// The newest event id: subscribe to `/keymux/api/events?after=` it to miss nothing.
    pub last_event_id: u64,
    /// The local day and month that today's and this month's spend follow.
    pub periods: LocalPeriods,
}

/// Where secrets live.
#[derive(Clone, Debug, Serialize, Deserialize, TS)]
pub struct KeychainInfo {
    /// `OS keychain` or `memory`.
    pub kind: String,
    /// Whether it answered the last time it was asked.
    pub ok: bool,
}

/// One rate-limit window, as the provider last reported it and counted down locally since.
#[derive(Clone, Debug, Serialize, Deserialize, TS)]
pub struct WindowInfo {
    /// How many requests (or tokens) the provider allows in one window.
    pub limit: u64,
    /// How many of those are left now: the provider's last figure, less what was sent since.
    pub remaining: u64,
    /// When it refills fully, Unix milliseconds.
    pub resets_at_unix_ms: u64,
    /// How long the window is, milliseconds (for a pace figure: used share against elapsed share).
    pub span_ms: u64,
    /// Used share divided by elapsed share: above 1, the window runs out before it refills.
    pub pace: Option<f32>,
}

/// One key, with everything a card or a gauge needs. Never the secret.
#[derive(Clone, Debug, Serialize, Deserialize, TS)]
pub struct KeyInfo {
    /// The key's state now (its health, counters and settings).
    #[serde(flatten)]
    // Declared in TypeScript as `KeyStatus & { ... }` by `api::typescript::typescript()`.
    #[ts(skip)]
    pub status: KeyStatus,
    /// When a cooldown or quota rest ends, Unix milliseconds.
    pub until_unix_ms: Option<u64>,
    /// A ChatGPT plan used up (resting after its 429, or a window its answer reported at 100 %): until
    /// when new sessions go to the API keys instead, Unix milliseconds. `None`: an API key, or an open
    /// plan.
    pub plan_used_up_until_unix_ms: Option<u64>,
    /// The provider's window for requests (`x-ratelimit-*-requests`), once an answer reported it.
    pub requests_window: Option<WindowInfo>,
    /// The provider's window for tokens (`x-ratelimit-*-tokens`), once an answer reported it.
    pub tokens_window: Option<WindowInfo>,
    /// The user's pools that hold it (every key is also in `all`).
    pub pools: Vec<String>,
    /// The proxy it goes out through (its pool's, `http://host:port`); `None`: direct. When the proxy
    /// cannot be reached its health is `unreachable` and its last attempt names the proxy.
    pub proxy: Option<String>,
    /// What it spent today and this month.
    #[serde(flatten)]
    pub spend: PeriodSpend,
    /// Where it stands against its budgets in money now.
    pub budget: crate::budget::BudgetState,
    /// When a budget in money runs out at the last hour's pace, Unix milliseconds, if before its period
    /// ends (now: spent already).
    pub budget_runs_out_unix_ms: Option<u64>,
    /// When a rate-limit window runs out at its pace since it began, Unix milliseconds, if before it
    /// refills (now: used up).
    pub window_runs_out_unix_ms: Option<u64>,
}

/// A client token as listed (never the token itself).
#[derive(Clone, Debug, Serialize, Deserialize, TS)]
pub struct TokenInfo {
    /// The id the config and the keychain entry name the token by (`t_…`).
    pub id: String,
    /// The name the user gave it (`codex`, `pi`), shown in the request log as the client.
    pub name: String,
    /// When it was created, Unix seconds (0 when not known).
    pub created_unix: u64,
    /// The pool its requests may reach (`all`: every key).
    pub pool: String,
    /// Issued to a client's login (Codex's `gateway_oauth`) rather than made by the user.
    pub login: bool,
}

/// A key's new secret: `PUT /keymux/api/keys/{id}/secret`.
#[derive(Clone, Deserialize, TS)]
#[serde(deny_unknown_fields)]
pub struct NewSecret {
    /// The API key.
    #[ts(type = "string")]
    pub secret: crate::secrets::Secret,
}

impl NewSecret {
    /// The body the CLI sends a running gateway: the secret in clear, over loopback, with the admin
    /// credential (the one place it is).
    pub fn request_body(&self) -> serde_json::Value {
        serde_json::json!({ "secret": self.secret.expose() })
    }
}

/// A change to a token: `PATCH /keymux/api/tokens/{id}`.
#[derive(Clone, Debug, Deserialize, Serialize, TS)]
#[serde(deny_unknown_fields)]
pub struct TokenChanges {
    /// The pool to bind it to.
    pub pool: String,
}

/// A token to create: `POST /keymux/api/tokens`.
#[derive(Clone, Debug, Deserialize, Serialize, TS)]
#[serde(deny_unknown_fields)]
pub struct NewToken {
    /// Its name (`codex`, `acme-repo`).
    pub name: String,
    /// Its pool (default `all`).
    #[serde(default)]
    pub pool: Option<String>,
}

/// A token just created: the only time its value is shown.
#[derive(Clone, Debug, Serialize, Deserialize, TS)]
pub struct CreatedToken {
    /// The new token's id, name and creation time, as the token list will show it.
    pub token: TokenInfo,
    /// The value to give the client (Codex `env_key`, pi `apiKey`).
    pub secret: String,
}

/// The recent decisions, oldest first.
#[derive(Clone, Debug, Serialize, TS)]
pub struct DecisionsBody {
    /// One record per finished request: its decision, attempts, status, usage and timing.
    pub data: Vec<RequestRecord>,
}

/// The installed clients' latest checks through Keymux (`GET /keymux/api/clients`), made when
/// Keymux started and when a client's version changed.
#[derive(Debug, Serialize, ts_rs::TS)]
pub struct ClientsBody {
    /// Per client checked (none until the first check ends).
    pub clients: Vec<crate::events::ClientChecked>,
}

/// The recent sessions, most recently seen first.
#[derive(Clone, Debug, Serialize, TS)]
pub struct SessionsBody {
    /// The client sessions seen recently (bounded), each with the key and organization it is bound to.
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
    /// Requests that finished in the bucket, whatever their status.
    pub requests: u64,
    /// Of those, by status class (`2xx`, `4xx`, `429`, `5xx`, `499`).
    pub by_status: BTreeMap<String, u64>,
    /// By `affinity_source/affinity_state`.
    pub by_affinity: BTreeMap<String, u64>,
    /// Attempts that failed, by category (`rate_limited`, `upstream_5xx`…); a retried request counts each.
    pub failures: BTreeMap<String, u64>,
    /// Requests sent to the organization their encrypted reasoning items belong to.
    pub pinned: u64,
    /// Requests kept on the key that served the earlier turns of their conversation.
    pub continuity: u64,
    /// Requests sent on after dropping items no key could read (their organization was gone).
    pub rescued: u64,
    /// Requests whose answer said the provider dropped reasoning from their input (turn boundaries
    /// left out): turns that lost part of their session's reasoning although they succeeded.
    pub reasoning_dropped: u64,
    /// Of those, dropped for `organization_mismatch`: the turn reached an organization where its
    /// session's reasoning does not live (Keymux then learns the session's organization again).
    pub reasoning_misplaced: u64,
    /// Prompt (input) tokens the provider counted.
    pub input_tokens: u64,
    /// Of those, from the provider's prompt cache.
    pub cached_tokens: u64,
    /// Output tokens (reasoning included) the provider counted.
    pub output_tokens: u64,
    /// `cached_tokens / input_tokens`, 0 to 1 (0 before any prompt).
    pub cached_ratio: f32,
    /// What the priced requests cost, in US dollars.
    #[ts(type = "number")]
    pub spend_usd: Usd,
    /// Requests that reported usage but had no price (their model or service tier is not in the price
    /// table): not counted in `spend_usd`, and not $0.
    pub unpriced_requests: u64,
    /// Median time to the first byte, milliseconds (the bucket's upper bound).
    pub latency_p50_ms: Option<u32>,
    /// Time to the first byte that 90% of requests stayed under, milliseconds (the bucket's upper bound).
    pub latency_p90_ms: Option<u32>,
    /// Time to the first byte that 99% of requests stayed under, milliseconds (the bucket's upper bound).
    pub latency_p99_ms: Option<u32>,
}

/// How the spend report groups requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(rename_all = "snake_case")]
pub enum SpendBy {
    /// Per key (from the stored metrics).
    #[default]
    Key,
    /// Per pool: the sum of its keys (from the stored metrics; a key in two pools counts in both).
    Pool,
    /// Per client token (from the requests the gateway remembers).
    Token,
    /// Per model as the request named it (from the requests the gateway remembers).
    Model,
}

/// `GET /keymux/api/spend?days=N&by=key|pool|token|model`: requests, tokens and spend per group since
/// a local midnight, with the totals.
#[derive(Clone, Debug, Serialize, Deserialize, TS)]
pub struct SpendReport {
    /// How the rows are grouped.
    pub by: SpendBy,
    /// The time zone the days follow.
    pub zone: String,
    /// The start of the period: local midnight `days - 1` days before today, Unix milliseconds.
    pub since_unix_ms: u64,
    /// Per token and per model come from the requests the gateway still remembers (its last
    /// `events::RECENT_CAPACITY`, since it started), not from the stored metrics, which keep keys only.
    pub recent_only: bool,
    /// Every request from this moment on is counted (later than `since_unix_ms` when `recent_only`
    /// and the gateway started, or forgot requests, after it), Unix milliseconds.
    pub complete_since_unix_ms: u64,
    /// One row per key, pool, token or model, the most spent first.
    pub rows: Vec<SpendRow>,
    /// Every request of the period (for pools: of every key, each counted once).
    pub total: SpendRow,
}

/// What one key, pool, token or model (or the total) used and spent.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, TS)]
pub struct SpendRow {
    /// The key's label (a key removed since: `removed key <fingerprint>`; no key: `(no key)`), the
    /// pool's, the token's or the model's name.
    pub name: String,
    /// Requests finished, whatever their status.
    pub requests: u64,
    /// Prompt (input) tokens.
    pub input_tokens: u64,
    /// Of those, from the provider's prompt cache.
    pub cached_tokens: u64,
    /// Output tokens (reasoning included).
    pub output_tokens: u64,
    /// What the priced requests cost, in US dollars.
    #[ts(type = "number")]
    pub spend_usd: Usd,
    /// Requests that reported usage but had no price: not in `spend_usd`, and not $0.
    pub unpriced_requests: u64,
}

/// A fresh one-time login link for the dashboard.
#[derive(Clone, Debug, Serialize, Deserialize, TS)]
pub struct LoginLink {
    /// Open it in a browser (it works once, for ten minutes).
    pub url: String,
}

/// A dashboard session, for the page that exchanged a login code: it keeps the token in its tab's
/// `sessionStorage` and sends it in `x-keymux-session` on every call.
#[derive(Clone, Debug, Serialize, TS)]
pub struct SessionToken {
    /// The session's secret: sent in `x-keymux-session` on every call; never stored outside the tab.
    pub token: String,
}

/// The gateway's answer to the CLI's challenge.
#[derive(Clone, Debug, Serialize, Deserialize, TS)]
pub struct ChallengeAnswer {
    /// The gateway's own nonce.
    pub server_nonce: String,
    /// HMAC of both nonces under the admin credential.
    pub mac: String,
}

/// The result of testing a key.
#[derive(Clone, Debug, Serialize, Deserialize, TS)]
pub struct KeyTestBody {
    /// The provider accepted the key.
    pub ok: bool,
    /// The HTTP status of the provider's answer (`None`: no answer, e.g. it could not be reached).
    pub status: Option<u16>,
    /// The organization the provider said the key belongs to (`openai-organization`), if it said.
    pub org: Option<String>,
    /// What the test found and what to do about it, for a person.
    pub message: String,
    /// From sending the test request to its answer, milliseconds.
    pub duration_ms: u32,
}

/// The answer to switching a key on or off: the key as it is now.
#[derive(Clone, Debug, Serialize, Deserialize, TS)]
pub struct KeyBody {
    /// The key after the change (`None` only if it was removed meanwhile).
    pub key: Option<KeyInfo>,
}

impl From<KeyTest> for KeyTestBody {
    fn from(t: KeyTest) -> Self {
        Self { ok: t.ok, status: t.status, org: t.org, message: t.message, duration_ms: t.duration_ms }
    }
}

/// An OpenAI-shaped error, as every failed call answers.
#[derive(Clone, Debug, Serialize, TS)]
pub struct ErrorBody {
    /// What went wrong, in OpenAI's shape: message, type, code, param.
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
    /// A short machine-readable reason (`invalid_api_key`, `keymux_key_rejected`…) a client can match on.
    pub code: Option<String>,
    /// The request parameter at fault, in OpenAI's shape; Keymux always sends null.
    pub param: Option<String>,
}
