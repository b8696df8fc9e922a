//! One model as Codex's catalog describes it (a `ModelInfo`), from Keymux's own table.
//!
//! `codex_models.json` holds the models Codex 0.171 bundles and lists in its picker (`codex debug
//! models --bundled`), each entry as bundled except: `base_instructions` is kept once per distinct
//! prompt in `prompts/` (the entry's `prompt` names it); `model_messages`, `upgrade` and
//! `availability_nux` are left out (ChatGPT product prompts and nudges toward models a pool may not
//! serve); and the four models OpenAI serves in the ultrafast tier (GPT-6.2 Sol and Astra, GPT-6
//! Astra, GPT-6.1 Sol) offer it next to Fast. Codex sends an entry's `base_instructions` as the model's
//! prompt and sends none for an entry that has none, so every entry carries one: a model Codex does not
//! bundle gets the prompt Codex itself uses for such a model (`prompts/generic.md`). To refresh the
//! table for a new Codex, copy the listed entries of its bundled catalog the same way.
//!
//! The tiers an entry offers (`service_tiers`, `additional_speed_tiers`, `default_service_tier`) are
//! those its pool's policies let a request be served in (`PoolPolicies::offers`): Fast only where
//! `allow_priority`, ultrafast only where `allow_ultrafast` as well. A model Codex does not bundle
//! offers no tier above the standard one: nothing says it has one.

use std::sync::LazyLock;

use serde_json::{json, Map, Value};

use crate::pools::PoolPolicies;
use crate::spend::ServiceTier;

/// Keymux's table: the models Codex bundles, by slug, in Codex's order.
static TABLE: LazyLock<Vec<Map<String, Value>>> = LazyLock::new(|| {
    let table: Value = serde_json::from_str(include_str!("codex_models.json")).unwrap_or_default();
    let models = table.get("models").and_then(Value::as_array).cloned().unwrap_or_default();
    models.into_iter().filter_map(|m| m.as_object().cloned()).collect()
});

/// The prompt the table's entry names (`generic` for a model Codex does not bundle).
fn prompt(name: &str) -> &'static str {
    match name {
        "gpt-6.2-sol" => include_str!("prompts/gpt-6.2-sol.md"),
        "gpt-6-astra" => include_str!("prompts/gpt-6-astra.md"),
        "gpt-6.1-sol" => include_str!("prompts/gpt-6.1-sol.md"),
        "gpt-6-sol" => include_str!("prompts/gpt-6-sol.md"),
        "gpt-6-luna" => include_str!("prompts/gpt-6-luna.md"),
        "gpt-5.6-sol" => include_str!("prompts/gpt-5.6-sol.md"),
        "gpt-5.5" => include_str!("prompts/gpt-5.5.md"),
        _ => include_str!("prompts/generic.md"),
    }
}

/// Where the table puts `slug` (Codex's `priority`), if Codex bundles it.
pub fn bundled_rank(slug: &str) -> Option<i64> {
    TABLE.iter().find(|m| m.get("slug").and_then(Value::as_str) == Some(slug)).map(rank)
}

fn rank(entry: &Map<String, Value>) -> i64 {
    entry.get("priority").and_then(Value::as_i64).unwrap_or(i64::MAX)
}

/// Whether a model Codex does not bundle can be a Codex model at all: not an embedding, moderation,
/// audio, speech, realtime, image, video or legacy completions model (OpenAI's `GET /models` lists
/// them all beside the text models).
pub fn is_text_model(slug: &str) -> bool {
    const FAMILIES: [&str; 11] = [
        "text-embedding",
        "embedding",
        "omni-moderation",
        "text-moderation",
        "whisper",
        "tts",
        "dall-e",
        "gpt-image",
        "sora",
        "davinci",
        "babbage",
    ];
    const KINDS: [&str; 6] = ["-realtime", "-audio", "-transcribe", "-tts", "-search", "-image"];
    !FAMILIES.iter().any(|f| slug.starts_with(f)) && !KINDS.iter().any(|k| slug.contains(k))
}

/// The catalog entry for `slug` under `policies`; `rank` orders a model Codex does not bundle after
/// the bundled ones.
pub fn entry(slug: &str, policies: &PoolPolicies, rank: i64) -> Value {
    let table = TABLE.iter().find(|m| m.get("slug").and_then(Value::as_str) == Some(slug));
    let mut entry = match table {
        Some(bundled) => bundled.clone(),
        None => generic(slug, rank),
    };
    let prompt_name = entry.remove("prompt");
    let name = prompt_name.as_ref().and_then(Value::as_str).unwrap_or("generic");
    entry.insert("base_instructions".into(), Value::from(prompt(name)));
    offered_tiers(&mut entry, policies);
    Value::Object(entry)
}

/// An entry for a model Codex does not bundle: listed under its own name, Codex's shell and a plain
/// truncation, no reasoning levels (the model's own default applies; a model without reasoning would
/// refuse an effort), no tier above the standard one.
fn generic(slug: &str, rank: i64) -> Map<String, Value> {
    let value = json!({
        "slug": slug,
        "display_name": slug,
        "description": "Served by your Keymux pool.",
        "supported_reasoning_levels": [],
        "shell_type": "shell_command",
        "visibility": "list",
        "supported_in_api": true,
        "priority": rank,
        "support_verbosity": false,
        "truncation_policy": {"mode": "tokens", "limit": 10000},
        "experimental_supported_tools": [],
        "input_modalities": ["text"],
        "service_tiers": [],
        "additional_speed_tiers": [],
    });
    value.as_object().cloned().unwrap_or_default()
}

/// Keeps only the tiers `policies` offer.
fn offered_tiers(entry: &mut Map<String, Value>, policies: &PoolPolicies) {
    let offered = |tier: Option<&str>| policies.offers(ServiceTier::from_response(tier));
    if let Some(Value::Array(tiers)) = entry.get_mut("service_tiers") {
        tiers.retain(|t| offered(t.get("id").and_then(Value::as_str)));
    }
    if let Some(Value::Array(tiers)) = entry.get_mut("additional_speed_tiers") {
        tiers.retain(|t| offered(t.as_str()));
    }
    if entry.get("default_service_tier").is_some_and(|t| !offered(t.as_str())) {
        entry.remove("default_service_tier");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiers(entry: &Value) -> (Vec<String>, Vec<String>, Option<String>) {
        let ids = entry["service_tiers"].as_array().into_iter().flatten();
        let ids = ids.filter_map(|t| t["id"].as_str().map(str::to_owned)).collect();
        let speed = entry["additional_speed_tiers"].as_array().into_iter().flatten();
        let speed = speed.filter_map(|t| t.as_str().map(str::to_owned)).collect();
        (ids, speed, entry["default_service_tier"].as_str().map(str::to_owned))
    }

    fn policies(allow_priority: bool, allow_ultrafast: bool) -> PoolPolicies {
        PoolPolicies { allow_priority, allow_ultrafast, ..PoolPolicies::default() }
    }

    #[test]
    fn the_table_has_codexs_listed_models_each_with_its_prompt() {
        assert_eq!(TABLE.len(), 11, "the models Codex 0.171 lists in its picker");
        for model in TABLE.iter() {
            let slug = model["slug"].as_str().unwrap_or_default();
            let entry = entry(slug, &PoolPolicies::default(), 0);
            let prompt = entry["base_instructions"].as_str().unwrap_or_default();
            assert!(prompt.starts_with("You are Codex"), "{slug} has its own prompt");
            assert!(entry.get("prompt").is_none(), "the table's own field stays in the table");
        }
        assert!(prompt("unknown").starts_with("You are a coding agent running in the Codex CLI"));
    }

    #[test]
    fn tiers_follow_the_pools_policies() {
        let all = tiers(&entry("gpt-6.2-sol", &policies(true, true), 0));
        assert_eq!(all.0, ["priority", "ultrafast"]);
        assert_eq!(all.1, ["fast", "ultrafast"]);
        let no_ultra = tiers(&entry("gpt-6.2-sol", &policies(true, false), 0));
        assert_eq!((no_ultra.0, no_ultra.1), (vec!["priority".to_owned()], vec!["fast".to_owned()]));
        for (priority, ultra) in [(false, true), (false, false)] {
            let none = tiers(&entry("gpt-6.2-sol", &policies(priority, ultra), 0));
            assert!(none.0.is_empty() && none.1.is_empty(), "{none:?}");
        }
        assert_eq!(tiers(&entry("gpt-6-sol", &policies(true, true), 0)).2.as_deref(), Some("priority"));
        assert_eq!(tiers(&entry("gpt-6-sol", &policies(false, true), 0)).2, None, "no default it cannot offer");
    }

    #[test]
    fn a_model_codex_does_not_bundle_gets_the_generic_entry() {
        let entry = entry("gpt-4.1", &PoolPolicies::default(), 100);
        assert_eq!(entry["display_name"], "gpt-4.1");
        assert_eq!(entry["priority"], 100);
        assert_eq!(tiers(&entry), (vec![], vec![], None));
        assert_eq!(bundled_rank("gpt-4.1"), None);
        assert_eq!(bundled_rank("gpt-6.2-sol"), Some(1));
    }

    #[test]
    fn only_text_models_are_offered() {
        for slug in ["gpt-4.1", "gpt-5-mini", "o3", "gpt-6.2-sol", "my-fine-tune"] {
            assert!(is_text_model(slug), "{slug}");
        }
        for slug in ["text-embedding-3-small", "whisper-1", "tts-1-hd", "gpt-4o-realtime-preview", "dall-e-3"] {
            assert!(!is_text_model(slug), "{slug}");
        }
    }
}
