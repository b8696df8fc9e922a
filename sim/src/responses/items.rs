//! Output items as the provider numbers them, and the usage block every answer carries.

use serde_json::{json, Value};

use crate::util::object_id;

pub(super) fn id_prefix_for(item: &Value) -> &'static str {
    match item.get("type").and_then(Value::as_str) {
        Some("function_call_output") => "fco",
        Some("function_call") => "fc",
        Some("reasoning") => "rs",
        Some("compaction") => "cmp",
        _ => "msg",
    }
}

/// Copies of the input items with an id on every object item, as the store keeps them.
pub(super) fn with_ids(items: &[Value]) -> Vec<Value> {
    items
        .iter()
        .map(|item| {
            let mut item = item.clone();
            let prefix = id_prefix_for(&item);
            if let Value::Object(map) = &mut item {
                if map.get("id").is_none_or(Value::is_null) {
                    map.insert("id".into(), Value::String(object_id(prefix)));
                }
            }
            item
        })
        .collect()
}

pub(super) fn usage(input: u64, cached: u64, output: u64, reasoning: u64) -> Value {
    json!({
        "input_tokens": input,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": input + output,
    })
}
