//! Reading a request body's top-level fields once, without a tree of the body (what routing needs,
//! nothing more), with an error that says what is wrong with a body that cannot be forwarded.

use bytes::Bytes;
use serde::Deserialize;

use crate::markers::MarkerError;

/// Most bytes of a model name kept for display.
pub(super) const MODEL_DISPLAY_CAP: usize = 128;
/// Most bytes of a requested `service_tier` kept (the tiers are short words).
pub(super) const TIER_CAP: usize = 32;

/// A body that cannot be forwarded.
#[derive(Debug, thiserror::Error)]
pub enum FactsError {
    /// Not the JSON object the endpoint takes.
    #[error("{0}")]
    Body(String),
    /// A marker that must not be used.
    #[error(transparent)]
    Marker(#[from] MarkerError),
}

/// The top-level fields of a JSON body that facts are read from; everything else is skipped unparsed.
#[derive(Deserialize)]
pub(super) struct Peek<'a> {
    #[serde(default)]
    pub model: Option<serde_json::Value>,
    #[serde(default)]
    pub prompt_cache_key: Option<serde_json::Value>,
    #[serde(default)]
    pub previous_response_id: Option<serde_json::Value>,
    /// Read only for a prompt without a `prompt_cache_key` (Codex's instructions run to tens of KB).
    #[serde(borrow, default)]
    pub instructions: Option<&'a serde_json::value::RawValue>,
    #[serde(borrow, default)]
    pub input: Option<&'a serde_json::value::RawValue>,
    #[serde(borrow, default)]
    pub messages: Option<&'a serde_json::value::RawValue>,
    #[serde(default)]
    pub stream: Option<serde_json::Value>,
    #[serde(default)]
    pub service_tier: Option<serde_json::Value>,
    #[serde(borrow, default)]
    pub client_metadata: Option<&'a serde_json::value::RawValue>,
}

/// Reads the top-level fields routing needs, with an error that says what is wrong with the body.
pub(super) fn peek(body: &Bytes) -> Result<Peek<'_>, FactsError> {
    match body.iter().find(|b| !b.is_ascii_whitespace()) {
        None => return Err(FactsError::Body("the body is empty; this endpoint takes a JSON object".into())),
        // A struct would also take an array, by position.
        Some(b) if *b != b'{' => return Err(FactsError::Body("the body must be a JSON object".into())),
        Some(_) => {}
    }
    serde_json::from_slice(body).map_err(|e| {
        let text = e.to_string();
        let message = if let Some(rest) = text.strip_prefix("duplicate field ") {
            let name = rest.split('`').nth(1).unwrap_or("a field");
            format!("the body names `{name}` more than once; send each field once")
        } else if e.is_data() {
            "the body must be a JSON object".to_owned()
        } else {
            text
        };
        FactsError::Body(message)
    })
}

/// The `model`, which must be a string when present.
pub(super) fn model_of(peek: &Peek<'_>) -> Result<Option<String>, FactsError> {
    match &peek.model {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(m)) => Ok(Some(truncate(m, MODEL_DISPLAY_CAP))),
        Some(other) => Err(FactsError::Body(format!(
            "`model` must be a string naming the model, not {}",
            match other {
                serde_json::Value::Bool(_) => "a boolean",
                serde_json::Value::Number(_) => "a number",
                serde_json::Value::Array(_) => "an array",
                _ => "an object",
            }
        ))),
    }
}

/// The `service_tier` asked for, when it is a string (anything else is left to the provider).
pub(super) fn service_tier_of(peek: &Peek<'_>) -> Option<String> {
    peek.service_tier.as_ref().and_then(serde_json::Value::as_str).map(|t| truncate(t, TIER_CAP))
}

/// `s` cut to at most `cap` bytes, on a character boundary.
fn truncate(s: &str, cap: usize) -> String {
    if s.len() <= cap {
        return s.to_owned();
    }
    let mut end = cap;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}
