//! Rescue: when no usable key of an organization is left, the items only it could read are dropped from
//! the request, so the rest of the conversation can go on elsewhere.

use serde_json::Value;

use super::{Markers, OrgTag};

impl Markers {
    /// Whether a JSON value carries a valid marker of this install naming `org`.
    pub fn names_org(&self, value: &Value, org: OrgTag) -> bool {
        let Value::Object(map) = value else {
            return false;
        };
        let by_content = match map.get("encrypted_content") {
            Some(Value::String(s)) => matches!(self.unwrap_content(s), Ok(Some((Some(pin), _))) if pin.org == org),
            _ => false,
        };
        by_content
            || match map.get("id") {
                Some(Value::String(s)) => matches!(self.untag_id(s), Ok(Some((Some(pin), _))) if pin.org == org),
                _ => false,
            }
    }

    /// Removes from a request body every array element that carries a valid marker naming one of `orgs`
    /// (reasoning and compaction items in `input`, entries of a Chat message's `reasoning_items`).
    /// Returns the new body and how many elements were dropped, or `None` if the body is not JSON.
    pub fn drop_org_items(&self, body: &[u8], orgs: &[OrgTag]) -> Option<(Vec<u8>, usize)> {
        let mut value: Value = serde_json::from_slice(body).ok()?;
        let dropped = self.drop_in(&mut value, orgs);
        Some((serde_json::to_vec(&value).ok()?, dropped))
    }

    fn drop_in(&self, value: &mut Value, orgs: &[OrgTag]) -> usize {
        match value {
            Value::Array(items) => {
                let before = items.len();
                items.retain(|item| !orgs.iter().any(|org| self.names_org(item, *org)));
                let mut dropped = before - items.len();
                for item in items.iter_mut() {
                    dropped += self.drop_in(item, orgs);
                }
                dropped
            }
            Value::Object(map) => map.values_mut().map(|v| self.drop_in(v, orgs)).sum(),
            _ => 0,
        }
    }
}
