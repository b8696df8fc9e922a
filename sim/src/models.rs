//! The model catalogue behind `GET /v1/models` and the model check of every request. Each
//! organization has access to some of the simulator's models (`SimConfig::org_models`; all by default),
//! as OpenAI gives organizations access model by model: its keys' `GET /v1/models` lists only those,
//! and any other model is `model_not_found` to them, whether the simulator knows it or not. The ChatGPT
//! plan lists its models in the Codex backend's own shape (`plan_list`).

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

pub(crate) fn model_object(id: &str) -> Value {
    json!({"id": id, "object": "model", "created": CREATED, "owned_by": "system"})
}

/// `GET /v1/models` for an organization with access to `models`.
pub(crate) fn list(models: &[&str]) -> Value {
    let data: Vec<Value> = models.iter().map(|m| model_object(m)).collect();
    json!({"object": "list", "data": data})
}

/// The ChatGPT Codex backend's `GET /models`: `{"models":[…]}`, each model as Codex's catalog
/// describes one (the backend sends Codex's full `ModelInfo`; the simulator sends its identity and
/// picker fields, which is what a gateway reads from it).
pub(crate) fn plan_list(models: &[&str]) -> Value {
    let entries: Vec<Value> = models
        .iter()
        .enumerate()
        .map(|(i, m)| json!({"slug": m, "display_name": m, "visibility": "list", "supported_in_api": true, "priority": i}))
        .collect();
    json!({ "models": entries })
}

/// The request's `model`: present, a string, and one of the organization's `models`.
pub(crate) fn require(body: &Map<String, Value>, models: &[&str]) -> Result<String, ApiError> {
    match body.get("model") {
        None | Some(Value::Null) => Err(ApiError::missing_param("model")),
        Some(Value::String(m)) if models.contains(&m.as_str()) => Ok(m.clone()),
        Some(Value::String(m)) => Err(ApiError::model_not_found(m)),
        Some(_) => Err(ApiError::invalid_type("model", "Invalid type for 'model': expected a string.".to_owned())),
    }
}
