//! `keymux setup codex|pi`: points a client's own config file at this gateway, with a client token of
//! its own, after showing the change; `--undo` takes it back. With `--pool`, Codex gets a profile file
//! for that pool and pi a provider that one project selects, each with a token bound to the pool. The
//! work is `crate::setup`'s; this file finds the pool, the base URL and the token, asks, and says where
//! the backup is and what to type.

use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};

use super::args::ask;
use super::changes::{add_key, renew};
use super::control::{self, Added, Control};
use super::loaded::{load, usage, Loaded};
use super::{out, SetupArgs};
use crate::control::NewKey;
use crate::secrets::{self, account, Secret};
use crate::setup::{self, Applied, Choices, Client, ConfirmError, Restore, Target};
use crate::startup::StartError;

/// The client token the files will hold: the one named for the setup (`codex`, `pi`, `codex-work`…)
/// that this user's keychain already has (so running setup again changes nothing), or else the name a
/// new one gets when the change is applied.
struct Token {
    name: String,
    existing: Option<Secret>,
}

impl Token {
    async fn find(loaded: &Loaded, control: &dyn Control, target: &Target) -> Result<Token, StartError> {
        let wanted = target.token_name();
        let mut taken: Vec<String> = loaded.config.tokens.iter().map(|t| t.name.clone()).collect();
        if let Some(listed) = loaded.config.tokens.iter().find(|t| !t.login && t.name.eq_ignore_ascii_case(&wanted)) {
            let pooled = !matches!(target, Target::Default(_));
            if pooled && !listed.pool.eq_ignore_ascii_case(target.pool()) {
                let (name, bound, pool) = (&listed.name, &listed.pool, target.pool());
                return Err(usage(format!(
                    "the token '{name}' is bound to the pool '{bound}', not '{pool}': bind it with \
                     `keymux token set {name} --pool {pool}`, or revoke it (`keymux token revoke {name}`) and run \
                     this again"
                )));
            }
            let account = account::token(&listed.id);
            // A keychain that cannot be read just means a new token.
            if let Ok(Some(secret)) = secrets::blocking(loaded.store.clone(), move |s| s.get(&account)).await {
                return Ok(Token { name: listed.name.clone(), existing: Some(secret) });
            }
        }
        // Names the running gateway holds beyond the config's; a list that cannot be read takes none.
        taken.extend(control.token_names().await.unwrap_or_default());
        Ok(Token { name: crate::control::free_token_name(&wanted, &taken), existing: None })
    }
}

pub(super) async fn setup(config_path: Option<PathBuf>, args: SetupArgs) -> Result<(), StartError> {
    let client: Client = args.client.into();
    let state = setup::default_state_dir()
        .ok_or_else(|| usage("no data directory to keep the setup record in (is HOME set?)"))?;
    let project = project_dir(client, &args)?;
    if args.undo {
        let target = Target::new(client, &args.pool, project.as_deref()).map_err(usage)?;
        return undo(&target, args.file.as_deref(), &state, args.force);
    }
    let loaded = load(config_path)?;
    let opened = control::open(&loaded).await?;
    let control = opened.as_ref();
    // An unknown pool is refused before anything is written or made.
    let pool = known_pool(control, &args.pool).await?;
    let target = Target::new(client, &pool, project.as_deref()).map_err(usage)?;
    let path = args
        .file
        .or_else(|| target.default_path())
        .ok_or_else(|| usage(format!("no home directory to find {client}'s file in; pass --file with its path")))?;
    let base_url = control.base_url().map_err(usage)?;
    let token = Token::find(&loaded, control, &target).await?;
    let choices = Choices {
        custom_provider: args.custom_provider || args.login,
        force: args.force,
        import_key: args.import_key.is_some(),
        login: args.login,
    };
    let preview =
        setup::preview_with(target.clone(), &path, &base_url, token.existing, choices, Some(&state)).map_err(usage)?;
    out(preview.text().trim_end());
    if !preview.changes_anything() {
        return Ok(());
    }
    if preview.makes_token() {
        let name = &token.name;
        out(&format!("(a new client token '{name}' is created when this is applied; the preview shows a stand-in)"));
    }
    let plan = preview.imports_plan();
    let import = args.import_key.as_deref().zip(preview.key_to_import().cloned()).map(|(label, secret)| {
        let label = match (label, plan) {
            ("", false) => "codex",
            ("", true) => "chatgpt",
            (label, _) => label,
        };
        (label, secret)
    });
    if let Some((label, _)) = &import {
        let what = if plan {
            "ChatGPT login in auth.json is added to Keymux's keys as your plan"
        } else {
            "API key in auth.json is added to Keymux's keys"
        };
        out(&format!("the {what} as '{label}' first"));
    }
    if !args.yes && !confirm()? {
        return Ok(());
    }
    if let Some((label, secret)) = import {
        // Before the file loses it: a key that cannot be added leaves auth.json as it is.
        let new = NewKey::imported(label.to_owned(), secret.clone());
        let new = if plan { NewKey { provider: crate::provider::chatgpt::ID, ..new } } else { new };
        match add_key(control, new).await? {
            Added::Ready(_) => {}
            // Imported before (or added by hand): it is in the pool already, which is what was wanted.
            Added::AlreadyPooled { holder, .. } if plan => renew(control, &holder, secret).await?,
            Added::AlreadyPooled { .. } => out("the API key in auth.json is in Keymux's pool already: not added again"),
            Added::Refused(_, why) => return Err(usage(why)),
        }
    }
    let new_token = || async { control.create_token(&token.name, target.pool()).await.map_err(usage) };
    let made = preview.confirm(&state, new_token).await;
    let applied = made.map_err(|e| match e {
        ConfirmError::Token(e) => e,
        ConfirmError::Setup(e) => usage(e),
    })?;
    report(&target, &base_url, &token.name, &applied);
    Ok(())
}

/// The directory a pi pool is set up for: `--project`, else the current directory. Only pi with a
/// pool other than `all` has one (`Target::new` says why elsewhere).
fn project_dir(client: Client, args: &SetupArgs) -> Result<Option<PathBuf>, StartError> {
    let pooled = !args.pool.eq_ignore_ascii_case(crate::pools::ALL);
    match (&args.project, client, pooled) {
        (Some(dir), _, _) => Ok(Some(dir.clone())),
        (None, Client::Pi, true) => std::env::current_dir()
            .map(Some)
            .map_err(|e| usage(format!("cannot read the current directory ({e}); pass --project DIR"))),
        (None, Client::Pi | Client::Codex, _) => Ok(None),
    }
}

/// The pool as Keymux names it (the running gateway's pools, which include `KEYMUX_POOL_*`, else the
/// config's), or a refusal that says how to create it.
async fn known_pool(control: &dyn Control, pool: &str) -> Result<String, StartError> {
    if pool.eq_ignore_ascii_case(crate::pools::ALL) {
        return Ok(crate::pools::ALL.to_owned());
    }
    let mut names = control.pools().await.map_err(usage)?.into_iter().map(|p| p.name);
    names.find(|n| n.eq_ignore_ascii_case(pool)).ok_or_else(|| usage(crate::pools::unknown_pool(pool)))
}

/// What was set up, where the backups are, how to use it and how to undo it.
fn report(target: &Target, base_url: &str, token: &str, applied: &[Applied]) {
    match (target, applied) {
        (Target::Default(client), [one]) => {
            let path = one.path.display();
            out(&format!("set up {client} in {path}: it reaches Keymux at {base_url} with the client token '{token}'"));
            out(&restore_line(one));
        }
        (Target::Default(_) | Target::CodexPool { .. } | Target::PiPool { .. }, _) => {
            let pool = target.pool();
            out(&format!(
                "set up {target}: it reaches Keymux at {base_url} with the client token '{token}' (pool '{pool}')"
            ));
            for one in applied {
                out(&format!("{}: {}", one.path.display(), restore_line(one)));
            }
        }
    }
    let provider = target.provider();
    match target {
        Target::Default(Client::Codex) if applied.iter().any(|a| matches!(a.restore, Some(Restore::Surgical(_)))) => {
            out("Codex keeps recording sessions under its own provider `openai`: `codex resume` lists the ones from \
                 before Keymux too, and they continue through Keymux")
        }
        Target::Default(_) => {}
        Target::CodexPool { .. } => out(&format!(
            "Codex 0.171 cannot choose a provider per directory: in that project run `codex -p {provider}` (also \
             `codex -p {provider} resume`). Without -p Codex uses its default provider. A shortcut: \
             alias codex-{}='codex -p {provider}'",
            target.pool()
        )),
        Target::PiPool { project, .. } => {
            out(&format!(
                "run `pi` in exactly {} to use the pool '{}' (not in its subdirectories; elsewhere pi keeps its \
                 own choice). Do not pick a model with /model there: pi writes that choice to its global settings",
                project.display(),
                target.pool()
            ));
            if project.join(".git").exists() {
                out("the project is a git repository: list .pi/settings.json in .git/info/exclude to keep the choice yours");
            }
        }
    }
    out(&format!("undo with: {}", target.undo_command()));
}

fn restore_line(applied: &Applied) -> String {
    match (&applied.restore, &applied.backup) {
        (Some(Restore::Backup(backup)), Some(_)) => format!("backup of the file as it was: {}", backup.display()),
        (Some(Restore::Backup(backup)), None) => {
            format!("Undo still restores the file from before Keymux set it up: {}", backup.display())
        }
        (Some(Restore::Delete), _) => "the file is new: Undo deletes it".to_owned(),
        (Some(Restore::Surgical(what)), _) => format!("Undo {what}; everything else stays"),
        (None, Some(backup)) => {
            format!("backup of the file as it was: {} (Undo of a project leaves this provider)", backup.display())
        }
        (None, None) => "the file is new (Undo of a project leaves this provider)".to_owned(),
    }
}

/// Asks on the terminal; says how to apply without one.
fn confirm() -> Result<bool, StartError> {
    if !std::io::stdin().is_terminal() {
        eprintln!("nothing written: nobody can answer on this input; pass --yes to apply");
        return Ok(false);
    }
    let yes = ask("Apply? [y/N] ")?;
    if !yes {
        eprintln!("nothing written");
    }
    Ok(yes)
}

fn undo(target: &Target, file: Option<&Path>, state: &Path, force: bool) -> Result<(), StartError> {
    let status = setup::status(target.clone(), state).map_err(usage)?;
    // A pi project's record is its settings file, which --file (models.json) does not name.
    let named_file = match target {
        Target::Default(_) | Target::CodexPool { .. } => file,
        Target::PiPool { .. } => None,
    };
    if let (Some(status), Some(file)) = (&status, named_file) {
        let named = std::fs::canonicalize(file).unwrap_or_else(|_| file.to_owned());
        if named != status.path {
            return Err(usage(format!(
                "Keymux set up {target} in {}, not in {}; `{}` takes that back",
                status.path.display(),
                file.display(),
                target.undo_command()
            )));
        }
    }
    let undone = setup::undo(target.clone(), state, force).map_err(usage)?;
    out(&match &undone.restored {
        Restore::Surgical(what) => format!("{}: Keymux {what}; everything else in it stays", undone.path.display()),
        Restore::Backup(backup) => {
            format!("restored {} from {} (the backup stays)", undone.path.display(), backup.display())
        }
        Restore::Delete => format!("deleted {}: Keymux had created it", undone.path.display()),
    });
    if let Some(kept) = &undone.kept {
        out(&format!("your changed version is kept in {}", kept.display()));
    }
    for note in &undone.notes {
        out(note);
    }
    if let Target::PiPool { .. } = target {
        out(&format!(
            "the provider {} stays in pi's models.json, where other projects may select it; remove it by hand \
             once none does",
            target.provider()
        ));
    }
    out("the client token stays valid: `keymux token list` shows it, `keymux token revoke NAME` ends it");
    Ok(())
}
