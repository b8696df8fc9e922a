//! The error a client sees. Every layer's error folds into `ApiError`, which answers in OpenAI's shape
//! (`{"error":{"message","type","param","code"}}`) with a message that says what to do next.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::upstream::UpstreamError;

/// Who caused a failure: used for metrics and for deciding whether to blame a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Blame {
    /// The client sent something wrong.
    Client,
    /// A key (or its upstream account) failed.
    Key,
    /// The upstream service or the network.
    Upstream,
    /// Keymux itself or its environment (keychain, disk).
    Keymux,
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
    /// The pool has no keys at all.
    #[error("no keys in the pool")]
    NoKeys,
    /// Every key is cooling down after rate limits.
    #[error("every key is cooling down")]
    AllCooling {
        /// Whole seconds until the first key frees (at least 1).
        retry_after_secs: u64,
        /// How many keys are cooling.
        cooling: usize,
    },
    /// Keys exist but none is usable (invalid, disabled).
    #[error("no usable key")]
    NoUsableKey { unusable: usize },
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
    #[error(transparent)]
    Control(#[from] crate::control::ControlError),
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

impl ApiError {
    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::Unauthorized { .. } | Self::ControlDenied { .. } | Self::WrongCredential => StatusCode::UNAUTHORIZED,
            Self::Paused => StatusCode::SERVICE_UNAVAILABLE,
            Self::Control(e) => match e {
                crate::control::ControlError::NotFound(_) => StatusCode::NOT_FOUND,
                crate::control::ControlError::Invalid(_) => StatusCode::BAD_REQUEST,
                crate::control::ControlError::Secrets(_) | crate::control::ControlError::Config(_) => {
                    StatusCode::SERVICE_UNAVAILABLE
                }
            },
            Self::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::BodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            Self::BodyRead { .. } | Self::BadJson { .. } | Self::Marker(_) | Self::MixedOrgs { .. } | Self::BadPath => {
                StatusCode::BAD_REQUEST
            }
            Self::UpstreamAnswerTooLarge { status, .. } => {
                StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_GATEWAY)
            }
            Self::LostOrg { .. } | Self::ContinuityLost { .. } => StatusCode::CONFLICT,
            Self::NoKeys | Self::NoUsableKey { .. } | Self::KeyRejected { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Self::AllCooling { .. } | Self::TooManyStreams { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::Upstream(e) => e.status(),
            Self::WebSocketUnavailable | Self::TooManySockets { .. } => StatusCode::UPGRADE_REQUIRED,
            Self::ForbiddenOrigin => StatusCode::FORBIDDEN,
            Self::NotFound { .. } => StatusCode::NOT_FOUND,
            Self::Internal { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// Who is to blame.
    pub fn blame(&self) -> Blame {
        match self {
            Self::Unauthorized { .. }
            | Self::ControlDenied { .. }
            | Self::WrongCredential
            | Self::Control(crate::control::ControlError::NotFound(_) | crate::control::ControlError::Invalid(_))
            | Self::BodyTooLarge { .. }
            | Self::BodyRead { .. }
            | Self::BodyTimeout { .. }
            | Self::BadJson { .. }
            | Self::BadPath
            | Self::Marker(_)
            | Self::MixedOrgs { .. }
            | Self::ForbiddenOrigin
            | Self::NotFound { .. }
            | Self::WebSocketUnavailable
            | Self::TooManySockets { .. }
            | Self::TooManyStreams { .. } => Blame::Client,
            Self::NoKeys
            | Self::NoUsableKey { .. }
            | Self::AllCooling { .. }
            | Self::KeyRejected { .. }
            | Self::LostOrg { .. }
            | Self::ContinuityLost { .. } => Blame::Key,
            Self::Upstream(_) | Self::UpstreamAnswerTooLarge { .. } => Blame::Upstream,
            Self::Paused
            | Self::Control(crate::control::ControlError::Secrets(_) | crate::control::ControlError::Config(_)) => {
                Blame::Keymux
            }
            Self::Internal { .. } => Blame::Keymux,
        }
    }

    /// A short static label for metrics and logs.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Unauthorized { .. } => "unauthorized",
            Self::ControlDenied { .. } => "control_denied",
            Self::WrongCredential => "wrong_credential",
            Self::Paused => "paused",
            Self::Control(_) => "control_failed",
            Self::BodyTooLarge { .. } => "body_too_large",
            Self::BodyRead { .. } => "body_read",
            Self::BodyTimeout { .. } => "body_timeout",
            Self::BadJson { .. } => "bad_json",
            Self::BadPath => "bad_path",
            Self::UpstreamAnswerTooLarge { .. } => "upstream_answer_too_large",
            Self::Marker(crate::markers::MarkerError::Malformed { .. }) => "marker_malformed",
            Self::Marker(crate::markers::MarkerError::Forged { .. }) => "marker_forged",
            Self::MixedOrgs { .. } => "mixed_orgs",
            Self::LostOrg { .. } => "lost_org",
            Self::ContinuityLost { .. } => "continuity_lost",
            Self::NoKeys => "no_keys",
            Self::AllCooling { .. } => "all_cooling",
            Self::NoUsableKey { .. } => "no_usable_key",
            Self::KeyRejected { .. } => "key_rejected",
            Self::Upstream(e) => e.label(),
            Self::WebSocketUnavailable => "websocket_unavailable",
            Self::TooManySockets { .. } => "too_many_websockets",
            Self::TooManyStreams { .. } => "too_many_event_streams",
            Self::ForbiddenOrigin => "forbidden_origin",
            Self::NotFound { .. } => "not_found",
            Self::Internal { .. } => "internal",
        }
    }

    /// OpenAI's error `type` and Keymux's `code` for this error.
    fn kind_and_code(&self) -> (&'static str, Option<&'static str>) {
        const REQUEST: &str = "invalid_request_error";
        const SERVER: &str = "server_error";
        match self {
            Self::Unauthorized { .. } => (REQUEST, Some("invalid_api_key")),
            Self::ControlDenied { .. } => (REQUEST, Some("keymux_control_denied")),
            Self::WrongCredential => (REQUEST, Some("invalid_api_key")),
            Self::Paused => (SERVER, Some("keymux_paused")),
            Self::Control(crate::control::ControlError::NotFound(_)) => (REQUEST, Some("not_found")),
            Self::Control(crate::control::ControlError::Invalid(_)) => (REQUEST, Some("invalid_value")),
            Self::Control(_) => (SERVER, Some("keymux_control_failed")),
            Self::BodyTooLarge { .. } => (REQUEST, Some("request_too_large")),
            Self::BodyRead { .. } => (REQUEST, None),
            Self::BodyTimeout { .. } => (REQUEST, Some("request_timeout")),
            Self::BadJson { .. } => (REQUEST, Some("invalid_json")),
            Self::BadPath => (REQUEST, Some("invalid_path")),
            Self::UpstreamAnswerTooLarge { .. } => (SERVER, Some("keymux_upstream_answer_too_large")),
            Self::Marker(_) => (REQUEST, Some("keymux_invalid_marker")),
            Self::MixedOrgs { .. } => (REQUEST, Some("keymux_mixed_organizations")),
            Self::LostOrg { .. } => (REQUEST, Some("keymux_organization_unavailable")),
            Self::ContinuityLost { .. } => (REQUEST, Some("keymux_continuity_unavailable")),
            Self::NoKeys => (SERVER, Some("keymux_no_keys")),
            Self::AllCooling { .. } => ("requests", Some("rate_limit_exceeded")),
            Self::NoUsableKey { .. } => (SERVER, Some("keymux_no_usable_key")),
            Self::KeyRejected { .. } => (SERVER, Some("keymux_key_rejected")),
            Self::Upstream(e) => (SERVER, Some(e.label())),
            Self::WebSocketUnavailable => (REQUEST, Some("websocket_not_supported")),
            Self::TooManySockets { .. } => (REQUEST, Some("websocket_connection_limit_reached")),
            Self::TooManyStreams { .. } => (REQUEST, Some("keymux_too_many_event_streams")),
            Self::ForbiddenOrigin => (REQUEST, Some("forbidden_origin")),
            Self::Internal { .. } => (SERVER, Some("keymux_internal")),
            Self::NotFound { .. } => (REQUEST, Some("not_found")),
        }
    }

    /// What the client is told: what happened, and what to do next.
    fn message(&self) -> String {
        match self {
            Self::Unauthorized { missing: true } => MISSING_TOKEN.into(),
            Self::Unauthorized { missing: false } => UNKNOWN_TOKEN.into(),
            Self::ControlDenied { reason } => control_denied(*reason).into(),
            Self::WrongCredential => WRONG_CREDENTIAL.into(),
            Self::Paused => PAUSED.into(),
            Self::Control(e) => format!("Keymux could not make that change: {e}."),
            Self::BodyTooLarge { limit } => format!(
                "The request body is larger than Keymux's limit of {limit} bytes. Compact the conversation, \
                 or raise `max_body_bytes` in the Keymux config."
            ),
            Self::BodyTimeout { secs } => format!(
                "The request body did not arrive within {secs} s, so Keymux stopped waiting for it. Send the \
                 request again."
            ),
            Self::BodyRead { detail } => {
                format!("Keymux could not read the request body ({detail}). Send the request again.")
            }
            Self::BadJson { detail } => {
                format!("Keymux cannot use this request body: {detail}. This endpoint takes a JSON object.")
            }
            Self::BadPath => DOT_SEGMENTS.into(),
            Self::UpstreamAnswerTooLarge { status, limit } => format!(
                "The provider answered {status} with an error body larger than Keymux relays ({limit} bytes), so \
                 it was left out. Retry; if it repeats, check the provider's status."
            ),
            Self::Marker(e) => format!("Keymux: {e}."),
            Self::MixedOrgs { labels } => mixed_orgs(labels),
            Self::LostOrg { label } => lost_org(label),
            Self::ContinuityLost { label } => continuity_lost(label),
            Self::NoKeys => NO_KEYS.into(),
            Self::AllCooling { retry_after_secs, cooling } => format!(
                "All {cooling} Keymux key(s) are cooling down after rate limits; the first one frees in \
                 {retry_after_secs}s. Retry after that, or add another key."
            ),
            Self::NoUsableKey { unusable } => format!(
                "None of Keymux's {unusable} key(s) is usable right now (rejected by the provider or disabled). \
                 Check `keymux keys list` and replace the keys it flags."
            ),
            Self::KeyRejected { label, status } => format!(
                "The provider rejected Keymux key '{label}' ({status}) and no other key could take the request. \
                 Replace the key with `keymux keys remove {label}` and `keymux keys add`."
            ),
            Self::Upstream(e) => e.client_message(),
            Self::WebSocketUnavailable => NO_WEBSOCKET.into(),
            Self::TooManySockets { max } => format!(
                "Keymux already has {max} WebSockets open, its limit; use HTTP for this session (Codex falls back \
                 to it on its own). Close idle sessions to free one."
            ),
            Self::TooManyStreams { max } => format!(
                "Keymux already has {max} event-stream subscribers, its limit. Close a dashboard tab (or another \
                 subscriber) and retry."
            ),
            Self::ForbiddenOrigin => FORBIDDEN_ORIGIN.into(),
            Self::Internal { detail } => {
                format!("Keymux failed internally ({detail}). It keeps serving; retry, and report this if it repeats.")
            }
            Self::NotFound { path } => format!("Keymux has no endpoint at {path}."),
        }
    }

    /// The JSON body in OpenAI's error shape.
    pub fn to_json(&self) -> serde_json::Value {
        let (kind, code) = self.kind_and_code();
        let message = self.message();
        json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status(), axum::Json(self.to_json())).into_response();
        if let Self::AllCooling { retry_after_secs, .. } = &self {
            // Codex retries a 429 only when `retry-after` is present, in whole seconds.
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(*retry_after_secs));
        }
        if let Self::Paused = &self {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(PAUSED_RETRY_AFTER_SECS));
        }
        response.extensions_mut().insert(ErrorLabel(self.label()));
        response
    }
}

const MISSING_TOKEN: &str = "Keymux needs a local client token: send `Authorization: Bearer <token>`. Run \
    `keymux token create` (or `keymux token show NAME`) and put the token in the variable your client reads \
    (Codex `env_key`, pi `apiKey`).";
const UNKNOWN_TOKEN: &str = "Keymux did not recognise this local client token. Send an OpenAI key to Keymux? Use a \
    Keymux token instead: `keymux token list` shows the valid ones.";
const WRONG_CREDENTIAL: &str = "The Keymux admin credential and dashboard session work only on the control API \
    (/keymux/api). Clients spend keys with a client token: `keymux token create`.";
const PAUSED: &str = "Keymux routing is paused, so no request goes to the provider. Resume it from the dashboard, \
    the tray or `keymux resume`; streams already running finish.";

fn control_denied(reason: crate::access::Refused) -> &'static str {
    use crate::access::Refused;
    match reason {
        Refused::NoCredential => {
            "The Keymux control API needs the dashboard session (open the login link `keymux serve` printed, or \
             run `keymux dashboard`) or the admin credential (the `keymux` CLI uses it by itself)."
        }
        Refused::ClientToken => {
            "Client tokens spend keys on /v1 and cannot call the Keymux control API. Use the dashboard (`keymux \
             dashboard` prints a login link) or the `keymux` CLI."
        }
        Refused::Invalid => {
            "This Keymux control credential is not valid (expired, revoked, or from another install). Run \
             `keymux dashboard` for a fresh login link."
        }
    }
}

const DOT_SEGMENTS: &str = "The request path has `.` or `..` segments; Keymux forwards only paths that stay under \
    the provider's /v1. Send the path without them.";
const NO_KEYS: &str = "Keymux has no API keys to use. Add one with `keymux keys add --label NAME`, or set \
    KEYMUX_KEY_<LABEL>=sk-... for a headless run.";
const NO_WEBSOCKET: &str = "Keymux cannot open a Responses WebSocket for this request now (only GET /v1/responses \
    upgrades, and only while some key is usable); use HTTP. Codex falls back to HTTP by itself on this answer.";
const FORBIDDEN_ORIGIN: &str = "Keymux refuses requests from web pages and from non-local host names. Call it from \
    a local client at http://127.0.0.1.";

fn mixed_orgs(labels: &[String]) -> String {
    format!(
        "This request replays encrypted reasoning from more than one organization (Keymux keys {}), and no single \
         key can read all of it. Start a new session, or remove the items from one of them.",
        labels.iter().map(|l| format!("'{l}'")).collect::<Vec<_>>().join(" and ")
    )
}

fn lost_org(label: &str) -> String {
    format!(
        "This session's encrypted reasoning can only be read by the organization of Keymux key '{label}', which \
         has no usable key now. Re-add or re-enable that key to continue the session as it is, or set \
         `[affinity] lost_org = \"rescue\"` to continue without the unreadable reasoning."
    )
}

fn continuity_lost(label: &str) -> String {
    format!(
        "The stored response this request continues lives only with Keymux key '{label}', which cannot serve now \
         (removed, rejected by the provider, or disabled). Resend the full conversation history without \
         previous_response_id, or restore that key."
    )
}

/// The `retry-after` a paused gateway answers with.
pub const PAUSED_RETRY_AFTER_SECS: u64 = 30;

/// Marks a response produced from an `ApiError`, so the logging middleware can name it once.
#[derive(Clone, Copy, Debug)]
pub struct ErrorLabel(pub &'static str);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_cooling_is_a_429_with_integer_retry_after() {
        let response = ApiError::AllCooling { retry_after_secs: 7, cooling: 3 }.into_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers().get(header::RETRY_AFTER).map(|v| v.as_bytes()), Some(&b"7"[..]));
    }

    #[test]
    fn error_bodies_are_openai_shaped() {
        let body = ApiError::BodyTooLarge { limit: 10 }.to_json();
        let err = &body["error"];
        assert!(err["message"].as_str().is_some_and(|m| m.contains("10 bytes")));
        assert_eq!(err["type"], "invalid_request_error");
        assert!(err.get("param").is_some());
        assert_eq!(err["code"], "request_too_large");
    }
}
