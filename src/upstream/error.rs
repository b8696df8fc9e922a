//! Why an upstream attempt produced no answer: the one error type of the upstream layer, with what the
//! pipeline asks of it (the status a client gets, whether another key may be tried, a label for
//! metrics, the message a client reads).

use axum::http::StatusCode;

/// Why an upstream attempt produced no response.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// The connection could not be made.
    #[error("could not connect to {base}: {detail}")]
    Connect { base: String, detail: String },
    /// No response headers within the first-byte timeout.
    #[error("no response from {base} within {secs}s")]
    FirstByteTimeout { base: String, secs: u64 },
    /// The request failed after connecting.
    #[error("request to {base} failed: {detail}")]
    Transport { base: String, detail: String },
    /// The key's base URL cannot be used, or the request path would leave it.
    #[error("the base URL {base} is not valid: {detail}")]
    BadBaseUrl { base: String, detail: String },
    /// The answer ended before its first byte (or, for a JSON answer, before its end).
    #[error("the answer from {base} was cut: {detail}")]
    Cut { base: String, detail: String },
    /// The key's credential cannot be sent (its provider could not read it: a plan's login that
    /// cannot be read, or a token that cannot be a header).
    #[error("the key's credential for {base} cannot be used: {detail}")]
    Credential { base: String, detail: String },
    /// The key's pool sends it through a proxy, and no answer came through it: the proxy could not be
    /// reached, or it could not reach the provider. Never retried direct.
    #[error("could not reach {base} through the proxy {proxy} (the key's pool goes out through it): {detail}")]
    Proxy { proxy: String, base: String, detail: String },
}

impl UpstreamError {
    /// The HTTP status the client gets when this was the last attempt.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::Connect { .. }
            | Self::Transport { .. }
            | Self::BadBaseUrl { .. }
            | Self::Cut { .. }
            | Self::Credential { .. }
            | Self::Proxy { .. } => StatusCode::BAD_GATEWAY,
            Self::FirstByteTimeout { .. } => StatusCode::GATEWAY_TIMEOUT,
        }
    }

    /// Whether another key may be tried.
    pub fn retryable(&self) -> bool {
        match self {
            Self::Connect { .. }
            | Self::FirstByteTimeout { .. }
            | Self::Transport { .. }
            | Self::Cut { .. }
            | Self::Proxy { .. } => true,
            // Another key may have a good base URL, or be an API key.
            Self::BadBaseUrl { .. } | Self::Credential { .. } => true,
        }
    }

    /// A short static label.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Connect { .. } => "upstream_connect",
            Self::FirstByteTimeout { .. } => "timeout",
            Self::Transport { .. } => "upstream_transport",
            Self::BadBaseUrl { .. } => "bad_base_url",
            Self::Cut { .. } => "upstream_cut",
            Self::Proxy { .. } => "proxy_unreachable",
            Self::Credential { .. } => "bad_credential",
        }
    }

    /// What the client is told.
    pub fn client_message(&self) -> String {
        if let Self::Proxy { proxy, .. } = self {
            return format!(
                "Keymux could not get an answer from the provider with any usable key: {self}. The request was not \
                 sent direct: check that the proxy {proxy} is running and can reach the provider, or change the \
                 pool's proxy (`keymux pool set NAME --proxy URL` or `--no-proxy`), then retry."
            );
        }
        format!(
            "Keymux could not get an answer from the provider with any usable key: {self}. Check the \
             network and the keys' base URLs (`keymux keys list`), then retry."
        )
    }
}

/// A request sent direct that got no answer: it could not connect, or it failed after connecting.
pub(super) fn no_answer(base: &str, connect: bool, detail: String) -> UpstreamError {
    let base = base.to_owned();
    if connect {
        UpstreamError::Connect { base, detail }
    } else {
        UpstreamError::Transport { base, detail }
    }
}

/// An error and every error below it, as one line.
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut source = e.source();
    while let Some(s) = source {
        parts.push(s.to_string());
        source = s.source();
    }
    parts.join(": ")
}
