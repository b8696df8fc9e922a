//! Which setup is made, and so which files it writes: the client's own file for the built-in pool
//! `all` (today's setup), or for one pool a Codex profile file, or a pi provider plus one project's
//! settings. Each file gets one [`Edit`], which also names the record that lets Undo take it back.
//!
//! Why these files (both clients verified, Codex CLI 0.171, pi 0.73.1 and pi 1.6): Codex ignores a provider
//! chosen in a project's `.codex/config.toml`, so a pool gets a profile file that `codex -p` layers over
//! `config.toml`; pi merges `<cwd>/.pi/settings.json` over its global settings, so a project selects a
//! provider that lives in the global `models.json` (pi 1.x reads the project's file once the project
//! is trusted).

use std::path::{Path, PathBuf};

use super::codex_history::Prior;
use super::edited::sha256;
use super::files::real_path;
use super::{provider_id, Client, SetupError};
use crate::pools::ALL;

/// A setup Keymux can make and take back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// The client's own file (Codex's `config.toml`, pi's `models.json`) with a token of the pool `all`.
    Default(Client),
    /// A Codex profile file, `$CODEX_HOME/keymux-<pool>.config.toml`, used with `codex -p keymux-<pool>`.
    CodexPool {
        /// The pool, as it is named in Keymux.
        pool: String,
    },
    /// A `keymux-<pool>` provider in pi's `models.json`, chosen for one directory by its
    /// `.pi/settings.json`.
    PiPool {
        /// The pool, as it is named in Keymux.
        pool: String,
        /// The directory pi is started in (absolute).
        project: PathBuf,
    },
}

impl From<Client> for Target {
    fn from(client: Client) -> Self {
        Target::Default(client)
    }
}

/// What Keymux writes into one file of a setup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Edit {
    /// A Codex config (`config.toml`, or a pool's profile file): `model_provider` and its table.
    Codex { pool: Option<String> },
    /// The same with a login (`gateway_oauth`) in place of the token (`Choices::login`).
    CodexLogin { pool: Option<String> },
    /// Codex's `config.toml` in the history-keeping form: the top-level `openai_base_url` line.
    CodexHistory { force: bool, prior: Prior },
    /// Codex's `auth.json`: the client token as its API key. `take_login`: a ChatGPT login there is
    /// replaced too (it joins Keymux's keys as the plan first: `Choices::import_key`).
    CodexAuth { take_login: bool },
    /// pi's `models.json`: the provider.
    PiModels { pool: Option<String> },
    /// A project's `.pi/settings.json`: `defaultProvider` and `defaultModel`.
    PiProject { pool: String, model: String },
}

impl Target {
    /// The setup of `client` for `pool`. `all` is the client's own file; any other pool must be a valid
    /// pool name. `project` is the directory a pi pool is for (required there, refused elsewhere).
    pub fn new(client: Client, pool: &str, project: Option<&Path>) -> Result<Target, SetupError> {
        let invalid = |message: String| Err(SetupError::Invalid(message));
        if pool.eq_ignore_ascii_case(ALL) {
            return match project {
                None => Ok(Target::Default(client)),
                Some(_) => invalid("a project selects a pool for one directory: name the pool with --pool".into()),
            };
        }
        crate::pools::check_name(pool).map_err(SetupError::Invalid)?;
        let pool = pool.to_owned();
        match (client, project) {
            (Client::Codex, None) => Ok(Target::CodexPool { pool }),
            (Client::Codex, Some(_)) => invalid(format!(
                "Codex 0.171 cannot choose a provider per directory, so there is no project to set up: \
                 run `keymux setup codex --pool {pool}`, then `codex -p keymux-{pool}` in that project"
            )),
            (Client::Pi, None) => invalid(format!("name the directory pi should use the pool '{pool}' in")),
            (Client::Pi, Some(dir)) => {
                if !dir.is_dir() {
                    return invalid(format!("the project directory {} does not exist", dir.display()));
                }
                Ok(Target::PiPool { pool, project: real_path(dir) })
            }
        }
    }

    /// The client.
    pub fn client(&self) -> Client {
        match self {
            Target::Default(client) => *client,
            Target::CodexPool { .. } => Client::Codex,
            Target::PiPool { .. } => Client::Pi,
        }
    }

    /// The pool the client's token reaches.
    pub fn pool(&self) -> &str {
        match self {
            Target::Default(_) => ALL,
            Target::CodexPool { pool } | Target::PiPool { pool, .. } => pool,
        }
    }

    /// The provider id the client files name: `keymux`, or `keymux-<pool>`.
    pub fn provider(&self) -> String {
        provider_id(self.pool_name())
    }

    /// The name of the client token the setup uses: `codex`, `pi`, or `codex-<pool>`, `pi-<pool>`.
    pub fn token_name(&self) -> String {
        match self.pool_name() {
            None => self.client().id().to_owned(),
            Some(pool) => format!("{}-{pool}", self.client().id()),
        }
    }

    /// The client's file this setup writes, where the client itself looks now: its own config, or for
    /// Codex with a pool the profile file next to it.
    pub fn default_path(&self) -> Option<PathBuf> {
        let own = self.client().default_path()?;
        Some(match self {
            Target::Default(_) | Target::PiPool { .. } => own,
            Target::CodexPool { pool } => own.with_file_name(format!("{}.config.toml", provider_id(Some(pool)))),
        })
    }

    /// The project's settings file, for pi with a pool.
    pub fn project_file(&self) -> Option<PathBuf> {
        match self {
            Target::PiPool { project, .. } => Some(project.join(".pi").join("settings.json")),
            Target::Default(_) | Target::CodexPool { .. } => None,
        }
    }

    /// The record Undo takes back: the client's file, the profile file, or the project's settings (a pi
    /// pool's provider stays in `models.json` for the other projects that may select it).
    pub(super) fn undo_record(&self) -> String {
        match self {
            Target::Default(client) => client.id().to_owned(),
            Target::CodexPool { pool } => codex_pool_record(pool),
            Target::PiPool { .. } => project_record(&self.project_file().unwrap_or_default()),
        }
    }

    /// How a person takes this setup back.
    pub fn undo_command(&self) -> String {
        let client = self.client().id();
        match self {
            Target::Default(_) => format!("keymux setup {client} --undo"),
            Target::CodexPool { pool } => format!("keymux setup {client} --pool {pool} --undo"),
            Target::PiPool { pool, project } => {
                format!("keymux setup {client} --pool {pool} --project {} --undo", project.display())
            }
        }
    }

    fn pool_name(&self) -> Option<&str> {
        match self {
            Target::Default(_) => None,
            Target::CodexPool { pool } | Target::PiPool { pool, .. } => Some(pool),
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Default(client) => write!(f, "{client}"),
            Target::CodexPool { pool } => write!(f, "Codex for the pool '{pool}'"),
            Target::PiPool { pool, project } => write!(f, "pi for the pool '{pool}' in {}", project.display()),
        }
    }
}

impl Edit {
    /// The edit of the client's own file for the pool `all`.
    pub(super) fn default_for(client: Client) -> Edit {
        match client {
            Client::Codex => Edit::Codex { pool: None },
            Client::Pi => Edit::PiModels { pool: None },
        }
    }

    pub(super) fn client(&self) -> Client {
        match self {
            Edit::Codex { .. } | Edit::CodexLogin { .. } | Edit::CodexHistory { .. } | Edit::CodexAuth { .. } => {
                Client::Codex
            }
            Edit::PiModels { .. } | Edit::PiProject { .. } => Client::Pi,
        }
    }

    /// The file's format, "TOML" or "JSON".
    pub(super) fn format(&self) -> &'static str {
        match self {
            Edit::CodexAuth { .. } => "JSON",
            Edit::Codex { .. }
            | Edit::CodexLogin { .. }
            | Edit::CodexHistory { .. }
            | Edit::PiModels { .. }
            | Edit::PiProject { .. } => self.client().format(),
        }
    }

    /// Whether the file will hold a client token (and so is made readable by the user only).
    pub(super) fn holds_token(&self) -> bool {
        match self {
            Edit::Codex { .. } | Edit::CodexAuth { .. } | Edit::PiModels { .. } => true,
            // URLs only; the file keeps its permissions.
            Edit::CodexLogin { .. } | Edit::CodexHistory { .. } | Edit::PiProject { .. } => false,
        }
    }

    /// How a person takes this change back, for a message that names a setup made earlier.
    pub(super) fn undo_command(&self) -> String {
        match self {
            Edit::Codex { pool: None }
            | Edit::CodexLogin { pool: None }
            | Edit::CodexHistory { .. }
            | Edit::CodexAuth { .. }
            | Edit::PiModels { pool: None } => Target::Default(self.client()).undo_command(),
            Edit::Codex { pool: Some(pool) } | Edit::CodexLogin { pool: Some(pool) } => {
                Target::CodexPool { pool: pool.clone() }.undo_command()
            }
            Edit::PiModels { pool: Some(pool) } | Edit::PiProject { pool, .. } => {
                format!("keymux setup pi --pool {pool} --project DIR --undo")
            }
        }
    }

    /// The name of the record that lets Undo take the change to `path` back; `None`: Undo leaves it
    /// (a pi pool's provider, which other projects may select).
    pub(super) fn record(&self, path: &Path) -> Option<String> {
        match self {
            Edit::Codex { pool: None }
            | Edit::CodexLogin { pool: None }
            | Edit::CodexHistory { .. }
            | Edit::PiModels { pool: None } => Some(self.client().id().to_owned()),
            Edit::CodexAuth { .. } => Some(CODEX_AUTH_RECORD.to_owned()),
            Edit::Codex { pool: Some(pool) } | Edit::CodexLogin { pool: Some(pool) } => Some(codex_pool_record(pool)),
            Edit::PiModels { pool: Some(_) } => None,
            Edit::PiProject { .. } => Some(project_record(path)),
        }
    }
}

/// The record of the client token Keymux put into Codex's `auth.json`.
pub(super) const CODEX_AUTH_RECORD: &str = "codex-auth";

fn codex_pool_record(pool: &str) -> String {
    format!("codex-pool-{}", pool.to_ascii_lowercase())
}

/// One record per project, named by a digest of its settings file's real path (paths hold characters
/// no file name may).
fn project_record(settings: &Path) -> String {
    let digest = sha256(real_path(settings).to_string_lossy().as_bytes());
    format!("pi-project-{}", &digest[..16])
}
