//! The error a client sees. Every layer's error folds into `ApiError`, which answers in OpenAI's shape
//! (`{"error":{"message","type","param","code"}}`) with a message that says what to do next.

use std::borrow::Cow;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::encoding::EncodingError;
use crate::upstream::UpstreamError;

mod messages;

use messages::*;

/// How a change to the gateway failed, as the layer that made the change describes it (`control` builds
/// one from its own error, so this module does not need to know that layer's variants).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeFailure {
    /// The HTTP status.
    pub status: StatusCode,
    /// OpenAI's error `type`: `invalid_request_error` or `server_error`.
    pub kind: &'static str,
    /// A stable code.
    pub code: &'static str,
    /// What went wrong and what to do.
    pub message: String,
}

/// Everything an error says about itself, in one place: how it answers and how it is counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    /// The HTTP status.
    pub status: StatusCode,
    /// OpenAI's error `type`.
    pub kind: &'static str,
    /// Keymux's (or OpenAI's) stable `code`.
    pub code: Option<&'static str>,
    /// A short static label for metrics and logs.
    pub label: &'static str,
    /// What the client is told: what happened, and what to do next.
    pub message: Cow<'static, str>,
}

/// Errors answered to clients.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// No or wrong local token.
    #[error("missing or wrong local token")]
    Unauthorized { missing: bool },
    /// The request body is over the cap.
    #[error("request body over {limit} bytes")]
    BodyTooLarge { limit: usize },
    /// The request body's `content-encoding` could not be undone.
    #[error(transparent)]
    Encoding(#[from] EncodingError),
    /// The body could not be read from the client.
    #[error("could not read the request body: {detail}")]
    BodyRead { detail: String },
    /// The request body did not arrive in time.
    #[error("request body not received within {secs} s")]
    BodyTimeout { secs: u64 },
    /// The path has `.` or `..` segments.
    #[error("dot segments in the path")]
    BadPath,
    /// The provider's answer was too large to relay whole.
    #[error("upstream answer over {limit} bytes")]
    UpstreamAnswerTooLarge { status: u16, limit: usize },
    /// A JSON endpoint got a body it cannot use (not JSON, not an object, a field of the wrong type).
    #[error("request body cannot be used: {detail}")]
    BadJson { detail: String },
    /// A marker in the body must not be used.
    #[error(transparent)]
    Marker(#[from] crate::markers::MarkerError),
    /// The body replays encrypted content of several organizations.
    #[error("encrypted content from several organizations")]
    MixedOrgs { labels: Vec<String> },
    /// The key holding the referenced response cannot serve.
    #[error("the key holding the response cannot serve")]
    ContinuityLost { label: String },
    /// The organization that can read the body has no usable key and the policy is `fail`.
    #[error("the owning organization has no usable key")]
    LostOrg { label: String },
    /// No organization could read the request's unmarked encrypted content (a session begun before
    /// Keymux with a key that is not in the pool), and the policy is `fail`.
    #[error("no organization can read the session's encrypted content")]
    Unreadable { tried: usize },
    /// The only keys the request may reach are ChatGPT plans, whose backend cannot serve it (it takes
    /// streamed Responses over HTTP only).
    #[error("only a ChatGPT plan, which cannot serve this request")]
    PlanCannotServe,
    /// The pool has no keys at all (`pool`: the user's pool the request is bound to, if not `all`).
    #[error("no keys in the pool")]
    NoKeys { pool: Option<String> },
    /// Every key is cooling down after rate limits.
    #[error("every key is cooling down")]
    AllCooling {
        /// Whole seconds until the first key frees (at least 1).
        retry_after_secs: u64,
        /// How many keys are cooling.
        cooling: usize,
        /// The user's pool the request is bound to, if not `all`.
        pool: Option<String>,
    },
    /// Every key a new session may use is past its budget in money (the user's reserve threshold or limit).
    #[error("every key is past its budget")]
    BudgetReached {
        /// Whole seconds until the first budget resets (at least 1).
        retry_after_secs: u64,
        /// How many keys are past their budget.
        keys: usize,
        /// The user's pool the request is bound to, if not `all`.
        pool: Option<String>,
    },
    /// The key a pinned request needs reached its budget, set to stop there.
    #[error("the key reached its budget")]
    BudgetStopped {
        /// The key's label.
        label: String,
        /// The user's pool whose budget it is, when it is the pool's rather than the key's.
        pool: Option<String>,
        /// Which budget.
        period: crate::budget::Period,
        /// Its amount.
        limit: crate::spend::Usd,
        /// Whole seconds until it resets (at least 1).
        retry_after_secs: u64,
    },
    /// Keys exist but none is usable (invalid, disabled).
    #[error("no usable key")]
    NoUsableKey { unusable: usize, pool: Option<String> },
    /// No key is usable, and keys of the request's pool rest because their pool's proxy could not be
    /// reached: the request is not sent direct.
    #[error("the pool's proxy cannot be reached")]
    ProxyUnreachable { pool: String, proxy: String },
    /// The request replays state made by a key outside its token's pool.
    #[error("state from a key outside the token's pool")]
    PoolMismatch { label: String, pool: String, owner: String },
    /// A bare response id, and every key of the token's pool shares its organization outside it.
    #[error("bare response id across pools")]
    BareResponseId { pool: String, shared_with: String },
    /// The provider rejected the last key tried (401/403).
    #[error("key rejected by the provider")]
    KeyRejected { label: String, status: u16 },
    /// Every attempt failed upstream.
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    /// Responses-over-WebSocket is not relayed: the client should use HTTP.
    #[error("websocket transport not available")]
    WebSocketUnavailable,
    /// As many WebSockets are open as Keymux allows: the client should use HTTP for this one.
    #[error("too many open websockets")]
    TooManySockets { max: usize },
    /// As many event-stream subscribers are connected as Keymux allows.
    #[error("too many event-stream subscribers")]
    TooManyStreams { max: usize },
    /// No usable control credential.
    #[error("control API credential refused")]
    ControlDenied { reason: crate::access::Refused },
    /// A control credential presented on `/v1`.
    #[error("control credential on /v1")]
    WrongCredential,
    /// Routing is paused.
    #[error("routing paused")]
    Paused,
    /// A change to the gateway could not be made.
    #[error("{}", .0.message)]
    Control(ChangeFailure),
    /// A browser-origin or foreign-host request to a local endpoint.
    #[error("forbidden origin or host")]
    ForbiddenOrigin,
    /// Keymux itself failed (a task panicked); the process keeps serving.
    #[error("internal error")]
    Internal { detail: String },
    /// An unknown Keymux path.
    #[error("not found")]
    NotFound { path: String },
}

const REQUEST: &str = "invalid_request_error";
const SERVER: &str = "server_error";

impl ChangeFailure {
    fn spec(&self) -> Spec {
        let message = format!("Keymux could not make that change: {}.", self.message);
        Spec {
            status: self.status,
            kind: self.kind,
            code: Some(self.code),
            label: "control_failed",
            message: message.into(),
        }
    }
}

/// An `invalid_request_error`: the client can fix it.
fn req(status: StatusCode, code: &'static str, label: &'static str, message: impl Into<Cow<'static, str>>) -> Spec {
    Spec { status, kind: REQUEST, code: Some(code), label, message: message.into() }
}

/// A 429 of type `requests` that says how long to wait (`retry-after` goes with it).
fn wait(code: &'static str, label: &'static str, message: String) -> Spec {
    Spec { kind: "requests", ..req(StatusCode::TOO_MANY_REQUESTS, code, label, message) }
}

/// A `server_error`: Keymux, its keys or the provider cannot serve now.
fn srv(status: StatusCode, code: &'static str, label: &'static str, message: impl Into<Cow<'static, str>>) -> Spec {
    Spec { status, kind: SERVER, code: Some(code), label, message: message.into() }
}

/// A body whose `content-encoding` could not be undone: what the client can do about it.
fn encoding(e: &EncodingError) -> Spec {
    use StatusCode as S;
    match e {
        EncodingError::TooLarge { coding, limit } => {
            let message = decoded_too_large(coding, *limit);
            req(S::PAYLOAD_TOO_LARGE, "request_too_large", "decoded_body_too_large", message)
        }
        EncodingError::Unsupported { coding } => {
            let message = unsupported_encoding(coding);
            req(S::UNSUPPORTED_MEDIA_TYPE, "unsupported_content_encoding", "unsupported_encoding", message)
        }
        EncodingError::Malformed { coding, detail } => {
            req(S::BAD_REQUEST, "invalid_content_encoding", "bad_encoding", bad_encoding(coding, detail))
        }
        // Answered as `Internal` is: the failure is Keymux's, not the body's.
        EncodingError::Failed { detail } => {
            srv(S::INTERNAL_SERVER_ERROR, "keymux_internal", "internal", internal(detail))
        }
    }
}

impl ApiError {
    /// What this error is: status, type, code, label and message, from one exhaustive match.
    pub fn spec(&self) -> Spec {
        use StatusCode as S;
        match self {
            Self::Unauthorized { missing } => req(S::UNAUTHORIZED, "invalid_api_key", "unauthorized", token(*missing)),
            Self::ControlDenied { reason } => {
                req(S::UNAUTHORIZED, "keymux_control_denied", "control_denied", control_denied(*reason))
            }
            Self::WrongCredential => req(S::UNAUTHORIZED, "invalid_api_key", "wrong_credential", WRONG_CREDENTIAL),
            Self::Paused => srv(S::SERVICE_UNAVAILABLE, "keymux_paused", "paused", PAUSED),
            Self::Control(failure) => failure.spec(),
            Self::BodyTooLarge { limit } => {
                req(S::PAYLOAD_TOO_LARGE, "request_too_large", "body_too_large", body_too_large(*limit))
            }
            Self::Encoding(e) => encoding(e),
            Self::BodyRead { detail } => Spec { code: None, ..req(S::BAD_REQUEST, "", "body_read", body_read(detail)) },
            Self::BodyTimeout { secs } => {
                req(S::REQUEST_TIMEOUT, "request_timeout", "body_timeout", body_timeout(*secs))
            }
            Self::BadJson { detail } => req(S::BAD_REQUEST, "invalid_json", "bad_json", bad_json(detail)),
            Self::BadPath => req(S::BAD_REQUEST, "invalid_path", "bad_path", DOT_SEGMENTS),
            Self::UpstreamAnswerTooLarge { status, limit } => srv(
                S::from_u16(*status).unwrap_or(S::BAD_GATEWAY),
                "keymux_upstream_answer_too_large",
                "upstream_answer_too_large",
                answer_too_large(*status, *limit),
            ),
            Self::Marker(e) => req(S::BAD_REQUEST, "keymux_invalid_marker", marker_label(e), format!("Keymux: {e}.")),
            Self::MixedOrgs { labels } => {
                req(S::BAD_REQUEST, "keymux_mixed_organizations", "mixed_orgs", mixed_orgs(labels))
            }
            Self::LostOrg { label } => req(S::CONFLICT, "keymux_organization_unavailable", "lost_org", lost_org(label)),
            Self::Unreadable { tried } => {
                req(S::CONFLICT, "keymux_organization_unknown", "unreadable", unreadable(*tried))
            }
            Self::ContinuityLost { label } => {
                req(S::CONFLICT, "keymux_continuity_unavailable", "continuity_lost", continuity_lost(label))
            }
            Self::PlanCannotServe => plan_cannot_serve(),
            Self::NoKeys { pool } => no_keys(pool.as_deref()),
            Self::AllCooling { retry_after_secs: secs, cooling, pool } => {
                wait("rate_limit_exceeded", "all_cooling", all_cooling(*secs, *cooling, pool))
            }
            Self::BudgetReached { retry_after_secs: secs, keys, pool } => {
                wait("keymux_budget_reached", "budget_reached", budget_reached(*secs, *keys, pool))
            }
            Self::BudgetStopped { label, pool, period, limit, retry_after_secs: secs } => {
                wait("keymux_budget_reached", "budget_stopped", budget_stopped(label, pool, *period, *limit, *secs))
            }
            Self::NoUsableKey { unusable, pool } => {
                srv(S::SERVICE_UNAVAILABLE, "keymux_no_usable_key", "no_usable_key", no_usable_key(*unusable, pool))
            }
            Self::ProxyUnreachable { pool, proxy } => proxy_spec(pool, proxy),
            Self::PoolMismatch { label, pool, owner } => {
                req(S::FORBIDDEN, "pool_mismatch", "pool_mismatch", pool_mismatch(label, pool, owner))
            }
            Self::BareResponseId { pool, shared_with } => {
                req(S::FORBIDDEN, "pool_mismatch", "bare_response_id", bare_response_id(pool, shared_with))
            }
            Self::KeyRejected { label, status } => {
                srv(S::SERVICE_UNAVAILABLE, "keymux_key_rejected", "key_rejected", key_rejected(label, *status))
            }
            Self::Upstream(e) => srv(e.status(), e.label(), e.label(), e.client_message()),
            Self::WebSocketUnavailable => {
                req(S::UPGRADE_REQUIRED, "websocket_not_supported", "websocket_unavailable", NO_WEBSOCKET)
            }
            Self::TooManySockets { max } => {
                let code = "websocket_connection_limit_reached";
                req(S::UPGRADE_REQUIRED, code, "too_many_websockets", too_many_sockets(*max))
            }
            Self::TooManyStreams { max } => {
                let code = "keymux_too_many_event_streams";
                req(S::TOO_MANY_REQUESTS, code, "too_many_event_streams", too_many_streams(*max))
            }
            Self::ForbiddenOrigin => req(S::FORBIDDEN, "forbidden_origin", "forbidden_origin", FORBIDDEN_ORIGIN),
            Self::Internal { detail } => srv(S::INTERNAL_SERVER_ERROR, "keymux_internal", "internal", internal(detail)),
            Self::NotFound { path } => {
                req(S::NOT_FOUND, "not_found", "not_found", format!("Keymux has no endpoint at {path}."))
            }
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.spec().status
    }

    /// A short static label for metrics and logs.
    pub fn label(&self) -> &'static str {
        self.spec().label
    }

    /// The JSON body in OpenAI's error shape.
    pub fn to_json(&self) -> serde_json::Value {
        body(&self.spec())
    }
}

fn no_keys(pool: Option<&str>) -> Spec {
    match pool {
        None => srv(StatusCode::SERVICE_UNAVAILABLE, "keymux_no_keys", "no_keys", NO_KEYS),
        Some(pool) => srv(StatusCode::SERVICE_UNAVAILABLE, "keymux_pool_empty", "pool_empty", pool_empty(pool)),
    }
}

fn plan_cannot_serve() -> Spec {
    srv(StatusCode::SERVICE_UNAVAILABLE, "keymux_plan_cannot_serve", "plan_cannot_serve", PLAN_CANNOT_SERVE)
}

fn proxy_spec(pool: &str, proxy: &str) -> Spec {
    srv(StatusCode::BAD_GATEWAY, "keymux_proxy_unreachable", "proxy_unreachable", proxy_unreachable(pool, proxy))
}

fn body(spec: &Spec) -> serde_json::Value {
    json!({"error": {"message": spec.message, "type": spec.kind, "param": null, "code": spec.code}})
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let spec = self.spec();
        let mut response = (spec.status, axum::Json(body(&spec))).into_response();
        if let Self::AllCooling { retry_after_secs, .. }
        | Self::BudgetReached { retry_after_secs, .. }
        | Self::BudgetStopped { retry_after_secs, .. } = &self
        {
            // Codex retries a 429 only when `retry-after` is present, in whole seconds.
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(*retry_after_secs));
        }
        if let Self::Paused = &self {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(PAUSED_RETRY_AFTER_SECS));
        }
        response.extensions_mut().insert(ErrorLabel(spec.label));
        response
    }
}

/// Marks a response produced from an `ApiError`, so the logging middleware can name it once.
#[derive(Clone, Copy, Debug)]
pub struct ErrorLabel(pub &'static str);

#[cfg(test)]
mod tests;
