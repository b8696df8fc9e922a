//! Reasoning another organization sealed, in the mode that drops it (`ForeignReasoning::Drop`), as
//! newer OpenAI models do instead of answering 400 `invalid_encrypted_content`: each such top-level
//! `reasoning` item is taken out of the input before the prompt is rendered (so it adds no tokens and
//! the prompt cache misses from where it stood), and the answer reports it in the response's
//! `input_transformations`, one entry per item with its original id.

use serde_json::{json, Value};

use crate::crypto::{check, open_any, Verdict};
use crate::state::{Caller, State};

/// The reason OpenAI gives for reasoning sealed by another organization.
const ORGANIZATION_MISMATCH: &str = "organization_mismatch";

/// `items` without the reasoning items another organization of this deployment sealed, and one
/// `input_transformations` entry for each. Items this organization sealed, items no organization can
/// open and every other item stay (the later validation answers 400 for what cannot be read).
pub(super) fn drop_foreign(state: &State, caller: &Caller, items: Vec<Value>) -> (Vec<Value>, Vec<Value>) {
    let serving = &state.org(caller.org).cipher;
    let others = state.other_ciphers(caller.org);
    let mut removed = Vec::new();
    let kept = items
        .into_iter()
        .filter(|item| {
            let Some(token) = foreign_reasoning(item) else { return true };
            if check(serving, others.iter().copied(), token) != Verdict::OtherOrganization {
                return true;
            }
            removed.push(json!({
                "type": "reasoning",
                "id": original_id(item, &others, token),
                "action": "removed",
                "reason": ORGANIZATION_MISMATCH,
            }));
            false
        })
        .collect();
    (kept, removed)
}

/// The `encrypted_content` of a top-level reasoning item.
fn foreign_reasoning(item: &Value) -> Option<&str> {
    (item.get("type").and_then(Value::as_str) == Some("reasoning"))
        .then(|| item.get("encrypted_content").and_then(Value::as_str))
        .flatten()
}

/// The id the item was given when it was made: as replayed, or, for an item replayed without its id,
/// the one sealed inside its content (the provider reads its own content).
fn original_id(item: &Value, others: &[&crate::crypto::OrgCipher], token: &str) -> Value {
    if let Some(id) = item.get("id").and_then(Value::as_str) {
        return json!(id);
    }
    let sealed = open_any(others, token).and_then(|plain| serde_json::from_slice::<Value>(&plain).ok());
    sealed.and_then(|s| s.get("item_id").cloned()).unwrap_or(Value::Null)
}
