//! Setting Codex and pi up from the dashboard and the tray: the same flow as `keymux setup`
//! (`crate::setup`'s preview, the person's yes, then confirm, refused if a file changed since the
//! preview), with the gateway's own base URL, client token and key pool. The dashboard's preview waits
//! for its yes in the gateway's bounded [`crate::setup::Pending`]; the tray holds its own while its
//! dialog is open. Both set up the client's own file (the pool `all`), where the client looks for it
//! in the gateway's environment (`CODEX_HOME`, `PI_CODING_AGENT_DIR`).

use std::path::PathBuf;

use super::bodies::{ClientSetup, SetupDone, SetupFile, SetupPreview, SetupRequest, SetupUndone};
use super::{ControlError, NewKey};
use crate::gateway::Gateway;
use crate::setup::{self, Applied, Choices, Client, ConfirmError, Offer, Plan, Restore, SetupError};

impl Gateway {
    /// Each client's setup as it is now.
    pub fn setup_status(&self) -> Vec<ClientSetup> {
        let state = setup::default_state_dir();
        Client::ALL
            .into_iter()
            .map(|client| {
                let done = state.as_deref().and_then(|dir| setup::status(client, dir).ok().flatten());
                ClientSetup {
                    client,
                    file: client.default_path().map(|p| p.display().to_string()),
                    set_up: done.is_some(),
                    edited_since: done.is_some_and(|d| d.edited_since),
                }
            })
            .collect()
    }

    /// Works out what setting `client` up in `places` with the person's answers would change; writes
    /// nothing and makes no token (the preview shows a stand-in until the yes).
    pub async fn setup_offer(
        &self,
        client: Client,
        request: &SetupRequest,
        places: &SetupPlaces,
    ) -> Result<Offer, ControlError> {
        let SetupPlaces { file, state } = places;
        if let Some(label) = &request.import_label {
            crate::keys::validate_label(label).map_err(ControlError::Invalid)?;
        }
        let choices = Choices {
            custom_provider: request.custom_provider || request.login,
            force: request.force,
            import_key: request.import_label.is_some(),
            login: request.login,
        };
        let existing = self.token_secret(client.id()).await;
        let preview = setup::preview_with(client, file, &self.base_url(), existing, choices, Some(state))?;
        Ok(Offer { preview, import_label: request.import_label.clone() })
    }

    /// [`Gateway::setup_offer`], held for the dashboard's yes under the id the answer carries.
    pub async fn setup_preview(
        &self,
        pending: &crate::setup::Pending,
        client: Client,
        request: SetupRequest,
    ) -> Result<SetupPreview, ControlError> {
        let offer = self.setup_offer(client, &request, &SetupPlaces::of(client)?).await?;
        let shown = SetupPreview {
            id: String::new(),
            client,
            files: offer.preview.plans().iter().map(shown_file).collect(),
            changes_anything: offer.preview.changes_anything(),
            makes_token: offer.preview.makes_token(),
            finds_api_key: offer.preview.finds_api_key(),
            request,
        };
        if !shown.changes_anything {
            return Ok(shown);
        }
        let id = pending.hold(client, offer, self.clock().now());
        Ok(SetupPreview { id, ..shown })
    }

    /// The dashboard's yes to the preview `id`: makes exactly the change it showed.
    pub async fn setup_confirm(
        &self,
        pending: &crate::setup::Pending,
        client: Client,
        id: &str,
    ) -> Result<SetupDone, ControlError> {
        let offer = pending.take(client, id, self.clock().now()).ok_or_else(|| {
            ControlError::NotFound(format!(
                "there is no {client} setup preview '{id}' waiting (it was confirmed already, or is over 15 minutes \
                 old, or a newer one pushed it out): make a new preview"
            ))
        })?;
        self.setup_apply(client, offer, &SetupPlaces::of(client)?).await
    }

    /// Makes the change `offer` showed, once the person said yes: the key `auth.json` holds joins the
    /// pool first when they chose to import it (so a key that cannot join leaves `auth.json` as it is),
    /// then the client token is made and the files are written, each refused if it changed since.
    pub async fn setup_apply(
        &self,
        client: Client,
        offer: Offer,
        places: &SetupPlaces,
    ) -> Result<SetupDone, ControlError> {
        let state = &places.state;
        let Offer { preview, import_label } = offer;
        let imported = match (import_label, preview.key_to_import()) {
            (Some(label), Some(secret)) => {
                let auth = preview.plans().iter().find(|p| p.path().ends_with("auth.json")).map(|p| p.path());
                let new = NewKey::imported(label, secret.clone());
                let new = match preview.imports_plan() {
                    true => NewKey { provider: crate::provider::chatgpt::ID, ..new },
                    false => new,
                };
                let imported = self.import_key(new).await;
                Some(imported.map_err(|e| refused_key(auth, e))?)
            }
            (Some(_) | None, None) | (None, Some(_)) => None,
        };
        let applied = preview.confirm(state, || self.token_for_client(client.id())).await.map_err(|e| match e {
            ConfirmError::Token(e) => e,
            ConfirmError::Setup(e) => e.into(),
        })?;
        for one in &applied {
            tracing::info!(client = client.id(), file = %one.path.display(), "client set up");
        }
        let message = done_message(client, &applied, imported.as_deref());
        Ok(SetupDone { client, files: applied.iter().map(applied_file).collect(), imported, message })
    }

    /// Takes Keymux's setup of `client` back (see [`crate::setup::undo`]); `force` puts the old file
    /// back even though it changed since, keeping the changed one beside it.
    pub fn setup_undo(&self, client: Client, force: bool) -> Result<SetupUndone, ControlError> {
        let undone = setup::undo(client, &SetupPlaces::of(client)?.state, force)?;
        tracing::info!(client = client.id(), file = %undone.path.display(), "client setup undone");
        Ok(SetupUndone { client, path: undone.path.display().to_string(), notes: undone.notes })
    }

    /// The first label no key has: `base`, else `base-2`, `base-3`… (for a key imported by a dialog that
    /// does not ask for one).
    pub fn free_key_label(&self, base: &str) -> String {
        let labels = self.pool().labels();
        super::free_token_name(base, &labels)
    }
}

/// Where a setup is made: the client's own file and the directory of Keymux's setup records.
#[derive(Clone, Debug)]
pub struct SetupPlaces {
    /// The file the client reads.
    pub file: PathBuf,
    /// Where Keymux keeps the record that makes Undo possible.
    pub state: PathBuf,
}

impl SetupPlaces {
    /// Where the client looks for its file in this process's environment, and the platform data
    /// directory; or why there are none.
    pub fn of(client: Client) -> Result<SetupPlaces, ControlError> {
        let file = client.default_path().ok_or_else(|| {
            ControlError::Invalid(format!(
                "the gateway has no home directory to find {client}'s file in: set HOME (or {}) for it",
                client.dir_variable()
            ))
        })?;
        let state = setup::default_state_dir().ok_or_else(|| {
            ControlError::Invalid("the gateway has no data directory to keep the setup record in".into())
        })?;
        Ok(SetupPlaces { file, state })
    }
}

/// Why the setup stops when the key in `auth.json` cannot join the pool: nothing was written.
fn refused_key(auth: Option<&std::path::Path>, e: ControlError) -> ControlError {
    let file = auth.map_or_else(|| "auth.json".to_owned(), |p| p.display().to_string());
    match e {
        ControlError::Invalid(_) | ControlError::AlreadyPooled(_) => ControlError::Invalid(format!(
            "the API key in {file} could not join Keymux's keys: {e}. Nothing was written; set up without \
             importing it, or fix the key first"
        )),
        other @ (ControlError::NotFound(_)
        | ControlError::Secrets(_)
        | ControlError::Config(_)
        | ControlError::Setup(_)) => other,
    }
}

fn shown_file(plan: &Plan) -> SetupFile {
    SetupFile { path: plan.path().display().to_string(), diff: plan.diff().to_owned(), notes: plan.notes().to_vec() }
}

fn applied_file(applied: &Applied) -> SetupFile {
    let undo = match &applied.restore {
        Some(Restore::Backup(backup)) => format!("Undo puts back the file as it was, kept at {}", backup.display()),
        Some(Restore::Delete) => "Keymux created the file: Undo deletes it".to_owned(),
        Some(Restore::Surgical(what)) => format!("Undo {what}; everything else stays"),
        None => "Undo leaves this change".to_owned(),
    };
    SetupFile { path: applied.path.display().to_string(), diff: String::new(), notes: vec![undo] }
}

fn done_message(client: Client, applied: &[Applied], imported: Option<&str>) -> String {
    let mut text = format!("{client} now goes through Keymux.");
    if let Some(label) = imported {
        text.push_str(&format!(" The API key from auth.json is in Keymux's pool as '{label}'."));
    }
    if client == Client::Codex && applied.iter().any(|a| matches!(a.restore, Some(Restore::Surgical(_)))) {
        text.push_str(" Codex keeps recording sessions under its own provider: `codex resume` lists the ones from before Keymux, and they continue through it.");
    }
    text
}

impl From<SetupError> for ControlError {
    fn from(e: SetupError) -> Self {
        ControlError::Setup(e)
    }
}
