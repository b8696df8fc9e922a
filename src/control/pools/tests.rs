use serde_json::json;

use super::*;

fn refusal(body: serde_json::Value) -> String {
    match PoolChanges::read(body) {
        Err(ControlError::Invalid(message)) => message,
        other => panic!("refused as invalid: {other:?}"),
    }
}

#[test]
fn a_change_to_a_pool_names_an_unknown_field_with_every_settable_one_and_a_wrong_value() {
    let typo = refusal(json!({ "keys": ["a"], "allow_priorty": false }));
    assert!(typo.starts_with("unknown field `allow_priorty`: the settings that can be changed are"), "{typo}");
    for field in ["keys", "fallback", "allow_priority", "proxy", "daily_budget_usd", "on_limit"] {
        assert!(typo.contains(field), "{field} is named: {typo}");
    }
    let wrong = refusal(json!({ "allow_priority": "no" }));
    assert!(wrong.starts_with("allow_priority = \"no\": invalid type"), "{wrong}");
    let null = refusal(json!({ "allow_priority": null }));
    assert!(null.starts_with("allow_priority = null: invalid type"), "it cannot be absent: {null}");
    assert!(refusal(json!({ "reserve_at": "most" })).starts_with("reserve_at = \"most\""));
}

#[test]
fn a_change_to_a_pool_sets_what_it_names_clears_nulls_and_survives_the_trip_to_a_running_gateway() {
    let change = PoolChanges::read(json!({ "fallback": [], "proxy": null, "daily_budget_usd": 5 })).expect("reads");
    let policies = PoolPolicies { proxy: Some("http://p:1".into()), allow_priority: false, ..PoolPolicies::default() };
    let before = PoolConfig { name: "work".into(), fallback: vec!["all".into()], policies, ..PoolConfig::default() };
    let after = change.applied(before);
    assert!(after.fallback.is_empty() && after.policies.proxy.is_none(), "{after:?}");
    assert!(!after.policies.allow_priority, "left out: kept");
    assert_eq!(after.policies.money.daily.map(crate::spend::Usd::nanos), Some(5_000_000_000));
    let sent = serde_json::to_value(&change).expect("json");
    assert_eq!(
        sent,
        json!({ "fallback": [], "proxy": null, "daily_budget_usd": 5.0 }),
        "the CLI sends only what it changes"
    );
    assert_eq!(PoolChanges::read(sent).expect("read back"), change);
}
