//! A ChatGPT plan as a pooled key (provider `chatgpt`): the login it holds (one keychain secret, the
//! JSON of [`Login`]), what its tokens' claims say (account, plan type, expiry), reading it from
//! Codex's `auth.json`, the answer of the token endpoint, the request body the ChatGPT Codex backend
//! takes, and the usage windows its answers report. Pure: the gateway sends, refreshes and stores.
//!
//! The tokens are JWTs; Keymux reads their claims without checking the signature (the backend checks
//! them; Keymux only needs to know when to refresh and whom the login belongs to).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::secrets::Secret;

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
/// Where the claims Keymux reads live in a token.
const AUTH_CLAIMS: &str = "https://api.openai.com/auth";
/// Longest token accepted (the keychain entry stays small; real ones are a few kilobytes).
const MAX_TOKEN_BYTES: usize = 16 * 1024;
/// Request fields the backend refuses (`Unsupported parameter: …`), dropped before a request goes there.
pub const REFUSED_FIELDS: &[&str] = &["max_output_tokens", "max_completion_tokens"];

/// A ChatGPT login: what Codex keeps under `tokens` in its `auth.json`, and what the keychain holds.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Login {
    /// The OpenID token (its claims name the plan).
    pub id_token: String,
    /// The bearer token the backend takes.
    pub access_token: String,
    /// The token that gets new ones.
    pub refresh_token: String,
    /// The ChatGPT account (workspace) the login acts for.
    pub account_id: String,
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Login").field("account_id", &self.account_id).finish_non_exhaustive()
    }
}

/// What the tokens' claims say, for listings: never a token.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
pub struct PlanInfo {
    /// The ChatGPT account id.
    pub account_id: String,
    /// The plan (`plus`, `pro`, `team`…), when the id token says.
    pub plan_type: Option<String>,
    /// When the access token expires, Unix seconds.
    pub expires_unix: Option<u64>,
}

impl Login {
    /// Reads the login a keychain secret holds; the message never quotes it.
    pub fn from_secret(secret: &Secret) -> Result<Self, String> {
        let login: Self = serde_json::from_str(secret.expose())
            .map_err(|_| "the ChatGPT login in the keychain cannot be read; import it again".to_owned())?;
        login.validate()?;
        Ok(login)
    }

    /// The secret the keychain keeps.
    pub fn to_secret(&self) -> Secret {
        Secret::new(serde_json::to_string(self).unwrap_or_default())
    }

    /// Checks each token's shape: printable, no spaces, bounded; the access token a JWT.
    pub fn validate(&self) -> Result<(), String> {
        for (name, value) in [
            ("id_token", &self.id_token),
            ("access_token", &self.access_token),
            ("refresh_token", &self.refresh_token),
            ("account_id", &self.account_id),
        ] {
            if value.is_empty() || value.len() > MAX_TOKEN_BYTES || !value.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(format!("the ChatGPT login's {name} is missing or malformed; log in to Codex again"));
            }
        }
        claims(&self.access_token).map(|_| ()).ok_or_else(|| {
            "the ChatGPT login's access_token is not a token Keymux can read; log in to Codex again".to_owned()
        })
    }

    /// When the access token expires, Unix seconds (`exp`), if it says.
    pub fn expires_unix(&self) -> Option<u64> {
        claims(&self.access_token)?.get("exp")?.as_u64()
    }

    /// Whether the access token should be refreshed at `now_unix` (Unix seconds): it has less than
    /// [`REFRESH_AHEAD_SECS`] left. A token without `exp` is never refreshed ahead.
    pub fn needs_refresh(&self, now_unix: u64) -> bool {
        self.expires_unix().is_some_and(|exp| exp <= now_unix.saturating_add(REFRESH_AHEAD_SECS))
    }

    /// The account and plan, from the id token's claims (the access token's when it has none).
    pub fn info(&self) -> PlanInfo {
        let auth = |token: &str| claims(token).and_then(|c| c.get(AUTH_CLAIMS).cloned());
        let plan_type = [&self.id_token, &self.access_token]
            .into_iter()
            .find_map(|t| auth(t)?.get("chatgpt_plan_type")?.as_str().map(str::to_owned));
        PlanInfo { account_id: self.account_id.clone(), plan_type, expires_unix: self.expires_unix() }
    }

    /// The organization Keymux files the plan under: its encrypted content is readable only there, never
    /// by an API key's organization.
    pub fn org(account_id: &str) -> String {
        let short: String = account_id.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-').take(48).collect();
        format!("chatgpt-{short}")
    }

    /// This login after a refresh answered `answer` (the token endpoint's JSON): the new tokens, the
    /// refresh token kept when none came back, the account kept.
    pub fn refreshed(&self, answer: &[u8]) -> Result<Self, String> {
        #[derive(Deserialize)]
        struct Answer {
            access_token: String,
            id_token: Option<String>,
            refresh_token: Option<String>,
        }
        let answer: Answer =
            serde_json::from_slice(answer).map_err(|_| "the token endpoint's answer has no access_token".to_owned())?;
        let next = Self {
            id_token: answer.id_token.unwrap_or_else(|| self.id_token.clone()),
            access_token: answer.access_token,
            refresh_token: answer.refresh_token.unwrap_or_else(|| self.refresh_token.clone()),
            account_id: self.account_id.clone(),
        };
        next.validate()?;
        Ok(next)
    }

    /// The body of a refresh request to the token endpoint.
    pub fn refresh_body(&self) -> Vec<u8> {
        let body = serde_json::json!({
            "client_id": CLIENT_ID,
            "grant_type": "refresh_token",
            "refresh_token": self.refresh_token,
            "scope": REFRESH_SCOPE,
        });
        body.to_string().into_bytes()
    }
}

/// The login in a Codex `auth.json`: `Ok(None)` when it holds none (an API key, or no `tokens`).
/// The message never quotes a token.
pub fn from_codex_auth(text: &str) -> Result<Option<Login>, String> {
    let root: Value = serde_json::from_str(text).map_err(|_| "it is not JSON".to_owned())?;
    let mode = root.get("auth_mode").and_then(Value::as_str);
    let Some(tokens) = root.get("tokens").filter(|t| !t.is_null()) else { return Ok(None) };
    if mode.is_some_and(|m| !m.eq_ignore_ascii_case("chatgpt")) {
        return Ok(None);
    }
    let field = |name: &str| tokens.get(name).and_then(Value::as_str).map(str::to_owned);
    let access_token = field("access_token").unwrap_or_default();
    let account_id = field("account_id")
        .or_else(|| {
            let claims = claims(&access_token)?;
            claims.get(AUTH_CLAIMS)?.get("chatgpt_account_id")?.as_str().map(str::to_owned)
        })
        .unwrap_or_default();
    let login = Login {
        id_token: field("id_token").unwrap_or_default(),
        access_token,
        refresh_token: field("refresh_token").unwrap_or_default(),
        account_id,
    };
    login.validate()?;
    Ok(Some(login))
}

/// A JWT's claims (its middle part, base64url), without checking its signature.
pub fn claims(token: &str) -> Option<Map<String, Value>> {
    use base64::Engine as _;
    let mut parts = token.split('.');
    let (_, payload, _) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
    match serde_json::from_slice(&bytes).ok()? {
        Value::Object(map) => Some(map),
        _ => None,
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

/// One of the plan's usage windows, from an answer's `x-codex-{primary,secondary}-*` headers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, ts_rs::TS)]
pub struct UsageWindow {
    /// How much of it is used, 0 to 100.
    pub used_percent: f32,
    /// Its length, minutes (300 for the 5-hour window, 10080 for the weekly one).
    pub window_minutes: Option<u64>,
    /// When it resets, Unix seconds.
    pub resets_unix: Option<u64>,
}

impl UsageWindow {
    /// Whether it is used up.
    pub fn exhausted(&self) -> bool {
        self.used_percent >= 100.0
    }
}

/// The plan's two windows as one answer reported them: the 5-hour one (`primary`) and the weekly one
/// (`secondary`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, ts_rs::TS)]
pub struct PlanWindows {
    /// The short window (5 hours).
    pub primary: Option<UsageWindow>,
    /// The long window (a week).
    pub secondary: Option<UsageWindow>,
}

impl PlanWindows {
    /// Reads the windows from an answer's headers (`get` looks a header up by its lowercase name); a
    /// window's reset is its `reset-at`, else `reset-after-seconds` from `now_unix` when given.
    pub fn from_headers<'a>(get: impl Fn(&str) -> Option<&'a str>, now_unix: Option<u64>) -> Self {
        let window = |which: &str| {
            let number =
                |what: &str| get(&format!("x-codex-{which}-{what}")).and_then(|v| v.trim().parse::<f64>().ok());
            let used = number("used-percent")?;
            let resets = number("reset-at")
                .map(|at| at as u64)
                .or_else(|| Some(now_unix?.saturating_add(number("reset-after-seconds")? as u64)));
            Some(UsageWindow {
                used_percent: used.clamp(0.0, 100.0) as f32,
                window_minutes: number("window-minutes").map(|m| m as u64),
                resets_unix: resets,
            })
        };
        Self { primary: window("primary"), secondary: window("secondary") }
    }

    /// Whether an answer reported either window.
    pub fn any(&self) -> bool {
        self.primary.is_some() || self.secondary.is_some()
    }

    /// Until when a window reported used up keeps the plan closed, Unix milliseconds, while that is
    /// after `now_unix_ms` (the gateway's pool view and its status read it alike).
    pub fn used_up_until_ms(&self, now_unix_ms: u64) -> Option<u64> {
        self.exhausted_until_unix().map(|secs| secs.saturating_mul(1000)).filter(|ms| *ms > now_unix_ms)
    }

    /// When the plan is usable again if a window is used up: the latest reset of the used-up windows.
    pub fn exhausted_until_unix(&self) -> Option<u64> {
        [self.primary, self.secondary]
            .into_iter()
            .flatten()
            .filter(UsageWindow::exhausted)
            .filter_map(|w| w.resets_unix)
            .max()
    }
}

/// How long until a `usage_limit_reached` error body's window resets, seconds: its
/// `resets_in_seconds`, or a minute when it gives none. `None` when the body is no such error.
pub fn usage_limit_wait(body: &[u8]) -> Option<u64> {
    let root: Value = serde_json::from_slice(body).ok()?;
    let error = root.get("error")?;
    let kind = error.get("type").or_else(|| error.get("code")).and_then(Value::as_str)?;
    if kind != "usage_limit_reached" {
        return None;
    }
    Some(error.get("resets_in_seconds").and_then(Value::as_u64).unwrap_or(60))
}

#[cfg(test)]
mod tests;
