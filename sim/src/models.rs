//! The model catalogue behind `GET /v1/models` and the model check of every request.

use serde_json::{json, Map, Value};

use crate::error::ApiError;

/// Models this deployment offers.
pub const MODELS: &[&str] = &[
    "gpt-5.5",
    "gpt-5.5-mini",
    "gpt-5.5-codex",
    "gpt-6-sol",
    "gpt-6.2-sol",
    "gpt-5",
    "gpt-5-mini",
    "gpt-4.1",
    "gpt-4o",
    "gpt-4o-mini",
    "text-embedding-3-small",
    "text-embedding-3-large",
];

const CREATED: u64 = 1_735_689_600;

pub(crate) fn is_known(model: &str) -> bool {
    MODELS.contains(&model)
}

pub(crate) fn model_object(id: &str) -> Value {
    json!({"id": id, "object": "model", "created": CREATED, "owned_by": "system"})
}

pub(crate) fn list() -> Value {
    let data: Vec<Value> = MODELS.iter().map(|m| model_object(m)).collect();
    json!({"object": "list", "data": data})
}

/// The request's `model`: present, a string, and in the catalogue.
pub(crate) fn require(body: &Map<String, Value>) -> Result<String, ApiError> {
    match body.get("model") {
        None | Some(Value::Null) => Err(ApiError::missing_param("model")),
        Some(Value::String(m)) if is_known(m) => Ok(m.clone()),
        Some(Value::String(m)) => Err(ApiError::model_not_found(m)),
        Some(_) => Err(ApiError::invalid_type("model", "Invalid type for 'model': expected a string.".to_owned())),
    }
}
