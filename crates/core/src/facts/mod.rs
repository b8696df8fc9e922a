//! What the router needs to know about a request: its operation, its client, and the `RequestFacts`
//! read once from its method, path, headers and body. These words are shared by the router, the
//! pipeline, the events and the metrics; `extract` reads them (and strips Keymux's markers from the
//! body to forward), the body's fields through `body`, the session and affinity signal through
//! `session`. Nothing here looks anything up: what Keymux remembers about a request (its
//! session's key, a warm cache) is the router's separate input.

mod body;
mod extract;
mod session;

pub use body::FactsError;
pub use extract::{extract, Extracted, Incoming};
pub use session::{valid_cache_key, MAX_CACHE_KEY_BYTES};

use http::HeaderMap;
use serde::Serialize;

use crate::markers::{Pin, SessionKey};

/// Where an affinity signal came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum AffinitySource {
    /// No affinity signal was used.
    None,
    /// The request's `prompt_cache_key`.
    PromptCacheKey,
    /// A digest of the prompt prefix.
    PromptPrefix,
}

/// Which client sent a request, from the headers it names itself in ([`CLIENTS`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Default, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum ClientKind {
    /// `codex exec` (originator `codex_exec`).
    CodexExec,
    /// The Codex TUI (originator `codex-tui`).
    CodexTui,
    /// The Codex VS Code extension (originator `codex_vscode`).
    CodexVscode,
    /// The pi coding agent. pi 1.x names itself in `user-agent` on every API; pi 0.73 sent the
    /// OpenAI JS SDK's with pi's `session_id` header, so on Chat Completions, where it sends no session
    /// header by default, it is indistinguishable from any JS SDK user and shows as `other`.
    Pi,
    /// Anything else.
    #[default]
    Other,
}

/// How a client names itself in its headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sign {
    /// `originator` is this, or `user-agent` begins with it (Codex sends both).
    Named(&'static str),
    /// `originator` is this.
    Originator(&'static str),
    /// `user-agent` names this product: the whole header, or what comes before its `/version`.
    Product(&'static str),
    /// The OpenAI JS SDK's `user-agent` (`OpenAI/JS 6.26.0`), with this header beside it.
    JsSdkWith(&'static str),
}

/// Every client Keymux tells apart and how each names itself, the first sign seen winning. Names are
/// compared without regard to ASCII case.
pub const CLIENTS: &[(Sign, ClientKind)] = &[
    (Sign::Named("codex_exec"), ClientKind::CodexExec),
    (Sign::Named("codex-tui"), ClientKind::CodexTui),
    (Sign::Named("codex_tui"), ClientKind::CodexTui),
    (Sign::Named("codex_cli_rs"), ClientKind::CodexTui),
    (Sign::Named("codex_vscode"), ClientKind::CodexVscode),
    // pi 1.x (`@earendil-works/pi-coding-agent`): `pi/1.6.0 (linux; node/v22.19.0; x64)`, or `pi` when
    // set short, on Responses and Chat Completions alike.
    (Sign::Product("pi"), ClientKind::Pi),
    // pi 1.x's Codex provider (a ChatGPT login) sends Codex's `originator` header, as `pi`.
    (Sign::Originator("pi"), ClientKind::Pi),
    // pi 0.73 (`@mariozechner/pi-coding-agent`): the SDK's `user-agent` and pi's session headers.
    (Sign::JsSdkWith("session_id"), ClientKind::Pi),
    (Sign::JsSdkWith("x-session-affinity"), ClientKind::Pi),
];

impl Sign {
    /// Whether a request with these headers (`originator` and `user-agent` read from them once) shows it.
    fn seen(self, headers: &HeaderMap, originator: &str, user_agent: &str) -> bool {
        match self {
            Self::Named(name) => originator.eq_ignore_ascii_case(name) || starts_with(user_agent, name),
            Self::Originator(name) => originator.eq_ignore_ascii_case(name),
            Self::Product(name) => user_agent.split(['/', ' ']).next().is_some_and(|p| p.eq_ignore_ascii_case(name)),
            Self::JsSdkWith(header) => starts_with(user_agent, "OpenAI/JS") && headers.contains_key(header),
        }
    }
}

fn starts_with(text: &str, prefix: &str) -> bool {
    text.get(..prefix.len()).is_some_and(|head| head.eq_ignore_ascii_case(prefix))
}

impl ClientKind {
    /// Reads the client from a request's (or a WebSocket upgrade's) headers.
    pub fn from_headers(headers: &HeaderMap) -> Self {
        let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("");
        let (originator, user_agent) = (text("originator"), text("user-agent"));
        CLIENTS
            .iter()
            .find(|(sign, _)| sign.seen(headers, originator, user_agent))
            .map_or(Self::Other, |(_, client)| *client)
    }
}

/// The API operation a request performs. Routing rules and observability speak in these terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum Operation {
    /// `POST /v1/responses`.
    ResponsesCreate,
    /// `GET /v1/responses/{id}`.
    ResponsesGet,
    /// `DELETE /v1/responses/{id}`.
    ResponsesDelete,
    /// `POST /v1/responses/{id}/cancel`.
    ResponsesCancel,
    /// `GET /v1/responses/{id}/input_items`.
    ResponsesInputItems,
    /// `POST /v1/responses/compact`.
    ResponsesCompact,
    /// `POST /v1/chat/completions`.
    ChatCompletions,
    /// `POST /v1/embeddings`.
    Embeddings,
    /// `GET /v1/models` and `/v1/models/{id}`.
    Models,
    /// Any other `/v1/*` path, forwarded as it is.
    Other,
}

impl Operation {
    /// Classifies a request by method and path (the path includes `/v1`).
    pub fn classify(method: &http::Method, path: &str) -> Self {
        use http::Method as M;
        let rest = path.strip_prefix("/v1").unwrap_or(path);
        let segments: Vec<&str> = rest.trim_matches('/').split('/').collect();
        match (method, segments.as_slice()) {
            (&M::POST, ["responses"]) => Self::ResponsesCreate,
            (&M::POST, ["responses", "compact"]) => Self::ResponsesCompact,
            (&M::GET, ["responses", _id]) => Self::ResponsesGet,
            (&M::DELETE, ["responses", _id]) => Self::ResponsesDelete,
            (&M::POST, ["responses", _id, "cancel"]) => Self::ResponsesCancel,
            (&M::GET, ["responses", _id, "input_items"]) => Self::ResponsesInputItems,
            (&M::POST, ["chat", "completions"]) => Self::ChatCompletions,
            (&M::POST, ["embeddings"]) => Self::Embeddings,
            (&M::GET, ["models", ..]) => Self::Models,
            _ => Self::Other,
        }
    }

    /// Whether answers of this operation can carry org-bound values (and so get markers).
    pub fn carries_org_state(self) -> bool {
        match self {
            Self::ResponsesCreate
            | Self::ResponsesCompact
            | Self::ResponsesGet
            | Self::ResponsesCancel
            | Self::ResponsesInputItems
            | Self::ChatCompletions => true,
            Self::ResponsesDelete | Self::Embeddings | Self::Models | Self::Other => false,
        }
    }

    /// Whether the body must be JSON (and is parsed for facts).
    pub fn has_json_body(self) -> bool {
        match self {
            Self::ResponsesCreate | Self::ResponsesCompact | Self::ChatCompletions | Self::Embeddings => true,
            Self::ResponsesGet
            | Self::ResponsesDelete
            | Self::ResponsesCancel
            | Self::ResponsesInputItems
            | Self::Models
            | Self::Other => false,
        }
    }
}

/// The facts of one request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RequestFacts {
    /// Gateway-local request number, also the seed of stable tie-breaks.
    pub seq: u64,
    /// The operation.
    pub operation: Operation,
    /// The client that sent it.
    pub client: ClientKind,
    /// `model`, if the body names one (capped at 128 bytes for display).
    pub model: Option<String>,
    /// Whether the client asked for a stream.
    pub stream: bool,
    /// Estimated prompt tokens (about four bytes per token of the body).
    pub prompt_tokens: u64,
    /// Keys named by valid encrypted-content and item-id markers in the body (distinct key and
    /// organization pairs).
    pub pins: Vec<Pin>,
    /// The key named by a marked response id (`previous_response_id`, or the id in a
    /// `/v1/responses/{id}` path): a hard binding to that key.
    pub continuity: Option<Pin>,
    /// The request refers to a response id that carries no Keymux marker (made before Keymux, or directly
    /// upstream): it is routed by the normal rules.
    pub unmarked_response_id: bool,
    /// The body replays encrypted content without a Keymux marker (a session made before Keymux, or
    /// directly upstream): only the organization that made it can read it, and Keymux finds which.
    pub unmarked_encrypted: bool,
    /// Markers of another Keymux install that were stripped without routing on them.
    pub foreign_markers: usize,
    /// The top-level `service_tier` the request asks for, when it is a string (capped at 32 bytes).
    pub service_tier: Option<String>,
    /// Keyed digest of the request's session: Codex's thread id (`client_metadata.thread_id`, else
    /// the `thread-id` header) when it names one, else a valid top-level `prompt_cache_key` (Codex and
    /// pi set it to the session id). Each of a session's subagent threads is a session of its own here.
    #[serde(skip)]
    pub session: Option<SessionKey>,
    /// For a Codex subagent thread (its session id, `client_metadata.session_id` or the `session-id`
    /// header, is not its thread id): the keyed digest of the session it belongs to, the root thread.
    #[serde(skip)]
    pub parent: Option<SessionKey>,
    /// What a request's own `client_metadata` says of Responses-Lite, as Codex projects its
    /// `x-openai-internal-codex-responses-lite` header into each WebSocket turn
    /// (`ws_request_header_x_openai_internal_codex_responses_lite: "true"`): `Some(true)` for a Lite
    /// turn, `Some(false)` for one whose `client_metadata` has no such key, `None` without
    /// `client_metadata` (the turn goes by its socket's handshake).
    pub lite_turn: Option<bool>,
    /// The soft-affinity signal: a keyed digest of the `prompt_cache_key`, or else of the prompt prefix.
    #[serde(skip)]
    pub signal: Option<Signal>,
}

/// OpenAI caches only prompts of at least this many tokens: a shorter prompt gains nothing from being
/// kept on a warm key, so soft affinity leaves it to the balancer.
pub const CACHE_MIN_TOKENS: u64 = 1024;

impl RequestFacts {
    /// Whether the prompt is long enough for the provider's prompt cache to matter.
    pub fn cache_eligible(&self) -> bool {
        self.prompt_tokens >= CACHE_MIN_TOKENS
    }
}

/// A soft-affinity signal. Only its source is ever shown; the digest never leaves the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Signal {
    /// Where it came from.
    pub source: AffinitySource,
    /// The keyed digest.
    pub key: SessionKey,
}

impl RequestFacts {
    /// The facts of a request about which nothing is known yet but its number and operation.
    pub fn new(seq: u64, operation: Operation) -> Self {
        Self {
            seq,
            operation,
            client: ClientKind::Other,
            model: None,
            stream: false,
            prompt_tokens: 0,
            pins: Vec::new(),
            foreign_markers: 0,
            service_tier: None,
            session: None,
            parent: None,
            lite_turn: None,
            continuity: None,
            unmarked_response_id: false,
            unmarked_encrypted: false,
            signal: None,
        }
    }
}

#[cfg(test)]
mod tests;
