//! `keymux keys import --chatgpt`: the ChatGPT login Codex keeps in `$CODEX_HOME/auth.json` joins the
//! pool as a key of provider `chatgpt` (one keychain secret holds the whole login), once the user says
//! yes. What is printed names the account and the plan, never a token.

use std::io::IsTerminal as _;
use std::path::PathBuf;

use keymux_core::provider::chatgpt::{self, Login};

use super::args::ask;
use super::changes::{add_key, remove_key, renew};
use super::control::{Added, Control};
use super::loaded::usage;
use super::out;
use crate::control::NewKey;
use crate::startup::StartError;

/// The label a plan gets unless the user gives one.
pub(super) const DEFAULT_LABEL: &str = "chatgpt";

/// Codex's `auth.json`: `$CODEX_HOME/auth.json`, else `~/.codex/auth.json`.
fn codex_auth() -> PathBuf {
    let home = std::env::var_os("CODEX_HOME").filter(|h| !h.is_empty()).map(PathBuf::from);
    home.unwrap_or_else(|| dirs::home_dir().unwrap_or_default().join(".codex")).join("auth.json")
}

/// Reads the login from Codex's file; the refusal names the file and what to do, never a token.
fn read_login() -> Result<(PathBuf, Login), StartError> {
    let path = codex_auth();
    let bytes = crate::setup::read_limited(&path).map_err(|e| usage(e.to_string()))?;
    let bytes = bytes.ok_or_else(|| {
        usage(format!("{} does not exist: log in to Codex with ChatGPT first (`codex login`)", path.display()))
    })?;
    let text = String::from_utf8_lossy(&bytes);
    let login = chatgpt::from_codex_auth(&text).map_err(|why| usage(format!("{}: {why}", path.display())))?;
    let login = login.ok_or_else(|| {
        usage(format!(
            "{} holds no ChatGPT login (its auth_mode is not chatgpt): log in to Codex with ChatGPT first \
             (`codex login`), or import its API key with `keymux keys import`",
            path.display()
        ))
    })?;
    Ok((path, login))
}

/// Imports the login as the key `label` (default `chatgpt`).
pub(super) async fn import(control: &dyn Control, label: Option<String>, yes: bool) -> Result<(), StartError> {
    let (path, login) = read_login()?;
    let info = login.info();
    let plan = info.plan_type.as_deref().unwrap_or("unknown");
    out(&format!("found the ChatGPT login of account {} (plan {plan}) in {}", info.account_id, path.display()));
    if !yes {
        if !std::io::stdin().is_terminal() {
            eprintln!("nothing imported: nobody can answer on this input; pass --yes to import");
            return Ok(());
        }
        if !ask("Import it, so Keymux sends requests on your plan first? [y/N] ")? {
            eprintln!("nothing imported");
            return Ok(());
        }
    }
    let label = label.unwrap_or_else(|| DEFAULT_LABEL.to_owned());
    let new = NewKey {
        provider: crate::provider::chatgpt::ID,
        imported: true,
        ..NewKey::openai(label.clone(), login.to_secret())
    };
    match add_key(control, new).await? {
        Added::Ready(_) => {
            out(&format!("imported the plan as '{label}': new sessions go to it first while its usage allows"));
            out("Keymux now refreshes this login itself: hand Codex Keymux's token in its place with `keymux setup codex --import-key`");
            Ok(())
        }
        Added::AlreadyPooled { holder, .. } => renew(control, &holder, login.to_secret()).await,
        Added::Refused(_, why) => {
            remove_key(control, &label).await?;
            Err(usage(format!("{why}; it was taken out of the pool again: log in to Codex again and retry")))
        }
    }
}
