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
        if let Err(problem) = set_up_flow(&app, &gateway, client, &title).await {
            say(&app, &title, &problem, MessageDialogKind::Error);
        }
        refresh(&app);
    });
}

async fn set_up_flow(app: &AppHandle, gateway: &Arc<Gateway>, client: Client, title: &str) -> Result<(), String> {
    let path: PathBuf = client.default_path().ok_or("no home directory to find the client's file in")?;
    let state = setup::default_state_dir().ok_or("no data directory to keep the setup record in")?;
    let base_url = gateway.base_url();
    // The preview shows the token masked, so a stand-in does until the user agrees.
    let existing = gateway.token_secret(client.id()).await;
    let stand_in = existing.clone().unwrap_or_else(|| keymux::secrets::generate(keymux::tokens::TOKEN_PREFIX));
    let preview = setup::plan(client, &path, &base_url, &stand_in).map_err(|e| e.to_string())?;
    if !preview.changes_anything() {
        say(app, title, &format!("{} already uses this Keymux.", path.display()), MessageDialogKind::Info);
        return Ok(());
    }
    let mut text = format!("Keymux will change {}:\n\n{}", path.display(), preview.preview().trim_end());
    for note in preview.notes() {
        text.push_str(&format!("\n\n{note}"));
    }
    text.push_str("\n\nThe file is backed up first; Undo in the tray menu puts it back.");
    if !ask(app, title, &text, "Apply") {
        return Ok(());
    }
    let token = gateway.token_for_client(client.id()).await.map_err(|e| e.to_string())?;
    let plan = setup::plan(client, &path, &base_url, &token).map_err(|e| e.to_string())?;
    let applied = setup::apply(&plan, &state).map_err(|e| e.to_string())?;
    tracing::info!(client = client.id(), file = %applied.path.display(), "client set up");
    let undo = match &applied.restore {
        Restore::Backup(backup) => format!("The file as it was is kept at {}.", backup.display()),
        Restore::Delete => "Keymux created the file.".to_owned(),
    };
    say(
        app,
        title,
        &format!("{client} now goes through Keymux. {undo} Undo is in the tray menu."),
        MessageDialogKind::Info,
    );
    Ok(())
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
                say(&app, &title, &format!("{} is back as it was.", undone.path.display()), MessageDialogKind::Info);
            }
            Err(e) => say(&app, &title, &e.to_string(), MessageDialogKind::Error),
        }
        refresh(&app);
    });
}
