//! A pool's policies: the tier its requests may ask for.

/// Whether a request's `service_tier` bills above the standard tier, so a pool with
/// `allow_priority = false` sends it as `default` instead: `priority` and `fast` (the same tier, Codex's
/// Fast mode) and `ultrafast`, in any case. `auto`, `default`, `flex` and tiers the price table does
/// not know (`scale`) are left as they are.
pub fn above_standard(service_tier: &str) -> bool {
    use crate::spend::ServiceTier;
    matches!(ServiceTier::from_response(Some(service_tier)), ServiceTier::Priority | ServiceTier::Ultrafast)
}

/// The tier a request a pool does not allow its tier is sent with.
pub const STANDARD_TIER: &str = "default";

/// `body` (a JSON object: a request or a `response.create` frame) with its top-level `service_tier`
/// set to [`STANDARD_TIER`], the other fields as they were, in their order. `None` when it cannot be
/// read as a JSON object (it was read once already, so only on a body changed since).
pub fn standard_tier(body: &[u8]) -> Option<Vec<u8>> {
    let mut object: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(body).ok()?;
    object.insert("service_tier".to_owned(), serde_json::Value::from(STANDARD_TIER));
    serde_json::to_vec(&object).ok()
}
