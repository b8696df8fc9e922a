//! A plan's login: what Codex keeps under `tokens` in its `auth.json` and the keychain holds, what its
//! tokens' claims say (account, plan type, expiry), and a refresh's request and answer. The tokens are
//! JWTs; Keymux reads their claims without checking the signature (the backend checks them; Keymux
//! only needs to know when to refresh and whom the login belongs to).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{AUTH_CLAIMS, CLIENT_ID, REFRESH_AHEAD_SECS, REFRESH_SCOPE};
use crate::secrets::Secret;

/// Longest token accepted (the keychain entry stays small; real ones are a few kilobytes).
const MAX_TOKEN_BYTES: usize = 16 * 1024;

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
