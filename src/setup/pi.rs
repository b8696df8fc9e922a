//! pi's `models.json`: a `providers.keymux` entry (`keymux-<pool>` for a pool) with the base URL, the
//! Responses API and the client token as a literal `apiKey`, which needs nothing exported and means
//! the same to pi 0.73 and pi 1.x: a token Keymux makes (`km-` and URL-safe base64) is neither a
//! variable's name (pi 0.73 reads a bare `NAME` as one), nor holds a `$` (pi 1.x reads `$NAME` and
//! `${NAME}` as one), nor starts with `!` (both run a `!command`). Every other provider and key keeps
//! its place (`serde_json` keeps the order of keys); the file is written with 2-space indentation and
//! a final newline.

use serde_json::{json, Map, Value};

use super::edited::{Edited, Refusal};
use super::provider_id;

/// The models a new Keymux provider offers pi, as the user guide shows them (docs/src/guide/clients.md).
fn default_models(pool: Option<&str>) -> Value {
    let name = match pool {
        None => "gpt-5.5 via Keymux".to_owned(),
        Some(pool) => format!("gpt-5.5 via Keymux ({pool})"),
    };
    json!([{
        "id": "gpt-5.5",
        "name": name,
        "reasoning": true,
        "input": ["text", "image"],
        "contextWindow": 400000,
        "maxTokens": 128000
    }])
}

/// The file with a Keymux provider in it. Keymux owns the connection (`baseUrl`, `api`, `apiKey`);
/// models the user listed under it, and any other key, stay.
pub(super) fn edit(text: &str, pool: Option<&str>, base_url: &str, token: &str) -> Result<Edited, Refusal> {
    let mut root: Value = if text.trim().is_empty() {
        Value::Object(Map::new())
    } else {
        serde_json::from_str(text).map_err(|e| Refusal::Syntax(e.to_string()))?
    };
    let providers = root
        .as_object_mut()
        .ok_or_else(|| Refusal::Shape("it must hold a JSON object, {\"providers\": {…}}".into()))?
        .entry("providers")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
        .ok_or_else(|| Refusal::Shape("\"providers\" must be an object".into()))?;
    let provider = provider_id(pool);
    let mut notes = Vec::new();
    let existing = providers.get(&provider);
    let mut keymux = match existing {
        Some(Value::Object(entry)) => entry.clone(),
        Some(_) => {
            notes.push(format!("providers.{provider} was not an object; it is replaced"));
            Map::new()
        }
        None => Map::new(),
    };
    keymux.insert("baseUrl".into(), base_url.into());
    keymux.insert("api".into(), "openai-responses".into());
    keymux.insert("apiKey".into(), token.into());
    if token.contains('$') || token.starts_with('!') {
        notes.push(
            "the client token holds a `$` or starts with `!`, which pi 1.x reads as a variable or a command: \
             give pi a token Keymux makes (`keymux token revoke pi`, then set up again)"
                .into(),
        );
    }
    if keymux.get("models").and_then(Value::as_array).is_none_or(Vec::is_empty) {
        keymux.insert("models".into(), default_models(pool));
    }
    let keymux = Value::Object(keymux);
    if existing == Some(&keymux) {
        // Already set up: the file is left exactly as it is, however it is formatted.
        return Ok(Edited::whole(text.to_owned(), notes));
    }
    providers.insert(provider.clone(), keymux);
    let mut text = serde_json::to_string_pretty(&root).map_err(|e| Refusal::Shape(e.to_string()))?;
    text.push('\n');
    notes.push(match pool {
        None => "pi uses it when you pick it: `pi --provider keymux --model gpt-5.5`, or /model in pi (or set \
                 \"defaultProvider\": \"keymux\" in settings.json)"
            .into(),
        Some(_) => {
            format!("the project's .pi/settings.json selects {provider}; every other directory keeps its choice")
        }
    });
    Ok(Edited::whole(text, notes))
}

/// The id of the first model `provider` lists in the models file `text`.
pub(super) fn first_model(text: &str, provider: &str) -> Option<String> {
    let root: Value = serde_json::from_str(text).ok()?;
    root["providers"][provider]["models"].as_array()?.iter().find_map(|m| m["id"].as_str()).map(str::to_owned)
}

#[cfg(test)]
mod tests {
    #![expect(clippy::unwrap_used, reason = "tests")]
    use super::*;

    const BASE: &str = "http://127.0.0.1:8787/v1";
    const TOKEN: &str = "km-unit-test-token-5c1e0a97d3b2";

    /// A models.json with two providers of the user's, keys in an order no sorting would give.
    const SAMPLE: &str = r#"{
  "providers": {
    "zeta": {"baseUrl": "http://127.0.0.1:9/v1", "api": "openai-completions", "apiKey": "ZETA_KEY",
             "models": [{"id": "z-1", "contextWindow": 8000}]},
    "alpha": {"baseUrl": "http://127.0.0.1:10/v1", "apiKey": "!pass show alpha", "api": "openai-responses",
              "models": []}
  },
  "comment": "mine"
}"#;

    #[test]
    fn other_providers_and_the_order_of_keys_are_kept() {
        let edited = edit(SAMPLE, None, BASE, TOKEN).unwrap();
        let before: Value = serde_json::from_str(SAMPLE).unwrap();
        let after: Value = serde_json::from_str(&edited.text).unwrap();
        let names: Vec<&String> = after["providers"].as_object().unwrap().keys().collect();
        assert_eq!(names, ["zeta", "alpha", "keymux"]);
        let top: Vec<&String> = after.as_object().unwrap().keys().collect();
        assert_eq!(top, ["providers", "comment"]);
        let alpha: Vec<&String> = after["providers"]["alpha"].as_object().unwrap().keys().collect();
        assert_eq!(alpha, ["baseUrl", "apiKey", "api", "models"]);
        assert_eq!(after["providers"]["zeta"], before["providers"]["zeta"]);
        assert_eq!(after["providers"]["alpha"], before["providers"]["alpha"]);
        assert!(edited.text.ends_with("}\n") && edited.text.contains("\n  \"providers\": {\n    \"zeta\""));
    }

    /// A token Keymux makes is a literal to pi 0.73 and pi 1.x alike; one that is not is said so.
    #[test]
    fn the_token_means_the_same_to_pi_0_73_and_1_x() {
        for _ in 0..64 {
            let made = crate::secrets::generate(crate::tokens::TOKEN_PREFIX);
            let token = made.expose();
            assert!(!token.contains('$') && !token.starts_with('!'), "{token}");
            assert!(token.chars().any(|c| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')), "{token}");
            assert!(edit("", None, BASE, token).unwrap().notes.iter().all(|n| !n.contains("pi 1.x reads")));
        }
        let notes = edit("", None, BASE, "km-my-own-$HOME-token-0123456789").unwrap().notes;
        assert!(notes.iter().any(|n| n.contains("pi 1.x reads as")), "{notes:?}");
    }

    /// The shape the facts about pi 0.73 describe for a Responses provider (`baseUrl`, `api`, `apiKey`,
    /// `models` with id, name, reasoning, input, contextWindow, maxTokens), with the literal token.
    #[test]
    fn the_keymux_provider_has_the_shape_pi_reads() {
        let after: Value = serde_json::from_str(&edit("", None, BASE, TOKEN).unwrap().text).unwrap();
        let keymux = &after["providers"]["keymux"];
        let keys: Vec<&String> = keymux.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["baseUrl", "api", "apiKey", "models"]);
        assert_eq!(keymux["baseUrl"], BASE);
        assert_eq!(keymux["api"], "openai-responses");
        assert_eq!(keymux["apiKey"], TOKEN);
        assert_eq!(
            keymux["models"],
            json!([{"id": "gpt-5.5", "name": "gpt-5.5 via Keymux", "reasoning": true, "input": ["text", "image"],
                    "contextWindow": 400000, "maxTokens": 128000}])
        );
    }

    #[test]
    fn a_second_edit_changes_nothing_and_a_new_token_changes_only_the_key() {
        let once = edit(SAMPLE, None, BASE, TOKEN).unwrap().text;
        assert_eq!(edit(&once, None, BASE, TOKEN).unwrap().text, once);
        let compact = serde_json::to_string(&serde_json::from_str::<Value>(&once).unwrap()).unwrap();
        assert_eq!(edit(&compact, None, BASE, TOKEN).unwrap().text, compact, "set up already: not even reformatted");
        let again = edit(&once, None, BASE, "km-another-token-9f8e7d6c5b4a").unwrap().text;
        let changed: Vec<_> = once.lines().zip(again.lines()).filter(|(a, b)| a != b).collect();
        assert_eq!(changed.len(), 1, "{changed:?}");
        assert!(changed[0].1.contains("\"apiKey\": \"km-another-token-9f8e7d6c5b4a\""));
    }

    #[test]
    fn models_the_user_listed_under_keymux_stay() {
        let mine = r#"{"providers": {"keymux": {"baseUrl": "http://127.0.0.1:1/v1", "api": "openai-responses",
            "apiKey": "KEYMUX_TOKEN", "models": [{"id": "gpt-5.5-mini"}]}}}"#;
        let after: Value = serde_json::from_str(&edit(mine, None, BASE, TOKEN).unwrap().text).unwrap();
        assert_eq!(after["providers"]["keymux"]["models"], json!([{"id": "gpt-5.5-mini"}]));
        assert_eq!(after["providers"]["keymux"]["apiKey"], TOKEN);
    }

    #[test]
    fn files_keymux_cannot_read_are_refused() {
        assert!(matches!(edit("{\"providers\": {", None, BASE, TOKEN), Err(Refusal::Syntax(_))));
        assert!(matches!(edit("[]", None, BASE, TOKEN), Err(Refusal::Shape(_))));
        assert!(matches!(edit("{\"providers\": []}", None, BASE, TOKEN), Err(Refusal::Shape(_))));
    }
}
