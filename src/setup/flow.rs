//! A setup as a person goes through it, the same for `keymux setup` and the tray: a preview made with
//! the token the files will hold (a stand-in while a new one is still to be made), the person's yes,
//! the real token made, the plans made again with it, refused if a file changed since the preview, and
//! applied. A file edited while the preview was on screen is never overwritten.

use std::future::Future;
use std::path::{Path, PathBuf};

use super::codex_auth::{self, Held};
use super::files::read_limited;
use super::plan::{codex_auth_path, plan_target, Choices, Places};
use super::{apply, Applied, Client, Plan, SetupError, Target};
use crate::secrets::{self, Secret};

/// A change shown to a person and not made yet: the plans as they were previewed (one per file, the
/// client's file first), with the files' bytes as they were then, and the client token the files will
/// hold if it exists already.
#[derive(Debug)]
pub struct Preview {
    target: Target,
    path: PathBuf,
    shown: Vec<Plan>,
    base_url: String,
    choices: Choices,
    /// `None`: the preview shows a stand-in, and [`Preview::confirm`] makes the real token.
    existing: Option<Secret>,
    /// The API key Codex's `auth.json` holds now, if it holds one, or its ChatGPT login (`found_plan`).
    found: Option<Secret>,
    /// `found` is a ChatGPT login (it joins Keymux's keys as a plan, provider `chatgpt`).
    found_plan: bool,
}

/// Why a setup the person agreed to was not made.
#[derive(Debug, thiserror::Error)]
pub enum ConfirmError<E> {
    /// The client token could not be made; no file was touched.
    #[error("{0}")]
    Token(E),
    /// The setup was refused or failed: among other reasons, a file changed since the preview.
    #[error(transparent)]
    Setup(#[from] SetupError),
}

/// Works out what setting up `target` would change, for a person to look at: `path` is the client's
/// file (see [`Target::default_path`]). `existing` is the client token the files will hold if the
/// client has one already; without it the preview shows a stand-in (masked like any token), and no
/// token is made before the person agrees. Writes nothing. The default choices, with the records in
/// [`super::default_state_dir`]; [`preview_with`] takes the person's.
pub fn preview(
    target: impl Into<Target>,
    path: &Path,
    base_url: &str,
    existing: Option<Secret>,
) -> Result<Preview, SetupError> {
    let state_dir = super::default_state_dir();
    preview_with(target, path, base_url, existing, Choices::default(), state_dir.as_deref())
}

/// [`preview`] with the person's `choices` (see [`Choices`]); `state_dir` is where the setup records
/// are, the same directory [`Preview::confirm`] gets.
pub fn preview_with(
    target: impl Into<Target>,
    path: &Path,
    base_url: &str,
    existing: Option<Secret>,
    choices: Choices,
    state_dir: Option<&Path>,
) -> Result<Preview, SetupError> {
    let target = target.into();
    let places = Places { path, base_url, choices, state_dir };
    let shown = match &existing {
        Some(token) => plan_target(&target, &places, token)?,
        None => plan_target(&target, &places, &secrets::generate(crate::tokens::TOKEN_PREFIX))?,
    };
    let found = match shown.iter().find(|p| p.path == codex_auth_path(path)) {
        Some(auth) if target == Target::Default(Client::Codex) => {
            let text = String::from_utf8_lossy(auth.current().unwrap_or_default());
            match codex_auth::held(&text) {
                Ok((Held::ApiKey, Some(key))) => Some((Secret::new(key), false)),
                Ok((Held::ChatGpt, _)) => keymux_core::provider::chatgpt::from_codex_auth(&text)
                    .ok()
                    .flatten()
                    .map(|login| (login.to_secret(), true)),
                Ok(_) | Err(_) => None,
            }
        }
        Some(_) | None => None,
    };
    let found_plan = found.as_ref().is_some_and(|(_, plan)| *plan);
    let found = found.map(|(secret, _)| secret);
    Ok(Preview {
        target,
        path: path.to_owned(),
        shown,
        base_url: base_url.to_owned(),
        choices,
        existing,
        found,
        found_plan,
    })
}

impl Preview {
    /// The change to each file, the client's own file first: the file, the masked diff and notes.
    pub fn plans(&self) -> &[Plan] {
        &self.shown
    }

    /// Every file's preview, one after the other.
    pub fn text(&self) -> String {
        self.shown.iter().map(Plan::preview).collect()
    }

    /// Whether confirming would change any file (otherwise the setup is made already).
    pub fn changes_anything(&self) -> bool {
        self.shown.iter().any(Plan::changes_anything)
    }

    /// Whether confirming makes a new client token (the preview shows a stand-in for it).
    pub fn makes_token(&self) -> bool {
        self.existing.is_none() && !self.choices.login
    }

    /// With [`Choices::import_key`], the API key Codex's `auth.json` holds, for the caller to add to
    /// Keymux's keys (as `keymux keys add` does) before [`Preview::confirm`] puts the client token in
    /// its place. Never shown or logged.
    pub fn key_to_import(&self) -> Option<&Secret> {
        self.found.as_ref().filter(|_| self.choices.import_key)
    }

    /// Whether Codex's `auth.json` holds an OpenAI API key, which [`Choices::import_key`] would add to
    /// Keymux's keys: for a dialog to offer it.
    pub fn finds_api_key(&self) -> bool {
        self.found.is_some() && !self.found_plan
    }

    /// Whether what [`Preview::key_to_import`] hands over is a ChatGPT login, to join Keymux's keys as
    /// a plan (provider `chatgpt`, as `keymux keys import --chatgpt` adds it) rather than an API key.
    pub fn imports_plan(&self) -> bool {
        self.found_plan
    }

    /// The choices this preview was made with.
    pub fn choices(&self) -> Choices {
        self.choices
    }

    /// What is set up.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Makes the change the person agreed to, file by file (the client's first, so a project never
    /// names a provider that is not there yet); returns what was done to each file that changed.
    /// `make_token` makes the client token; it is called only when the client has none, and only while
    /// every file is still as it was previewed. Refused with [`SetupError::ChangedSincePreview`] when a
    /// file changed since the preview: before the token is made, after, and once more as each file is
    /// written.
    pub async fn confirm<F, Fut, E>(self, state_dir: &Path, make_token: F) -> Result<Vec<Applied>, ConfirmError<E>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Secret, E>>,
    {
        let Preview { target, path, shown, base_url, choices, existing, found: _, found_plan: _ } = self;
        let plans = match existing {
            // The preview was made with the real token, or a login writes none: it is the plan, and
            // `apply` checks each file.
            Some(_) => shown,
            None if choices.login => shown,
            None => {
                for plan in &shown {
                    unchanged(plan, read_limited(&plan.path)?.as_deref())?;
                }
                let token = make_token().await.map_err(ConfirmError::Token)?;
                let places = Places { path: &path, base_url: &base_url, choices, state_dir: Some(state_dir) };
                let plans = plan_target(&target, &places, &token)?;
                for (plan, shown) in plans.iter().zip(&shown) {
                    unchanged(shown, plan.current())?;
                }
                plans
            }
        };
        for plan in &plans {
            unchanged(plan, read_limited(&plan.path)?.as_deref())?;
        }
        let mut applied = Vec::new();
        for plan in plans.iter().filter(|p| p.changes_anything()) {
            applied.push(apply(plan, state_dir)?);
        }
        Ok(applied)
    }
}

/// Refuses when the file's bytes `now` are not the bytes the preview was made from.
fn unchanged(shown: &Plan, now: Option<&[u8]>) -> Result<(), SetupError> {
    if now == shown.current() {
        Ok(())
    } else {
        Err(SetupError::ChangedSincePreview { path: shown.path.clone() })
    }
}
