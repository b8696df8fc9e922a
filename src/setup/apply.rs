//! Making a planned change (a backup and a record first), taking it back, and what can be taken back.

use std::path::{Path, PathBuf};

use super::codex_history;
use super::edited::{sha256, Surgical};
use super::error::io;
use super::files::{keep_backup, keep_copy, mode_of, read_limited, real_path};
use super::record::{read_record, record_path, write_record, Record, Restore};
use super::target::CODEX_AUTH_RECORD;
use super::{Client, Plan, SetupError, Target, PRIVATE};
use crate::clock::Clock;
use crate::config_file::write_atomically_with_mode;

/// What [`apply`] did.
#[derive(Clone, Debug)]
pub struct Applied {
    /// The file written (links followed).
    pub path: PathBuf,
    /// What Undo will do. `None`: Undo leaves this change (a pool's provider in pi's `models.json`,
    /// which other projects may select).
    pub restore: Option<Restore>,
    /// The backup written now. None when the file did not exist, or was exactly what Keymux wrote last
    /// time: Undo then still goes back to the file as it was before Keymux first set it up.
    pub backup: Option<PathBuf>,
}

/// What [`undo`] did.
#[derive(Clone, Debug)]
pub struct Undone {
    /// The file.
    pub path: PathBuf,
    /// What was restored (the backup stays where it is).
    pub restored: Restore,
    /// With `force`, where the file as it was (with the user's changes) was kept.
    pub kept: Option<PathBuf>,
    /// What else a person should know: Codex's `auth.json` put back or left (and why), a table that
    /// stays for old sessions, a file left as it was.
    pub notes: Vec<String>,
}

/// A setup that can be undone, for the tray's "Undo Codex setup".
#[derive(Clone, Debug)]
pub struct Status {
    /// The file.
    pub path: PathBuf,
    /// What Undo will do.
    pub restore: Restore,
    /// When Keymux wrote the file (Unix seconds).
    pub applied_unix: u64,
    /// The file changed since Keymux wrote it: Undo needs `force`.
    pub edited_since: bool,
}

/// Makes the planned change: a backup first (or a note that Undo deletes a file that did not exist),
/// then the new text, atomically (readable by the user only when it holds a token), and a record in
/// `state_dir`.
pub fn apply(plan: &Plan, state_dir: &Path) -> Result<Applied, SetupError> {
    if !plan.changes_anything() {
        return Err(SetupError::NothingToDo { client: plan.client, path: plan.path.clone() });
    }
    let path = real_path(&plan.path);
    let now_bytes = read_limited(&path)?;
    if now_bytes != plan.current {
        return Err(SetupError::ChangedSincePreview { path });
    }
    let now = Clock::system().unix_ms() / 1000;
    let mode = if plan.edit.holds_token() { Some(PRIVATE) } else { mode_of(&path) };
    let fresh_backup = |bytes: &Option<Vec<u8>>| match bytes {
        // Beside the name the client reads, as key import's backups: a link's target is left holding
        // only what Keymux wrote.
        Some(bytes) => keep_backup(&plan.path, "keymux-backup", bytes, mode_of(&path), now).map(Some),
        None => Ok(None),
    };
    let Some(name) = plan.edit.record(&path) else {
        let backup = fresh_backup(&now_bytes)?;
        write_atomically_with_mode(&path, plan.text.as_bytes(), mode).map_err(io(&path))?;
        return Ok(Applied { path, restore: None, backup });
    };
    let prior = read_record(state_dir, &name)?;
    let (restore_from, backup) = match &prior {
        // The file is what Keymux wrote last time: keep pointing Undo at the file from before Keymux.
        Some(r) if r.path == path && r.intact(now_bytes.as_deref()) => (r.backup.clone(), None),
        Some(r) if r.path != path && r.intact(read_limited(&r.path).ok().flatten().as_deref()) => {
            let undo = plan.edit.undo_command();
            return Err(SetupError::OtherSetup { client: plan.client, other: r.path.clone(), undo });
        }
        _ => {
            let backup = fresh_backup(&now_bytes)?;
            (backup.clone(), backup)
        }
    };
    let record = Record {
        client: plan.client,
        path: path.clone(),
        backup: restore_from,
        sha256: sha256(plan.text.as_bytes()),
        written_unix: now,
        surgical: plan.surgical.clone(),
    };
    // The record first: whenever the file holds Keymux's text, Undo knows how to take it back.
    write_record(state_dir, &name, &record)?;
    if let Err(source) = write_atomically_with_mode(&path, plan.text.as_bytes(), mode) {
        let _ = match &prior {
            Some(prior) => write_record(state_dir, &name, prior),
            None => std::fs::remove_file(record_path(state_dir, &name)).map_err(io(state_dir)),
        };
        return Err(SetupError::Io { path, source });
    }
    Ok(Applied { path, restore: Some(record.restore()), backup })
}

/// Takes a setup back. A file Keymux edited in place (Codex's `config.toml` in the history-keeping
/// form) loses only Keymux's line, whatever Codex or the user wrote since; that is refused when the
/// line itself was changed, unless `force` (then the setup is forgotten and the file left as it is).
/// Any other file: the backup is put back byte for byte (with its permissions), or the file Keymux
/// created is deleted; refused when the file changed since Keymux wrote it, unless `force` (then the
/// changed file is kept next to it). Codex's `auth.json` goes back as it was when it still holds
/// Keymux's token. Backups stay.
pub fn undo(target: impl Into<Target>, state_dir: &Path, force: bool) -> Result<Undone, SetupError> {
    let target = target.into();
    let name = target.undo_record();
    let Some(record) = read_record(state_dir, &name)? else {
        return Err(SetupError::NothingToUndo { target: target.to_string() });
    };
    let mut undone = match &record.surgical {
        Some(Surgical::BaseUrl { value, replaced, dropped_provider }) => {
            let replaced = if *replaced { replaced_value(&record)? } else { None };
            let line = Line { value, replaced: replaced.as_deref(), dropped_provider: *dropped_provider };
            undo_line(&target, &record, &line, force)?
        }
        Some(Surgical::AuthKey { .. }) | None => undo_whole(&target, &record, force)?,
    };
    let record_file = record_path(state_dir, &name);
    std::fs::remove_file(&record_file).map_err(io(&record_file))?;
    if target == Target::Default(Client::Codex) {
        undone.notes.extend(undo_auth(state_dir)?);
    }
    Ok(undone)
}

/// Keymux's `openai_base_url` line, as its record has it.
struct Line<'a> {
    value: &'a str,
    replaced: Option<&'a str>,
    dropped_provider: bool,
}

/// The `openai_base_url` Keymux replaced, as the backup of the file from before holds it.
fn replaced_value(record: &Record) -> Result<Option<String>, SetupError> {
    let Some(backup) = &record.backup else { return Ok(None) };
    let bytes = backup_bytes(&record.path, backup)?;
    Ok(codex_history::value_in(&String::from_utf8_lossy(&bytes)))
}

/// The backup of `path`, or why it cannot be had.
fn backup_bytes(path: &Path, backup: &Path) -> Result<Vec<u8>, SetupError> {
    std::fs::read(backup).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => SetupError::BackupMissing { path: path.to_owned(), backup: backup.to_owned() },
        _ => SetupError::Io { path: backup.to_owned(), source },
    })
}

/// Takes Keymux's line out of Codex's config (or puts back the value it replaced).
fn undo_line(target: &Target, record: &Record, line: &Line<'_>, force: bool) -> Result<Undone, SetupError> {
    let path = record.path.clone();
    let now = read_limited(&path)?;
    let text = now.as_deref().map(String::from_utf8_lossy).unwrap_or_default();
    let removed = codex_history::remove(&text, line.value, line.replaced).map_err(|_| SetupError::Unreadable {
        path: path.clone(),
        format: "TOML",
        message: "Undo needs to find Keymux's line in it".into(),
    })?;
    let mut notes = Vec::new();
    match removed {
        // A file Keymux created and nothing else wrote to goes again.
        Ok(new) if new.trim().is_empty() && record.backup.is_none() => put_back(record)?,
        Ok(new) => write_atomically_with_mode(&path, new.as_bytes(), mode_of(&path)).map_err(io(&path))?,
        Err(found) if force => {
            let found =
                found.map_or_else(|| "Keymux's line is gone".to_owned(), |v| format!("the line says \"{v}\" now"));
            notes.push(format!("{} was left as it is ({found}); Keymux forgot this setup", path.display()));
        }
        Err(found) => {
            let (key, ours, undo) = (codex_history::KEY, line.value.to_owned(), target.undo_command());
            return Err(SetupError::LineChanged { path, key, ours, found, undo });
        }
    }
    if line.dropped_provider {
        notes.push(format!(
            "the [model_providers.keymux] table from the old setup stays, so the sessions recorded under `keymux` \
             still resume while Keymux runs: {}. Remove the table by hand once you no longer need them",
            codex_history::resume_command()
        ));
    }
    Ok(Undone { path, restored: record.restore(), kept: None, notes })
}

/// Puts a whole file back from its backup, or deletes the file Keymux created.
fn undo_whole(target: &Target, record: &Record, force: bool) -> Result<Undone, SetupError> {
    let client = target.client();
    let path = record.path.clone();
    let now_bytes = match std::fs::read(&path) {
        Ok(bytes) => Some(bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(source) => return Err(SetupError::Io { path, source }),
    };
    let mut kept = None;
    if !record.intact(now_bytes.as_deref()) {
        if !force {
            return Err(SetupError::EditedSince { client, path, before: record.restore().describe() });
        }
        if let Some(bytes) = &now_bytes {
            let now = Clock::system().unix_ms() / 1000;
            kept = Some(keep_copy(&path, "keymux-before-undo", bytes, mode_of(&path), now)?);
        }
    }
    put_back(record)?;
    if let (None, Target::PiPool { .. }) = (&record.backup, target) {
        // The project's `.pi` directory goes too when nothing else is in it (it fails otherwise).
        let _ = path.parent().map(std::fs::remove_dir);
    }
    Ok(Undone { path, restored: record.restore(), kept, notes: Vec::new() })
}

/// The file as it was before Keymux: its backup, byte for byte, or no file at all.
fn put_back(record: &Record) -> Result<(), SetupError> {
    let path = &record.path;
    match &record.backup {
        Some(backup) => {
            let bytes = backup_bytes(path, backup)?;
            write_atomically_with_mode(path, &bytes, mode_of(backup)).map_err(io(path))
        }
        None => match std::fs::remove_file(path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(SetupError::Io { path: path.clone(), source }),
        },
    }
}

/// Puts Codex's `auth.json` back when it still holds Keymux's token; says what was done.
fn undo_auth(state_dir: &Path) -> Result<Option<String>, SetupError> {
    let Some(record) = read_record(state_dir, CODEX_AUTH_RECORD)? else { return Ok(None) };
    let path = record.path.clone();
    let note = if record.intact(read_limited(&path)?.as_deref()) {
        put_back(&record)?;
        match &record.backup {
            Some(backup) => format!("{} is back as it was (from {})", path.display(), backup.display()),
            None => format!("deleted {}: Keymux had created it", path.display()),
        }
    } else {
        let before = record.backup.as_ref().map_or_else(|| "no file".to_owned(), |b| b.display().to_string());
        format!(
            "{} no longer holds Keymux's client token (it was changed since, by Codex or by you), so it is left as \
             it is; before Keymux it was: {before}",
            path.display()
        )
    };
    let record_file = record_path(state_dir, CODEX_AUTH_RECORD);
    std::fs::remove_file(&record_file).map_err(io(&record_file))?;
    Ok(Some(note))
}

/// The setup that Undo would take back for `target`, if there is one.
pub fn status(target: impl Into<Target>, state_dir: &Path) -> Result<Option<Status>, SetupError> {
    let Some(record) = read_record(state_dir, &target.into().undo_record())? else { return Ok(None) };
    let now = std::fs::read(&record.path).ok();
    Ok(Some(Status {
        path: record.path.clone(),
        restore: record.restore(),
        applied_unix: record.written_unix,
        edited_since: !record.intact(now.as_deref()),
    }))
}
