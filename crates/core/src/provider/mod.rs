//! Providers: what differs between the services a key can talk to, each one type behind the one
//! [`Provider`] interface. Routing, the pipeline, the pool, the control plane and the UI ask a key's
//! provider; none of them asks which provider it is.
//!
//! A provider owns where a key's requests go and how they are authenticated, how a request's body is
//! adapted, what it can serve (operations and transports), how its answers report limits and
//! exhaustion, how its credential is checked, identified and refreshed, and how a key is probed. All
//! of it is pure: the gateway sends, stores and refreshes (`refresh_call` describes the call,
//! `refreshed` reads its answer).
//!
//! Each provider is a file of its own ([`openai`], [`azure`], [`chatgpt`], the ChatGPT plan's home),
//! registered once, in [`ProviderId::get`]; [`ProviderId`] is the name a key's config and the API
//! carry. Adding a provider means a new file, a variant of [`ProviderId`] and its line in `get`.

use bytes::Bytes;
use http::{HeaderMap, Method};

use crate::facts::Operation;
pub use crate::keys::ProviderId;
use crate::secrets::Secret;

pub mod azure;
pub mod chatgpt;
pub mod openai;

/// Every provider, in the order the CLI lists them.
pub const ALL: &[ProviderId] = &[ProviderId::Openai, ProviderId::Azure, ProviderId::Chatgpt];

/// Registration lives here, beside the implementations; the id itself is plain data in `keys` (a
/// key's config holds it, and `keys` sits below everything a provider reads).
impl ProviderId {
    /// The provider's implementation: the one place a provider is registered.
    pub fn get(self) -> &'static dyn Provider {
        match self {
            Self::Openai => &openai::OpenAi,
            Self::Azure => &azure::Azure,
            Self::Chatgpt => &chatgpt::Plan,
        }
    }

    /// Parses the name used on the command line and in the environment (or one of its aliases).
    pub fn parse(s: &str) -> Option<Self> {
        let wanted = s.trim().to_ascii_lowercase();
        ALL.iter().copied().find(|id| id.as_str() == wanted || id.get().aliases().contains(&wanted.as_str()))
    }
}

/// The base URLs Keymux knows for providers, as the config sets them (each provider picks its own).
#[derive(Clone, Debug)]
pub struct Endpoints {
    /// OpenAI's API (`upstream` in the config; the simulator in tests).
    pub api: String,
    /// The ChatGPT Codex backend (`chatgpt_base_url`).
    pub chatgpt: String,
    /// The auth server that refreshes ChatGPT logins (`chatgpt_auth_url`).
    pub chatgpt_auth: String,
}

impl Endpoints {
    /// The public services.
    pub fn public() -> Self {
        Self {
            api: openai::DEFAULT_BASE_URL.to_owned(),
            chatgpt: chatgpt::DEFAULT_BASE_URL.to_owned(),
            chatgpt_auth: chatgpt::DEFAULT_AUTH_URL.to_owned(),
        }
    }
}

/// A request on its way to a provider, as the provider may change it: its credentials are set, and
/// its body may be adapted.
pub struct Outgoing<'a> {
    /// The method.
    pub method: &'a Method,
    /// What follows the base URL (`/responses?…`).
    pub path_and_query: &'a str,
    /// The headers that go (the client's, filtered).
    pub headers: &'a mut HeaderMap,
    /// The body that goes.
    pub body: Bytes,
}

/// How a request reaches Keymux, for what a provider serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// An HTTP request.
    Http,
    /// A Responses WebSocket (its handshake and every turn on it).
    WebSocket,
}

/// A request as a provider judges whether it can serve it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ask {
    /// What it does.
    pub operation: Operation,
    /// Whether the client asked for a stream.
    pub stream: bool,
    /// How it came.
    pub transport: Transport,
}

/// A call that gets a credential new tokens: where, and the JSON body. The body carries a token: only
/// the gateway's refresh reads it.
pub struct RefreshCall {
    /// The token endpoint.
    pub url: String,
    /// The JSON body.
    pub body: Vec<u8>,
}

/// What a provider's answer reported of the key's own limits beyond the API's rate-limit headers: a
/// plan's usage windows.
pub type Windows = chatgpt::PlanWindows;

/// What differs between providers. Every method has the API key's behaviour as its default, so a
/// provider states only where it differs.
pub trait Provider: Sync {
    /// Other spellings `ProviderId::parse` accepts.
    fn aliases(&self) -> &'static [&'static str] {
        &[]
    }

    /// The base URL a key goes to when it has none of its own; `None` when a key must name one.
    fn default_base<'a>(&self, endpoints: &'a Endpoints) -> Option<&'a str> {
        Some(&endpoints.api)
    }

    /// Whether a key of this provider is added by pasting its secret (`keymux keys add`); a plan is
    /// imported from a client's login instead.
    fn pasted(&self) -> bool {
        true
    }

    /// Checks a new key's credential (and base URL) before it is stored; the message never quotes it.
    fn check_new(&self, secret: &Secret, base_url: Option<&str>) -> Result<(), String> {
        let _ = base_url;
        crate::keys::validate_secret(secret.expose())
    }

    /// Checks a credential that replaces `kept` on the key labelled `label`.
    fn check_replacement(&self, label: &str, kept: Option<&Secret>, new: &Secret) -> Result<(), String> {
        let _ = (label, kept);
        crate::keys::validate_secret(new.expose())
    }

    /// What a key's fingerprint is taken of: its secret, unless the credential changes while the key
    /// stays the same.
    fn identity(&self, secret: &Secret) -> Secret {
        secret.clone()
    }

    /// The organization a key is filed under before any answer names one: the one the user set, or
    /// what its credential or base URL binds it to.
    fn org(&self, secret: &Secret, base_url: Option<&str>, set: Option<String>) -> Option<String> {
        let _ = (secret, base_url);
        set
    }

    /// The account and plan a subscription's credential names (never a token); `None` for an API key.
    fn plan(&self, secret: &Secret) -> Option<chatgpt::PlanInfo> {
        let _ = secret;
        None
    }

    /// Whether it is a subscription whose use costs nothing more: new sessions go to it first, and
    /// its usage is never priced as spend.
    fn is_plan(&self) -> bool {
        false
    }

    /// Whether it can serve this request.
    fn serves(&self, ask: Ask) -> bool {
        let _ = ask;
        true
    }

    /// Sets the request's credentials and adapts it; the message never quotes a credential.
    fn prepare(&self, secret: &Secret, request: &mut Outgoing<'_>) -> Result<(), String> {
        let value = http::HeaderValue::from_str(&format!("Bearer {}", secret.expose()));
        set_credential(request.headers, http::header::AUTHORIZATION, value);
        Ok(())
    }

    /// Its usage windows, as an answer's headers report them (`now_unix`, seconds, resolves a reset
    /// given as a delay).
    fn windows<'h>(&self, header: &dyn Fn(&str) -> Option<&'h str>, now_unix: u64) -> Windows {
        let _ = (header, now_unix);
        Windows::default()
    }

    /// How long it is used up for, seconds, when an error body says so.
    fn used_up_for(&self, body: &[u8]) -> Option<u64> {
        let _ = body;
        None
    }

    /// The call that refreshes a credential at `now_unix`, when it is due.
    fn refresh_call(&self, secret: &Secret, endpoints: &Endpoints, now_unix: u64) -> Option<RefreshCall> {
        let _ = (secret, endpoints, now_unix);
        None
    }

    /// What to do when a refresh is refused: how to give Keymux a credential that works again.
    fn sign_in_again(&self) -> &'static str {
        "give the key a new secret (`keymux keys set LABEL --secret`)"
    }

    /// The credential after the refresh call answered `answer` (2xx).
    fn refreshed(&self, secret: &Secret, answer: &[u8]) -> Result<Secret, String> {
        let _ = answer;
        Ok(secret.clone())
    }

    /// The path a probe asks with `GET` (a free call that shows the key works and names its
    /// organization).
    fn probe_path(&self) -> &'static str {
        "/models"
    }
}

/// Sets a credential header, marked sensitive. A value that cannot be a header (secrets are checked to
/// printable ASCII when added) is sent empty, which the provider refuses (and the key is flagged).
pub fn set_credential(
    headers: &mut HeaderMap,
    name: http::HeaderName,
    value: Result<http::HeaderValue, http::header::InvalidHeaderValue>,
) {
    let mut value = value.unwrap_or_else(|_| http::HeaderValue::from_static(""));
    value.set_sensitive(true);
    headers.insert(name, value);
}

#[cfg(test)]
mod tests;
