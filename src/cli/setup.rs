//! `keymux setup codex|pi`: points a client's own config file at this gateway, with a client token of
//! its own, after showing the change; `--undo` takes it back. The work is `crate::setup`'s; this file
//! finds the base URL and the token, asks, and says where the backup is.

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};

use http::Method;

use super::manage::{self, usage, Loaded};
use super::{out, SetupArgs};
use crate::remote::Remote;
use crate::secrets::{self, account, Secret};
use crate::setup::{self, Client, ConfirmError, Restore};
use crate::startup::StartError;

/// The client token the file will hold: the one named for the client that this user's keychain already
/// has (so running setup again changes nothing), or else the name a new one gets when the change is
/// applied.
struct Token {
    name: String,
    existing: Option<Secret>,
}

impl Token {
    async fn find(loaded: &Loaded, remote: Option<&Remote>, client: Client) -> Token {
        let mut taken: Vec<String> = loaded.config.tokens.iter().map(|t| t.name.clone()).collect();
        if let Some(listed) = loaded.config.tokens.iter().find(|t| t.name.eq_ignore_ascii_case(client.id())) {
            let account = account::token(&listed.id);
            // A keychain that cannot be read just means a new token.
            if let Ok(Some(secret)) = secrets::blocking(loaded.store.clone(), move |s| s.get(&account)).await {
                return Token { name: listed.name.clone(), existing: Some(secret) };
            }
        }
        if let Some(remote) = remote {
            if let Ok(tokens) = remote.call(Method::GET, "/tokens", None).await {
                let names = tokens.as_array().into_iter().flatten().filter_map(|t| t["name"].as_str());
                taken.extend(names.map(str::to_owned));
            }
        }
        Token { name: crate::control::free_token_name(client.id(), &taken), existing: None }
    }
}

pub(super) async fn setup(config_path: Option<PathBuf>, args: SetupArgs) -> Result<(), StartError> {
    let client = args.client.into();
    let state = setup::default_state_dir()
        .ok_or_else(|| usage("no data directory to keep the setup record in (is HOME set?)"))?;
    if args.undo {
        return undo(client, args.file.as_deref(), &state, args.force);
    }
    let path = args
        .file
        .or_else(|| client.default_path())
        .ok_or_else(|| usage(format!("no home directory to find {client}'s file in; pass --file with its path")))?;
    let loaded = manage::load(config_path)?;
    let remote = manage::remote(&loaded).await?;
    let base_url = match &remote {
        Some(remote) => format!("{}/v1", remote.root()),
        None => crate::remote::local_addr(&loaded.config.listen)
            .map(|addr| format!("http://{addr}/v1"))
            .ok_or_else(|| usage(format!("listen = {:?} in the config is not an address", loaded.config.listen)))?,
    };
    let token = Token::find(&loaded, remote.as_ref(), client).await;
    let preview = setup::preview(client, &path, &base_url, token.existing).map_err(usage)?;
    out(preview.plan().preview().trim_end());
    if !preview.plan().changes_anything() {
        return Ok(());
    }
    if preview.makes_token() {
        let name = &token.name;
        out(&format!("(a new client token '{name}' is created when this is applied; the preview shows a stand-in)"));
    }
    if !args.yes && !confirm()? {
        return Ok(());
    }
    let made =
        preview.confirm(&state, || manage::new_token(&loaded, remote.as_ref(), &token.name, crate::pools::ALL)).await;
    let applied = made.map_err(|e| match e {
        ConfirmError::Token(e) => e,
        ConfirmError::Setup(e) => usage(e),
    })?;
    out(&format!(
        "set up {client} in {}: it reaches Keymux at {base_url} with the client token '{}'",
        applied.path.display(),
        token.name
    ));
    out(&match (&applied.restore, applied.backed_up) {
        (Restore::Backup(backup), true) => format!("backup of the file as it was: {}", backup.display()),
        (Restore::Backup(backup), false) => {
            format!("Undo still restores the file from before Keymux set it up: {}", backup.display())
        }
        (Restore::Delete, _) => "the file is new: Undo deletes it".to_owned(),
    });
    out(&format!("undo with: keymux setup {} --undo", client.id()));
    Ok(())
}

/// Asks on the terminal; says how to apply without one.
fn confirm() -> Result<bool, StartError> {
    if !std::io::stdin().is_terminal() {
        eprintln!("nothing written: nobody can answer on this input; pass --yes to apply");
        return Ok(false);
    }
    eprint!("Apply? [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer).map_err(|e| usage(format!("cannot read the answer: {e}")))?;
    let yes = matches!(answer.trim(), "y" | "Y" | "yes" | "Yes" | "YES");
    if !yes {
        eprintln!("nothing written");
    }
    Ok(yes)
}

fn undo(client: Client, file: Option<&Path>, state: &Path, force: bool) -> Result<(), StartError> {
    let status = setup::status(client, state).map_err(usage)?;
    if let (Some(status), Some(file)) = (&status, file) {
        let named = std::fs::canonicalize(file).unwrap_or_else(|_| file.to_owned());
        if named != status.path {
            return Err(usage(format!(
                "Keymux set up {client} in {}, not in {}; `keymux setup {} --undo` takes that back",
                status.path.display(),
                file.display(),
                client.id()
            )));
        }
    }
    let undone = setup::undo(client, state, force).map_err(usage)?;
    out(&match &undone.restored {
        Restore::Backup(backup) => {
            format!("restored {} from {} (the backup stays)", undone.path.display(), backup.display())
        }
        Restore::Delete => format!("deleted {}: Keymux had created it", undone.path.display()),
    });
    if let Some(kept) = &undone.kept {
        out(&format!("your changed version is kept in {}", kept.display()));
    }
    out("the client token stays valid: `keymux token list` shows it, `keymux token revoke NAME` ends it");
    Ok(())
}
