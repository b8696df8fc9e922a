//! What the state directory keeps about a setup, so Undo can take it back: paths, a digest, a time.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::edited::{sha256, Surgical};
use super::error::io;
use super::{Client, SetupError, PRIVATE};
use crate::config_file::write_atomically_with_mode;

/// What Undo will do with the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Restore {
    /// Put this backup back.
    Backup(PathBuf),
    /// Delete the file: it did not exist before Keymux wrote it.
    Delete,
    /// Take out only what Keymux added, in these words (Codex's `openai_base_url` line); everything
    /// else in the file stays as Codex or the user left it.
    Surgical(String),
}

impl Restore {
    pub(super) fn describe(&self) -> String {
        match self {
            Restore::Backup(path) => path.display().to_string(),
            Restore::Delete => "nowhere: Keymux created the file".into(),
            Restore::Surgical(what) => format!("not needed: Undo only {what}"),
        }
    }
}

/// What the state directory keeps about one client's setup. Nothing secret: paths, a digest, a time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Record {
    pub(super) client: Client,
    pub(super) path: PathBuf,
    /// `None`: the file did not exist, Undo deletes it.
    pub(super) backup: Option<PathBuf>,
    /// SHA-256 of the text Keymux wrote, to tell whether the file changed since.
    pub(super) sha256: String,
    pub(super) written_unix: u64,
    /// For a file edited in place: what Keymux added. `None`: Undo puts the whole file back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) surgical: Option<Surgical>,
}

impl Record {
    pub(super) fn restore(&self) -> Restore {
        match &self.surgical {
            Some(Surgical::BaseUrl { value, replaced: true, .. }) => Restore::Surgical(format!(
                "puts the openai_base_url it replaced back in place of Keymux's \"{value}\" (from {})",
                self.backup.as_deref().map_or_else(|| "the backup".into(), |b| b.display().to_string())
            )),
            Some(Surgical::BaseUrl { value, replaced: false, .. }) => {
                Restore::Surgical(format!("takes out Keymux's line `openai_base_url = \"{value}\"`"))
            }
            Some(Surgical::AuthKey { .. }) | None => self.backup.clone().map_or(Restore::Delete, Restore::Backup),
        }
    }

    /// Whether the file still holds what Keymux wrote: the same bytes, or for a file edited in place,
    /// Keymux's own part unchanged.
    pub(super) fn intact(&self, now: Option<&[u8]>) -> bool {
        let text = || now.map(String::from_utf8_lossy);
        match &self.surgical {
            None => now.is_some_and(|bytes| sha256(bytes) == self.sha256),
            Some(Surgical::BaseUrl { value, .. }) => text().is_some_and(|t| super::codex_history::holds(&t, value)),
            Some(Surgical::AuthKey { key_sha256 }) => text().is_some_and(|t| super::codex_auth::holds(&t, key_sha256)),
        }
    }
}

/// Where the record `name` is kept (`setup-codex.json`, `setup-codex-pool-work.json`, …).
pub(super) fn record_path(state_dir: &Path, name: &str) -> PathBuf {
    state_dir.join(format!("setup-{name}.json"))
}

pub(super) fn read_record(state_dir: &Path, name: &str) -> Result<Option<Record>, SetupError> {
    let path = record_path(state_dir, name);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(SetupError::Io { path, source }),
    };
    serde_json::from_slice(&bytes).map(Some).map_err(|e| SetupError::Unreadable {
        path,
        format: "JSON",
        message: e.to_string(),
    })
}

pub(super) fn write_record(state_dir: &Path, name: &str, record: &Record) -> Result<(), SetupError> {
    let path = record_path(state_dir, name);
    let bytes = serde_json::to_vec_pretty(record)
        .map_err(|e| SetupError::Io { path: path.clone(), source: std::io::Error::other(e) })?;
    write_atomically_with_mode(&path, &bytes, Some(PRIVATE)).map_err(io(&path))
}
