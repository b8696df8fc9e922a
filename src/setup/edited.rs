//! What editing one client file produces, in the words every client module and the plan share: the
//! new text (`Edited`), what Undo takes out again (`Surgical`), or why a file is refused (`Refusal`,
//! with the one choice that makes it possible, `Remedy`). A leaf: it imports no other setup module.

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

/// What a client module makes of a file: the new text, what the user should know about the change,
/// and for a file edited in place what Undo takes out again.
pub(super) struct Edited {
    pub(super) text: String,
    pub(super) notes: Vec<String>,
    pub(super) surgical: Option<Surgical>,
}

impl Edited {
    /// A file Undo puts back whole.
    pub(super) fn whole(text: String, notes: Vec<String>) -> Edited {
        Edited { text, notes, surgical: None }
    }
}

/// What Keymux added to a file it edits in place, so Undo takes out exactly that. Nothing secret: a
/// URL, and a digest of the token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub(super) enum Surgical {
    /// Codex's top-level `openai_base_url = value` (Keymux's own URL). `replaced`: it took the place of
    /// another `openai_base_url`, which Undo reads back from the backup (a URL of the user's may hold a
    /// credential, so it is not kept here). `dropped_provider`: an old-form `model_provider = "keymux"`
    /// line was taken out.
    BaseUrl { value: String, replaced: bool, dropped_provider: bool },
    /// Codex's `auth.json` holds the client token with this SHA-256 as `OPENAI_API_KEY`.
    AuthKey { key_sha256: String },
}

/// Why a client module will not edit a file.
#[derive(Debug)]
pub(super) enum Refusal {
    /// Not valid TOML or JSON.
    Syntax(String),
    /// Valid, but not shaped as the client reads it.
    Shape(String),
    /// Readable, but set up in a way this setup would undo for the user (another base URL, a ChatGPT
    /// login): refused, saying which choice makes it.
    Conflict(String, Remedy),
}

/// The one choice that makes a refused Codex setup possible, for a dialog to offer as a button.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Remedy {
    /// [`super::Choices::custom_provider`]: a ChatGPT login, or another `model_provider` chosen.
    CustomProvider,
    /// [`super::Choices::force`]: `openai_base_url` names another URL.
    Force,
}

pub(super) fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}
