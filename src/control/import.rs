//! The first-run offer of the dashboard and the tray: the OpenAI API keys this user already has in
//! plaintext (`OPENAI_API_KEY` in the gateway's environment, Codex's `auth.json`, pi's files; found by
//! `keys_import` as `keymux keys import` finds them), shown masked with where each is and whether the
//! pool has it already (by fingerprint), and imported only those the person picks. A key the
//! provider refuses is taken out again and said so; the plaintext copy goes only when asked (a backup
//! kept). The keys are named by their keyed fingerprint, never by their text.

use super::bodies::{FoundKey, ImportDone, ImportOffer, ImportRequest, NotImported};
use super::{ControlError, NewKey};
use crate::gateway::Gateway;
use crate::keys::KeyId;
use crate::keys_import::{Candidate, Found, Origin, Sources};
use crate::pool::HealthState;
use crate::setup::mask;

impl Gateway {
    /// The keys this user has in plaintext, as the gateway's own environment and home show them, and
    /// the ChatGPT login Codex keeps (offered as a plan, ahead of the keys).
    fn found_keys(&self) -> Found {
        let home = dirs::home_dir().unwrap_or_default();
        let sources = Sources::from_vars(std::env::vars(), &home);
        let mut found = sources.find();
        if let Some(plan) = crate::keys_import::chatgpt_login(&sources.codex_auth) {
            found.notes.retain(|n| !n.contains("holds a ChatGPT login"));
            found.candidates.insert(0, plan);
        }
        let labels = self.pool().labels();
        found.label(&labels);
        found
    }

    /// The label of the pooled key with this secret, if the pool has it.
    fn pooled_as(&self, candidate: &Candidate) -> Option<String> {
        let holder = self.pool().holder_of(&self.markers().digest().fingerprint(&candidate.identity()))?;
        Some(self.pool().label(&holder))
    }

    /// What a first-run offer shows: each key found (masked), where it is, and whether it is pooled.
    pub fn import_offer(&self) -> ImportOffer {
        let found = self.found_keys();
        let keys = found
            .candidates
            .iter()
            .map(|c| FoundKey {
                fingerprint: self.markers().digest().fingerprint(&c.identity()),
                masked: c.shown(),
                provider: c.provider(),
                label: c.label.clone(),
                source: c.origin.describe(),
                file: c.origin.file().map(|p| p.display().to_string()),
                pooled_as: self.pooled_as(c),
            })
            .collect();
        ImportOffer { keys, notes: found.notes, refusals: found.refusals }
    }

    /// Imports the keys the person picked (by fingerprint) as `keymux keys add` adds one; with
    /// `remove_plaintext`, each imported key's file loses its copy. A picked key no longer found, or
    /// in the pool already, is said so and changes nothing.
    pub async fn import_keys(&self, request: ImportRequest) -> Result<ImportDone, ControlError> {
        if request.fingerprints.is_empty() {
            return Err(ControlError::Invalid("pick at least one key to import".into()));
        }
        let found = self.found_keys();
        let mut done = ImportDone::default();
        for fingerprint in &request.fingerprints {
            let candidate =
                found.candidates.iter().find(|c| self.markers().digest().fingerprint(&c.identity()) == *fingerprint);
            let Some(candidate) = candidate else {
                done.not_imported.push(NotImported {
                    label: fingerprint.clone(),
                    message: "this key is no longer where it was found; look again".into(),
                });
                continue;
            };
            match self.import_one(candidate).await {
                Ok(label) => {
                    done.imported.push(label);
                    if request.remove_plaintext {
                        done.notes.extend(remove_copy(&candidate.origin, candidate));
                    }
                }
                Err(message) => done.not_imported.push(NotImported { label: candidate.label.clone(), message }),
            }
        }
        Ok(done)
    }

    /// Adds one key; its label in the pool (the one it had, when it was pooled already).
    async fn import_one(&self, candidate: &Candidate) -> Result<String, String> {
        self.import_key(new_key(candidate)).await.map_err(|e| e.to_string())
    }

    /// Adds a key found in plaintext as `keys add` adds one, and says which label holds it: the one it
    /// already had when the pool has it (by fingerprint). A key the provider refuses is taken out again
    /// (an import keeps no dead key) and refused with the fix.
    pub async fn import_key(&self, new: NewKey) -> Result<String, ControlError> {
        let identity = new.provider.get().identity(&new.secret);
        if let Some(holder) = self.pool().holder_of(&self.markers().digest().fingerprint(&identity)) {
            return Ok(self.pool().label(&holder));
        }
        let label = new.label.clone();
        let id: KeyId = self.add_key(new).await?;
        let rejected = self
            .pool()
            .status(self.clock().now(), self.today())
            .into_iter()
            .any(|k| k.id == id && k.health == HealthState::Rejected);
        if rejected {
            self.remove_key(&id).await?;
            return Err(ControlError::Invalid(
                "the provider refused this key, so it was not imported: check it at \
                 https://platform.openai.com/api-keys"
                    .into(),
            ));
        }
        Ok(label)
    }
}

/// The key as it joins the pool: one from a client's own login is marked imported, so a session
/// begun before Keymux is looked for on its organization first; a pasted one is like one added by hand.
pub fn new_key(candidate: &Candidate) -> NewKey {
    let (label, secret) = (candidate.label.clone(), candidate.secret.clone());
    match candidate.origin {
        Origin::Env(_) | Origin::CodexAuth(_) | Origin::PiAuth(..) | Origin::PiModels(..) => {
            NewKey::imported(label, secret)
        }
        Origin::Pasted(..) => NewKey::openai(label, secret),
        Origin::CodexChatgpt(..) => NewKey { provider: candidate.provider(), ..NewKey::imported(label, secret) },
    }
}

/// Takes the plaintext copy out of the file it came from (the environment's is the user's to remove):
/// what happened, for the person.
fn remove_copy(origin: &Origin, candidate: &Candidate) -> Option<String> {
    let masked = mask(candidate.secret.expose());
    match origin {
        Origin::Env(var) => {
            Some(format!("{var} still holds the key ({masked}): delete the line that sets it from your shell profile"))
        }
        Origin::Pasted(..) | Origin::CodexChatgpt(..) => None,
        Origin::CodexAuth(_) | Origin::PiAuth(..) | Origin::PiModels(..) => {
            Some(match crate::keys_import::remove_plaintext(origin, &candidate.secret) {
                Ok(removed) => format!(
                    "removed the key ({masked}) from {} (the file as it was is kept in {})",
                    removed.file(),
                    removed.backup.display()
                ),
                Err(why) => why,
            })
        }
    }
}
