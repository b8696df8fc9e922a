//! A setup as a person goes through it, the same for `keymux setup` and the tray: a preview made with
//! the token the file will hold (a stand-in while a new one is still to be made), the person's yes, the
//! real token made, the plan made again with it, refused if the file changed since the preview, and
//! applied. A file edited while the preview was on screen is never overwritten.

use std::future::Future;
use std::path::Path;

use super::files::read_limited;
use super::{apply, plan, Applied, Client, Plan, SetupError};
use crate::secrets::{self, Secret};

/// A change shown to a person and not made yet: the plan as it was previewed, with the file's bytes as
/// they were then, and the client token the file will hold if it exists already.
#[derive(Debug)]
pub struct Preview {
    shown: Plan,
    base_url: String,
    /// `None`: the preview shows a stand-in, and [`Preview::confirm`] makes the real token.
    existing: Option<Secret>,
}

/// Why a setup the person agreed to was not made.
#[derive(Debug, thiserror::Error)]
pub enum ConfirmError<E> {
    /// The client token could not be made; the file was not touched.
    #[error("{0}")]
    Token(E),
    /// The setup was refused or failed: among other reasons, the file changed since the preview.
    #[error(transparent)]
    Setup(#[from] SetupError),
}

/// Works out what setting `client` up in `path` would change, for a person to look at. `existing` is
/// the client token the file will hold if the client has one already; without it the preview shows a
/// stand-in (masked like any token), and no token is made before the person agrees. Writes nothing.
pub fn preview(client: Client, path: &Path, base_url: &str, existing: Option<Secret>) -> Result<Preview, SetupError> {
    let shown = match &existing {
        Some(token) => plan(client, path, base_url, token)?,
        None => plan(client, path, base_url, &secrets::generate(crate::tokens::TOKEN_PREFIX))?,
    };
    Ok(Preview { shown, base_url: base_url.to_owned(), existing })
}

impl Preview {
    /// The change as it is shown: the file, the masked diff and notes, whether it changes anything.
    pub fn plan(&self) -> &Plan {
        &self.shown
    }

    /// Whether confirming makes a new client token (the preview shows a stand-in for it).
    pub fn makes_token(&self) -> bool {
        self.existing.is_none()
    }

    /// Makes the change the person agreed to. `make_token` makes the client token; it is called only
    /// when the client has none, and only while the file is still as it was previewed. Refused with
    /// [`SetupError::ChangedSincePreview`] when the file changed since the preview: before the token is
    /// made, after, and once more as the file is written.
    pub async fn confirm<F, Fut, E>(self, state_dir: &Path, make_token: F) -> Result<Applied, ConfirmError<E>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Secret, E>>,
    {
        let Preview { shown, base_url, existing } = self;
        let plan = match existing {
            // The preview was made with the real token: it is the plan, and `apply` checks the file.
            Some(_) => shown,
            None => {
                unchanged(&shown, read_limited(&shown.path)?.as_deref())?;
                let token = make_token().await.map_err(ConfirmError::Token)?;
                let plan = plan(shown.client, &shown.path, &base_url, &token)?;
                unchanged(&shown, plan.current())?;
                plan
            }
        };
        Ok(apply(&plan, state_dir)?)
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
