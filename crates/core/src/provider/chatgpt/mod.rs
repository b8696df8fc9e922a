//! A ChatGPT plan as a pooled key: one login (the keychain secret is the JSON of [`Login`]) that the
//! ChatGPT Codex backend takes for Responses requests, streamed over HTTP only. The plan's home: its
//! [`Provider`] implementation ([`Plan`]), its login and the refresh of it ([`login`]), the body its
//! backend takes ([`adapt_request`]), and the usage windows its answers report ([`windows`]).
//!
//! A plan is an organization of its own, named by its account: what it encrypts no API key can read.
//! Its use costs nothing more than the subscription, so new sessions go to it first while its windows
//! allow.

use http::{HeaderName, HeaderValue, Method};
use serde_json::Value;

use super::{set_credential, Ask, Endpoints, Outgoing, Provider, RefreshCall, Transport};
use crate::facts::Operation;
use crate::secrets::Secret;

pub mod login;
pub mod windows;

pub use login::{claims, from_codex_auth, Login, PlanInfo};
pub use windows::{usage_limit_wait, PlanWindows, UsageWindow};

/// The ChatGPT Codex backend, unless `chatgpt_base_url` or `KEYMUX_CHATGPT_BASE_URL` says otherwise.
pub const DEFAULT_BASE_URL: &str = "https://chatgpt.com/backend-api/codex";
/// The OpenAI auth server that refreshes a ChatGPT login, unless `chatgpt_auth_url` or
/// `KEYMUX_CHATGPT_AUTH_URL` says otherwise; the token endpoint is `{auth}/oauth/token`.
pub const DEFAULT_AUTH_URL: &str = "https://auth.openai.com";
/// The OAuth client a Codex ChatGPT login was issued to (Codex's own); a refresh names it.
pub const CLIENT_ID: &str = "app_EMoamEEZ73f0CkXaXp7hrann";
/// The scope a refresh asks for, as Codex does.
pub const REFRESH_SCOPE: &str = "openid profile email";
/// The access token is refreshed once it has less than this left.
pub const REFRESH_AHEAD_SECS: u64 = 5 * 60;
/// The header that names the ChatGPT account a request is for.
pub const ACCOUNT_HEADER: &str = "chatgpt-account-id";
/// Request fields the backend refuses (`Unsupported parameter: …`), dropped before a request goes there.
pub const REFUSED_FIELDS: &[&str] = &["max_output_tokens", "max_completion_tokens"];
/// Where the claims Keymux reads live in a token.
const AUTH_CLAIMS: &str = "https://api.openai.com/auth";
/// The headers whose presence says an answer reported the plan's windows (looked up before the rest).
const REPORTED: [&str; 2] = ["x-codex-primary-used-percent", "x-codex-secondary-used-percent"];

/// The plan's id, for the flows that import a ChatGPT login as a key.
pub const ID: super::ProviderId = super::ProviderId::Chatgpt;

/// A ChatGPT plan.
pub struct Plan;

impl Provider for Plan {
    fn default_base<'a>(&self, endpoints: &'a Endpoints) -> Option<&'a str> {
        Some(&endpoints.chatgpt)
    }

    fn pasted(&self) -> bool {
        false
    }

    fn check_new(&self, secret: &Secret, _base_url: Option<&str>) -> Result<(), String> {
        Login::from_secret(secret).map(|_| ())
    }

    /// A plan's login is renewed only by a newer login of the same account: the one Codex holds after
    /// the user logged in again. The login Keymux keeps is refreshed by Keymux, so an older copy
    /// (Codex's file from before the import, whose refresh token Keymux has spent since) would only
    /// lose the plan.
    fn check_replacement(&self, label: &str, kept: Option<&Secret>, new: &Secret) -> Result<(), String> {
        let new = Login::from_secret(new)?;
        let Some(kept) = kept.and_then(|s| Login::from_secret(s).ok()) else { return Ok(()) };
        if new.account_id != kept.account_id {
            return Err(format!(
                "this login is of another ChatGPT account than the plan '{label}' ({}); import it as a plan of its own",
                kept.account_id
            ));
        }
        if new.expires_unix().unwrap_or(0) <= kept.expires_unix().unwrap_or(0) {
            return Err(format!(
                "the plan '{label}' holds this login already, as new or newer (Keymux refreshes it itself): nothing changed"
            ));
        }
        Ok(())
    }

    /// Its account: its tokens change at every refresh, the plan stays the same key.
    fn identity(&self, secret: &Secret) -> Secret {
        match Login::from_secret(secret) {
            Ok(login) => Secret::new(format!("chatgpt-account:{}", login.account_id)),
            Err(_) => secret.clone(),
        }
    }

    /// Its account, whatever the user set: what it encrypts no other organization can read.
    fn org(&self, secret: &Secret, _base_url: Option<&str>, set: Option<String>) -> Option<String> {
        Login::from_secret(secret).ok().map(|l| Login::org(&l.account_id)).or(set)
    }

    fn plan(&self, secret: &Secret) -> Option<PlanInfo> {
        Login::from_secret(secret).ok().map(|l| l.info())
    }

    fn is_plan(&self) -> bool {
        true
    }

    /// Responses requests (created and streamed, or compacted) over HTTP, and nothing else.
    fn serves(&self, ask: Ask) -> bool {
        ask.transport == Transport::Http
            && match ask.operation {
                Operation::ResponsesCreate => ask.stream,
                Operation::ResponsesCompact => true,
                _ => false,
            }
    }

    /// The login's access token and account in the headers, and a Responses body adapted
    /// ([`adapt_request`]).
    fn prepare(&self, secret: &Secret, request: &mut Outgoing<'_>) -> Result<(), String> {
        let login = Login::from_secret(secret)?;
        let bearer = HeaderValue::from_str(&format!("Bearer {}", login.access_token));
        let account = HeaderValue::from_str(&login.account_id);
        let (Ok(bearer), Ok(account)) = (bearer, account) else {
            return Err("the ChatGPT login holds a token that cannot be sent; import it again".into());
        };
        set_credential(request.headers, http::header::AUTHORIZATION, Ok(bearer));
        request.headers.insert(HeaderName::from_static(ACCOUNT_HEADER), account);
        let path = request.path_and_query.split('?').next().unwrap_or_default();
        if *request.method != Method::POST || path != "/responses" {
            return Ok(());
        }
        let adapted = adapt_request(&request.body).ok_or("the request body is not a JSON object")?;
        request.headers.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        request.body = adapted.into();
        Ok(())
    }

    /// Read only from an answer that reports a window (the names are looked up once each, not made for
    /// every answer).
    fn windows<'h>(&self, header: &dyn Fn(&str) -> Option<&'h str>, now_unix: u64) -> PlanWindows {
        if !REPORTED.iter().any(|name| header(name).is_some()) {
            return PlanWindows::default();
        }
        PlanWindows::from_headers(header, Some(now_unix))
    }

    fn used_up_for(&self, body: &[u8]) -> Option<u64> {
        usage_limit_wait(body)
    }

    fn refresh_call(&self, secret: &Secret, endpoints: &Endpoints, now_unix: u64) -> Option<RefreshCall> {
        let login = Login::from_secret(secret).ok()?;
        login.needs_refresh(now_unix).then(|| RefreshCall {
            url: format!("{}/oauth/token", endpoints.chatgpt_auth.trim_end_matches('/')),
            body: login.refresh_body(),
        })
    }

    fn sign_in_again(&self) -> &'static str {
        "log in to Codex again and run `keymux keys import --chatgpt`"
    }

    fn refreshed(&self, secret: &Secret, answer: &[u8]) -> Result<Secret, String> {
        Ok(Login::from_secret(secret)?.refreshed(answer)?.to_secret())
    }
}

/// A Responses request body as the ChatGPT Codex backend takes it: `store: false` (it keeps nothing),
/// `stream: true`, `instructions` present (empty when the client sent none), and the fields it refuses
/// ([`REFUSED_FIELDS`]) left out. `None` when the body is not a JSON object.
pub fn adapt_request(body: &[u8]) -> Option<Vec<u8>> {
    let Ok(Value::Object(mut map)) = serde_json::from_slice::<Value>(body) else { return None };
    map.insert("store".into(), Value::Bool(false));
    map.insert("stream".into(), Value::Bool(true));
    if !map.get("instructions").is_some_and(Value::is_string) {
        map.insert("instructions".into(), Value::String(String::new()));
    }
    for field in REFUSED_FIELDS {
        map.remove(*field);
    }
    serde_json::to_vec(&Value::Object(map)).ok()
}

#[cfg(test)]
mod tests;
