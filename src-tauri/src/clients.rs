//! "Set up Codex… / pi…" and their undo, from the tray: the change is shown in a dialog first, a
//! backup is kept, and nothing but the client's own entry changes (`keymux::setup` does the work and
//! keeps the record that makes Undo possible). The file gets a client token of its own, never a key.

use std::sync::Arc;

use keymux::api::types::{ImportDone, ImportOffer, ImportRequest, SetupRequest};
use keymux::control::setup::SetupPlaces;
use keymux::control::ControlError;
use keymux::gateway::Gateway;
use keymux::setup::{self, Client, Remedy, SetupError};

use crate::desk::{ask, say, Kind};
use crate::state::App;

/// Brings the menu up to date once a dialog's work is done (the tray passes its own).
pub type Refresh = fn(&App);

/// Whether a Codex and a pi setup can be undone now.
pub fn undo_available() -> (bool, bool) {
    let Some(state) = setup::default_state_dir() else { return (false, false) };
    let can = |client| setup::status(client, &state).ok().flatten().is_some();
    (can(Client::Codex), can(Client::Pi))
}

/// Shows what setting `client` up would change, and does it if the user agrees.
pub fn set_up(app: &App, gateway: &Arc<Gateway>, client: Client, refresh: Refresh) {
    let (app, gateway) = (app.clone(), gateway.clone());
    let spawner = app.clone();
    spawner.spawn(async move {
        let title = format!("Set up {client}");
        let dialog = |question: Question<'_>| match question {
            Question::Choice(text, yes) => ask(&app, &title, text, yes, "Cancel"),
            Question::Import(text) => ask(&app, &title, text, "Import it", "Keep it out"),
            Question::Apply(text) => ask(&app, &title, text, "Apply", "Cancel"),
        };
        let done = match SetupPlaces::of(client) {
            Ok(places) => set_up_in(&gateway, client, &places, dialog).await,
            Err(problem) => Err(problem.to_string()),
        };
        match done {
            Ok(Some(done)) => say(&app, &title, &done, Kind::Info),
            Ok(None) => {}
            Err(problem) => say(&app, &title, &problem, Kind::Error),
        }
        refresh(&app);
    });
}

/// What the setup asks the user, in order: a choice that makes a refused setup possible (the
/// custom-provider form, replacing another base URL), whether to import the API key Codex's
/// `auth.json` holds, then the change itself.
#[derive(Clone, Copy, Debug)]
enum Question<'a> {
    /// The refusal and the choice's button.
    Choice(&'a str, &'a str),
    /// Import the key `auth.json` holds?
    Import(&'a str),
    /// The change: apply it?
    Apply(&'a str),
}

/// The tray's setup, through the gateway's library flow (`Gateway::setup_offer`, then
/// `setup_apply`) that the dashboard and `keymux setup` share: the questions go to `ask` (the
/// dialogs), and once the user says yes the change is made, refused if a file changed while the
/// dialog was open. What to tell the user (`None`: they said no).
async fn set_up_in(
    gateway: &Gateway,
    client: Client,
    places: &SetupPlaces,
    mut ask: impl FnMut(Question<'_>) -> bool,
) -> Result<Option<String>, String> {
    let mut request = SetupRequest::default();
    let mut import_asked = false;
    let offer = loop {
        let offer = match gateway.setup_offer(client, &request, places).await {
            Ok(offer) => offer,
            Err(ControlError::Setup(SetupError::Refused { message, remedy, .. })) if !choice_made(&request) => {
                let (button, why) = remedy_words(remedy);
                if !ask(Question::Choice(&format!("{message}\n\n{why}"), button)) {
                    return Ok(None);
                }
                choose(&mut request, remedy);
                continue;
            }
            Err(e) => return Err(e.to_string()),
        };
        if offer.preview.finds_api_key() && !import_asked {
            import_asked = true;
            let label = gateway.free_key_label(client.id());
            let text = format!(
                "Codex's auth.json holds an OpenAI API key. Import it into Keymux's keys as '{label}' (kept in the \
                 system keychain, probed, pooled with your other keys)? Either way the file gets Keymux's client \
                 token in its place, and Undo puts the key back in the file."
            );
            if ask(Question::Import(&text)) {
                request.import_label = Some(label);
                continue;
            }
        }
        break offer;
    };
    if !offer.preview.changes_anything() {
        return Ok(Some(format!("{} already uses this Keymux.", places.file.display())));
    }
    if !ask(Question::Apply(&change_text(&offer.preview))) {
        return Ok(None);
    }
    let done = gateway.setup_apply(client, offer, places).await.map_err(|e| e.to_string())?;
    let undo: Vec<String> =
        done.files.iter().flat_map(|f| f.notes.iter().map(|n| format!("{}: {n}.", f.path))).collect();
    Ok(Some(format!("{} {} Undo is in the tray menu.", done.message, undo.join(" "))))
}

/// Whether the user already made the one choice a refusal asks for (a second refusal is an error).
fn choice_made(request: &SetupRequest) -> bool {
    request.custom_provider || request.force
}

fn choose(request: &mut SetupRequest, remedy: Remedy) {
    match remedy {
        Remedy::CustomProvider => request.custom_provider = true,
        Remedy::Force => request.force = true,
    }
}

/// The button that makes the choice, and what it means.
fn remedy_words(remedy: Remedy) -> (&'static str, &'static str) {
    match remedy {
        Remedy::CustomProvider => (
            "Use Keymux's own provider",
            "Keymux can add a provider of its own to config.toml instead. Codex then records new sessions under \
             the provider `keymux`: the sessions you have now stay under `openai` and resume only without Keymux.",
        ),
        Remedy::Force => {
            ("Point it at Keymux", "Keymux can point openai_base_url at itself anyway; Undo puts the current URL back.")
        }
    }
}

/// The dialog's text: every file the setup changes (config.toml, auth.json…), the change and notes.
fn change_text(preview: &setup::Preview) -> String {
    let files: Vec<String> = preview.plans().iter().map(|p| p.path().display().to_string()).collect();
    let mut text = format!("Keymux will change {}:\n\n{}", files.join(" and "), preview.text().trim_end());
    for note in preview.plans().iter().flat_map(|plan| plan.notes()) {
        text.push_str(&format!("\n\n{note}"));
    }
    text.push_str("\n\nEach file is backed up first; Undo in the tray menu takes Keymux's changes back.");
    text
}

/// The first-run offer, when the pool is empty: the keys found on this machine in plaintext, offered
/// for import with where each is (masked); nothing is imported without the user's yes.
pub fn offer_import(app: &App, gateway: &Arc<Gateway>, refresh: Refresh) {
    let (app, gateway) = (app.clone(), gateway.clone());
    let spawner = app.clone();
    spawner.spawn(async move {
        let Some((text, request)) = import_question(&gateway.import_offer()) else { return };
        let title = "Import your API keys";
        if !ask(&app, title, &text, "Import", "Not now") {
            return;
        }
        match gateway.import_keys(request).await {
            Ok(done) => say(&app, title, &import_summary(&done), Kind::Info),
            Err(e) => say(&app, title, &e.to_string(), Kind::Error),
        }
        refresh(&app);
    });
}

/// What the first-run offer asks, and the import a yes makes (`None`: nothing new to offer).
fn import_question(offer: &ImportOffer) -> Option<(String, ImportRequest)> {
    let fresh: Vec<_> = offer.keys.iter().filter(|k| k.pooled_as.is_none()).collect();
    if fresh.is_empty() {
        return None;
    }
    let list: Vec<String> = fresh.iter().map(|k| format!("• {} ({}), {}", k.label, k.masked, k.source)).collect();
    let text = format!(
        "Keymux has no API keys yet. It found these OpenAI API keys (and the ChatGPT plan Codex is logged in \
         with, if one is listed: new sessions would go to it first) on this machine:\n\n{}\n\nImport them into \
         the system keychain? Each is probed once to learn its organization. The files keep their copies; the \
         dashboard's Keys view or `keymux keys import --remove-plaintext` can take them out.",
        list.join("\n")
    );
    let fingerprints = fresh.iter().map(|k| k.fingerprint.clone()).collect();
    Some((text, ImportRequest { fingerprints, remove_plaintext: false }))
}

fn import_summary(done: &ImportDone) -> String {
    let mut lines = Vec::new();
    if !done.imported.is_empty() {
        lines.push(format!("Imported {}.", done.imported.join(", ")));
    }
    lines.extend(done.not_imported.iter().map(|n| format!("{}: {}", n.label, n.message)));
    lines.join("\n")
}

/// Puts the client's file back as it was before Keymux set it up.
pub fn undo(app: &App, client: Client, refresh: Refresh) {
    let app = app.clone();
    let spawner = app.clone();
    spawner.spawn(async move {
        let title = format!("Undo {client} setup");
        let Some(state) = setup::default_state_dir() else { return };
        let mut result = setup::undo(client, &state, false);
        if let Err(e) = &result {
            let edited = setup::status(client, &state).ok().flatten().is_some_and(|s| s.edited_since);
            if edited
                && ask(
                    &app,
                    &title,
                    &format!("{e}\n\nPut the old file back anyway? Your version is kept beside it."),
                    "Put it back",
                    "Cancel",
                )
            {
                result = setup::undo(client, &state, true);
            }
        }
        match result {
            Ok(undone) => {
                tracing::info!(client = client.id(), file = %undone.path.display(), "client setup undone");
                let mut text = format!("{} is back as it was.", undone.path.display());
                for note in &undone.notes {
                    text.push_str(&format!("\n\n{note}"));
                }
                say(&app, &title, &text, Kind::Info);
            }
            Err(e) => say(&app, &title, &e.to_string(), Kind::Error),
        }
        refresh(&app);
    });
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use std::path::Path;

    use keymux::config::{Config, TokenConfig};
    use keymux::secrets::{MemoryStore, Secret, SecretStore as _};
    use keymux::startup::{ConfigSource, StartOptions};

    use super::*;

    const BEFORE: &str = "# mine\nmodel = \"gpt-5.5\"\n";
    const EDITED: &str = "# mine\nmodel = \"gpt-5.5\"\n# edited while the dialog was open\n";

    /// A gateway as the tray holds one, its secrets in memory, with one client token but none for
    /// Codex yet.
    async fn gateway() -> Arc<Gateway> {
        let store = MemoryStore::default();
        let token = Secret::new("km-tray-unit-test-token-4d2c7a91e0b3");
        store.set(&keymux::secrets::account::token("t_other"), &token).unwrap();
        let mut config = Config::default();
        config.tokens.push(TokenConfig {
            id: "t_other".into(),
            name: "other".into(),
            created_unix: 0,
            pool: "all".into(),
            login: false,
        });
        let options = StartOptions {
            config: ConfigSource::Value(Box::new(config)),
            store: Some(Arc::new(store)),
            ephemeral: true,
            ..StartOptions::default()
        };
        keymux::startup::prepare(&options).await.unwrap().gateway
    }

    /// A Codex config the user has, and where the setup records go, in a temporary directory.
    fn places(dir: &Path) -> SetupPlaces {
        let file = dir.join("codex").join("config.toml");
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, BEFORE).unwrap();
        SetupPlaces { file, state: dir.join("state") }
    }

    /// Answers every question with `yes`, and keeps what was asked.
    fn answer(yes: bool, asked: &mut Vec<String>) -> impl FnMut(Question<'_>) -> bool + '_ {
        move |question| {
            asked.push(format!("{question:?}"));
            yes
        }
    }

    #[tokio::test]
    async fn a_file_edited_while_the_dialog_is_open_is_not_overwritten() {
        let (dir, gateway) = (tempfile::tempdir().unwrap(), gateway().await);
        let places = places(dir.path());
        let agree = |question: Question<'_>| {
            let Question::Apply(text) = question else { panic!("only the change is asked: {question:?}") };
            assert!(text.contains("+openai_base_url = "), "the dialog shows the change: {text}");
            assert!(text.contains("config.toml and ") && text.contains("auth.json:"), "both files named: {text}");
            std::fs::write(&places.file, EDITED).unwrap();
            true
        };
        let refused = set_up_in(&gateway, Client::Codex, &places, agree).await.unwrap_err();
        assert!(refused.contains("changed after the preview was made"), "{refused}");
        assert_eq!(std::fs::read_to_string(&places.file).unwrap(), EDITED, "the user's edit stays");
        assert!(setup::status(Client::Codex, &places.state).unwrap().is_none(), "nothing to undo");
        assert!(gateway.token_secret("codex").await.is_none(), "no token made for a refused setup");
    }

    #[tokio::test]
    async fn a_setup_the_user_agrees_to_writes_the_clients_own_token() {
        let (dir, gateway) = (tempfile::tempdir().unwrap(), gateway().await);
        let places = places(dir.path());
        let mut asked = Vec::new();
        let done = set_up_in(&gateway, Client::Codex, &places, answer(true, &mut asked)).await.unwrap().unwrap();
        assert!(done.contains("Codex now goes through Keymux"), "{done}");
        assert_eq!(asked.len(), 1, "no key to import, nothing refused: {asked:?}");
        let token = gateway.token_secret("codex").await.expect("a token named for the client");
        let written = std::fs::read_to_string(&places.file).unwrap();
        assert!(written.contains("openai_base_url = ") && written.starts_with("# mine\n"), "{written}");
        let auth = std::fs::read_to_string(places.file.with_file_name("auth.json")).unwrap();
        assert!(auth.contains(token.expose()), "Codex's built-in provider sends the client's own token");
        assert!(setup::status(Client::Codex, &places.state).unwrap().is_some(), "Undo is offered");
    }

    #[tokio::test]
    async fn a_setup_the_user_declines_writes_nothing() {
        let (dir, gateway) = (tempfile::tempdir().unwrap(), gateway().await);
        let places = places(dir.path());
        let mut asked = Vec::new();
        assert_eq!(set_up_in(&gateway, Client::Codex, &places, answer(false, &mut asked)).await.unwrap(), None);
        assert_eq!(std::fs::read_to_string(&places.file).unwrap(), BEFORE);
        assert!(gateway.token_secret("codex").await.is_none());
    }

    #[tokio::test]
    async fn a_chatgpt_login_is_offered_keymuxs_own_provider_and_gets_it_when_chosen() {
        let (dir, gateway) = (tempfile::tempdir().unwrap(), gateway().await);
        let places = places(dir.path());
        let auth = places.file.with_file_name("auth.json");
        std::fs::write(&auth, r#"{"auth_mode":"chatgpt","tokens":{"id_token":"x"}}"#).unwrap();
        let mut asked = Vec::new();
        set_up_in(&gateway, Client::Codex, &places, answer(true, &mut asked)).await.unwrap().unwrap();
        assert!(asked[0].starts_with("Choice(") && asked[0].contains("ChatGPT login"), "{asked:?}");
        assert!(asked[0].contains("Use Keymux's own provider"), "{asked:?}");
        let written = std::fs::read_to_string(&places.file).unwrap();
        assert!(written.contains("model_provider = \"keymux\""), "the custom-provider form: {written}");
        assert!(std::fs::read_to_string(&auth).unwrap().contains("chatgpt"), "the login is left alone");
    }

    fn found(label: &str, pooled_as: Option<&str>) -> keymux::api::types::FoundKey {
        keymux::api::types::FoundKey {
            fingerprint: format!("fp-{label}"),
            masked: "sk-…abcd".into(),
            provider: keymux::keys::ProviderId::Openai,
            label: label.into(),
            source: format!("{label}'s file"),
            file: None,
            pooled_as: pooled_as.map(str::to_owned),
        }
    }

    #[test]
    fn the_first_run_offer_lists_only_keys_not_pooled_yet_and_imports_exactly_those() {
        let offer = |keys| ImportOffer { keys, notes: Vec::new(), refusals: Vec::new() };
        assert!(import_question(&offer(Vec::new())).is_none(), "nothing found: no question");
        assert!(import_question(&offer(vec![found("codex", Some("codex"))])).is_none(), "all pooled: no question");
        let (text, request) = import_question(&offer(vec![found("codex", None), found("env", Some("work"))])).unwrap();
        assert!(text.contains("codex (sk-…abcd), codex's file") && !text.contains("env's file"), "{text}");
        assert_eq!(request.fingerprints, ["fp-codex"]);
        assert!(!request.remove_plaintext, "the files keep their copies unless asked");
    }
}
