//! The models each key's provider listed (`GET /models`, learned when a key is probed), and which of
//! them the key may serve: what the model catalog (`catalog`) offers a pool's clients.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::Value;

use super::Pool;
use crate::keys::KeyId;

/// Most bytes of a provider's model list read.
pub const MAX_LIST_BYTES: usize = 4 * 1024 * 1024;
/// Most models kept per key.
pub const MAX_MODELS_PER_KEY: usize = 512;
/// The longest model name kept.
pub const MAX_SLUG_BYTES: usize = 128;

/// The model names in a provider's `GET /models` answer, sorted, each once; `None` when the body is
/// not a model list.
pub fn listed_models(body: &[u8]) -> Option<Vec<String>> {
    let value: Value = serde_json::from_slice(body).ok()?;
    let (items, field) = match (value.get("data"), value.get("models")) {
        (Some(Value::Array(items)), _) => (items, "id"),
        (_, Some(Value::Array(items))) => (items, "slug"),
        _ => return None,
    };
    let names = items.iter().filter_map(|item| item.get(field)?.as_str()).filter(|name| is_model_name(name));
    let set: BTreeSet<String> = names.map(str::to_owned).collect();
    Some(set.into_iter().take(MAX_MODELS_PER_KEY).collect())
}

fn is_model_name(name: &str) -> bool {
    let allowed = |b: u8| b.is_ascii_alphanumeric() || b"-._:/".contains(&b);
    !name.is_empty() && name.len() <= MAX_SLUG_BYTES && name.bytes().all(allowed)
}

impl Pool {
    /// Remembers the models the provider listed for `key` (at most [`MAX_MODELS_PER_KEY`],
    /// as [`listed_models`] reads them); `false` when the key is not in the pool.
    pub fn learn_models(&self, key: &KeyId, models: Vec<String>) -> bool {
        let Some(slot) = self.slot(key) else { return false };
        slot.lock().listed_models = Some(models.into());
        true
    }

    /// Of the models the provider listed for `key`, those it may serve now: allowed by its settings
    /// (`models`, `exclude_models`) and not since answered as unavailable. `None` when its list was
    /// never learned (or the key is gone); empty when it is switched off or the provider rejected it
    /// (a cooling or resting key keeps its models: it serves them again soon).
    pub fn servable_models(&self, key: &KeyId) -> Option<Vec<String>> {
        let slot = self.slot(key)?;
        let entry = slot.entry.load();
        let state = slot.lock();
        let listed: Arc<[String]> = state.listed_models.clone()?;
        if matches!(slot.live.load().health, super::Health::Disabled | super::Health::Rejected) {
            return Some(Vec::new());
        }
        let missing = &state.missing_models;
        Some(listed.iter().filter(|m| entry.allows(m) && !missing.contains(m)).cloned().collect())
    }
}

#[cfg(test)]
mod tests {
    #![expect(clippy::unwrap_used, reason = "tests")]
    use serde_json::json;

    use super::*;

    #[test]
    fn openai_and_plan_lists_are_read_and_bad_names_skipped() {
        let openai = json!({"object": "list", "data": [
            {"id": "gpt-5.5", "object": "model"}, {"id": "gpt-4.1"}, {"id": "gpt-5.5"}, {"id": ""},
            {"id": "a b"}, {"id": "x".repeat(MAX_SLUG_BYTES + 1)}, {"nope": 1}, {"id": "ft:gpt-4.1:org/x"}]});
        let names = listed_models(openai.to_string().as_bytes()).unwrap();
        assert_eq!(names, ["ft:gpt-4.1:org/x", "gpt-4.1", "gpt-5.5"]);
        let plan = json!({"models": [{"slug": "gpt-6-sol"}, {"slug": "gpt-5.5"}]});
        assert_eq!(listed_models(plan.to_string().as_bytes()).unwrap(), ["gpt-5.5", "gpt-6-sol"]);
        assert_eq!(listed_models(b"{\"error\":{}}"), None);
        assert_eq!(listed_models(b"not json"), None);
    }

    #[test]
    fn a_list_longer_than_the_bound_is_cut() {
        let data: Vec<Value> = (0..MAX_MODELS_PER_KEY + 50).map(|i| json!({"id": format!("m-{i:04}")})).collect();
        let names = listed_models(json!({"data": data}).to_string().as_bytes()).unwrap();
        assert_eq!(names.len(), MAX_MODELS_PER_KEY);
    }
}
