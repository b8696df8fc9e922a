//! `keymux keys import`: the OpenAI keys a user already has in plaintext (found by `keys_import`)
//! join the pool the way `keymux keys add` adds one, once the user says yes; then each file they came
//! from may lose its plaintext copy (a backup kept).

use std::io::{IsTerminal as _, Read as _};
use std::path::{Path, PathBuf};

use super::args::ask;
use super::changes::{add_key, remove_key};
use super::control::{Added, Control};
use super::loaded::{usage, Loaded};
use super::out;
use crate::api::types::KeyInfo;
use crate::digest::InstallKey;
use crate::keys_import::{self, Candidate, Found, Origin, Sources};
use crate::secrets::{self, account, Secret};
use crate::setup::mask;
use crate::startup::StartError;

/// What `keys import` was asked to do.
pub(super) struct ImportArgs {
    pub(super) from: Option<PathBuf>,
    pub(super) yes: bool,
    pub(super) remove_plaintext: bool,
}

/// Where one candidate stands against the pool.
enum Standing {
    /// Not in the pool: imported once the user says yes.
    New,
    /// In the pool already, as this key.
    Pooled(String),
    /// The same key as a candidate listed above it.
    Twin(String),
}

pub(super) async fn import(loaded: &Loaded, control: &dyn Control, args: ImportArgs) -> Result<(), StartError> {
    let mut found = match &args.from {
        Some(path) => read_list(path)?,
        None => {
            let home = dirs::home_dir().unwrap_or_default();
            Sources::from_vars(std::env::vars(), &home).find()
        }
    };
    let live: Vec<KeyInfo> = control.live_keys().await.map_err(usage)?.unwrap_or_default();
    let mut in_use: Vec<String> = loaded.config.keys.iter().map(|k| k.label.clone()).collect();
    in_use.extend(live.iter().map(|k| k.status.label.clone()));
    found.label(&in_use);
    let standings = standings(loaded, &live, &found.candidates).await?;
    // A key in the pool already goes by the label it has there.
    for (candidate, standing) in found.candidates.iter_mut().zip(&standings) {
        match standing {
            Standing::Pooled(label) | Standing::Twin(label) => candidate.label.clone_from(label),
            Standing::New => {}
        }
    }
    show(&found, &standings);
    let new = standings.iter().filter(|s| matches!(s, Standing::New)).count();
    if found.candidates.is_empty() {
        return finish(&found, 0, 0);
    }
    if !args.yes {
        if !std::io::stdin().is_terminal() {
            eprintln!("nothing imported: nobody can answer on this input; pass --yes to import");
            return finish(&found, 0, 0);
        }
        if new > 0 && !ask(&format!("Import {new} key(s)? [y/N] "))? {
            eprintln!("nothing imported");
            return finish(&found, 0, 0);
        }
    }
    let mut failed = 0;
    let mut pooled = Vec::new();
    for (candidate, standing) in found.candidates.iter().zip(&standings) {
        let same = |c: &&Candidate| c.secret.expose() == candidate.secret.expose();
        if matches!(standing, Standing::Twin(_)) && !pooled.iter().any(same) {
            // Its twin above was not imported: neither is it, and its file keeps it.
            continue;
        }
        match add(control, candidate, standing).await {
            Ok(()) => pooled.push(candidate),
            Err(why) => {
                failed += 1;
                out(&format!("{} ({}): not imported: {why}", candidate.label, mask(candidate.secret.expose())));
            }
        }
    }
    let kept = remove_copies(&pooled, args.remove_plaintext)?;
    finish(&found, failed, kept)
}

/// The keys in a pasted list (`-`: stdin).
fn read_list(path: &Path) -> Result<Found, StartError> {
    if path == Path::new("-") {
        let mut text = String::new();
        std::io::stdin()
            .take(crate::setup::MAX_FILE_BYTES)
            .read_to_string(&mut text)
            .map_err(|e| usage(format!("cannot read the list from stdin: {e}")))?;
        return Ok(keys_import::pasted(&text, None));
    }
    let bytes = crate::setup::read_limited(path).map_err(usage)?;
    let bytes = bytes.ok_or_else(|| usage(format!("{} does not exist; check the path", path.display())))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| usage(format!("{} is not UTF-8 text; save the list as plain text", path.display())))?;
    Ok(keys_import::pasted(&text, Some(path)))
}

/// Each candidate against the pool, by the keyed fingerprint: the running gateway's keys, else the
/// keys in the keychain.
async fn standings(loaded: &Loaded, live: &[KeyInfo], candidates: &[Candidate]) -> Result<Vec<Standing>, StartError> {
    let install = secrets::blocking(loaded.store.clone(), |s| s.get(account::INSTALL_SECRET)).await?;
    let Some(install) = install.map(|s| InstallKey::new(&s)) else {
        // No install secret: no key was ever added with this keychain.
        return Ok(twins(candidates, |_| None));
    };
    let mut held: Vec<(String, String)> =
        live.iter().map(|k| (k.status.fingerprint.clone(), k.status.label.clone())).collect();
    if live.is_empty() {
        for key in &loaded.config.keys {
            let account = account::key(key.id.as_str());
            if let Some(secret) = secrets::blocking(loaded.store.clone(), move |s| s.get(&account)).await? {
                held.push((install.fingerprint(&secret), key.label.clone()));
            }
        }
    }
    Ok(twins(candidates, |secret| {
        let fp = install.fingerprint(secret);
        held.iter().find(|(held, _)| *held == fp).map(|(_, label)| label.clone())
    }))
}

fn twins(candidates: &[Candidate], holder: impl Fn(&Secret) -> Option<String>) -> Vec<Standing> {
    candidates
        .iter()
        .enumerate()
        .map(|(n, c)| {
            if let Some(label) = holder(&c.secret) {
                return Standing::Pooled(label);
            }
            match candidates[..n].iter().find(|e| e.secret.expose() == c.secret.expose()) {
                Some(earlier) => Standing::Twin(earlier.label.clone()),
                None => Standing::New,
            }
        })
        .collect()
}

fn show(found: &Found, standings: &[Standing]) {
    if found.candidates.is_empty() {
        out("no OpenAI API keys found to import");
    } else {
        out(&format!("{:<14} {:<16} {:<28} FROM", "KEY", "LABEL", "POOL"));
    }
    for (c, standing) in found.candidates.iter().zip(standings) {
        let pool = match standing {
            Standing::New => "new".to_owned(),
            Standing::Pooled(label) => format!("already in the pool as '{label}'"),
            Standing::Twin(label) => format!("same key as '{label}'"),
        };
        out(&format!("{:<14} {:<16} {pool:<28} {}", mask(c.secret.expose()), c.label, c.origin.describe()));
    }
    for note in &found.notes {
        out(&format!("note: {note}"));
    }
    for refusal in &found.refusals {
        eprintln!("keymux: {refusal}");
    }
}

/// Adds one key as `keys add` does; a key in the pool already is not an error here.
async fn add(control: &dyn Control, candidate: &Candidate, standing: &Standing) -> Result<(), String> {
    match standing {
        Standing::Pooled(label) => {
            out(&format!("{}: already in the pool as '{label}'", candidate.label));
            return Ok(());
        }
        Standing::Twin(label) => {
            out(&format!("{}: the same key as '{label}'", candidate.label));
            return Ok(());
        }
        Standing::New => {}
    }
    let new = crate::control::import::new_key(candidate);
    match add_key(control, new).await.map_err(|e| e.to_string())? {
        Added::Ready(_) => Ok(()),
        Added::AlreadyPooled { why, .. } => {
            out(&format!("{}: {why}", candidate.label));
            Ok(())
        }
        Added::Refused(_, why) => {
            // `keys add` keeps a refused key to be replaced; an import takes it back out.
            remove_key(control, &candidate.label).await.map_err(|e| e.to_string())?;
            Err(format!(
                "{why}; it was taken out of the pool again: check the key at https://platform.openai.com/api-keys"
            )
            .replace(&format!(", or `keymux keys set {} --secret` to replace it", candidate.label), ""))
        }
    }
}

/// Offers to take each pooled key's plaintext copy out of its file; the environment's copy is the
/// user's to remove, so the line to delete is named instead. Returns how many removals the user asked
/// for were refused (the file left holding its key).
fn remove_copies(pooled: &[&Candidate], up_front: bool) -> Result<usize, StartError> {
    let mut refused = 0;
    for candidate in pooled {
        let masked = mask(candidate.secret.expose());
        match &candidate.origin {
            Origin::Env(var) => out(&format!(
                "{var} still holds the key ({masked}): delete the line `export {var}=…` that sets it from your shell \
                 profile (~/.bashrc, ~/.zshrc or ~/.profile) and open a new shell; Keymux does not edit shell files"
            )),
            Origin::Pasted(..) | Origin::CodexChatgpt(..) => {}
            Origin::CodexAuth(path) | Origin::PiAuth(path, _) | Origin::PiModels(path, _) => {
                let question = format!("Remove the key ({masked}) from {}? [y/N] ", path.display());
                let yes = up_front || (std::io::stdin().is_terminal() && ask(&question)?);
                if !yes {
                    out(&format!("{} still holds the key ({masked}) in plaintext", path.display()));
                    continue;
                }
                match keys_import::remove_plaintext(&candidate.origin, &candidate.secret) {
                    Ok(removed) => {
                        out(&format!(
                            "removed the key from {} (the file as it was is kept in {})",
                            removed.file(),
                            removed.backup.display()
                        ));
                        if matches!(candidate.origin, Origin::CodexAuth(_)) {
                            out("Codex now has no key there: `keymux setup codex` puts a Keymux client token in its place");
                        }
                    }
                    Err(why) => {
                        refused += 1;
                        eprintln!("keymux: {why}");
                        out(&format!(
                            "{} still holds the key ({masked}) in plaintext; the key is imported and stays in Keymux's pool",
                            path.display()
                        ));
                    }
                }
            }
        }
    }
    Ok(refused)
}

/// The exit: a failure when a source was refused, a key could not be added, or a plaintext copy the
/// user asked to remove was kept (`kept`; the keys imported stay imported).
fn finish(found: &Found, failed: usize, kept: usize) -> Result<(), StartError> {
    let mut why = Vec::new();
    if !found.refusals.is_empty() {
        why.push(format!("{} source(s) refused", found.refusals.len()));
    }
    if failed > 0 {
        why.push(format!("{failed} key(s) not imported"));
    }
    if kept > 0 {
        why.push(format!("{kept} plaintext copy(ies) not removed (the keys imported stay in Keymux's pool)"));
    }
    match why.is_empty() {
        true => Ok(()),
        false => Err(usage(format!("{}; see above", why.join(" and ")))),
    }
}
