use serde_json::json;

use super::*;

#[test]
fn a_change_to_a_key_names_an_unknown_field_with_every_settable_one() {
    let typo = match KeyChanges::read(json!({ "secret": "sk-x" })) {
        Err(ControlError::Invalid(message)) => message,
        other => panic!("refused as invalid: {other:?}"),
    };
    assert!(typo.starts_with("unknown field `secret`"), "{typo}");
    for field in ["label", "priority", "models", "reserve_window_pct", "monthly_budget_usd"] {
        assert!(typo.contains(field), "{field} is named: {typo}");
    }
    let change = KeyChanges::read(json!({ "label": "home", "daily_token_budget": null })).expect("reads");
    assert_eq!((change.label(), change.settings.daily_token_budget), (Some("home"), Some(None)));
}
