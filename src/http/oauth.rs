//! The three endpoints of a client's login (`oauth`) a client calls: `GET /oauth/authorize`, `POST /oauth/token`, `POST
//! /oauth/device`. Each answers only to a loopback `Host` (as the control API does) and never to a
//! browser page's `fetch` with an `Origin` other than the gateway's own.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Response};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Form, Json, Router};
use base64::Engine as _;
use sha2::{Digest, Sha256};

use crate::gateway::Gateway;
use crate::oauth::pending::{normalize_user_code, Asked, Poll, DEVICE_INTERVAL, DEVICE_TTL};
use crate::oauth::{client_name, OAuthError};

/// The device code grant's type (RFC 8628 section 3.4).
pub const DEVICE_GRANT: &str = "urn:ietf:params:oauth:grant-type:device_code";

/// The client-facing routes (mounted at the root).
pub fn routes() -> Router<Arc<Gateway>> {
    Router::new()
        .route("/oauth/authorize", get(authorize))
        .route("/oauth/token", post(token))
        .route("/oauth/device", post(device))
}

type Params = HashMap<String, String>;

fn param<'a>(params: &'a Params, name: &str) -> Result<&'a str, OAuthError> {
    params
        .get(name)
        .map(String::as_str)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| OAuthError::new("invalid_request", format!("`{name}` is missing")))
}

fn allowed(headers: &HeaderMap) -> Result<(), OAuthError> {
    if crate::access::host_ok(headers) && crate::access::origin_ok(headers) {
        Ok(())
    } else {
        Err(OAuthError::new("invalid_request", "Keymux answers logins only on its loopback address"))
    }
}

fn known_client(params: &Params) -> Result<&str, OAuthError> {
    let client = param(params, "client_id")?;
    client_name(client).map(|_| client).ok_or_else(|| {
        OAuthError::new(
            "invalid_client",
            format!("Keymux issues logins to Codex (`client_id = \"codex\"`), not to {client:?}"),
        )
    })
}

/// Whether `uri` is a loopback redirect as RFC 8252 has it and Codex makes it:
/// `http://<127.0.0.1|localhost|[::1]>:<port>/callback`, no user, query or fragment.
pub fn loopback_redirect(uri: &str) -> bool {
    let Ok(url) = url::Url::parse(uri) else { return false };
    let loopback = match url.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    };
    url.scheme() == "http"
        && loopback
        && url.port().is_some()
        && url.path() == "/callback"
        && url.username().is_empty()
        && url.password().is_none()
        && url.query().is_none()
        && url.fragment().is_none()
}

/// The PKCE S256 challenge of `verifier` (RFC 7636 section 4.2).
pub fn s256(verifier: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// Checks a browser request: what was asked, and the client's `state`.
fn check_authorize(params: &Params) -> Result<(Asked, String), OAuthError> {
    let client = known_client(params)?;
    let redirect = param(params, "redirect_uri")?;
    if !loopback_redirect(redirect) {
        return Err(OAuthError::new(
            "invalid_request",
            "`redirect_uri` must be http://127.0.0.1:<port>/callback (a loopback address of this machine)",
        ));
    }
    if param(params, "response_type")? != "code" {
        return Err(OAuthError::new("unsupported_response_type", "Keymux issues codes only (`response_type=code`)"));
    }
    let challenge = param(params, "code_challenge")?;
    if params.get("code_challenge_method").map(String::as_str) != Some("S256") || challenge.len() != 43 {
        return Err(OAuthError::new("invalid_request", "PKCE with `code_challenge_method=S256` is required"));
    }
    let state = params.get("state").cloned().unwrap_or_default();
    Ok((Asked { client: client.to_owned(), redirect: redirect.to_owned(), challenge: challenge.to_owned() }, state))
}

/// `GET /oauth/authorize`: a valid request waits for the person's yes in the dashboard, where the
/// browser goes now.
async fn authorize(State(gw): State<Arc<Gateway>>, headers: HeaderMap, Query(params): Query<Params>) -> Response<Body> {
    let checked = allowed(&headers).and_then(|()| check_authorize(&params));
    let (asked, state) = match checked {
        Ok(checked) => checked,
        Err(e) => return e.into_response(),
    };
    let id = crate::secrets::generate("").expose().chars().take(22).collect::<String>();
    gw.logins().pending().request(&id, &state, asked, gw.clock().now());
    let mut response = axum::response::Redirect::to(&format!("/#authorize={id}")).into_response();
    response
        .headers_mut()
        .insert(axum::http::header::REFERRER_POLICY, axum::http::HeaderValue::from_static("no-referrer"));
    response
}

/// `POST /oauth/token`.
async fn token(State(gw): State<Arc<Gateway>>, headers: HeaderMap, Form(params): Form<Params>) -> Response<Body> {
    let answer = match allowed(&headers) {
        Ok(()) => exchange(&gw, &params).await,
        Err(e) => Err(e),
    };
    match answer {
        Ok(issued) => Json(issued).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn exchange(gw: &Gateway, params: &Params) -> Result<crate::control::login::Issued, OAuthError> {
    let client = known_client(params)?;
    match param(params, "grant_type")? {
        "authorization_code" => {
            let code = param(params, "code")?;
            let (redirect, verifier) = (param(params, "redirect_uri")?, param(params, "code_verifier")?);
            let invalid = |why: &str| OAuthError::new("invalid_grant", why.to_owned());
            // Taken off the table before anything is checked: a code works once, even a refused try.
            let (asked, pool) = gw
                .logins()
                .pending()
                .take_code(code, gw.clock().now())
                .ok_or_else(|| invalid("the code is unknown, used or expired; log in again"))?;
            if asked.client != client || asked.redirect != redirect {
                return Err(invalid("the code was issued to another client or `redirect_uri`"));
            }
            if s256(verifier) != asked.challenge {
                return Err(invalid("the `code_verifier` does not match the request's `code_challenge`"));
            }
            gw.issue_login(client, &pool).await
        }
        "refresh_token" => gw.refresh_login(param(params, "refresh_token")?).await,
        DEVICE_GRANT => {
            let pool = device_pool(gw, client, param(params, "device_code")?)?;
            gw.issue_login(client, &pool).await
        }
        other => Err(OAuthError::new(
            "unsupported_grant_type",
            format!("Keymux takes authorization_code, refresh_token and the device code grant, not {other:?}"),
        )),
    }
}

/// The pool a device code was approved for, or where its poll stands (RFC 8628 section 3.5).
fn device_pool(gw: &Gateway, client: &str, device_code: &str) -> Result<String, OAuthError> {
    match gw.logins().pending().poll(device_code, gw.clock().now()) {
        Poll::Approved(asked, pool) if asked.client == client => Ok(pool),
        Poll::Approved(..) => Err(OAuthError::new("invalid_grant", "the device code was issued to another client")),
        Poll::Pending => Err(OAuthError::new("authorization_pending", "enter the code in Keymux's dashboard")),
        Poll::SlowDown => Err(OAuthError::new("slow_down", "poll less often")),
        Poll::Denied => Err(OAuthError::new("access_denied", "the login was refused in Keymux's dashboard")),
        Poll::Expired => Err(OAuthError::new("expired_token", "This device code has expired; log in again")),
    }
}

/// `POST /oauth/device` (RFC 8628 section 3.1): a device code for the client to poll with and a user
/// code for the person to enter in the dashboard.
async fn device(State(gw): State<Arc<Gateway>>, headers: HeaderMap, Form(params): Form<Params>) -> Response<Body> {
    let client = match allowed(&headers).and_then(|()| known_client(&params)) {
        Ok(client) => client.to_owned(),
        Err(e) => return e.into_response(),
    };
    let device_code = crate::secrets::generate("");
    let user_code = user_code();
    let asked = Asked { client, redirect: String::new(), challenge: String::new() };
    gw.logins().pending().device(device_code.expose(), &user_code, asked, gw.clock().now());
    let base = gw.base_url();
    let root = base.trim_end_matches("/v1");
    let shown = format!("{}-{}", &user_code[..4], &user_code[4..]);
    Json(serde_json::json!({
        "device_code": device_code.expose(),
        "user_code": shown,
        "verification_uri": format!("{root}/#device"),
        "verification_uri_complete": format!("{root}/#device={shown}"),
        "expires_in": DEVICE_TTL.as_secs(),
        "interval": DEVICE_INTERVAL.as_secs(),
    }))
    .into_response()
}

/// Eight letters a person reads and types without mistakes (no vowels, no look-alikes; RFC 8628
/// section 6.1): 20^8 codes, against at most a few tries in [`DEVICE_TTL`] through the dashboard.
fn user_code() -> String {
    use rand::Rng as _;
    const LETTERS: &[u8] = b"BCDFGHJKLMNPQRSTVWXZ";
    let mut rng = rand::rngs::OsRng;
    let code: String = (0..8).map(|_| char::from(LETTERS[rng.gen_range(0..LETTERS.len())])).collect();
    normalize_user_code(&code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_loopback_callback_is_a_redirect() {
        for good in ["http://127.0.0.1:4321/callback", "http://localhost:1/callback", "http://[::1]:9/callback"] {
            assert!(loopback_redirect(good), "{good}");
        }
        for bad in [
            "https://127.0.0.1:4321/callback",
            "http://example.com:4321/callback",
            "http://127.0.0.1:4321/other",
            "http://127.0.0.1/callback",
            "http://user@127.0.0.1:1/callback",
            "http://127.0.0.1:1/callback?x=1",
            "http://127.0.0.1.evil.test:1/callback",
        ] {
            assert!(!loopback_redirect(bad), "{bad}");
        }
    }

    #[test]
    fn s256_is_rfc_7636s_example() {
        assert_eq!(s256("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"), "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM");
    }
}
