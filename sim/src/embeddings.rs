//! Embeddings: eight deterministic unit-length floats per input, derived from a hash.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::error::ApiError;
use crate::prompt::tokens_of;

const DIMENSIONS: usize = 8;

fn vector(input: &Value) -> Vec<f32> {
    let text = match input {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let digest = Sha256::digest(text.as_bytes());
    let mut v: Vec<f32> = digest
        .chunks(4)
        .take(DIMENSIONS)
        .map(|c| {
            let n = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            (f64::from(n) / f64::from(u32::MAX) * 2.0 - 1.0) as f32
        })
        .collect();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
    v
}

/// Returns the body and the prompt tokens.
pub(crate) fn create(model: &str, body: &Map<String, Value>) -> Result<(Value, u64), ApiError> {
    let inputs: Vec<Value> = match body.get("input") {
        None | Some(Value::Null) => return Err(ApiError::missing_param("input")),
        Some(Value::String(s)) => vec![Value::String(s.clone())],
        Some(Value::Array(items)) if items.is_empty() => {
            return Err(ApiError::invalid_value(
                "input",
                "'$.input' is invalid. Please check the API reference: \
                 https://platform.openai.com/docs/api-reference."
                    .to_owned(),
            ))
        }
        Some(Value::Array(items)) if items.iter().all(Value::is_number) => {
            vec![Value::Array(items.clone())]
        }
        Some(Value::Array(items)) => items.clone(),
        Some(_) => {
            return Err(ApiError::invalid_type(
                "input",
                "Invalid type for 'input': expected a string or an array.".to_owned(),
            ))
        }
    };
    let base64 = body.get("encoding_format").and_then(Value::as_str) == Some("base64");
    let mut tokens = 0u64;
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(index, input)| {
            tokens += match input {
                Value::String(s) => tokens_of(s.len()).max(1),
                Value::Array(a) => a.len() as u64,
                other => tokens_of(other.to_string().len()).max(1),
            };
            let v = vector(input);
            let embedding = if base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                json!(STANDARD.encode(bytes))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": index, "embedding": embedding})
        })
        .collect();
    let body = json!({
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    });
    Ok((body, tokens))
}
