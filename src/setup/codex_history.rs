//! Codex's `config.toml` in the history-keeping form: one top-level `openai_base_url` line points the
//! built-in `openai` provider at Keymux, and `model_provider` is left alone, so Codex keeps recording
//! (and listing, and resuming) sessions under `openai` as it did before Keymux. Codex 0.171 reads that
//! key only at the top level; a `[model_providers.openai]` table is refused (a reserved id) and two
//! `openai_base_url` lines stop Codex from starting, so there is exactly one line and it is ours.
//!
//! A config set up the old way (`model_provider = "keymux"` and a `[model_providers.keymux]` table) is
//! moved over: the `model_provider` line goes, the table stays, so the sessions Codex recorded under
//! `keymux` can still be resumed (`codex resume -c model_provider=keymux <id>`).
//!
//! No `model_catalog_url` goes here (it does in the custom provider's form, `codex`): Codex 0.171 takes
//! the built-in provider's catalog only from a ChatGPT host ("model_providers.openai.model_catalog_url
//! must use an allowed ChatGPT host"), so in this form Codex keeps its own model list.
//!
//! Undo is surgical: only Keymux's line is taken out (or the value it replaced put back); everything
//! Codex or the user wrote since stays byte for byte.

use toml_edit::{DocumentMut, Item};

use super::codex::set_str;
use super::edited::Surgical;
use super::edited::{Edited, Refusal, Remedy};
use super::PROVIDER;

/// The top-level key Codex reads as the built-in provider's base URL.
pub(super) const KEY: &str = "openai_base_url";

/// What a config set up earlier tells this setup: the value Keymux wrote last time and the value that
/// line replaced (from the setup record), so a moved gateway is not mistaken for someone else's URL.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Prior {
    pub(super) ours: Option<String>,
    pub(super) replaced: bool,
}

/// The file with the built-in provider pointed at `base_url`. Refused when another `openai_base_url`
/// is there, unless `force` (its value is kept for Undo).
pub(super) fn edit(text: &str, base_url: &str, force: bool, prior: &Prior) -> Result<Edited, Refusal> {
    let mut doc = parse(text)?;
    let mut notes = Vec::new();
    let current = top_string(&doc, KEY)?;
    let replaced = match current.as_deref() {
        None => false,
        Some(now) if now == base_url || Some(now) == prior.ours.as_deref() => prior.replaced,
        Some(now) if force => {
            notes.push(format!("{KEY} was \"{now}\"; Codex now reaches Keymux instead (Undo puts \"{now}\" back)"));
            true
        }
        Some(now) => {
            return Err(Refusal::Conflict(
                format!(
                    "it already sets {KEY} = \"{now}\", which is not Keymux's: Codex sends its requests there now. \
                 Set up anyway with --force (Undo puts \"{now}\" back), or remove that line first"
                ),
                Remedy::Force,
            ))
        }
    };
    let dropped_provider = old_form(&doc);
    let chosen = top_string(&doc, "model_provider")?;
    if let Some(other) = chosen.filter(|p| p != "openai" && !dropped_provider) {
        return Err(Refusal::Conflict(
            format!(
                "it chooses model_provider = \"{other}\", so Codex does not use its built-in provider, which is the \
             one Keymux points at. Set up with --custom-provider instead (it replaces that choice, Undo puts it \
             back; Codex's sessions then live under the provider `{PROVIDER}`), or remove that line first"
            ),
            Remedy::CustomProvider,
        ));
    }
    if dropped_provider {
        doc.as_table_mut().remove("model_provider");
        notes.push(format!(
            "moved over from the old setup: `model_provider = \"{PROVIDER}\"` is removed, so new sessions are \
             recorded under Codex's own `openai` provider with the sessions from before Keymux. The \
             [model_providers.{PROVIDER}] table stays, so the sessions recorded under `{PROVIDER}` still resume: \
             {}",
            resume_command()
        ));
    }
    set_top(&mut doc, KEY, base_url);
    let surgical = Surgical::BaseUrl { value: base_url.to_owned(), replaced, dropped_provider };
    Ok(Edited { text: doc.to_string(), notes, surgical: Some(surgical) })
}

/// The command that resumes a session Codex recorded under Keymux's old provider (verified with Codex
/// 0.171: the `-c` override keeps the provider the session was recorded with).
pub fn resume_command() -> String {
    format!("codex resume -c model_provider={PROVIDER} <SESSION_ID> (or `codex exec resume -c model_provider={PROVIDER} <SESSION_ID> \"…\"`)")
}

/// Whether the config was set up the old way: `model_provider = "keymux"` with its table.
pub(super) fn old_form(doc: &DocumentMut) -> bool {
    let selected = doc.get("model_provider").and_then(Item::as_str) == Some(PROVIDER);
    let table = doc
        .get("model_providers")
        .and_then(Item::as_table_like)
        .is_some_and(|providers| providers.contains_key(PROVIDER));
    selected && table
}

/// Takes Keymux's line back out of `text`: removed, or the value it replaced put back. `Err` with the
/// value found when the line is not the one Keymux wrote (`None`: it is gone).
pub(super) fn remove(
    text: &str,
    value: &str,
    replaced: Option<&str>,
) -> Result<Result<String, Option<String>>, Refusal> {
    let mut doc = parse(text)?;
    let now = top_string(&doc, KEY)?;
    if now.as_deref() != Some(value) {
        return Ok(Err(now));
    }
    match replaced {
        Some(old) => set_top(&mut doc, KEY, old),
        None => {
            doc.as_table_mut().remove(KEY);
        }
    }
    Ok(Ok(doc.to_string()))
}

/// Whether the top-level line still says `value`; `false` for a file that cannot be read as TOML.
pub(super) fn holds(text: &str, value: &str) -> bool {
    value_in(text).as_deref() == Some(value)
}

/// The top-level `openai_base_url` of a config (a backup's, for Undo); `None` when there is none or the
/// text is not TOML.
pub(super) fn value_in(text: &str) -> Option<String> {
    parse(text).ok().and_then(|doc| top_string(&doc, KEY).ok().flatten())
}

fn parse(text: &str) -> Result<DocumentMut, Refusal> {
    text.parse().map_err(|e: toml_edit::TomlError| Refusal::Syntax(e.to_string()))
}

/// A top-level string setting; refused when it is there but not a string.
fn top_string(doc: &DocumentMut, key: &str) -> Result<Option<String>, Refusal> {
    match doc.get(key) {
        None => Ok(None),
        Some(item) => item
            .as_str()
            .map(|s| Some(s.to_owned()))
            .ok_or_else(|| Refusal::Shape(format!("`{key}` must be a string (a URL)"))),
    }
}

/// Sets a root key: always written before the first table, keeping the comment after a replaced
/// value and leaving an equal one untouched.
fn set_top(doc: &mut DocumentMut, key: &str, value: &str) {
    set_str(doc.as_table_mut(), key, value);
}

#[cfg(test)]
mod tests {
    #![expect(clippy::unwrap_used, reason = "tests")]
    use super::*;

    const BASE: &str = "http://127.0.0.1:8787/v1";

    /// A config Codex and its user wrote: settings, comments, a provider, a project's trust.
    const SAMPLE: &str = "# mine\nmodel = \"gpt-5.5\"   # default\n\n[model_providers.other]\nname = \"Other\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\n[projects.\"/home/me/src\"]\ntrust_level = \"trusted\"\n";

    fn lines(text: &str) -> Vec<&str> {
        text.split_inclusive('\n').collect()
    }

    fn changes(old: &str, new: &str) -> (Vec<String>, Vec<String>) {
        super::super::diff::changed_lines(&lines(old), &lines(new))
    }

    #[test]
    fn one_line_is_added_before_the_first_table_and_nothing_else_changes() {
        let edited = edit(SAMPLE, BASE, false, &Prior::default()).unwrap();
        let (removed, added) = changes(SAMPLE, &edited.text);
        assert!(removed.is_empty(), "{removed:?}");
        assert_eq!(added, [format!("{KEY} = \"{BASE}\"\n")]);
        assert!(edited.text.find(KEY).unwrap() < edited.text.find("\n[").unwrap(), "{}", edited.text);
        assert!(edited.text.contains("model = \"gpt-5.5\"   # default\n"));
        assert!(!edited.text.contains("model_provider ="), "model_provider is left alone");
        assert_eq!(
            edited.surgical,
            Some(Surgical::BaseUrl { value: BASE.into(), replaced: false, dropped_provider: false })
        );
    }

    #[test]
    fn an_empty_file_gets_the_line_and_editing_again_changes_nothing() {
        let once = edit("", BASE, false, &Prior::default()).unwrap().text;
        assert_eq!(once, format!("{KEY} = \"{BASE}\"\n"));
        assert_eq!(edit(&once, BASE, false, &Prior::default()).unwrap().text, once);
    }

    #[test]
    fn someone_elses_base_url_is_refused_by_name_unless_forced_and_then_kept_for_undo() {
        let text = format!("{KEY} = \"https://proxy.example/v1\" # corp\n{SAMPLE}");
        let Err(Refusal::Conflict(why, Remedy::Force)) = edit(&text, BASE, false, &Prior::default()) else {
            panic!("refused")
        };
        assert!(why.contains("https://proxy.example/v1") && why.contains("--force"), "{why}");
        let forced = edit(&text, BASE, true, &Prior::default()).unwrap();
        assert_eq!(changes(&text, &forced.text).1, [format!("{KEY} = \"{BASE}\" # corp\n")]);
        let Some(Surgical::BaseUrl { replaced, .. }) = forced.surgical else { panic!() };
        assert!(replaced, "Undo puts it back, from the backup");
        assert_eq!(value_in(&text).as_deref(), Some("https://proxy.example/v1"), "what Undo reads back");
        let undone = remove(&forced.text, BASE, Some("https://proxy.example/v1")).unwrap().unwrap();
        assert_eq!(undone, text, "byte for byte");
    }

    #[test]
    fn keymuxs_own_earlier_url_is_replaced_without_force_and_keeps_what_it_replaced() {
        let text = format!("{KEY} = \"http://127.0.0.1:1/v1\"\n{SAMPLE}");
        let prior = Prior { ours: Some("http://127.0.0.1:1/v1".into()), replaced: true };
        let edited = edit(&text, BASE, false, &prior).unwrap();
        let Some(Surgical::BaseUrl { replaced, .. }) = edited.surgical else { panic!() };
        assert!(replaced, "still Undo's to put back");
    }

    #[test]
    fn undo_after_codex_edited_the_file_takes_out_only_keymuxs_line() {
        let edited = edit(SAMPLE, BASE, false, &Prior::default()).unwrap().text;
        // What Codex 0.171 appends itself: a project's trust and its notices.
        let codex = format!("{edited}\n[projects.\"/tmp/work\"]\ntrust_level = \"trusted\"\n\n[notice]\nhide_full_access_warning = true\n");
        let undone = remove(&codex, BASE, None).unwrap().unwrap();
        let (removed, added) = changes(&codex, &undone);
        assert_eq!(removed, [format!("{KEY} = \"{BASE}\"\n")]);
        assert!(added.is_empty(), "{added:?}");
        assert!(undone.starts_with(SAMPLE), "the user's text is as it was:\n{undone}");
    }

    #[test]
    fn undo_refuses_when_keymuxs_line_was_changed_or_removed() {
        let edited = edit(SAMPLE, BASE, false, &Prior::default()).unwrap().text;
        let changed = edited.replace(BASE, "http://127.0.0.1:5/v1");
        assert_eq!(remove(&changed, BASE, None).unwrap(), Err(Some("http://127.0.0.1:5/v1".into())));
        assert_eq!(remove(SAMPLE, BASE, None).unwrap(), Err(None));
    }

    #[test]
    fn the_old_form_is_moved_over_keeping_the_keymux_table() {
        let old = format!(
            "model_provider = \"keymux\"\n{SAMPLE}\n[model_providers.keymux]\nname = \"Keymux\"\nbase_url = \"{BASE}\"\nwire_api = \"responses\"\nexperimental_bearer_token = \"km-x\"\n"
        );
        let edited = edit(&old, BASE, false, &Prior::default()).unwrap();
        let (removed, added) = changes(&old, &edited.text);
        assert_eq!(removed, ["model_provider = \"keymux\"\n"]);
        assert_eq!(added, [format!("{KEY} = \"{BASE}\"\n")]);
        assert!(edited.text.contains("[model_providers.keymux]\n"), "the table stays for the old sessions");
        assert!(edited.notes.iter().any(|n| n.contains("model_provider=keymux")), "{:?}", edited.notes);
        let Some(Surgical::BaseUrl { dropped_provider, .. }) = edited.surgical else { panic!() };
        assert!(dropped_provider);
    }

    #[test]
    fn a_config_that_chooses_another_provider_is_refused_and_openai_is_fine() {
        let text = format!("model_provider = \"other\"\n{SAMPLE}");
        let Err(Refusal::Conflict(why, Remedy::CustomProvider)) = edit(&text, BASE, true, &Prior::default()) else {
            panic!("refused")
        };
        assert!(why.contains("\"other\"") && why.contains("--custom-provider"), "{why}");
        let openai = format!("model_provider = \"openai\"\n{SAMPLE}");
        assert!(edit(&openai, BASE, false, &Prior::default()).unwrap().text.contains("model_provider = \"openai\"\n"));
    }

    #[test]
    fn files_that_are_not_toml_or_hold_a_non_string_url_are_refused() {
        assert!(matches!(edit("model = \"x\n[oops", BASE, false, &Prior::default()), Err(Refusal::Syntax(_))));
        assert!(matches!(edit(&format!("{KEY} = 3\n"), BASE, true, &Prior::default()), Err(Refusal::Shape(_))));
    }
}
