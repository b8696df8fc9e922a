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

    /// Removes from a request body every array element that no remaining key can read: those that carry
    /// a valid marker naming one of `orgs` (reasoning and compaction items in `input`, entries of a Chat
    /// message's `reasoning_items`), and with `unmarked` those whose `encrypted_content` carries no
    /// marker at all (a session made before Keymux that no organization could read, or that was moved
    /// off its organization). One parse and one write, whatever is dropped. Returns the new body and how
    /// many elements were dropped, or `None` if the body is not JSON.
    pub fn drop_unreadable(&self, body: &[u8], orgs: &[OrgTag], unmarked: bool) -> Option<(Vec<u8>, usize)> {
        let unreadable =
            |item: &Value| (unmarked && is_unmarked_item(item)) || orgs.iter().any(|org| self.names_org(item, *org));
        let mut value: Value = serde_json::from_slice(body).ok()?;
        let dropped = drop_in(&mut value, &unreadable);
        Some((serde_json::to_vec(&value).ok()?, dropped))
    }
}

/// Removes every array element, at any depth, for which `unreadable` holds; returns how many.
fn drop_in(value: &mut Value, unreadable: &dyn Fn(&Value) -> bool) -> usize {
    match value {
        Value::Array(items) => {
            let before = items.len();
            items.retain(|item| !unreadable(item));
            let mut dropped = before - items.len();
            for item in items.iter_mut() {
                dropped += drop_in(item, unreadable);
            }
            dropped
        }
        Value::Object(map) => map.values_mut().map(|v| drop_in(v, unreadable)).sum(),
        _ => 0,
    }
}

/// Whether a request body replays encrypted content that carries no marker of this install (made before
/// Keymux, or directly upstream): only the organization that made it can read it, and nothing says
/// which. A byte scan for `"encrypted_content"` keys whose string value does not start with `km1`;
/// `null` values carry nothing.
pub fn has_unmarked_encrypted(body: &[u8]) -> bool {
    const KEY: &[u8] = b"\"encrypted_content\"";
    static FINDER: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(KEY));
    FINDER.find_iter(body).any(|at| {
        crate::scan::value_start(body, at, KEY.len() - 2).is_some_and(|start| {
            let value = &body[start..];
            !value.starts_with(super::VERSION) && !value.starts_with(b"\"")
        })
    })
}

fn is_unmarked_item(item: &Value) -> bool {
    match item.get("encrypted_content") {
        Some(Value::String(s)) => !s.is_empty() && !s.as_bytes().starts_with(super::VERSION),
        _ => false,
    }
}
