//! Every key setting, one at a time, from the config file to the key the gateway holds, the API's key
//! view and the dashboard's TypeScript type, and back through a change and the config file's writer.
//! The fields are read from `KeySettings` and `MoneyBudget` themselves, so a setting added there is
//! covered here without a line of this test changing (the sample below must set it, or the first check
//! fails).

use serde_json::Value;

use crate::budget::{MoneyBudget, OnLimit};
use crate::config::{Config, KeyConfig};
use crate::control::{self, KeyChanges, NewKey};
use crate::key_settings::KeySettings;
use crate::keys::{KeyId, ProviderId};
use crate::markers::Markers;
use crate::pool::Pool;
use crate::secrets::Secret;
use crate::spend::Usd;

/// Every setting away from its default.
fn sample() -> (KeySettings, MoneyBudget) {
    let settings = KeySettings {
        priority: 3,
        daily_token_budget: Some(70_000),
        models: vec!["gpt-5.5".into()],
        exclude_models: vec!["gpt-4o".into()],
        reserve_window_pct: Some(20),
    };
    let money = MoneyBudget {
        daily: Some(Usd::from_nanos(5_000_000_000)),
        monthly: Some(Usd::from_nanos(90_000_000_000)),
        reserve_at: Some(80),
        on_limit: OnLimit::Stop,
    };
    (settings, money)
}

/// Each setting's name and its sample value, as the API and the config name them.
fn fields() -> Vec<(String, Value)> {
    let (settings, money) = sample();
    let parts = [serde_json::to_value(settings).expect("json"), serde_json::to_value(money).expect("json")];
    parts.into_iter().flat_map(|p| p.as_object().cloned().unwrap_or_default()).collect()
}

fn as_toml(value: &Value) -> String {
    let value: toml::Value = serde_json::from_value(value.clone()).expect("a setting is a TOML value");
    value.to_string()
}

/// The JSON of `KeyStatus` for a pool holding `entry`.
fn api_view(config: &KeyConfig) -> Value {
    let entry = config.entry(Secret::new("sk-round-trip-0123456789"));
    let pool = Pool::new(vec![entry], Markers::new(&Secret::new("round-trip")));
    let status = pool.status(crate::clock::Clock::system().now(), 0).pop().expect("one key");
    serde_json::to_value(status).expect("json")
}

#[test]
fn the_sample_sets_every_setting_away_from_its_default() {
    let defaults = crate::config::defaults::defaults();
    for (field, value) in fields() {
        let default = defaults.iter().find_map(|d| d.get(&field)).expect("a default");
        assert_ne!(&value, default, "{field}: give it a value other than its default in `sample`");
    }
}

#[test]
fn each_setting_goes_from_the_config_to_the_key_the_api_and_typescript() {
    let types = super::typescript::typescript();
    for (field, value) in fields() {
        let text = format!("[[keys]]\nid = \"k_1\"\nlabel = \"work\"\n{field} = {}\n", as_toml(&value));
        let config = Config::parse(&text, std::path::Path::new("c.toml")).unwrap_or_else(|e| panic!("{field}: {e}"));
        let key = &config.keys[0];
        let held = [serde_json::to_value(&key.settings).expect("json"), serde_json::to_value(key.money).expect("json")];
        assert_eq!(held.iter().find_map(|h| h.get(&field)), Some(&value), "{field}: read from the config file");
        assert_eq!(api_view(key).get(&field), Some(&value), "{field}: shown by the API's key view");
        let declared = |t: &str| {
            let decl = types.split(&format!("export type {t} = ")).nth(1).unwrap_or_default();
            decl.split("};").next().unwrap_or_default().contains(&format!("\n{field}: "))
        };
        assert!(declared("KeyStatus"), "{field}: in the dashboard's type of a key");
        assert!(declared("NewKey"), "{field}: in the dashboard's type of a new key");
        assert!(declared("KeySettings") || declared("MoneyBudget"), "{field}: in the settings' own type");
    }
}

#[test]
fn each_setting_is_taken_by_a_new_key_and_a_change_and_written_back_to_the_config() {
    for (field, value) in fields() {
        let body = serde_json::json!({ "label": "work", "secret": "sk-round-trip-0123456789", field.clone(): value });
        let new: NewKey = serde_json::from_value(body).unwrap_or_else(|e| panic!("{field}: {e}"));
        let config = control::key_config(KeyId::new("k_1"), &new);
        assert_eq!(api_view(&config).get(&field), Some(&value), "{field}: a new key keeps it");

        let change =
            KeyChanges::read(serde_json::json!({ field.clone(): value })).unwrap_or_else(|e| panic!("{field}: {e}"));
        let mut changed = control::key_config(KeyId::new("k_1"), &NewKey::openai("work".into(), Secret::new("sk-x")));
        control::apply_changes(&mut changed, &change).unwrap_or_else(|e| panic!("{field}: {e}"));
        assert_eq!(api_view(&changed).get(&field), Some(&value), "{field}: a change sets it");

        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config.toml");
        let written = Config { keys: vec![changed.clone()], ..Config::default() };
        written.save(&path).expect("saved");
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(text.contains(&format!("{field} = ")), "{field}: written to the file:\n{text}");
        assert_eq!(Config::load(&path).expect("loaded").keys[0], changed, "{field}: read back");
    }
    let plain = control::key_config(KeyId::new("k_1"), &NewKey::openai("work".into(), Secret::new("sk-x")));
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("config.toml");
    Config { keys: vec![plain.clone()], ..Config::default() }.save(&path).expect("saved");
    let text = std::fs::read_to_string(&path).expect("read");
    for (field, _) in fields() {
        assert!(!text.contains(&format!("{field} = ")), "{field} at its default is left out:\n{text}");
    }
    assert_eq!(plain.provider, ProviderId::Openai);
}
