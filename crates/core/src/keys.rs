//! Key identity: the stable `KeyId` and the runtime description of a pooled key (its provider, and its
//! secret, which only `upstream` ever exposes).

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::secrets::Secret;

/// The stable id of a pooled key. Never derived from the secret.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ts_rs::TS)]
#[serde(transparent)]
pub struct KeyId(Arc<str>);

impl KeyId {
    /// Wraps an id read from config or built for an environment key.
    pub fn new(id: impl Into<Arc<str>>) -> Self {
        Self(id.into())
    }

    /// A fresh random id, `k_` and 10 hex digits.
    pub fn generate() -> Self {
        use rand::RngCore as _;
        let mut bytes = [0u8; 5];
        rand::rngs::OsRng.fill_bytes(&mut bytes);
        Self::new(format!("k_{}", hex::encode(bytes)))
    }

    /// Whether this is a well-formed key id: 1 to 64 of `[A-Za-z0-9_-]` (so it can travel inside
    /// markers and item ids).
    pub fn is_well_formed(id: &str) -> bool {
        (1..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Which provider a key talks to: the name the config file, the environment, the CLI and the API use.
/// What each provider does is the `provider` module's (`ProviderId::get`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default, ts_rs::TS)]
#[serde(rename_all = "lowercase")]
pub enum ProviderId {
    /// OpenAI's API (`provider::openai`).
    #[default]
    Openai,
    /// Azure OpenAI's v1 API (`provider::azure`).
    Azure,
    /// A ChatGPT plan (`provider::chatgpt`).
    Chatgpt,
}

impl ProviderId {
    /// The name shown to users (as the config and the API spell it).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Openai => "openai",
            Self::Azure => "azure",
            Self::Chatgpt => "chatgpt",
        }
    }
}

/// Where a key came from: the keychain (persistent) or the environment (ephemeral).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
#[serde(rename_all = "lowercase")]
pub enum KeySource {
    /// Listed in the config file; the secret is in the OS keychain.
    Keychain,
    /// Supplied by `KEYMUX_KEY_<LABEL>`; never written anywhere.
    Environment,
    /// Added in-process by an embedding program (tests, the tray app).
    Embedded,
}

/// A pooled key as the gateway uses it.
#[derive(Clone, Debug)]
pub struct KeyEntry {
    /// Stable id.
    pub id: KeyId,
    /// User-chosen label ("work", "personal").
    pub label: String,
    /// The provider it talks to.
    pub provider: ProviderId,
    /// Base URL override (ends before the `/responses` part, e.g. `https://api.openai.com/v1`).
    pub base_url: Option<String>,
    /// Organization set by the user; otherwise learned from upstream.
    pub org: Option<String>,
    /// The secret.
    pub secret: Secret,
    /// Where it came from.
    pub source: KeySource,
    /// Imported from a client's own login (see `KeyConfig::imported`).
    pub imported: bool,
    /// Where the router may send it and what it keeps back.
    pub settings: crate::key_settings::KeySettings,
    /// Its budget in money.
    pub money: crate::budget::MoneyBudget,
}

impl KeyEntry {
    /// A key with default settings (tier 0, no budget, every model).
    pub fn new(id: KeyId, label: impl Into<String>, provider: ProviderId, secret: Secret, source: KeySource) -> Self {
        Self {
            id,
            label: label.into(),
            provider,
            base_url: None,
            org: None,
            secret,
            source,
            imported: false,
            settings: crate::key_settings::KeySettings::default(),
            money: crate::budget::MoneyBudget::default(),
        }
    }

    /// Whether the user allows this key for `model`.
    pub fn allows(&self, model: &str) -> bool {
        self.settings.allows(model)
    }
}

/// Checks that a label is short and printable: it appears in listings, logs and the UI.
pub fn validate_label(label: &str) -> Result<(), String> {
    if label.is_empty() || label.len() > 40 {
        return Err("a label must be 1 to 40 characters".into());
    }
    if !label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        return Err(format!("label {label:?} may only use letters, digits, '-' and '_'"));
    }
    Ok(())
}

/// Longest organization id.
pub const MAX_ORG_CHARS: usize = 64;

/// Checks a key's organization id: 1 to [`MAX_ORG_CHARS`] printable characters without spaces.
pub fn validate_org(org: &str) -> Result<(), String> {
    if org.is_empty() || org.chars().count() > MAX_ORG_CHARS || !crate::key_settings::printable_word(org) {
        return Err(format!(
            "the organization {:?} must be 1 to {MAX_ORG_CHARS} printable characters without spaces, like org-abc123",
            org.chars().take(40).collect::<String>()
        ));
    }
    Ok(())
}

/// Checks a provider base URL: `https://`, or plain `http://` only to this machine (`localhost`, a
/// loopback IP), where nothing crosses a network. Over plain HTTP elsewhere, the key and every prompt
/// would travel in clear text.
pub fn validate_base_url(url: &str) -> Result<(), String> {
    let shown: String = url.chars().take(120).collect();
    let parsed = url::Url::parse(url).map_err(|_| format!("the base URL {shown:?} is not a URL; use https://…"))?;
    let host = parsed.host_str().unwrap_or("");
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let local =
        bare.eq_ignore_ascii_case("localhost") || bare.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    match parsed.scheme() {
        "https" if !host.is_empty() => Ok(()),
        "http" if local => Ok(()),
        _ => Err(format!(
            "the base URL {shown:?} must start with https:// (plain http:// only to this machine: localhost, \
             127.0.0.1 or [::1]), or the key and every prompt would cross the network in clear text"
        )),
    }
}

/// Checks the shape of an API key before it is stored, so a pasted newline or a quoted value is caught
/// early. The message never repeats the value.
pub fn validate_secret(secret: &str) -> Result<(), String> {
    if secret.is_empty() {
        return Err("the API key is empty".into());
    }
    if secret.len() > 1024 {
        return Err("the API key is longer than 1024 characters; check what was pasted".into());
    }
    if secret.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("the API key contains spaces or control characters; paste only the key".into());
    }
    if secret.starts_with('"') || secret.starts_with('\'') {
        return Err("the API key starts with a quote; paste it without quotes".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_secrets_are_validated() {
        assert!(validate_label("work").is_ok());
        assert!(validate_label("work key").is_err());
        assert!(validate_label("").is_err());
        assert!(validate_secret("sk-abc").is_ok());
        assert!(validate_secret("sk-abc\n").is_err());
        assert!(validate_secret("\"sk-abc\"").is_err());
        let msg = validate_secret("sk abc").expect_err("rejected");
        assert!(!msg.contains("sk abc"));
    }

    #[test]
    fn orgs_are_bounded_and_printable() {
        assert!(validate_org("org-abc123").is_ok());
        for bad in ["", "org a", "org-\u{7}", &"o".repeat(MAX_ORG_CHARS + 1)] {
            assert!(validate_org(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn base_urls_are_https_or_on_this_machine() {
        for ok in ["https://api.openai.com/v1", "http://127.0.0.1:9/v1", "http://LOCALHOST/v1", "http://[::1]:1/v1"] {
            assert!(validate_base_url(ok).is_ok(), "{ok}");
        }
        for bad in
            ["http://api.openai.com/v1", "http://10.0.0.1/v1", "http://localhost.evil.example/v1", "ftp://x/", "x"]
        {
            assert!(validate_base_url(bad).expect_err(bad).contains("https://"), "{bad}");
        }
    }
}

/// What testing a key found.
#[derive(Clone, Debug, serde::Serialize)]
pub struct KeyTest {
    /// The provider accepted the key.
    pub ok: bool,
    /// The status it answered, when it answered.
    pub status: Option<u16>,
    /// The organization it reported.
    pub org: Option<String>,
    /// What happened, in words.
    pub message: String,
    /// How long the call took.
    pub duration_ms: u32,
}
