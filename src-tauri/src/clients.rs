//! "Set up Codex… / pi…" and their undo, from the tray: the change is shown in a dialog first, a
//! backup is kept, and nothing but the client's own entry changes (`keymux::setup` does the work and
//! keeps the record that makes Undo possible). The file gets a client token of its own, never a key.

use std::path::PathBuf;
use std::sync::Arc;

use keymux::gateway::Gateway;
use keymux::setup::{self, Client, Restore};
use tauri::AppHandle;
use tauri_plugin_dialog::{DialogExt as _, MessageDialogButtons, MessageDialogKind};

/// Brings the menu up to date once a dialog's work is done (the tray passes its own).
pub type Refresh = fn(&AppHandle);

/// Whether a Codex and a pi setup can be undone now.
pub fn undo_available() -> (bool, bool) {
    let Some(state) = setup::default_state_dir() else { return (false, false) };
    let can = |client| setup::status(client, &state).ok().flatten().is_some();
    (can(Client::Codex), can(Client::Pi))
}

fn say(app: &AppHandle, title: &str, text: &str, kind: MessageDialogKind) {
    app.dialog().message(text).title(title).kind(kind).blocking_show();
}

fn ask(app: &AppHandle, title: &str, text: &str, yes: &str) -> bool {
    app.dialog()
        .message(text)
        .title(title)
        .buttons(MessageDialogButtons::OkCancelCustom(yes.to_owned(), "Cancel".to_owned()))
        .blocking_show()
}

/// Shows what setting `client` up would change, and does it if the user agrees.
pub fn set_up(app: &AppHandle, gateway: &Arc<Gateway>, client: Client, refresh: Refresh) {
    let (app, gateway) = (app.clone(), gateway.clone());
    tauri::async_runtime::spawn(async move {
        let title = format!("Set up {client}");
        let agree = |text: &str| ask(&app, &title, text, "Apply");
        let done = match Places::default_for(client) {
            Ok(places) => set_up_in(&gateway, client, &places, agree).await,
            Err(problem) => Err(problem),
        };
        match done {
            Ok(Some(done)) => say(&app, &title, &done, MessageDialogKind::Info),
            Ok(None) => {}
            Err(problem) => say(&app, &title, &problem, MessageDialogKind::Error),
        }
        refresh(&app);
    });
}

/// Where a setup is made: the client's own file and the directory of Keymux's setup records.
struct Places {
    file: PathBuf,
    state: PathBuf,
}

impl Places {
    /// Where the client looks for its file now, and the platform data directory.
    fn default_for(client: Client) -> Result<Places, String> {
        let file = client.default_path().ok_or("no home directory to find the client's file in")?;
        let state = setup::default_state_dir().ok_or("no data directory to keep the setup record in")?;
        Ok(Places { file, state })
    }
}

/// The tray's setup: the preview goes to `agree` (the dialog), and once it says yes `keymux::setup`
/// makes the change, refusing it if the file changed while the dialog was open. What to tell the user
/// (`None`: they said no).
async fn set_up_in(
    gateway: &Gateway,
    client: Client,
    places: &Places,
    agree: impl FnOnce(&str) -> bool,
) -> Result<Option<String>, String> {
    let Places { file, state } = places;
    // The preview shows the token masked, so a stand-in does until the user agrees.
    let existing = gateway.token_secret(client.id()).await;
    let choices = setup::Choices::default();
    let preview = setup::preview_with(client, file, &gateway.base_url(), existing, choices, Some(state.as_path()))
        .map_err(|e| e.to_string())?;
    if !preview.changes_anything() {
        return Ok(Some(format!("{} already uses this Keymux.", file.display())));
    }
    let mut text = format!("Keymux will change {}:\n\n{}", file.display(), preview.text().trim_end());
    for note in preview.plans().iter().flat_map(|plan| plan.notes()) {
        text.push_str(&format!("\n\n{note}"));
    }
    text.push_str("\n\nEach file is backed up first; Undo in the tray menu takes Keymux's changes back.");
    if !agree(&text) {
        return Ok(None);
    }
    let made = preview.confirm(state, || gateway.token_for_client(client.id())).await;
    let applied = made.map_err(|e| e.to_string())?;
    let mut undo = String::new();
    // The tray sets up the client's own file only: one file.
    for one in &applied {
        tracing::info!(client = client.id(), file = %one.path.display(), "client set up");
        undo.push_str(&match &one.restore {
            Some(Restore::Backup(backup)) => format!("The file as it was is kept at {}.", backup.display()),
            Some(Restore::Delete) => "Keymux created the file.".to_owned(),
            Some(Restore::Surgical(what)) => format!("{}: Undo {what}.", one.path.display()),
            None => String::new(),
        });
    }
    Ok(Some(format!("{client} now goes through Keymux. {undo} Undo is in the tray menu.")))
}

/// Puts the client's file back as it was before Keymux set it up.
pub fn undo(app: &AppHandle, client: Client, refresh: Refresh) {
    let app = app.clone();
    tauri::async_runtime::spawn(async move {
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
                say(&app, &title, &text, MessageDialogKind::Info);
            }
            Err(e) => say(&app, &title, &e.to_string(), MessageDialogKind::Error),
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
    fn places(dir: &Path) -> Places {
        let file = dir.join("codex").join("config.toml");
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, BEFORE).unwrap();
        Places { file, state: dir.join("state") }
    }

    #[tokio::test]
    async fn a_file_edited_while_the_dialog_is_open_is_not_overwritten() {
        let (dir, gateway) = (tempfile::tempdir().unwrap(), gateway().await);
        let places = places(dir.path());
        let agree = |text: &str| {
            assert!(text.contains("+openai_base_url = "), "the dialog shows the change: {text}");
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
        let done = set_up_in(&gateway, Client::Codex, &places, |_| true).await.unwrap().unwrap();
        assert!(done.contains("Codex now goes through Keymux"), "{done}");
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
        assert_eq!(set_up_in(&gateway, Client::Codex, &places, |_| false).await.unwrap(), None);
        assert_eq!(std::fs::read_to_string(&places.file).unwrap(), BEFORE);
        assert!(gateway.token_secret("codex").await.is_none());
    }
}
