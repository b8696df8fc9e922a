//! The header policy in both directions: what of a client's request goes upstream, what of an
//! answer comes back, what of an error answer is masked, and the Responses-Lite header that decides
//! which connections a request may share.

use axum::http::{HeaderMap, HeaderValue};

/// Request headers never forwarded: hop-by-hop, the client's own credentials (the key's are set
/// instead; a login's token, `oauth::TOKEN_HEADER`, among them), `host`, length and encodings (the body goes upstream decoded, framed anew by the client
/// library, which asks for the answer's encodings itself), and organization selectors (the key decides
/// its organization).
const DROP_REQUEST: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "authorization",
    "x-keymux-token",
    "api-key",
    "content-length",
    "content-encoding",
    "accept-encoding",
    "openai-organization",
    "openai-project",
    "cookie",
    "origin",
];

/// Response headers never passed back: hop-by-hop, and the length (the body is re-framed).
const DROP_RESPONSE: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "set-cookie",
];

/// Copies the client's headers that may go upstream.
pub fn forward_request_headers(from: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(from.len());
    for (name, value) in from {
        if !DROP_REQUEST.contains(&name.as_str()) {
            out.append(name.clone(), value.clone());
        }
    }
    out
}

/// An error answer's headers with what they quote masked as its body is (`secrets::mask_quoted`:
/// `exact`, the key it was sent with, and every key-like word): a provider may quote a key in a
/// `location`, a `www-authenticate` or any `x-…` header. A header whose name quotes one is dropped;
/// a request id (`req_…`) is kept as it is, for support.
pub fn mask_error_headers(headers: &mut HeaderMap, exact: &str) {
    let mut masked = HeaderMap::with_capacity(headers.len());
    for (name, value) in std::mem::take(headers).into_iter().filter_map(|(n, v)| Some((n?, v))) {
        if crate::secrets::mask_quoted(name.as_str(), exact) != name.as_str() {
            continue;
        }
        let text = String::from_utf8_lossy(value.as_bytes());
        let is_request_id = text.strip_prefix("req_").is_some_and(|id| id.bytes().all(|b| b.is_ascii_alphanumeric()));
        let value = match crate::secrets::mask_quoted(&text, exact) {
            quoted if is_request_id || quoted == text => value,
            quoted => HeaderValue::from_str(&quoted).unwrap_or_else(|_| HeaderValue::from_static("")),
        };
        masked.append(name, value);
    }
    *headers = masked;
}

/// The upstream's headers that may go back to the client, taken out of its answer.
pub fn forward_response_headers(from: &mut HeaderMap) -> HeaderMap {
    // Taken, not copied: the answer's headers are read before (`Heard`) and never after.
    let mut out = std::mem::take(from);
    for name in DROP_RESPONSE {
        out.remove(*name);
    }
    out
}

/// Codex's Responses-Lite request header (`true` on a Responses-Lite model's requests; over a
/// WebSocket on the handshake, and per turn as `client_metadata.ws_request_header_…`). The provider
/// reads it as belonging to the connection it comes on.
pub const RESPONSES_LITE: &str = "x-openai-internal-codex-responses-lite";

/// Whether a request (or a WebSocket handshake) is Responses-Lite: its [`RESPONSES_LITE`] header says
/// `true`.
pub fn is_responses_lite(headers: &HeaderMap) -> bool {
    headers.get(RESPONSES_LITE).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_policy() {
        let mut h = HeaderMap::new();
        h.insert("authorization", HeaderValue::from_static("Bearer local"));
        h.insert("x-codex-turn-state", HeaderValue::from_static("ts"));
        h.insert("session-id", HeaderValue::from_static("s"));
        h.insert("connection", HeaderValue::from_static("keep-alive"));
        h.insert("accept-encoding", HeaderValue::from_static("zstd,gzip"));
        h.insert("content-encoding", HeaderValue::from_static("zstd"));
        h.insert("openai-beta", HeaderValue::from_static("responses_websockets=2026-02-06"));
        let out = forward_request_headers(&h);
        assert!(out.get("authorization").is_none());
        assert!(out.get("connection").is_none());
        assert!(out.get("accept-encoding").is_none());
        assert!(out.get("content-encoding").is_none(), "the body goes upstream decoded");
        assert_eq!(out.get("x-codex-turn-state").map(|v| v.as_bytes()), Some(&b"ts"[..]));
        assert!(out.get("session-id").is_some());
        assert!(out.get("openai-beta").is_some());
    }
}
