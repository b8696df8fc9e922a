//! The clients Keymux can set up, and where each one's config file and Keymux's records live.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// A client Keymux can set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
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
    pub(super) fn path_in(self, dir: Option<PathBuf>, home: Option<PathBuf>) -> Option<PathBuf> {
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

    pub(super) fn format(self) -> &'static str {
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
