//! The `Secret` newtype that never prints itself, fresh secrets, and masking of anything key-shaped in
//! text and error bodies. Where secrets are kept (the keychain) is the gateway's (`keymux::secrets`).

use std::fmt;
use std::sync::Arc;

use serde::{Serialize, Serializer};

/// A secret value (API key, local token, install secret). It never prints itself.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Arc<str>);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<Arc<str>>) -> Self {
        Self(value.into())
    }

    /// The raw value, for the one place that must send it (an upstream auth header, the keychain).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("*****")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("*****")
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("*****")
    }
}

/// A secret arrives once, in a request body (a key added from the dashboard); it is never sent back.
impl<'de> serde::Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Secret::new)
    }
}

/// Generates a fresh random secret: `prefix` followed by 32 random bytes in URL-safe base64.
pub fn generate(prefix: &str) -> Secret {
    use base64::Engine as _;
    use rand::RngCore as _;
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    let body = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    Secret::new(format!("{prefix}{body}"))
}

/// What a masked credential is replaced with.
pub const MASKED: &str = "[key masked]";

/// `text` with every word that looks like a credential replaced by [`MASKED`]. A word is a run of
/// letters, digits, `-`, `_` and `*`, so whatever surrounds a key (`key:sk-…`, `key=sk-…`, quotes,
/// brackets, JSON punctuation) never hides it. A word is a credential when it starts like one of
/// OpenAI's or Keymux's (`sk-`, `km-`, `kma-`), or is 24 or more characters with a digit or `*` in it
/// (Azure keys are 32 hex characters; OpenAI quotes keys half starred).
pub fn mask_key_like(text: &str) -> String {
    mask_words(text, key_like, |_| MASKED.to_owned())
}

/// `text` with every word `is_key` picks replaced by what `mask` makes of it; a word is a run of
/// letters, digits, `-`, `_` and `*` (see [`mask_key_like`]).
pub fn mask_words(text: &str, is_key: impl Fn(&str) -> bool, mask: impl Fn(&str) -> String) -> String {
    let mut out = String::with_capacity(text.len());
    let mut word = String::new();
    let flush = |out: &mut String, word: &mut String| {
        if is_key(word) {
            out.push_str(&mask(word));
        } else {
            out.push_str(word);
        }
        word.clear();
    };
    for c in text.chars() {
        if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '*') {
            word.push(c);
        } else {
            flush(&mut out, &mut word);
            out.push(c);
        }
    }
    flush(&mut out, &mut word);
    out
}

/// Whether a word starts like an OpenAI key (`sk-`, which `sk-proj-`, `sk-svcacct-` and `sk-admin-`
/// keys share) or one of Keymux's own credentials (client tokens `km-`, the admin credential `kma-`).
pub fn key_prefixed(word: &str) -> bool {
    ["sk-", "km-", "kma-"].iter().any(|prefix| word.starts_with(prefix))
}

fn key_like(word: &str) -> bool {
    key_prefixed(word)
        || (word.len() >= 24 && word.chars().any(|c| c.is_ascii_digit() || c == '*'))
        // A JWT's parts (a ChatGPT login's tokens): base64url of JSON, `{"` first.
        || (word.len() >= 16 && word.starts_with("eyJ"))
}

/// `text` with `exact` (the key a request was sent with; empty for none) and every key-like word
/// masked: the one masking of what an error answer quotes, in its body and its headers alike.
pub fn mask_quoted(text: &str, exact: &str) -> String {
    let text = if exact.is_empty() { text.to_owned() } else { text.replace(exact, MASKED) };
    mask_key_like(&text)
}

/// An upstream's error body with `exact` (the key it was sent with) and every key-like word masked in
/// every string: a JSON body stays JSON (masked after decoding, so an escape never hides a key), any
/// other body is masked as text.
pub fn mask_error_body(body: &[u8], exact: &str) -> bytes::Bytes {
    fn strings(value: &mut serde_json::Value, mask: &dyn Fn(&str) -> String) {
        match value {
            serde_json::Value::String(s) => *s = mask(s),
            serde_json::Value::Array(items) => items.iter_mut().for_each(|v| strings(v, mask)),
            // Member names too: a provider may name a member by what it quotes.
            serde_json::Value::Object(fields) => {
                *fields = std::mem::take(fields)
                    .into_iter()
                    .map(|(name, mut v)| {
                        strings(&mut v, mask);
                        (mask(&name), v)
                    })
                    .collect();
            }
            serde_json::Value::Null | serde_json::Value::Bool(_) | serde_json::Value::Number(_) => {}
        }
    }
    let mask = |text: &str| mask_quoted(text, exact);
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(value) => {
            let mut masked = value.clone();
            strings(&mut masked, &mask);
            // Unchanged, the provider's bytes go on as they came.
            if masked == value {
                return bytes::Bytes::copy_from_slice(body);
            }
            bytes::Bytes::from(masked.to_string())
        }
        Err(_) => bytes::Bytes::from(mask(&String::from_utf8_lossy(body))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_never_prints_itself() {
        let s = Secret::new("sk-live-very-secret");
        assert_eq!(format!("{s:?}"), "*****");
        assert_eq!(format!("{s}"), "*****");
        assert_eq!(serde_json::to_string(&s).expect("serializes"), "\"*****\"");
        assert_eq!(s.expose(), "sk-live-very-secret");
    }

    #[test]
    fn keys_are_masked_whatever_surrounds_them() {
        let key = "sk-proj-Quoted0123456789abcdefXYZ";
        for shape in [
            format!("key:{key}"),
            format!("key={key};"),
            format!("api_key=\"{key}\""),
            format!("{{'key':'{key}'}}"),
            format!("<{key}>."),
            format!("(Bearer {key})"),
            "key 0123456789abcdef0123456789abcdef is not valid".to_owned(),
            "Incorrect API key provided: sk-proj-abc*****wxyz.".to_owned(),
        ] {
            let masked = mask_key_like(&shape);
            assert!(masked.contains(MASKED) && !masked.contains("0123456789"), "{shape} -> {masked}");
        }
        assert_eq!(
            mask_key_like("Rate limit reached for gpt-5.5 (task-force)"),
            "Rate limit reached for gpt-5.5 (task-force)"
        );
        let body = format!(r#"{{"error":{{"message":"refused key:\u0027{key}\u0027 and \n{key}","code":"x"}}}}"#);
        let masked = mask_error_body(body.as_bytes(), key);
        let text = String::from_utf8_lossy(&masked);
        assert!(!text.contains("Quoted0123") && text.contains("refused key"), "{text}");
        assert!(serde_json::from_slice::<serde_json::Value>(&masked).is_ok());
        let plain = mask_error_body(format!("<html>{key}</html>").as_bytes(), "");
        assert_eq!(&plain[..], b"<html>[key masked]</html>");
    }

    #[test]
    fn a_key_naming_a_json_member_is_masked_too() {
        let key = "sk-proj-Named0123456789abcdefXYZ";
        let body = serde_json::json!({"error": {"message": "refused", key: "quoted as a name"}}).to_string();
        let masked = String::from_utf8(mask_error_body(body.as_bytes(), key).to_vec()).expect("utf-8");
        assert!(!masked.contains(key) && masked.contains(MASKED) && masked.contains("refused"), "{masked}");
    }

    #[test]
    fn generated_secrets_differ_and_carry_prefix() {
        let a = generate("km-");
        let b = generate("km-");
        assert!(a.expose().starts_with("km-"));
        assert_ne!(a, b);
        assert!(a.expose().len() > 40);
    }
}
