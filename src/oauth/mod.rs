//! Keymux as the OAuth authorization server of a client's gateway login (Codex 0.171's
//! `[model_providers.<id>.gateway_oauth]`), so no client token is ever written into a client's file.
//!
//! * **Browser flow** (RFC 6749 with PKCE S256, RFC 8252 loopback redirect): the client opens
//!   `GET /oauth/authorize`; a valid request (a known `client_id`, a `redirect_uri` that is
//!   `http://<loopback>:<port>/callback`, an S256 `code_challenge`) is held in the pending table and
//!   the browser goes to the dashboard (`/#authorize=<id>`), where the person sees who asks and picks
//!   the pool. Their yes (the control API, so only a dashboard session or the admin credential can
//!   give it) answers with the client's redirect carrying a one-time code and the client's `state`.
//! * **Device flow** (RFC 8628): `POST /oauth/device` gives a device code and a user code; the person
//!   enters the user code in the dashboard (`/#device`) and picks the pool; the client polls the token
//!   endpoint (`authorization_pending`, `slow_down`, `expired_token`, `access_denied`).
//! * **Token endpoint** `POST /oauth/token` (form-encoded): `authorization_code` (the verifier must
//!   match the challenge, the `redirect_uri` and `client_id` the request's; a code works once),
//!   `refresh_token` (rotated: the old one stops working) and the device code grant.
//!
//! What is issued is a client token like any other (`tokens`), listed with the user's tokens
//! (`login = true` in the config) and bound to the pool the person picked: revoking it (`keymux token
//! revoke`, the dashboard, the control API) stops its access token at once and its refresh token with
//! it. The access token lives only in memory, as a digest, and expires after [`ACCESS_TTL`] (the
//! client refreshes before); the keychain holds only the digest of the current refresh token, so after
//! a restart the client's next call is refused, it refreshes, and goes on. No code, token or user
//! code is logged or kept in the clear. The client sends its access token in [`TOKEN_HEADER`]
//! (`authorization` is reserved to the provider's own credential in Codex); `http` reads it there.
//!
//! This module holds the state and the words (`pending`: the bounded table of logins under way; the
//! issued logins' refresh digests; the errors) and imports nothing that acts on the gateway. Who acts:
//! `http::oauth` (the three endpoints a client calls), `api::login` (the dashboard's yes, on the
//! control API), `control::login` (tokens issued and refreshed).

pub mod pending;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

pub use pending::{Pending, MAX_PENDING};

/// The clients Keymux issues logins to, by the `client_id` they send.
pub const CLIENTS: [(&str, &str); 1] = [("codex", "Codex")];
/// How long an access token works; the client refreshes it before (Codex 30 s before).
pub const ACCESS_TTL: Duration = Duration::from_secs(3600);
/// The header a client sends its access token in (`x-keymux-token: Bearer …`): Codex reserves
/// `authorization` and the `x-codex-`/`x-openai-` prefixes.
pub const TOKEN_HEADER: &str = "x-keymux-token";
/// The prefix of a refresh token, so a leaked one is recognisable.
pub const REFRESH_PREFIX: &str = "kmr-";

/// The client's name for a person, for a known `client_id`.
pub fn client_name(client_id: &str) -> Option<&'static str> {
    CLIENTS.iter().find(|(id, _)| *id == client_id).map(|(_, name)| *name)
}

/// The logins of a running gateway: those under way, and the refresh token digest of each issued one
/// by its token id (bounded by the tokens the person approved, as the user's own tokens are).
#[derive(Default)]
pub struct Logins {
    pending: Mutex<Pending>,
    refresh: Mutex<HashMap<String, pending::Digest32>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Logins {
    /// The table of logins under way.
    pub fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        lock(&self.pending)
    }

    /// Takes back the issued logins at start: each token id with the digest the keychain holds (hex).
    pub fn restore(&self, issued: Vec<(String, crate::secrets::Secret)>) {
        let mut refresh = lock(&self.refresh);
        for (id, stored) in issued {
            let mut digest = [0u8; 32];
            if hex::decode_to_slice(stored.expose(), &mut digest).is_ok() {
                refresh.insert(id, digest);
            }
        }
    }

    /// Forgets a revoked login's refresh token.
    pub fn forget(&self, id: &str) {
        lock(&self.refresh).remove(id);
    }

    /// Swaps the refresh token `presented` for `next`, once: the token id it belonged to.
    pub(crate) fn rotate(&self, presented: &str, next: &str) -> Option<String> {
        use subtle::ConstantTimeEq as _;
        let wanted = pending::digest(presented);
        let mut refresh = lock(&self.refresh);
        let id = refresh.iter().find(|(_, d)| bool::from(d.ct_eq(&wanted))).map(|(id, _)| id.clone())?;
        refresh.insert(id.clone(), pending::digest(next));
        Some(id)
    }

    /// Keeps the refresh token of the login `id` just issued.
    pub(crate) fn issued(&self, id: &str, refresh: &str) {
        lock(&self.refresh).insert(id.to_owned(), pending::digest(refresh));
    }
}

/// An OAuth error, shaped as RFC 6749 section 5.2 says: `{"error", "error_description"}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthError {
    /// The RFC's error code (`invalid_request`, `invalid_grant`, `authorization_pending`…).
    pub code: &'static str,
    /// What happened and what to do, for a person.
    pub description: String,
}

impl OAuthError {
    /// An error with the RFC's `code` and a description for a person.
    pub fn new(code: &'static str, description: impl Into<String>) -> Self {
        Self { code, description: description.into() }
    }

    fn status(&self) -> StatusCode {
        match self.code {
            "invalid_client" => StatusCode::UNAUTHORIZED,
            "server_error" => StatusCode::INTERNAL_SERVER_ERROR,
            _ => StatusCode::BAD_REQUEST,
        }
    }
}

impl IntoResponse for OAuthError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.code, "error_description": self.description });
        (self.status(), axum::Json(body)).into_response()
    }
}
