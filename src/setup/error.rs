//! Why a setup or an undo was not done, each error saying what to do.

use std::path::{Path, PathBuf};

use super::Client;

/// Why a setup or an undo was not done. Each says what to do.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The file is not valid TOML or JSON.
    #[error("{} is not valid {format} ({message}). Fix or move it: Keymux will not rewrite a file it cannot read", path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// TOML or JSON.
        format: &'static str,
        /// What the parser said.
        message: String,
    },
    /// The file is valid but not shaped as the client expects.
    #[error("{}: {message}. Fix or move it: Keymux will not rewrite a file it does not understand", path.display())]
    Unexpected {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The file is set up in a way this setup would override; the message names the choice that does.
    #[error("{}: {message}", path.display())]
    Refused {
        /// The file.
        path: PathBuf,
        /// What is there and what to do.
        message: String,
        /// The choice that makes it.
        remedy: super::edited::Remedy,
    },
    /// The line Keymux added was changed or removed since, so Undo does not know what to take out.
    #[error("{} no longer has the line Keymux added (`{key} = \"{ours}\"`): {}. Keymux leaves the file as it is; fix the line by hand, then forget this setup with `{undo} --force`", path.display(), found.as_ref().map_or_else(|| "it was removed".to_owned(), |v| format!("it says \"{v}\" now")))]
    LineChanged {
        /// The file.
        path: PathBuf,
        /// The setting.
        key: &'static str,
        /// What Keymux wrote.
        ours: String,
        /// What the file says now (`None`: no such line).
        found: Option<String>,
        /// The undo command.
        undo: String,
    },
    /// The file is there but cannot be read.
    #[error("Keymux cannot read {} ({source}): make it a file your user can read, or move it aside; nothing was written", path.display())]
    CannotRead {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The file is larger than any client config.
    #[error("{} is {size} bytes, more than the 1 MiB a client config could need: Keymux will not rewrite it; move it aside or pass another file", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        size: u64,
    },
    /// The base URL or the token cannot be written.
    #[error("{0}")]
    Invalid(String),
    /// The plan says there is nothing to write.
    #[error("{} already points {client} at Keymux with this token: nothing to write", path.display())]
    NothingToDo {
        /// The client.
        client: Client,
        /// The file.
        path: PathBuf,
    },
    /// The file changed between the preview and the apply.
    #[error("{} changed after the preview was made; look at the new preview before applying", path.display())]
    ChangedSincePreview {
        /// The file.
        path: PathBuf,
    },
    /// Another file of this client holds a setup that can still be undone.
    #[error("Keymux set up {client} in {} and that can still be undone; undo it first (`{undo}`)", other.display())]
    OtherSetup {
        /// The client.
        client: Client,
        /// The file set up earlier.
        other: PathBuf,
        /// The command that undoes it.
        undo: String,
    },
    /// No setup to undo.
    #[error("there is no setup of {target} by Keymux to undo")]
    NothingToUndo {
        /// The setup, as a person reads it (`Codex for the pool 'work'`): as text, because a `Target` is
        /// made with this error's `Invalid`, so this file does not name that type.
        target: String,
    },
    /// The file was changed after Keymux wrote it.
    #[error("{} was changed after Keymux set up {client}, so undoing would lose those changes. Look at it (the file as it was before is in {}), or undo anyway with --force (your version is kept next to it)", path.display(), before)]
    EditedSince {
        /// The client.
        client: Client,
        /// The file.
        path: PathBuf,
        /// Where the file as it was before is (a backup, or "nowhere: Keymux created it").
        before: String,
    },
    /// The backup to restore is gone.
    #[error("the backup {} is gone, so Keymux cannot restore {}; remove the keymux entries from it by hand", backup.display(), path.display())]
    BackupMissing {
        /// The file.
        path: PathBuf,
        /// The missing backup.
        backup: PathBuf,
    },
    /// Reading or writing failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
}

pub(super) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SetupError + '_ {
    move |source| SetupError::Io { path: path.to_owned(), source }
}
