//! Pointing Codex CLI and pi at Keymux by editing their own config files, for the tray's "Set up
//! Codex…" and "Set up pi…" and for `keymux setup`. Three steps, each a call:
//!
//! * [`plan`] reads the file and works out the new text and a preview (a small diff with the token
//!   masked). It writes nothing, so the change can be shown before it is made.
//! * [`apply`] keeps a backup of the file first, then writes the new text atomically, readable by the
//!   user only (it now holds a client token), and records what it did in a state directory.
//! * [`undo`] puts the backup back byte for byte (or deletes a file Keymux created), unless the file
//!   was changed since Keymux wrote it. Backups are never deleted.
//!
//! Only the gateway's base URL and a local client token are written, never an OpenAI key. Everything
//! else in the file stays as it was: Codex's TOML is edited in place (`codex`), pi's JSON keeps every
//! other provider and the order of keys (`pi`). The record holds paths, a digest and a time; nothing
//! secret.

mod codex;
mod diff;
mod pi;

use std::io::Read as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::clock::Clock;
use crate::config_file::write_atomically_with_mode;
use crate::secrets::Secret;

/// The name of Keymux's provider entry in both clients' files.
const PROVIDER: &str = "keymux";
/// The largest client file Keymux rewrites.
pub const MAX_FILE_BYTES: u64 = 1 << 20;
/// The permissions of a file that holds a client token.
const PRIVATE: u32 = 0o600;

/// A client Keymux can set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Client {
    /// Codex CLI: `$CODEX_HOME/config.toml`, by default `~/.codex/config.toml`.
    Codex,
    /// The pi coding agent: `$PI_CODING_AGENT_DIR/models.json`, by default `~/.pi/agent/models.json`.
    Pi,
}

impl Client {
    /// Every client, in menu order.
    pub const ALL: [Client; 2] = [Client::Codex, Client::Pi];

    /// The short name used in commands and file names: `codex`, `pi`.
    pub fn id(self) -> &'static str {
        match self {
            Client::Codex => "codex",
            Client::Pi => "pi",
        }
    }

    /// The variable naming the client's directory.
    pub fn dir_variable(self) -> &'static str {
        match self {
            Client::Codex => "CODEX_HOME",
            Client::Pi => "PI_CODING_AGENT_DIR",
        }
    }

    /// The file the client reads, where the client itself would look for it now.
    pub fn default_path(self) -> Option<PathBuf> {
        self.path_in(std::env::var_os(self.dir_variable()).map(PathBuf::from), dirs::home_dir())
    }

    /// The file the client reads, given its directory variable and the home directory.
    fn path_in(self, dir: Option<PathBuf>, home: Option<PathBuf>) -> Option<PathBuf> {
        let dir = match (self, dir.filter(|d| !d.as_os_str().is_empty())) {
            // pi expands a leading `~` itself; Codex takes the path as it is.
            (Client::Pi, Some(dir)) if dir.starts_with("~") => home?.join(dir.strip_prefix("~").ok()?),
            (_, Some(dir)) => dir,
            (Client::Codex, None) => home?.join(".codex"),
            (Client::Pi, None) => home?.join(".pi").join("agent"),
        };
        Some(dir.join(match self {
            Client::Codex => "config.toml",
            Client::Pi => "models.json",
        }))
    }

    fn format(self) -> &'static str {
        match self {
            Client::Codex => "TOML",
            Client::Pi => "JSON",
        }
    }
}

impl std::fmt::Display for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Client::Codex => "Codex",
            Client::Pi => "pi",
        })
    }
}

/// Where Keymux keeps its setup records: the platform data directory (`~/.local/share/keymux`).
pub fn default_state_dir() -> Option<PathBuf> {
    dirs::data_dir().map(|d| d.join("keymux"))
}

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
    #[error("Keymux set up {client} in {} and that can still be undone; undo it first (`keymux setup {} --undo`)", other.display(), client.id())]
    OtherSetup {
        /// The client.
        client: Client,
        /// The file set up earlier.
        other: PathBuf,
    },
    /// No setup to undo.
    #[error("there is no {client} setup by Keymux to undo")]
    NothingToUndo {
        /// The client.
        client: Client,
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

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SetupError + '_ {
    move |source| SetupError::Io { path: path.to_owned(), source }
}

/// What a client module makes of a file: the new text and what the user should know about the change.
struct Edited {
    text: String,
    notes: Vec<String>,
}

/// Why a client module will not edit a file.
#[derive(Debug)]
enum Refusal {
    /// Not valid TOML or JSON.
    Syntax(String),
    /// Valid, but not shaped as the client reads it.
    Shape(String),
}

/// A change to a client's file, worked out and not yet made.
pub struct Plan {
    client: Client,
    path: PathBuf,
    current: Option<Vec<u8>>,
    text: String,
    preview: String,
    notes: Vec<String>,
}

impl std::fmt::Debug for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The new text holds the token: never printed.
        f.debug_struct("Plan")
            .field("client", &self.client)
            .field("path", &self.path)
            .field("changes_anything", &self.changes_anything())
            .finish_non_exhaustive()
    }
}

impl Plan {
    /// The client.
    pub fn client(&self) -> Client {
        self.client
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's bytes now (`None`: it does not exist).
    pub fn current(&self) -> Option<&[u8]> {
        self.current.as_deref()
    }

    /// The text that would be written. It holds the client token: never show it.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// What changes, for a person: a small diff with the token masked, then the notes.
    pub fn preview(&self) -> &str {
        &self.preview
    }

    /// What else to know: a setting that is replaced, a profile that wins, how to pick the provider.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Whether applying would change the file (otherwise it is already set up).
    pub fn changes_anything(&self) -> bool {
        self.current.as_deref() != Some(self.text.as_bytes())
    }
}

/// Works out how `client`'s file at `path` points at the gateway at `base_url` with `token`. Reads the
/// file; writes nothing.
pub fn plan(client: Client, path: &Path, base_url: &str, token: &Secret) -> Result<Plan, SetupError> {
    let base_url = base_url.trim_end_matches('/');
    if !(base_url.starts_with("http://") || base_url.starts_with("https://")) || base_url.contains(char::is_whitespace)
    {
        return Err(SetupError::Invalid(format!("the base URL {base_url:?} must be an http:// or https:// URL")));
    }
    check_token(token.expose())?;
    let current = read_limited(path)?;
    let old = match &current {
        Some(bytes) => Some(std::str::from_utf8(bytes).map_err(|_| SetupError::Unreadable {
            path: path.to_owned(),
            format: client.format(),
            message: "it is not UTF-8 text".into(),
        })?),
        None => None,
    };
    let edited = match client {
        Client::Codex => codex::edit(old.unwrap_or(""), base_url, token.expose()),
        Client::Pi => pi::edit(old.unwrap_or(""), base_url, token.expose()),
    }
    .map_err(|refusal| match refusal {
        Refusal::Syntax(message) => SetupError::Unreadable { path: path.to_owned(), format: client.format(), message },
        Refusal::Shape(message) => SetupError::Unexpected { path: path.to_owned(), message },
    })?;
    let secrets = Secrets::of(client, old.unwrap_or(""), &edited.text, token.expose());
    let title = path.display().to_string();
    let (preview, notes) = if old == Some(edited.text.as_str()) {
        let already =
            format!("{title} already points {client} at Keymux ({base_url}) with this token: nothing to change\n");
        (already, Vec::new())
    } else {
        let notes: Vec<String> = edited.notes.iter().map(|n| secrets.mask(n)).collect();
        let mut preview = diff::unified(&title, old, &edited.text, &|line: &str| secrets.mask(line));
        for note in &notes {
            preview.push_str(&format!("note: {note}\n"));
        }
        (preview, notes)
    };
    Ok(Plan { client, path: path.to_owned(), current, text: edited.text, preview, notes })
}

/// Refuses what is not a local client token; above all an OpenAI key, which never goes into a
/// client's file.
fn check_token(token: &str) -> Result<(), SetupError> {
    if token.starts_with("sk-") {
        return Err(SetupError::Invalid(
            "that is an OpenAI API key: Keymux writes only a local client token into a client's file".into(),
        ));
    }
    crate::tokens::check_strength(token).map_err(SetupError::Invalid)?;
    // Such a token would be escaped in the file, where the preview's mask would not find it.
    if token.contains(['"', '\\']) {
        return Err(SetupError::Invalid("a client token must not contain quotes or backslashes".into()));
    }
    Ok(())
}

/// The file's bytes (`None`: it does not exist), refused past `MAX_FILE_BYTES`.
fn read_limited(path: &Path) -> Result<Option<Vec<u8>>, SetupError> {
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(SetupError::Io { path: path.to_owned(), source }),
    };
    let size = file.metadata().map_err(io(path))?.len();
    let too_large = |size| SetupError::TooLarge { path: path.to_owned(), size };
    if size > MAX_FILE_BYTES {
        return Err(too_large(size));
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes).map_err(io(path))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(Some(bytes))
}

/// The secret values a preview must not show: the token, and every credential in the file before and
/// after (a provider's key, an old token), wherever the preview's lines happen to cross them.
struct Secrets(Vec<String>);

impl Secrets {
    fn of(client: Client, old: &str, new: &str, token: &str) -> Self {
        let mut found = vec![token.to_owned()];
        for text in [old, new] {
            // Both formats read into one tree, so one walk finds the credentials.
            let tree = match client {
                Client::Codex => toml::from_str::<serde_json::Value>(text).ok(),
                Client::Pi => serde_json::from_str::<serde_json::Value>(text).ok(),
            };
            if let Some(tree) = tree {
                collect_secrets("", &tree, &mut found);
            }
        }
        // Longer first, so a secret that contains another is masked whole.
        found.sort_by_key(|s| std::cmp::Reverse(s.len()));
        found.dedup();
        Self(found)
    }

    fn mask(&self, line: &str) -> String {
        self.0.iter().fold(line.to_owned(), |line, secret| line.replace(secret.as_str(), &mask(secret)))
    }
}

/// How a secret shows in a preview: its prefix and its last four characters, `km-…abcd`.
pub fn mask(secret: &str) -> String {
    let chars: Vec<char> = secret.chars().collect();
    if chars.len() < 16 {
        return "…".into();
    }
    let prefix = secret.split_once('-').filter(|(p, _)| p.len() <= 4).map_or(String::new(), |(p, _)| format!("{p}-"));
    let tail: String = chars[chars.len() - 4..].iter().collect();
    format!("{prefix}…{tail}")
}

/// Whether the string `value` under `key` is a credential: an API key or token by its prefix, or any
/// value under a key named for a credential, except the name of an environment variable or a command.
fn is_secret(key: &str, value: &str) -> bool {
    let env_name = value.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    if value.len() < 8 || env_name || value.starts_with('!') {
        return false;
    }
    let key = key.to_ascii_lowercase();
    value.starts_with("sk-")
        || value.starts_with(crate::tokens::TOKEN_PREFIX)
        || ["key", "token", "secret", "auth", "password"].iter().any(|word| key.contains(word))
}

fn collect_secrets(key: &str, value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::String(s) if is_secret(key, s) => out.push(s.clone()),
        serde_json::Value::Object(map) => map.iter().for_each(|(k, v)| collect_secrets(k, v, out)),
        serde_json::Value::Array(items) => items.iter().for_each(|v| collect_secrets(key, v, out)),
        _ => {}
    }
}

/// What Undo will do with the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Restore {
    /// Put this backup back.
    Backup(PathBuf),
    /// Delete the file: it did not exist before Keymux wrote it.
    Delete,
}

impl Restore {
    fn describe(&self) -> String {
        match self {
            Restore::Backup(path) => path.display().to_string(),
            Restore::Delete => "nowhere: Keymux created the file".into(),
        }
    }
}

/// What [`apply`] did.
#[derive(Clone, Debug)]
pub struct Applied {
    /// The file written (links followed).
    pub path: PathBuf,
    /// What Undo will do.
    pub restore: Restore,
    /// Whether a backup was written now. Not when the file was exactly what Keymux wrote last time:
    /// Undo then still goes back to the file as it was before Keymux first set it up.
    pub backed_up: bool,
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

/// What the state directory keeps about one client's setup. Nothing secret: paths, a digest, a time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Record {
    client: Client,
    path: PathBuf,
    /// `None`: the file did not exist, Undo deletes it.
    backup: Option<PathBuf>,
    /// SHA-256 of the text Keymux wrote, to tell whether the file changed since.
    sha256: String,
    written_unix: u64,
}

impl Record {
    fn restore(&self) -> Restore {
        self.backup.clone().map_or(Restore::Delete, Restore::Backup)
    }

    /// Whether the file is still exactly what Keymux wrote.
    fn intact(&self, now: Option<&[u8]>) -> bool {
        now.is_some_and(|bytes| sha256(bytes) == self.sha256)
    }
}

fn record_path(state_dir: &Path, client: Client) -> PathBuf {
    state_dir.join(format!("setup-{}.json", client.id()))
}

fn read_record(state_dir: &Path, client: Client) -> Result<Option<Record>, SetupError> {
    let path = record_path(state_dir, client);
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

fn write_record(state_dir: &Path, record: &Record) -> Result<(), SetupError> {
    let path = record_path(state_dir, record.client);
    let bytes = serde_json::to_vec_pretty(record)
        .map_err(|e| SetupError::Io { path: path.clone(), source: std::io::Error::other(e) })?;
    write_atomically_with_mode(&path, &bytes, Some(PRIVATE)).map_err(io(&path))
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The file a path names, links followed (so a config kept in a dotfiles repository stays a link),
/// made absolute so records compare.
fn real_path(path: &Path) -> PathBuf {
    if let Ok(real) = std::fs::canonicalize(path) {
        return real;
    }
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    match (absolute.parent(), absolute.file_name()) {
        (Some(dir), Some(name)) => std::fs::canonicalize(dir).map_or(absolute.clone(), |dir| dir.join(name)),
        _ => absolute,
    }
}

/// The Unix permissions of a file (`None` elsewhere, or when it cannot be read).
fn mode_of(path: &Path) -> Option<u32> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::metadata(path).ok().map(|m| m.permissions().mode() & 0o7777)
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

/// Keeps `bytes` next to `path` as `<file>.<label>-<unix seconds>` with `mode`, never replacing a file.
fn keep_copy(path: &Path, label: &str, bytes: &[u8], mode: Option<u32>, now: u64) -> Result<PathBuf, SetupError> {
    use std::io::Write as _;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    for n in 0..100u32 {
        let suffix = if n == 0 { String::new() } else { format!("-{n}") };
        let copy = path.with_file_name(format!("{name}.{label}-{now}{suffix}"));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, mode.unwrap_or(PRIVATE));
        #[cfg(not(unix))]
        let _ = mode;
        let mut file = match options.open(&copy) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(source) => return Err(SetupError::Io { path: copy, source }),
        };
        #[cfg(unix)]
        if let Some(mode) = mode {
            file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode)).map_err(io(&copy))?;
        }
        file.write_all(bytes).and_then(|()| file.sync_all()).map_err(io(&copy))?;
        return Ok(copy);
    }
    Err(SetupError::Io {
        path: path.to_owned(),
        source: std::io::Error::new(std::io::ErrorKind::AlreadyExists, "too many copies made in one second"),
    })
}

/// Makes the planned change: a backup first (or a note that Undo deletes a file that did not exist),
/// then the new text, atomically and readable by the user only, and a record in `state_dir`.
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
    let prior = read_record(state_dir, plan.client)?;
    let (backup, backed_up) = match &prior {
        // The file is what Keymux wrote last time: keep pointing Undo at the file from before Keymux.
        Some(r) if r.path == path && r.intact(now_bytes.as_deref()) => (r.backup.clone(), false),
        Some(r) if r.path != path && r.intact(read_limited(&r.path).ok().flatten().as_deref()) => {
            return Err(SetupError::OtherSetup { client: plan.client, other: r.path.clone() });
        }
        _ => match &now_bytes {
            Some(bytes) => (Some(keep_copy(&path, "keymux-backup", bytes, mode_of(&path), now)?), true),
            None => (None, false),
        },
    };
    let record = Record {
        client: plan.client,
        path: path.clone(),
        backup,
        sha256: sha256(plan.text.as_bytes()),
        written_unix: now,
    };
    // The record first: whenever the file holds Keymux's text, Undo knows how to take it back.
    write_record(state_dir, &record)?;
    if let Err(source) = write_atomically_with_mode(&path, plan.text.as_bytes(), Some(PRIVATE)) {
        let _ = match &prior {
            Some(prior) => write_record(state_dir, prior),
            None => std::fs::remove_file(record_path(state_dir, plan.client)).map_err(io(state_dir)),
        };
        return Err(SetupError::Io { path, source });
    }
    Ok(Applied { path, restore: record.restore(), backed_up })
}

/// Takes a setup back: the backup is put back byte for byte (with its permissions), or the file
/// Keymux created is deleted. Refused when the file changed since Keymux wrote it, unless `force`
/// (then the changed file is kept next to it). The backup itself stays.
pub fn undo(client: Client, state_dir: &Path, force: bool) -> Result<Undone, SetupError> {
    let record = read_record(state_dir, client)?.ok_or(SetupError::NothingToUndo { client })?;
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
    let record_file = record_path(state_dir, client);
    std::fs::remove_file(&record_file).map_err(io(&record_file))?;
    Ok(Undone { path, restored: record.restore(), kept })
}

/// The setup of `client` that Undo would take back, if there is one.
pub fn status(client: Client, state_dir: &Path) -> Result<Option<Status>, SetupError> {
    let Some(record) = read_record(state_dir, client)? else { return Ok(None) };
    let now = std::fs::read(&record.path).ok();
    Ok(Some(Status {
        path: record.path.clone(),
        restore: record.restore(),
        applied_unix: record.written_unix,
        edited_since: !record.intact(now.as_deref()),
    }))
}

#[cfg(test)]
mod tests;
