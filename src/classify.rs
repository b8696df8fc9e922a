//! The one answer classifier: what an upstream answer (or a failure to get one) means for the key and
//! for the request. HTTP requests and WebSocket handshakes both come here, so a 429
//! `insufficient_quota` rests a key the same way whichever transport met it.

use std::time::Duration;

use axum::http::HeaderMap;

use crate::events::FailureKind;
use crate::pool::OutcomeKind;
use crate::quota::cooldown_hint;
use crate::quota::Reading;
use crate::upstream::UpstreamError;

/// Cooldown for a 429 that gave no hint at all.
pub const DEFAULT_COOLDOWN: Duration = Duration::from_secs(5);

/// The provider error codes Keymux acts on or reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    /// The account is out of credit.
    InsufficientQuota,
    /// The key cannot use the model.
    ModelNotFound,
    /// Encrypted content the key's organization cannot read.
    InvalidEncryptedContent,
    /// A `previous_response_id` the key does not hold.
    PreviousResponseNotFound,
    /// A plan's usage window is used up (`usage_limit_reached`, its reset in the body).
    UsageLimitReached,
    /// Any other code.
    Other,
}

impl Code {
    /// Reads an `error.code`.
    pub fn parse(code: &str) -> Self {
        match code {
            "insufficient_quota" => Self::InsufficientQuota,
            "model_not_found" => Self::ModelNotFound,
            "invalid_encrypted_content" => Self::InvalidEncryptedContent,
            "previous_response_not_found" => Self::PreviousResponseNotFound,
            "usage_limit_reached" => Self::UsageLimitReached,
            _ => Self::Other,
        }
    }

    /// The code's name, for records, when it is one users should see.
    pub fn notable(self) -> Option<&'static str> {
        match self {
            Self::InsufficientQuota => Some("insufficient_quota"),
            Self::ModelNotFound => Some("model_not_found"),
            Self::InvalidEncryptedContent => Some("invalid_encrypted_content"),
            Self::PreviousResponseNotFound => Some("previous_response_not_found"),
            Self::UsageLimitReached => Some("usage_limit_reached"),
            Self::Other => None,
        }
    }
}

/// What an answer's status, headers and (for errors) body said, read once.
#[derive(Clone, Debug)]
pub struct Heard {
    /// The status.
    pub status: u16,
    /// `openai-organization`, if sent.
    pub org: Option<String>,
    /// The rate-limit windows reported.
    pub limits: Reading,
    /// `retry-after-ms`, `retry-after` or a reset header, clamped.
    pub cooldown: Option<Duration>,
    /// The error body's `error.code`, when there is one.
    pub code: Option<Code>,
    /// The error body's `error.message`, shortened and with anything key-like masked.
    pub message: Option<String>,
    /// A plan's usage windows (`x-codex-*`), when the answer reported them.
    pub plan: crate::provider::Windows,
    /// The provider of the key that answered (it reads what its answers report of its limits).
    pub provider: crate::keys::ProviderId,
}

impl Heard {
    /// Reads what a response's status line and headers say (the code is read from the body later), on
    /// the gateway's clock; `provider` answered.
    pub fn from_headers(
        status: u16,
        headers: &HeaderMap,
        clock: &crate::clock::Clock,
        provider: crate::keys::ProviderId,
    ) -> Self {
        let now = clock.now();
        let org = headers
            .get("openai-organization")
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty() && v.len() <= 128)
            .map(str::to_owned);
        Self {
            status,
            org,
            limits: Reading::from_headers(headers, now),
            cooldown: cooldown_hint(headers),
            code: None,
            message: None,
            plan: provider.get().windows(&|name| headers.get(name)?.to_str().ok(), clock.unix_ms() / 1000),
            provider,
        }
    }

    /// Reads `error.code` and `error.message` from an error body; a provider's word that the key is used
    /// up (a plan's `usage_limit_reached`, named by its `type`) cools the key until the reset it gives.
    pub fn with_body(mut self, body: &[u8]) -> Self {
        let (code, message) = error_detail(body);
        self.code = code.map(|c| Code::parse(&c));
        self.message = message.map(|m| safe_message(&m));
        if let Some(wait) = self.provider.get().used_up_for(body) {
            self.code = Some(Code::UsageLimitReached);
            self.cooldown = Some(Duration::from_secs(wait.max(1)));
        }
        self
    }
}

/// The `error.code` and `error.message` of an OpenAI-shaped error body.
pub fn error_detail(body: &[u8]) -> (Option<String>, Option<String>) {
    #[derive(serde::Deserialize)]
    struct Body {
        error: Error,
    }
    #[derive(serde::Deserialize)]
    struct Error {
        code: Option<String>,
        message: Option<String>,
    }
    match serde_json::from_slice::<Body>(body) {
        Ok(b) => (b.error.code, b.error.message),
        Err(_) => (None, None),
    }
}

/// The `error.code` of an OpenAI-shaped error body.
pub fn error_code(body: &[u8]) -> Option<String> {
    error_detail(body).0
}

/// Longest upstream error message kept in a record.
pub const MAX_MESSAGE_CHARS: usize = 240;

/// An upstream error message fit to keep and show: at most [`MAX_MESSAGE_CHARS`], and with every
/// key-like word masked, however it is quoted (OpenAI's 401 message quotes part of the key it refused).
pub fn safe_message(message: &str) -> String {
    let text = crate::secrets::mask_key_like(message);
    match text.char_indices().nth(MAX_MESSAGE_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// What the pipeline does next with an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Relay it: the request is served.
    Relay,
    /// Try the next candidate; this answer is relayed only if none is left.
    FailOver,
    /// The key was rejected: try the next candidate; if none is left, say so (the provider's own body
    /// names a masked key and is never relayed).
    Rejected,
    /// Relay it as the final answer (the client's own request was refused).
    Final,
}

/// The classification of one attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Its effect on the key.
    pub outcome: OutcomeKind,
    /// Why it did not serve, if it did not.
    pub failure: Option<FailureKind>,
    /// What to do next.
    pub next: Next,
}

/// What the classifier needs to know about the request.
#[derive(Clone, Copy, Debug)]
pub struct Context {
    /// The request names a model (a `model_not_found` then means this key lacks it).
    pub model_named: bool,
    /// How long an out-of-quota key rests.
    pub quota_recheck: Duration,
}

/// Classifies an answer.
pub fn judge(heard: &Heard, ctx: Context) -> Verdict {
    let verdict = |outcome, failure, next| Verdict { outcome, failure: Some(failure), next };
    match (heard.status, heard.code) {
        // 101: a WebSocket handshake that succeeded.
        (101 | 200..=299, _) => Verdict { outcome: OutcomeKind::Served, failure: None, next: Next::Relay },
        // A redirect is not the key's fault, and another key would get the same: relay it.
        (300..=399, _) => Verdict { outcome: OutcomeKind::Served, failure: None, next: Next::Final },
        (401 | 403, _) => verdict(OutcomeKind::Rejected, FailureKind::InvalidKey, Next::Rejected),
        (429, Some(Code::InsufficientQuota)) => verdict(
            OutcomeKind::QuotaExhausted { recheck: ctx.quota_recheck },
            FailureKind::QuotaExhausted,
            Next::FailOver,
        ),
        (429, _) => verdict(
            OutcomeKind::RateLimited { cooldown: heard.cooldown.unwrap_or(DEFAULT_COOLDOWN) },
            FailureKind::RateLimited,
            Next::FailOver,
        ),
        (500..=599, _) => verdict(OutcomeKind::Failed, FailureKind::Upstream5xx, Next::FailOver),
        (404, Some(Code::ModelNotFound)) if ctx.model_named => {
            verdict(OutcomeKind::ClientError, FailureKind::ModelUnavailable, Next::FailOver)
        }
        _ => verdict(OutcomeKind::ClientError, FailureKind::ClientError, Next::FailOver).final_answer(),
    }
}

impl Verdict {
    fn final_answer(self) -> Self {
        Self { next: Next::Final, ..self }
    }
}

/// Classifies an attempt that got no answer. A base URL that cannot be reached at all (DNS, refused,
/// TLS, connect timeout) makes the key unreachable; a failure after connecting does not.
pub fn judge_failure(error: &UpstreamError) -> Verdict {
    let (outcome, failure) = match error {
        UpstreamError::FirstByteTimeout { .. } => (OutcomeKind::Failed, FailureKind::Timeout),
        UpstreamError::Cut { .. } => (OutcomeKind::Failed, FailureKind::UpstreamCut),
        UpstreamError::Transport { .. } => (OutcomeKind::Failed, FailureKind::UpstreamUnreachable),
        UpstreamError::Connect { .. } | UpstreamError::BadBaseUrl { .. } | UpstreamError::Proxy { .. } => {
            (OutcomeKind::Unreachable, FailureKind::UpstreamUnreachable)
        }
        // A credential that cannot be read or sent (a plan's login): the key cannot serve until it is
        // given a new one.
        UpstreamError::Credential { .. } => (OutcomeKind::Rejected, FailureKind::InvalidKey),
    };
    Verdict { outcome, failure: Some(failure), next: Next::FailOver }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn heard(status: u16, code: Option<&str>, cooldown: Option<u64>) -> Heard {
        Heard {
            status,
            org: None,
            limits: Reading::default(),
            cooldown: cooldown.map(Duration::from_secs),
            code: code.map(Code::parse),
            message: None,
            plan: crate::provider::Windows::default(),
            provider: crate::provider::chatgpt::ID,
        }
    }

    #[test]
    fn a_used_up_chatgpt_plan_cools_until_its_reset_and_fails_over() {
        let body =
            br#"{"error":{"type":"usage_limit_reached","plan_type":"plus","resets_at":9,"resets_in_seconds":5400}}"#;
        let h = heard(429, None, Some(5)).with_body(body);
        assert_eq!((h.code, h.cooldown), (Some(Code::UsageLimitReached), Some(Duration::from_secs(5400))));
        let v = judge(&h, Context { model_named: true, quota_recheck: Duration::from_secs(3600) });
        assert_eq!(v.outcome, OutcomeKind::RateLimited { cooldown: Duration::from_secs(5400) });
        assert_eq!(v.next, Next::FailOver);
    }

    #[test]
    fn upstream_messages_are_kept_short_and_never_carry_a_key() {
        let openai =
            "Incorrect API key provided: sk-proj-abc***************************wxyz. You can find your API key at \
                      https://platform.openai.com/account/api-keys.";
        let azure = "Access denied: key 0123456789abcdef0123456789abcdef is not valid.";
        for (text, secret) in [(openai, "sk-proj"), (azure, "0123456789abcdef")] {
            let safe = safe_message(text);
            assert!(!safe.contains(secret), "{safe}");
            assert!(safe.contains("[key masked]"), "{safe}");
        }
        let quoted = safe_message("Refused key:sk-proj-Quoted0123456789abcdefXYZ (key=sk-x1)");
        assert_eq!(quoted, "Refused key:[key masked] (key=[key masked])");
        assert_eq!(safe_message("Rate limit reached for gpt-5.5"), "Rate limit reached for gpt-5.5");
        let long = safe_message(&"word ".repeat(200));
        assert_eq!(long.chars().count(), MAX_MESSAGE_CHARS + 1);
        let body = br#"{"error":{"message":"The server had an error","type":"server_error","code":null}}"#;
        let h =
            Heard::from_headers(500, &HeaderMap::new(), &crate::clock::Clock::system(), crate::provider::openai::ID)
                .with_body(body);
        assert_eq!(h.message.as_deref(), Some("The server had an error"));
    }

    #[test]
    fn table_of_answers() {
        let ctx = Context { model_named: true, quota_recheck: Duration::from_secs(3600) };
        let cases = [
            (heard(200, None, None), OutcomeKind::Served, None, Next::Relay),
            (heard(101, None, None), OutcomeKind::Served, None, Next::Relay),
            (heard(307, None, None), OutcomeKind::Served, None, Next::Final),
            (
                heard(401, Some("invalid_api_key"), None),
                OutcomeKind::Rejected,
                Some(FailureKind::InvalidKey),
                Next::Rejected,
            ),
            (
                heard(429, Some("insufficient_quota"), None),
                OutcomeKind::QuotaExhausted { recheck: Duration::from_secs(3600) },
                Some(FailureKind::QuotaExhausted),
                Next::FailOver,
            ),
            (
                heard(429, Some("rate_limit_exceeded"), Some(7)),
                OutcomeKind::RateLimited { cooldown: Duration::from_secs(7) },
                Some(FailureKind::RateLimited),
                Next::FailOver,
            ),
            (
                heard(429, None, None),
                OutcomeKind::RateLimited { cooldown: DEFAULT_COOLDOWN },
                Some(FailureKind::RateLimited),
                Next::FailOver,
            ),
            (heard(503, None, None), OutcomeKind::Failed, Some(FailureKind::Upstream5xx), Next::FailOver),
            (
                heard(404, Some("model_not_found"), None),
                OutcomeKind::ClientError,
                Some(FailureKind::ModelUnavailable),
                Next::FailOver,
            ),
            (
                heard(400, Some("invalid_encrypted_content"), None),
                OutcomeKind::ClientError,
                Some(FailureKind::ClientError),
                Next::Final,
            ),
        ];
        for (heard, outcome, failure, next) in cases {
            let v = judge(&heard, ctx);
            assert_eq!((v.outcome, v.failure, v.next), (outcome, failure, next), "{heard:?}");
        }
        // Without a model in the request, a 404 is the client's own business.
        let v = judge(&heard(404, Some("model_not_found"), None), Context { model_named: false, ..ctx });
        assert_eq!(v.next, Next::Final);
    }

    #[test]
    fn error_codes_are_read_from_openai_shaped_bodies_only() {
        assert_eq!(
            error_code(br#"{"error":{"code":"insufficient_quota","message":"x"}}"#).as_deref(),
            Some("insufficient_quota")
        );
        assert_eq!(error_code(br#"{"error":{"code":null}}"#), None);
        assert_eq!(error_code(b"<html>"), None);
    }

    /// A plan window that gives only how long until it resets is read on the gateway's clock, so a
    /// window reported used up closes the plan until then.
    #[test]
    fn a_plan_window_that_gives_only_its_seconds_to_reset_resets_that_long_after_now() {
        let clock = crate::clock::Clock::system();
        clock.advance(Duration::from_secs(86_400));
        let mut headers = HeaderMap::new();
        headers.insert("x-codex-primary-used-percent", http::HeaderValue::from_static("100.0"));
        headers.insert("x-codex-primary-reset-after-seconds", http::HeaderValue::from_static("3600"));
        let heard = Heard::from_headers(200, &headers, &clock, crate::provider::chatgpt::ID);
        let resets = heard.plan.primary.and_then(|w| w.resets_unix).expect("a reset");
        let now = clock.unix_ms() / 1000;
        assert!((now + 3599..=now + 3600).contains(&resets), "{resets} against {now}");
        assert_eq!(heard.plan.exhausted_until_unix(), Some(resets));
    }

    /// Only a plan's answers are read for what a plan reports: an API key's answer that happens to carry
    /// the same headers or body neither closes it for a window nor cools it for a plan's reset.
    #[test]
    fn an_api_keys_answer_is_not_read_for_a_plans_windows() {
        let clock = crate::clock::Clock::system();
        let mut headers = HeaderMap::new();
        headers.insert("x-codex-primary-used-percent", http::HeaderValue::from_static("100.0"));
        headers.insert("x-codex-primary-reset-after-seconds", http::HeaderValue::from_static("3600"));
        let body = br#"{"error":{"type":"usage_limit_reached","resets_in_seconds":5400}}"#;
        let heard = Heard::from_headers(429, &headers, &clock, crate::provider::openai::ID).with_body(body);
        assert!(!heard.plan.any());
        assert_ne!(heard.code, Some(Code::UsageLimitReached));
        assert_eq!(heard.cooldown, None);
    }
}
