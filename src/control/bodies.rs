//! The bodies of the control API's client setup and key import (`/setup`, `/import`): the words of
//! `control::setup` and `control::import`, which the API carries and `api::types` lists among the
//! dashboard's TypeScript types.

use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::setup::Client;

/// A client's setup as it is now (`GET /setup`): where its file is and whether Keymux set it up.
#[derive(Clone, Debug, Serialize, Deserialize, TS)]
pub struct ClientSetup {
    /// The client.
    pub client: Client,
    /// The file the client reads, where Keymux looks for it (`None`: no home directory).
    pub file: Option<String>,
    /// Keymux set it up and can undo it.
    pub set_up: bool,
    /// The file changed after Keymux wrote it: Undo keeps what changed, or needs `force`.
    pub edited_since: bool,
}

/// The person's answers for a setup (`POST /setup/{client}/preview`): the same choices as
/// `keymux setup`'s flags.
#[derive(Clone, Debug, Default, Serialize, Deserialize, TS)]
#[serde(default, deny_unknown_fields)]
pub struct SetupRequest {
    /// Codex: the custom-provider form (`--custom-provider`), for a ChatGPT login or another
    /// `model_provider`. Codex's sessions are then recorded under the provider `keymux`.
    pub custom_provider: bool,
    /// Codex: replace an `openai_base_url` that names another URL (`--force`; Undo puts it back).
    pub force: bool,
    /// Codex: add the API key `auth.json` holds to Keymux's keys under this label before the client
    /// token takes its place (`--import-key LABEL`).
    pub import_label: Option<String>,
    /// Codex 0.171 and later: a login (`gateway_oauth`) instead of a token in Codex's files
    /// (`--login`); the person picks the pool when Codex logs in.
    pub login: bool,
}

/// One file a setup changes, as the person sees it before saying yes.
#[derive(Clone, Debug, Serialize, Deserialize, TS)]
pub struct SetupFile {
    /// The file.
    pub path: String,
    /// The change, a small diff with any token masked.
    pub diff: String,
    /// What else the person should know about this file.
    pub notes: Vec<String>,
}

/// A setup shown and not made yet (`POST /setup/{client}/preview`): confirm it with its id.
#[derive(Clone, Debug, Serialize, Deserialize, TS)]
pub struct SetupPreview {
    /// Names this preview in the confirmation (valid for 15 minutes, once).
    pub id: String,
    /// The client.
    pub client: Client,
    /// Each file that changes, the client's own first.
    pub files: Vec<SetupFile>,
    /// Confirming would change a file (otherwise the client uses this Keymux already).
    pub changes_anything: bool,
    /// A new client token is made on confirming (the diff shows a stand-in for it).
    pub makes_token: bool,
    /// Codex's `auth.json` holds an OpenAI API key, which `import_label` adds to Keymux's keys.
    pub finds_api_key: bool,
    /// The answers it was made with.
    pub request: SetupRequest,
}

/// What a confirmed setup did (`POST /setup/{client}/confirm/{id}`).
#[derive(Clone, Debug, Serialize, Deserialize, TS)]
pub struct SetupDone {
    /// The client.
    pub client: Client,
    /// Each file written, and what Undo does to it.
    pub files: Vec<SetupFile>,
    /// The key added from `auth.json` (its label), if one was.
    pub imported: Option<String>,
    /// What was done, for a person.
    pub message: String,
}

/// What Undo did (`POST /setup/{client}/undo`).
#[derive(Clone, Debug, Serialize, Deserialize, TS)]
pub struct SetupUndone {
    /// The client.
    pub client: Client,
    /// The file put back.
    pub path: String,
    /// What else a person should know (a table kept for old sessions, `auth.json` put back).
    pub notes: Vec<String>,
}

/// A key found in plaintext on this machine, for the first-run offer (`GET /import`).
#[derive(Clone, Debug, Serialize, Deserialize, TS)]
pub struct FoundKey {
    /// Names the key in the import (the keyed fingerprint, as on the key cards).
    pub fingerprint: String,
    /// The key masked (`sk-…abcd`), or `ChatGPT plan`.
    pub masked: String,
    /// An OpenAI API key, or a ChatGPT plan (the login Codex is signed in with).
    pub provider: crate::keys::ProviderId,
    /// The label it gets.
    pub label: String,
    /// Where it is, in words.
    pub source: String,
    /// The file holding it, which can lose its copy once it is imported (`None`: the environment).
    pub file: Option<String>,
    /// The pool has it already, as this key.
    pub pooled_as: Option<String>,
}

/// The keys found on this machine (`GET /import`).
#[derive(Clone, Debug, Serialize, Deserialize, TS)]
pub struct ImportOffer {
    /// Each key found, in the order the sources were read.
    pub keys: Vec<FoundKey>,
    /// What was passed over and why (a ChatGPT login…).
    pub notes: Vec<String>,
    /// Sources that could not be read, each naming the file and the fix.
    pub refusals: Vec<String>,
}

/// The keys the person picked (`POST /import`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, TS)]
#[serde(deny_unknown_fields)]
pub struct ImportRequest {
    /// The picked keys' fingerprints, from `GET /import`.
    pub fingerprints: Vec<String>,
    /// Take each imported key's plaintext copy out of its file (a backup kept beside it).
    #[serde(default)]
    pub remove_plaintext: bool,
}

/// A picked key that was not imported, and why.
#[derive(Clone, Debug, Serialize, Deserialize, TS)]
pub struct NotImported {
    /// Its label (or its fingerprint when it was no longer found).
    pub label: String,
    /// Why, and what to do.
    pub message: String,
}

/// What an import did (`POST /import`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, TS)]
pub struct ImportDone {
    /// The labels of the keys now in the pool (a key pooled before keeps its label).
    pub imported: Vec<String>,
    /// The keys that were not imported.
    pub not_imported: Vec<NotImported>,
    /// What happened to the plaintext copies.
    pub notes: Vec<String>,
}
