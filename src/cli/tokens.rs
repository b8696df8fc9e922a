//! `keymux token …`: client tokens created, listed, shown and revoked (moving one to another pool is
//! `pools`' `move_token`).

use std::path::PathBuf;

use super::control::{self, Control};
use super::loaded::{load, usage, Loaded};
use super::{out, TokenCommand};

use crate::secrets::{self, account};
use crate::startup::StartError;

pub(super) async fn token(config_path: Option<PathBuf>, cmd: TokenCommand) -> Result<(), StartError> {
    let loaded = load(config_path)?;
    match cmd {
        TokenCommand::Create { name, pool } => create_token(control::open(&loaded).await?.as_ref(), &name, &pool).await,
        TokenCommand::List => {
            if loaded.config.tokens.is_empty() {
                out("no tokens yet: `keymux token create --name codex`");
                return Ok(());
            }
            out(&format!("{:<16} {:<16} POOL", "NAME", "ID"));
            for t in &loaded.config.tokens {
                out(&format!("{:<16} {:<16} {}", t.name, t.id, t.pool));
            }
            Ok(())
        }
        TokenCommand::Set { token, pool } => {
            super::pools::move_token(control::open(&loaded).await?.as_ref(), &token, &pool).await
        }
        TokenCommand::Show { token } => show_token(&loaded, &token).await,
        TokenCommand::Revoke { token } => revoke_token(control::open(&loaded).await?.as_ref(), &token).await,
    }
}

async fn create_token(control: &dyn Control, name: &str, pool: &str) -> Result<(), StartError> {
    let secret = control.create_token(name, pool).await.map_err(usage)?;
    out(secret.expose());
    let reach = if pool.eq_ignore_ascii_case(crate::pools::ALL) {
        String::new()
    } else {
        format!(" Its requests reach only the keys of the pool '{pool}'.")
    };
    eprintln!(
        "created token '{name}'.{reach} Export it for your client, e.g. `export KEYMUX_TOKEN=$(keymux token show {name})`."
    );
    Ok(())
}

async fn show_token(loaded: &Loaded, name: &str) -> Result<(), StartError> {
    let found = loaded
        .config
        .tokens
        .iter()
        .find(|t| t.id == name || t.name.eq_ignore_ascii_case(name))
        .ok_or_else(|| usage(format!("no token named '{name}'; see `keymux token list`")))?;
    if found.login {
        return Err(usage(format!(
            "token '{}' was issued to a client's login: its value lives only in that client and in memory here",
            found.name
        )));
    }
    let account = account::token(&found.id);
    match secrets::blocking(loaded.store.clone(), move |s| s.get(&account)).await? {
        Some(secret) => {
            out(secret.expose());
            Ok(())
        }
        None => {
            Err(usage(format!("token '{}' is missing from the keychain; revoke it and create a new one", found.name)))
        }
    }
}

async fn revoke_token(control: &dyn Control, name: &str) -> Result<(), StartError> {
    let gone = control.revoke_token(name).await.map_err(usage)?;
    let from = if control.is_running() { "; the running gateway refuses it from now on" } else { "" };
    out(&format!("revoked token '{gone}'{from}"));
    Ok(())
}
