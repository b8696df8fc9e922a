#![expect(clippy::unwrap_used, reason = "tests")]

use super::*;

#[test]
fn the_catalog_body_stays_under_its_bound_and_keeps_the_first_entries() {
    let policies = crate::pools::PoolPolicies::default();
    let entries = (0..200).map(|i| codex::entry(&format!("model-{i:03}"), &policies, i));
    let (body, left_out) = bounded(entries, MAX_CATALOG_BYTES);
    assert!(body.len() <= MAX_CATALOG_BYTES && MAX_CATALOG_BYTES < 1024 * 1024, "{}", body.len());
    assert!(left_out > 0, "200 entries with a prompt each do not fit");
    let parsed: Value = serde_json::from_slice(&body).unwrap();
    let models = parsed["models"].as_array().unwrap();
    assert_eq!(models.len() + left_out, 200);
    assert_eq!(models[0]["slug"], "model-000", "the first entries stay");
    let (small, none) = bounded(std::iter::empty(), MAX_CATALOG_BYTES);
    assert_eq!((small.as_slice(), none), (&b"{\"models\":[]}"[..], 0));
}
