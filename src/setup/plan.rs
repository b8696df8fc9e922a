//! Working out a change to a client's file (the new text and its masked preview) without writing.

use std::path::{Path, PathBuf};

use super::codex_history::{self, Prior};
use super::edited::{Edited, Refusal, Surgical};
use super::files::{read_limited, real_path};
use super::mask::Secrets;
use super::provider_id;
use super::record::read_record;
use super::target::Edit;
use super::{codex, codex_auth, diff, pi, pi_project, Client, SetupError, Target};
use crate::secrets::Secret;

/// The choices a person makes about a setup, the same in the CLI, the tray and the dashboard. They
/// matter for Codex with the pool `all`; the other setups ignore them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Choices {
    /// Codex: the custom-provider form (`model_provider = "keymux"` and its table) instead of the
    /// history-keeping one. Sessions are then recorded under the provider `keymux`, apart from the
    /// ones made before. The only form for a ChatGPT login.
    pub custom_provider: bool,
    /// Codex: point the built-in provider at Keymux even though `openai_base_url` names another URL
    /// (Undo puts that one back).
    pub force: bool,
    /// Codex: hand the API key `auth.json` holds to the caller ([`crate::setup::Preview::key_to_import`])
    /// so it can join Keymux's keys before the client token takes its place. A ChatGPT login there is
    /// handed over the same way, to join as the plan ([`crate::setup::Preview::imports_plan`]).
    pub import_key: bool,
    /// Codex: a login instead of a token (`gateway_oauth`, Codex 0.171 and later), in the custom-provider
    /// form: Codex logs in through Keymux's dashboard, where the person picks the pool, and keeps its
    /// token in its own encrypted store; no token goes into any Codex file.
    pub login: bool,
}

/// A change to a client's file, worked out and not yet made.
pub struct Plan {
    pub(super) client: Client,
    pub(super) edit: Edit,
    pub(super) path: PathBuf,
    pub(super) current: Option<Vec<u8>>,
    pub(super) text: String,
    pub(super) surgical: Option<Surgical>,
    preview: String,
    /// Where the notes begin in `preview`: before it, the diff alone.
    diff_end: usize,
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

    /// The diff alone, the token masked (the preview without its notes).
    pub fn diff(&self) -> &str {
        &self.preview[..self.diff_end]
    }

    /// What else to know: a setting that is replaced, a profile that wins, how to pick the provider
    /// (the preview ends with them too).
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
    plan_edit(Edit::default_for(client), path, base_url, token)
}

/// Where a setup is made and how: the client's file (see [`Target::default_path`]), the gateway, the
/// person's choices, and the record directory (which tells Keymux's own earlier lines apart).
pub(super) struct Places<'a> {
    pub(super) path: &'a Path,
    pub(super) base_url: &'a str,
    pub(super) choices: Choices,
    pub(super) state_dir: Option<&'a Path>,
}

/// Works out every file `target` writes: the client's file, then Codex's `auth.json` (history form)
/// or, for pi with a pool, the project's settings. Reads the files; writes nothing.
pub(super) fn plan_target(target: &Target, places: &Places<'_>, token: &Secret) -> Result<Vec<Plan>, SetupError> {
    let Places { path, base_url, .. } = *places;
    match target {
        Target::Default(Client::Codex) if places.choices.login => {
            Ok(vec![plan_edit(Edit::CodexLogin { pool: None }, path, base_url, token)?])
        }
        Target::CodexPool { pool } if places.choices.login => {
            Ok(vec![plan_edit(Edit::CodexLogin { pool: Some(pool.clone()) }, path, base_url, token)?])
        }
        Target::Default(Client::Codex) if !places.choices.custom_provider => {
            let prior = prior_line(places.state_dir, path);
            let config = plan_edit(Edit::CodexHistory { force: places.choices.force, prior }, path, base_url, token)?;
            let take_login = places.choices.import_key;
            let auth = plan_edit(Edit::CodexAuth { take_login }, &codex_auth_path(path), base_url, token)?;
            Ok(vec![config, auth])
        }
        Target::Default(client) => Ok(vec![plan(*client, path, base_url, token)?]),
        Target::CodexPool { pool } => {
            Ok(vec![plan_edit(Edit::Codex { pool: Some(pool.clone()) }, path, base_url, token)?])
        }
        Target::PiPool { pool, .. } => {
            let models = plan_edit(Edit::PiModels { pool: Some(pool.clone()) }, path, base_url, token)?;
            // The project names a model the provider lists: pi quietly picks another provider's model
            // for one it does not know.
            let model = pi::first_model(&models.text, &target.provider()).ok_or_else(|| SetupError::Unexpected {
                path: path.to_owned(),
                message: format!("the provider {} lists no model with an id", target.provider()),
            })?;
            let settings = target.project_file().unwrap_or_default();
            let project = plan_edit(Edit::PiProject { pool: pool.clone(), model }, &settings, base_url, token)?;
            Ok(vec![models, project])
        }
    }
}

/// Works out one file's change.
fn plan_edit(edit: Edit, path: &Path, base_url: &str, token: &Secret) -> Result<Plan, SetupError> {
    let base_url = base_url.trim_end_matches('/');
    if !(base_url.starts_with("http://") || base_url.starts_with("https://")) || base_url.contains(char::is_whitespace)
    {
        return Err(SetupError::Invalid(format!("the base URL {base_url:?} must be an http:// or https:// URL")));
    }
    check_token(token.expose())?;
    let client = edit.client();
    let format = edit.format();
    let current = read_limited(path)?;
    let old = match &current {
        Some(bytes) => Some(std::str::from_utf8(bytes).map_err(|_| SetupError::Unreadable {
            path: path.to_owned(),
            format,
            message: "it is not UTF-8 text".into(),
        })?),
        None => None,
    };
    // A refusal quotes what the file says (a URL with `?api_key=sk-…`, a parser's excerpt of a line),
    // and the CLI and the dashboard show it: key-shaped words are masked here, as in the preview.
    let masked =
        |message: String| crate::secrets::mask_words(&message, crate::secrets::key_prefixed, super::mask::mask);
    let mut edited = edit_text(&edit, old.unwrap_or(""), base_url, token).map_err(|refusal| match refusal {
        Refusal::Syntax(message) => SetupError::Unreadable { path: path.to_owned(), format, message: masked(message) },
        Refusal::Shape(message) => SetupError::Unexpected { path: path.to_owned(), message: masked(message) },
        Refusal::Conflict(message, remedy) => {
            SetupError::Refused { path: path.to_owned(), message: masked(message), remedy }
        }
    })?;
    if let Edit::Codex { pool: Some(pool) } | Edit::CodexLogin { pool: Some(pool) } = &edit {
        // `codex -p` fails while config.toml still holds a profile of that name the old way.
        let config = read_limited(&path.with_file_name("config.toml")).ok().flatten().unwrap_or_default();
        edited.notes.extend(codex::legacy_profile(&String::from_utf8_lossy(&config), &provider_id(Some(pool))));
    }
    let secrets = Secrets::of(format, old.unwrap_or(""), &edited.text, token.expose());
    let title = path.display().to_string();
    let (preview, diff_end, notes) = if old == Some(edited.text.as_str()) {
        let preview = already(&edit, &title, base_url);
        (preview.clone(), preview.len(), Vec::new())
    } else {
        let notes: Vec<String> = edited.notes.iter().map(|n| secrets.mask(n)).collect();
        let mut preview = diff::unified(&title, old, &edited.text, &|line: &str| secrets.mask(line));
        let diff_end = preview.len();
        for note in &notes {
            preview.push_str(&format!("note: {note}\n"));
        }
        (preview, diff_end, notes)
    };
    let surgical = edited.surgical;
    let path = path.to_owned();
    Ok(Plan { client, edit, path, current, text: edited.text, surgical, preview, diff_end, notes })
}

fn edit_text(edit: &Edit, old: &str, base_url: &str, token: &Secret) -> Result<Edited, Refusal> {
    match edit {
        Edit::Codex { pool } => codex::edit(old, pool.as_deref(), base_url, token.expose()),
        Edit::CodexLogin { pool } => codex::edit_with(old, pool.as_deref(), base_url, codex::Credential::Login),
        Edit::CodexHistory { force, prior } => codex_history::edit(old, base_url, *force, prior),
        Edit::CodexAuth { take_login } => codex_auth::edit(old, token.expose(), *take_login),
        Edit::PiModels { pool } => pi::edit(old, pool.as_deref(), base_url, token.expose()),
        Edit::PiProject { pool, model } => pi_project::edit(old, pool, model),
    }
}

/// Codex's `auth.json`, beside its `config.toml`.
pub(super) fn codex_auth_path(config: &Path) -> PathBuf {
    config.with_file_name("auth.json")
}

/// The `openai_base_url` Keymux wrote into this config last time, as its record says.
fn prior_line(state_dir: Option<&Path>, path: &Path) -> Prior {
    let record = state_dir.and_then(|dir| read_record(dir, Client::Codex.id()).ok().flatten());
    match record {
        Some(r) if r.path == real_path(path) => match r.surgical {
            Some(Surgical::BaseUrl { value, replaced, .. }) => Prior { ours: Some(value), replaced },
            Some(Surgical::AuthKey { .. }) | None => Prior::default(),
        },
        Some(_) | None => Prior::default(),
    }
}

/// What the preview says when the file is set up already.
fn already(edit: &Edit, title: &str, base_url: &str) -> String {
    match edit {
        Edit::CodexAuth { .. } => format!("{title} already holds this client token: nothing to change\n"),
        Edit::Codex { .. } | Edit::CodexHistory { .. } | Edit::PiModels { .. } => format!(
            "{title} already points {} at Keymux ({base_url}) with this token: nothing to change\n",
            edit.client()
        ),
        Edit::CodexLogin { .. } => {
            format!("{title} already points Codex at Keymux ({base_url}) with a login: nothing to change\n")
        }
        Edit::PiProject { pool, .. } => format!("{title} already selects the pool '{pool}': nothing to change\n"),
    }
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
