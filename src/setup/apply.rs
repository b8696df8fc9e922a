//! Making a planned change (a backup and a record first), taking it back, and what can be taken back.

use std::path::{Path, PathBuf};

use super::error::io;
use super::files::{keep_copy, mode_of, read_limited, real_path};
use super::record::{read_record, record_path, sha256, write_record, Record, Restore};
use super::{Plan, SetupError, Target, PRIVATE};
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
        Some(bytes) => keep_copy(&path, "keymux-backup", bytes, mode_of(&path), now).map(Some),
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

/// Takes a setup back: the backup is put back byte for byte (with its permissions), or the file
/// Keymux created is deleted. Refused when the file changed since Keymux wrote it, unless `force`
/// (then the changed file is kept next to it). The backup itself stays.
pub fn undo(target: impl Into<Target>, state_dir: &Path, force: bool) -> Result<Undone, SetupError> {
    let target = target.into();
    let name = target.undo_record();
    let client = target.client();
    let Some(record) = read_record(state_dir, &name)? else { return Err(SetupError::NothingToUndo { target }) };
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
    match &record.backup {
        Some(backup) => {
            let bytes = std::fs::read(backup).map_err(|source| match source.kind() {
                std::io::ErrorKind::NotFound => {
                    SetupError::BackupMissing { path: path.clone(), backup: backup.clone() }
                }
                _ => SetupError::Io { path: backup.clone(), source },
            })?;
            write_atomically_with_mode(&path, &bytes, mode_of(backup)).map_err(io(&path))?;
        }
        None => match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(SetupError::Io { path, source }),
        },
    }
    if let (None, Target::PiPool { .. }) = (&record.backup, &target) {
        // The project's `.pi` directory goes too when nothing else is in it (it fails otherwise).
        let _ = path.parent().map(std::fs::remove_dir);
    }
    let record_file = record_path(state_dir, &name);
    std::fs::remove_file(&record_file).map_err(io(&record_file))?;
    Ok(Undone { path, restored: record.restore(), kept })
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
