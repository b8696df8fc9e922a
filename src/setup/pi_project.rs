//! A project's `.pi/settings.json`: `defaultProvider` naming a pool's provider (`keymux-work`) and
//! `defaultModel` one of its models. pi merges this file over its global settings when it starts in
//! exactly that directory (not in a subdirectory): pi 0.73 with no prompt, pi 1.x once the project is
//! trusted (it asks once; `--approve` trusts it for one run, as `-p` cannot ask). Every other key the
//! user has there keeps its value and place; nothing secret is written (the token is in `models.json`).

use serde_json::{Map, Value};

use super::edited::{Edited, Refusal};
use super::provider_id;

/// The settings with the pool's provider and model chosen.
pub(super) fn edit(text: &str, pool: &str, model: &str) -> Result<Edited, Refusal> {
    let mut root: Value = if text.trim().is_empty() {
        Value::Object(Map::new())
    } else {
        serde_json::from_str(text).map_err(|e| Refusal::Syntax(e.to_string()))?
    };
    let settings =
        root.as_object_mut().ok_or_else(|| Refusal::Shape("it must hold a JSON object of settings".into()))?;
    let provider = provider_id(Some(pool));
    let wanted = [("defaultProvider", provider.as_str()), ("defaultModel", model)];
    if wanted.iter().all(|(key, value)| settings.get(*key).and_then(Value::as_str) == Some(*value)) {
        // Already set up: the file is left exactly as it is, however it is formatted.
        return Ok(Edited::whole(text.to_owned(), Vec::new()));
    }
    let mut notes = Vec::new();
    for (key, value) in wanted {
        if let Some(old) = settings.get(key).filter(|old| old.as_str() != Some(value)) {
            notes.push(format!("{key} was {old} here; it is now \"{value}\" (Undo puts {old} back)"));
        }
        settings.insert(key.into(), value.into());
    }
    notes.push(format!(
        "pi uses the pool '{pool}' when it starts in exactly this directory, not in its subdirectories \
         (pi 1.x once you trust the project: it asks the first time, and `pi -p` needs `--approve`); \
         `pi -c` keeps each session's own pool. Picking a model with /model writes pi's global settings \
         (every directory): for a one-off, start pi with `--provider {provider} --model {model}` instead"
    ));
    let mut text = serde_json::to_string_pretty(&root).map_err(|e| Refusal::Shape(e.to_string()))?;
    text.push('\n');
    Ok(Edited::whole(text, notes))
}

#[cfg(test)]
mod tests {
    #![expect(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn a_new_file_selects_the_pools_provider_and_model() {
        let edited = edit("", "work", "gpt-5.5").unwrap();
        assert_eq!(edited.text, "{\n  \"defaultProvider\": \"keymux-work\",\n  \"defaultModel\": \"gpt-5.5\"\n}\n");
        assert!(edited.notes.iter().any(|n| n.contains("exactly this directory")), "{:?}", edited.notes);
    }

    #[test]
    fn other_settings_stay_in_place_and_a_replaced_choice_is_named() {
        let mine = r#"{"theme": "dark", "defaultProvider": "openai", "shellPath": "/bin/zsh"}"#;
        let edited = edit(mine, "work", "gpt-5.5").unwrap();
        let after: Value = serde_json::from_str(&edited.text).unwrap();
        let keys: Vec<&String> = after.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["theme", "defaultProvider", "shellPath", "defaultModel"]);
        assert_eq!(after["defaultProvider"], "keymux-work");
        assert_eq!(after["theme"], "dark");
        assert!(edited.notes[0].contains("defaultProvider was \"openai\""), "{:?}", edited.notes);
    }

    #[test]
    fn a_project_set_up_already_is_left_byte_for_byte() {
        let compact = r#"{"defaultModel":"gpt-5.5","defaultProvider":"keymux-work"}"#;
        let edited = edit(compact, "work", "gpt-5.5").unwrap();
        assert_eq!(edited.text, compact);
        assert!(edited.notes.is_empty());
        assert_ne!(edit(compact, "personal", "gpt-5.5").unwrap().text, compact, "another pool is a change");
    }

    #[test]
    fn settings_keymux_cannot_read_are_refused() {
        assert!(matches!(edit("{\"theme\": ", "work", "gpt-5.5"), Err(Refusal::Syntax(_))));
        assert!(matches!(edit("[\"x\"]", "work", "gpt-5.5"), Err(Refusal::Shape(_))));
    }
}
